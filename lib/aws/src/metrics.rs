//! What the functions tell CloudWatch: Embedded Metric Format (EMF) metrics and the JSON log
//! lines heatsink's Contributor Insights rules read.
//!
//! **EMF** is a JSON log line that carries its own metric declaration: an `_aws` member names the
//! namespace, the dimension set and the metrics, and the values sit beside it as top-level
//! members. CloudWatch Logs turns every such line a Lambda function prints into metric data
//! points. So a function publishes metrics by writing one line to stdout: no `PutMetricData`
//! call, no added latency on the request path, no extra IAM permission and no network failure
//! mode. The price is that a metric exists only once its log line is ingested (seconds).
//!
//! Long-running stream consumers write the same documents once per worker round
//! ([`crate::stream::Worker::emit_emf`]; `heatsink tail --emf` prints them on stderr): shipped to
//! CloudWatch Logs (the awslogs log driver, the CloudWatch agent), they become metrics the same way.
//!
//! The names here are the contract with the alarms and the dashboard (`infra/cdk/lib/
//! observability.ts` and `infra/terraform/dashboard.tf`): namespace [`NAMESPACE`], one dimension
//! [`DIMENSION`] whose value is the emitter's short name ([`Function`]), metric names
//! [`Metric::name`], log field names in [`log_field`]. A unit test reads `observability.ts` and
//! fails if either side drifts; another fails if the Terraform dashboard reads a metric or an
//! emitter not listed here.
//!
//! An [`Emf`] collects the values of one invocation and [`Emf::flush`] prints them, one document
//! per 100 values of a metric (the specification's limit per metric and per document).
//!
//! ```
//! use heatsink::metrics::{Emf, Function, Metric};
//! use std::time::Duration;
//!
//! let mut emf = Emf::new(Function::LikesAggregator);
//! emf.count(Metric::CounterLagEvents, 0)
//!     .seconds(Metric::CounterFlushDelaySeconds, Duration::from_millis(1_250));
//! let mut out = Vec::new();
//! emf.write_to(&mut out, 1_700_000_000_000)?;
//! let doc: serde_json::Value = serde_json::from_slice(&out)?;
//! assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "heatsink");
//! assert_eq!(doc["Function"], "likes-aggregator");
//! assert_eq!(doc["CounterFlushDelaySeconds"], 1.25);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Capacity log lines.** [`dynamodb_client`] installs [`CapacityLog`] on a DynamoDB client: it
//! asks every data-plane call for `ReturnConsumedCapacity=INDEXES` and logs one line per item key
//! the call touched, with the table, the index, the partition key value and the consumed WCU or
//! RCU. [`init_lambda_logging`] makes those lines JSON with the fields nested under `fields`,
//! which is where the insight rules look (`$.fields.partition_key`). Batch calls report capacity
//! per table, not per key, so a batch's capacity is split evenly over its keys (exact for items
//! of the same size class, which counter sub-keys are).
//!
//! Why not the `metrics_cloudwatch_embedded` crate: it is a backend of the `metrics` facade, so
//! it installs one process-global recorder; library code would then depend on a global being set,
//! and tests could not observe one invocation's document in isolation. It also pulls in
//! `metrics` and, by default, `lambda_http`. heatsink needs nine fixed metrics with one
//! dimension, flushed once per invocation (or round): a small typed writer on `serde_json` is less code
//! than the glue around the facade.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::batch_get_item::{
    BatchGetItemError, BatchGetItemInput, BatchGetItemOutput,
};
use aws_sdk_dynamodb::operation::batch_write_item::{
    BatchWriteItemError, BatchWriteItemInput, BatchWriteItemOutput,
};
use aws_sdk_dynamodb::operation::delete_item::{
    DeleteItemError, DeleteItemInput, DeleteItemOutput,
};
use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::query::{QueryError, QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::scan::{ScanError, ScanInput, ScanOutput};
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::{AttributeValue, Capacity, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use base64::Engine;
use serde_json::{Map, Value, json};

use crate::likes::{AggregateReport, RebuildReport};
use crate::schema::{DEFAULT_PREFIX, Schema};
use crate::stream::RoundReport;

/// CloudWatch namespace of every heatsink EMF metric (`EMF_NAMESPACE` in `observability.ts`).
pub const NAMESPACE: &str = "heatsink";
/// The one dimension of every heatsink metric; its value is the emitter's short name.
pub const DIMENSION: &str = "Function";
/// Most metric definitions one EMF directive may hold (specification limit).
pub const MAX_METRICS_PER_DOCUMENT: usize = 100;
/// Most values one metric may carry in one EMF document (specification limit).
pub const MAX_VALUES_PER_METRIC: usize = 100;
/// Most dimension keys one EMF dimension set may hold (specification limit).
pub const MAX_DIMENSIONS_PER_SET: usize = 30;

/// What a metric comes from, a Lambda function or a long-running process: the value of the
/// [`DIMENSION`] dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Function {
    /// `likes-api`: POST a like, GET a count.
    LikesApi,
    /// `likes-aggregator`: change records → conditional counter flushes.
    LikesAggregator,
    /// `count-rebuilder`: recounts from `liked`, writes `fix`.
    CountRebuilder,
    /// `hotkey-controller`: Contributor Insights and alarms → hot-key directory.
    HotkeyController,
    /// `stream-consumer`: not a Lambda function; a long-running [`crate::stream::Worker`]
    /// (`heatsink tail --emf`, or a service embedding one with `Worker::emit_emf`).
    StreamConsumer,
}

impl Function {
    /// The Lambda functions, in the order of `FUNCTION_NAMES` in `infra/cdk/lib/schema.ts`.
    pub const LAMBDAS: [Function; 4] = [
        Function::LikesApi,
        Function::LikesAggregator,
        Function::CountRebuilder,
        Function::HotkeyController,
    ];

    /// Every emitter: the Lambda functions, then the processes of `EMF_PROCESSES` in
    /// `infra/cdk/lib/observability.ts`.
    pub const ALL: [Function; 5] = [
        Function::LikesApi,
        Function::LikesAggregator,
        Function::CountRebuilder,
        Function::HotkeyController,
        Function::StreamConsumer,
    ];

    /// The short name: the dimension value and, for a Lambda function, its crate and binary (no
    /// stack prefix).
    pub const fn name(self) -> &'static str {
        match self {
            Function::LikesApi => "likes-api",
            Function::LikesAggregator => "likes-aggregator",
            Function::CountRebuilder => "count-rebuilder",
            Function::HotkeyController => "hotkey-controller",
            Function::StreamConsumer => "stream-consumer",
        }
    }
}

/// A CloudWatch unit (the subset heatsink's metrics use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A number of things.
    Count,
    /// A duration in seconds.
    Seconds,
}

impl Unit {
    /// The unit's name as CloudWatch spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
        }
    }
}

