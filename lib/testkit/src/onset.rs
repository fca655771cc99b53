//! The closed loop end to end: a key turns hot → a detector names it → the controller writes
//! the directory → writers salt. Measures each step's time from the onset.
//!
//! Writers send an open-loop stream of `UpdateItem ADD` on one key through the simulator, each
//! choosing its sub-key from a [`CachedDirectory`] snapshot (round-robin over the write set).
//! Every `poll` the controller reads its [`Detection`]: the simulator's sampler report
//! (`/_sim/hot`, as a router's report would arrive), or the writers' own throttle reasons (a
//! [`ThrottleWatch`] on the writers' client: key-range throttles of every attempt, no sampling),
//! and runs the [`Controller`] on it (on the throttle path also as soon as the watch says a key
//! reached its threshold). Used by the onset benchmark
//! (`lib/testkit/benches/onset.rs`) and the integration tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::keys::SaltPolicy;
use serde::Serialize;
use serde_json::json;

use heatsink::detect::{Kind, SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE, ThrottleWatch};
use heatsink::hot::CachedDirectory;
use heatsink::hot::{ControlError, Controller};
use heatsink_sim::Simulator;
use heatsink_sim::load::{LoadReport, OpenLoop};

/// One onset run's settings.
#[derive(Debug, Clone)]
pub struct Onset {
    /// Table written (partition key `pk`, sort key `sk`; the counters table's shape).
    pub table: String,
    /// The key that turns hot.
    pub key: String,
    /// Writes per second on it from the start.
    pub rate: u32,
    /// How long the writers run.
    pub duration: Duration,
    /// How often the controller reads its detector.
    pub poll: Duration,
    /// Which signal the controller acts on.
    pub detection: Detection,
}

/// The signal the controller acts on in an onset run.
#[derive(Debug, Clone)]
pub enum Detection {
    /// The simulator's sampler report (1 in N requests sampled into a sliding window).
    Sampler,
    /// The key-range throttle reasons the writers' client saw on every attempt (`ThrottleWatch`
    /// must be an interceptor of the client the run writes with). The controller runs at each
    /// poll and as soon as the watch says a key reached its threshold
    /// ([`ThrottleWatch::crossed`]).
    Throttles(ThrottleWatch),
    /// None: the controller never acts, the writers never salt (the baseline a spike meets
    /// without detection).
    Off,
}

/// When each step happened, from the first hot write.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OnsetReport {
    /// The detector (sampler report or throttle reasons) first named the key.
    pub detected_ms: Option<u64>,
    /// The controller run that wrote the key's salt entry returned (writers may already have
    /// seen the entry: the run re-reads the directory after writing).
    pub directory_ms: Option<u64>,
    /// A writer first wrote a salted sub-key.
    pub salting_ms: Option<u64>,
    /// S the controller chose.
    pub salts: u16,
    /// Directory writes over the whole run (1 when nothing flapped).
    pub directory_writes: usize,
    /// Throttled requests up to the controller poll that first saw a salted write.
    pub throttled_before: u64,
    /// Throttled requests after it.
    pub throttled_after: u64,
    /// The busiest partition's write utilisation in the seconds before salting started.
    pub max_utilisation_before: f64,
    /// The busiest partition's write utilisation from the first whole second after salting.
    pub max_utilisation_after: f64,
    /// The writers' load report.
    pub load: LoadReport,
}

const UNSET: u64 = u64::MAX;

fn ms(at: &AtomicU64) -> Option<u64> {
    Some(at.load(Ordering::Relaxed)).filter(|v| *v != UNSET)
}

/// One controller step on `onset`'s signal: the first time the signal names the key, `detected`
/// gets the time since `start` (read before the controller runs: writers may see its directory
/// write before it returns); returns how many directory changes of the key the controller made.
async fn act(
    onset: &Onset,
    sim: &Simulator,
    function: &Controller,
    (read_ceiling, write_ceiling): (f64, f64),
    (start, detected): (Instant, &mut Option<u64>),
) -> Result<usize, ControlError> {
    let mut named = |is: bool| {
        if is && detected.is_none() {
            *detected = Some(start.elapsed().as_millis() as u64);
        }
    };
    match &onset.detection {
        Detection::Off => Ok(0),
        Detection::Sampler => {
            let hot = sim.hot();
            named(hot.hot.iter().any(|h| h.key == onset.key));
            let event = json!({"source": SAMPLER_SOURCE, "detail-type": SAMPLER_DETAIL_TYPE, "detail": hot});
            let outcome = function.handle(&event, SystemTime::now()).await?;
            let prefix = format!("{}:", onset.key);
            Ok(outcome
                .changes
                .iter()
                .filter(|c| c.starts_with(&prefix))
                .count())
        }
        Detection::Throttles(watch) => {
            let signals = watch.signals(|kind| match kind {
                Kind::Read => read_ceiling,
                Kind::Write => write_ceiling,
            });
            named(signals.iter().any(|s| s.key == onset.key));
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let outcome = function.run(&signals, now).await?;
            Ok(outcome
                .applied
                .iter()
                .filter(|c| c.key() == onset.key)
                .count())
        }
    }
}

