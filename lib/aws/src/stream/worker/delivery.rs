//! Delivery: a batch handed to the processor under the failure policy (retry with capped
//! back-off, report the shard stalled, hand it to the dead-letter sink).

use std::sync::atomic::Ordering;

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
        let mut pause = self.config.retry_backoff;
        let mut attempt: u32 = 0;
        let mut stalled = false;
        loop {
            attempt = attempt.saturating_add(1);
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
                    if stalled {
                        tracing::info!(shard = %shard, attempt, "stalled batch went through");
                        self.stats.set_stalled(shard, None);
                    }
                    self.count(work);
                    return Ok(());
                }
                Err(e) if e.is_lease_lost() => {
                    tracing::info!(shard = %shard, token = work.token, error = %e,
                        "processor fenced out; stopping the shard");
                    return Err(ShardExit::Lost);
                }
                Err(e @ StreamError::Abort(_)) => {
                    let (first, last) = work.range();
                    tracing::error!(shard = %shard, first_seq = %first, last_seq = %last, error = %e,
                        "processor cannot deliver; stopping the worker without checkpointing");
                    self.set_fatal(e);
                    return Err(ShardExit::Aborted);
                }
                Err(e) => e,
            };
            self.stats.0.failed_attempts.fetch_add(1, Ordering::Relaxed);
            let (first, last) = work.range();
            if attempt >= self.config.max_attempts.max(1) {
                if let Some(sink) = &self.dead_letter {
                    match sink.send(work, &error).await {
                        Ok(()) => {
                            tracing::warn!(shard = %shard, first_seq = %first, last_seq = %last,
                                attempt, error = %error,
                                "batch failed every attempt; handed to the dead-letter sink and skipped");
                            self.stats.0.dead_lettered.fetch_add(1, Ordering::Relaxed);
                            self.stats.set_stalled(shard, None);
                            self.count(work);
                            return Ok(());
                        }
                        Err(e) => tracing::error!(shard = %shard, error = %e,
                            "dead-letter sink refused the batch; the shard stays stalled"),
                    }
                }
                if !stalled {
                    tracing::error!(shard = %shard, first_seq = %first, last_seq = %last, attempt,
                        error = %error,
                        "batch keeps failing: shard stalled, retrying until it succeeds or the \
                         lease is lost (nothing is checkpointed past it)");
                    self.stats.set_stalled(shard, Some((first, last)));
                    stalled = true;
                }
            } else {
                tracing::warn!(shard = %shard, attempt, error = %error, "batch failed; retrying");
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stopped(stop) => return Err(ShardExit::Stopped),
                () = self.lease_lapsed(held) => return Err(ShardExit::Lost),
            }
            pause = (pause * 2).min(self.config.max_backoff);
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
