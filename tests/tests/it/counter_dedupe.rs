//! The aggregator's dedupe of Kinesis Data Streams for DynamoDB changes on the emulator, through
//! its Kinesis path as Lambda delivers it (Lambda records, data base64, decoded record by
//! record): the size guard on a writer sub-key's `recent` window, and change identity whatever
//! the order of the record's attributes.

use heatsink_integration::PhotoFixture;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use heatsink::clock::now_ms;
use heatsink::counter::aggregate::AggregateReport;
use heatsink::counter::{CounterKey, CounterStore, DedupeWindow};
use heatsink::lambda::kinesis_batch;
use heatsink::metrics::Emf;
use heatsink_photo_app::aggregator;
use heatsink_photo_app::mapper::COUNTER;
use heatsink_photo_app::metrics::Function;
use heatsink_photo_app::schema::Table;
use heatsink_testkit::fixture;
use serde_json::{Value, json};

const SHARD: &str = "shardId-000000000000";

/// A like of `post` by `user` as the Kinesis destination writes it (the change as JSON text).
fn like(table: &str, post: &str, user: &str, created_ms: u64) -> String {
    json!({"awsRegion": "us-east-1", "eventID": format!("e-{user}"), "eventName": "INSERT",
        "userIdentity": null, "recordFormat": "application/json", "tableName": table,
        "eventSource": "aws:dynamodb",
        "dynamodb": {"ApproximateCreationDateTime": created_ms,
            "Keys": {"user": {"S": user}, "post": {"S": post}},
            "NewImage": {"user": {"S": user}, "post": {"S": post},
                "liked_at": {"N": created_ms.to_string()}},
            "SizeBytes": 60}})
    .to_string()
}

/// A Lambda Kinesis event of `changes` (JSON texts) on [`SHARD`], sequence numbers from `seq`.
fn event(changes: &[String], seq: u64) -> aws_lambda_events::kinesis::KinesisEvent {
    event_on(SHARD, changes, seq)
}

/// A Lambda Kinesis event of `changes` (JSON texts) on `shard`, sequence numbers from `seq`.
fn event_on(shard: &str, changes: &[String], seq: u64) -> aws_lambda_events::kinesis::KinesisEvent {
    let b64 = base64::engine::general_purpose::STANDARD;
    let records: Vec<Value> = changes
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let seq = format!("{:056}", seq + i as u64);
            json!({"eventSource": "aws:kinesis", "eventVersion": "1.0", "awsRegion": "us-east-1",
                "eventID": format!("{shard}:{seq}"), "eventName": "aws:kinesis:record",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/like-events",
                "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "p",
                    "sequenceNumber": seq, "approximateArrivalTimestamp": now_ms() as f64 / 1e3,
                    "data": b64.encode(data)}})
        })
        .collect();
    let (event, undecodable) = kinesis_batch(json!({ "Records": records }));
    assert_eq!(undecodable, None);
    event
}

/// The stored `recent` window of `post`'s writer sub-key of [`SHARD`], in bytes.
async fn recent_bytes(fx: &heatsink_testkit::Fixture, post: &str) -> usize {
    let item = fx
        .stack
        .ddb
        .get_item()
        .table_name(fx.photo().table_name(Table::Counters))
        .key("pk", AttributeValue::S(format!("{COUNTER}#{post}")))
        .key("sk", AttributeValue::S(format!("w#{SHARD}")))
        .consistent_read(true)
        .send()
        .await
        .expect("get")
        .item
        .expect("the writer sub-key");
    match item.get("recent") {
        Some(AttributeValue::B(b)) => b.as_ref().len(),
        other => panic!("recent is not binary: {other:?}"),
    }
}

