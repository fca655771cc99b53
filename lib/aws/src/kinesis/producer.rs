//! A hot-key-aware Kinesis producer: batching, per-shard pacing, retry of failed entries,
//! optional KPL aggregation and salting of hot keys.
//!
//! [`Producer::start`] spawns one task that owns a bounded queue. [`Producer::send`] waits for
//! room in the queue (backpressure, so a slow stream slows its writers instead of filling
//! memory); [`Producer::shutdown`] flushes everything queued and returns a [`ProducerReport`].
//!
//! **Memory is bounded in bytes.** Every user record costs its data plus 1 KiB for its
//! partition key ([`KEY_ALLOWANCE`]: 256 characters of up to 4 bytes) from a budget of
//! [`ProducerConfig::max_buffered_bytes`] (default 32 MiB), taken by `send` before the record is
//! queued and given back when Kinesis acknowledges it or it is given up; `send` waits while the
//! budget is spent, so a stalled stream blocks its writers at the budget, whatever the record
//! count (`queue_capacity`, 10,000 records, is a second bound). A plain entry holds its record
//! once; a KPL aggregate holds its user records and their packed copy (≤ 2 × theirs); a request
//! in flight holds one more copy of its entries for the SDK until answered (≤ 5 MiB each, or the
//! one large record it carries). So the producer holds at most `2 × max_buffered_bytes +
//! max_in_flight × 5 MiB` of records: 84 MiB with the defaults, with 1 MiB records or 10-byte
//! ones. Measured under a stalled stream (`producer_rss` bench, BENCHMARKS.md): 67.5 MiB above
//! baseline with the defaults and 1 MiB records on 4 shards, the SDK's request bodies included.
//!
//! What the task does with each user record:
//! 1. **Salting** (optional): if the hot-key directory says the partition key is salted with
//!    S > 1, the record goes to one of S sub-keys chosen by
//!    [`heatsink_core::keys::place_salts`], so the sub-keys land on distinct shards, in turn.
//! 2. **Prediction**: the shard is the open shard whose hash-key range holds MD5 of the
//!    partition key (or the explicit hash key), from `ListShards`.
//! 3. **Aggregation** (optional): records bound for the same predicted shard are packed into KPL
//!    aggregates ([`heatsink_core::kpl::Aggregator`], 51,200 bytes by default).
//! 4. **Pacing**: a shard's entries are put only while its budget of 1,000 records/s and
//!    1 MiB/s ([`ShardLimits::KINESIS`]) allows.
//! 5. **Batching**: `PutRecords` requests of at most 500 entries and 5 MiB (data plus partition
//!    keys), each entry at most 1 MiB — the service limits in the `PutRecords` API reference.
//!    A stream whose `MaxRecordSizeInKiB` is raised (up to 10,240 KiB) takes records up to that
//!    size ([`Producer::max_record_bytes`], read at start with `DescribeStreamSummary`; 1 MiB
//!    when the stream does not say or the call is refused); a record over 5 MiB goes alone in
//!    its request. A request is sent when full or when its oldest entry has waited `linger`.
//! 6. **Retry**: only the entries the response marks failed are retried, after a capped,
//!    fully jittered exponential backoff; a throttled shard's budget is emptied for a second.
//!
//! When a response puts an entry on another shard than predicted, or the stream refuses a
//! write with `ResourceNotFound`/`InvalidArgument` for a closed shard, the shard map is read
//! again and everything still buffered is re-predicted and re-packed, so an aggregate never
//! mixes the two children of a split.
//!
//! Delivery is **at least once**: an entry the response reports as written is never sent
//! again, but when a whole request fails without an answer (timeout, connection reset) it is
//! retried, and Kinesis may already have written some of it.
//!
//! **Ordering: the producer does not keep per-key order.** Two ways a record of a key can land
//! after a later record of the same key, with no failure reported to the caller:
//! - *Concurrent requests* (`max_in_flight` > 1, default 4): records of one key go to one shard,
//!   but consecutive requests may both carry entries for that shard, and Kinesis may apply the
//!   later request first. This happens without any failure at all.
//! - *Retries*: only the failed entries of a request are retried, after the ones that succeeded.
//!
//! `max_in_flight: 1` removes the first (one request at a time, in queue order) but not the
//! second. Consumers that need per-key order must order by their own sequence field (or write
//! with `PutRecord` and `SequenceNumberForOrdering`, one record at a time).
//! A record that still fails after `max_attempts` is counted in [`ProducerReport::failed`]
//! and handed back in [`ProducerReport::failed_records`], never dropped silently; the last
//! failure is [`ProducerReport::last_error`].
//!
//! **A hung stream** (calls accepted and never answered) costs each call at most
//! [`ProducerConfig::timeouts`]' operation timeout (15 s; 5 s an attempt) before its entries are
//! retried, so a record is given up within `max_attempts × (operation + backoff_cap)`: 12 ×
//! (15 s + 2 s) = 204 s with the defaults, plus turns behind other requests when more than
//! `max_in_flight` requests' worth are buffered. Meanwhile `send` blocks at the byte budget.
//! `start` gives up after one `ListShards` call's timeout.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, RecordDistributionStrategy};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use heatsink_core::keys::{SaltPolicy, ShardRange, place_salts, shard_for};
use heatsink_core::kpl::{self, Aggregator, KplError};
use rand::Rng;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::pace::{Pacer, ShardLimits};
use super::{KinesisError, open_shard_ranges};
use crate::error::AwsError;
use crate::hot::directory::CachedDirectory;
use crate::metrics::{Emf, MetricDef};
use crate::timeouts::{Timeouts, bounded};

