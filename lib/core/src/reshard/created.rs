//! When open shards were created, from what `ListShards` can say: nothing in a `Shard` carries a
//! creation time, but `ShardFilter { Type: AT_TIMESTAMP, Timestamp: t }` lists exactly the
//! shards whose start timestamp is ≤ t and that were still open at t (API reference,
//! `ShardFilter`). So an open shard missing from the answer at t was created after t.
//!
//! [`CreationProbe`] decides which timestamps to ask about and turns the answers into each
//! young shard's `created_at` ([`super::ShardSample::created_at`]). The first probe is at the
//! start of the cooldown window; shards listed there are older than the window and keep
//! `created_at: None` (the cooldown does not concern them). The young ones are bracketed by
//! halving until every bracket is at most [`CreationProbe::precision_secs`] wide (30 s), within
//! [`CreationProbe::max_probes`] calls (16). The children of one reshard share one bracket: six
//! calls place them within 30 s of a 900 s window. A young shard's `created_at` is the **latest** time it
//! can have been created, so its cooldown is never cut short: it may last up to the precision
//! longer than it would on the exact creation time.
//!
//! ```
//! use heatsink_core::reshard::CreationProbe;
//!
//! // Two open shards at t = 10,000 s, with a 900 s cooldown; "b" was created at 9,700.
//! let created = |id: &str| if id == "b" { 9_700 } else { 1_000 };
//! let mut probe = CreationProbe::new(["a", "b"], 10_000, 900);
//! while let Some(t) = probe.next_probe() {
//!     let listed: Vec<&str> = ["a", "b"].into_iter().filter(|id| created(id) <= t).collect();
//!     probe.observe(t, listed);
//! }
//! let at = probe.created_at();
//! assert_eq!(at.get("a"), None, "older than the window");
//! let b = at["b"];
//! assert!((9_700..=9_700 + 30).contains(&b), "{b}");
//! ```

use std::collections::{BTreeMap, BTreeSet};

/// The bisection of young shards' creation times; see the module docs.
#[derive(Debug, Clone)]
pub struct CreationProbe {
    now: u64,
    window_start: u64,
    /// Shards not yet known to be old: `id -> (lo, hi]` bracket of the creation time; `None`
    /// until the first probe answered.
    brackets: BTreeMap<String, Option<(u64, u64)>>,
    probes: u32,
    /// Brackets at most this wide end the search (default 30 s).
    pub precision_secs: u64,
    /// At most this many `ListShards` probes (default 16: the children of one reshard need
    /// about six with the default cooldown).
    pub max_probes: u32,
}

impl CreationProbe {
    /// A probe of the open shards `open` at `now` (Unix seconds) for a cooldown of
    /// `window_secs`.
    pub fn new<I, S>(open: I, now: u64, window_secs: u64) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            now,
            window_start: now.saturating_sub(window_secs),
            brackets: open.into_iter().map(|s| (s.into(), None)).collect(),
            probes: 0,
            precision_secs: 30,
            max_probes: 16,
        }
    }

    /// The next timestamp (Unix seconds) to list the shards at, or `None` when done.
    pub fn next_probe(&self) -> Option<u64> {
        if self.brackets.is_empty() || self.window_start == self.now {
            return None;
        }
        if self.probes == 0 {
            return Some(self.window_start);
        }
        if self.probes >= self.max_probes {
            return None;
        }
        let (lo, hi) = self
            .brackets
            .values()
            .flatten()
            .copied()
            .max_by_key(|(lo, hi)| hi - lo)?;
        (hi - lo > self.precision_secs).then(|| lo + (hi - lo) / 2)
    }

    /// The shards `ListShards(AT_TIMESTAMP t)` listed (any others, open or closed, are ignored).
    pub fn observe<I, S>(&mut self, t: u64, listed: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let listed: BTreeSet<String> = listed.into_iter().map(|s| s.as_ref().to_owned()).collect();
        let first = self.probes == 0;
        self.probes += 1;
        let now = self.now;
        self.brackets.retain(|id, b| {
            let here = listed.contains(id);
            match b {
                // Listed at the window's start: older than the window.
                None if first && here => false,
                None => {
                    *b = Some(if here { (0, t) } else { (t, now) });
                    true
                }
                Some((lo, hi)) => {
                    if here {
                        *hi = (*hi).min(t);
                    } else {
                        *lo = (*lo).max(t);
                    }
                    if lo > hi {
                        // Answers that contradict each other (an emulator): the latest bound.
                        *lo = *hi;
                    }
                    true
                }
            }
        });
    }

    /// Each young shard's `created_at`: the latest time it can have been created. Shards older
    /// than the window are absent.
    pub fn created_at(&self) -> BTreeMap<String, u64> {
        self.brackets
            .iter()
            .map(|(id, b)| (id.clone(), b.map_or(self.now, |(_, hi)| hi)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(created: &BTreeMap<String, u64>, now: u64, window: u64) -> (BTreeMap<String, u64>, u32) {
        let mut p = CreationProbe::new(created.keys().cloned(), now, window);
        let mut calls = 0;
        while let Some(t) = p.next_probe() {
            calls += 1;
            let listed: Vec<&String> = created
                .iter()
                .filter(|(_, c)| **c <= t)
                .map(|(id, _)| id)
                .collect();
            p.observe(t, listed);
        }
        (p.created_at(), calls)
    }

    proptest! {
        /// Safety: every shard created inside the window gets a `created_at` no earlier than
        /// its real creation (its cooldown is never cut short) and no later than `now`; every
        /// shard older than the window gets none; at most `max_probes` calls.
        #[test]
        fn young_shards_are_bounded_from_above_and_old_ones_left_alone(
            ages in proptest::collection::vec(0u64..3_000, 1..12),
            window in 60u64..2_000,
        ) {
            let now = 100_000u64;
            let created: BTreeMap<String, u64> =
                ages.iter().enumerate().map(|(i, a)| (format!("s{i}"), now - a)).collect();
            let (got, calls) = run(&created, now, window);
            prop_assert!(calls <= 16);
            for (id, &c) in &created {
                if c <= now - window {
                    prop_assert_eq!(got.get(id), None, "{} is older than the window", id);
                } else {
                    let at = got[id];
                    prop_assert!(at >= c && at <= now, "{id}: {at} vs its creation {c}");
                }
            }
        }

        /// Precision: the children of one reshard (created at one instant) share a bracket,
        /// which ends at most `precision_secs` wide.
        #[test]
        fn one_reshards_children_are_placed_within_the_precision(
            age in 1u64..900,
            children in 1usize..5,
            old in 0usize..4,
        ) {
            let now = 100_000u64;
            let mut created: BTreeMap<String, u64> =
                (0..children).map(|i| (format!("c{i}"), now - age)).collect();
            created.extend((0..old).map(|i| (format!("o{i}"), now - 5_000)));
            let (got, _) = run(&created, now, 900);
            prop_assert_eq!(got.len(), children);
            for at in got.values() {
                prop_assert!(*at >= now - age && *at - (now - age) <= 30, "{at} vs {}", now - age);
            }
        }
    }

    #[test]
    fn a_listing_that_ignores_the_filter_leaves_every_shard_old() {
        let mut p = CreationProbe::new(["a", "b"], 1_000, 900);
        let t = p.next_probe().expect("the window's start");
        assert_eq!(t, 100);
        p.observe(t, ["a", "b", "closed-parent"]);
        assert_eq!(p.next_probe(), None);
        assert!(p.created_at().is_empty());
    }
}
