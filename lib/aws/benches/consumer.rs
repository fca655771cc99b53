//! Consumer throughput, CPU and latency: `heatsink::stream::Worker` (DynamoDB leases) side by
//! side with the peer crate `ruststream-kinesis` (its in-process `MemoryLeaseStore`, and with
//! `BENCH_PEER_DYNAMO=1` its `DynamoLeaseStore` too), draining the same stream in the same run.
//!
//! **Drains.** Per shard count (`BENCH_SHARDS`) one stream holds `BENCH_RECORDS` records of
//! 100 bytes; per worker count (`BENCH_WORKERS`) one warm-up pair of drains, then `BENCH_RUNS`
//! rounds in alternating order (heatsink, peer, then the variants; the reverse on odd rounds),
//! medians reported. Every drain is a fresh application in **its own child process** (this
//! bench re-run with `BENCH_CHILD` set), timed from before its consumers start until the last
//! distinct (shard, seq) arrived (redeliveries reported apart). The child reads the CPU time
//! (utime + stime, `/proc/PID/stat`) of itself and of the emulators serving
//! `AWS_ENDPOINT_URL_KINESIS` and `AWS_ENDPOINT_URL_DYNAMODB` (found by their listening port)
//! at its clock's start and when the last record arrived, so each figure is that drain's CPU
//! alone: the whole consumer process (SDK, HTTP, runtime, the counting processor), not a
//! thread. Reported per 100,000 records.
//!
//! **Latency** (`BENCH_LATENCY_SECS` > 0): on a fresh stream of `BENCH_LATENCY_SHARDS` shards
//! (default 4), one consumer at a time (ABBA over `BENCH_LATENCY_ROUNDS` rounds, default 1:
//! heatsink then peer) reads while this process puts `BENCH_LATENCY_RATE` records a second
//! (default 2,000) for the given seconds, each record carrying its put time; the child reports
//! put-to-processor p50 / p99 / max and its CPU per 100,000 records at that steady rate. Both
//! consumers poll every 200 ms at the tip (heatsink's `idle_poll`, the peer's `poll_interval`).
//!
//! **Extras** (`BENCH_EXTRAS`, default 1, on the first stream, in this process): heatsink with
//! the old cadence (a checkpoint per GetRecords batch of 1,000); catch-up time after
//! UpdateShardCount (skipped where the endpoint lacks it: kinesalite); failover (one of 3
//! workers with a 10 s lease killed; seconds until each of its shards is read again).
//!
//! ```text
//! localstack/stack up --kinesalite && eval "$(localstack/stack env --lane kinesalite)"
//! HEATSINK_VERIFY_TAKES=0 BENCH_RECORDS=200000 BENCH_SHARDS=4,16 BENCH_WORKERS=1 BENCH_RUNS=5 \
//!   BENCH_VARIANTS=none BENCH_EXTRAS=0 BENCH_LATENCY_SECS=60 \
//!   cargo bench -p heatsink --features full --bench consumer
//! ```
//! Knobs (env): `BENCH_RECORDS` (default 8000), `BENCH_SHARDS` (list, default 4),
//! `BENCH_WORKERS` (list, default 1,3), `BENCH_RUNS` (default 3), `BENCH_MAX_RECORDS`
//! (heatsink's GetRecords limit; default the source's 10,000), `BENCH_VARIANTS` (heatsink with
//! one thing changed, as extra consumers in the ABBA order: `late` = early reads off, `fixed` =
//! fixed pages of `max_records`, `fanout` = enhanced fan-out with a consumer registered before
//! the clock starts, `peer-dynamo` = the peer on DynamoDB leases, which checkpoints every record;
//! default `late,fixed`; `none`), `BENCH_FANOUT=1` and `BENCH_PEER_DYNAMO=1` (add those two),
//! `BENCH_CPU_PIDS=name=PID,...` (CPU of these processes instead of the endpoints' listeners),
//! `HEATSINK_VERIFY_TAKES=0` (leases on dynoxide, which serialises writes).