/// `PutRecords`: at most 500 entries per request.
pub const MAX_RECORDS_PER_REQUEST: usize = 500;
/// `PutRecords`: at most 5 MiB per request, data plus partition keys.
pub const MAX_BYTES_PER_REQUEST: usize = 5 * 1_048_576;
/// `PutRecords`: at most 1 MiB per entry, data plus partition key, on a stream that has not
/// raised its maximum record size.
pub const MAX_BYTES_PER_RECORD: usize = kpl::MAX_RECORD_BYTES;
/// The largest record a stream can allow (`MaxRecordSizeInKiB` up to 10,240 KiB: 10 MiB).
pub const MAX_LARGE_RECORD_BYTES: usize = 10 * 1_048_576;

/// What every user record costs the byte budget beyond its data: its partition key's worst case,
/// 256 characters of up to 4 bytes (1 KiB).
pub const KEY_ALLOWANCE: usize = 1_024;

/// The default [`ProducerConfig::max_buffered_bytes`]: 32 MiB.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 32 << 20;

/// What a user record of `data_len` bytes costs the byte budget: its data plus [`KEY_ALLOWANCE`].
fn cost(data_len: usize) -> usize {
    data_len.saturating_add(KEY_ALLOWANCE)
}

/// How long a shard held back by pacing waits before it is looked at again (20 ms: about 20
/// records of budget at 1,000 records/s).
const PACED_RECHECK: Duration = Duration::from_millis(20);

/// Errors of the producer.
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    /// Reading the shard map failed.
    #[error(transparent)]
    SlotMap(#[from] KinesisError),
    /// A `PutRecords` call failed in a way a retry cannot fix (not found, access denied,
    /// validation). Every user record not written is in `report.failed_records`.
    #[error("{source}; {} user records were not written", report.failed)]
    Put {
        /// The call's error, whole.
        source: AwsError,
        /// What was done before it stopped; `failed_records` holds everything not written.
        report: Box<ProducerReport>,
    },
    /// The record cannot be put at all (bad partition key, over the stream's maximum record
    /// size: 1 MiB unless the stream raised it).
    #[error(transparent)]
    Record(#[from] KplError),
    /// The producer task has stopped (after a fatal error, or after shutdown).
    #[error("the producer for {stream} has stopped; call shutdown() for its report")]
    Closed {
        /// Stream name.
        stream: String,
    },
    /// The producer task panicked (a bug).
    #[error("the producer task for {stream} failed: {reason}")]
    Task {
        /// Stream name.
        stream: String,
        /// The join error's text.
        reason: String,
    },
}

/// Where salt counts come from.
#[derive(Clone)]
pub enum Salting {
    /// No salting: records go under the partition key they were sent with.
    Off,
    /// The hot-key directory, through its cache (re-read at most every `max_age`).
    Directory(Arc<CachedDirectory>),
    /// A fixed policy (tests, or a caller that loads the directory itself).
    Fixed(Arc<dyn SaltPolicy + Send + Sync>),
}

impl std::fmt::Debug for Salting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Off => "Off",
            Self::Directory(_) => "Directory",
            Self::Fixed(_) => "Fixed",
        })
    }
}

/// Producer settings; [`ProducerConfig::default`] is the service's limits and KPL-like timing.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// User records the queue holds before `send` waits (default 10,000).
    pub queue_capacity: usize,
    /// Bytes of user records (data plus [`KEY_ALLOWANCE`] each) queued, buffered and in flight
    /// before `send` waits (default [`DEFAULT_MAX_BUFFERED_BYTES`], 32 MiB; at least one
    /// largest record, at most 4 GiB). See the module docs for what the process holds.
    pub max_buffered_bytes: usize,
    /// Pack records bound for one shard into KPL aggregates (default off).
    pub aggregate: bool,
    /// Largest aggregate, data plus partition key (default 51,200 bytes, the KPL's).
    pub aggregate_max_bytes: usize,
    /// Salting of hot keys (default off).
    pub salting: Salting,
    /// How long a buffered entry may wait for more to fill its request (default 50 ms).
    pub linger: Duration,
    /// Requests in flight at once (default 4).
    pub max_in_flight: usize,
    /// Attempts per entry before it is given up and reported (default 12).
    pub max_attempts: u32,
    /// Backoff before the first retry; doubles per attempt (default 50 ms).
    pub backoff_base: Duration,
    /// Backoff cap (default 2 s).
    pub backoff_cap: Duration,
    /// Per-shard write limits used for pacing (default Kinesis's).
    pub limits: ShardLimits,
    /// Attempt and operation timeouts of its calls, for a client that has none of its own
    /// (default [`Timeouts::CALL`]: 5 s an attempt, 15 s a call), so a hung stream fails the
    /// call instead of holding it: the entries are retried, and given up after `max_attempts`.
    pub timeouts: Timeouts,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 10_000,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            aggregate: false,
            aggregate_max_bytes: kpl::DEFAULT_MAX_AGGREGATE_BYTES,
            salting: Salting::Off,
            linger: Duration::from_millis(50),
            max_in_flight: 4,
            max_attempts: 12,
            backoff_base: Duration::from_millis(50),
            backoff_cap: Duration::from_secs(2),
            limits: ShardLimits::KINESIS,
            timeouts: Timeouts::CALL,
        }
    }
}

