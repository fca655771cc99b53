//! Transient failures weathered: a mover whose DynamoDB path hangs (the test kit's TCP cut: calls
//! hang, nothing refuses them) keeps going once it comes back, its calls timed out and retried
//! with backoff; a hang longer than its deadline stops it with the phase, the cause and the
//! command that continues it, and that command finishes the move.

use std::time::Duration;

use heatsink::slots::MoveError;
use heatsink::slots::backoff::Backoff;
use heatsink::slots::mover::{Limits, Mover};
use heatsink::slots::{Phase, SlotDirectory};
use heatsink_testkit::cut::Cut;
use heatsink_testkit::fixture;

use super::{SERIAL, Scene, limits};

#[tokio::test]
async fn a_move_weathers_a_hung_dynamodb_and_stops_with_the_next_command_past_its_deadline() {
    let fx = fixture!(
        "a_move_weathers_a_hung_dynamodb_and_stops_with_the_next_command_past_its_deadline"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    s.preload(80).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("the stack's endpoint");
    let cut = Cut::start(&upstream).await.expect("cut");
    // The mover alone talks through the cut, with the default timeouts (1 s an attempt).
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let mut spec = s.spec(false);
    spec.budget.wcu_per_sec = 40.0;
    let mut m = Mover::start_with(
        ddb.clone(),
        s.streams.clone(),
        SlotDirectory::new(ddb.clone(), s.dir.table()),
        spec,
        Limits {
            backoff: Backoff {
                deadline: Duration::from_secs(30),
                ..Backoff::default()
            },
            ..limits()
        },
    )
    .await
    .expect("start");
    let id = m.record().id.clone();
    m.step().await.expect("record");
    // A 3 s hang in the middle of the copy: retried through, not fatal.
    let hang = {
        let switch = std::sync::Arc::new(cut);
        let cut = switch.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cut.cut();
            tokio::time::sleep(Duration::from_secs(3)).await;
            cut.restore();
        });
        switch
    };
    let copied = tokio::time::timeout(Duration::from_secs(90), m.step())
        .await
        .expect("the copy came back after the hang");
    assert_eq!(copied.expect("copy"), Phase::Copied);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!hang.is_cut());
    // A hang longer than the deadline: the mover stops and says where and what next.
    let mut m = m.with_limits(Limits {
        backoff: Backoff {
            deadline: Duration::from_secs(2),
            ..Backoff::default()
        },
        ..limits()
    });
    hang.cut();
    let err = tokio::time::timeout(Duration::from_secs(60), m.step())
        .await
        .expect("the deadline stopped it")
        .expect_err("the path stayed down past the deadline");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, MoveError::Stalled { .. }), "{text}");
    assert!(
        text.contains("copied") && text.contains(&format!("heatsink move resume {id}")),
        "{text}"
    );
    hang.restore();
    let mut m = m.with_limits(limits());
    held!(m.run().await).expect("the next command finishes the move");
    assert_eq!(m.record().phase, Phase::Done);
    assert!(m.record().diff.as_ref().is_some_and(|d| d.clean()));
}

/// `move start` reads the directory, both tables and the move list before it records anything:
/// a hang there is retried through like any call of a move, and a hang past the deadline stops
/// it with nothing recorded and the same command as the next step.
#[tokio::test]
async fn a_move_start_weathers_a_hung_dynamodb_and_records_nothing_past_its_deadline() {
    let fx =
        fixture!("a_move_start_weathers_a_hung_dynamodb_and_records_nothing_past_its_deadline");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("the stack's endpoint");
    let cut = std::sync::Arc::new(Cut::start(&upstream).await.expect("cut"));
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let start = |deadline: Duration| {
        Mover::start_with(
            ddb.clone(),
            s.streams.clone(),
            SlotDirectory::new(ddb.clone(), s.dir.table()),
            s.spec(false),
            Limits {
                backoff: Backoff {
                    deadline,
                    ..Backoff::default()
                },
                ..limits()
            },
        )
    };
    // Hung for 2 s from the first call: the start waits it out.
    cut.cut();
    let restore = {
        let cut = cut.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            cut.restore();
        })
    };
    let m = tokio::time::timeout(Duration::from_secs(60), start(Duration::from_secs(30)))
        .await
        .expect("the start came back after the hang")
        .expect("start through a 2 s hang");
    restore.await.expect("restore");
    assert_eq!(m.record().phase, Phase::Planned);
    drop(m);
    // Hung past a 2 s deadline: stalled before anything was recorded.
    cut.cut();
    let Err(err) = tokio::time::timeout(Duration::from_secs(60), start(Duration::from_secs(2)))
        .await
        .expect("the deadline stopped it")
    else {
        panic!("the path stayed down past the deadline, yet the start succeeded");
    };
    cut.restore();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, MoveError::Stalled { .. }), "{text}");
    assert!(text.contains("nothing was recorded"), "{text}");
    let moves = Mover::list(&s.dir).await.expect("list");
    assert_eq!(moves.len(), 1, "only the first start recorded a move");
}