mod meter;
mod put_records;
mod standin;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ScalingType, StreamStatus};
use futures::StreamExt;
use heatsink::schema::{self, Schema, StreamSpec, Table};
use heatsink::stream::{
    FanOutSource, KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, ShardSource,
    StreamError, Worker, WorkerConfig, WorkerStats,
};
use meter::{CpuMeter, cpu_delta, emulator_pids};
use ruststream::{Broker, IncomingMessage, Positioned, Seekable, Seeker, Subscriber};
use ruststream_kinesis::{
    DynamoLeaseStore, KinesisBroker, KinesisPosition, KinesisStream, LeaseStore, MemoryLeaseStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Stops one worker gracefully.
type Stop = tokio::sync::oneshot::Sender<()>;
/// One running worker.
type Running = tokio::task::JoinHandle<Result<(), StreamError>>;

const TIMEOUT: Duration = Duration::from_secs(300);
/// Bytes of every record's data.
const RECORD_BYTES: usize = 100;

// ------------------------------------------------------------------ counting

/// A sequence number as a fixed-size key: its decimal digits (leading zeros dropped, at most
/// 64: Kinesis's are 56) packed two to a byte, right-aligned. Exact, and no allocation per
/// record, so counting costs both consumers the same few tens of nanoseconds.
fn seq_key(seq: &str) -> Option<[u8; 32]> {
    let digits = seq.trim_start_matches('0').as_bytes();
    if digits.len() > 64 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut key = [0u8; 32];
    let skip = 64 - digits.len();
    for (i, d) in digits.iter().enumerate() {
        let at = skip + i;
        key[at / 2] |= (d - b'0') << if at.is_multiple_of(2) { 4 } else { 0 };
    }
    Some(key)
}

/// Distinct (shard, seq) seen so far.
#[derive(Default)]
struct Seen {
    by_shard: HashMap<String, HashSet<[u8; 32]>>,
    /// Sequence numbers that do not pack (none on Kinesis; kept exact anyway).
    odd: HashSet<(String, String)>,
}

impl Seen {
    fn insert(&mut self, shard: &str, seq: &str) -> bool {
        let Some(key) = seq_key(seq) else {
            return self.odd.insert((shard.to_owned(), seq.to_owned()));
        };
        match self.by_shard.get_mut(shard) {
            Some(set) => set.insert(key),
            None => self
                .by_shard
                .entry(shard.to_owned())
                .or_default()
                .insert(key),
        }
    }
}

/// Microseconds since the epoch.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A latency-mode record starts with its put time in microseconds (16 digits, right-aligned).
fn put_time_us(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data.get(..16)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Counts distinct (shard, seq) and deliveries; remembers when each shard was last read and by
/// whom (for the failover measurement); in latency mode, each record's put-to-processor time.
#[derive(Clone, Default)]
struct Count {
    distinct: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    seen: Arc<std::sync::Mutex<Seen>>,
    last_read: Arc<std::sync::Mutex<HashMap<String, (String, Instant)>>>,
    /// Put-to-processor microseconds, when the records carry their put time.
    latencies: Option<Arc<std::sync::Mutex<Vec<u64>>>>,
    worker: String,
}

impl Count {
    fn with_latencies() -> Self {
        Self {
            latencies: Some(Arc::default()),
            ..Self::default()
        }
    }

    fn for_worker(&self, worker: &str) -> Self {
        Self {
            worker: worker.to_owned(),
            ..self.clone()
        }
    }

    /// Notes the put times of `datas`, read now.
    fn latency<'a>(&self, datas: impl Iterator<Item = &'a [u8]>) {
        let Some(lat) = &self.latencies else {
            return;
        };
        let now = now_us();
        if let Ok(mut lat) = lat.lock() {
            lat.extend(datas.filter_map(put_time_us).map(|t| now.saturating_sub(t)));
        }
    }
}

impl RecordProcessor for Count {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        self.latency(batch.records.iter().map(|r| r.data.as_ref()));
        self.delivered
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        let fresh = match self.seen.lock() {
            Ok(mut seen) => batch
                .records
                .iter()
                .filter(|r| seen.insert(&batch.shard_id, r.seq.to_decimal()))
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

// ------------------------------------------------------------------ producing

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// Record `j`'s data: its number (or, in latency mode, its put time) padded to 100 bytes.
fn record_data(head: u64) -> Vec<u8> {
    let mut d = format!("{head:>16} a record of the consumer bench ").into_bytes();
    d.resize(RECORD_BYTES, b'.');
    d
}

/// One PutRecords of `entries`, the refused ones again until none is left.
async fn put_batch(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    entries: Vec<PutRecordsRequestEntry>,
) -> Result<(), BoxError> {
    put_records::put_with_retry(k, stream, entries)
        .await
        .map(|_| ())
}

fn entry(j: usize, head: u64) -> Result<PutRecordsRequestEntry, BoxError> {
    Ok(PutRecordsRequestEntry::builder()
        .partition_key(format!("k{}", j % 64))
        .data(Blob::new(record_data(head)))
        .build()?)
}

/// Puts records `from..from + n`, four PutRecords of 500 in flight.
async fn produce(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    from: usize,
    n: usize,
) -> Result<(), BoxError> {
    let batches: Vec<(usize, usize)> = (from..from + n)
        .step_by(500)
        .map(|i| (i, (i + 500).min(from + n)))
        .collect();
    let mut puts = futures::stream::iter(batches)
        .map(|(a, b)| async move {
            let entries = (a..b)
                .map(|j| entry(j, j as u64))
                .collect::<Result<Vec<_>, _>>()?;
            put_batch(k, stream, entries).await
        })
        .buffer_unordered(4);
    while let Some(r) = puts.next().await {
        r?;
    }
    Ok(())
}

/// Puts `rate` records a second for `secs` seconds, one PutRecords every 10 ms, each record
/// stamped with the time just before its call; returns how many it put.
async fn produce_steadily(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    rate: usize,
    secs: usize,
) -> Result<usize, BoxError> {
    let ticks = secs * 100;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0usize;
    let mut calls = futures::stream::FuturesUnordered::new();
    for t in 0..ticks {
        // Records due by the end of this tick, so the total is exactly rate × secs.
        let due = (t + 1) * rate / 100;
        tick.tick().await;
        let at = now_us();
        let entries = (sent..due)
            .map(|j| entry(j, at))
            .collect::<Result<Vec<_>, _>>()?;
        sent = due;
        if !entries.is_empty() {
            calls.push(put_batch(k, stream, entries));
        }
        // Collect finished calls without waiting for slow ones.
        while let Some(Some(r)) = futures::FutureExt::now_or_never(calls.next()) {
            r?;
        }
    }
    while let Some(r) = calls.next().await {
        r?;
    }
    Ok(sent)
}

// ------------------------------------------------------------------ consumers

/// The consumers one run compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Consumer {
    Heatsink,
    /// heatsink with `early_read` off: the first GetRecords waits for the take.
    HeatsinkLate,
    /// heatsink asking `max_records` in every GetRecords (`page_records` = `max_records`).
    HeatsinkFixed,
    /// heatsink reading through enhanced fan-out, a fresh consumer a drain.
    HeatsinkFanOut,
    /// ruststream-kinesis with its in-process `MemoryLeaseStore`.
    Peer,
    /// ruststream-kinesis with its `DynamoLeaseStore` on the same DynamoDB as heatsink's leases.
    PeerDynamo,
    /// heatsink with the old cadence: a checkpoint per GetRecords batch of 1,000.
    HeatsinkOld,
}

impl Consumer {
    const ALL: [Consumer; 7] = [
        Consumer::Heatsink,
        Consumer::HeatsinkLate,
        Consumer::HeatsinkFixed,
        Consumer::HeatsinkFanOut,
        Consumer::Peer,
        Consumer::PeerDynamo,
        Consumer::HeatsinkOld,
    ];

    fn key(self) -> &'static str {
        match self {
            Consumer::Heatsink => "heatsink",
            Consumer::HeatsinkLate => "late",
            Consumer::HeatsinkFixed => "fixed",
            Consumer::HeatsinkFanOut => "fanout",
            Consumer::Peer => "peer",
            Consumer::PeerDynamo => "peer-dynamo",
            Consumer::HeatsinkOld => "old",
        }
    }

    fn label(self, workers: usize) -> String {
        match self {
            Consumer::Heatsink => format!("heatsink::stream x{workers}"),
            Consumer::HeatsinkLate => format!("heatsink x{workers}, no early reads"),
            Consumer::HeatsinkFixed => format!("heatsink x{workers}, fixed pages"),
            Consumer::HeatsinkFanOut => format!("heatsink x{workers}, fan-out"),
            Consumer::Peer => format!("ruststream-kinesis x{workers}, memory"),
            Consumer::PeerDynamo => format!("ruststream-kinesis x{workers}, DynamoDB"),
            Consumer::HeatsinkOld => format!("heatsink x{workers}, old cadence"),
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.key() == key)
    }

    fn is_peer(self) -> bool {
        matches!(self, Consumer::Peer | Consumer::PeerDynamo)
    }

    /// heatsink's settings for this variant.
    fn tune(self, c: &mut WorkerConfig) {
        match self {
            Consumer::HeatsinkLate => c.early_read = false,
            Consumer::HeatsinkFixed => c.page_records = i32::MAX,
            Consumer::HeatsinkOld => {
                c.max_records = Some(1_000);
                c.checkpoint_interval = Duration::ZERO;
                c.checkpoint_every_records = 1;
                c.prefetch_batches = 1;
            }
            _ => {}
        }
    }
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
    // 200 ms at the tip (the minimum; the default is 1 s), as the peer is run.
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

/// Starts `workers` heatsink workers of `app` reading through `reader`, counting into `count`;
/// returns their stop handles, their tasks and their stats.
#[allow(clippy::too_many_arguments)]
fn heatsink_workers(
    reader: &Reader,
    kinesis: &aws_sdk_kinesis::Client,
    config: &aws_config::SdkConfig,
    stream: &str,
    leases_table: &str,
    app: &str,
    workers: usize,
    count: &Count,
    tune: impl Fn(&mut WorkerConfig),
) -> (Vec<Stop>, Vec<Running>, Vec<WorkerStats>) {
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    let mut stats = Vec::new();
    for w in 0..workers {
        let id = format!("{app}-w{w}");
        let mut c = worker_config(&id);
        tune(&mut c);
        let kinesis = kinesis.clone();
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
    (stops, tasks, stats)
}

async fn stop_all(stops: Vec<Stop>, tasks: Vec<Running>) {
    for s in stops {
        let _ = s.send(());
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Starts `brokers` ruststream-kinesis brokers sharing one lease store, reading from the
/// horizon, counting into `count`.
async fn peer_brokers(
    config: &aws_config::SdkConfig,
    stream: &str,
    brokers: usize,
    store: Arc<dyn LeaseStore>,
    count: &Count,
) -> Result<Vec<tokio::task::JoinHandle<()>>, BoxError> {
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
                    count.latency(std::iter::once(msg.payload()));
                    count.delivered.fetch_add(1, Ordering::Relaxed);
                    if let KinesisPosition::Sequence { shard, sequence } = msg.position()
                        && count
                            .seen
                            .lock()
                            .is_ok_and(|mut s| s.insert(&shard, &sequence))
                    {
                        count.distinct.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = msg.ack().await;
                }
            }
        }));
    }
    Ok(tasks)
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

// ------------------------------------------------------------------ one drain (child process)

/// What a child reports (one `RESULT key=value ...` line).
#[derive(Clone, Debug, Default)]
struct Outcome {
    first: f64,
    all: f64,
    distinct: u64,
    redelivered: u64,
    writes: u64,
    startup_ms: u64,
    early: (u64, u64),
    /// CPU seconds between the clock's start and the last record: the child, then each
    /// `BENCH_CPU_PIDS` process.
    cpu: Vec<f64>,
    cpu_names: Vec<String>,
    /// Latency mode: p50, p99, max in ms, and records measured.
    latency: Option<(f64, f64, f64, usize)>,
}

impl Outcome {
    fn line(&self) -> String {
        let mut s = format!(
            "RESULT first={:.4} all={:.4} distinct={} redelivered={} writes={} startup_ms={} early_used={} early_dropped={}",
            self.first,
            self.all,
            self.distinct,
            self.redelivered,
            self.writes,
            self.startup_ms,
            self.early.0,
            self.early.1
        );
        for (name, cpu) in self.cpu_names.iter().zip(&self.cpu) {
            s.push_str(&format!(" cpu:{name}={cpu:.3}"));
        }
        if let Some((p50, p99, max, n)) = self.latency {
            s.push_str(&format!(
                " p50={p50:.2} p99={p99:.2} max={max:.2} measured={n}"
            ));
        }
        s
    }

    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("RESULT ")?;
        let mut o = Outcome::default();
        let mut lat = (0.0, 0.0, 0.0, 0usize);
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            let f = || v.parse::<f64>().unwrap_or(f64::NAN);
            let u = || v.parse::<u64>().unwrap_or(0);
            match k {
                "first" => o.first = f(),
                "all" => o.all = f(),
                "distinct" => o.distinct = u(),
                "redelivered" => o.redelivered = u(),
                "writes" => o.writes = u(),
                "startup_ms" => o.startup_ms = u(),
                "early_used" => o.early.0 = u(),
                "early_dropped" => o.early.1 = u(),
                "p50" => lat.0 = f(),
                "p99" => lat.1 = f(),
                "max" => lat.2 = f(),
                "measured" => {
                    lat.3 = v.parse().unwrap_or(0);
                    o.latency = Some(lat);
                }
                _ => {
                    if let Some(name) = k.strip_prefix("cpu:") {
                        o.cpu_names.push(name.to_owned());
                        o.cpu.push(f());
                    }
                }
            }
        }
        Some(o)
    }
}

