//! `plan_round` over random resharding histories, random lease tables and several workers
//! planning in turn, each plan executed against an in-memory lease table the way the worker
//! executes it (conditional writes, repair then re-plan).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::super::{
    Checkpoints, Lease, LeaseEvent, LeaseState, Progress, ReshardSim, ShardGraph, eligible,
};
use super::*;
use crate::counter::Seq;

const DURATION: u64 = 3_000;
const TICK: u64 = 1_000;
const START: u64 = 1_000_000;
/// Worker names in generated tables; the first `workers` of them are alive, the rest are gone.
const NAMES: [&str; 6] = ["w0", "w1", "w2", "w3", "w4", "w5"];

/// How one shard's row starts out; drawn per shard (cycled over the lineage order).
#[derive(Clone, Debug)]
struct RowSpec {
    /// 0: no row (deleted by hand), 1: malformed, otherwise a row.
    presence: u8,
    /// Read to SHARD_END, when the shard is closed and its parents are finished.
    finish: bool,
    /// Holder: an index into `NAMES`, or nobody when out of range.
    owner: usize,
    /// Expiry relative to the start: `START - 2_000 + expires`.
    expires: u64,
    counter: u64,
    /// Checkpointed once (PROCESSING, or a released lease's checkpoint).
    started: bool,
    /// The holder's own idea of the counter is one behind (it was taken over and back).
    stale: bool,
}

fn row_spec() -> impl Strategy<Value = RowSpec> {
    (
        0u8..16,
        any::<bool>(),
        0usize..9,
        0u64..6_000,
        0u64..2_000_000,
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(presence, finish, owner, expires, counter, started, stale)| RowSpec {
                presence,
                finish,
                owner,
                expires,
                counter,
                started,
                stale,
            },
        )
}

#[derive(Clone, Debug)]
struct Scenario {
    seed: u64,
    initial: usize,
    steps: usize,
    rows: Vec<RowSpec>,
    workers: usize,
    max_steals: usize,
    order: Vec<usize>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<u64>(),
        1usize..4,
        0usize..30,
        prop::collection::vec(row_spec(), 1..24),
        1usize..5,
        1usize..3,
        prop::collection::vec(0usize..5, 1..8),
    )
        .prop_map(
            |(seed, initial, steps, rows, workers, max_steals, order)| Scenario {
                seed,
                initial,
                steps,
                rows,
                workers,
                max_steals,
                order,
            },
        )
}

/// An application's lease table, the live workers and what each believes it holds.
struct World {
    graph: ShardGraph,
    rows: BTreeMap<String, Lease>,
    malformed: BTreeMap<String, MalformedRow>,
    workers: Vec<String>,
    held: BTreeMap<String, BTreeMap<String, u64>>,
    max_steals: usize,
    now: u64,
}

/// One executed plan and the snapshot it was made from.
struct Planned {
    me: String,
    now: u64,
    leases: Vec<Lease>,
    held: BTreeMap<String, u64>,
    plan: RoundPlan,
}

