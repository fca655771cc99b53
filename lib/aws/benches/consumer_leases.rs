//! What `heatsink::stream::Worker`'s leases cost in DynamoDB at the default settings: every
//! request the workers' lease-table client sends is counted, by what it is for, with the
//! capacity DynamoDB reports for it (`ReturnConsumedCapacity=TOTAL` is set on each request by
//! the counting interceptor; nothing else about the calls changes).
//!
//! Per worker count in `BENCH_WORKERS` (default 1,2): that many workers with
//! `WorkerConfig::new`'s defaults (10 s leases, renewals every third of it, a round every 3 s,
//! checkpoints at most once a second while records flow) read a `BENCH_SHARDS`-shard stream
//! (default 4) while `BENCH_RATE` records a second (default 40) are put; after `BENCH_SETTLE`
//! seconds of start-up (default 20; not counted) the requests of the next `BENCH_SECS` seconds
//! (default 120) are counted and scaled to one hour. Printed per purpose: requests and capacity
//! units per shard-hour (renewals, checkpoints: one of each per held lease) or per worker-hour
//! (lease reads, announcements: one per worker and round or renewal period).
//!
//! ```text
//! localstack/stack up --kinesalite && eval "$(localstack/stack env --lane kinesalite)"
//! cargo bench -p heatsink --features full --bench consumer_leases
//! ```
//! The lease table is on whatever `AWS_ENDPOINT_URL_DYNAMODB` names (dynoxide on the
//! kinesalite and dynoxide lanes, which reports capacity as DynamoDB computes it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::{
    batch_get_item::{BatchGetItemInput, BatchGetItemOutput},
    delete_item::{DeleteItemInput, DeleteItemOutput},
    get_item::{GetItemInput, GetItemOutput},
    put_item::{PutItemInput, PutItemOutput},
    query::{QueryInput, QueryOutput},
    update_item::{UpdateItemInput, UpdateItemOutput},
};
use aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use heatsink::schema::{self, Schema, StreamSpec, Table};
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, StreamError, Worker, WorkerConfig,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a lease-table request is for, read from its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Purpose {
    /// UpdateItem extending a held lease.
    Renewal,
    /// UpdateItem moving a checkpoint.
    Checkpoint,
    /// PutItem of the worker's own announcement row.
    Announcement,
    /// Query of the application's rows (every round).
    LeaseRead,
    /// UpdateItem taking or stealing a lease.
    Take,
    /// UpdateItem giving a lease up (shutdown, shard end).
    Release,
    /// PutItem creating a lease row.
    CreateRow,
    /// DeleteItem of an announcement or a finished lease.
    Delete,
    /// GetItem / BatchGetItem (read-backs).
    PointRead,
    /// Anything else (table management).
    Other,
}

impl Storable for Purpose {
    type Storer = StoreReplace<Self>;
}

impl Purpose {
    /// Counted per held lease (shard-hour) rather than per worker (worker-hour).
    fn per_shard(self) -> bool {
        matches!(self, Purpose::Renewal | Purpose::Checkpoint)
    }

    /// From an update expression with its placeholders (`#u0`, ...) resolved to the names.
    fn of_update(input: &UpdateItemInput) -> Self {
        let mut expr = input.update_expression.clone().unwrap_or_default();
        if let Some(names) = &input.expression_attribute_names {
            // Longest placeholder first, so `#u1` never rewrites part of `#u10`.
            let mut names: Vec<_> = names.iter().collect();
            names.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
            for (placeholder, name) in names {
                expr = expr.replace(placeholder.as_str(), name);
            }
        }
        if expr.contains("REMOVE owner") {
            Purpose::Release
        } else if expr.contains("owner =") {
            Purpose::Take
        } else if expr.contains("checkpoint =") {
            Purpose::Checkpoint
        } else if expr.contains("expires_at_ms =") {
            Purpose::Renewal
        } else {
            Purpose::Other
        }
    }
}

/// Requests, failed requests (a refused condition still costs its write) and capacity units.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    requests: u64,
    failed: u64,
    units: f64,
}

