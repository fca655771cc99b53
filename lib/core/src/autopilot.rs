//! The autopilot's governor: of the operations the load plans propose this period (a Kinesis
//! split or merge from [`crate::reshard::plan`], a slot move from
//! [`crate::slots::balance`]), which one runs now, or why none does — as data.
//!
//! The plans say *what* would help; the governor decides *whether to act*, with the rules that
//! keep a control loop from doing harm when load moves:
//!
//! - **Kill switch**: a paused pilot ([`PilotState::paused`], a flag an operator sets) runs and
//!   hands off nothing; the executor reads the flag every period, so a pause holds within one.
//! - **One operation in flight** per stream or directory (one governor each): while one runs,
//!   nothing else starts. One operation may carry up to [`PilotConfig::per_operation`] eligible
//!   proposals ([`Period::joined`]), which a directory's executor runs one after another (a
//!   stream's executor takes 1: Kinesis runs one reshard at a time).
//! - **Sustained load, not a spike**: a proposal runs only once the plans have proposed the
//!   same kind of operation for the same subject (a shard, a hot owner: [`Proposal::subject`])
//!   for [`PilotConfig::sustain`] consecutive periods. A plan may also report a subject that is
//!   *warming* ([`Proposal::warming`]: above its drain target, not yet over its line): that
//!   period counts towards the streak but nothing runs. With `sustain` 2 a load that jumps
//!   over the line waits one period (a one-period spike never acts), and a load that ramps up
//!   through the warm band acts the period it crosses the line.
//! - **Cooldown per span**: no operation on a span that overlaps one operated on less than
//!   [`PilotConfig::cooldown_ms`] ago (children of a split overlap their parent's span, so a
//!   fresh split is neither merged back nor split again at once).
//! - **Budgets**: at most [`PilotConfig::per_hour`] and [`PilotConfig::per_day`] operations
//!   started in any rolling hour and day (Kinesis' `UpdateShardCount` allows 10 per rolling 24 h;
//!   the default day budget is that, whichever API the executor uses).
//! - **Dry run** ([`PilotConfig::act`] false, the default): the decision is made and reported
//!   ([`Decision::DryRun`]) but never run, so a team can watch a loop before letting it act.
//! - **A single hot key** is not a capacity problem: proposals of [`Kind::Salt`] are handed to
//!   the hot-key controller every period ([`Period::handoffs`]), never budgeted or run here.
//!
//! Of the eligible proposals the most urgent (highest utilisation) runs. Every proposal that
//! does not run is listed with why ([`Period::waiting`]): the executor logs each as one line and
//! a metric.
//!
//! ```
//! use heatsink_core::autopilot::{decide, Decision, Kind, PilotConfig, PilotState, Proposal, Span};
//!
//! let cfg = PilotConfig { act: true, ..PilotConfig::default() };
//! let mut state = PilotState::default();
//! let hot = Proposal {
//!     subject: "shardId-000000000001".into(),
//!     span: Span::new(0, 99)?,
//!     kind: Kind::Split,
//!     urgency: 1.4,
//!     warming: false,
//! };
//! // First period: proposed once, sustain is 2: nothing runs yet.
//! let p = decide(&cfg, &state, std::slice::from_ref(&hot), 60_000)?;
//! assert_eq!(p.decision, Decision::Idle);
//! state.streaks = p.streaks;
//! // Second period: it runs; the executor records it.
//! let p = decide(&cfg, &state, std::slice::from_ref(&hot), 120_000)?;
//! assert_eq!(p.decision, Decision::Run(hot.clone()));
//! state.streaks = p.streaks;
//! state.started("split-1", &hot, 120_000);
//! // While it is in flight nothing else starts.
//! let p = decide(&cfg, &state, std::slice::from_ref(&hot), 180_000)?;
//! assert!(matches!(p.decision, Decision::Hold(_)));
//! # Ok::<(), heatsink_core::autopilot::PilotError>(())
//! ```
//!
//! Limits: the governor sees only the proposals it is given (what the plans sampled); spans
//! are inclusive `u128` intervals (a Kinesis hash range, or a slot range widened); the operation
//! history it keeps is the last 24 h.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::reshard::{Op, ReshardState};

pub mod progress;
pub mod propose;

/// One hour, ms.
const HOUR_MS: u64 = 3_600_000;
/// One day, ms: the history kept and the day budget's window.
const DAY_MS: u64 = 24 * HOUR_MS;

