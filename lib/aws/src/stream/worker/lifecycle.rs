//! A worker's start and stop around its main loop: the start-up (announce, first listing,
//! missing rows, early first reads) and the graceful shutdown (withdraw, let shard tasks
//! checkpoint and release within one lease duration, release what is left).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::shard::ShardExit;
use super::shared::{AbortOnDrop, HeldLease, Shared};
use super::{RecordProcessor, StreamError};
use crate::stream::{LeaseScan, ShardSource};

/// When the main loop lists shards again and when it may read its first lease.
pub(super) struct Started {
    /// The next shard listing is due then.
    pub(super) next_sync: Instant,
    /// No lease is read before then (`startup_wait` after the start), so peers started
    /// together count each other.
    pub(super) first_read: Instant,
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Announces, then lists the shards beside the announcement and creates the rows the
    /// listing needs from `first_scan`, so the first round after the wait only reads, takes
    /// and starts reading shards; begins early first reads when the source allows them.
    pub(super) async fn start(self: &Arc<Self>, first_scan: Option<&LeaseScan>) -> Started {
        let started = Instant::now();
        let (_, listed) = futures::future::join(self.announce(), self.sync_shards()).await;
        let mut next_sync = started;
        // Without a listing the graph is empty and no take can be planned early.
        let listed_ok = listed.is_ok();
        match listed {
            Ok(()) => {
                self.sync_wanted.store(false, Ordering::Relaxed);
                next_sync = started + self.config.sync_interval;
                if let Some(scan) = first_scan {
                    self.create_missing(scan).await;
                }
            }
            Err(e) => {
                tracing::warn!(worker = %self.config.worker_id, error = %e,
                    "shard sync failed; retrying next round");
            }
        }
        self.stats.0.startup_ms.store(
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if listed_ok
            && self.config.early_read
            && self.source.discardable_reads()
            && !self.config.startup_wait.is_zero()
        {
            Arc::clone(self).read_early().await;
        }
        Started {
            next_sync,
            first_read: started + self.config.startup_wait,
        }
    }

    /// Graceful shutdown: peers stop counting this worker at once; shard tasks finish their
    /// batch, checkpoint and release within one lease duration (then they are aborted);
    /// renewals go on meanwhile; leases still held are released (without a checkpoint).
    pub(super) async fn stop(
        &self,
        mut tasks: JoinSet<(String, ShardExit)>,
        stop_tx: watch::Sender<bool>,
        renew_stop_tx: watch::Sender<bool>,
        mut renewer: AbortOnDrop,
    ) {
        let me = &self.config.worker_id;
        self.announcing.store(false, Ordering::SeqCst);
        if let Err(e) = self.leases.withdraw(me).await {
            tracing::warn!(worker = %me, error = %e,
                "announcement not withdrawn; peers stop counting it after one lease duration");
        }
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(self.config.lease_duration);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                joined = tasks.join_next() => match joined {
                    Some(Ok((shard, _))) => self.forget(&shard),
                    Some(Err(_)) => {}
                    None => break,
                },
                () = &mut deadline => break,
            }
        }
        tasks.abort_all();
        let _ = renew_stop_tx.send(true);
        let _ = (&mut renewer.0).await;
        let left: Vec<(String, Arc<HeldLease>)> = self
            .held
            .lock()
            .map(|h| h.iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect())
            .unwrap_or_default();
        for (shard, h) in left {
            // The copy's checkpoint may be behind the stored one; a release writes none.
            if let Some(lease) = h.snapshot()
                && let Err(e) = self.leases.release(&lease).await
            {
                tracing::warn!(worker = %me, shard = %shard, error = %e, "release at shutdown failed");
            }
            self.forget(&shard);
        }
    }

    /// The error that stopped the worker, taken (none after a requested shutdown).
    pub(super) fn take_fatal(&self) -> Option<StreamError> {
        self.fatal.lock().ok().and_then(|mut f| f.take())
    }
}
