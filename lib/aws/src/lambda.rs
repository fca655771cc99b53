//! Lambda pieces: a function's cold start, and helpers for stream events.
//!
//! **No call waits forever**: [`start`] builds every client with
//! [`Timeouts::LAMBDA`](crate::timeouts::Timeouts::LAMBDA) (2 s an attempt, 5 s a call), and
//! [`before_deadline`] cuts an invocation's work [`ANSWER_MARGIN`] (500 ms) before its deadline,
//! so a call ends by the smaller of its own timeout and the invocation's remaining time.
//!
//! **Cold start** ([`start`]): logging set up the way the Lambda runtime asks
//! (`AWS_LAMBDA_LOG_FORMAT` `JSON` or `Text`, JSON when unset, so capacity lines keep their
//! `fields` for Contributor Insights; level from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`, else
//! `info`), the SDK configuration from the environment, and a DynamoDB client that logs the
//! consumed capacity of the tables you name ([`crate::metrics::CapacityLog`]). This is the one
//! place the library reads the environment; call it first in `main`.
//!
//! **Stream events**: [`kinesis_batch`] and [`dynamodb_batch`] decode a batch record by record,
//! so a record that does not decode (a Kinesis `data` that is not base64) becomes a partial
//! batch failure for that record ([`Undecodable`]) instead of a failed invocation; partial batch
//! responses name the first record to retry ([`kinesis_failure`], [`dynamodb_failure`]);
//! [`kinesis_change`] reads the change record inside a Kinesis Data Streams for DynamoDB record,
//! within bounds; and [`dynamodb_event`] turns records read with
//! the DynamoDB Streams SDK into the exact event Lambda would deliver, for local drivers and
//! replays.
//!
//! ```no_run
//! # async fn f() {
//! use heatsink::schema::{KeyAttr, TableSpec};
//! let start = heatsink::lambda::start(|prefix| {
//!     vec![TableSpec::new(format!("{prefix}orders"), KeyAttr::s("customer"))]
//! })
//! .await;
//! let _orders = start.ddb.get_item().table_name(format!("{}orders", start.prefix));
//! # }
//! ```

mod events;

pub use events::{MAX_CHANGE_BYTES, Undecodable, dynamodb_batch, kinesis_batch, kinesis_change};

// Cold start, below: every client is built with `Timeouts::LAMBDA` (2 s an attempt, 5 s a call),
// and `before_deadline` cuts an invocation's work 500 ms before its deadline.

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, KinesisBatchItemFailure};
use serde_json::{Value, json};

use crate::schema::{DEFAULT_PREFIX, TableSpec};

/// The environment variable naming the table prefix of a deployment (default [`DEFAULT_PREFIX`]).
pub const PREFIX_VAR: &str = "HEATSINK_PREFIX";

/// How the Lambda runtime asks functions to log (`AWS_LAMBDA_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, event fields under `fields` (the default).
    Json,
    /// Plain text lines.
    Text,
}

/// The log format and level filter for the Lambda environment: `AWS_LAMBDA_LOG_FORMAT`
/// (`Text`, else JSON) and `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL` (`TRACE`…`ERROR`, `FATAL` read
/// as `error`), else `info`. Pure: the caller passes the variables' values.
pub fn log_settings(
    format: Option<&str>,
    rust_log: Option<&str>,
    lambda_level: Option<&str>,
) -> (LogFormat, String) {
    let format = match format {
        Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
        _ => LogFormat::Json,
    };
    let level = match (rust_log, lambda_level) {
        (Some(filter), _) if !filter.trim().is_empty() => filter.to_owned(),
        (_, Some(level)) => match level.to_ascii_lowercase().as_str() {
            l @ ("trace" | "debug" | "info" | "warn" | "error") => l.to_owned(),
            "fatal" => "error".to_owned(),
            _ => "info".to_owned(),
        },
        _ => "info".to_owned(),
    };
    (format, level)
}

