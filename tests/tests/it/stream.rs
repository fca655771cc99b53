//! The lineage-ordered consumer (`heatsink::stream`) against kinesis-mock and moto: resharding
//! while producing, workers killed mid-shard, fenced zombies, malformed lease rows, poison
//! batches, and the DynamoDB Streams source.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ScalingType, StreamStatus};
use heatsink::stream::{
    DynamoDbStreamsSource, Fence, KinesisSource, LeaseTable, ProcessBatch, RecordProcessor,
    ShardSource, StreamError, Worker, WorkerConfig, WorkerStats,
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
}

/// Records every delivery in one shared log (processing order across workers), and writes each
/// key's latest value to a sink table through the fence, as a real processor would.
struct Collector {
    worker: String,
    log: Arc<Mutex<Vec<Seen>>>,
    sink: Option<(aws_sdk_dynamodb::Client, String)>,
    poison: Option<String>,
}

impl RecordProcessor for Collector {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut latest: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = Vec::new();
        for r in &batch.records {
            let text = String::from_utf8_lossy(&r.data).into_owned();
            let (key, value) = text.split_once(':').unwrap_or((&text, "0"));
            if self.poison.as_deref() == Some(key) {
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

fn fast_config(worker: &str) -> WorkerConfig {
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

fn start<S: ShardSource>(
    source: S,
    leases: LeaseTable,
    collector: Collector,
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

async fn put_round(k: &aws_sdk_kinesis::Client, stream: &str, round: u64, keys: usize) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_is_lost_or_reordered_across_split_merge_and_rescale_with_a_worker_killed() {
    let fx = fixture!(
        "no_record_is_lost_or_reordered_across_split_merge_and_rescale_with_a_worker_killed"
    );
    let begun = Instant::now();
    const KEYS: usize = 12;
    const ROUNDS: u64 = 60;
    let stream = fx.stream("lineage", 2).await;
    let leases_spec = fx.table(Table::Leases).await;
    let sink = fx.table(Table::Counters).await;
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
                fast_config(&name),
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
    let spec = fx.table(Table::Leases).await;
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
        Duration::from_secs(10),
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
        Duration::from_secs(10),
        || async {
            let l = table.get(&held.shard_id).await.ok()??;
            (l.owner.is_some() && l.counter > repaired.counter).then_some(())
        },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_keeps_failing_is_reported_and_skipped_without_blocking_other_shards() {
    let fx = fixture!(
        "a_batch_that_keeps_failing_is_reported_and_skipped_without_blocking_other_shards"
    );
    let stream = fx.stream("poison", 2).await;
    let spec = fx.table(Table::Leases).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut config = fast_config("w0");
    config.max_records = Some(1); // one record per batch: only the poison one fails
    let w = start(
        KinesisSource::new(fx.stack.kinesis.clone(), &stream.name),
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "poison-app"),
        Collector {
            worker: "w0".into(),
            log: Arc::clone(&log),
            sink: None,
            poison: Some("k00".into()),
        },
        config,
    );
    for round in 0..3 {
        put_round(&fx.stack.kinesis, &stream.name, round, 6).await;
    }
    eventually(
        "every healthy record delivered",
        Duration::from_secs(15),
        || {
            let log = Arc::clone(&log);
            async move { (log.lock().unwrap().len() == 5 * 3).then_some(()) }
        },
    )
    .await;
    eventually(
        "the poison batches reported",
        Duration::from_secs(10),
        || async { (w.stats.failed_batches() == 3).then_some(()) },
    )
    .await;
    let _ = w.stop.send(());
    w.task.await.expect("worker task").expect("worker ran");
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
    let liked = fx.table(Table::Liked).await;
    let spec = fx.table(Table::Leases).await;
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
    eventually("ten changes", Duration::from_secs(15), || {
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
