//! No call waits forever, for the router and the producer: each reaches the stack through the
//! test kit's network cut, works while the path is up, and once it is cut (calls hang, nothing
//! refuses them) gives up within the bound its docs state, with a typed one-line error; the
//! producer hands back every record it could not write. The bounds are the ones
//! `heatsink::timeouts` tabulates; the upper margins below are slack for a loaded 2-core
//! machine, not the bound.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use heatsink::kinesis::{Producer, ProducerConfig, ProducerError};
use heatsink::schema::{self, KeyAttr, Table, TableSpec};
use heatsink::slots::calls::CallTimeouts;
use heatsink::slots::{MoveError, RetryRule, Router, SlotDirectory};
use heatsink::timeouts::Timeouts;
use heatsink_testkit::cut::Cut;
use heatsink_testkit::fixture;

/// Slack over a stated bound for a loaded machine.
const SLACK: Duration = Duration::from_secs(5);

fn one_line(text: &str) {
    assert!(!text.contains('\n'), "one line: {text}");
}

/// A router whose DynamoDB path hangs after it has cached the map and the owner's schema: a
/// write retries its timed-out attempts (2.5 s each, `CallTimeouts::default`) until the retry
/// deadline (`RetryRule::deadline`, 10 s) and gives up unacknowledged with the cause; a read
/// gives up after one call's timeout; a router that has read nothing yet gives up on its first
/// directory read. Each within its bound, each one line naming the call that timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_whose_dynamodb_hangs_gives_up_writes_and_reads_within_their_bounds() {
    let fx =
        fixture!("a_router_whose_dynamodb_hangs_gives_up_writes_and_reads_within_their_bounds");
    let owner = TableSpec::new(format!("{}hung-owner", fx.prefix()), KeyAttr::s("pk"));
    fx.track_table(&owner.name);
    schema::ensure_table(&fx.stack.ddb, &owner)
        .await
        .expect("owner table");
    let spec = fx.schema.table(Table::Slots);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .expect("directory table");
    // A long map age, so the hung call is the owner's, not a directory reload.
    SlotDirectory::new(fx.stack.ddb.clone(), &spec.name)
        .init(&owner.name, Duration::from_secs(600), false)
        .await
        .expect("init");

    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("the stack's endpoint");
    let cut = Cut::start(&upstream).await.expect("cut");
    // The stack's config has no operation timeout: the router applies its own.
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let dir = SlotDirectory::new(ddb.clone(), &spec.name);
    let router = Router::new(ddb.clone(), dir.clone(), Duration::from_secs(600));
    router
        .put_versioned("post:{p9}", 1, HashMap::new())
        .await
        .expect("a write while the path is up");
    let (_, item) = router.get_key("post:{p9}").await.expect("a read");
    assert!(item.is_some());

    cut.cut();
    let call = CallTimeouts::default().operation;
    let deadline = RetryRule::default().deadline;

    let started = Instant::now();
    let err = tokio::time::timeout(
        deadline + call + SLACK,
        router.put_versioned("post:{p10}", 1, HashMap::new()),
    )
    .await
    .expect("the write gives up within its deadline plus one call")
    .expect_err("nothing answers");
    let took = started.elapsed();
    let text = err.to_string();
    eprintln!("write: {took:?}: {text}");
    assert!(
        matches!(err, MoveError::Unanswered { attempts, .. } if attempts >= 3),
        "{text}"
    );
    assert!(
        took >= deadline - call && took <= deadline + call + SLACK,
        "retried until its deadline, then stopped: {took:?}"
    );
    for part in [
        "post:{p10}",
        "PutItem",
        &owner.name,
        "timed out",
        "send it again",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    one_line(&text);

    let started = Instant::now();
    let err = tokio::time::timeout(call + SLACK, router.get_key("post:{p9}"))
        .await
        .expect("the read gives up after one call's timeout")
        .expect_err("nothing answers");
    let took = started.elapsed();
    let text = err.to_string();
    eprintln!("read: {took:?}: {text}");
    assert!(matches!(err, MoveError::Aws(_)), "{text}");
    assert!(took >= call - Duration::from_millis(500), "{took:?}");
    for part in ["GetItem", &owner.name, "timed out"] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    one_line(&text);

    // A router that has read nothing: its first directory read is the hung call.
    let cold = Router::new(ddb, dir, Duration::from_secs(600));
    let started = Instant::now();
    let err = tokio::time::timeout(
        call + SLACK,
        cold.put_versioned("post:{p11}", 1, HashMap::new()),
    )
    .await
    .expect("the cold write gives up after one call's timeout")
    .expect_err("nothing answers");
    let took = started.elapsed();
    let text = err.to_string();
    eprintln!("cold write: {took:?}: {text}");
    assert!(
        text.contains(&spec.name) && text.contains("timed out"),
        "{text}"
    );
    one_line(&text);
    cut.restore();
}

