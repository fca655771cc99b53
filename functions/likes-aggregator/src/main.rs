//! likes-aggregator: a table's change records (DynamoDB Streams, or Kinesis Data Streams for
//! DynamoDB) → per-key deltas → conditional absolute flushes, with partial batch responses.
//! The logic is the toolkit's `heatsink::counter::aggregate::StreamAggregator`.
//!
//! It counts the photo app's likes by default; `HEATSINK_COUNTER`, `HEATSINK_COUNT_BY` and
//! `HEATSINK_COUNTERS_TABLE` make it count any table's items per attribute value
//! (`heatsink_photo_app::counting`). With `HEATSINK_SOURCE_ARN` (the stream it is mapped to)
//! it retires a parent shard's writer once every child of it has a watermark
//! (`StreamAggregator::with_lineage`): one listing a minute at most, paced.

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
                    tracing::error!(error_type = "UndecodableRecord", record = %bad.id, reason = %bad.reason, "undecodable record: the batch fails from it");
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
                    tracing::error!(error_type = "UndecodableRecord", record = %bad.id, reason = %bad.reason, "undecodable record: the batch fails from it");
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

/// The aggregator of `counting`, flushing through `ddb` and reading DynamoDB Streams shard
/// lineage through `streams`: what the function runs, built the same way in its tests.
fn aggregator(
    counting: &Counting,
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
) -> Aggregator {
    StreamAggregator::new(
        CounterStore::new(ddb, counting.counters_table.clone()),
        counting.mapper(),
        Some(streams),
    )
    // Kinesis records of another table (a shared stream) are skipped, never counted.
    .with_table(counting.events_table.clone())
    // Flushed watermarks: what the rebuilder's repairs are gated on.
    .with_progress(counting.counter.clone())
}