/// One user record as sent: its final partition key (salted or not) and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// The partition key it was put under (a sub-key `k#salt` when salted).
    pub partition_key: String,
    /// Its explicit hash key, if the sender gave one.
    pub explicit_hash_key: Option<String>,
    /// The payload.
    pub data: Vec<u8>,
}

/// What a producer did, counted; `records` + `failed` is every user record sent to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerReport {
    /// User records Kinesis acknowledged.
    pub records: u64,
    /// `PutRecords` calls made (retries included).
    pub requests: u64,
    /// Entries retried after a partial failure or a failed call.
    pub retried_entries: u64,
    /// Kinesis records that carried more than one user record (KPL aggregates).
    pub aggregated_records: u64,
    /// Entries refused with `ProvisionedThroughputExceededException` (or calls throttled).
    pub throttles: u64,
    /// Times the shard map was read again after a misprediction.
    pub map_refreshes: u64,
    /// User records put under a salted sub-key.
    pub salted: u64,
    /// User records given up after `max_attempts`.
    pub failed: u64,
    /// Those records, so the caller can put them elsewhere.
    pub failed_records: Vec<UserRecord>,
    /// Why the last of them was given up: the call's error (one line, e.g. "… PutRecords on
    /// `stream` timed out …") or the entry's error code and message. `None` when none failed.
    pub last_error: Option<String>,
}

/// User records acknowledged by Kinesis.
pub const METRIC_RECORDS: MetricDef = MetricDef::count("ProducerRecords");
/// PutRecords calls.
pub const METRIC_REQUESTS: MetricDef = MetricDef::count("ProducerRequests");
/// Entries retried.
pub const METRIC_RETRIED: MetricDef = MetricDef::count("ProducerRetriedEntries");
/// KPL aggregates put.
pub const METRIC_AGGREGATED: MetricDef = MetricDef::count("ProducerAggregatedRecords");
/// Throttled entries.
pub const METRIC_THROTTLES: MetricDef = MetricDef::count("ProducerThrottles");
/// User records given up.
pub const METRIC_FAILED: MetricDef = MetricDef::count("ProducerFailedRecords");

impl ProducerReport {
    /// The report as EMF metric values of `emitter`.
    pub fn emf(&self, emitter: &str) -> Emf {
        let mut emf = Emf::new(emitter);
        emf.count(METRIC_RECORDS, self.records)
            .count(METRIC_REQUESTS, self.requests)
            .count(METRIC_RETRIED, self.retried_entries)
            .count(METRIC_AGGREGATED, self.aggregated_records)
            .count(METRIC_THROTTLES, self.throttles)
            .count(METRIC_FAILED, self.failed);
        emf
    }
}

/// A running producer for one stream; see the module docs.
#[derive(Debug)]
pub struct Producer {
    stream: String,
    tx: mpsc::Sender<UserRecord>,
    /// The byte budget: taken by `send`, given back by the task; closed when the task ends.
    budget: Arc<Semaphore>,
    /// The largest record the stream takes (data plus partition key).
    max_record: usize,
    /// The stream places records itself (`AUTO`): no aggregation, no salting.
    keyless: bool,
    task: JoinHandle<Result<ProducerReport, ProducerError>>,
}

impl Producer {
    /// Read the stream's shard map and start the producer task.
    pub async fn start(
        kinesis: aws_sdk_kinesis::Client,
        stream: impl Into<String>,
        config: ProducerConfig,
    ) -> Result<Self, ProducerError> {
        let stream = stream.into();
        let kinesis = bounded!(aws_sdk_kinesis, kinesis, config.timeouts);
        let shards = open_shard_ranges(&kinesis, &stream).await?;
        let shape = stream_shape(&kinesis, &stream).await;
        let max_record = shape.max_record;
        let mut config = config;
        if shape.keyless && (config.aggregate || !matches!(config.salting, Salting::Off)) {
            // Kinesis places records itself on an AUTO stream and ignores partition keys:
            // salting spreads nothing, and KPL aggregates are not supported there.
            tracing::warn!(
                stream = %stream,
                "the stream distributes records itself (RecordDistributionStrategy AUTO): no aggregation, no salting"
            );
            config.aggregate = false;
            config.salting = Salting::Off;
        }
        let keyless = shape.keyless;
        let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
        let bytes = config
            .max_buffered_bytes
            .clamp(cost(max_record), u32::MAX as usize);
        let budget = Arc::new(Semaphore::new(bytes));
        let worker = Worker::new(kinesis, stream.clone(), config, shards, budget.clone());
        let closing = budget.clone();
        let task = tokio::spawn(async move {
            let out = worker.run(rx).await;
            // Senders waiting for budget learn the task has stopped.
            closing.close();
            out
        });
        Ok(Self {
            stream,
            tx,
            budget,
            max_record,
            keyless,
            task,
        })
    }

