//! The worker's settings ([`WorkerConfig`]) and the limits it reads by.

use std::time::Duration;

use heatsink_core::stream::InitialPosition;

use crate::stream::Timeouts;
// Named by the docs only.
#[cfg(doc)]
use {
    super::WorkerStats,
    crate::stream::ShardSource,
    heatsink_core::stream::{ReadPace, ReadSize},
};

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
/// that reads it (it stopped counting after one); the rule is core's
/// [`silent_workers`](heatsink_core::stream::silent_workers).
pub use heatsink_core::stream::DEAD_WORKER_LEASES;

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
    /// (guarantee 7 of the [module doc](crate::stream)); `prefetch_batches` bounds the count of batches
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
