//! Early reads: inside the start-up wait, each planned take's first GetRecords, used only if
//! the first round takes that lease at the checkpoint the read started from
//! ([`WorkerConfig::early_read`](super::WorkerConfig::early_read)).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use heatsink_core::stream::Lease;

use super::RecordProcessor;
use super::shared::{AbortOnDrop, Shared};
use crate::clock::now_ms;
use crate::stream::{RecordBatch, ShardSource, StartAt, StreamError};

/// A shard's first GetRecords, begun during the start-up wait for a take the worker planned
/// ([`WorkerConfig::early_read`]).
pub(super) struct EarlyRead {
    /// Where it reads from: the lease's checkpoint when the take was planned. The answer is used
    /// only if the lease is then taken at the same place.
    pub(super) start: StartAt,
    /// The read; `None` if no iterator was had (the shard task then starts as usual).
    pub(super) task: AbortOnDrop<Option<EarlyAnswer>>,
}

/// What an early read got: the shard's first GetRecords call, which the fetcher takes as its
/// own (a refusal backs off as any other would).
pub(super) struct EarlyAnswer {
    /// The iterator the call used.
    pub(super) iterator: String,
    pub(super) result: Result<RecordBatch, StreamError>,
    /// When the GetRecords was sent: the first call in the shard's read pace.
    pub(super) sent: tokio::time::Instant,
    /// What it asked for (the first page) and how long it took: the reader's first answer.
    pub(super) limit: i32,
    pub(super) took: Duration,
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Inside the start-up wait, once the rows exist: reads the lease table, plans this worker's
    /// takes from that read (peers announced by now count) and begins each planned shard's
    /// first read ([`WorkerConfig::early_read`]). A failed read of the table only means no
    /// early reads.
    pub(super) async fn read_early(self: Arc<Self>) {
        let scan = match self.leases.scan().await {
            Ok(scan) => scan,
            Err(e) => {
                tracing::debug!(worker = %self.me(), error = %e, "no early reads: lease read failed");
                return;
            }
        };
        let plan = self.plan(&self.graph(), &scan, now_ms());
        let mut early = BTreeMap::new();
        for acquire in &plan.take {
            let shard = acquire.lease.shard_id.clone();
            let start = Self::start_of(&acquire.lease);
            let task = tokio::spawn(Arc::clone(&self).early_answer(shard.clone(), start.clone()));
            early.insert(
                shard,
                EarlyRead {
                    start,
                    task: AbortOnDrop(task),
                },
            );
        }
        if let Ok(mut e) = self.early.lock() {
            *e = early;
        }
    }

    /// One early read: an iterator at `start`, then one GetRecords; `None` if the iterator
    /// failed.
    pub(super) async fn early_answer(
        self: Arc<Self>,
        shard: String,
        start: StartAt,
    ) -> Option<EarlyAnswer> {
        let iterator = self
            .source
            .get_iterator(&shard, &start)
            .await
            .inspect_err(|e| tracing::debug!(shard = %shard, error = %e, "early iterator failed"))
            .ok()?;
        let limit = self.read_size().page();
        let limit = i32::try_from(limit).unwrap_or(self.max_records);
        let sent = tokio::time::Instant::now();
        let result = self.source.get_records(&iterator, limit).await;
        Some(EarlyAnswer {
            iterator,
            result,
            sent,
            limit,
            took: sent.elapsed(),
        })
    }

    /// The early read of `lease`'s shard, if there is one from the checkpoint it was taken at.
    pub(super) fn take_early(&self, lease: &Lease) -> Option<EarlyRead> {
        let early = self.early.lock().ok()?.remove(&lease.shard_id)?;
        if early.start == Self::start_of(lease) {
            self.stats.0.early_used.fetch_add(1, Ordering::Relaxed);
            Some(early)
        } else {
            self.stats.0.early_dropped.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// Drops (and aborts) every early read the round did not use.
    pub(super) fn drop_early(&self) {
        let left = self
            .early
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default();
        if !left.is_empty() {
            self.stats
                .0
                .early_dropped
                .fetch_add(left.len() as u64, Ordering::Relaxed);
        }
    }
}
