//! A local event-source mapping: Lambda's poller for a shaped stream, in process.
//!
//! Nothing local executes a Lambda function, and nothing local batches a stream the way the
//! deployed event source mapping does. [`run`] reads a [`StreamShaper`]'s shards as Lambda's
//! poller would with the deployed [`EsmSettings`] — up to `batch_size` records or `window` of
//! waiting per batch, one batch in flight per shard, a child shard only after its parent is read
//! to its end, and a partial batch failure retried from the failed record — and hands each batch
//! to your handler as the event Lambda would send: a DynamoDB Streams event (records with
//! `eventSourceARN`) or, in the Kinesis shape, a Kinesis event whose records' `data` is the
//! change in the Kinesis Data Streams for DynamoDB format (`tableName`, `eventSource`,
//! `dynamodb.ApproximateCreationDateTime` in milliseconds) and whose `eventID` is
//! `<shardId>:<sequenceNumber>`.
//!
//! Every shard's ready batch is handed over at once (one batch in flight per shard, shards in
//! parallel, as Lambda does). Limits: a batch failing [`MAX_ATTEMPTS`] times in a row is parked (skipped and
//! reported), without the deployed mapping's bisection.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use base64::Engine;
use md5::Digest;
use serde::Serialize;
use serde_json::{Value, json};

use crate::front::StreamShaper;
use crate::shape::SourceKind;

/// The event source mapping's settings: one definition for the stack and the demo.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EsmSettings {
    /// Which stream the function reads.
    pub source: SourceKind,
    /// Most records per batch.
    pub batch_size: usize,
    /// Longest wait for a batch to fill (Lambda's `MaximumBatchingWindowInSeconds`).
    pub window: Duration,
    /// Stream shards (Kinesis: the stream's shard count; DynamoDB Streams: table partitions).
    pub shards: u32,
}

/// One batch handed to the handler.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The shard it came from (the handler is not told this in production; for reports).
    pub shard: String,
    /// The Lambda event.
    pub event: Value,
    /// Sequence numbers of its records, in order.
    pub seqs: Vec<String>,
}

/// What a run delivered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EsmReport {
    /// Batches handed to the handler (retries included).
    pub batches: u64,
    /// Records in them (retries included).
    pub records: u64,
    /// Batches answered with a failure and retried.
    pub retries: u64,
    /// Shards read to their end or drained.
    pub shards: u64,
    /// Records given up on after [`MAX_ATTEMPTS`] failed deliveries (the deployed mapping sends
    /// them to its on-failure destination): never counted by the handler.
    pub parked: u64,
}

/// Deliveries of one batch before it is parked (the deployed mapping's retry limit).
pub const MAX_ATTEMPTS: u32 = 10;

/// A batch ready for the handler and its record count.
struct Ready {
    batch: Batch,
    len: usize,
}

#[derive(Debug, Default)]
struct Cursor {
    position: usize,
    since: Option<Instant>,
    ended: bool,
    attempts: u32,
}

fn table_of(arn: &str) -> &str {
    arn.split_once("table/")
        .map(|(_, t)| t.split('/').next().unwrap_or(t))
        .unwrap_or("")
}

/// The Kinesis Data Streams for DynamoDB record a DynamoDB Streams change becomes.
fn kinesis_record(arn: &str, shard: &str, change: &Value) -> Value {
    let seq = change
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str)
        .unwrap_or("0")
        .to_owned();
    let mut dynamodb = change.get("dynamodb").cloned().unwrap_or_default();
    if let Some(d) = dynamodb.as_object_mut() {
        // Kinesis carries the creation time in milliseconds (or microseconds), not seconds.
        if let Some(t) = d.get("ApproximateCreationDateTime").and_then(Value::as_f64) {
            let ms = if t < 1e11 { t * 1e3 } else { t };
            d.insert(
                "ApproximateCreationDateTime".into(),
                json!(ms.round() as u64),
            );
        }
        d.remove("SequenceNumber");
        d.remove("StreamViewType");
    }
    let data = json!({
        "awsRegion": change.get("awsRegion").cloned().unwrap_or(json!("us-east-1")),
        "eventID": change.get("eventID").cloned().unwrap_or_default(),
        "eventName": change.get("eventName").cloned().unwrap_or_default(),
        "userIdentity": null,
        "recordFormat": "application/json",
        "tableName": table_of(arn),
        "dynamodb": dynamodb,
        "eventSource": "aws:dynamodb",
    });
    let keys = change
        .pointer("/dynamodb/Keys")
        .map(Value::to_string)
        .unwrap_or_default();
    json!({
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": md5::Md5::digest(keys.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "sequenceNumber": seq,
            "data": base64::engine::general_purpose::STANDARD.encode(data.to_string()),
            "approximateArrivalTimestamp": 0.0,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("{shard}:{seq}"),
        "eventName": "aws:kinesis:record",
        "awsRegion": "us-east-1",
        "eventSourceARN": format!("arn:aws:kinesis:us-east-1:000000000000:stream/{}-events", table_of(arn)),
    })
}

/// The Lambda event for `records` of `shard`.
pub fn event(source: SourceKind, arn: &str, shard: &str, records: &[Value]) -> Value {
    let records: Vec<Value> = match source {
        SourceKind::DynamoDbStreams => records
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r["eventSourceARN"] = json!(arn);
                r
            })
            .collect(),
        SourceKind::Kinesis => records
            .iter()
            .map(|r| kinesis_record(arn, shard, r))
            .collect(),
    };
    json!({ "Records": records })
}

