//! Unit tests of `plan_round`.

use std::collections::BTreeMap;

use super::super::{Lease, LeaseState, ReshardSim};
use super::*;

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
    });
    assert_eq!(plan.repair.len(), 1);
    assert!(
        matches!(&plan.repair[0], Repair::Replace(l) if l.shard_id == id && l.counter == 9_001)
    );
    assert_eq!(plan.malformed_unlisted, vec!["shardId-gone".to_owned()]);
    // Nothing to take before the row is replaced and read again.
    assert!(plan.take.is_empty());
}