/// A configuration the governor refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PilotError {
    /// `sustain` is 0: every proposal would run the period it appears.
    #[error("autopilot sustain is 0; it must be at least 1 period")]
    NoSustain,
    /// The hour budget exceeds the day budget.
    #[error("autopilot budget of {per_hour} per hour exceeds {per_day} per day")]
    Budget {
        /// Operations per rolling hour.
        per_hour: u32,
        /// Operations per rolling day.
        per_day: u32,
    },
    /// `per_operation` is 0: no operation could carry anything.
    #[error("autopilot per_operation is 0; it must be at least 1 proposal")]
    NoPerOperation,
    /// A span whose low end is above its high end.
    #[error("span {lo}..={hi} is empty")]
    EmptySpan {
        /// Low end.
        lo: u128,
        /// High end.
        hi: u128,
    },
}

/// An inclusive interval of the key space an operation acts on: a Kinesis hash-key range, or
/// a slot range (`u16` slots widened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Span {
    lo: u128,
    hi: u128,
}

impl Span {
    /// The span `lo..=hi`.
    pub fn new(lo: u128, hi: u128) -> Result<Self, PilotError> {
        if lo > hi {
            return Err(PilotError::EmptySpan { lo, hi });
        }
        Ok(Self { lo, hi })
    }

    /// Low end.
    pub fn lo(&self) -> u128 {
        self.lo
    }

    /// High end.
    pub fn hi(&self) -> u128 {
        self.hi
    }

    /// Whether the two spans share a key.
    pub fn overlaps(&self, other: &Span) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }
}

/// What a proposal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Split a hot span (a Kinesis `SplitShard`, a slot range moved in part).
    Split,
    /// Merge two cold neighbours (their union is the span).
    Merge,
    /// Move a span to a less loaded owner.
    Move,
    /// One key is the load: salt it (the hot-key controller's job).
    Salt,
}

/// One operation a load plan proposes this period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// What needs the operation: a shard id, a hot owner. The sustain rule counts the periods
    /// in a row this subject needed this kind of operation (the span may shift as load moves:
    /// a hot owner's piece to shed changes a little every period).
    pub subject: String,
    /// What it acts on.
    pub span: Span,
    /// What it does.
    pub kind: Kind,
    /// How badly it is needed: the utilisation of the span (1.0 = at capacity; for a merge,
    /// `1 −` the pair's combined utilisation, so the coldest pair ranks first among merges).
    pub urgency: f64,
    /// The period counts towards the subject's sustain rule but there is nothing to run
    /// ([`Wait::Warming`]): the subject is above its drain target and not over its line, or over
    /// it with every piece it could shed still cooling. A load ramping up through the band is
    /// then acted on the period it crosses the line, not `sustain − 1` periods later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warming: bool,
}

/// An operation started by the executor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The executor's id for it (move id, reshard id).
    pub id: String,
    /// What it acts on.
    pub span: Span,
    /// What it does.
    pub kind: Kind,
    /// When it started, ms.
    pub at_ms: u64,
    /// The Kinesis call it made, for a stream's loop: the shard map showing its result
    /// ([`Op::is_done`]) is what ends it. `None` for a slot move (the move's record ends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<Op>,
    /// The pieces a directory's operation moves, when it moves several (one hot owner's load
    /// shed in one operation): the cooldown covers these, not the whole [`Started::span`], so
    /// the slots between them that stayed may still be relieved. Empty: the span is the piece.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<Span>,
    /// Where each of [`Started::pieces`] goes, in the same order (a directory's operation):
    /// with the pieces, what a later period needs to prove from the move records how far the
    /// operation got and to continue it ([`progress::progress`]). Empty for a stream's
    /// operation, and for one recorded before targets were kept (an operator finishes it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
}

impl Started {
    /// What the cooldown covers: the pieces moved, or the span when there are none listed.
    pub fn cooled(&self) -> &[Span] {
        if self.pieces.is_empty() {
            std::slice::from_ref(&self.span)
        } else {
            &self.pieces
        }
    }
}

/// What the executor persists between periods (one per stream or directory).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PilotState {
    /// The kill switch: set (with who and why) to stop the loop within one period.
    pub paused: Option<String>,
    /// The operation running now, if any.
    pub in_flight: Option<Started>,
    /// Operations started in the last 24 h, oldest first.
    pub history: Vec<Started>,
    /// Consecutive periods each (subject, kind) has been proposed, up to the last period
    /// (stored as a list of `[subject, kind, periods]`: JSON maps take only text keys).
    #[serde(with = "streak_list")]
    pub streaks: BTreeMap<(String, Kind), u32>,
    /// A stream's loop: the reshard plan's state carried between periods (since when each
    /// adjacent pair has been cold enough to merge). Empty for a directory's loop.
    #[serde(default)]
    pub reshard: ReshardState,
}

/// [`PilotState::streaks`] as a JSON list of `[subject, kind, periods]`.
mod streak_list {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Kind;

