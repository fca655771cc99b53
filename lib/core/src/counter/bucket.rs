//! Time buckets: each writer sub-key also keeps its recent totals per *event-time bucket*, so a
//! closed bucket of a post that never stops being liked can be recounted and compared exactly.
//!
//! A hot post's whole count moves 2,400 times a second, so "did the counter move while I
//! counted?" is always yes. Its likes of the minute 12:03 (by the like's own `liked_at`, stamped
//! before the like is durable) stop arriving a few seconds after 12:04: from then on that bucket
//! is still, and the rebuilder can compare it with a recount of the likes whose `liked_at` falls
//! in it (see [`super::repair`]). Each writer sub-key keeps, next to its absolute `total`, a map
//! `start → (net, events)` of the buckets from [`Buckets::low`] up, where `net` is the sum of the
//! counted deltas and `events` the number of counted records (which also moves when deltas
//! cancel out). A bucket at or above `low` that is absent holds 0; one below `low` is no longer
//! known (its counts stay in `total`).
//!
//! ```
//! use heatsink_core::counter::{BucketSpec, Buckets, Seq};
//! let spec = BucketSpec::new(60_000, 30)?;
//! // Two likes of 12:03:10 and 12:03:50 and one of 12:04:05, counted by one flush.
//! let entries = [(Seq::from(1), Some(43_390_000), 1), (Seq::from(2), Some(43_430_000), 1),
//!                (Seq::from(3), Some(43_445_000), 1)];
//! let after = Buckets::default().advance(None, &entries, spec)?;
//! assert_eq!(after.get(43_380_000), (2, 2));
//! assert_eq!(after.get(43_440_000), (1, 1));
//! // Redelivered: entries at or below the stored seq are not counted again.
//! assert_eq!(after.advance(Some(&Seq::from(3)), &entries, spec)?, after);
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```
//!
//! Limits: a writer sub-key keeps `keep + 1` buckets below and including its newest (30 minutes
//! at the default 60 s × 30), about 40 bytes each; an event older than that, or one without an
//! event time, is counted in `total` only and is invisible to bucket repair.

use std::collections::BTreeMap;

use super::{CounterError, Seq};

/// How events are bucketed: bucket width and how many buckets below the newest a sub-key keeps.
///
/// The aggregator and the rebuilder must use the same width; the width is stored with every
/// writer sub-key (`bw`) and a rebuilder finding another one leaves the counter alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketSpec {
    width_ms: u64,
    keep: u32,
}

impl BucketSpec {
    /// The deployed bucket width: one minute.
    pub const DEFAULT_WIDTH_MS: u64 = 60_000;
    /// Buckets kept below the newest by default (30 minutes at one minute each).
    pub const DEFAULT_KEEP: u32 = 30;

    /// Buckets of `width_ms` (at least 1), keeping `keep` below the newest (at most 1,000, so a
    /// writer item stays far below DynamoDB's 400 KB).
    pub fn new(width_ms: u64, keep: u32) -> Result<Self, CounterError> {
        if width_ms == 0 || keep > 1_000 {
            return Err(CounterError::BadBucketSpec);
        }
        Ok(Self { width_ms, keep })
    }

    /// Bucket width in ms.
    pub fn width_ms(&self) -> u64 {
        self.width_ms
    }

    /// Buckets kept below the newest.
    pub fn keep(&self) -> u32 {
        self.keep
    }

    /// The start (Unix ms) of the bucket holding `event_ms`.
    pub fn start_of(&self, event_ms: u64) -> u64 {
        event_ms - event_ms % self.width_ms
    }

    /// The first ms after the bucket starting at `start`.
    pub fn end_of(&self, start: u64) -> u64 {
        start.saturating_add(self.width_ms)
    }

    /// The lowest bucket start still kept when the newest bucket starts at `newest`.
    pub fn low_for(&self, newest: u64) -> u64 {
        newest.saturating_sub(self.width_ms.saturating_mul(u64::from(self.keep)))
    }
}

impl Default for BucketSpec {
    fn default() -> Self {
        Self {
            width_ms: Self::DEFAULT_WIDTH_MS,
            keep: Self::DEFAULT_KEEP,
        }
    }
}

/// One writer sub-key's (or the `fix` item's) recent per-bucket counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buckets {
    low: u64,
    map: BTreeMap<u64, (i64, u64)>,
}

impl Buckets {
    /// Buckets read back from the store: `low` and `start → (net, events)`.
    pub fn from_parts(low: u64, map: BTreeMap<u64, (i64, u64)>) -> Self {
        let map = map.into_iter().filter(|(s, _)| *s >= low).collect();
        Self { low, map }
    }

    /// The lowest bucket start whose counts are complete here (0: every bucket since the start).
    pub fn low(&self) -> u64 {
        self.low
    }

    /// `(net, events)` of the bucket starting at `start` ((0, 0) when absent).
    pub fn get(&self, start: u64) -> (i64, u64) {
        self.map.get(&start).copied().unwrap_or((0, 0))
    }

    /// True when the bucket starting at `start` is still complete here (`start >= low`).
    pub fn knows(&self, start: u64) -> bool {
        start >= self.low
    }

    /// Every kept bucket, by start.
    pub fn iter(&self) -> impl Iterator<Item = (u64, (i64, u64))> + '_ {
        self.map.iter().map(|(s, v)| (*s, *v))
    }

    /// The newest bucket start kept, if any.
    pub fn newest(&self) -> Option<u64> {
        self.map.keys().next_back().copied()
    }

    /// Adds one counted record's delta to the bucket of `event_ms`. A bucket below `low` is
    /// not known any more: the delta stays in the total only.
    pub fn add(&mut self, spec: BucketSpec, event_ms: u64, delta: i64) -> Result<(), CounterError> {
        let start = spec.start_of(event_ms);
        if start < self.low {
            return Ok(());
        }
        let slot = self.map.entry(start).or_insert((0, 0));
        slot.0 = slot.0.checked_add(delta).ok_or(CounterError::Overflow)?;
        slot.1 = slot.1.checked_add(1).ok_or(CounterError::Overflow)?;
        Ok(())
    }

    /// Sets the bucket starting at `start` to `net` (the `fix` item's absolute per-bucket
    /// correction); returns the previous net. Below `low` nothing is set and `None` returned.
    pub fn set(&mut self, start: u64, net: i64) -> Option<i64> {
        if start < self.low {
            return None;
        }
        let old = self.map.insert(start, (net, 0)).map_or(0, |(n, _)| n);
        Some(old)
    }

    /// Sets the bucket starting at `start` to `net` and records that it was judged when the
    /// writers held `events` changes of it (the `fix` item: a bucket whose events later differ
    /// is judged again); returns the previous net. Below `low` nothing is set, `None` returned.
    pub fn set_judged(&mut self, start: u64, net: i64, events: u64) -> Option<i64> {
        if start < self.low {
            return None;
        }
        let old = self.map.insert(start, (net, events)).map_or(0, |(n, _)| n);
        Some(old)
    }

    /// Forgets buckets more than `spec.keep` below the newest, raising `low`.
    pub fn trim(&mut self, spec: BucketSpec) {
        if let Some(newest) = self.newest() {
            let low = spec.low_for(newest).max(self.low);
            self.low = low;
            self.map.retain(|s, _| *s >= low);
        }
    }

    /// Raises `low` to at least `low` (buckets below are dropped).
    pub fn raise_low(&mut self, low: u64) {
        self.low = self.low.max(low);
        let low = self.low;
        self.map.retain(|s, _| *s >= low);
    }

    /// Sum of the kept buckets' nets.
    pub fn net_sum(&self) -> Result<i64, CounterError> {
        self.map.values().try_fold(0i64, |sum, (n, _)| {
            sum.checked_add(*n).ok_or(CounterError::Overflow)
        })
    }

    /// These buckets after a flush that counts the entries above `floor` (the stored seq the
    /// flush's condition expects): `entries` are `(seq, event ms, delta)` in the batch's order,
    /// exactly those [`super::decide`] counts. The result is trimmed to `spec.keep`.
    pub fn advance(
        &self,
        floor: Option<&Seq>,
        entries: &[(Seq, Option<u64>, i64)],
        spec: BucketSpec,
    ) -> Result<Self, CounterError> {
        let mut next = self.clone();
        for (seq, at, delta) in entries {
            if floor.is_some_and(|f| seq <= f) {
                continue;
            }
            if let Some(at) = at {
                next.add(spec, *at, *delta)?;
            }
        }
        next.trim(spec);
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_bad_spec_is_refused() {
        assert_eq!(BucketSpec::new(0, 3), Err(CounterError::BadBucketSpec));
        assert_eq!(BucketSpec::new(1, 1_001), Err(CounterError::BadBucketSpec));
        let spec = BucketSpec::new(1_000, 2).unwrap();
        assert_eq!(
            (spec.start_of(12_345), spec.end_of(12_000)),
            (12_000, 13_000)
        );
        assert_eq!(spec.low_for(12_000), 10_000);
        assert_eq!(spec.low_for(1_000), 0);
    }

    #[test]
    fn old_buckets_are_forgotten_and_their_events_stay_in_the_total_only() {
        let spec = BucketSpec::new(1_000, 2).unwrap();
        let mut b = Buckets::default();
        for at in [500, 1_500, 2_500, 3_500] {
            b.add(spec, at, 1).unwrap();
        }
        b.trim(spec);
        assert_eq!(b.low(), 1_000);
        assert_eq!(b.get(0), (0, 0));
        assert!(!b.knows(0) && b.knows(1_000));
        assert_eq!(b.net_sum().unwrap(), 3);
        // A late event of a forgotten bucket is not put back.
        b.add(spec, 200, 1).unwrap();
        assert_eq!(b.get(0), (0, 0));
        assert_eq!(b.set(0, 5), None);
        assert_eq!(b.set(2_000, 5), Some(1));
    }

    proptest! {
        /// Whatever the redeliveries, a kept bucket counts each record above the stored seq
        /// exactly once: equal to counting the distinct records by bucket directly.
        #[test]
        fn kept_buckets_count_every_record_once_under_redelivery(
            ats in proptest::collection::vec(0u64..20_000, 1..60),
            cuts in proptest::collection::vec((0usize..60, 0usize..60), 1..8),
        ) {
            let spec = BucketSpec::new(1_000, 5).unwrap();
            let entries: Vec<(Seq, Option<u64>, i64)> = ats.iter().enumerate()
                .map(|(i, at)| (Seq::from(i as u64 + 1), Some(*at), 1)).collect();
            let mut stored: Option<Seq> = None;
            let mut buckets = Buckets::default();
            // Batches are prefixes of the shard's records replayed from anywhere up to there.
            let mut delivered = 0usize;
            for (from, len) in cuts {
                let start = from.min(delivered);
                let end = (start + len + 1).min(entries.len()).max(delivered.min(entries.len()));
                let batch = &entries[start..end];
                buckets = buckets.advance(stored.as_ref(), batch, spec).unwrap();
                if let Some((seq, _, _)) = batch.last()
                    && stored.as_ref().is_none_or(|s| seq > s) {
                    stored = Some(seq.clone());
                }
                delivered = delivered.max(end);
            }
            let mut direct = Buckets::default();
            for (_, at, d) in &entries[..delivered] {
                direct.add(spec, at.unwrap(), *d).unwrap();
                direct.trim(spec);
            }
            // Equal on every bucket both still know.
            let low = buckets.low().max(direct.low());
            for start in (0..21_000).step_by(1_000).filter(|s| *s >= low) {
                prop_assert_eq!(buckets.get(start), direct.get(start), "bucket {}", start);
            }
        }
    }
}
