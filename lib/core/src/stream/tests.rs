//! Lineage, leases and resharding histories, as specifications.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::counter::Seq;

fn shard(id: &str, parent: Option<&str>, adjacent: Option<&str>) -> ShardInfo {
    ShardInfo {
        parent: parent.map(str::to_owned),
        adjacent_parent: adjacent.map(str::to_owned),
        ..ShardInfo::new(id)
    }
}

fn closed(mut info: ShardInfo) -> ShardInfo {
    info.ending_seq = Some("999".into());
    info
}

fn finished(ids: &[&str]) -> Checkpoints {
    ids.iter()
        .map(|id| ((*id).to_owned(), Progress::Finished))
        .collect()
}

// ---- the graph ----

#[test]
fn a_split_child_waits_for_its_parent() {
    let graph = ShardGraph::new(vec![
        closed(shard("s0", None, None)),
        shard("s1", Some("s0"), None),
        shard("s2", Some("s0"), None),
    ])
    .unwrap();
    let mut cp = Checkpoints::new();
    assert_eq!(eligible(&graph, &cp), ["s0"]);
    cp.set("s0", Progress::InProgress(Seq::from(5).into()));
    assert_eq!(eligible(&graph, &cp), ["s0"]);
    cp.set("s0", Progress::Finished);
    assert_eq!(eligible(&graph, &cp), ["s1", "s2"]);
    assert_eq!(graph.children_of("s0"), ["s1", "s2"]);
}

#[test]
fn a_merge_child_waits_for_its_adjacent_parent() {
    let graph = ShardGraph::new(vec![
        closed(shard("a", None, None)),
        closed(shard("b", None, None)),
        shard("m", Some("a"), Some("b")),
    ])
    .unwrap();
    // vmware-go-kcl's bug: the parent done, the adjacent parent not, and the child started.
    assert_eq!(eligible(&graph, &finished(&["a"])), ["b"]);
    assert_eq!(eligible(&graph, &finished(&["b"])), ["a"]);
    assert_eq!(eligible(&graph, &finished(&["a", "b"])), ["m"]);
}

#[test]
fn a_trimmed_parent_does_not_block_its_children() {
    // "old" is gone past retention: only its id remains, in the children's parent fields.
    let graph = ShardGraph::new(vec![
        shard("c1", Some("old"), None),
        shard("m", Some("old"), Some("c1")),
    ])
    .unwrap();
    assert_eq!(eligible(&graph, &Checkpoints::new()), ["c1"]);
    assert_eq!(graph.parents_in_graph("m"), ["c1"]);
    let mut graph = ShardGraph::new(vec![
        closed(shard("p", None, None)),
        shard("c", Some("p"), None),
    ])
    .unwrap();
    assert_eq!(eligible(&graph, &Checkpoints::new()), ["p"]);
    graph.remove("p");
    assert_eq!(eligible(&graph, &Checkpoints::new()), ["c"]);
}

#[test]
fn eligible_shards_come_parents_first_then_by_id() {
    let graph = ShardGraph::new(vec![
        shard("z-root", None, None),
        closed(shard("a-root", None, None)),
        shard("b-child", Some("a-root"), None),
        shard("a-grandchild", Some("b-child"), None),
    ])
    .unwrap();
    assert_eq!(
        graph.lineage_order().collect::<Vec<_>>(),
        ["a-root", "z-root", "b-child", "a-grandchild"]
    );
    assert_eq!(graph.depth("a-grandchild"), Some(2));
    assert_eq!(
        eligible(&graph, &finished(&["a-root"])),
        ["z-root", "b-child"]
    );
    assert_eq!(
        eligible(
            &graph,
            &finished(&["a-root", "z-root", "b-child", "a-grandchild"])
        ),
        Vec::<String>::new()
    );
}

