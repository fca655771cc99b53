//! One worker's lease round as data: [`plan_round`] decides, the adapter writes.
//!
//! Every renew interval a worker reads its application's lease table and does the same five
//! things: it **repairs** the table (creates the rows of listed shards that have none and
//! replaces rows that do not parse), **renews** the leases it still holds, **stops** the shards
//! whose lease moved under it (stolen, or taken after it lapsed), **takes** free or expired
//! leases of eligible shards up to its fair share (workers planning from the same read take
//! disjoint runs of them, so none loses a take to a peer; the share counts the peers
//! that announced themselves, so a fleet starting together splits the leases in its first
//! round), and **steals** live leases, at
//! most `max_steals_per_round` of them, from workers holding at least two more than it does and
//! more than their exact fair share, and only leases their holder has checkpointed since taking.
//!
//! None of these decisions needs I/O, so [`plan_round`] makes all of them from one snapshot of
//! the table and hands them back as a [`RoundPlan`]. The adapter then executes the plan (the
//! conditional writes) and reacts to each write's result, the way raft-rs hands a node's work out
//! as a `Ready` and lets the application persist and send it before calling `advance`:
//!
//! ```text
//!   scan ──▶ plan_round ──▶ repair? ──yes, a row was written──▶ scan ──▶ plan_round ─┐
//!                              │ no                                                   │
//!                              ▼                                                      ▼
//!            stop_lost, renew (a renew refused as LeaseLost stops the shard too),
//!            take, then steal — each write conditional on the row the plan carries
//! ```
//!
//! A repair changes what is eligible (a rebuilt parent may be finished), so after any repair
//! write the adapter reads the table again and plans again; the second plan's repairs wait for the
//! next round. The lease moves follow the diagram of [`super`]: a take is `DISCOVERED → LEASED`
//! or an expired `LEASED/PROCESSING → LEASED`, a steal `LEASED/PROCESSING → LEASED` from a live
//! holder; both bump the fencing counter and lift it to the plan's `floor`, one above the counter
//! of every parent row, so tokens rise along a key's lineage. A renew never bumps it.
//!
//! A plan is only a proposal: every write is conditional on the row it was planned from, so a
//! worker that planned from a stale read loses the race and tries again next round.
//!
//! ```
//! use std::collections::BTreeMap;
//! use heatsink_core::stream::{
//!     Lease, LeaseEvent, Progress, RoundInput, ShardGraph, ShardInfo, plan_round,
//! };
//!
//! // shardId-0 was read to its end and split into shardId-1 and shardId-2.
//! let parent = ShardInfo { ending_seq: Some("900".into()), ..ShardInfo::new("shardId-0") };
//! let child = |id: &str| ShardInfo { parent: Some("shardId-0".into()), ..ShardInfo::new(id) };
//! let graph = ShardGraph::new(vec![parent.clone(), child("shardId-1"), child("shardId-2")])?;
//! let mut done = Lease::discovered(&parent);
//! done.checkpoint = Progress::Finished;
//! done.counter = 41;
//! // shardId-2 has no row yet: the plan repairs that first.
//! let leases = vec![done, Lease::discovered(&child("shardId-1"))];
//! let held = BTreeMap::new(); // w0 holds nothing yet
//! let input = RoundInput {
//!     worker_id: "w0",
//!     now_ms: 1_000,
//!     graph: &graph,
//!     leases: &leases,
//!     malformed: &[],
//!     held: &held,
//!     max_steals_per_round: 1,
//!     initial: Default::default(),
//!     announced: &[],
//!     lease_duration_ms: 10_000,
//! };
//! let plan = plan_round(&input);
//! assert_eq!(plan.repair.len(), 1);
//! assert_eq!(plan.repair[0].lease().shard_id, "shardId-2");
//! // Take the free child, with a fencing token above its finished parent's.
//! assert_eq!(plan.take.len(), 1);
//! assert_eq!(plan.take[0].lease.shard_id, "shardId-1");
//! assert_eq!(plan.take[0].floor, 42);
//! let take = LeaseEvent::Take { worker: "w0".into(), now_ms: 1_000, duration_ms: 10_000 };
//! let mine = plan.take[0].outcome(&take)?;
//! assert_eq!((mine.owner.as_deref(), mine.counter), (Some("w0"), 42));
//! assert!(plan.renew.is_empty() && plan.stop_lost.is_empty() && plan.steal.is_empty());
//! # Ok::<(), heatsink_core::stream::StreamError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Announcement, Checkpoints, Lease, LeaseEvent, LeaseState, Progress, ShardGraph, ShardInfo,
    StreamError, assign, eligible, live_workers,
};

