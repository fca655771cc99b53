//! `Worker`: the consumer loop — shard sync, leases, GetRecords polling, processing, checkpoints.
//!
//! One worker runs one main loop and one task per held shard. Every `renew_interval` the main
//! loop (re)lists shards when due, reads the application's leases and hands that read to
//! [`plan_round`], which decides the whole round as data (a [`RoundPlan`]): rows to recreate from
//! the shard graph, leases to renew, shards to stop because their lease moved, and takes and
//! steals over the eligible shards. The loop only executes the plan — the conditional lease-table
//! writes — and reacts to their results (see [`heatsink_core::stream`]'s `round.rs` for the
//! state machine). A shard task reads its
//! shard from the checkpoint, hands each batch to the [`RecordProcessor`] with the lease counter
//! as fencing token, checkpoints after `Ok`, and at SHARD_END records the end and creates the
//! children's leases.
//!
//! After every round the worker can report what the round did to its leases ([`RoundReport`]):
//! [`Worker::on_round`] takes any callback, [`Worker::emit_emf`] writes the report as EMF
//! metrics ([`RoundReport::metrics`]) for a dashboard's leases widget.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use heatsink_core::counter::Seq;
use heatsink_core::stream::{
    Acquire, Lease, LeaseEvent, Progress, Repair, RoundInput, RoundPlan, ShardGraph, ShardInfo,
    plan_round,
};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use super::lease_table::new_lease;
use super::{LeaseScan, LeaseTable, ShardSource, StartAt, StreamError, StreamRecord};
use crate::clock::now_ms;
use crate::metrics::Emf;

/// One batch handed to a [`RecordProcessor`].
#[derive(Clone, Debug)]
pub struct ProcessBatch {
    /// The shard the records come from.
    pub shard_id: String,
    /// The lease counter: the fencing token for the processor's own writes ([`super::Fence`]).
    pub token: u64,
    /// The records, in sequence order.
    pub records: Vec<StreamRecord>,
}

impl ProcessBatch {
    /// The fence for the processor's own DynamoDB writes of this batch: its writes carry this
    /// batch's lease counter, so once a newer holder of the shard has written an item, this
    /// worker's late write of it is refused instead of overwriting the newer one.
    pub fn fence(&self) -> super::Fence {
        super::Fence::new(self.token)
    }
}

/// What a consumer does with records; `Ok` means "durable: checkpoint after the last record".
///
/// Make the processor's own DynamoDB writes through [`ProcessBatch::fence`] (a
/// [`super::Fence`] over the batch's lease counter) rather than building a fence by hand.
/// Return [`StreamError::Fenced`] (what [`super::Fence::check`] gives) when a fenced write was
/// refused: the worker stops the shard at once. Any other error retries the batch, up to
/// [`WorkerConfig::max_attempts`] times in all, then reports it and moves on.
pub trait RecordProcessor: Send + Sync + 'static {
    /// Processes one batch; must be idempotent (delivery is at-least-once).
    fn process(&self, batch: &ProcessBatch)
    -> impl Future<Output = Result<(), StreamError>> + Send;
}

/// A worker's settings; [`WorkerConfig::new`] gives production defaults.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// This worker's name in the lease table; unique among the application's live workers.
    pub worker_id: String,
    /// How long a lease lasts without renewal (default 10 s); takeover after a crash waits this.
    pub lease_duration: Duration,
    /// Main-loop period: renewals, lease reads and planning (default 3 s, a third of the lease).
    pub renew_interval: Duration,
    /// Period of the full shard sync (ListShards / DescribeStream), default 60 s.
    pub sync_interval: Duration,
    /// Pause after an empty GetRecords (default 1 s; Kinesis allows 5 reads/s per shard).
    pub idle_poll: Duration,
    /// GetRecords limit per call (default 1,000; Kinesis max 10,000, DynamoDB Streams 1,000).
    pub max_records: i32,
    /// Processor attempts per batch before it is reported and skipped (default 3).
    pub max_attempts: u32,
    /// First pause between processor attempts and after throttling, doubling (default 200 ms).
    pub retry_backoff: Duration,
    /// Longest back-off pause (default 5 s).
    pub max_backoff: Duration,
    /// Where a shard without parents starts on the application's first run (default TRIM_HORIZON).
    pub initial_position: StartAt,
    /// Leases stolen per round when rebalancing (default 1, like the KCL).
    pub max_steals_per_round: usize,
    /// Read each take (and steal) back and keep the lease only if the stored row still names
    /// this worker with the written counter (default false: one extra GetItem per acquisition).
    ///
    /// Only for emulators whose conditional writes are not atomic under concurrency (moto
    /// 5.2.5), where two takers can both see their conditional write succeed and only one row
    /// survives. DynamoDB serialises conditional writes, so production leaves it off.
    pub verify_takes: bool,
}