/// Delivers `arn`'s shaped stream to `handler` until `done()` is true and every shard is drained.
///
/// `handler` returns `None` when the whole batch succeeded, or the sequence number of the first
/// failed record (a partial batch response): the batch is then delivered again from that record.
pub async fn run<F, Fut>(
    shaper: &StreamShaper,
    arn: &str,
    settings: EsmSettings,
    mut handler: F,
    done: impl Fn() -> bool,
) -> EsmReport
where
    F: FnMut(Batch) -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let mut report = EsmReport::default();
    let mut cursors: BTreeMap<String, Cursor> = BTreeMap::new();
    let _ = shaper.watch(arn).await;
    let mut idle_after_done = 0;
    loop {
        let finished = done();
        if finished {
            shaper.sync().await;
        }
        let shards = shaper
            .with_stream(arn, |s| s.describe())
            .unwrap_or_default();
        let ended: HashSet<String> = cursors
            .iter()
            .filter(|(_, c)| c.ended)
            .map(|(id, _)| id.clone())
            .collect();
        let mut ready: Vec<Ready> = Vec::new();
        for view in &shards {
            // A child is read only after its parent is read to its end (Lambda's lineage order).
            if let Some(p) = &view.parent
                && !ended.contains(p)
                && shards.iter().any(|s| &s.shard_id == p)
            {
                continue;
            }
            let cursor = cursors.entry(view.shard_id.clone()).or_default();
            if cursor.ended {
                continue;
            }
            // A batch still filling waits without copying its records: this loop polls every
            // 10 ms, and copying up to `batch_size` records per shard per poll to throw them away
            // starves the load it is measuring.
            let available = shaper
                .with_stream(arn, |s| s.latest(&view.shard_id).ok())
                .flatten()
                .unwrap_or(0)
                .saturating_sub(cursor.position);
            if available > 0 {
                let since = *cursor.since.get_or_insert_with(Instant::now);
                if available < settings.batch_size && !finished && since.elapsed() < settings.window
                {
                    continue;
                }
            }
            let Some(Ok((records, next))) = shaper.with_stream(arn, |s| {
                s.read(&view.shard_id, cursor.position, settings.batch_size)
            }) else {
                continue;
            };
            if records.is_empty() {
                if next.is_none() {
                    cursor.ended = true;
                    report.shards += 1;
                }
                continue;
            }
            let since = *cursor.since.get_or_insert_with(Instant::now);
            let full = records.len() >= settings.batch_size;
            if !full && !finished && since.elapsed() < settings.window {
                continue;
            }
            let seqs: Vec<String> = records
                .iter()
                .filter_map(|r| r.pointer("/dynamodb/SequenceNumber")?.as_str())
                .map(str::to_owned)
                .collect();
            report.batches += 1;
            report.records += records.len() as u64;
            ready.push(Ready {
                batch: Batch {
                    shard: view.shard_id.clone(),
                    event: event(settings.source, arn, &view.shard_id, &records),
                    seqs,
                },
                len: records.len(),
            });
        }
        // Every shard's ready batch at once, as Lambda runs one invocation per shard in parallel
        // (one in flight per shard): served one after another, a slow handler would stretch
        // every shard's batching window by the others' handling time.
        let delivered = !ready.is_empty();
        let calls: Vec<Fut> = ready.iter().map(|r| handler(r.batch.clone())).collect();
        let answers = futures::future::join_all(calls).await;
        for (r, answer) in ready.into_iter().zip(answers) {
            let Some(cursor) = cursors.get_mut(&r.batch.shard) else {
                continue;
            };
            match answer {
                None => {
                    cursor.position += r.len;
                    cursor.since = None;
                    cursor.attempts = 0;
                }
                Some(failed) => {
                    report.retries += 1;
                    cursor.attempts += 1;
                    if cursor.attempts >= MAX_ATTEMPTS {
                        report.parked += r.len as u64;
                        cursor.position += r.len;
                        cursor.attempts = 0;
                    } else if let Some(at) = r.batch.seqs.iter().position(|s| *s == failed) {
                        cursor.position += at;
                    }
                    // An unknown failure point: the whole batch again.
                }
            }
        }
        if !delivered {
            if finished {
                idle_after_done += 1;
                let drained = shards.iter().all(|v| {
                    cursors.get(&v.shard_id).is_some_and(|c| {
                        c.ended
                            || shaper
                                .with_stream(arn, |s| s.latest(&v.shard_id).ok())
                                .flatten()
                                .is_some_and(|len| c.position >= len)
                    })
                });
                if drained && idle_after_done >= 3 {
                    return report;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        } else {
            idle_after_done = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinesis_record_carries_the_change_in_the_destinations_format() {
        let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/p-liked/stream/2026";
        let change = json!({"eventID": "e1", "eventName": "INSERT", "awsRegion": "us-east-1",
            "dynamodb": {"SequenceNumber": "100", "Keys": {"user": {"S": "u1"}},
                "ApproximateCreationDateTime": 1_700_000_000.5, "StreamViewType": "NEW_AND_OLD_IMAGES"}});
        let r = kinesis_record(arn, "shardId-000000000001", &change);
        assert_eq!(r["eventID"], "shardId-000000000001:100");
        assert_eq!(r["kinesis"]["sequenceNumber"], "100");
        let data = base64::engine::general_purpose::STANDARD
            .decode(r["kinesis"]["data"].as_str().expect("data"))
            .expect("base64");
        let data: Value = serde_json::from_slice(&data).expect("json");
        assert_eq!(data["tableName"], "p-liked");
        assert_eq!(data["eventSource"], "aws:dynamodb");
        assert_eq!(
            data["dynamodb"]["ApproximateCreationDateTime"],
            1_700_000_000_500u64
        );
        assert!(data["dynamodb"].get("SequenceNumber").is_none());
    }
}
