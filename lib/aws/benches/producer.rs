//! Producer throughput and CPU per record: `heatsink::kinesis::Producer` with KPL aggregation
//! and without it, side by side with the loop a user would write by hand (PutRecords batches of
//! 500, four requests in flight like the producer's default, only the refused entries retried
//! with a doubling back-off), in one run: one warm-up round, then `BENCH_RUNS` rounds in
//! alternating order (aggregated → plain → baseline, then the reverse), medians reported.
//!
//! Every run puts `BENCH_RECORDS` records of `BENCH_SIZES` bytes (one run per size; default 100
//! and 1,024) under 100,000 partition keys into a fresh stream of `BENCH_SHARDS` shards (default
//! 64, so that the producer's pacing at Kinesis's per-shard limits, 1,000 records and 1 MiB a
//! second, does not bind below the emulator's own rate), timed from the first record handed over
//! until every record is acknowledged. The same generator builds every record for all three.
//! `BENCH_MODES` (a comma list of `aggregated`, `plain`, `baseline`; default all three) runs only
//! some of them, e.g. to profile one with `perf record`.
//! CPU seconds of this process (nothing else runs in it meanwhile) and of the emulator serving
//! `AWS_ENDPOINT_URL_KINESIS` (found by its listening port; `BENCH_CPU_PIDS=name=PID` instead)
//! come from `/proc/PID/stat` around each run, reported per 100,000 records.
//!
//! ```text
//! localstack/stack up --kinesalite && eval "$(localstack/stack env --lane kinesalite)"
//! BENCH_RECORDS=200000 BENCH_RUNS=5 cargo bench -p heatsink --features full --bench producer
//! ```
//! On kinesis-mock (the default lanes) the emulator, not the producer, sets the pace: use small
//! `BENCH_RECORDS` there.

mod meter;
mod put_records;
mod standin;

use std::time::Instant;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use futures::StreamExt;
use heatsink::kinesis::{Producer, ProducerConfig};
use heatsink::schema::{self, StreamSpec};
use meter::{CpuMeter, cpu_delta, emulator_pids};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Aggregated,
    Plain,
    Baseline,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Aggregated => "aggregated",
            Mode::Plain => "plain",
            Mode::Baseline => "baseline",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Aggregated => "Producer, KPL aggregation",
            Mode::Plain => "Producer, plain",
            Mode::Baseline => "baseline: PutRecords of 500, 4 in flight",
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Record `i` of a run: a key out of 100,000 and `size` bytes of data.
fn record(run: usize, i: usize, size: usize) -> (String, Vec<u8>) {
    let mut data = format!("{{\"run\":{run},\"i\":{i},\"pad\":\"").into_bytes();
    data.resize(size.saturating_sub(2), b'x');
    data.extend_from_slice(b"\"}");
    (format!("user-{}", i % 100_000), data)
}

/// What one run did: seconds, requests, and the CPU seconds of this process and each emulator.
struct Run {
    secs: f64,
    requests: u64,
    /// Kinesis records put (aggregates count once).
    kinesis_records: u64,
    cpu: Vec<f64>,
}