impl WorkerConfig {
    /// Defaults that are safe in production, for worker `worker_id`.
    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(3),
            sync_interval: Duration::from_secs(60),
            idle_poll: Duration::from_secs(1),
            max_records: 1_000,
            max_attempts: 3,
            retry_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            initial_position: StartAt::TrimHorizon,
            max_steals_per_round: 1,
            verify_takes: false,
        }
    }
}

#[derive(Debug, Default)]
struct StatsInner {
    records: AtomicU64,
    batches: AtomicU64,
    failed_batches: AtomicU64,
    last_record_ms: AtomicU64,
    free_eligible: AtomicUsize,
    rounds: AtomicU64,
    /// Held shards and whether each has caught up with its tip (or its end).
    held: Mutex<BTreeMap<String, bool>>,
}

/// Live counters of a worker, readable while it runs (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct WorkerStats(Arc<StatsInner>);

impl WorkerStats {
    /// Records handed to the processor and acknowledged (or reported after failing).
    pub fn records_processed(&self) -> u64 {
        self.0.records.load(Ordering::Relaxed)
    }

    /// Batches that failed every attempt and were reported and skipped.
    pub fn failed_batches(&self) -> u64 {
        self.0.failed_batches.load(Ordering::Relaxed)
    }

    /// Batches processed, failed ones included.
    pub fn batches(&self) -> u64 {
        self.0.batches.load(Ordering::Relaxed)
    }

    /// When the last record was processed (ms since the epoch; 0 if never).
    pub fn last_record_ms(&self) -> u64 {
        self.0.last_record_ms.load(Ordering::Relaxed)
    }

    /// The shards this worker holds now.
    pub fn held_shards(&self) -> Vec<String> {
        self.0
            .held
            .lock()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Main-loop rounds completed.
    pub fn rounds(&self) -> u64 {
        self.0.rounds.load(Ordering::Relaxed)
    }

    /// True when every held shard is at its tip and no eligible shard was left unowned last round.
    pub fn is_caught_up(&self) -> bool {
        self.rounds() > 0
            && self.0.free_eligible.load(Ordering::Relaxed) == 0
            && self
                .0
                .held
                .lock()
                .map(|h| h.values().all(|caught_up| *caught_up))
                .unwrap_or(false)
    }

    fn set_held(&self, shard: &str, caught_up: Option<bool>) {
        if let Ok(mut h) = self.0.held.lock() {
            match caught_up {
                Some(c) => {
                    h.insert(shard.to_owned(), c);
                }
                None => {
                    h.remove(shard);
                }
            }
        }
    }
}

/// What one main-loop round did to this worker's leases, handed to [`Worker::on_round`].
///
/// A round that fails part-way (a lease-table read failed) is reported too, with what it did
/// before failing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Leases this worker holds at the end of the round.
    pub held: usize,
    /// Leases acquired this round that nobody held (new shards, released or expired leases).
    pub taken: usize,
    /// Of `taken`, leases that had expired: their holder stopped renewing (crashed, hung or
    /// partitioned) without releasing them. Only the taker can tell an expiry from a release, and
    /// only one taker wins a lease, so the sum over all workers counts each expiry once.
    pub expired: usize,
    /// Leases stolen from a live holder this round to even out the assignment.
    pub stolen: usize,
    /// Leases this worker found moved to another worker (stolen, or taken after its own lease
    /// expired) and stopped reading.
    pub lost: usize,
}

impl RoundReport {
    /// Counts a confirmed take (`steal` false) or steal of `previous`, the row as it was read at
    /// `now_ms` before the acquisition.
    pub fn acquired(&mut self, previous: &Lease, steal: bool, now_ms: u64) {
        if steal {
            self.stolen += 1;
            return;
        }
        self.taken += 1;
        if previous.is_expired(now_ms) {
            self.expired += 1;
        }
    }
}

