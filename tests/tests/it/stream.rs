//! The lineage-ordered consumer (`heatsink::stream`) against kinesis-mock and moto: resharding
//! while producing, workers killed mid-shard, fenced zombies, malformed lease rows, failing
//! batches (stall, dead-letter queue, abort), slow shutdown, foreign streams, LATEST after a
//! split, retention, a hung ListShards, and the DynamoDB Streams source.

use heatsink_integration::PhotoFixture;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ScalingType, StreamStatus};
use heatsink::stream::{
    DynamoDbStreamsSource, Fence, KinesisSource, LeaseTable, Position, ProcessBatch,
    RecordProcessor, ShardSource, SqsDeadLetter, StreamError, Worker, WorkerConfig, WorkerStats,
};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{Fixture, eventually, fixture};

/// One delivery as a processor saw it.
#[derive(Clone, Debug)]
struct Seen {
    worker: String,
    shard: String,
    token: u64,
    key: String,
    value: u64,
    /// Where the record sits in its shard.
    position: Position,
    /// When the processor call that delivered it began.
    at: Instant,
}

/// Records every delivery in one shared log (processing order across workers), and writes each
/// key's latest value to a sink table through the fence, as a real processor would.
struct Collector {
    worker: String,
    log: Arc<Mutex<Vec<Seen>>>,
    sink: Option<(aws_sdk_dynamodb::Client, String)>,
    /// Records of this key fail while the switch is on (an outage downstream of one shard).
    poison: Option<(String, Arc<AtomicBool>)>,
}

impl RecordProcessor for Collector {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let at = Instant::now();
        let mut latest: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = Vec::new();
        for r in &batch.records {
            let text = String::from_utf8_lossy(&r.data).into_owned();
            let (key, value) = text.split_once(':').unwrap_or((&text, "0"));
            if self
                .poison
                .as_ref()
                .is_some_and(|(k, on)| k == key && on.load(Ordering::SeqCst))
            {
                return Err(StreamError::Processor(
                    format!("poison record {key}").into(),
                ));
            }
            let value: u64 = value.parse().unwrap_or(0);
            latest.insert(key.to_owned(), value);
            seen.push(Seen {
                worker: self.worker.clone(),
                shard: batch.shard_id.clone(),
                token: batch.token,
                key: key.to_owned(),
                value,
                position: r.position(),
                at,
            });
        }
        if let Some((ddb, table)) = &self.sink {
            let fence = batch.fence();
            for (key, value) in latest {
                sink_write(ddb, table, &fence, &key, value).await?;
            }
        }
        self.log.lock().unwrap().extend(seen);
        Ok(())
    }
}

async fn sink_write(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    fence: &Fence,
    key: &str,
    value: u64,
) -> Result<(), StreamError> {
    let update = ddb
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.to_owned()))
        .key("sk", AttributeValue::S("last".into()))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", AttributeValue::N(value.to_string()));
    fence
        .check(table, fence.update(update).send().await)
        .map(|_| ())
}

pub(crate) fn fast_config(worker: &str) -> WorkerConfig {
    // `RUST_LOG=heatsink=debug` shows the worker's lease moves when a test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut c = WorkerConfig::new(worker);
    c.lease_duration = Duration::from_millis(2_500);
    c.renew_interval = Duration::from_millis(400);
    c.sync_interval = Duration::from_secs(1);
    c.idle_poll = Duration::from_millis(100);
    c.retry_backoff = Duration::from_millis(50);
    c.max_records = Some(200);
    c.checkpoint_interval = Duration::from_millis(100);
    // The lease is short to keep tests quick; the shared emulators are not: calls get the
    // timeouts of a 10 s lease.
    c.timeouts = Some(heatsink::stream::Timeouts::default());
    // moto 5.2.5 lets two conditional takes both succeed: read each take back, as the worker
    // always did before `verify_takes`. `HEATSINK_VERIFY_TAKES=0` runs a lane whose emulator
    // serialises conditional writes without it, as production does.
    c.verify_takes = std::env::var("HEATSINK_VERIFY_TAKES").as_deref() != Ok("0");
    c
}

struct Running {
    stats: WorkerStats,
    task: tokio::task::JoinHandle<Result<(), StreamError>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

fn start<S: ShardSource, P: RecordProcessor>(
    source: S,
    leases: LeaseTable,
    collector: P,
    config: WorkerConfig,
) -> Running {
    let worker = Worker::new(source, leases, collector, config);
    let stats = worker.stats();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = rx.await;
    }));
    Running { stats, task, stop }
}

pub(crate) async fn put_round(k: &aws_sdk_kinesis::Client, stream: &str, round: u64, keys: usize) {
    let entries: Vec<PutRecordsRequestEntry> = (0..keys)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("k{i:02}"))
                .data(Blob::new(format!("k{i:02}:{round}")))
                .build()
                .unwrap()
        })
        .collect();
    let out = k
        .put_records()
        .stream_name(stream)
        .set_records(Some(entries))
        .send()
        .await
        .expect("put records");
    assert_eq!(out.failed_record_count(), Some(0), "no record refused");
}

async fn wait_active(k: &aws_sdk_kinesis::Client, stream: &str) {
    eventually("stream ACTIVE", Duration::from_secs(20), || async {
        let out = k
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .ok()?;
        let s = out.stream_description_summary()?;
        (s.stream_status() == &StreamStatus::Active).then_some(())
    })
    .await;
}

async fn open_shards(k: &aws_sdk_kinesis::Client, stream: &str) -> Vec<(String, u128, u128)> {
    let mut open: Vec<(String, u128, u128)> = KinesisSource::new(k.clone(), stream)
        .list_shards()
        .await
        .expect("list shards")
        .into_iter()
        .filter(|s| !s.is_closed())
        .filter_map(|s| s.hash_range.map(|(a, b)| (s.shard_id, a, b)))
        .collect();
    open.sort_by_key(|s| s.1);
    open
}

async fn split_first(k: &aws_sdk_kinesis::Client, stream: &str) {
    let open = open_shards(k, stream).await;
    let (id, a, b) = open.first().cloned().expect("an open shard");
    k.split_shard()
        .stream_name(stream)
        .shard_to_split(id)
        .new_starting_hash_key((a + (b - a) / 2).to_string())
        .send()
        .await
        .expect("split");
    wait_active(k, stream).await;
}

async fn merge_first_two(k: &aws_sdk_kinesis::Client, stream: &str) {
    let open = open_shards(k, stream).await;
    k.merge_shards()
        .stream_name(stream)
        .shard_to_merge(open[0].0.clone())
        .adjacent_shard_to_merge(open[1].0.clone())
        .send()
        .await
        .expect("merge");
    wait_active(k, stream).await;
}

async fn rescale(k: &aws_sdk_kinesis::Client, stream: &str, target: i32) {
    k.update_shard_count()
        .stream_name(stream)
        .target_shard_count(target)
        .scaling_type(ScalingType::UniformScaling)
        .send()
        .await
        .expect("update shard count");
    wait_active(k, stream).await;
}

/// Per key, walks the log's *first* deliveries: each must be the next value (duplicates from
/// redelivery are allowed). Returns (lost, inversions).
fn audit(log: &[Seen], keys: usize, rounds: u64) -> (usize, usize) {
    let mut next: HashMap<&str, u64> = HashMap::new();
    let mut inversions = 0;
    for s in log {
        let want = next.entry(s.key.as_str()).or_insert(0);
        if s.value == *want {
            *want += 1;
        } else if s.value > *want {
            inversions += 1;
        }
    }
    let lost = (0..keys)
        .map(|i| {
            let got = next.get(format!("k{i:02}").as_str()).copied().unwrap_or(0);
            usize::try_from(rounds - got.min(rounds)).unwrap_or(0)
        })
        .sum();
    (lost, inversions)
}

