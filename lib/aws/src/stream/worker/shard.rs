//! The shard task: reads one held shard from the fetcher's queue, hands each batch to the
//! processor, checkpoints, and ends the shard (SHARD_END and the children's leases, a release
//! at shutdown, DELETED when the shard is gone).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use heatsink_core::stream::{Lease, LeaseEvent};
use tokio::sync::{mpsc, watch};

use super::checkpointer::Checkpointer;
use super::early::EarlyRead;
use super::fetcher::{ByteBudget, Fetched, HeldBytes};
use super::shared::{AbortOnDrop, HeldLease, Shared, stopped};
use super::{ProcessBatch, RecordProcessor};
use crate::stream::lease_table::new_lease;
use crate::stream::{ShardSource, StreamRecord};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ShardExit {
    /// Read to SHARD_END; children's leases created.
    Finished,
    /// The lease moved to another worker, lapsed, or a fenced write was refused.
    Lost,
    /// Shutdown: the lease was released.
    Stopped,
    /// The shard no longer exists.
    Gone,
    /// The processor cannot deliver: the worker stops.
    Aborted,
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Reads one shard while holding its lease; on shutdown checkpoints and releases it, when
    /// the shard is gone marks its lease DELETED so its children proceed.
    pub(super) async fn run_shard(
        self: Arc<Self>,
        held: Arc<HeldLease>,
        mut stop: watch::Receiver<bool>,
        early: Option<EarlyRead>,
    ) -> (String, ShardExit) {
        let Some(lease) = held.snapshot() else {
            return (String::new(), ShardExit::Lost);
        };
        let shard = lease.shard_id.clone();
        let exit = Arc::clone(&self).read_shard(&held, &mut stop, early).await;
        match exit {
            ShardExit::Stopped | ShardExit::Aborted => {
                if let Some(lease) = held.snapshot()
                    && let Err(e) = self.leases.release(&lease).await
                {
                    tracing::warn!(worker = %self.me(), shard = %shard, error = %e, "release failed");
                }
            }
            ShardExit::Gone => self.mark_gone(&held).await,
            ShardExit::Finished | ShardExit::Lost => {}
        }
        self.stats.set_held(&shard, None);
        self.stats.set_stalled(&shard, None);
        (shard, exit)
    }

    /// The shard vanished before its end: report it loudly, mark its lease DELETED (terminal)
    /// and drop it from the graph, so its children are read now rather than never.
    pub(super) async fn mark_gone(&self, held: &HeldLease) {
        let Some(lease) = held.snapshot() else { return };
        tracing::error!(worker = %self.me(), shard = %lease.shard_id,
            checkpoint = %lease.checkpoint.to_checkpoint(),
            "shard is gone (not found) before it was read to its end: records after the \
             checkpoint are lost; its lease is marked DELETED and its children proceed");
        self.stats.0.gone.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.leases.apply(&lease, &LeaseEvent::Trim).await {
            tracing::warn!(shard = %lease.shard_id, error = %e, "marking a gone shard DELETED failed");
        }
        let mut graph = (*self.graph()).clone();
        graph.remove(&lease.shard_id);
        self.set_graph(graph);
    }

    pub(super) async fn read_shard(
        self: Arc<Self>,
        held: &Arc<HeldLease>,
        stop: &mut watch::Receiver<bool>,
        early: Option<EarlyRead>,
    ) -> ShardExit {
        let Some(lease) = held.snapshot() else {
            return ShardExit::Lost;
        };
        let shard = lease.shard_id.clone();
        let (tx, mut rx) = mpsc::channel(self.config.prefetch_batches.max(1));
        let budget = Arc::new(ByteBudget::default());
        let fetcher = tokio::spawn(Arc::clone(&self).fetch(
            shard.clone(),
            Self::start_of(&lease),
            Arc::clone(held),
            tx,
            Arc::clone(&budget),
            stop.clone(),
            early,
        ));
        let _fetcher = AbortOnDrop(fetcher);
        let mut cp = Checkpointer::new(lease);
        let exit = loop {
            if *stop.borrow() {
                break ShardExit::Stopped;
            }
            let tick = self.config.checkpoint_interval;
            let fetched = tokio::select! {
                biased;
                () = self.lease_lapsed(held) => break ShardExit::Lost,
                () = stopped(stop) => break ShardExit::Stopped,
                () = tokio::time::sleep(tick), if cp.pending.is_some() => {
                    if let Err(exit) = self.maybe_checkpoint(&mut cp, held).await {
                        break exit;
                    }
                    continue;
                }
                fetched = rx.recv() => fetched,
            };
            // A part of an answer never ends the shard, whatever its iterator says.
            let (batch, bytes, part) = match fetched {
                Some((Fetched::Batch(batch), bytes)) => (batch, bytes, false),
                Some((Fetched::Part(batch), bytes)) => (batch, bytes, true),
                Some((Fetched::Gone, _)) => break ShardExit::Gone,
                None if *stop.borrow() => break ShardExit::Stopped,
                None => break ShardExit::Lost,
            };
            // The batch's bytes count against the fetcher's budget until it is processed.
            let _held_bytes = HeldBytes(&budget, bytes);
            if !batch.child_shards.is_empty()
                && let Err(e) = self.merge_shards(batch.child_shards.clone())
            {
                tracing::warn!(shard = %shard, error = %e, "ChildShards did not merge into the graph");
            }
            // Records at or before the checkpoint (a resumed aggregate) were processed already;
            // a batch is in reading order, so they are a prefix of it.
            let mut records = batch.records;
            if let Some(done) = cp.done() {
                let skip = records.iter().take_while(|r| r.position() <= *done).count();
                records.drain(..skip);
            }
            if let Some(last) = records.last().map(StreamRecord::position) {
                let work = ProcessBatch {
                    shard_id: shard.clone(),
                    token: cp.lease.counter,
                    records,
                };
                match self.deliver(held, &work, stop).await {
                    Ok(()) => cp.processed(last, work.records.len()),
                    Err(exit) => break exit,
                }
                if let Err(exit) = self.maybe_checkpoint(&mut cp, held).await {
                    break exit;
                }
            }
            if !part && batch.next_iterator.is_none() {
                if let Err(exit) = self.flush(&mut cp, held, true).await {
                    break exit;
                }
                break self.finish(&mut cp.lease, held).await;
            }
        };
        match exit {
            // Forced checkpoints: before the release, and when the lease lapsed (conditional on
            // the row still being ours, so harmless if another worker took it).
            ShardExit::Stopped => {
                let _ = self.flush(&mut cp, held, true).await;
            }
            ShardExit::Lost if !held.lost.load(Ordering::SeqCst) => {
                let _ = self.flush(&mut cp, held, false).await;
            }
            _ => {}
        }
        exit
    }

    /// SHARD_END: record the end, create the children's leases, mark CHILDREN_CREATED.
    pub(super) async fn finish(&self, lease: &mut Lease, held: &HeldLease) -> ShardExit {
        let end = LeaseEvent::ReachShardEnd {
            worker: self.me().to_owned(),
            counter: lease.counter,
        };
        match self.leases.apply(lease, &end).await {
            Ok(next) => {
                *lease = next;
                held.set_checkpoint(lease);
            }
            Err(e) => {
                tracing::warn!(shard = %lease.shard_id, error = %e, "SHARD_END not recorded");
                return ShardExit::Lost;
            }
        }
        let mut children = self.children(&lease.shard_id);
        if children.is_empty() {
            // ChildShards was absent: the listing has them once the reshard is visible.
            if let Err(e) = self.sync_shards().await {
                tracing::warn!(shard = %lease.shard_id, error = %e, "shard sync at SHARD_END failed");
            }
            children = self.children(&lease.shard_id);
        }
        let floor = lease.counter.saturating_add(1);
        let rows: Vec<Lease> = children.iter().map(|c| new_lease(c, floor)).collect();
        let created =
            futures::future::join_all(rows.iter().map(|row| self.leases.create(row))).await;
        let mut ok = !children.is_empty();
        for (child, result) in children.iter().zip(created) {
            if let Err(e) = result {
                tracing::warn!(shard = %child.shard_id, error = %e, "child lease not created");
                ok = false;
            }
        }
        if ok && let Err(e) = self.leases.apply(lease, &LeaseEvent::CreateChildren).await {
            tracing::debug!(shard = %lease.shard_id, error = %e, "CHILDREN_CREATED not recorded");
        }
        ShardExit::Finished
    }
}
