//! Producer memory under a stalled stream, on kinesis-mock: `heatsink::kinesis::Producer` fed
//! 1 MiB records while its stream hangs (the test kit's network cut: every `PutRecords` is
//! accepted by the socket and never answered, so attempts time out and are sent again) until
//! `send` blocks (backpressure). Each run is **its own child process** (this binary re-run with
//! `BENCH_RSS_ROLE`), so its `/proc/self/status` peak is its own: the child starts the producer,
//! has one record written (clients, pools and the request path warmed), reads `VmRSS` (the
//! baseline), resets `VmHWM` (`/proc/self/clear_refs`), cuts the path, then sends records of
//! 1,048,000 non-zero bytes (each a fresh allocation, every page touched) from one task until a
//! `send` has waited 2 s, and keeps the stream stalled `BENCH_HOLD_S` more seconds (default 12:
//! past the 5 s attempt timeout, so every request is timed out and sent again at least once)
//! while sampling `VmRSS` every 50 ms. It prints the records accepted, the peak above the
//! baseline, and the bound the producer's docs state (`2 × max_buffered_bytes + max_in_flight ×
//! 5 MiB`); the run fails if the peak exceeds that bound plus a fixed allowance
//! (`BENCH_ALLOWANCE_MIB`, default 16 MiB, for the allocator and the SDK's request bodies beyond
//! the records).
//!
//! ```text
//! eval "$(localstack/stack env --lane moto)"; cargo bench -p heatsink-testkit --bench producer_rss --profile dev
//! ```
//! Knobs (env): `BENCH_BUDGETS_MIB` (comma-separated `max_buffered_bytes`, default `8,32`),
//! `BENCH_SHARDS` (default 4: the producer paces each shard at 1 MiB/s, so more shards put more
//! records in flight at once), `BENCH_HOLD_S`, `BENCH_ALLOWANCE_MIB`.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use heatsink::kinesis::{Producer, ProducerConfig};
use heatsink_testkit::cut::Cut;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MIB: u64 = 1 << 20;
/// Data of one record: 1 MiB less room for its partition key.
const RECORD: usize = 1_048_000;
/// `PutRecords`: at most 5 MiB a request.
const REQUEST: u64 = 5 * MIB;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Child: one stalled-stream run with `max_buffered_bytes = budget`; prints one `RSS …` line.
async fn child(stream: &str, budget: u64) -> Result<(), BoxError> {
    let hold = Duration::from_secs(env_u64("BENCH_HOLD_S", 12));
    let upstream = std::env::var("AWS_ENDPOINT_URL_KINESIS")?;
    let cut = Cut::start(&upstream).await?;
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&config)
            .endpoint_url(cut.endpoint())
            .build(),
    );
    let pc = ProducerConfig {
        max_buffered_bytes: usize::try_from(budget)?,
        ..ProducerConfig::default()
    };
    let in_flight = pc.max_in_flight as u64;
    let producer = Arc::new(Producer::start(kinesis, stream, pc).await?);
    // One record written: the request path is warm before the baseline.
    producer.send("warm", vec![1u8; 1_000]).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (baseline, _) = rss();
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    cut.cut();

    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                peak.fetch_max(rss().0, Ordering::Relaxed);
            }
        })
    };
    let accepted = Arc::new(AtomicU64::new(0));
    let last = Arc::new(std::sync::Mutex::new(Instant::now()));
    let sender = {
        let (p, accepted, last) = (producer.clone(), accepted.clone(), last.clone());
        tokio::spawn(async move {
            for i in 0u64.. {
                let fill = u8::try_from(i % 251 + 1).unwrap_or(1);
                if p.send(format!("k{i}"), vec![fill; RECORD]).await.is_err() {
                    return;
                }
                accepted.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = last.lock() {
                    *l = Instant::now();
                }
            }
        })
    };
    // Backpressure: no record accepted for 2 s.
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle = last.lock().map(|l| l.elapsed()).unwrap_or_default();
        if idle >= Duration::from_secs(2) || started.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    let blocked_after = accepted.load(Ordering::Relaxed);
    tokio::time::sleep(hold).await;
    let held = accepted.load(Ordering::Relaxed);
    sender.abort();
    sampler.abort();
    let (_, hwm) = rss();
    let sampled = peak.load(Ordering::Relaxed);
    println!(
        "RSS {budget} {baseline} {hwm} {sampled} {blocked_after} {held} {in_flight} {}",
        u8::from(reset)
    );
    // The process exits without draining the stalled producer.
    std::process::exit(0);
}

fn main() -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Ok(budget) = std::env::var("BENCH_RSS_ROLE") {
        let stream = std::env::var("BENCH_RSS_STREAM")?;
        return rt.block_on(child(&stream, budget.parse()?));
    }
    rt.block_on(async {
        let Some(fx) = heatsink_testkit::Fixture::new("producer_rss").await else {
            return Ok(());
        };
        let shards = i32::try_from(env_u64("BENCH_SHARDS", 4)).unwrap_or(4);
        let stream = fx.stream("producer-rss", shards).await;
        let allowance = env_u64("BENCH_ALLOWANCE_MIB", 16) * MIB;
        let budgets: Vec<u64> = std::env::var("BENCH_BUDGETS_MIB")
            .unwrap_or_else(|_| "8,32".into())
            .split(',')
            .filter_map(|b| b.trim().parse::<u64>().ok())
            .map(|b| b * MIB)
            .collect();
        let mut failed = vec![];
        println!(
            "producer under a stalled stream of {shards} shards, {RECORD}-byte records, defaults otherwise (4 in flight)"
        );
        println!(
            "{:>8} {:>9} {:>9} {:>10} {:>10} {:>10}",
            "budget", "accepted", "held", "peak RSS+", "bound", "bound+allow"
        );
        for budget in budgets {
            let out = Command::new(std::env::current_exe()?)
                .env("BENCH_RSS_ROLE", budget.to_string())
                .env("BENCH_RSS_STREAM", &stream.name)
                .output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(line) = text.lines().find_map(|l| l.strip_prefix("RSS ")) else {
                return Err(format!(
                    "child for {budget} printed no RSS line: {text} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            };
            let f: Vec<u64> = line
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            let [_, baseline, hwm, sampled, blocked, held, in_flight, reset] = f[..] else {
                return Err(format!("bad line {line}").into());
            };
            let peak = if reset == 1 { hwm.max(sampled) } else { sampled };
            let grown = peak.saturating_sub(baseline);
            let bound = 2 * budget + in_flight * REQUEST;
            println!(
                "{:>5} MiB {:>9} {:>9} {:>6.1} MiB {:>6.1} MiB {:>6.1} MiB",
                budget / MIB,
                blocked,
                held,
                grown as f64 / MIB as f64,
                bound as f64 / MIB as f64,
                (bound + allowance) as f64 / MIB as f64
            );
            if grown > bound + allowance {
                failed.push(budget / MIB);
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("peak RSS over the stated bound plus allowance for budgets {failed:?} MiB").into())
        }
    })
}
