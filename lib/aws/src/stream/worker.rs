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

// The deaggregation of KPL aggregates under the shard's byte budget.
mod expand;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use heatsink_core::stream::{
    Acquire, InitialPosition, Lease, LeaseEvent, LeaseRepair, LeaseState, Position, Progress,
    ReadAnswer, ReadPace, ReadSize, RoundInput, RoundPlan, ShardGraph, ShardInfo, plan_round,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

use super::lease_table::new_lease;
use super::{
    DeadLetter, LeaseScan, LeaseTable, RecordBatch, ShardSource, StartAt, StreamError,
    StreamRecord, Timeouts,
};
use crate::clock::now_ms;
use crate::metrics::Emf;

/// Kinesis allows 5 GetRecords per second per shard: after an answer that was caught up, the
/// next call on that shard waits at least this long (or `idle_poll`, if longer).
pub const MIN_GET_RECORDS_INTERVAL: Duration = Duration::from_millis(200);

/// GetRecords calls one shard's reader may start in any rolling second (Kinesis allows 5): a
/// reader that is behind reads back to back until its window is full ([`ReadPace`]).
pub const GET_RECORDS_PER_SECOND: usize = 5;

/// Records a GetRecords asks for while the shard's call budget has room
/// ([`WorkerConfig::page_records`]): one second of a shard's maximum write rate (1,000 records/s
/// on Kinesis), so even one call a second keeps up with a shard written at full speed.
pub const DEFAULT_PAGE_RECORDS: i32 = 1_000;

/// An announcement whose heartbeat is this many lease durations old is deleted by any worker
/// that reads it (it stopped counting after one).
pub const DEAD_WORKER_LEASES: u64 = 10;

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

/// A worker's settings; [`WorkerConfig::new`] gives production defaults.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// This worker's name in the lease table; unique among the application's live workers.
    pub worker_id: String,
    /// How long a lease lasts without renewal (default 10 s); takeover after a crash waits this.
    /// Renewals run every third of it; SDK calls time out well inside it ([`Timeouts`]).
    pub lease_duration: Duration,
    /// Main-loop period: lease reads, planning, takes (default 3 s).
    pub renew_interval: Duration,
    /// Period of the full shard sync (ListShards / DescribeStream), default 60 s.
    pub sync_interval: Duration,
    /// Pause after a GetRecords that found the shard's tip (default 1 s; at least 200 ms).
    pub idle_poll: Duration,
    /// Most records one GetRecords asks for; `None` (default) is the source's maximum: 10,000
    /// on Kinesis, 1,000 on DynamoDB Streams. Also bounds redelivery after a crash (module docs).
    pub max_records: Option<i32>,
    /// Records a GetRecords asks for while the shard's call budget (5 per second) has room
    /// (default [`DEFAULT_PAGE_RECORDS`], 1,000; at least 1, at most `max_records`). The last
    /// call the budget allows before the reader would have to wait asks for `max_records`, each
    /// time the budget does make a reader that is behind wait the page doubles up to
    /// `max_records`, and at the shard's tip it is back to `page_records` ([`ReadSize`]): small
    /// pages while calls are plentiful (the first records reach the processor sooner, fetching
    /// and processing overlap in finer steps), big ones once the budget binds. Set it to
    /// `max_records` (or more) for fixed pages of `max_records`. Polling sources only: an
    /// enhanced fan-out subscription pushes what it has and ignores the limit.
    pub page_records: i32,
    /// GetRecords answers queued per shard ahead of the processor (default 2; at least 1).
    pub prefetch_batches: usize,
    /// Bytes of records a shard may hold fetched but not yet processed before its fetcher waits
    /// (default 16 MiB), counted as held in memory: each record's struct (128 bytes), its data,
    /// sequence number and partition key (an aggregate's bytes and keys once, however many user
    /// records share them). A call starts, and a batch of deaggregated user records is built,
    /// only below this; one call returns at most 10 MiB on Kinesis (1 MB on DynamoDB Streams)
    /// and a batch holds at most `max_records` user records, so a shard holds at most
    /// `prefetch_bytes` + 10 MiB + 1.2 MiB (+ one aggregate's key tables) whatever the records
    /// (guarantee 7 of the [module doc](super)); `prefetch_batches` bounds the count of batches
    /// within that.
    pub prefetch_bytes: usize,
    /// Records processed since the last checkpoint that start a new checkpoint write (default
    /// 10,000).
    pub checkpoint_every_records: usize,
    /// Time since the last checkpoint that starts a new write if anything was processed
    /// (default 1 s).
    pub checkpoint_interval: Duration,
    /// Processor attempts per batch before its shard is reported stalled, or, with a dead-letter
    /// sink, the batch is handed to it (default 3).
    pub max_attempts: u32,
    /// First pause between processor attempts and after throttling, doubling (default 200 ms).
    pub retry_backoff: Duration,
    /// Longest back-off pause (default 5 s).
    pub max_backoff: Duration,
    /// Where the application starts on its first run (no lease row yet), applied to the
    /// current leaves ([`heatsink_core::stream::first_start`]); default TRIM_HORIZON.
    pub initial_position: InitialPosition,
    /// Leases stolen per round when rebalancing (default 1, like the KCL).
    pub max_steals_per_round: usize,
    /// Attempt and operation timeouts of the source's and lease table's SDK clients; `None`
    /// (default) is [`Timeouts::for_lease`] of `lease_duration` (a quarter per attempt, half per
    /// operation), which keeps a hung call from outliving the lease it works under.
    pub timeouts: Option<Timeouts>,
    /// Read a round's takes (and steals) back, in one BatchGetItem, and keep a lease only if the
    /// stored row still names this worker with the written counter (default false).
    ///
    /// Only for emulators whose conditional writes are not atomic under concurrency (moto
    /// 5.2.5), where two takers can both see their conditional write succeed and only one row
    /// survives. DynamoDB serialises conditional writes, so production leaves it off.
    pub verify_takes: bool,
    /// How long after writing its announcement the worker waits before its first lease read
    /// (default 200 ms), so workers started together see each other and split the leases in
    /// their first round (4 shards over 3 workers: 2 + 1 + 1, no steal) instead of each taking
    /// all of them and rebalancing by steals, which re-read a stolen shard from its checkpoint.
    ///
    /// The wait overlaps the first shard listing and the creation of the lease rows it needs,
    /// so a lone worker pays only what is left of it: at most 200 ms once per start. 200 ms
    /// covers peers whose announcement lands up to that much after this one's: processes started at once are apart by a few
    /// round trips (describe the stream, read the lease table, announce), tens of ms on AWS.
    /// Peers started further apart are still balanced, by the steal rule. `Duration::ZERO`
    /// reads at once (peers then count only once they hold a lease or announced before).
    pub startup_wait: Duration,
    /// Start each planned shard's first GetRecords during the start-up wait (default true), so
    /// the records are in hand when the take succeeds instead of being asked for after it.
    ///
    /// Once the start-up work inside `startup_wait` is done (announced, shards listed, missing
    /// lease rows created: tens of ms), the worker reads the lease table once, plans the takes
    /// it would make from that read (peers announced by then count), and sends
    /// GetShardIterator and one GetRecords for each, from the checkpoint it read. Nothing read
    /// early reaches the processor unless the first round then takes that lease with the same
    /// checkpoint; otherwise the answer is dropped ([`WorkerStats::early_reads`]). The cost of
    /// a dropped one is a single call on the shard and one page (`page_records`, at most
    /// 10 MiB on Kinesis) of its read throughput, once per start. Only sources whose reads can
    /// be dropped this way take part ([`ShardSource::discardable_reads`]: GetRecords yes, an
    /// enhanced fan-out subscription no); with `startup_wait` zero there is no wait to overlap
    /// and nothing is read early.
    pub early_read: bool,
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
            max_records: None,
            page_records: DEFAULT_PAGE_RECORDS,
            prefetch_batches: 2,
            prefetch_bytes: 16 << 20,
            checkpoint_every_records: 10_000,
            checkpoint_interval: Duration::from_secs(1),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            initial_position: InitialPosition::TrimHorizon,
            max_steals_per_round: 1,
            timeouts: None,
            verify_takes: false,
            startup_wait: Duration::from_millis(200),
            early_read: true,
        }
    }
}

