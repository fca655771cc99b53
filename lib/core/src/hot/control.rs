//! The mitigation controller's decision: signals + current entries + time → directory changes.

use std::collections::{BTreeMap, HashMap};

use super::entry::{Entry, Mode};
use crate::detect::{HotKey, Kind};
use crate::keys::{KeyError, MAX_SALTS, PlanRequest, parse_sub_key, plan};

/// A key's measured load from one source (a sampler report, a Contributor Insights rule).
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    /// The key (a partition key, or `tenant#<id>` when `tenant` is set).
    pub key: String,
    /// Read- or write-hot.
    pub kind: Kind,
    /// Estimated units per second.
    pub rate: f64,
    /// The ceiling of one partition for this kind, units per second.
    pub ceiling: f64,
    /// Whether the key is a tenant to limit rather than a key to spread.
    pub tenant: bool,
    /// Where the signal came from (kept in the entry's `reason`).
    pub source: String,
}

impl Signal {
    /// A key's load of `kind` at `rate` units/s against a partition `ceiling`.
    pub fn new(key: &str, kind: Kind, rate: f64, ceiling: f64, source: &str) -> Self {
        Self {
            key: key.to_owned(),
            kind,
            rate,
            ceiling,
            tenant: false,
            source: source.to_owned(),
        }
    }

    /// A tenant's request rate against the share of a partition it may use.
    pub fn tenant(tenant: &str, rate: f64, ceiling: f64, source: &str) -> Self {
        Self {
            tenant: true,
            ..Self::new(
                &format!("tenant#{tenant}"),
                Kind::Write,
                rate,
                ceiling,
                source,
            )
        }
    }

    /// A signal from the client sampler's report.
    pub fn from_hot_key(hot: &HotKey, ceiling: f64) -> Self {
        Self::new(&hot.key, hot.kind, hot.estimate, ceiling, "sampler")
    }

    /// The rate as a share of the ceiling.
    pub fn share(&self) -> f64 {
        self.rate / self.ceiling
    }

    fn is_sane(&self) -> bool {
        !self.key.is_empty()
            && self.rate.is_finite()
            && self.rate >= 0.0
            && self.ceiling.is_finite()
            && self.ceiling > 0.0
    }
}

/// The controller's thresholds and timers; shares are fractions of a partition's ceiling.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Act when a key's share reaches this. Default 0.8 (the planner's "at or under 80 %").
    pub on_share: f64,
    /// A key is calm below this share. Default 0.5; the band in between holds the state.
    pub off_share: f64,
    /// A mitigation is kept at least this long, seconds. Default 300.
    pub min_age: u64,
    /// A key must stay calm this long before it is let go (the merge delay), seconds. Default 600.
    pub merge_delay: u64,
    /// Cache and limit entries expire this long after their last refresh, seconds. Default 3,600.
    pub ttl: u64,
    /// The planner's target: S keeps each sub-key at or under this share. Default 0.8.
    pub target: f64,
    /// A limited tenant may use this share of a partition. Default 0.2.
    pub tenant_share: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            on_share: 0.8,
            off_share: 0.5,
            min_age: 300,
            merge_delay: 600,
            ttl: 3_600,
            target: 0.8,
            tenant_share: 0.2,
        }
    }
}

/// One conditional change to the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Write `entry`, if the stored epoch is `expected_epoch` (`None`: only if absent).
    Put {
        /// The new record (its `epoch` is `expected_epoch + 1`, or 1).
        entry: Entry,
        /// The epoch the decision was based on.
        expected_epoch: Option<u64>,
    },
    /// Delete `key`'s entry if its stored epoch is still `expected_epoch`.
    Remove {
        /// The key.
        key: String,
        /// The epoch the decision was based on.
        expected_epoch: u64,
    },
}

impl Change {
    /// The key this change is about.
    pub fn key(&self) -> &str {
        match self {
            Change::Put { entry, .. } => &entry.key,
            Change::Remove { key, .. } => key,
        }
    }
}

/// The strongest load seen for one key, by kind (sources overlap: the max, never the sum).
#[derive(Debug, Default)]
struct Load<'a> {
    read: Option<&'a Signal>,
    write: Option<&'a Signal>,
}

impl<'a> Load<'a> {
    fn add(&mut self, s: &'a Signal) {
        let slot = match s.kind {
            Kind::Read => &mut self.read,
            Kind::Write => &mut self.write,
        };
        if slot.is_none_or(|cur| s.share() > cur.share()) {
            *slot = Some(s);
        }
    }