#[test]
fn a_malformed_listing_is_a_typed_error() {
    let dup = ShardGraph::new(vec![shard("a", None, None), shard("a", None, None)]);
    assert_eq!(dup.unwrap_err(), StreamError::DuplicateShard("a".into()));
    let own = ShardGraph::new(vec![shard("a", Some("a"), None)]);
    assert_eq!(own.unwrap_err(), StreamError::SelfParent("a".into()));
    let own_adjacent = ShardGraph::new(vec![shard("a", Some("b"), Some("a"))]);
    assert_eq!(
        own_adjacent.unwrap_err(),
        StreamError::SelfParent("a".into())
    );
    let cycle = ShardGraph::new(vec![
        shard("a", Some("c"), None),
        shard("b", Some("a"), None),
        shard("c", Some("b"), None),
        shard("d", None, None),
    ]);
    assert!(
        matches!(cycle.unwrap_err(), StreamError::Cycle(id) if ["a", "b", "c"].contains(&id.as_str()))
    );
    for bad in [
        shard("", None, None),
        shard("a", None, Some("b")),
        shard("a", Some("b"), Some("b")),
        ShardInfo {
            hash_range: Some((5, 4)),
            ..ShardInfo::new("a")
        },
    ] {
        assert!(matches!(
            ShardGraph::new(vec![bad]),
            Err(StreamError::InvalidShard { .. })
        ));
    }
    assert!(ShardInfo::from_child_shard("x", &["a".into(), "b".into(), "c".into()], None).is_err());
}

#[test]
fn discovered_children_merge_into_the_graph() {
    let mut graph = ShardGraph::new(vec![shard("a", None, None), shard("b", None, None)]).unwrap();
    // GetRecords on "a" at its end announces the merge child; ListShards later closes "a".
    let child = ShardInfo::from_child_shard("m", &["b".into(), "a".into()], Some((0, 9))).unwrap();
    assert_eq!(graph.merge(vec![child]).unwrap(), ["m"]);
    assert_eq!(graph.children_of("a"), ["m"]);
    let listed = vec![
        closed(shard("a", None, None)),
        ShardInfo {
            starting_seq: Some("1000".into()),
            ..shard("m", Some("a"), Some("b"))
        },
    ];
    assert_eq!(graph.merge(listed).unwrap(), Vec::<String>::new());
    assert!(graph.get("a").unwrap().is_closed());
    assert_eq!(graph.get("m").unwrap().hash_range, Some((0, 9)));
    assert_eq!(
        graph.get("m").unwrap().starting_seq.as_deref(),
        Some("1000")
    );
}

#[test]
fn a_conflicting_rediscovery_is_rejected_and_changes_nothing() {
    let mut graph =
        ShardGraph::new(vec![shard("a", None, None), shard("c", Some("a"), None)]).unwrap();
    let err = graph.merge(vec![shard("c", Some("b"), None), shard("new", None, None)]);
    assert_eq!(
        err.unwrap_err(),
        StreamError::ConflictingShard {
            shard_id: "c".into(),
            field: "parents"
        }
    );
    assert!(!graph.contains("new"));
    let cycle = graph.merge(vec![
        shard("a2", Some("c2"), None),
        shard("c2", Some("a2"), None),
    ]);
    assert!(matches!(cycle, Err(StreamError::Cycle(_))));
    assert_eq!(graph.len(), 2);
}

#[test]
fn checkpoints_round_trip_through_the_lease_table_form() {
    for p in [
        Progress::NotStarted,
        Progress::Finished,
        Progress::InProgress(
            Seq::parse("49590338271490256608559692538361571095921575989136588898")
                .unwrap()
                .into(),
        ),
    ] {
        assert_eq!(Progress::from_checkpoint(&p.to_checkpoint()).unwrap(), p);
    }
    assert_eq!(Progress::from_checkpoint("LATEST"), Ok(Progress::Latest));
    assert_eq!(
        Progress::from_checkpoint("YESTERDAY"),
        Err(StreamError::InvalidCheckpoint("YESTERDAY".into()))
    );
}

// ---- leases ----

fn take(worker: &str, now_ms: u64) -> LeaseEvent {
    LeaseEvent::Take {
        worker: worker.into(),
        now_ms,
        duration_ms: 10_000,
    }
}

fn checkpoint(worker: &str, counter: u64, seq: u64) -> LeaseEvent {
    LeaseEvent::Checkpoint {
        worker: worker.into(),
        counter,
        position: Seq::from(seq).into(),
    }
}

