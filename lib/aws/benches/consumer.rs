//! Consumer throughput on kinesis-mock: `heatsink::stream::Worker` (1 and 3 workers, DynamoDB
//! leases) side by side with the peer crate `ruststream-kinesis` (1 and 3 brokers on its
//! in-process `MemoryLeaseStore`, and with `BENCH_PEER_DYNAMO=1` on its `DynamoLeaseStore` too)
//! draining the same multi-shard stream in the same run: one warm-up, then `BENCH_RUNS` rounds
//! in alternating order (heatsink, peer, heatsink with early reads off, heatsink with fixed pages
//! of `max_records`, peer on DynamoDB; then the reverse), the median reported. All are timed until the last distinct (shard, seq)
//! arrived, redeliveries reported apart; heatsink also reports checkpoint writes per 1,000 records, against the old cadence (a
//! checkpoint per GetRecords batch of 1,000). Then catch-up time after UpdateShardCount, and
//! failover: one of 3 workers with a 10 s lease is killed; seconds until each of its shards is
//! read again.
//!
//! ```text
//! AWS_ENDPOINT_URL_KINESIS=… AWS_ENDPOINT_URL_DYNAMODB=… cargo bench -p heatsink --bench consumer
//! ```
//! Knobs (env): `BENCH_RECORDS` (default 8000), `BENCH_SHARDS` (default 4), `BENCH_RUNS`
//! (default 3), `BENCH_MAX_RECORDS` (heatsink's GetRecords limit; default the source's 10,000),
//! `BENCH_PEER_DYNAMO=1` (add the peer on `DynamoLeaseStore`; it checkpoints every record, about
//! 90 s per 20,000-record drain on moto), `BENCH_CPU_PIDS=kinesis-mock=PID,moto=PID` (report the
//! CPU seconds each named process, and the bench itself, spent per drain: whether a consumer
//! makes the emulators work more, or only waits differently), `BENCH_FANOUT=1` (add heatsink
//! reading through enhanced fan-out, `FanOutSource`, a consumer registered afresh before each
//! drain's clock starts).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ScalingType, StreamStatus};
use futures::StreamExt;
use heatsink::schema::{self, Schema, StreamSpec, Table};
use heatsink::stream::{
    FanOutSource, KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, ShardSource,
    StreamError, Worker, WorkerConfig, WorkerStats,
};
use ruststream::{Broker, IncomingMessage, Positioned, Seekable, Seeker, Subscriber};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisPosition, KinesisStream, LeaseStore, MemoryLeaseStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Stops one worker gracefully.
type Stop = tokio::sync::oneshot::Sender<()>;
/// One running worker.
type Running = tokio::task::JoinHandle<Result<(), StreamError>>;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Counts distinct (shard, seq) and deliveries; remembers when each shard was last read and by
/// whom (for the failover measurement).
#[derive(Clone, Default)]
struct Count {
    distinct: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    seen: Arc<std::sync::Mutex<HashSet<(String, String)>>>,
    last_read: Arc<std::sync::Mutex<HashMap<String, (String, Instant)>>>,
    worker: String,
}

impl Count {
    fn for_worker(&self, worker: &str) -> Self {
        Self {
            worker: worker.to_owned(),
            ..self.clone()
        }
    }
}

impl RecordProcessor for Count {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        self.delivered
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        let fresh = match self.seen.lock() {
            Ok(mut seen) => batch
                .records
                .iter()
                .filter(|r| seen.insert((batch.shard_id.clone(), r.seq.to_string())))
                .count(),
            Err(_) => 0,
        };
        self.distinct.fetch_add(fresh as u64, Ordering::Relaxed);
        if let Ok(mut last) = self.last_read.lock() {
            last.insert(
                batch.shard_id.clone(),
                (self.worker.clone(), Instant::now()),
            );
        }
        Ok(())
    }
}

/// CPU seconds of named processes (`BENCH_CPU_PIDS`) and of the bench, from `/proc/PID/stat`.
struct CpuMeter {
    procs: Vec<(String, String)>,
}