/// Installs the log subscriber for Lambda ([`log_settings`] from the environment): no ANSI
/// colours, no timestamp (CloudWatch stamps every line). Does nothing if a subscriber is already
/// installed.
pub fn init_logging() {
    let var = |name: &str| std::env::var(name).ok();
    let (format, level) = log_settings(
        var("AWS_LAMBDA_LOG_FORMAT").as_deref(),
        var("RUST_LOG").as_deref(),
        var("AWS_LAMBDA_LOG_LEVEL").as_deref(),
    );
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // An error only means a subscriber is already installed; keep that one.
    let _ = match format {
        LogFormat::Json => {
            tracing::subscriber::set_global_default(subscriber(filter, std::io::stdout))
        }
        LogFormat::Text => tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .without_time()
                .with_env_filter(filter)
                .with_writer(std::io::stdout)
                .finish(),
        ),
    };
}

/// The JSON subscriber [`init_logging`] installs, writing to `writer`: event fields nested under
/// `fields` (where Contributor Insights rules look, e.g. `$.fields.partition_key`).
pub fn subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .with_ansi(false)
        .without_time()
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}

/// What a function starts with, read once at cold start by [`start`].
#[derive(Debug, Clone)]
pub struct LambdaStart {
    /// The SDK configuration from the Lambda environment.
    pub config: aws_types::SdkConfig,
    /// The table prefix from `HEATSINK_PREFIX` (default [`DEFAULT_PREFIX`]).
    pub prefix: String,
    /// A DynamoDB client logging consumed capacity on the tables `start` was given.
    pub ddb: aws_sdk_dynamodb::Client,
}

/// A function's cold start: [`init_logging`], the SDK configuration, the prefix from
/// `HEATSINK_PREFIX`, and a capacity-logging DynamoDB client over the tables `tables(prefix)`
/// names.
pub async fn start(tables: impl FnOnce(&str) -> Vec<TableSpec>) -> LambdaStart {
    init_logging();
    // No call waits forever: every client of the function is built from this config.
    let config =
        sdk_config(&aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await);
    let prefix = std::env::var(PREFIX_VAR).unwrap_or_else(|_| DEFAULT_PREFIX.into());
    let ddb = crate::metrics::dynamodb_client(&config, &tables(&prefix));
    LambdaStart {
        config,
        prefix,
        ddb,
    }
}

/// A function's SDK configuration: `loaded` (the environment's) with
/// [`Timeouts::LAMBDA`](crate::timeouts::Timeouts::LAMBDA), 2 s an attempt and 5 s a call, so a
/// hung endpoint fails the call well inside the function's own timeout, and
/// [`Retries::PINNED`](crate::retries::Retries::PINNED), so a change of the SDK's retry defaults
/// does not change how the functions retry a throttle. [`start`] builds every client from it;
/// build a function's other clients from it too.
pub fn sdk_config(loaded: &aws_types::SdkConfig) -> aws_types::SdkConfig {
    crate::retries::Retries::PINNED.apply(&crate::timeouts::Timeouts::LAMBDA.apply(loaded))
}

/// What an invocation keeps for answering once its work is cut at the deadline: 500 ms.
pub const ANSWER_MARGIN: std::time::Duration = std::time::Duration::from_millis(500);

/// An invocation's work cut [`ANSWER_MARGIN`] before its deadline.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the invocation's work was cut {margin_ms} ms before its deadline, after {budget_ms} ms; \
     nothing after the cut was done (retry the event, or give the function more time)"
)]
pub struct DeadlineNear {
    /// The time the work had, ms.
    pub budget_ms: u64,
    /// [`ANSWER_MARGIN`], ms.
    pub margin_ms: u64,
}

/// The time an invocation whose deadline is `deadline_ms` (the Lambda context's `deadline`,
/// ms since the epoch) has for its work at `now_ms`: the time left less [`ANSWER_MARGIN`].
pub fn budget(deadline_ms: u64, now_ms: u64) -> std::time::Duration {
    let margin = u64::try_from(ANSWER_MARGIN.as_millis()).unwrap_or(u64::MAX);
    std::time::Duration::from_millis(deadline_ms.saturating_sub(now_ms).saturating_sub(margin))
}

/// Runs `work` until [`ANSWER_MARGIN`] before `deadline_ms`, so the function answers before
/// Lambda stops it: every call the work makes ends by then, whatever its own timeout
/// ([`crate::timeouts`]). `Err` when the work was cut (it is dropped at the cut).
pub async fn before_deadline<T>(
    deadline_ms: u64,
    work: impl std::future::Future<Output = T>,
) -> Result<T, DeadlineNear> {
    let budget = budget(deadline_ms, crate::clock::now_ms());
    tokio::time::timeout(budget, work)
        .await
        .map_err(|_| DeadlineNear {
            budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
            margin_ms: u64::try_from(ANSWER_MARGIN.as_millis()).unwrap_or(u64::MAX),
        })
}

