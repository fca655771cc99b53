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
//! parallel, as Lambda does).
//!
//! **Parking.** A batch failing [`MAX_ATTEMPTS`] deliveries in a row is parked, as the deployed
//! mapping does once its `MaximumRetryAttempts` are spent: the mapping moves past it and sends
//! the on-failure record to its destination: here [`OnFailure`] (pass one to [`run_to`]), which
//! collects each parked batch as a [`ParkedBatch`] (its shard, first and last sequence numbers
//! and size, what `heatsink::counter::redrive` reads). [`ParkPolicy`] picks, seeded and
//! deterministic, the batches a handler fails on every attempt (the demo's `--park`).
//!
//! Limits: no bisection of a failing batch (`BisectBatchOnFunctionError`), no maximum record
//! age, retries without back-off.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use heatsink_core::counter::{MAX_PARKED_BATCH, ParkedBatch, ParkedSource, Seq};
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
    /// Batches parked (each sent to the [`OnFailure`] destination).
    pub parked_batches: u64,
}

/// Deliveries of one batch before it is parked (the deployed mapping's retry limit).
pub const MAX_ATTEMPTS: u32 = 10;

/// The on-failure destination of the local mapping: the batches it parked, in the order it
/// parked them (Lambda sends each to an SQS queue or SNS topic).
#[derive(Debug, Default)]
pub struct OnFailure {
    parked: Mutex<Vec<ParkedBatch>>,
}

impl OnFailure {
    /// An empty destination.
    pub fn new() -> Self {
        Self::default()
    }

    fn send(&self, batch: ParkedBatch) {
        if let Ok(mut parked) = self.parked.lock() {
            parked.push(batch);
        }
    }

    /// Takes the parked batches received so far (each is returned once).
    pub fn take(&self) -> Vec<ParkedBatch> {
        self.parked
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }
}

/// Which batches a handler fails on every attempt, so that the mapping parks them: a fraction
/// of them, chosen by a seeded hash of the batch's shard and first sequence number. Every retry
/// of a batch starts at the same record, so it gets the same answer, and the same seed over the
/// same stream picks the same batches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParkPolicy {
    /// Share of batches that always fail (0..=1; 0: none, 1: all).
    pub fraction: f64,
    /// Seed of the choice.
    pub seed: u64,
}

impl ParkPolicy {
    /// Whether the batch of `shard` starting at `first_seq` fails on every attempt.
    pub fn fails(&self, shard: &str, first_seq: &str) -> bool {
        if self.fraction <= 0.0 {
            return false;
        }
        let mut h = md5::Md5::new();
        h.update(self.seed.to_be_bytes());
        h.update(shard.as_bytes());
        h.update([0]);
        h.update(first_seq.as_bytes());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        // A uniform draw in [0, 1): below the fraction fails.
        let draw = (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64;
        draw < self.fraction
    }
}

/// The on-failure record of a batch the mapping gives up on: its shard, first and last sequence
/// numbers and size, on the stream the handler was told (`KinesisBatchInfo` with the Kinesis
/// stream's ARN in the Kinesis shape, `DDBStreamBatchInfo` with the table stream's otherwise).
pub fn parked_batch(
    source: SourceKind,
    arn: &str,
    shard: &str,
    seqs: &[String],
) -> Option<ParkedBatch> {
    let start_seq = Seq::parse(seqs.first()?).ok()?;
    let end_seq = Seq::parse(seqs.last()?).ok()?;
    let (source, stream_arn) = match source {
        SourceKind::Kinesis => (ParkedSource::Kinesis, kinesis_arn(arn)),
        SourceKind::DynamoDbStreams => (ParkedSource::DynamoDbStreams, arn.to_owned()),
    };
    Some(ParkedBatch {
        source,
        stream_arn,
        shard_id: shard.to_owned(),
        start_seq,
        end_seq,
        batch_size: u32::try_from(seqs.len()).unwrap_or(MAX_PARKED_BATCH),
        first_arrival_ms: None,
        condition: Some("RetryAttemptsExhausted".into()),
    })
}

/// The Kinesis stream ARN the Kinesis shape's events carry for table stream `arn`.
fn kinesis_arn(arn: &str) -> String {
    format!(
        "arn:aws:kinesis:us-east-1:000000000000:stream/{}-events",
        table_of(arn)
    )
}

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

/// What the mapping does with a shard after the handler answered its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The batch succeeded: on to the records after it.
    Done,
    /// It failed: delivered again from the failed record (the whole batch if that is unknown).
    Retry,
    /// It failed its [`MAX_ATTEMPTS`]-th delivery in a row: skipped and sent to the on-failure
    /// destination.
    Park,
}

