//! Onset to relief on kinesis-mock: from the onset of a 3× hot shard to its children taking
//! writes, with the real executor (`heatsink::kinesis::reshard`: sample → plan → split), `BENCH_TRIALS`
//! trials (default 3), median and max printed per phase.
//!
//! Each trial: a fresh 1-shard stream; at the onset a `heatsink::kinesis::Producer` starts
//! writing `BENCH_RATE` records/s (default 60) over 500 keys spread across the hash space.
//! kinesis-mock stores records far below Kinesis's 1,000/s, so the shard's capacity is scaled:
//! the plan's `split_at` is set so that the rate is 3× one shard (capacity = rate / 3). Phases,
//! measured from the onset:
//! 1. **sampling window**: the executor waits `BENCH_SAMPLE` seconds (default 5) of load, then
//!    reads them back with AT_TIMESTAMP iterators (`reshard::sample`);
//! 2. **plan**: `heatsink_core::reshard::plan` on those samples;
//! 3. **SplitShard until ACTIVE**: `reshard::apply` (one call, then DescribeStreamSummary
//!    polls every 100 ms until ACTIVE);
//! 4. **children taking writes**: from ACTIVE until a record written after ACTIVE is readable
//!    in both children (LATEST iterators opened at ACTIVE, polled every 50 ms). Kinesis routes
//!    by hash key, so writes reach the children as soon as the split is done; the producer's
//!    own shard prediction (for pacing and aggregation) is refreshed when a response names a
//!    shard it did not predict, counted as `map_refreshes` in its report.
//!
//! ```text
//! eval "$(localstack/stack env)"
//! cargo bench -p heatsink --features full --bench reshard_relief
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_kinesis::types::ShardIteratorType;
use heatsink::kinesis::reshard::{ApplyConfig, apply, sample};
use heatsink::kinesis::reshard::{PlanConfig, ReshardState, plan};
use heatsink::kinesis::{Producer, ProducerConfig, open_shard_ranges};
use heatsink::schema::{self, StreamSpec};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One trial's phases.
#[derive(Debug, Clone, Copy)]
struct Phases {
    window: Duration,
    sample_read: Duration,
    plan: Duration,
    split: Duration,
    children: Duration,
    total: Duration,
    map_refreshes: u64,
}

