//! Stream events from Lambda, decoded record by record, and the change records inside them.
//!
//! Lambda hands a function its whole batch as one JSON document; a typed decode of the batch
//! fails as a whole on one bad record (a Kinesis `data` that is not base64, a DynamoDB image
//! `serde_dynamo` cannot read), and the function would fail the invocation with a Rust type
//! name as `errorType` and retry the whole batch forever. [`kinesis_batch`] and
//! [`dynamodb_batch`] decode each record alone instead: the records before the first one that
//! does not decode, and that one as an [`Undecodable`] (its sequence number and the reason),
//! which [`Undecodable::kinesis_response`] / [`Undecodable::dynamodb_response`] turn into the
//! partial batch failure Lambda retries from. Nothing after it is decoded, so no later record
//! is processed ahead of it.
//!
//! ```
//! use heatsink::lambda::kinesis_batch;
//! use serde_json::json;
//!
//! let payload = json!({"Records": [
//!     {"eventSource": "aws:kinesis", "kinesis": {"sequenceNumber": "1", "partitionKey": "k",
//!      "data": "eyJhIjoxfQ==", "approximateArrivalTimestamp": 1.7e9}},
//!     {"eventSource": "aws:kinesis", "kinesis": {"sequenceNumber": "2", "partitionKey": "k",
//!      "data": "not base64!", "approximateArrivalTimestamp": 1.7e9}},
//! ]});
//! let (event, bad) = kinesis_batch(payload);
//! assert_eq!(event.records.len(), 1);
//! let bad = bad.expect("record 2 does not decode");
//! assert_eq!(bad.id, "2");
//! assert!(bad.reason.contains("base64"), "{}", bad.reason);
//! ```
//!
//! Bounds: a payload is at most what Lambda delivers (6 MB for a synchronous invocation, which
//! an event source mapping's batch is), and already parsed by the runtime; each record is
//! decoded from its part of that value. A change record inside a Kinesis record
//! ([`kinesis_change`]) is at most [`MAX_CHANGE_BYTES`] (1 MiB), parsed with serde_json's
//! recursion limit (128 levels) into at most 112 × its size.

use aws_lambda_events::dynamodb::{Event as DynamoDbEvent, EventRecord as DynamoDbRecord};
use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use serde_json::Value;

use super::{dynamodb_failure, kinesis_failure};

/// The largest change record [`kinesis_change`] reads: 1 MiB, Kinesis's record limit as Kinesis
/// Data Streams for DynamoDB writes it (a DynamoDB item is at most 400 KB). Parsed, a change
/// record takes serde_json's `Value` tree: at most 112 × its size (72 bytes per JSON value;
/// measured by the fuzz harness), so at most 112 MiB for the largest; the aggregator holds one
/// record's tree at a time.
pub const MAX_CHANGE_BYTES: usize = 1 << 20;

/// The first record of a batch that did not decode: where Lambda must retry from, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// Its sequence number (the partial batch response's `itemIdentifier`); empty when the
    /// record has none, which Lambda takes as a failure of the whole batch.
    pub id: String,
    /// Its position in the batch.
    pub index: usize,
    /// Why it did not decode, one line.
    pub reason: String,
}

impl Undecodable {
    /// `resp` (what handling the records before this one answered), with this record as the
    /// failure Lambda retries from unless an earlier record already failed.
    pub fn kinesis_response(&self, mut resp: KinesisEventResponse) -> KinesisEventResponse {
        if resp.batch_item_failures.is_empty() {
            resp.batch_item_failures
                .push(kinesis_failure(self.id.clone()));
        }
        resp
    }

    /// The DynamoDB Streams counterpart of [`Undecodable::kinesis_response`].
    pub fn dynamodb_response(&self, mut resp: DynamoDbEventResponse) -> DynamoDbEventResponse {
        if resp.batch_item_failures.is_empty() {
            resp.batch_item_failures
                .push(dynamodb_failure(self.id.clone()));
        }
        resp
    }
}