/// The p-th percentile (0..=100) of sorted `v`, in ms.
fn percentile_ms(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() - 1) as f64 * p / 100.0).round() as usize;
    v[i.min(v.len() - 1)] as f64 / 1_000.0
}

fn env_str(name: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("{name} not set").into())
}

/// The child's side: one drain (or latency window) of `BENCH_CHILD`'s consumer.
async fn child() -> Result<(), BoxError> {
    let consumer = Consumer::from_key(&env_str("BENCH_CHILD")?).ok_or("unknown BENCH_CHILD")?;
    let stream = env_str("BENCH_CHILD_STREAM")?;
    let leases_table = env_str("BENCH_CHILD_LEASES")?;
    let app = env_str("BENCH_CHILD_APP")?;
    let workers = env_usize("BENCH_CHILD_WORKERS", 1);
    let n = env_usize("BENCH_CHILD_N", 0) as u64;
    let latency_mode = std::env::var("BENCH_CHILD_LATENCY").as_deref() == Ok("1");
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let meter = CpuMeter::new(
        "consumer",
        &std::env::var("BENCH_CPU_PIDS").unwrap_or_default(),
    );
    let count = if latency_mode {
        Count::with_latencies()
    } else {
        Count::default()
    };

    // Set-up the clock does not include: a registered fan-out consumer, the peer's table.
    let mut fan_out = None;
    let mut peer_table = None;
    let reader = match consumer {
        Consumer::HeatsinkFanOut => {
            let source = FanOutSource::register(kinesis.clone(), &stream, &app).await?;
            let arn = source.consumer_arn().to_owned();
            fan_out = Some(source);
            Reader::FanOut(arn)
        }
        _ => Reader::Polling,
    };
    let store: Arc<dyn LeaseStore> = if consumer == Consumer::PeerDynamo {
        let table = format!("{leases_table}-peer-{app}");
        peer_lease_table(&ddb, &table).await?;
        peer_table = Some(table.clone());
        Arc::new(DynamoLeaseStore::new(&config, table.as_str()))
    } else {
        Arc::new(MemoryLeaseStore::new())
    };

    let before = meter.sample();
    let start = Instant::now();
    let mut heatsink = None;
    let mut peer = None;
    if consumer.is_peer() {
        peer = Some(peer_brokers(&config, &stream, workers, store, &count).await?);
    } else {
        heatsink = Some(heatsink_workers(
            &reader,
            &kinesis,
            &config,
            &stream,
            &leases_table,
            &app,
            workers,
            &count,
            |c| consumer.tune(c),
        ));
    }
    println!("READY");
    // In latency mode the CPU counts from the first record on: the steady state.
    let mut from = before;
    if latency_mode {
        wait_count(&count.distinct, 1, start).await?;
        from = meter.sample();
    }
    let took = wait_count(&count.distinct, n, start).await;
    let after = meter.sample();
    let distinct = count.distinct.load(Ordering::Relaxed);
    let delivered = count.delivered.load(Ordering::Relaxed);
    let mut outcome = Outcome {
        distinct,
        redelivered: delivered.saturating_sub(distinct),
        cpu: cpu_delta(&from, &after),
        cpu_names: meter.names(),
        ..Outcome::default()
    };
    if let Some((stops, tasks, stats)) = heatsink {
        stop_all(stops, tasks).await;
        outcome.writes = stats.iter().map(WorkerStats::checkpoint_writes).sum();
        outcome.startup_ms = stats.iter().map(WorkerStats::startup_ms).max().unwrap_or(0);
        outcome.early = stats
            .iter()
            .map(WorkerStats::early_reads)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    }
    for t in peer.into_iter().flatten() {
        t.abort();
    }
    if let Some(source) = fan_out {
        let _ = source.deregister().await;
    }
    if let Some(table) = peer_table {
        let _ = ddb.delete_table().table_name(&table).send().await;
    }
    let took = took?;
    outcome.first = took.first.as_secs_f64();
    outcome.all = took.all.as_secs_f64();
    if let Some(lat) = &count.latencies {
        let mut v = lat.lock().map(|v| v.clone()).unwrap_or_default();
        v.sort_unstable();
        outcome.latency = Some((
            percentile_ms(&v, 50.0),
            percentile_ms(&v, 99.0),
            percentile_ms(&v, 100.0),
            v.len(),
        ));
    }
    println!("{}", outcome.line());
    Ok(())
}