/// A Kinesis partial-batch failure naming the record to retry from.
pub fn kinesis_failure(id: String) -> KinesisBatchItemFailure {
    let mut f = KinesisBatchItemFailure::default();
    f.item_identifier = Some(id);
    f
}

/// A DynamoDB Streams partial-batch failure naming the record to retry from.
pub fn dynamodb_failure(id: String) -> DynamoDbBatchItemFailure {
    let mut f = DynamoDbBatchItemFailure::default();
    f.item_identifier = Some(id);
    f
}

/// The `eventSource` of an event's first record (`aws:kinesis`, `aws:dynamodb`, …), to dispatch
/// a function that takes several sources; `None` for an empty or unknown shape.
pub fn event_source(event: &Value) -> Option<&str> {
    event
        .pointer("/Records/0/eventSource")
        .and_then(Value::as_str)
}

/// Builds the Lambda event Lambda would deliver for `records` read from the stream `arn`, so
/// demos, tests and replays drive a handler (e.g.
/// [`crate::counter::aggregate::StreamAggregator::handle_dynamodb`]) with exactly what AWS sends:
/// every attribute type as Lambda delivers it, binary as base64. An attribute of a type the
/// SDK does not know fails the conversion (`Err`), never reads as `NULL`.
pub fn dynamodb_event(
    arn: &str,
    records: &[aws_sdk_dynamodbstreams::types::Record],
) -> Result<DynamoDbEvent, serde_json::Error> {
    let records: Vec<Value> = records.iter().map(|r| stream_record_json(arn, r)).collect();
    serde_json::from_value(json!({ "Records": records }))
}

/// One DynamoDB Streams record as the JSON Lambda delivers it (the record of
/// [`dynamodb_event`], and what a [`ChangeMapper`](crate::counter::aggregate::ChangeMapper)
/// reads).
pub(crate) fn stream_record_json(arn: &str, r: &aws_sdk_dynamodbstreams::types::Record) -> Value {
    use crate::ddb::json::stream_image_json;
    let change = r.dynamodb();
    // An absent image is an empty map, as Lambda delivers it.
    let image = |m: Option<&std::collections::HashMap<_, _>>| {
        stream_image_json(Some(m.unwrap_or(&std::collections::HashMap::new())))
    };
    json!({
        "eventID": r.event_id().unwrap_or_default(),
        "eventName": r.event_name().map(|n| n.as_str()).unwrap_or_default(),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": r.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": arn,
        "dynamodb": {
            "ApproximateCreationDateTime": change
                .and_then(|c| c.approximate_creation_date_time())
                .map(|t| t.secs())
                .unwrap_or_default(),
            "Keys": image(change.and_then(|c| c.keys.as_ref())),
            "NewImage": image(change.and_then(|c| c.new_image.as_ref())),
            "OldImage": image(change.and_then(|c| c.old_image.as_ref())),
            "SequenceNumber": change.and_then(|c| c.sequence_number()).unwrap_or_default(),
            "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or_default(),
            "StreamViewType": change
                .and_then(|c| c.stream_view_type())
                .map(|v| v.as_str())
                .unwrap_or("NEW_AND_OLD_IMAGES"),
        }
    })
}

/// Environment variable `var` parsed as `T`, or `default` when unset; a value that does not
/// parse is an error naming the variable (a function refuses to start rather than guess).
pub fn env_or<T: std::str::FromStr>(var: &str, default: T) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(var) {
        Ok(v) => v
            .parse()
            .map_err(|e| format!("{var}={v:?} does not read: {e}")),
        Err(_) => Ok(default),
    }
}