/// One invocation whose deadline is `deadline_ms` (the context's): [`handle`], cut
/// [`heatsink::lambda::ANSWER_MARGIN`] before the deadline. A cut batch fails as
/// `DeadlineExceeded` naming what is left (all of its records, retried whole by Lambda; the
/// flushes are conditional, so a record flushed before the cut never counts twice).
async fn invoke(agg: &Aggregator, payload: Value, deadline_ms: u64) -> Result<Value, Diagnostic> {
    let records = payload
        .get("Records")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    heatsink::lambda::before_deadline(deadline_ms, handle(agg, payload))
        .await
        .unwrap_or_else(|cut| {
            Err(failed(
                "DeadlineExceeded",
                format!(
                    "{cut}; left: the batch's {records} records, which Lambda retries whole \
                     (flushes are conditional, none counts twice)"
                ),
            ))
        })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart {
        config,
        schema,
        ddb,
    } = start_lambda().await;
    let counting = Counting::from_env(&schema);
    let agg = aggregator(
        &counting,
        ddb,
        aws_sdk_dynamodbstreams::Client::new(&config),
    );
    // Parents retired from the stream's lineage once every child has a watermark (Kinesis and
    // DynamoDB Streams alike), so proven progress does not freeze after a reshard.
    let agg = match std::env::var("HEATSINK_SOURCE_ARN") {
        Ok(arn) => agg.with_lineage(
            heatsink::counter::lineage::for_stream_arn(&config, &arn)
                .map_err(|e| format!("HEATSINK_SOURCE_ARN: {e}"))?,
        ),
        Err(_) => agg,
    };
    let agg = &agg;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        invoke(agg, event.payload, event.context.deadline).await
    }))
    .await
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use base64::Engine;
    use heatsink_photo_app::schema::Schema;
    use heatsink_testkit::cut::Cut;
    use serde_json::json;

    use super::*;

    /// The function's aggregator with every client built as `heatsink::lambda::start` builds
    /// them, reaching DynamoDB and DynamoDB Streams through `cut`.
    fn behind(cut: &Cut) -> (Aggregator, Counting) {
        let loaded = aws_types::SdkConfig::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_types::region::Region::new("eu-west-1"))
            .endpoint_url(cut.endpoint())
            .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
                aws_sdk_dynamodb::config::Credentials::for_tests(),
            ))
            .build();
        let config = heatsink::lambda::sdk_config(&loaded);
        let counting = Counting::from_vars(&Schema::default(), |_| None);
        let ddb = heatsink::metrics::dynamodb_client(&config, &[]);
        let streams = aws_sdk_dynamodbstreams::Client::new(&config);
        (aggregator(&counting, ddb, streams), counting)
    }

    /// A Kinesis event of one like change record (Kinesis Data Streams for DynamoDB) per
    /// sequence number; `data` replaces the record's base64 when given.
    fn likes(counting: &Counting, seqs: &[(&str, Option<&str>)]) -> Value {
        let records: Vec<Value> = seqs
            .iter()
            .map(|(seq, data)| {
                let change = json!({
                    "eventSource": "aws:dynamodb", "eventName": "INSERT",
                    "tableName": counting.events_table,
                    "dynamodb": {"ApproximateCreationDateTime": 1_700_000_000_000u64,
                                 "Keys": {"user": {"S": format!("u{seq}")}, "post": {"S": "p9"}},
                                 "NewImage": {"post": {"S": "p9"}, "user": {"S": format!("u{seq}")}}}
                });
                let b64 = base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&change).expect("json"));
                json!({"eventSource": "aws:kinesis",
                       "eventID": format!("shardId-000000000000:{seq}"),
                       "kinesis": {"sequenceNumber": seq, "partitionKey": "p9",
                                   "data": data.map_or(b64, str::to_owned),
                                   "approximateArrivalTimestamp": 1.7e9}})
            })
            .collect();
        json!({"Records": records})
    }

    fn now_ms() -> u64 {
        heatsink::clock::now_ms()
    }

    fn failures(resp: &Value) -> Vec<String> {
        resp["batchItemFailures"]
            .as_array()
            .expect("a partial batch response")
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// Hung endpoint (the test kit's network cut): the flush's call gives up at the function's
    /// call timeout (`Timeouts::LAMBDA`, 5 s), well before a distant deadline, and the batch
    /// fails from its first record as a partial batch failure.
    #[tokio::test]
    async fn a_hung_counters_table_fails_the_batch_from_its_first_record_within_the_call_timeout() {
        let cut = Cut::start("http://127.0.0.1:9").await.expect("proxy");
        cut.cut();
        let (agg, counting) = behind(&cut);
        let started = Instant::now();
        let resp = invoke(
            &agg,
            likes(&counting, &[("1", None), ("2", None)]),
            now_ms() + 60_000,
        )
        .await
        .expect("a partial batch response, not a failed invocation");
        let took = started.elapsed();
        assert_eq!(failures(&resp), ["1"]);
        assert!(
            took >= Duration::from_millis(1_900) && took <= Duration::from_secs(9),
            "the call gave up at its own timeout (2 s an attempt, 5 s a call): {took:?}"
        );
    }

    /// Hung endpoint with the invocation's deadline nearer than the call timeout: the work is
    /// cut 500 ms before the deadline and the invocation fails as `DeadlineExceeded`, naming
    /// what is left, instead of Lambda killing it at its timeout.
    #[tokio::test]
    async fn a_hung_call_is_cut_half_a_second_before_the_invocations_deadline() {
        let cut = Cut::start("http://127.0.0.1:9").await.expect("proxy");
        cut.cut();
        let (agg, counting) = behind(&cut);
        let started = Instant::now();
        let err = invoke(&agg, likes(&counting, &[("1", None)]), now_ms() + 1_500)
            .await
            .expect_err("cut at the deadline");
        let took = started.elapsed();
        assert_eq!(err.error_type, "DeadlineExceeded");
        assert!(
            err.error_message.contains("1 records"),
            "{}",
            err.error_message
        );
        assert!(!err.error_message.contains('\n'));
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_millis(1_500),
            "cut at the deadline less 500 ms: {took:?}"
        );
    }

    /// The change identity in this function's own feature set (the one `cargo lambda build -p
    /// likes-aggregator` compiles, where `serde_json` has no `preserve_order`): one change
    /// whose record lists its keys, image attributes and string set in two orders, decoded as
    /// the function decodes Kinesis data, has one identity. The workspace's build (with
    /// `preserve_order`) runs the property test of `heatsink::counter::aggregate`.
    #[test]
    fn one_change_in_two_attribute_orders_has_one_identity_in_the_functions_build() {
        let a = br#"{"eventSource":"aws:dynamodb","eventName":"INSERT","tableName":"liked",
            "dynamodb":{"ApproximateCreationDateTime":1700000000000,
              "Keys":{"user":{"S":"u1"},"post":{"S":"p9"}},
              "NewImage":{"user":{"S":"u1"},"post":{"S":"p9"},"liked_at":{"N":"1"},"tags":{"SS":["b","a"]}}}}"#;
        let b = br#"{"tableName":"liked","dynamodb":{
              "NewImage":{"tags":{"SS":["a","b"]},"liked_at":{"N":"1"},"post":{"S":"p9"},"user":{"S":"u1"}},
              "Keys":{"post":{"S":"p9"},"user":{"S":"u1"}},
              "ApproximateCreationDateTime":1700000000000},"eventName":"INSERT","eventSource":"aws:dynamodb"}"#;
        let id = |data: &[u8]| {
            let change = heatsink::lambda::kinesis_change(data)
                .expect("decodes")
                .expect("a change record");
            heatsink::counter::aggregate::change_id(&change).expect("identity")
        };
        let order_kept = serde_json::from_str::<Value>(r#"{"b":1,"a":2}"#)
            .expect("json")
            .to_string()
            .starts_with(r#"{"b""#);
        eprintln!("serde_json preserve_order in the function's build: {order_kept}");
        assert_eq!(id(a), id(b));
    }

    /// A record whose data is not base64 is the batch's partial failure (from that record), not
    /// a failed invocation with a Rust type name as `errorType`; the records before it are
    /// processed. Here it comes first, so no call is made at all: the endpoint is cut, and a call
    /// would hang past this test's bound.
    #[tokio::test]
    async fn a_record_that_is_not_base64_is_a_partial_batch_failure() {
        let cut = Cut::start("http://127.0.0.1:9").await.expect("proxy");
        cut.cut();
        let (agg, counting) = behind(&cut);
        let event = likes(&counting, &[("7", Some("not base64!")), ("8", None)]);
        let resp = tokio::time::timeout(
            Duration::from_secs(1),
            invoke(&agg, event, now_ms() + 60_000),
        )
        .await
        .expect("no call was made")
        .expect("a partial batch response");
        assert_eq!(failures(&resp), ["7"]);
    }
}