/// Every metric heatsink emits, each read by the alarms or the dashboard (`EMF_METRICS` in
/// `observability.ts`). The emitter is the [`DIMENSION`] value named on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// `likes-aggregator`: like events applied to the in-memory aggregate but not flushed to
    /// `counters` when the invocation ended (the flush failed; Lambda retries them). 0 after a
    /// good flush.
    CounterLagEvents,
    /// `likes-aggregator`: seconds from the oldest like of a flush (its
    /// `ApproximateCreationDateTime`) to the end of that flush into `counters`.
    CounterFlushDelaySeconds,
    /// `stream-consumer`: shard leases one worker holds at the end of a main-loop round
    /// ([`RoundReport::held`]), a gauge: graph the Maximum per worker, or the Sum over a period
    /// divided by the rounds in it. Summed over the live workers it is the shards being read.
    LeasesHeld,
    /// `stream-consumer`: leases a worker took over in a round because they had expired
    /// ([`RoundReport::expired`]): their holder stopped renewing without releasing (a crash, a
    /// hang, a partition). Each expiry is counted once, by the worker that won the lease; graph
    /// the Sum. Releases at graceful shutdown and rebalancing steals are not expiries.
    LeasesExpired,
    /// `hotkey-controller`: keys currently marked hot in the hot-key directory.
    HotKeys,
    /// `likes-api`: requests refused with 429 by the admission guard.
    AdmissionRejected,
    /// `count-rebuilder`: likes the counters were off by, summed over the posts one run corrected
    /// ([`RebuildReport::corrected`], each change counted by its absolute value: a lost like and a
    /// duplicated one both count 1). 0 after a run that found every counter exact; graph and
    /// alarm on the Sum. Anything above 0 means likes were lost or applied twice upstream of
    /// `counters` (DESIGN.md §3.2: counts are eventually exact, and the gap is observable).
    CounterCorrectionLikes,
    /// `count-rebuilder`: posts whose counter one run corrected (`RebuildReport::corrected`).
    CountersCorrected,
    /// `count-rebuilder`: posts one run left for a later one ([`RebuildReport::unsettled`]):
    /// liked within the quiet period, or their counter moved while the run counted. Steadily
    /// high means posts are never quiet long enough to be checked.
    CountersUnsettled,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 9] = [
        Metric::CounterLagEvents,
        Metric::CounterFlushDelaySeconds,
        Metric::LeasesHeld,
        Metric::LeasesExpired,
        Metric::HotKeys,
        Metric::AdmissionRejected,
        Metric::CounterCorrectionLikes,
        Metric::CountersCorrected,
        Metric::CountersUnsettled,
    ];

    /// The metric name in CloudWatch.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::CounterLagEvents => "CounterLagEvents",
            Metric::CounterFlushDelaySeconds => "CounterFlushDelaySeconds",
            Metric::LeasesHeld => "LeasesHeld",
            Metric::LeasesExpired => "LeasesExpired",
            Metric::HotKeys => "HotKeys",
            Metric::AdmissionRejected => "AdmissionRejected",
            Metric::CounterCorrectionLikes => "CounterCorrectionLikes",
            Metric::CountersCorrected => "CountersCorrected",
            Metric::CountersUnsettled => "CountersUnsettled",
        }
    }

    /// Who emits the metric: its only [`DIMENSION`] value. The dashboards must graph it with
    /// this value, or they show a series nothing writes.
    pub const fn emitter(self) -> Function {
        match self {
            Metric::CounterLagEvents | Metric::CounterFlushDelaySeconds => {
                Function::LikesAggregator
            }
            Metric::LeasesHeld | Metric::LeasesExpired => Function::StreamConsumer,
            Metric::HotKeys => Function::HotkeyController,
            Metric::AdmissionRejected => Function::LikesApi,
            Metric::CounterCorrectionLikes
            | Metric::CountersCorrected
            | Metric::CountersUnsettled => Function::CountRebuilder,
        }
    }

    /// The metric's unit.
    pub const fn unit(self) -> Unit {
        match self {
            Metric::CounterFlushDelaySeconds => Unit::Seconds,
            _ => Unit::Count,
        }
    }
}

// Every metric fits one directive, so one document never needs splitting by metric count.
const _: () = assert!(Metric::ALL.len() <= MAX_METRICS_PER_DOCUMENT);

/// Names of the structured log fields the Contributor Insights rules read (`LOG_FIELDS` in
/// `observability.ts`); the JSON logger nests them under `fields`, e.g. `$.fields.table`.
pub mod log_field {
    /// Full table name, e.g. `heatsink-counters`.
    pub const TABLE: &str = "table";
    /// GSI name on index operations; absent on base-table operations.
    pub const INDEX: &str = "index";
    /// The partition key value a call touched (salted sub-keys included).
    pub const PARTITION_KEY: &str = "partition_key";
    /// Write capacity units the call consumed.
    pub const CONSUMED_WCU: &str = "consumed_wcu";
    /// Read capacity units the call consumed.
    pub const CONSUMED_RCU: &str = "consumed_rcu";
    /// Full Kinesis stream name, on PutRecord(s) lines.
    pub const STREAM: &str = "stream";
    /// Every field, in the order of `observability.ts`.
    pub const ALL: [&str; 6] = [
        TABLE,
        INDEX,
        PARTITION_KEY,
        CONSUMED_WCU,
        CONSUMED_RCU,
        STREAM,
    ];
}

/// Why an EMF document could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EmfError {
    /// EMF values must be JSON numbers; NaN and infinities are not. Fix the computation.
    #[error("{metric}: {value} is not a finite number")]
    NotFinite {
        /// The metric.
        metric: &'static str,
        /// The value refused.
        value: f64,
    },
    /// Writing the line failed (stdout closed?); the metrics of this flush are lost.
    #[error("writing the EMF document: {0}")]
    Write(#[from] std::io::Error),
}

/// The metric values of one invocation (or worker round) of one emitter, written as EMF
/// documents.
#[derive(Debug, Clone)]
pub struct Emf {
    function: Function,
    values: BTreeMap<Metric, Vec<f64>>,
}

impl Emf {
    /// An empty set of values for `function`.
    pub fn new(function: Function) -> Self {
        Self {
            function,
            values: BTreeMap::new(),
        }
    }

    /// Adds a value; EMF values must be numbers, so NaN and infinities are refused.
    pub fn put(&mut self, metric: Metric, value: f64) -> Result<&mut Self, EmfError> {
        if !value.is_finite() {
            return Err(EmfError::NotFinite {
                metric: metric.name(),
                value,
            });
        }
        self.values.entry(metric).or_default().push(value);
        Ok(self)
    }

    /// Adds a count (always a valid value).
    pub fn count(&mut self, metric: Metric, n: u64) -> &mut Self {
        self.values.entry(metric).or_default().push(n as f64);
        self
    }

    /// Adds a duration in seconds (always a valid value).
    pub fn seconds(&mut self, metric: Metric, d: Duration) -> &mut Self {
        self.values.entry(metric).or_default().push(d.as_secs_f64());
        self
    }

    /// Adds the metrics of one aggregator batch: [`Metric::CounterLagEvents`] always, and
    /// [`Metric::CounterFlushDelaySeconds`] when the flush counted likes with a creation time.
    pub fn aggregate(&mut self, report: &AggregateReport) -> &mut Self {
        self.count(Metric::CounterLagEvents, report.unflushed);
        if let Some(ms) = report.flush_delay_ms {
            self.seconds(Metric::CounterFlushDelaySeconds, Duration::from_millis(ms));
        }
        self
    }

    /// Adds the metrics of one stream-worker round: [`Metric::LeasesHeld`] and
    /// [`Metric::LeasesExpired`], both always (a 0 is a data point: "held none", "none expired").
    pub fn lease_round(&mut self, report: &RoundReport) -> &mut Self {
        self.count(Metric::LeasesHeld, report.held as u64)
            .count(Metric::LeasesExpired, report.expired as u64)
    }

