//! An open-loop load generator: sends requests at a fixed rate whether or not earlier ones
//! have finished, as real clients do (a closed loop slows down when the server does, which hides
//! throttling). Used by the demo, the benchmarks and the tests that show a hot partition.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Semaphore;

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

/// A fixed-rate schedule: `rate` requests per second for `duration`.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    /// Requests per second.
    pub rate: u32,
    /// How long to send.
    pub duration: Duration,
    /// Most requests in flight; beyond it requests are shed and counted, not queued forever.
    pub max_in_flight: usize,
}

impl OpenLoop {
    /// `rate` requests/s for `duration`, at most 512 in flight.
    pub fn new(rate: u32, duration: Duration) -> Self {
        Self {
            rate,
            duration,
            max_in_flight: 512,
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
        let total = (f64::from(self.rate) * self.duration.as_secs_f64()).round() as u64;
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

#[cfg(test)]
mod tests {
    use super::*;

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
            rate: 1000,
            duration: Duration::from_millis(200),
            max_in_flight: 5,
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
}
