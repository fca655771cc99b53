//! A stream-batch aggregator for your own change stream: records → per-key deltas → one
//! conditional absolute flush per counter key and writer.
//!
//! A hot key's counter cannot take one write per event (a partition takes 1,000 WCU/s). The
//! aggregator reads a batch of change records (DynamoDB Streams, or Kinesis Data Streams for
//! DynamoDB, as Lambda delivers them), asks a [`ChangeMapper`] which counter each record moves
//! and by how much, sums the batch per key and flushes absolute totals through
//! [`CounterStore::flush`]: one conditional Put per key and writer (the stream shard), so a
//! retried or duplicated batch never counts twice (the writer's last sequence number is in the
//! item). At 2,400 events/s on one key and a 1 s batching window that is about one write per
//! second per shard instead of 2,400.
//!
//! **Poison records**: the aggregator stops at the first record it cannot read, flushes the
//! records before it, and reports that record as the batch item failure, so Lambda retries from
//! it and no later record is counted ahead of an earlier one (which would hide it from the
//! sequence check). A failed flush fails the batch from its first record.
//!
//! ```
//! use heatsink::counter::aggregate::{ChangeMapper, Unusable};
//! use heatsink::counter::CounterKey;
//! use serde_json::Value;
//!
//! /// Orders per product: +1 for each new order item.
//! struct OrdersPerProduct;
//! impl ChangeMapper for OrdersPerProduct {
//!     fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
//!         if change["eventName"] != "INSERT" {
//!             return Ok(None);
//!         }
//!         let product = change
//!             .pointer("/dynamodb/NewImage/product/S")
//!             .and_then(Value::as_str)
//!             .ok_or_else(|| Unusable::new("`product` missing"))?;
//!         let key = CounterKey::new("orders", product).map_err(|e| Unusable::new(e.to_string()))?;
//!         Ok(Some((key, 1)))
//!     }
//! }
//! let change = serde_json::json!({"eventName": "INSERT",
//!     "dynamodb": {"NewImage": {"product": {"S": "p9"}}}});
//! let (key, delta) = OrdersPerProduct.map(&change)?.expect("counts");
//! assert_eq!((key.to_string().as_str(), delta), ("orders#p9", 1));
//! # Ok::<(), Unusable>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use heatsink_core::counter::{
    Change, ChangeId, CounterKey, Deltas, Seq, WriterId, canonical_json, retire_due,
};
use serde::Serialize;
use serde_json::Value;

use super::lineage::ShardListing;
use super::{CounterStore, FlushReport};
use crate::ddb::stream_listing::StreamListing;
use crate::ddb::stream_reader::{self, Position};
use crate::error::AwsError;
use crate::lambda::{dynamodb_failure, kinesis_failure};
use crate::metrics::MetricDef;

/// Change records applied to the in-memory aggregate but not flushed when the invocation
/// ended (the flush failed; Lambda retries them). 0 after a good flush.
pub const LAG_EVENTS: MetricDef = MetricDef::count("CounterLagEvents");
/// Seconds from the oldest change of a flush (its `ApproximateCreationDateTime`) to the end
/// of that flush into the counters table.
pub const FLUSH_DELAY: MetricDef = MetricDef::seconds("CounterFlushDelaySeconds");
/// Change identities the dedupe window's size guard shed in one batch (the `recent` attribute
/// held within [`heatsink_core::counter::DedupeWindow::MAX_BYTES`]); 0 almost always. Above 0, a
/// duplicate of a shed change is counted and reported as `late` until the bucket repair
/// corrects it.
pub const DEDUPE_SHED: MetricDef = MetricDef::count("CounterDedupeShed");
/// Changes one batch counted although they were older than the dedupe window (or than an
/// identity the size guard shed) of their writer sub-key ([`FlushReport::late`]): each may be a
/// duplicate whose original the window forgot, so it may count twice until the bucket repair
/// corrects it. 0 while the source reorders within the window (AWS shows sub-second; the
/// deployed window is 10 s); above 0, that assumption broke (replication lag, shed identities):
/// alarm on it. Emitted for every batch, 0 included.
pub const LATE_CHANGES: MetricDef = MetricDef::count("CounterLateChanges");
/// Duplicate changes one batch dropped because their identity was in the dedupe window
/// ([`FlushReport::duplicates`]): the copies Kinesis Data Streams for DynamoDB may deliver,
/// counted once. Not a fault (a graph, no alarm); a sudden rise says the source is redelivering
/// more. Emitted for every batch, 0 included.
pub const DUPLICATES_DROPPED: MetricDef = MetricDef::count("CounterDuplicatesDropped");
/// Records one batch skipped because they are not a change of the aggregator's table
/// ([`AggregateReport::foreign`]: another `tableName` or `eventSource` on a shared stream):
/// read, never counted. Expected where a stream is shared; above 0 where it is not, something
/// else writes to the stream. Emitted for every batch, 0 included.
pub const FOREIGN_RECORDS: MetricDef = MetricDef::count("CounterForeignRecords");

/// Why a change record cannot be counted: the mapper's reason, reported with the record's id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unusable(String);

impl Unusable {
    /// A record refused for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Which counter one change record moves, and by how much: the part of aggregation that
/// knows your data. `Ok(None)`: the record moves no counter (read, nothing added).
/// `Err`: the record is unusable, and the batch fails from it (see the module docs).
///
/// `change` is the record as Lambda delivers DynamoDB changes: `eventName` (`INSERT`,
/// `MODIFY`, `REMOVE`) and `dynamodb` with `Keys`, `NewImage`, `OldImage` in DynamoDB JSON.
pub trait ChangeMapper: Send + Sync {
    /// The counter key and delta of one change record.
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable>;

    /// The event's own time (Unix ms), stamped on the item before it became durable (the
    /// photo app's `liked_at`): the time bucket the writer sub-key counts the change in, and
    /// the one the rebuilder recounts it from. `None` (the default): counted in `total` only,
    /// invisible to bucket repair.
    fn event_ms(&self, change: &Value) -> Option<u64> {
        let _ = change;
        None
    }
}

impl<T: ChangeMapper + ?Sized> ChangeMapper for Box<T> {
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
        (**self).map(change)
    }

    fn event_ms(&self, change: &Value) -> Option<u64> {
        (**self).event_ms(change)
    }
}