    /// Adds the metrics of one count-rebuilder run, all three always (a 0 is a data point: "every
    /// counter was exact", so the graph shows 0 rather than a gap):
    /// [`Metric::CounterCorrectionLikes`], the sum of the absolute changes written into `fix`;
    /// [`Metric::CountersCorrected`], the posts corrected; [`Metric::CountersUnsettled`], the posts
    /// left for a later run. Skipped posts (malformed ids or counters) are logged by the rebuild,
    /// not counted here.
    pub fn rebuild(&mut self, report: &RebuildReport) -> &mut Self {
        let likes = report.corrected.values().fold(0u64, |sum, change| {
            sum.saturating_add(change.unsigned_abs())
        });
        self.count(Metric::CounterCorrectionLikes, likes)
            .count(Metric::CountersCorrected, report.corrected.len() as u64)
            .count(Metric::CountersUnsettled, report.unsettled.len() as u64)
    }

    /// True when no value was added since the last flush.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The EMF documents for the values so far, stamped `timestamp_ms` (ms since the epoch):
    /// one document per 100 values of the busiest metric; none when there are no values.
    pub fn documents(&self, timestamp_ms: u64) -> Vec<Value> {
        let rounds = self
            .values
            .values()
            .map(|v| v.len().div_ceil(MAX_VALUES_PER_METRIC))
            .max()
            .unwrap_or(0);
        (0..rounds)
            .map(|round| {
                let mut doc = Map::new();
                let mut definitions = vec![];
                for (metric, values) in &self.values {
                    let chunk = values
                        .chunks(MAX_VALUES_PER_METRIC)
                        .nth(round)
                        .unwrap_or(&[]);
                    let value = match chunk {
                        [] => continue,
                        [one] => json!(one),
                        many => json!(many),
                    };
                    definitions.push(json!({"Name": metric.name(), "Unit": metric.unit().name()}));
                    doc.insert(metric.name().to_owned(), value);
                }
                doc.insert(DIMENSION.to_owned(), json!(self.function.name()));
                doc.insert(
                    "_aws".to_owned(),
                    json!({
                        "Timestamp": timestamp_ms,
                        "CloudWatchMetrics": [{
                            "Namespace": NAMESPACE,
                            "Dimensions": [[DIMENSION]],
                            "Metrics": definitions,
                        }],
                    }),
                );
                Value::Object(doc)
            })
            .collect()
    }

    /// Writes the documents to `out`, one JSON line each; returns how many were written.
    pub fn write_to(&self, out: &mut impl Write, timestamp_ms: u64) -> Result<usize, EmfError> {
        let docs = self.documents(timestamp_ms);
        for doc in &docs {
            let mut line = serde_json::to_vec(doc).map_err(std::io::Error::from)?;
            line.push(b'\n');
            out.write_all(&line)?;
        }
        out.flush()?;
        Ok(docs.len())
    }

    /// Prints the values to stdout as EMF (stamped now) and clears them: call once per
    /// invocation. A write failure is logged, never returned: metrics must not fail a request.
    pub fn flush(&mut self) {
        if self.is_empty() {
            return;
        }
        let written = self.write_to(&mut std::io::stdout().lock(), crate::stream::now_ms());
        if let Err(e) = written {
            tracing::warn!(error = %e, function = self.function.name(), "EMF metrics lost");
        }
        self.values.clear();
    }
}

/// Installs the JSON log subscriber for Lambda: `tracing` JSON lines on stdout, event fields
/// nested under `fields` (where the insight rules look), no ANSI colours, no timestamp (CloudWatch
/// stamps every line), level from `RUST_LOG` (default `info`). Does nothing if a subscriber is
/// already installed.
pub fn init_lambda_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // An error only means a subscriber is already installed; keep that one.
    let _ = tracing::subscriber::set_global_default(lambda_subscriber(filter, std::io::stdout));
}

fn lambda_subscriber<W>(
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

/// A DynamoDB client for `config` that logs the consumed capacity of every data-plane call
/// ([`CapacityLog`] over the tables of `schema`).
pub fn dynamodb_client(
    config: &aws_config::SdkConfig,
    schema: &Schema,
) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(config)
        .interceptor(CapacityLog::new(schema))
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// What every function starts with, read once at cold start by [`start_lambda`].
#[derive(Debug, Clone)]
pub struct LambdaStart {
    /// The SDK configuration from the Lambda environment.
    pub config: aws_config::SdkConfig,
    /// The tables named by `HEATSINK_PREFIX` (default [`DEFAULT_PREFIX`]).
    pub schema: Schema,
    /// A DynamoDB client logging consumed capacity ([`dynamodb_client`]).
    pub ddb: aws_sdk_dynamodb::Client,
}

/// A function's cold start: JSON logging ([`init_lambda_logging`]), the SDK configuration, the
/// schema from `HEATSINK_PREFIX` and the capacity-logging DynamoDB client. The one place the
/// library reads the environment; each binary in `functions/` calls it first.
pub async fn start_lambda() -> LambdaStart {
    init_lambda_logging();
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let prefix = std::env::var("HEATSINK_PREFIX").unwrap_or_else(|_| DEFAULT_PREFIX.into());
    let schema = Schema::new(prefix);
    let ddb = dynamodb_client(&config, &schema);
    LambdaStart {
        config,
        schema,
        ddb,
    }
}

/// The partition key attributes of one table and of its GSIs.
#[derive(Debug, Clone)]
struct TableKeys {
    partition_key: &'static str,
    gsis: Vec<(&'static str, &'static str)>,
}

/// SDK interceptor: requests `ReturnConsumedCapacity=INDEXES` (unless the caller chose a value)
/// and logs one `info` line per key a call touched, with the [`log_field`] fields and `op`.
///
/// Covers GetItem, PutItem, UpdateItem, DeleteItem, Query, Scan, BatchGetItem and BatchWriteItem
/// (what heatsink calls); other operations pass through unlogged. A Scan has no partition key and
/// logs none. A failed call logs its keys with `error` (the error code) and no capacity.
#[derive(Debug, Clone)]
pub struct CapacityLog {
    tables: Arc<HashMap<String, TableKeys>>,
}

impl CapacityLog {
    /// An interceptor that knows the key attributes of `schema`'s tables.
    pub fn new(schema: &Schema) -> Self {
        let tables = schema
            .tables()
            .into_iter()
            .map(|t| {
                let keys = TableKeys {
                    partition_key: t.partition_key.name,
                    gsis: t
                        .gsis
                        .iter()
                        .map(|g| (g.name, g.partition_key.name))
                        .collect(),
                };
                (t.name, keys)
            })
            .collect();
        Self {
            tables: Arc::new(tables),
        }
    }

    /// The key attribute of `index` (or of the base table) of `table`, if the table is known.
    fn key_attr(&self, table: &str, index: Option<&str>) -> Option<&'static str> {
        let keys = self.tables.get(table)?;
        match index {
            None => Some(keys.partition_key),
            Some(ix) => keys.gsis.iter().find(|(n, _)| *n == ix).map(|(_, pk)| *pk),
        }
    }

    /// A target from an item or key: its partition key, and for a full item its GSI keys.
    fn target(&self, table: &str, attrs: &HashMap<String, AttributeValue>, item: bool) -> Target {
        let value = |attr: &str| attrs.get(attr).and_then(key_string);
        let gsi_keys = match (item, self.tables.get(table)) {
            (true, Some(keys)) => keys
                .gsis
                .iter()
                .filter_map(|(name, pk)| Some(((*name).to_owned(), value(pk)?)))
                .collect(),
            _ => vec![],
        };
        Target {
            table: table.to_owned(),
            index: None,
            partition_key: self.key_attr(table, None).and_then(value),
            gsi_keys,
        }
    }

    /// What a call is about, read from its input; `None` for operations not logged.
    fn call(&self, context: &mut BeforeSerializationInterceptorContextMut<'_>) -> Option<Call> {
        const INDEXES: ReturnConsumedCapacity = ReturnConsumedCapacity::Indexes;
        let input = context.input_mut();
        let table = |t: &Option<String>| t.clone().unwrap_or_default();
        // A single-item call: one target, from its key (or, for a put, the whole item).
        macro_rules! single_item {
            ($input:ty, $op:ident, $attrs:ident, $item:literal) => {
                if let Some(i) = input.downcast_mut::<$input>() {
                    i.return_consumed_capacity.get_or_insert(INDEXES);
                    let t = self.target(&table(&i.table_name), i.$attrs.as_ref()?, $item);
                    return Some(Call::new(Op::$op, vec![t]));
                }
            };
        }
        single_item!(GetItemInput, GetItem, key, false);
        single_item!(PutItemInput, PutItem, item, true);
        single_item!(UpdateItemInput, UpdateItem, key, false);
        single_item!(DeleteItemInput, DeleteItem, key, false);
        if let Some(i) = input.downcast_mut::<QueryInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let t = table(&i.table_name);
            let partition_key = self.key_attr(&t, i.index_name.as_deref()).and_then(|attr| {
                query_partition_key(
                    i.key_condition_expression.as_deref()?,
                    attr,
                    i.expression_attribute_names.as_ref(),
                    i.expression_attribute_values.as_ref()?,
                )
            });
            let target = Target {
                table: t,
                index: i.index_name.clone(),
                partition_key,
                gsi_keys: vec![],
            };
            return Some(Call::new(Op::Query, vec![target]));
        }
        if let Some(i) = input.downcast_mut::<ScanInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let target = Target {
                table: table(&i.table_name),
                index: i.index_name.clone(),
                partition_key: None,
                gsi_keys: vec![],
            };
            return Some(Call::new(Op::Scan, vec![target]));
        }
        if let Some(i) = input.downcast_mut::<BatchGetItemInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let targets = i
                .request_items
                .iter()
                .flatten()
                .flat_map(|(t, ka)| ka.keys.iter().map(|k| self.target(t, k, false)))
                .collect();
            return Some(Call::new(Op::BatchGetItem, targets));
        }
        if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let targets = i
                .request_items
                .iter()
                .flatten()
                .flat_map(|(t, reqs)| {
                    reqs.iter()
                        .filter_map(move |r| match (&r.put_request, &r.delete_request) {
                            (Some(p), _) => Some(self.target(t, &p.item, true)),
                            (None, Some(d)) => Some(self.target(t, &d.key, false)),
                            (None, None) => None,
                        })
                })
                .collect();
            return Some(Call::new(Op::BatchWriteItem, targets));
        }
        None
    }
}

