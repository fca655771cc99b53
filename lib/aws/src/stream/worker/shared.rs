//! The state a worker's tasks share: the held leases and how long each is valid on the
//! monotonic clock, the shard graph, the fatal error that stops the worker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use heatsink_core::stream::{Lease, ShardGraph};
use tokio::sync::{Notify, watch};

use super::early::EarlyRead;
use super::{RecordProcessor, WorkerConfig, WorkerStats};
use crate::stream::{DeadLetter, LeaseTable, ShardSource, StreamError};

/// A lease this worker holds, shared by its shard task, the renewer and the main loop.
#[derive(Debug)]
pub(super) struct HeldLease {
    /// The row as this worker last wrote it (the shard task keeps the checkpoint in step).
    pub(super) lease: Mutex<Lease>,
    /// Monotonic ms (since the worker's start) until which the lease is valid here.
    pub(super) valid_until: AtomicU64,
    /// Set when a write was refused or the plan found the row moved: stop now.
    pub(super) lost: AtomicBool,
    /// Wakes the shard task when `lost` is set.
    pub(super) notify: Notify,
}

impl HeldLease {
    pub(super) fn snapshot(&self) -> Option<Lease> {
        self.lease.lock().ok().map(|l| l.clone())
    }

    pub(super) fn counter(&self) -> u64 {
        self.lease.lock().map(|l| l.counter).unwrap_or(0)
    }

    pub(super) fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.notify.notify_one();
        self.notify.notify_waiters();
    }

    pub(super) fn set_checkpoint(&self, lease: &Lease) {
        if let Ok(mut l) = self.lease.lock() {
            l.checkpoint = lease.checkpoint.clone();
            l.state = lease.state;
        }
    }
}

pub(super) struct Shared<S, P> {
    pub(super) source: S,
    pub(super) leases: LeaseTable,
    pub(super) processor: P,
    pub(super) dead_letter: Option<Arc<dyn DeadLetter>>,
    pub(super) config: WorkerConfig,
    pub(super) max_records: i32,
    pub(super) stats: WorkerStats,
    pub(super) graph: Mutex<Arc<ShardGraph>>,
    pub(super) sync_wanted: AtomicBool,
    pub(super) held: Mutex<BTreeMap<String, Arc<HeldLease>>>,
    /// The worker's monotonic clock starts here.
    pub(super) base: Instant,
    pub(super) fatal: Mutex<Option<StreamError>>,
    pub(super) fatal_notify: Notify,
    pub(super) lost_since_round: AtomicUsize,
    /// Lease rows whose shard was unlisted (with no listed parent) at the last round.
    pub(super) unlisted: Mutex<BTreeSet<String>>,
    /// The renewer refreshes the announcement while this is true (cleared at shutdown).
    pub(super) announcing: AtomicBool,
    /// Early first reads begun during the start-up wait, by shard, until the first round.
    pub(super) early: Mutex<BTreeMap<String, EarlyRead>>,
}

impl<S, P> Shared<S, P> {
    /// The state of a worker about to start: nothing held, no graph yet, a listing wanted.
    pub(super) fn new(
        source: S,
        leases: LeaseTable,
        processor: P,
        dead_letter: Option<Arc<dyn DeadLetter>>,
        config: WorkerConfig,
        stats: WorkerStats,
        max_records: i32,
    ) -> Self {
        Self {
            source,
            leases,
            processor,
            dead_letter,
            config,
            max_records,
            stats,
            graph: Mutex::new(Arc::new(ShardGraph::default())),
            sync_wanted: AtomicBool::new(true),
            held: Mutex::new(BTreeMap::new()),
            base: Instant::now(),
            fatal: Mutex::new(None),
            fatal_notify: Notify::new(),
            lost_since_round: AtomicUsize::new(0),
            unlisted: Mutex::new(BTreeSet::new()),
            announcing: AtomicBool::new(true),
            early: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Completes once `stop` is true (or its sender is gone).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sleeps `d`; true if `stop` became true first.
pub(super) async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = stopped(stop) => true,
    }
}

/// Aborts the task when dropped (the fetcher dies with its shard task).
pub(super) struct AbortOnDrop<T = ()>(pub(super) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    pub(super) fn me(&self) -> &str {
        &self.config.worker_id
    }

    pub(super) fn duration_ms(&self) -> u64 {
        u64::try_from(self.config.lease_duration.as_millis()).unwrap_or(u64::MAX)
    }

    /// Monotonic ms since the worker started.
    pub(super) fn mono_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long after a renewal's send time this worker still trusts the lease: nine tenths of
    /// the lease duration, so it stops before another worker (whose clock may run a little
    /// ahead) can take the lease over.
    pub(super) fn trusted_ms(&self) -> u64 {
        let d = self.duration_ms();
        d - d / 10
    }

    pub(super) fn is_valid(&self, held: &HeldLease) -> bool {
        !held.lost.load(Ordering::SeqCst)
            && self.mono_ms() < held.valid_until.load(Ordering::SeqCst)
    }

    /// Completes when the lease is lost or past its validity (renewals may push it out while
    /// this waits).
    pub(super) async fn lease_lapsed(&self, held: &HeldLease) {
        loop {
            if !self.is_valid(held) {
                return;
            }
            let left = held
                .valid_until
                .load(Ordering::SeqCst)
                .saturating_sub(self.mono_ms());
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(left.max(1))) => {}
                () = held.notify.notified() => {}
            }
        }
    }

    pub(super) fn held_count(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }

    pub(super) fn forget(&self, shard: &str) {
        if let Ok(mut h) = self.held.lock() {
            h.remove(shard);
        }
        self.stats.set_held(shard, None);
        self.stats.set_stalled(shard, None);
    }

    pub(super) fn take_fatal_peek(&self) -> bool {
        self.fatal.lock().map(|f| f.is_some()).unwrap_or(false)
    }

    pub(super) fn set_fatal(&self, e: StreamError) {
        if let Ok(mut f) = self.fatal.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
        self.fatal_notify.notify_one();
    }
}