#[test]
fn the_lease_lifecycle_follows_the_diagram() {
    let lease = Lease::discovered(&shard("s1", Some("s0"), None));
    assert_eq!(lease.parents, ["s0"]);
    let lease = lease.apply(&take("w1", 0)).unwrap();
    assert_eq!(
        (lease.state, lease.owner.as_deref(), lease.counter),
        (LeaseState::Leased, Some("w1"), 1)
    );
    let lease = lease.apply(&checkpoint("w1", 1, 10)).unwrap();
    assert_eq!(lease.state, LeaseState::Processing);
    let renew = LeaseEvent::Renew {
        worker: "w1".into(),
        counter: 1,
        now_ms: 5_000,
        duration_ms: 10_000,
    };
    let lease = lease.apply(&renew).unwrap();
    assert_eq!((lease.expires_at_ms, lease.counter), (15_000, 1));
    let lease = lease
        .apply(&LeaseEvent::ReachShardEnd {
            worker: "w1".into(),
            counter: 1,
        })
        .unwrap();
    assert_eq!(
        (lease.state, &lease.checkpoint, lease.owner.as_ref()),
        (LeaseState::ShardEnd, &Progress::Finished, None)
    );
    let lease = lease.apply(&LeaseEvent::CreateChildren).unwrap();
    assert_eq!(lease.state, LeaseState::ChildrenCreated);
    let lease = lease.apply(&LeaseEvent::Delete).unwrap();
    assert_eq!(lease.state, LeaseState::Deleted);
}

#[test]
fn every_transition_outside_the_diagram_is_a_typed_error() {
    use LeaseState as S;
    let events = [
        take("w", 0),
        LeaseEvent::Steal {
            worker: "w".into(),
            now_ms: 0,
            duration_ms: 1,
        },
        LeaseEvent::Renew {
            worker: "w".into(),
            counter: 0,
            now_ms: 0,
            duration_ms: 1,
        },
        checkpoint("w", 0, 1),
        LeaseEvent::Release {
            worker: "w".into(),
            counter: 0,
        },
        LeaseEvent::ReachShardEnd {
            worker: "w".into(),
            counter: 0,
        },
        LeaseEvent::CreateChildren,
        LeaseEvent::Delete,
        LeaseEvent::Trim,
    ];
    // The arrows of the module doc's diagram, and nothing else.
    let arrows: BTreeMap<(S, &str), S> = [
        ((S::Discovered, "take"), S::Leased),
        ((S::Leased, "take"), S::Leased),
        ((S::Leased, "steal"), S::Leased),
        ((S::Leased, "renew"), S::Leased),
        ((S::Leased, "checkpoint"), S::Processing),
        ((S::Leased, "release"), S::Discovered),
        ((S::Leased, "reach_shard_end"), S::ShardEnd),
        ((S::Processing, "take"), S::Leased),
        ((S::Processing, "steal"), S::Leased),
        ((S::Processing, "renew"), S::Processing),
        ((S::Processing, "checkpoint"), S::Processing),
        ((S::Processing, "release"), S::Discovered),
        ((S::Processing, "reach_shard_end"), S::ShardEnd),
        ((S::ShardEnd, "create_children"), S::ChildrenCreated),
        ((S::ChildrenCreated, "delete"), S::Deleted),
        ((S::Discovered, "trim"), S::Deleted),
        ((S::Leased, "trim"), S::Deleted),
        ((S::Processing, "trim"), S::Deleted),
        ((S::ShardEnd, "trim"), S::Deleted),
        ((S::ChildrenCreated, "trim"), S::Deleted),
    ]
    .into_iter()
    .collect();
    for from in [
        S::Discovered,
        S::Leased,
        S::Processing,
        S::ShardEnd,
        S::ChildrenCreated,
        S::Deleted,
    ] {
        for event in &events {
            let got = from.after(event);
            match arrows.get(&(from, event.name())) {
                Some(to) => assert_eq!(got, Ok(*to), "{from} {}", event.name()),
                None => assert_eq!(
                    got,
                    Err(StreamError::IllegalTransition {
                        from,
                        event: event.name()
                    })
                ),
            }
        }
    }
}