impl CpuMeter {
    fn from_env() -> Self {
        let mut procs: Vec<(String, String)> = std::env::var("BENCH_CPU_PIDS")
            .unwrap_or_default()
            .split(',')
            .filter_map(|p| p.split_once('='))
            .map(|(name, pid)| (name.to_owned(), format!("/proc/{pid}/stat")))
            .collect();
        if !procs.is_empty() {
            procs.push(("bench".into(), "/proc/self/stat".into()));
        }
        Self { procs }
    }

    /// utime + stime of each process, in seconds (Linux's USER_HZ of 100 ticks a second).
    fn sample(&self) -> Vec<f64> {
        self.procs
            .iter()
            .map(|(_, path)| {
                let stat = std::fs::read_to_string(path).unwrap_or_default();
                let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
                let f: Vec<f64> = after
                    .split_whitespace()
                    .map(|v| v.parse().unwrap_or(0.0))
                    .collect();
                (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
            })
            .collect()
    }

    /// Per process: the median CPU seconds of the drains in `deltas`.
    fn report(&self, deltas: &[Vec<f64>]) -> String {
        if self.procs.is_empty() || deltas.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self
            .procs
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let v: Vec<f64> = deltas
                    .iter()
                    .map(|d| d.get(i).copied().unwrap_or(0.0))
                    .collect();
                format!("{name} {:.2}", median(v))
            })
            .collect();
        format!("   cpu s/drain: {}", parts.join(", "))
    }
}

