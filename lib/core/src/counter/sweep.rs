//! The sweep: which counters a repair run checks *whole*, and below which cutoff, so a like
//! lost where no bucket check looks (a parked batch on a post nobody likes any more, a check
//! carried past the kept buckets) is made up within one sweep cycle.
//!
//! A bucket check ([`super::judge`]) only sees the last `keep` buckets (30 minutes by default)
//! of counters a counted change touched. The sweep visits every counter of the table in slices,
//! one slice per repair run (resumable: the adapter persists where the slice ended), and checks
//! each *quiet* one ([`is_quiet`]: no counted change in a bucket ending within `quiet`) with
//! [`super::judge_whole`] at the cutoff [`sweep_horizon`]: the start of the bucket holding
//! `proven − settle`. On an insert-only events table every event stamped before it was made
//! durable and processed before the check began, so a correction is exact for them, and a
//! counter holding anything at or after the cutoff is left to its bucket checks (`Busy`).
//!
//! ```
//! use heatsink_core::counter::{BucketSpec, WholeRead, WholeVerdict, is_quiet, judge_whole, sweep_horizon};
//! let spec = BucketSpec::new(60_000, 30)?;
//! let (now, proven, settle) = (7_200_000, 7_170_000, 60_000);
//! let cutoff = sweep_horizon(proven, settle, spec);
//! assert_eq!(cutoff, 7_080_000);
//! // Four likes counted, the newest in the bucket of 0:10; quiet for an hour.
//! let read = WholeRead { without_fix: 4, events: 1, writers: 1, newest: Some(600_000) };
//! assert!(is_quiet(read.newest, spec, now, 3_600_000));
//! // Five likes before the cutoff are durable: one was lost (its batch parked).
//! let v = judge_whole(read, 5, read, cutoff, Some(proven), settle, 0)?;
//! assert!(matches!(v, WholeVerdict::Correct(c) if c.fix == 1 && c.change == 1));
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```
//!
//! Limits: insert-only events tables only (a general table needs `heatsink rebuild`); the
//! recount reads every event of the counter, so only quiet counters are swept (a hot counter's
//! drift is the bucket checks' work); a sweep cycle over `M` counters at `P` per run and one
//! run every 5 minutes takes `⌈M / P⌉ × 5` minutes.

use super::BucketSpec;

/// The sweep's cutoff for proven progress `proven_ms` and `settle_ms`: the start of the bucket
/// holding `proven − settle`. Every event stamped before it was processed (insert-only rule),
/// and a bucket start keeps the cutoff comparable with the buckets the counter keeps.
pub fn sweep_horizon(proven_ms: u64, settle_ms: u64, spec: BucketSpec) -> u64 {
    spec.start_of(proven_ms.saturating_sub(settle_ms))
}

/// True when a counter whose newest kept bucket (writers' or fix's) starts at `newest`
/// (`None`: none kept) has been quiet for `quiet_ms` at `now_ms`: the sweep checks it whole.
pub fn is_quiet(newest: Option<u64>, spec: BucketSpec, now_ms: u64, quiet_ms: u64) -> bool {
    newest.is_none_or(|b| spec.end_of(b).saturating_add(quiet_ms) <= now_ms)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const W: u64 = 60_000;

    fn spec() -> BucketSpec {
        BucketSpec::new(W, 30).expect("spec")
    }

    #[test]
    fn quiet_means_no_kept_bucket_ending_within_the_quiet_time() {
        let s = spec();
        assert!(is_quiet(None, s, 0, 3_600_000));
        assert!(is_quiet(Some(0), s, W + 3_600_000, 3_600_000));
        assert!(!is_quiet(Some(0), s, W + 3_599_999, 3_600_000));
    }

    proptest! {
        /// The cutoff is a bucket start no later than `proven − settle`, and within one bucket
        /// of it: every event before it is settled, and the sweep waits at most one bucket more
        /// than the bucket checks do.
        #[test]
        fn the_cutoff_is_the_settled_bucket_start(proven in 0u64..u64::MAX / 2, settle in 0u64..10_000_000) {
            let s = spec();
            let c = sweep_horizon(proven, settle, s);
            let settled = proven.saturating_sub(settle);
            prop_assert_eq!(c % W, 0);
            prop_assert!(c <= settled && settled - c < W);
        }
    }
}