#[test]
fn an_unexpired_lease_cannot_be_taken_only_stolen() {
    let lease = Lease::discovered(&ShardInfo::new("s"))
        .apply(&take("w1", 0))
        .unwrap();
    assert!(matches!(
        lease.apply(&take("w2", 9_999)),
        Err(StreamError::LeaseHeld { ref owner, expires_at_ms: 10_000, .. }) if owner == "w1"
    ));
    let taken = lease.apply(&take("w2", 10_000)).unwrap();
    assert_eq!((taken.owner.as_deref(), taken.counter), (Some("w2"), 2));
    let stolen = lease
        .apply(&LeaseEvent::Steal {
            worker: "w3".into(),
            now_ms: 1,
            duration_ms: 10_000,
        })
        .unwrap();
    assert_eq!((stolen.owner.as_deref(), stolen.counter), (Some("w3"), 2));
    assert_eq!(
        stolen.apply(&LeaseEvent::Steal {
            worker: "w3".into(),
            now_ms: 1,
            duration_ms: 1
        }),
        Err(StreamError::AlreadyOwner {
            shard_id: "s".into()
        })
    );
}

#[test]
fn a_zombie_cannot_checkpoint_after_a_takeover() {
    let lease = Lease::discovered(&ShardInfo::new("s"))
        .apply(&take("w1", 0))
        .unwrap()
        .apply(&checkpoint("w1", 1, 10))
        .unwrap();
    // w1 stalls past expiry; w2 takes over and resumes from checkpoint 10.
    let lease = lease.apply(&take("w2", 20_000)).unwrap();
    assert_eq!(lease.checkpoint, Progress::InProgress(Seq::from(10).into()));
    for zombie in [
        checkpoint("w1", 1, 50),
        LeaseEvent::ReachShardEnd {
            worker: "w1".into(),
            counter: 1,
        },
        LeaseEvent::Release {
            worker: "w1".into(),
            counter: 1,
        },
    ] {
        assert_eq!(
            lease.apply(&zombie),
            Err(StreamError::LeaseLost {
                shard_id: "s".into(),
                holder: Some("w2".into()),
                counter: 2
            })
        );
    }
    // Even the same worker with an old token: a release and re-take fences the old epoch.
    assert!(lease.apply(&checkpoint("w2", 1, 50)).is_err());
    assert!(lease.apply(&checkpoint("w2", 2, 50)).is_ok());
}

#[test]
fn a_checkpoint_never_moves_backwards() {
    let lease = Lease::discovered(&ShardInfo::new("s"))
        .apply(&take("w1", 0))
        .unwrap()
        .apply(&checkpoint("w1", 1, 10))
        .unwrap();
    assert!(matches!(
        lease.apply(&checkpoint("w1", 1, 9)),
        Err(StreamError::CheckpointRegression { .. })
    ));
    assert!(
        lease.apply(&checkpoint("w1", 1, 10)).is_ok(),
        "a retried checkpoint is fine"
    );
}

#[test]
fn a_released_lease_keeps_its_checkpoint_for_the_next_holder() {
    let lease = Lease::discovered(&ShardInfo::new("s"))
        .apply(&take("w1", 0))
        .unwrap()
        .apply(&checkpoint("w1", 1, 7))
        .unwrap()
        .apply(&LeaseEvent::Release {
            worker: "w1".into(),
            counter: 1,
        })
        .unwrap();
    assert_eq!(
        (lease.state, lease.owner.as_ref(), lease.counter),
        (LeaseState::Discovered, None, 2)
    );
    let next = lease.apply(&take("w2", 1)).unwrap();
    assert_eq!(next.checkpoint, Progress::InProgress(Seq::from(7).into()));
}

// ---- resharding histories ----

#[derive(Clone, Debug)]
enum Step {
    Put(usize),
    Op(ReshardOp),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (0usize..64).prop_map(Step::Put),
        1 => (any::<usize>(), any::<u128>()).prop_map(|(pick, at)| Step::Op(ReshardOp::Split { pick, at })),
        1 => any::<usize>().prop_map(|pick| Step::Op(ReshardOp::Merge { pick })),
        1 => (1usize..9).prop_map(|target| Step::Op(ReshardOp::UpdateShardCount { target })),
    ];
    prop::collection::vec(step, 0..40)
}

