//! Change records: Kinesis Data Streams for DynamoDB JSON (structure-aware: DynamoDB JSON of
//! every attribute type, nested, with hostile mutations) through `lambda::kinesis_change` and
//! the aggregator's readers of a change (`image_and_delta`, `change_id`,
//! `approximate_creation_ms`, `CountBy`).

use heatsink::counter::aggregate::{
    ChangeMapper, CountBy, approximate_creation_ms, change_id, image_and_delta,
};
use heatsink::lambda::{MAX_CHANGE_BYTES, kinesis_change};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{fuzz, meter};

/// What `kinesis_change` may hold for `n` bytes of data (docs/bounds.md): serde_json's `Value`
/// tree of a JSON text, at most 112 × its size (72 bytes per value, arrays of one-digit
/// numbers take one per 2 bytes, and a `Vec` grows by doubling: measured 106 ×).
fn change_bound(n: usize) -> usize {
    112 * n + 16_384
}

/// One DynamoDB JSON attribute value, nested up to `depth`.
fn attr(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        "\\PC{0,12}".prop_map(|s| json!({ "S": s })),
        any::<i64>().prop_map(|n| json!({ "N": n.to_string() })),
        "[A-Za-z0-9+/]{0,16}".prop_map(|b| json!({ "B": b })),
        any::<bool>().prop_map(|b| json!({ "BOOL": b })),
        Just(json!({ "NULL": true })),
        proptest::collection::vec("[a-z]{1,4}", 0..4).prop_map(|v| json!({ "SS": v })),
        // Hostile: an unknown type, a wrong payload type, a bare value.
        Just(json!({ "Q": "?" })),
        Just(json!({ "N": 5 })),
        Just(json!(7)),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        3 => leaf,
        1 => proptest::collection::vec(attr(depth - 1), 0..4).prop_map(|l| json!({ "L": l })),
        1 => proptest::collection::btree_map("[a-z]{1,6}", attr(depth - 1), 0..4)
            .prop_map(|m| json!({ "M": m })),
    ]
    .boxed()
}

fn image() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map("[a-z_]{1,8}", attr(2), 0..6).prop_map(|m| json!(m))
}

/// A change record as Kinesis Data Streams for DynamoDB writes it, sometimes damaged.
fn change() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("INSERT"),
            Just("MODIFY"),
            Just("REMOVE"),
            Just("TRUNCATE")
        ],
        prop_oneof![
            3 => (1_600_000_000_000u64..1_900_000_000_000).prop_map(|t| json!(t)),
            1 => Just(json!("yesterday")),
            1 => Just(json!(-1)),
        ],
        image(),
        proptest::option::of(image()),
        proptest::option::of(image()),
        prop_oneof![Just("aws:dynamodb"), Just("aws:kinesis")],
        "[a-z]{1,10}",
    )
        .prop_map(|(name, at, keys, new, old, source, table)| {
            let mut change = json!({
                "awsRegion": "us-east-1", "eventID": "e", "eventName": name,
                "eventSource": source, "tableName": table, "recordFormat": "application/json",
                "dynamodb": { "ApproximateCreationDateTime": at, "Keys": keys, "SizeBytes": 10 },
            });
            if let Some(new) = new {
                change["dynamodb"]["NewImage"] = new;
            }
            if let Some(old) = old {
                change["dynamodb"]["OldImage"] = old;
            }
            change
        })
}

/// Bytes that are a change record, a damaged one, or hostile JSON.
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => change().prop_map(|c| c.to_string().into_bytes()),
        1 => change().prop_map(|c| {
            let mut t = c.to_string().into_bytes();
            t.truncate(t.len() / 2);
            t
        }),
        1 => (1usize..20_000).prop_map(|n| format!("[{}0]", "0,".repeat(n)).into_bytes()),
        1 => (1usize..2_000).prop_map(|n| "[".repeat(n).into_bytes()),
        1 => (1usize..5_000).prop_map(|n| {
            let body: Vec<String> = (0..n).map(|i| format!("\"k{i}\":0")).collect();
            format!("{{{}}}", body.join(",")).into_bytes()
        }),
        1 => (1usize..20_000).prop_map(|n| format!("[{}{{}}]", "{\"a\":0},".repeat(n)).into_bytes()),
        1 => (1usize..120).prop_map(|n| format!("{}0{}", "{\"a\":".repeat(n), "}".repeat(n)).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
    ]
}

#[test]
fn change_records_are_read_within_their_bounds_or_refused_with_a_reason() {
    let mapper = CountBy::new("likes", "post");
    let tally = fuzz("change records", data(), |data, t| {
        let (change, peak) = meter::measure(|| kinesis_change(&data));
        t.allocated(peak, data.len(), change_bound(data.len()))?;
        match change {
            Err(reason) => {
                prop_assert!(!reason.contains('\n'), "{reason}");
                t.refuse(&"NotAChangeRecord");
            }
            Ok(None) => t.refuse(&"KplAggregate"),
            Ok(Some(change)) => {
                t.accept();
                prop_assert!(data.len() <= MAX_CHANGE_BYTES);
                // The aggregator's readers of a change: an answer or a reason, never a panic.
                let _ = approximate_creation_ms(&change);
                if let Err(e) = image_and_delta(&change) {
                    prop_assert!(!e.to_string().is_empty());
                }
                let _ = change_id(&change);
                let _ = mapper.map(&change);
                let _ = mapper.event_ms(&change);
            }
        }
        Ok(())
    });
    assert!(tally.accepted * 2 >= tally.cases, "{tally:?}");
}