/// Puts `n` records of `size` bytes one way; returns the requests and Kinesis records it took.
async fn put(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    mode: Mode,
    run: usize,
    n: usize,
    size: usize,
) -> Result<(u64, u64), BoxError> {
    if mode == Mode::Baseline {
        let batches = (0..n).step_by(500).map(|from| {
            (from..(from + 500).min(n))
                .map(|i| {
                    let (key, data) = record(run, i, size);
                    PutRecordsRequestEntry::builder()
                        .partition_key(key)
                        .data(Blob::new(data))
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
        });
        let mut calls = futures::stream::iter(batches)
            .map(|entries| async move { put_records::put_with_retry(k, stream, entries?).await })
            .buffer_unordered(4);
        let mut requests = 0;
        while let Some(r) = calls.next().await {
            requests += r?;
        }
        return Ok((requests, n as u64));
    }
    let config = ProducerConfig {
        aggregate: mode == Mode::Aggregated,
        ..ProducerConfig::default()
    };
    let producer = Producer::start(k.clone(), stream, config).await?;
    for i in 0..n {
        let (key, data) = record(run, i, size);
        producer.send(key, data).await?;
    }
    let report = producer.shutdown().await?;
    if report.records != n as u64 || report.failed > 0 {
        return Err(format!("{mode:?}: {} of {n} records written", report.records).into());
    }
    let kinesis_records = if report.aggregated_records > 0 {
        report.aggregated_records
    } else {
        n as u64
    };
    Ok((report.requests, kinesis_records))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn bench() -> Result<(), BoxError> {
    let n = env_usize("BENCH_RECORDS", 20_000);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let shards = env_usize("BENCH_SHARDS", 64);
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "100,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let modes = std::env::var("BENCH_MODES").unwrap_or_else(|_| "aggregated,plain,baseline".into());
    let modes: Vec<&str> = modes.split(',').map(str::trim).collect();
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    // `BENCH_KINESIS=standin`: Kinesis is the in-memory stand-in (its own process).
    let (standin, url, k) = standin::endpoint(&config, "all")?;
    let pids = emulator_pids(&[("kinesis", &url)]);
    let meter = CpuMeter::new("producer", &pids);
    println!(
        "producer bench: Kinesis {url}{}, {shards} shards, {n} records a run; CPU of this process{}",
        if standin.is_some() { " (stand-in)" } else { "" },
        if pids.is_empty() {
            String::new()
        } else {
            format!(" and {pids}")
        }
    );
    let mut stream_no = 0usize;
    for size in sizes {
        let mut results: Vec<(Mode, Run)> = Vec::new();
        // Round 0 is the warm-up.
        for round in 0..=runs {
            let mut order = [Mode::Aggregated, Mode::Plain, Mode::Baseline];
            if round % 2 == 0 {
                order.reverse();
            }
            for mode in order {
                if !modes.contains(&mode.name()) {
                    continue;
                }
                stream_no += 1;
                let spec = StreamSpec {
                    logical: "bench".into(),
                    name: format!("bench-producer-{}-{stream_no}", std::process::id()),
                    shards: i32::try_from(shards)?,
                };
                schema::ensure_stream(&k, &spec).await?;
                let before = meter.sample();
                let start = Instant::now();
                let (requests, kinesis_records) = put(&k, &spec.name, mode, round, n, size).await?;
                let secs = start.elapsed().as_secs_f64();
                let after = meter.sample();
                let _ = k.delete_stream().stream_name(&spec.name).send().await;
                if round > 0 {
                    results.push((
                        mode,
                        Run {
                            secs,
                            requests,
                            kinesis_records,
                            cpu: cpu_delta(&before, &after),
                        },
                    ));
                }
            }
        }
        println!("\n{size} B records, {n} a run, {runs} runs (medians; CPU s per 100,000 records)");
        println!(
            "{:<42} {:>8} {:>10} {:>9} {:>11}   cpu s / 100k records",
            "mode", "seconds", "records/s", "requests", "kinesis rec"
        );
        let base: Vec<&Run> = results
            .iter()
            .filter(|(m, _)| *m == Mode::Baseline)
            .map(|(_, r)| r)
            .collect();
        let base_secs = median(base.iter().map(|r| r.secs).collect());
        let base_cpu = median(base.iter().map(|r| r.cpu[0]).collect());
        for mode in [Mode::Aggregated, Mode::Plain, Mode::Baseline] {
            if !modes.contains(&mode.name()) {
                continue;
            }
            let rs: Vec<&Run> = results
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, r)| r)
                .collect();
            let secs = median(rs.iter().map(|r| r.secs).collect());
            let cpu: Vec<String> = meter
                .names()
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let v = median(rs.iter().map(|r| r.cpu[i]).collect());
                    format!("{name} {:.3}", v * 100_000.0 / n as f64)
                })
                .collect();
            let own_cpu = median(rs.iter().map(|r| r.cpu[0]).collect());
            println!(
                "{:<42} {:>8.3} {:>10.0} {:>9.0} {:>11.0}   {}   runs {:?}{}",
                mode.label(),
                secs,
                n as f64 / secs,
                median(rs.iter().map(|r| r.requests as f64).collect()),
                median(rs.iter().map(|r| r.kinesis_records as f64).collect()),
                cpu.join(", "),
                rs.iter()
                    .map(|r| (r.secs * 1000.0).round() / 1000.0)
                    .collect::<Vec<_>>(),
                if mode == Mode::Baseline {
                    String::new()
                } else {
                    format!(
                        "   (vs baseline: {:.2}x records/s, {:.2}x CPU per record)",
                        base_secs / secs,
                        own_cpu / base_cpu
                    )
                }
            );
        }
    }
    Ok(())
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_none()
        && std::env::var("BENCH_KINESIS").as_deref() != Ok("standin")
    {
        println!(
            "skip: producer bench needs AWS_ENDPOINT_URL_KINESIS (the local stack: eval \"$(localstack/stack env --lane kinesalite)\")"
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
    let result = if std::env::var_os("BENCH_STANDIN_SERVE").is_some() {
        runtime.block_on(standin::serve())
    } else {
        runtime.block_on(bench())
    };
    if let Err(e) = result {
        eprintln!("producer bench failed: {e}");
        std::process::exit(1);
    }
}