/// Runs the scenario: writers through `sim` with `ddb` (a client pointed at the simulator),
/// the controller on `sim`'s sampler reports, writers' salt policy from `cached`.
pub async fn run(
    onset: &Onset,
    sim: &Simulator,
    ddb: &aws_sdk_dynamodb::Client,
    function: &Controller,
    cached: Arc<CachedDirectory>,
) -> Result<OnsetReport, ControlError> {
    let start = Instant::now();
    let offset_ms = sim.elapsed().as_millis() as u64;
    let salting = Arc::new(AtomicU64::new(UNSET));
    let writers = {
        let (ddb, cached, salting) = (ddb.clone(), Arc::clone(&cached), Arc::clone(&salting));
        let (table, key) = (onset.table.clone(), onset.key.clone());
        let load = OpenLoop::new(onset.rate, onset.duration);
        async move {
            load.run(
                move |i| {
                    let (ddb, cached, salting) = (ddb.clone(), cached.clone(), salting.clone());
                    let (table, key) = (table.clone(), key.clone());
                    async move {
                        let snapshot = cached.snapshot().await?;
                        let set = snapshot.write_set(&key)?;
                        let sub_key = set[(i as usize) % set.len()].clone();
                        if sub_key != key {
                            let at = start.elapsed().as_millis() as u64;
                            salting.fetch_min(at, Ordering::Relaxed);
                        }
                        ddb.update_item()
                            .table_name(table)
                            .key("pk", AttributeValue::S(sub_key))
                            .key("sk", AttributeValue::S("total".into()))
                            .update_expression("ADD #t :one")
                            .expression_attribute_names("#t", "total")
                            .expression_attribute_values(":one", AttributeValue::N("1".into()))
                            .send()
                            .await
                            .map(drop)
                            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                    }
                },
                |_| {},
            )
            .await
        }
    };
    let ceilings = {
        let stats = sim.stats();
        (stats.read_ceiling, stats.write_ceiling)
    };
    let controller = async {
        let mut report = OnsetReport::default();
        let mut before = None;
        let mut tick = tokio::time::interval(onset.poll);
        while start.elapsed() < onset.duration {
            match &onset.detection {
                // The watch wakes the controller when a key reaches its threshold: no waiting
                // out the rest of the poll interval.
                Detection::Throttles(watch) => tokio::select! {
                    _ = tick.tick() => {}
                    () = watch.crossed() => {}
                },
                Detection::Sampler | Detection::Off => {
                    tick.tick().await;
                }
            }
            let n = act(
                onset,
                sim,
                function,
                ceilings,
                (start, &mut report.detected_ms),
            )
            .await?;
            if n > 0 && report.directory_ms.is_none() {
                report.directory_ms = Some(start.elapsed().as_millis() as u64);
            }
            report.directory_writes += n;
            if ms(&salting).is_some() && before.is_none() {
                before = Some(sim.stats().table_throttled(&onset.table));
            }
        }
        report.throttled_before = before.unwrap_or(0);
        Ok::<_, ControlError>(report)
    };
    let (load, report) = tokio::join!(writers, controller);
    let mut report = report?;
    report.load = load;
    report.salting_ms = ms(&salting);
    report.salts = cached
        .snapshot()
        .await
        .map(|s| s.salts(&onset.key))
        .unwrap_or(1);
    let stats = sim.stats();
    report.throttled_after = stats
        .table_throttled(&onset.table)
        .saturating_sub(report.throttled_before);
    // Per-second history is indexed from the simulator's start, the run began `offset_ms` later.
    let split = report
        .salting_ms
        .map_or(usize::MAX, |m| ((offset_ms + m) / 1_000) as usize + 1);
    let ceiling = stats.write_ceiling;
    for p in stats
        .partitions
        .iter()
        .filter(|p| p.id.table == onset.table)
    {
        for (second, wcu) in p.stats.wcu_per_second.iter().enumerate() {
            if (second as u64) < offset_ms / 1_000 {
                continue;
            }
            let slot = if second < split.saturating_sub(1) {
                &mut report.max_utilisation_before
            } else if second >= split {
                &mut report.max_utilisation_after
            } else {
                continue;
            };
            *slot = slot.max(wcu / ceiling);
        }
    }
    Ok(report)
}