/// A number attribute `attr` of the change's image (`NewImage`, else `OldImage`) as Unix ms:
/// the building block of [`ChangeMapper::event_ms`].
pub fn image_time_ms(change: &Value, attr: &str) -> Option<u64> {
    let record = change.get("dynamodb")?;
    let image = record.get("NewImage").or_else(|| record.get("OldImage"))?;
    image.get(attr)?.get("N")?.as_str()?.parse().ok()
}

/// A ready-made [`ChangeMapper`] for the common case: one counter per value of a string
/// attribute, +1 when an item is inserted, −1 when it is removed, 0 for a modification (the
/// record still advances the writer's sequence number). Items are read from `NewImage` or
/// `OldImage`, so the stream must carry NEW_AND_OLD_IMAGES (or at least the images used).
///
/// ```
/// use heatsink::counter::aggregate::{ChangeMapper, CountBy};
/// let per_product = CountBy::new("orders", "product");
/// let change = serde_json::json!({"eventName": "REMOVE",
///     "dynamodb": {"OldImage": {"product": {"S": "p9"}}}});
/// let (key, delta) = per_product.map(&change).unwrap().unwrap();
/// assert_eq!((key.to_string().as_str(), delta), ("orders#p9", -1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountBy {
    counter: String,
    attribute: String,
    time: Option<String>,
}

impl CountBy {
    /// Counts items per value of `attribute` into counters named `counter` (`counter#<value>`).
    pub fn new(counter: impl Into<String>, attribute: impl Into<String>) -> Self {
        Self {
            counter: counter.into(),
            attribute: attribute.into(),
            time: None,
        }
    }

    /// Buckets each change by the number attribute `attr` of its image (Unix ms), so the
    /// rebuilder can repair a counter that never goes quiet.
    pub fn with_time(mut self, attr: impl Into<String>) -> Self {
        self.time = Some(attr.into());
        self
    }
}

impl ChangeMapper for CountBy {
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
        let (image, delta) = image_and_delta(change)?;
        let value = image
            .get(&self.attribute)
            .and_then(|v| v.get("S"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Unusable::new(format!("`{}` missing or not a string", self.attribute))
            })?;
        let key =
            CounterKey::new(&self.counter, value).map_err(|e| Unusable::new(e.to_string()))?;
        Ok(Some((key, delta)))
    }

    fn event_ms(&self, change: &Value) -> Option<u64> {
        image_time_ms(change, self.time.as_deref()?)
    }
}

/// The item image a change record counts and its delta: `NewImage` and +1 for an `INSERT`,
/// `OldImage` and −1 for a `REMOVE`, `NewImage` and 0 for a `MODIFY` (the record still advances
/// the writer's sequence number). The building block of a [`ChangeMapper`] that counts items.
pub fn image_and_delta(change: &Value) -> Result<(&Value, i64), Unusable> {
    let name = change
        .get("eventName")
        .and_then(Value::as_str)
        .ok_or_else(|| Unusable::new("no eventName"))?;
    let record = change
        .get("dynamodb")
        .ok_or_else(|| Unusable::new("no dynamodb change"))?;
    let (image, delta) = match name {
        "INSERT" => (record.get("NewImage"), 1),
        "REMOVE" => (record.get("OldImage"), -1),
        "MODIFY" => (record.get("NewImage"), 0),
        other => return Err(Unusable::new(format!("unknown eventName {other}"))),
    };
    let image =
        image.ok_or_else(|| Unusable::new("no image; the stream must carry NEW_AND_OLD_IMAGES"))?;
    Ok((image, delta))
}

