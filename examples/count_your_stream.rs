//! count_your_stream: count YOUR table's change stream in YOUR Lambda, without one counter
//! write per event.
//!
//! A [`ChangeMapper`] says which counter each change moves (here: units ordered per product,
//! from an `orders` table's `product` and `quantity`); a [`StreamAggregator`] sums each batch per
//! key and flushes absolute totals with one conditional write per key and stream shard, and the
//! handler returns Lambda's partial batch response, so a retried batch never counts twice.
//!
//! As a Lambda (DynamoDB Streams trigger with `ReportBatchItemFailures`, stream view
//! NEW_AND_OLD_IMAGES; `COUNTERS_TABLE` names a `pk`/`sk` string-keyed table):
//!
//! ```sh
//! cargo lambda build --release -p heatsink-examples --example count_your_stream
//! ```
//!
//! Locally, `--local` feeds a hand-made Kinesis-for-DynamoDB event twice (the second is a
//! redelivery and counts nothing) into a scratch counters table, then deletes it:
//!
//! ```sh
//! localstack/stack up && eval "$(localstack/stack env --lane moto)"
//! cargo run -p heatsink-examples --example count_your_stream -- --local
//! ```

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::DynamoDbEventResponse;
use base64::Engine;
use heatsink::counter::aggregate::{ChangeMapper, StreamAggregator, Unusable};
use heatsink::counter::{CounterKey, CounterStore};
use heatsink::schema::{KeyAttr, TableSpec, ensure_table};
use heatsink_examples::{BoxError, Scratch};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Value, json};

/// Units ordered per product: +quantity for a new order line, −quantity for a deleted one.
struct UnitsPerProduct;

impl ChangeMapper for UnitsPerProduct {
    fn map(&self, change: &Value) -> Result<Option<(CounterKey, i64)>, Unusable> {
        let (image, sign) = match change["eventName"].as_str() {
            Some("INSERT") => ("NewImage", 1),
            Some("REMOVE") => ("OldImage", -1),
            _ => return Ok(None), // a MODIFY moves no counter here
        };
        let item = &change["dynamodb"][image];
        let product = item["product"]["S"]
            .as_str()
            .ok_or_else(|| Unusable::new("no product"))?;
        let quantity: i64 = item["quantity"]["N"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Unusable::new("no numeric quantity"))?;
        let key = CounterKey::new("units", product).map_err(|e| Unusable::new(e.to_string()))?;
        Ok(Some((key, sign * quantity)))
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    if std::env::args().any(|a| a == "--local") {
        return local().await;
    }
    // Cold start: logging as Lambda asks, SDK config, a capacity-logging DynamoDB client.
    let table = std::env::var("COUNTERS_TABLE").unwrap_or_else(|_| "shop-counters".into());
    let start = heatsink::lambda::start(|_| vec![counters_spec(&table)]).await;
    let streams = aws_sdk_dynamodbstreams::Client::new(&start.config);
    let agg = StreamAggregator::new(
        CounterStore::new(start.ddb, &table),
        UnitsPerProduct,
        Some(streams),
    );
    let agg = &agg;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<DynamoDbEvent>| async move {
            let (response, report) = agg.handle_dynamodb(event.payload).await;
            println!("{}", serde_json::to_string(&report)?);
            Ok::<DynamoDbEventResponse, lambda_runtime::Error>(response)
        },
    ))
    .await
}

/// The counters table: `pk` (`units#p9`) and `sk` (one sub-key per writer).
fn counters_spec(name: &str) -> TableSpec {
    TableSpec::new(name, KeyAttr::s("pk")).sort_key(KeyAttr::s("sk"))
}

/// Feeds a hand-made event through the same aggregator, twice, and reads the counter back.
///
/// A Kinesis-for-DynamoDB event names its shard in each `eventID`; a DynamoDB Streams event
/// does not, and the aggregator would ask DescribeStream for a stream that does not exist here.
async fn local() -> Result<(), BoxError> {
    let mut scratch = Scratch::new().await?;
    let ddb = aws_sdk_dynamodb::Client::new(&scratch.config);
    let spec = counters_spec(&scratch.table("counters"));
    let result = async {
        ensure_table(&ddb, &spec).await?;
        let store = CounterStore::new(ddb, &spec.name);
        let agg = StreamAggregator::new(store.clone(), UnitsPerProduct, None);
        let event = orders_event(&[
            ("INSERT", "p9", 2),
            ("INSERT", "p9", 3),
            ("REMOVE", "p9", 1),
        ])?;
        for delivery in ["first delivery", "redelivery"] {
            let (response, report) = agg.handle_kinesis(event.clone()).await;
            println!("{delivery}: {}", serde_json::to_string(&report)?);
            if !response.batch_item_failures.is_empty() {
                return Err(format!("batch failed: {:?}", report.error).into());
            }
        }
        let total = store.read(&CounterKey::new("units", "p9")?).await?.total();
        println!("units#p9 = {total}");
        if total != 4 {
            Err(format!("counted {total}, expected 2 + 3 - 1 = 4").into())
        } else {
            Ok(())
        }
    }
    .await;
    scratch.cleanup().await;
    result
}

/// A Kinesis Data Streams for DynamoDB event carrying one change record per `(event, product,
/// quantity)`, all from shard 0, as Lambda delivers it.
fn orders_event(changes: &[(&str, &str, i64)]) -> Result<KinesisEvent, serde_json::Error> {
    let records: Vec<Value> = changes
        .iter()
        .enumerate()
        .map(|(i, (name, product, quantity))| {
            let image = json!({"product": {"S": product}, "quantity": {"N": quantity.to_string()}});
            let image_key = if *name == "REMOVE" {
                "OldImage"
            } else {
                "NewImage"
            };
            // What the destination writes: the source table, the item's keys and creation time
            // (the change's identity, which the aggregator deduplicates on), the image.
            let change = json!({"eventName": name, "eventSource": "aws:dynamodb",
                "tableName": "shop-orders", "dynamodb": {
                    "Keys": {"order": {"S": format!("o{i}")}},
                    "ApproximateCreationDateTime": 1_700_000_000_000u64 + i as u64,
                    image_key: image}});
            let seq = format!("4960000000000000000000000000000000000000000000000{i:02}");
            json!({
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventSource": "aws:kinesis",
                "kinesis": {
                    "sequenceNumber": seq,
                    "partitionKey": product,
                    "approximateArrivalTimestamp": 1_700_000_000.0,
                    "data": base64::engine::general_purpose::STANDARD.encode(change.to_string()),
                }
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records }))
}