/// A producer whose stream hangs after it has started: every `PutRecords` times out
/// (`ProducerConfig::timeouts`), is retried `max_attempts` times, and the records are given up
/// within `max_attempts × (operation + backoff_cap)`: `shutdown` returns them all in
/// `failed_records` with the timeout as `last_error`, none written and none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_stream_hangs_gives_every_record_back_within_its_bound() {
    let fx = fixture!("a_producer_whose_stream_hangs_gives_every_record_back_within_its_bound");
    let stream = fx.stream("hung-producer", 1).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_KINESIS").expect("the stack's endpoint");
    let cut = Cut::start(&upstream).await.expect("cut");
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let config = ProducerConfig {
        timeouts: Timeouts {
            attempt: Duration::from_secs(1),
            operation: Duration::from_secs(2),
        },
        max_attempts: 3,
        backoff_base: Duration::from_millis(50),
        backoff_cap: Duration::from_millis(200),
        linger: Duration::from_millis(5),
        ..ProducerConfig::default()
    };
    let bound = (config.timeouts.operation + config.backoff_cap) * config.max_attempts;
    let p = Producer::start(kinesis, &stream.name, config.clone())
        .await
        .expect("start while the path is up");
    p.send("k0", b"before the cut".to_vec())
        .await
        .expect("queued");
    // The path goes down only once the first record is read back from the stream (past the
    // cut): a record still in flight at the cut would hold the others back by one more bound.
    let written = Instant::now() + Duration::from_secs(30);
    while crate::kinesis_produce::read_all(&fx.stack.kinesis, &stream.name)
        .await
        .is_empty()
    {
        assert!(
            Instant::now() < written,
            "the first record was not written in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cut.cut();
    let started = Instant::now();
    for i in 1..=20 {
        p.send(format!("k{i}"), format!("record {i}").into_bytes())
            .await
            .expect("queued: the budget has room");
    }
    let report = tokio::time::timeout(bound + SLACK, p.shutdown())
        .await
        .expect("shutdown returns within the bound")
        .expect("a report: a timeout is retried, then given up, not fatal");
    let took = started.elapsed();
    eprintln!("producer: {took:?}: {report:?}");
    assert!(
        took >= config.timeouts.operation * (config.max_attempts - 1),
        "every attempt waited for its timeout: {took:?}"
    );
    assert_eq!((report.records, report.failed), (1, 20), "{report:?}");
    let mut back: Vec<String> = report
        .failed_records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.data).into_owned())
        .collect();
    back.sort();
    let mut sent: Vec<String> = (1..=20).map(|i| format!("record {i}")).collect();
    sent.sort();
    assert_eq!(back, sent, "every record not written is handed back");
    let why = report.last_error.as_deref().expect("the cause is reported");
    for part in ["PutRecords", &stream.name, "timed out"] {
        assert!(why.contains(part), "{part:?} missing from {why:?}");
    }
    one_line(why);
    // A hung ListShards at start is one line too, within one call.
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let started = Instant::now();
    let err = tokio::time::timeout(
        config.timeouts.operation + SLACK,
        Producer::start(kinesis, &stream.name, config.clone()),
    )
    .await
    .expect("start gives up within one call")
    .expect_err("nothing answers");
    let text = err.to_string();
    eprintln!("start: {:?}: {text}", started.elapsed());
    assert!(matches!(err, ProducerError::SlotMap(_)), "{text}");
    assert!(
        text.contains("ListShards") && text.contains("timed out"),
        "{text}"
    );
    one_line(&text);
    cut.restore();
}