async fn trial(k: &aws_sdk_kinesis::Client, n: u64) -> Result<Phases, BoxError> {
    let rate = env_u64("BENCH_RATE", 60);
    let secs = env_u64("BENCH_SAMPLE", 5);
    let stream = format!("bench-relief-{}-{n}", std::process::id());
    let spec = StreamSpec {
        logical: "bench".into(),
        name: stream.clone(),
        shards: 1,
    };
    schema::ensure_stream(k, &spec).await?;

    // The onset: the producer starts writing at 3× the (scaled) shard capacity.
    let producer = Arc::new(Producer::start(k.clone(), &stream, ProducerConfig::default()).await?);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (producer, stop) = (producer.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1_000 / rate.max(1)));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if producer
                    .send(
                        format!("user-{}", i % 500),
                        format!("{{\"i\":{i}}}").into_bytes(),
                    )
                    .await
                    .is_err()
                {
                    break;
                }
                i += 1;
            }
        })
    };
    let onset = Instant::now();

    // 1. The sampling window, then reading it back.
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let window = onset.elapsed();
    let t = Instant::now();
    let samples = sample(k, &stream, secs, now_ms()).await?;
    let sample_read = t.elapsed();

    // 2. Plan, with one shard's capacity scaled to a third of the offered rate.
    let t = Instant::now();
    let config = PlanConfig {
        split_at: 0.8 * (rate as f64 / 1_000.0) / 3.0,
        max_splits_per_shard: 1,
        ..PlanConfig::default()
    };
    let planned = plan(
        &samples,
        &ReshardState::default(),
        &config,
        now_ms() / 1_000,
    )?;
    let plan_time = t.elapsed();
    if planned.ops.is_empty() {
        return Err(format!("trial {n}: the plan did not split: {:?}", planned.shards).into());
    }

    // 3. SplitShard until ACTIVE.
    let t = Instant::now();
    let journal: PathBuf = std::env::temp_dir().join(format!("{stream}.json"));
    let _ = std::fs::remove_file(&journal);
    let acfg = ApplyConfig {
        deadline: Duration::from_secs(60),
        poll: Duration::from_millis(100),
        ..ApplyConfig::default()
    };
    apply(k, &stream, &journal, Some(&planned), &acfg, |_| {}).await?;
    let split = t.elapsed();
    let _ = std::fs::remove_file(&journal);

    // 4. Until both children hold a record written after ACTIVE.
    let t = Instant::now();
    let children = open_shard_ranges(k, &stream).await?;
    let mut iterators = Vec::new();
    for c in &children {
        let it = k
            .get_shard_iterator()
            .stream_name(&stream)
            .shard_id(&c.shard_id)
            .shard_iterator_type(ShardIteratorType::Latest)
            .send()
            .await?;
        iterators.push(it.shard_iterator);
    }
    let mut seen = vec![false; iterators.len()];
    while !seen.iter().all(|&s| s) {
        if t.elapsed() > Duration::from_secs(60) {
            return Err("children took no writes within 60 s".into());
        }
        for (i, it) in iterators.iter_mut().enumerate() {
            if seen[i] {
                continue;
            }
            let Some(current) = it.take() else { continue };
            let page = k.get_records().shard_iterator(current).send().await?;
            seen[i] = !page.records().is_empty();
            *it = page.next_shard_iterator;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let children_time = t.elapsed();
    let total = onset.elapsed();

    stop.store(true, Ordering::Relaxed);
    let _ = writer.await;
    let map_refreshes = match Arc::try_unwrap(producer) {
        Ok(p) => p.shutdown().await?.map_refreshes,
        Err(_) => 0,
    };
    let _ = k
        .delete_stream()
        .stream_name(&stream)
        .enforce_consumer_deletion(true)
        .send()
        .await;
    Ok(Phases {
        window,
        sample_read,
        plan: plan_time,
        split,
        children: children_time,
        total,
        map_refreshes,
    })
}

/// Reads one phase of a trial.
type Phase = fn(&Phases) -> Duration;

fn median_max(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let median = v.get(v.len() / 2).copied().unwrap_or_default();
    (median, v.last().copied().unwrap_or_default())
}

async fn bench() -> Result<(), BoxError> {
    let trials = env_u64("BENCH_TRIALS", 3);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let k = aws_sdk_kinesis::Client::new(&config);
    let mut all = Vec::new();
    for n in 0..trials {
        let p = trial(&k, n).await?;
        println!("trial {n}: {p:?}");
        all.push(p);
    }
    let rows: [(&str, Phase); 6] = [
        ("sampling window", |p| p.window),
        ("sample read (AT_TIMESTAMP)", |p| p.sample_read),
        ("plan", |p| p.plan),
        ("SplitShard until ACTIVE", |p| p.split),
        ("ACTIVE until both children take writes", |p| p.children),
        ("onset to relief (total)", |p| p.total),
    ];
    println!("phase | median | max ({trials} trials)");
    for (name, f) in rows {
        let (median, max) = median_max(all.iter().map(f).collect());
        println!(
            "{name} | {:.0} ms | {:.0} ms",
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    println!(
        "producer shard-map refreshes per trial: {:?}",
        all.iter().map(|p| p.map_refreshes).collect::<Vec<_>>()
    );
    Ok(())
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_none() {
        println!(
            "skip: reshard_relief bench needs AWS_ENDPOINT_URL_KINESIS (the local stack: eval \"$(localstack/stack env)\")"
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reshard_relief bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(bench()) {
        eprintln!("reshard_relief bench: {e}");
        std::process::exit(1);
    }
}