/// Errors of one aggregation; reported in [`AggregateReport::error`] and answered with a batch
/// item failure, never raised out of a handler.
#[derive(Debug, thiserror::Error)]
pub enum AggregateError {
    /// A record cannot be read or mapped; the batch fails from it.
    #[error("record {id}: {reason}")]
    BadRecord {
        /// The record's sequence number or event id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// DescribeStream failed while resolving which shard a batch came from.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

/// What one aggregator invocation did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AggregateReport {
    /// Records read before the first failure.
    pub records: u64,
    /// Counter keys touched.
    pub keys: u64,
    /// What the flush did.
    pub flush: FlushReport,
    /// The record the batch failed at, if any (Lambda retries from it).
    pub failed_at: Option<String>,
    /// Why the batch failed, if it did.
    pub error: Option<String>,
    /// Change records applied to the in-memory aggregate that did not reach the counters table
    /// (the flush failed; Lambda retries them): the [`LAG_EVENTS`] metric.
    pub unflushed: u64,
    /// Milliseconds from the oldest counted change's `ApproximateCreationDateTime` to the end of
    /// its flush: the [`FLUSH_DELAY`] metric. `None` when nothing new was counted.
    pub flush_delay_ms: Option<u64>,
    /// Kinesis records skipped because they are not a change of this aggregator's table
    /// (`eventSource` not `aws:dynamodb`, or another `tableName`).
    pub foreign: u64,
    /// The flushed watermark this batch recorded (Unix ms of change creation), if any.
    pub watermark_ms: Option<u64>,
    /// The largest delay from a change's creation to its arrival in the stream this batch saw
    /// (Kinesis; recorded with the watermark, it gates the repair), ms.
    pub replication_lag_ms: Option<u64>,
}

/// A change record's `dynamodb.ApproximateCreationDateTime` in ms since the epoch. DynamoDB
/// Streams events give seconds, Kinesis Data Streams for DynamoDB ms or µs (per the table's
/// `ApproximateCreationDateTimePrecision`); the magnitude tells which for any date in 2001–2286.
pub fn approximate_creation_ms(record: &Value) -> Option<u64> {
    let t = record
        .pointer("/dynamodb/ApproximateCreationDateTime")?
        .as_f64()?;
    let ms = match t {
        t if !t.is_finite() || t <= 0.0 => return None,
        t if t < 1e11 => t * 1e3,
        t if t < 1e14 => t,
        t => t / 1e3,
    };
    Some(ms as u64)
}

/// The identity of one change of a Kinesis Data Streams for DynamoDB record, stable across the
/// duplicates that destination may deliver, and its creation time in ms.
///
/// AWS documents that with a Kinesis streaming destination "the same item notifications might
/// also appear more than once in the stream" and out of order, and that the
/// `ApproximateCreationDateTime` attribute identifies the order of the item's modifications and
/// the duplicates (DynamoDB Developer Guide, "Using Kinesis Data Streams to capture changes to
/// DynamoDB", <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/kds.html>). It
/// documents no such property for `eventID`, and each copy is its own Kinesis record with its
/// own sequence number. So a change is identified by what the duplicates share: `tableName`,
/// the item's `Keys`, `ApproximateCreationDateTime`, `eventName` and the images (which also
/// separate two writes of one item in the same time unit), each in its canonical text
/// ([`heatsink_core::counter::canonical_json`]): the order of the attributes in the record
/// never changes the identity, in any build.
pub fn change_id(change: &Value) -> Result<(ChangeId, u64), Unusable> {
    let at = approximate_creation_ms(change)
        .ok_or_else(|| Unusable::new("no ApproximateCreationDateTime: cannot deduplicate"))?;
    let part = |pointer: &str| {
        change
            .pointer(pointer)
            .map(canonical_json)
            .unwrap_or_default()
    };
    let keys = canonical_json(
        change
            .pointer("/dynamodb/Keys")
            .ok_or_else(|| Unusable::new("no dynamodb.Keys: cannot deduplicate"))?,
    );
    let id = ChangeId::of(&[
        part("/tableName").as_bytes(),
        keys.as_bytes(),
        part("/dynamodb/ApproximateCreationDateTime").as_bytes(),
        part("/eventName").as_bytes(),
        part("/dynamodb/NewImage").as_bytes(),
        part("/dynamodb/OldImage").as_bytes(),
    ]);
    Ok((id, at))
}

/// A stream shard, the sequence numbers it holds (`None` end: still open) and its parent.
type ShardSpan = (String, Seq, Option<Seq>, Option<String>);

/// A stream-batch aggregator: change records → per-key deltas (by the user's [`ChangeMapper`])
/// → one conditional absolute flush per counter key and writer.
#[derive(Debug)]
pub struct StreamAggregator<M> {
    counters: CounterStore,
    mapper: M,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    shard_cache: Mutex<HashMap<String, Vec<ShardSpan>>>,
    table: Option<String>,
    dedupe_window: Duration,
    progress: Option<String>,
    retired: Mutex<HashSet<String>>,
    lineage: Option<std::sync::Arc<dyn ShardListing>>,
}

/// What the aggregator knows of the batch's source beyond its records.
struct BatchSource<'a> {
    /// Kinesis: deduplicate by change identity (the source may deliver a change twice).
    dedupe: bool,
    /// The DynamoDB Streams parent shard of the batch's shard, when known.
    parent: Option<&'a str>,
    /// The Kinesis shard's parents in the lineage (a split's one, a merge's two): a counter's
    /// first flush on this shard starts from their dedupe windows.
    parents: Vec<WriterId>,
    /// The largest `arrival − creation` of the batch's records plus 1, ms (0: none seen):
    /// filled while the records are walked.
    lag: &'a AtomicU64,
}

/// How long a Kinesis writer sub-key remembers the changes it counted
/// ([`StreamAggregator::with_dedupe_window`]).
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(10);

impl<M: ChangeMapper> StreamAggregator<M> {
    /// An aggregator mapping records with `mapper` and flushing into `counters`; `streams`
    /// resolves DynamoDB Streams shard ids (events from DynamoDB Streams do not name their shard).
    pub fn new(
        counters: CounterStore,
        mapper: M,
        streams: Option<aws_sdk_dynamodbstreams::Client>,
    ) -> Self {
        Self {
            counters,
            mapper,
            // No call waits forever: a client without a bound of its own gets the policy's.
            streams: streams.map(|c| {
                crate::timeouts::bounded!(
                    aws_sdk_dynamodbstreams,
                    c,
                    crate::timeouts::Timeouts::CALL
                )
            }),
            shard_cache: Mutex::new(HashMap::new()),
            table: None,
            dedupe_window: DEDUPE_WINDOW,
            progress: None,
            retired: Mutex::new(HashSet::new()),
            lineage: None,
        }
    }

    /// Retires parent writers from the stream's lineage: after recording a watermark, a parent
    /// shard every child of which has a watermark is marked retired
    /// ([`heatsink_core::counter::retire_due`]), for Kinesis (splits, merges, UpdateShardCount,
    /// `heatsink reshard apply`) and DynamoDB Streams alike, so proven progress does not freeze
    /// on a closed parent's last watermark. Cost: one listing per [`LineageCache`]'s pace and
    /// one Query of the watermarks per batch while a listed parent is not retired yet.
    ///
    /// [`LineageCache`]: super::lineage
    pub fn with_lineage(mut self, lineage: std::sync::Arc<dyn ShardListing>) -> Self {
        self.lineage = Some(lineage);
        self
    }

    /// Records each writer's flushed watermark for counter `name` after every batch it flushed
    /// completely (and retires a DynamoDB Streams shard once its child delivers): the progress
    /// the rebuilder's repair is gated on ([`heatsink_core::counter::progress`]). Without
    /// it, the names of the batch's counted keys are used.
    pub fn with_progress(mut self, name: impl Into<String>) -> Self {
        self.progress = Some(name.into());
        self
    }

    /// Counts only changes of `table`: a Kinesis record whose `tableName` differs (another
    /// table streaming into the same Kinesis stream) is skipped and reported in
    /// [`AggregateReport::foreign`], never counted.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// How far back (in change creation time) a Kinesis writer sub-key recognises a duplicate
    /// change; [`DEDUPE_WINDOW`] by default. See [`heatsink_core::counter::DedupeWindow`].
    pub fn with_dedupe_window(mut self, window: Duration) -> Self {
        self.dedupe_window = window;
        self
    }

    /// True when a Kinesis-delivered change is one of this aggregator's table's changes.
    fn ours(&self, change: &Value) -> bool {
        let source = change.get("eventSource").and_then(Value::as_str);
        let table = change.get("tableName").and_then(Value::as_str);
        let ok = source == Some("aws:dynamodb")
            && self.table.as_deref().is_none_or(|t| table == Some(t));
        if !ok {
            tracing::error!(event_source = ?source, table = ?table, "not a change of this table; skipped");
        }
        ok
    }

    /// The mapper this aggregator counts with.
    pub fn mapper(&self) -> &M {
        &self.mapper
    }

