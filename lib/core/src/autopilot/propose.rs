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
//! row an owner needed relief, whichever pieces the plan picks as load shifts). It carries
//! every piece the plan moves off that owner from one region of the key space
//! ([`MoveProposal::pieces`]); its [`Span`] is their hull, clear of every cooling span. The
//! executor moves the pieces one after another as one operation (one in
//! flight), so a step in load (a stadium filling) is shed in one period rather than one piece
//! a period. The plan is made around the slots still cooling
//! ([`crate::slots::balance::plan_around`]): no piece overlaps one, and an owner that took a
//! piece recently sheds its other slots instead of waiting out the cooldown. An owner above its
//! drain target with nothing to run is reported *warming* ([`Proposal::warming`]), so a load
//! ramping up is acted on the period it crosses the line.
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
//! let proposals = moves(&map, &[], &load, &Relative::default(), &[]);
//! assert_eq!(proposals.len(), 1);
//! let a = &proposals[0];
//! assert!(a.pieces.iter().all(|p| p.from == "a" && p.to == "b"));
//! // Half of a's load moves: a was at 2 × the mean and b idle; both at the mean after.
//! assert_eq!(a.load(), 640.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A Kinesis reshard plan ([`crate::reshard::plan`]) becomes proposals through [`reshard`]:
//! its splits, merges and hot keys (the last handed to the hot-key controller, never run).
//!
//! Limits: the proposals are as good as the load sample (slots without a sample carry no
//! load); one proposal per hot owner; a piece whose hull with the others would overlap a
//! cooling span waits for a later period; an owner whose load sits on slots no destination can
//! take is left over its line (the balance plan's `stuck`: salt or sub-shard those keys).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    Decision, Kind, Period, PilotConfig, PilotError, PilotState, Proposal, Span, Started, decide,
};
use crate::reshard::{Action, Plan};
use crate::slots::balance::{self, BalanceConfig, PlannedMove};
use crate::slots::{LAST_SLOT, SlotMap, SlotRange};

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

/// One move proposal and the pieces this period's plan would move for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveProposal {
    /// What the governor judges: the hull of the pieces (clear of every cooling span),
    /// [`Kind::Move`], the source's utilisation (for a warming owner: its first range, and
    /// [`Proposal::warming`]).
    pub proposal: Proposal,
    /// Every piece the plan moves off the hot owner, in the plan's order, each with its
    /// destination; empty only for a warming owner. The executor moves them one after another
    /// as one operation, so a step in load is shed in one period, not one piece a period.
    pub pieces: Vec<PlannedMove>,
}

impl MoveProposal {
    /// The load the pieces carry off the hot owner.
    pub fn load(&self) -> f64 {
        self.pieces.iter().map(|p| p.load).sum()
    }
}

/// The move proposals a period runs as its one operation: the decision's (run or dry run)
/// and the joined ones ([`Period::joined`]), in that order; empty when nothing runs.
pub fn chosen<'a>(period: &Period, planned: &'a [MoveProposal]) -> Vec<&'a MoveProposal> {
    let first = match &period.decision {
        Decision::Run(p) | Decision::DryRun(p) => p,
        Decision::Hold(_) | Decision::Idle => return vec![],
    };
    std::iter::once(first)
        .chain(&period.joined)
        .filter_map(|p| planned.iter().find(|m| m.proposal.subject == p.subject))
        .collect()
}

/// The operation `batch` ([`chosen`]) as the executor records it once it starts (with
/// [`super::PilotState::record`]) as `id` at `now_ms`, before its first move: the hull of the
/// proposals, and every piece, which the cooldown then covers, so moved slots do not move again
/// (back, or on) for a while while the slots left on their sources may still be relieved.
/// `None` for an empty batch.
pub fn started(batch: &[&MoveProposal], id: &str, now_ms: u64) -> Option<Started> {
    let first = batch.first()?;
    let lo = batch.iter().map(|m| m.proposal.span.lo()).min()?;
    let hi = batch.iter().map(|m| m.proposal.span.hi()).max()?;
    Some(Started {
        id: id.to_owned(),
        span: Span::new(lo, hi).unwrap_or(first.proposal.span),
        kind: Kind::Move,
        at_ms: now_ms,
        op: None,
        pieces: batch
            .iter()
            .flat_map(|m| &m.pieces)
            .filter_map(|p| span_of(p.slots))
            .collect(),
        to: batch
            .iter()
            .flat_map(|m| &m.pieces)
            .filter(|p| span_of(p.slots).is_some())
            .map(|p| p.to.clone())
            .collect(),
    })
}