/// The DynamoDB operations [`CapacityLog`] logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    GetItem,
    PutItem,
    UpdateItem,
    DeleteItem,
    Query,
    Scan,
    BatchGetItem,
    BatchWriteItem,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::GetItem => "GetItem",
            Op::PutItem => "PutItem",
            Op::UpdateItem => "UpdateItem",
            Op::DeleteItem => "DeleteItem",
            Op::Query => "Query",
            Op::Scan => "Scan",
            Op::BatchGetItem => "BatchGetItem",
            Op::BatchWriteItem => "BatchWriteItem",
        }
    }

    fn writes(self) -> bool {
        matches!(
            self,
            Op::PutItem | Op::UpdateItem | Op::DeleteItem | Op::BatchWriteItem
        )
    }
}

/// One key a call touched.
#[derive(Debug, Clone)]
struct Target {
    table: String,
    index: Option<String>,
    partition_key: Option<String>,
    /// (GSI name, GSI partition key value) of a written item.
    gsi_keys: Vec<(String, String)>,
}

/// What a call is about, kept in the operation's config bag from serialization to completion.
#[derive(Debug, Clone)]
struct Call {
    op: Op,
    targets: Vec<Target>,
}

impl Storable for Call {
    type Storer = StoreReplace<Self>;
}

impl Call {
    fn new(op: Op, targets: Vec<Target>) -> Self {
        Self { op, targets }
    }

    /// One capacity line per target, sharing out what the call consumed per table and index.
    fn log_consumed(&self, consumed: &[ConsumedCapacity]) {
        let write = self.op.writes();
        // Read or write units where DynamoDB splits them, else the plain capacity units.
        let pick =
            |r: Option<f64>, w: Option<f64>, all: Option<f64>| if write { w } else { r }.or(all);
        let units = |c: Option<&Capacity>, total: &ConsumedCapacity| match c {
            Some(c) => pick(
                c.read_capacity_units,
                c.write_capacity_units,
                c.capacity_units,
            ),
            None => pick(
                total.read_capacity_units,
                total.write_capacity_units,
                total.capacity_units,
            ),
        };
        if consumed.is_empty() {
            for t in &self.targets {
                self.line(
                    &t.table,
                    t.index.as_deref(),
                    t.partition_key.as_deref(),
                    None,
                    None,
                );
            }
            return;
        }
        for cc in consumed {
            let table = cc.table_name.as_deref().unwrap_or_default();
            let mine: Vec<&Target> = self.targets.iter().filter(|t| t.table == table).collect();
            let index = mine.first().and_then(|t| t.index.as_deref());
            let gsis = cc.global_secondary_indexes.as_ref();
            // Index reads consume the index's capacity; base-table calls the table's.
            let main = match index {
                Some(ix) => units(gsis.and_then(|g| g.get(ix)), cc),
                None => units(cc.table.as_ref(), cc),
            };
            let share = |v: Option<f64>, n: usize| v.map(|v| v / n.max(1) as f64);
            if mine.is_empty() {
                self.line(table, index, None, share(main, 1), None);
            }
            for t in &mine {
                self.line(
                    table,
                    index,
                    t.partition_key.as_deref(),
                    share(main, mine.len()),
                    None,
                );
            }
            if !write || index.is_some() {
                continue;
            }
            // A write to a table also writes each GSI whose key the item carries.
            for (gsi, cap) in gsis.into_iter().flatten() {
                let value = units(Some(cap), cc);
                let holders: Vec<&str> = mine
                    .iter()
                    .filter_map(|t| t.gsi_keys.iter().find(|(g, _)| g == gsi))
                    .map(|(_, v)| v.as_str())
                    .collect();
                if holders.is_empty() {
                    self.line(table, Some(gsi), None, value, None);
                }
                for pk in &holders {
                    self.line(
                        table,
                        Some(gsi),
                        Some(pk),
                        share(value, holders.len()),
                        None,
                    );
                }
            }
        }
    }

    /// One line per target of a failed call, with the error code and no capacity.
    fn log_failed(&self, code: &str) {
        for t in &self.targets {
            self.line(
                &t.table,
                t.index.as_deref(),
                t.partition_key.as_deref(),
                None,
                Some(code),
            );
        }
    }

