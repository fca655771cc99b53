//! likes-aggregator: a table's change records (DynamoDB Streams, or Kinesis Data Streams for
//! DynamoDB) → per-key deltas → conditional absolute flushes, with partial batch responses.
//! The logic is the toolkit's `heatsink::counter::aggregate::StreamAggregator`.
//!
//! It counts the photo app's likes by default; `HEATSINK_COUNTER`, `HEATSINK_COUNT_BY` and
//! `HEATSINK_COUNTERS_TABLE` make it count any table's items per attribute value
//! (`heatsink_photo_app::counting`).

use heatsink::counter::CounterStore;
use heatsink::counter::aggregate::{ChangeMapper, StreamAggregator};
use heatsink::metrics::Emf;
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{AppEmf, Function};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

type Aggregator = StreamAggregator<Box<dyn ChangeMapper>>;

/// Dispatches on the first record's `eventSource`; anything else is refused with an error.
async fn handle(agg: &Aggregator, event: Value) -> Result<Value, Error> {
    match heatsink::lambda::event_source(&event).unwrap_or("") {
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
    let counting = Counting::from_env(&schema);
    let agg = StreamAggregator::new(
        CounterStore::new(ddb, counting.counters_table.clone()),
        counting.mapper(),
        Some(aws_sdk_dynamodbstreams::Client::new(&config)),
    )
    // Kinesis records of another table (a shared stream) are skipped, never counted.
    .with_table(counting.events_table.clone())
    // Flushed watermarks: what the rebuilder's repairs are gated on.
    .with_progress(counting.counter.clone());
    let agg = &agg;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        handle(agg, event.payload).await
    }))
    .await
}
