//! Key strategies: split a hot key into sub-keys, decide where each write and read goes, and
//! size the split so no shard melts (see docs/write-sharding.md).
//!
//! A salted key splits one hot logical key `k` into S sub-keys `k#0 … k#S-1`. Each write goes to
//! one of them (random, round-robin, or one per writer); a read fans out to all S and merges. A
//! calculated suffix instead derives the sub-key from an attribute of the item, so a reader of
//! one item goes to one sub-key; a GSI shard applies the same to a hot index key. On Kinesis
//! the partition-key hash is known (MD5), so sub-keys can be placed on distinct shards, and the
//! planner (the shard-load sizing rule) picks S so every shard, counting its other traffic, stays
//! at or under 80% of its ceiling.
//!
//! ```
//! use heatsink_core::keys::{plan, PlanRequest, SaltChoice, SaltPolicy, FixedSaltPolicy};
//!
//! // p9 takes 2,400 likes/s; four shards of 1,000/s already carry 200, 200, 150 and 200.
//! let p = plan(&PlanRequest::new(2_400.0, 1_000.0, vec![200.0, 200.0, 150.0, 200.0]))?;
//! assert_eq!(p.salts, 4);
//! assert_eq!(p.max_utilisation, 0.8);
//!
//! // Salt the counter: writers move to the 4 sub-keys at once; until the plain key is drained,
//! // readers read it too.
//! let mut policy = FixedSaltPolicy::new();
//! policy.change_salts("likes:p9", p.salts)?;
//! assert_eq!(policy.read_set("likes:p9")?,
//!            ["likes:p9#0", "likes:p9#1", "likes:p9#2", "likes:p9#3", "likes:p9"]);
//! let key = heatsink_core::keys::SaltedKey::new("likes:p9", policy.salts("likes:p9"))?;
//! assert_eq!(key.write_key(SaltChoice::Random(6)), "likes:p9#2");
//! # Ok::<(), heatsink_core::keys::KeyError>(())
//! ```
//!
//! # Guarantees and limits
//! - Naming: sub-key `i` is `k#i` (separator `#`, decimal, no padding) for S ≥ 2; with S = 1 the
//!   sub-key is `k` itself, so keys that never got hot are stored unchanged. A logical key may
//!   contain `#` but may not end in `#<digits>` ([`KeyError::AmbiguousKey`]): that is what makes
//!   [`parse_sub_key`] an exact inverse.
//! - S is `1..=`[`MAX_SALTS`] (256). Every sub-key, suffix included, fits DynamoDB's 2,048-byte
//!   partition-key limit; every placed Kinesis partition key fits 256 characters.
//! - During a change of S, every sub-key that may hold data is in the read set
//!   ([`SaltState`]); writers only ever touch the current set.
//! - [`stable_hash64`] (first 8 bytes of MD5, big-endian) is fixed forever; suffixes of
//!   1,000,000 sequential ids pass a chi-square test at 99.9% for S = 16 and S = 100.
//! - A [`CalculatedSuffix`] (and so a [`GsiShard`]) assumes a fixed S: changing it moves items,
//!   which needs a backfill; the [`SaltState`] transition covers fan-out readers only.
//! - [`place_salts`] tries at most 64·S salts; [`explicit_hash_keys`] always lands S ≤ n
//!   sub-keys on distinct shards.
//! - [`plan`] returns the smallest allowed S whose best placement keeps every shard at or under
//!   target × ceiling (relative tolerance 10⁻⁹), or a typed error saying why none exists.
//! - Pure: no I/O, no clock, no randomness of its own; nothing here panics on any input.
//!
//! # What is where
//! - `salt`: [`SaltedKey`], [`SaltChoice`], [`RoundRobin`], [`parse_sub_key`]: naming and
//!   choosing sub-keys.
//! - `policy`: [`SaltState`] (the change-of-S state machine), [`SaltPolicy`],
//!   [`FixedSaltPolicy`]: what writers write and readers read.
//! - `hash`: [`stable_hash64`], [`CalculatedSuffix`]; `gsi`: [`GsiShard`].
//! - `kinesis`: [`kinesis_hash_key`], [`ShardRange`], [`shard_for`], [`validate_shards`].
//! - `placement`: [`place_salts`], [`explicit_hash_keys`] and their per-shard-count variants.
//! - `plan`: [`plan`], [`evaluate`], [`PlanRequest`], [`Plan`] (the shard-load sizing rule).
//! - `error`: [`KeyError`], the one error type of this module.

mod error;
mod gsi;
mod hash;
mod kinesis;
mod placement;
mod plan;
mod policy;
mod salt;

pub use error::KeyError;
pub use gsi::GsiShard;
pub use hash::{CalculatedSuffix, stable_hash64};
pub use kinesis::{ShardRange, kinesis_hash_key, parse_hash_key, shard_for, validate_shards};
pub use placement::{
    ExplicitHashKey, PlacedSubKey, Placement, even_counts, explicit_hash_keys,
    explicit_hash_keys_with_counts, place_salts, place_salts_with_counts,
};
pub use plan::{DEFAULT_TARGET, Plan, PlanRequest, ShardLoad, evaluate, plan};
pub use policy::{FixedSaltPolicy, SaltPolicy, SaltState};
pub use salt::{RoundRobin, SaltChoice, SaltedKey, parse_sub_key};

/// The separator between a logical key and its salt: sub-key `i` of `k` is `k#i`.
pub const SEPARATOR: char = '#';

/// The largest salt count S (and GSI shard count N) heatsink accepts: 256.
///
/// A salted read fans out to all S sub-keys, so S bounds read cost: 256 is 3 `BatchGetItem`
/// calls (100 keys each) or 256 parallel queries. It is 4× the largest S common designs use
/// (10 to 64). It also buys all the write capacity a default account can use: 256 DynamoDB
/// partitions × 1,000 WCU is over 6× the default 40,000 WCU per-table quota, and on Kinesis a
/// sub-key beyond one per shard adds nothing (default quota: 200 to 500 shards per region).
/// Past that, pre-aggregate (docs/counters.md). Three salt digits also keep the suffix to 4 bytes.
pub const MAX_SALTS: u16 = 256;

/// DynamoDB's limit on a partition-key value, in UTF-8 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2_048;

/// Kinesis's limit on a partition key, in Unicode characters.
pub const MAX_KINESIS_PARTITION_KEY_CHARS: usize = 256;

/// [`place_salts`] tries at most this many candidate salts per sub-key (64·S in all).
pub const PLACEMENT_SEARCH_FACTOR: u32 = 64;
