//! Live resharding on the local stack (moto and dynoxide lanes): the slot directory's
//! transactions, and live moves with a load generator writing through routers the whole time.
//! The emulators give each table's stream one shard; the `sim_` test puts the stream-shape
//! simulator in front of them for several shards with rollovers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::schema::{self, KeyAttr, StreamView, Table, TableSpec};
use heatsink::slots::backoff::Backoff;
use heatsink::slots::mover::{BatchFault, Budget, Limits, MoveSpec, Mover, TailFaults};
use heatsink::slots::verify::{AckLine, verify};
use heatsink::slots::{
    MoveError, MoveMode, Phase, RetryRule, Router, SlotDirectory, SlotError, SlotRange, slot_of,
};
use heatsink_sim::front::StreamShaper;
use heatsink_sim::load::{LoadSpec, run_load};
use heatsink_sim::shape::{ShapeConfig, SourceKind};
use heatsink_testkit::{Fixture, fixture};

const MAX_AGE: Duration = Duration::from_millis(300);

/// The move tests run one at a time: each drives a load generator, and moto serves one call at
/// a time (two loads at once would measure moto, not the mover).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn owner_table(fx: &Fixture, logical: &str) -> String {
    let spec = TableSpec::new(format!("{}{logical}", fx.prefix()), KeyAttr::s("pk"))
        .stream(StreamView::NewAndOldImages);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", spec.name));
    spec.name
}

async fn directory(fx: &Fixture, owner: &str, strict: bool) -> SlotDirectory {
    directory_on(fx, fx.stack.ddb.clone(), owner, strict).await
}

async fn directory_on(
    fx: &Fixture,
    ddb: aws_sdk_dynamodb::Client,
    owner: &str,
    strict: bool,
) -> SlotDirectory {
    let spec = fx.schema.table(Table::Slots);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .expect("directory table");
    let dir = SlotDirectory::new(ddb, spec.name);
    dir.init(owner, MAX_AGE, strict).await.expect("init");
    dir
}

/// One move test's world: source `a` (which owns every slot), target `b`, the directory and a
/// router, all on one DynamoDB client ([`heatsink_testkit::Stack::isolated_ddb`]: on moto, one
/// call at a time, because moto's cancelled transactions revert concurrent writes).
struct Scene {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    a: String,
    b: String,
    dir: SlotDirectory,
    router: Router,
}

/// The lane's DynamoDB client for move tests: [`heatsink_testkit::Stack::isolated_ddb`], and on
/// the lanes that send one call at a time (moto, LocalStack) timeouts that include the wait for
/// the single connection: there a call queues behind every other call of the test (the load,
/// the mover's parallel copy), so the mover's and router's default 1 s attempt timeout would
/// time out calls that never left the queue. (Their upload is also idle while queued, which
/// the SDK's stalled-stream protection would cut after 5 s.)
pub(crate) fn move_ddb(fx: &Fixture) -> aws_sdk_dynamodb::Client {
    let ddb = fx.stack.isolated_ddb();
    if fx.stack.lane != "moto" && fx.stack.lane != "localstack" {
        return ddb;
    }
    aws_sdk_dynamodb::Client::from_conf(
        ddb.config()
            .to_builder()
            .timeout_config(
                aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(20))
                    .operation_timeout(Duration::from_secs(60))
                    .build(),
            )
            .stalled_stream_protection(
                aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
            )
            .build(),
    )
}

impl Scene {
    async fn new(fx: &Fixture, strict: bool) -> Scene {
        let ddb = move_ddb(fx);
        let a = owner_table(fx, "a").await;
        let b = owner_table(fx, "b").await;
        let dir = directory_on(fx, ddb.clone(), &a, strict).await;
        let router = Router::new(ddb.clone(), dir.clone(), MAX_AGE);
        Scene {
            streams: fx.stack.streams.clone(),
            ddb,
            a,
            b,
            dir,
            router,
        }
    }

    /// A copy move of the whale tenant's slot to `b`.
    fn spec(&self, strict: bool) -> MoveSpec {
        MoveSpec {
            slots: quarter(),
            to: self.b.clone(),
            mode: MoveMode::Copy,
            strict,
            budget: budget(),
        }
    }

    /// `n` items of the moved slot on the source (`{t0}row-<i>`, version 1), written around the
    /// routers: a copy and a purge with something to do.
    async fn preload(&self, n: usize) {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        let rows: Vec<String> = (0..n).map(|i| format!("{{t0}}row-{i}")).collect();
        for chunk in rows.chunks(25) {
            let batch: Vec<WriteRequest> = chunk
                .iter()
                .map(|k| {
                    let put = PutRequest::builder()
                        .item("pk", AttributeValue::S(k.clone()))
                        .item("v", AttributeValue::N("1".into()))
                        .item("caption", AttributeValue::S("x".repeat(100)))
                        .build()
                        .expect("put");
                    WriteRequest::builder().put_request(put).build()
                })
                .collect();
            let mut pending = batch;
            while !pending.is_empty() {
                let out = self
                    .ddb
                    .batch_write_item()
                    .request_items(&self.a, pending)
                    .send()
                    .await
                    .expect("preload");
                pending = out
                    .unprocessed_items()
                    .and_then(|m| m.get(&self.a))
                    .cloned()
                    .unwrap_or_default();
            }
        }
    }

    async fn start(&self, strict: bool) -> Mover {
        self.start_spec(self.spec(strict)).await
    }

