//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the top keys of a stream in `m` counters.
//!
//! The sketch keeps at most `m` (key, count, error) counters. A key already counted adds its
//! units to its counter. A new key takes a free counter, or, when all `m` are taken, replaces the
//! key of the smallest counter: it inherits that count `min` (recorded as its `error`) plus its own
//! units. Every replaced key therefore hands its count on instead of losing it, which is what makes
//! the bounds below hold deterministically, whatever the order of the stream.
//!
//! With `N` the units counted so far and `min` the smallest counter (`0` while a counter is free):
//! - the counters sum to exactly `N`, so `min ≤ N / m`;
//! - a counted key's true count lies in `[count − error, count]`, and `error ≤ min ≤ N / m`;
//! - a key not counted has a true count `≤ min ≤ N / m`, so every key above `N / m` is counted.
//!
//! [`merge`] combines sketches (the sub-windows of a sliding window, or several routers) without
//! dropping any key: the errors add up, to at most `Σ Nᵢ / m = N / m` for equal capacities.

use std::collections::HashMap;

use super::DetectError;
use super::heap_map::HeapMap;

/// The estimated count of one key, with its error bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Estimate {
    /// Upper bound of the true count (never below it).
    pub count: u64,
    /// How much `count` may exceed the true count.
    pub error: u64,
}

impl Estimate {
    /// Lower bound of the true count: `count − error`.
    pub fn lower_bound(&self) -> u64 {
        // Saturating: an estimate decoded from a report (outside bytes) may claim error > count.
        self.count.saturating_sub(self.error)
    }
}

/// One counter of a sketch, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter<'a> {
    /// The counted key.
    pub key: &'a str,
    /// Its estimate and error.
    pub estimate: Estimate,
}

/// A Space-Saving sketch of fixed capacity `m`.
///
/// ```
/// use heatsink_core::detect::SpaceSaving;
///
/// let mut sketch = SpaceSaving::new(2, 64)?;
/// for key in ["p9", "p1", "p9", "p5", "p9"] {
///     sketch.observe(key, 1)?;
/// }
/// let p9 = sketch.estimate("p9");
/// assert!(p9.lower_bound() <= 3 && 3 <= p9.count);
/// assert!(p9.error <= sketch.total() / 2); // error ≤ N / m
/// # Ok::<(), heatsink_core::detect::DetectError>(())
/// ```
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    counters: HeapMap<u64>,
    max_key_bytes: usize,
    total: u64,
}

impl SpaceSaving {
    /// Creates an empty sketch of `capacity` counters accepting keys of at most `max_key_bytes`.
    pub fn new(capacity: usize, max_key_bytes: usize) -> Result<Self, DetectError> {
        if capacity == 0 {
            return Err(DetectError::InvalidConfig {
                field: "capacity",
                reason: "must be at least 1",
            });
        }
        if capacity >= u32::MAX as usize {
            return Err(DetectError::InvalidConfig {
                field: "capacity",
                reason: "must be below 2^32 - 1",
            });
        }
        Ok(Self {
            counters: HeapMap::new(capacity),
            max_key_bytes,
            total: 0,
        })
    }

    /// Counts `units` for `key` (a sampled request, or its capacity units).
    pub fn observe(&mut self, key: &str, units: u64) -> Result<(), DetectError> {
        if key.len() > self.max_key_bytes {
            return Err(DetectError::KeyTooLong {
                len: key.len(),
                max: self.max_key_bytes,
            });
        }
        if units == 0 {
            return Ok(());
        }
        self.total = self.total.saturating_add(units);
        let hash = self.counters.hash(key);
        if let Some(at) = self.counters.find(hash, key) {
            let count = self.counters.slot(at).priority.saturating_add(units);
            self.counters.raise_priority(at, count);
        } else if !self.counters.is_full() {
            self.counters.push(hash, key, units, 0);
        } else if let Some(at) = self.counters.min() {
            let min = self.counters.slot(at).priority;
            self.counters
                .replace(at, hash, key, min.saturating_add(units), min);
        }
        Ok(())
    }

    /// The estimate of `key`: its counter, or `(min, min)` when it is not counted.
    pub fn estimate(&self, key: &str) -> Estimate {
        match self.counters.find(self.counters.hash(key), key) {
            Some(at) => {
                let slot = self.counters.slot(at);
                Estimate {
                    count: slot.priority,
                    error: slot.value,
                }
            }
            None => {
                let floor = self.floor();
                Estimate {
                    count: floor,
                    error: floor,
                }
            }
        }
    }

    /// Upper bound of the true count of any key not counted: the smallest counter when full, else 0.
    pub fn floor(&self) -> u64 {
        if self.counters.is_full() {
            self.counters
                .min()
                .map_or(0, |at| self.counters.slot(at).priority)
        } else {
            0
        }
    }

    /// `N`: the units counted since creation or the last [`Self::clear`].
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The number of counters in use.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether nothing has been counted.
    pub fn is_empty(&self) -> bool {
        self.counters.len() == 0
    }

    /// `m`: the maximum number of counters.
    pub fn capacity(&self) -> usize {
        self.counters.capacity()
    }