/// One period of a slot directory's loop, decided ([`directory_period`]): what the plan
/// proposed, what the governor decided, and the operation an acting executor records before
/// its first move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryPeriod {
    /// Every proposal of the period (runnable and warming), most urgent first.
    pub planned: Vec<MoveProposal>,
    /// The governor's decision; its `streaks` are the next period's.
    pub period: Period,
    /// The operation to record ([`super::PilotState::record`]) before its first move: `Some`
    /// only when the decision runs (not for a dry run, a hold or an idle period).
    pub operation: Option<Started>,
}

impl DirectoryPeriod {
    /// The moves the operation makes, in order: every piece of the decision's proposal, then
    /// of each joined one (empty unless the decision runs).
    pub fn pieces(&self) -> Vec<&PlannedMove> {
        if self.operation.is_none() {
            return vec![];
        }
        chosen(&self.period, &self.planned)
            .into_iter()
            .flat_map(|m| &m.pieces)
            .collect()
    }
}

/// Decides one period of a slot directory's loop at `now_ms`, from its map, `spare` tables,
/// per-slot `load` (a samples file, or [`estimate_slot_load`]) and the loop's `state`:
/// proposals planned around the spans still cooling, the governor's decision under `cfg`,
/// and the operation (id `autopilot-<now_ms>`) with every piece it moves. Pure: the
/// executor saves the state with the operation in flight, then moves the pieces.
pub fn directory_period(
    map: &SlotMap,
    spare: &[String],
    load: &BTreeMap<u16, f64>,
    rel: &Relative,
    cfg: &PilotConfig,
    state: &PilotState,
    now_ms: u64,
) -> Result<DirectoryPeriod, PilotError> {
    let cooling = state.cooling(cfg.cooldown_ms, now_ms);
    let planned = moves(map, spare, load, rel, &cooling);
    let proposals: Vec<Proposal> = planned.iter().map(|m| m.proposal.clone()).collect();
    let period = decide(cfg, state, &proposals, now_ms)?;
    let operation = match &period.decision {
        Decision::Run(_) => started(
            &chosen(&period, &planned),
            &format!("autopilot-{now_ms}"),
            now_ms,
        ),
        _ => None,
    };
    Ok(DirectoryPeriod {
        planned,
        period,
        operation,
    })
}

/// A slot range as a span.
fn span_of(r: SlotRange) -> Option<Span> {
    Span::new(u128::from(r.first), u128::from(r.last)).ok()
}

/// The owners' loads under `map` for `load` (slot → load), every owner listed.
pub fn owner_loads(map: &SlotMap, load: &BTreeMap<u16, f64>) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for r in &map.ranges {
        *out.entry(r.owner.clone()).or_default() += balance::range_load(r.range, load);
    }
    out
}

