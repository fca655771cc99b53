//! The stream's autopilot (`heatsink::autopilot::stream::StreamLoop`) on kinesis-mock, period by
//! period: a load in a narrow hash range is proposed, waits out the sustain rule, is only
//! reported while the loop is a dry run, and once switched to act is recorded before its call;
//! the split ends only when a listing shows both children. Every persisted phase is then
//! interrupted: an operation recorded whose call never ran (a period killed between its save
//! and its call) holds the loop as unproven until `finish`; the kill switch holds it without
//! sampling; two periods racing on one revision start one operation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use heatsink::autopilot::store::PilotStore;
use heatsink::autopilot::stream::StreamLoop;
use heatsink::autopilot::{
    Decision, HoldReason, Kind, PAUSED, PilotConfig, Proposal, STARTED, Settle, Span, UNPROVEN,
    Wait,
};
use heatsink::keys::kinesis_hash_key;
use heatsink::kinesis::reshard::{Op, PlanConfig};
use heatsink::kinesis::{Producer, ProducerConfig, ShardLimits, open_shard_ranges};
use heatsink_integration::PhotoFixture;
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{Fixture, fixture};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A one-shard stream carrying 2,000 records whose hash keys sit in its lowest 1/64, and the
/// loop's store in the autopilot table.
async fn loaded_stream(fx: &Fixture) -> (String, PilotStore) {
    fx.photo_table(Table::Autopilot).await;
    let stream = fx.stream("pilot", 1).await;
    let keys: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|pk| kinesis_hash_key(pk) < 1u128 << 122)
        .take(400)
        .collect();
    let unpaced = ProducerConfig {
        linger: Duration::from_millis(5),
        limits: ShardLimits {
            records_per_second: 1e9,
            bytes_per_second: 1e12,
        },
        ..ProducerConfig::default()
    };
    let p = Producer::start(fx.stack.kinesis.clone(), &stream.name, unpaced)
        .await
        .expect("producer");
    for i in 0..2_000 {
        p.send(keys[i % keys.len()].clone(), vec![b'x'; 50])
            .await
            .expect("queued");
    }
    p.shutdown().await.expect("flushed");
    let store = PilotStore::for_stream(
        fx.stack.ddb.clone(),
        fx.photo().table_name(Table::Autopilot),
        &stream.name,
    );
    (stream.name, store)
}

/// The loop at the test's scale: 2,000 records in 60 s is 3 % of a shard, so split at 2 %.
fn pilot(fx: &Fixture, stream: &str, store: &PilotStore, act: bool) -> StreamLoop {
    let mut l = StreamLoop::new(fx.stack.kinesis.clone(), store.clone(), stream);
    l.plan = PlanConfig {
        split_at: 0.02,
        max_splits_per_shard: 1,
        ..PlanConfig::default()
    };
    l.pilot = PilotConfig {
        act,
        ..PilotConfig::default()
    };
    l
}

/// Open shards of `stream` as hash ranges.
async fn open(fx: &Fixture, stream: &str) -> Vec<(u128, u128)> {
    open_shard_ranges(&fx.stack.kinesis, stream)
        .await
        .expect("listed")
        .iter()
        .map(|r| (r.start, r.end))
        .collect()
}

