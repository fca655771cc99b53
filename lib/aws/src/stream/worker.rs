//! `Worker`: the consumer loop — shard sync, leases, prefetching reads, processing, checkpoints.
//!
//! One worker runs three kinds of task:
//!
//! - the **main loop**, every `renew_interval`: (re)lists shards when due, reads the
//!   application's leases and hands that read to [`plan_round`], which decides the round as data
//!   (a [`RoundPlan`]): rows to create from the shard graph, shards to stop because their lease
//!   moved, takes and steals over the eligible shards. The loop executes the plan's conditional
//!   writes (creations and takes in parallel, one batched read-back) and reacts to the results.
//! - the **renewer**, every third of the lease duration: renews every held lease in parallel
//!   and refreshes the worker's announcement (see below). A shard task's lease is valid until
//!   the renewal's send time plus nine tenths of the lease duration, on the monotonic clock; a
//!   hung main loop (a ListShards that never answers) does not stop renewals.
//! - one **shard task** per held shard, with a **fetcher** beside it that keeps up to
//!   `prefetch_batches` GetRecords answers queued (per-shard order unchanged, SHARD_END last, at
//!   most 5 calls in any second — [`GET_RECORDS_PER_SECOND`], the Kinesis per-shard limit —
//!   and at least 200 ms of pause after a caught-up read; pages of `page_records` while that
//!   budget has room, `max_records` on the last call it allows, [`ReadSize`]), and starts no
//!   call while `prefetch_bytes` of records (16 MiB by default) are fetched but not processed;
//!   it deaggregates KPL aggregates itself, a processor batch (at most `max_records` user
//!   records) at a time, each counted against `prefetch_bytes` before it is built
//!   (`worker/expand.rs`), so a shard's memory is bounded whatever the record size or
//!   aggregation (guarantee 7 of the [module doc](super)). The task hands
//!   each batch to the [`RecordProcessor`] with the lease counter as fencing token, and stops
//!   the moment its lease is past its validity — whatever the main loop is doing — dropping the
//!   processor's future if it is still running.
//!
//! Failure policy: a failing batch is retried with capped back-off until it succeeds or the lease
//! is lost; it is never checkpointed past. After `max_attempts` the shard is reported **stalled**
//! ([`WorkerStats::stalled_shards`], the `ShardsStalled` EMF metric, an `error` log with the shard
//! and sequence range) while the other shards go on. Skipping is opt-in: with a
//! [`DeadLetter`] sink ([`Worker::dead_letter`]) the batch is handed to the sink after
//! `max_attempts`, and only once the sink took it is the checkpoint moved past it. A processor
//! that cannot deliver at all returns [`StreamError::Abort`]: the worker stops without
//! checkpointing the batch and [`Worker::run`] returns the error.
//!
//! Checkpoints are decoupled from batches: a write starts once `checkpoint_every_records`
//! records or `checkpoint_interval` have passed since the last, with one write in flight at a
//! time, and is forced at SHARD_END, before a release and when the lease lapses. Checkpoints only
//! move forward: a release writes none. After a crash the next holder re-reads what was
//! processed after the last durable checkpoint: at most `checkpoint_every_records +
//! max_records` records, or `checkpoint_interval` plus one write's worth, per shard.
//!
//! Start-up balance: the worker keeps an announcement row in the lease table (its id and a
//! heartbeat time, [`LeaseTable::announce`]), and peers count every worker whose heartbeat is
//! under one lease duration old towards the fair share. A worker announces at start, waits
//! `startup_wait` (200 ms, in which it lists the shards and creates the missing lease rows) and
//! only then reads the leases,
//! so a fleet started together splits them in its first round: with W workers announced and L
//! leases none takes more than ceil(L / W), and the takes add up to L (4 over 3: 2 + 1 + 1), so
//! no steal follows. Once the rows exist, inside the wait, it plans its takes from one lease
//! read and sends each planned shard's first GetRecords ([`WorkerConfig::early_read`]), so the
//! records are in hand when the takes land; an answer whose lease the first round does not take
//! at the same checkpoint is dropped unseen. A graceful shutdown deletes the row; a crashed
//! worker's row stops counting one lease duration after its last refresh, about when its leases
//! expire.
//!
//! After every round the worker can report what the round did to its leases ([`RoundReport`]):
//! [`Worker::on_round`] takes any callback, [`Worker::emit_emf`] writes the report as EMF
//! metrics ([`RoundReport::metrics`]) and the consumer's health ([`WorkerStats`]: stalled
//! shards, dead-lettered batches, trimmed reads).
//!
//! Where things are: this file is the face ([`Worker`], its main loop, the [`RecordProcessor`]
//! it feeds); `worker/` holds one job per file: `config.rs` ([`WorkerConfig`] and the limits),
//! `stats.rs` ([`WorkerStats`], [`RoundReport`]), `shared.rs` (the state the tasks share: held
//! leases and their validity), `graph.rs` (the shard listing as a graph), `renewer.rs`,
//! `round.rs` (one main-loop round), `early.rs` (early first reads), `shard.rs` (the shard
//! task), `delivery.rs` (the failure policy), `fetcher.rs` (paced reads and read-error
//! recovery), `expand.rs` (KPL deaggregation under the byte budget) and `checkpointer.rs`.