    /// True when the stream places records itself (on-demand, `RecordDistributionStrategy`
    /// `AUTO`, read at start): partition keys are ignored, so this producer neither aggregates
    /// nor salts, whatever its config said.
    pub fn keyless(&self) -> bool {
        self.keyless
    }

    /// The largest record (data plus partition key) this producer accepts: the stream's
    /// `MaxRecordSizeInKiB` as `DescribeStreamSummary` gave it at start, else 1 MiB.
    pub fn max_record_bytes(&self) -> usize {
        self.max_record
    }

    /// Queue one user record under `partition_key`, waiting while the queue is full.
    pub async fn send(
        &self,
        partition_key: impl Into<String>,
        data: impl Into<Vec<u8>>,
    ) -> Result<(), ProducerError> {
        self.send_record(UserRecord {
            partition_key: partition_key.into(),
            explicit_hash_key: None,
            data: data.into(),
        })
        .await
    }

    /// Queue one user record (with an explicit hash key, if it has one), waiting while the byte
    /// budget or the queue is full.
    pub async fn send_record(&self, record: UserRecord) -> Result<(), ProducerError> {
        check_record(&record, self.max_record)?;
        let closed = || ProducerError::Closed {
            stream: self.stream.clone(),
        };
        // ≤ 10 MiB + 1 KiB by check_record, so it fits a u32.
        let n = u32::try_from(cost(record.data.len())).map_err(|_| closed())?;
        self.budget
            .acquire_many(n)
            .await
            .map_err(|_| closed())?
            // Given back by the task when the record is acknowledged or given up.
            .forget();
        self.tx
            .send(record)
            .await
            .map_err(|_| ProducerError::Closed {
                stream: self.stream.clone(),
            })
    }

    /// Stop taking records, put everything queued, and return the report (or the fatal error
    /// that stopped the task).
    pub async fn shutdown(self) -> Result<ProducerReport, ProducerError> {
        drop(self.tx);
        self.task.await.map_err(|e| ProducerError::Task {
            stream: self.stream.clone(),
            reason: e.to_string(),
        })?
    }
}

/// What `DescribeStreamSummary` says about how the stream takes records.
struct StreamShape {
    /// The largest record in bytes.
    max_record: usize,
    /// The stream places records itself (`RecordDistributionStrategy::Auto`).
    keyless: bool,
}

/// The stream's shape: its largest record (`MaxRecordSizeInKiB`, within 1 MiB..=10 MiB; 1 MiB
/// when the stream does not say, as an emulator or a stream that kept the default, or when the
/// call fails, as for a role without `kinesis:DescribeStreamSummary`: a record the stream might
/// refuse is refused here instead) and whether it ignores partition keys (on-demand streams
/// with `RecordDistributionStrategy` `AUTO`; a failed call assumes it does not).
async fn stream_shape(kinesis: &aws_sdk_kinesis::Client, stream: &str) -> StreamShape {
    match kinesis
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
    {
        Ok(out) => {
            let summary = out.stream_description_summary();
            StreamShape {
                max_record: summary
                    .and_then(|d| d.max_record_size_in_kib())
                    .and_then(|kib| usize::try_from(kib).ok())
                    .map_or(MAX_BYTES_PER_RECORD, |kib| {
                        kib.saturating_mul(1_024)
                            .clamp(MAX_BYTES_PER_RECORD, MAX_LARGE_RECORD_BYTES)
                    }),
                keyless: summary.is_some_and(|d| {
                    d.record_distribution_strategy() == Some(&RecordDistributionStrategy::Auto)
                }),
            }
        }
        Err(e) => {
            tracing::warn!(
                error = %AwsError::new("Kinesis", "DescribeStreamSummary", stream, e),
                "the stream's maximum record size is unknown; records over 1 MiB are refused"
            );
            StreamShape {
                max_record: MAX_BYTES_PER_RECORD,
                keyless: false,
            }
        }
    }
}

fn check_record(r: &UserRecord, max_record: usize) -> Result<(), KplError> {
    let chars = r.partition_key.chars().count();
    if chars == 0 || chars > kpl::MAX_PARTITION_KEY_CHARS {
        return Err(KplError::BadPartitionKey {
            chars,
            max: kpl::MAX_PARTITION_KEY_CHARS,
        });
    }
    if let Some(e) = &r.explicit_hash_key {
        kpl::effective_hash_key(&r.partition_key, Some(e))?;
    }
    let len = r.data.len() + r.partition_key.len();
    if len > max_record {
        return Err(KplError::Oversized {
            len,
            max: max_record,
        });
    }
    Ok(())
}