/// The callback [`Worker::on_round`] installs.
type RoundHook = Box<dyn FnMut(&RoundReport) + Send + Sync>;

struct Shared<S, P> {
    source: S,
    leases: LeaseTable,
    processor: P,
    config: WorkerConfig,
    stats: WorkerStats,
    graph: Mutex<ShardGraph>,
    sync_wanted: AtomicBool,
}

/// A consumer of one application: reads the shards it leases, in lineage order.
pub struct Worker<S, P> {
    shared: Arc<Shared<S, P>>,
    on_round: Option<RoundHook>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShardExit {
    /// Read to SHARD_END; children's leases created.
    Finished,
    /// The lease moved to another worker (or a fenced write was refused).
    Lost,
    /// Shutdown: the lease was released.
    Stopped,
    /// The shard no longer exists.
    Gone,
}

struct Held {
    lease: Lease,
    abort: AbortHandle,
}

fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> impl Future<Output = bool> {
    let mut stop = stop.clone();
    async move {
        if *stop.borrow() {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep(d) => false,
            r = stop.changed() => r.is_err() || *stop.borrow(),
        }
    }
}

impl<S: ShardSource, P: RecordProcessor> Worker<S, P> {
    /// A worker reading `source` for the application of `leases`, feeding `processor`.
    pub fn new(source: S, leases: LeaseTable, processor: P, config: WorkerConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                source,
                leases,
                processor,
                config,
                stats: WorkerStats::default(),
                graph: Mutex::new(ShardGraph::default()),
                sync_wanted: AtomicBool::new(true),
            }),
            on_round: None,
        }
    }

    /// The worker's live counters.
    pub fn stats(&self) -> WorkerStats {
        self.shared.stats.clone()
    }

    /// Calls `hook` with the [`RoundReport`] of every main-loop round, on the main loop (keep it
    /// quick: renewals wait for it). Replaces any hook set before.
    pub fn on_round(mut self, hook: impl FnMut(&RoundReport) + Send + Sync + 'static) -> Self {
        self.on_round = Some(Box::new(hook));
        self
    }

    /// Writes every round's lease metrics to `out` as one EMF line ([`RoundReport::metrics`],
    /// dimension `Function` = [`super::metrics::CONSUMER`]): what a dashboard's leases widget
    /// plots once the lines reach CloudWatch Logs. A write failure is logged, never fatal.
    pub fn emit_emf(self, mut out: impl Write + Send + Sync + 'static) -> Self {
        self.on_round(move |report| {
            let mut emf = Emf::new(super::metrics::CONSUMER);
            report.metrics(&mut emf);
            if let Err(e) = emf.write_to(&mut out, now_ms()) {
                tracing::warn!(error = %e, "EMF lease metrics lost");
            }
        })
    }

    /// Runs until `shutdown` completes, then stops every shard after its current batch,
    /// checkpoints and releases its leases. Dropping the future instead stops at once without
    /// releasing (a crash, as far as the other workers can tell: they take over after expiry).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StreamError> {
        let shared = self.shared;
        let mut on_round = self.on_round;
        let me = shared.config.worker_id.clone();
        let mut tasks: JoinSet<(String, ShardExit)> = JoinSet::new();
        let mut held: BTreeMap<String, Held> = BTreeMap::new();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut next_sync = tokio::time::Instant::now();
        tokio::pin!(shutdown);
        loop {
            let now = tokio::time::Instant::now();
            if now >= next_sync || shared.sync_wanted.swap(false, Ordering::Relaxed) {
                match shared.sync_shards().await {
                    Ok(()) => next_sync = now + shared.config.sync_interval,
                    Err(e) => {
                        tracing::warn!(worker = %me, error = %e, "shard sync failed; retrying next round");
                        shared.sync_wanted.store(true, Ordering::Relaxed);
                    }
                }
            }
            let mut report = RoundReport::default();
            if let Err(e) = shared
                .round(&mut held, &mut tasks, &stop_rx, &mut report)
                .await
            {
                tracing::warn!(worker = %me, error = %e, "lease round failed; retrying");
            }
            report.held = held.len();
            if let Some(hook) = on_round.as_mut() {
                hook(&report);
            }
            shared.stats.0.rounds.fetch_add(1, Ordering::Relaxed);
            tokio::select! {
                () = &mut shutdown => break,
                Some(joined) = tasks.join_next() => {
                    if let Ok((shard, exit)) = joined {
                        held.remove(&shard);
                        if exit == ShardExit::Finished {
                            shared.sync_wanted.store(true, Ordering::Relaxed);
                        }
                    }
                }
                () = tokio::time::sleep(shared.config.renew_interval) => {}
            }
        }
        // Graceful shutdown: shard tasks finish their batch, checkpoint and release.
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(shared.config.lease_duration);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                joined = tasks.join_next() => match joined {
                    Some(Ok((shard, _))) => { held.remove(&shard); }
                    Some(Err(_)) => {}
                    None => break,
                },
                () = &mut deadline => break,
            }
        }
        tasks.abort_all();
        for (shard, h) in held {
            if let Err(e) = shared.leases.release(&h.lease).await {
                tracing::warn!(worker = %me, shard = %shard, error = %e, "release at shutdown failed");
            }
        }
        Ok(())
    }
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    fn me(&self) -> &str {
        &self.config.worker_id
    }

    fn duration_ms(&self) -> u64 {
        u64::try_from(self.config.lease_duration.as_millis()).unwrap_or(u64::MAX)
    }

    /// Lists every shard and merges the listing into the graph.
    async fn sync_shards(&self) -> Result<(), StreamError> {
        let listed = self.source.list_shards().await?;
        self.merge_shards(listed)
    }

    fn merge_shards(&self, shards: Vec<ShardInfo>) -> Result<(), StreamError> {
        let mut graph = self
            .graph
            .lock()
            .map_err(|_| StreamError::Processor("shard graph lock poisoned".into()))?;
        graph.merge(shards)?;
        Ok(())
    }

    fn graph(&self) -> ShardGraph {
        self.graph.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Plans this round from one read of the lease table ([`plan_round`]).
    fn plan(
        &self,
        graph: &ShardGraph,
        scan: &LeaseScan,
        held: &BTreeMap<String, Held>,
        now: u64,
    ) -> RoundPlan {
        let held: BTreeMap<String, u64> = held
            .iter()
            .map(|(shard, h)| (shard.clone(), h.lease.counter))
            .collect();
        plan_round(&RoundInput {
            worker_id: self.me(),
            now_ms: now,
            graph,
            leases: &scan.leases,
            malformed: &scan.malformed_rows(),
            held: &held,
            max_steals_per_round: self.config.max_steals_per_round,
        })
    }

    /// Writes the plan's repairs (missing rows created, malformed ones replaced, each
    /// conditionally); true if any row was written.
    async fn repair(&self, plan: &RoundPlan, scan: &LeaseScan) -> Result<bool, StreamError> {
        for shard in &plan.malformed_unlisted {
            let reason = scan.malformed_row(shard).map_or("", |m| m.reason.as_str());
            tracing::warn!(shard = %shard, reason = %reason,
                "malformed lease row for a shard the stream does not list; left alone");
        }
        let mut changed = false;
        for repair in &plan.repair {
            changed |= match repair {
                Repair::Create(lease) => self.leases.create(lease).await?,
                Repair::Replace(lease) => {
                    let Some(bad) = scan.malformed_row(&lease.shard_id) else {
                        continue;
                    };
                    tracing::warn!(shard = %bad.shard_id, reason = %bad.reason,
                        "malformed lease row; recreating it from the shard graph");
                    self.leases.recreate(bad, lease).await?
                }
            };
        }
        Ok(changed)
    }

    /// One main-loop round: read the lease table, plan the round, execute the plan (repair, and
    /// if a row was written read and plan again; stop lost shards, renew, take, steal); counts
    /// what it lost and acquired in `report`.
    async fn round(
        self: &Arc<Self>,
        held: &mut BTreeMap<String, Held>,
        tasks: &mut JoinSet<(String, ShardExit)>,
        stop: &watch::Receiver<bool>,
        report: &mut RoundReport,
    ) -> Result<(), StreamError> {
        let me = self.me().to_owned();
        let graph = self.graph();
        let mut scan = self.leases.scan().await?;
        let mut now = now_ms();
        let mut plan = self.plan(&graph, &scan, held, now);
        if self.repair(&plan, &scan).await? {
            scan = self.leases.scan().await?;
            now = now_ms();
            plan = self.plan(&graph, &scan, held, now);
        }
        self.stats
            .0
            .free_eligible
            .store(plan.free_left, Ordering::Relaxed);
        // Renew what we hold; stop shards whose lease moved.
        let mut lost = plan.stop_lost.clone();
        for shard in &plan.renew {
            let Some(h) = held.get_mut(shard) else {
                continue;
            };
            match self.leases.renew(&h.lease, self.duration_ms()).await {
                Ok(renewed) => h.lease.expires_at_ms = renewed.expires_at_ms,
                Err(e) if e.is_lease_lost() => lost.push(shard.clone()),
                Err(e) => tracing::warn!(worker = %me, shard = %shard, error = %e, "renew failed"),
            }
        }
        for shard in lost {
            if let Some(h) = held.remove(&shard) {
                tracing::info!(worker = %me, shard = %shard, "lease lost; stopping the shard");
                h.abort.abort();
                self.stats.set_held(&shard, None);
                report.lost += 1;
            }
        }
        // Take, then steal, per the plan.
        let takes = plan.take.iter().map(|a| (a, false));
        let steals = plan.steal.iter().map(|a| (a, true));
        for (acquire, steal) in takes.chain(steals) {
            if let Some(lease) = self.acquire(acquire, steal).await? {
                report.acquired(&acquire.lease, steal, now);
                let shard = lease.shard_id.clone();
                self.stats.set_held(&shard, Some(false));
                let this = Arc::clone(self);
                let abort = tasks.spawn(this.run_shard(lease.clone(), stop.clone()));
                held.insert(shard, Held { lease, abort });
            }
        }
        Ok(())
    }

    /// Executes one planned take or steal: the conditional write, then, with
    /// [`WorkerConfig::verify_takes`], a read-back. `None` if another worker won the lease.
    async fn acquire(&self, acquire: &Acquire, steal: bool) -> Result<Option<Lease>, StreamError> {
        let me = self.me();
        let current = &acquire.lease;
        let shard = &current.shard_id;
        let result = if steal {
            self.leases
                .steal(current, me, self.duration_ms(), acquire.floor)
                .await
        } else {
            self.leases
                .take(current, me, self.duration_ms(), acquire.floor)
                .await
        };
        let lease = match result {
            Ok(lease) => lease,
            Err(e) if e.is_lease_lost() || matches!(e, StreamError::Core(_)) => {
                tracing::debug!(worker = %me, shard = %shard, error = %e, "lease not acquired");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if self.config.verify_takes && !self.confirmed(&lease).await {
            tracing::debug!(worker = %me, shard = %shard, "take not confirmed on read-back");
            return Ok(None);
        }
        tracing::info!(worker = %me, shard = %shard, counter = lease.counter, steal,
            "lease acquired");
        Ok(Some(lease))
    }

    /// Reads our write back: an emulator that does not serialise conditional writes (moto) can
    /// let two takers both succeed; only one row survives.
    async fn confirmed(&self, lease: &Lease) -> bool {
        self.leases
            .get(&lease.shard_id)
            .await
            .ok()
            .flatten()
            .is_some_and(|row| {
                row.owner.as_deref() == Some(self.me()) && row.counter == lease.counter
            })
    }

    /// Reads one shard while holding its lease; releases it on shutdown.
    async fn run_shard(
        self: Arc<Self>,
        lease: Lease,
        mut stop: watch::Receiver<bool>,
    ) -> (String, ShardExit) {
        let shard = lease.shard_id.clone();
        let mut lease = lease;
        let exit = self.read_shard(&mut lease, &mut stop).await;
        if exit == ShardExit::Stopped
            && let Err(e) = self.leases.release(&lease).await
        {
            tracing::warn!(worker = %self.me(), shard = %shard, error = %e, "release failed");
        }
        self.stats.set_held(&shard, None);
        (shard, exit)
    }

    fn start_of(&self, lease: &Lease) -> StartAt {
        match &lease.checkpoint {
            Progress::InProgress(seq) => StartAt::AfterSeq(seq.clone()),
            // A child always starts at its first record; only roots honour the initial position.
            _ if !lease.parents.is_empty() => StartAt::TrimHorizon,
            _ => self.config.initial_position.clone(),
        }
    }

    /// An iterator at `start`, retrying transient failures; `None` if the shard is gone or we
    /// were told to stop.
    async fn iterator(
        &self,
        shard: &str,
        start: &StartAt,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<String> {
        let mut pause = self.config.retry_backoff;
        loop {
            match self.source.get_iterator(shard, start).await {
                Ok(it) => return Some(it),
                Err(StreamError::NotFound { .. }) => return None,
                Err(StreamError::Trimmed { .. }) if *start != StartAt::TrimHorizon => {
                    return Box::pin(self.iterator(shard, &StartAt::TrimHorizon, stop)).await;
                }
                Err(e) => {
                    tracing::warn!(shard = %shard, error = %e, "GetShardIterator failed; backing off");
                    if sleep_or_stop(pause, stop).await {
                        return None;
                    }
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    async fn read_shard(&self, lease: &mut Lease, stop: &mut watch::Receiver<bool>) -> ShardExit {
        let shard = lease.shard_id.clone();
        let start = self.start_of(lease);
        let Some(mut iterator) = self.iterator(&shard, &start, stop).await else {
            return if *stop.borrow() {
                ShardExit::Stopped
            } else {
                ShardExit::Gone
            };
        };
        let mut done: Option<Seq> = match &lease.checkpoint {
            Progress::InProgress(seq) => Some(seq.clone()),
            _ => None,
        };
        let mut pause = self.config.retry_backoff;
        loop {
            if *stop.borrow() {
                return ShardExit::Stopped;
            }
            let batch = match self
                .source
                .get_records(&iterator, self.config.max_records)
                .await
            {
                Ok(batch) => batch,
                Err(StreamError::ExpiredIterator { .. } | StreamError::Trimmed { .. }) => {
                    // Re-get the iterator just after the last processed record.
                    let again = done
                        .clone()
                        .map_or_else(|| start.clone(), StartAt::AfterSeq);
                    match self.iterator(&shard, &again, stop).await {
                        Some(it) => iterator = it,
                        None if *stop.borrow() => return ShardExit::Stopped,
                        None => return ShardExit::Gone,
                    }
                    continue;
                }
                Err(StreamError::NotFound { .. }) => return ShardExit::Gone,
                Err(e) => {
                    tracing::debug!(shard = %shard, error = %e, "GetRecords failed; backing off");
                    if sleep_or_stop(pause, stop).await {
                        return ShardExit::Stopped;
                    }
                    pause = (pause * 2).min(self.config.max_backoff);
                    continue;
                }
            };
            pause = self.config.retry_backoff;
            if !batch.child_shards.is_empty()
                && let Err(e) = self.merge_shards(batch.child_shards.clone())
            {
                tracing::warn!(shard = %shard, error = %e, "ChildShards did not merge into the graph");
            }
            let got = batch.records.len();
            if let Some(last) = batch.records.last().map(|r| r.seq.clone()) {
                let work = ProcessBatch {
                    shard_id: shard.clone(),
                    token: lease.counter,
                    records: batch.records,
                };
                if !self.process(&work).await {
                    return ShardExit::Lost;
                }
                match self.checkpoint(lease, last.clone(), stop).await {
                    Ok(()) => done = Some(last),
                    Err(exit) => return exit,
                }
            }
            match batch.next_iterator {
                None => return self.finish(lease).await,
                Some(next) => iterator = next,
            }
            let caught_up = got == 0 || batch.millis_behind == Some(0);
            self.stats.set_held(&shard, Some(caught_up));
            if got == 0 && sleep_or_stop(self.config.idle_poll, stop).await {
                return ShardExit::Stopped;
            }
        }
    }

    /// Runs the processor with bounded retries; false if the lease was lost (fenced out).
    async fn process(&self, batch: &ProcessBatch) -> bool {
        let attempts = self.config.max_attempts.max(1);
        let mut pause = self.config.retry_backoff;
        let mut last_error = None;
        for attempt in 1..=attempts {
            match self.processor.process(batch).await {
                Ok(()) => {
                    self.count(batch);
                    return true;
                }
                Err(e) if e.is_lease_lost() => {
                    tracing::info!(shard = %batch.shard_id, token = batch.token, error = %e,
                        "processor fenced out; stopping the shard");
                    return false;
                }
                Err(e) => {
                    tracing::warn!(shard = %batch.shard_id, attempt, error = %e, "batch failed");
                    last_error = Some(e);
                    if attempt < attempts {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(self.config.max_backoff);
                    }
                }
            }
        }
        let first = batch.records.first().map(|r| r.seq.to_string());
        let last = batch.records.last().map(|r| r.seq.to_string());
        tracing::error!(
            shard = %batch.shard_id,
            first_seq = first.as_deref().unwrap_or(""),
            last_seq = last.as_deref().unwrap_or(""),
            attempts,
            error = %last_error.map(|e| e.to_string()).unwrap_or_default(),
            "batch failed every attempt; reported and skipped"
        );
        self.stats.0.failed_batches.fetch_add(1, Ordering::Relaxed);
        self.count(batch);
        true
    }

    fn count(&self, batch: &ProcessBatch) {
        let stats = &self.stats.0;
        stats
            .records
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.last_record_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Checkpoints `seq`, retrying transient failures; `Err` is how the shard task ends.
    async fn checkpoint(
        &self,
        lease: &mut Lease,
        seq: Seq,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ShardExit> {
        let mut pause = self.config.retry_backoff;
        loop {
            match self.leases.checkpoint(lease, seq.clone()).await {
                Ok(next) => {
                    *lease = next;
                    return Ok(());
                }
                Err(e) if e.is_lease_lost() => return Err(ShardExit::Lost),
                Err(e) if e.is_transient() => {
                    tracing::warn!(shard = %lease.shard_id, error = %e, "checkpoint failed; retrying");
                    // Even when stopping, the checkpoint is worth finishing: keep trying until
                    // the lease would lapse anyway.
                    if pause >= self.config.lease_duration {
                        return Err(ShardExit::Lost);
                    }
                    let _ = sleep_or_stop(pause, stop).await;
                    pause *= 2;
                }
                Err(e) => {
                    tracing::error!(shard = %lease.shard_id, error = %e, "checkpoint refused");
                    return Err(ShardExit::Lost);
                }
            }
        }
    }

    /// SHARD_END: record the end, create the children's leases, mark CHILDREN_CREATED.
    async fn finish(&self, lease: &mut Lease) -> ShardExit {
        let end = LeaseEvent::ReachShardEnd {
            worker: self.me().to_owned(),
            counter: lease.counter,
        };
        match self.leases.apply(lease, &end).await {
            Ok(next) => *lease = next,
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
        let mut created = !children.is_empty();
        for child in &children {
            if let Err(e) = self.leases.create(&new_lease(child, floor)).await {
                tracing::warn!(shard = %child.shard_id, error = %e, "child lease not created");
                created = false;
            }
        }
        if created && let Err(e) = self.leases.apply(lease, &LeaseEvent::CreateChildren).await {
            tracing::debug!(shard = %lease.shard_id, error = %e, "CHILDREN_CREATED not recorded");
        }
        ShardExit::Finished
    }

    fn children(&self, shard: &str) -> Vec<ShardInfo> {
        let graph = self.graph();
        graph
            .children_of(shard)
            .into_iter()
            .filter_map(|id| graph.get(id).cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use heatsink_core::stream::LeaseState;

    use super::*;

    fn row(owner: Option<&str>, expires_at_ms: u64) -> Lease {
        Lease {
            shard_id: "shardId-000000000001".into(),
            state: if owner.is_some() {
                LeaseState::Leased
            } else {
                LeaseState::Discovered
            },
            owner: owner.map(str::to_owned),
            counter: 7,
            expires_at_ms,
            checkpoint: Progress::NotStarted,
            parents: vec![],
        }
    }

    #[test]
    fn only_a_take_of_a_lapsed_lease_counts_as_expired() {
        let now = 1_700_000_010_000;
        let mut report = RoundReport::default();
        report.acquired(&row(None, 0), false, now); // new shard or released lease
        report.acquired(&row(Some("w2"), now - 1), false, now); // w2 stopped renewing
        report.acquired(&row(Some("w3"), now + 5_000), true, now); // rebalancing
        assert_eq!(
            report,
            RoundReport {
                held: 0,
                taken: 2,
                expired: 1,
                stolen: 1,
                lost: 0,
            }
        );
    }
}