    pub(super) fn serialize<S: Serializer>(
        map: &BTreeMap<(String, Kind), u32>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        let list: Vec<(&String, &Kind, &u32)> = map
            .iter()
            .map(|((subject, kind), n)| (subject, kind, n))
            .collect();
        list.serialize(ser)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<BTreeMap<(String, Kind), u32>, D::Error> {
        let list: Vec<(String, Kind, u32)> = Vec::deserialize(de)?;
        Ok(list
            .into_iter()
            .map(|(subject, kind, n)| ((subject, kind), n))
            .collect())
    }
}

impl PilotState {
    /// Records that the executor started `proposal` as `id` at `now_ms` (only when it acts:
    /// a dry run records nothing).
    pub fn started(&mut self, id: &str, proposal: &Proposal, now_ms: u64) {
        self.started_op(id, proposal, None, now_ms);
    }

    /// [`PilotState::started`] for a stream's loop, keeping the Kinesis call `op` whose result
    /// in the shard map proves the operation ended.
    pub fn started_op(&mut self, id: &str, proposal: &Proposal, op: Option<Op>, now_ms: u64) {
        self.record(Started {
            id: id.to_owned(),
            span: proposal.span,
            kind: proposal.kind,
            at_ms: now_ms,
            op,
            pieces: vec![],
            to: vec![],
        });
    }

    /// Records `started` as the operation in flight and in the history (the last 24 h kept):
    /// the form for an operation built elsewhere, such as a batch of moves
    /// ([`propose::started`]).
    pub fn record(&mut self, started: Started) {
        let now_ms = started.at_ms;
        self.history.push(started.clone());
        self.in_flight = Some(started);
        self.history
            .retain(|h| now_ms.saturating_sub(h.at_ms) < DAY_MS);
    }

    /// The spans still in their cooldown at `now_ms` ([`Started::cooled`] of every operation
    /// started less than `cooldown_ms` ago): a plan keeps its pieces clear of them.
    pub fn cooling(&self, cooldown_ms: u64, now_ms: u64) -> Vec<Span> {
        self.history
            .iter()
            .filter(|h| h.at_ms.saturating_add(cooldown_ms) > now_ms)
            .flat_map(|h| h.cooled().iter().copied())
            .collect()
    }

    /// Records that operation `id` ended (done, aborted or failed): the next may start.
    pub fn finished(&mut self, id: &str) {
        if self.in_flight.as_ref().is_some_and(|s| s.id == id) {
            self.in_flight = None;
        }
    }
}

/// What a listing of the stream proves about the operation in flight ([`settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Settle {
    /// The shard map shows its result and the stream is ACTIVE: it ended; the next may start.
    Ended,
    /// The stream is being resharded: it may still be running; hold.
    Running,
    /// The stream is ACTIVE and its result is not in the shard map (its call may never have
    /// reached Kinesis, or was undone): nothing proves it ended; hold until an operator says.
    Unproven,
}

/// What the open shards' hash ranges (`open`) and the stream's status (`updating`: not ACTIVE)
/// prove about `started`. Only a listing that shows the result ends an operation: a call that
/// returned, a timer or a missing record never does. An operation without a Kinesis call (a
/// slot move) is never proven by a listing.
pub fn settle(started: &Started, open: &[(u128, u128)], updating: bool) -> Settle {
    if updating {
        return Settle::Running;
    }
    match &started.op {
        Some(op) if op.is_done(open) => Settle::Ended,
        _ => Settle::Unproven,
    }
}

/// The governor's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PilotConfig {
    /// Periods a proposal must be made in a row before it runs (≥ 1).
    pub sustain: u32,
    /// No operation on a span overlapping one operated on less than this ago, ms.
    pub cooldown_ms: u64,
    /// Operations started in any rolling hour, at most.
    pub per_hour: u32,
    /// Operations started in any rolling 24 h, at most.
    pub per_day: u32,
    /// Run decisions (true) or only report them (false: dry run).
    pub act: bool,
    /// Eligible proposals one operation may carry (≥ 1): the decision's and up to
    /// `per_operation − 1` more ([`Period::joined`]). A stream's loop uses 1.
    #[serde(default = "one")]
    pub per_operation: u32,
}

/// [`PilotConfig::per_operation`]'s default.
fn one() -> u32 {
    1
}

impl Default for PilotConfig {
    /// Sustained 2 periods, 30 min cooldown, 4 per hour, 10 per day, one proposal an
    /// operation, dry run.
    fn default() -> Self {
        Self {
            sustain: 2,
            cooldown_ms: 30 * 60_000,
            per_hour: 4,
            per_day: 10,
            act: false,
            per_operation: 1,
        }
    }
}

/// Why nothing runs this period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HoldReason {
    /// The kill switch is set (with its reason).
    Paused(String),
    /// This operation is still running.
    InFlight(String),
}