/// A lease row that did not parse, as much of it as planning needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedRow {
    /// The shard (the row's sort key).
    pub shard_id: String,
    /// The stored counter, if it was a number: the replacement's counter stays above it.
    pub counter: Option<u64>,
}

/// What [`plan_round`] plans from: one read of the lease table and this worker's own view.
#[derive(Clone, Copy, Debug)]
pub struct RoundInput<'a> {
    /// This worker's name in the lease table.
    pub worker_id: &'a str,
    /// Now, on this worker's clock (ms since the epoch): expiry is judged against it, and a
    /// repaired row's counter starts at it.
    pub now_ms: u64,
    /// Every shard the stream lists, closed ones included.
    pub graph: &'a ShardGraph,
    /// The rows of the application that parsed, as just read.
    pub leases: &'a [Lease],
    /// The rows that did not parse.
    pub malformed: &'a [MalformedRow],
    /// The shards this worker reads now, each with the fencing counter it holds.
    pub held: &'a BTreeMap<String, u64>,
    /// Leases stolen per round at most (`WorkerConfig::max_steals_per_round`).
    pub max_steals_per_round: usize,
    /// Where the application starts when the table has no row of it yet ([`first_start`]).
    pub initial: InitialPosition,
    /// The workers' announcements as just read with the leases: peers that hold nothing yet
    /// still count towards the fair share ([`live_workers`]).
    pub announced: &'a [Announcement],
    /// How long a lease lasts (ms); an announcement older than this no longer counts.
    pub lease_duration_ms: u64,
}

/// Where an application's first start reads from (`WorkerConfig::initial_position`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialPosition {
    /// Every retained record, oldest first.
    #[default]
    TrimHorizon,
    /// Only records put after the start: closed shards are finished, open ones start at the tip.
    Latest,
    /// Records put at or after this time (ms since the epoch), in every shard, in lineage order.
    AtTimestamp(u64),
}

/// The lease rows of an application's first start at `initial`, as the KCL makes them: with
/// [`InitialPosition::Latest`] every closed shard is recorded finished (`CHILDREN_CREATED`,
/// `SHARD_END`) and every open one — the current leaves — starts at [`Progress::Latest`];
/// with [`InitialPosition::AtTimestamp`] every shard starts at the time (a closed shard with
/// nothing after it reaches its end at once, so lineage order still holds); with
/// [`InitialPosition::TrimHorizon`] every shard starts at its first record. Counters start at
/// `now_ms`.
pub fn first_start(graph: &ShardGraph, initial: InitialPosition, now_ms: u64) -> Vec<Lease> {
    graph
        .shards()
        .map(|info| {
            let mut lease = Lease::discovered(info);
            lease.counter = now_ms;
            match initial {
                InitialPosition::TrimHorizon => {}
                InitialPosition::AtTimestamp(ms) => lease.checkpoint = Progress::AtTimestamp(ms),
                InitialPosition::Latest if info.is_closed() => {
                    lease.state = LeaseState::ChildrenCreated;
                    lease.checkpoint = Progress::Finished;
                }
                InitialPosition::Latest => lease.checkpoint = Progress::Latest,
            }
            lease
        })
        .collect()
}