    /// The longest key accepted, in bytes.
    pub fn max_key_bytes(&self) -> usize {
        self.max_key_bytes
    }

    /// All counters, in no particular order.
    pub fn counters(&self) -> impl Iterator<Item = Counter<'_>> {
        self.counters.slots().iter().map(|slot| Counter {
            key: &slot.id,
            estimate: Estimate {
                count: slot.priority,
                error: slot.value,
            },
        })
    }

    /// The `k` largest counters, largest first (ties by key, so the order is deterministic).
    pub fn top(&self, k: usize) -> Vec<Counter<'_>> {
        let mut all: Vec<Counter<'_>> = self.counters().collect();
        all.sort_unstable_by(|a, b| {
            b.estimate
                .count
                .cmp(&a.estimate.count)
                .then_with(|| a.key.cmp(b.key))
        });
        all.truncate(k);
        all
    }

    /// Forgets every key, keeping allocations.
    pub fn clear(&mut self) {
        self.counters.clear();
        self.total = 0;
    }

    /// Approximate bytes used now (struct, counters, keys, index, heap).
    pub fn footprint_bytes(&self) -> usize {
        self.counters.footprint_bytes() - size_of::<HeapMap<u64>>() + size_of::<Self>()
    }

    /// Upper bound of [`Self::footprint_bytes`] for any sketch of this capacity and key limit.
    pub fn max_footprint_bytes(capacity: usize, max_key_bytes: usize) -> usize {
        HeapMap::<u64>::max_footprint_bytes(capacity, max_key_bytes) - size_of::<HeapMap<u64>>()
            + size_of::<Self>()
    }
}

/// Sketches merged without dropping any key: the union of their counters with summed estimates.
///
/// A key counted in sketch `i` contributes its counter there; a key absent from sketch `i`
/// contributes `(floorᵢ, floorᵢ)`, the most it can have had there. So for every key,
/// `true ≤ count ≤ true + error` still holds, with `error ≤ Σ floorᵢ ≤ Σ Nᵢ / mᵢ`, and a key not
/// in the union has a true count `≤ Σ floorᵢ`.
#[derive(Debug, Clone, Default)]
pub struct Merged<'a> {
    entries: HashMap<&'a str, Estimate>,
    floor: u64,
    total: u64,
}

/// Merges `sketches` into one summary (see [`Merged`]); its size is at most the sum of theirs.
pub fn merge<'a>(sketches: &[&'a SpaceSaving]) -> Merged<'a> {
    let floor: u64 = sketches.iter().map(|s| s.floor()).sum();
    let total: u64 = sketches.iter().map(|s| s.total()).sum();
    // Per key: Σ (countᵢ − floorᵢ) over sketches counting it, and Σ (floorᵢ − errorᵢ) likewise.
    let mut sums: HashMap<&'a str, (u64, u64)> = HashMap::new();
    for sketch in sketches {
        let sketch_floor = sketch.floor();
        for counter in sketch.counters() {
            let sum = sums.entry(counter.key).or_default();
            sum.0 += counter.estimate.count - sketch_floor;
            sum.1 += sketch_floor - counter.estimate.error;
        }
    }
    let entries = sums
        .into_iter()
        .map(|(key, (above, below))| {
            (
                key,
                Estimate {
                    count: floor + above,
                    error: floor - below,
                },
            )
        })
        .collect();
    Merged {
        entries,
        floor,
        total,
    }
}

impl<'a> Merged<'a> {
    /// The estimate of `key`: its merged counter, or `(floor, floor)` when no sketch counts it.
    pub fn estimate(&self, key: &str) -> Estimate {
        self.entries.get(key).copied().unwrap_or(Estimate {
            count: self.floor,
            error: self.floor,
        })
    }

    /// Upper bound of the true count of any key not in the union: `Σ floorᵢ`.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// `N`: the units counted by all merged sketches.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The number of distinct keys in the union.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sketch counted anything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All merged counters, in no particular order.
    pub fn counters(&self) -> impl Iterator<Item = Counter<'a>> + '_ {
        self.entries
            .iter()
            .map(|(&key, &estimate)| Counter { key, estimate })
    }

    /// The `k` largest merged counters, largest first (ties by key).
    pub fn top(&self, k: usize) -> Vec<Counter<'a>> {
        let mut all: Vec<Counter<'a>> = self.counters().collect();
        all.sort_unstable_by(|a, b| {
            b.estimate
                .count
                .cmp(&a.estimate.count)
                .then_with(|| a.key.cmp(b.key))
        });
        all.truncate(k);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// A skewed stream: small key ids are much more likely (keys `k0..k{keys}`), units 1..=3.
    fn stream(keys: u32) -> impl Strategy<Value = Vec<(String, u64)>> {
        prop::collection::vec(
            (0u32..keys, 0u32..keys, 1u64..=3)
                .prop_map(|(a, b, units)| (format!("k{}", a.min(b)), units)),
            0..600,
        )
    }