impl World {
    fn new(s: &Scenario) -> Result<Self, TestCaseError> {
        let sim = ReshardSim::random(s.seed, s.initial, s.steps);
        let graph = sim
            .graph()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let workers: Vec<String> = NAMES[..s.workers].iter().map(|w| (*w).to_owned()).collect();
        let mut world = Self {
            graph: graph.clone(),
            rows: BTreeMap::new(),
            malformed: BTreeMap::new(),
            held: workers
                .iter()
                .map(|w| (w.clone(), BTreeMap::new()))
                .collect(),
            workers,
            max_steals: s.max_steals,
            now: START,
        };
        // Lineage order, so a shard's parents are decided before it: only a closed shard whose
        // parents are finished can be finished, and only such a shard's children are ever held.
        let mut finished: BTreeSet<&str> = BTreeSet::new();
        for (i, id) in graph.lineage_order().enumerate() {
            let spec = &s.rows[i % s.rows.len()];
            let Some(info) = graph.get(id) else { continue };
            let parents_done = graph
                .parents_in_graph(id)
                .iter()
                .all(|p| finished.contains(p));
            let mut lease = Lease::discovered(info);
            lease.counter = spec.counter;
            let seq = Progress::InProgress(Seq::from(spec.counter % 1_000 + 1).into());
            let owner = NAMES.get(spec.owner).filter(|_| parents_done);
            if parents_done && spec.finish && info.is_closed() {
                finished.insert(id);
                lease.state = if spec.counter.is_multiple_of(2) {
                    LeaseState::ShardEnd
                } else {
                    LeaseState::ChildrenCreated
                };
                lease.checkpoint = Progress::Finished;
            } else if let Some(owner) = owner {
                lease.owner = Some((*owner).to_owned());
                lease.expires_at_ms = START - 2_000 + spec.expires;
                lease.state = LeaseState::Leased;
                if spec.started {
                    lease.state = LeaseState::Processing;
                    lease.checkpoint = seq;
                }
                if let Some(mine) = world.held.get_mut(*owner) {
                    let believed = if spec.stale {
                        spec.counter.wrapping_add(1)
                    } else {
                        spec.counter
                    };
                    mine.insert(id.to_owned(), believed);
                }
            } else if parents_done && spec.started {
                lease.checkpoint = seq;
            }
            match spec.presence {
                0 => {}
                1 => {
                    let counter = (!spec.counter.is_multiple_of(3)).then_some(spec.counter);
                    world.malformed.insert(
                        id.to_owned(),
                        MalformedRow {
                            shard_id: id.to_owned(),
                            counter,
                        },
                    );
                }
                _ => {
                    world.rows.insert(id.to_owned(), lease);
                }
            }
        }
        Ok(world)
    }

    fn leases(&self) -> Vec<Lease> {
        self.rows.values().cloned().collect()
    }

    fn plan(&self, me: &str) -> (Vec<Lease>, BTreeMap<String, u64>, RoundPlan) {
        let leases = self.leases();
        let malformed: Vec<MalformedRow> = self.malformed.values().cloned().collect();
        let held = self.held.get(me).cloned().unwrap_or_default();
        let plan = plan_round(&RoundInput {
            worker_id: me,
            now_ms: self.now,
            graph: &self.graph,
            leases: &leases,
            malformed: &malformed,
            held: &held,
            max_steals_per_round: self.max_steals,
            initial: Default::default(),
            announced: &[],
            lease_duration_ms: DURATION,
        });
        (leases, held, plan)
    }