/// Why one proposal does not run this period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wait {
    /// Proposed `seen` periods in a row of the `need`ed.
    Sustain {
        /// Periods in a row so far, this one included.
        seen: u32,
        /// Periods needed.
        need: u32,
    },
    /// The span overlaps one operated on recently; eligible again at `until_ms`.
    Cooldown {
        /// When the cooldown ends, ms.
        until_ms: u64,
    },
    /// The hour or day budget is spent; the next operation is allowed at `until_ms`.
    Budget {
        /// When the oldest counted operation leaves its window, ms.
        until_ms: u64,
    },
    /// Another proposal was more urgent.
    Outranked,
    /// The subject is warming ([`Proposal::warming`]): counted, nothing to run.
    Warming,
    /// The loop holds (see [`Decision::Hold`]).
    Held,
}

/// The period's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Run this proposal now (record it with [`PilotState::started`]).
    Run(Proposal),
    /// Dry run: this proposal would run now; nothing is done.
    DryRun(Proposal),
    /// Nothing starts this period, whatever is proposed.
    Hold(HoldReason),
    /// No proposal is eligible (see [`Period::waiting`]).
    Idle,
}

/// One period's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Period {
    /// What to do.
    pub decision: Decision,
    /// Hot keys for the hot-key controller (proposals of [`Kind::Salt`]).
    pub handoffs: Vec<Proposal>,
    /// Further eligible proposals that run with the decision's as the same operation, in
    /// order of urgency (at most [`PilotConfig::per_operation`] − 1; empty unless the decision
    /// runs or would run).
    pub joined: Vec<Proposal>,
    /// Every other proposal and why it does not run now.
    pub waiting: Vec<(Proposal, Wait)>,
    /// The streaks to persist for the next period ([`PilotState::streaks`]).
    pub streaks: BTreeMap<(String, Kind), u32>,
}

/// Decides one period at `now_ms` from `state` and this period's `proposals` (see the module
/// docs for the rules).
pub fn decide(
    cfg: &PilotConfig,
    state: &PilotState,
    proposals: &[Proposal],
    now_ms: u64,
) -> Result<Period, PilotError> {
    if cfg.sustain == 0 {
        return Err(PilotError::NoSustain);
    }
    if cfg.per_operation == 0 {
        return Err(PilotError::NoPerOperation);
    }
    if cfg.per_hour > cfg.per_day {
        return Err(PilotError::Budget {
            per_hour: cfg.per_hour,
            per_day: cfg.per_day,
        });
    }
    let mut out = Period {
        decision: Decision::Idle,
        handoffs: vec![],
        joined: vec![],
        waiting: vec![],
        streaks: BTreeMap::new(),
    };
    if let Some(why) = &state.paused {
        // A paused loop counts nothing: it resumes from scratch, not from stale streaks.
        out.decision = Decision::Hold(HoldReason::Paused(why.clone()));
        out.waiting = proposals.iter().map(|p| (p.clone(), Wait::Held)).collect();
        return Ok(out);
    }
    let (salts, ops): (Vec<&Proposal>, Vec<&Proposal>) =
        proposals.iter().partition(|p| p.kind == Kind::Salt);
    out.handoffs = salts.into_iter().cloned().collect();
    for p in &ops {
        let seen = state
            .streaks
            .get(&(p.subject.clone(), p.kind))
            .copied()
            .unwrap_or(0)
            .saturating_add(1);
        let e = out.streaks.entry((p.subject.clone(), p.kind)).or_insert(0);
        *e = (*e).max(seen);
    }
    if let Some(running) = &state.in_flight {
        out.decision = Decision::Hold(HoldReason::InFlight(running.id.clone()));
        out.waiting = ops.iter().map(|p| ((*p).clone(), Wait::Held)).collect();
        return Ok(out);
    }
    let budget = budget_until(cfg, &state.history, now_ms);
    let mut eligible: Vec<&Proposal> = vec![];
    for p in ops {
        let seen = out
            .streaks
            .get(&(p.subject.clone(), p.kind))
            .copied()
            .unwrap_or(1);
        let wait = if p.warming {
            Some(Wait::Warming)
        } else if seen < cfg.sustain {
            Some(Wait::Sustain {
                seen,
                need: cfg.sustain,
            })
        } else if let Some(until_ms) = cooldown_until(cfg, &state.history, &p.span, now_ms) {
            Some(Wait::Cooldown { until_ms })
        } else {
            budget.map(|until_ms| Wait::Budget { until_ms })
        };
        match wait {
            Some(w) => out.waiting.push((p.clone(), w)),
            None => eligible.push(p),
        }
    }
    // The most urgent runs; ties go to the lower span (a stable order).
    eligible.sort_by(|a, b| {
        b.urgency
            .total_cmp(&a.urgency)
            .then(a.span.cmp(&b.span))
            .then(a.kind.cmp(&b.kind))
    });
    let mut rest = eligible.into_iter();
    if let Some(first) = rest.next() {
        out.decision = if cfg.act {
            Decision::Run(first.clone())
        } else {
            Decision::DryRun(first.clone())
        };
    }
    let more = usize::try_from(cfg.per_operation.saturating_sub(1)).unwrap_or(usize::MAX);
    out.joined = rest.by_ref().take(more).cloned().collect();
    out.waiting
        .extend(rest.map(|p| (p.clone(), Wait::Outranked)));
    Ok(out)
}

