//! heatsink: keep hot keys from melting DynamoDB partitions and Kinesis shards.
//!
//! This crate holds the AWS adapters and async runtime pieces; the decisions they carry out live
//! in the pure [`heatsink_core`] crate, re-exported here as [`core`]. Every adapter takes an
//! `aws_config::SdkConfig` or an SDK client: no adapter reads the environment by itself, so the
//! same code runs against AWS, LocalStack, moto, dynoxide or DynamoDB Local. (The one exception is
//! [`metrics::start_lambda`], the cold start the Lambda binaries call explicitly.)
//!
//! - [`schema`]: the one definition of every table and stream, and idempotent creation.
//! - [`counter`]: conditional absolute flushes, one-Query reads and corrections of hot counters.
//! - [`likes`]: the reference application's handlers (likes API, aggregator, rebuilder).
//! - [`scatter`]: parallel fan-out, batch reads and merged pagination across shards.
//! - [`kinesis`]: which shard a key lands on; salts chosen to spread a hot key.
//! - [`detect`]: Contributor Insights on tables and GSIs, hot-key and throttle alarms, the dashboard.
//! - [`directory`]: the hot-key directory, its bounded-age cache and the mitigation controller.
//! - [`control`]: the hotkey-controller function: triggers, signals, one controller run.
//! - [`publish`]: a long-lived router's sampler report onto EventBridge, for the controller.
//! - [`admission`]: per-key and per-tenant token buckets with limits from the directory (429s).
//! - [`cache`]: the micro-cache for hot reads (TTL, stale-while-revalidate, single-flight).
//! - [`metrics`]: CloudWatch Embedded Metric Format and the capacity log lines of the functions.
//! - [`error`]: error types.
pub use heatsink_core as core;

pub mod admission;
pub mod cache;
pub mod control;
pub mod counter;
pub mod detect;
pub mod directory;
pub mod error;
pub mod kinesis;
pub mod likes;
pub mod metrics;
pub mod publish;
pub mod scatter;
pub mod schema;
pub mod stream;
#[cfg(test)]
mod testing;