    fn line(
        &self,
        table: &str,
        index: Option<&str>,
        partition_key: Option<&str>,
        units: Option<f64>,
        error: Option<&str>,
    ) {
        use log_field::{CONSUMED_RCU, CONSUMED_WCU, INDEX, PARTITION_KEY, TABLE};
        let (wcu, rcu) = if self.op.writes() {
            (units, None)
        } else {
            (None, units)
        };
        tracing::info!(
            op = self.op.name(),
            { TABLE } = table,
            { INDEX } = index,
            { PARTITION_KEY } = partition_key,
            { CONSUMED_WCU } = wcu,
            { CONSUMED_RCU } = rcu,
            error,
            "dynamodb capacity"
        );
    }
}

impl Intercept for CapacityLog {
    fn name(&self) -> &'static str {
        "heatsink::metrics::CapacityLog"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(call) = self.call(context) {
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(call) = cfg.load::<Call>() else {
            return Ok(());
        };
        match context.output_or_error() {
            Some(Ok(_)) => call.log_consumed(&consumed(call.op, context)),
            Some(Err(_)) => call.log_failed(&failure_code(call.op, context)),
            None => {}
        }
        Ok(())
    }
}

/// The consumed capacity in a successful call's output.
fn consumed(op: Op, context: &FinalizerInterceptorContextRef<'_>) -> Vec<ConsumedCapacity> {
    let Some(Ok(out)) = context.output_or_error() else {
        return vec![];
    };
    // Each output type has its own `consumed_capacity` (no shared trait): one arm per type.
    macro_rules! one {
        ($output:ty) => {
            out.downcast_ref::<$output>()
                .and_then(|o| o.consumed_capacity())
                .cloned()
                .into_iter()
                .collect()
        };
    }
    macro_rules! many {
        ($output:ty) => {
            out.downcast_ref::<$output>()
                .map(|o| o.consumed_capacity().to_vec())
                .unwrap_or_default()
        };
    }
    match op {
        Op::GetItem => one!(GetItemOutput),
        Op::PutItem => one!(PutItemOutput),
        Op::UpdateItem => one!(UpdateItemOutput),
        Op::DeleteItem => one!(DeleteItemOutput),
        Op::Query => one!(QueryOutput),
        Op::Scan => one!(ScanOutput),
        Op::BatchGetItem => many!(BatchGetItemOutput),
        Op::BatchWriteItem => many!(BatchWriteItemOutput),
    }
}

/// The error code of a failed call (`ThrottlingException`, `ConditionalCheckFailedException`);
/// `transport` when no response came back, `unknown` when one came without a code.
fn failure_code(op: Op, context: &FinalizerInterceptorContextRef<'_>) -> String {
    let Some(Err(err)) = context.output_or_error() else {
        return "unknown".to_owned();
    };
    let Some(e) = err.as_operation_error() else {
        return "transport".to_owned();
    };
    macro_rules! code {
        ($error:ty) => {
            e.downcast_ref::<$error>().and_then(|e| e.code())
        };
    }
    let code = match op {
        Op::GetItem => code!(GetItemError),
        Op::PutItem => code!(PutItemError),
        Op::UpdateItem => code!(UpdateItemError),
        Op::DeleteItem => code!(DeleteItemError),
        Op::Query => code!(QueryError),
        Op::Scan => code!(ScanError),
        Op::BatchGetItem => code!(BatchGetItemError),
        Op::BatchWriteItem => code!(BatchWriteItemError),
    };
    code.unwrap_or("unknown").to_owned()
}

/// A key value as text: S as is, N as its digits, B as base64; other types are not keys.
fn key_string(v: &AttributeValue) -> Option<String> {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => Some(s.clone()),
        AttributeValue::B(b) => Some(base64::engine::general_purpose::STANDARD.encode(b.as_ref())),
        _ => None,
    }
}

