//! Rebalancing: which leases one worker should take or steal for an even spread.

use std::collections::{BTreeMap, BTreeSet};

use super::{Lease, LeaseState};

/// A lease to take from a live worker that holds at least two more than the thief.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steal {
    /// The shard whose lease moves.
    pub shard_id: String,
    /// Its current holder.
    pub from: String,
}

/// One worker's plan for this round: leases to take, leases to steal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Leases each live worker should hold: ceil(assignable leases / live workers).
    pub target: usize,
    /// Unowned or expired leases of eligible shards to take ([`LeaseEvent::Take`](super::LeaseEvent::Take)).
    pub take: Vec<String>,
    /// Live leases to steal ([`LeaseEvent::Steal`](super::LeaseEvent::Steal)).
    pub steal: Vec<Steal>,
}

impl Assignment {
    /// True when the worker should leave the lease table alone this round.
    pub fn is_empty(&self) -> bool {
        self.take.is_empty() && self.steal.is_empty()
    }
}

/// Plans worker `me`'s round, given every lease of the application and the live workers.
///
/// Assignable leases are the workable ones ([`LeaseState::is_workable`](super::LeaseState::is_workable))
/// held by a live worker, plus those unowned or expired whose shard is in `eligible`. Leases
/// held, unexpired, by a worker missing from `workers` are left alone until they expire. With
/// `target = ceil(assignable / live workers)`, `me` takes free leases up to its slot in an exact
/// division of the assignable leases: `target` for the first `assignable % workers` workers
/// (those already above `floor(assignable / workers)` first, then by name), `target - 1` for the
/// rest, so the slots of all workers add up to the assignable leases. `workers` should include
/// peers that hold nothing yet ([`live_workers`](super::live_workers) adds announced ones): then
/// no worker ever holds more than `ceil(leases / workers)` after its first round, and workers
/// planning from the same read never take more than there is between them. The free leases
/// are tried in shard-id order rotated to `me`'s own run of them ([`take_order`]): with peers
/// in view, the run starts after the free leases the workers named before `me` still need, so
/// workers planning from the same read take **disjoint** sets that together cover every free
/// lease (no conditional write lost to a peer, no shard left for a later round); alone, the
/// rotation starts at a hash of `me`, so workers that cannot see each other yet still reach for
/// different rows first.
///
/// Only when nothing is free does `me` steal, one lease at a time, from the worker holding the
/// most, and only while that worker
/// - holds at least two more than `me` (a steal never leaves the victim below the thief, and
///   `me` never ends above the target),
/// - holds more than its exact fair share (`held × live workers > assignable`), and
/// - has checkpointed the lease since it took it (state `PROCESSING`): a lease still `LEASED`
///   would be re-read by the thief from the previous holder's start, redelivering everything
///   the victim read of it so far.
pub fn assign(
    me: &str,
    leases: &[Lease],
    eligible: &[String],
    workers: &[String],
    now_ms: u64,
) -> Assignment {
    let mut live: BTreeSet<&str> = workers.iter().map(String::as_str).collect();
    live.insert(me);
    let eligible: BTreeSet<&str> = eligible.iter().map(String::as_str).collect();
    let mut held: BTreeMap<&str, Vec<(&str, LeaseState)>> =
        live.iter().map(|w| (*w, Vec::new())).collect();
    let mut free: Vec<&str> = Vec::new();
    for lease in leases.iter().filter(|l| l.state.is_workable()) {
        let shard = lease.shard_id.as_str();
        match lease.live_owner(now_ms) {
            Some(owner) => {
                if let Some(shards) = held.get_mut(owner) {
                    shards.push((shard, lease.state));
                }
            }
            None if eligible.contains(shard) => free.push(shard),
            None => {}
        }
    }
    let assignable = free.len() + held.values().map(Vec::len).sum::<usize>();
    let target = assignable.div_ceil(live.len());
    let mut plan = Assignment {
        target,
        ..Assignment::default()
    };
    let mut mine = held.get(me).map_or(0, Vec::len);
    if mine >= target {
        return plan;
    }
    if !free.is_empty() {
        let counts: Vec<(&str, usize)> = held.iter().map(|(w, s)| (*w, s.len())).collect();
        let quota = take_quota(me, &counts, assignable);
        plan.take = take_order(me, free, &counts, assignable)
            .into_iter()
            .take(quota.saturating_sub(mine))
            .map(str::to_owned)
            .collect();
        return plan;
    }
    // Steal candidates: checkpointed leases only, highest shard id popped first.
    let mut stealable: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (worker, shards) in &held {
        let mut ids: Vec<&str> = shards
            .iter()
            .filter(|(_, state)| *state == LeaseState::Processing)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        stealable.insert(*worker, ids);
    }
    let mut counts: BTreeMap<&str, usize> = held.iter().map(|(w, s)| (*w, s.len())).collect();
    while mine < target {
        let victim = counts
            .iter()
            .filter(|(w, _)| **w != me)
            .max_by(|(wa, a), (wb, b)| a.cmp(b).then_with(|| wb.cmp(wa)))
            .map(|(w, n)| (*w, *n));
        let Some((victim, n)) = victim else { break };
        let over_fair_share = n.saturating_mul(live.len()) > assignable;
        if n < mine + 2 || !over_fair_share {
            break;
        }
        let Some(shard) = stealable.get_mut(victim).and_then(Vec::pop) else {
            break;
        };
        if let Some(c) = counts.get_mut(victim) {
            *c -= 1;
        }
        plan.steal.push(Steal {
            shard_id: shard.to_owned(),
            from: victim.to_owned(),
        });
        mine += 1;
    }
    plan
}

