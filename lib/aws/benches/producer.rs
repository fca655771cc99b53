//! Producer throughput on kinesis-mock: `heatsink::kinesis::Producer` with KPL aggregation,
//! without it, and the naive way (one `PutRecord` call per record, awaited in turn), side by
//! side in one criterion run, in alternating order after criterion's warm-up (round 0
//! aggregated → plain → naive, round 1 the reverse).
//!
//! Each iteration puts `BENCH_RECORDS` (default 200) user records of 100 bytes over 1,000 keys
//! into one 4-shard stream, from `send` of the first to the end of `shutdown` (every record
//! acknowledged). Criterion reports records/s as its throughput; PutRecords (or PutRecord)
//! requests per 1,000 records are counted over every iteration and printed after each group.
//! kinesis-mock, not the producer, bounds the plain and naive rates (it answers one call at a
//! time, slowly), so record counts are small to keep the run to a few minutes.
//!
//! ```text
//! eval "$(localstack/stack env)"
//! cargo bench -p heatsink --features full --bench producer
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use criterion::{Criterion, Throughput};
use heatsink::kinesis::{Producer, ProducerConfig};
use heatsink::schema::{self, StreamSpec};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MODES: [&str; 3] = ["aggregated", "plain", "naive PutRecord"];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Put `n` records one way; returns the requests it took.
async fn put(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    mode: &str,
    n: usize,
    round: u64,
) -> Result<u64, BoxError> {
    let key = |i: usize| format!("user-{round}-{}", i % 1_000);
    let data = |i: usize| format!("{{\"i\":{i:>10},\"pad\":\"{}\"}}", "x".repeat(76)).into_bytes();
    if mode == "naive PutRecord" {
        for i in 0..n {
            k.put_record()
                .stream_name(stream)
                .partition_key(key(i))
                .data(Blob::new(data(i)))
                .send()
                .await?;
        }
        return Ok(n as u64);
    }
    let config = ProducerConfig {
        aggregate: mode == "aggregated",
        ..ProducerConfig::default()
    };
    let producer = Producer::start(k.clone(), stream, config).await?;
    for i in 0..n {
        producer.send(key(i), data(i)).await?;
    }
    let report = producer.shutdown().await?;
    if report.records != n as u64 || report.failed > 0 {
        return Err(format!("{mode}: {} of {n} records written", report.records).into());
    }
    Ok(report.requests)
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_none() {
        println!(
            "skip: producer bench needs AWS_ENDPOINT_URL_KINESIS (the local stack: eval \"$(localstack/stack env)\")"
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("producer bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    let n = env_usize("BENCH_RECORDS", 200);
    let stream = format!("bench-producer-{}", std::process::id());
    let setup = runtime.block_on(async {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let k = aws_sdk_kinesis::Client::new(&config);
        let spec = StreamSpec {
            logical: "bench".into(),
            name: stream.clone(),
            shards: 4,
        };
        schema::ensure_stream(&k, &spec).await?;
        Ok::<_, BoxError>(k)
    });
    let k = match setup {
        Ok(k) => k,
        Err(e) => {
            eprintln!("producer bench: could not create {stream}: {e}");
            std::process::exit(1);
        }
    };
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .configure_from_args();
    let mut g = c.benchmark_group(format!("produce {n} records to kinesis-mock (4 shards)"));
    g.throughput(Throughput::Elements(n as u64));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut summary = Vec::new();
    for round in 0..2 {
        let mut order = MODES;
        if round == 1 {
            order.reverse();
        }
        for mode in order {
            let requests = Arc::new(AtomicU64::new(0));
            let records = Arc::new(AtomicU64::new(0));
            g.bench_function(format!("{mode} (round {round})"), |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (k, stream) = (k.clone(), stream.clone());
                    let (requests, records, rounds) =
                        (requests.clone(), records.clone(), rounds.clone());
                    async move {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let r = rounds.fetch_add(1, Ordering::Relaxed);
                            match put(&k, &stream, mode, n, r).await {
                                Ok(req) => {
                                    requests.fetch_add(req, Ordering::Relaxed);
                                    records.fetch_add(n as u64, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    eprintln!("producer bench: {e}");
                                    std::process::exit(1);
                                }
                            }
                        }
                        start.elapsed()
                    }
                })
            });
            let (req, rec) = (
                requests.load(Ordering::Relaxed),
                records.load(Ordering::Relaxed),
            );
            summary.push(format!(
                "{mode} (round {round}): {:.1} requests per 1,000 records ({req} requests, {rec} records)",
                req as f64 * 1_000.0 / rec.max(1) as f64
            ));
        }
    }
    g.finish();
    for line in &summary {
        println!("{line}");
    }
    let _ = runtime.block_on(
        k.delete_stream()
            .stream_name(&stream)
            .enforce_consumer_deletion(true)
            .send(),
    );
    c.final_summary();
}