#[derive(Debug, Default)]
struct StatsInner {
    records: AtomicU64,
    batches: AtomicU64,
    failed_attempts: AtomicU64,
    dead_lettered: AtomicU64,
    checkpoint_writes: AtomicU64,
    trimmed: AtomicU64,
    undecodable: AtomicU64,
    gone: AtomicU64,
    last_record_ms: AtomicU64,
    free_eligible: AtomicUsize,
    rounds: AtomicU64,
    startup_ms: AtomicU64,
    first_record_ms: AtomicU64,
    early_used: AtomicU64,
    early_dropped: AtomicU64,
    /// Held shards and whether each has caught up with its tip (or its end).
    held: Mutex<BTreeMap<String, bool>>,
    /// Stalled shards and the sequence range of the batch they are stuck on.
    stalled: Mutex<BTreeMap<String, (String, String)>>,
}

/// Live counters of a worker, readable while it runs (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct WorkerStats(Arc<StatsInner>);

impl WorkerStats {
    /// Records handed to the processor and acknowledged (or taken by the dead-letter sink).
    pub fn records_processed(&self) -> u64 {
        self.0.records.load(Ordering::Relaxed)
    }

    /// Processor attempts that failed (a batch retried five times counts five).
    pub fn failed_batches(&self) -> u64 {
        self.0.failed_attempts.load(Ordering::Relaxed)
    }

    /// Batches handed to the dead-letter sink and skipped.
    pub fn dead_lettered(&self) -> u64 {
        self.0.dead_lettered.load(Ordering::Relaxed)
    }

    /// Checkpoint writes that succeeded (SHARD_END not included).
    pub fn checkpoint_writes(&self) -> u64 {
        self.0.checkpoint_writes.load(Ordering::Relaxed)
    }

    /// Reads that hit records trimmed past retention (each restarts at TRIM_HORIZON; the trimmed
    /// records are lost), plus lease rows of unfinished shards pruned after retention.
    pub fn trimmed(&self) -> u64 {
        self.0.trimmed.load(Ordering::Relaxed)
    }

    /// Records that carry the KPL magic but do not decode, delivered whole with the reason in
    /// [`StreamRecord::undecodable`](super::StreamRecord::undecodable) (the shard is not blocked).
    pub fn undecodable_aggregates(&self) -> u64 {
        self.0.undecodable.load(Ordering::Relaxed)
    }

    /// Shards that vanished (not found) before their end; their leases were marked DELETED.
    pub fn gone_shards(&self) -> u64 {
        self.0.gone.load(Ordering::Relaxed)
    }

    /// Batches processed, dead-lettered ones included.
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

