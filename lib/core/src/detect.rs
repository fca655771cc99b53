//! Hot-key detection: which key is melting which partition, from a 1-in-N sample.
//!
//! A hot key is one key whose demand is more than its partition (or shard) has left. Per-partition
//! utilisation tells you *where*; this module tells you *which key*, and whether it is hot for reads
//! or for writes (they need different fixes: cache for reads, salting for writes). A router samples
//! 1 request in `N` and feeds the sampled key into a bounded top-K sketch per partition, kind and
//! sub-window; a [`Detector::report`] names every key whose estimated rate is over
//! `threshold × ceiling` of its partition.
//!
//! ```
//! use std::time::Duration;
//! use heatsink_core::detect::{Access, Ceilings, Detector, DetectorConfig, Kind};
//!
//! // 1 in 100 requests sampled, a 5 s window: the celebrity post p9 on shard S2.
//! let mut detector = Detector::new(DetectorConfig::default())?;
//! for i in 0..127u64 {
//!     let key = if i < 118 { "p9" } else { "p1" };
//!     let now = Duration::from_millis(i * 39);
//!     detector.record(Access::write("S2", key), now)?; // already sampled by the router
//! }
//! let report = detector.report(Duration::from_secs(5), &Ceilings::dynamodb());
//! let p9 = &report.hot[0];
//! assert_eq!((p9.key.as_str(), p9.kind), ("p9", Kind::Write));
//! assert_eq!(p9.estimate, 2_360.0); // 118 × 100 / 5 s, WCU/s
//! assert!(p9.share_of_ceiling > 2.3); // 236 % of the 1,000 WCU/s partition ceiling
//! # Ok::<(), heatsink_core::detect::DetectError>(())
//! ```
//!
//! # Guarantees and limits
//!
//! Counting uses Space-Saving ([`SpaceSaving`]) with `m` = [`DetectorConfig::capacity`] counters
//! per sub-window and kind. With `n` sampled units in the window:
//! - every key's `estimate` is at least its true sampled rate and at most `error_bound` above it,
//!   and `error_bound ≤ n / m` sampled units (scaled by `N / span` like the estimate): the
//!   sub-windows are merged without pruning, so their errors add up (`Σ nᵢ / m = n / m`);
//! - every key whose sampled count is over `n / m` is listed ([`PartitionLoad::floor_rate`] is the
//!   most an unlisted key can have);
//! - a key is reported hot on its `estimate`, so no key whose sampled rate is over both the line
//!   and `floor_rate` is missed; [`HotKey::certain`] says whether even its `lower_bound` is over
//!   the line. A controller that wants no false positives acts on `certain` keys only;
//! - the bounds cover the sketch, not the sampling: a key with `c` sampled hits has a relative
//!   sampling error of about `1 / √c` (118 sampled writes ≈ ±9 %);
//! - a report at `now` covers the last `W` complete sub-windows and the current partial one
//!   (between `window` and `window + window / W`; less right after the first sample), and rates
//!   divide by exactly the time covered;
//! - memory is bounded regardless of key cardinality: at most [`DetectorConfig::max_partitions`]
//!   × `(W + 1)` × 2 sketches of `m` keys of at most [`DetectorConfig::max_key_bytes`] bytes
//!   ([`Detector::max_footprint_bytes`]); longer keys are rejected with
//!   [`DetectError::KeyTooLong`], never truncated (truncation would merge distinct keys);
//! - time is an argument (`now` since any fixed origin), never read: the same calls give the same
//!   report. Events older than the window are ignored ([`Offered::TooOld`]).
//!
//! # Why not the `heavykeeper` crate
//!
//! `heavykeeper` 0.7 is fast and accurate on skewed streams, has seeded construction and a
//! `merge`, and we benchmark it side by side (`benches/detect_guard.rs`). It does not fit here:
//! - it gives a count but no error bound: HeavyKeeper's decay under-counts and 64-bit fingerprint
//!   collisions can over-count, with only probabilistic guarantees, so a report could fill neither
//!   `lower_bound` nor `error_bound`, nor promise that every key above `n / m` is present;
//! - its `merge` keeps one side's bucket when fingerprints differ and drops the other's count,
//!   with no stated bound, while our sliding window is a merge of sub-windows;
//! - every instance carries a fixed 8 KiB decay table (1,024 × `u64`) besides its buckets, so
//!   `partitions × (W + 1) × 2` instances cost 8 KiB each before counting anything;
//! - it would add `ahash` and `fastrand` to a crate whose decisions must be explainable.
//!
//! Space-Saving gives the deterministic bracket the report needs for about the same memory. In
//! `benches/detect_guard.rs` (Zipf(1.1), 10 M requests over 1 M keys, 1 % sampled, 64 KiB each)
//! both return the true top 10 with the same 1.3 % mean count error; `heavykeeper`'s `add` was
//! 10–40 % faster than our `observe` (≈ 120–130 ns against 140–195 ns on a busy 2-core
//! machine), which at a 1 % sample is under 2 ns per request for either.