    fn strongest(&self) -> Option<&'a Signal> {
        match (self.read, self.write) {
            (Some(r), Some(w)) => Some(if w.share() >= r.share() { w } else { r }),
            (r, w) => r.or(w),
        }
    }
}

/// Decides the directory changes for `signals` given the `current` entries at `now` (seconds).
///
/// Per key: a write-hot key gets salted with S from the planner (growing S if the rate needs
/// more; never shrinking it while hot), a read-hot key gets cached, a hot tenant gets limited.
/// A mitigated key whose every signal is under `off_share` is marked calm; once calm for
/// `merge_delay` and at least `min_age` old, a cache or limit entry is removed and a salt entry
/// starts draining back to S = 1. Expired entries are removed. Signals with a non-finite or
/// negative rate or a non-positive ceiling are ignored. The result is in key order.
pub fn decide(signals: &[Signal], current: &[Entry], now: u64, cfg: &Thresholds) -> Vec<Change> {
    let signals = by_logical_key(signals);
    let mut loads: BTreeMap<&str, Load> = BTreeMap::new();
    for s in &signals {
        loads.entry(&s.key).or_default().add(s);
    }
    let entries: HashMap<&str, &Entry> = current.iter().map(|e| (e.key.as_str(), e)).collect();
    let mut changes: BTreeMap<String, Change> = BTreeMap::new();
    for (key, load) in &loads {
        let entry = entries.get(key).copied().filter(|e| e.is_live(now));
        if let Some(change) = decide_key(key, load, entry, now, cfg) {
            changes.insert((*key).to_owned(), change);
        }
    }
    for e in current
        .iter()
        .filter(|e| !loads.contains_key(e.key.as_str()))
    {
        let change = if e.is_live(now) {
            calm(e, now, cfg)
        } else {
            Some(remove(e))
        };
        if let Some(change) = change {
            changes.insert(e.key.clone(), change);
        }
    }
    changes.into_values().collect()
}

/// Folds salted sub-keys (`p9#0`, `p9#1`, …) into their logical key, summing their rates per
/// source and kind: once writers salt, a sampler or Contributor Insights sees the sub-keys, and
/// the key must still count as hot as a whole (else the controller would see it go calm the
/// moment the mitigation works, and flap). Insane signals are dropped here.
pub fn by_logical_key(signals: &[Signal]) -> Vec<Signal> {
    let mut folded: BTreeMap<(String, Kind, bool, String), Signal> = BTreeMap::new();
    for s in signals.iter().filter(|s| s.is_sane()) {
        let logical = match parse_sub_key(&s.key) {
            Ok((base, Some(_))) => base,
            _ => s.key.as_str(),
        };
        let id = (logical.to_owned(), s.kind, s.tenant, s.source.clone());
        folded
            .entry(id)
            .and_modify(|f| f.rate += s.rate)
            .or_insert_with(|| Signal {
                key: logical.to_owned(),
                ..s.clone()
            });
    }
    folded.into_values().collect()
}

fn decide_key(
    key: &str,
    load: &Load,
    entry: Option<&Entry>,
    now: u64,
    cfg: &Thresholds,
) -> Option<Change> {
    let strongest = load.strongest()?;
    let Some(entry) = entry else {
        return (strongest.share() >= cfg.on_share)
            .then(|| fresh(key, load, strongest, now, cfg))
            .flatten()
            .map(|entry| Change::Put {
                entry,
                expected_epoch: None,
            });
    };
    // A key that became write-hot needs salting whatever it had; a salted key needs more S.
    if let Some(w) = load
        .write
        .filter(|w| w.share() >= cfg.on_share && !w.tenant)
    {
        let salts = salts_for(w, cfg);
        let grows = entry.mode != Mode::Salt || salts > entry.salts.current();
        if grows && entry.mode != Mode::Limit {
            return escalate(entry, salts, w, now);
        }
    }
    if strongest.share() >= cfg.off_share {
        return refresh(entry, now, cfg);
    }
    calm(entry, now, cfg)
}

/// The entry a newly hot key gets.
fn fresh(key: &str, load: &Load, hot: &Signal, now: u64, cfg: &Thresholds) -> Option<Entry> {
    let reason = reason(hot);
    let expires = now + cfg.ttl;
    if hot.tenant {
        let per_second = (cfg.tenant_share * hot.ceiling).floor().max(1.0) as u32;
        return Some(Entry::limit(key, per_second, &reason, now, expires));
    }
    match load.write.filter(|w| w.share() >= cfg.on_share) {
        Some(w) => Entry::salt(key, salts_for(w, cfg), &reason, now).ok(),
        None => Some(Entry::cache(key, &reason, now, expires)),
    }
}