    async fn start_spec(&self, spec: MoveSpec) -> Mover {
        Mover::start_with(
            self.ddb.clone(),
            self.streams.clone(),
            self.dir.clone(),
            spec,
            limits(),
        )
        .await
        .expect("start")
        .with_progress(Arc::new(|line: &str| eprintln!("{line}")))
    }

    /// Opens move `id` as a new controller would (a killed one's lease still runs until
    /// [`LEASE`] after its last renewal: [`held`] waits it out).
    async fn open(&self, id: &str) -> Mover {
        Mover::open_with(
            self.ddb.clone(),
            self.streams.clone(),
            self.dir.clone(),
            id,
            limits(),
        )
        .await
        .expect("open")
        .with_progress(Arc::new(|line: &str| eprintln!("{line}")))
    }
}

/// The lease of the test controllers: short, so a killed controller blocks the next one briefly.
const LEASE: Duration = Duration::from_millis(600);

/// Test controllers' limits: a short lease, 20 s of retries per call, and the product's 30 s
/// drain deadline (a 2-core CI lane running three emulators can take over 5 s to prove a stream
/// that rolls a shard every 75 ms; the tests that want the deadline to pass set their own).
fn limits() -> Limits {
    Limits {
        lease_ttl: LEASE,
        backoff: Backoff {
            deadline: Duration::from_secs(20),
            ..Backoff::default()
        },
        ..Limits::default()
    }
}

/// Runs a controller command, waiting out another controller's lease (a killed one's) first.
macro_rules! held {
    ($e:expr) => {{
        let mut tries = 0;
        loop {
            match $e {
                Err(MoveError::Held(h)) if tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(h.left_ms + 20)).await;
                }
                other => break other,
            }
        }
    }};
}

fn budget() -> Budget {
    Budget {
        soak: Duration::from_millis(200),
        ..Budget::default()
    }
}

/// A load generator on its own task, writing through `router` until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<AckLine>>>,
    task: tokio::task::JoinHandle<heatsink_sim::load::WriteReport>,
}

fn start_load(router: Router, prefix: &str, keys: u64, rate: f64) -> Load {
    start_load_spec(
        router,
        LoadSpec {
            keys,
            prefix: prefix.into(),
            tenants: Some(4),
            rate,
            duration: Duration::from_secs(600),
            max_in_flight: 32,
        },
    )
}

/// A load generator of `spec` on its own task, writing through `router` until stopped.
fn start_load_spec(router: Router, spec: LoadSpec) -> Load {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(vec![]));
    let sink = acks.clone();
    let task = tokio::spawn(run_load(router, spec, stop.clone(), move |a| {
        if let Ok(mut v) = sink.lock() {
            v.push(a.clone());
        }
    }));
    Load { stop, acks, task }
}

impl Load {
    async fn finish(self, router: &Router) -> (heatsink_sim::load::WriteReport, Vec<AckLine>) {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.task.await.expect("load task");
        let acks = self.acks.lock().expect("acks").clone();
        let v = verify(router, &acks).await.expect("verify");
        assert!(
            v.ok(),
            "acknowledged writes lost or slots double-owned: {v:?}"
        );
        assert!(report.acked >= 3, "the load ran: {report:?}");
        (report, acks)
    }
}

/// The slot of tenant `t0`: a quarter of the load's keys (the whale tenant carved out).
fn quarter() -> SlotRange {
    SlotRange::single(slot_of("t0")).expect("range")
}