/// When the span's cooldown ends, if an operation on an overlapping span is that recent.
fn cooldown_until(cfg: &PilotConfig, history: &[Started], span: &Span, now_ms: u64) -> Option<u64> {
    history
        .iter()
        .filter(|h| h.cooled().iter().any(|c| c.overlaps(span)))
        .map(|h| h.at_ms.saturating_add(cfg.cooldown_ms))
        .filter(|&until| until > now_ms)
        .max()
}

/// When the next operation is allowed, if a budget is spent now.
fn budget_until(cfg: &PilotConfig, history: &[Started], now_ms: u64) -> Option<u64> {
    let spent = |window: u64, max: u32| -> Option<u64> {
        let inside: Vec<u64> = history
            .iter()
            .map(|h| h.at_ms)
            .filter(|&at| now_ms.saturating_sub(at) < window)
            .collect();
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if inside.len() < max {
            return None;
        }
        // The oldest operations leave first: once `len − max + 1` have, one more is allowed.
        let mut sorted = inside;
        sorted.sort_unstable();
        let leaving = sorted.len() - max;
        sorted.get(leaving).map(|at| at.saturating_add(window))
    };
    match (spent(HOUR_MS, cfg.per_hour), spent(DAY_MS, cfg.per_day)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn span(lo: u128, hi: u128) -> Span {
        Span::new(lo, hi).unwrap()
    }

    fn prop(lo: u128, hi: u128, kind: Kind, urgency: f64) -> Proposal {
        Proposal {
            subject: format!("{lo}-{hi}"),
            span: span(lo, hi),
            kind,
            urgency,
            warming: false,
        }
    }

    fn acting() -> PilotConfig {
        PilotConfig {
            act: true,
            ..PilotConfig::default()
        }
    }

    #[test]
    fn a_refused_configuration_names_what_is_wrong() {
        let s = PilotState::default();
        let zero = PilotConfig {
            sustain: 0,
            ..acting()
        };
        assert_eq!(decide(&zero, &s, &[], 0), Err(PilotError::NoSustain));
        let upside_down = PilotConfig {
            per_hour: 11,
            ..acting()
        };
        assert!(matches!(
            decide(&upside_down, &s, &[], 0),
            Err(PilotError::Budget { .. })
        ));
        assert!(Span::new(5, 4).is_err());
    }

    #[test]
    fn a_salt_proposal_is_handed_off_never_run_even_in_flight() {
        let mut s = PilotState::default();
        let hot = prop(0, 9, Kind::Salt, 3.0);
        s.started("m1", &prop(50, 60, Kind::Move, 1.0), 0);
        let p = decide(&acting(), &s, std::slice::from_ref(&hot), 1_000).unwrap();
        assert_eq!(p.handoffs, vec![hot]);
        assert!(matches!(p.decision, Decision::Hold(HoldReason::InFlight(ref id)) if id == "m1"));
    }

    #[test]
    fn the_most_urgent_eligible_proposal_runs_and_the_rest_are_outranked() {
        let cfg = PilotConfig {
            sustain: 1,
            ..acting()
        };
        let a = prop(0, 9, Kind::Split, 1.1);
        let b = prop(10, 19, Kind::Split, 1.6);
        let c = prop(20, 39, Kind::Merge, 0.8);
        let p = decide(
            &cfg,
            &PilotState::default(),
            &[a.clone(), b.clone(), c.clone()],
            0,
        )
        .unwrap();
        assert_eq!(p.decision, Decision::Run(b));
        assert_eq!(p.waiting, vec![(a, Wait::Outranked), (c, Wait::Outranked)]);
    }

    /// With sustain 2, a load that ramps through the warm band acts the period it crosses
    /// the line; one that jumps over it waits a period.
    #[test]
    fn a_ramp_through_the_warm_band_acts_on_crossing_and_a_jump_waits_a_period() {
        let cfg = acting();
        let hot = prop(0, 9, Kind::Move, 1.3);
        let warm = Proposal {
            warming: true,
            ..hot.clone()
        };
        let mut s = PilotState::default();
        let p = decide(&cfg, &s, std::slice::from_ref(&warm), 0).unwrap();
        assert_eq!(p.decision, Decision::Idle);
        assert_eq!(p.waiting, vec![(warm.clone(), Wait::Warming)]);
        s.streaks = p.streaks;
        let p = decide(&cfg, &s, std::slice::from_ref(&hot), 60_000).unwrap();
        assert_eq!(
            p.decision,
            Decision::Run(hot.clone()),
            "ramped: acts on crossing"
        );
        let jump = decide(&cfg, &PilotState::default(), std::slice::from_ref(&hot), 0).unwrap();
        assert_eq!(jump.decision, Decision::Idle, "jumped: waits a period");
        // A subject warming for ever never runs.
        let mut s = PilotState::default();
        for k in 0..10 {
            let p = decide(&cfg, &s, std::slice::from_ref(&warm), k * 60_000).unwrap();
            assert_eq!(p.decision, Decision::Idle);
            s.streaks = p.streaks;
        }
    }

    /// Up to `per_operation` eligible proposals go in one operation, most urgent first; the
    /// rest are outranked; an ineligible one never joins.
    #[test]
    fn one_operation_carries_up_to_per_operation_eligible_proposals() {
        let cfg = PilotConfig {
            sustain: 1,
            per_operation: 2,
            ..acting()
        };
        let a = prop(0, 9, Kind::Move, 1.1);
        let b = prop(10, 19, Kind::Move, 1.6);
        let c = prop(20, 29, Kind::Move, 1.3);
        let cold = prop(30, 39, Kind::Move, 2.0);
        let mut s = PilotState::default();
        s.started("old", &cold, 0);
        s.finished("old");
        let p = decide(
            &cfg,
            &s,
            &[a.clone(), b.clone(), c.clone(), cold.clone()],
            60_000,
        )
        .unwrap();
        assert_eq!(p.decision, Decision::Run(b));
        assert_eq!(p.joined, vec![c]);
        assert_eq!(
            p.waiting,
            vec![
                (
                    cold,
                    Wait::Cooldown {
                        until_ms: 30 * 60_000
                    }
                ),
                (a, Wait::Outranked)
            ]
        );
        let zero = PilotConfig {
            per_operation: 0,
            ..cfg
        };
        assert_eq!(decide(&zero, &s, &[], 0), Err(PilotError::NoPerOperation));
    }

    #[test]
    fn a_finished_operation_frees_the_loop_and_the_budget_names_when_it_reopens() {
        let cfg = PilotConfig {
            sustain: 1,
            per_hour: 1,
            cooldown_ms: 0,
            ..acting()
        };
        let mut s = PilotState::default();
        let a = prop(0, 9, Kind::Split, 1.2);
        s.started("r1", &a, 1_000);
        s.finished("r1");
        let b = prop(100, 109, Kind::Split, 1.2);
        let p = decide(&cfg, &s, std::slice::from_ref(&b), 2_000).unwrap();
        assert_eq!(p.decision, Decision::Idle);
        assert_eq!(
            p.waiting,
            vec![(
                b.clone(),
                Wait::Budget {
                    until_ms: 1_000 + HOUR_MS
                }
            )]
        );
        let p = decide(&cfg, &s, std::slice::from_ref(&b), 1_000 + HOUR_MS).unwrap();
        assert_eq!(p.decision, Decision::Run(b));
    }

    #[test]
    fn the_state_survives_a_json_round_trip_streaks_included() {
        let mut s = PilotState::default();
        let p = prop(0, 9, Kind::Split, 1.2);
        s.streaks.insert((p.subject.clone(), Kind::Split), 2);
        s.started("split-1", &p, 60_000);
        s.paused = Some("ops: game night".into());
        let text = serde_json::to_string(&s).unwrap();
        let back: PilotState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s, "{text}");
    }

    #[test]
    fn a_pause_holds_everything_and_forgets_streaks() {
        let mut s = PilotState::default();
        s.streaks.insert(("0-9".to_owned(), Kind::Split), 5);
        s.paused = Some("ops: incident 42".into());
        let p = decide(&acting(), &s, &[prop(0, 9, Kind::Split, 2.0)], 0).unwrap();
        assert_eq!(
            p.decision,
            Decision::Hold(HoldReason::Paused("ops: incident 42".into()))
        );
        assert!(p.streaks.is_empty() && p.handoffs.is_empty());
    }

    /// Proposals of a few spans and kinds, each period a random subset.
    fn proposals() -> impl Strategy<Value = Vec<Vec<(u8, u8, f64, u8)>>> {
        prop::collection::vec(
            prop::collection::vec((0u8..6, 0u8..3, 0.0f64..3.0, 0u8..4), 0..5),
            1..120,
        )
    }

    fn to_proposal((s, k, u, w): (u8, u8, f64, u8)) -> Proposal {
        // Six spans over a key space of 60, some overlapping (a parent and its halves); one in
        // four warming.
        let (lo, hi) = [(0, 29), (0, 14), (15, 29), (30, 59), (30, 44), (45, 59)][usize::from(s)];
        let kind = [Kind::Split, Kind::Merge, Kind::Move][usize::from(k)];
        Proposal {
            warming: w == 0,
            ..prop(lo, hi, kind, u)
        }
    }

    proptest! {
        /// Run by an executor that starts every `Run` with its joined proposals as one
        /// operation and finishes it `lasts` periods later: never two in flight, never more
        /// than `per_operation` proposals in one, never over the hour or day budget, never
        /// inside a cooldown of an overlapping span, never before `sustain` periods in a row,
        /// never a warming proposal, and never while paused.
        #[test]
        fn an_acting_loop_keeps_every_rule(
            periods in proposals(),
            sustain in 1u32..4,
            per_hour in 1u32..4,
            per_day in 4u32..8,
            cooldown_periods in 0u64..6,
            lasts in 0usize..3,
            pause_at in prop::option::of(0usize..120),
            per_operation in 1u32..4,
        ) {
            let period = 10 * 60_000; // ten minutes: 144 periods a day
            let cfg = PilotConfig { sustain, cooldown_ms: cooldown_periods * period, per_hour, per_day, act: true, per_operation };
            let mut s = PilotState::default();
            let mut runs: Vec<(u64, Span)> = vec![];
            let mut ops: Vec<u64> = vec![];
            let mut ends: Option<(usize, String)> = None;
            let mut last: BTreeMap<(String, Kind), u32> = BTreeMap::new();
            for (i, raw) in periods.into_iter().enumerate() {
                let now = (i as u64 + 1) * period;
                if let Some((at, id)) = &ends && *at <= i {
                    s.finished(id);
                    ends = None;
                }
                s.paused = (pause_at == Some(i)).then(|| "test".to_owned());
                let ps: Vec<Proposal> = raw.into_iter().map(to_proposal).collect();
                let p = decide(&cfg, &s, &ps, now).unwrap();
                if !matches!(p.decision, Decision::Run(_)) {
                    prop_assert!(p.joined.is_empty(), "joined without a decision");
                }
                if let Decision::Run(run) = &p.decision {
                    prop_assert!(s.paused.is_none());
                    prop_assert!(s.in_flight.is_none(), "two in flight");
                    prop_assert!(p.joined.len() < per_operation as usize, "too many in one");
                    let hour = ops.iter().filter(|at| now - *at < HOUR_MS).count();
                    let day = ops.iter().filter(|at| now - *at < DAY_MS).count();
                    ops.push(now);
                    prop_assert!(hour < per_hour as usize && day < per_day as usize, "over budget");
                    let all: Vec<&Proposal> = std::iter::once(run).chain(&p.joined).collect();
                    for one in &all {
                        prop_assert!(ps.contains(one));
                        prop_assert!(!one.warming, "a warming proposal ran");
                        // Sustained: proposed in each of the last `sustain` periods.
                        let seen = last.get(&(one.subject.clone(), one.kind)).copied().unwrap_or(0) + 1;
                        prop_assert!(seen >= sustain, "ran after {seen} of {sustain} periods");
                        for (at, sp) in &runs {
                            if sp.overlaps(&one.span) {
                                prop_assert!(now - at >= cfg.cooldown_ms, "inside a cooldown");
                            }
                        }
                    }
                    let id = format!("op{i}");
                    s.record(Started {
                        id: id.clone(),
                        span: run.span,
                        kind: run.kind,
                        at_ms: now,
                        op: None,
                        pieces: all.iter().map(|one| one.span).collect(),
                        to: vec![],
                    });
                    for one in &all {
                        runs.push((now, one.span));
                    }
                    ends = Some((i + lasts, id));
                }
                last = p.streaks.clone();
                s.streaks = p.streaks;
            }
        }

        /// A dry run decides what an acting loop would in the same state and never runs.
        #[test]
        fn a_dry_run_decides_as_acting_would_and_runs_nothing(
            periods in proposals(),
            sustain in 1u32..4,
        ) {
            let act = PilotConfig { sustain, act: true, per_operation: 2, ..PilotConfig::default() };
            let dry = PilotConfig { act: false, ..act };
            let mut s = PilotState::default();
            for (i, raw) in periods.into_iter().enumerate() {
                let ps: Vec<Proposal> = raw.into_iter().map(to_proposal).collect();
                let now = i as u64 * 60_000;
                let a = decide(&act, &s, &ps, now).unwrap();
                let d = decide(&dry, &s, &ps, now).unwrap();
                prop_assert!(!matches!(d.decision, Decision::Run(_)), "a dry run ran");
                match (&a.decision, &d.decision) {
                    (Decision::Run(x), Decision::DryRun(y)) => prop_assert_eq!(x, y),
                    (x, y) => prop_assert_eq!(x, y),
                }
                prop_assert_eq!(&a.waiting, &d.waiting);
                prop_assert_eq!(&a.joined, &d.joined);
                s.streaks = d.streaks;
            }
        }

        /// A proposal made every period with nothing else in the way runs in exactly
        /// `sustain` periods: the reaction bound.
        #[test]
        fn a_sustained_proposal_runs_in_exactly_sustain_periods(sustain in 1u32..6, u in 0.1f64..3.0) {
            let cfg = PilotConfig { sustain, ..acting() };
            let mut s = PilotState::default();
            let hot = prop(0, 99, Kind::Split, u);
            for k in 1..=sustain {
                let p = decide(&cfg, &s, std::slice::from_ref(&hot), u64::from(k) * 60_000).unwrap();
                if k < sustain {
                    prop_assert_eq!(&p.decision, &Decision::Idle);
                    prop_assert_eq!(&p.waiting[0].1, &Wait::Sustain { seen: k, need: sustain });
                } else {
                    prop_assert_eq!(&p.decision, &Decision::Run(hot.clone()));
                }
                s.streaks = p.streaks;
            }
        }
    }

    /// A shard map of open ranges covering the whole key space: `cuts` are the starts after 0.
    fn map_of(mut cuts: Vec<u128>) -> Vec<(u128, u128)> {
        cuts.retain(|c| *c > 0);
        cuts.sort_unstable();
        cuts.dedup();
        let mut starts = vec![0];
        starts.extend(cuts);
        starts
            .iter()
            .enumerate()
            .map(|(i, s)| (*s, starts.get(i + 1).map_or(u128::MAX, |n| n - 1)))
            .collect()
    }

    fn split_of(map: &[(u128, u128)], i: usize, at_share: u128) -> Option<Op> {
        let (start, end) = map[i];
        let width = end - start;
        let at = start + (width / 1_000).saturating_mul(at_share.clamp(1, 999));
        (at > start && at <= end).then_some(Op::Split { start, end, at })
    }

    fn in_flight(op: Op) -> Started {
        Started {
            id: "op-1".into(),
            span: span(0, 1),
            kind: Kind::Split,
            at_ms: 0,
            op: Some(op),
            pieces: vec![],
            to: vec![],
        }
    }

    proptest! {
        /// Only a listing that shows the result ends an operation: a split ends exactly when
        /// both children are open and the stream is ACTIVE; the unchanged map (its call never
        /// ran, or was refused) never ends it, and an UPDATING stream always holds.
        #[test]
        fn a_split_settles_ended_only_when_the_map_shows_both_children(
            cuts in proptest::collection::vec(1u128..u128::MAX, 0..6),
            pick in 0usize..7,
            share in 1u128..1_000,
            updating in any::<bool>(),
        ) {
            let before = map_of(cuts);
            let i = pick % before.len();
            let Some(op) = split_of(&before, i, share) else { return Ok(()) };
            let Op::Split { start, end, at } = op else { unreachable!() };
            let mut after = before.clone();
            after.splice(i..=i, [(start, at - 1), (at, end)]);
            let started = in_flight(op.clone());
            let (not_done, done) = (settle(&started, &before, updating), settle(&started, &after, updating));
            if updating {
                prop_assert_eq!(not_done, Settle::Running);
                prop_assert_eq!(done, Settle::Running);
            } else {
                prop_assert_eq!(not_done, Settle::Unproven);
                prop_assert_eq!(done, Settle::Ended);
            }
            // Its merge back is proven by the parent's range alone.
            let merge = Op::Merge { left: (start, at - 1), right: (at, end) };
            prop_assert!(merge.is_done(&before));
            prop_assert!(!merge.is_done(&after));
        }
    }

    #[test]
    fn an_operation_without_a_kinesis_call_is_never_proven_by_a_listing() {
        let mut started = in_flight(Op::Split {
            start: 0,
            end: 9,
            at: 5,
        });
        started.op = None;
        assert_eq!(settle(&started, &[(0, 4), (5, 9)], false), Settle::Unproven);
        // A split at its own start would be no split: never done.
        let degenerate = Op::Split {
            start: 0,
            end: 9,
            at: 0,
        };
        assert!(!degenerate.is_done(&[(0, 9)]));
    }

    #[test]
    fn a_state_saved_before_the_stream_fields_still_reads() {
        let old = r#"{"paused":null,"in_flight":{"id":"m","span":{"lo":0,"hi":9},"kind":"Move","at_ms":5},"history":[],"streaks":[]}"#;
        let state: PilotState = serde_json::from_str(old).expect("reads");
        assert_eq!(state.in_flight.map(|s| s.op), Some(None));
        assert_eq!(state.reshard, ReshardState::default());
    }
}