/// A salt entry at `salts` in place of `entry` (a cache entry, or a salt entry with fewer S).
fn escalate(entry: &Entry, salts: u16, hot: &Signal, now: u64) -> Option<Change> {
    let state = if entry.mode == Mode::Salt {
        // Growing S always keeps readers on two sub-key sets (see `SaltState::transition_to`).
        entry.salts.transition_to(salts).ok()?
    } else {
        crate::keys::SaltState::UNSALTED.transition_to(salts).ok()?
    };
    let since = if entry.mode == Mode::Salt {
        entry.since
    } else {
        now
    };
    Some(put(
        entry,
        Entry {
            mode: Mode::Salt,
            salts: state,
            reason: reason(hot),
            since,
            calm_since: None,
            expires: None,
            ..entry.clone()
        },
    ))
}

/// Still hot: clear the calm mark, and push a cache/limit expiry out once half of it is gone.
fn refresh(entry: &Entry, now: u64, cfg: &Thresholds) -> Option<Change> {
    let stale_expiry = entry.expires.is_some_and(|e| e <= now + cfg.ttl / 2);
    if entry.calm_since.is_none() && !stale_expiry {
        return None;
    }
    Some(put(
        entry,
        Entry {
            calm_since: None,
            expires: entry.expires.map(|_| now + cfg.ttl),
            ..entry.clone()
        },
    ))
}

/// Calm: mark it, or let go once calm for `merge_delay` and at least `min_age` old.
fn calm(entry: &Entry, now: u64, cfg: &Thresholds) -> Option<Change> {
    let Some(calm_since) = entry.calm_since else {
        return Some(put(
            entry,
            Entry {
                calm_since: Some(now),
                ..entry.clone()
            },
        ));
    };
    let settled = now.saturating_sub(calm_since) >= cfg.merge_delay
        && now.saturating_sub(entry.since) >= cfg.min_age;
    if !settled {
        return None;
    }
    match entry.mode {
        Mode::Cache | Mode::Limit => Some(remove(entry)),
        // Already back at S = 1: only a drain check (old sub-keys empty) may remove it.
        Mode::Salt if entry.salts.current() == 1 => None,
        Mode::Salt => Some(put(
            entry,
            Entry {
                salts: entry.salts.transition_to(1).ok()?,
                reason: format!("cooled down after {}s calm", now - calm_since),
                ..entry.clone()
            },
        )),
    }
}

/// S from the shard-load sizing planner for `hot`'s rate, each sub-key on its own partition; at
/// most [`MAX_SALTS`] (a rate beyond what 256 sub-keys absorb gets the most there is).
fn salts_for(hot: &Signal, cfg: &Thresholds) -> u16 {
    let shards = usize::from(MAX_SALTS);
    let request = PlanRequest::uniform(hot.rate, hot.ceiling, 0.0, shards).with_target(cfg.target);
    match plan(&request.with_min_salts(2)) {
        Ok(p) => p.salts,
        Err(KeyError::NoPlanWithinMaxSalts { .. } | KeyError::OverCapacity { .. }) => MAX_SALTS,
        Err(_) => 2,
    }
}

fn put(old: &Entry, new: Entry) -> Change {
    Change::Put {
        entry: Entry {
            epoch: old.epoch + 1,
            ..new
        },
        expected_epoch: Some(old.epoch),
    }
}

fn remove(entry: &Entry) -> Change {
    Change::Remove {
        key: entry.key.clone(),
        expected_epoch: entry.epoch,
    }
}