/// Runs periods until the in-flight operation settles as something other than Running (the
/// emulator's split takes a moment).
async fn settle_out(l: &StreamLoop) -> heatsink::autopilot::stream::StreamPeriod {
    for _ in 0..100 {
        let p = l.run(now_ms()).await.expect("period");
        if !matches!(p.settled, Some((_, Settle::Running))) {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the split never left UPDATING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_hot_shard_is_reported_in_a_dry_run_split_once_acting_and_ended_only_by_the_shard_map()
 {
    let fx = fixture!(
        "a_sustained_hot_shard_is_reported_in_a_dry_run_split_once_acting_and_ended_only_by_the_shard_map"
    );
    let (stream, store) = loaded_stream(&fx).await;
    let dry = pilot(&fx, &stream, &store, false);

    // Period 1: proposed once; sustain is 2.
    let p = dry.run(now_ms()).await.expect("period 1");
    assert_eq!(p.proposals, 1, "{:?}", p.lines());
    assert_eq!(p.decision, Decision::Idle);
    assert!(
        matches!(p.waiting[..], [(_, Wait::Sustain { seen: 1, need: 2 })]),
        "{:?}",
        p.waiting
    );
    // Period 2: it would run, but a dry run only reports it.
    let p = dry.run(now_ms()).await.expect("period 2");
    let Decision::DryRun(proposal) = &p.decision else {
        panic!("a dry run: {:?}", p.lines());
    };
    assert_eq!(proposal.kind, Kind::Split);
    assert!(
        p.lines()[0].starts_with("dry run: would split"),
        "{:?}",
        p.lines()
    );
    assert_eq!(
        open(&fx, &stream).await.len(),
        1,
        "a dry run changes nothing"
    );
    assert!(store.load().await.expect("state").state.in_flight.is_none());

    // Switched to act: it runs, recorded with its call before the call returned.
    let acting = pilot(&fx, &stream, &store, true);
    let p = acting.run(now_ms()).await.expect("period 3");
    let started = p.started.clone().expect("started");
    assert!(p.values().contains(&(STARTED, 1)));
    let stored = store.load().await.expect("state");
    assert_eq!(stored.state.in_flight.as_ref(), Some(&started));
    let Some(Op::Split { start, end, at }) = started.op else {
        panic!("a split recorded: {started:?}");
    };
    assert_eq!((start, end), (0, u128::MAX));
    assert!(
        at > 0 && at < 1u128 << 122,
        "split at the load median, not the midpoint: {at}"
    );

    // A later period ends it only when the listing shows both children.
    let p = settle_out(&acting).await;
    assert_eq!(
        p.settled,
        Some((started.id.clone(), Settle::Ended)),
        "{:?}",
        p.lines()
    );
    assert_eq!(open(&fx, &stream).await, [(0, at - 1), (at, u128::MAX)]);
    let stored = store.load().await.expect("state");
    assert!(stored.state.in_flight.is_none());
    assert_eq!(stored.state.history.len(), 1, "the budget counts it");
    // The children are in the cooldown: nothing more runs at once.
    assert!(!matches!(p.decision, Decision::Run(_)), "{:?}", p.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_period_killed_between_its_record_and_its_call_holds_as_unproven_until_finish() {
    let fx =
        fixture!("a_period_killed_between_its_record_and_its_call_holds_as_unproven_until_finish");
    let (stream, store) = loaded_stream(&fx).await;
    // The persisted phase a period leaves when it dies after its save and before its call:
    // the split is in flight, and Kinesis never heard of it.
    let split = Proposal {
        subject: "shardId-000000000000".into(),
        span: Span::new(0, u128::MAX).expect("span"),
        kind: Kind::Split,
        urgency: 0.9,
        warming: false,
    };
    let op = Op::Split {
        start: 0,
        end: u128::MAX,
        at: 1u128 << 127,
    };
    let mut stored = store.load().await.expect("state");
    stored
        .state
        .started_op("split-killed", &split, Some(op), now_ms());
    assert!(store.save(&stored.state, stored.rev).await.expect("saved"));

    let acting = pilot(&fx, &stream, &store, true);
    for _ in 0..3 {
        let p = acting.run(now_ms()).await.expect("period");
        assert_eq!(
            p.settled,
            Some(("split-killed".to_owned(), Settle::Unproven))
        );
        assert_eq!(
            p.decision,
            Decision::Hold(HoldReason::InFlight("split-killed".into()))
        );
        assert!(p.values().contains(&(UNPROVEN, 1)));
        assert_eq!(p.proposals, 0, "a holding loop does not sample");
        assert!(
            p.lines()[0].contains(&format!(
                "'heatsink autopilot finish --stream {stream} --id split-killed'"
            )),
            "{:?}",
            p.lines()
        );
        assert_eq!(open(&fx, &stream).await.len(), 1, "nothing was split");
    }
    // The operator says it ended (here: it never ran): the loop plans again, from scratch.
    let mut stored = store.load().await.expect("state");
    stored.state.finished("split-killed");
    assert!(store.save(&stored.state, stored.rev).await.expect("saved"));
    let p = acting.run(now_ms()).await.expect("period");
    assert_eq!(p.settled, None);
    assert_eq!(p.proposals, 1, "{:?}", p.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_holds_the_next_period_and_two_racing_periods_start_one_split() {
    let fx =
        fixture!("the_kill_switch_holds_the_next_period_and_two_racing_periods_start_one_split");
    let (stream, _) = loaded_stream(&fx).await;
    // One DynamoDB call at a time on the moto lane: moto checks two concurrent conditional
    // updates of one item without isolation and lets both through (DynamoDB serializes them);
    // the periods still race, read against read, save against save.
    let store = PilotStore::for_stream(
        fx.stack.isolated_ddb(),
        fx.photo().table_name(Table::Autopilot),
        &stream,
    );
    let acting = pilot(&fx, &stream, &store, true);
    acting
        .run(now_ms())
        .await
        .expect("period 1: sustain 1 of 2");

    store.pause("ops (test): hands off").await.expect("paused");
    let p = acting.run(now_ms()).await.expect("paused period");
    assert_eq!(
        p.decision,
        Decision::Hold(HoldReason::Paused("ops (test): hands off".into()))
    );
    assert!(p.values().contains(&(PAUSED, 1)));
    assert_eq!(p.proposals, 0, "a paused loop does not sample");
    assert_eq!(open(&fx, &stream).await.len(), 1);
    store.resume().await.expect("resumed");

    // Streaks count afresh after the pause: one period to build it up, then two periods race
    // on the same revision; one saves, and only it calls Kinesis.
    acting.run(now_ms()).await.expect("period: sustain 1 of 2");
    let (a, b) = tokio::join!(acting.run(now_ms()), acting.run(now_ms()));
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_eq!(
        u8::from(a.saved) + u8::from(b.saved),
        1,
        "{:?} / {:?}",
        a.lines(),
        b.lines()
    );
    assert_eq!(
        u8::from(a.started.is_some()) + u8::from(b.started.is_some()),
        1
    );
    let lost = if a.saved { &b } else { &a };
    assert!(
        lost.lines().iter().any(|l| l.starts_with("lost:")),
        "{:?}",
        lost.lines()
    );
    let p = settle_out(&acting).await;
    assert!(
        matches!(p.settled, Some((_, Settle::Ended))),
        "{:?}",
        p.lines()
    );
    assert_eq!(open(&fx, &stream).await.len(), 2, "one split, not two");
}

/// A directory's owner load from CloudWatch (`heatsink::autopilot::measure::owner_wcu`) as
/// CloudWatch answers `GetMetricData`: two owner tables' `ConsumedWriteCapacityUnits`
/// datapoints over the last minutes become WCU/s, a table with none is idle, and the estimate
/// from them plus one sampled hot slot adds up to each owner's measure. Runs where CloudWatch
/// speaks the SDK's protocol (the LocalStack lane; moto's CloudWatch does not).
#[tokio::test]
async fn a_directory_loop_reads_its_owners_load_from_cloudwatch() {
    use aws_sdk_cloudwatch::primitives::DateTime;
    use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
    use heatsink::autopilot::measure::{METRIC, owner_wcu};
    use heatsink::autopilot::propose::{estimate_slot_load, owner_loads};
    use heatsink::slots::{RangeEntry, SlotMap, SlotRange};

    let fx = fixture!("a_directory_loop_reads_its_owners_load_from_cloudwatch");
    if !fx.stack.cloudwatch_speaks_cbor() {
        eprintln!("skip: this lane's CloudWatch does not speak the SDK's protocol");
        return;
    }
    let (a, b, idle) = (
        format!("{}a", fx.prefix()),
        format!("{}b", fx.prefix()),
        format!("{}idle", fx.prefix()),
    );
    let now = now_ms();
    // Three minutes of writes: a at 600 WCU a minute-sum of 36,000, b at 6,000.
    for (table, per_minute) in [(&a, 36_000.0), (&b, 6_000.0)] {
        let data: Vec<MetricDatum> = (1..=3)
            .map(|m| {
                MetricDatum::builder()
                    .metric_name(METRIC)
                    .dimensions(Dimension::builder().name("TableName").value(table).build())
                    .timestamp(DateTime::from_millis(
                        i64::try_from(now - m * 60_000).expect("ms"),
                    ))
                    .value(per_minute)
                    .unit(StandardUnit::Count)
                    .build()
            })
            .collect();
        fx.stack
            .cloudwatch
            .put_metric_data()
            .namespace("AWS/DynamoDB")
            .set_metric_data(Some(data))
            .send()
            .await
            .expect("put datapoints");
    }
    let tables = [a.clone(), b.clone(), idle.clone()];
    let wcu = owner_wcu(&fx.stack.cloudwatch, &tables, 10, now + 60_000)
        .await
        .expect("measured");
    // 108,000 WCU over 600 s; 18,000 over 600 s; nothing.
    assert!((wcu[&a] - 180.0).abs() < 1e-6, "{wcu:?}");
    assert!((wcu[&b] - 30.0).abs() < 1e-6, "{wcu:?}");
    assert_eq!(wcu[&idle], 0.0, "{wcu:?}");

    let mut map = SlotMap::initial(a.clone(), 1_000, false);
    map.ranges = vec![
        RangeEntry::stable(SlotRange::new(0, 8_191).expect("range"), a.clone(), 1),
        RangeEntry::stable(SlotRange::new(8_192, 16_383).expect("range"), b.clone(), 1),
    ];
    let sampled = std::collections::BTreeMap::from([(42u16, 150.0)]);
    let est = estimate_slot_load(&map, &wcu, &sampled);
    let owners = owner_loads(&map, &est);
    assert!((owners[&a] - 180.0).abs() < 1e-6 && (owners[&b] - 30.0).abs() < 1e-6);
    assert_eq!(est[&42], 150.0, "the sampled hot slot keeps its load");
}