    fn exact(events: &[(String, u64)]) -> HashMap<&str, u64> {
        let mut counts = HashMap::new();
        for (key, units) in events {
            *counts.entry(key.as_str()).or_insert(0) += units;
        }
        counts
    }

    fn sketch_of(capacity: usize, events: &[(String, u64)]) -> SpaceSaving {
        let mut sketch = SpaceSaving::new(capacity, 16).expect("valid capacity");
        for (key, units) in events {
            sketch.observe(key, *units).expect("short key");
        }
        sketch
    }

    proptest! {
        #[test]
        fn every_key_is_bracketed_by_its_estimate_and_error(
            capacity in 1usize..24, events in stream(60),
        ) {
            let sketch = sketch_of(capacity, &events);
            let n = sketch.total();
            let truths = exact(&events);
            for key in (0..60).map(|k| format!("k{k}")) {
                let truth = truths.get(key.as_str()).copied().unwrap_or(0);
                let e = sketch.estimate(&key);
                prop_assert!(e.lower_bound() <= truth, "{key}: {e:?} truth {truth}");
                prop_assert!(truth <= e.count, "{key}: {e:?} truth {truth}");
                prop_assert!(e.error * capacity as u64 <= n, "error {} > N/m", e.error);
            }
        }

        #[test]
        fn a_key_above_n_over_m_is_always_counted(
            capacity in 1usize..24, events in stream(60),
        ) {
            let sketch = sketch_of(capacity, &events);
            let n = sketch.total();
            let counted: Vec<&str> = sketch.counters().map(|c| c.key).collect();
            for (key, truth) in exact(&events) {
                if truth * capacity as u64 > n {
                    prop_assert!(counted.contains(&key), "{key} has {truth} of {n}");
                }
            }
        }

        #[test]
        fn the_counters_sum_to_the_units_observed(
            capacity in 1usize..24, events in stream(60),
        ) {
            let sketch = sketch_of(capacity, &events);
            let units: u64 = events.iter().map(|(_, u)| u).sum();
            prop_assert_eq!(sketch.total(), units);
            prop_assert_eq!(sketch.counters().map(|c| c.estimate.count).sum::<u64>(), units);
            prop_assert!(sketch.len() <= capacity);
        }

        #[test]
        fn a_merge_brackets_every_key_within_the_summed_error(
            capacity in 1usize..16, parts in prop::collection::vec(stream(40), 1..5),
        ) {
            let sketches: Vec<SpaceSaving> = parts.iter().map(|p| sketch_of(capacity, p)).collect();
            let refs: Vec<&SpaceSaving> = sketches.iter().collect();
            let merged = merge(&refs);
            let all: Vec<(String, u64)> = parts.concat();
            let truth = exact(&all);
            let n: u64 = all.iter().map(|(_, u)| u).sum();
            prop_assert_eq!(merged.total(), n);
            let floors: u64 = sketches.iter().map(SpaceSaving::floor).sum();
            prop_assert_eq!(merged.floor(), floors);
            for key in (0..40).map(|k| format!("k{k}")) {
                let t = truth.get(key.as_str()).copied().unwrap_or(0);
                let e = merged.estimate(&key);
                prop_assert!(e.lower_bound() <= t && t <= e.count, "{key}: {e:?} truth {t}");
                let summed: u64 = sketches.iter().map(|s| s.estimate(&key).error).sum();
                prop_assert_eq!(e.error, summed);
                prop_assert!(e.error * capacity as u64 <= n);
                if t * capacity as u64 > n {
                    prop_assert!(merged.counters().any(|c| c.key == key));
                }
            }
        }
    }

    #[test]
    fn a_key_longer_than_the_limit_is_rejected_and_not_counted() {
        let mut sketch = SpaceSaving::new(4, 3).expect("valid");
        assert_eq!(
            sketch.observe("abcd", 1),
            Err(DetectError::KeyTooLong { len: 4, max: 3 })
        );
        assert_eq!(sketch.total(), 0);
        assert!(sketch.is_empty());
    }

    #[test]
    fn a_zero_capacity_is_refused() {
        assert!(matches!(
            SpaceSaving::new(0, 8),
            Err(DetectError::InvalidConfig {
                field: "capacity",
                ..
            })
        ));
    }

    #[test]
    fn the_footprint_stays_under_its_bound_for_any_number_of_distinct_keys() {
        let mut sketch = SpaceSaving::new(64, 24).expect("valid");
        for i in 0..20_000u32 {
            sketch.observe(&format!("key-{i}"), 1).expect("short");
        }
        assert_eq!(sketch.len(), 64);
        assert!(sketch.footprint_bytes() <= SpaceSaving::max_footprint_bytes(64, 24));
    }

    #[test]
    fn the_top_list_is_ordered_by_count_then_key() {
        let mut sketch = SpaceSaving::new(8, 8).expect("valid");
        for (key, units) in [("b", 2), ("a", 2), ("c", 5)] {
            sketch.observe(key, units).expect("short");
        }
        let top: Vec<&str> = sketch.top(3).iter().map(|c| c.key).collect();
        assert_eq!(top, ["c", "a", "b"]);
    }
}