/// A running child: its `READY` and `RESULT` lines arrive on `lines`.
struct Child {
    process: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

/// Where children read, and whose CPU they measure.
#[derive(Clone, Copy)]
struct Target<'a> {
    stream: &'a str,
    leases: &'a str,
    /// The Kinesis endpoint (`AWS_ENDPOINT_URL_KINESIS` of the child).
    kinesis_url: &'a str,
    /// `name=PID,...` of the emulators (`BENCH_CPU_PIDS` of the child).
    cpu_pids: &'a str,
}

/// What one child does: `consumer` with `workers` workers as application `app`, until `n`
/// distinct records arrived; `latency`: the records carry put times.
struct Job<'a> {
    consumer: Consumer,
    app: &'a str,
    workers: usize,
    n: u64,
    latency: bool,
}

/// Starts this bench as a child doing `job` on `target`.
fn spawn_child(target: Target<'_>, job: Job<'_>) -> Result<Child, BoxError> {
    let mut process = Command::new(std::env::current_exe()?)
        .env("BENCH_CHILD", job.consumer.key())
        .env("BENCH_CHILD_STREAM", target.stream)
        .env("BENCH_CHILD_LEASES", target.leases)
        .env("BENCH_CHILD_APP", job.app)
        .env("BENCH_CHILD_WORKERS", job.workers.to_string())
        .env("BENCH_CHILD_N", job.n.to_string())
        .env("BENCH_CHILD_LATENCY", if job.latency { "1" } else { "0" })
        .env("BENCH_CPU_PIDS", target.cpu_pids)
        .env("AWS_ENDPOINT_URL_KINESIS", target.kinesis_url)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = process.stdout.take().ok_or("child without stdout")?;
    let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Child { process, lines })
}