/// Key hashes, with the edges of the hash space and of the first split always present.
fn hashes() -> impl Strategy<Value = Vec<u128>> {
    prop::collection::vec(any::<u128>(), 1..5).prop_map(|mut v| {
        v.extend([0, u128::MAX, 1 << 127, (1 << 127) - 1]);
        v
    })
}

fn build(initial: usize, steps: &[Step], hashes: &[u128]) -> ReshardSim {
    let mut sim = ReshardSim::new(initial);
    for step in steps {
        match step {
            Step::Put(k) => {
                sim.put(hashes[k % hashes.len()]);
            }
            Step::Op(op) => sim.apply(op),
        }
    }
    sim
}

/// A consumer that, at every step, advances one eligible shard chosen by `picks`: reads its
/// next record, or marks it finished when it is closed and fully read. Checks guarantee 1 on
/// the way and returns the records in the order read.
fn consume(
    sim: &ReshardSim,
    graph: &ShardGraph,
    picks: &[usize],
) -> Result<(Vec<SimRecord>, Checkpoints), TestCaseError> {
    let mut checkpoints = Checkpoints::new();
    let mut cursor: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    let limit = graph.len() * 2
        + sim
            .shards()
            .iter()
            .map(|s| sim.records(&s.shard_id).len())
            .sum::<usize>()
        + 1;
    for step in 0..=limit {
        prop_assert!(step < limit, "the consumer did not settle");
        let ready = eligible(graph, &checkpoints);
        for id in &ready {
            let info = graph
                .get(id)
                .ok_or_else(|| TestCaseError::fail("eligible shard not listed"))?;
            for parent in info.parents().filter(|p| graph.contains(p)) {
                prop_assert!(
                    checkpoints.is_finished(parent),
                    "{} eligible before its parent {}",
                    id,
                    parent
                );
            }
        }
        let movable: Vec<&String> = ready
            .iter()
            .filter(|id| {
                let read = cursor.get(*id).copied().unwrap_or(0);
                read < sim.records(id).len() || graph.get(id).is_some_and(ShardInfo::is_closed)
            })
            .collect();
        if movable.is_empty() {
            break;
        }
        let pick = picks[step % picks.len()];
        let id = movable[pick % movable.len()].clone();
        let read = cursor.entry(id.clone()).or_insert(0);
        let records = sim.records(&id);
        if *read == records.len() {
            checkpoints.set(id, Progress::Finished);
            continue;
        }
        // Read a short run (1 to 4 records), so shards interleave at varying granularity.
        let end = (*read + 1 + (pick / 7) % 4).min(records.len());
        out.extend_from_slice(&records[*read..end]);
        *read = end;
        checkpoints.set(
            id,
            Progress::InProgress(records[end - 1].seq.clone().into()),
        );
    }
    Ok((out, checkpoints))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_generated_history_is_a_valid_lineage(seed: u64, initial in 1usize..6) {
        let sim = ReshardSim::random(seed, initial, 80);
        let graph = sim.graph().unwrap();
        let open = sim.open_shards();
        prop_assert_eq!(open.first().and_then(|s| s.hash_range).map(|r| r.0), Some(0));
        prop_assert_eq!(open.last().and_then(|s| s.hash_range).map(|r| r.1), Some(u128::MAX));
        for pair in open.windows(2) {
            let (a, b) = (pair[0].hash_range.unwrap(), pair[1].hash_range.unwrap());
            prop_assert_eq!(a.1 + 1, b.0, "open shards tile the hash space");
        }
        for info in graph.shards() {
            let (start, end) = info.hash_range.unwrap();
            // A child lies inside its parents' union...
            let parents: Vec<(u128, u128)> = info.parents().map(|p| graph.get(p).unwrap().hash_range.unwrap()).collect();
            if !parents.is_empty() {
                prop_assert!(parents.iter().map(|r| r.0).min().unwrap() <= start);
                prop_assert!(parents.iter().map(|r| r.1).max().unwrap() >= end);
            }
            // ...and a closed shard's children cover its whole range, without gaps.
            if info.is_closed() {
                let mut children: Vec<(u128, u128)> = graph.children_of(&info.shard_id).iter()
                    .map(|c| graph.get(c).unwrap().hash_range.unwrap()).collect();
                children.sort_unstable();
                prop_assert!(!children.is_empty());
                prop_assert!(children[0].0 <= start && children[children.len() - 1].1 >= end);
                for pair in children.windows(2) {
                    prop_assert_eq!(pair[0].1 + 1, pair[1].0);
                }
            } else {
                prop_assert!(graph.children_of(&info.shard_id).is_empty());
            }
        }
    }

    #[test]
    fn no_eligible_shard_ever_has_an_unfinished_parent_and_every_shard_finishes(
        initial in 1usize..5,
        steps in steps(),
        hashes in hashes(),
        picks in prop::collection::vec(any::<usize>(), 1..8),
    ) {
        let sim = build(initial, &steps, &hashes);
        let graph = sim.graph().unwrap();
        let (out, checkpoints) = consume(&sim, &graph, &picks)?;
        for info in graph.shards() {
            if info.is_closed() {
                prop_assert!(checkpoints.is_finished(&info.shard_id), "{} never finished", info.shard_id);
            }
        }
        let open: BTreeSet<String> = sim.open_shards().iter().map(|s| s.shard_id.clone()).collect();
        let ready: BTreeSet<String> = eligible(&graph, &checkpoints).into_iter().collect();
        prop_assert_eq!(ready, open, "only the open shards remain, all readable");
        let total: usize = graph.shards().map(|s| sim.records(&s.shard_id).len()).sum();
        prop_assert_eq!(out.len(), total, "every record read once");
    }

    #[test]
    fn trimmed_ancestors_never_block_and_order_holds_for_what_remains(
        initial in 1usize..5,
        steps in steps(),
        hashes in hashes(),
        picks in prop::collection::vec(any::<usize>(), 1..8),
        trim in any::<prop::sample::Index>(),
    ) {
        let sim = build(initial, &steps, &hashes);
        let cut = trim.index(sim.ops() + 2);
        let trimmed: BTreeSet<&str> = sim.closed_before(cut).into_iter().collect();
        let kept: Vec<ShardInfo> = sim.shards().iter().filter(|s| !trimmed.contains(s.shard_id.as_str())).cloned().collect();
        let graph = ShardGraph::new(kept).unwrap();
        let (out, checkpoints) = consume(&sim, &graph, &picks)?;
        for info in graph.shards().filter(|s| s.is_closed()) {
            prop_assert!(checkpoints.is_finished(&info.shard_id));
        }
        let total: usize = graph.shards().map(|s| sim.records(&s.shard_id).len()).sum();
        prop_assert_eq!(out.len(), total);
        prop_assert!(in_creation_order_per_key(&out));
    }

    #[test]
    fn each_keys_records_are_read_in_creation_order_across_reshards(
        initial in 1usize..5,
        steps in steps(),
        hashes in hashes(),
        picks in prop::collection::vec(any::<usize>(), 1..8),
    ) {
        let sim = build(initial, &steps, &hashes);
        let (out, _) = consume(&sim, &sim.graph().unwrap(), &picks)?;
        prop_assert!(in_creation_order_per_key(&out));
    }
}

