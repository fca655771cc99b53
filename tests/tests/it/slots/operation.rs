//! A directory's autopilot operation interrupted (`heatsink::autopilot::directory`): a period
//! that died between two moves, one that died inside a move, a move an operator aborted. The
//! next period proves from the move records how far the operation got and continues, ends or
//! holds it; no timer decides. A load writes through a router the whole time and every
//! acknowledged write is verified after.

use std::sync::Arc;
use std::time::Duration;

use heatsink::autopilot::directory::{DirectoryLoop, Load as PeriodLoad};
use heatsink::autopilot::progress::Progress;
use heatsink::autopilot::store::PilotStore;
use heatsink::autopilot::{Kind, PilotConfig, PilotState, Span, Started};
use heatsink::slots::mover::MoveSpec;
use heatsink::slots::{MoveError, MoveMode, Phase, SlotRange, slot_of};
use heatsink_testkit::fixture;

use super::{LEASE, SERIAL, Scene, budget, limits, owner_table, start_load};

/// The slot of tenant `t`.
fn tenant(t: &str) -> SlotRange {
    SlotRange::single(slot_of(t)).expect("range")
}

fn span(r: SlotRange) -> Span {
    Span::new(u128::from(r.first), u128::from(r.last)).expect("span")
}

/// An operation moving tenant t0's slot to `first` and t1's to `second`, recorded in flight
/// as an acting period records it before its first move.
async fn record_operation(s: &Scene, first: &str, second: &str) -> Started {
    let (p1, p2) = (span(tenant("t0")), span(tenant("t1")));
    let op = Started {
        id: format!("autopilot-{}", heatsink::clock::now_ms()),
        span: Span::new(p1.lo().min(p2.lo()), p1.hi().max(p2.hi())).expect("hull"),
        kind: Kind::Move,
        at_ms: heatsink::clock::now_ms(),
        op: None,
        pieces: vec![p1, p2],
        to: vec![first.to_owned(), second.to_owned()],
    };
    let store = PilotStore::new(s.ddb.clone(), s.dir.table());
    let mut state = PilotState::default();
    state.record(op.clone());
    assert!(store.save(&state, 0).await.expect("save"), "fresh state");
    op
}

pub(super) fn pilot(s: &Scene) -> DirectoryLoop {
    let mut l = DirectoryLoop::new(s.ddb.clone(), s.streams.clone(), s.dir.clone());
    l.pilot = PilotConfig {
        act: true,
        sustain: 1,
        cooldown_ms: 0,
        ..PilotConfig::default()
    };
    l.budget = budget();
    l.limits = limits();
    l.progress = Some(Arc::new(|line: &str| eprintln!("{line}")));
    l
}

fn piece(slots: SlotRange, to: &str) -> MoveSpec {
    MoveSpec {
        slots,
        to: to.to_owned(),
        mode: MoveMode::Copy,
        strict: false,
        budget: budget(),
    }
}

/// One acting period once the lease of a controller cut before it has run out (a period that
/// finds the move still held waits it out and runs again, as the next scheduled one would).
async fn period_after_cut(s: &Scene) -> heatsink::autopilot::directory::DirectoryReport {
    held!(
        pilot(s)
            .run(heatsink::clock::now_ms(), no_load())
            .await
            .map_err(|e| match e {
                heatsink::autopilot::AutopilotError::Move { source, .. } => *source,
                other => panic!("period: {other}"),
            })
    )
    .expect("period")
}

/// No load: a period with an operation in flight reads none.
fn no_load() -> PeriodLoad {
    PeriodLoad::Slots(Default::default())
}

