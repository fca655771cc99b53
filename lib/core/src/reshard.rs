//! Load-aware resharding: where to split a hot Kinesis shard, when to merge cold ones, and
//! when to refuse because one key is the problem — as a pure plan over sampled records.
//!
//! A shard takes 1,000 records/s and 1 MiB/s of writes. The load of one record is
//! `max(bytes / 1 MiB, 1 / 1000)` shard-seconds ([`record_load`]), so a shard's load
//! (records sampled over `seconds`, summed, divided by `seconds`) is the share of one shard's
//! capacity it uses; 1.0 is full. [`plan`] turns per-shard samples into decisions:
//!
//! - **Split** a shard whose load is ≥ 80 % at the *weighted median* of its sampled hash keys
//!   (the boundary minimising the larger child), each child carrying ≤ 55 % of the parent;
//!   children still ≥ 80 % are split again, up to [`PlanConfig::max_splits_per_shard`]
//!   levels. A shard whose load sits in a narrow hash range ends up split where its load is,
//!   not at the midpoint of its range.
//! - **Refuse** when one partition key holds ≥ 50 % of a shard's load: no split point can
//!   help, so the plan says "salt it" and lists the key in [`Plan::hot_keys`] for the hot-key
//!   controller. Also refused: a split with no boundary leaving both children ≤ 55 %.
//! - **Merge** two adjacent open shards only when their combined peak (busiest second) has
//!   stayed < 40 % for [`PlanConfig::hold_secs`]; the hold is tracked in [`ReshardState`].
//! - **Cooldown and depth cap**: a shard created less than [`PlanConfig::cooldown_secs`] ago
//!   is neither split nor merged, and one already [`PlanConfig::max_depth`] splits deep is not
//!   split again, so a plan cannot flip-flop. `ListShards` gives no creation time; what it
//!   can say (a shard missing from `AT_TIMESTAMP t` was created after t) gives each young
//!   shard its latest possible creation time ([`CreationProbe`]).
//!
//! Operations name shards by hash range, not id (children get new ids), and are meant to run
//! one at a time ([`Op`]). [`Ledger`] keeps the `UpdateShardCount` budget (10 calls per rolling
//! 24 h, each at most ×2 or ×½).
//!
//! ```
//! use heatsink_core::reshard::{plan, Action, PlanConfig, ReshardState, Sample, ShardSample};
//!
//! // One shard, 1,900 records/s sampled for 1 s, all in the lowest 1/1000 of the hash space.
//! let samples = (0..1_900u128)
//!     .map(|i| Sample { hash_key: i << 100, bytes: 100, at_ms: 0, partition_key: format!("k{i}") })
//!     .collect();
//! let shard = ShardSample::new("shardId-0", 0, u128::MAX, 1.0, samples);
//! let p = plan(&[shard], &ReshardState::default(), &PlanConfig::default(), 0)?;
//! assert_eq!(p.shards[0].action, Action::Split);
//! // The split is at the load median, far below the midpoint of the range.
//! assert!(p.shards[0].split_hash_key.unwrap() < 1u128 << 112);
//! assert!(p.predicted_max_over_mean <= 1.25);
//! # Ok::<(), heatsink_core::reshard::PlanError>(())
//! ```
//!
//! Limits: a plan sees only what was sampled; keys absent from the sample are assumed to be
//! spread like the ones present, and split points sit midway between adjacent sampled keys.

mod created;
mod ledger;
mod plan;
#[cfg(test)]
mod tests;

pub use created::CreationProbe;
pub use ledger::{Ledger, LedgerError, MAX_UPDATE_SHARD_COUNT_CALLS, ROLLING_WINDOW_SECS};
pub use plan::{
    Action, HotKeyReport, Op, Plan, PlanConfig, PlanError, Refusal, ReshardState, Sample,
    ShardPlan, ShardSample, midpoint_max_over_mean, plan, uniform_max_over_mean,
};

/// Bytes one shard takes per second (1 MiB).
pub const SHARD_BYTES_PER_SECOND: f64 = 1_048_576.0;
/// Records one shard takes per second.
pub const SHARD_RECORDS_PER_SECOND: f64 = 1_000.0;

/// The load of one record of `bytes` (data plus partition key), in shard-seconds:
/// `max(bytes / 1 MiB, 1 / 1000)`.
pub fn record_load(bytes: u64) -> f64 {
    (bytes as f64 / SHARD_BYTES_PER_SECOND).max(1.0 / SHARD_RECORDS_PER_SECOND)
}
