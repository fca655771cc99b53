//! Open-loop load: requests at a fixed rate whether or not earlier ones have finished, as real
//! clients send them (a closed loop slows down when the server does, which hides throttling and
//! pauses). One scheduler, [`OpenLoop`], drives every load of the demos, tests and benches:
//!
//! - any call: [`OpenLoop::run`] with a closure (the likes of the hot-key demo, the onset bench);
//! - versioned writes through a slot router: [`run_load`] (`heatsink slots load`, the move tests
//!   and the move demo), which logs every acknowledged write as an [`AckLine`] for
//!   `heatsink::slots::verify` to read back, and times each write for the pause percentiles.
//!
//! A request that would exceed `max_in_flight` is not queued: it is **shed** and counted, so a
//! target that cannot keep up shows as shed load instead of a silently slower rate.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use heatsink_sim::load::OpenLoop;
//! let report = OpenLoop::new(500, Duration::from_millis(200))
//!     .run(|_i| async { Ok::<_, ()>(()) }, |_sent| {})
//!     .await;
//! assert_eq!((report.sent, report.ok, report.shed), (100, 100, 0));
//! # }
//! ```
//!
//! Limits: the schedule ticks every 10 ms, so rates above 100/s send in bursts of `rate / 100`;
//! a run sends `round(rate × duration)` requests unless stopped early.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use heatsink::clock::now_ms;
use heatsink::slots::Router;
use heatsink::slots::verify::AckLine;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Semaphore};

/// What a load run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// Requests started.
    pub sent: u64,
    /// Requests that succeeded (after the SDK's own retries).
    pub ok: u64,
    /// Requests that failed after the SDK's retries.
    pub failed: u64,
    /// Requests never started because `max_in_flight` was reached (the target could not keep up).
    pub shed: u64,
    /// Wall time from the first request to the last answer.
    pub elapsed: Duration,
}

/// A fixed-rate schedule: `rate` requests per second for `duration`, or until `stop` is set.
#[derive(Debug, Clone)]
pub struct OpenLoop {
    /// Requests per second.
    pub rate: f64,
    /// How long to send.
    pub duration: Duration,
    /// Most requests in flight; beyond it requests are shed and counted, not queued forever.
    pub max_in_flight: usize,
    /// Set to end the schedule early (the requests in flight still finish).
    pub stop: Option<Arc<AtomicBool>>,
}

impl OpenLoop {
    /// `rate` requests/s for `duration`, at most 512 in flight.
    pub fn new(rate: impl Into<f64>, duration: Duration) -> Self {
        Self {
            rate: rate.into(),
            duration,
            max_in_flight: 512,
            stop: None,
        }
    }

    /// Runs `call(i)` for i = 0, 1, … on schedule (ticks of 10 ms); `progress(sent)` after each tick.
    pub async fn run<F, Fut, T, E>(&self, call: F, mut progress: impl FnMut(u64)) -> LoadReport
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let tick = Duration::from_millis(10);
        let ticks = (self.duration.as_millis() / tick.as_millis()).max(1) as u64;
        let total = (self.rate.max(0.0) * self.duration.as_secs_f64()).round() as u64;
        let limit = Arc::new(Semaphore::new(self.max_in_flight.max(1)));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let mut report = LoadReport::default();
        let mut tasks = tokio::task::JoinSet::new();
        let start = Instant::now();
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut next = 0u64;
        for t in 1..=ticks {
            interval.tick().await;
            if self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                break;
            }
            // Integer schedule: after tick t exactly round(total * t / ticks) requests are due.
            let due = total * t / ticks;
            while next < due {
                match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let fut = call(next);
                        let (ok, failed) = (ok.clone(), failed.clone());
                        tasks.spawn(async move {
                            match fut.await {
                                Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                            };
                            drop(permit);
                        });
                        report.sent += 1;
                    }
                    Err(_) => report.shed += 1,
                }
                next += 1;
            }
            while tasks.try_join_next().is_some() {}
            progress(report.sent);
        }
        while tasks.join_next().await.is_some() {}
        report.elapsed = start.elapsed();
        report.ok = ok.load(Ordering::Relaxed);
        report.failed = failed.load(Ordering::Relaxed);
        report
    }
}

