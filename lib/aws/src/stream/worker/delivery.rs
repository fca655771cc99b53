//! Delivery: a batch handed to the processor under the failure policy, which core's
//! [`Delivery`] decides (retry with capped back-off, report the shard stalled, hand it to the
//! dead-letter sink); this file executes its steps.

use std::sync::atomic::Ordering;

use heatsink_core::stream::{Attempt, Backoff, Delivery, DeliveryStep, Stall};
use tokio::sync::watch;

use super::shard::ShardExit;
use super::shared::{HeldLease, Shared, stopped};
use super::{ProcessBatch, RecordProcessor};
use crate::clock::now_ms;
use crate::stream::{ShardSource, StreamError};

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Hands `work` to the processor under the failure policy (module doc): `Ok` once it
    /// succeeded or the dead-letter sink took it; `Err` with how the shard task ends.
    pub(super) async fn deliver(
        &self,
        held: &HeldLease,
        work: &ProcessBatch,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ShardExit> {
        let shard = &work.shard_id;
        let backoff = Backoff::new(self.config.retry_backoff, self.config.max_backoff);
        let mut policy = Delivery::new(
            self.config.max_attempts,
            backoff,
            self.dead_letter.is_some(),
        );
        loop {
            if !self.is_valid(held) {
                return Err(ShardExit::Lost);
            }
            let result = tokio::select! {
                r = self.processor.process(work) => r,
                () = self.lease_lapsed(held) => {
                    tracing::warn!(shard = %shard, "lease lapsed while the processor ran; \
                        dropped the batch and stopping the shard");
                    return Err(ShardExit::Lost);
                }
            };
            let error = match result {
                Ok(()) => {
                    if policy.attempted(Attempt::Delivered)
                        == (DeliveryStep::Done { recovered: true })
                    {
                        tracing::info!(shard = %shard, attempt = policy.attempts(),
                            "stalled batch went through");
                        self.stats.set_stalled(shard, None);
                    }
                    self.count(work);
                    return Ok(());
                }
                Err(e) => e,
            };
            let attempt = match &error {
                e if e.is_lease_lost() => Attempt::Fenced,
                StreamError::Abort(_) => Attempt::Abort,
                _ => Attempt::Failed,
            };
            let mut step = policy.attempted(attempt);
            let (first, last) = work.range();
            match step {
                DeliveryStep::StopShard => {
                    tracing::info!(shard = %shard, token = work.token, error = %error,
                        "processor fenced out; stopping the shard");
                    return Err(ShardExit::Lost);
                }
                DeliveryStep::StopWorker => {
                    tracing::error!(shard = %shard, first_seq = %first, last_seq = %last,
                        error = %error,
                        "processor cannot deliver; stopping the worker without checkpointing");
                    self.set_fatal(error);
                    return Err(ShardExit::Aborted);
                }
                _ => {}
            }
            self.stats.0.failed_attempts.fetch_add(1, Ordering::Relaxed);
            if step == DeliveryStep::DeadLetter
                && let Some(sink) = &self.dead_letter
            {
                match sink.send(work, &error).await {
                    Ok(()) => {
                        tracing::warn!(shard = %shard, first_seq = %first, last_seq = %last,
                            attempt = policy.attempts(), error = %error,
                            "batch failed every attempt; handed to the dead-letter sink and skipped");
                        self.stats.0.dead_lettered.fetch_add(1, Ordering::Relaxed);
                        self.stats.set_stalled(shard, None);
                        self.count(work);
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::error!(shard = %shard, error = %e,
                            "dead-letter sink refused the batch; the shard stays stalled");
                        step = policy.dead_letter_refused();
                    }
                }
            }
            let DeliveryStep::Retry { pause, stall } = step else {
                return Err(ShardExit::Lost);
            };
            match stall {
                Stall::No => tracing::warn!(shard = %shard, attempt = policy.attempts(),
                    error = %error, "batch failed; retrying"),
                Stall::Now => {
                    tracing::error!(shard = %shard, first_seq = %first, last_seq = %last,
                        attempt = policy.attempts(), error = %error,
                        "batch keeps failing: shard stalled, retrying until it succeeds or the \
                         lease is lost (nothing is checkpointed past it)");
                    self.stats.set_stalled(shard, Some((first, last)));
                }
                Stall::Already => {}
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stopped(stop) => return Err(ShardExit::Stopped),
                () = self.lease_lapsed(held) => return Err(ShardExit::Lost),
            }
        }
    }

    pub(super) fn count(&self, batch: &ProcessBatch) {
        let stats = &self.stats.0;
        stats
            .records
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.last_record_ms.store(now_ms(), Ordering::Relaxed);
        let since_start = self.mono_ms().max(1);
        let _ = stats.first_record_ms.compare_exchange(
            0,
            since_start,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}