/// How many leases worker `me` may hold after taking free ones: its slot in an exact division
/// of `assignable` leases over the live workers of `counts` (each with the leases it holds).
///
/// With `base = assignable / workers` and `rem = assignable % workers`, the first `rem` workers
/// get `base + 1`, the others `base`. Workers already holding more than `base` rank first (they
/// have used an extra slot), then by name. Every worker that plans from the same read computes
/// the same slots, and the slots add up to `assignable`, so workers that start together and
/// plan at once never take more between them than there is: 4 leases over 3 workers give
/// 2 + 1 + 1, never 2 + 2 + 0 (which only a steal could even out).
fn take_quota(me: &str, counts: &[(&str, usize)], assignable: usize) -> usize {
    let workers = counts.len().max(1);
    let base = assignable / workers;
    let rem = assignable % workers;
    let mut ranked: Vec<(&str, usize)> = counts.to_vec();
    ranked.sort_by_key(|(name, n)| (*n <= base, *name));
    let rank = ranked
        .iter()
        .position(|(name, _)| *name == me)
        .unwrap_or(workers);
    base + usize::from(rank < rem)
}

/// `free` in the order worker `me` tries to take it: sorted by shard id, then rotated.
///
/// `counts` are the live workers (`me` included) with the leases each holds, `assignable` the
/// leases to share. With peers in `counts` the rotation starts at `me`'s run: after the free
/// leases that the workers named before `me` need to reach their slots
/// (`take_quota`), so workers planning from the same read start on disjoint runs whose
/// lengths are their needs, and the runs tile the free leases. With no peer in view it starts
/// at an FNV-1a hash of `me`, so workers started together that cannot see each other yet
/// usually reach for different rows. Deterministic: the same read gives the same order.
pub fn take_order<'a>(
    me: &str,
    mut free: Vec<&'a str>,
    counts: &[(&str, usize)],
    assignable: usize,
) -> Vec<&'a str> {
    free.sort_unstable();
    if free.is_empty() {
        return free;
    }
    let start = if counts.iter().any(|(w, _)| *w != me) {
        counts
            .iter()
            .filter(|(w, _)| *w < me)
            .map(|(w, held)| take_quota(w, counts, assignable).saturating_sub(*held))
            .fold(0usize, usize::saturating_add)
    } else {
        let hash = me.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        usize::try_from(hash % u64::try_from(free.len()).unwrap_or(u64::MAX)).unwrap_or(0)
    };
    let len = free.len();
    free.rotate_left(start % len);
    free
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{Announcement, LeaseEvent, Progress, live_workers};
    use super::*;

    const DURATION: u64 = 10_000;

    fn lease(id: usize, owner: Option<&str>, expires_at_ms: u64) -> Lease {
        Lease {
            shard_id: format!("shardId-{id:012}"),
            state: if owner.is_some() {
                LeaseState::Processing
            } else {
                LeaseState::Discovered
            },
            owner: owner.map(str::to_owned),
            counter: 1,
            expires_at_ms,
            checkpoint: Progress::NotStarted,
            parents: Vec::new(),
        }
    }

    fn ids(leases: &[Lease]) -> Vec<String> {
        leases.iter().map(|l| l.shard_id.clone()).collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("w{i}")).collect()
    }

    #[test]
    fn an_idle_worker_takes_free_leases_up_to_its_target() {
        let leases: Vec<Lease> = (0..5).map(|i| lease(i, None, 0)).collect();
        let plan = assign("w0", &leases, &ids(&leases), &names(2), 100);
        assert_eq!(plan.target, 3);
        assert_eq!(plan.take.len(), 3);
        assert!(plan.take.iter().all(|id| ids(&leases).contains(id)));
        assert!(plan.steal.is_empty());
    }

    #[test]
    fn workers_starting_together_reach_for_different_shards_first() {
        let leases: Vec<Lease> = (0..12).map(|i| lease(i, None, 0)).collect();
        let firsts: BTreeSet<String> = names(3)
            .iter()
            // Each alone in its view (none has seen another's announcement yet).
            .map(|w| {
                assign(w, &leases, &ids(&leases), std::slice::from_ref(w), 100).take[0].clone()
            })
            .collect();
        assert_eq!(firsts.len(), 3, "{firsts:?}");
        // The order is a rotation of the sorted ids: every free lease, each once.
        let all = ids(&leases);
        let order = take_order("w1", all.iter().map(String::as_str).collect(), &[], 12);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all);
    }

    #[test]
    fn a_lease_not_yet_checkpointed_and_a_holder_at_its_fair_share_are_not_stolen_from() {
        // w1 holds 3 leases it took but never checkpointed: no steal.
        let mut leases: Vec<Lease> = (0..3).map(|i| lease(i, Some("w1"), 1_000)).collect();
        for l in &mut leases {
            l.state = LeaseState::Leased;
        }
        assert!(assign("w0", &leases, &[], &names(2), 100).is_empty());
        // Once one is checkpointed, that one is stolen.
        leases[0].state = LeaseState::Processing;
        let plan = assign("w0", &leases, &[], &names(2), 100);
        assert_eq!(plan.steal.len(), 1);
        assert_eq!(plan.steal[0].shard_id, leases[0].shard_id);
    }

    #[test]
    fn an_expired_lease_is_free_and_an_ineligible_one_is_not() {
        let mut leases = vec![lease(0, Some("w1"), 50), lease(1, None, 0)];
        let plan = assign("w0", &leases, &[leases[0].shard_id.clone()], &names(2), 100);
        assert_eq!(plan.take, vec![leases[0].shard_id.clone()]);
        leases[0].expires_at_ms = 200;
        let plan = assign("w0", &leases, &ids(&leases), &names(2), 100);
        assert_eq!(plan.take, vec![leases[1].shard_id.clone()]);
    }

    #[test]
    fn a_worker_steals_only_from_a_worker_two_ahead() {
        let held = |counts: &[(&str, usize)]| -> Vec<Lease> {
            let mut id = 0;
            let mut out = Vec::new();
            for (w, n) in counts {
                for _ in 0..*n {
                    out.push(lease(id, Some(w), 1_000));
                    id += 1;
                }
            }
            out
        };
        // 3 vs 1 of 4: steal one to even out 2/2.
        let leases = held(&[("w0", 1), ("w1", 3)]);
        let plan = assign("w0", &leases, &[], &names(2), 100);
        assert_eq!(plan.steal.len(), 1);
        assert_eq!(plan.steal[0].from, "w1");
        // 3 vs 2 of 5: off by one is even enough; no steal.
        let leases = held(&[("w0", 2), ("w1", 3)]);
        assert!(assign("w0", &leases, &[], &names(2), 100).is_empty());
        // A new worker next to 6 and 6: target 4, steals 2 from each over two rounds' worth.
        let leases = held(&[("w1", 6), ("w2", 6)]);
        let plan = assign("w0", &leases, &[], &names(3), 100);
        assert_eq!(plan.target, 4);
        assert_eq!(plan.steal.len(), 4);
        assert_eq!(plan.steal.iter().filter(|s| s.from == "w1").count(), 2);
    }

    #[test]
    fn a_lease_held_by_an_unlisted_worker_waits_for_expiry() {
        let leases = vec![lease(0, Some("gone"), 1_000), lease(1, None, 0)];
        let plan = assign("w0", &leases, &ids(&leases), &names(1), 100);
        assert_eq!(plan.take, vec![leases[1].shard_id.clone()]);
        let plan = assign("w0", &leases, &ids(&leases), &names(1), 1_000);
        assert_eq!(plan.take, ids(&leases));
    }

    /// One planning round of worker `me`, applied through the lease state machine.
    fn round(me: &str, leases: &mut [Lease], workers: &[String], now: u64) -> Assignment {
        let all = ids(leases);
        let plan = assign(me, leases, &all, workers, now);
        for lease in leases.iter_mut() {
            let event = if plan.take.contains(&lease.shard_id) {
                LeaseEvent::Take {
                    worker: me.to_owned(),
                    now_ms: now,
                    duration_ms: DURATION,
                }
            } else if plan.steal.iter().any(|s| s.shard_id == lease.shard_id) {
                LeaseEvent::Steal {
                    worker: me.to_owned(),
                    now_ms: now,
                    duration_ms: DURATION,
                }
            } else {
                continue;
            };
            *lease = lease.apply(&event).unwrap();
        }
        plan
    }

    fn counts(leases: &[Lease], workers: &[String], now: u64) -> Vec<usize> {
        workers
            .iter()
            .map(|w| {
                leases
                    .iter()
                    .filter(|l| l.live_owner(now) == Some(w.as_str()))
                    .count()
            })
            .collect()
    }

    /// Applies `plan` (made by `me` from `snapshot`) to `leases` the way the lease table does:
    /// each take or steal only if the row is still as the snapshot had it.
    fn apply_conditionally(
        me: &str,
        plan: &Assignment,
        snapshot: &[Lease],
        leases: &mut [Lease],
        now: u64,
    ) -> usize {
        let mut won = 0;
        for lease in leases.iter_mut() {
            let steal = plan.steal.iter().any(|s| s.shard_id == lease.shard_id);
            if !steal && !plan.take.contains(&lease.shard_id) {
                continue;
            }
            let Some(seen) = snapshot.iter().find(|l| l.shard_id == lease.shard_id) else {
                continue;
            };
            if seen.counter != lease.counter || seen.owner != lease.owner {
                continue; // another worker moved it first: the conditional write fails
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
            *lease = lease.apply(&event).unwrap();
            won += 1;
        }
        won
    }

    fn announcements(workers: &[String], now: u64) -> Vec<Announcement> {
        workers
            .iter()
            .map(|w| Announcement {
                worker_id: w.clone(),
                heartbeat_ms: now,
            })
            .collect()
    }

    #[test]
    fn announced_peers_cap_the_first_take_at_a_fair_share() {
        let leases: Vec<Lease> = (0..4).map(|i| lease(i, None, 0)).collect();
        let announced = announcements(&names(3), 100);
        // Alone, w0 would take all 4; with two peers announced it takes 2 (ceil(4/3)).
        let alone = live_workers("w0", &[], &leases, 100, DURATION);
        assert_eq!(
            assign("w0", &leases, &ids(&leases), &alone, 100).take.len(),
            4
        );
        let live = live_workers("w0", &announced, &leases, 100, DURATION);
        let plan = assign("w0", &leases, &ids(&leases), &live, 100);
        assert_eq!((plan.target, plan.take.len()), (2, 2));
        // Planning from the same empty read, the three slots add up to the four leases.
        let takes: Vec<usize> = names(3)
            .iter()
            .map(|w| assign(w, &leases, &ids(&leases), &live, 100).take.len())
            .collect();
        assert_eq!(takes, [2, 1, 1]);
        // An announcement older than a lease duration no longer counts.
        let stale = live_workers("w0", &announced, &leases, 100 + DURATION, DURATION);
        assert_eq!(stale, ["w0"]);
    }

    proptest! {
        /// A fleet started together: every worker announced before its first read, then rounds
        /// in which groups of workers plan from one shared read (as if at once) and write
        /// conditionally, in a random order. No worker holds more than ceil(L / W) after its
        /// first round, no steal is ever planned, and the leases end all held, spread <= 1.
        #[test]
        fn announced_workers_split_a_cold_start_without_steals(
            workers in 1usize..7,
            shards in 0usize..25,
            rounds in prop::collection::vec(
                (prop::collection::vec(any::<prop::sample::Index>(), 6), 1usize..7), 1..6),
        ) {
            let workers = names(workers);
            let mut leases: Vec<Lease> = (0..shards).map(|i| lease(i, None, 0)).collect();
            let cap = shards.div_ceil(workers.len());
            let mut now = 1_000;
            let announced = announcements(&workers, now);
            // Every round is followed by quiet rounds in name order until nothing moves.
            let quiet: (Vec<prop::sample::Index>, usize) = (Vec::new(), 1);
            let plans = rounds.iter().chain(std::iter::repeat_n(&quiet, shards + 2));
            for (r, (shuffle, group)) in plans.enumerate() {
                now += 1_000;
                for lease in &mut leases {
                    if lease.owner.is_some() {
                        lease.expires_at_ms = now + DURATION;
                        lease.state = LeaseState::Processing;
                    }
                }
                let mut order: Vec<&String> = workers.iter().collect();
                for (i, pick) in shuffle.iter().enumerate().take(order.len()) {
                    let j = i + pick.index(order.len() - i);
                    order.swap(i, j);
                }
                for chunk in order.chunks(*group) {
                    let snapshot = leases.clone();
                    let all = ids(&snapshot);
                    let plans: Vec<(&String, Assignment)> = chunk.iter().map(|me| {
                        let live = live_workers(me, &announced, &snapshot, now, DURATION);
                        (*me, assign(me, &snapshot, &all, &live, now))
                    }).collect();
                    for (me, plan) in &plans {
                        prop_assert!(plan.steal.is_empty(), "{} planned a steal: {:?}", me, plan);
                        apply_conditionally(me, plan, &snapshot, &mut leases, now);
                    }
                }
                let c = counts(&leases, &workers, now);
                if r == 0 {
                    prop_assert!(c.iter().all(|n| *n <= cap), "first round {:?}, cap {}", c, cap);
                }
                prop_assert!(c.iter().all(|n| *n <= cap), "round {} {:?}, cap {}", r, c, cap);
            }
            let c = counts(&leases, &workers, now);
            prop_assert_eq!(c.iter().sum::<usize>(), shards, "every lease held");
            prop_assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1, "{:?}", c);
        }

        /// Workers that see each other and plan from one read (some leases already held, none
        /// above its holder's slot) take pairwise disjoint sets, and together every free lease:
        /// no conditional take is lost to a peer and none is left for a later round.
        #[test]
        fn workers_planning_from_one_read_take_disjoint_sets_covering_the_free_leases(
            workers in 1usize..7,
            shards in 0usize..25,
            holders in prop::collection::vec(0usize..8, 25),
        ) {
            let workers = names(workers);
            let w = workers.len();
            // Pre-assign a few leases without pushing anyone past floor(L / W), so every
            // worker's need is its slot minus what it holds.
            let floor = shards / w;
            let mut held = vec![0usize; w];
            let leases: Vec<Lease> = (0..shards).map(|i| {
                let h = holders[i];
                if h < w && held[h] < floor {
                    held[h] += 1;
                    let mut l = lease(i, Some(workers[h].as_str()), 1_000_000);
                    l.state = LeaseState::Processing;
                    l
                } else {
                    lease(i, None, 0)
                }
            }).collect();
            let all = ids(&leases);
            let free: BTreeSet<String> = leases.iter()
                .filter(|l| l.owner.is_none()).map(|l| l.shard_id.clone()).collect();
            let mut taken: BTreeSet<String> = BTreeSet::new();
            for me in &workers {
                let plan = assign(me, &leases, &all, &workers, 100);
                for id in &plan.take {
                    prop_assert!(free.contains(id), "{} took {} which is not free", me, id);
                    prop_assert!(taken.insert(id.clone()), "{} and a peer both took {}", me, id);
                }
            }
            prop_assert_eq!(taken, free);
        }

        #[test]
        fn repeated_planning_converges_to_an_even_spread(
            workers in 1usize..6,
            initial in prop::collection::vec((0usize..9, 0u64..3), 0..40),
            order in prop::collection::vec(0usize..6, 1..12),
        ) {
            let workers = names(workers);
            // Owners: a live worker, a vanished one ("gone"), or nobody; some already expired.
            let mut leases: Vec<Lease> = initial.iter().enumerate().map(|(i, (who, exp))| {
                let owner = match who {
                    0..=5 => workers.get(*who).map(String::as_str),
                    6 => Some("gone"),
                    _ => None,
                };
                lease(i, owner, exp * 1_000)
            }).collect();
            let mut now = 500;
            let max_rounds = leases.len() + 4;
            for r in 0..max_rounds {
                now += 1_000;
                // Live workers renew what they hold, and checkpoint what they held a round.
                for lease in &mut leases {
                    if lease.owner.as_deref().is_some_and(|o| workers.iter().any(|w| w == o)) {
                        lease.expires_at_ms = now + DURATION;
                        lease.state = LeaseState::Processing;
                    }
                }
                let mut moved = false;
                for i in 0..workers.len() {
                    let me = &workers[(i + order[r % order.len()]) % workers.len()];
                    let before = counts(&leases, &workers, now);
                    let snapshot = leases.clone();
                    let plan = round(me, &mut leases, &workers, now);
                    moved |= !plan.is_empty();
                    let after = counts(&leases, &workers, now);
                    let mine = workers.iter().position(|w| w == me).unwrap();
                    // Never overshoot: the thief ends at or under the target...
                    prop_assert!(after[mine] <= plan.target.max(before[mine]));
                    // ...so never above fair share + 1 once it plans at all...
                    let assignable = snapshot.iter().filter(|l| l.state.is_workable()
                        && l.live_owner(now).is_none_or(|o| workers.iter().any(|w| w == o)))
                        .count();
                    if !plan.is_empty() {
                        prop_assert!(after[mine] * workers.len() <= assignable + workers.len(),
                            "{} holds {} of {} with {} workers", me, after[mine], assignable, workers.len());
                    }
                    // ...and never below a worker it stole from, nor from a worker at or under
                    // its exact fair share, nor a lease not checkpointed since it was taken.
                    for steal in &plan.steal {
                        let victim = workers.iter().position(|w| *w == steal.from).unwrap();
                        prop_assert!(after[victim] >= after[mine]);
                        prop_assert!(before[victim] * workers.len() > assignable,
                            "stole from {} at {} of {}", steal.from, before[victim], assignable);
                        let row = snapshot.iter().find(|l| l.shard_id == steal.shard_id).unwrap();
                        prop_assert_eq!(row.state, LeaseState::Processing);
                    }
                }
                // Quiet once nothing moves and no vanished worker's lease is left to expire.
                if !moved && leases.iter().all(|l| l.expires_at_ms > now + 1_000) {
                    break;
                }
            }
            let c = counts(&leases, &workers, now);
            prop_assert_eq!(c.iter().sum::<usize>(), leases.len(), "every lease held");
            prop_assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1, "{:?}", c);
            // Balanced is stable: nobody plans anything more.
            for w in &workers {
                prop_assert!(assign(w, &leases, &ids(&leases), &workers, now).is_empty());
            }
        }
    }
}