/// Counts every request of the clients it is attached to, by [`Purpose`], while `on`.
#[derive(Clone, Debug, Default)]
struct Counter {
    tally: Arc<Mutex<BTreeMap<Purpose, Tally>>>,
    on: Arc<std::sync::atomic::AtomicBool>,
}

impl Counter {
    fn start(&self) {
        if let Ok(mut t) = self.tally.lock() {
            t.clear();
        }
        self.on.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn stop(&self) -> BTreeMap<Purpose, Tally> {
        self.on.store(false, std::sync::atomic::Ordering::SeqCst);
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

fn units(c: Option<&ConsumedCapacity>) -> f64 {
    c.and_then(ConsumedCapacity::capacity_units).unwrap_or(0.0)
}

impl Intercept for Counter {
    fn name(&self) -> &'static str {
        "lease-cost counter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let total = Some(ReturnConsumedCapacity::Total);
        let input = context.input_mut();
        let purpose = if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = total;
            Purpose::of_update(i)
        } else if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity = total;
            let announcement = i
                .item
                .as_ref()
                .and_then(|item| item.get("shard_id"))
                .and_then(|v| v.as_s().ok())
                .is_some_and(|k| k.starts_with(heatsink::stream::WORKER_ROW_PREFIX));
            if announcement {
                Purpose::Announcement
            } else {
                Purpose::CreateRow
            }
        } else if let Some(i) = input.downcast_mut::<QueryInput>() {
            i.return_consumed_capacity = total;
            Purpose::LeaseRead
        } else if let Some(i) = input.downcast_mut::<DeleteItemInput>() {
            i.return_consumed_capacity = total;
            Purpose::Delete
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = total;
            Purpose::PointRead
        } else if let Some(i) = input.downcast_mut::<BatchGetItemInput>() {
            i.return_consumed_capacity = total;
            Purpose::PointRead
        } else {
            Purpose::Other
        };
        cfg.interceptor_state().store_put(purpose);
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if !self.on.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let purpose = cfg.load::<Purpose>().copied().unwrap_or(Purpose::Other);
        let (ok, used) = match context.output_or_error() {
            Some(Ok(out)) => {
                let used = if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                    units(o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<PutItemOutput>() {
                    units(o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<QueryOutput>() {
                    units(o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<DeleteItemOutput>() {
                    units(o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                    units(o.consumed_capacity())
                } else if let Some(o) = out.downcast_ref::<BatchGetItemOutput>() {
                    o.consumed_capacity().iter().map(|c| units(Some(c))).sum()
                } else {
                    0.0
                };
                (true, used)
            }
            _ => (false, 0.0),
        };
        if let Ok(mut t) = self.tally.lock() {
            let e = t.entry(purpose).or_default();
            e.requests += 1;
            e.units += used;
            if !ok {
                e.failed += 1;
            }
        }
        Ok(())
    }
}

/// Acknowledges every batch.
struct Discard;

impl RecordProcessor for Discard {
    async fn process(&self, _batch: &ProcessBatch) -> Result<(), StreamError> {
        Ok(())
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Puts `rate` records a second, spread over 64 keys, until aborted.
async fn trickle(k: aws_sdk_kinesis::Client, stream: String, rate: usize) {
    let per_tick = rate.div_ceil(10).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut j = 0usize;
    loop {
        tick.tick().await;
        let entries: Result<Vec<_>, _> = (0..per_tick)
            .map(|i| {
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("k{}", (j + i) % 64))
                    .data(Blob::new(vec![b'x'; 100]))
                    .build()
            })
            .collect();
        j += per_tick;
        if let Ok(entries) = entries {
            let _ = k
                .put_records()
                .stream_name(&stream)
                .set_records(Some(entries))
                .send()
                .await;
        }
    }
}

async fn bench() -> Result<(), BoxError> {
    let shards = env_usize("BENCH_SHARDS", 4);
    let rate = env_usize("BENCH_RATE", 40);
    let settle = Duration::from_secs(env_usize("BENCH_SETTLE", 20) as u64);
    let window = Duration::from_secs(env_usize("BENCH_SECS", 120) as u64);
    let worker_counts: Vec<usize> = std::env::var("BENCH_WORKERS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let counter = Counter::default();
    let counted = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&config)
            .interceptor(counter.clone())
            .build(),
    );
    let tag = heatsink::clock::now_ms() % 1_000_000;
    let schema = Schema::new(format!("hs-lease-{tag:06}-"));
    let leases = schema.table(Table::Leases);
    schema::ensure_table(&ddb, &leases).await?;
    let stream = StreamSpec {
        logical: "leases".into(),
        name: format!("{}leases", schema.prefix()),
        shards: i32::try_from(shards)?,
    };
    schema::ensure_stream(&kinesis, &stream).await?;
    let producer = tokio::spawn(trickle(kinesis.clone(), stream.name.clone(), rate));
    let defaults = WorkerConfig::new("defaults");
    println!(
        "lease cost: {shards} shards, {rate} records/s, defaults: lease {:?}, round every {:?}, shard sync every {:?}, checkpoint every {:?} or {} records; {:?} counted after {:?}",
        defaults.lease_duration,
        defaults.renew_interval,
        defaults.sync_interval,
        defaults.checkpoint_interval,
        defaults.checkpoint_every_records,
        window,
        settle
    );
    for (run, workers) in worker_counts.into_iter().enumerate() {
        let app = format!("cost{run}");
        let mut stops = Vec::new();
        let mut tasks = Vec::new();
        for w in 0..workers {
            let leases = LeaseTable::new(counted.clone(), &leases.name, &app);
            let source = KinesisSource::new(kinesis.clone(), &stream.name);
            let worker = Worker::new(
                source,
                leases,
                Discard,
                WorkerConfig::new(format!("{app}-w{w}")),
            );
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            stops.push(tx);
            tasks.push(tokio::spawn(worker.run(async move {
                let _ = rx.await;
            })));
        }
        tokio::time::sleep(settle).await;
        counter.start();
        let start = Instant::now();
        tokio::time::sleep(window).await;
        let tally = counter.stop();
        let secs = start.elapsed().as_secs_f64();
        for s in stops {
            let _ = s.send(());
        }
        for t in tasks {
            let _ = t.await;
        }
        let hours = secs / 3_600.0;
        println!(
            "\n{workers} worker(s) on {shards} shards, {secs:.0} s counted (per hour: requests, capacity units)"
        );
        println!(
            "{:<14} {:>9} {:>7} {:>10} {:>12} {:>14} {:>12}",
            "purpose", "requests", "failed", "units", "req / hour", "req / unit-h", "units / u-h"
        );
        let (mut per_shard, mut per_worker) = ((0.0, 0.0), (0.0, 0.0));
        for (purpose, t) in &tally {
            let (unit, label) = if purpose.per_shard() {
                (shards as f64, "shard")
            } else {
                (workers as f64, "worker")
            };
            let req = t.requests as f64 / hours / unit;
            let cu = t.units / hours / unit;
            if purpose.per_shard() {
                per_shard = (per_shard.0 + req, per_shard.1 + cu);
            } else {
                per_worker = (per_worker.0 + req, per_worker.1 + cu);
            }
            println!(
                "{:<14} {:>9} {:>7} {:>10.1} {:>12.0} {:>14} {:>12.1}",
                format!("{purpose:?}"),
                t.requests,
                t.failed,
                t.units,
                t.requests as f64 / hours,
                format!("{req:.0} /{label}"),
                cu
            );
        }
        println!(
            "per shard-hour: {:.0} requests, {:.1} capacity units; per worker-hour: {:.0} requests, {:.1} capacity units",
            per_shard.0, per_shard.1, per_worker.0, per_worker.1
        );
    }
    producer.abort();
    let _ = kinesis
        .delete_stream()
        .stream_name(&stream.name)
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
            "skip: consumer_leases bench needs AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB (the local stack)"
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("consumer_leases bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(bench()) {
        eprintln!("consumer_leases bench failed: {e}");
        std::process::exit(1);
    }
}