/// One write's timing (for the pause percentiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was issued (ms since the epoch).
    pub issued_ms: u64,
    /// Issue → acknowledgement, in microseconds.
    pub latency_us: u64,
    /// MOVED answers on the way.
    pub moved: u32,
    /// The key's slot (so a pause can be measured on the moved slots alone).
    #[serde(default)]
    pub slot: u16,
}

/// What a [`run_load`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteReport {
    /// Writes acknowledged.
    pub acked: u64,
    /// Writes not acknowledged (the router gave up or failed); never counted as acknowledged.
    pub failed: u64,
    /// Writes never issued because `max_in_flight` writes were already waiting.
    #[serde(default)]
    pub shed: u64,
    /// MOVED answers in all (stale maps bounced).
    pub moved: u64,
    /// Per-write timings.
    pub samples: Vec<Sample>,
}

/// The `q`-quantile (0..=1) of the latencies of `samples` issued in `[from_ms, to_ms]`, in ms.
pub fn latency_quantile(samples: &[Sample], from_ms: u64, to_ms: u64, q: f64) -> Option<f64> {
    let mut l: Vec<u64> = samples
        .iter()
        .filter(|s| s.issued_ms >= from_ms && s.issued_ms <= to_ms)
        .map(|s| s.latency_us)
        .collect();
    if l.is_empty() {
        return None;
    }
    l.sort_unstable();
    let i = ((l.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(l[i] as f64 / 1_000.0)
}

/// The writers' pause: the longest time, in ms, in `[from_ms, to_ms]` without an
/// acknowledgement of a write to a slot `moved` accepts (a write is acknowledged at
/// `issued_ms + latency`). The window's ends count as edges, so a window with no
/// acknowledgement at all is one gap of its whole length. Measured from the writers' side: it
/// holds every cause of a stall (the mark, the wait after it, the fence, the drain, the flip,
/// stale routers bounced after it), not only the mover's own fence → flip window.
pub fn longest_ack_gap(
    samples: &[Sample],
    moved: impl Fn(u16) -> bool,
    from_ms: u64,
    to_ms: u64,
) -> f64 {
    let (from, to) = (from_ms as f64, to_ms as f64);
    let mut acks: Vec<f64> = samples
        .iter()
        .filter(|s| moved(s.slot))
        .map(|s| s.issued_ms as f64 + s.latency_us as f64 / 1_000.0)
        .filter(|&t| t > from && t < to)
        .collect();
    acks.sort_by(f64::total_cmp);
    let mut longest = 0f64;
    let mut last = from;
    for t in acks.into_iter().chain([to]) {
        longest = longest.max(t - last);
        last = t;
    }
    longest
}

/// Versioned-write load parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// Keys `<prefix>0` … `<prefix>N-1` (optionally tagged by tenant).
    pub keys: u64,
    /// Key prefix.
    pub prefix: String,
    /// With `Some(t)`, key `i` carries the hash tag `{t<i mod t>}` (`{t3}key-7`): the keys of
    /// `t` tenants, each tenant in one slot.
    pub tenants: Option<u64>,
    /// Writes per second.
    pub rate: f64,
    /// How long.
    pub duration: Duration,
    /// Writes in flight at most; a write due beyond it is shed ([`WriteReport::shed`]).
    pub max_in_flight: usize,
}

/// Writes `{pk: <key>, v: <n>}` through `router` at `spec.rate` for `spec.duration` (or until
/// `stop` is set) on the [`OpenLoop`] schedule, calling `on_ack` for every acknowledged write.
/// Versions rise per key from 1; a key's next write waits for its previous one to settle, so a
/// key's versions are acknowledged in order.
pub async fn run_load<F>(
    router: Router,
    spec: LoadSpec,
    stop: Arc<AtomicBool>,
    on_ack: F,
) -> WriteReport
where
    F: Fn(&AckLine) + Send + Sync + 'static,
{
    let on_ack = Arc::new(on_ack);
    let report = Arc::new(Mutex::new(WriteReport::default()));
    // The directory's keying, for the samples' slots (a directory that does not load yet
    // hashes: its writes fail and carry no slot anyway).
    let keying = Arc::new(
        router
            .map()
            .await
            .map(|m| m.keying.clone())
            .unwrap_or_default(),
    );
    let keys = spec.keys.max(1);
    let versions: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let busy: Arc<Vec<Mutex<()>>> = Arc::new((0..keys).map(|_| Mutex::new(())).collect());
    let schedule = OpenLoop {
        rate: spec.rate,
        duration: spec.duration,
        max_in_flight: spec.max_in_flight,
        stop: Some(stop),
    };
    let key_of = |i: usize| match spec.tenants {
        Some(t) if t > 0 => format!("{{t{}}}{}{i}", i as u64 % t, spec.prefix),
        _ => format!("{}{i}", spec.prefix),
    };
    let run = schedule
        .run(
            |n| {
                let i = (n % keys) as usize;
                let key = key_of(i);
                let keying = keying.clone();
                let (router, report, versions, busy, on_ack) = (
                    router.clone(),
                    report.clone(),
                    versions.clone(),
                    busy.clone(),
                    on_ack.clone(),
                );
                async move {
                    let _k = busy[i].lock().await;
                    let version = versions[i].fetch_add(1, Ordering::Relaxed) + 1;
                    let issued_ms = now_ms();
                    let t = Instant::now();
                    let res = router.put_versioned(&key, version, HashMap::new()).await;
                    let latency_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                    let mut r = report.lock().await;
                    match res {
                        Ok(ack) => {
                            r.acked += 1;
                            r.moved += u64::from(ack.moved);
                            r.samples.push(Sample {
                                issued_ms,
                                latency_us,
                                moved: ack.moved,
                                slot: keying.slot_of(&key),
                            });
                            on_ack(&AckLine {
                                key,
                                version,
                                owner: ack.owner,
                                epoch: ack.epoch,
                            });
                            Ok(())
                        }
                        Err(_) => {
                            r.failed += 1;
                            Err(())
                        }
                    }
                }
            },
            |_| {},
        )
        .await;
    let mut out = report.lock().await.clone();
    out.shed = run.shed;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_ack_gap_counts_the_window_edges_and_only_the_moved_slots() {
        let s = |issued_ms, latency_ms: u64, slot| Sample {
            issued_ms,
            latency_us: latency_ms * 1_000,
            moved: 0,
            slot,
        };
        let moved = |slot| slot == 7;
        // Acknowledged at 110, 130, 400 (issued at 200, slow) and 450; slot 8 at 300 ignored.
        let samples = [
            s(100, 10, 7),
            s(120, 10, 7),
            s(290, 10, 8),
            s(200, 200, 7),
            s(440, 10, 7),
        ];
        assert_eq!(longest_ack_gap(&samples, moved, 100, 500), 270.0);
        // The window's end is an edge: nothing acknowledged after 450 until 1,000.
        assert_eq!(longest_ack_gap(&samples, moved, 100, 1_000), 550.0);
        // Acknowledgements outside the window do not shorten it.
        assert_eq!(longest_ack_gap(&samples, moved, 460, 600), 140.0);
        assert_eq!(longest_ack_gap(&[], moved, 0, 50), 50.0);
    }

    #[tokio::test]
    async fn it_sends_rate_times_duration_requests() {
        let load = OpenLoop::new(500, Duration::from_millis(400));
        let report = load
            .run(
                |i| async move { if i % 10 == 0 { Err(()) } else { Ok(()) } },
                |_| {},
            )
            .await;
        assert_eq!(report.sent, 200);
        assert_eq!(report.failed, 20);
        assert_eq!(report.ok, 180);
        assert_eq!(report.shed, 0);
    }

    #[tokio::test]
    async fn a_target_that_cannot_keep_up_sheds_load_visibly() {
        let load = OpenLoop {
            max_in_flight: 5,
            ..OpenLoop::new(1000, Duration::from_millis(200))
        };
        let report = load
            .run(
                |_| async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, ()>(())
                },
                |_| {},
            )
            .await;
        assert_eq!(report.sent, 5);
        assert_eq!(report.shed, 195);
    }

    #[tokio::test]
    async fn a_stopped_schedule_sends_nothing_more() {
        let stop = Arc::new(AtomicBool::new(false));
        let load = OpenLoop {
            stop: Some(stop.clone()),
            ..OpenLoop::new(1000, Duration::from_secs(10))
        };
        let report = load
            .run(
                |_| async { Ok::<_, ()>(()) },
                |sent| {
                    if sent >= 50 {
                        stop.store(true, Ordering::Relaxed);
                    }
                },
            )
            .await;
        assert!(report.sent >= 50 && report.sent < 100, "{report:?}");
        assert!(report.elapsed < Duration::from_secs(1), "{report:?}");
    }
}