/// One `PutRecords` entry: a plain user record or an aggregate of several.
#[derive(Debug, Clone)]
struct Entry {
    partition_key: String,
    explicit_hash_key: Option<String>,
    data: Vec<u8>,
    /// The user records it carries. A plain entry's one record has its data moved to `data`
    /// (held once); [`Entry::into_users`] gives it back.
    users: Vec<UserRecord>,
    plain: bool,
    attempts: u32,
    not_before: Instant,
    since: Instant,
}

impl Entry {
    /// A plain entry of `r`, holding its data once.
    fn plain(mut r: UserRecord, now: Instant) -> Self {
        Self {
            partition_key: r.partition_key.clone(),
            explicit_hash_key: r.explicit_hash_key.clone(),
            data: std::mem::take(&mut r.data),
            users: vec![r],
            plain: true,
            attempts: 0,
            not_before: now,
            since: now,
        }
    }

    fn bytes(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }

    /// What its user records cost the byte budget.
    fn cost(&self) -> usize {
        if self.plain {
            cost(self.data.len())
        } else {
            self.users.iter().map(|u| cost(u.data.len())).sum()
        }
    }

    /// Its user records, whole.
    fn into_users(mut self) -> Vec<UserRecord> {
        if self.plain
            && let Some(u) = self.users.first_mut()
        {
            u.data = std::mem::take(&mut self.data);
        }
        self.users
    }
}

/// One predicted shard's buffers.
#[derive(Debug)]
struct ShardBuf {
    id: String,
    ready: VecDeque<Entry>,
    open: Aggregator,
    open_users: Vec<UserRecord>,
    open_since: Option<Instant>,
    pacer: Pacer,
    /// Held back by pacing until then (a batch's worth of budget builds up meanwhile).
    paced_until: Option<Instant>,
}

struct Worker {
    kinesis: aws_sdk_kinesis::Client,
    stream: String,
    config: ConfigInner,
    shards: Vec<ShardRange>,
    bufs: Vec<ShardBuf>,
    placements: HashMap<(String, u16), (Vec<String>, usize)>,
    report: ProducerReport,
    buffered: usize,
    budget: Arc<Semaphore>,
    /// The last failure of a call or an entry, kept for [`ProducerReport::last_error`].
    last_failure: Option<String>,
}

/// The config without the salting source (kept apart so it can be borrowed while buffers change).
struct ConfigInner {
    aggregate: bool,
    aggregate_max_bytes: usize,
    linger: Duration,
    max_in_flight: usize,
    max_attempts: u32,
    backoff_base: Duration,
    backoff_cap: Duration,
    limits: ShardLimits,
    queue_capacity: usize,
    salting: Salting,
}

type Outcome = (
    Vec<(usize, Entry)>,
    Result<aws_sdk_kinesis::operation::put_records::PutRecordsOutput, AwsError>,
);

impl Worker {
    fn new(
        kinesis: aws_sdk_kinesis::Client,
        stream: String,
        c: ProducerConfig,
        shards: Vec<ShardRange>,
        budget: Arc<Semaphore>,
    ) -> Self {
        let config = ConfigInner {
            aggregate: c.aggregate,
            aggregate_max_bytes: c.aggregate_max_bytes,
            linger: c.linger,
            max_in_flight: c.max_in_flight.max(1),
            max_attempts: c.max_attempts.max(1),
            backoff_base: c.backoff_base,
            backoff_cap: c.backoff_cap,
            limits: c.limits,
            queue_capacity: c.queue_capacity.max(1),
            salting: c.salting,
        };
        let mut w = Self {
            kinesis,
            stream,
            config,
            shards: Vec::new(),
            bufs: Vec::new(),
            placements: HashMap::new(),
            report: ProducerReport::default(),
            buffered: 0,
            budget,
            last_failure: None,
        };
        w.set_map(shards);
        w
    }

    fn new_aggregator(&self) -> Aggregator {
        Aggregator::with_max_bytes(self.config.aggregate_max_bytes).unwrap_or_default()
    }

    fn set_map(&mut self, shards: Vec<ShardRange>) {
        let now = Instant::now();
        let old = std::mem::take(&mut self.bufs);
        let mut pacers: HashMap<String, Pacer> = old
            .iter()
            .map(|b| (b.id.clone(), b.pacer.clone()))
            .collect();
        self.bufs = shards
            .iter()
            .map(|s| ShardBuf {
                id: s.shard_id.clone(),
                ready: VecDeque::new(),
                open: self.new_aggregator(),
                open_users: Vec::new(),
                open_since: None,
                pacer: pacers
                    .remove(&s.shard_id)
                    .unwrap_or_else(|| Pacer::new(self.config.limits, now.into_std())),
                paced_until: None,
            })
            .collect();
        self.shards = shards;
        self.placements.clear();
        // Re-predict and re-pack what was buffered under the old map, in order.
        self.buffered = 0;
        for mut b in old {
            for e in b.ready.drain(..) {
                self.requeue(e, false);
            }
            for u in b.open_users.drain(..) {
                self.add(u, now);
            }
        }
    }