mod checkpointer;
mod config;
mod delivery;
mod early;
// The deaggregation of KPL aggregates under the shard's byte budget.
mod expand;
mod fetcher;
mod graph;
// Start-up and graceful shutdown around the main loop.
mod lifecycle;
mod renewer;
mod round;
mod shard;
mod shared;
mod stats;

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::task::JoinSet;

pub use config::{
    DEAD_WORKER_LEASES, DEFAULT_PAGE_RECORDS, GET_RECORDS_PER_SECOND, MIN_GET_RECORDS_INTERVAL,
    WorkerConfig,
};
use lifecycle::Started;
use shard::ShardExit;
use shared::{AbortOnDrop, Shared};
pub use stats::{RoundReport, WorkerStats};

use super::{DeadLetter, LeaseTable, ShardSource, StreamError, StreamRecord, Timeouts};
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
    ///
    /// Tokens are ordered along one shard lineage only (a child's exceed its parents'): an item
    /// written from several unrelated shards (a per-post aggregate fed by a user-keyed stream)
    /// needs one fence attribute per shard lineage, or its writes refuse each other.
    pub fn fence(&self) -> super::Fence {
        super::Fence::new(self.token)
    }

    /// The first and last sequence numbers, for logs.
    fn range(&self) -> (String, String) {
        let seq =
            |r: Option<&StreamRecord>| r.map(|r| r.position().to_string()).unwrap_or_default();
        (seq(self.records.first()), seq(self.records.last()))
    }
}

/// What a consumer does with records; `Ok` means "durable: the checkpoint may move past them".
///
/// Make the processor's own DynamoDB writes through [`ProcessBatch::fence`] (a
/// [`super::Fence`] over the batch's lease counter) rather than building a fence by hand.
/// Return [`StreamError::Fenced`] (what [`super::Fence::check`] gives) when a fenced write was
/// refused: the worker stops the shard at once. Return [`StreamError::Abort`] when nothing can
/// be delivered any more: the worker stops. Any other error retries the batch until it succeeds
/// or the lease is lost (see the module doc for the failure policy).
pub trait RecordProcessor: Send + Sync + 'static {
    /// Processes one batch; must be idempotent (delivery is at-least-once).
    fn process(&self, batch: &ProcessBatch)
    -> impl Future<Output = Result<(), StreamError>> + Send;
}

/// The callback [`Worker::on_round`] installs.
type RoundHook = Box<dyn FnMut(&RoundReport) + Send + Sync>;

/// A consumer of one application: reads the shards it leases, in lineage order.
pub struct Worker<S, P> {
    source: S,
    leases: LeaseTable,
    processor: P,
    config: WorkerConfig,
    stats: WorkerStats,
    dead_letter: Option<Arc<dyn DeadLetter>>,
    on_round: Option<RoundHook>,
}

impl<S: ShardSource, P: RecordProcessor> Worker<S, P> {
    /// A worker reading `source` for the application of `leases`, feeding `processor`. The
    /// source's and the lease table's SDK clients get [`Timeouts::for_lease`] of the lease.
    pub fn new(source: S, leases: LeaseTable, processor: P, config: WorkerConfig) -> Self {
        let timeouts = config
            .timeouts
            .unwrap_or_else(|| Timeouts::for_lease(config.lease_duration));
        Self {
            source: source.with_timeouts(timeouts),
            leases: leases.with_timeouts(timeouts),
            processor,
            config,
            stats: WorkerStats::default(),
            dead_letter: None,
            on_round: None,
        }
    }

    /// Makes skipping opt-in: a batch that failed `max_attempts` times goes to `sink`, and the
    /// checkpoint moves past it only once the sink took it ([`super::SqsDeadLetter`]).
    pub fn dead_letter(mut self, sink: impl DeadLetter) -> Self {
        self.dead_letter = Some(Arc::new(sink));
        self
    }

