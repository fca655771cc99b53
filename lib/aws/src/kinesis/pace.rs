//! Per-shard pacing: a token bucket for records and one for bytes, refilled continuously.
//!
//! A Kinesis shard takes up to 1,000 records and 1 MiB per second of writes; past either it
//! answers `ProvisionedThroughputExceededException` for the entries over. The producer keeps
//! one [`Pacer`] per predicted shard and only puts an entry when both buckets hold enough, so
//! a hot shard's records wait in the producer instead of being refused and retried. Buckets
//! hold at most one second of budget (a burst of 1,000 records or 1 MiB after a quiet spell).

use std::time::{Duration, Instant};

/// The write limits of one shard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardLimits {
    /// Records per second (Kinesis: 1,000).
    pub records_per_second: f64,
    /// Bytes per second, data plus partition key (Kinesis: 1 MiB).
    pub bytes_per_second: f64,
}

impl ShardLimits {
    /// The Kinesis service limits: 1,000 records/s and 1,048,576 bytes/s per shard.
    pub const KINESIS: ShardLimits = ShardLimits {
        records_per_second: 1_000.0,
        bytes_per_second: 1_048_576.0,
    };
}

impl Default for ShardLimits {
    fn default() -> Self {
        Self::KINESIS
    }
}

/// Two token buckets (records, bytes) for one shard.
#[derive(Debug, Clone)]
pub struct Pacer {
    limits: ShardLimits,
    records: f64,
    bytes: f64,
    at: Instant,
}

impl Pacer {
    /// A full bucket pair at `now`.
    pub fn new(limits: ShardLimits, now: Instant) -> Self {
        Self {
            limits,
            records: limits.records_per_second,
            bytes: limits.bytes_per_second,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.records = (self.records + dt * self.limits.records_per_second)
            .min(self.limits.records_per_second);
        self.bytes =
            (self.bytes + dt * self.limits.bytes_per_second).min(self.limits.bytes_per_second);
    }

    /// Take one record of `bytes` if the budget allows it now; `false` leaves the buckets as
    /// they were. A record larger than one second of bytes is let through when the byte bucket
    /// is full, so it is never stuck.
    pub fn try_take(&mut self, now: Instant, bytes: usize) -> bool {
        self.refill(now);
        let b = bytes as f64;
        let full = self.bytes >= self.limits.bytes_per_second;
        if self.records >= 1.0 && (self.bytes >= b || full) {
            self.records -= 1.0;
            self.bytes -= b;
            true
        } else {
            false
        }
    }

    /// The shard refused writes: empty both buckets so it gets a second's rest.
    pub fn throttled(&mut self, now: Instant) {
        self.refill(now);
        self.records = 0.0;
        self.bytes = 0.0;
    }

    /// How long until a record of `bytes` could be taken (zero if now).
    pub fn wait(&self, now: Instant, bytes: usize) -> Duration {
        let mut p = self.clone();
        p.refill(now);
        let need_r = (1.0 - p.records).max(0.0) / self.limits.records_per_second;
        let need_b = (bytes as f64).min(self.limits.bytes_per_second) - p.bytes;
        let need_b = need_b.max(0.0) / self.limits.bytes_per_second;
        Duration::from_secs_f64(need_r.max(need_b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_full_bucket_takes_a_second_of_records_then_waits() {
        let t0 = Instant::now();
        let mut p = Pacer::new(ShardLimits::KINESIS, t0);
        let taken = (0..1_500).filter(|_| p.try_take(t0, 10)).count();
        assert_eq!(taken, 1_000);
        assert!(p.wait(t0, 10) > Duration::ZERO);
        assert!(p.try_take(t0 + Duration::from_millis(2), 10));
    }

    #[test]
    fn bytes_limit_a_shard_as_well_as_records() {
        let t0 = Instant::now();
        let mut p = Pacer::new(ShardLimits::KINESIS, t0);
        let taken = (0..100).filter(|_| p.try_take(t0, 100_000)).count();
        assert_eq!(taken, 10, "10 × 100 kB fit in 1 MiB");
        p.throttled(t0);
        assert!(!p.try_take(t0, 1));
    }

    proptest! {
        /// Over any schedule, what was taken in [0, T] is at most one second's burst plus T
        /// seconds of rate, for records and for bytes.
        #[test]
        fn taken_never_exceeds_the_burst_plus_the_rate(
            steps in proptest::collection::vec((0u64..50, 1usize..200_000), 1..400)
        ) {
            let t0 = Instant::now();
            let mut p = Pacer::new(ShardLimits::KINESIS, t0);
            let (mut now, mut recs, mut bytes) = (t0, 0f64, 0f64);
            for (ms, b) in steps {
                now += Duration::from_millis(ms);
                if p.try_take(now, b) {
                    recs += 1.0;
                    bytes += b as f64;
                }
                let t = now.duration_since(t0).as_secs_f64();
                prop_assert!(recs <= 1_000.0 * (1.0 + t) + 1e-6);
                prop_assert!(bytes <= 1_048_576.0 * (1.0 + t) + 1e-6);
            }
        }
    }
}