    /// The shards whose current batch failed `max_attempts` times and is still being retried.
    pub fn stalled_shards(&self) -> Vec<String> {
        self.0
            .stalled
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Milliseconds the start-up work took (announce and the first shard listing side by side,
    /// then the missing lease rows created), all inside `startup_wait` when it is shorter:
    /// anything above `startup_wait` delays the first round.
    pub fn startup_ms(&self) -> u64 {
        self.0.startup_ms.load(Ordering::Relaxed)
    }

    /// Milliseconds from the worker's start (once the stream's identity is read) until the
    /// processor first acknowledged a batch; 0 before that.
    pub fn first_record_ms(&self) -> u64 {
        self.0.first_record_ms.load(Ordering::Relaxed)
    }

    /// Early first reads ([`WorkerConfig::early_read`]) as (used, dropped): used ones were
    /// handed to the shard's reader after the first round took their lease at the checkpoint
    /// they read from (a refused call as its first refusal, so throttling backs off as usual);
    /// dropped ones were not (lease taken by a peer, or its checkpoint moved or reset) and none
    /// of their records reached the processor.
    pub fn early_reads(&self) -> (u64, u64) {
        (
            self.0.early_used.load(Ordering::Relaxed),
            self.0.early_dropped.load(Ordering::Relaxed),
        )
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

    fn set_stalled(&self, shard: &str, range: Option<(String, String)>) {
        if let Ok(mut s) = self.0.stalled.lock() {
            match range {
                Some(r) => {
                    s.insert(shard.to_owned(), r);
                }
                None => {
                    s.remove(shard);
                }
            }
        }
    }

    /// The consumer-health metrics ([`super::metrics::SHARDS_STALLED`], and the
    /// dead-lettered batches and trimmed reads since `since`) into `emf`; returns the counts to
    /// pass as `since` next time.
    pub fn health_metrics(&self, emf: &mut Emf, since: (u64, u64)) -> (u64, u64) {
        let now = (self.dead_lettered(), self.trimmed());
        emf.count(
            super::metrics::SHARDS_STALLED,
            self.stalled_shards().len() as u64,
        )
        .count(
            super::metrics::BATCHES_DEAD_LETTERED,
            now.0.saturating_sub(since.0),
        )
        .count(super::metrics::TRIMMED_READS, now.1.saturating_sub(since.1));
        now
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
    /// expired) and stopped reading, in the round or by a refused renewal since the last round.
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

/// A lease this worker holds, shared by its shard task, the renewer and the main loop.
#[derive(Debug)]
struct HeldLease {
    /// The row as this worker last wrote it (the shard task keeps the checkpoint in step).
    lease: Mutex<Lease>,
    /// Monotonic ms (since the worker's start) until which the lease is valid here.
    valid_until: AtomicU64,
    /// Set when a write was refused or the plan found the row moved: stop now.
    lost: AtomicBool,
    /// Wakes the shard task when `lost` is set.
    notify: Notify,
}

impl HeldLease {
    fn snapshot(&self) -> Option<Lease> {
        self.lease.lock().ok().map(|l| l.clone())
    }

    fn counter(&self) -> u64 {
        self.lease.lock().map(|l| l.counter).unwrap_or(0)
    }

    fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.notify.notify_one();
        self.notify.notify_waiters();
    }

    fn set_checkpoint(&self, lease: &Lease) {
        if let Ok(mut l) = self.lease.lock() {
            l.checkpoint = lease.checkpoint.clone();
            l.state = lease.state;
        }
    }
}

struct Shared<S, P> {
    source: S,
    leases: LeaseTable,
    processor: P,
    dead_letter: Option<Arc<dyn DeadLetter>>,
    config: WorkerConfig,
    max_records: i32,
    stats: WorkerStats,
    graph: Mutex<Arc<ShardGraph>>,
    sync_wanted: AtomicBool,
    held: Mutex<BTreeMap<String, Arc<HeldLease>>>,
    /// The worker's monotonic clock starts here.
    base: Instant,
    fatal: Mutex<Option<StreamError>>,
    fatal_notify: Notify,
    lost_since_round: AtomicUsize,
    /// Lease rows whose shard was unlisted (with no listed parent) at the last round.
    unlisted: Mutex<BTreeSet<String>>,
    /// The renewer refreshes the announcement while this is true (cleared at shutdown).
    announcing: AtomicBool,
    /// Early first reads begun during the start-up wait, by shard, until the first round.
    early: Mutex<BTreeMap<String, EarlyRead>>,
}

/// A shard's first GetRecords, begun during the start-up wait for a take the worker planned
/// ([`WorkerConfig::early_read`]).
struct EarlyRead {
    /// Where it reads from: the lease's checkpoint when the take was planned. The answer is used
    /// only if the lease is then taken at the same place.
    start: StartAt,
    /// The read; `None` if no iterator was had (the shard task then starts as usual).
    task: AbortOnDrop<Option<EarlyAnswer>>,
}

/// What an early read got: the shard's first GetRecords call, which the fetcher takes as its
/// own (a refusal backs off as any other would).
struct EarlyAnswer {
    /// The iterator the call used.
    iterator: String,
    result: Result<RecordBatch, StreamError>,
    /// When the GetRecords was sent: the first call in the shard's read pace.
    sent: tokio::time::Instant,
    /// What it asked for (the first page) and how long it took: the reader's first answer.
    limit: i32,
    took: Duration,
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShardExit {
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

/// What the fetcher hands the shard task.
enum Fetched {
    /// A GetRecords answer, or the last part of one (its next iterator and child shards).
    Batch(RecordBatch),
    /// A part of an answer whose user records did not fit one batch (`expand.rs`); more follows.
    Part(RecordBatch),
    Gone,
}

/// Completes once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sleeps `d`; true if `stop` became true first.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = stopped(stop) => true,
    }
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
        let shared = Arc::new(Shared {
            max_records,
            leases: self.leases.for_stream(identity),
            source: self.source,
            processor: self.processor,
            dead_letter: self.dead_letter,
            config: self.config,
            stats: self.stats,
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
        });
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
        // Announce, then read no lease before `startup_wait` has passed, so peers started
        // together count each other. The wait is not idle: the first shard listing runs beside
        // the announcement, and the rows the listing needs are created meanwhile, so the first
        // round after the wait only reads, takes and starts reading shards.
        let started = tokio::time::Instant::now();
        let (_, listed) = futures::future::join(shared.announce(), shared.sync_shards()).await;
        let mut next_sync = started;
        // Without a listing the graph is empty and no take can be planned early.
        let listed_ok = listed.is_ok();
        match listed {
            Ok(()) => {
                shared.sync_wanted.store(false, Ordering::Relaxed);
                next_sync = started + shared.config.sync_interval;
                if let Some(scan) = &first_scan {
                    shared.create_missing(scan).await;
                }
            }
            Err(e) => {
                tracing::warn!(worker = %shared.config.worker_id, error = %e,
                    "shard sync failed; retrying next round");
            }
        }
        shared.stats.0.startup_ms.store(
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let mut first_read = Some(started + shared.config.startup_wait);
        if listed_ok
            && shared.config.early_read
            && shared.source.discardable_reads()
            && !shared.config.startup_wait.is_zero()
        {
            Arc::clone(&shared).read_early().await;
        }
        // Dies with this future: a worker dropped without shutdown (a crash, as far as the
        // others can tell) must stop renewing, or its leases never expire.
        let mut renewer = AbortOnDrop(tokio::spawn(Arc::clone(&shared).renew_loop(renew_stop_rx)));
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
        // Graceful shutdown: peers stop counting this worker at once; shard tasks finish their
        // batch, checkpoint and release; renewals go on meanwhile.
        shared.announcing.store(false, Ordering::SeqCst);
        if let Err(e) = shared.leases.withdraw(&me).await {
            tracing::warn!(worker = %me, error = %e,
                "announcement not withdrawn; peers stop counting it after one lease duration");
        }
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(shared.config.lease_duration);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                joined = tasks.join_next() => match joined {
                    Some(Ok((shard, _))) => shared.forget(&shard),
                    Some(Err(_)) => {}
                    None => break,
                },
                () = &mut deadline => break,
            }
        }
        tasks.abort_all();
        let _ = renew_stop_tx.send(true);
        let _ = (&mut renewer.0).await;
        let left: Vec<(String, Arc<HeldLease>)> = shared
            .held
            .lock()
            .map(|h| h.iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect())
            .unwrap_or_default();
        for (shard, h) in left {
            // The copy's checkpoint may be behind the stored one; a release writes none.
            if let Some(lease) = h.snapshot()
                && let Err(e) = shared.leases.release(&lease).await
            {
                tracing::warn!(worker = %me, shard = %shard, error = %e, "release at shutdown failed");
            }
            shared.forget(&shard);
        }
        let fatal = shared.fatal.lock().ok().and_then(|mut f| f.take());
        match failure.or(fatal) {
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

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    fn me(&self) -> &str {
        &self.config.worker_id
    }

    fn duration_ms(&self) -> u64 {
        u64::try_from(self.config.lease_duration.as_millis()).unwrap_or(u64::MAX)
    }

    /// Monotonic ms since the worker started.
    fn mono_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long after a renewal's send time this worker still trusts the lease: nine tenths of
    /// the lease duration, so it stops before another worker (whose clock may run a little
    /// ahead) can take the lease over.
    fn trusted_ms(&self) -> u64 {
        let d = self.duration_ms();
        d - d / 10
    }

    fn is_valid(&self, held: &HeldLease) -> bool {
        !held.lost.load(Ordering::SeqCst)
            && self.mono_ms() < held.valid_until.load(Ordering::SeqCst)
    }

    /// Completes when the lease is lost or past its validity (renewals may push it out while
    /// this waits).
    async fn lease_lapsed(&self, held: &HeldLease) {
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

    fn held_count(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }

    fn forget(&self, shard: &str) {
        if let Ok(mut h) = self.held.lock() {
            h.remove(shard);
        }
        self.stats.set_held(shard, None);
        self.stats.set_stalled(shard, None);
    }

    fn take_fatal_peek(&self) -> bool {
        self.fatal.lock().map(|f| f.is_some()).unwrap_or(false)
    }

    fn set_fatal(&self, e: StreamError) {
        if let Ok(mut f) = self.fatal.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
        self.fatal_notify.notify_one();
    }

    /// Writes this worker's announcement; a failure is logged, never fatal (it only sizes the
    /// peers' fair share, and the next renewal writes it again).
    async fn announce(&self) {
        if !self.announcing.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = self.leases.announce(self.me()).await {
            tracing::warn!(worker = %self.me(), error = %e,
                "announcement failed; peers count this worker by its leases until the next one");
        }
    }

    /// Renews every held lease and the announcement in parallel, every third of the lease
    /// duration, until stopped.
    async fn renew_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let period = self.config.lease_duration / 3;
        loop {
            if sleep_or_stop(period, &mut stop).await {
                return;
            }
            let held: Vec<Arc<HeldLease>> = self
                .held
                .lock()
                .map(|h| h.values().cloned().collect())
                .unwrap_or_default();
            let renewals = futures::future::join_all(held.iter().map(|h| self.renew_one(h)));
            futures::future::join(renewals, self.announce()).await;
        }
    }

    async fn renew_one(&self, held: &HeldLease) {
        if held.lost.load(Ordering::SeqCst) {
            return;
        }
        let Some(lease) = held.snapshot() else { return };
        if !lease.state.is_workable() {
            return; // at SHARD_END: the task is creating the children's leases
        }
        let sent = self.mono_ms();
        match self.leases.renew(&lease, self.duration_ms()).await {
            Ok(renewed) => {
                held.valid_until
                    .fetch_max(sent.saturating_add(self.trusted_ms()), Ordering::SeqCst);
                if let Ok(mut l) = held.lease.lock() {
                    l.expires_at_ms = renewed.expires_at_ms;
                }
            }
            Err(e) if e.is_lease_lost() => {
                tracing::info!(worker = %self.me(), shard = %lease.shard_id,
                    "renewal refused: lease lost; stopping the shard");
                held.mark_lost();
                self.lost_since_round.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(worker = %self.me(), shard = %lease.shard_id, error = %e,
                    "renew failed; the shard stops if its lease lapses")
            }
        }
    }

    /// Lists every shard and makes the listing the graph: shards no longer listed (trimmed past
    /// retention) drop out, except children announced by `ChildShards` whose parent is listed
    /// (the listing may not show them yet).
    async fn sync_shards(&self) -> Result<(), StreamError> {
        let listed = self.source.list_shards().await?;
        let ids: BTreeSet<String> = listed.iter().map(|s| s.shard_id.clone()).collect();
        let old = self.graph();
        let mut all = listed;
        for info in old.shards() {
            if !ids.contains(&info.shard_id) && info.parents().any(|p| ids.contains(p)) {
                all.push(info.clone());
            }
        }
        let fresh = ShardGraph::new(all)?;
        for info in old.shards() {
            if !fresh.contains(&info.shard_id) {
                tracing::info!(shard = %info.shard_id,
                    "shard no longer listed (trimmed past retention): dropped from the graph");
            }
        }
        self.set_graph(fresh);
        Ok(())
    }

    fn set_graph(&self, graph: ShardGraph) {
        if let Ok(mut g) = self.graph.lock() {
            *g = Arc::new(graph);
        }
    }

    fn merge_shards(&self, shards: Vec<ShardInfo>) -> Result<(), StreamError> {
        let mut graph = (*self.graph()).clone();
        graph.merge(shards)?;
        self.set_graph(graph);
        Ok(())
    }

    fn graph(&self) -> Arc<ShardGraph> {
        self.graph
            .lock()
            .map(|g| Arc::clone(&g))
            .unwrap_or_default()
    }

    /// Plans this round from one read of the lease table ([`plan_round`]).
    fn plan(&self, graph: &ShardGraph, scan: &LeaseScan, now: u64) -> RoundPlan {
        let held: BTreeMap<String, u64> = self
            .held
            .lock()
            .map(|h| h.iter().map(|(s, l)| (s.clone(), l.counter())).collect())
            .unwrap_or_default();
        plan_round(&RoundInput {
            worker_id: self.me(),
            now_ms: now,
            graph,
            leases: &scan.leases,
            malformed: &scan.malformed_rows(),
            held: &held,
            max_steals_per_round: self.config.max_steals_per_round,
            initial: self.config.initial_position,
            announced: &scan.workers,
            lease_duration_ms: self.duration_ms(),
        })
    }

    /// Start-up, inside `startup_wait`: creates the rows the first listing needs and `scan`
    /// lacks (the same conditional creates a round's repair makes, so a peer creating them too
    /// is harmless). A failure is logged; the first round repairs whatever is still missing.
    async fn create_missing(&self, scan: &LeaseScan) {
        let graph = self.graph();
        let plan = self.plan(&graph, scan, now_ms());
        if let Err(e) = self.repair(&plan, scan).await {
            tracing::warn!(worker = %self.me(), error = %e,
                "creating lease rows at start-up failed; the first round retries");
        }
    }

    /// Inside the start-up wait, once the rows exist: reads the lease table, plans this worker's
    /// takes from that read (peers announced by now count) and begins each planned shard's
    /// first read ([`WorkerConfig::early_read`]). A failed read of the table only means no
    /// early reads.
    async fn read_early(self: Arc<Self>) {
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
    async fn early_answer(self: Arc<Self>, shard: String, start: StartAt) -> Option<EarlyAnswer> {
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
    fn take_early(&self, lease: &Lease) -> Option<EarlyRead> {
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
    fn drop_early(&self) {
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

    /// Writes the plan's repairs (missing rows created, malformed ones replaced, each
    /// conditionally, 16 at a time); true if any row was written.
    async fn repair(&self, plan: &RoundPlan, scan: &LeaseScan) -> Result<bool, StreamError> {
        for shard in &plan.malformed_unlisted {
            let reason = scan.malformed_row(shard).map_or("", |m| m.reason.as_str());
            tracing::warn!(shard = %shard, reason = %reason,
                "malformed lease row for a shard the stream does not list; left alone");
        }
        let writes: Vec<_> = plan
            .repair
            .iter()
            .map(|repair| Box::pin(self.repair_one(repair, scan)))
            .collect();
        let results: Vec<Result<bool, StreamError>> = futures::stream::iter(writes)
            .buffer_unordered(16)
            .collect()
            .await;
        let mut changed = false;
        for r in results {
            changed |= r?;
        }
        Ok(changed)
    }

    async fn repair_one(
        &self,
        repair: &LeaseRepair,
        scan: &LeaseScan,
    ) -> Result<bool, StreamError> {
        match repair {
            LeaseRepair::Create(lease) => self.leases.create(lease).await,
            LeaseRepair::Replace(lease) => {
                let Some(bad) = scan.malformed_row(&lease.shard_id) else {
                    return Ok(false);
                };
                tracing::warn!(shard = %bad.shard_id, reason = %bad.reason,
                    "malformed lease row; recreating it from the shard graph");
                self.leases.recreate(bad, lease).await
            }
        }
    }

    /// Deletes announcements of workers silent for [`DEAD_WORKER_LEASES`] lease durations (a
    /// crashed worker's row, which no longer counts anyway), so rows of workers with one-off ids
    /// do not pile up in every scan. Failures are logged; the next round tries again.
    async fn prune_announcements(&self, scan: &LeaseScan, now: u64) {
        let dead_after = self.duration_ms().saturating_mul(DEAD_WORKER_LEASES);
        for gone in scan
            .workers
            .iter()
            .filter(|a| a.worker_id != self.me() && !a.is_live(now, dead_after))
        {
            match self.leases.delete_announcement(gone).await {
                Ok(true) => tracing::info!(worker = %gone.worker_id,
                    "announcement of a worker silent for {DEAD_WORKER_LEASES} leases deleted"),
                Ok(false) => {}
                Err(e) => tracing::warn!(worker = %gone.worker_id, error = %e,
                    "deleting a dead worker's announcement failed"),
            }
        }
    }

    /// Deletes the rows of shards the listing dropped (past retention) whose parents are gone
    /// too, once two rounds in a row found them so: per-round work stays proportional to the
    /// live shards. A pruned row that was not finished is reported: its unread records are lost.
    async fn prune(&self, graph: &ShardGraph, scan: &LeaseScan) {
        if graph.is_empty() {
            return;
        }
        let now: BTreeSet<String> = scan
            .leases
            .iter()
            .filter(|l| !graph.contains(&l.shard_id))
            .filter(|l| !l.parents.iter().any(|p| graph.contains(p)))
            .map(|l| l.shard_id.clone())
            .collect();
        let before = match self.unlisted.lock() {
            Ok(mut u) => std::mem::replace(&mut *u, now.clone()),
            Err(_) => return,
        };
        for lease in scan.leases.iter().filter(|l| now.contains(&l.shard_id)) {
            if !before.contains(&lease.shard_id) {
                continue;
            }
            match self.leases.delete_row(lease).await {
                Ok(true) => {
                    if lease.checkpoint.is_finished() || lease.state == LeaseState::Deleted {
                        tracing::info!(shard = %lease.shard_id, "lease row of a trimmed shard deleted");
                    } else {
                        tracing::error!(shard = %lease.shard_id,
                            checkpoint = %lease.checkpoint.to_checkpoint(),
                            "shard trimmed past retention before it was read to its end: its \
                             unread records are lost; lease row deleted");
                        self.stats.0.trimmed.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(h) = self.held.lock()
                        && let Some(held) = h.get(&lease.shard_id)
                    {
                        held.mark_lost();
                    }
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(shard = %lease.shard_id, error = %e,
                    "deleting a trimmed shard's lease row failed"),
            }
        }
    }

    /// One main-loop round: read the lease table, plan, execute the plan (repair, and if a row
    /// was written read and plan again; stop lost shards; take and steal in parallel).
    async fn round(
        self: &Arc<Self>,
        tasks: &mut JoinSet<(String, ShardExit)>,
        stop: &watch::Receiver<bool>,
        report: &mut RoundReport,
    ) -> Result<(), StreamError> {
        let me = self.me().to_owned();
        let graph = self.graph();
        let mut scan = self.leases.scan().await?;
        self.prune(&graph, &scan).await;
        let mut now = now_ms();
        self.prune_announcements(&scan, now).await;
        let mut plan = self.plan(&graph, &scan, now);
        if self.repair(&plan, &scan).await? {
            scan = self.leases.scan().await?;
            now = now_ms();
            plan = self.plan(&graph, &scan, now);
        }
        self.stats
            .0
            .free_eligible
            .store(plan.free_left, Ordering::Relaxed);
        for shard in &plan.stop_lost {
            let held = self.held.lock().ok().and_then(|h| h.get(shard).cloned());
            if let Some(h) = held
                && !h.lost.swap(true, Ordering::SeqCst)
            {
                tracing::info!(worker = %me, shard = %shard, "lease moved; stopping the shard");
                h.mark_lost();
                report.lost += 1;
            }
        }
        // Take, then steal, all in parallel; one read-back for the lot if asked.
        let held_now: BTreeSet<String> = self
            .held
            .lock()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default();
        let moves: Vec<(&Acquire, bool)> = plan
            .take
            .iter()
            .map(|a| (a, false))
            .chain(plan.steal.iter().map(|a| (a, true)))
            .filter(|(a, _)| !held_now.contains(&a.lease.shard_id))
            .collect();
        let results = futures::future::join_all(
            moves
                .iter()
                .map(|(acquire, steal)| self.acquire(acquire, *steal)),
        )
        .await;
        let mut won: Vec<(Lease, u64, &Acquire, bool)> = Vec::new();
        for ((acquire, steal), result) in moves.iter().zip(results) {
            if let Some((lease, sent)) = result? {
                won.push((lease, sent, acquire, *steal));
            }
        }
        if self.config.verify_takes && !won.is_empty() {
            let ids: Vec<String> = won.iter().map(|w| w.0.shard_id.clone()).collect();
            let rows: BTreeMap<String, Lease> = self
                .leases
                .get_many(&ids)
                .await?
                .into_iter()
                .map(|l| (l.shard_id.clone(), l))
                .collect();
            won.retain(|(lease, ..)| {
                let ok = rows.get(&lease.shard_id).is_some_and(|row| {
                    row.owner.as_deref() == Some(me.as_str()) && row.counter == lease.counter
                });
                if !ok {
                    tracing::debug!(worker = %me, shard = %lease.shard_id,
                        "take not confirmed on read-back");
                }
                ok
            });
        }
        for (lease, sent, acquire, steal) in won {
            report.acquired(&acquire.lease, steal, now);
            let shard = lease.shard_id.clone();
            tracing::info!(worker = %me, shard = %shard, counter = lease.counter, steal,
                "lease acquired");
            let early = self.take_early(&lease);
            let held = Arc::new(HeldLease {
                lease: Mutex::new(lease),
                valid_until: AtomicU64::new(sent.saturating_add(self.trusted_ms())),
                lost: AtomicBool::new(false),
                notify: Notify::new(),
            });
            if let Ok(mut h) = self.held.lock() {
                h.insert(shard.clone(), Arc::clone(&held));
            }
            self.stats.set_held(&shard, Some(false));
            let this = Arc::clone(self);
            tasks.spawn(this.run_shard(held, stop.clone(), early));
        }
        Ok(())
    }

    /// Executes one planned take or steal: the conditional write. `None` if another worker won
    /// the lease; else the lease and the monotonic time the write was sent.
    async fn acquire(
        &self,
        acquire: &Acquire,
        steal: bool,
    ) -> Result<Option<(Lease, u64)>, StreamError> {
        let me = self.me();
        let current = &acquire.lease;
        let sent = self.mono_ms();
        let result = if steal {
            self.leases
                .steal(current, me, self.duration_ms(), acquire.floor)
                .await
        } else {
            self.leases
                .take(current, me, self.duration_ms(), acquire.floor)
                .await
        };
        match result {
            Ok(lease) => Ok(Some((lease, sent))),
            Err(e) if e.is_lease_lost() || matches!(e, StreamError::Core(_)) => {
                tracing::debug!(worker = %me, shard = %current.shard_id, error = %e,
                    "lease not acquired");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads one shard while holding its lease; on shutdown checkpoints and releases it, when
    /// the shard is gone marks its lease DELETED so its children proceed.
    async fn run_shard(
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
    async fn mark_gone(&self, held: &HeldLease) {
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

    /// A fresh page-size state for one shard's reader: pages of `page_records`, at most
    /// `max_records`.
    fn read_size(&self) -> ReadSize {
        // `max_records` is at least 1 (`run`); a page below 1 is 1, as `max_records` is.
        let cap = usize::try_from(self.max_records).unwrap_or(1);
        let page = usize::try_from(self.config.page_records.max(1)).unwrap_or(1);
        ReadSize::new(page, cap)
    }

    fn start_of(lease: &Lease) -> StartAt {
        match &lease.checkpoint {
            Progress::InProgress(p) if p.sub_seq.is_some() => StartAt::AtSeq(p.seq.clone()),
            Progress::InProgress(p) => StartAt::AfterSeq(p.seq.clone()),
            Progress::Latest => StartAt::Latest,
            Progress::AtTimestamp(ms) => StartAt::AtTimestamp(*ms),
            Progress::NotStarted | Progress::Finished => StartAt::TrimHorizon,
        }
    }

    /// An iterator at `start`, retrying transient failures. `Ok(None)` when told to stop or the
    /// lease lapsed; `Err(())` when the shard is gone.
    async fn iterator(
        &self,
        shard: &str,
        start: &StartAt,
        held: &HeldLease,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<String>, ()> {
        let mut pause = self.config.retry_backoff;
        let mut start = start.clone();
        loop {
            if *stop.borrow() || !self.is_valid(held) {
                return Ok(None);
            }
            match self.source.get_iterator(shard, &start).await {
                Ok(it) => return Ok(Some(it)),
                Err(StreamError::NotFound { .. }) => return Err(()),
                Err(StreamError::Trimmed { .. }) if start != StartAt::TrimHorizon => {
                    self.trimmed(shard, &start);
                    start = StartAt::TrimHorizon;
                }
                Err(e) => {
                    tracing::warn!(shard = %shard, error = %e, "GetShardIterator failed; backing off");
                    if sleep_or_stop(pause, stop).await {
                        return Ok(None);
                    }
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    fn trimmed(&self, shard: &str, from: &StartAt) {
        tracing::warn!(shard = %shard, from = ?from,
            "records past the checkpoint were trimmed past retention before they were read: \
             they are lost; reading resumes at TRIM_HORIZON");
        self.stats.0.trimmed.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps up to `prefetch_batches` GetRecords answers, and below `prefetch_bytes` of
    /// records, queued for the shard task, in order. An early read from `start`, if given, is
    /// the first answer.
    #[allow(clippy::too_many_arguments)]
    async fn fetch(
        self: Arc<Self>,
        shard: String,
        start: StartAt,
        held: Arc<HeldLease>,
        tx: mpsc::Sender<(Fetched, usize)>,
        budget: Arc<ByteBudget>,
        mut stop: watch::Receiver<bool>,
        early: Option<EarlyRead>,
    ) {
        let mut first = match early {
            Some(mut e) => tokio::select! {
                answer = &mut e.task.0 => answer.ok().flatten(),
                () = stopped(&mut stop) => return,
            },
            None => None,
        };
        let mut iterator = if let Some(answer) = &first {
            answer.iterator.clone()
        } else {
            match self.iterator(&shard, &start, &held, &mut stop).await {
                Ok(Some(it)) => it,
                Ok(None) => return,
                Err(()) => {
                    let _ = tx.send((Fetched::Gone, 0)).await;
                    return;
                }
            }
        };
        let limit = self.config.prefetch_bytes.max(1);
        let mut last: Option<StartAt> = None;
        let mut pause = self.config.retry_backoff;
        let mut pace = ReadPace::new(GET_RECORDS_PER_SECOND, 1_000);
        let mut size = self.read_size();
        let paced_from = first
            .as_ref()
            .map_or_else(tokio::time::Instant::now, |a| a.sent);
        let since = move |at: tokio::time::Instant| {
            u64::try_from(at.duration_since(paced_from).as_millis()).unwrap_or(u64::MAX)
        };
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let idle = self.config.idle_poll.max(MIN_GET_RECORDS_INTERVAL);
        loop {
            if *stop.borrow() || !self.is_valid(&held) {
                return;
            }
            let (result, asked, took) = if let Some(answer) = first.take() {
                pace.record(0);
                (answer.result, answer.limit, answer.took)
            } else {
                if budget.below(limit, &mut stop).await {
                    return;
                }
                let now = since(tokio::time::Instant::now());
                let at = pace.earliest(now);
                if at > now {
                    size.paced();
                    if sleep_or_stop(Duration::from_millis(at - now), &mut stop).await {
                        return;
                    }
                }
                let start = since(tokio::time::Instant::now()).max(at);
                let asked = i32::try_from(size.limit(&pace, start)).unwrap_or(self.max_records);
                pace.record(start);
                let sent = tokio::time::Instant::now();
                let result = self.source.get_records(&iterator, asked).await;
                (result, asked, sent.elapsed())
            };
            let caught_up = result.as_ref().is_ok_and(|b| is_caught_up(b, asked));
            size.answered(
                millis(took),
                match &result {
                    Ok(_) if caught_up => ReadAnswer::Tip,
                    Ok(_) => ReadAnswer::Behind,
                    Err(_) => ReadAnswer::Failed,
                },
            );
            match result {
                Ok(batch) => {
                    pause = self.config.retry_backoff;
                    if let Some(r) = batch.records.last() {
                        last = Some(StartAt::AfterSeq(r.seq.clone()));
                    }
                    let next = batch.next_iterator.clone();
                    self.stats.set_held(&shard, Some(caught_up));
                    // KPL aggregates are deaggregated here, a batch at a time, each counted
                    // against the budget before it is built (expand.rs); a record that does
                    // not decode within the bounds is delivered whole with its reason.
                    let mut out = expand::Outlet {
                        tx: &tx,
                        budget: &budget,
                        limit,
                        stop: &mut stop,
                        max_records: usize::try_from(self.max_records).unwrap_or(1),
                    };
                    let sent = expand::send(batch, &mut out, |r| {
                        self.stats.0.undecodable.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(shard = %shard, seq = %r.seq.to_decimal(),
                            error = ?r.undecodable,
                            "record carries the KPL magic but does not decode within the \
                             bounds: delivered whole");
                    })
                    .await;
                    if sent.is_err() {
                        return;
                    }
                    match next {
                        None => return, // SHARD_END, sent last
                        Some(n) => iterator = n,
                    }
                    if caught_up && sleep_or_stop(idle, &mut stop).await {
                        return;
                    }
                }
                Err(e @ (StreamError::ExpiredIterator(_) | StreamError::Trimmed(_))) => {
                    let again = last.clone().unwrap_or_else(|| start.clone());
                    if matches!(e, StreamError::Trimmed(_)) {
                        self.trimmed(&shard, &again);
                    }
                    let again = if matches!(e, StreamError::Trimmed(_)) {
                        StartAt::TrimHorizon
                    } else {
                        again
                    };
                    match self.iterator(&shard, &again, &held, &mut stop).await {
                        Ok(Some(it)) => iterator = it,
                        Ok(None) => return,
                        Err(()) => {
                            let _ = tx.send((Fetched::Gone, 0)).await;
                            return;
                        }
                    }
                }
                Err(StreamError::NotFound { .. }) => {
                    let _ = tx.send((Fetched::Gone, 0)).await;
                    return;
                }
                Err(e) => {
                    tracing::debug!(shard = %shard, error = %e, "GetRecords failed; backing off");
                    if sleep_or_stop(pause, &mut stop).await {
                        return;
                    }
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    async fn read_shard(
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
            // Records at or before the checkpoint (a resumed aggregate) were processed already.
            let done = cp.done().cloned();
            let records: Vec<StreamRecord> = batch
                .records
                .into_iter()
                .filter(|r| done.as_ref().is_none_or(|d| r.position() > *d))
                .collect();
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

    /// Hands `work` to the processor under the failure policy (module doc): `Ok` once it
    /// succeeded or the dead-letter sink took it; `Err` with how the shard task ends.
    async fn deliver(
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

    fn count(&self, batch: &ProcessBatch) {
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

    /// Collects a finished write; starts one if due and none is in flight; waits for the one in
    /// flight if processing ran far ahead of it.
    async fn maybe_checkpoint(
        &self,
        cp: &mut Checkpointer,
        held: &HeldLease,
    ) -> Result<(), ShardExit> {
        if cp.inflight.as_ref().is_some_and(|w| w.is_finished()) {
            self.collect(cp, held).await?;
        }
        let every = self.config.checkpoint_every_records.max(1);
        if cp.inflight.is_some() && cp.uncheckpointed >= every.saturating_mul(2) {
            self.collect(cp, held).await?;
        }
        let due =
            cp.uncheckpointed >= every || cp.since.elapsed() >= self.config.checkpoint_interval;
        if cp.inflight.is_none()
            && due
            && let Some(position) = cp.pending.take()
        {
            let table = self.leases.clone();
            let lease = cp.lease.clone();
            cp.inflight_position = Some(position.clone());
            cp.inflight = Some(tokio::spawn(async move {
                table.checkpoint(&lease, position).await
            }));
            cp.uncheckpointed = 0;
            cp.since = Instant::now();
        }
        Ok(())
    }

    /// Waits for the write in flight and folds its result in.
    async fn collect(&self, cp: &mut Checkpointer, held: &HeldLease) -> Result<(), ShardExit> {
        let Some(write) = cp.inflight.take() else {
            return Ok(());
        };
        let position = cp.inflight_position.take();
        match write.await {
            Ok(Ok(next)) => {
                self.stats
                    .0
                    .checkpoint_writes
                    .fetch_add(1, Ordering::Relaxed);
                cp.lease = next;
                held.set_checkpoint(&cp.lease);
                Ok(())
            }
            Ok(Err(e)) if e.is_lease_lost() => {
                held.mark_lost();
                Err(ShardExit::Lost)
            }
            other => {
                if let Ok(Err(e)) = &other {
                    tracing::warn!(shard = %cp.lease.shard_id, error = %e, "checkpoint failed; retrying");
                }
                if cp.pending.is_none() {
                    cp.pending = position;
                }
                Ok(())
            }
        }
    }

    /// Forces the checkpoint of everything processed: waits for the write in flight, then
    /// writes what is pending, retrying (when `retry`) while the lease is valid.
    async fn flush(
        &self,
        cp: &mut Checkpointer,
        held: &HeldLease,
        retry: bool,
    ) -> Result<(), ShardExit> {
        self.collect(cp, held).await?;
        let Some(position) = cp.pending.take() else {
            return Ok(());
        };
        let mut pause = self.config.retry_backoff;
        loop {
            match self.leases.checkpoint(&cp.lease, position.clone()).await {
                Ok(next) => {
                    self.stats
                        .0
                        .checkpoint_writes
                        .fetch_add(1, Ordering::Relaxed);
                    cp.lease = next;
                    held.set_checkpoint(&cp.lease);
                    cp.uncheckpointed = 0;
                    return Ok(());
                }
                Err(e) if e.is_lease_lost() => {
                    held.mark_lost();
                    return Err(ShardExit::Lost);
                }
                Err(e) => {
                    tracing::warn!(shard = %cp.lease.shard_id, error = %e, "checkpoint failed");
                    if !retry || !self.is_valid(held) {
                        cp.pending = Some(position);
                        return Err(ShardExit::Lost);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    /// SHARD_END: record the end, create the children's leases, mark CHILDREN_CREATED.
    async fn finish(&self, lease: &mut Lease, held: &HeldLease) -> ShardExit {
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

    fn children(&self, shard: &str) -> Vec<ShardInfo> {
        let graph = self.graph();
        graph
            .children_of(shard)
            .into_iter()
            .filter_map(|id| graph.get(id).cloned())
            .collect()
    }
}

/// A shard task's checkpoint state: what is durable, what is processed but not yet written,
/// and the one write in flight.
struct Checkpointer {
    /// The row as last written (its checkpoint is the durable one).
    lease: Lease,
    /// The last processed position not yet written.
    pending: Option<Position>,
    /// Records processed since the last write started.
    uncheckpointed: usize,
    /// When the last write started.
    since: Instant,
    inflight: Option<tokio::task::JoinHandle<Result<Lease, StreamError>>>,
    inflight_position: Option<Position>,
}

impl Checkpointer {
    fn new(lease: Lease) -> Self {
        Self {
            lease,
            pending: None,
            uncheckpointed: 0,
            since: Instant::now(),
            inflight: None,
            inflight_position: None,
        }
    }

    fn processed(&mut self, position: Position, records: usize) {
        self.pending = Some(position);
        self.uncheckpointed = self.uncheckpointed.saturating_add(records);
    }

    /// The last processed position, written or not.
    fn done(&self) -> Option<&Position> {
        self.pending
            .as_ref()
            .or(self.inflight_position.as_ref())
            .or_else(|| self.lease.checkpoint.position())
    }
}

/// Record bytes a shard holds fetched but not yet processed, shared by its fetcher and task.
#[derive(Debug, Default)]
struct ByteBudget {
    held: AtomicUsize,
    freed: Notify,
}

impl ByteBudget {
    fn take(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::SeqCst);
    }

    fn give_back(&self, bytes: usize) {
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                Some(h.saturating_sub(bytes))
            });
        self.freed.notify_waiters();
    }

    /// Waits until fewer than `limit` bytes are held; true if `stop` came first.
    async fn below(&self, limit: usize, stop: &mut watch::Receiver<bool>) -> bool {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.held.load(Ordering::SeqCst) < limit {
                return false;
            }
            tokio::select! {
                () = freed => {}
                () = stopped(stop) => return true,
            }
        }
    }
}

/// Gives a batch's bytes back to the budget when dropped (processed, or the task ended).
struct HeldBytes<'a>(&'a ByteBudget, usize);

impl Drop for HeldBytes<'_> {
    fn drop(&mut self) {
        self.0.give_back(self.1);
    }
}

/// Whether an answer reached the shard's tip, so the next read waits the idle pause: it is
/// empty, or it says 0 ms behind and is not full. A full answer (`limit` records or more, as a
/// KPL aggregate can make) at "0 behind" is read on at once: `MillisBehindLatest` is measured
/// from the batch's last record, and emulators report 0 with records still behind it
/// (kinesis-mock: 1,000 records at 0 behind, then 62 more), so only a short answer proves the tip.
fn is_caught_up(batch: &RecordBatch, limit: i32) -> bool {
    let full = usize::try_from(limit).is_ok_and(|limit| batch.records.len() >= limit.max(1));
    batch.records.is_empty() || (batch.millis_behind == Some(0) && !full)
}

/// Aborts the task when dropped (the fetcher dies with its shard task).
struct AbortOnDrop<T = ()>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_or_short_answer_at_zero_behind_is_the_tip() {
        let answer = |n: usize, behind: Option<i64>| RecordBatch {
            records: (0..n)
                .map(|i| StreamRecord {
                    seq: heatsink_core::counter::Seq::from(i as u64 + 1),
                    sub_seq: None,
                    partition_key: "k".into(),
                    data: bytes::Bytes::new(),
                    undecodable: None,
                })
                .collect(),
            next_iterator: Some("it".into()),
            child_shards: vec![],
            millis_behind: behind,
        };
        assert!(
            is_caught_up(&answer(0, Some(500)), 3),
            "empty: nothing more yet"
        );
        assert!(is_caught_up(&answer(0, None), 3));
        assert!(
            is_caught_up(&answer(2, Some(0)), 3),
            "short at 0 behind: the tip"
        );
        assert!(
            !is_caught_up(&answer(3, Some(0)), 3),
            "full at 0 behind: read on"
        );
        assert!(
            !is_caught_up(&answer(4, Some(0)), 3),
            "over the limit (KPL): read on"
        );
        assert!(!is_caught_up(&answer(2, Some(40)), 3), "behind: read on");
        assert!(
            !is_caught_up(&answer(2, None), 3),
            "no lag reported: only empty is the tip"
        );
    }

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

    #[test]
    fn a_checkpoint_resumes_after_the_record_or_inside_its_aggregate() {
        use heatsink_core::counter::Seq;
        let mut lease = row(None, 0);
        type W = Shared<super::super::KinesisSource, Nop>;
        assert_eq!(W::start_of(&lease), StartAt::TrimHorizon);
        lease.checkpoint = Progress::Latest;
        assert_eq!(W::start_of(&lease), StartAt::Latest);
        lease.checkpoint = Progress::AtTimestamp(5);
        assert_eq!(W::start_of(&lease), StartAt::AtTimestamp(5));
        lease.checkpoint = Progress::InProgress(Seq::from(9).into());
        assert_eq!(W::start_of(&lease), StartAt::AfterSeq(Seq::from(9)));
        lease.checkpoint = Progress::InProgress(Position::sub_record(Seq::from(9), 2));
        assert_eq!(W::start_of(&lease), StartAt::AtSeq(Seq::from(9)));
    }

    struct Nop;
    impl RecordProcessor for Nop {
        async fn process(&self, _: &ProcessBatch) -> Result<(), StreamError> {
            Ok(())
        }
    }
}