/// Per-slot load for [`moves`] from what production measures: `measured`, each owner's total
/// load (its table's consumed capacity from CloudWatch, units/s), and `sampled`, the load the
/// sampler saw on the hottest slots (a top-K of keys, mapped to their slots). Each owner's
/// sampled slots keep their load (scaled down together if they add up to more than the owner's
/// measured total) and the rest of the measured total is spread evenly over the owner's other
/// slots, so every owner's estimate adds up to its measured total. An owner missing from
/// `measured` counts what was sampled on it. A negative or non-finite figure counts as 0.
///
/// The estimate is as good as its two inputs: the spread part has no shape (a warm region the
/// sampler did not name looks flat), so the plan cuts pieces by the sampled hot slots and by
/// even shares of the rest.
pub fn estimate_slot_load(
    map: &SlotMap,
    measured: &BTreeMap<String, f64>,
    sampled: &BTreeMap<u16, f64>,
) -> BTreeMap<u16, f64> {
    let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let mut out: BTreeMap<u16, f64> = BTreeMap::new();
    let mut owners: BTreeMap<&str, Vec<SlotRange>> = BTreeMap::new();
    for r in &map.ranges {
        owners.entry(r.owner.as_str()).or_default().push(r.range);
    }
    for (owner, ranges) in owners {
        let hot: Vec<(u16, f64)> = ranges
            .iter()
            .flat_map(|r| sampled.range(r.first..=r.last))
            .map(|(s, l)| (*s, clean(*l)))
            .filter(|(_, l)| *l > 0.0)
            .collect();
        let hot_total: f64 = hot.iter().map(|(_, l)| l).sum();
        let total = measured.get(owner).map_or(hot_total, |m| clean(*m));
        let scale = if hot_total > total && hot_total > 0.0 {
            total / hot_total
        } else {
            1.0
        };
        for (slot, l) in &hot {
            out.insert(*slot, l * scale);
        }
        let slots: u64 = ranges.iter().map(|r| u64::from(r.last - r.first) + 1).sum();
        let cold = slots.saturating_sub(hot.len() as u64);
        let rest = (total - hot_total * scale).max(0.0);
        if cold == 0 || rest <= 0.0 {
            continue;
        }
        let each = rest / cold as f64;
        for r in &ranges {
            for slot in r.first..=r.last {
                out.entry(slot).or_insert(each);
            }
        }
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

/// The move proposals for `map` under `load`, most urgent first: one per owner over the line,
/// carrying the pieces the plan moves off it, clear of the `cooling` spans
/// ([`super::PilotState::cooling`]); and one warming proposal per owner above its drain target
/// with nothing to run (under the line, or every piece cooling). `spare` tables own nothing
/// yet and may take moves (they count in the mean at load 0).
pub fn moves(
    map: &SlotMap,
    spare: &[String],
    load: &BTreeMap<u16, f64>,
    rel: &Relative,
    cooling: &[Span],
) -> Vec<MoveProposal> {
    let mut owners = owner_loads(map, load);
    for s in spare {
        owners.entry(s.clone()).or_insert(0.0);
    }
    let Some(cfg) = line(&owners, rel) else {
        return vec![];
    };
    let pinned: Vec<SlotRange> = cooling
        .iter()
        .filter(|c| c.lo() <= u128::from(LAST_SLOT))
        .map(|c| SlotRange {
            first: u16::try_from(c.lo()).unwrap_or(LAST_SLOT),
            last: u16::try_from(c.hi()).unwrap_or(LAST_SLOT),
        })
        .collect();
    let plan = balance::plan_around(map, spare, load, &cfg, &pinned);
    let urgency = |owner: &str| owners.get(owner).copied().unwrap_or_default() / rel.capacity;
    let mut out: Vec<MoveProposal> = vec![];
    for planned in plan.moves {
        let Some(piece) = span_of(planned.slots) else {
            continue;
        };
        // Only a piece the source holds now (the plan carves sources only, but check).
        if !map
            .ranges
            .iter()
            .any(|r| r.owner == planned.from && r.range.covers(&planned.slots))
        {
            continue;
        }
        if let Some(m) = out.iter_mut().find(|m| m.proposal.subject == planned.from) {
            // A later piece off the same owner joins its operation while the hull the governor
            // checks stays clear of every cooling span (the batch stays one region of the key
            // space); any other waits a period.
            let span = m.proposal.span;
            if let Ok(hull) = Span::new(span.lo().min(piece.lo()), span.hi().max(piece.hi()))
                && !cooling.iter().any(|c| c.overlaps(&hull))
            {
                m.proposal.span = hull;
                m.pieces.push(planned);
            }
            continue;
        }
        out.push(MoveProposal {
            proposal: Proposal {
                subject: planned.from.clone(),
                span: piece,
                kind: Kind::Move,
                urgency: urgency(&planned.from),
                warming: false,
            },
            pieces: vec![planned],
        });
    }
    // Owners above the drain target with nothing to run count towards their streak.
    let drain = cfg.target * cfg.capacity;
    for (owner, l) in &owners {
        if *l <= drain || out.iter().any(|m| m.proposal.subject == *owner) {
            continue;
        }
        let Some(first) = map.ranges.iter().find(|r| r.owner == *owner) else {
            continue;
        };
        let Some(span) = span_of(first.range) else {
            continue;
        };
        out.push(MoveProposal {
            proposal: Proposal {
                subject: owner.clone(),
                span,
                kind: Kind::Move,
                urgency: urgency(owner),
                warming: true,
            },
            pieces: vec![],
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
                warming: false,
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
                    warming: false,
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
                warming: false,
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
    fn an_even_layout_proposes_nothing_and_a_hot_range_is_proposed_with_its_pieces_hull() {
        let map = map_of(&[(0, "a"), (4096, "b"), (8192, "c"), (12288, "d")]);
        let even: BTreeMap<u16, f64> = (0..16384u16).step_by(16).map(|s| (s, 1.0)).collect();
        assert!(moves(&map, &[], &even, &Relative::default(), &[]).is_empty());
        let mut hot = even.clone();
        for s in (4096..4200u16).step_by(16) {
            hot.insert(s, 60.0);
        }
        let p = moves(&map, &[], &hot, &Relative::default(), &[]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].pieces.iter().all(|m| m.from == "b"));
        let span = p[0].proposal.span;
        assert!(span.lo() >= 4096 && span.hi() <= 8191, "{span:?}");
        for m in &p[0].pieces {
            assert!(
                span.lo() <= u128::from(m.slots.first) && u128::from(m.slots.last) <= span.hi()
            );
        }
    }

    /// An owner that took a piece recently sheds its other slots, not the cooling piece; with
    /// every piece cooling it is reported warming, never run.
    #[test]
    fn a_cooling_piece_is_planned_around_and_an_owner_with_only_cooling_load_is_warming() {
        let map = map_of(&[(0, "a"), (4096, "b"), (8192, "c"), (12288, "d")]);
        let mut load: BTreeMap<u16, f64> = (0..16384u16).step_by(16).map(|s| (s, 1.0)).collect();
        for s in (4096..4200u16).step_by(16) {
            load.insert(s, 60.0);
        }
        let free = moves(&map, &[], &load, &Relative::default(), &[]);
        let hot_slots = Span::new(4096, 4199).expect("span");
        let around = moves(&map, &[], &load, &Relative::default(), &[hot_slots]);
        assert!(!around.is_empty());
        for m in &around {
            assert!(
                !m.proposal.span.overlaps(&hot_slots) || m.proposal.warming,
                "{m:?}"
            );
            for p in &m.pieces {
                let piece =
                    Span::new(u128::from(p.slots.first), u128::from(p.slots.last)).expect("span");
                assert!(!piece.overlaps(&hot_slots), "{p:?}");
            }
        }
        assert_ne!(free, around);
        // b's whole range cooling: nothing to shed, b is warming.
        let all = Span::new(4096, 8191).expect("span");
        let cooled = moves(&map, &[], &load, &Relative::default(), &[all]);
        assert_eq!(cooled.len(), 1, "{cooled:?}");
        assert!(cooled[0].proposal.warming && cooled[0].pieces.is_empty());
        assert_eq!(cooled[0].proposal.subject, "b");
    }

    /// A step on one owner (a stadium filling: 3,000 units on 64 slots over a base of 1,600)
    /// needs several pieces moved to several owners: one proposal carries every move the plan
    /// makes, and after it the stadium's owner is down from 5.5 to under 1.5 × the mean, in one
    /// operation (the plan's median pieces are the limit, not the operation).
    #[test]
    fn a_step_on_one_owner_is_shed_by_one_proposal_carrying_every_piece() {
        let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let bounds: Vec<(u16, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| ((i * 2048) as u16, *n))
            .collect();
        let map = map_of(&bounds);
        let mut load: BTreeMap<u16, f64> = (0..16384u16).step_by(16).map(|s| (s, 1.6)).collect();
        // 3,000 units on 64 slots of c's range (c owns 4096..=6143).
        for s in 5000..5064u16 {
            *load.entry(s).or_default() += 46.875;
        }
        let p = moves(&map, &[], &load, &Relative::default(), &[]);
        assert_eq!(p.len(), 1, "{p:?}");
        let batch = &p[0];
        assert!(
            batch.pieces.len() >= 2,
            "a step needs several pieces: {batch:?}"
        );
        let rel = Relative::default();
        let mut owners = owner_loads(&map, &load);
        let cfg = line(&owners, &rel).expect("line");
        assert_eq!(batch.pieces, balance::plan(&map, &[], &load, &cfg).moves);
        for m in &batch.pieces {
            *owners.get_mut(&m.from).expect("source") -= m.load;
            *owners.get_mut(&m.to).expect("destination") += m.load;
        }
        let mean = owners.values().sum::<f64>() / owners.len() as f64;
        for (o, l) in &owners {
            let bound = if o == "c" { 1.5 } else { 1.0 };
            assert!(
                *l <= bound * mean,
                "{o} at {:.2} × the mean after the batch",
                l / mean
            );
        }
        let destinations: std::collections::BTreeSet<&str> =
            batch.pieces.iter().map(|m| m.to.as_str()).collect();
        assert!(
            destinations.len() >= 2,
            "spread over several owners: {destinations:?}"
        );
    }

    /// A directory period decided as data: a dry run names the move and records nothing; an
    /// acting one returns the operation with every piece, and once it is recorded the next
    /// period holds.
    #[test]
    fn a_directory_period_returns_the_operation_to_record_only_when_it_runs() {
        let map = map_of(&[(0, "a"), (8192, "b")]);
        let load: BTreeMap<u16, f64> = (0..8192u16).step_by(64).map(|s| (s, 10.0)).collect();
        let rel = Relative::default();
        let dry = PilotConfig {
            sustain: 1,
            ..PilotConfig::default()
        };
        let state = PilotState::default();
        let d = directory_period(&map, &[], &load, &rel, &dry, &state, 60_000).expect("period");
        assert!(matches!(d.period.decision, Decision::DryRun(_)));
        assert!(d.operation.is_none() && d.pieces().is_empty());
        let act = PilotConfig { act: true, ..dry };
        let d = directory_period(&map, &[], &load, &rel, &act, &state, 60_000).expect("period");
        let op = d.operation.clone().expect("runs");
        assert_eq!(op.id, "autopilot-60000");
        assert_eq!(op.pieces.len(), d.pieces().len());
        assert!(d.pieces().iter().all(|p| p.from == "a" && p.to == "b"));
        // Every piece with its target, in order: what a later period continues from.
        let recorded: Vec<(Span, &str)> = op
            .pieces
            .iter()
            .copied()
            .zip(op.to.iter().map(String::as_str))
            .collect();
        let planned: Vec<(Span, &str)> = d
            .pieces()
            .iter()
            .map(|p| (span_of(p.slots).expect("span"), p.to.as_str()))
            .collect();
        assert_eq!(recorded, planned);
        let mut state = state;
        state.record(op);
        let next = directory_period(&map, &[], &load, &rel, &act, &state, 120_000).expect("period");
        assert!(matches!(next.period.decision, Decision::Hold(_)));
        assert!(next.operation.is_none());
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

    /// An owner measured at 1,000 units/s with one sampled hot slot at 600: the slot keeps
    /// 600 and the other 400 are spread over the owner's other slots; an unmeasured owner
    /// counts its samples; a sample above the measured total is scaled down to it.
    #[test]
    fn the_estimate_keeps_sampled_slots_and_spreads_the_measured_rest() {
        let map = map_of(&[(0, "a"), (8192, "b"), (12288, "c")]);
        let measured = BTreeMap::from([("a".to_owned(), 1_000.0), ("c".to_owned(), 50.0)]);
        let sampled = BTreeMap::from([(100u16, 600.0), (9000, 30.0), (13000, 80.0)]);
        let est = estimate_slot_load(&map, &measured, &sampled);
        assert!((est[&100] - 600.0).abs() < 1e-9);
        assert!((est[&0] - 400.0 / 8191.0).abs() < 1e-9);
        let owners = owner_loads(&map, &est);
        assert!((owners["a"] - 1_000.0).abs() < 1e-6);
        assert!((owners["b"] - 30.0).abs() < 1e-9, "unmeasured: its samples");
        assert!(
            (owners["c"] - 50.0).abs() < 1e-9,
            "scaled down to the measured total"
        );
        assert!((est[&13000] - 50.0).abs() < 1e-9);
    }

    proptest! {
        /// The estimate adds up to each measured owner's total (or its samples when it has no
        /// measure or less than them), and never moves load between owners.
        #[test]
        fn the_estimate_adds_up_to_each_owners_measure(
            cuts in proptest::collection::btree_set(1u16..16383, 1..4),
            measured in proptest::collection::vec(prop::option::of(0.0f64..5_000.0), 5),
            hot in proptest::collection::vec((0u16..16384, 0.0f64..2_000.0), 0..20),
        ) {
            let mut bounds = vec![0u16];
            bounds.extend(cuts);
            let names = ["a", "b", "c", "d", "e"];
            let pairs: Vec<(u16, &str)> = bounds.iter().zip(names).map(|(b, n)| (*b, n)).collect();
            let map = map_of(&pairs);
            let measured: BTreeMap<String, f64> = names
                .iter()
                .zip(&measured)
                .filter_map(|(n, m)| m.map(|m| ((*n).to_owned(), m)))
                .collect();
            let sampled: BTreeMap<u16, f64> = hot.into_iter().collect();
            let est = estimate_slot_load(&map, &measured, &sampled);
            let by_owner = owner_loads(&map, &est);
            let sampled_on = owner_loads(&map, &sampled);
            for (o, l) in &by_owner {
                let want = match measured.get(o) {
                    Some(m) => *m,
                    None => sampled_on[o],
                };
                // All of an owner's slots sampled: only the samples (scaled) remain.
                prop_assert!(*l <= want + 1e-6 * want.max(1.0), "{o}: {l} over {want}");
                let all_hot = map.ranges.iter().filter(|r| &r.owner == o)
                    .all(|r| (r.range.first..=r.range.last).all(|s| sampled.get(&s).is_some_and(|x| *x > 0.0)));
                if !all_hot {
                    prop_assert!((l - want).abs() <= 1e-6 * want.max(1.0), "{o}: {l} vs {want}");
                }
            }
        }

        /// Every runnable proposal comes from an owner above the line (mean × (target + band)),
        /// its pieces are that owner's, disjoint and clear of every cooling span, inside its span
        /// which is clear of them too; every warming one is above the drain target with no pieces; one proposal per
        /// owner; the most urgent never fills its destination above mean × (target − band).
        #[test]
        fn proposals_come_only_from_owners_above_the_line_and_never_overfill(
            cuts in proptest::collection::btree_set(1u16..16383, 1..6),
            hot in proptest::collection::vec((0u16..16384, 1.0f64..500.0), 1..40),
            cooling in proptest::collection::vec((0u128..16384, 0u128..3000), 0..3),
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
            let cooling: Vec<Span> = cooling.iter().map(|(lo, w)| Span::new(*lo, lo + w).expect("span")).collect();
            let rel = Relative::default();
            let owners = owner_loads(&map, &load);
            let mean = owners.values().sum::<f64>() / owners.len() as f64;
            let props = moves(&map, &[], &load, &rel, &cooling);
            let mut subjects = std::collections::BTreeSet::new();
            for p in &props {
                let from = owners[&p.proposal.subject];
                prop_assert!(subjects.insert(p.proposal.subject.clone()), "one proposal per owner");
                if p.proposal.warming {
                    prop_assert!(p.pieces.is_empty());
                    prop_assert!(from > mean * rel.target - 1e-9, "{from} vs mean {mean}");
                    continue;
                }
                prop_assert!(!p.pieces.is_empty());
                prop_assert!(from > mean * (rel.target + rel.band) - 1e-9, "{from} vs mean {mean}");
                prop_assert!(!cooling.iter().any(|c| c.overlaps(&p.proposal.span)), "span cooling");
                prop_assert!(p.pieces.iter().all(|m| p.proposal.span.lo() <= u128::from(m.slots.first) && u128::from(m.slots.last) <= p.proposal.span.hi()));
                // Every piece is the owner's, clear of every cooling span, and no two overlap:
                // the batch moves each slot at most once.
                for (i, m) in p.pieces.iter().enumerate() {
                    prop_assert_eq!(&m.from, &p.proposal.subject);
                    prop_assert!(map.ranges.iter().any(|r| r.owner == m.from && r.range.covers(&m.slots)));
                    let piece = span_of(m.slots).expect("span");
                    prop_assert!(!cooling.iter().any(|c| c.overlaps(&piece)), "piece cooling");
                    prop_assert_ne!(&m.to, &m.from);
                    for other in &p.pieces[i + 1..] {
                        prop_assert!(m.slots.last < other.slots.first || other.slots.last < m.slots.first);
                    }
                }
                // What it records for the cooldown is exactly the pieces.
                let op = started(&[p], "op", 0).expect("started");
                prop_assert_eq!(op.cooled().len(), p.pieces.len());
            }
            // Every owner above its drain target is counted, runnable or warming.
            for (o, l) in &owners {
                if *l > mean * rel.target * (1.0 + 1e-9) {
                    prop_assert!(subjects.contains(o), "{o} at {l} (mean {mean}) not proposed");
                }
            }
            // The most urgent runnable one is the plan's first move, made on today's loads: its
            // destination ends at or under the fill line.
            if let Some(p) = props.iter().find(|p| !p.proposal.warming) {
                let first = &p.pieces[0];
                prop_assert!(owners[&first.to] + first.load <= mean * (rel.target - rel.band) + 1e-6);
            }
        }
    }
}