mod heap_map;
mod space_saving;
mod window;

pub(crate) use heap_map::{HeapMap, allocation_bytes};
pub use space_saving::{Counter, Estimate, Merged, SpaceSaving, merge};

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

use window::Window;

/// Errors of detection, named for what the caller can do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// A configuration value is out of range; fix the configuration.
    #[error("invalid detector configuration: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// The key is longer than the configured maximum; it is not counted.
    #[error("key of {len} bytes is longer than the maximum of {max}")]
    KeyTooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum accepted.
        max: usize,
    },
    /// The partition id is longer than the configured maximum; it is not counted.
    #[error("partition id of {len} bytes is longer than the maximum of {max}")]
    PartitionIdTooLong {
        /// Its length in bytes.
        len: usize,
        /// The maximum accepted.
        max: usize,
    },
    /// Every partition slot holds live data; raise `max_partitions` or wait for one to expire.
    #[error("already tracking the maximum of {max} partitions with live data")]
    TooManyPartitions {
        /// The configured maximum.
        max: usize,
    },
}

/// Whether a request reads or writes (they need different fixes, so they are counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A read (RCU on DynamoDB).
    Read,
    /// A write (WCU on DynamoDB, a record on Kinesis).
    Write,
}

/// One request to count: which partition, which key, read or write, and its cost in units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    /// Partition or shard id, as the caller names it (e.g. `shardId-000000000002`).
    pub partition: &'a str,
    /// The partition key.
    pub key: &'a str,
    /// Read or write.
    pub kind: Kind,
    /// Capacity units this request costs (1 for a 1 KB write or a 4 KB strong read).
    pub units: u32,
}

impl<'a> Access<'a> {
    /// A one-unit read of `key` on `partition`.
    pub fn read(partition: &'a str, key: &'a str) -> Self {
        Self {
            partition,
            key,
            kind: Kind::Read,
            units: 1,
        }
    }

    /// A one-unit write of `key` on `partition`.
    pub fn write(partition: &'a str, key: &'a str) -> Self {
        Self {
            partition,
            key,
            kind: Kind::Write,
            units: 1,
        }
    }

    /// The same access costing `units` capacity units.
    pub fn with_units(self, units: u32) -> Self {
        Self { units, ..self }
    }
}

/// What [`Detector::offer`] and [`Detector::record`] did with an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// Counted in the current sub-window.
    Recorded,
    /// Not in the 1-in-N sample; nothing changed.
    NotSampled,
    /// Its time is before the window kept; nothing changed.
    TooOld,
}

/// Detector settings; every knob has its unit in its name or doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectorConfig {
    /// `N`: one request in `N` is sampled (1 = every request). Default 100.
    pub sample_one_in: u32,
    /// `m`: counters per sketch (one sketch per partition, kind and sub-window). Default 64.
    pub capacity: usize,
    /// Length of the sliding window. Default 5 s.
    pub window: Duration,
    /// `W`: sub-windows the window is cut into (1..=1,024); it slides by `window / W`. Default 5.
    pub sub_windows: u32,
    /// Longest key accepted, in bytes. Default 256 (Kinesis partition keys are ≤ 256 characters).
    pub max_key_bytes: usize,
    /// Most partitions tracked at once; an expired one is reused. Default 1,024.
    pub max_partitions: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            sample_one_in: 100,
            capacity: 64,
            window: Duration::from_secs(5),
            sub_windows: 5,
            max_key_bytes: 256,
            max_partitions: 1024,
        }
    }
}