impl Child {
    /// Waits for a line starting with `prefix` (other lines are passed through).
    async fn line(&mut self, prefix: &str) -> Result<String, BoxError> {
        while let Some(line) = self.lines.recv().await {
            if line.starts_with(prefix) {
                return Ok(line);
            }
            println!("   child: {line}");
        }
        Err(format!("the child ended before its {prefix} line").into())
    }

    async fn outcome(mut self) -> Result<Outcome, BoxError> {
        let line = self.line("RESULT").await;
        let status = tokio::task::spawn_blocking(move || self.process.wait()).await??;
        let line = line.map_err(|e| format!("{e} ({status})"))?;
        Outcome::parse(&line).ok_or_else(|| format!("bad child line: {line}").into())
    }
}

// ------------------------------------------------------------------ the parent

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|s| (s * 1000.0).round() / 1000.0).collect()
}

/// Per 100,000 records, the median over `runs` of each process's CPU seconds.
fn cpu_per_100k(runs: &[Outcome], n: u64) -> Vec<(String, f64)> {
    let Some(first) = runs.first() else {
        return vec![];
    };
    first
        .cpu_names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let v = runs
                .iter()
                .map(|o| o.cpu.get(i).copied().unwrap_or(f64::NAN) * 100_000.0 / n as f64)
                .collect();
            (name.clone(), median(v))
        })
        .collect()
}

