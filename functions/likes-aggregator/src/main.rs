//! likes-aggregator: the `liked` table's change records (DynamoDB Streams, or Kinesis Data
//! Streams for DynamoDB) → per-post deltas → conditional absolute flushes, with partial batch
//! responses. All logic is in `heatsink::likes::Aggregator`.

use heatsink::counter::CounterStore;
use heatsink::likes::Aggregator;
use heatsink::metrics::{Emf, Function, LambdaStart, start_lambda};
use heatsink::schema::Table;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

/// Dispatches on the first record's `eventSource`; anything else is refused with an error.
async fn handle(agg: &Aggregator, event: Value) -> Result<Value, Error> {
    let source = event
        .pointer("/Records/0/eventSource")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    match source.as_str() {
        "aws:kinesis" => {
            let (resp, report) = agg.handle_kinesis(serde_json::from_value(event)?).await;
            tracing::info!(report = %serde_json::to_string(&report)?, "kinesis batch");
            Emf::new(Function::LikesAggregator)
                .aggregate(&report)
                .flush();
            Ok(serde_json::to_value(resp)?)
        }
        "aws:dynamodb" => {
            let (resp, report) = agg.handle_dynamodb(serde_json::from_value(event)?).await;
            tracing::info!(report = %serde_json::to_string(&report)?, "dynamodb batch");
            Emf::new(Function::LikesAggregator)
                .aggregate(&report)
                .flush();
            Ok(serde_json::to_value(resp)?)
        }
        "" => Ok(serde_json::json!({"batchItemFailures": []})),
        other => Err(format!("unsupported event source {other:?}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart {
        config,
        schema,
        ddb,
    } = start_lambda().await;
    let agg = Aggregator::new(
        CounterStore::new(ddb, schema.table_name(Table::Counters)),
        Some(aws_sdk_dynamodbstreams::Client::new(&config)),
    );
    let agg = &agg;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        handle(agg, event.payload).await
    }))
    .await
}