/// The value a key condition (`pk = :pk AND begins_with(sk, :s)`, `#p = :p`) gives `attr`.
fn query_partition_key(
    condition: &str,
    attr: &str,
    names: Option<&HashMap<String, String>>,
    values: &HashMap<String, AttributeValue>,
) -> Option<String> {
    condition
        .split(" AND ")
        .flat_map(|c| c.split(" and "))
        .find_map(|clause| {
            let clause = clause.trim().trim_start_matches('(').trim_end_matches(')');
            let (lhs, rhs) = clause.split_once('=')?;
            let (lhs, rhs) = (lhs.trim(), rhs.trim());
            if lhs.ends_with(['<', '>']) || rhs.starts_with(['<', '>', '=']) {
                return None;
            }
            let name = match lhs.strip_prefix('#') {
                Some(_) => names?.get(lhs)?.as_str(),
                None => lhs,
            };
            (name == attr)
                .then(|| values.get(rhs))
                .flatten()
                .and_then(key_string)
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use aws_lambda_events::kinesis::KinesisEvent;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ResourceNotFoundException,
    };
    use aws_smithy_mocks::mock;
    use base64::Engine;

    use super::*;
    use crate::counter::CounterStore;
    use crate::likes::{Aggregator, approximate_creation_ms};
    use crate::schema::Table;
    use crate::testing::mocked;

    fn repo_file(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The `key: 'value'` pairs of `export const NAME = { … }` in a TypeScript file.
    fn ts_object(ts: &str, name: &str) -> BTreeMap<String, String> {
        let start = ts
            .find(&format!("export const {name} = {{"))
            .unwrap_or_else(|| panic!("{name} not found"));
        let body = &ts[start..];
        let body = &body[..body.find("} as const").expect("object end")];
        body.lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("/*") && !l.starts_with('*') && !l.starts_with("//"))
            .filter_map(|l| {
                let (k, v) = l.split_once(": '")?;
                Some((k.to_owned(), v.split('\'').next()?.to_owned()))
            })
            .collect()
    }

    fn ts_string(ts: &str, name: &str) -> String {
        let start = ts
            .find(&format!("export const {name} = '"))
            .unwrap_or_else(|| panic!("{name} not found"));
        ts[start..].split('\'').nth(1).expect("string").to_owned()
    }

    #[test]
    fn names_match_the_cdk_contract_both_ways() {
        let ts = repo_file("infra/cdk/lib/observability.ts");
        assert_eq!(ts_string(&ts, "EMF_NAMESPACE"), NAMESPACE);

        let ts_metrics: BTreeSet<String> = ts_object(&ts, "EMF_METRICS").into_values().collect();
        let ours: BTreeSet<String> = Metric::ALL.iter().map(|m| m.name().to_owned()).collect();
        assert_eq!(ts_metrics, ours, "EMF_METRICS vs Metric::ALL");
        assert_eq!(ts_metrics.len(), 9, "parsed every metric");

        let ts_fields: BTreeSet<String> = ts_object(&ts, "LOG_FIELDS").into_values().collect();
        let ours: BTreeSet<String> = log_field::ALL
            .iter()
            .map(|f| format!("fields.{f}"))
            .collect();
        assert_eq!(ts_fields, ours, "LOG_FIELDS vs log_field::ALL");

        let schema_ts = repo_file("infra/cdk/lib/schema.ts");
        let line = schema_ts
            .lines()
            .find(|l| l.starts_with("export const FUNCTION_NAMES"))
            .expect("FUNCTION_NAMES");
        let names: Vec<&str> = line.split('\'').skip(1).step_by(2).collect();
        let ours: Vec<&str> = Function::LAMBDAS.iter().map(|f| f.name()).collect();
        assert_eq!(names, ours, "FUNCTION_NAMES vs Function::LAMBDAS");

        // Every emitter is a Lambda function or one of EMF_PROCESSES, and nothing else.
        let processes: Vec<String> = ts_object(&ts, "EMF_PROCESSES").into_values().collect();
        assert_eq!(processes, ["stream-consumer"], "parsed EMF_PROCESSES");
        let emitters: Vec<&str> = names
            .into_iter()
            .chain(processes.iter().map(String::as_str))
            .collect();
        let ours: Vec<&str> = Function::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            emitters, ours,
            "FUNCTION_NAMES + EMF_PROCESSES vs Function::ALL"
        );
    }

    #[test]
    fn the_terraform_dashboard_reads_only_metrics_we_emit() {
        let tf = repo_file("infra/terraform/dashboard.tf");
        let mut seen = 0;
        for line in tf
            .lines()
            .filter(|l| l.contains(&format!("[\"{NAMESPACE}\", \"")))
        {
            let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            assert_eq!(quoted[0], NAMESPACE);
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == quoted[1])
                .unwrap_or_else(|| panic!("not a metric we emit: {line}"));
            assert_eq!(quoted[2], DIMENSION, "{line}");
            assert_eq!(
                quoted[3],
                metric.emitter().name(),
                "graphed with an emitter that never writes it: {line}"
            );
            seen += 1;
        }
        assert_eq!(seen, Metric::ALL.len(), "one dashboard series per metric");
    }

    /// `key = value` attributes of one HCL block, quotes kept off string values.
    fn hcl_attributes(block: &str) -> BTreeMap<&str, &str> {
        block
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect()
    }

    #[test]
    fn the_terraform_alarms_on_our_metrics_read_them_from_their_emitter() {
        let tf = repo_file("infra/terraform/alarms.tf");
        let mut seen = BTreeSet::new();
        for block in tf.split("resource \"aws_cloudwatch_metric_alarm\"").skip(1) {
            let attrs = hcl_attributes(block);
            if attrs.get("namespace") != Some(&NAMESPACE) {
                continue;
            }
            let name = attrs["metric_name"];
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == name)
                .unwrap_or_else(|| panic!("alarm on a metric we do not emit: {name}"));
            let dimensions = attrs["dimensions"];
            assert_eq!(
                dimensions,
                format!("{{ {DIMENSION} = \"{}\" }}", metric.emitter().name()),
                "{name}: alarmed with an emitter that never writes it"
            );
            seen.insert(name);
        }
        assert_eq!(
            seen,
            BTreeSet::from([Metric::CounterCorrectionLikes.name()]),
            "parsed the counter-corrections alarm"
        );
    }

    /// Asserts `doc` is a valid EMF document per the specification; returns its metric values.
    fn check_emf(doc: &Value) -> BTreeMap<String, Vec<f64>> {
        let root = doc.as_object().expect("root is an object");
        let aws = root["_aws"].as_object().expect("_aws object");
        let ts = aws["Timestamp"]
            .as_u64()
            .expect("Timestamp: integer ms since the epoch");
        assert!(ts > 1_000_000_000_000, "Timestamp is in ms, not s");
        let directives = aws["CloudWatchMetrics"].as_array().expect("directives");
        assert_eq!(directives.len(), 1);
        let d = &directives[0];
        assert_eq!(d["Namespace"], NAMESPACE);
        let sets = d["Dimensions"].as_array().expect("dimension sets");
        for set in sets {
            let set = set.as_array().expect("a dimension set is an array");
            assert!(!set.is_empty() && set.len() <= MAX_DIMENSIONS_PER_SET);
            for key in set {
                let key = key.as_str().expect("dimension keys are strings");
                assert!(root[key].is_string(), "dimension {key} is a string member");
            }
        }
        assert_eq!(sets, &vec![json!([DIMENSION])]);
        let defs = d["Metrics"].as_array().expect("metric definitions");
        assert!(!defs.is_empty() && defs.len() <= MAX_METRICS_PER_DOCUMENT);
        let mut out = BTreeMap::new();
        for def in defs {
            let name = def["Name"].as_str().expect("Name");
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == name)
                .expect("known");
            assert_eq!(def["Unit"], metric.unit().name());
            let values: Vec<f64> = match &root[name] {
                Value::Number(n) => vec![n.as_f64().expect("f64")],
                Value::Array(a) => {
                    assert!(a.len() <= MAX_VALUES_PER_METRIC);
                    a.iter()
                        .map(|v| v.as_f64().expect("values are numbers"))
                        .collect()
                }
                other => panic!("{name}: {other} is not a number"),
            };
            out.insert(name.to_owned(), values);
        }
        out
    }

    /// What `emf` writes, which must be exactly one line, parsed.
    fn only_line(emf: &Emf) -> Value {
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_000).expect("write"), 1);
        let mut docs = parse_lines(&out);
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    fn parse_lines(out: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
            .collect()
    }

    #[test]
    fn an_emf_document_follows_the_specification() {
        let mut emf = Emf::new(Function::LikesAggregator);
        for m in Metric::ALL {
            emf.count(m, 3);
        }
        emf.seconds(
            Metric::CounterFlushDelaySeconds,
            Duration::from_millis(2_500),
        );
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_123).expect("write"), 1);
        let docs = parse_lines(&out);
        assert_eq!(docs[0]["_aws"]["Timestamp"], 1_700_000_000_123_u64);
        assert_eq!(docs[0][DIMENSION], "likes-aggregator");
        let values = check_emf(&docs[0]);
        assert_eq!(values.len(), Metric::ALL.len());
        assert_eq!(values["CounterFlushDelaySeconds"], vec![3.0, 2.5]);
        assert_eq!(values["HotKeys"], vec![3.0]);
    }

    #[test]
    fn more_than_100_values_are_split_over_documents() {
        let mut emf = Emf::new(Function::HotkeyController);
        for i in 0..250 {
            emf.count(Metric::HotKeys, i);
        }
        emf.count(Metric::AdmissionRejected, 7);
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_000).expect("write"), 3);
        let docs: Vec<_> = parse_lines(&out).iter().map(check_emf).collect();
        let hot: Vec<f64> = docs.iter().flat_map(|d| d["HotKeys"].clone()).collect();
        assert_eq!(
            hot,
            (0..250).map(|i| i as f64).collect::<Vec<_>>(),
            "every value, in order"
        );
        assert_eq!(docs[0]["AdmissionRejected"], vec![7.0]);
        assert!(
            !docs[1].contains_key("AdmissionRejected"),
            "declared only where it has a value"
        );
    }

    #[test]
    fn a_worker_round_is_one_document_from_the_stream_consumer() {
        let report = RoundReport {
            held: 3,
            taken: 2,
            expired: 1,
            stolen: 1,
            lost: 1,
        };
        let doc = only_line(Emf::new(Function::StreamConsumer).lease_round(&report));
        assert_eq!(doc[DIMENSION], "stream-consumer");
        let values = check_emf(&doc);
        assert_eq!(
            values,
            BTreeMap::from([
                ("LeasesExpired".to_owned(), vec![1.0]),
                ("LeasesHeld".to_owned(), vec![3.0]),
            ]),
            "held after the round and expiries taken over; takes, steals and losses are not metrics"
        );

        // An idle round still reports: holding nothing is a value the dashboard should show.
        let mut emf = Emf::new(Function::StreamConsumer);
        let idle = check_emf(
            &emf.lease_round(&RoundReport::default())
                .documents(1_700_000_000_000)[0],
        );
        assert_eq!(idle["LeasesHeld"], vec![0.0]);
        assert_eq!(idle["LeasesExpired"], vec![0.0]);
    }

    #[test]
    fn a_rebuild_run_is_one_document_from_the_count_rebuilder() {
        let report = RebuildReport {
            likes_scanned: 1_000,
            posts_checked: 40,
            corrected: BTreeMap::from([
                ("p1".to_owned(), 3),
                ("p2".to_owned(), -2),
                ("p3".to_owned(), 1),
            ]),
            unsettled: vec!["p4".to_owned(), "p5".to_owned()],
            skipped: vec!["bad#id".to_owned()],
        };
        let doc = only_line(Emf::new(Function::CountRebuilder).rebuild(&report));
        assert_eq!(doc[DIMENSION], "count-rebuilder");
        assert_eq!(
            check_emf(&doc),
            BTreeMap::from([
                ("CounterCorrectionLikes".to_owned(), vec![6.0]),
                ("CountersCorrected".to_owned(), vec![3.0]),
                ("CountersUnsettled".to_owned(), vec![2.0]),
            ]),
            "likes off by |+3| + |-2| + |+1|, over three posts; two left for later; \
             scanned, checked and skipped are not metrics"
        );
        for m in [
            Metric::CounterCorrectionLikes,
            Metric::CountersCorrected,
            Metric::CountersUnsettled,
        ] {
            assert_eq!(m.emitter(), Function::CountRebuilder);
            assert_eq!(m.unit(), Unit::Count);
        }

        // A run that found every counter exact still reports, so the graph shows 0, not a gap.
        let mut emf = Emf::new(Function::CountRebuilder);
        let exact = check_emf(
            &emf.rebuild(&RebuildReport::default())
                .documents(1_700_000_000_000)[0],
        );
        assert_eq!(exact["CounterCorrectionLikes"], vec![0.0]);
        assert_eq!(exact["CountersCorrected"], vec![0.0]);
        assert_eq!(exact["CountersUnsettled"], vec![0.0]);

        // Changes too large to add up saturate instead of wrapping.
        let huge = RebuildReport {
            corrected: BTreeMap::from([("a".to_owned(), i64::MIN), ("b".to_owned(), i64::MAX)]),
            ..RebuildReport::default()
        };
        let mut emf = Emf::new(Function::CountRebuilder);
        let values = check_emf(&emf.rebuild(&huge).documents(1_700_000_000_000)[0]);
        assert_eq!(values["CounterCorrectionLikes"], vec![u64::MAX as f64]);
    }

    #[test]
    fn non_numbers_are_refused_and_an_empty_set_writes_nothing() {
        let mut emf = Emf::new(Function::LikesApi);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(
                emf.put(Metric::AdmissionRejected, bad),
                Err(EmfError::NotFinite { .. })
            ));
        }
        assert!(emf.is_empty());
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1).expect("write"), 0);
        assert!(out.is_empty());
        emf.put(Metric::AdmissionRejected, 1.5).expect("finite");
        assert_eq!(emf.documents(1).len(), 1);
    }

    #[test]
    fn creation_times_in_seconds_milliseconds_and_microseconds_agree() {
        let at = |t: Value| {
            approximate_creation_ms(&json!({"dynamodb": {"ApproximateCreationDateTime": t}}))
        };
        let ms = 1_700_000_000_123_u64;
        assert_eq!(at(json!(1_700_000_000.123)), Some(ms));
        assert_eq!(at(json!(ms)), Some(ms));
        assert_eq!(at(json!(ms * 1000 + 456)), Some(ms));
        assert_eq!(
            at(json!(0)),
            None,
            "aws_lambda_events' default means unknown"
        );
        assert_eq!(approximate_creation_ms(&json!({"dynamodb": {}})), None);
    }

    #[test]
    fn a_key_condition_names_the_partition_key_value() {
        let vals = HashMap::from([
            (":pk".to_owned(), AttributeValue::S("likes#p9".into())),
            (":s".to_owned(), AttributeValue::S("w#".into())),
            (":n".to_owned(), AttributeValue::N("42".into())),
        ]);
        let names = HashMap::from([("#p".to_owned(), "pk".to_owned())]);
        let q = |c: &str, attr: &str| query_partition_key(c, attr, Some(&names), &vals);
        assert_eq!(q("pk = :pk", "pk").as_deref(), Some("likes#p9"));
        assert_eq!(
            q("#p = :pk AND begins_with(sk, :s)", "pk").as_deref(),
            Some("likes#p9")
        );
        assert_eq!(
            q("(shard = :n) and sk >= :s", "shard").as_deref(),
            Some("42")
        );
        assert_eq!(
            q("sk <= :s", "sk"),
            None,
            "a range condition is not a partition key"
        );
        assert_eq!(q("other = :pk", "pk"), None);
    }

    /// Installs the capacity logger: `mocked!(aws_sdk_dynamodb with capacity_log; rules...)`.
    fn capacity_log(conf: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
        conf.interceptor(CapacityLog::new(&Schema::default()))
    }

    fn consumed(table: &str, units: f64) -> ConsumedCapacity {
        ConsumedCapacity::builder()
            .table_name(table)
            .capacity_units(units)
            .table(Capacity::builder().capacity_units(units).build())
            .build()
    }

    /// Captures the JSON lines [`lambda_subscriber`] writes while the guard lives.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Tests that log through [`CapacityLog`] take turns: tracing caches each callsite's
    /// interest process-wide, so a test thread without a subscriber racing one with a
    /// thread-local subscriber can make the latter miss lines.
    static LOG_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    impl Captured {
        fn start(&self) -> tracing::subscriber::DefaultGuard {
            let me = self.clone();
            let filter = tracing_subscriber::EnvFilter::new("heatsink=info");
            tracing::subscriber::set_default(lambda_subscriber(filter, move || me.clone()))
        }
        fn capacity_lines(&self) -> Vec<Value> {
            parse_lines(&self.0.lock().expect("lock"))
                .into_iter()
                .filter(|l| l["fields"]["message"] == "dynamodb capacity")
                .collect()
        }
    }

    /// `$.a.b` of `line`, for a LOG_FIELDS path `a.b` read from observability.ts.
    fn at_path<'v>(line: &'v Value, path: &str) -> &'v Value {
        path.split('.').fold(line, |v, k| &v[k])
    }

    fn log_paths() -> BTreeMap<String, String> {
        ts_object(&repo_file("infra/cdk/lib/observability.ts"), "LOG_FIELDS")
    }

    const SHARD: &str = "shardId-000000000000";

    /// A Kinesis record carrying a DynamoDB change (Kinesis Data Streams for DynamoDB).
    fn kinesis_record(seq: u64, change: &str) -> Value {
        json!({
            "eventSource": "aws:kinesis",
            "eventID": format!("{SHARD}:{seq}"),
            "kinesis": {
                "data": base64::engine::general_purpose::STANDARD.encode(change),
                "sequenceNumber": seq.to_string(),
                "partitionKey": "ignored",
                "approximateArrivalTimestamp": 1.7e9,
            },
        })
    }

    fn like(post: &str, user: &str, created_ms: u64) -> String {
        json!({
            "eventName": "INSERT",
            "dynamodb": {
                "ApproximateCreationDateTime": created_ms,
                "ApproximateCreationDateTimePrecision": "MILLISECOND",
                "NewImage": {"post": {"S": post}, "user": {"S": user}},
            },
        })
        .to_string()
    }

    fn kinesis_event(records: Vec<Value>) -> KinesisEvent {
        serde_json::from_value(json!({ "Records": records })).expect("a Kinesis event")
    }

    fn aggregator(ddb: aws_sdk_dynamodb::Client) -> Aggregator {
        let table = Schema::default().table_name(Table::Counters);
        Aggregator::new(CounterStore::new(ddb, table), None)
    }

    #[tokio::test]
    async fn a_flushed_batch_has_no_lag_and_its_oldest_like_sets_the_flush_delay() {
        let counters = Schema::default().table_name(Table::Counters);
        let c = counters.clone();
        let get =
            mock!(aws_sdk_dynamodb::Client::batch_get_item).then_compute_output(move |input| {
                assert_eq!(
                    input.return_consumed_capacity,
                    Some(ReturnConsumedCapacity::Indexes)
                );
                BatchGetItemOutput::builder()
                    .consumed_capacity(consumed(&c, 1.0))
                    .build()
            });
        let c = counters.clone();
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_compute_output(move |input| {
            assert_eq!(
                input.return_consumed_capacity,
                Some(ReturnConsumedCapacity::Indexes)
            );
            PutItemOutput::builder()
                .consumed_capacity(consumed(&c, 1.0))
                .build()
        });
        let agg = aggregator(mocked!(aws_sdk_dynamodb with capacity_log; get, put));
        let now = crate::stream::now_ms();
        let event = kinesis_event(vec![
            kinesis_record(101, &like("p9", "u1", now - 5_000)),
            kinesis_record(102, &like("p9", "u2", now - 30_000)),
            kinesis_record(103, &like("p9", "u3", now - 10_000)),
        ]);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        let (resp, report) = agg.handle_kinesis(event).await;
        drop((guard, turn));
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.flush.counted, 3);

        let mut emf = Emf::new(Function::LikesAggregator);
        let docs = emf.aggregate(&report).documents(now);
        let values = check_emf(&docs[0]);
        assert_eq!(
            values["CounterLagEvents"],
            vec![0.0],
            "everything applied was flushed"
        );
        let delay = values["CounterFlushDelaySeconds"][0];
        assert!(
            (30.0..40.0).contains(&delay),
            "the oldest like (30 s) sets the delay: {delay}"
        );

        // The flush's reads and writes are logged where the insight rules look.
        let paths = log_paths();
        let lines = logs.capacity_lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        for line in &lines {
            assert_eq!(at_path(line, &paths["table"]), &json!(counters));
            assert_eq!(at_path(line, &paths["partitionKey"]), "likes#p9");
            assert!(
                at_path(line, &paths["index"]).is_null(),
                "a base-table call has no index"
            );
        }
        let get_line = lines
            .iter()
            .find(|l| l["fields"]["op"] == "BatchGetItem")
            .expect("read");
        assert_eq!(at_path(get_line, &paths["consumedRcu"]), 1.0);
        assert!(at_path(get_line, &paths["consumedWcu"]).is_null());
        let put_line = lines
            .iter()
            .find(|l| l["fields"]["op"] == "PutItem")
            .expect("write");
        assert_eq!(at_path(put_line, &paths["consumedWcu"]), 1.0);
    }

    #[tokio::test]
    async fn a_failed_flush_leaves_every_applied_like_as_lag() {
        let get = mock!(aws_sdk_dynamodb::Client::batch_get_item)
            .then_output(|| BatchGetItemOutput::builder().build());
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(|| {
            let meta = ErrorMetadata::builder()
                .code("ResourceNotFoundException")
                .build();
            PutItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder().meta(meta).build(),
            )
        });
        let agg = aggregator(mocked!(aws_sdk_dynamodb with capacity_log; get, put));
        let now = crate::stream::now_ms();
        // Two likes, then a poison record: the two are applied, the rest waits for the retry.
        let event = kinesis_event(vec![
            kinesis_record(201, &like("p1", "u1", now)),
            kinesis_record(202, &like("p2", "u1", now)),
            kinesis_record(203, "not json"),
            kinesis_record(204, &like("p1", "u2", now)),
        ]);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        let (resp, report) = agg.handle_kinesis(event).await;
        drop((guard, turn));
        assert_eq!(resp.batch_item_failures.len(), 1);
        let refused: Vec<_> = logs
            .capacity_lines()
            .into_iter()
            .filter(|l| l["fields"]["op"] == "PutItem")
            .collect();
        assert_eq!(refused.len(), 2, "one line per post flushed: {refused:?}");
        assert!(
            refused
                .iter()
                .all(|l| l["fields"]["error"] == "ResourceNotFoundException")
        );

        let mut emf = Emf::new(Function::LikesAggregator);
        let values = check_emf(&emf.aggregate(&report).documents(now)[0]);
        assert_eq!(values["CounterLagEvents"], vec![2.0]);
        assert!(
            !values.contains_key("CounterFlushDelaySeconds"),
            "nothing was flushed"
        );
    }

    #[tokio::test]
    async fn index_reads_and_refused_writes_are_logged_with_their_keys() {
        let schema = Schema::default();
        let posts = schema.table(Table::Posts);
        let gsi = posts.gsis[0].clone();
        let table = posts.name.clone();
        let t = table.clone();
        let ix = gsi.name;
        let query = mock!(aws_sdk_dynamodb::Client::query).then_output(move || {
            let cap = Capacity::builder().capacity_units(0.5).build();
            QueryOutput::builder()
                .consumed_capacity(
                    ConsumedCapacity::builder()
                        .table_name(&t)
                        .capacity_units(0.5)
                        .global_secondary_indexes(ix, cap)
                        .build(),
                )
                .build()
        });
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(|| {
            let meta = ErrorMetadata::builder()
                .code("ConditionalCheckFailedException")
                .build();
            PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta)
                    .build(),
            )
        });
        let ddb = mocked!(aws_sdk_dynamodb with capacity_log; query, put);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        ddb.query()
            .table_name(&table)
            .index_name(gsi.name)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", gsi.partition_key.name)
            .expression_attribute_values(":s", AttributeValue::S("alice#3".into()))
            .send()
            .await
            .expect("query");
        let liked = schema.table_name(Table::Liked);
        let refused = ddb
            .put_item()
            .table_name(&liked)
            .item("user", AttributeValue::S("u1".into()))
            .item("post", AttributeValue::S("p9".into()))
            .send()
            .await;
        drop((guard, turn));
        assert!(refused.is_err());

        let paths = log_paths();
        let lines = logs.capacity_lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(at_path(&lines[0], &paths["table"]), &json!(table));
        assert_eq!(at_path(&lines[0], &paths["index"]), gsi.name);
        assert_eq!(at_path(&lines[0], &paths["partitionKey"]), "alice#3");
        assert_eq!(at_path(&lines[0], &paths["consumedRcu"]), 0.5);
        assert_eq!(at_path(&lines[1], &paths["table"]), &json!(liked));
        assert_eq!(at_path(&lines[1], &paths["partitionKey"]), "u1");
        assert!(
            at_path(&lines[1], &paths["consumedWcu"]).is_null(),
            "no capacity on errors"
        );
        assert_eq!(
            lines[1]["fields"]["error"],
            "ConditionalCheckFailedException"
        );
    }
}
