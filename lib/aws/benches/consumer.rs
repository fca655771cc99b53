//! Consumer throughput on kinesis-mock: `heatsink::stream::Worker` (1 and 3 workers, DynamoDB
//! leases) side by side with the peer crate `ruststream-kinesis` (1 and 3 brokers sharing one
//! in-process lease store) draining the same multi-shard stream in the same run, then catch-up
//! time after UpdateShardCount.
//!
//! ```text
//! AWS_ENDPOINT_URL_KINESIS=… AWS_ENDPOINT_URL_DYNAMODB=… cargo bench -p heatsink --bench consumer
//! ```
//! Knobs (env): `BENCH_RECORDS` (default 8000), `BENCH_SHARDS` (default 4).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ScalingType, StreamStatus};
use futures::StreamExt;
use heatsink::schema::{self, Schema, StreamSpec, Table};
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, StreamError, Worker, WorkerConfig,
};
use ruststream::{Broker, IncomingMessage, Seekable, Seeker, Subscriber};
use ruststream_kinesis::{KinesisBroker, KinesisPosition, KinesisStream, MemoryLeaseStore};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Stops one worker gracefully.
type Stop = tokio::sync::oneshot::Sender<()>;
/// One running worker.
type Running = tokio::task::JoinHandle<Result<(), StreamError>>;

const TIMEOUT: Duration = Duration::from_secs(120);

struct Count(Arc<AtomicU64>);

impl RecordProcessor for Count {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        self.0
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        Ok(())
    }
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

/// Waits until `count` reaches `target`; the time is measured from `start`.
async fn wait_count(count: &AtomicU64, target: u64, start: Instant) -> Result<Duration, BoxError> {
    while count.load(Ordering::Relaxed) < target {
        if start.elapsed() > TIMEOUT {
            return Err(format!(
                "timed out at {} of {target} records",
                count.load(Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(start.elapsed())
}

fn worker_config(id: &str) -> WorkerConfig {
    let mut c = WorkerConfig::new(id);
    c.renew_interval = Duration::from_secs(1);
    c.sync_interval = Duration::from_secs(2);
    c.idle_poll = Duration::from_millis(200);
    // The lease table may be moto's, whose conditional writes are not atomic under concurrency.
    c.verify_takes = std::env::var("HEATSINK_VERIFY_TAKES").as_deref() != Ok("0");
    c
}

/// Starts `workers` heatsink workers of `app`; returns the shared count and their stop handles.
fn heatsink_workers(
    config: &aws_config::SdkConfig,
    stream: &str,
    leases_table: &str,
    app: &str,
    workers: usize,
) -> (Arc<AtomicU64>, Vec<Stop>, Vec<Running>) {
    let count = Arc::new(AtomicU64::new(0));
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let worker = Worker::new(
            KinesisSource::new(aws_sdk_kinesis::Client::new(config), stream),
            LeaseTable::new(aws_sdk_dynamodb::Client::new(config), leases_table, app),
            Count(Arc::clone(&count)),
            worker_config(&format!("{app}-w{w}")),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push(tx);
        tasks.push(tokio::spawn(worker.run(async move {
            let _ = rx.await;
        })));
    }
    (count, stops, tasks)
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
) -> Result<(Arc<AtomicU64>, Vec<tokio::task::JoinHandle<()>>), BoxError> {
    let count = Arc::new(AtomicU64::new(0));
    let store = Arc::new(MemoryLeaseStore::new());
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
        let count = Arc::clone(&count);
        tasks.push(tokio::spawn(async move {
            let _keep = connected;
            let mut messages = sub.stream();
            while let Some(msg) = messages.next().await {
                if let Ok(msg) = msg {
                    count.fetch_add(1, Ordering::Relaxed);
                    let _ = msg.ack().await;
                }
            }
        }));
    }
    Ok((count, tasks))
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
    println!("{:<34} {:>10} {:>12}", "consumer", "seconds", "records/s");
    let n = records as u64;
    let mut results = Vec::new();
    for workers in [1usize, 3] {
        let start = Instant::now();
        let (count, stops, tasks) = heatsink_workers(
            &config,
            &stream.name,
            &leases.name,
            &format!("drain{workers}"),
            workers,
        );
        let took = wait_count(&count, n, start).await?;
        stop_all(stops, tasks).await;
        let rate = n as f64 / took.as_secs_f64();
        println!(
            "{:<34} {:>10.3} {:>12.0}",
            format!("heatsink::stream x{workers}"),
            took.as_secs_f64(),
            rate
        );
        results.push(rate);

        // Timed from before connecting, like heatsink's (whose time includes its first round).
        let start = Instant::now();
        let (count, tasks) = peer_brokers(&config, &stream.name, workers).await?;
        let took = wait_count(&count, n, start).await;
        for t in tasks {
            t.abort();
        }
        match took {
            Ok(took) => {
                let peer = n as f64 / took.as_secs_f64();
                println!(
                    "{:<34} {:>10.3} {:>12.0}   (heatsink/peer = {:.2})",
                    format!("ruststream-kinesis 0.7.1 x{workers}"),
                    took.as_secs_f64(),
                    peer,
                    rate / peer
                );
            }
            Err(e) => println!("ruststream-kinesis 0.7.1 x{workers}: {e}"),
        }
    }

    // Catch-up after a reshard: a caught-up worker, UpdateShardCount ×2, a new burst of records;
    // time from the last put until every new record went through the children.
    let (count, stops, tasks) = heatsink_workers(&config, &stream.name, &leases.name, "drain1", 1);
    // drain1 checkpointed everything above; wait for it to pick its leases back up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = count.load(Ordering::Relaxed);
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
    let took = wait_count(&count, before + burst as u64, Instant::now()).await?;
    stop_all(stops, tasks).await;
    println!(
        "catch-up after UpdateShardCount {shards}->{}: {burst} records drained {:.3} s after the last put (heatsink x1)",
        shards * 2,
        took.as_secs_f64()
    );
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