/// An autopilot function's governor from its environment: `HEATSINK_AUTOPILOT_ACT` (`true`
/// acts; unset or `false` is a dry run; anything else is an error, so a typo never acts),
/// `HEATSINK_AUTOPILOT_SUSTAIN` (periods in a row, default 2),
/// `HEATSINK_AUTOPILOT_COOLDOWN_MINUTES` (30), `HEATSINK_AUTOPILOT_PER_HOUR` (4),
/// `HEATSINK_AUTOPILOT_PER_DAY` (10) and `HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION` (1; a
/// directory's loop only).
pub fn pilot_from_env() -> Result<crate::autopilot::PilotConfig, String> {
    let defaults = crate::autopilot::PilotConfig::default();
    let act = match std::env::var("HEATSINK_AUTOPILOT_ACT").as_deref() {
        Ok("true") => true,
        Ok("false") | Err(_) => false,
        Ok(other) => {
            return Err(format!(
                "HEATSINK_AUTOPILOT_ACT={other:?}: set it to true (act) or false (dry run)"
            ));
        }
    };
    Ok(crate::autopilot::PilotConfig {
        sustain: env_or("HEATSINK_AUTOPILOT_SUSTAIN", defaults.sustain)?,
        cooldown_ms: env_or::<u64>("HEATSINK_AUTOPILOT_COOLDOWN_MINUTES", 30)?
            .saturating_mul(60_000),
        per_hour: env_or("HEATSINK_AUTOPILOT_PER_HOUR", defaults.per_hour)?,
        per_day: env_or("HEATSINK_AUTOPILOT_PER_DAY", defaults.per_day)?,
        act,
        per_operation: env_or(
            "HEATSINK_AUTOPILOT_OWNERS_PER_OPERATION",
            defaults.per_operation,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_log_settings_follow_the_runtime_variables() {
        assert_eq!(
            log_settings(None, None, None),
            (LogFormat::Json, "info".into())
        );
        assert_eq!(
            log_settings(Some("Text"), None, Some("DEBUG")),
            (LogFormat::Text, "debug".into())
        );
        assert_eq!(log_settings(Some("JSON"), None, Some("FATAL")).1, "error");
        assert_eq!(
            log_settings(None, Some("heatsink=trace"), Some("WARN")).1,
            "heatsink=trace",
            "RUST_LOG wins"
        );
        assert_eq!(log_settings(None, None, Some("loud")).1, "info");
    }

    /// Lambda delivers a binary key as base64 and the event holds its bytes; this conversion
    /// once turned it into `NULL`.
    #[test]
    fn a_binary_key_reaches_the_event_as_its_bytes_not_null() {
        use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, StreamRecord};
        let bytes = vec![0u8, 7, 255];
        let record = aws_sdk_dynamodbstreams::types::Record::builder()
            .event_id("e1")
            .event_name(OperationType::Insert)
            .dynamodb(
                StreamRecord::builder()
                    .keys("id", AttributeValue::B(bytes.clone().into()))
                    .new_image("id", AttributeValue::B(bytes.clone().into()))
                    .new_image(
                        "tags",
                        AttributeValue::Bs(vec![bytes.clone().into(), vec![1u8].into()]),
                    )
                    .sequence_number("100")
                    .build(),
            )
            .build();
        let event = dynamodb_event("arn:aws:dynamodb:us-east-1:1:table/t/stream/x", &[record])
            .expect("every type converts");
        let change = &event.records[0].change;
        assert_eq!(
            change.keys.get("id"),
            Some(&serde_dynamo::AttributeValue::B(bytes.clone()))
        );
        assert_eq!(
            change.new_image.get("tags"),
            Some(&serde_dynamo::AttributeValue::Bs(vec![bytes, vec![1]]))
        );
        assert!(change.old_image.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_invocations_work_is_cut_half_a_second_before_its_deadline() {
        let now = crate::clock::now_ms();
        assert_eq!(
            budget(now + 3_000, now),
            std::time::Duration::from_millis(2_500)
        );
        assert_eq!(budget(now + 100, now), std::time::Duration::ZERO);
        let hung = std::future::pending::<()>();
        let cut = before_deadline(now + 2_000, hung).await.expect_err("cut");
        assert!(cut.budget_ms <= 1_500 && cut.margin_ms == 500, "{cut:?}");
        assert!(!cut.to_string().contains('\n'));
        assert_eq!(
            before_deadline(now + 2_000, async { 7 }).await.ok(),
            Some(7)
        );
    }

    #[test]
    fn the_event_source_is_read_from_the_first_record() {
        let kinesis = json!({"Records": [{"eventSource": "aws:kinesis"}]});
        assert_eq!(event_source(&kinesis), Some("aws:kinesis"));
        assert_eq!(event_source(&json!({"Records": []})), None);
        assert_eq!(
            kinesis_failure("42".into()).item_identifier.as_deref(),
            Some("42")
        );
    }
}