#[tokio::test]
async fn an_operation_cut_between_its_moves_is_continued_from_the_move_records_and_loses_no_write()
{
    let fx = fixture!(
        "an_operation_cut_between_its_moves_is_continued_from_the_move_records_and_loses_no_write"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let c = owner_table(&fx, "c").await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let op = record_operation(&s, &s.b, &c).await;
    // The period moved the first piece and died before starting the second.
    let first = s
        .start_spec(piece(tenant("t0"), &s.b))
        .await
        .run()
        .await
        .map(|r| r.phase);
    assert_eq!(first.expect("first piece"), Phase::Done);

    let report = pilot(&s)
        .run(heatsink::clock::now_ms(), no_load())
        .await
        .expect("period");
    assert_eq!(
        report.settled,
        Some((op.id.clone(), Progress::Next { index: 1 })),
        "{:?}",
        report.lines()
    );
    assert_eq!(
        report.moved.len(),
        1,
        "only the second piece moved: {:?}",
        report.lines()
    );
    assert_eq!(
        report.ended,
        Some((op.id.clone(), Progress::Ended { moved: 2 })),
        "{:?}",
        report.lines()
    );
    let state = PilotStore::new(s.ddb.clone(), s.dir.table())
        .load()
        .await
        .expect("state");
    assert!(state.state.in_flight.is_none(), "{:?}", state.state);
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(tenant("t0").first).owner, s.b);
    assert_eq!(map.entry_of(tenant("t1").first).owner, c);
    // Ended: the next period plans afresh (nothing to plan without load) and moves nothing.
    let next = pilot(&s)
        .run(heatsink::clock::now_ms(), no_load())
        .await
        .expect("period");
    assert!(
        next.settled.is_none() && next.moved.is_empty(),
        "{:?}",
        next.lines()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}

#[tokio::test]
async fn a_move_cut_inside_is_continued_only_once_the_kill_switch_is_lifted_and_loses_no_write() {
    let fx = fixture!(
        "a_move_cut_inside_is_continued_only_once_the_kill_switch_is_lifted_and_loses_no_write"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let c = owner_table(&fx, "c").await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let op = record_operation(&s, &s.b, &c).await;
    // The period started the first piece's move and died after its copy.
    let mut cut = s.start_spec(piece(tenant("t0"), &s.b)).await;
    let id = cut.record().id.clone();
    assert_eq!(cut.step().await.expect("record"), Phase::Recorded);
    assert_eq!(cut.step().await.expect("copy"), Phase::Copied);
    drop(cut);

    let store = PilotStore::new(s.ddb.clone(), s.dir.table());
    store.pause("ops (test): look first").await.expect("pause");
    let paused = pilot(&s)
        .run(heatsink::clock::now_ms(), no_load())
        .await
        .expect("period");
    assert_eq!(
        paused.settled,
        Some((
            op.id.clone(),
            Progress::Running {
                index: 0,
                id: id.clone(),
                phase: Phase::Copied
            }
        )),
        "{:?}",
        paused.lines()
    );
    assert!(
        paused.moved.is_empty() && paused.ended.is_none(),
        "a paused loop continues nothing: {:?}",
        paused.lines()
    );
    let rec = s.open(&id).await.record().clone();
    assert_eq!(rec.phase, Phase::Copied, "the move waited where it was cut");

    store.resume().await.expect("resume");
    tokio::time::sleep(LEASE).await;
    let resumed = period_after_cut(&s).await;
    assert_eq!(resumed.moved.first(), Some(&id), "{:?}", resumed.lines());
    assert_eq!(resumed.moved.len(), 2, "{:?}", resumed.lines());
    assert_eq!(
        resumed.ended,
        Some((op.id.clone(), Progress::Ended { moved: 2 }))
    );
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(tenant("t0").first).owner, s.b);
    assert_eq!(map.entry_of(tenant("t1").first).owner, c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}

#[tokio::test]
async fn a_move_an_operator_aborted_ends_its_operation_and_the_rest_never_start() {
    let fx = fixture!("a_move_an_operator_aborted_ends_its_operation_and_the_rest_never_start");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let c = owner_table(&fx, "c").await;
    let op = record_operation(&s, &s.b, &c).await;
    let mut first = s.start_spec(piece(tenant("t0"), &s.b)).await;
    let id = first.record().id.clone();
    first.abort().await.expect("abort");

    let report = pilot(&s)
        .run(heatsink::clock::now_ms(), no_load())
        .await
        .expect("period");
    assert_eq!(
        report.settled,
        Some((
            op.id.clone(),
            Progress::Stopped {
                index: 0,
                id,
                phase: Phase::Aborted
            }
        )),
        "{:?}",
        report.lines()
    );
    assert!(report.moved.is_empty(), "{:?}", report.lines());
    let state = PilotStore::new(s.ddb.clone(), s.dir.table())
        .load()
        .await
        .expect("state");
    assert!(
        state.state.in_flight.is_none(),
        "ended by the record: {:?}",
        state.state
    );
    let moves = s.dir.moves().await.expect("moves");
    assert!(
        moves.records.iter().all(|r| r.to != c),
        "the second piece never started: {:?}",
        moves.records
    );
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(tenant("t0").first).owner, s.a);
    assert_eq!(map.entry_of(tenant("t1").first).owner, s.a);
}

#[tokio::test]
async fn a_rollback_cut_inside_is_continued_on_its_path_and_ends_the_operation() {
    let fx = fixture!("a_rollback_cut_inside_is_continued_on_its_path_and_ends_the_operation");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let c = owner_table(&fx, "c").await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let op = record_operation(&s, &s.b, &c).await;
    // The first piece's move flipped; an operator began rolling it back and was cut off.
    let mut cut = s.start_spec(piece(tenant("t0"), &s.b)).await;
    let id = cut.record().id.clone();
    while cut.record().phase != Phase::Flipped {
        cut.step().await.expect("step");
    }
    assert_eq!(
        cut.step_on(heatsink::slots::Path::Rollback)
            .await
            .expect("rollback begins"),
        Phase::RollingBack
    );
    drop(cut);
    tokio::time::sleep(LEASE).await;

    let report = period_after_cut(&s).await;
    assert_eq!(
        report.settled,
        Some((
            op.id.clone(),
            Progress::Running {
                index: 0,
                id: id.clone(),
                phase: Phase::RollingBack
            }
        )),
        "{:?}",
        report.lines()
    );
    // Continued on the rollback's path, not forward; then the records end the operation.
    assert_eq!(report.moved, vec![id.clone()], "{:?}", report.lines());
    assert_eq!(
        report.ended,
        Some((
            op.id.clone(),
            Progress::Stopped {
                index: 0,
                id,
                phase: Phase::RolledBack
            }
        )),
        "{:?}",
        report.lines()
    );
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(tenant("t0").first).owner, s.a);
    assert!(
        s.dir
            .moves()
            .await
            .expect("moves")
            .records
            .iter()
            .all(|r| r.to != c),
        "the second piece never started"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}