/// The `Records` of `payload`, each decoded alone as `T`, up to the first that does not decode.
/// `why` names the field at fault in a record that did not decode, when it can tell.
fn records<T: serde::de::DeserializeOwned>(
    payload: Value,
    id_at: &str,
    why: fn(&Value) -> Option<String>,
) -> (Vec<T>, Option<Undecodable>) {
    let mut payload = payload;
    let raw = match payload.get_mut("Records").map(Value::take) {
        Some(Value::Array(raw)) => raw,
        Some(Value::Null) | None => Vec::new(),
        Some(other) => {
            let bad = Undecodable {
                id: String::new(),
                index: 0,
                reason: format!("`Records` is {}, not an array", kind(&other)),
            };
            return (Vec::new(), Some(bad));
        }
    };
    let mut out = Vec::with_capacity(raw.len());
    for (index, record) in raw.into_iter().enumerate() {
        let id = record
            .pointer(id_at)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match T::deserialize(&record) {
            Ok(r) => out.push(r),
            Err(e) => {
                let what = why(&record).unwrap_or_else(|| e.to_string());
                let reason = format!("record {index} ({id}) does not decode: {what}");
                return (out, Some(Undecodable { id, index, reason }));
            }
        }
    }
    (out, None)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A Kinesis event, record by record: the records up to the first that does not decode (a
/// `data` that is not base64, a missing `kinesis` object), and that one.
pub fn kinesis_batch(payload: Value) -> (KinesisEvent, Option<Undecodable>) {
    let (records, bad) =
        records::<KinesisEventRecord>(payload, "/kinesis/sequenceNumber", kinesis_fault);
    let mut event = KinesisEvent::default();
    event.records = records;
    (event, bad)
}

/// Which field of a Kinesis record is at fault: its `data` when that is not base64.
fn kinesis_fault(record: &Value) -> Option<String> {
    use base64::Engine;
    let data = record.pointer("/kinesis/data")?;
    let Some(text) = data.as_str() else {
        return Some(format!(
            "kinesis.data is {}, not a base64 string",
            kind(data)
        ));
    };
    let e = base64::engine::general_purpose::STANDARD
        .decode(text)
        .err()?;
    Some(format!("kinesis.data is not base64: {e}"))
}

/// A DynamoDB Streams event, record by record: the records up to the first that does not
/// decode (an image `serde_dynamo` cannot read), and that one.
pub fn dynamodb_batch(payload: Value) -> (DynamoDbEvent, Option<Undecodable>) {
    let (records, bad) = records::<DynamoDbRecord>(payload, "/dynamodb/SequenceNumber", |_| None);
    let mut event = DynamoDbEvent::default();
    event.records = records;
    (event, bad)
}

/// The change record in the data of a Kinesis Data Streams for DynamoDB record: a JSON object
/// of at most [`MAX_CHANGE_BYTES`]. `Ok(None)` for a record that is not a change record at all
/// but a KPL aggregate (another producer's record on a shared stream, which a change consumer
/// skips as it skips another table's changes); `Err` with the reason, one line, otherwise.
pub fn kinesis_change(data: &[u8]) -> Result<Option<Value>, String> {
    if heatsink_core::kpl::is_aggregated(data) {
        return Ok(None);
    }
    if data.len() > MAX_CHANGE_BYTES {
        return Err(format!(
            "data of {} bytes is over the {MAX_CHANGE_BYTES}-byte limit of a change record",
            data.len()
        ));
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(other) => Err(format!(
            "data is {}, not a JSON change record",
            kind(&other)
        )),
        Err(e) => Err(format!("data is not a JSON change record: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kinesis_record(seq: &str, data: &str) -> Value {
        json!({"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{seq}"),
            "kinesis": {"sequenceNumber": seq, "partitionKey": "k", "data": data,
            "approximateArrivalTimestamp": 1.7e9}})
    }

    #[test]
    fn a_kinesis_record_whose_data_is_not_base64_is_the_failure_and_the_ones_before_it_decode() {
        let payload = json!({"Records": [
            kinesis_record("10", "e30="),
            kinesis_record("11", "%%%"),
            kinesis_record("12", "e30="),
        ]});
        let (event, bad) = kinesis_batch(payload);
        assert_eq!(event.records.len(), 1);
        assert_eq!(event.records[0].kinesis.sequence_number, "10");
        let bad = bad.expect("record 11");
        assert_eq!((bad.id.as_str(), bad.index), ("11", 1));
        assert!(!bad.reason.contains('\n'));
        let resp = bad.kinesis_response(KinesisEventResponse::default());
        assert_eq!(
            resp.batch_item_failures[0].item_identifier.as_deref(),
            Some("11")
        );
        // An earlier failure of the handler wins: Lambda retries from the first.
        let mut earlier = KinesisEventResponse::default();
        earlier
            .batch_item_failures
            .push(kinesis_failure("10".into()));
        let resp = bad.kinesis_response(earlier);
        assert_eq!(resp.batch_item_failures.len(), 1);
        assert_eq!(
            resp.batch_item_failures[0].item_identifier.as_deref(),
            Some("10")
        );
    }

    #[test]
    fn a_record_of_an_auto_stream_without_a_partition_key_decodes_with_an_empty_one() {
        // A stream with RecordDistributionStrategy AUTO places records itself: the key is
        // optional on PutRecord, and the event may carry none.
        let mut record = kinesis_record("10", "e30=");
        record["kinesis"]
            .as_object_mut()
            .map(|k| k.remove("partitionKey"));
        let (event, bad) =
            kinesis_batch(json!({"Records": [record, kinesis_record("11", "e30=")]}));
        assert_eq!(bad, None);
        assert_eq!(event.records.len(), 2);
        assert_eq!(event.records[0].kinesis.partition_key, "");
        assert_eq!(event.records[1].kinesis.partition_key, "k");
    }

    #[test]
    fn a_batch_that_is_not_a_batch_fails_whole_and_an_empty_one_decodes_to_nothing() {
        let (event, bad) = kinesis_batch(json!({"Records": "nope"}));
        assert!(event.records.is_empty());
        assert_eq!(bad.map(|b| b.id), Some(String::new()));
        assert_eq!(kinesis_batch(json!({})).1, None);
        let (event, bad) = dynamodb_batch(json!({"Records": [
            {"eventID": "1", "eventName": "INSERT", "eventSource": "aws:dynamodb",
             "dynamodb": {"SequenceNumber": "100", "Keys": {"pk": {"S": "a"}},
                          "NewImage": {"pk": {"Q": "?"}}}}
        ]}));
        assert!(event.records.is_empty());
        assert_eq!(bad.map(|b| b.id), Some("100".to_owned()));
    }

    #[test]
    fn a_change_record_is_a_json_object_a_kpl_aggregate_is_none_and_the_rest_a_reason() {
        assert_eq!(
            kinesis_change(br#"{"eventName":"INSERT"}"#),
            Ok(Some(json!({"eventName": "INSERT"})))
        );
        let mut kpl = heatsink_core::kpl::MAGIC.to_vec();
        kpl.extend([0; 40]);
        assert_eq!(kinesis_change(&kpl), Ok(None));
        assert!(kinesis_change(b"[1,2]").unwrap_err().contains("an array"));
        assert!(kinesis_change(b"\xff").unwrap_err().contains("not a JSON"));
        let deep = "[".repeat(10_000);
        assert!(kinesis_change(deep.as_bytes()).is_err(), "recursion limit");
        let big = vec![b' '; MAX_CHANGE_BYTES + 1];
        assert!(kinesis_change(&big).unwrap_err().contains("over the"));
    }
}