    fn predict(&self, r: &UserRecord) -> usize {
        let hash = kpl::effective_hash_key(&r.partition_key, r.explicit_hash_key.as_deref())
            .unwrap_or_default();
        shard_for(hash, &self.shards).unwrap_or(0)
    }

    async fn salt(&mut self, mut r: UserRecord) -> UserRecord {
        if r.explicit_hash_key.is_some() {
            return r;
        }
        let salts = match &self.config.salting {
            Salting::Off => return r,
            Salting::Fixed(p) => p.salts(&r.partition_key),
            Salting::Directory(d) => match d.snapshot().await {
                Ok(s) => s.salts(&r.partition_key),
                Err(e) => {
                    tracing::warn!(error = %e, "hot-key directory unreadable; not salting");
                    1
                }
            },
        };
        if salts <= 1 {
            return r;
        }
        let key = (r.partition_key.clone(), salts);
        if !self.placements.contains_key(&key) {
            let subs = match place_salts(&r.partition_key, salts, &self.shards) {
                Ok(p) => p.sub_keys.into_iter().map(|s| s.partition_key).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "no placement for a hot key; not salting");
                    return r;
                }
            };
            self.placements.insert(key.clone(), (subs, 0));
        }
        if let Some((subs, next)) = self.placements.get_mut(&key)
            && let Some(sub) = subs.get(*next % subs.len().max(1))
        {
            *next = next.wrapping_add(1);
            r.partition_key = sub.clone();
            self.report.salted += 1;
        }
        r
    }

    /// Buffer one user record on its predicted shard.
    fn add(&mut self, r: UserRecord, now: Instant) {
        let shard = self.predict(&r);
        self.buffered += 1;
        if !self.config.aggregate {
            let entry = Entry::plain(r, now);
            if let Some(b) = self.bufs.get_mut(shard) {
                b.ready.push_back(entry);
            }
            return;
        }
        let fits = self.bufs.get_mut(shard).map(|b| {
            b.open
                .try_add(&r.partition_key, r.explicit_hash_key.as_deref(), &r.data)
        });
        match fits {
            Some(Ok(true)) => {}
            Some(Ok(false)) => {
                self.seal(shard, now);
                let again = self.bufs.get_mut(shard).map(|b| {
                    b.open
                        .try_add(&r.partition_key, r.explicit_hash_key.as_deref(), &r.data)
                });
                if !matches!(again, Some(Ok(true))) {
                    return self.push_plain(shard, r, now);
                }
            }
            // Too big to aggregate (over the aggregate limit, under 1 MiB): send it alone.
            Some(Err(_)) | None => return self.push_plain(shard, r, now),
        }
        if let Some(b) = self.bufs.get_mut(shard) {
            b.open_users.push(r);
            b.open_since.get_or_insert(now);
        }
    }

    fn push_plain(&mut self, shard: usize, r: UserRecord, now: Instant) {
        self.seal(shard, now);
        if let Some(b) = self.bufs.get_mut(shard) {
            b.ready.push_back(Entry::plain(r, now));
        }
    }

    /// Close shard `i`'s open aggregate into a ready entry.
    fn seal(&mut self, i: usize, now: Instant) {
        let Some(b) = self.bufs.get_mut(i) else {
            return;
        };
        let Some(agg) = b.open.finish() else {
            return;
        };
        let users = std::mem::take(&mut b.open_users);
        let since = b.open_since.take().unwrap_or(now);
        b.ready.push_back(Entry {
            partition_key: agg.partition_key,
            explicit_hash_key: agg.explicit_hash_key,
            data: agg.data,
            users,
            plain: false,
            attempts: 0,
            not_before: now,
            since,
        });
    }

    /// Put a failed entry back at the front of its (re-predicted) shard.
    fn requeue(&mut self, e: Entry, front: bool) {
        let now = Instant::now();
        // An aggregate whose records now belong to several shards is unpacked and re-packed.
        let shards: Vec<usize> = e.users.iter().map(|u| self.predict(u)).collect();
        let one = shards.windows(2).all(|w| w[0] == w[1]);
        if e.users.len() > 1 && !one {
            for u in e.into_users() {
                self.add(u, now);
            }
            return;
        }
        let shard = shards.first().copied().unwrap_or(0);
        self.buffered += e.users.len();
        if let Some(b) = self.bufs.get_mut(shard) {
            if front {
                b.ready.push_front(e);
            } else {
                b.ready.push_back(e);
            }
        }
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let exp = self
            .config
            .backoff_base
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        let cap = exp.min(self.config.backoff_cap);
        cap.mul_f64(rand::rng().random_range(0.0..=1.0))
    }

    /// Seal aggregates older than linger (or all, when draining).
    fn seal_due(&mut self, now: Instant, drain: bool) {
        for i in 0..self.bufs.len() {
            let due = self.bufs[i]
                .open_since
                .is_some_and(|s| drain || now.duration_since(s) >= self.config.linger);
            if due {
                self.seal(i, now);
            }
        }
    }

    /// The next request, if one should go now: entries whose shard budget allows, up to the
    /// request limits; sent when full, when its oldest entry waited `linger`, or when draining.
    fn next_request(&mut self, now: Instant, drain: bool) -> Option<Vec<(usize, Entry)>> {
        let mut eligible = 0usize;
        let mut oldest: Option<Instant> = None;
        // A full request's worth decides it whatever the ages, so the count stops there (it ran
        // over every buffered entry, up to 500 a shard, once per record taken: a quarter of the
        // plain producer's CPU in a profile at 4 shards).
        'count: for b in &self.bufs {
            for e in b.ready.iter().take(MAX_RECORDS_PER_REQUEST) {
                if e.not_before <= now {
                    eligible += 1;
                    if eligible >= MAX_RECORDS_PER_REQUEST {
                        break 'count;
                    }
                    oldest = Some(oldest.map_or(e.since, |o| o.min(e.since)));
                }
            }
        }
        let aged = oldest.is_some_and(|o| now.duration_since(o) >= self.config.linger);
        if eligible == 0 || !(drain || aged || eligible >= MAX_RECORDS_PER_REQUEST) {
            return None;
        }
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        // Round-robin over shards so one hot shard cannot fill every request.
        let mut progress = true;
        while progress && batch.len() < MAX_RECORDS_PER_REQUEST {
            progress = false;
            for i in 0..self.bufs.len() {
                if batch.len() >= MAX_RECORDS_PER_REQUEST {
                    break;
                }
                let b = &mut self.bufs[i];
                let Some(front) = b.ready.front() else {
                    continue;
                };
                let size = front.bytes();
                // A record over what is left of 5 MiB waits for the next request; one over 5 MiB
                // (a stream with a larger MaxRecordSizeInKiB) goes alone, ≤ 10 MiB.
                if front.not_before > now
                    || (bytes + size > MAX_BYTES_PER_REQUEST && !batch.is_empty())
                    || b.paced_until.is_some_and(|t| t > now)
                {
                    continue;
                }
                if !b.pacer.try_take(now.into_std(), size) {
                    let wait = b.pacer.wait(now.into_std(), size).max(PACED_RECHECK);
                    b.paced_until = Some(now + wait);
                    continue;
                }
                b.paced_until = None;
                if let Some(e) = b.ready.pop_front() {
                    bytes += size;
                    self.buffered = self.buffered.saturating_sub(e.users.len());
                    batch.push((i, e));
                    progress = true;
                }
            }
        }
        (!batch.is_empty()).then_some(batch)
    }

    /// When the loop should look again (the earliest of linger, backoff and pacing waits).
    fn next_wake(&self, now: Instant) -> Instant {
        let mut wake = now + self.config.linger;
        for b in &self.bufs {
            if let Some(s) = b.open_since {
                wake = wake.min(s + self.config.linger);
            }
            if let Some(e) = b.ready.front() {
                // A paced shard is looked at again only after a batch's worth of budget has
                // built up, so a hot shard's requests do not shrink to one entry each.
                let paced = b.paced_until.unwrap_or(now);
                wake = wake.min(e.not_before.max(e.since + self.config.linger).max(paced));
            }
        }
        wake.max(now + Duration::from_millis(1))
    }

    fn put(&self, batch: Vec<(usize, Entry)>) -> impl Future<Output = Outcome> + use<> {
        let kinesis = self.kinesis.clone();
        let stream = self.stream.clone();
        async move {
            let entries: Vec<PutRecordsRequestEntry> = batch
                .iter()
                .filter_map(|(_, e)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(&e.partition_key)
                        .set_explicit_hash_key(e.explicit_hash_key.clone())
                        .data(Blob::new(e.data.clone()))
                        .build()
                        .ok()
                })
                .collect();
            let out = kinesis
                .put_records()
                .stream_name(&stream)
                .set_records(Some(entries))
                .send()
                .await
                .map_err(|e| AwsError::new("Kinesis", "PutRecords", &stream, e));
            (batch, out)
        }
    }

    /// Handle one answer; returns whether the shard map must be read again, or a fatal error.
    fn settle(&mut self, outcome: Outcome) -> Result<bool, AwsError> {
        let (batch, out) = outcome;
        self.report.requests += 1;
        let now = Instant::now();
        let out = match out {
            Ok(out) => out,
            Err(e) if e.is_throttling() || e.is_transient() => {
                // No answer per entry: retry them all (they may have been written: at least once).
                let throttled = e.is_throttling();
                self.last_failure = Some(e.to_string());
                for (shard, entry) in batch {
                    if throttled {
                        self.report.throttles += 1;
                        if let Some(b) = self.bufs.get_mut(shard) {
                            b.pacer.throttled(now.into_std());
                            b.paced_until = Some(now + PACED_RECHECK);
                        }
                    }
                    self.retry(entry, now);
                }
                return Ok(false);
            }
            Err(e) => {
                // Keep the entries for the report before stopping.
                self.last_failure = Some(e.to_string());
                for (_, entry) in batch {
                    self.give_up(entry);
                }
                return Err(e);
            }
        };
        let mut refresh = false;
        let results = out.records;
        for (k, (shard, entry)) in batch.into_iter().enumerate() {
            let result = results.get(k);
            match result.and_then(|r| r.error_code()) {
                None if result.is_some() => {
                    self.budget.add_permits(entry.cost());
                    self.report.records += entry.users.len() as u64;
                    if entry.users.len() > 1 {
                        self.report.aggregated_records += 1;
                    }
                    let landed = result.and_then(|r| r.shard_id());
                    let predicted = self.bufs.get(shard).map(|b| b.id.as_str());
                    if landed.is_some() && landed != predicted {
                        refresh = true;
                    }
                }
                code => {
                    self.last_failure = Some(format!(
                        "Kinesis PutRecords on {}: entry refused with {} ({})",
                        self.stream,
                        code.unwrap_or("no result"),
                        result
                            .and_then(|r| r.error_message())
                            .unwrap_or("no message")
                    ));
                    if code == Some("ProvisionedThroughputExceededException") {
                        self.report.throttles += 1;
                        if let Some(b) = self.bufs.get_mut(shard) {
                            b.pacer.throttled(now.into_std());
                            b.paced_until = Some(now + PACED_RECHECK);
                        }
                    }
                    self.retry(entry, now);
                }
            }
        }
        Ok(refresh)
    }

    fn retry(&mut self, mut entry: Entry, now: Instant) {
        entry.attempts += 1;
        if entry.attempts >= self.config.max_attempts {
            return self.give_up(entry);
        }
        self.report.retried_entries += 1;
        entry.not_before = now + self.backoff(entry.attempts);
        self.requeue(entry, true);
    }

    fn give_up(&mut self, e: Entry) {
        self.report.last_error.clone_from(&self.last_failure);
        self.budget.add_permits(e.cost());
        self.report.failed += e.users.len() as u64;
        self.report.failed_records.extend(e.into_users());
    }

    async fn refresh(&mut self) {
        match open_shard_ranges(&self.kinesis, &self.stream).await {
            Ok(shards) => {
                self.report.map_refreshes += 1;
                self.set_map(shards);
            }
            Err(e) => tracing::warn!(error = %e, "shard map refresh failed; keeping the old map"),
        }
    }

    /// Move everything still buffered or queued into the failed records (after a fatal error).
    fn abandon(&mut self, rx: &mut mpsc::Receiver<UserRecord>) {
        rx.close();
        let mut left: Vec<UserRecord> = Vec::new();
        for b in &mut self.bufs {
            left.extend(b.ready.drain(..).flat_map(Entry::into_users));
            left.append(&mut b.open_users);
            b.open = Aggregator::new();
        }
        while let Ok(r) = rx.try_recv() {
            left.push(r);
        }
        self.buffered = 0;
        self.budget
            .add_permits(left.iter().map(|u| cost(u.data.len())).sum());
        if !left.is_empty() {
            self.report.last_error.clone_from(&self.last_failure);
        }
        self.report.failed += left.len() as u64;
        self.report.failed_records.extend(left);
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<UserRecord>,
    ) -> Result<ProducerReport, ProducerError> {
        let mut in_flight = FuturesUnordered::new();
        let mut open = true;
        // Records are taken from the queue as many at a time as there is room for (up to a
        // request's worth): taken one at a time, each freed slot woke a waiting sender, a thread
        // switch per record, and each record paid a pass of the request and wake-up checks.
        let mut incoming: Vec<UserRecord> = Vec::new();
        loop {
            let now = Instant::now();
            self.seal_due(now, !open);
            while in_flight.len() < self.config.max_in_flight {
                match self.next_request(now, !open) {
                    Some(batch) => in_flight.push(self.put(batch)),
                    None => break,
                }
            }
            let idle = self.buffered == 0 && self.bufs.iter().all(|b| b.open_users.is_empty());
            if !open && idle && in_flight.is_empty() {
                return Ok(self.report);
            }
            let room = self.buffered < self.config.queue_capacity;
            let wake = self.next_wake(now);
            tokio::select! {
                taken = rx.recv_many(
                    &mut incoming,
                    // At least 1: with a limit of 0 it would answer 0, as for a closed queue.
                    (self.config.queue_capacity.saturating_sub(self.buffered))
                        .clamp(1, MAX_RECORDS_PER_REQUEST),
                ), if open && room => {
                    if taken == 0 {
                        open = false;
                    }
                    for r in incoming.drain(..) {
                        let r = self.salt(r).await;
                        self.add(r, Instant::now());
                    }
                },
                Some(outcome) = in_flight.next(), if !in_flight.is_empty() => {
                    match self.settle(outcome) {
                        Ok(true) => self.refresh().await,
                        Ok(false) => {}
                        Err(source) => {
                            // Wait for the other calls, then report everything not written.
                            while let Some(o) = in_flight.next().await {
                                let _ = self.settle(o);
                            }
                            self.abandon(&mut rx);
                            return Err(ProducerError::Put {
                                source,
                                report: Box::new(self.report),
                            });
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