fn reason(hot: &Signal) -> String {
    let kind = match (hot.tenant, hot.kind) {
        (true, _) => "tenant",
        (false, Kind::Read) => "read",
        (false, Kind::Write) => "write",
    };
    format!(
        "{kind}-hot: {:.0}/s = {:.0}% of {:.0}/s ({})",
        hot.rate,
        hot.share() * 100.0,
        hot.ceiling,
        hot.source
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::keys::SaltPolicy;

    const W: f64 = 1_000.0;
    const R: f64 = 3_000.0;

    fn write(key: &str, rate: f64) -> Signal {
        Signal::new(key, Kind::Write, rate, W, "test")
    }

    fn read(key: &str, rate: f64) -> Signal {
        Signal::new(key, Kind::Read, rate, R, "test")
    }

    /// Applies changes to a model directory, checking each is conditional on what it read.
    fn apply(dir: &mut BTreeMap<String, Entry>, changes: Vec<Change>) {
        for c in changes {
            match c {
                Change::Put {
                    entry,
                    expected_epoch,
                } => {
                    assert_eq!(dir.get(&entry.key).map(|e| e.epoch), expected_epoch);
                    assert_eq!(entry.epoch, expected_epoch.unwrap_or(0) + 1);
                    entry.validate().unwrap();
                    dir.insert(entry.key.clone(), entry);
                }
                Change::Remove {
                    key,
                    expected_epoch,
                } => {
                    assert_eq!(dir.remove(&key).map(|e| e.epoch), Some(expected_epoch));
                }
            }
        }
    }

    fn step(dir: &mut BTreeMap<String, Entry>, signals: &[Signal], now: u64) {
        let current: Vec<Entry> = dir.values().cloned().collect();
        apply(dir, decide(signals, &current, now, &Thresholds::default()));
    }

    #[test]
    fn the_celebrity_post_is_salted_by_the_planner() {
        let mut dir = BTreeMap::new();
        step(&mut dir, &[write("p9", 2_400.0)], 0);
        assert_eq!(dir["p9"].salts.current(), 3, "2,400/3 = 800 = 80% of 1,000");
        step(&mut dir, &[write("p9", 10_000.0)], 10);
        assert_eq!(dir["p9"].salts.current(), 13, "10,000/13 ≈ 769 ≤ 800");
        assert_eq!(dir["p9"].since, 0, "growing S keeps the mitigation's age");
        step(&mut dir, &[write("p9", 2_000.0)], 20);
        assert_eq!(dir["p9"].salts.current(), 13, "S never shrinks while hot");
        step(&mut dir, &[write("p9", 1_000_000.0)], 30);
        assert_eq!(dir["p9"].salts.current(), MAX_SALTS);
    }

    #[test]
    fn reads_cache_tenants_limit_and_cold_keys_are_left_alone() {
        let mut dir = BTreeMap::new();
        let tenant = Signal::tenant("t1", 900.0, W, "admission");
        step(
            &mut dir,
            &[read("p1", 66_667.0), write("p2", 700.0), tenant],
            0,
        );
        assert_eq!(dir["p1"].mode, Mode::Cache);
        assert_eq!(dir["p1"].expires, Some(3_600));
        assert!(!dir.contains_key("p2"), "70% is under the on line");
        assert_eq!(dir["tenant#t1"].limit_per_second, Some(200));
        // A cached key that turns write-hot is salted.
        step(&mut dir, &[read("p1", 66_667.0), write("p1", 1_600.0)], 5);
        assert_eq!((dir["p1"].mode, dir["p1"].salts.current()), (Mode::Salt, 2));
        assert_eq!(dir["p1"].expires, None);
    }

    #[test]
    fn cool_down_waits_for_merge_delay_and_min_age_then_drains_salts() {
        let cfg = Thresholds::default();
        let mut dir = BTreeMap::new();
        step(&mut dir, &[write("p9", 2_400.0), read("p1", 9_000.0)], 0);
        step(&mut dir, &[], 60);
        assert_eq!(dir["p9"].calm_since, Some(60));
        step(&mut dir, &[], 60 + cfg.merge_delay - 1);
        assert!(dir.contains_key("p1"));
        step(&mut dir, &[], 60 + cfg.merge_delay);
        assert!(!dir.contains_key("p1"), "cache entry removed");
        let p9 = &dir["p9"];
        assert_eq!((p9.salts.current(), p9.salts.draining()), (1, Some(3)));
        let snapshot = crate::hot::Snapshot::new(dir.values().cloned(), 700);
        assert_eq!(snapshot.write_set("p9").unwrap(), ["p9"]);
        assert_eq!(snapshot.read_set("p9").unwrap().len(), 4);
        // Calm for ever: a draining entry is never removed by the controller.
        step(&mut dir, &[], 100_000);
        assert!(dir.contains_key("p9"));
        // Hot again while draining: back to S = 3 at once.
        step(&mut dir, &[write("p9", 2_400.0)], 100_010);
        // Writers are back on 3 sub-keys; the plain key written while draining is still read.
        assert_eq!(
            (dir["p9"].salts.current(), dir["p9"].salts.draining()),
            (3, Some(1))
        );
    }

    #[test]
    fn expired_entries_are_removed_and_ignored() {
        let mut dir = BTreeMap::new();
        let mut e = Entry::cache("p1", "r", 0, 10);
        e.epoch = 7;
        dir.insert("p1".into(), e);
        step(&mut dir, &[], 11);
        assert!(dir.is_empty());
        let e = Entry::cache("p1", "r", 0, 10);
        let changes = decide(&[read("p1", 9_000.0)], &[e], 11, &Thresholds::default());
        assert!(matches!(
            &changes[..],
            [Change::Put {
                expected_epoch: None,
                ..
            }]
        ));
    }

    #[test]
    fn salted_sub_keys_count_as_their_logical_key() {
        let mut dir = BTreeMap::new();
        step(&mut dir, &[write("p9", 2_400.0)], 0);
        // Writers now spread p9 over p9#0..2: the sampler sees three keys at 800/s each.
        let spread: Vec<_> = (0..3).map(|i| write(&format!("p9#{i}"), 800.0)).collect();
        for t in [10, 700, 5_000] {
            step(&mut dir, &spread, t);
            assert_eq!(dir["p9"].calm_since, None, "still hot as a whole at {t}");
        }
        assert_eq!(dir.len(), 1, "no entry for a sub-key");
        let folded = by_logical_key(&[write("p9#0", 1.0), write("p9#1", 2.0), read("p9#1", 4.0)]);
        let rates: Vec<_> = folded
            .iter()
            .map(|s| (s.key.as_str(), s.kind, s.rate))
            .collect();
        assert_eq!(rates, [("p9", Kind::Read, 4.0), ("p9", Kind::Write, 3.0)]);
    }

    #[test]
    fn insane_signals_are_ignored() {
        let bad = [
            write("p1", f64::NAN),
            write("p2", -5.0),
            Signal::new("p3", Kind::Write, 5_000.0, 0.0, "x"),
            write("", 5_000.0),
        ];
        assert!(decide(&bad, &[], 0, &Thresholds::default()).is_empty());
    }

    proptest! {
        /// Folding sub-keys keeps every unit of load: per kind, the total rate is unchanged,
        /// and no folded key is itself a sub-key.
        #[test]
        fn folding_sub_keys_preserves_the_total_rate(
            parts in prop::collection::vec((0u8..4, prop::option::of(0u16..8), any::<bool>(), 0.0f64..5_000.0), 0..40)
        ) {
            let signals: Vec<Signal> = parts.iter().map(|(k, salt, is_read, rate)| {
                let key = match salt { Some(i) => format!("k{k}#{i}"), None => format!("k{k}") };
                if *is_read { read(&key, *rate) } else { write(&key, *rate) }
            }).collect();
            let folded = by_logical_key(&signals);
            for kind in [Kind::Read, Kind::Write] {
                let total = |v: &[Signal]| v.iter().filter(|s| s.kind == kind).map(|s| s.rate).sum::<f64>();
                prop_assert!((total(&signals) - total(&folded)).abs() < 1e-6);
            }
            prop_assert!(folded.iter().all(|s| !s.key.contains('#')));
        }

        /// Against any rate trace: every change is conditional on the epoch it read, a key
        /// over the on line is always mitigated with enough S, a key that stays in the band
        /// between off and on never loses its mitigation, and a mitigation is only let go
        /// after merge_delay calm and min_age.
        #[test]
        fn never_flaps_and_always_covers_the_rate(
            trace in prop::collection::vec((0.0f64..3_000.0, 1u64..120), 1..80)
        ) {
            let cfg = Thresholds::default();
            let mut dir = BTreeMap::new();
            let mut now = 0u64;
            let mut last_hot_or_band: Option<u64> = None;
            let mut first_on: Option<u64> = None;
            for (rate, dt) in trace {
                now += dt;
                let before = dir.get("k").cloned();
                step(&mut dir, &[write("k", rate)], now);
                let share = rate / W;
                if share >= cfg.off_share {
                    last_hot_or_band = Some(now);
                }
                if share >= cfg.on_share {
                    first_on.get_or_insert(now);
                    let e = &dir["k"];
                    prop_assert_eq!(e.mode, Mode::Salt);
                    prop_assert!(rate / f64::from(e.salts.current()) <= cfg.target * W + 1e-6);
                } else if share >= cfg.off_share && before.is_some() {
                    let e = &dir["k"];
                    prop_assert_eq!(e.calm_since, None);
                    prop_assert_eq!(e.salts, before.as_ref().unwrap().salts, "no change in the band");
                }
                if let (Some(b), Some(after)) = (&before, dir.get("k"))
                    && b.salts.current() > 1 && after.salts.current() == 1
                {
                    let calm_from = after.calm_since.unwrap();
                    prop_assert!(now - calm_from >= cfg.merge_delay);
                    prop_assert!(now - after.since >= cfg.min_age);
                    prop_assert!(last_hot_or_band.unwrap() < calm_from);
                }
                if first_on.is_none() {
                    prop_assert!(dir.is_empty(), "nothing before the first crossing");
                }
            }
        }
    }
}
