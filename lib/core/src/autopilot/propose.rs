//! From per-slot load to the move proposals the governor ([`super::decide`]) judges.
//!
//! The balance plan ([`crate::slots::balance::plan`]) says which pieces, split at load
//! medians, would bring every owner under a utilisation. A control loop that runs while load
//! moves needs that line relative to the load of the moment, not fixed: at night every owner
//! is cool and nothing should move; at the peak the line must sit just above the mean, or the
//! hottest owner stays far above the others. [`Relative`] sets it from the mean owner load
//! each period: an owner is planned for once it is above `mean × (target + band)` and drained
//! to `mean × target`, and a destination is filled to at most `mean × (target − band)`. With
//! the defaults (1.1 and 0.1) an owner is moved from above 1.2 × the mean: the governor's
//! `max/mean ≤ 1.25` goal with room for one period of drift.
//!
//! A proposal's subject is the hot owner (the governor's *sustain* rule counts the periods in a
//! row an owner needed relief, whichever piece the plan picks as load shifts) and its
//! [`Span`] the range of that owner holding the piece, which the cooldown of recently moved
//! pieces is checked against. The executor moves the piece this period's plan carries
//! ([`MoveProposal::planned`]) and records the piece ([`MoveProposal::ran`]).
//!
//! ```
//! use std::collections::BTreeMap;
//! use heatsink_core::autopilot::propose::{moves, Relative};
//! use heatsink_core::slots::{RangeEntry, SlotMap, SlotRange};
//!
//! let mut map = SlotMap::initial("a", 1_000, false);
//! map.ranges = vec![
//!     RangeEntry::stable(SlotRange::new(0, 8191)?, "a", 1),
//!     RangeEntry::stable(SlotRange::new(8192, 16383)?, "b", 1),
//! ];
//! // All the load on a's half: a is at 2 × the mean, b idle.
//! let load: BTreeMap<u16, f64> = (0..8192u16).step_by(64).map(|s| (s, 10.0)).collect();
//! let proposals = moves(&map, &[], &load, &Relative::default());
//! assert_eq!(proposals.len(), 1);
//! assert_eq!(proposals[0].planned.from, "a");
//! assert_eq!((proposals[0].proposal.span.lo(), proposals[0].proposal.span.hi()), (0, 8191));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A Kinesis reshard plan ([`crate::reshard::plan`]) becomes proposals through [`reshard`]:
//! its splits, merges and hot keys (the last handed to the hot-key controller, never run).
//!
//! Limits: the proposals are as good as the load sample (slots without a sample carry no
//! load); one proposal per hot owner (the first piece the plan moves from it), because the
//! governor runs at most one operation a period anyway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Kind, Proposal, Span};
use crate::reshard::{Action, Plan};
use crate::slots::SlotMap;
use crate::slots::balance::{self, BalanceConfig, PlannedMove};

/// The balance line relative to the mean owner load (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Relative {
    /// What one owner serves at 100 %, in the load's unit (for [`Proposal::urgency`]).
    pub capacity: f64,
    /// Owners are drained to `mean × target` (> 1).
    pub target: f64,
    /// Hysteresis as a share of the mean: planned above `mean × (target + band)`, destinations
    /// filled to `mean × (target − band)`.
    pub band: f64,
}

impl Default for Relative {
    /// 1,000 units per owner, drained to 1.1 × the mean, hysteresis 0.1 × the mean.
    fn default() -> Self {
        Self {
            capacity: 1_000.0,
            target: 1.1,
            band: 0.1,
        }
    }
}

/// One move proposal and the piece this period's plan would move for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveProposal {
    /// What the governor judges: the hot range, [`Kind::Move`], the source's utilisation.
    pub proposal: Proposal,
    /// The piece, its owner and its destination.
    pub planned: PlannedMove,
}

impl MoveProposal {
    /// The operation as the executor records it once it runs ([`super::PilotState::started`]):
    /// the piece moved, not the range it came from, so the cooldown keeps the moved slots from
    /// moving again (back, or on) while the rest of the source's range may still be relieved.
    pub fn ran(&self) -> Proposal {
        let span = Span::new(
            u128::from(self.planned.slots.first),
            u128::from(self.planned.slots.last),
        )
        .unwrap_or(self.proposal.span);
        Proposal {
            span,
            ..self.proposal.clone()
        }
    }
}

/// The owners' loads under `map` for `load` (slot → load), every owner listed.
pub fn owner_loads(map: &SlotMap, load: &BTreeMap<u16, f64>) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for r in &map.ranges {
        *out.entry(r.owner.clone()).or_default() += balance::range_load(r.range, load);
    }
    out
}

/// The balance line for this period's `owners` loads (see the module docs); `None` when
/// there is nothing to balance (fewer than two owners, no load).
pub fn line(owners: &BTreeMap<String, f64>, rel: &Relative) -> Option<BalanceConfig> {
    let count = u32::try_from(owners.len()).ok()?;
    let total: f64 = owners.values().sum();
    if count < 2 || total <= 0.0 || rel.capacity <= 0.0 {
        return None;
    }
    let mean_util = total / f64::from(count) / rel.capacity;
    Some(BalanceConfig {
        capacity: rel.capacity,
        target: mean_util * rel.target,
        band: mean_util * rel.band,
    })
}

