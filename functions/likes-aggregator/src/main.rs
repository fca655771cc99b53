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
use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use serde_json::Value;

type Aggregator = StreamAggregator<Box<dyn ChangeMapper>>;

/// A failed invocation named for what failed (not a Rust type name) in Lambda's `errorType`.
fn failed(error_type: &str, message: impl std::fmt::Display) -> Diagnostic {
    Diagnostic {
        error_type: error_type.to_owned(),
        error_message: message.to_string(),
    }
}

/// Dispatches on the first record's `eventSource`; anything else is refused with an error.
async fn handle(agg: &Aggregator, event: Value) -> Result<Value, Diagnostic> {
    let json = |e: serde_json::Error| failed("ResponseNotJson", e);
    match heatsink::lambda::event_source(&event).unwrap_or("") {
        // Record by record: one that does not decode (data not base64) is the batch's partial
        // failure, not a failed invocation.
        "aws:kinesis" => {
            let (event, undecodable) = heatsink::lambda::kinesis_batch(event);
            let (resp, report) = agg.handle_kinesis(event).await;
            let resp = match undecodable {
                Some(bad) => {
                    tracing::error!(record = %bad.id, reason = %bad.reason, "undecodable record");
                    bad.kinesis_response(resp)
                }
                None => resp,
            };
            tracing::info!(report = %serde_json::to_string(&report).map_err(json)?, "kinesis batch");
            Emf::new(Function::LikesAggregator)
                .aggregate(&report)
                .flush();
            serde_json::to_value(resp).map_err(json)
        }
        "aws:dynamodb" => {
            let (event, undecodable) = heatsink::lambda::dynamodb_batch(event);
            let (resp, report) = agg.handle_dynamodb(event).await;
            let resp = match undecodable {
                Some(bad) => {
                    tracing::error!(record = %bad.id, reason = %bad.reason, "undecodable record");
                    bad.dynamodb_response(resp)
                }
                None => resp,
            };
            tracing::info!(report = %serde_json::to_string(&report).map_err(json)?, "dynamodb batch");
            Emf::new(Function::LikesAggregator)
                .aggregate(&report)
                .flush();
            serde_json::to_value(resp).map_err(json)
        }
        "" => Ok(serde_json::json!({"batchItemFailures": []})),
        other => Err(failed(
            "UnsupportedEventSource",
            format!(
                "unsupported event source {other:?}: this function reads aws:kinesis and aws:dynamodb"
            ),
        )),
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