    /// Writes the repairs as the lease table would (create if absent, replace if still
    /// malformed); true if any row was written.
    fn repair(&mut self, plan: &RoundPlan) -> bool {
        let mut changed = false;
        for repair in &plan.repair {
            let lease = repair.lease().clone();
            let id = lease.shard_id.clone();
            match repair {
                LeaseRepair::Create(_) => {
                    if !self.rows.contains_key(&id) && !self.malformed.contains_key(&id) {
                        self.rows.insert(id, lease);
                        changed = true;
                    }
                }
                LeaseRepair::Replace(_) => {
                    if self.malformed.remove(&id).is_some() {
                        self.rows.insert(id, lease);
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    /// One round of worker `me`, executed like `Worker::round`.
    fn round(&mut self, me: &str) -> Planned {
        let (mut leases, mut held, mut plan) = self.plan(me);
        if !plan.repair.is_empty() && self.repair(&plan) {
            (leases, held, plan) = self.plan(me);
        }
        let now = self.now;
        let mine = self.held.entry(me.to_owned()).or_default();
        for shard in &plan.stop_lost {
            mine.remove(shard);
        }
        for shard in &plan.renew {
            let Some(counter) = mine.get(shard).copied() else {
                continue;
            };
            let renew = LeaseEvent::Renew {
                worker: me.to_owned(),
                counter,
                now_ms: now,
                duration_ms: DURATION,
            };
            match self.rows.get(shard).map(|row| row.apply(&renew)) {
                Some(Ok(mut next)) => {
                    // A lease held for a round has been checkpointed by its reader.
                    if next.state == LeaseState::Leased {
                        next.state = LeaseState::Processing;
                    }
                    self.rows.insert(shard.clone(), next);
                }
                _ => {
                    mine.remove(shard);
                }
            }
        }
        let takes = plan.take.iter().map(|a| (a, false));
        let steals = plan.steal.iter().map(|a| (a, true));
        for (acquire, steal) in takes.chain(steals) {
            let id = &acquire.lease.shard_id;
            // The lease table's condition: counter (and, for a take, expiry) as read.
            let unchanged = self.rows.get(id).is_some_and(|row| {
                row.counter == acquire.lease.counter
                    && (steal || row.expires_at_ms == acquire.lease.expires_at_ms)
            });
            if !unchanged {
                continue;
            }
            let event = if steal {
                LeaseEvent::Steal {
                    worker: me.to_owned(),
                    now_ms: now,
                    duration_ms: DURATION,
                }
            } else {
                LeaseEvent::Take {
                    worker: me.to_owned(),
                    now_ms: now,
                    duration_ms: DURATION,
                }
            };
            if let Ok(next) = acquire.outcome(&event) {
                mine.insert(id.clone(), next.counter);
                self.rows.insert(id.clone(), next);
            }
        }
        Planned {
            me: me.to_owned(),
            now,
            leases,
            held,
            plan,
        }
    }

    /// Every live worker plans in turn, starting at `first`; the clock then ticks.
    fn all_round(&mut self, first: usize) -> Vec<Planned> {
        let n = self.workers.len();
        let order: Vec<String> = (0..n)
            .map(|i| self.workers[(first + i) % n].clone())
            .collect();
        let planned = order.iter().map(|me| self.round(me)).collect();
        self.now += TICK;
        planned
    }

    /// Eligible shards with a workable row: what must end up held.
    fn assignable(&self) -> Vec<String> {
        let checkpoints: Checkpoints = self
            .rows
            .values()
            .map(|l| (l.shard_id.clone(), l.checkpoint.clone()))
            .collect();
        eligible(&self.graph, &checkpoints)
            .into_iter()
            .filter(|id| self.rows.get(id).is_some_and(|l| l.state.is_workable()))
            .collect()
    }
}

/// Runs rounds of all workers until a whole round moves nothing (after every lease of a gone
/// worker could lapse); returns every executed plan, or fails if it never settles.
fn settle(world: &mut World, order: &[usize]) -> Result<Vec<Planned>, TestCaseError> {
    let mut all = Vec::new();
    let max_rounds = 12 + 3 * world.graph.len();
    for r in 0..max_rounds {
        let planned = world.all_round(order[r % order.len()]);
        let quiet = planned
            .iter()
            .all(|p| p.plan.moves_nothing() && p.plan.stop_lost.is_empty());
        all.extend(planned);
        if quiet && world.now > START + 2 * DURATION {
            return Ok(all);
        }
    }
    Err(TestCaseError::fail(format!(
        "no quiet round after {max_rounds} rounds"
    )))
}

fn eligible_in(p: &Planned, graph: &ShardGraph) -> BTreeSet<String> {
    let checkpoints: Checkpoints = p
        .leases
        .iter()
        .map(|l| (l.shard_id.clone(), l.checkpoint.clone()))
        .collect();
    eligible(graph, &checkpoints).into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Takes: only free (unowned or expired) leases of eligible shards. Steals: only live
    /// leases of other workers on eligible shards, never more than the cap.
    #[test]
    fn a_plan_takes_only_free_eligible_leases_and_steals_within_the_cap(s in scenario()) {
        let mut world = World::new(&s)?;
        for p in settle(&mut world, &s.order)? {
            let ready = eligible_in(&p, &world.graph);
            let mut moved = BTreeSet::new();
            for a in &p.plan.take {
                let id = &a.lease.shard_id;
                prop_assert!(ready.contains(id), "{} took ineligible {}", p.me, id);
                prop_assert!(a.lease.state.is_workable());
                prop_assert_eq!(a.lease.live_owner(p.now), None, "{} took a held lease", p.me);
                prop_assert!(moved.insert(id.clone()), "{} planned {} twice", p.me, id);
            }
            prop_assert!(p.plan.steal.len() <= s.max_steals,
                "{} planned {} steals, cap {}", p.me, p.plan.steal.len(), s.max_steals);
            for a in &p.plan.steal {
                let id = &a.lease.shard_id;
                prop_assert!(ready.contains(id), "{} stole ineligible {}", p.me, id);
                let owner = a.lease.live_owner(p.now);
                prop_assert!(owner.is_some_and(|o| o != p.me), "{} stole {} from {:?}", p.me, id, owner);
                prop_assert!(moved.insert(id.clone()), "{} planned {} twice", p.me, id);
            }
            if !p.plan.steal.is_empty() {
                prop_assert!(p.plan.take.is_empty(), "steals only when nothing is free");
            }
            // Never past fair share + 1 (the target is a ceiling), and a steal only of a
            // checkpointed lease from a holder over its exact fair share.
            let live: BTreeSet<&str> = p.leases.iter().filter(|l| l.state.is_workable())
                .filter_map(|l| l.live_owner(p.now)).chain([p.me.as_str()]).collect();
            let count = |w: &str| p.leases.iter()
                .filter(|l| l.state.is_workable() && l.live_owner(p.now) == Some(w)).count();
            let mine = count(&p.me);
            let planned = mine + p.plan.take.len() + p.plan.steal.len();
            if !p.plan.moves_nothing() {
                prop_assert!(planned <= p.plan.target, "{} plans {} over target {}", p.me, planned, p.plan.target);
            }
            let assignable = p.leases.iter().filter(|l| l.state.is_workable()).filter(|l| match l.live_owner(p.now) {
                Some(_) => true,
                None => ready.contains(&l.shard_id),
            }).count();
            for a in &p.plan.steal {
                prop_assert_eq!(a.lease.state, LeaseState::Processing, "stole an unchecked lease");
                let victim = a.lease.live_owner(p.now).unwrap_or_default();
                prop_assert!(count(victim) * live.len() > assignable,
                    "{} stole from {} at {} of {} over {} workers", p.me, victim, count(victim), assignable, live.len());
            }
        }
    }

    /// Renew exactly the held leases whose row is still ours with our counter; stop the other
    /// held ones, except a shard past PROCESSING (its task is finishing it).
    #[test]
    fn a_plan_renews_only_what_it_holds_and_stops_what_moved(s in scenario()) {
        let mut world = World::new(&s)?;
        for p in settle(&mut world, &s.order)? {
            let rows: BTreeMap<&str, &Lease> =
                p.leases.iter().map(|l| (l.shard_id.as_str(), l)).collect();
            for shard in &p.plan.renew {
                let row = rows.get(shard.as_str());
                prop_assert!(row.is_some_and(|r| r.owner.as_deref() == Some(p.me.as_str())
                    && Some(&r.counter) == p.held.get(shard)), "{} renewed {} not held", p.me, shard);
            }
            for (shard, counter) in &p.held {
                let row = rows.get(shard.as_str());
                let finishing = row.is_some_and(|r| !r.state.is_workable());
                let ours = row.is_some_and(|r| r.owner.as_deref() == Some(p.me.as_str())
                    && r.counter == *counter);
                let renewed = p.plan.renew.contains(shard);
                let stopped = p.plan.stop_lost.contains(shard);
                prop_assert_eq!(renewed, ours && !finishing, "renew of {}", shard);
                prop_assert_eq!(stopped, !ours && !finishing, "stop of {}", shard);
            }
            for shard in p.plan.renew.iter().chain(&p.plan.stop_lost) {
                prop_assert!(p.held.contains_key(shard), "{} planned for unheld {}", p.me, shard);
            }
        }
    }

    /// Fencing tokens rise along a lineage: a take's or steal's floor, and the counter it
    /// writes, are strictly above the counter of every parent row (finished, since the shard
    /// is eligible) and above the row's own.
    #[test]
    fn fencing_floors_rise_above_every_finished_parent(s in scenario()) {
        let mut world = World::new(&s)?;
        for p in settle(&mut world, &s.order)? {
            let rows: BTreeMap<&str, &Lease> =
                p.leases.iter().map(|l| (l.shard_id.as_str(), l)).collect();
            let steal = LeaseEvent::Steal { worker: p.me.clone(), now_ms: p.now, duration_ms: DURATION };
            let take = LeaseEvent::Take { worker: p.me.clone(), now_ms: p.now, duration_ms: DURATION };
            let moves = p.plan.take.iter().map(|a| (a, &take))
                .chain(p.plan.steal.iter().map(|a| (a, &steal)));
            for (a, event) in moves {
                let next = a.outcome(event).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(next.counter > a.lease.counter);
                prop_assert!(next.counter >= a.floor);
                for parent in &a.lease.parents {
                    if let Some(row) = rows.get(parent.as_str()) {
                        if world.graph.contains(parent) {
                            prop_assert!(row.checkpoint.is_finished(),
                                "{} acquired with parent {} unfinished", a.lease.shard_id, parent);
                        }
                        prop_assert!(a.floor > row.counter && next.counter > row.counter,
                            "{} floor {} vs parent {} counter {}",
                            a.lease.shard_id, a.floor, parent, row.counter);
                    }
                }
            }
        }
    }

    /// Repeated rounds of all workers settle with every eligible shard held by exactly one
    /// live worker, which knows it holds it, and at most ceil(n / workers) each.
    #[test]
    fn rounds_of_all_workers_converge_to_one_holder_each_and_an_even_spread(s in scenario()) {
        let mut world = World::new(&s)?;
        settle(&mut world, &s.order)?;
        let now = world.now;
        let assignable = world.assignable();
        prop_assert!(world.malformed.keys().all(|id| !world.graph.contains(id)), "rows repaired");
        prop_assert!(world.graph.shards().all(|i| world.rows.contains_key(&i.shard_id)
            || world.malformed.contains_key(&i.shard_id)), "rows created");
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for id in &assignable {
            let row = &world.rows[id];
            let owner = row.live_owner(now);
            prop_assert!(owner.is_some_and(|o| world.workers.iter().any(|w| w == o)),
                "{} held by {:?} at {}", id, owner, now);
            let believers: Vec<&String> = world.held.iter()
                .filter(|(_, h)| h.contains_key(id)).map(|(w, _)| w).collect();
            prop_assert_eq!(believers.len(), 1, "{} believed held by {:?}", id, believers);
            prop_assert_eq!(Some(believers[0].as_str()), owner);
            prop_assert_eq!(world.held[believers[0]].get(id), Some(&row.counter));
            *counts.entry(believers[0].as_str()).or_default() += 1;
        }
        for (w, h) in &world.held {
            for shard in h.keys() {
                prop_assert!(world.rows.get(shard).is_some_and(|r| r.owner.as_deref() == Some(w.as_str())
                    || !r.state.is_workable()), "{} believes it holds {}", w, shard);
            }
        }
        let cap = assignable.len().div_ceil(world.workers.len());
        prop_assert!(counts.values().all(|c| *c <= cap), "{:?} over {}", counts, cap);
    }
}

#[test]
fn a_lost_lease_is_stopped_and_a_held_one_renewed() {
    let sim = ReshardSim::new(2);
    let graph = sim.graph().unwrap();
    let ids: Vec<String> = graph.shards().map(|s| s.shard_id.clone()).collect();
    let mut leases: Vec<Lease> = graph.shards().map(Lease::discovered).collect();
    for (lease, owner) in leases.iter_mut().zip(["w0", "w1"]) {
        lease.owner = Some(owner.to_owned());
        lease.state = LeaseState::Leased;
        lease.counter = 5;
        lease.expires_at_ms = 2_000;
    }
    // w0 believes it holds both; w1 took the second one over.
    let held = BTreeMap::from([(ids[0].clone(), 5), (ids[1].clone(), 4)]);
    let plan = plan_round(&RoundInput {
        worker_id: "w0",
        now_ms: 1_000,
        graph: &graph,
        leases: &leases,
        malformed: &[],
        held: &held,
        max_steals_per_round: 1,
        initial: Default::default(),
        announced: &[],
        lease_duration_ms: DURATION,
    });
    assert_eq!(plan.renew, vec![ids[0].clone()]);
    assert_eq!(plan.stop_lost, vec![ids[1].clone()]);
    assert!(plan.moves_nothing());
    assert_eq!((plan.target, plan.free_left), (1, 0));
}

#[test]
fn a_malformed_row_is_replaced_above_its_counter_unless_unlisted() {
    let sim = ReshardSim::new(1);
    let graph = sim.graph().unwrap();
    let id = graph.shards().next().unwrap().shard_id.clone();
    let malformed = [
        MalformedRow {
            shard_id: id.clone(),
            counter: Some(9_000),
        },
        MalformedRow {
            shard_id: "shardId-gone".into(),
            counter: None,
        },
    ];
    let held = BTreeMap::new();
    let plan = plan_round(&RoundInput {
        worker_id: "w0",
        now_ms: 1_000,
        graph: &graph,
        leases: &[],
        malformed: &malformed,
        held: &held,
        max_steals_per_round: 1,
        initial: Default::default(),
        announced: &[],
        lease_duration_ms: DURATION,
    });
    assert_eq!(plan.repair.len(), 1);
    assert!(
        matches!(&plan.repair[0], LeaseRepair::Replace(l) if l.shard_id == id && l.counter == 9_001)
    );
    assert_eq!(plan.malformed_unlisted, vec!["shardId-gone".to_owned()]);
    // Nothing to take before the row is replaced and read again.
    assert!(plan.take.is_empty());
}

#[test]
fn a_deleted_parent_row_unblocks_its_children() {
    let parent = ShardInfo {
        ending_seq: Some("900".into()),
        ..ShardInfo::new("shardId-0")
    };
    let child = ShardInfo {
        parent: Some("shardId-0".into()),
        ..ShardInfo::new("shardId-1")
    };
    let graph = ShardGraph::new(vec![parent.clone(), child.clone()]).unwrap();
    let mut gone = Lease::discovered(&parent);
    gone.state = LeaseState::Deleted; // the shard vanished before it was read to its end
    let leases = vec![gone, Lease::discovered(&child)];
    let held = BTreeMap::new();
    let plan = plan_round(&RoundInput {
        worker_id: "w0",
        now_ms: 1_000,
        graph: &graph,
        leases: &leases,
        malformed: &[],
        held: &held,
        max_steals_per_round: 1,
        initial: Default::default(),
        announced: &[],
        lease_duration_ms: DURATION,
    });
    let took: Vec<&str> = plan
        .take
        .iter()
        .map(|a| a.lease.shard_id.as_str())
        .collect();
    assert_eq!(took, ["shardId-1"]);
}

#[test]
fn announced_peers_shrink_the_first_round_to_a_fair_share() {
    let shards: Vec<ShardInfo> = (0..4)
        .map(|i| ShardInfo::new(format!("shardId-{i}")))
        .collect();
    let graph = ShardGraph::new(shards.clone()).unwrap();
    let leases: Vec<Lease> = shards.iter().map(Lease::discovered).collect();
    let held = BTreeMap::new();
    let plan_with = |announced: &[super::super::Announcement], now_ms: u64| {
        plan_round(&RoundInput {
            worker_id: "w1",
            now_ms,
            graph: &graph,
            leases: &leases,
            malformed: &[],
            held: &held,
            max_steals_per_round: 1,
            initial: Default::default(),
            announced,
            lease_duration_ms: DURATION,
        })
    };
    let peers: Vec<super::super::Announcement> = ["w0", "w1", "w2"]
        .iter()
        .map(|w| super::super::Announcement {
            worker_id: (*w).to_owned(),
            heartbeat_ms: 1_000,
        })
        .collect();
    // Three announced workers, four free leases: w1's slot is ceil(4/3) - 1 = 1 (w0 has the extra).
    let plan = plan_with(&peers, 1_000);
    assert_eq!((plan.target, plan.take.len(), plan.free_left), (2, 1, 3));
    // Once the announcements are a lease duration old, w1 is alone again and takes all four.
    let plan = plan_with(&peers, 1_000 + DURATION);
    assert_eq!((plan.target, plan.take.len()), (4, 4));
}