fn cpu_delta(before: &[f64], after: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn produce(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    from: usize,
    n: usize,
) -> Result<(), BoxError> {
    let mut i = from;
    while i < from + n {
        let end = (i + 500).min(from + n);
        let entries = (i..end)
            .map(|j| {
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("k{}", j % 64))
                    .data(Blob::new(format!(
                        "record {j} with a little padding to look real"
                    )))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = k
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await?;
        if out.failed_record_count().unwrap_or(0) > 0 {
            return Err("records refused while producing".into());
        }
        i = end;
    }
    Ok(())
}

/// The consumers one run compares.
#[derive(Clone, Copy)]
enum Consumer {
    Heatsink,
    /// heatsink with `early_read` off: the first GetRecords waits for the take.
    HeatsinkLate,
    /// heatsink asking `max_records` in every GetRecords (`page_records` = `max_records`).
    HeatsinkFixed,
    /// heatsink reading through enhanced fan-out (`BENCH_FANOUT=1`), a fresh consumer a drain.
    HeatsinkFanOut,
    /// ruststream-kinesis with its in-process `MemoryLeaseStore`.
    Peer,
    /// ruststream-kinesis with its `DynamoLeaseStore` on the same DynamoDB as heatsink's leases.
    PeerDynamo,
}

/// How long one drain took, from before its consumers started.
#[derive(Clone, Copy)]
struct Took {
    /// Until the first record was counted (start-up: leases, iterators, the first read).
    first: Duration,
    /// Until the last one was.
    all: Duration,
}

/// Waits until `count` reaches `target`; both times are measured from `start` (5 ms polls).
async fn wait_count(count: &AtomicU64, target: u64, start: Instant) -> Result<Took, BoxError> {
    let mut first = None;
    loop {
        let seen = count.load(Ordering::Relaxed);
        if seen > 0 && first.is_none() {
            first = Some(start.elapsed());
        }
        if seen >= target {
            let all = start.elapsed();
            return Ok(Took {
                first: first.unwrap_or(all),
                all,
            });
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("timed out at {seen} of {target} records").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn worker_config(id: &str) -> WorkerConfig {
    let mut c = WorkerConfig::new(id);
    // The shared emulators are slower than AWS: give calls the timeouts of a 30 s lease.
    c.timeouts = Some(heatsink::stream::Timeouts::for_lease(Duration::from_secs(
        30,
    )));
    c.renew_interval = Duration::from_secs(1);
    c.sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(200);
    // The lease table may be moto's, whose conditional writes are not atomic under concurrency.
    c.verify_takes = std::env::var("HEATSINK_VERIFY_TAKES").as_deref() != Ok("0");
    // `BENCH_MAX_RECORDS=1000` runs heatsink at the peer's GetRecords limit (default: the
    // source's maximum, 10,000 on Kinesis).
    c.max_records = std::env::var("BENCH_MAX_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok());
    c
}

/// Starts `workers` heatsink workers of `app`; returns the shared count, their stop handles and
/// their stats.
/// How heatsink's workers read the stream.
#[derive(Clone)]
enum Reader {
    /// GetRecords (`KinesisSource`).
    Polling,
    /// Enhanced fan-out through the registered consumer with this ARN (`FanOutSource`).
    FanOut(String),
}

/// Starts one worker on `source`; its stats and task.
fn spawn_worker<S: ShardSource>(
    source: S,
    leases: LeaseTable,
    count: Count,
    config: WorkerConfig,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (WorkerStats, Running) {
    let worker = Worker::new(source, leases, count, config);
    let stats = worker.stats();
    let task = tokio::spawn(worker.run(async move {
        let _ = stop.await;
    }));
    (stats, task)
}

/// Starts `workers` heatsink workers of `app` reading through `reader`; returns the shared
/// count, their stop handles, their tasks and their stats.
fn heatsink_workers(
    reader: &Reader,
    config: &aws_config::SdkConfig,
    stream: &str,
    leases_table: &str,
    app: &str,
    workers: usize,
    tune: impl Fn(&mut WorkerConfig),
) -> (Count, Vec<Stop>, Vec<Running>, Vec<WorkerStats>) {
    let count = Count::default();
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    let mut stats = Vec::new();
    for w in 0..workers {
        let id = format!("{app}-w{w}");
        let mut c = worker_config(&id);
        tune(&mut c);
        let kinesis = aws_sdk_kinesis::Client::new(config);
        let leases = LeaseTable::new(aws_sdk_dynamodb::Client::new(config), leases_table, app);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push(tx);
        let (stat, task) = match reader {
            Reader::Polling => spawn_worker(
                KinesisSource::new(kinesis, stream),
                leases,
                count.for_worker(&id),
                c,
                rx,
            ),
            Reader::FanOut(arn) => spawn_worker(
                FanOutSource::new(kinesis, stream, arn.as_str()),
                leases,
                count.for_worker(&id),
                c,
                rx,
            ),
        };
        stats.push(stat);
        tasks.push(task);
    }
    (count, stops, tasks, stats)
}

/// One heatsink drain of the whole stream by a fresh application: (times, distinct,
/// redelivered, checkpoint writes, the slowest worker's start-up work in ms, early reads used
/// and dropped).
#[allow(clippy::too_many_arguments)]
async fn heatsink_drain(
    reader: &Reader,
    config: &aws_config::SdkConfig,
    stream: &str,
    leases_table: &str,
    app: &str,
    workers: usize,
    n: u64,
    tune: impl Fn(&mut WorkerConfig),
) -> Result<(Took, u64, u64, u64, u64, (u64, u64)), BoxError> {
    let start = Instant::now();
    let (count, stops, tasks, stats) =
        heatsink_workers(reader, config, stream, leases_table, app, workers, tune);
    let took = wait_count(&count.distinct, n, start).await?;
    stop_all(stops, tasks).await;
    let delivered = count.delivered.load(Ordering::Relaxed);
    let distinct = count.distinct.load(Ordering::Relaxed);
    let writes = stats.iter().map(WorkerStats::checkpoint_writes).sum();
    let startup = stats.iter().map(WorkerStats::startup_ms).max().unwrap_or(0);
    let early = stats
        .iter()
        .map(WorkerStats::early_reads)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    Ok((took, distinct, delivered - distinct, writes, startup, early))
}

/// One peer drain: times until the first and the `n`th distinct record arrived, and the
/// deliveries beyond the distinct ones (counted the same way as heatsink's).
async fn peer_drain(
    config: &aws_config::SdkConfig,
    stream: &str,
    brokers: usize,
    n: u64,
    store: Arc<dyn LeaseStore>,
) -> Result<(Took, u64), BoxError> {
    let start = Instant::now();
    let (count, tasks) = peer_brokers(config, stream, brokers, store).await?;
    let took = wait_count(&count.distinct, n, start).await;
    for t in tasks {
        t.abort();
    }
    let again = count.delivered.load(Ordering::Relaxed) - count.distinct.load(Ordering::Relaxed);
    Ok((took?, again))
}

fn all_secs(v: &[Took]) -> Vec<f64> {
    v.iter().map(|t| t.all.as_secs_f64()).collect()
}

fn first_secs(v: &[Took]) -> Vec<f64> {
    v.iter().map(|t| t.first.as_secs_f64()).collect()
}

fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|s| (s * 1000.0).round() / 1000.0).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn stop_all(stops: Vec<Stop>, tasks: Vec<Running>) {
    for s in stops {
        let _ = s.send(());
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Starts `brokers` ruststream-kinesis brokers sharing one lease store, reading from the horizon.
async fn peer_brokers(
    config: &aws_config::SdkConfig,
    stream: &str,
    brokers: usize,
    store: Arc<dyn LeaseStore>,
) -> Result<(Count, Vec<tokio::task::JoinHandle<()>>), BoxError> {
    let count = Count::default();
    let mut tasks = Vec::new();
    for b in 0..brokers {
        let connected = KinesisBroker::from_config(config.clone())
            .lease_store(store.clone())
            .owner_id(format!("peer-{b}"))
            .connect()
            .await?;
        let mut sub = connected
            .subscribe_stream(KinesisStream::new(stream).poll_interval(Duration::from_millis(200)))
            .await?;
        // The peer starts new subscriptions at LATEST; rewind to the horizon to drain the backlog.
        sub.seeker().seek(KinesisPosition::Horizon).await?;
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let _keep = connected;
            let mut messages = sub.stream();
            while let Some(msg) = messages.next().await {
                if let Ok(msg) = msg {
                    count.delivered.fetch_add(1, Ordering::Relaxed);
                    if let KinesisPosition::Sequence { shard, sequence } = msg.position()
                        && count
                            .seen
                            .lock()
                            .is_ok_and(|mut s| s.insert((shard, sequence)))
                    {
                        count.distinct.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = msg.ack().await;
                }
            }
        }));
    }
    Ok((count, tasks))
}

/// A fresh, empty table for the peer's `DynamoLeaseStore` (partition key `lease_key`, the
/// schema its docs ask for), so every drain starts without checkpoints, as heatsink's fresh
/// application does.
async fn peer_lease_table(ddb: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), BoxError> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        TableStatus,
    };
    ddb.create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("lease_key")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("lease_key")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    let start = Instant::now();
    loop {
        let out = ddb.describe_table().table_name(name).send().await?;
        if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("table {name} did not become ACTIVE").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_active(k: &aws_sdk_kinesis::Client, stream: &str) -> Result<(), BoxError> {
    let start = Instant::now();
    loop {
        let out = k
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await?;
        if out
            .stream_description_summary()
            .is_some_and(|s| s.stream_status() == &StreamStatus::Active)
        {
            return Ok(());
        }
        if start.elapsed() > TIMEOUT {
            return Err("stream did not become ACTIVE".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn bench() -> Result<(), BoxError> {
    let records = env_usize("BENCH_RECORDS", 8_000);
    let shards = env_usize("BENCH_SHARDS", 4);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let tag = heatsink::clock::now_ms() % 1_000_000;
    let schema = Schema::new(format!("hs-bench-{tag:06}-"));
    let leases = schema.table(Table::Leases);
    schema::ensure_table(&ddb, &leases).await?;
    let stream = StreamSpec {
        logical: "consumer".into(),
        name: format!("{}consumer", schema.prefix()),
        shards: i32::try_from(shards)?,
    };
    schema::ensure_stream(&kinesis, &stream).await?;
    produce(&kinesis, &stream.name, 0, records).await?;
    println!(
        "consumer: {records} records on {shards} shards of {}",
        stream.name
    );
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let meter = CpuMeter::from_env();
    let n = records as u64;
    let mut app = 0usize;
    let mut next_app = |tag: &str| {
        app += 1;
        format!("{tag}{app}")
    };
    println!(
        "{:<40} {:>9} {:>9} {:>11} {:>9} {:>12}",
        "consumer (median)", "seconds", "1st rec.", "records/s", "redeliv.", "ckpt/1000"
    );
    let mut peer_tables = 0usize;
    // The peer on DynamoDB leases writes a checkpoint per record: minutes per drain on moto.
    let peer_dynamo = std::env::var("BENCH_PEER_DYNAMO").as_deref() == Ok("1");
    // heatsink through enhanced fan-out too.
    let fan_out = std::env::var("BENCH_FANOUT").as_deref() == Ok("1");
    for workers in [1usize, 3] {
        // Warm-up, not counted.
        heatsink_drain(
            &Reader::Polling,
            &config,
            &stream.name,
            &leases.name,
            &next_app("warm"),
            workers,
            n,
            |_| {},
        )
        .await?;
        peer_drain(
            &config,
            &stream.name,
            workers,
            n,
            Arc::new(MemoryLeaseStore::new()),
        )
        .await?;
        let mut ours = Vec::new();
        let mut peer = Vec::new();
        let mut peer_ddb = Vec::new();
        let mut redelivered = 0;
        let mut writes = 0;
        let mut startups = Vec::new();
        let mut early = (0, 0);
        let mut late = Vec::new();
        let mut fixed = Vec::new();
        let mut fanned = Vec::new();
        // CPU per drain: heatsink, peer, heatsink without early reads, fixed pages, fan-out.
        let mut cpu: [Vec<Vec<f64>>; 5] = Default::default();
        let (mut peer_again, mut peer_ddb_again) = (0, 0);
        let mut peer_ddb_failed: Option<String> = None;
        for run in 0..runs {
            // Alternating order: heatsink, peer, heatsink without early reads, heatsink with
            // fixed pages, peer on DynamoDB on even runs, the reverse on odd ones (ABCDE EDCBA:
            // each consumer's mean position is the same).
            let mut order = [
                Consumer::Heatsink,
                Consumer::Peer,
                Consumer::HeatsinkLate,
                Consumer::HeatsinkFixed,
                Consumer::HeatsinkFanOut,
                Consumer::PeerDynamo,
            ];
            if run % 2 == 1 {
                order.reverse();
            }
            for turn in order {
                let before = meter.sample();
                let slot = match turn {
                    Consumer::Heatsink => Some(0),
                    Consumer::Peer => Some(1),
                    Consumer::HeatsinkLate => Some(2),
                    Consumer::HeatsinkFixed => Some(3),
                    Consumer::HeatsinkFanOut => Some(4),
                    Consumer::PeerDynamo => None,
                };
                match turn {
                    Consumer::Heatsink => {
                        let (took, _, again, w, startup, e) = heatsink_drain(
                            &Reader::Polling,
                            &config,
                            &stream.name,
                            &leases.name,
                            &next_app("drain"),
                            workers,
                            n,
                            |_| {},
                        )
                        .await?;
                        ours.push(took);
                        startups.push(startup as f64);
                        early = (early.0 + e.0, early.1 + e.1);
                        redelivered += again;
                        writes += w;
                    }
                    Consumer::HeatsinkLate => {
                        let (took, ..) = heatsink_drain(
                            &Reader::Polling,
                            &config,
                            &stream.name,
                            &leases.name,
                            &next_app("late"),
                            workers,
                            n,
                            |c| c.early_read = false,
                        )
                        .await?;
                        late.push(took);
                    }
                    Consumer::HeatsinkFixed => {
                        let (took, ..) = heatsink_drain(
                            &Reader::Polling,
                            &config,
                            &stream.name,
                            &leases.name,
                            &next_app("fixed"),
                            workers,
                            n,
                            |c| c.page_records = i32::MAX,
                        )
                        .await?;
                        fixed.push(took);
                    }
                    Consumer::HeatsinkFanOut if !fan_out => continue,
                    Consumer::HeatsinkFanOut => {
                        let app = next_app("fanout");
                        // Registered (and ACTIVE) before the clock starts, as a deployed
                        // consumer is; removed after.
                        let source =
                            FanOutSource::register(kinesis.clone(), &stream.name, &app).await?;
                        let (took, ..) = heatsink_drain(
                            &Reader::FanOut(source.consumer_arn().to_owned()),
                            &config,
                            &stream.name,
                            &leases.name,
                            &app,
                            workers,
                            n,
                            |_| {},
                        )
                        .await?;
                        let _ = source.deregister().await;
                        fanned.push(took);
                    }
                    Consumer::Peer => {
                        let store = Arc::new(MemoryLeaseStore::new());
                        let (took, again) =
                            peer_drain(&config, &stream.name, workers, n, store).await?;
                        peer.push(took);
                        peer_again += again;
                    }
                    Consumer::PeerDynamo if !peer_dynamo || peer_ddb_failed.is_some() => {}
                    Consumer::PeerDynamo => {
                        peer_tables += 1;
                        let table = format!("{}peer-leases-{peer_tables}", schema.prefix());
                        peer_lease_table(&ddb, &table).await?;
                        let store = Arc::new(DynamoLeaseStore::new(&config, table.as_str()));
                        // It writes a checkpoint per acknowledged record, so it may not finish
                        // within the time-out: that is reported, not fatal.
                        match peer_drain(&config, &stream.name, workers, n, store).await {
                            Ok((took, again)) => {
                                peer_ddb.push(took);
                                peer_ddb_again += again;
                            }
                            Err(e) => peer_ddb_failed = Some(e.to_string()),
                        }
                        let _ = ddb.delete_table().table_name(&table).send().await;
                    }
                }
                if let Some(slot) = slot {
                    cpu[slot].push(cpu_delta(&before, &meter.sample()));
                }
            }
        }
        let ours_s = median(all_secs(&ours));
        let per_1000 = writes as f64 * 1_000.0 / (n as f64 * runs as f64);
        println!(
            "{:<40} {:>9.3} {:>9.3} {:>11.0} {:>9} {:>12.2}   runs {:?}   start-up work {} ms   early reads used/dropped {}/{}{}",
            format!("heatsink::stream x{workers}"),
            ours_s,
            median(first_secs(&ours)),
            n as f64 / ours_s,
            redelivered,
            per_1000,
            rounded(&all_secs(&ours)),
            median(startups),
            early.0,
            early.1,
            meter.report(&cpu[0]),
        );
        // heatsink with one thing changed, against heatsink's defaults (same run): a positive
        // difference is what the default saves.
        for (variant, times, cpu) in [
            ("no early", &late, &cpu[2]),
            ("fixed pages", &fixed, &cpu[3]),
            ("fan-out", &fanned, &cpu[4]),
        ] {
            if times.is_empty() {
                continue;
            }
            let secs = median(all_secs(times));
            println!(
                "{:<40} {:>9.3} {:>9.3} {:>11.0}   runs {:?}   ({variant} minus defaults: {:+.3} s){}",
                format!("heatsink::stream x{workers}, {variant}"),
                secs,
                median(first_secs(times)),
                n as f64 / secs,
                rounded(&all_secs(times)),
                secs - ours_s,
                meter.report(cpu),
            );
        }
        if let Some(e) = &peer_ddb_failed {
            println!("ruststream-kinesis x{workers}, DynamoDB leases: {e} (no row)");
        }
        for (name, times, again, cpu) in [
            ("memory leases", &peer, peer_again, meter.report(&cpu[1])),
            ("DynamoDB leases", &peer_ddb, peer_ddb_again, String::new()),
        ] {
            if times.is_empty() {
                continue;
            }
            let secs = median(all_secs(times));
            // Each run's ratio, from the same ABBA round: robust to the emulator drifting
            // over the bench.
            let per_run: Vec<f64> = all_secs(times)
                .iter()
                .zip(all_secs(&ours))
                .map(|(p, h)| p / h)
                .collect();
            println!(
                "{:<40} {:>9.3} {:>9.3} {:>11.0} {:>9} {:>12}   runs {:?}   (heatsink/peer = {:.2}; per run {:?}, median {:.2}){}",
                format!("ruststream-kinesis x{workers}, {name}"),
                secs,
                median(first_secs(times)),
                n as f64 / secs,
                again,
                "-",
                rounded(&all_secs(times)),
                secs / ours_s,
                rounded(&per_run),
                median(per_run.clone()),
                cpu
            );
        }
    }
    // The old cadence for comparison: a checkpoint after every GetRecords batch of 1,000.
    let (took, _, again, writes, _, _) = heatsink_drain(
        &Reader::Polling,
        &config,
        &stream.name,
        &leases.name,
        &next_app("old"),
        1,
        n,
        |c| {
            c.max_records = Some(1_000);
            c.checkpoint_interval = Duration::ZERO;
            c.checkpoint_every_records = 1;
            c.prefetch_batches = 1;
        },
    )
    .await?;
    println!(
        "{:<40} {:>9.3} {:>9.3} {:>11.0} {:>9} {:>12.2}",
        "heatsink x1, old cadence (ckpt/batch)",
        took.all.as_secs_f64(),
        took.first.as_secs_f64(),
        n as f64 / took.all.as_secs_f64(),
        again,
        writes as f64 * 1_000.0 / n as f64
    );

    // Catch-up after a reshard: a caught-up worker, UpdateShardCount ×2, a new burst of records;
    // time from the last put until every new record went through the children.
    let (count, stops, tasks, _) = heatsink_workers(
        &Reader::Polling,
        &config,
        &stream.name,
        &leases.name,
        "catchup",
        1,
        |_| {},
    );
    wait_count(&count.distinct, n, Instant::now()).await?;
    let before = count.distinct.load(Ordering::Relaxed);
    kinesis
        .update_shard_count()
        .stream_name(&stream.name)
        .target_shard_count(i32::try_from(shards * 2)?)
        .scaling_type(ScalingType::UniformScaling)
        .send()
        .await?;
    wait_active(&kinesis, &stream.name).await?;
    let burst = records / 2;
    produce(&kinesis, &stream.name, records, burst).await?;
    let took = wait_count(&count.distinct, before + burst as u64, Instant::now()).await?;
    stop_all(stops, tasks).await;
    println!(
        "catch-up after UpdateShardCount {shards}->{}: {burst} records drained {:.3} s after the last put (heatsink x1)",
        shards * 2,
        took.all.as_secs_f64()
    );

    // Failover: 3 workers, 10 s lease, a trickle of records; kill one; seconds until every
    // shard it held is read again by a survivor.
    let (count, mut stops, mut tasks, stats) = heatsink_workers(
        &Reader::Polling,
        &config,
        &stream.name,
        &leases.name,
        "failover",
        3,
        |c| {
            c.lease_duration = Duration::from_secs(10);
            c.renew_interval = Duration::from_secs(3);
        },
    );
    let producer = {
        let kinesis = kinesis.clone();
        let name = stream.name.clone();
        tokio::spawn(async move {
            for i in 0.. {
                if produce(&kinesis, &name, 1_000_000 + i * 64, 64)
                    .await
                    .is_err()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let settle = Instant::now();
    while stats[0].held_shards().is_empty() && settle.elapsed() < TIMEOUT {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let victim_shards = stats[0].held_shards();
    tasks.remove(0).abort(); // a crash: no release, no checkpoint
    drop(stops.remove(0));
    let killed = Instant::now();
    let mut reread = None;
    while killed.elapsed() < TIMEOUT {
        let done = count.last_read.lock().is_ok_and(|last| {
            victim_shards.iter().all(|s| {
                last.get(s)
                    .is_some_and(|(w, at)| !w.ends_with("-w0") && *at > killed)
            })
        });
        if done {
            reread = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    producer.abort();
    stop_all(stops, tasks).await;
    match reread {
        Some(t) => println!(
            "failover (3 workers, 10 s lease, kill one holding {} shard(s)): its shards read again after {:.1} s",
            victim_shards.len(),
            t.as_secs_f64()
        ),
        None => println!("failover: shards not read again within {TIMEOUT:?}"),
    }
    let _ = kinesis
        .delete_stream()
        .stream_name(&stream.name)
        .enforce_consumer_deletion(true)
        .send()
        .await;
    let _ = ddb.delete_table().table_name(&leases.name).send().await;
    Ok(())
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_none()
        || std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none()
    {
        println!(
            "skip: consumer bench needs AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB (the local stack)"
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("consumer bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(bench()) {
        eprintln!("consumer bench failed: {e}");
        std::process::exit(1);
    }
}