/// True if, for every hash key, its records appear with increasing sequence numbers.
fn in_creation_order_per_key(out: &[SimRecord]) -> bool {
    let mut last: BTreeMap<u128, &Seq> = BTreeMap::new();
    out.iter()
        .all(|r| last.insert(r.hash, &r.seq).is_none_or(|prev| *prev < r.seq))
}

#[test]
fn a_random_history_with_many_reshards_drains_in_lineage_order() {
    let sim = ReshardSim::random(42, 3, 200);
    let graph = sim.graph().unwrap();
    let (out, _) = consume(&sim, &graph, &[3, 1, 4, 1, 5, 9, 2, 6]).unwrap();
    assert!(in_creation_order_per_key(&out));
    assert!(
        graph.len() > 20,
        "the history reshards a lot: {}",
        graph.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A first start at LATEST, after any resharding history: every closed shard is finished,
    /// every open one starts at its tip, and every open shard is eligible at once (nothing old
    /// is read and nothing waits for an ancestor). At AT_TIMESTAMP every shard starts at the time
    /// and only the roots are eligible, so lineage order still holds.
    #[test]
    fn a_first_start_applies_the_initial_position_to_the_current_leaves(
        seed in any::<u64>(), initial in 1usize..4, steps in 0usize..8, at in 1u64..u64::MAX,
    ) {
        let sim = ReshardSim::random(seed, initial, steps);
        let graph = sim.graph().unwrap();
        let leases = first_start(&graph, InitialPosition::Latest, 7);
        prop_assert_eq!(leases.len(), graph.len());
        let checkpoints: Checkpoints =
            leases.iter().map(|l| (l.shard_id.clone(), l.checkpoint.clone())).collect();
        for lease in &leases {
            let info = graph.get(&lease.shard_id).unwrap();
            prop_assert_eq!(lease.counter, 7);
            if info.is_closed() {
                prop_assert_eq!(&lease.checkpoint, &Progress::Finished);
                prop_assert_eq!(lease.state, LeaseState::ChildrenCreated);
            } else {
                prop_assert_eq!(&lease.checkpoint, &Progress::Latest);
                prop_assert_eq!(lease.state, LeaseState::Discovered);
            }
        }
        let ready: BTreeSet<String> = eligible(&graph, &checkpoints).into_iter().collect();
        let open: BTreeSet<String> =
            graph.shards().filter(|s| !s.is_closed()).map(|s| s.shard_id.clone()).collect();
        prop_assert_eq!(ready, open);

        let leases = first_start(&graph, InitialPosition::AtTimestamp(at), 7);
        prop_assert!(leases.iter().all(|l| l.checkpoint == Progress::AtTimestamp(at)));
        let checkpoints: Checkpoints =
            leases.iter().map(|l| (l.shard_id.clone(), l.checkpoint.clone())).collect();
        for id in eligible(&graph, &checkpoints) {
            prop_assert!(graph.parents_in_graph(&id).is_empty(), "{} waits for no parent", id);
        }
        let leases = first_start(&graph, InitialPosition::TrimHorizon, 7);
        prop_assert!(leases.iter().all(|l| l.checkpoint == Progress::NotStarted));
    }

    /// Positions order like (seq, sub-record), a whole record after all its sub-records, and
    /// round-trip through the stored form; so do the start sentinels.
    #[test]
    fn positions_order_by_seq_then_sub_record_and_round_trip(
        a in 0u64..50, b in 0u64..50, sa in proptest::option::of(0u64..5),
        sb in proptest::option::of(0u64..5), ms in any::<u64>(),
    ) {
        let pa = Position { seq: Seq::from(a), sub_seq: sa };
        let pb = Position { seq: Seq::from(b), sub_seq: sb };
        let key = |s: Option<u64>| s.map_or(u64::MAX as u128 + 1, u128::from);
        prop_assert_eq!(pa.cmp(&pb), (a, key(sa)).cmp(&(b, key(sb))));
        for p in [
            Progress::InProgress(pa.clone()),
            Progress::Latest,
            Progress::AtTimestamp(ms),
            Progress::NotStarted,
            Progress::Finished,
        ] {
            prop_assert_eq!(Progress::from_checkpoint(&p.to_checkpoint()), Ok(p));
        }
    }
}

#[test]
fn a_checkpoint_inside_an_aggregate_may_not_move_back() {
    let mut lease = Lease::discovered(&ShardInfo::new("shardId-0"));
    lease.owner = Some("w".into());
    lease.state = LeaseState::Processing;
    lease.checkpoint = Progress::InProgress(Position::sub_record(Seq::from(9), 3));
    let at = |sub| LeaseEvent::Checkpoint {
        worker: "w".into(),
        counter: lease.counter,
        position: Position {
            seq: Seq::from(9),
            sub_seq: sub,
        },
    };
    assert!(matches!(
        lease.apply(&at(Some(2))),
        Err(StreamError::CheckpointRegression { .. })
    ));
    assert!(lease.apply(&at(Some(4))).is_ok());
    assert!(lease.apply(&at(None)).is_ok());
    assert!(Progress::from_checkpoint("AT_TIMESTAMP:x").is_err());
    assert!(Progress::from_checkpoint("12/x").is_err());
}