    /// Aggregates `records` (id, seq, change JSON) of one shard and flushes them as `writer`.
    /// `records` is walked once, in order: a caller that parses each change as it is asked for
    /// holds one change's JSON at a time.
    async fn aggregate(
        &self,
        writer: &WriterId,
        records: impl IntoIterator<Item = (String, String, Result<Value, String>)>,
        source: BatchSource<'_>,
    ) -> AggregateReport {
        let BatchSource { dedupe, .. } = source;
        let mut report = AggregateReport::default();
        let mut deltas = Deltas::new();
        let mut changes: BTreeMap<CounterKey, Vec<Change>> = BTreeMap::new();
        let mut keys = BTreeSet::new();
        let mut oldest_ms: Option<u64> = None;
        // Newest creation time read, over every record (foreign and uncounted ones included).
        let mut newest_ms: Option<u64> = None;
        for (id, seq, change) in records {
            let bad = |reason: String| AggregateError::BadRecord {
                id: id.clone(),
                reason,
            };
            let parsed = change
                .map_err(bad)
                .and_then(|c| {
                    if dedupe && !self.ours(&c) {
                        return Ok((None, None, None, true));
                    }
                    let mapped = self.mapper.map(&c).map_err(|e| bad(e.to_string()))?;
                    let id = if dedupe && mapped.is_some() {
                        Some(change_id(&c).map_err(|e| bad(e.to_string()))?)
                    } else {
                        None
                    };
                    let event = self.mapper.event_ms(&c);
                    Ok((
                        mapped.map(|(k, d)| (k, d, event)),
                        approximate_creation_ms(&c),
                        id,
                        false,
                    ))
                })
                .and_then(|(mapped, created, id, foreign)| {
                    let seq = Seq::parse(&seq).map_err(|e| bad(e.to_string()))?;
                    Ok((mapped, seq, created, id, foreign))
                });
            if let Ok((_, _, Some(t), _, _)) = &parsed {
                newest_ms = Some(newest_ms.map_or(*t, |n| n.max(*t)));
            }
            match parsed {
                // The record moves no counter: read, nothing to add.
                Ok((None, _, _, _, foreign)) => {
                    report.records += 1;
                    report.foreign += u64::from(foreign);
                }
                Ok((Some((key, delta, event_ms)), seq, created, Some((id, at_ms)), _)) => {
                    keys.insert(key.clone());
                    changes.entry(key).or_default().push(Change {
                        seq,
                        delta,
                        id,
                        at_ms,
                        event_ms,
                    });
                    report.records += 1;
                    if let Some(t) = created {
                        oldest_ms = Some(oldest_ms.map_or(t, |o| o.min(t)));
                    }
                }
                Ok((Some((key, delta, event_ms)), seq, created, None, _)) => {
                    keys.insert(key.clone());
                    if let Err(e) = deltas.add_record_at(key, seq, delta, event_ms) {
                        tracing::error!(record = %id, error = %e, "unusable record");
                        report.failed_at = Some(id);
                        break;
                    }
                    report.records += 1;
                    if let Some(t) = created {
                        oldest_ms = Some(oldest_ms.map_or(t, |o| o.min(t)));
                    }
                }
                Err(e) => {
                    tracing::error!(record = %id, error = %e, "unusable record; failing the batch from it");
                    report.error = Some(e.to_string());
                    report.failed_at = Some(id);
                    break;
                }
            }
        }
        report.keys = keys.len() as u64;
        if deltas.is_empty() && changes.is_empty() {
            if report.failed_at.is_none() {
                self.progress_done(writer, &keys, newest_ms, &source, &mut report)
                    .await;
            }
            return report;
        }
        let span_ms = u64::try_from(self.dedupe_window.as_millis()).unwrap_or(u64::MAX);
        let flushed = if dedupe {
            self.counters
                .flush_changes_after(writer, &source.parents, &changes, span_ms)
                .await
        } else {
            self.counters.flush(writer, &deltas).await
        };
        match flushed {
            Ok(flush) => {
                if flush.counted > 0 {
                    report.flush_delay_ms =
                        oldest_ms.map(|t| crate::clock::now_ms().saturating_sub(t));
                }
                report.flush = flush;
                if report.failed_at.is_none() {
                    self.progress_done(writer, &keys, newest_ms, &source, &mut report)
                        .await;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "flush failed; the whole batch will be retried");
                report.error = Some(e.to_string());
                report.unflushed = report.records;
                report.records = 0;
                report.flush = FlushReport::default();
                report.failed_at = Some(String::new());
            }
        }
        report
    }

    /// After a batch was processed completely: records the writer's flushed watermark and
    /// retires its parent shard. The watermark is the newest creation time read minus what
    /// the source may still deliver older: the dedupe window for Kinesis (its documented
    /// reordering; the same assumption as the dedupe), 1 ms below the second for DynamoDB
    /// Streams (in order per shard; creation times in whole seconds). A failure here is
    /// reported and the batch still succeeds: progress only gates repairs, it counts nothing.
    async fn progress_done(
        &self,
        writer: &WriterId,
        keys: &BTreeSet<CounterKey>,
        newest_ms: Option<u64>,
        source: &BatchSource<'_>,
        report: &mut AggregateReport,
    ) {
        let (dedupe, parent) = (source.dedupe, source.parent);
        let lag_ms = source.lag.load(Ordering::Relaxed).checked_sub(1);
        let names: BTreeSet<String> = match &self.progress {
            Some(name) => BTreeSet::from([name.clone()]),
            None => keys.iter().map(|k| k.name().to_owned()).collect(),
        };
        let Some(newest) = newest_ms else { return };
        let behind = if dedupe {
            u64::try_from(self.dedupe_window.as_millis()).unwrap_or(u64::MAX)
        } else {
            1
        };
        let flushed = newest.saturating_sub(behind);
        for name in &names {
            if let Err(e) = self
                .counters
                .record_progress(name, writer, flushed, lag_ms)
                .await
            {
                tracing::warn!(error = %e, "flushed watermark not recorded; repairs wait for the next batch");
                report.error.get_or_insert_with(|| e.to_string());
                return;
            }
            report.watermark_ms = Some(flushed);
            report.replication_lag_ms = lag_ms;
        }
        if let Some(lineage) = &self.lineage {
            self.retire_from_lineage(lineage.as_ref(), &names).await;
            return;
        }
        let Some(parent) = parent else { return };
        if self.retired.lock().is_ok_and(|r| r.contains(parent)) {
            return;
        }
        let Ok(parent_id) = WriterId::new(parent) else {
            return;
        };
        for name in &names {
            if let Err(e) = self.counters.retire(name, &parent_id).await {
                tracing::warn!(error = %e, "parent shard not retired; retried with the next batch");
                return;
            }
        }
        if let Ok(mut r) = self.retired.lock() {
            r.insert(parent.to_owned());
        }
    }