/// A row to write so every listed shard has a well-formed lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseRepair {
    /// A listed shard has no row: create this one if none exists (`attribute_not_exists`).
    Create(Lease),
    /// A row did not parse: replace it with this one, conditional on the stored counter as found.
    Replace(Lease),
}

impl LeaseRepair {
    /// The row to write.
    pub fn lease(&self) -> &Lease {
        match self {
            Self::Create(lease) | Self::Replace(lease) => lease,
        }
    }
}

/// A lease to take or steal: the row as read, which the write is conditional on, and the floor
/// its new fencing counter is lifted to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    /// The row as the plan read it (for a steal, `owner` is the victim).
    pub lease: Lease,
    /// 1 + the highest counter among the rows of the shard's parents (0 if none has a row): the
    /// new holder's counter is at least this, so fencing tokens rise along a lineage.
    pub floor: u64,
}

impl Acquire {
    /// The lease after `event` (a [`LeaseEvent::Take`] or [`LeaseEvent::Steal`]) with the
    /// counter lifted to the floor: what the adapter writes, computed without I/O.
    pub fn outcome(&self, event: &LeaseEvent) -> Result<Lease, StreamError> {
        let mut next = self.lease.apply(event)?;
        next.counter = next.counter.max(self.floor);
        Ok(next)
    }
}

/// One round's decisions for one worker, to be executed in field order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundPlan {
    /// Rows to create or replace first; if any write succeeds, read and plan again.
    pub repair: Vec<LeaseRepair>,
    /// Malformed rows of shards the stream does not list: left alone (worth a warning).
    pub malformed_unlisted: Vec<String>,
    /// Held shards whose row moved to another holder or counter, or vanished: stop reading them.
    pub stop_lost: Vec<String>,
    /// Held shards whose row is still this worker's with the same counter: renew them.
    ///
    /// Held shards whose row is past `PROCESSING` are in neither list: their task reached
    /// SHARD_END and is creating the children's leases.
    pub renew: Vec<String>,
    /// Free or expired leases of eligible shards to take, in this worker's [`take_order`](super::take_order), up to `target`.
    pub take: Vec<Acquire>,
    /// Live leases to steal, at most `max_steals_per_round`, only when nothing is free.
    pub steal: Vec<Acquire>,
    /// The fair share: ceil(assignable leases / live workers), this worker included.
    pub target: usize,
    /// Eligible shards left unowned after this plan's takes.
    pub free_left: usize,
}

impl RoundPlan {
    /// True when the plan writes nothing to the lease table but renewals.
    pub fn moves_nothing(&self) -> bool {
        self.repair.is_empty() && self.take.is_empty() && self.steal.is_empty()
    }
}

/// Plans one round of worker `input.worker_id` from one read of the lease table; see the
/// module doc for what each field of the [`RoundPlan`] means and in which order to execute it.
///
/// The live workers are this worker, every worker with a live announcement and every live
/// holder of a workable lease ([`live_workers`]); takes and steals come from [`assign`] over the
/// [`eligible`] shards, steals capped at `max_steals_per_round`. With every peer announced, a
/// worker's first round takes at most `ceil(leases / workers)`: 4 shards over 3 workers give
/// 2 + 1 + 1 without a steal.
pub fn plan_round(input: &RoundInput<'_>) -> RoundPlan {
    let me = input.worker_id;
    let now = input.now_ms;
    let by_id: BTreeMap<&str, &Lease> = input
        .leases
        .iter()
        .map(|l| (l.shard_id.as_str(), l))
        .collect();
    let (repair, malformed_unlisted) = plan_repairs(input);
    let mut plan = RoundPlan {
        repair,
        malformed_unlisted,
        ..RoundPlan::default()
    };
    for (shard, counter) in input.held {
        match by_id.get(shard.as_str()) {
            Some(row) if !row.state.is_workable() => {}
            Some(row) if row.owner.as_deref() == Some(me) && row.counter == *counter => {
                plan.renew.push(shard.clone());
            }
            _ => plan.stop_lost.push(shard.clone()),
        }
    }
    // A DELETED row is terminal (trimmed, or gone before its end): it no longer blocks its
    // children, whatever its checkpoint says.
    let checkpoints: Checkpoints = input
        .leases
        .iter()
        .map(|l| {
            let progress = if l.state == LeaseState::Deleted {
                Progress::Finished
            } else {
                l.checkpoint.clone()
            };
            (l.shard_id.clone(), progress)
        })
        .collect();
    let ready = eligible(input.graph, &checkpoints);
    let workers = live_workers(
        me,
        input.announced,
        input.leases,
        now,
        input.lease_duration_ms,
    );
    let assignment = assign(me, input.leases, &ready, &workers, now);
    let free = ready
        .iter()
        .filter(|id| {
            by_id
                .get(id.as_str())
                .is_some_and(|l| l.state.is_workable() && l.live_owner(now).is_none())
        })
        .count();
    plan.target = assignment.target;
    plan.free_left = free.saturating_sub(assignment.take.len());
    let acquire = |shard: &str| {
        by_id.get(shard).map(|lease| Acquire {
            lease: (*lease).clone(),
            floor: floor(lease, &by_id),
        })
    };
    plan.take = assignment
        .take
        .iter()
        .filter_map(|id| acquire(id))
        .collect();
    plan.steal = assignment
        .steal
        .iter()
        .take(input.max_steals_per_round)
        .filter_map(|s| acquire(&s.shard_id))
        .collect();
    plan
}