fn complete(log: &[Seen], keys: usize, rounds: u64) -> bool {
    audit(log, keys, rounds).0 == 0
}

/// Three workers read a 2-shard stream while it is split, merged and rescaled twice, and one
/// worker is killed mid-way; every key's values arrive complete and in order. The workers read
/// in pages of 5 under a cap of 200 (`page_records`), so pages below the cap (and, where a
/// backlog fills a window, the cap and doubled pages) run through the reshards and the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_is_lost_or_reordered_across_split_merge_and_rescale_with_a_worker_killed() {
    let fx = fixture!(
        "no_record_is_lost_or_reordered_across_split_merge_and_rescale_with_a_worker_killed"
    );
    let begun = Instant::now();
    const KEYS: usize = 12;
    const ROUNDS: u64 = 60;
    let stream = fx.stream("lineage", 2).await;
    let leases_spec = fx.photo_table(Table::Leases).await;
    let sink = fx.photo_table(Table::Counters).await;
    let k = fx.stack.kinesis.clone();
    let log = Arc::new(Mutex::new(Vec::new()));
    let leases = |_: &str| LeaseTable::new(fx.stack.ddb.clone(), &leases_spec.name, "lineage-app");
    let workers: Vec<Running> = (0..3)
        .map(|i| {
            let name = format!("w{i}");
            start(
                KinesisSource::new(k.clone(), &stream.name),
                leases(&name),
                Collector {
                    worker: name.clone(),
                    log: Arc::clone(&log),
                    sink: Some((fx.stack.ddb.clone(), sink.name.clone())),
                    poison: None,
                },
                WorkerConfig {
                    page_records: 5,
                    ..fast_config(&name)
                },
            )
        })
        .collect();
    let mut workers = workers.into_iter();
    let victim = workers.next().unwrap();
    let survivors: Vec<Running> = workers.collect();
    let mut killed_at = None;
    for round in 0..ROUNDS {
        put_round(&k, &stream.name, round, KEYS).await;
        match round {
            10 => split_first(&k, &stream.name).await,
            20 => merge_first_two(&k, &stream.name).await,
            30 => rescale(&k, &stream.name, 4).await,
            45 => rescale(&k, &stream.name, 2).await,
            _ => {}
        }
        if killed_at.is_none() && round >= 25 && !victim.stats.held_shards().is_empty() {
            // Mid-shard: it holds leases and records keep arriving. No release, no checkpoint.
            victim.task.abort();
            killed_at = Some(round);
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let killed_at = killed_at.expect("the victim held a lease at some point after round 25");
    eventually("every record delivered", Duration::from_secs(30), || {
        let log = Arc::clone(&log);
        async move { complete(&log.lock().unwrap(), KEYS, ROUNDS).then_some(()) }
    })
    .await;
    let log = log.lock().unwrap().clone();
    let (lost, inversions) = audit(&log, KEYS, ROUNDS);
    assert_eq!((lost, inversions), (0, 0), "lost and reordered records");
    let duplicates = log.len() - KEYS * ROUNDS as usize;
    eprintln!(
        "delivered {} records ({duplicates} redelivered) across {} shards; victim killed at round {killed_at}",
        log.len(),
        log.iter()
            .map(|s| s.shard.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    let workers_used: std::collections::BTreeSet<&str> =
        log.iter().map(|s| s.worker.as_str()).collect();
    assert!(workers_used.len() >= 2, "work was shared: {workers_used:?}");

    // Every key's sink item holds its last value, written through the fence.
    for i in 0..KEYS {
        let item = fx
            .stack
            .ddb
            .get_item()
            .table_name(&sink.name)
            .key("pk", AttributeValue::S(format!("k{i:02}")))
            .key("sk", AttributeValue::S("last".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("get sink item");
        let v = item
            .item()
            .and_then(|m| m.get("v"))
            .and_then(|v| v.as_n().ok())
            .cloned();
        assert_eq!(v, Some((ROUNDS - 1).to_string()), "sink of k{i:02}");
    }

    // The killed worker is a zombie now: its last token is refused by the items it wrote and by
    // the lease table.
    let zombie = log
        .iter()
        .rev()
        .find(|s| s.worker == "w0")
        .cloned()
        .expect("the victim processed something before it died");
    let refused = sink_write(
        &fx.stack.ddb,
        &sink.name,
        &Fence::new(zombie.token),
        &zombie.key,
        0,
    )
    .await;
    assert!(
        matches!(refused, Err(StreamError::Fenced { .. })),
        "a zombie's fenced write must be refused, got {refused:?}"
    );
    let table = leases("check");
    if let Some(row) = table.get(&zombie.shard).await.expect("lease row") {
        let stale = heatsink::stream::Lease {
            owner: Some("w0".into()),
            counter: zombie.token,
            state: heatsink::stream::LeaseState::Processing,
            ..row
        };
        let refused = table
            .checkpoint(&stale, heatsink::counter::Seq::from_u64(u64::MAX))
            .await;
        assert!(
            refused.as_ref().is_err_and(StreamError::is_lease_lost),
            "a zombie's checkpoint must be refused, got {refused:?}"
        );
    }
    for w in survivors {
        let _ = w.stop.send(());
        w.task.await.expect("worker task").expect("worker ran");
    }
    // Graceful shutdown released every lease.
    let scan = leases("check").scan().await.expect("scan");
    assert!(
        scan.leases
            .iter()
            .all(|l| l.owner.is_none() || l.owner.as_deref() == Some("w0"))
    );
    eprintln!("took {:?}", begun.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_row_deleted_or_mangled_by_hand_is_recreated_from_the_shard_graph() {
    let fx = fixture!("a_lease_row_deleted_or_mangled_by_hand_is_recreated_from_the_shard_graph");
    let stream = fx.stream("repair", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "repair-app");
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        table.clone(),
        Collector {
            worker: "w0".into(),
            log: Arc::clone(&log),
            sink: None,
            poison: None,
        },
        fast_config("w0"),
    );
    let held = eventually(
        "the worker holds the shard",
        Duration::from_secs(10),
        || async {
            let scan = table.scan().await.ok()?;
            scan.leases
                .into_iter()
                .find(|l| l.owner.as_deref() == Some("w0"))
        },
    )
    .await;
    // Mangle the row: an unknown state and a checkpoint that is not a sequence number.
    fx.stack
        .ddb
        .put_item()
        .table_name(&spec.name)
        .item("app", AttributeValue::S("repair-app".into()))
        .item("shard_id", AttributeValue::S(held.shard_id.clone()))
        .item("state", AttributeValue::S("BOGUS".into()))
        .item("counter", AttributeValue::N(held.counter.to_string()))
        .item("checkpoint", AttributeValue::S("yesterday".into()))
        .send()
        .await
        .expect("mangle");
    let repaired = eventually(
        "the mangled row is recreated and retaken",
        Duration::from_secs(20),
        || async {
            let l = table.get(&held.shard_id).await.ok()??;
            (l.owner.is_some() && l.counter > held.counter).then_some(l)
        },
    )
    .await;
    // Delete it outright.
    fx.stack
        .ddb
        .delete_item()
        .table_name(&spec.name)
        .key("app", AttributeValue::S("repair-app".into()))
        .key("shard_id", AttributeValue::S(held.shard_id.clone()))
        .send()
        .await
        .expect("delete");
    eventually(
        "the deleted row is recreated and retaken",
        Duration::from_secs(20),
        || async {
            let l = table.get(&held.shard_id).await.ok()??;
            (l.owner.is_some() && l.counter > repaired.counter).then_some(())
        },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

fn collector(worker: &str, log: &Arc<Mutex<Vec<Seen>>>) -> Collector {
    Collector {
        worker: worker.into(),
        log: Arc::clone(log),
        sink: None,
        poison: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_stalls_only_its_shard_and_is_delivered_once_the_outage_ends() {
    let fx =
        fixture!("a_failing_batch_stalls_only_its_shard_and_is_delivered_once_the_outage_ends");
    let stream = fx.stream("outage", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let outage = Arc::new(AtomicBool::new(true));
    let mut config = fast_config("w0");
    config.max_records = Some(1); // one record per batch: the poison one is its own batch
    let w = start(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "outage-app"),
        Collector {
            poison: Some(("k00".into(), Arc::clone(&outage))),
            ..collector("w0", &log)
        },
        config,
    );
    for round in 0..3 {
        put_round(&fx.stack.kinesis, &stream.name, round, 6).await;
    }
    let stuck = eventually(
        "the poison shard reported stalled",
        Duration::from_secs(25),
        || async {
            let stalled = w.stats.stalled_shards();
            (stalled.len() == 1).then(|| stalled[0].clone())
        },
    )
    .await;
    // The other shard went on: all its records are in.
    eventually(
        "the healthy shard delivered",
        Duration::from_secs(10),
        || {
            let log = Arc::clone(&log);
            let stuck = stuck.clone();
            async move {
                let log = log.lock().unwrap();
                let other = log.iter().filter(|s| s.shard != stuck).count();
                (other > 0 && log.iter().all(|s| s.key != "k00")).then_some(())
            }
        },
    )
    .await;
    assert!(w.stats.failed_batches() >= 3, "retried, not skipped");
    // The outage ends: everything arrives, k00 included, nothing skipped, in order.
    outage.store(false, Ordering::SeqCst);
    eventually("every record delivered", Duration::from_secs(25), || {
        let log = Arc::clone(&log);
        async move { complete(&log.lock().unwrap(), 6, 3).then_some(()) }
    })
    .await;
    assert_eq!(audit(&log.lock().unwrap(), 6, 3), (0, 0), "lost, reordered");
    assert!(w.stats.stalled_shards().is_empty(), "no longer stalled");
    assert_eq!(w.stats.dead_lettered(), 0);
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_is_opt_in_and_a_dead_letter_queue_gets_the_batch_before_the_checkpoint_moves() {
    let fx = fixture!(
        "skipping_is_opt_in_and_a_dead_letter_queue_gets_the_batch_before_the_checkpoint_moves"
    );
    let stream = fx.stream("dlq", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    let sqs = aws_sdk_sqs::Client::new(&fx.stack.config);
    let queue = sqs
        .create_queue()
        .queue_name(format!("{}dlq", spec.name))
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("a queue URL")
        .to_owned();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut config = fast_config("w0");
    config.max_records = Some(1);
    let worker = Worker::new(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "dlq-app"),
        Collector {
            poison: Some(("k00".into(), Arc::new(AtomicBool::new(true)))),
            ..collector("w0", &log)
        },
        config,
    )
    .dead_letter(SqsDeadLetter::new(sqs.clone(), &queue, &stream.name));
    let stats = worker.stats();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = rx.await;
    }));
    for round in 0..3 {
        put_round(&fx.stack.kinesis, &stream.name, round, 6).await;
    }
    eventually(
        "every healthy record delivered",
        Duration::from_secs(20),
        || {
            let log = Arc::clone(&log);
            async move { (log.lock().unwrap().len() == 5 * 3).then_some(()) }
        },
    )
    .await;
    eventually(
        "three batches dead-lettered",
        Duration::from_secs(10),
        || async { (stats.dead_lettered() == 3).then_some(()) },
    )
    .await;
    let mut got: Vec<String> = Vec::new();
    for _ in 0..10 {
        let out = sqs
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        for m in out.messages() {
            let doc: serde_json::Value = serde_json::from_str(m.body().unwrap_or("")).unwrap();
            assert_eq!(doc["stream"], stream.name.as_str());
            assert_eq!(doc["data_encoding"], "utf8");
            assert!(doc["error"].as_str().unwrap().contains("poison"));
            got.push(doc["data"].as_str().unwrap().to_owned());
        }
        if got.len() >= 3 {
            break;
        }
    }
    got.sort();
    assert_eq!(
        got,
        ["k00:0", "k00:1", "k00:2"],
        "the skipped records are in the queue"
    );
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");
}

/// Fails every batch with [`StreamError::Abort`]: its output is gone (a closed stdout).
struct Undeliverable(Arc<AtomicUsize>);

impl RecordProcessor for Undeliverable {
    async fn process(&self, _: &ProcessBatch) -> Result<(), StreamError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(StreamError::Abort(Box::new(std::io::Error::from(
            std::io::ErrorKind::BrokenPipe,
        ))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processor_that_cannot_deliver_stops_the_worker_and_a_rerun_delivers_everything() {
    let fx = fixture!(
        "a_processor_that_cannot_deliver_stops_the_worker_and_a_rerun_delivers_everything"
    );
    let stream = fx.stream("epipe", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "epipe-app");
    put_round(&fx.stack.kinesis, &stream.name, 0, 5).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let worker = Worker::new(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        table(),
        Undeliverable(Arc::clone(&calls)),
        fast_config("w0"),
    );
    let ran = tokio::time::timeout(Duration::from_secs(20), worker.run(std::future::pending()))
        .await
        .expect("the worker stops by itself");
    assert!(matches!(ran, Err(StreamError::Abort(_))), "{ran:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no retry of an undeliverable batch"
    );
    let scan = table().scan().await.expect("scan");
    assert!(
        scan.leases
            .iter()
            .all(|l| l.owner.is_none() && l.checkpoint.is_unstarted()),
        "released, nothing checkpointed: {:?}",
        scan.leases
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        table(),
        collector("w1", &log),
        fast_config("w1"),
    );
    eventually(
        "a re-run delivers all five",
        Duration::from_secs(25),
        || {
            let log = Arc::clone(&log);
            async move { complete(&log.lock().unwrap(), 5, 1).then_some(()) }
        },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

/// Processes normally until `hang` is set, then never returns (a downstream call that hangs).
struct Hanging {
    inner: Collector,
    hang: Arc<AtomicBool>,
    entered: Arc<AtomicBool>,
}

impl RecordProcessor for Hanging {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        if self.hang.load(Ordering::SeqCst) {
            self.entered.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.inner.process(batch).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_shutdown_never_moves_a_checkpoint_backwards() {
    let fx = fixture!("a_slow_shutdown_never_moves_a_checkpoint_backwards");
    let stream = fx.stream("slowstop", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "slowstop-app");
    let log = Arc::new(Mutex::new(Vec::new()));
    let hang = Arc::new(AtomicBool::new(false));
    let entered = Arc::new(AtomicBool::new(false));
    let w = start(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        table.clone(),
        Hanging {
            inner: collector("w0", &log),
            hang: Arc::clone(&hang),
            entered: Arc::clone(&entered),
        },
        fast_config("w0"),
    );
    put_round(&fx.stack.kinesis, &stream.name, 0, 5).await;
    let done = eventually(
        "the first records checkpointed",
        Duration::from_secs(25),
        || async {
            let scan = table.scan().await.ok()?;
            let lease = scan.leases.into_iter().next()?;
            lease.checkpoint.position().cloned()
        },
    )
    .await;
    hang.store(true, Ordering::SeqCst);
    put_round(&fx.stack.kinesis, &stream.name, 1, 5).await;
    eventually("the processor hangs", Duration::from_secs(10), || async {
        entered.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    let lease = table.scan().await.expect("scan").leases.remove(0);
    let after = lease.checkpoint.position().cloned();
    assert!(
        after.as_ref().is_some_and(|p| *p >= done),
        "checkpoint moved back from {done} to {:?}",
        lease.checkpoint
    );
    assert!(lease.owner.is_none(), "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_with_one_app_never_share_checkpoints_nor_does_a_recreated_stream() {
    let fx =
        fixture!("two_streams_with_one_app_never_share_checkpoints_nor_does_a_recreated_stream");
    let first = fx.stream("first", 1).await;
    let second = fx.stream("second", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "shared-app");
    let k = &fx.stack.kinesis;
    put_round(k, &first.name, 0, 3).await;
    put_round(k, &second.name, 0, 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(k.clone(), &first.name),
        table(),
        collector("w0", &log),
        fast_config("w0"),
    );
    eventually("the first stream read", Duration::from_secs(25), || async {
        let scan = table().scan().await.ok()?;
        scan.leases
            .iter()
            .any(|l| l.checkpoint.position().is_some())
            .then_some(())
    })
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    // Same app, same shard id, another stream: refused, loudly, and nothing read from it.
    let other = Worker::new(
        KinesisSource::new(k.clone(), &second.name),
        table(),
        collector("w1", &log),
        fast_config("w1"),
    );
    let before = log.lock().unwrap().len();
    let refused = other.run(std::future::pending()).await;
    assert!(
        matches!(&refused, Err(StreamError::ForeignLease { app, .. }) if app == "shared-app"),
        "{refused:?}"
    );
    assert_eq!(log.lock().unwrap().len(), before);
    // The first stream deleted and recreated under its name: a new stream, refused too.
    k.delete_stream()
        .stream_name(&first.name)
        .send()
        .await
        .expect("delete");
    eventually("the stream is deleted", Duration::from_secs(20), || async {
        k.describe_stream_summary()
            .stream_name(&first.name)
            .send()
            .await
            .is_err()
            .then_some(())
    })
    .await;
    k.create_stream()
        .stream_name(&first.name)
        .shard_count(1)
        .send()
        .await
        .expect("recreate");
    wait_active(k, &first.name).await;
    let again = Worker::new(
        KinesisSource::new(k.clone(), &first.name),
        table(),
        collector("w2", &log),
        fast_config("w2"),
    );
    let refused = again.run(std::future::pending()).await;
    assert!(
        matches!(&refused, Err(StreamError::ForeignLease { .. })),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_latest_after_a_split_emits_nothing_put_before_the_start() {
    let fx = fixture!("from_latest_after_a_split_emits_nothing_put_before_the_start");
    let stream = fx.stream("latest", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let k = &fx.stack.kinesis;
    put_round(k, &stream.name, 0, 8).await;
    split_first(k, &stream.name).await;
    put_round(k, &stream.name, 1, 8).await; // on the children, before the start
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut config = fast_config("w0");
    config.initial_position = heatsink::stream::InitialPosition::Latest;
    let w = start(
        KinesisSource::new(k.clone(), &stream.name),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "latest-app"),
        collector("w0", &log),
        config,
    );
    eventually(
        "both children read at their tip",
        Duration::from_secs(25),
        || async { (w.stats.held_shards().len() == 2 && w.stats.is_caught_up()).then_some(()) },
    )
    .await;
    put_round(k, &stream.name, 2, 8).await;
    eventually("the new round delivered", Duration::from_secs(25), || {
        let log = Arc::clone(&log);
        async move { (log.lock().unwrap().iter().filter(|s| s.value == 2).count() == 8).then_some(()) }
    })
    .await;
    let old: Vec<(String, u64)> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.value < 2)
        .map(|s| (s.key.clone(), s.value))
        .collect();
    assert!(
        old.is_empty(),
        "records put before the start were emitted: {old:?}"
    );
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

/// A Kinesis source whose `parent` shard can be made to vanish as retention would: listed and
/// unreadable (its reads fail) until `gone` is set, then absent from ListShards and not found.
struct Retention {
    inner: KinesisSource,
    parent: Arc<Mutex<String>>,
    gone: Arc<AtomicBool>,
}

impl ShardSource for Retention {
    fn stream(&self) -> &str {
        self.inner.stream()
    }
    async fn identity(&self) -> Result<String, StreamError> {
        self.inner.identity().await
    }
    fn max_records(&self) -> i32 {
        self.inner.max_records()
    }
    fn discardable_reads(&self) -> bool {
        self.inner.discardable_reads()
    }
    fn with_timeouts(self, t: heatsink::stream::Timeouts) -> Self {
        Self {
            inner: self.inner.with_timeouts(t),
            ..self
        }
    }
    async fn list_shards(&self) -> Result<Vec<heatsink::stream::ShardInfo>, StreamError> {
        let mut shards = self.inner.list_shards().await?;
        if self.gone.load(Ordering::SeqCst) {
            let parent = self.parent.lock().unwrap().clone();
            shards.retain(|s| s.shard_id != parent);
        }
        Ok(shards)
    }
    async fn get_iterator(
        &self,
        shard_id: &str,
        start: &heatsink::stream::StartAt,
    ) -> Result<String, StreamError> {
        if *self.parent.lock().unwrap() == shard_id {
            if self.gone.load(Ordering::SeqCst) {
                return Err(StreamError::NotFound {
                    resource: shard_id.to_owned(),
                    source: None,
                });
            }
            return Err(StreamError::Processor("injected: parent unreadable".into()));
        }
        self.inner.get_iterator(shard_id, start).await
    }
    async fn get_records(
        &self,
        iterator: &str,
        limit: i32,
    ) -> Result<heatsink::stream::RecordBatch, StreamError> {
        self.inner.get_records(iterator, limit).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_retention_a_parent_dropped_from_list_shards_unblocks_its_children_without_restart() {
    let fx = fixture!(
        "sim_retention_a_parent_dropped_from_list_shards_unblocks_its_children_without_restart"
    );
    let stream = fx.stream("retention", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let k = &fx.stack.kinesis;
    let parent = open_shards(k, &stream.name).await[0].0.clone();
    put_round(k, &stream.name, 0, 6).await;
    split_first(k, &stream.name).await;
    put_round(k, &stream.name, 1, 6).await;
    let gone = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        Retention {
            inner: KinesisSource::new(k.clone(), &stream.name),
            parent: Arc::new(Mutex::new(parent)),
            gone: Arc::clone(&gone),
        },
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "retention-app"),
        collector("w0", &log),
        fast_config("w0"),
    );
    // The parent is listed and unfinished: its children wait (per-key order).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        log.lock().unwrap().is_empty(),
        "children read before their parent"
    );
    // Past retention: ListShards drops the parent and its reads find nothing.
    gone.store(true, Ordering::SeqCst);
    eventually(
        "the children's records delivered",
        Duration::from_secs(25),
        || {
            let log = Arc::clone(&log);
            async move {
                (log.lock().unwrap().iter().filter(|s| s.value == 1).count() == 6).then_some(())
            }
        },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

/// A Kinesis source whose ListShards hangs forever once `hang` is set.
struct HungListing {
    inner: KinesisSource,
    hang: Arc<AtomicBool>,
}

impl ShardSource for HungListing {
    fn stream(&self) -> &str {
        self.inner.stream()
    }
    async fn identity(&self) -> Result<String, StreamError> {
        self.inner.identity().await
    }
    fn max_records(&self) -> i32 {
        self.inner.max_records()
    }
    fn discardable_reads(&self) -> bool {
        self.inner.discardable_reads()
    }
    fn with_timeouts(self, t: heatsink::stream::Timeouts) -> Self {
        Self {
            inner: self.inner.with_timeouts(t),
            ..self
        }
    }
    async fn list_shards(&self) -> Result<Vec<heatsink::stream::ShardInfo>, StreamError> {
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.list_shards().await
    }
    async fn get_iterator(
        &self,
        shard_id: &str,
        start: &heatsink::stream::StartAt,
    ) -> Result<String, StreamError> {
        self.inner.get_iterator(shard_id, start).await
    }
    async fn get_records(
        &self,
        iterator: &str,
        limit: i32,
    ) -> Result<heatsink::stream::RecordBatch, StreamError> {
        self.inner.get_records(iterator, limit).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_list_shards_neither_lets_a_live_workers_leases_lapse_nor_makes_a_zombie() {
    let fx =
        fixture!("a_hung_list_shards_neither_lets_a_live_workers_leases_lapse_nor_makes_a_zombie");
    let stream = fx.stream("hung", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    let k = &fx.stack.kinesis;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "hung-app");
    let hang = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    // A longer lease than the other tests': renewals on the shared emulator must not lapse it.
    let config = |name: &str| WorkerConfig {
        lease_duration: Duration::from_secs(4),
        ..fast_config(name)
    };
    let a = start(
        HungListing {
            inner: KinesisSource::new(k.clone(), &stream.name),
            hang: Arc::clone(&hang),
        },
        table(),
        collector("a", &log),
        config("a"),
    );
    eventually("a holds both shards", Duration::from_secs(25), || async {
        (a.stats.held_shards().len() == 2).then_some(())
    })
    .await;
    hang.store(true, Ordering::SeqCst); // a's main loop hangs at its next shard sync
    let b = start(
        KinesisSource::new(k.clone(), &stream.name),
        table(),
        collector("b", &log),
        config("b"),
    );
    // Two lease durations: without its main loop, a still renews, so b never takes over.
    for round in 0..16 {
        put_round(k, &stream.name, round, 6).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            b.stats.held_shards().len() <= 1,
            "b took both of a's live leases"
        );
    }
    eventually("every record delivered", Duration::from_secs(20), || {
        let log = Arc::clone(&log);
        async move { complete(&log.lock().unwrap(), 6, 16).then_some(()) }
    })
    .await;
    // Rebalancing may move one lease to b (a steal, not an expiry); a record is never
    // delivered by two workers at once under one lease.
    let log = log.lock().unwrap().clone();
    for s in &log {
        let other = log
            .iter()
            .find(|o| o.key == s.key && o.value == s.value && o.worker != s.worker);
        assert!(
            other.is_none_or(|o| o.token != s.token),
            "{s:?} and {other:?} under one token"
        );
    }
    assert!(
        log.iter().filter(|s| s.worker == "b").count() < log.len(),
        "a kept processing while its main loop hung"
    );
    let _ = b.stop.send(());
    b.task.await.expect("worker task").expect("worker ran");
    a.task.abort();
}

/// Worker a reaches its lease table through a network cut (the table is moto's, only the path
/// is cut); its stream reads and its processor's own writes go direct. Cut it: a can no longer
/// renew, so each of its shard tasks must stop processing within nine tenths of a lease of its
/// last renewal, which is before the lease expires for anyone else. b (which never steals) takes
/// the shards once they expire; after the path is restored every record is delivered and no
/// checkpoint points past a record that was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cut_off_from_dynamodb_stops_writing_before_its_lease_expires_and_nothing_is_lost() {
    let fx = fixture!(
        "a_task_cut_off_from_dynamodb_stops_writing_before_its_lease_expires_and_nothing_is_lost"
    );
    const KEYS: usize = 6;
    const ROUNDS: u64 = 40;
    let lease = Duration::from_secs(4);
    let stream = fx.stream("cut", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    let sink = fx.photo_table(Table::Counters).await;
    let k = fx.stack.kinesis.clone();
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("a DynamoDB endpoint");
    let cut = heatsink_testkit::cut::Cut::start(&upstream)
        .await
        .expect("proxy");
    let behind_cut = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let collector = |name: &str| Collector {
        sink: Some((fx.stack.ddb.clone(), sink.name.clone())),
        ..collector(name, &log)
    };
    let config = |name: &str| WorkerConfig {
        lease_duration: lease,
        ..fast_config(name)
    };
    let a = start(
        KinesisSource::new(k.clone(), &stream.name),
        LeaseTable::new(behind_cut, &spec.name, "cut-app"),
        collector("a"),
        config("a"),
    );
    eventually("a holds both shards", Duration::from_secs(25), || async {
        (a.stats.held_shards().len() == 2).then_some(())
    })
    .await;
    let producer = {
        let k = k.clone();
        let name = stream.name.clone();
        tokio::spawn(async move {
            for round in 0..ROUNDS {
                put_round(&k, &name, round, KEYS).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    eventually("a delivers", Duration::from_secs(15), || {
        let log = Arc::clone(&log);
        async move { (log.lock().unwrap().len() >= 2 * KEYS).then_some(()) }
    })
    .await;
    cut.cut();
    let cut_at = Instant::now();
    let b = start(
        KinesisSource::new(k.clone(), &stream.name),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "cut-app"),
        collector("b"),
        WorkerConfig {
            max_steals_per_round: 0, // b takes only expired leases
            ..config("b")
        },
    );
    eventually(
        "b takes both shards once a's leases expire",
        Duration::from_secs(20),
        || async { (b.stats.held_shards().len() == 2).then_some(()) },
    )
    .await;
    // Let b deliver with the path still cut, then heal it.
    eventually("b delivers", Duration::from_secs(20), || {
        let log = Arc::clone(&log);
        async move {
            log.lock()
                .unwrap()
                .iter()
                .any(|s| s.worker == "b")
                .then_some(())
        }
    })
    .await;
    let during: Vec<Seen> = log.lock().unwrap().clone();
    cut.restore();
    // a's last processor call began before its last renewal's send time plus 0.9 × lease, and
    // that send time is before the cut; 300 ms covers the scheduling of the check itself.
    let bound = lease.mul_f64(0.9) + Duration::from_millis(300);
    let last_a = during
        .iter()
        .filter(|s| s.worker == "a")
        .map(|s| s.at)
        .max()
        .expect("a delivered before the cut");
    assert!(
        last_a <= cut_at + bound,
        "a kept processing {:?} after DynamoDB was cut (bound {bound:?})",
        last_a.saturating_duration_since(cut_at)
    );
    eprintln!(
        "a's last processor call began {:?} after the cut",
        last_a.saturating_duration_since(cut_at)
    );
    // Never two holders at once: on each shard all of a's calls precede b's first.
    for shard in during
        .iter()
        .map(|s| s.shard.clone())
        .collect::<BTreeSet<_>>()
    {
        let first_b = during
            .iter()
            .filter(|s| s.worker == "b" && s.shard == shard)
            .map(|s| s.at)
            .min();
        let last_a = during
            .iter()
            .filter(|s| s.worker == "a" && s.shard == shard)
            .map(|s| s.at)
            .max();
        if let (Some(first_b), Some(last_a)) = (first_b, last_a) {
            assert!(last_a < first_b, "{shard}: a still processing when b began");
        }
    }
    assert!(
        during.iter().any(|s| s.worker == "b"),
        "b delivered nothing: the takeover was not exercised"
    );
    producer.await.expect("producer");
    eventually("every record delivered", Duration::from_secs(30), || {
        let log = Arc::clone(&log);
        async move { complete(&log.lock().unwrap(), KEYS, ROUNDS).then_some(()) }
    })
    .await;
    let _ = b.stop.send(());
    let _ = a.stop.send(());
    b.task.await.expect("worker task").expect("b ran");
    a.task.await.expect("worker task").expect("a ran");
    // No checkpoint past what was delivered.
    let log = log.lock().unwrap().clone();
    let leases = LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "cut-app")
        .scan()
        .await
        .expect("scan");
    for row in &leases.leases {
        let delivered = log
            .iter()
            .filter(|s| s.shard == row.shard_id)
            .map(|s| s.position.clone())
            .max();
        if let Some(at) = row.checkpoint.position() {
            assert!(
                delivered.as_ref().is_some_and(|d| at <= d),
                "{}: checkpoint {at} past the last delivered record {delivered:?}",
                row.shard_id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dynamodb_streams_source_delivers_a_tables_changes_in_order() {
    if std::env::var("HEATSINK_LANE").as_deref() != Ok("moto") {
        eprintln!(
            "skip: the_dynamodb_streams_source_delivers_a_tables_changes_in_order: moto lane only"
        );
        return;
    }
    let fx: Fixture = fixture!("the_dynamodb_streams_source_delivers_a_tables_changes_in_order");
    let liked = fx.photo_table(Table::Liked).await;
    let spec = fx.photo_table(Table::Leases).await;
    let arn = fx
        .stack
        .ddb
        .describe_table()
        .table_name(&liked.name)
        .send()
        .await
        .expect("describe")
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("a stream ARN")
        .to_owned();
    for i in 0..10 {
        fx.stack
            .ddb
            .put_item()
            .table_name(&liked.name)
            .item("user", AttributeValue::S("u1".into()))
            .item("post", AttributeValue::S(format!("p{i:02}")))
            .send()
            .await
            .expect("put");
    }
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::new(Mutex::new(Vec::new()));
    struct Changes(Arc<Mutex<Vec<(String, String)>>>);
    impl RecordProcessor for Changes {
        async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
            let mut seen = self.0.lock().unwrap();
            for r in &batch.records {
                let data: serde_json::Value = serde_json::from_slice(&r.data).unwrap();
                let post = data["newImage"]["post"]["S"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                seen.push((r.seq.to_string(), post));
            }
            Ok(())
        }
    }
    let worker = Worker::new(
        DynamoDbStreamsSource::new(fx.stack.streams.clone(), &arn),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "ddb-app"),
        Changes(Arc::clone(&seen)),
        fast_config("w0"),
    );
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = rx.await;
    }));
    eventually("ten changes", Duration::from_secs(25), || {
        let seen = Arc::clone(&seen);
        async move { (seen.lock().unwrap().len() >= 10).then_some(()) }
    })
    .await;
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");
    let seen = seen.lock().unwrap().clone();
    let posts: Vec<String> = seen.iter().map(|(_, p)| p.clone()).collect();
    let want: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    assert_eq!(posts, want, "changes in write order");
}

/// One delivery: (seq, sub_seq, data).
type SubSeen = (String, Option<u64>, String);

/// Every delivery in order.
struct SubLog(Arc<Mutex<Vec<SubSeen>>>);

impl RecordProcessor for SubLog {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut log = self.0.lock().unwrap();
        for r in &batch.records {
            log.push((
                r.seq.to_string(),
                r.sub_seq,
                match &r.undecodable {
                    // Marked, so a test sees the reason reached the processor.
                    Some(_) => format!("undecodable:{}", String::from_utf8_lossy(&r.data)),
                    None => String::from_utf8_lossy(&r.data).into_owned(),
                },
            ));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kpl_aggregate_is_deaggregated_and_a_restart_inside_it_neither_skips_nor_repeats() {
    let fx = fixture!(
        "a_kpl_aggregate_is_deaggregated_and_a_restart_inside_it_neither_skips_nor_repeats"
    );
    let stream = fx.stream("kpl", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "kpl-app");
    let k = &fx.stack.kinesis;
    let mut agg = heatsink::kinesis::kpl::Aggregator::new();
    for i in 0..5 {
        assert!(
            agg.try_add(&format!("u{i}"), None, format!("like {i}").as_bytes())
                .unwrap()
        );
    }
    let aggregate = agg.finish().expect("five user records");
    k.put_record()
        .stream_name(&stream.name)
        .partition_key(&aggregate.partition_key)
        .data(Blob::new(aggregate.data))
        .send()
        .await
        .expect("put the aggregate");
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(k.clone(), &stream.name),
        table(),
        SubLog(Arc::clone(&log)),
        fast_config("w0"),
    );
    let lease = eventually(
        "the aggregate checkpointed",
        Duration::from_secs(25),
        || async {
            let l = table().scan().await.ok()?.leases.into_iter().next()?;
            (l.checkpoint.position()?.sub_seq == Some(4)).then_some(l)
        },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    let first: Vec<(Option<u64>, String)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s, d)| (*s, d.clone()))
        .collect();
    let want: Vec<(Option<u64>, String)> = (0..5).map(|i| (Some(i), format!("like {i}"))).collect();
    assert_eq!(
        first, want,
        "one delivery per user record, with its sub-sequence"
    );

    // As if a worker died after sub-record 2: the checkpoint sits inside the aggregate.
    let seq = lease.checkpoint.position().unwrap().seq.clone();
    let inside = heatsink::stream::Position::sub_record(seq.clone(), 2);
    fx.stack
        .ddb
        .update_item()
        .table_name(&spec.name)
        .key("app", AttributeValue::S("kpl-app".into()))
        .key("shard_id", AttributeValue::S(lease.shard_id.clone()))
        .update_expression("SET #c = :c")
        .expression_attribute_names("#c", "checkpoint")
        .expression_attribute_values(":c", AttributeValue::S(inside.to_checkpoint()))
        .send()
        .await
        .expect("move the checkpoint inside the aggregate");
    put_round(k, &stream.name, 0, 1).await; // and one plain record after it
    log.lock().unwrap().clear();
    let w = start(
        KinesisSource::new(k.clone(), &stream.name),
        table(),
        SubLog(Arc::clone(&log)),
        fast_config("w1"),
    );
    eventually(
        "the rest of the aggregate and the plain record",
        Duration::from_secs(25),
        || {
            let log = Arc::clone(&log);
            async move { (log.lock().unwrap().len() >= 3).then_some(()) }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    let rest: Vec<(Option<u64>, String)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s, d)| (*s, d.clone()))
        .collect();
    assert_eq!(
        rest,
        [
            (Some(3), "like 3".to_owned()),
            (Some(4), "like 4".to_owned()),
            (None, "k00:0".to_owned())
        ],
        "resumed after sub-record 2: nothing skipped, nothing repeated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_kpl_aggregate_is_delivered_whole_with_its_reason_and_does_not_block_the_shard() {
    let fx = fixture!(
        "a_corrupt_kpl_aggregate_is_delivered_whole_with_its_reason_and_does_not_block_the_shard"
    );
    let stream = fx.stream("kplbad", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "kplbad-app");
    let k = &fx.stack.kinesis;
    let mut agg = heatsink::kinesis::kpl::Aggregator::new();
    for i in 0..3 {
        assert!(
            agg.try_add(&format!("u{i}"), None, format!("like {i}").as_bytes())
                .unwrap()
        );
    }
    let aggregate = agg.finish().expect("three user records");
    // Flip one bit of the trailing MD5: the magic is intact, the digest no longer matches.
    let mut corrupt = aggregate.data.to_vec();
    *corrupt.last_mut().expect("non-empty aggregate") ^= 0x01;
    k.put_record()
        .stream_name(&stream.name)
        .partition_key(&aggregate.partition_key)
        .data(Blob::new(corrupt.clone()))
        .send()
        .await
        .expect("put the corrupt aggregate");
    let after = k
        .put_record()
        .stream_name(&stream.name)
        .partition_key("k00")
        .data(Blob::new("after"))
        .send()
        .await
        .expect("put a plain record after it");
    let log = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(k.clone(), &stream.name),
        table(),
        SubLog(Arc::clone(&log)),
        fast_config("w0"),
    );
    let lease = eventually(
        "the record after the corrupt aggregate checkpointed",
        Duration::from_secs(25),
        || async {
            let l = table().scan().await.ok()?.leases.into_iter().next()?;
            (l.checkpoint.position()?.seq.to_decimal() == after.sequence_number()).then_some(l)
        },
    )
    .await;
    let stats = w.stats.clone();
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    let seen: Vec<(Option<u64>, String)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s, d)| (*s, d.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                None,
                format!("undecodable:{}", String::from_utf8_lossy(&corrupt))
            ),
            (None, "after".to_owned())
        ],
        "the corrupt aggregate whole, then the next record: nothing blocked, nothing skipped"
    );
    assert_eq!(stats.undecodable_aggregates(), 1, "counted once");
    assert_eq!(lease.checkpoint.position().unwrap().sub_seq, None);
}

/// The record of issue 32 (1,020,024 bytes: a valid MD5, one 300 KB partition key, 120,000
/// empty user records) and a plain record after it, through `Worker` on kinesis-mock: the
/// processor gets the aggregate whole with its reason, then the plain record, and the
/// checkpoint moves past both. Before the decoder's bounds the worker copied the key into each
/// user record (36 GB) and died; the shard's checkpoint never moved, so every restart died again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issue_32_aggregate_reaches_the_processor_whole_with_its_reason_and_the_shard_reads_on()
{
    let fx = fixture!(
        "the_issue_32_aggregate_reaches_the_processor_whole_with_its_reason_and_the_shard_reads_on"
    );
    let stream = fx.stream("kplhostile", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "hostile-app");
    let k = &fx.stack.kinesis;
    let hostile = crate::hostile::issue_32_aggregate();
    k.put_record()
        .stream_name(&stream.name)
        .partition_key("hostile")
        .data(Blob::new(hostile.clone()))
        .send()
        .await
        .expect("put the hostile aggregate");
    let after = k
        .put_record()
        .stream_name(&stream.name)
        .partition_key("k00")
        .data(Blob::new("after"))
        .send()
        .await
        .expect("put a plain record after it");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let w = start(
        KinesisSource::new(k.clone(), &stream.name),
        table(),
        Reasons(Arc::clone(&seen)),
        fast_config("w0"),
    );
    let lease = eventually(
        "the record after the hostile aggregate checkpointed",
        Duration::from_secs(30),
        || async {
            let l = table().scan().await.ok()?.leases.into_iter().next()?;
            (l.checkpoint.position()?.seq.to_decimal() == after.sequence_number()).then_some(l)
        },
    )
    .await;
    let stats = w.stats.clone();
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2,
        "the aggregate whole, then the plain record: {seen:?}"
    );
    assert_eq!(seen[0].0, (None, hostile.len()));
    let reason = seen[0].1.as_deref().expect("delivered with its reason");
    assert!(
        reason.contains("300000 bytes, over Kinesis's 256-character limit"),
        "{reason}"
    );
    assert_eq!(seen[1], ((None, 5), None));
    assert_eq!(stats.undecodable_aggregates(), 1);
    assert_eq!(lease.checkpoint.position().unwrap().sub_seq, None);
}

/// Records the processor saw: (sub-sequence, data length) and the reason of an undecodable one.
type Reason = ((Option<u64>, usize), Option<String>);

struct Reasons(Arc<Mutex<Vec<Reason>>>);

impl RecordProcessor for Reasons {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut seen = self.0.lock().unwrap();
        for r in &batch.records {
            let reason = r.undecodable.as_ref().map(ToString::to_string);
            seen.push(((r.sub_seq, r.data.len()), reason));
        }
        Ok(())
    }
}

/// A Kinesis client answering from aws-smithy-mocks rules (kinesis-mock never throttles), with
/// the SDK's own retries off so every GetRecords the worker makes is one counted call.
/// The calls a worker makes before reading, mocked for a one-shard stream named `stream`
/// whose shard is `shard` (shapes from the Kinesis API reference): DescribeStreamSummary,
/// ListShards, and GetShardIterator answering `it-0`.
fn one_shard_rules(stream: &str, shard: &str) -> [aws_smithy_mocks::Rule; 3] {
    use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput;
    use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorOutput;
    use aws_sdk_kinesis::primitives::DateTime;
    use aws_sdk_kinesis::types::StreamDescriptionSummary;
    use aws_smithy_mocks::mock;

    let (name, id) = (stream.to_owned(), shard.to_owned());
    let summary = mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(move || {
        DescribeStreamSummaryOutput::builder()
            .stream_description_summary(
                StreamDescriptionSummary::builder()
                    .stream_name(&name)
                    .stream_arn(format!(
                        "arn:aws:kinesis:us-east-1:000000000000:stream/{name}"
                    ))
                    .stream_status(StreamStatus::Active)
                    .retention_period_hours(24)
                    .stream_creation_timestamp(DateTime::from_secs(1_700_000_000))
                    .set_enhanced_monitoring(Some(Vec::new()))
                    .open_shard_count(1)
                    .build()
                    .expect("summary"),
            )
            .build()
    });
    let list = mock!(aws_sdk_kinesis::Client::list_shards)
        .then_output(move || heatsink::testing::one_shard(&id, "100").expect("listing"));
    let iterator = mock!(aws_sdk_kinesis::Client::get_shard_iterator).then_output(|| {
        GetShardIteratorOutput::builder()
            .shard_iterator("it-0")
            .build()
    });
    [summary, list, iterator]
}

/// A mocked GetRecords answer holding `count` values of key k0 from `first` (value v at
/// sequence number 100 + v), continuing at `next`, `behind_ms` behind the tip.
fn k0_page(
    first: u64,
    count: u64,
    next: impl Into<String>,
    behind_ms: i64,
) -> aws_sdk_kinesis::operation::get_records::GetRecordsOutput {
    use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;
    use aws_sdk_kinesis::types::Record;

    let records = (first..first + count).map(|v| {
        Record::builder()
            .sequence_number((100 + v).to_string())
            .partition_key("k0")
            .data(Blob::new(format!("k0:{v}")))
            .build()
            .expect("record")
    });
    GetRecordsOutput::builder()
        .set_records(Some(records.collect()))
        .next_shard_iterator(next)
        .millis_behind_latest(behind_ms)
        .build()
        .expect("page")
}

macro_rules! mocked_kinesis {
    ($($rule:expr),* $(,)?) => {
        aws_smithy_mocks::mock_client!(
            aws_sdk_kinesis,
            aws_smithy_mocks::RuleMode::MatchAny,
            [$(&$rule),*],
            |c| c.retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
        )
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smithy_mock_throttled_get_records_lose_and_skip_nothing_and_the_worker_backs_off() {
    use aws_sdk_kinesis::error::ErrorMetadata;
    use aws_sdk_kinesis::operation::get_records::GetRecordsError;
    use aws_sdk_kinesis::types::error::{
        KmsThrottlingException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::mock;

    let fx = fixture!(
        "smithy_mock_throttled_get_records_lose_and_skip_nothing_and_the_worker_backs_off"
    );
    let spec = fx.photo_table(Table::Leases).await;
    const SHARD: &str = "shardId-000000000000";
    let [summary, list, iterator] = one_shard_rules("t-throttled", SHARD);
    let page = |from: u64, to: u64, next: &'static str| {
        move || {
            let count = (to + 1).saturating_sub(from);
            k0_page(from, count, next, if next == "it-2" { 0 } else { 1_000 })
        }
    };
    let throughput = || {
        GetRecordsError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("ProvisionedThroughputExceededException")
                        .build(),
                )
                .build(),
        )
    };
    let kms = || {
        GetRecordsError::KmsThrottlingException(
            KmsThrottlingException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("KMSThrottlingException")
                        .build(),
                )
                .build(),
        )
    };
    // Every call's time, to check the pauses between throttled calls grow.
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let stamp = |calls: &Arc<Mutex<Vec<Instant>>>| {
        let calls = Arc::clone(calls);
        move |_: &aws_sdk_kinesis::operation::get_records::GetRecordsInput| {
            calls.lock().unwrap().push(Instant::now());
            true
        }
    };
    // it-0: 4 throughput refusals, 2 KMS refusals, then records 1..=10.
    let first = mock!(aws_sdk_kinesis::Client::get_records)
        .match_requests({
            let stamp = stamp(&calls);
            move |r| r.shard_iterator() == Some("it-0") && stamp(r)
        })
        .sequence()
        .error(throughput)
        .times(4)
        .error(kms)
        .times(2)
        .output(page(1, 10, "it-1"))
        .build();
    // it-1: 3 more refusals, then records 11..=20.
    let second = mock!(aws_sdk_kinesis::Client::get_records)
        .match_requests({
            let stamp = stamp(&calls);
            move |r| r.shard_iterator() == Some("it-1") && stamp(r)
        })
        .sequence()
        .error(throughput)
        .times(3)
        .output(page(11, 20, "it-2"))
        .build();
    // it-2: the tip, empty from then on.
    let tip = mock!(aws_sdk_kinesis::Client::get_records)
        .match_requests(|r| r.shard_iterator() == Some("it-2"))
        .then_output(page(1, 0, "it-2"));
    let client = mocked_kinesis!(summary, list, iterator, first, second, tip);

    let log = Arc::new(Mutex::new(Vec::new()));
    let mut config = fast_config("w0");
    config.retry_backoff = Duration::from_millis(100);
    config.max_backoff = Duration::from_millis(400);
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "throttled-app");
    let w = start(
        KinesisSource::new(client, "t-throttled"),
        table(),
        collector("w0", &log),
        config,
    );
    eventually("all 20 records delivered", Duration::from_secs(30), || {
        let log = Arc::clone(&log);
        async move { (log.lock().unwrap().len() >= 20).then_some(()) }
    })
    .await;
    // A checkpoint of the last record lands, then stop.
    eventually("checkpoint written", Duration::from_secs(10), || async {
        let rows = table().scan().await.ok()?;
        let row = rows.leases.iter().find(|r| r.shard_id == SHARD)?;
        (row.checkpoint.position().map(|p| p.seq.to_decimal()) == Some("120")).then_some(())
    })
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");

    // Nothing lost, skipped, duplicated or reordered.
    let values: Vec<u64> = log.lock().unwrap().iter().map(|s| s.value).collect();
    assert_eq!(values, (1..=20).collect::<Vec<_>>());
    // Exactly the scripted calls on the throttled iterators: 6 + 1 and 3 + 1, no more (a
    // worker that skipped ahead or re-read would have called again).
    assert_eq!(first.num_calls(), 7);
    assert_eq!(second.num_calls(), 4);
    // Backed off: the pauses between consecutive refused calls on one iterator double from
    // retry_backoff up to max_backoff (a sleep is never shorter than asked, so these lower
    // bounds hold however loaded the machine is).
    let at = calls.lock().unwrap().clone();
    assert_eq!(at.len(), 11, "every throttled-iterator call stamped");
    let floors = [100, 200, 400, 400, 400, 400];
    for (i, floor) in floors.iter().enumerate() {
        let gap = at[i + 1] - at[i];
        assert!(
            gap >= Duration::from_millis(*floor),
            "pause {i} after a refusal was {gap:?}, under {floor} ms"
        );
    }
    // The second iterator's refusals start again at retry_backoff: a success resets it.
    for (i, floor) in [100, 200, 400].iter().enumerate() {
        let gap = at[7 + i + 1] - at[7 + i];
        assert!(
            gap >= Duration::from_millis(*floor),
            "{gap:?} under {floor} ms"
        );
    }
}

/// GetRecords answered at once (aws-smithy-mocks, shapes from the Kinesis API reference), so a
/// reader that is behind fills its 5-calls-a-second window within milliseconds: the first four
/// calls ask for the page (10), the fifth for the cap (10,000, the source's maximum), the page
/// then grows after the window's wait, and once an answer finds the tip the next backlog is asked
/// for in pages of 10 again. Every record arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smithy_mock_instant_answers_take_the_cap_on_a_windows_last_call_and_the_tip_resets_the_page()
 {
    use std::sync::atomic::AtomicU64;

    use aws_smithy_mocks::mock;

    let fx = fixture!(
        "smithy_mock_instant_answers_take_the_cap_on_a_windows_last_call_and_the_tip_resets_the_page"
    );
    let spec = fx.photo_table(Table::Leases).await;
    const SHARD: &str = "shardId-000000000000";
    let [summary, list, iterator] = one_shard_rules("t-pages", SHARD);
    // Calls 0-7: 10 records each, 1 s behind; call 8: the tip; call 9: 10 more records; then the
    // tip for good. Values 1..=90 of key k0 at sequence numbers 100 + value.
    let limits: Arc<Mutex<Vec<i32>>> = Arc::default();
    let served = Arc::new(AtomicU64::new(0));
    let records = mock!(aws_sdk_kinesis::Client::get_records)
        .match_requests({
            let limits = Arc::clone(&limits);
            move |r| {
                limits.lock().unwrap().push(r.limit().unwrap_or(0));
                true
            }
        })
        .then_output({
            let served = Arc::clone(&served);
            move || {
                let call = served.fetch_add(1, Ordering::SeqCst);
                let (first, count, behind) = match call {
                    0..=7 => (call * 10 + 1, 10, 1_000),
                    9 => (81, 10, 1_000),
                    _ => (0, 0, 0),
                };
                k0_page(first, count, format!("it-{}", call + 1), behind)
            }
        });
    let client = mocked_kinesis!(summary, list, iterator, records);

    let log = Arc::new(Mutex::new(Vec::new()));
    let mut config = fast_config("w0");
    config.max_records = None; // the source's maximum, 10,000
    config.page_records = 10;
    // Long enough after the tip that the window's calls have aged out: the next call is not
    // the last one a window allows, so it asks for a page, not the cap.
    config.idle_poll = Duration::from_millis(1_200);
    let w = start(
        KinesisSource::new(client, "t-pages"),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "pages-app"),
        collector("w0", &log),
        config,
    );
    eventually("all 90 records delivered", Duration::from_secs(30), || {
        let log = Arc::clone(&log);
        async move { (log.lock().unwrap().len() >= 90).then_some(()) }
    })
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");

    let values: Vec<u64> = log.lock().unwrap().iter().map(|s| s.value).collect();
    assert_eq!(
        values,
        (1..=90).collect::<Vec<_>>(),
        "each record once, in order"
    );
    let limits = limits.lock().unwrap().clone();
    assert!(limits.len() >= 10, "calls: {limits:?}");
    assert_eq!(limits[..4], [10, 10, 10, 10], "the page first: {limits:?}");
    assert_eq!(
        limits[4], 10_000,
        "the window's last call asks for the cap: {limits:?}"
    );
    assert!(
        limits[5..8].iter().all(|&l| l >= 20),
        "after the window's wait the page has grown: {limits:?}"
    );
    assert_eq!(
        limits[9], 10,
        "after the tip, pages of 10 again: {limits:?}"
    );
}
