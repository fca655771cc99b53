//! The one error type of the `keys` area: every way a key, a salt count, a shard map or a plan
//! request can be refused. Variants are named for what the caller can do about them.

use thiserror::Error;

/// Why a key strategy refused its input; nothing in `keys` panics instead.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The logical key is the empty string; DynamoDB and Kinesis both reject empty keys.
    #[error("the key is empty; give every item a non-empty logical key")]
    EmptyKey,

    /// The longest sub-key (logical key plus `#` and the largest salt) is over DynamoDB's limit.
    #[error(
        "sub-key `{sub_key_prefix}…` would be {bytes} bytes, over DynamoDB's {max}-byte \
         partition-key limit; shorten the key or use fewer salts"
    )]
    KeyTooLong {
        /// The first 32 characters of the offending key, for the log line.
        sub_key_prefix: String,
        /// The byte length the longest sub-key would have.
        bytes: usize,
        /// The limit (2,048 bytes).
        max: usize,
    },

    /// The longest salted partition key is over Kinesis's limit of 256 Unicode characters.
    #[error(
        "partition key `{key_prefix}…` would be {chars} characters with its salt, over \
         Kinesis's {max}-character limit; shorten the key or use fewer salts"
    )]
    PartitionKeyTooLong {
        /// The first 32 characters of the offending key.
        key_prefix: String,
        /// The character count the longest salted partition key would have.
        chars: usize,
        /// The limit (256 characters).
        max: usize,
    },

    /// The key ends in `#<digits>`, so it could not be told apart from a salted sub-key.
    #[error(
        "key `{key}` ends in `#<digits>`, which reads as a salted sub-key; use another \
         separator before the trailing number (e.g. `{key_hint}`)"
    )]
    AmbiguousKey {
        /// The offending key.
        key: String,
        /// The same key with its last `#` replaced by `-`, a suggestion only.
        key_hint: String,
    },

    /// A salt count (S, or a GSI shard count N) of zero.
    #[error("a salt count of 0 has no sub-keys; use 1 for an unsalted key")]
    ZeroSalts,

    /// A salt count above [`MAX_SALTS`](crate::keys::MAX_SALTS).
    #[error("{salts} salts is over the maximum of {max}; add capacity another way (pre-aggregate)")]
    TooManySalts {
        /// The requested count.
        salts: u32,
        /// The maximum ([`MAX_SALTS`](crate::keys::MAX_SALTS)).
        max: u16,
    },

    /// A salt number that is not below the key's salt count S.
    #[error("salt {salt} does not exist for a key with {salts} salts (valid: 0..{salts})")]
    SaltOutOfRange {
        /// The requested salt.
        salt: u16,
        /// The key's salt count S.
        salts: u16,
    },

    /// A change of S was requested while an earlier change is still draining.
    #[error(
        "the key is still draining {draining} salts into {current}; finish that drain before \
         changing S to {requested}"
    )]
    TransitionInProgress {
        /// The current (write) salt count.
        current: u16,
        /// The old salt count still being drained.
        draining: u16,
        /// The salt count that was asked for.
        requested: u16,
    },

    /// A drain was marked complete while a sub-key only the old set has still holds data.
    #[error("sub-key `{sub_key}` still holds data; empty it before marking the drain complete")]
    DrainNotEmpty {
        /// The first old-only sub-key found non-empty.
        sub_key: String,
    },

    /// A shard map with no shards.
    #[error("the shard map is empty; pass the stream's open shards")]
    NoShards,

    /// A shard whose starting hash key is above its ending hash key.
    #[error("shard {shard_id} starts after it ends")]
    ShardRangeInverted {
        /// The offending shard.
        shard_id: String,
    },

    /// Two shards are out of order by starting hash key.
    #[error(
        "shard {shard_id} starts before the shard listed ahead of it; sort by starting hash key"
    )]
    ShardRangesUnsorted {
        /// The first shard found out of order.
        shard_id: String,
    },

    /// Two shards claim some of the same hash keys (a parent listed with its children?).
    #[error(
        "shards {first} and {second} overlap; pass only open shards (no parents of a split or \
         merge)"
    )]
    ShardRangesOverlap {
        /// The earlier shard.
        first: String,
        /// The later shard.
        second: String,
    },

    /// Some hash keys belong to no shard.
    #[error("no shard covers hash keys {from}..={to}; the shard list is incomplete")]
    ShardRangesGap {
        /// The first uncovered hash key.
        from: u128,
        /// The last uncovered hash key.
        to: u128,
    },

    /// A hash key given as text is not a decimal integer in 0..=2^128-1.
    #[error("`{value}` is not a hash key (a decimal integer in 0..=2^128-1)")]
    BadHashKey {
        /// The offending text.
        value: String,
    },

    /// Per-shard sub-key counts were given for a different number of shards than the map has.
    #[error("{counts} per-shard counts given for {shards} shards")]
    CountsMismatch {
        /// Length of the counts slice.
        counts: usize,
        /// Number of shards.
        shards: usize,
    },

    /// A planner input that is not a finite number in its allowed range.
    #[error("plan input `{field}` = {value} is invalid: {expected}")]
    InvalidPlanInput {
        /// The input's name.
        field: &'static str,
        /// The value given.
        value: f64,
        /// What was expected, in words.
        expected: &'static str,
    },

    /// One shard's background load alone is over the target; no salting can fix that shard.
    #[error(
        "shard {shard} carries {background}/s before the hot key, over its target of {limit}/s; \
         relieve that shard first (split it or move its other keys)"
    )]
    ShardOverTarget {
        /// Index of the shard.
        shard: usize,
        /// Its background load (records/s).
        background: f64,
        /// target × ceiling (records/s).
        limit: f64,
    },

    /// The hot key plus every shard's background exceeds the shards' total target capacity.
    #[error(
        "demand {demand}/s exceeds the shards' target capacity {capacity}/s; add shards or \
         reduce the rate (pre-aggregate)"
    )]
    OverCapacity {
        /// Hot-key rate plus the sum of background loads (records/s).
        demand: f64,
        /// Shard count × target × ceiling (records/s).
        capacity: f64,
    },

    /// Capacity suffices in total, but no allowed S up to the maximum keeps every shard on target.
    #[error(
        "no salt count from {min_salts} to {max_salts} keeps every shard at or under target \
         (best reached {best_utilisation}); add shards or relax min_salts/multiple_of_shards"
    )]
    NoPlanWithinMaxSalts {
        /// The smallest S that was tried.
        min_salts: u16,
        /// The largest S that was tried.
        max_salts: u16,
        /// The lowest maximum utilisation any tried S reached.
        best_utilisation: f64,
    },
}
