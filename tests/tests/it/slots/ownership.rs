//! Ownership that survives round trips, and one controller at a time: a range moved
//! A → B → A → B takes writes on its owner after every move (default and strict mode); orphan
//! fences are found and removed, and a live move's fences are not (repair is refused while its
//! controller runs); a controller that lost its lease, or whose range was unmarked, writes no
//! fence; abort and resume from a second controller are refused while a
//! mover runs.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::slots::fence::{FenceItem, KeySchema, fence_item, read_fence};
use heatsink::slots::repair::{MovingRange, repair_fences};
use heatsink::slots::{MoveError, Phase, RetryRule, Router, slot_of};
use heatsink_testkit::{Fixture, fixture};

use super::{LEASE, MAX_AGE, SERIAL, Scene, quarter, start_load};

/// A key of the moved slot no load writes.
fn probe_key(n: u32) -> String {
    (0..)
        .map(|i| format!("{{t0}}probe-{n}-{i}"))
        .find(|k| quarter().contains(slot_of(k)))
        .expect("a key")
}

async fn round_trip(fx: &Fixture, strict: bool) {
    let _serial = SERIAL.lock().await;
    let s = Scene::new(fx, strict).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tables = [s.b.clone(), s.a.clone(), s.b.clone()];
    for (i, to) in tables.iter().enumerate() {
        let mut spec = s.spec(strict);
        spec.to = to.clone();
        let mut m = s.start_spec(spec).await;
        m.run().await.expect("move");
        // A router that loads the map now writes the slot to its new owner at its new epoch.
        let fresh = Router::new(s.ddb.clone(), s.dir.clone(), MAX_AGE);
        let ack = fresh
            .put_versioned(&probe_key(i as u32), 1, HashMap::new())
            .await
            .unwrap_or_else(|e| panic!("move {} to {to}: the owner refused: {e}", i + 1));
        assert_eq!(
            (ack.owner.as_str(), ack.epoch),
            (to.as_str(), 2 + i as u64),
            "after move {}",
            i + 1
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (report, acks) = load.finish(&s.router).await;
    let on_owner = acks
        .iter()
        .filter(|a| quarter().contains(slot_of(&a.key)) && a.epoch == 4)
        .count();
    assert!(
        on_owner > 0,
        "the load wrote the slot after the last move: {report:?}"
    );
    let fences = repair_fences(&s.ddb, &s.dir, false)
        .await
        .expect("repair-fences");
    assert!(fences.fixes.is_empty(), "{:?}", fences.fixes);
}

#[tokio::test]
async fn a_range_moved_a_b_a_b_takes_writes_on_its_owner_after_every_move() {
    let fx = fixture!("a_range_moved_a_b_a_b_takes_writes_on_its_owner_after_every_move");
    round_trip(&fx, false).await;
}

#[tokio::test]
async fn a_range_moved_a_b_a_b_in_a_strict_directory_takes_writes_on_its_owner_after_every_move() {
    let fx = fixture!(
        "a_range_moved_a_b_a_b_in_a_strict_directory_takes_writes_on_its_owner_after_every_move"
    );
    round_trip(&fx, true).await;
}

/// An abort interrupted after it unmarked the range but before its fence went (as the old
/// mover could leave it, or a hand edit): the owner refuses its own slot in a strict
/// directory. `repair-fences` reports it, and with `--apply` removes it.
#[tokio::test]
async fn repair_fences_finds_and_removes_an_orphan_fence_that_refuses_the_owner() {
    let fx = fixture!("repair_fences_finds_and_removes_an_orphan_fence_that_refuses_the_owner");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, true).await;
    let keys = KeySchema { sort_key: None };
    let orphan = FenceItem {
        to: s.b.clone(),
        epoch: 2,
        move_id: Some("mv-gone".into()),
        token: Some(1),
    };
    s.ddb
        .put_item()
        .table_name(&s.a)
        .set_item(Some(fence_item(&keys, quarter().first, &orphan)))
        .send()
        .await
        .expect("orphan");
    let impatient = Router::with(
        s.ddb.clone(),
        s.dir.clone(),
        MAX_AGE,
        true,
        RetryRule {
            max_moved: 10,
            ..RetryRule::default()
        },
    );
    let err = impatient
        .put_versioned(&probe_key(0), 1, HashMap::new())
        .await
        .expect_err("the orphan refuses the owner");
    assert!(matches!(err, MoveError::GaveUp { .. }), "{err}");
    let found = repair_fences(&s.ddb, &s.dir, false).await.expect("report");
    assert_eq!(found.fixes.len(), 1, "{found:?}");
    assert_eq!(
        (
            found.fixes[0].table.as_str(),
            found.fixes[0].slot,
            found.fixes[0].action.as_str()
        ),
        (s.a.as_str(), quarter().first, "remove")
    );
    let fixed = repair_fences(&s.ddb, &s.dir, true).await.expect("apply");
    assert!(fixed.applied && fixed.fixes.len() == 1);
    assert_eq!(
        read_fence(&s.ddb, &s.a, &keys, quarter().first)
            .await
            .expect("read"),
        None
    );
    let ack = impatient
        .put_versioned(&probe_key(0), 1, HashMap::new())
        .await
        .expect("the owner takes its slot again");
    assert_eq!(ack.owner, s.a);
    assert!(
        repair_fences(&s.ddb, &s.dir, false)
            .await
            .expect("again")
            .fixes
            .is_empty()
    );
}

/// A move that has fenced its range: while its controller runs, `repair-fences` (dry run and
/// `--apply`) is refused, naming the controller, and the fences stay. Once that controller is
/// gone (killed: its lease ended) the range is still marked moving, so the fences that refuse
/// the source are the move's, not orphans: the report names the move and `--apply` removes
/// nothing. The move then finishes from where it stopped and the slot takes writes on its new
/// owner.
#[tokio::test]
async fn repair_fences_leaves_a_live_moves_fences_and_is_refused_while_it_runs() {
    let fx = fixture!("repair_fences_leaves_a_live_moves_fences_and_is_refused_while_it_runs");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let keys = KeySchema { sort_key: None };
    let mut m = s.start(false).await;
    let id = m.record().id.clone();
    while m.record().phase != Phase::Fenced {
        m.step().await.expect("step");
    }
    let fence = |slot| read_fence(&s.ddb, &s.a, &keys, slot);
    let fenced = fence(quarter().first).await.expect("read").expect("fenced");
    assert_eq!(fenced.move_id.as_deref(), Some(id.as_str()));
    for apply in [false, true] {
        match repair_fences(&s.ddb, &s.dir, apply).await {
            Err(MoveError::Held(h)) => {
                assert_eq!(h.move_id, id);
                assert!(!h.holder.is_empty() && h.left_ms > 0, "{h:?}");
            }
            other => panic!("repair ran beside a running controller: {other:?}"),
        }
    }
    assert_eq!(
        fence(quarter().first).await.expect("read"),
        Some(fenced.clone())
    );
    // The controller is killed; its lease ends.
    drop(m);
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    for apply in [false, true] {
        let report = repair_fences(&s.ddb, &s.dir, apply)
            .await
            .expect("no controller runs");
        assert!(report.fixes.is_empty(), "{:?}", report.fixes);
        assert_eq!(
            report.moving,
            vec![MovingRange {
                slots: quarter(),
                move_id: id.clone()
            }]
        );
    }
    for slot in [quarter().first, quarter().last] {
        assert_eq!(
            fence(slot).await.expect("read").map(|f| f.move_id),
            Some(Some(id.clone())),
            "slot {slot}: the move's fence stays"
        );
    }
    let mut next = s.open(&id).await;
    held!(next.run().await).expect("the move finishes");
    assert_eq!(next.record().phase, Phase::Done);
    drop(next);
    let ack = s
        .router
        .put_versioned(&probe_key(7), 1, HashMap::new())
        .await
        .expect("writable on the new owner");
    assert_eq!(ack.owner, s.b);
    let after = repair_fences(&s.ddb, &s.dir, false).await.expect("report");
    assert!(
        after.fixes.is_empty() && after.moving.is_empty(),
        "{after:?}"
    );
}

/// A controller whose lease another one took over (it was paused past its lease) writes no
/// fence: the fence transaction checks the lease token. Nor does one whose range an abort
/// unmarked. A new controller then finishes the move.
#[tokio::test]
async fn a_controller_that_lost_its_lease_or_its_mark_writes_no_fence() {
    let fx = fixture!("a_controller_that_lost_its_lease_or_its_mark_writes_no_fence");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let keys = KeySchema { sort_key: None };
    let mut m = s.start(false).await;
    let id = m.record().id.clone();
    while m.record().phase != Phase::Diffed {
        m.step().await.expect("step");
    }
    // Another controller takes the lease (as `take` writes it: the next token).
    s.ddb
        .update_item()
        .table_name(s.dir.table())
        .key("pk", AttributeValue::S("move".into()))
        .key("sk", AttributeValue::S(id.clone()))
        .update_expression("SET #t = #t + :one, #u = :u, #h = :h")
        .expression_attribute_names("#t", "token")
        .expression_attribute_names("#u", "until")
        .expression_attribute_names("#h", "holder")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":u", AttributeValue::N("1".into()))
        .expression_attribute_values(":h", AttributeValue::S("someone-else".into()))
        .send()
        .await
        .expect("take over");
    let err = m.step().await.expect_err("lease lost");
    assert!(matches!(err, MoveError::LeaseLost { .. }), "{err}");
    assert_eq!(
        read_fence(&s.ddb, &s.a, &keys, quarter().first)
            .await
            .expect("read"),
        None,
        "no fence from a controller without the lease"
    );
    drop(m);
    let mut next = s.open(&id).await;
    held!(next.run().await).expect("the new controller finishes the move");
    assert_eq!(next.record().phase, Phase::Done);
}