/// The move proposals for `map` under `load`: one per hot owner, most urgent first. `spare`
/// tables own nothing yet and may take moves (they count in the mean at load 0).
pub fn moves(
    map: &SlotMap,
    spare: &[String],
    load: &BTreeMap<u16, f64>,
    rel: &Relative,
) -> Vec<MoveProposal> {
    let mut owners = owner_loads(map, load);
    for s in spare {
        owners.entry(s.clone()).or_insert(0.0);
    }
    let Some(cfg) = line(&owners, rel) else {
        return vec![];
    };
    let plan = balance::plan(map, spare, load, &cfg);
    let mut seen: Vec<String> = vec![];
    let mut out = vec![];
    for planned in plan.moves {
        // The range of the source, in the map as it is now, that holds the piece.
        let Some(home) = map
            .ranges
            .iter()
            .find(|r| r.owner == planned.from && r.range.covers(&planned.slots))
        else {
            // A piece carved from a range an earlier move of this plan changed: next period.
            continue;
        };
        if seen.contains(&planned.from) {
            continue;
        }
        seen.push(planned.from.clone());
        let Ok(span) = Span::new(u128::from(home.range.first), u128::from(home.range.last)) else {
            continue;
        };
        let urgency = owners.get(&planned.from).copied().unwrap_or_default() / rel.capacity;
        out.push(MoveProposal {
            proposal: Proposal {
                subject: planned.from.clone(),
                span,
                kind: Kind::Move,
                urgency,
            },
            planned,
        });
    }
    out.sort_by(|a, b| b.proposal.urgency.total_cmp(&a.proposal.urgency));
    out
}