impl Cursor {
    /// Moves past or back into the batch of `seqs` (`len` records) the handler answered.
    fn answered(&mut self, answer: Option<&str>, seqs: &[String], len: usize) -> Next {
        let Some(failed) = answer else {
            self.position += len;
            self.since = None;
            self.attempts = 0;
            return Next::Done;
        };
        self.attempts += 1;
        if self.attempts >= MAX_ATTEMPTS {
            self.position += len;
            self.since = None;
            self.attempts = 0;
            return Next::Park;
        }
        if let Some(at) = seqs.iter().position(|s| s == failed) {
            self.position += at;
        }
        Next::Retry
    }
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
        "eventSourceARN": kinesis_arn(arn),
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
/// Parked batches are counted in the report only; [`run_to`] also hands them over.
pub async fn run<F, Fut>(
    shaper: &StreamShaper,
    arn: &str,
    settings: EsmSettings,
    handler: F,
    done: impl Fn() -> bool,
) -> EsmReport
where
    F: FnMut(Batch) -> Fut,
    Fut: Future<Output = Option<String>>,
{
    run_to(shaper, arn, settings, &OnFailure::new(), handler, done).await
}

/// [`run`], sending each parked batch's on-failure record to `destination` as it parks it.
pub async fn run_to<F, Fut>(
    shaper: &StreamShaper,
    arn: &str,
    settings: EsmSettings,
    destination: &OnFailure,
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
            match cursor.answered(answer.as_deref(), &r.batch.seqs, r.len) {
                Next::Done => {}
                Next::Retry => report.retries += 1,
                Next::Park => {
                    report.retries += 1;
                    report.parked += r.len as u64;
                    report.parked_batches += 1;
                    match parked_batch(settings.source, arn, &r.batch.shard, &r.batch.seqs) {
                        Some(p) => destination.send(p),
                        None => {
                            tracing::warn!(shard = %r.batch.shard, "a parked batch without sequence numbers: no on-failure record")
                        }
                    }
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
    use proptest::prelude::*;

    use super::*;

    const ARN: &str = "arn:aws:dynamodb:us-east-1:000000000000:table/p-liked/stream/2026";

    fn seqs(from: u64, n: u64) -> Vec<String> {
        (from..from + n)
            .map(|q| (100 + q * 7).to_string())
            .collect()
    }

    #[test]
    fn a_batch_failing_every_delivery_is_parked_on_the_last_allowed_one() {
        let batch = seqs(0, 5);
        let mut c = Cursor::default();
        for _ in 1..MAX_ATTEMPTS {
            assert_eq!(c.answered(Some(&batch[0]), &batch, 5), Next::Retry);
            assert_eq!(c.position, 0, "retried from its first record");
        }
        assert_eq!(c.answered(Some(&batch[0]), &batch, 5), Next::Park);
        assert_eq!(
            (c.position, c.attempts),
            (5, 0),
            "moved past it, the count reset"
        );
        // The next batch starts afresh: one failure is a retry again.
        let next = seqs(5, 3);
        assert_eq!(c.answered(Some(&next[1]), &next, 3), Next::Retry);
        assert_eq!(
            c.position, 6,
            "a partial failure retries from the failed record"
        );
        assert_eq!(c.answered(None, &next[1..], 2), Next::Done);
        assert_eq!((c.position, c.attempts), (8, 0));
    }

    #[test]
    fn a_parked_batch_names_its_shard_and_range_as_lambda_does() {
        let batch = seqs(0, 4);
        let p =
            parked_batch(SourceKind::DynamoDbStreams, ARN, "shardId-1", &batch).expect("parked");
        assert_eq!(p.source, ParkedSource::DynamoDbStreams);
        assert_eq!(
            (p.stream_arn.as_str(), p.shard_id.as_str()),
            (ARN, "shardId-1")
        );
        assert_eq!(p.start_seq.to_decimal(), "100");
        assert_eq!(p.end_seq.to_decimal(), "121");
        assert_eq!(p.batch_size, 4);
        // The record Lambda sends reads back as the same batch.
        let again = ParkedBatch::parse(p.to_record().to_string().as_bytes()).expect("record");
        assert_eq!(again, p);
        let k = parked_batch(SourceKind::Kinesis, ARN, "shardId-000000000002", &batch).expect("k");
        assert_eq!(k.source, ParkedSource::Kinesis);
        assert_eq!(
            k.stream_arn,
            "arn:aws:kinesis:us-east-1:000000000000:stream/p-liked-events"
        );
        assert_eq!(parked_batch(SourceKind::Kinesis, ARN, "s", &[]), None);
    }

    #[test]
    fn the_destination_hands_each_parked_batch_over_once() {
        let d = OnFailure::new();
        let p = parked_batch(SourceKind::DynamoDbStreams, ARN, "s", &seqs(0, 1)).expect("p");
        d.send(p.clone());
        assert_eq!(d.take(), vec![p]);
        assert!(d.take().is_empty());
    }

    proptest! {
        /// The choice is a function of (seed, shard, first record): every retry of a batch gets
        /// the same answer; 0 parks nothing and 1 everything; in between about that share.
        #[test]
        fn the_park_policy_is_deterministic_and_parks_about_its_fraction(
            fraction in 0.0f64..=1.0,
            seed in any::<u64>(),
            shard in "shardId-[0-9]{3}",
        ) {
            let policy = ParkPolicy { fraction, seed };
            let firsts = seqs(0, 2_000);
            let picks: Vec<bool> = firsts.iter().map(|q| policy.fails(&shard, q)).collect();
            let again: Vec<bool> = firsts.iter().map(|q| policy.fails(&shard, q)).collect();
            prop_assert_eq!(&picks, &again);
            let share = picks.iter().filter(|p| **p).count() as f64 / picks.len() as f64;
            prop_assert!((share - fraction).abs() < 0.05, "{} parked of {}", share, fraction);
            let (none, all) = (ParkPolicy { fraction: 0.0, seed }, ParkPolicy { fraction: 1.0, seed });
            prop_assert!(firsts.iter().all(|q| !none.fails(&shard, q)));
            prop_assert!(firsts.iter().all(|q| all.fails(&shard, q)));
        }
    }

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