fn cpu_text(cpu: &[(String, f64)]) -> String {
    cpu.iter()
        .map(|(n, v)| format!("{n} {v:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
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

/// The consumers of one ABBA round: heatsink, the peer, then the variants asked for.
fn consumers() -> Vec<Consumer> {
    let mut wanted: Vec<String> = std::env::var("BENCH_VARIANTS")
        .unwrap_or_else(|_| "late,fixed".into())
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect();
    if std::env::var("BENCH_FANOUT").as_deref() == Ok("1") {
        wanted.push("fanout".into());
    }
    if std::env::var("BENCH_PEER_DYNAMO").as_deref() == Ok("1") {
        wanted.push("peer-dynamo".into());
    }
    let mut out = vec![Consumer::Heatsink, Consumer::Peer];
    for c in [
        Consumer::HeatsinkLate,
        Consumer::HeatsinkFixed,
        Consumer::HeatsinkFanOut,
        Consumer::PeerDynamo,
    ] {
        if wanted.iter().any(|w| w == c.key()) {
            out.push(c);
        }
    }
    out
}

/// The ABBA drains of one stream: one table per worker count.
async fn drains(
    target: Target<'_>,
    shards: usize,
    n: u64,
    runs: usize,
    next_app: &mut impl FnMut(&str) -> String,
) -> Result<(), BoxError> {
    let round = consumers();
    for workers in env_list("BENCH_WORKERS", "1,3") {
        // Warm-up, not counted: a drain of each of heatsink and the peer.
        for c in [Consumer::Heatsink, Consumer::Peer] {
            let app = next_app("warm");
            let job = Job {
                consumer: c,
                app: &app,
                workers,
                n,
                latency: false,
            };
            spawn_child(target, job)?.outcome().await?;
        }
        let mut results: HashMap<&'static str, Vec<Outcome>> = HashMap::new();
        let mut failed: HashMap<&'static str, String> = HashMap::new();
        for run in 0..runs {
            // Alternating order (ABC… …CBA): each consumer's mean position is the same.
            let mut order = round.clone();
            if run % 2 == 1 {
                order.reverse();
            }
            for c in order {
                if failed.contains_key(c.key()) {
                    continue;
                }
                let app = next_app(c.key());
                let job = Job {
                    consumer: c,
                    app: &app,
                    workers,
                    n,
                    latency: false,
                };
                let outcome = spawn_child(target, job)?.outcome().await;
                match outcome {
                    Ok(o) => results.entry(c.key()).or_default().push(o),
                    // The peer on DynamoDB leases writes a checkpoint per record, so it may not
                    // finish in time: reported, not fatal.
                    Err(e) if c == Consumer::PeerDynamo => {
                        failed.insert(c.key(), e.to_string());
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        println!(
            "\n{shards} shards, {n} records, {workers} worker(s) per consumer, {runs} runs (medians; CPU s per 100,000 records)"
        );
        println!(
            "{:<36} {:>8} {:>8} {:>10} {:>8} {:>9}   cpu s / 100k records",
            "consumer", "seconds", "1st rec", "records/s", "redeliv", "ckpt/1000"
        );
        let ours = results.get("heatsink").cloned().unwrap_or_default();
        let ours_s = median(ours.iter().map(|o| o.all).collect());
        let ours_cpu = cpu_per_100k(&ours, n);
        for c in &round {
            if let Some(e) = failed.get(c.key()) {
                println!("{:<36} did not finish: {e}", c.label(workers));
                continue;
            }
            let Some(rs) = results.get(c.key()) else {
                continue;
            };
            let all: Vec<f64> = rs.iter().map(|o| o.all).collect();
            let secs = median(all.clone());
            let redelivered: u64 = rs.iter().map(|o| o.redelivered).sum();
            let writes: u64 = rs.iter().map(|o| o.writes).sum();
            let cpu = cpu_per_100k(rs, n);
            let ckpt = if c.is_peer() {
                "-".to_owned()
            } else {
                format!(
                    "{:.2}",
                    writes as f64 * 1_000.0 / (n as f64 * rs.len() as f64)
                )
            };
            println!(
                "{:<36} {:>8.3} {:>8.3} {:>10.0} {:>8} {:>9}   {}   runs {:?}",
                c.label(workers),
                secs,
                median(rs.iter().map(|o| o.first).collect()),
                n as f64 / secs,
                redelivered,
                ckpt,
                cpu_text(&cpu),
                rounded(&all),
            );
            if *c == Consumer::Heatsink {
                let startup = median(rs.iter().map(|o| o.startup_ms as f64).collect());
                let early = rs
                    .iter()
                    .fold((0, 0), |a, o| (a.0 + o.early.0, a.1 + o.early.1));
                println!(
                    "{:<36} start-up work {startup} ms, early reads used/dropped {}/{}",
                    "", early.0, early.1
                );
            } else {
                // Each run's ratio, from the same ABBA round: robust to drift over the bench.
                let per_run: Vec<f64> = all
                    .iter()
                    .zip(ours.iter().map(|o| o.all))
                    .map(|(p, h)| p / h)
                    .collect();
                let cpu_ratio: Vec<String> = ours_cpu
                    .iter()
                    .zip(&cpu)
                    .map(|((name, h), (_, p))| format!("{name} {:.2}", h / p))
                    .collect();
                println!(
                    "{:<36} heatsink/this: speed {:.2} (per run {:?}), CPU {}",
                    "",
                    secs / ours_s,
                    rounded(&per_run),
                    cpu_ratio.join(", ")
                );
            }
        }
    }
    Ok(())
}

/// Put-to-processor latency at a steady rate, one consumer at a time on fresh streams.
async fn latency(
    kinesis: &aws_sdk_kinesis::Client,
    kinesis_url: &str,
    schema: &Schema,
    leases: &str,
    cpu_pids: &str,
    next_app: &mut impl FnMut(&str) -> String,
) -> Result<(), BoxError> {
    let secs = env_usize("BENCH_LATENCY_SECS", 0);
    if secs == 0 {
        return Ok(());
    }
    let rate = env_usize("BENCH_LATENCY_RATE", 2_000);
    let shards = env_usize("BENCH_LATENCY_SHARDS", 4);
    let rounds = env_usize("BENCH_LATENCY_ROUNDS", 1).max(1);
    let mut results: Vec<(Consumer, Outcome)> = Vec::new();
    for round in 0..rounds {
        let mut order = [Consumer::Heatsink, Consumer::Peer];
        if round % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let app = next_app("lat");
            let spec = StreamSpec {
                logical: "latency".into(),
                name: format!("{}{app}", schema.prefix()),
                shards: i32::try_from(shards)?,
            };
            schema::ensure_stream(kinesis, &spec).await?;
            let n = (rate * secs) as u64;
            let target = Target {
                stream: &spec.name,
                leases,
                kinesis_url,
                cpu_pids,
            };
            let job = Job {
                consumer: c,
                app: &app,
                workers: 1,
                n,
                latency: true,
            };
            let mut child = spawn_child(target, job)?;
            child.line("READY").await?;
            // Let the consumer take its shards and reach the (empty) tip before the load.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let sent = produce_steadily(kinesis, &spec.name, rate, secs).await?;
            let outcome = child.outcome().await?;
            if sent as u64 != n {
                return Err(format!("put {sent} records, expected {n}").into());
            }
            results.push((c, outcome));
            let _ = kinesis.delete_stream().stream_name(&spec.name).send().await;
        }
    }
    println!(
        "\nput-to-processor latency: {rate} records/s on {shards} shards for {secs} s, one consumer at a time (1 worker, 200 ms poll at the tip)"
    );
    for c in [Consumer::Heatsink, Consumer::Peer] {
        let rs: Vec<&Outcome> = results
            .iter()
            .filter(|(k, _)| *k == c)
            .map(|(_, o)| o)
            .collect();
        let lat: Vec<(f64, f64, f64, usize)> = rs.iter().filter_map(|o| o.latency).collect();
        let owned: Vec<Outcome> = rs.iter().map(|o| (*o).clone()).collect();
        println!(
            "{:<36} p50 {:?} ms, p99 {:?} ms, max {:?} ms (per round), records {:?}; cpu s / 100k records at this rate: {}",
            c.label(1),
            lat.iter().map(|l| l.0).collect::<Vec<_>>(),
            lat.iter().map(|l| l.1).collect::<Vec<_>>(),
            lat.iter().map(|l| l.2).collect::<Vec<_>>(),
            lat.iter().map(|l| l.3).collect::<Vec<_>>(),
            cpu_text(&cpu_per_100k(&owned, (rate * secs) as u64)),
        );
    }
    Ok(())
}

/// The old cadence (a child), then catch-up after UpdateShardCount and failover (in this
/// process), on `target`'s stream.
async fn extras(
    config: &aws_config::SdkConfig,
    kinesis: &aws_sdk_kinesis::Client,
    target: Target<'_>,
    shards: usize,
    records: usize,
) -> Result<(), BoxError> {
    let (stream, leases) = (target.stream, target.leases);
    let n = records as u64;
    let job = Job {
        consumer: Consumer::HeatsinkOld,
        app: "old",
        workers: 1,
        n,
        latency: false,
    };
    let old = spawn_child(target, job)?.outcome().await?;
    println!(
        "\n{:<36} {:>8.3} {:>8.3} {:>10.0} {:>8} {:>9.2}   (1 run)",
        Consumer::HeatsinkOld.label(1),
        old.all,
        old.first,
        n as f64 / old.all,
        old.redelivered,
        old.writes as f64 * 1_000.0 / n as f64
    );

    // Catch-up after a reshard: a caught-up worker, UpdateShardCount ×2, a new burst of records;
    // time from the last put until every new record went through the children.
    let count = Count::default();
    let (stops, tasks, _) = heatsink_workers(
        &Reader::Polling,
        kinesis,
        config,
        stream,
        leases,
        "catchup",
        1,
        &count,
        |_| {},
    );
    wait_count(&count.distinct, n, Instant::now()).await?;
    let before = count.distinct.load(Ordering::Relaxed);
    let resharded = kinesis
        .update_shard_count()
        .stream_name(stream)
        .target_shard_count(i32::try_from(shards * 2)?)
        .scaling_type(ScalingType::UniformScaling)
        .send()
        .await;
    match resharded {
        Err(e) => println!(
            "catch-up after UpdateShardCount: skipped, the endpoint refused it ({})",
            aws_sdk_kinesis::error::ProvideErrorMetadata::code(&e).unwrap_or("no answer")
        ),
        Ok(_) => {
            wait_active(kinesis, stream).await?;
            let burst = records / 2;
            produce(kinesis, stream, records, burst).await?;
            let took = wait_count(&count.distinct, before + burst as u64, Instant::now()).await?;
            println!(
                "catch-up after UpdateShardCount {shards}->{}: {burst} records drained {:.3} s after the last put (heatsink x1)",
                shards * 2,
                took.all.as_secs_f64()
            );
        }
    }
    stop_all(stops, tasks).await;

    // Failover: 3 workers, 10 s lease, a trickle of records; kill one; seconds until every
    // shard it held is read again by a survivor.
    let count = Count::default();
    let (mut stops, mut tasks, stats) = heatsink_workers(
        &Reader::Polling,
        kinesis,
        config,
        stream,
        leases,
        "failover",
        3,
        &count,
        |c| {
            c.lease_duration = Duration::from_secs(10);
            c.renew_interval = Duration::from_secs(3);
        },
    );
    let producer = {
        let kinesis = kinesis.clone();
        let name = stream.to_owned();
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
    Ok(())
}

async fn bench() -> Result<(), BoxError> {
    let records = env_usize("BENCH_RECORDS", 8_000);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    // `BENCH_KINESIS=standin`: Kinesis is the in-memory stand-in (its own process), so that the
    // clients, not an emulator, bind.
    let (standin, kinesis_url, kinesis) = standin::endpoint(&config, "reads")?;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let tag = heatsink::clock::now_ms() % 1_000_000;
    let schema = Schema::new(format!("hs-bench-{tag:06}-"));
    let leases = schema.table(Table::Leases);
    schema::ensure_table(&ddb, &leases).await?;
    let ddb_url = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_default();
    let cpu_pids = emulator_pids(&[("kinesis", &kinesis_url), ("dynamodb", &ddb_url)]);
    println!(
        "consumer bench: Kinesis {kinesis_url}{}, DynamoDB {ddb_url}; CPU of {}",
        if standin.is_some() { " (stand-in)" } else { "" },
        if cpu_pids.is_empty() {
            "the consumers only (no emulator found)"
        } else {
            cpu_pids.as_str()
        }
    );
    let mut app = 0usize;
    let mut next_app = |tag: &str| {
        app += 1;
        format!("{tag}{app}")
    };
    let mut streams = Vec::new();
    for shards in env_list("BENCH_SHARDS", "4") {
        let stream = StreamSpec {
            logical: "consumer".into(),
            name: format!("{}consumer-{shards}", schema.prefix()),
            shards: i32::try_from(shards)?,
        };
        schema::ensure_stream(&kinesis, &stream).await?;
        let t = Instant::now();
        produce(&kinesis, &stream.name, 0, records).await?;
        println!(
            "put {records} records of {RECORD_BYTES} B on {shards} shards of {} in {:.1} s",
            stream.name,
            t.elapsed().as_secs_f64()
        );
        let target = Target {
            stream: &stream.name,
            leases: &leases.name,
            kinesis_url: &kinesis_url,
            cpu_pids: &cpu_pids,
        };
        drains(target, shards, records as u64, runs, &mut next_app).await?;
        streams.push((stream.name, shards));
    }
    latency(
        &kinesis,
        &kinesis_url,
        &schema,
        &leases.name,
        &cpu_pids,
        &mut next_app,
    )
    .await?;
    if std::env::var("BENCH_EXTRAS").as_deref() != Ok("0")
        && let Some((stream, shards)) = streams.first()
    {
        let target = Target {
            stream,
            leases: &leases.name,
            kinesis_url: &kinesis_url,
            cpu_pids: &cpu_pids,
        };
        extras(&config, &kinesis, target, *shards, records).await?;
    }
    for (stream, _) in &streams {
        let _ = kinesis
            .delete_stream()
            .stream_name(stream)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }
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
    let is_child = std::env::var_os("BENCH_CHILD").is_some();
    let result = if std::env::var_os("BENCH_STANDIN_SERVE").is_some() {
        runtime.block_on(standin::serve())
    } else if is_child {
        runtime.block_on(child())
    } else {
        runtime.block_on(bench())
    };
    if let Err(e) = result {
        eprintln!(
            "consumer bench{} failed: {e}",
            if is_child { " child" } else { "" }
        );
        std::process::exit(1);
    }
}
