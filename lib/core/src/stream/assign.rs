//! Rebalancing: which leases one worker should take or steal for an even spread.

use std::collections::{BTreeMap, BTreeSet};

use super::Lease;

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
/// `target = ceil(assignable / live workers)`, `me` takes free leases up to the target, lowest
/// shard id first; only when there are none, it steals one lease at a time from the worker
/// holding the most, and only while that worker holds at least two more than `me` — so a
/// steal never leaves the victim below the thief, and `me` never ends above the target.
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
    let mut held: BTreeMap<&str, Vec<&str>> = live.iter().map(|w| (*w, Vec::new())).collect();
    let mut free: Vec<&str> = Vec::new();
    for lease in leases.iter().filter(|l| l.state.is_workable()) {
        let shard = lease.shard_id.as_str();
        match lease.live_owner(now_ms) {
            Some(owner) => {
                if let Some(shards) = held.get_mut(owner) {
                    shards.push(shard);
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
        free.sort_unstable();
        plan.take = free
            .into_iter()
            .take(target - mine)
            .map(str::to_owned)
            .collect();
        return plan;
    }
    for shards in held.values_mut() {
        shards.sort_unstable_by(|a, b| b.cmp(a));
    }
    while mine < target {
        let victim = held
            .iter()
            .filter(|(w, _)| **w != me)
            .max_by(|(wa, a), (wb, b)| a.len().cmp(&b.len()).then_with(|| wb.cmp(wa)))
            .map(|(w, _)| *w);
        let Some(victim) = victim else { break };
        let Some(shards) = held.get_mut(victim) else {
            break;
        };
        if shards.len() < mine + 2 {
            break;
        }
        let Some(shard) = shards.pop() else { break };
        plan.steal.push(Steal {
            shard_id: shard.to_owned(),
            from: victim.to_owned(),
        });
        mine += 1;
    }
    plan
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{LeaseEvent, LeaseState, Progress};
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
        assert_eq!(plan.take, ids(&leases)[..3].to_vec());
        assert!(plan.steal.is_empty());
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

    proptest! {
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
                // Live workers renew what they hold.
                for lease in &mut leases {
                    if lease.owner.as_deref().is_some_and(|o| workers.iter().any(|w| w == o)) {
                        lease.expires_at_ms = now + DURATION;
                    }
                }
                let mut moved = false;
                for i in 0..workers.len() {
                    let me = &workers[(i + order[r % order.len()]) % workers.len()];
                    let before = counts(&leases, &workers, now);
                    let plan = round(me, &mut leases, &workers, now);
                    moved |= !plan.is_empty();
                    let after = counts(&leases, &workers, now);
                    let mine = workers.iter().position(|w| w == me).unwrap();
                    // Never overshoot: the thief ends at or under the target...
                    prop_assert!(after[mine] <= plan.target.max(before[mine]));
                    // ...and never below a worker it stole from.
                    for steal in &plan.steal {
                        let victim = workers.iter().position(|w| *w == steal.from).unwrap();
                        prop_assert!(after[victim] >= after[mine]);
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