/// A hot post whose `recent` would pass DynamoDB's 400 KB item limit: 36,000 distinct likes on
/// one shard within 7.2 s of creation time (12 bytes each: 432 KB of identities), in the
/// deployed batches of 3,000. No batch fails, every like counts, the stored window stays within
/// its 128 KiB bound, and each batch that shed says so (flush report and `CounterDedupeShed`).
/// Duplicates of identities still held are dropped; a duplicate of a shed one is the guard's
/// cost: counted, and reported as `late`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_recent_of_a_hot_post_that_would_pass_400_kb_sheds_and_no_batch_fails() {
    let fx =
        fixture!("counter_recent_of_a_hot_post_that_would_pass_400_kb_sheds_and_no_batch_fails");
    fx.photo_table(Table::Counters).await;
    let table = fx.photo().table_name(Table::Liked);
    let store = CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters));
    let agg = aggregator(store.clone(), None);
    let start = now_ms() - 9_000;
    const LIKES: u64 = 36_000;
    const BATCH: u64 = 3_000;
    let created = |i: u64| start + i / 5; // 5 likes a millisecond: 7.2 s for all of them
    let changes: Vec<String> = (0..LIKES)
        .map(|i| like(&table, "p9", &format!("u{i}"), created(i)))
        .collect();
    let mut shed = 0;
    let mut seq = 1_000;
    for (n, batch) in changes.chunks(BATCH as usize).enumerate() {
        let (resp, report) = agg.handle_kinesis(event(batch, seq)).await;
        seq += BATCH;
        assert!(
            resp.batch_item_failures.is_empty(),
            "batch {n} failed: {:?} ({report:?})",
            report.error
        );
        assert_eq!(report.flush.counted, BATCH, "batch {n}: {report:?}");
        let bytes = recent_bytes(&fx, "p9").await;
        assert!(
            bytes <= DedupeWindow::MAX_BYTES,
            "batch {n}: recent is {bytes} bytes"
        );
        if report.flush.shed > 0 {
            assert!(emits_shed(&report), "batch {n} shed without the metric");
        }
        shed += report.flush.shed;
    }
    let key = CounterKey::new(COUNTER, "p9").expect("key");
    assert_eq!(store.read(&key).await.expect("count").total(), LIKES as i64);
    let held = (DedupeWindow::MAX_BYTES - 17) / DedupeWindow::BYTES_PER_ID;
    assert_eq!(shed, LIKES - held as u64, "all but the newest {held} shed");
    println!(
        "recent: {} bytes after {LIKES} likes in one window ({held} identities held, {shed} shed)",
        recent_bytes(&fx, "p9").await
    );

    // The newest 100 delivered again under new sequence numbers: still held, dropped.
    let (resp, report) = agg
        .handle_kinesis(event(&changes[(LIKES - 100) as usize..], seq))
        .await;
    seq += 100;
    assert!(resp.batch_item_failures.is_empty());
    // Nothing new: no write at all (the stored window already covers them).
    assert_eq!(
        (report.flush.counted, report.flush.writes),
        (0, 0),
        "{report:?}"
    );
    assert_eq!(store.read(&key).await.expect("count").total(), LIKES as i64);
    // The oldest one again: shed, so counted once more, never silently (`late`).
    let (resp, report) = agg.handle_kinesis(event(&changes[..1], seq)).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!((report.flush.late, report.flush.counted), (1, 1));
    assert_eq!(
        store.read(&key).await.expect("count").total(),
        LIKES as i64 + 1
    );
}

/// Whether the batch's metrics carry `CounterDedupeShed`.
fn emits_shed(report: &AggregateReport) -> bool {
    let mut emf = Emf::new(Function::LikesAggregator);
    report.metrics(&mut emf);
    emf.documents(now_ms()).iter().any(|d| {
        d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["Name"] == "CounterDedupeShed"))
            && d["CounterDedupeShed"].as_f64().is_some_and(|v| v > 0.0)
    })
}

/// The same change delivered twice, each copy its own Kinesis record, the second with its keys'
/// and image's attributes (and the record's own members) in another order: counted once. The
/// test crate's build has `serde_json`'s `preserve_order` (through the SDK's test utilities),
/// so the parsed maps keep each record's order: an identity over the record's text would see
/// two changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_the_same_change_with_its_attributes_in_another_order_counts_once() {
    let fx = fixture!("counter_the_same_change_with_its_attributes_in_another_order_counts_once");
    fx.photo_table(Table::Counters).await;
    let table = fx.photo().table_name(Table::Liked);
    let store = CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters));
    let agg = aggregator(store.clone(), None);
    let at = now_ms() - 2_000;
    let first = like(&table, "p9", "u1", at);
    let second = format!(
        r#"{{"dynamodb":{{"SizeBytes":60,"NewImage":{{"liked_at":{{"N":"{at}"}},"post":{{"S":"p9"}},"user":{{"S":"u1"}}}},"Keys":{{"post":{{"S":"p9"}},"user":{{"S":"u1"}}}},"ApproximateCreationDateTime":{at}}},"tableName":"{table}","eventSource":"aws:dynamodb","recordFormat":"application/json","userIdentity":null,"eventName":"INSERT","eventID":"e-other","awsRegion":"us-east-1"}}"#
    );
    let parsed = |t: &str| serde_json::from_str::<Value>(t).expect("json");
    assert_eq!(
        parsed(&first)["dynamodb"],
        parsed(&second)["dynamodb"],
        "one change, two texts (and two event ids)"
    );
    let (resp, report) = agg.handle_kinesis(event(&[first, second], 10)).await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(
        (report.flush.counted, report.flush.duplicates),
        (1, 1),
        "{report:?}"
    );
    let key = CounterKey::new(COUNTER, "p9").expect("key");
    assert_eq!(store.read(&key).await.expect("count").total(), 1);
}