/// 1 + the highest counter among the rows of `lease`'s parents, or 0 if none has a row.
fn floor(lease: &Lease, by_id: &BTreeMap<&str, &Lease>) -> u64 {
    lease
        .parents
        .iter()
        .filter_map(|p| by_id.get(p.as_str()).map(|l| l.counter.saturating_add(1)))
        .max()
        .unwrap_or(0)
}

/// Rows to create for listed shards without one, rows to replace for malformed ones of listed
/// shards, and the malformed rows of unlisted shards (left alone).
fn plan_repairs(input: &RoundInput<'_>) -> (Vec<LeaseRepair>, Vec<String>) {
    let known: BTreeSet<&str> = input
        .leases
        .iter()
        .map(|l| l.shard_id.as_str())
        .chain(input.malformed.iter().map(|m| m.shard_id.as_str()))
        .collect();
    let mut repair: Vec<LeaseRepair> = if known.is_empty() {
        // The application's first start: the initial position applies to the current leaves.
        first_start(input.graph, input.initial, input.now_ms)
            .into_iter()
            .map(LeaseRepair::Create)
            .collect()
    } else {
        input
            .graph
            .shards()
            .filter(|info| !known.contains(info.shard_id.as_str()))
            .map(|info| LeaseRepair::Create(rebuilt(input, info, 0)))
            .collect()
    };
    let mut unlisted = Vec::new();
    for bad in input.malformed {
        match input.graph.get(&bad.shard_id) {
            Some(info) => {
                let floor = bad.counter.map_or(0, |c| c.saturating_add(1));
                repair.push(LeaseRepair::Replace(rebuilt(input, info, floor)));
            }
            None => unlisted.push(bad.shard_id.clone()),
        }
    }
    (repair, unlisted)
}

/// A lease for a shard whose row is missing or malformed, rebuilt from the graph: its counter
/// starts at now (at least `floor`), and it is finished if any child already started (its parent
/// must have been finished), else not started.
fn rebuilt(input: &RoundInput<'_>, info: &ShardInfo, floor: u64) -> Lease {
    let mut lease = Lease::discovered(info);
    lease.counter = input.now_ms.max(floor);
    let started = input.graph.children_of(&info.shard_id).iter().any(|child| {
        input.leases.iter().any(|l| {
            l.shard_id == *child
                && (l.state != LeaseState::Discovered || !l.checkpoint.is_unstarted())
        })
    });
    if started {
        lease.state = LeaseState::ChildrenCreated;
        lease.checkpoint = Progress::Finished;
    }
    lease
}

#[cfg(test)]
mod tests;
