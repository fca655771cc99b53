//! Lambda stream events decoded record by record (`lambda::kinesis_batch`,
//! `lambda::dynamodb_batch`): records whose `data` is not base64, missing or mistyped fields,
//! images `serde_dynamo` cannot read, a `Records` that is not an array.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use heatsink::lambda::{dynamodb_batch, kinesis_batch};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{fuzz, meter};

/// What decoding an event of `n` bytes of JSON may hold (docs/bounds.md): the records' typed
/// copies (strings copied, data base64-decoded), at most 4 × the event's JSON.
fn event_bound(n: usize) -> usize {
    4 * n + 1_024
}

/// One Kinesis record of a Lambda event, and whether it should decode.
fn kinesis_record() -> impl Strategy<Value = (Value, bool)> {
    (
        any::<u64>(),
        prop_oneof![
            8 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|d| (json!(B64.encode(d)), true)),
            1 => "[^A-Za-z0-9+/=]{1,8}".prop_map(|s| (json!(s), false)),
            1 => Just((json!(42), false)),
        ],
        prop_oneof![8 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(seq, (data, ok), with_kinesis)| {
            let mut r = json!({"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{seq}"),
                "kinesis": {"sequenceNumber": seq.to_string(), "partitionKey": "k", "data": data,
                            "approximateArrivalTimestamp": 1.7e9}});
            if !with_kinesis {
                r.as_object_mut().map(|o| o.remove("kinesis"));
            }
            (r, ok && with_kinesis)
        })
}

/// One DynamoDB Streams record of a Lambda event, and whether it should decode.
fn dynamodb_record() -> impl Strategy<Value = (Value, bool)> {
    (
        any::<u64>(),
        prop_oneof![
            8 => "[a-z]{1,8}".prop_map(|s| (json!({"S": s}), true)),
            1 => Just((json!({"Q": 1}), false)),
            1 => Just((json!("bare"), false)),
        ],
    )
        .prop_map(|(seq, (value, ok))| {
            let r = json!({"eventID": "1", "eventName": "INSERT", "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {"SequenceNumber": seq.to_string(), "Keys": {"pk": {"S": "a"}},
                             "NewImage": {"pk": {"S": "a"}, "v": value}, "SizeBytes": 1,
                             "StreamViewType": "NEW_AND_OLD_IMAGES"}});
            (r, ok)
        })
}

/// Decodes `records` as a batch with `decode` and checks the prefix rule: every record before
/// the first bad one decoded, that one reported with its sequence number at `id_at`.
fn check_batch<E>(
    records: Vec<(Value, bool)>,
    decode: fn(Value) -> (E, Option<heatsink::lambda::Undecodable>),
    len: fn(&E) -> usize,
    id_at: &str,
    t: &mut crate::Tally,
) -> Result<(), TestCaseError> {
    let first_bad = records.iter().position(|(_, ok)| !ok);
    let payload = json!({"Records": records.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>()});
    let size = payload.to_string().len();
    let ((event, bad), peak) = meter::measure(|| decode(payload));
    t.allocated(peak, size, event_bound(size))?;
    match (first_bad, bad) {
        (None, None) => {
            t.accept();
            prop_assert_eq!(len(&event), records.len());
        }
        (Some(i), Some(bad)) => {
            t.refuse(&"Undecodable");
            prop_assert_eq!(bad.index, i);
            prop_assert_eq!(len(&event), i);
            let id = records[i]
                .0
                .pointer(id_at)
                .and_then(Value::as_str)
                .unwrap_or_default();
            prop_assert_eq!(bad.id.as_str(), id);
            prop_assert!(!bad.reason.contains('\n'));
        }
        (want, got) => prop_assert!(false, "expected the bad record at {want:?}, got {got:?}"),
    }
    Ok(())
}

#[test]
fn a_kinesis_event_decodes_up_to_its_first_bad_record_which_is_named() {
    let tally = fuzz(
        "lambda kinesis events",
        proptest::collection::vec(kinesis_record(), 0..12),
        |records, t| {
            check_batch(
                records,
                kinesis_batch,
                |e| e.records.len(),
                "/kinesis/sequenceNumber",
                t,
            )
        },
    );
    assert!(tally.accepted > 0 && !tally.refused.is_empty(), "{tally:?}");
}

#[test]
fn a_dynamodb_event_decodes_up_to_its_first_bad_record_which_is_named() {
    let tally = fuzz(
        "lambda dynamodb events",
        proptest::collection::vec(dynamodb_record(), 0..12),
        |records, t| {
            check_batch(
                records,
                dynamodb_batch,
                |e| e.records.len(),
                "/dynamodb/SequenceNumber",
                t,
            )
        },
    );
    assert!(tally.accepted > 0 && !tally.refused.is_empty(), "{tally:?}");
}
