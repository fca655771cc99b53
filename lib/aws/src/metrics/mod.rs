//! What the toolkit tells CloudWatch: Embedded Metric Format (EMF) metrics, and capacity log
//! lines that Contributor Insights rules read.
//!
//! **EMF** is a JSON log line that carries its own metric declaration: an `_aws` member names the
//! namespace, the dimension set and the metrics, and the values sit beside it as top-level
//! members. CloudWatch Logs turns every such line a Lambda function prints into metric data
//! points. So a function publishes metrics by writing one line to stdout: no `PutMetricData`
//! call, no added latency on the request path, no extra IAM permission and no network failure
//! mode. The price is that a metric exists only once its log line is ingested (seconds).
//! Long-running processes (a `heatsink::stream` worker) write the same documents to any writer;
//! shipped to CloudWatch Logs, they become metrics the same way.
//!
//! - [`emf`]: the writer, over open metric definitions ([`MetricDef`]): namespace [`NAMESPACE`],
//!   one dimension [`DIMENSION`] whose value is the emitter's short name. At most 100 values per
//!   metric and 100 metrics per document (the specification's limits); more are split.
//! - [`capacity`]: the [`CapacityLog`] interceptor, one line per key a DynamoDB call touched.
//!
//! ```
//! use heatsink::metrics::{Emf, MetricDef};
//! use std::time::Duration;
//!
//! const LAG: MetricDef = MetricDef::count("CounterLagEvents");
//! const DELAY: MetricDef = MetricDef::seconds("CounterFlushDelaySeconds");
//! let mut emf = Emf::new("orders-aggregator");
//! emf.count(LAG, 0).seconds(DELAY, Duration::from_millis(1_250));
//! let mut out = Vec::new();
//! emf.write_to(&mut out, 1_700_000_000_000)?;
//! let doc: serde_json::Value = serde_json::from_slice(&out)?;
//! assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "heatsink");
//! assert_eq!(doc["Function"], "orders-aggregator");
//! assert_eq!(doc["CounterFlushDelaySeconds"], 1.25);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Why not the `metrics_cloudwatch_embedded` crate: it is a backend of the `metrics` facade, so
//! it installs one process-global recorder; library code would then depend on a global being set,
//! and tests could not observe one invocation's document in isolation. It also pulls in
//! `metrics` and, by default, `lambda_http`. A small typed writer on `serde_json` flushed once per
//! invocation (or round) is less code than the glue around the facade.

pub mod capacity;
pub mod emf;

pub use capacity::{CapacityLog, dynamodb_client, log_field};
pub use emf::{
    DIMENSION, Emf, EmfError, MAX_DIMENSIONS_PER_SET, MAX_METRICS_PER_DOCUMENT,
    MAX_VALUES_PER_METRIC, MetricDef, NAMESPACE, Unit,
};