/// `like-events` split: parent shard 0 into children 1 and 2. A change the parent counted is
/// delivered again to child 1 under a new sequence number (Kinesis Data Streams for DynamoDB
/// may publish a change twice, and a reshard can fall between the copies). With the lineage, the
/// child's first flush starts from the parent's dedupe window: the copy is dropped. Without it
/// (no lineage: an empty first window) the same copy counts twice, which is what the lineage
/// prevents. A merge (two parents into one child) seeds from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_a_duplicate_straddling_a_reshard_counts_once_through_the_lineage() {
    use heatsink::counter::lineage::{ShardInfo, Shards};
    let fx = fixture!("counter_a_duplicate_straddling_a_reshard_counts_once_through_the_lineage");
    fx.photo_table(Table::Counters).await;
    let table = fx.photo().table_name(Table::Liked);
    let store = CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters));
    let (p, a, b, m) = (
        "shardId-000000000000",
        "shardId-000000000001",
        "shardId-000000000002",
        "shardId-000000000003",
    );
    let child = |id: &str, parents: &[&str]| ShardInfo {
        parent: parents.first().map(|s| (*s).to_owned()),
        adjacent_parent: parents.get(1).map(|s| (*s).to_owned()),
        ..ShardInfo::new(id)
    };
    // p splits into a and b; later a and b merge into m.
    let lineage = std::sync::Arc::new(Shards(vec![
        ShardInfo {
            ending_seq: Some(format!("{:056}", 99)),
            ..ShardInfo::new(p)
        },
        child(a, &[p]),
        child(b, &[p]),
        child(m, &[a, b]),
    ]));
    let agg = aggregator(store.clone(), None).with_lineage(lineage);
    let plain = aggregator(store.clone(), None);
    let at = now_ms() - 3_000;
    let count = |post: &'static str| {
        let store = store.clone();
        async move {
            let key = CounterKey::new(COUNTER, post).expect("key");
            store.read(&key).await.expect("count").total()
        }
    };
    // The parent counts u1 and u2 on p9, and u1 on p8.
    let (resp, _) = agg
        .handle_kinesis(event_on(
            p,
            &[
                like(&table, "p9", "u1", at),
                like(&table, "p9", "u2", at + 10),
            ],
            10,
        ))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    let (resp, _) = plain
        .handle_kinesis(event_on(p, &[like(&table, "p8", "u1", at)], 20))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    // Child a: a copy of u1's like and a new like u3. Dropped, counted.
    let (resp, report) = agg
        .handle_kinesis(event_on(
            a,
            &[
                like(&table, "p9", "u1", at),
                like(&table, "p9", "u3", at + 500),
            ],
            200,
        ))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(
        (report.flush.counted, report.flush.duplicates),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(count("p9").await, 3);
    // The merge: m's first flush seeds from a and b (a holds u1 and u3 of p9 now).
    let (_, report) = agg
        .handle_kinesis(event_on(
            m,
            &[
                like(&table, "p9", "u3", at + 500),
                like(&table, "p9", "u2", at + 10),
            ],
            300,
        ))
        .await;
    // (Nothing counted, so nothing written: the flush reports the batch as already applied.)
    assert_eq!(report.flush.counted, 0, "{report:?}");
    assert_eq!(count("p9").await, 3);
    // Without the lineage the child's first window is empty: the copy counts again.
    let (_, report) = plain
        .handle_kinesis(event_on(b, &[like(&table, "p8", "u1", at)], 400))
        .await;
    assert_eq!(report.flush.counted, 1, "{report:?}");
    assert_eq!(
        count("p8").await,
        2,
        "a straddling copy without the lineage"
    );
}