    /// The parents of `writer`'s shard in the lineage ([`StreamAggregator::with_lineage`];
    /// none without one). A shard the cached listing does not know asks for a fresh one (paced
    /// by the cache). A listing that fails leaves the batch without its parents' windows: a
    /// duplicate straddling the reshard may then count twice (reported by the bucket repair's
    /// correction), never a like lost.
    async fn parents_of(&self, writer: &WriterId) -> Vec<WriterId> {
        let Some(lineage) = &self.lineage else {
            return vec![];
        };
        let find = |l: &super::lineage::Listing| {
            l.shards
                .iter()
                .find(|s| s.shard_id == writer.as_str())
                .map(|s| s.parents().filter_map(|p| WriterId::new(p).ok()).collect())
        };
        // The cached listing first; a fresh one only when it does not know the shard.
        for not_before in [0, crate::clock::now_ms()] {
            match lineage.list(not_before).await {
                Ok(l) => {
                    if let Some(parents) = find(&l) {
                        return parents;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "stream not listed; this batch dedupes without its parents' windows");
                    return vec![];
                }
            }
        }
        vec![]
    }

    /// Retires every parent of the lineage whose children all have a watermark (see
    /// [`StreamAggregator::with_lineage`]). Failures are logged: the next batch tries again.
    async fn retire_from_lineage(&self, lineage: &dyn ShardListing, names: &BTreeSet<String>) {
        let listing = match lineage.list(0).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "stream not listed; parents retired with a later batch");
                return;
            }
        };
        let pending = {
            let Ok(done) = self.retired.lock() else {
                return;
            };
            listing
                .shards
                .iter()
                .flat_map(|s| s.parents())
                .any(|p| !done.contains(p))
        };
        if !pending {
            return;
        }
        for name in names {
            let marks = match self.counters.progress(name).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "watermarks not read; parents retired with a later batch");
                    return;
                }
            };
            if let Ok(mut done) = self.retired.lock() {
                done.extend(
                    marks
                        .iter()
                        .filter(|m| m.retired)
                        .map(|m| m.writer.as_str().to_owned()),
                );
            }
            for parent in retire_due(&listing.shards, &marks) {
                if let Err(e) = self.counters.retire(name, &parent).await {
                    tracing::warn!(error = %e, "parent shard not retired; retried with the next batch");
                    return;
                }
                tracing::info!(
                    shard = parent.as_str(),
                    "parent shard retired: every child has a watermark"
                );
                if let Ok(mut done) = self.retired.lock() {
                    done.insert(parent.as_str().to_owned());
                }
            }
        }
    }

    /// Handles a Kinesis event carrying DynamoDB change records (Kinesis Data Streams for DynamoDB).
    pub async fn handle_kinesis(
        &self,
        event: KinesisEvent,
    ) -> (KinesisEventResponse, AggregateReport) {
        let mut resp = KinesisEventResponse::default();
        let Some(first) = event.records.first() else {
            return (resp, AggregateReport::default());
        };
        let first_seq = first.kinesis.sequence_number.clone();
        // Kinesis event ids are `shardId-…:<sequence number>`: the shard is the writer.
        let shard = first
            .event_id
            .as_deref()
            .and_then(|id| id.split(':').next())
            .unwrap_or("");
        let writer = match WriterId::new(shard) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "Kinesis event without a shard id; retrying the batch");
                resp.batch_item_failures.push(kinesis_failure(first_seq));
                return (resp, AggregateReport::default());
            }
        };
        let lag = AtomicU64::new(0);
        let records = event.records.iter().map(|r| {
            let seq = r.kinesis.sequence_number.clone();
            // Bounded (crate::lambda::kinesis_change). A KPL aggregate is not a change
            // record: `null` has no eventSource, so it is skipped as foreign and counted.
            let change = crate::lambda::kinesis_change(&r.kinesis.data.0).map(|c| {
                c.unwrap_or_else(|| {
                    tracing::warn!(record = %seq, "a KPL aggregate, not a change record");
                    Value::Null
                })
            });
            // Replication lag: how long after its creation the change reached the stream.
            let arrival =
                u64::try_from(r.kinesis.approximate_arrival_timestamp.0.timestamp_millis()).ok();
            if let (Ok(c), Some(arrived)) = (&change, arrival)
                && let Some(created) = approximate_creation_ms(c)
            {
                lag.fetch_max(
                    arrived.saturating_sub(created).saturating_add(1),
                    Ordering::Relaxed,
                );
            }
            (seq.clone(), seq, change)
        });
        let source = BatchSource {
            dedupe: true,
            parent: None,
            parents: self.parents_of(&writer).await,
            lag: &lag,
        };
        let report = self.aggregate(&writer, records, source).await;
        if let Some(at) = &report.failed_at {
            resp.batch_item_failures
                .push(kinesis_failure(if at.is_empty() {
                    first_seq
                } else {
                    at.clone()
                }));
        }
        (resp, report)
    }

    /// Handles a DynamoDB Streams event.
    pub async fn handle_dynamodb(
        &self,
        event: DynamoDbEvent,
    ) -> (DynamoDbEventResponse, AggregateReport) {
        let mut resp = DynamoDbEventResponse::default();
        let Some(first) = event.records.first() else {
            return (resp, AggregateReport::default());
        };
        let first_seq = first.change.sequence_number.clone().unwrap_or_default();
        let arn = first.event_source_arn.clone().unwrap_or_default();
        let (writer, parent) = match self
            .resolve_shard(
                &arn,
                &first_seq,
                Some(first.event_id.as_str()).filter(|s| !s.is_empty()),
            )
            .await
        {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot tell which shard this batch is from; retrying it");
                resp.batch_item_failures.push(dynamodb_failure(first_seq));
                let report = AggregateReport {
                    error: Some(e.to_string()),
                    ..AggregateReport::default()
                };
                return (resp, report);
            }
        };
        let records = event.records.iter().map(|r| {
            let seq = r.change.sequence_number.clone().unwrap_or_default();
            let change = serde_json::to_value(r)
                .map_err(|e| format!("record does not serialise: {e}"))
                .map(|mut v| {
                    // aws_lambda_events names the change `dynamodb` in JSON, as Lambda does.
                    if let Some(obj) = v.as_object_mut()
                        && !obj.contains_key("dynamodb")
                        && let Some(c) = obj.remove("change")
                    {
                        obj.insert("dynamodb".into(), c);
                    }
                    v
                });
            (seq.clone(), seq, change)
        });
        let lag = AtomicU64::new(0);
        let source = BatchSource {
            dedupe: false,
            parent: parent.as_deref(),
            parents: vec![],
            lag: &lag,
        };
        let report = self.aggregate(&writer, records, source).await;
        if let Some(at) = &report.failed_at {
            resp.batch_item_failures
                .push(dynamodb_failure(if at.is_empty() {
                    first_seq
                } else {
                    at.clone()
                }));
        }
        (resp, report)
    }

    /// DynamoDB Streams events do not name their shard. A closed shard's sequence range names
    /// it exactly; open shards have no end, and several open shards (one per table partition)
    /// overlap, so a sequence number inside more than one candidate range is looked up in the
    /// lineage itself: for each candidate, `GetShardIterator(AT_SEQUENCE_NUMBER)` and a
    /// one-record `GetRecords`, accepting the shard whose record at that position has this
    /// sequence number and this `eventID`. Exactly one must match; anything else is an error,
    /// never a guess (a wrong writer would skip records). Cost: 0 requests for a batch of a
    /// closed shard or of the only open candidate, otherwise 2 per open candidate (DescribeStream
    /// cached per stream, refreshed once on a miss).
    async fn resolve_shard(
        &self,
        arn: &str,
        seq: &str,
        event_id: Option<&str>,
    ) -> Result<(WriterId, Option<String>), AggregateError> {
        let bad = |reason: String| AggregateError::BadRecord {
            id: seq.to_owned(),
            reason,
        };
        let wanted = Seq::parse(seq).map_err(|e| bad(e.to_string()))?;
        for refresh in [false, true] {
            if refresh || !self.shard_cache.lock().is_ok_and(|c| c.contains_key(arn)) {
                let shards = self.describe_shards(arn).await?;
                if let Ok(mut c) = self.shard_cache.lock() {
                    c.insert(arn.to_owned(), shards);
                }
            }
            let spans: Vec<(String, Option<String>)> = self
                .shard_cache
                .lock()
                .map(|c| {
                    c.get(arn)
                        .into_iter()
                        .flatten()
                        .filter(|(_, start, end, _)| {
                            *start <= wanted && end.as_ref().is_none_or(|e| wanted <= *e)
                        })
                        .map(|(id, _, _, parent)| (id.clone(), parent.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let parent_of = |id: &str| {
                spans
                    .iter()
                    .find(|(s, _)| s == id)
                    .and_then(|(_, p)| p.clone())
            };
            let hits: Vec<String> = spans.iter().map(|(id, _)| id.clone()).collect();
            if hits.len() == 1 {
                let w = WriterId::new(&hits[0]).map_err(|e| bad(e.to_string()))?;
                return Ok((w, parent_of(&hits[0])));
            }
            if hits.len() > 1 {
                let mut found = vec![];
                for shard in &hits {
                    if self.shard_holds(arn, shard, seq, &wanted, event_id).await? {
                        found.push(shard.clone());
                    }
                }
                if found.len() == 1 {
                    let w = WriterId::new(&found[0]).map_err(|e| bad(e.to_string()))?;
                    return Ok((w, parent_of(&found[0])));
                }
                if refresh || found.len() > 1 {
                    return Err(bad(format!(
                        "{} of the {} open shards {} hold this record",
                        found.len(),
                        hits.len(),
                        hits.join(", ")
                    )));
                }
            }
        }
        Err(bad(
            "no shard of the stream holds this sequence number".into()
        ))
    }

    /// True when `shard`'s record at sequence number `seq` is the record (same `eventID`).
    async fn shard_holds(
        &self,
        arn: &str,
        shard: &str,
        seq: &str,
        wanted: &Seq,
        event_id: Option<&str>,
    ) -> Result<bool, AggregateError> {
        let Some(streams) = &self.streams else {
            return Ok(false);
        };
        let it = match stream_reader::iterator(streams, arn, shard, Position::At(seq)).await {
            Ok(it) => it,
            Err(e) => {
                // Another shard's sequence number is refused as invalid for this shard.
                if e.code() == Some("ValidationException")
                    || e.code() == Some("InvalidArgumentException")
                    || e.code() == Some("TrimmedDataAccessException")
                {
                    return Ok(false);
                }
                return Err(e.into());
            }
        };
        let Some(it) = it else { return Ok(false) };
        let out = stream_reader::page(streams, &it, 1, shard).await?;
        Ok(out.records().first().is_some_and(|r| {
            let same_seq = r
                .dynamodb()
                .and_then(|d| d.sequence_number())
                .and_then(|s| Seq::parse(s).ok())
                .is_some_and(|s| s == *wanted);
            let same_id = event_id.is_none_or(|id| r.event_id() == Some(id));
            same_seq && same_id
        }))
    }

    async fn describe_shards(&self, arn: &str) -> Result<Vec<ShardSpan>, AggregateError> {
        let Some(streams) = &self.streams else {
            return Err(AggregateError::BadRecord {
                id: arn.to_owned(),
                reason: "no DynamoDB Streams client to resolve shards".into(),
            });
        };
        let mut out = vec![];
        let mut parents = HashSet::new();
        // One DynamoDB Streams listing (paged and paced by the layer), read once per lookup.
        let listed = StreamListing::default().sync(streams, arn).await?;
        for sh in listed {
            let Some(first) = sh.starting_seq.as_deref().and_then(|s| Seq::parse(s).ok()) else {
                continue;
            };
            let last = sh.ending_seq.as_deref().and_then(|s| Seq::parse(s).ok());
            if let Some(p) = &sh.parent {
                parents.insert(p.clone());
            }
            out.push((sh.shard_id, first, last, sh.parent));
        }
        // The newest shard of each lineage (no child yet) is still open and takes new records,
        // whatever ending number an emulator reports for it (dynoxide reports the string-largest
        // seq it holds, e.g. "9" after "30").
        for (id, _, end, _) in &mut out {
            if !parents.contains(id.as_str()) {
                *end = None;
            }
        }
        Ok(out)
    }
}

impl AggregateReport {
    /// Adds the batch's metrics to `emf`: [`LAG_EVENTS`], [`LATE_CHANGES`],
    /// [`DUPLICATES_DROPPED`] and [`FOREIGN_RECORDS`] always (0 included: a graph shows 0, not a
    /// gap, and a missing datapoint means no batch ran), [`FLUSH_DELAY`] when the flush counted
    /// changes with a creation time, and [`DEDUPE_SHED`] only when the dedupe window's size
    /// guard shed identities (an alarm on it must treat missing data as not breaching).
    pub fn metrics(&self, emf: &mut crate::metrics::Emf) {
        emf.count(LAG_EVENTS, self.unflushed)
            .count(LATE_CHANGES, self.flush.late)
            .count(DUPLICATES_DROPPED, self.flush.duplicates)
            .count(FOREIGN_RECORDS, self.foreign);
        if self.flush.shed > 0 {
            emf.count(DEDUPE_SHED, self.flush.shed);
        }
        if let Some(ms) = self.flush_delay_ms {
            emf.seconds(FLUSH_DELAY, std::time::Duration::from_millis(ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn count_by_counts_inserts_up_removals_down_and_refuses_records_without_the_attribute() {
        let m = CountBy::new("orders", "product");
        let change = |name: &str, image: &str, attr: &str| json!({"eventName": name, "dynamodb": {image: {attr: {"S": "p9"}}}});
        let mapped = |c: Value| m.map(&c).map(|o| o.map(|(k, d)| (k.to_string(), d)));
        assert_eq!(
            mapped(change("INSERT", "NewImage", "product")),
            Ok(Some(("orders#p9".into(), 1)))
        );
        assert_eq!(
            mapped(change("REMOVE", "OldImage", "product")),
            Ok(Some(("orders#p9".into(), -1)))
        );
        assert_eq!(
            mapped(change("MODIFY", "NewImage", "product")),
            Ok(Some(("orders#p9".into(), 0)))
        );
        assert!(mapped(change("INSERT", "NewImage", "sku")).is_err());
        assert!(
            mapped(change("INSERT", "OldImage", "product")).is_err(),
            "an insert has no old image"
        );
        assert!(mapped(json!({"dynamodb": {}})).is_err());
    }

    #[test]
    fn a_duplicate_under_a_new_event_id_has_the_same_identity_and_another_change_does_not() {
        let change = |id: &str, at: u64, user: &str| {
            json!({"eventID": id, "eventName": "INSERT", "tableName": "t", "eventSource": "aws:dynamodb",
                "dynamodb": {"Keys": {"user": {"S": user}}, "ApproximateCreationDateTime": at,
                    "NewImage": {"user": {"S": user}}}})
        };
        let first = change_id(&change("e1", 1_700_000_000_000, "u1")).expect("id");
        assert_eq!(
            first,
            change_id(&change("e2", 1_700_000_000_000, "u1")).expect("id")
        );
        assert_ne!(
            first,
            change_id(&change("e1", 1_700_000_000_001, "u1")).expect("id")
        );
        assert_ne!(
            first,
            change_id(&change("e1", 1_700_000_000_000, "u2")).expect("id")
        );
        assert!(
            change_id(&json!({"dynamodb": {"Keys": {}}})).is_err(),
            "no creation time"
        );
    }

    /// A DynamoDB attribute value as a tree: what [`render`] writes with members in any order.
    #[derive(Debug, Clone)]
    enum Attr {
        S(String),
        N(u32),
        Bool(bool),
        Ss(Vec<String>),
        L(Vec<Attr>),
        M(Vec<(String, Attr)>),
    }

    fn attr() -> impl proptest::strategy::Strategy<Value = Attr> {
        use proptest::prelude::*;
        let name = "[a-z]{1,6}";
        let leaf = prop_oneof![
            name.prop_map(Attr::S),
            any::<u32>().prop_map(Attr::N),
            any::<bool>().prop_map(Attr::Bool),
            proptest::collection::btree_set(name, 1..4)
                .prop_map(|s| Attr::Ss(s.into_iter().collect())),
        ];
        leaf.prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Attr::L),
                proptest::collection::btree_map(name, inner, 0..4)
                    .prop_map(|m| Attr::M(m.into_iter().collect())),
            ]
        })
    }

    /// `members` as JSON object text, in the order `order` picks (a seed rotating each level).
    fn object(members: &[(String, String)], order: u64) -> String {
        let mut m: Vec<&(String, String)> = members.iter().collect();
        if !m.is_empty() {
            let k = (order as usize) % m.len();
            m.rotate_left(k);
            if order % 2 == 1 {
                m.reverse();
            }
        }
        let body: Vec<String> = m
            .iter()
            .map(|(n, v)| format!("{}:{v}", serde_json::to_string(n).expect("name")))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    /// An attribute value's DynamoDB JSON text, objects' members (and set elements) in the
    /// order `order` picks.
    fn render(a: &Attr, order: u64) -> String {
        let next = order.rotate_left(7) ^ 0x9e37_79b9;
        let (ty, v) = match a {
            Attr::S(s) => ("S", serde_json::to_string(s).expect("s")),
            Attr::N(n) => ("N", format!("\"{n}\"")),
            Attr::Bool(b) => ("BOOL", b.to_string()),
            Attr::Ss(set) => {
                let mut set: Vec<String> = set
                    .iter()
                    .map(|s| serde_json::to_string(s).expect("s"))
                    .collect();
                let turn = (order as usize) % set.len().max(1);
                set.rotate_left(turn);
                ("SS", format!("[{}]", set.join(",")))
            }
            Attr::L(items) => (
                "L",
                format!(
                    "[{}]",
                    items
                        .iter()
                        .map(|i| render(i, next))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
            Attr::M(members) => {
                let members: Vec<(String, String)> = members
                    .iter()
                    .map(|(n, v)| (n.clone(), render(v, next)))
                    .collect();
                ("M", object(&members, next))
            }
        };
        format!("{{\"{ty}\":{v}}}")
    }

    /// Whether this build's `serde_json` keeps a parsed object's members in the text's order
    /// (`preserve_order`): the case where an identity over the record's text would differ.
    fn preserves_order() -> bool {
        serde_json::from_str::<Value>(r#"{"b":1,"a":2}"#)
            .expect("json")
            .to_string()
            .starts_with(r#"{"b""#)
    }

    proptest::proptest! {
        /// The same change, its images' attributes (at every level) and its keys in any order,
        /// its string sets in any order: one identity. Parsed from text, as the aggregator gets
        /// it, so in a build with `preserve_order` (the workspace's tests) the parsed maps keep
        /// the order and only a canonical identity agrees.
        #[test]
        fn the_same_change_with_its_image_attributes_in_any_order_has_one_identity(
            image in proptest::collection::btree_map("[a-z]{1,6}", attr(), 1..8),
            old in proptest::option::of(proptest::collection::btree_map("[a-z]{1,6}", attr(), 1..8)),
            a in proptest::prelude::any::<u64>(),
            b in proptest::prelude::any::<u64>(),
        ) {
            let record = |order: u64| -> Value {
                let img = |m: &std::collections::BTreeMap<String, Attr>, o: u64| {
                    let members: Vec<(String, String)> =
                        m.iter().map(|(n, v)| (n.clone(), render(v, o))).collect();
                    object(&members, o)
                };
                let mut dynamodb = vec![
                    ("Keys".to_owned(), object(&[
                        ("user".to_owned(), r#"{"S":"u1"}"#.to_owned()),
                        ("post".to_owned(), r#"{"S":"p9"}"#.to_owned()),
                    ], order)),
                    ("ApproximateCreationDateTime".to_owned(), "1700000000123".to_owned()),
                    ("NewImage".to_owned(), img(&image, order)),
                ];
                if let Some(old) = &old {
                    dynamodb.push(("OldImage".to_owned(), img(old, order.rotate_left(3))));
                }
                let text = object(&[
                    ("eventName".to_owned(), r#""MODIFY""#.to_owned()),
                    ("tableName".to_owned(), r#""liked""#.to_owned()),
                    ("eventSource".to_owned(), r#""aws:dynamodb""#.to_owned()),
                    ("dynamodb".to_owned(), object(&dynamodb, order)),
                ], order);
                serde_json::from_str(&text).expect("valid JSON")
            };
            let (x, y) = (record(a), record(b));
            proptest::prop_assert_eq!(change_id(&x).expect("id"), change_id(&y).expect("id"));
        }
    }

    #[test]
    fn the_identity_test_says_which_serde_json_it_ran_under() {
        // Not an assertion on the feature: a record of which case the property test above
        // exercised in this build (`cargo test -p heatsink`: preserve_order on, through the
        // SDK's test utilities; the Lambda functions' builds: off).
        eprintln!(
            "serde_json preserve_order in this build: {}",
            preserves_order()
        );
        let reordered: Value =
            serde_json::from_str(r#"{"dynamodb":{"Keys":{"b":{"S":"1"},"a":{"S":"2"}},"ApproximateCreationDateTime":1700000000000}}"#)
                .expect("json");
        let sorted: Value =
            serde_json::from_str(r#"{"dynamodb":{"ApproximateCreationDateTime":1700000000000,"Keys":{"a":{"S":"2"},"b":{"S":"1"}}}}"#)
                .expect("json");
        assert_eq!(
            change_id(&reordered).expect("id"),
            change_id(&sorted).expect("id")
        );
    }

    #[test]
    fn creation_times_in_seconds_milliseconds_and_microseconds_agree() {
        let at = |t: Value| {
            approximate_creation_ms(&json!({"dynamodb": {"ApproximateCreationDateTime": t}}))
        };
        let ms = 1_700_000_000_123_u64;
        assert_eq!(at(json!(1_700_000_000.123)), Some(ms));
        assert_eq!(at(json!(ms)), Some(ms));
        assert_eq!(at(json!(ms * 1000 + 456)), Some(ms));
        assert_eq!(
            at(json!(0)),
            None,
            "aws_lambda_events' default means unknown"
        );
        assert_eq!(approximate_creation_ms(&json!({"dynamodb": {}})), None);
    }

    #[test]
    fn counter_batch_metrics_report_late_duplicates_and_foreign_0s_included_and_shed_only_above_0()
    {
        let values = |report: &AggregateReport| {
            let mut emf = crate::metrics::Emf::new("likes-aggregator");
            report.metrics(&mut emf);
            let doc = &emf.documents(1_700_000_000_000)[0];
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("metric definitions")
                .iter()
                .map(|d| {
                    let name = d["Name"].as_str().expect("name").to_owned();
                    assert_eq!(d["Unit"], "Count", "{name}");
                    let v = doc[&name].as_f64().expect("one value");
                    (name, v)
                })
                .collect::<BTreeMap<_, _>>()
        };
        let quiet = values(&AggregateReport::default());
        assert_eq!(
            quiet,
            BTreeMap::from([
                (LAG_EVENTS.name.to_owned(), 0.0),
                (LATE_CHANGES.name.to_owned(), 0.0),
                (DUPLICATES_DROPPED.name.to_owned(), 0.0),
                (FOREIGN_RECORDS.name.to_owned(), 0.0),
            ]),
            "a batch that saw none still reports 0s; no shed value below 1"
        );
        let report = AggregateReport {
            foreign: 4,
            flush: FlushReport {
                late: 2,
                duplicates: 7,
                shed: 3,
                ..FlushReport::default()
            },
            ..AggregateReport::default()
        };
        let busy = values(&report);
        assert_eq!(busy[LATE_CHANGES.name], 2.0);
        assert_eq!(busy[DUPLICATES_DROPPED.name], 7.0);
        assert_eq!(busy[FOREIGN_RECORDS.name], 4.0);
        assert_eq!(busy[DEDUPE_SHED.name], 3.0);
        assert_eq!(
            [LATE_CHANGES, DUPLICATES_DROPPED, FOREIGN_RECORDS].map(|m| m.name),
            [
                "CounterLateChanges",
                "CounterDuplicatesDropped",
                "CounterForeignRecords"
            ]
        );
    }
}
