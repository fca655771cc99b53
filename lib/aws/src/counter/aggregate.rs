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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use heatsink_core::counter::{CounterKey, Deltas, Seq, WriterId};
use serde::Serialize;
use serde_json::Value;

use super::{CounterStore, FlushReport};
use crate::error::AwsError;
use crate::lambda::{dynamodb_failure, kinesis_failure};
use crate::metrics::MetricDef;

/// Change records applied to the in-memory aggregate but not flushed when the invocation
/// ended (the flush failed; Lambda retries them). 0 after a good flush.
pub const LAG_EVENTS: MetricDef = MetricDef::count("CounterLagEvents");
/// Seconds from the oldest change of a flush (its `ApproximateCreationDateTime`) to the end
/// of that flush into the counters table.
pub const FLUSH_DELAY: MetricDef = MetricDef::seconds("CounterFlushDelaySeconds");

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
}

impl<T: ChangeMapper + ?Sized> ChangeMapper for Box<T> {
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
        (**self).map(change)
    }
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
}

impl CountBy {
    /// Counts items per value of `attribute` into counters named `counter` (`counter#<value>`).
    pub fn new(counter: impl Into<String>, attribute: impl Into<String>) -> Self {
        Self {
            counter: counter.into(),
            attribute: attribute.into(),
        }
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

/// A stream shard and the sequence numbers it holds (`None` end: still open).
type ShardSpan = (String, Seq, Option<Seq>);

/// A stream-batch aggregator: change records → per-key deltas (by the user's [`ChangeMapper`])
/// → one conditional absolute flush per counter key and writer.
#[derive(Debug)]
pub struct StreamAggregator<M> {
    counters: CounterStore,
    mapper: M,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    shard_cache: Mutex<HashMap<String, Vec<ShardSpan>>>,
}

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
            streams,
            shard_cache: Mutex::new(HashMap::new()),
        }
    }

    /// The mapper this aggregator counts with.
    pub fn mapper(&self) -> &M {
        &self.mapper
    }

    /// Aggregates `records` (id, seq, change JSON) of one shard and flushes them as `writer`.
    async fn aggregate(
        &self,
        writer: &WriterId,
        records: Vec<(String, String, Result<Value, String>)>,
    ) -> AggregateReport {
        let mut report = AggregateReport::default();
        let mut deltas = Deltas::new();
        let mut keys = BTreeSet::new();
        let mut oldest_ms: Option<u64> = None;
        for (id, seq, change) in records {
            let bad = |reason: String| AggregateError::BadRecord {
                id: id.clone(),
                reason,
            };
            let parsed = change
                .map_err(bad)
                .and_then(|c| {
                    let mapped = self.mapper.map(&c).map_err(|e| bad(e.to_string()))?;
                    Ok((mapped, approximate_creation_ms(&c)))
                })
                .and_then(|(mapped, created)| {
                    let seq = Seq::parse(&seq).map_err(|e| bad(e.to_string()))?;
                    Ok((mapped, seq, created))
                });
            match parsed {
                // The record moves no counter: read, nothing to add.
                Ok((None, _, _)) => report.records += 1,
                Ok((Some((key, delta)), seq, created)) => {
                    keys.insert(key.clone());
                    if let Err(e) = deltas.add_record(key, seq, delta) {
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
        if deltas.is_empty() {
            return report;
        }
        match self.counters.flush(writer, &deltas).await {
            Ok(flush) => {
                if flush.counted > 0 {
                    report.flush_delay_ms =
                        oldest_ms.map(|t| crate::clock::now_ms().saturating_sub(t));
                }
                report.flush = flush;
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
        let records = event
            .records
            .iter()
            .map(|r| {
                let seq = r.kinesis.sequence_number.clone();
                let change = serde_json::from_slice::<Value>(&r.kinesis.data.0)
                    .map_err(|e| format!("data is not a JSON change record: {e}"));
                (seq.clone(), seq, change)
            })
            .collect();
        let report = self.aggregate(&writer, records).await;
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
        let writer = match self.resolve_shard(&arn, &first_seq).await {
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
        let records = event
            .records
            .iter()
            .map(|r| {
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
            })
            .collect();
        let report = self.aggregate(&writer, records).await;
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

    /// DynamoDB Streams events do not name their shard; find the shard whose sequence range
    /// holds `seq` (DescribeStream, cached per stream and refreshed once on a miss). An
    /// ambiguous or unknown answer is an error, never a guess: a wrong writer would skip records.
    async fn resolve_shard(&self, arn: &str, seq: &str) -> Result<WriterId, AggregateError> {
        let bad = |reason: String| AggregateError::BadRecord {
            id: seq.to_owned(),
            reason,
        };
        let seq = Seq::parse(seq).map_err(|e| bad(e.to_string()))?;
        for refresh in [false, true] {
            if refresh || !self.shard_cache.lock().is_ok_and(|c| c.contains_key(arn)) {
                let shards = self.describe_shards(arn).await?;
                if let Ok(mut c) = self.shard_cache.lock() {
                    c.insert(arn.to_owned(), shards);
                }
            }
            let hits: Vec<String> = self
                .shard_cache
                .lock()
                .map(|c| {
                    c.get(arn)
                        .into_iter()
                        .flatten()
                        .filter(|(_, start, end)| {
                            *start <= seq && end.as_ref().is_none_or(|e| seq <= *e)
                        })
                        .map(|(id, _, _)| id.clone())
                        .collect()
                })
                .unwrap_or_default();
            if hits.len() == 1 {
                return WriterId::new(&hits[0]).map_err(|e| bad(e.to_string()));
            }
            if hits.len() > 1 && refresh {
                return Err(bad(format!(
                    "sequence number lies in {} shards: {}",
                    hits.len(),
                    hits.join(", ")
                )));
            }
        }
        Err(bad(
            "no shard of the stream holds this sequence number".into()
        ))
    }

    async fn describe_shards(
        &self,
        arn: &str,
    ) -> Result<Vec<(String, Seq, Option<Seq>)>, AggregateError> {
        let Some(streams) = &self.streams else {
            return Err(AggregateError::BadRecord {
                id: arn.to_owned(),
                reason: "no DynamoDB Streams client to resolve shards".into(),
            });
        };
        let mut out = vec![];
        let mut parents = HashSet::new();
        let mut start: Option<String> = None;
        loop {
            let desc = streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(start)
                .send()
                .await
                .map_err(|e| AwsError::new("DynamoDB Streams", "DescribeStream", arn, e))?;
            let Some(d) = desc.stream_description else {
                break;
            };
            for sh in d.shards() {
                let (Some(id), Some(range)) = (sh.shard_id(), sh.sequence_number_range()) else {
                    continue;
                };
                let Some(first) = range
                    .starting_sequence_number()
                    .and_then(|s| Seq::parse(s).ok())
                else {
                    continue;
                };
                let last = range
                    .ending_sequence_number()
                    .and_then(|s| Seq::parse(s).ok());
                if let Some(p) = sh.parent_shard_id() {
                    parents.insert(p.to_owned());
                }
                out.push((id.to_owned(), first, last));
            }
            start = d.last_evaluated_shard_id;
            if start.is_none() {
                break;
            }
        }
        // The newest shard of each lineage (no child yet) is still open and takes new records,
        // whatever ending number an emulator reports for it (dynoxide reports the string-largest
        // seq it holds, e.g. "9" after "30").
        for (id, _, end) in &mut out {
            if !parents.contains(id.as_str()) {
                *end = None;
            }
        }
        Ok(out)
    }
}

impl AggregateReport {
    /// Adds the batch's metrics to `emf`: [`LAG_EVENTS`] always, and [`FLUSH_DELAY`] when the
    /// flush counted changes with a creation time.
    pub fn metrics(&self, emf: &mut crate::metrics::Emf) {
        emf.count(LAG_EVENTS, self.unflushed);
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
}