/// The proposals of a Kinesis reshard plan: a split per shard the plan splits (subject the
/// shard id, span its hash range, urgency its load), a merge per pair it merges (subject the
/// left shard, span both ranges, urgency `1 −` their combined load) and a salt hand-off per hot
/// key (subject the key, span its shard's range, urgency its load). `ranges` is shard id →
/// hash range, from the listing the plan was sampled with; a shard missing from it proposes
/// nothing.
pub fn reshard(plan: &Plan, ranges: &BTreeMap<String, (u128, u128)>) -> Vec<Proposal> {
    let span_of = |id: &str| ranges.get(id).and_then(|(lo, hi)| Span::new(*lo, *hi).ok());
    let load_of = |id: &str| {
        plan.shards
            .iter()
            .find(|s| s.shard_id == id)
            .map_or(0.0, |s| s.load)
    };
    let mut out = vec![];
    let mut merged: Vec<&str> = vec![];
    for s in &plan.shards {
        let Some(span) = span_of(&s.shard_id) else {
            continue;
        };
        match (s.action, s.merge_with.as_deref()) {
            (Action::Split, _) => out.push(Proposal {
                subject: s.shard_id.clone(),
                span,
                kind: Kind::Split,
                urgency: s.load,
            }),
            (Action::Merge, Some(other)) if !merged.contains(&s.shard_id.as_str()) => {
                let Some(o) = span_of(other) else { continue };
                let (lo, hi) = (span.lo().min(o.lo()), span.hi().max(o.hi()));
                let Ok(both) = Span::new(lo, hi) else {
                    continue;
                };
                let left = if span.lo() <= o.lo() {
                    &s.shard_id
                } else {
                    other
                };
                merged.extend([s.shard_id.as_str(), other]);
                out.push(Proposal {
                    subject: left.to_owned(),
                    span: both,
                    kind: Kind::Merge,
                    urgency: 1.0 - (s.load + load_of(other)),
                });
            }
            _ => {}
        }
    }
    for h in &plan.hot_keys {
        if let Some(span) = span_of(&h.shard_id) {
            out.push(Proposal {
                subject: h.partition_key.clone(),
                span,
                kind: Kind::Salt,
                urgency: h.load,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::slots::{RangeEntry, SlotRange};

    fn map_of(bounds: &[(u16, &str)]) -> SlotMap {
        let mut map = SlotMap::initial("x", 1_000, false);
        map.ranges = bounds
            .iter()
            .enumerate()
            .map(|(i, (first, owner))| {
                let last = bounds.get(i + 1).map_or(16_383, |(f, _)| f - 1);
                RangeEntry::stable(SlotRange::new(*first, last).expect("range"), *owner, 1)
            })
            .collect();
        map
    }

    #[test]
    fn an_even_layout_proposes_nothing_and_a_hot_range_is_proposed_with_its_home_span() {
        let map = map_of(&[(0, "a"), (4096, "b"), (8192, "c"), (12288, "d")]);
        let even: BTreeMap<u16, f64> = (0..16384u16).step_by(16).map(|s| (s, 1.0)).collect();
        assert!(moves(&map, &[], &even, &Relative::default()).is_empty());
        let mut hot = even.clone();
        for s in (4096..4200u16).step_by(16) {
            hot.insert(s, 60.0);
        }
        let p = moves(&map, &[], &hot, &Relative::default());
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].planned.from, "b");
        assert_eq!(
            (p[0].proposal.span.lo(), p[0].proposal.span.hi()),
            (4096, 8191)
        );
        assert!(
            SlotRange::new(4096, 8191)
                .expect("range")
                .covers(&p[0].planned.slots)
        );
    }

    #[test]
    fn a_reshard_plan_proposes_its_split_its_merge_once_and_hands_off_its_hot_key() {
        use crate::reshard::{HotKeyReport, ReshardState, ShardPlan};
        let line = |id: &str, load: f64, action: Action, with: Option<&str>| ShardPlan {
            shard_id: id.into(),
            load,
            unplaced: 0.0,
            peak: load,
            action,
            split_hash_key: None,
            split_hash_keys: vec![],
            merge_with: with.map(Into::into),
            refusal: None,
        };
        let plan = Plan {
            shards: vec![
                line("s0", 1.4, Action::Split, None),
                line("s1", 0.1, Action::Merge, Some("s2")),
                line("s2", 0.2, Action::Merge, Some("s1")),
                line("s3", 0.5, Action::None, None),
            ],
            ops: vec![],
            hot_keys: vec![HotKeyReport {
                shard_id: "s3".into(),
                partition_key: "celebrity".into(),
                load: 0.45,
                share: 0.9,
            }],
            predicted_max_over_mean: 1.0,
            midpoint_max_over_mean: 1.0,
            uniform_max_over_mean: 1.0,
            state: ReshardState::default(),
        };
        let ranges = BTreeMap::from([
            ("s0".to_owned(), (0, 99)),
            ("s1".to_owned(), (100, 199)),
            ("s2".to_owned(), (200, 299)),
            ("s3".to_owned(), (300, 399)),
        ]);
        let p = reshard(&plan, &ranges);
        let summary: Vec<(&str, Kind, u128, u128)> = p
            .iter()
            .map(|p| (p.subject.as_str(), p.kind, p.span.lo(), p.span.hi()))
            .collect();
        assert_eq!(
            summary,
            [
                ("s0", Kind::Split, 0, 99),
                ("s1", Kind::Merge, 100, 299),
                ("celebrity", Kind::Salt, 300, 399)
            ]
        );
        assert!((p[1].urgency - 0.7).abs() < 1e-9, "1 − (0.1 + 0.2)");
        // A shard the listing lacks proposes nothing.
        let partial = BTreeMap::from([("s3".to_owned(), (300, 399))]);
        assert_eq!(reshard(&plan, &partial).len(), 1);
    }

    proptest! {
        /// Every proposal comes from an owner above the line (mean × (target + band)), names a
        /// span that is one of its ranges holding the piece, and at most one proposal names an
        /// owner; the most urgent never fills its destination above mean × (target − band).
        #[test]
        fn proposals_come_only_from_owners_above_the_line_and_never_overfill(
            cuts in proptest::collection::btree_set(1u16..16383, 1..6),
            hot in proptest::collection::vec((0u16..16384, 1.0f64..500.0), 1..40),
        ) {
            let mut bounds = vec![0u16];
            bounds.extend(cuts);
            let names = ["a", "b", "c", "d", "e", "f", "g"];
            let pairs: Vec<(u16, &str)> = bounds.iter().zip(names).map(|(b, n)| (*b, n)).collect();
            let map = map_of(&pairs);
            let mut load: BTreeMap<u16, f64> = (0..16384u16).step_by(128).map(|s| (s, 1.0)).collect();
            for (s, l) in hot {
                *load.entry(s).or_default() += l;
            }
            let rel = Relative::default();
            let owners = owner_loads(&map, &load);
            let mean = owners.values().sum::<f64>() / owners.len() as f64;
            let props = moves(&map, &[], &load, &rel);
            let mut spans = std::collections::BTreeSet::new();
            for p in &props {
                let from = owners[&p.planned.from];
                prop_assert!(from > mean * (rel.target + rel.band) - 1e-9, "{from} vs mean {mean}");
                let home = map.ranges.iter().find(|r| {
                    u128::from(r.range.first) == p.proposal.span.lo()
                        && u128::from(r.range.last) == p.proposal.span.hi()
                });
                prop_assert!(home.is_some_and(|h| h.owner == p.planned.from && h.range.covers(&p.planned.slots)));
                prop_assert!(spans.insert(p.proposal.subject.clone()), "one proposal per owner");
                prop_assert_eq!(&p.proposal.subject, &p.planned.from);
            }
            // The most urgent is the plan's first move, made on today's loads: its destination
            // ends at or under the fill line.
            if let Some(p) = props.first() {
                prop_assert!(owners[&p.planned.to] + p.planned.load <= mean * (rel.target - rel.band) + 1e-6);
            }
        }
    }
}
