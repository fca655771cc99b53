//! A live move of one slot while it takes writes, against the naive move (copy, then flip: no
//! stream tail, no fence), side by side in one run, alternating which goes first.
//!
//! Per write rate on the moved slot it prints: the write pause (latency of the writes issued
//! between the fence and the flip; p50 and p99 over all trials), the same writes' baseline
//! before the fence, the p99 of writes issued in the max-age after the flip (stale routers
//! bounced by the fence), the worst write of the run, the mover's own fence → flip
//! window and where it went, copy throughput (items/s), the catch-up lag, RCU and WCU per moved
//! item, and the acknowledged writes each move lost (`slots verify`).
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink-testkit --bench moves --profile dev` (env `MOVES_RATES`, default
//! `100,1000`; `MOVES_TRIALS`, default 3; `MOVES_ITEMS`, default 2000 items in the moved slot).
//! The time is spent in the emulator, so the dev profile measures the same thing as release.
//! Without `AWS_ENDPOINT_URL_DYNAMODB` it prints a skip line and exits 0.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use heatsink::schema::Table;
use heatsink::schema::{self, KeyAttr, StreamView, TableSpec};
use heatsink::slots::mover::{Budget, MoveRecord, MoveSpec, Mover};
use heatsink::slots::verify::{AckLine, verify};
use heatsink::slots::{MoveMode, Router, SlotDirectory, SlotRange, slot_of};
use heatsink_sim::load::{LoadSpec, Sample, WriteReport, run_load};
use heatsink_testkit::Fixture;
use heatsink_testkit::bench::env_or;

const MAX_AGE: Duration = Duration::from_millis(250);

struct World {
    fx: Fixture,
    ddb: aws_sdk_dynamodb::Client,
    a: String,
    b: String,
    dir: SlotDirectory,
    router: Router,
}

fn slot() -> SlotRange {
    SlotRange::single(slot_of("t0")).expect("slot")
}

async fn table(fx: &Fixture, logical: &str) -> String {
    let spec = TableSpec::new(format!("{}{logical}", fx.schema.prefix()), KeyAttr::s("pk"))
        .stream(StreamView::NewAndOldImages);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .expect("table");
    spec.name
}

async fn world(items: u32) -> Option<World> {
    let fx = Fixture::new("moves-bench").await?;
    let ddb = fx.stack.isolated_ddb();
    let a = table(&fx, "a").await;
    let b = table(&fx, "b").await;
    let spec = fx.schema.table(Table::Slots);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .expect("directory");
    let dir = SlotDirectory::new(ddb.clone(), spec.name);
    dir.init(&a, MAX_AGE, false).await.expect("init");
    // `items` rows in the moved slot and half as many elsewhere (the copy scans them all).
    let rows: Vec<String> = (0..items)
        .map(|i| format!("{{t0}}row-{i}"))
        .chain((0..items / 2).map(|i| format!("{{t1}}row-{i}")))
        .collect();
    for chunk in rows.chunks(25) {
        let batch: Vec<WriteRequest> = chunk
            .iter()
            .map(|k| {
                let put = PutRequest::builder()
                    .item("pk", AttributeValue::S(k.clone()))
                    .item("v", AttributeValue::N("1".into()))
                    .item("caption", AttributeValue::S("x".repeat(100)))
                    .build()
                    .expect("put");
                WriteRequest::builder().put_request(put).build()
            })
            .collect();
        ddb.batch_write_item()
            .request_items(&a, batch)
            .send()
            .await
            .expect("preload");
    }
    let router = Router::new(ddb.clone(), dir.clone(), MAX_AGE);
    Some(World {
        fx,
        ddb,
        a,
        b,
        dir,
        router,
    })
}

struct Load {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<AckLine>>>,
    task: tokio::task::JoinHandle<WriteReport>,
}

fn load(router: &Router, rate: u32) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(vec![]));
    let sink = acks.clone();
    let spec = LoadSpec {
        keys: 200,
        prefix: "{t0}w-".into(),
        tenants: None,
        rate: f64::from(rate),
        duration: Duration::from_secs(600),
        max_in_flight: 256,
    };
    let task = tokio::spawn(run_load(router.clone(), spec, stop.clone(), move |a| {
        if let Ok(mut v) = sink.lock() {
            v.push(a.clone());
        }
    }));
    Load { stop, acks, task }
}

impl Load {
    async fn finish(self, router: &Router) -> (WriteReport, u64, f64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let report = self.task.await.expect("load");
        let acks = self.acks.lock().expect("acks").clone();
        let v = verify(router, &acks).await.expect("verify");
        let secs = match (report.samples.first(), report.samples.last()) {
            (Some(f), Some(l)) => (l.issued_ms.saturating_sub(f.issued_ms)) as f64 / 1e3,
            _ => 0.0,
        };
        let achieved = if secs > 0.0 {
            report.samples.len() as f64 / secs
        } else {
            0.0
        };
        (report, v.lost, achieved)
    }
}

/// Our move; returns the record, the writes' samples, the lost count and the achieved rate.
async fn ours(rate: u32, items: u32) -> Option<(MoveRecord, Vec<Sample>, u64, f64)> {
    let w = world(items).await?;
    let l = load(&w.router, rate);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spec = MoveSpec {
        slots: slot(),
        to: w.b.clone(),
        mode: MoveMode::Copy,
        strict: false,
        budget: Budget {
            soak: Duration::from_millis(500),
            rcu_per_sec: 100_000.0,
            wcu_per_sec: 100_000.0,
            ..Budget::default()
        },
    };
    let mut m = Mover::start(
        w.ddb.clone(),
        w.fx.stack.streams.clone(),
        w.dir.clone(),
        spec,
    )
    .await
    .expect("start")
    .with_progress(Arc::new(|line: &str| eprintln!("  ours: {line}")));
    m.run().await.expect("move");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (report, lost, achieved) = l.finish(&w.router).await;
    Some((m.record().clone(), report.samples, lost, achieved))
}

/// The naive move: copy with a Scan and unconditional puts, then flip the directory.
async fn naive(rate: u32, items: u32) -> Option<(Duration, u64, u64, f64)> {
    let w = world(items).await?;
    let l = load(&w.router, rate);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let map = w.dir.load().await.expect("map");
    if let Some(c) = map.isolate(slot()).expect("isolate") {
        w.dir.commit(&c).await.expect("isolate");
    }
    let mut copied = 0u64;
    let mut start = None;
    loop {
        let page = w
            .ddb
            .scan()
            .table_name(&w.a)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        for item in page.items() {
            let Some(pk) = item.get("pk").and_then(|v| v.as_s().ok()) else {
                continue;
            };
            if pk.starts_with("#heatsink/") || !slot().contains(slot_of(pk)) {
                continue;
            }
            w.ddb
                .put_item()
                .table_name(&w.b)
                .set_item(Some(item.clone()))
                .send()
                .await
                .expect("put");
            copied += 1;
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    let map = w.dir.load().await.expect("map");
    w.dir
        .commit(&map.mark_moving(slot(), "naive").expect("mark"))
        .await
        .expect("mark");
    let map = w.dir.load().await.expect("map");
    w.dir
        .commit(&map.flip(slot(), "naive", &w.b).expect("flip"))
        .await
        .expect("flip");
    let took = t.elapsed();
    eprintln!("  naive: copied {copied} items and flipped in {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, lost, achieved) = l.finish(&w.router).await;
    Some((took, copied, lost, achieved))
}

fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v.get(i).copied()
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

#[tokio::main]
async fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        println!("skip: moves bench needs the local stack (eval \"$(localstack/stack env)\")");
        return;
    }
    let rates: Vec<u32> = std::env::var("MOVES_RATES")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let trials = env_or("MOVES_TRIALS", 3);
    let items = env_or("MOVES_ITEMS", 2_000);
    let lane = std::env::var("HEATSINK_LANE").unwrap_or_else(|_| "external".into());
    println!("moves bench: lane {lane}, {items} items in the moved slot, {trials} trials per rate");
    // Warm-up (connections, table creation paths); not reported.
    let _ = ours(50, 100).await;
    for rate in rates {
        let mut paused: Vec<f64> = vec![];
        // Writes issued in the max-age after the flip (routers with the old map are bounced
        // by the fence and reload), and every write before the fence (the baseline).
        let (mut after, mut before, mut worst) = (vec![], vec![], 0f64);
        let mut windows: Vec<f64> = vec![];
        let mut parts: HashMap<String, Vec<f64>> = HashMap::new();
        let (mut copy_rates, mut lags, mut rcu, mut wcu) = (vec![], vec![], vec![], vec![]);
        let (mut lost_ours, mut lost_naive, mut achieved) = (0u64, 0u64, vec![]);
        let mut naive_ms = vec![];
        for trial in 0..trials {
            // Alternate which runs first.
            let order = if trial % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for ours_first in order {
                if ours_first {
                    let Some((rec, samples, lost, got)) = ours(rate, items).await else {
                        return;
                    };
                    lost_ours += lost;
                    achieved.push(got);
                    if let (Some(f), Some(p)) = (rec.fenced_ms, rec.pause_ms) {
                        windows.push(p as f64);
                        let max_age = MAX_AGE.as_millis() as u64;
                        for s in &samples {
                            let ms = s.latency_us as f64 / 1e3;
                            worst = worst.max(ms);
                            if s.issued_ms < f {
                                before.push(ms);
                            } else if s.issued_ms > f + p && s.issued_ms <= f + p + max_age {
                                after.push(ms);
                            }
                        }
                        paused.extend(
                            samples
                                .iter()
                                .filter(|s| s.issued_ms >= f && s.issued_ms <= f + p)
                                .map(|s| s.latency_us as f64 / 1e3),
                        );
                    }
                    for (k, v) in &rec.pause_parts_ms {
                        parts.entry(k.clone()).or_default().push(*v as f64);
                    }
                    if let Some(c) = rec.phase_ms.get("copied").filter(|c| **c > 0) {
                        copy_rates.push(rec.copied as f64 / (*c as f64 / 1e3));
                    }
                    if let Some(l) = rec.lag_ms {
                        lags.push(l as f64);
                    }
                    let moved = (rec.copied + rec.applied).max(1) as f64;
                    rcu.push(rec.rcu / rec.copied.max(1) as f64);
                    wcu.push(rec.wcu / moved);
                } else {
                    let Some((took, _, lost, _)) = naive(rate, items).await else {
                        return;
                    };
                    lost_naive += lost;
                    naive_ms.push(took.as_secs_f64() * 1e3);
                }
            }
        }
        let part = |k: &str| ms(quantile(parts.get(k).cloned().unwrap_or_default(), 0.5));
        println!(
            "rate {rate}/s (achieved median {:.0}/s): write pause p50 {} ms p99 {} ms over {} writes; \
             baseline p50 {} ms p99 {} ms; after the flip (max-age) p99 {} ms over {} writes; \
             worst write {:.0} ms; \
             fence->flip median {} ms (fence {} / save {} / drain {} / flip {}); \
             copy {:.0} items/s; catch-up lag median {} ms; RCU/item {:.2}; WCU/item {:.2}; \
             lost ours {lost_ours}; naive move median {} ms, lost {lost_naive}",
            quantile(achieved, 0.5).unwrap_or(0.0),
            ms(quantile(paused.clone(), 0.5)),
            ms(quantile(paused.clone(), 0.99)),
            paused.len(),
            ms(quantile(before.clone(), 0.5)),
            ms(quantile(before, 0.99)),
            ms(quantile(after.clone(), 0.99)),
            after.len(),
            worst,
            ms(quantile(windows, 0.5)),
            part("fence"),
            part("save"),
            part("drain"),
            part("flip"),
            quantile(copy_rates, 0.5).unwrap_or(0.0),
            ms(quantile(lags, 0.5)),
            quantile(rcu, 0.5).unwrap_or(0.0),
            quantile(wcu, 0.5).unwrap_or(0.0),
            ms(quantile(naive_ms, 0.5)),
        );
    }
}
