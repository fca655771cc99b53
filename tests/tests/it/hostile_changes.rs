//! The hostile KPL record of issue 32 on a Kinesis Data Streams for DynamoDB stream
//! (kinesis-mock), through the aggregator's Kinesis path as Lambda delivers it: read back from
//! the stream, handed over as a Lambda event (data base64), decoded record by record
//! (`lambda::kinesis_batch`) and aggregated. The aggregate is not a change record: it is skipped
//! as foreign and counted, and the change put after it is counted; nothing is retried.

use heatsink_integration::PhotoFixture;

use aws_sdk_kinesis::primitives::Blob;
use base64::Engine;
use heatsink::clock::now_ms;
use heatsink::counter::{CounterKey, CounterStore};
use heatsink::lambda::kinesis_batch;
use heatsink_photo_app::aggregator;
use heatsink_photo_app::mapper::{COUNTER, LIKED_AT};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{fixture, kinesis_shard_records};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issue_32_aggregate_on_a_change_stream_is_skipped_as_foreign_and_the_change_after_it_counted()
 {
    let fx = fixture!(
        "the_issue_32_aggregate_on_a_change_stream_is_skipped_as_foreign_and_the_change_after_it_counted"
    );
    let counters = fx.photo_table(Table::Counters).await;
    let stream = fx.stream("changes", 1).await;
    let k = &fx.stack.kinesis;
    let now = now_ms();
    let change = json!({"awsRegion": "us-east-1", "eventID": "e1", "eventName": "INSERT",
        "userIdentity": null, "recordFormat": "application/json",
        "tableName": fx.photo().table_name(Table::Liked), "eventSource": "aws:dynamodb",
        "dynamodb": {"ApproximateCreationDateTime": now,
            "Keys": {"user": {"S": "u1"}, "post": {"S": "p9"}},
            "NewImage": {"user": {"S": "u1"}, "post": {"S": "p9"}, LIKED_AT: {"N": now.to_string()}},
            "SizeBytes": 40}});
    for (key, data) in [
        ("hostile", crate::hostile::issue_32_aggregate()),
        ("p9", change.to_string().into_bytes()),
    ] {
        k.put_record()
            .stream_name(&stream.name)
            .partition_key(key)
            .data(Blob::new(data))
            .send()
            .await
            .expect("put");
    }
    let records = kinesis_shard_records(k, &stream.name, "shardId-000000000000").await;
    assert_eq!(records.len(), 2);
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = json!({"Records": records.iter().map(|r| json!({
        "eventSource": "aws:kinesis", "eventVersion": "1.0", "awsRegion": "us-east-1",
        "eventID": format!("shardId-000000000000:{}", r.sequence_number()),
        "eventName": "aws:kinesis:record",
        "eventSourceARN": format!("arn:aws:kinesis:us-east-1:000000000000:stream/{}", stream.name),
        "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": r.partition_key(),
            "sequenceNumber": r.sequence_number(), "approximateArrivalTimestamp": 1.7e9,
            "data": b64.encode(r.data().as_ref())}})).collect::<Vec<Value>>()});
    let (event, undecodable) = kinesis_batch(payload);
    assert_eq!(undecodable, None, "both records decode as Lambda records");
    let store = CounterStore::new(fx.stack.ddb.clone(), &counters.name);
    let agg = aggregator(store.clone(), None);
    let (resp, report) = agg.handle_kinesis(event).await;
    assert!(
        resp.batch_item_failures.is_empty(),
        "nothing retried: {resp:?}"
    );
    assert_eq!((report.records, report.foreign), (2, 1), "{report:?}");
    let key = CounterKey::new(COUNTER, "p9").expect("key");
    assert_eq!(store.read(&key).await.expect("count").total(), 1);
}