#[tokio::test]
async fn shard_directory_split_merge_are_one_conditional_transaction() {
    let fx = fixture!("shard_directory_split_merge_are_one_conditional_transaction");
    let dir = directory(&fx, "t-a", false).await;
    // init is idempotent.
    let again = dir.init("t-a", MAX_AGE, false).await.expect("init again");
    assert_eq!(again.version, 1);
    assert!(matches!(
        dir.init("t-b", MAX_AGE, false).await,
        Err(MoveError::AlreadyInitialized { .. })
    ));
    let map = dir.load().await.expect("load");
    let split = map.split(SlotRange::ALL, 8_192).expect("split");
    dir.commit(&split).await.expect("commit split");
    // The same change, decided from version 1, is refused whole by the transaction.
    assert!(matches!(
        dir.commit(&split).await,
        Err(MoveError::Conflict { .. })
    ));
    let map = dir.load().await.expect("load");
    assert_eq!(map.version, 2);
    assert_eq!(map.ranges.len(), 2);
    let merge = map
        .merge(
            SlotRange::new(0, 8_191).expect("r"),
            SlotRange::new(8_192, 16_383).expect("r"),
        )
        .expect("merge");
    dir.commit(&merge).await.expect("commit merge");
    let map = dir.load().await.expect("load");
    assert_eq!((map.version, map.ranges.len()), (3, 1));
    // A hand edit of a range item is reported, not guessed at.
    fx.stack
        .ddb
        .update_item()
        .table_name(dir.table())
        .key("pk", AttributeValue::S("dir".into()))
        .key("sk", AttributeValue::S("range#00000".into()))
        .update_expression("SET #o = :o")
        .expression_attribute_names("#o", "owner")
        .expression_attribute_values(":o", AttributeValue::S("t-hand".into()))
        .send()
        .await
        .expect("hand edit");
    let err = dir.load().await.expect_err("hand-edited");
    assert!(
        matches!(err, MoveError::Shard(SlotError::Corrupt { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn move_bad_requests_get_typed_errors_and_change_nothing() {
    let fx = fixture!("move_bad_requests_get_typed_errors_and_change_nothing");
    let a = owner_table(&fx, "a").await;
    let dir = directory(&fx, &a, false).await;
    let (ddb, streams) = (fx.stack.ddb.clone(), fx.stack.streams.clone());
    let spec = |to: &str| MoveSpec {
        slots: quarter(),
        to: to.into(),
        mode: MoveMode::Copy,
        strict: false,
        budget: budget(),
    };
    let err = Mover::start(ddb.clone(), streams.clone(), dir.clone(), spec(&a))
        .await
        .expect_err("to the current owner");
    assert!(matches!(err, MoveError::BadMove(_)), "{err}");
    // A target without a stream, and one with another key schema.
    let plain = TableSpec::new(format!("{}plain", fx.prefix()), KeyAttr::s("pk"));
    fx.track_table(&plain.name);
    schema::ensure_table(&ddb, &plain).await.expect("plain");
    let err = Mover::start(ddb.clone(), streams.clone(), dir.clone(), spec(&plain.name))
        .await
        .expect_err("no stream");
    assert!(err.to_string().contains("NEW_AND_OLD_IMAGES"), "{err}");
    let sorted = TableSpec::new(format!("{}sorted", fx.prefix()), KeyAttr::s("pk"))
        .sort_key(KeyAttr::s("sk"))
        .stream(StreamView::NewAndOldImages);
    fx.track_table(&sorted.name);
    schema::ensure_table(&ddb, &sorted).await.expect("sorted");
    let err = Mover::start(
        ddb.clone(),
        streams.clone(),
        dir.clone(),
        spec(&sorted.name),
    )
    .await
    .expect_err("key schema");
    assert!(matches!(err, MoveError::BadTable { .. }), "{err}");
    assert_eq!(
        dir.load().await.expect("load").version,
        1,
        "nothing changed"
    );
    // Two moves of one slot at once.
    let b = owner_table(&fx, "b").await;
    let c = owner_table(&fx, "c").await;
    let mut first = Mover::start(ddb.clone(), streams.clone(), dir.clone(), spec(&b))
        .await
        .expect("first move");
    let err = Mover::start(ddb.clone(), streams.clone(), dir.clone(), spec(&c))
        .await
        .expect_err("second move of the same slots");
    assert!(err.to_string().contains(&first.record().id), "{err}");
    // Rollback before the flip names the recovery command.
    let mut m = Mover::open(ddb, streams, dir, &first.record().id)
        .await
        .expect("open");
    let err = m.rollback().await.expect_err("not flipped");
    assert!(
        err.to_string()
            .contains(&format!("heatsink move abort {}", first.record().id)),
        "{err}"
    );
    // A second controller is refused while the first holds the move's lease, in one line
    // naming the holder.
    let err = m
        .abort()
        .await
        .expect_err("the first controller holds the lease");
    assert!(matches!(err, MoveError::Held(_)), "{err}");
    assert!(
        !err.to_string().contains('\n') && err.to_string().contains("run by"),
        "{err}"
    );
    first.abort().await.expect("abort");
}

/// A copy whose write rate is over the target's on-demand maximum is refused before anything
/// is recorded (it would be throttled for its whole run), and `--prewarm` raises the target's
/// warm throughput to the copy's rate within the maximum before the move starts. Through the
/// partition simulator, which keeps both settings (emulators have neither).
#[tokio::test]
async fn sim_a_copy_over_the_targets_on_demand_maximum_is_refused_and_prewarm_raises_the_target() {
    use heatsink::schema::warm;
    use heatsink_sim::{SimConfig, Simulator, TableMax, TableShape};

    let fx = fixture!(
        "sim_a_copy_over_the_targets_on_demand_maximum_is_refused_and_prewarm_raises_the_target"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let mut config = SimConfig::new(&std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("lane"));
    config.tables.insert(
        s.b.clone(),
        TableShape {
            max: TableMax {
                read: None,
                write: Some(500.0),
            },
            warm: None,
        },
    );
    let sim = Simulator::start(config).await.expect("simulator");
    let via_sim = aws_sdk_dynamodb::Client::from_conf(
        s.ddb
            .config()
            .to_builder()
            .endpoint_url(sim.endpoint())
            .build(),
    );
    let err = Mover::start(
        via_sim.clone(),
        s.streams.clone(),
        s.dir.clone(),
        s.spec(false),
    )
    .await
    .expect_err("1,000 WCU/s of copy over a 500 maximum");
    let line = err.to_string();
    assert!(
        matches!(err, MoveError::BadTable { .. })
            && line.contains("500 writes/s")
            && line.contains("--wcu"),
        "{line}"
    );
    assert!(
        s.dir.moves().await.expect("moves").records.is_empty(),
        "nothing recorded"
    );
    let spec = MoveSpec {
        budget: Budget {
            wcu_per_sec: 400.0,
            prewarm: true,
            ..budget()
        },
        ..s.spec(false)
    };
    // moto reports a warm throughput of its own, dynoxide none: the rule, whatever they are.
    let source = warm::describe(&via_sim, &s.a).await.expect("describe");
    let before = warm::describe(&via_sim, &s.b).await.expect("describe");
    let mut m = Mover::start(via_sim.clone(), s.streams.clone(), s.dir.clone(), spec)
        .await
        .expect("within the maximum");
    let target = warm::describe(&via_sim, &s.b).await.expect("describe");
    assert_eq!(
        target.warm.write,
        before.warm.write.max(source.warm.write.clamp(400, 500)),
        "prewarmed to the source's and the copy's rate within the maximum: {source:?} {before:?}"
    );
    assert!(target.warm.write >= 400);
    m.abort().await.expect("abort");
    sim.stop();
}

#[tokio::test]
async fn move_killed_at_every_step_boundary_resumes_and_loses_no_write() {
    let fx = fixture!("move_killed_at_every_step_boundary_resumes_and_loses_no_write");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = s.start(false).await.record().id.clone();
    // Each step runs in a fresh mover opened from the persisted record: a kill at every boundary.
    let mut phases = vec![];
    loop {
        let mut m = s.open(&id).await;
        if m.record().phase.is_final() {
            break;
        }
        phases.push(held!(m.step().await).expect("step"));
    }
    assert_eq!(
        phases,
        [
            Phase::Recorded,
            Phase::Copied,
            Phase::CaughtUp,
            Phase::Diffed,
            Phase::Fenced,
            Phase::Flipped,
            Phase::Cleaning,
            Phase::Cleaned,
            Phase::Done
        ]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (report, acks) = load.finish(&s.router).await;
    let rec = s.open(&id).await.record().clone();
    assert!(rec.diff.as_ref().is_some_and(|d| d.clean()), "{rec:?}");
    assert!(rec.pause_ms.is_some());
    // Writes to the moved slots were acknowledged by both owners over the run.
    let moved_keys: Vec<&AckLine> = acks
        .iter()
        .filter(|a| quarter().contains(slot_of(&a.key)))
        .collect();
    assert!(moved_keys.iter().any(|x| x.owner == s.a && x.epoch == 1));
    assert!(
        moved_keys.iter().any(|x| x.owner == s.b && x.epoch == 2),
        "{report:?}"
    );
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(quarter().first).owner, s.b);
    assert_eq!(map.entry_of(quarter().first ^ 1).owner, s.a);
    // The source copy was cleaned up: only fence items of the slots remain there.
    let left = s
        .ddb
        .scan()
        .table_name(&s.a)
        .send()
        .await
        .expect("scan")
        .items()
        .iter()
        .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()).cloned())
        .filter(|pk| !pk.starts_with("#heatsink/") && quarter().contains(slot_of(pk)))
        .count();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn move_abort_before_the_flip_and_rollback_after_it_lose_no_write() {
    let fx = fixture!("move_abort_before_the_flip_and_rollback_after_it_lose_no_write");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    // Abort after the fence (the last phase before the flip).
    let mut m = s.start(false).await;
    while m.record().phase != Phase::Fenced {
        m.step().await.expect("step");
    }
    m.abort().await.expect("abort");
    let err = m.rollback().await.expect_err("ended");
    assert!(err.to_string().contains("already ended"), "{err}");
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(quarter().first).owner, s.a);
    // Roll back after the flip.
    let mut m = s.start(false).await;
    while m.record().phase != Phase::Flipped {
        m.step().await.expect("step");
    }
    let err = m.abort().await.expect_err("flipped");
    assert!(
        err.to_string()
            .contains(&format!("heatsink move rollback {}", m.record().id)),
        "{err}"
    );
    // A write the new owner acknowledges before the rollback must come back with the slot.
    let key = (0..)
        .map(|i| format!("{{t0}}after-flip-{i}"))
        .find(|k| quarter().contains(slot_of(k)))
        .expect("a key");
    let ack = s
        .router
        .put_versioned(&key, 1, HashMap::new())
        .await
        .expect("write after the flip");
    assert_eq!(ack.owner, s.b);
    m.rollback().await.expect("rollback");
    let map = s.dir.load().await.expect("map");
    assert_eq!(
        (
            map.entry_of(quarter().first).owner.as_str(),
            map.entry_of(quarter().first).epoch
        ),
        (s.a.as_str(), 3)
    );
    s.router.invalidate().await; // reads follow the map too: a cached one is up to MAX_AGE old
    let (owner, item) = s.router.get_key(&key).await.expect("read back");
    assert_eq!(owner, s.a);
    assert!(
        item.is_some(),
        "the write the target took came back with the rollback"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}

#[tokio::test]
async fn a_stale_router_with_a_long_max_age_is_bounced_by_the_fence_in_a_strict_directory() {
    let fx = fixture!(
        "a_stale_router_with_a_long_max_age_is_bounced_by_the_fence_in_a_strict_directory"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, true).await;
    // A router that never reloads on its own: an hour of max-age.
    let stale = Router::with(
        s.ddb.clone(),
        s.dir.clone(),
        Duration::from_secs(3_600),
        false,
        RetryRule::default(),
    );
    stale.map().await.expect("stale map loaded before the move");
    let stale_load = start_load(stale.clone(), "stale-", 8, 5.0);
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let mut m = s.start(true).await;
    m.run().await.expect("move");
    // The move takes well under a second on an emulator, and the stale load writes the moved slot
    // (tenant t0) every 0.8 s: keep it writing past the flip so its writes meet the fence.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let (stale_report, _) = stale_load.finish(&stale).await;
    load.finish(&s.router).await;
    assert!(
        stale_report.moved > 0,
        "the stale router was bounced: {stale_report:?}"
    );
    let key = (0..)
        .map(|i| format!("{{t0}}late-{i}"))
        .find(|k| quarter().contains(slot_of(k)))
        .expect("a key");
    let ack = stale
        .put_versioned(&key, 1, HashMap::new())
        .await
        .expect("write");
    assert_eq!((ack.owner.as_str(), ack.epoch), (s.b.as_str(), 2));
}

/// Every second batch delivered twice, every third reply lost.
struct Flaky(AtomicU64);

impl TailFaults for Flaky {
    fn batch(&self, _shard: &str, _n: u64) -> BatchFault {
        // The first non-empty batch is duplicated, so a move whose tail reads one batch still
        // exercises the apply rule's skip of a redelivery.
        match self.0.fetch_add(1, Ordering::Relaxed) % 6 {
            0 | 3 => BatchFault::Duplicate,
            2 | 5 => BatchFault::Lose,
            _ => BatchFault::Deliver,
        }
    }
}

#[tokio::test]
async fn duplicate_and_lost_stream_batches_and_deletes_during_the_copy_converge() {
    let fx = fixture!("duplicate_and_lost_stream_batches_and_deletes_during_the_copy_converge");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    // Items deleted after the positions are recorded: their tombstones must win over the
    // snapshot rows the copy reads (a delete racing the scan cannot be resurrected).
    let doomed: Vec<String> = (0..)
        .map(|i| format!("{{t0}}doomed-{i}"))
        .filter(|k| quarter().contains(slot_of(k)))
        .take(5)
        .collect();
    for k in &doomed {
        s.router
            .put_versioned(k, 1, HashMap::new())
            .await
            .expect("put");
    }
    let mut m = s
        .start(false)
        .await
        .with_faults(Arc::new(Flaky(AtomicU64::new(0))));
    m.step().await.expect("record");
    for k in &doomed {
        s.ddb
            .delete_item()
            .table_name(&s.a)
            .key("pk", AttributeValue::S(k.clone()))
            .send()
            .await
            .expect("delete");
    }
    m.run().await.expect("move");
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
    for k in &doomed {
        let (_, item) = s.router.get_key(k).await.expect("get");
        assert_eq!(item, None, "{k} was deleted before the flip");
    }
    assert!(
        m.record().skipped > 0,
        "redeliveries were skipped by the apply rule"
    );
}

/// Versioned plain puts of one key of slot `{t1}` while fenced writes of slot `{t0}` are
/// refused (their transactions cancelled) on the same table, for `for_how_long`; every
/// acknowledged version is read back at once. Returns (acknowledged, read back older).
async fn puts_beside_refused_fenced_writes(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    for_how_long: Duration,
) -> (u64, u64) {
    use aws_sdk_dynamodb::types::{
        ConditionCheck, Put, PutRequest, TransactWriteItem, WriteRequest,
    };
    use heatsink::slots::fence::{FenceItem, KeySchema, fence_item};
    let keys = KeySchema { sort_key: None };
    // A table of some size (moto copies all of it when a transaction begins).
    for chunk in 0..8 {
        let batch: Vec<WriteRequest> = (0..25)
            .map(|i| {
                let put = PutRequest::builder()
                    .item("pk", AttributeValue::S(format!("bulk-{chunk}-{i}")))
                    .item("v", AttributeValue::N("1".into()))
                    .build()
                    .expect("put request");
                WriteRequest::builder().put_request(put).build()
            })
            .collect();
        ddb.batch_write_item()
            .request_items(table, batch)
            .send()
            .await
            .expect("bulk");
    }
    let fence = FenceItem {
        to: "elsewhere".into(),
        epoch: 2,
        move_id: None,
        token: None,
    };
    ddb.put_item()
        .table_name(table)
        .set_item(Some(fence_item(&keys, slot_of("t0"), &fence)))
        .send()
        .await
        .expect("fence");
    let stop = Arc::new(AtomicBool::new(false));
    let refusers: Vec<_> = (0..2)
        .map(|_| {
            let (ddb, table, keys, stop) =
                (ddb.clone(), table.to_owned(), keys.clone(), stop.clone());
            tokio::spawn(async move {
                let mut refused = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let check = ConditionCheck::builder()
                        .table_name(&table)
                        .set_key(Some(keys.fence_key(slot_of("t0"))))
                        .condition_expression("attribute_not_exists(pk) OR ep < :e")
                        .expression_attribute_values(":e", AttributeValue::N("1".into()))
                        .build()
                        .expect("check");
                    let put = Put::builder()
                        .table_name(&table)
                        .item("pk", AttributeValue::S("{t0}stale".into()))
                        .item("v", AttributeValue::N("1".into()))
                        .build()
                        .expect("put");
                    let res = ddb
                        .transact_write_items()
                        .transact_items(TransactWriteItem::builder().condition_check(check).build())
                        .transact_items(TransactWriteItem::builder().put(put).build())
                        .send()
                        .await;
                    assert!(res.is_err(), "the fence refuses every write of {{t0}}");
                    refused += 1;
                }
                refused
            })
        })
        .collect();
    let (mut acked, mut older) = (0u64, 0u64);
    let start = std::time::Instant::now();
    // At least 5 puts however slow the emulator is (a shared lane under load), within a minute.
    while (start.elapsed() < for_how_long || acked < 5) && start.elapsed() < Duration::from_secs(60)
    {
        let v = acked + 1;
        ddb.put_item()
            .table_name(table)
            .item("pk", AttributeValue::S("{t1}key".into()))
            .item("v", AttributeValue::N(v.to_string()))
            .condition_expression("attribute_not_exists(v) OR v < :v")
            .expression_attribute_values(":v", AttributeValue::N(v.to_string()))
            .send()
            .await
            .expect("put");
        acked = v;
        let read = ddb
            .get_item()
            .table_name(table)
            .key("pk", AttributeValue::S("{t1}key".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("get");
        let found: Option<u64> = read
            .item()
            .and_then(|i| i.get("v"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok());
        if found.is_none_or(|f| f < v) {
            older += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut refused = 0;
    for r in refusers {
        refused += r.await.expect("refuser");
    }
    assert!(refused > 0, "fenced writes were refused alongside the puts");
    (acked, older)
}

/// The cause of the one lost write seen in a parallel moto run (`{t1}key-1 acked=2
/// found=Some(1)` on a slot that never moved): moto's cancelled transactions put back a copy
/// of the table (see `heatsink_sim::http`). With the client the move tests use, an acknowledged
/// put beside refused fenced writes is never read back older, on any lane.
#[tokio::test]
async fn acknowledged_puts_survive_refused_fenced_writes_on_the_same_table() {
    let fx = fixture!("acknowledged_puts_survive_refused_fenced_writes_on_the_same_table");
    let a = owner_table(&fx, "a").await;
    let (acked, older) =
        puts_beside_refused_fenced_writes(&fx.stack.isolated_ddb(), &a, Duration::from_secs(2))
            .await;
    assert!(acked >= 5, "the puts ran: {acked}");
    assert_eq!(
        older, 0,
        "{older} of {acked} acknowledged puts were read back older"
    );
}

/// The emulator fault itself, for the record: on moto with unbounded concurrency some
/// acknowledged puts are reverted (about 3% in a 2 s run on this machine). Not part of the
/// suite; run `cargo test -p heatsink-integration --test it slots::moto_ -- --ignored` on the
/// moto lane.
#[tokio::test]
#[ignore = "reproduces a moto fault; run on the moto lane with --ignored"]
async fn moto_reverts_acknowledged_puts_beside_a_cancelled_transaction() {
    let fx = fixture!("moto_reverts_acknowledged_puts_beside_a_cancelled_transaction");
    assert_eq!(fx.stack.lane, "moto", "a moto-lane probe");
    let a = owner_table(&fx, "a").await;
    let (acked, older) =
        puts_beside_refused_fenced_writes(&fx.stack.ddb, &a, Duration::from_secs(4)).await;
    eprintln!("moto reverted {older} of {acked} acknowledged puts");
    assert!(
        older > 0,
        "moto isolated its transactions this time ({acked} puts)"
    );
}

/// `pk`'s version as stored in `table` (no routing), `None` when absent.
async fn raw_version(ddb: &aws_sdk_dynamodb::Client, table: &str, pk: &str) -> Option<u64> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw get");
    out.item?.get("v")?.as_n().ok()?.parse().ok()
}

fn version(item: &Option<HashMap<String, AttributeValue>>) -> Option<u64> {
    item.as_ref()?.get("v")?.as_n().ok()?.parse().ok()
}

#[tokio::test]
async fn move_attrition_reads_both_sides_and_writes_only_the_target() {
    let _serial = SERIAL.lock().await;
    let fx = fixture!("move_attrition_reads_both_sides_and_writes_only_the_target");
    let s = Scene::new(&fx, false).await;
    // Written to the source before the move; attrition copies nothing.
    let old: Vec<String> = (0..4).map(|i| format!("{{t0}}old-{i}")).collect();
    for k in &old {
        let ack = s
            .router
            .put_versioned(k, 1, HashMap::new())
            .await
            .expect("put before");
        assert_eq!(ack.owner, s.a);
    }
    let load = start_load(s.router.clone(), "attr-", 16, 20.0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spec = MoveSpec {
        mode: MoveMode::Attrition,
        ..s.spec(false)
    };
    let mut mover = Mover::start(s.ddb.clone(), s.streams.clone(), s.dir.clone(), spec)
        .await
        .expect("start attrition");
    let record = mover.run().await.expect("attrition move").clone();
    assert_eq!(record.phase, Phase::Done);
    assert_eq!(record.copied, 0, "attrition copies nothing");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Nothing was copied: the old items are on the source only, yet read through the router.
    let reader = Router::new(s.ddb.clone(), s.dir.clone(), MAX_AGE);
    for k in &old {
        assert_eq!(raw_version(&s.ddb, &s.b, k).await, None, "{k} was copied");
        let (owner, item) = reader.get_key(k).await.expect("read");
        assert_eq!(owner, s.b, "{k} is routed to the target");
        assert_eq!(version(&item), Some(1), "{k} read through to the source");
    }
    // A new write lands on the target only, and the newer version wins the read.
    let ack = reader
        .put_versioned(&old[0], 2, HashMap::new())
        .await
        .expect("put after");
    assert_eq!(ack.owner, s.b);
    assert_eq!(raw_version(&s.ddb, &s.a, &old[0]).await, Some(1));
    assert_eq!(raw_version(&s.ddb, &s.b, &old[0]).await, Some(2));
    let (_, item) = reader.get_key(&old[0]).await.expect("read new");
    assert_eq!(version(&item), Some(2));
    // A slot outside the move still reads one table.
    let (owner, _) = reader.get_key("{t1}x").await.expect("read other");
    assert_eq!(owner, s.a);
    let (report, acks) = load.finish(&s.router).await;
    let moved: Vec<_> = acks
        .iter()
        .filter(|a| quarter().contains(slot_of(&a.key)) && a.epoch > 1)
        .collect();
    assert!(
        moved.iter().all(|a| a.owner == s.b),
        "after the flip the moved slot's writes go to the target: {report:?}"
    );
}

#[tokio::test]
async fn demo_move_moves_p9_and_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().await;
    let fx = fixture!("demo_move_moves_p9_and_loses_no_acknowledged_write");
    let prefix = fx.prefix().to_owned();
    for t in ["demo-move-posts", "demo-move-p9", "demo-move-shards"] {
        fx.track_table(&format!("{prefix}{t}"));
    }
    let spec = heatsink_demo::moves::DemoSpec {
        prefix,
        rate: 40.0,
        settle: Duration::from_millis(800),
        ..Default::default()
    };
    let progress: heatsink::slots::mover::MoveProgress = Arc::new(|line: &str| eprintln!("{line}"));
    let ddb = move_ddb(&fx);
    let first = heatsink_demo::moves::run_move_demo(
        ddb.clone(),
        fx.stack.streams.clone(),
        &spec,
        progress.clone(),
    )
    .await
    .expect("demo");
    assert_eq!(first.lost, 0, "{first:?}");
    assert!(
        first.acknowledged > 0 && first.acknowledged_p9 > 0,
        "{first:?}"
    );
    assert!(first.diff.as_ref().is_some_and(|d| d.clean()), "{first:?}");
    assert_eq!(first.slot, slot_of("p9"));
    // p9 now lives on the table of its own, the other posts stayed.
    let router = Router::new(
        ddb.clone(),
        SlotDirectory::new(ddb.clone(), format!("{}demo-move-shards", spec.prefix)),
        MAX_AGE,
    );
    let (owner, item) = router.get_key("p9").await.expect("read p9");
    assert_eq!(owner, first.to);
    assert!(version(&item).is_some());
    let (owner, _) = router.get_key("p3").await.expect("read p3");
    assert_eq!(owner, first.from);
    // A second run starts from scratch (its tables are recreated) and works the same.
    let again = heatsink_demo::moves::run_move_demo(ddb, fx.stack.streams.clone(), &spec, progress)
        .await
        .expect("demo again");
    assert_eq!(again.lost, 0, "{again:?}");
    assert!(again.acknowledged > 0, "{again:?}");
}

/// A copy move whose source stream has 4 shards that keep rolling over, as DynamoDB Streams
/// does on a table with several partitions (shards close every few hours on AWS), served by
/// the stream-shape simulator in front of the emulator (no emulator makes this shape). The
/// drain must find fence records on shards that opened during the pause, and every write the
/// source acknowledged must be readable on the target at the flip, not only after the soak.
#[tokio::test]
async fn sim_move_on_four_rolling_stream_shards_reads_every_acknowledged_write_at_the_flip() {
    let fx = fixture!(
        "sim_move_on_four_rolling_stream_shards_reads_every_acknowledged_write_at_the_flip"
    );
    let _serial = SERIAL.lock().await;
    let mut s = Scene::new(&fx, false).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .expect("the stack's endpoint");
    let mut shape = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
    // Every shard lives 500 ms (a rollover every ~125 ms somewhere): the shards the drain knows
    // from its last DescribeStream have usually closed by the time the fence record arrives,
    // and the stream lists over 100 shards (DescribeStream pages) before the move ends. (At
    // 300 ms, 13 new shards a second, a 2-core CI runner with both emulator lanes busy let the
    // tail fall behind the rollovers for over 30 s: a new shard costs a DescribeStream page and
    // a GetShardIterator, through the simulator's proxy to moto.)
    shape.rollover = Some(Duration::from_millis(500));
    let shaper = StreamShaper::start(&upstream, shape).await.expect("shaper");
    s.streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .endpoint_url(shaper.endpoint())
            .build(),
    );
    let arn = fx
        .stack
        .ddb
        .describe_table()
        .table_name(&s.a)
        .send()
        .await
        .expect("describe")
        .table
        .and_then(|t| t.latest_stream_arn)
        .expect("the source has a stream");
    // 15 s of rollovers before the move: over 100 shards, so DescribeStream takes 2 pages and
    // the open shards are on the second.
    shaper.watch(&arn).await.expect("watch");
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    tokio::time::sleep(Duration::from_millis(15_000)).await;
    let listed = shaper
        .with_stream(&arn, |st| st.describe().len())
        .expect("watched");
    assert!(listed > 100, "{listed} shards listed before the move");
    let mut m = s.start(false).await;
    // A drain that cannot prove a shard within its deadline stops with nothing flipped or
    // deleted (`Unproven`, naming `heatsink move resume`): the operator's next step, taken here
    // as the error says, at most three times (the tail keeps its positions in between).
    let mut unproven = 0;
    while m.record().phase != Phase::Flipped {
        match m.step().await {
            Ok(_) => {}
            Err(MoveError::Unproven(u)) if unproven < 3 => {
                unproven += 1;
                eprintln!("drain stopped unproven ({u:?}); resuming as it says");
            }
            Err(e) => panic!("step: {e:?}"),
        }
    }
    let at_flip: Vec<AckLine> = load.acks.lock().expect("acks").clone();
    let moved_on_source = at_flip
        .iter()
        .filter(|a| quarter().contains(slot_of(&a.key)) && a.owner == s.a)
        .count();
    assert!(moved_on_source > 0, "the source took writes of the slot");
    let v = verify(&s.router, &at_flip)
        .await
        .expect("verify at the flip");
    assert!(
        v.ok(),
        "acknowledged writes not on the target at the flip: {v:?}"
    );
    assert!(
        m.record().forward.fence_seen,
        "the drain saw every slot's fence record: {} shards known, {} closed, fences of {:?}",
        m.record().forward.shards.len(),
        m.record()
            .forward
            .shards
            .values()
            .filter(|p| p.closed)
            .count(),
        m.record().forward.fence_slots
    );
    m.run().await.expect("move");
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
    let stats = shaper.stats(&arn).expect("the source stream was shaped");
    assert!(
        stats.rollovers >= 4,
        "shards rolled over during the move: {stats:?}"
    );
    assert!(
        m.record().forward.shards.len() > 4,
        "the tail followed children of rolled shards: {} known",
        m.record().forward.shards.len()
    );
    assert!(m.record().diff.as_ref().is_some_and(|d| d.clean()));
    shaper.stop();
}

/// A mover that stalls inside the pause (fence written, flip not yet committed) for 1 s while
/// writes keep coming: a bounced write waits for the directory to change instead of re-sending
/// itself to the fenced owner every few ms (each refused transaction would cost the old owner
/// write capacity, and a retry storm of every write in flight starves the mover's own drain).
/// The router's writes share one directory read per 10 ms poll.
#[tokio::test]
async fn bounced_writes_wait_for_the_flip_instead_of_hammering_the_fenced_owner() {
    let fx = fixture!("bounced_writes_wait_for_the_flip_instead_of_hammering_the_fenced_owner");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 40.0);
    let mut m = s.start(false).await;
    while m.record().phase != Phase::Fenced {
        m.step().await.expect("step");
    }
    let (moved, reloads) = (
        s.router.stats().moved.load(Ordering::Relaxed),
        s.router.stats().reloads.load(Ordering::Relaxed),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let moved = s.router.stats().moved.load(Ordering::Relaxed) - moved;
    let reloads = s.router.stats().reloads.load(Ordering::Relaxed) - reloads;
    eprintln!("held fence for 1 s: {moved} MOVED answers, {reloads} directory reads");
    // The load writes each key one write at a time, and 4 of its 16 keys are the whale
    // tenant's: at most 4 writes of the fenced slot are in flight, each answered MOVED once
    // and then waiting (measured: 4). Re-sending every 10 ms made it 23 in this second.
    assert!(moved >= 1, "writes were bounced by the fence");
    assert!(
        moved <= 8,
        "{moved} MOVED answers in 1 s: bounced writes re-sent themselves to the fenced owner"
    );
    assert!(
        reloads <= 120,
        "{reloads} directory reads in 1 s: at most one per 10 ms poll (+ max-age reloads)"
    );
    m.run().await.expect("move");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (report, _) = load.finish(&s.router).await;
    assert_eq!(report.failed, 0, "no write gave up: {report:?}");
}

/// Notes when each `DescribeStream` call is sent.
#[derive(Debug, Clone, Default)]
struct Listings(Arc<Mutex<Vec<std::time::Instant>>>);

impl aws_sdk_dynamodbstreams::config::Intercept for Listings {
    fn name(&self) -> &'static str {
        "Listings"
    }

    fn read_before_serialization(
        &self,
        ctx: &aws_sdk_dynamodbstreams::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodbstreams::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodbstreams::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodbstreams::error::BoxError> {
        if ctx
            .input()
            .downcast_ref::<aws_sdk_dynamodbstreams::operation::describe_stream::DescribeStreamInput>()
            .is_some()
            && let Ok(mut at) = self.0.lock()
        {
            at.push(std::time::Instant::now());
        }
        Ok(())
    }
}

/// DynamoDB Streams allows 10 `DescribeStream` calls per second (per account and Region). The
/// soak polls both tails every 50 ms; listing the shards on each of those polls made 40 calls a
/// second. Every 1 s window of a move under load must stay within the limit.
#[tokio::test]
async fn a_move_lists_stream_shards_within_the_describe_stream_limit() {
    let _serial = SERIAL.lock().await;
    let fx = fixture!("a_move_lists_stream_shards_within_the_describe_stream_limit");
    let mut s = Scene::new(&fx, false).await;
    let listings = Listings::default();
    s.streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .interceptor(listings.clone())
            .build(),
    );
    let load = start_load(s.router.clone(), "list-", 16, 20.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spec = MoveSpec {
        budget: Budget {
            soak: Duration::from_secs(3),
            ..Budget::default()
        },
        ..s.spec(false)
    };
    let mut mover = Mover::start(s.ddb.clone(), s.streams.clone(), s.dir.clone(), spec)
        .await
        .expect("start");
    let record = mover.run().await.expect("move").clone();
    assert_eq!(record.phase, Phase::Done);
    let (report, acks) = load.finish(&s.router).await;
    assert!(
        !acks.is_empty(),
        "the load wrote through the move: {report:?}"
    );
    let at = listings.0.lock().expect("listings").clone();
    assert!(!at.is_empty(), "the mover listed the stream's shards");
    let busiest = at
        .iter()
        .map(|t| {
            at.iter()
                .filter(|u| **u >= *t && u.duration_since(*t) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let span = at[at.len() - 1].duration_since(at[0]);
    eprintln!(
        "{} DescribeStream calls in {span:?}, {busiest} in the busiest second",
        at.len()
    );
    assert!(
        busiest <= 10,
        "{busiest} DescribeStream calls in one second ({} in {span:?})",
        at.len()
    );
    // Two tails for the 3 s soak at one listing a second each, plus the copy, the drain and
    // the final round: a handful, not one per 50 ms poll (about 120).
    assert!(
        at.len() <= 20,
        "{} DescribeStream calls in {span:?}",
        at.len()
    );
}

mod attrition;
mod hotspot;
mod interrupt;
mod operation;
mod ordered;
mod ownership;
mod pilot;
mod proof;
mod weather;
