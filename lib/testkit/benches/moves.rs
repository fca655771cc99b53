//! A live move of one slot while it takes writes, against the naive move (copy, then flip: no
//! stream tail, no fence), side by side in one run, rotating which goes first.
//!
//! Per write rate on the moved slot and per directory mode (default, strict) it prints: the
//! writers' pause (per trial the longest gap between consecutive acknowledgements of writes to
//! the moved slot, from the mark to the end of the move; p50 and p99 over the trials, and the
//! longest), the write pause (latency of the writes issued between the fence and the flip;
//! p50 and p99 over all trials), the same writes' baseline before the fence, the p99 of writes
//! issued in the max-age after the flip (stale routers bounced by the fence), the worst write of
//! the run, the mover's own fence → flip window and where it went, copy throughput (items/s),
//! the catch-up lag, RCU and WCU per moved item, and the acknowledged writes each move lost
//! (`slots verify`); then the naive move's duration and losses.
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink-testkit --bench moves --profile dev` (env `MOVES_RATES`, default
//! `100,1000`; `MOVES_TRIALS`, default 3; `MOVES_ITEMS`, default 2000 items in the moved slot;
//! `MOVES_MODES`, default `default,strict`).
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
use heatsink_sim::load::{LoadSpec, Sample, WriteReport, longest_ack_gap, run_load};
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

async fn world(items: u32, strict: bool) -> Option<World> {
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
    dir.init(&a, MAX_AGE, strict).await.expect("init");
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

/// One run of our move: the record, when `run` returned (ms since the epoch), the writes'
/// samples, the lost count and the achieved rate.
struct Run {
    rec: MoveRecord,
    ended_ms: u64,
    samples: Vec<Sample>,
    lost: u64,
    achieved: f64,
}

/// Our move in a default or a strict directory; `Err` when the mover stopped (it refuses to
/// go on rather than lose a write: a diff that does not converge, a call past its deadline),
/// with the reason and the writes lost.
async fn ours(rate: u32, items: u32, strict: bool) -> Option<Result<Run, (String, u64)>> {
    let w = world(items, strict).await?;
    let l = load(&w.router, rate);
    // A warm-up, then the control window the writers' pause is compared with.
    tokio::time::sleep(WARM_UP + CONTROL).await;
    let spec = MoveSpec {
        slots: slot(),
        to: w.b.clone(),
        mode: MoveMode::Copy,
        strict,
        budget: Budget {
            soak: Duration::from_millis(500),
            rcu_per_sec: 100_000.0,
            wcu_per_sec: 100_000.0,
            ..Budget::default()
        },
    };
    let started = Mover::start(
        w.ddb.clone(),
        w.fx.stack.streams.clone(),
        w.dir.clone(),
        spec,
    )
    .await;
    let mut m = match started {
        Ok(m) => m.with_progress(Arc::new(|line: &str| eprintln!("  ours: {line}"))),
        Err(e) => {
            let (_, lost, _) = l.finish(&w.router).await;
            return Some(Err((format!("start: {e}"), lost)));
        }
    };
    if let Err(e) = m.run().await {
        let e = e.to_string();
        let (_, lost, _) = l.finish(&w.router).await;
        return Some(Err((e, lost)));
    }
    let ended_ms = heatsink::clock::now_ms();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (report, lost, achieved) = l.finish(&w.router).await;
    Some(Ok(Run {
        rec: m.record().clone(),
        ended_ms,
        samples: report.samples,
        lost,
        achieved,
    }))
}

/// The naive move: copy with a Scan and unconditional puts, then flip the directory.
async fn naive(rate: u32, items: u32) -> Option<(Duration, u64, u64, f64)> {
    let w = world(items, false).await?;
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

/// Load before the control window (connections, the router's first map).
const WARM_UP: Duration = Duration::from_millis(500);
/// The window just before the mark whose longest ack gap is the control: the same writers and
/// emulator, no move.
const CONTROL: Duration = Duration::from_millis(2_500);

/// Our move's figures at one rate in one mode, over the trials.
#[derive(Default)]
struct Stats {
    /// Per trial: the longest gap in acknowledged writes to the slot, mark → end of move.
    gaps: Vec<f64>,
    /// Per trial: the same over the [`CONTROL`] window before the mark (no move yet).
    control_gaps: Vec<f64>,
    /// Latencies of the writes issued between fence and flip.
    paused: Vec<f64>,
    /// Writes issued in the max-age after the flip, and every write before the fence.
    after: Vec<f64>,
    before: Vec<f64>,
    worst: f64,
    windows: Vec<f64>,
    parts: HashMap<String, Vec<f64>>,
    copy_rates: Vec<f64>,
    lags: Vec<f64>,
    rcu: Vec<f64>,
    wcu: Vec<f64>,
    lost: u64,
    achieved: Vec<f64>,
    /// Moves the mover stopped (why, and the writes lost).
    stopped: Vec<String>,
}

impl Stats {
    fn add(&mut self, run: Run) {
        let Run {
            rec,
            ended_ms,
            samples,
            lost,
            achieved,
        } = run;
        self.lost += lost;
        self.achieved.push(achieved);
        let gap = longest_ack_gap(&samples, |s| slot().contains(s), rec.marked_ms, ended_ms);
        self.gaps.push(gap);
        let control_ms = CONTROL.as_millis() as u64;
        let control = longest_ack_gap(
            &samples,
            |s| slot().contains(s),
            rec.marked_ms.saturating_sub(control_ms),
            rec.marked_ms,
        );
        self.control_gaps.push(control);
        // One line per trial, so a run cut short still shows what it measured.
        println!(
            "  trial ({}): writers' pause {gap:.0} ms (control before the mark {control:.0} ms), fence->flip {} ms, mark -> end {} ms, lost {lost}",
            if rec.strict { "strict" } else { "default" },
            rec.pause_ms.map_or("-".into(), |p| p.to_string()),
            ended_ms.saturating_sub(rec.marked_ms),
        );
        if let (Some(f), Some(p)) = (rec.fenced_ms, rec.pause_ms) {
            self.windows.push(p as f64);
            let max_age = MAX_AGE.as_millis() as u64;
            for s in &samples {
                let ms = s.latency_us as f64 / 1e3;
                self.worst = self.worst.max(ms);
                if s.issued_ms < f {
                    self.before.push(ms);
                } else if s.issued_ms > f + p && s.issued_ms <= f + p + max_age {
                    self.after.push(ms);
                }
            }
            self.paused.extend(
                samples
                    .iter()
                    .filter(|s| s.issued_ms >= f && s.issued_ms <= f + p)
                    .map(|s| s.latency_us as f64 / 1e3),
            );
        }
        for (k, v) in &rec.pause_parts_ms {
            self.parts.entry(k.clone()).or_default().push(*v as f64);
        }
        if let Some(c) = rec.phase_ms.get("copied").filter(|c| **c > 0) {
            self.copy_rates.push(rec.copied as f64 / (*c as f64 / 1e3));
        }
        if let Some(l) = rec.lag_ms {
            self.lags.push(l as f64);
        }
        let moved = (rec.copied + rec.applied).max(1) as f64;
        self.rcu.push(rec.rcu / rec.copied.max(1) as f64);
        self.wcu.push(rec.wcu / moved);
    }

    fn print(&self, rate: u32, mode: &str) {
        let part = |k: &str| {
            ms(quantile(
                self.parts.get(k).cloned().unwrap_or_default(),
                0.5,
            ))
        };
        println!(
            "rate {rate}/s {mode} (achieved median {:.0}/s): writers' pause (longest ack gap, mark -> end) \
             p50 {} ms p99 {} ms longest {} ms over {} trials \
             (control, the {} ms before the mark: p50 {} ms p99 {} ms); \
             write pause p50 {} ms p99 {} ms over {} writes; \
             baseline p50 {} ms p99 {} ms; after the flip (max-age) p99 {} ms over {} writes; \
             worst write {:.0} ms; \
             fence->flip median {} ms (fence {} / save {} / drain {} / flip {}); \
             copy {:.0} items/s; catch-up lag median {} ms; RCU/item {:.2}; WCU/item {:.2}; \
             lost ours {}; stopped {}{}",
            quantile(self.achieved.clone(), 0.5).unwrap_or(0.0),
            ms(quantile(self.gaps.clone(), 0.5)),
            ms(quantile(self.gaps.clone(), 0.99)),
            ms(quantile(self.gaps.clone(), 1.0)),
            self.gaps.len(),
            CONTROL.as_millis(),
            ms(quantile(self.control_gaps.clone(), 0.5)),
            ms(quantile(self.control_gaps.clone(), 0.99)),
            ms(quantile(self.paused.clone(), 0.5)),
            ms(quantile(self.paused.clone(), 0.99)),
            self.paused.len(),
            ms(quantile(self.before.clone(), 0.5)),
            ms(quantile(self.before.clone(), 0.99)),
            ms(quantile(self.after.clone(), 0.99)),
            self.after.len(),
            self.worst,
            ms(quantile(self.windows.clone(), 0.5)),
            part("fence"),
            part("save"),
            part("drain"),
            part("flip"),
            quantile(self.copy_rates.clone(), 0.5).unwrap_or(0.0),
            ms(quantile(self.lags.clone(), 0.5)),
            quantile(self.rcu.clone(), 0.5).unwrap_or(0.0),
            quantile(self.wcu.clone(), 0.5).unwrap_or(0.0),
            self.lost,
            self.stopped.len(),
            if self.stopped.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.stopped.join("; "))
            },
        );
    }
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
    let modes: Vec<bool> = std::env::var("MOVES_MODES")
        .unwrap_or_else(|_| "default,strict".into())
        .split(',')
        .filter_map(|m| match m.trim() {
            "default" => Some(false),
            "strict" => Some(true),
            _ => None,
        })
        .collect();
    let trials = env_or("MOVES_TRIALS", 3);
    let items = env_or("MOVES_ITEMS", 2_000);
    let lane = std::env::var("HEATSINK_LANE").unwrap_or_else(|_| "external".into());
    println!(
        "moves bench: lane {lane}, {items} items in the moved slot, {trials} trials per rate and mode"
    );
    // Warm-up (connections, table creation paths); not reported.
    let _ = ours(50, 100, false).await;
    for rate in rates {
        let mut stats: Vec<Stats> = modes.iter().map(|_| Stats::default()).collect();
        let (mut lost_naive, mut naive_ms) = (0u64, vec![]);
        for trial in 0..trials as usize {
            // Rotate which runs first: each mode of ours, then the naive move (`None`).
            let mut order: Vec<Option<usize>> = (0..modes.len()).map(Some).chain([None]).collect();
            let turn = trial % order.len();
            order.rotate_left(turn);
            for run in order {
                match run {
                    Some(i) => match ours(rate, items, modes[i]).await {
                        None => return,
                        Some(Ok(r)) => stats[i].add(r),
                        Some(Err((why, lost))) => {
                            println!("  trial: the mover stopped, lost {lost}: {why}");
                            stats[i].lost += lost;
                            stats[i].stopped.push(why);
                        }
                    },
                    None => {
                        let Some((took, _, lost, _)) = naive(rate, items).await else {
                            return;
                        };
                        lost_naive += lost;
                        naive_ms.push(took.as_secs_f64() * 1e3);
                    }
                }
            }
        }
        for (s, strict) in stats.iter().zip(&modes) {
            s.print(rate, if *strict { "strict" } else { "default" });
        }
        println!(
            "rate {rate}/s naive move (copy, then flip): median {} ms, lost {lost_naive}",
            ms(quantile(naive_ms, 0.5)),
        );
    }
}