    /// The worker's live counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats.clone()
    }

    /// Calls `hook` with the [`RoundReport`] of every main-loop round, on the main loop (keep it
    /// quick). Replaces any hook set before.
    pub fn on_round(mut self, hook: impl FnMut(&RoundReport) + Send + Sync + 'static) -> Self {
        self.on_round = Some(Box::new(hook));
        self
    }

    /// Writes every round's lease metrics ([`RoundReport::metrics`]) and the consumer's health
    /// ([`WorkerStats::health_metrics`]: `ShardsStalled`, alarm on it above 0 for a few minutes)
    /// to `out` as one EMF line, dimension `Function` = [`super::metrics::CONSUMER`]. A write
    /// failure is logged, never fatal.
    pub fn emit_emf(self, mut out: impl Write + Send + Sync + 'static) -> Self {
        let stats = self.stats.clone();
        let mut since = (0, 0);
        self.on_round(move |report| {
            let mut emf = Emf::new(super::metrics::CONSUMER);
            report.metrics(&mut emf);
            since = stats.health_metrics(&mut emf, since);
            if let Err(e) = emf.write_to(&mut out, now_ms()) {
                tracing::warn!(error = %e, "EMF lease metrics lost");
            }
        })
    }

    /// Runs until `shutdown` completes, then stops every shard after its current batch,
    /// checkpoints and releases its leases. Dropping the future instead stops at once without
    /// releasing (a crash, as far as the other workers can tell: they take over after expiry).
    ///
    /// Fails at start if the stream cannot be described or the lease table holds rows of
    /// another stream ([`StreamError::ForeignLease`], [`StreamError::UnnamedLease`]), and when
    /// the processor aborts ([`StreamError::Abort`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StreamError> {
        let identity = self.source.identity().await?;
        let max_records = self
            .config
            .max_records
            .unwrap_or_else(|| self.source.max_records())
            .max(1);
        let shared = Arc::new(Shared::new(
            self.source,
            self.leases.for_stream(identity),
            self.processor,
            self.dead_letter,
            self.config,
            self.stats,
            max_records,
        ));
        // Refuse another stream's rows before touching anything.
        let first_scan = match shared.leases.scan().await {
            Ok(scan) => Some(scan),
            Err(e) if is_fatal(&e) => return Err(e),
            Err(_) => None,
        };
        let mut on_round = self.on_round;
        let me = shared.config.worker_id.clone();
        let mut tasks: JoinSet<(String, ShardExit)> = JoinSet::new();
        let (stop_tx, stop_rx) = watch::channel(false);
        let (renew_stop_tx, renew_stop_rx) = watch::channel(false);
        let Started {
            mut next_sync,
            first_read,
        } = shared.start(first_scan.as_ref()).await;
        let mut first_read = Some(first_read);
        // Dies with this future: a worker dropped without shutdown (a crash, as far as the
        // others can tell) must stop renewing, or its leases never expire.
        let renewer = AbortOnDrop(tokio::spawn(Arc::clone(&shared).renew_loop(renew_stop_rx)));
        let mut failure: Option<StreamError> = None;
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
            if let Some(at) = first_read.take() {
                tokio::time::sleep_until(at).await;
            }
            let mut report = RoundReport::default();
            let result = shared.round(&mut tasks, &stop_rx, &mut report).await;
            shared.drop_early();
            match result {
                Err(e) if is_fatal(&e) => {
                    tracing::error!(worker = %me, error = %e, "lease table refused; stopping");
                    failure = Some(e);
                    break;
                }
                Err(e) => tracing::warn!(worker = %me, error = %e, "lease round failed; retrying"),
                Ok(()) => {}
            }
            report.lost += shared.lost_since_round.swap(0, Ordering::Relaxed);
            report.held = shared.held_count();
            if let Some(hook) = on_round.as_mut() {
                hook(&report);
            }
            shared.stats.0.rounds.fetch_add(1, Ordering::Relaxed);
            tokio::select! {
                () = &mut shutdown => break,
                () = shared.fatal_notify.notified() => break,
                Some(joined) = tasks.join_next() => {
                    if let Ok((shard, exit)) = joined {
                        shared.forget(&shard);
                        if exit == ShardExit::Finished || exit == ShardExit::Gone {
                            shared.sync_wanted.store(true, Ordering::Relaxed);
                        }
                    }
                }
                () = tokio::time::sleep(shared.config.renew_interval) => {}
            }
            if shared.take_fatal_peek() {
                break;
            }
        }
        shared.stop(tasks, stop_tx, renew_stop_tx, renewer).await;
        match failure.or_else(|| shared.take_fatal()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Errors that stop the worker instead of being retried.
fn is_fatal(e: &StreamError) -> bool {
    matches!(
        e,
        StreamError::ForeignLease { .. } | StreamError::UnnamedLease { .. } | StreamError::Abort(_)
    )
}