/// Partition ceilings (units per second) and the share of a ceiling above which a key is hot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceilings {
    read: Option<f64>,
    write: Option<f64>,
    threshold: f64,
}

impl Ceilings {
    /// DynamoDB's read ceiling of one partition, RCU/s.
    pub const DYNAMODB_READ: f64 = 3_000.0;
    /// DynamoDB's write ceiling of one partition, WCU/s.
    pub const DYNAMODB_WRITE: f64 = 1_000.0;
    /// Kinesis's write ceiling of one shard, records/s.
    pub const KINESIS_WRITE: f64 = 1_000.0;
    /// Default threshold: a key above 10 % of its partition's ceiling is reported.
    pub const DEFAULT_THRESHOLD: f64 = 0.1;

    /// Ceilings per kind (`None`: never report that kind) and a threshold in `(0, ∞)`.
    pub fn new(read: Option<f64>, write: Option<f64>, threshold: f64) -> Result<Self, DetectError> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !read.is_none_or(positive) || !write.is_none_or(positive) {
            return Err(DetectError::InvalidConfig {
                field: "ceiling",
                reason: "must be a positive, finite number of units per second",
            });
        }
        if !positive(threshold) {
            return Err(DetectError::InvalidConfig {
                field: "threshold",
                reason: "must be a positive, finite share of the ceiling",
            });
        }
        Ok(Self {
            read,
            write,
            threshold,
        })
    }

    /// DynamoDB: 3,000 RCU/s and 1,000 WCU/s per partition, threshold 10 %.
    pub fn dynamodb() -> Self {
        Self {
            read: Some(Self::DYNAMODB_READ),
            write: Some(Self::DYNAMODB_WRITE),
            threshold: Self::DEFAULT_THRESHOLD,
        }
    }

    /// Kinesis: 1,000 records/s written per shard (reads are per shard, not per key), 10 %.
    pub fn kinesis() -> Self {
        Self {
            read: None,
            write: Some(Self::KINESIS_WRITE),
            threshold: Self::DEFAULT_THRESHOLD,
        }
    }

    /// The same ceilings with another threshold (a share of the ceiling in `(0, ∞)`).
    pub fn with_threshold(self, threshold: f64) -> Result<Self, DetectError> {
        Self::new(self.read, self.write, threshold)
    }

    /// The ceiling of `kind`, units per second, if that kind is reported.
    pub fn ceiling(&self, kind: Kind) -> Option<f64> {
        match kind {
            Kind::Read => self.read,
            Kind::Write => self.write,
        }
    }

    /// The share of a ceiling above which a key is hot.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }
}

/// The load of one partition and kind over the window, from the sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionLoad {
    /// Partition id.
    pub partition: String,
    /// Read or write.
    pub kind: Kind,
    /// Estimated units per second (sampled units × N / span; exact for the sample).
    pub rate: f64,
    /// `rate / ceiling`.
    pub share_of_ceiling: f64,
    /// Most units per second any key *not* listed can have (Σ sub-window floors × N / span).
    pub floor_rate: f64,
    /// Sampled units counted in the window.
    pub sampled: u64,
    /// Time the window covers (at least one sub-window).
    pub span: Duration,
}

/// A key whose estimated rate is over `threshold × ceiling` of its partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotKey {
    /// Partition id.
    pub partition: String,
    /// The hot key.
    pub key: String,
    /// Hot for reads or for writes.
    pub kind: Kind,
    /// Estimated units per second; never below the sampled truth.
    pub estimate: f64,
    /// `estimate − error_bound`: the sampled truth is at least this.
    pub lower_bound: f64,
    /// How much `estimate` may exceed the sampled truth, units per second.
    pub error_bound: f64,
    /// `estimate / ceiling`.
    pub share_of_ceiling: f64,
    /// `estimate / partition rate` (may exceed 1 by the error bound).
    pub share_of_partition: f64,
    /// Whether `lower_bound` too is over `threshold × ceiling`.
    pub certain: bool,
    /// The merged sketch estimate, in sampled units.
    pub sampled: Estimate,
}

