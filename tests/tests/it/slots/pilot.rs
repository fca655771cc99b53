//! The autopilot's state and kill switch in the slot directory's table
//! (`heatsink::slots::pilot`): saves conditional on the revision read, a pause that lands
//! whatever the loop writes, and the governor holding on a paused state read back.

use heatsink::autopilot::store::PilotStore;
use heatsink::autopilot::{Decision, HoldReason, Kind, PilotConfig, Proposal, Span, decide};
use heatsink::slots::SlotRange;
use heatsink_testkit::fixture;

use super::directory;

fn relieve(subject: &str) -> Proposal {
    Proposal {
        subject: subject.into(),
        span: Span::new(0, 8_191).expect("span"),
        kind: Kind::Move,
        urgency: 1.3,
        warming: false,
    }
}

#[tokio::test]
async fn the_pilot_state_saves_on_its_revision_and_a_pause_lands_over_any_save() {
    let fx = fixture!("the_pilot_state_saves_on_its_revision_and_a_pause_lands_over_any_save");
    let dir = directory(&fx, "t-a", false).await;
    let store = PilotStore::new(fx.stack.ddb.clone(), dir.table());
    let fresh = store.load().await.expect("load fresh");
    assert_eq!(fresh.rev, 0);
    assert!(fresh.state.in_flight.is_none() && fresh.state.paused.is_none());

    // Two loops read revision 0; the first save wins, the second is refused and starts nothing.
    let mut first = fresh.state.clone();
    first.started("move-1", &relieve("t-a"), 60_000);
    assert!(store.save(&first, 0).await.expect("save"));
    let mut second = fresh.state.clone();
    second.started("move-2", &relieve("t-a"), 60_000);
    assert!(
        !store.save(&second, 0).await.expect("stale save"),
        "a stale revision is refused"
    );
    let read = store.load().await.expect("load");
    assert_eq!(read.rev, 1);
    assert_eq!(
        read.state.in_flight.as_ref().map(|s| s.id.as_str()),
        Some("move-1")
    );

    // The kill switch lands over the loop's saves and is never cleared by one.
    store.pause("ops (test): hands off").await.expect("pause");
    let mut later = read.state.clone();
    later.finished("move-1");
    later.paused = None;
    assert!(
        store
            .save(&later, read.rev)
            .await
            .expect("save after pause")
    );
    let paused = store.load().await.expect("load paused");
    assert_eq!(
        paused.state.paused.as_deref(),
        Some("ops (test): hands off")
    );
    assert!(
        paused.state.in_flight.is_none(),
        "the save landed beside the pause"
    );
    let cfg = PilotConfig {
        act: true,
        ..PilotConfig::default()
    };
    let period = decide(&cfg, &paused.state, &[relieve("t-a")], 120_000).expect("decide");
    assert!(
        matches!(period.decision, Decision::Hold(HoldReason::Paused(_))),
        "{:?}",
        period.decision
    );

    // Resume clears it; reset forgets the state and keeps nothing but a pause, if any.
    store.resume().await.expect("resume");
    assert!(store.load().await.expect("load").state.paused.is_none());
    store.reset().await.expect("reset");
    let reset = store.load().await.expect("load reset");
    assert_eq!(reset.rev, 0);
    assert!(reset.state.history.is_empty());
    // The directory's own items are untouched by the pilot's item.
    let map = dir.load().await.expect("map");
    assert_eq!(map.ranges[0].range, SlotRange::ALL);
}
