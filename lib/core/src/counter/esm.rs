//! Sizing the aggregator's event source mapping: shards for the ingest, and the hot key's
//! writes that batching leaves.
//!
//! Every batch that holds a change of a counter costs that counter one write (its writer
//! sub-key). With `shards` shards each carrying `rate / shards` records/s, a batch closes when it
//! has `batch_size` records or has waited `window`, so each shard delivers
//! `max(1 / window, per-shard rate / batch_size)` batches/s, and a hot key whose changes reach
//! every shard takes `shards` times that in writes/s.
//!
//! ```
//! use std::time::Duration;
//! use heatsink_core::counter::{EsmPlanRequest, esm_plan};
//! let plan = esm_plan(&EsmPlanRequest::new(2_400.0, 4, 500, Duration::from_secs(1)));
//! assert_eq!(plan.shards_needed, 3); // 2,400 records/s at 80 % of 1,000 per shard
//! assert!((plan.hot_writes_per_second - 4.8).abs() < 1e-9); // 600/s per shard fills 500 in 0.83 s
//! assert!(plan.hot_writes_per_1000 <= 2.0 + 1e-9);
//! ```

use std::time::Duration;

/// Kinesis: records/s one shard takes.
pub const SHARD_RECORDS_PER_SECOND: f64 = 1_000.0;
/// Kinesis: bytes/s one shard takes.
pub const SHARD_BYTES_PER_SECOND: f64 = 1_048_576.0;
/// Share of a shard's ceiling the plan fills at most.
pub const SHARD_TARGET: f64 = 0.8;

/// What to size.
#[derive(Debug, Clone, PartialEq)]
pub struct EsmPlanRequest {
    /// Changes per second into the stream (the hot key's included).
    pub rate: f64,
    /// Shards the stream has.
    pub shards: u32,
    /// Records per batch.
    pub batch_size: u32,
    /// Batching window.
    pub window: Duration,
    /// Bytes per change record (a like's change record is about 500).
    pub record_bytes: f64,
}

impl EsmPlanRequest {
    /// `rate` changes/s over `shards` shards with batches of `batch_size` or `window`.
    pub fn new(rate: f64, shards: u32, batch_size: u32, window: Duration) -> Self {
        Self {
            rate,
            shards,
            batch_size,
            window,
            record_bytes: 500.0,
        }
    }
}

/// The plan.
#[derive(Debug, Clone, PartialEq)]
pub struct EsmPlan {
    /// Shards the ingest needs at [`SHARD_TARGET`] of a shard's records and bytes ceilings.
    pub shards_needed: u32,
    /// Records/s per shard with the requested shards.
    pub per_shard_rate: f64,
    /// Batches per second per shard.
    pub batches_per_shard_per_second: f64,
    /// Records per batch on average.
    pub records_per_batch: f64,
    /// Writes/s to a hot key whose changes reach every shard.
    pub hot_writes_per_second: f64,
    /// Those writes per 1,000 changes of the hot key, if it carried the whole rate.
    pub hot_writes_per_1000: f64,
}

/// Sizes the mapping; see the module docs for the model.
pub fn esm_plan(req: &EsmPlanRequest) -> EsmPlan {
    let rate = req.rate.max(0.0);
    let by_records = rate / (SHARD_RECORDS_PER_SECOND * SHARD_TARGET);
    let by_bytes = rate * req.record_bytes.max(0.0) / (SHARD_BYTES_PER_SECOND * SHARD_TARGET);
    let shards_needed = by_records
        .max(by_bytes)
        .ceil()
        .clamp(1.0, f64::from(u32::MAX)) as u32;
    let shards = f64::from(req.shards.max(1));
    let per_shard_rate = rate / shards;
    let window = req.window.as_secs_f64().max(1e-3);
    let batch = f64::from(req.batch_size.max(1));
    let batches = if per_shard_rate <= 0.0 {
        0.0
    } else {
        (1.0 / window).max(per_shard_rate / batch)
    };
    let hot = shards * batches;
    EsmPlan {
        shards_needed,
        per_shard_rate,
        batches_per_shard_per_second: batches,
        records_per_batch: if batches > 0.0 {
            per_shard_rate / batches
        } else {
            0.0
        },
        hot_writes_per_second: hot,
        hot_writes_per_1000: if rate > 0.0 { hot * 1000.0 / rate } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_close_on_the_window_below_batch_size_and_on_size_above() {
        let slow = esm_plan(&EsmPlanRequest::new(
            1_000.0,
            4,
            500,
            Duration::from_secs(1),
        ));
        assert!(
            (slow.batches_per_shard_per_second - 1.0).abs() < 1e-9,
            "250/s: the window closes"
        );
        assert!((slow.hot_writes_per_second - 4.0).abs() < 1e-9);
        let fast = esm_plan(&EsmPlanRequest::new(
            10_000.0,
            4,
            500,
            Duration::from_secs(1),
        ));
        assert!(
            (fast.batches_per_shard_per_second - 5.0).abs() < 1e-9,
            "2,500/s: size closes"
        );
        assert_eq!(fast.shards_needed, 13, "10,000 records/s at 800 per shard");
        assert!((fast.hot_writes_per_1000 - 2.0).abs() < 1e-9);
        let idle = esm_plan(&EsmPlanRequest::new(0.0, 4, 500, Duration::from_secs(1)));
        assert_eq!(idle.hot_writes_per_second, 0.0);
    }
}