/// What a [`Detector::report`] found: per-partition load and hot keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Report {
    /// Every partition and kind with samples in the window and a ceiling, by partition then kind.
    pub partitions: Vec<PartitionLoad>,
    /// Hot keys, highest `estimate` first (ties by partition, then key).
    pub hot: Vec<HotKey>,
}

/// Samples requests into bounded sliding-window sketches per partition and kind.
#[derive(Debug, Clone)]
pub struct Detector {
    config: DetectorConfig,
    sub_nanos: u64,
    partitions: HashMap<Box<str>, Window>,
}

impl Detector {
    /// Creates a detector, checking the configuration.
    pub fn new(config: DetectorConfig) -> Result<Self, DetectError> {
        let invalid = |field, reason| Err(DetectError::InvalidConfig { field, reason });
        if config.sample_one_in == 0 {
            return invalid("sample_one_in", "must be at least 1");
        }
        if config.capacity == 0 || config.capacity >= u32::MAX as usize {
            return invalid("capacity", "must be in 1..2^32-1");
        }
        if !(1..=1024).contains(&config.sub_windows) {
            return invalid("sub_windows", "must be in 1..=1024");
        }
        if config.max_partitions == 0 {
            return invalid("max_partitions", "must be at least 1");
        }
        let window_nanos = u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX);
        let sub_nanos = window_nanos / u64::from(config.sub_windows);
        if sub_nanos == 0 {
            return invalid("window", "must be at least one nanosecond per sub-window");
        }
        Ok(Self {
            config,
            sub_nanos,
            partitions: HashMap::new(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// Whether a request with this `draw` (a random `u64`, or a request counter) is sampled:
    /// `draw mod N == 0`. A counter samples exactly 1 in `N`.
    pub fn samples(&self, draw: u64) -> bool {
        draw.is_multiple_of(u64::from(self.config.sample_one_in))
    }

    /// Samples one request with `draw` (see [`Self::samples`]) and records it if sampled.
    pub fn offer(
        &mut self,
        access: Access<'_>,
        draw: u64,
        now: Duration,
    ) -> Result<Offered, DetectError> {
        self.check_lengths(&access)?;
        if !self.samples(draw) {
            return Ok(Offered::NotSampled);
        }
        self.record(access, now)
    }

    /// Records a request the caller already sampled 1 in `N`.
    pub fn record(&mut self, access: Access<'_>, now: Duration) -> Result<Offered, DetectError> {
        self.check_lengths(&access)?;
        let now_nanos = nanos(now);
        let window = match self.partitions.get_mut(access.partition) {
            Some(window) => window,
            None => self.admit_partition(access.partition, now_nanos)?,
        };
        window.record(access.kind, access.key, u64::from(access.units), now_nanos)
    }

    /// Names every key over `threshold × ceiling` of its partition in the window ending at `now`.
    pub fn report(&self, now: Duration, ceilings: &Ceilings) -> Report {
        let now_nanos = nanos(now);
        let scale = f64::from(self.config.sample_one_in);
        let mut report = Report::default();
        for (partition, window) in &self.partitions {
            for kind in [Kind::Read, Kind::Write] {
                let Some(ceiling) = ceilings.ceiling(kind) else {
                    continue;
                };
                let live = window.live(kind, now_nanos);
                let merged = merge(&live.sketches);
                if merged.total() == 0 {
                    continue;
                }
                let per_second = scale / live.span.as_secs_f64();
                let rate = merged.total() as f64 * per_second;
                report.partitions.push(PartitionLoad {
                    partition: partition.to_string(),
                    kind,
                    rate,
                    share_of_ceiling: rate / ceiling,
                    floor_rate: merged.floor() as f64 * per_second,
                    sampled: merged.total(),
                    span: live.span,
                });
                let line = ceilings.threshold() * ceiling;
                for counter in merged.counters() {
                    let estimate = counter.estimate.count as f64 * per_second;
                    if estimate <= line {
                        continue;
                    }
                    let lower_bound = counter.estimate.lower_bound() as f64 * per_second;
                    report.hot.push(HotKey {
                        partition: partition.to_string(),
                        key: counter.key.to_owned(),
                        kind,
                        estimate,
                        lower_bound,
                        error_bound: counter.estimate.error as f64 * per_second,
                        share_of_ceiling: estimate / ceiling,
                        share_of_partition: estimate / rate,
                        certain: lower_bound > line,
                        sampled: counter.estimate,
                    });
                }
            }
        }
        report
            .partitions
            .sort_by(|a, b| (&a.partition, a.kind).cmp(&(&b.partition, b.kind)));
        report.hot.sort_by(|a, b| {
            b.estimate
                .total_cmp(&a.estimate)
                .then_with(|| (&a.partition, &a.key, a.kind).cmp(&(&b.partition, &b.key, b.kind)))
        });
        report
    }

    /// The number of partitions tracked (including expired ones not yet reused).
    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Approximate bytes used now (sketches, keys, indexes, partition table).
    pub fn footprint_bytes(&self) -> usize {
        size_of::<Self>()
            + self.partitions.capacity() * (size_of::<Box<str>>() + size_of::<Window>() + 8)
            + self
                .partitions
                .iter()
                .map(|(id, window)| {
                    allocation_bytes(id.len()) + window.footprint_bytes() - size_of::<Window>()
                })
                .sum::<usize>()
    }

    /// Upper bound of [`Self::footprint_bytes`] for this configuration, whatever the keys.
    pub fn max_footprint_bytes(&self) -> usize {
        let c = &self.config;
        // A std HashMap holds at most 8/7 × len buckets, rounded up to a power of two.
        let table = (c.max_partitions * 8).div_ceil(7).next_power_of_two();
        size_of::<Self>()
            + table * (size_of::<Box<str>>() + size_of::<Window>() + 8)
            + c.max_partitions
                * (allocation_bytes(c.max_key_bytes)
                    + Window::max_footprint_bytes(c.sub_windows, c.capacity, c.max_key_bytes)
                    - size_of::<Window>())
    }

    fn check_lengths(&self, access: &Access<'_>) -> Result<(), DetectError> {
        let max = self.config.max_key_bytes;
        if access.key.len() > max {
            return Err(DetectError::KeyTooLong {
                len: access.key.len(),
                max,
            });
        }
        if access.partition.len() > max {
            return Err(DetectError::PartitionIdTooLong {
                len: access.partition.len(),
                max,
            });
        }
        Ok(())
    }

    fn admit_partition(
        &mut self,
        partition: &str,
        now_nanos: u64,
    ) -> Result<&mut Window, DetectError> {
        if self.partitions.len() >= self.config.max_partitions {
            let expired = self
                .partitions
                .iter()
                .find(|(_, window)| window.is_expired(now_nanos))
                .map(|(id, _)| id.clone());
            match expired {
                Some(id) => {
                    self.partitions.remove(&id);
                }
                None => {
                    return Err(DetectError::TooManyPartitions {
                        max: self.config.max_partitions,
                    });
                }
            }
        }
        let window = Window::new(
            self.sub_nanos,
            self.config.sub_windows,
            self.config.capacity,
            self.config.max_key_bytes,
        )?;
        Ok(self.partitions.entry(partition.into()).or_insert(window))
    }
}

/// `now` in nanoseconds, saturating after 584 years.
fn nanos(now: Duration) -> u64 {
    u64::try_from(now.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn detector(capacity: usize) -> Detector {
        Detector::new(DetectorConfig {
            sample_one_in: 100,
            capacity,
            window: Duration::from_secs(5),
            sub_windows: 5,
            max_key_bytes: 32,
            max_partitions: 4,
        })
        .expect("valid config")
    }

    #[test]
    fn part_three_p9_is_reported_hot_for_writes_and_its_neighbours_are_not() {
        let mut d = detector(16);
        // 5 s of S2 writes, 1 % sampled: 118 of p9, 3 each of p1, p5, p13 (118 of 127, as in
        // docs/hot-keys.md).
        let mut events: Vec<&str> = vec!["p9"; 118];
        for key in ["p1", "p5", "p13"] {
            events.extend([key; 3]);
        }
        for (i, key) in events.iter().enumerate() {
            let now = secs(i as f64 * 5.0 / events.len() as f64);
            assert_eq!(
                d.record(Access::write("S2", key), now),
                Ok(Offered::Recorded)
            );
        }
        let report = d.report(secs(5.0), &Ceilings::dynamodb());
        assert_eq!(report.hot.len(), 1);
        let p9 = &report.hot[0];
        assert_eq!((p9.partition.as_str(), p9.key.as_str()), ("S2", "p9"));
        assert_eq!(p9.kind, Kind::Write);
        assert_eq!(p9.estimate, 2_360.0);
        assert_eq!(p9.error_bound, 0.0);
        assert!(p9.certain);
        assert!((p9.share_of_partition - 118.0 / 127.0).abs() < 1e-9);
        let load = &report.partitions[0];
        assert_eq!(load.kind, Kind::Write);
        assert_eq!(load.rate, 2_540.0);
        assert!((load.share_of_ceiling - 2.54).abs() < 1e-9);
    }

    #[test]
    fn reads_and_writes_are_counted_apart() {
        let mut d = detector(16);
        for i in 0..50 {
            let now = secs(f64::from(i) * 0.1);
            d.record(Access::read("S2", "p9"), now).expect("recorded");
            d.record(Access::write("S2", "p1"), now).expect("recorded");
        }
        // 50 × 100 / 5 s = 1,000/s each: 33 % of the read ceiling, 100 % of the write ceiling.
        let report = d.report(secs(5.0), &Ceilings::dynamodb());
        let hot: Vec<(&str, Kind)> = report
            .hot
            .iter()
            .map(|h| (h.key.as_str(), h.kind))
            .collect();
        assert_eq!(hot, [("p1", Kind::Write), ("p9", Kind::Read)]);
        assert!((report.hot[1].share_of_ceiling - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_key_below_the_threshold_is_not_reported() {
        let mut d = detector(16);
        // 4 sampled writes in 5 s = 80 WCU/s, under 10 % of 1,000.
        for i in 0..4 {
            d.record(Access::write("S1", "p2"), secs(f64::from(i)))
                .expect("recorded");
        }
        let report = d.report(secs(5.0), &Ceilings::dynamodb());
        assert!(report.hot.is_empty());
        assert_eq!(report.partitions.len(), 1);
    }

    #[test]
    fn kinesis_ceilings_never_report_reads() {
        let mut d = detector(16);
        for i in 0..100 {
            d.record(Access::read("shard-1", "p9"), secs(f64::from(i) * 0.05))
                .expect("recorded");
        }
        assert!(d.report(secs(5.0), &Ceilings::kinesis()).hot.is_empty());
    }

    #[test]
    fn sampling_takes_exactly_one_in_n_of_a_counter() {
        let mut d = detector(16);
        let mut recorded = 0;
        for draw in 0..1_000u64 {
            if d.offer(Access::write("S1", "p9"), draw, secs(1.0)) == Ok(Offered::Recorded) {
                recorded += 1;
            }
        }
        assert_eq!(recorded, 10);
    }

    #[test]
    fn the_window_slides_and_forgets_old_sub_windows() {
        let mut d = detector(16);
        for i in 0..60 {
            d.record(Access::write("S1", "old"), secs(f64::from(i) * 0.01))
                .expect("recorded");
        }
        // At t = 6.5 s the sub-window [0, 1) s has left the window [1, 6.5) s.
        d.record(Access::write("S1", "new"), secs(6.5))
            .expect("recorded");
        let report = d.report(secs(6.5), &Ceilings::dynamodb());
        assert!(report.hot.iter().all(|h| h.key != "old"));
        assert_eq!(
            d.record(Access::write("S1", "late"), secs(0.5)),
            Ok(Offered::TooOld)
        );
    }

    #[test]
    fn rates_early_in_the_window_divide_by_the_time_covered() {
        let mut d = detector(16);
        // 20 sampled writes in the first 2 s: 20 × 100 / 2 s = 1,000 WCU/s, not / 5 s.
        for i in 0..20 {
            d.record(Access::write("S1", "p9"), secs(f64::from(i) * 0.1))
                .expect("recorded");
        }
        let report = d.report(secs(2.0), &Ceilings::dynamodb());
        assert_eq!(report.hot[0].estimate, 1_000.0);
    }

    #[test]
    fn a_key_longer_than_the_maximum_is_rejected() {
        let mut d = detector(16);
        let long = "k".repeat(33);
        assert_eq!(
            d.record(Access::write("S1", &long), secs(0.0)),
            Err(DetectError::KeyTooLong { len: 33, max: 32 })
        );
        assert_eq!(d.partitions(), 0);
    }

    #[test]
    fn partitions_beyond_the_maximum_are_refused_until_one_expires() {
        let mut d = detector(4);
        for p in ["S1", "S2", "S3", "S4"] {
            d.record(Access::write(p, "k"), secs(0.0)).expect("room");
        }
        assert_eq!(
            d.record(Access::write("S5", "k"), secs(1.0)),
            Err(DetectError::TooManyPartitions { max: 4 })
        );
        assert_eq!(
            d.record(Access::write("S5", "k"), secs(6.0)),
            Ok(Offered::Recorded)
        );
        assert_eq!(d.partitions(), 4);
    }

    #[test]
    fn an_invalid_configuration_is_refused() {
        let zero = DetectorConfig {
            sample_one_in: 0,
            ..DetectorConfig::default()
        };
        assert!(matches!(
            Detector::new(zero),
            Err(DetectError::InvalidConfig {
                field: "sample_one_in",
                ..
            })
        ));
        assert!(Ceilings::dynamodb().with_threshold(0.0).is_err());
        assert!(Ceilings::new(Some(-1.0), None, 0.1).is_err());
    }

    #[test]
    fn memory_stays_under_the_configured_bound_whatever_the_key_cardinality() {
        let mut d = detector(8);
        for i in 0..20_000u32 {
            let partition = ["S1", "S2", "S3", "S4"][(i % 4) as usize];
            let key = format!("key-{i:08}-{}", "x".repeat((i % 19) as usize));
            let now = secs(f64::from(i) * 0.001);
            d.record(Access::read(partition, &key), now)
                .expect("recorded");
            d.record(Access::write(partition, &key), now)
                .expect("recorded");
        }
        assert!(d.footprint_bytes() <= d.max_footprint_bytes());
    }

    proptest! {
        #[test]
        fn every_reported_estimate_brackets_the_sampled_truth(
            events in prop::collection::vec((0u32..30, 0u32..30, 0u64..9_000), 1..400),
            capacity in 1usize..10,
        ) {
            let mut d = detector(capacity);
            let mut events: Vec<(String, u64)> = events
                .into_iter()
                .map(|(a, b, ms)| (format!("k{}", a.min(b)), ms))
                .collect();
            events.sort_by_key(|(_, ms)| *ms);
            for (key, ms) in &events {
                d.record(Access::write("S1", key), Duration::from_millis(*ms)).expect("recorded");
            }
            let now = Duration::from_millis(9_000);
            let ceilings = Ceilings::new(None, Some(1.0), 1e-9).expect("valid");
            let report = d.report(now, &ceilings);
            // Truth: sampled writes in the live sub-windows [4 s, 9 s], over the span reported
            // (shorter when the first sample came later).
            let span = report.partitions.first().map_or(5.0, |p| p.span.as_secs_f64());
            prop_assert!(span <= 5.0);
            for key in (0..30).map(|k| format!("k{k}")) {
                let truth = events.iter().filter(|(k, ms)| *k == key && *ms >= 4_000).count();
                let truth_rate = truth as f64 * 100.0 / span;
                match report.hot.iter().find(|h| h.key == key) {
                    Some(h) => {
                        prop_assert!(h.lower_bound <= truth_rate + 1e-6);
                        prop_assert!(truth_rate <= h.estimate + 1e-6);
                    }
                    None => {
                        let floor = report.partitions.first().map_or(0.0, |p| p.floor_rate);
                        prop_assert!(truth_rate <= floor + 1e-6, "{key} {truth_rate} > {floor}");
                    }
                }
            }
        }
    }
}