/// `move abort` and `move resume` from a second shell while a mover runs: both refused in one
/// line naming the holder; the move finishes, nothing acknowledged is lost, and the slot takes
/// writes on its new owner.
#[tokio::test]
async fn abort_and_resume_racing_a_running_mover_are_refused_and_the_slot_stays_writable() {
    let fx =
        fixture!("abort_and_resume_racing_a_running_mover_are_refused_and_the_slot_stays_writable");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let mut m = s.start(false).await;
    let id = m.record().id.clone();
    let runner = tokio::spawn(async move {
        let res = m.run().await.cloned();
        (res, m)
    });
    let mut refusals = 0;
    while !runner.is_finished() {
        let mut other = s.open(&id).await;
        if other.record().phase.is_final() {
            break;
        }
        for err in [other.abort().await.err(), other.run().await.err()] {
            match err {
                Some(MoveError::Held(h)) => {
                    let text = MoveError::Held(h.clone()).to_string();
                    assert!(text.contains(&h.holder) && !text.contains('\n'), "{text}");
                    refusals += 1;
                }
                // The phase refuses an abort by itself (after the flip), or the runner
                // finished in between: refused either way, nothing done.
                Some(MoveError::Refused(_)) => {}
                // The runner finished between the read above and this call: a finished move
                // has nothing left to run (a takeover would fail the runner, checked below).
                None if s.open(&id).await.record().phase.is_final() => {}
                other => panic!("a second controller was let in while the first ran: {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (res, _m) = runner.await.expect("runner");
    let record = match res {
        Ok(record) => record,
        // The runner stalled past its lease (a loaded 2-core runner, moto serving one call at a
        // time) and a second controller took the move over, as a lease allows: still one
        // controller at a time, and the move must still end done.
        Err(MoveError::LeaseLost { .. }) => s.open(&id).await.record().clone(),
        Err(e) => panic!("the running move failed: {e}"),
    };
    assert_eq!(record.phase, Phase::Done);
    assert!(refusals >= 2, "{refusals} refusals");
    let ack = s
        .router
        .put_versioned(&probe_key(9), 1, HashMap::new())
        .await
        .expect("writable");
    assert_eq!(ack.owner, s.b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}
