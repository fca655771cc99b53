//! heatsink: keep hot keys from melting DynamoDB partitions and Kinesis shards.
//!
//! Hashing spreads *keys*, not *load*: one celebrity post taking 10,000 likes/s lands on one
//! DynamoDB partition (1,000 WCU/s, 3,000 RCU/s) or one Kinesis shard (1,000 records/s, 1 MiB/s)
//! however many partitions the table has. heatsink is the toolkit for that key: spread its
//! writes, read it back, count it without one write per event, find it, mitigate it, and consume
//! its streams in order. The decisions are pure functions in `heatsink-core`; this crate carries
//! them out against AWS, and re-exports each core module under the same name, so one import
//! path serves both (`heatsink::keys::SaltedKey`, `heatsink::counter::CounterStore`).
//!
//! # A tour
//!
//! **Spread** a hot key's writes over S sub-keys, and **read it back** with one merged fan-out:
//!
//! ```
//! use heatsink::keys::SaltedKey;
//! let key = SaltedKey::new("likes#p9", 4)?;
//! assert_eq!(key.sub_keys(), ["likes#p9#0", "likes#p9#1", "likes#p9#2", "likes#p9#3"]);
//! # Ok::<(), heatsink::keys::KeyError>(())
//! ```
//!
//! [`scatter`] reads the sub-keys in parallel and merges sorted pages across shards.
//!
//! **Count** without one write per event: a `heatsink::counter::aggregate::StreamAggregator` sums a
//! change-stream batch per key and flushes absolute totals under a conditional write
//! ([`counter::CounterStore`]), so a retried batch never counts twice; [`counter::rebuild`]
//! repairs a counter from the durable events.
//!
//! **Find** the hot key: `heatsink::insights` reads DynamoDB Contributor Insights; the client sampler
//! (`heatsink::detect`, a Space-Saving top-K) sees your own requests within seconds.
//!
//! **Mitigate**: the [`directory`] tells writers which keys to salt, cache or limit, epoch by
//! epoch; `heatsink::cache` serves hot reads with single-flight; [`admission`] refuses excess writes with
//! a `Retry-After`.
//!
//! **Consume** streams in lineage order (`heatsink::stream`): parents before children across splits and
//! merges, leases in DynamoDB, fencing tokens for your writes.
//!
//! # Features
//!
//! The DynamoDB pieces are always on; everything else is opt-in, so a service that only salts
//! its keys does not compile the Kinesis or CloudWatch SDKs.
//!
//! | feature | what it adds | extra dependencies |
//! |---|---|---|
//! | *(always)* | [`schema`], [`counter`] (store, rebuild), [`scatter`], [`directory`], [`admission`], [`control`]'s trigger parsing and signals, [`metrics`], [`publish`]'s encoding, cadence and `Publisher` | `aws-sdk-dynamodb` |
//! | `kinesis` | `heatsink::kinesis`: where keys land on a stream; Kinesis streams in [`schema`] | `aws-sdk-kinesis` |
//! | `streams` | `heatsink::stream`: the lineage-ordered consumer (Kinesis and DynamoDB Streams) | `aws-sdk-kinesis`, `aws-sdk-dynamodbstreams` |
//! | `insights` | `heatsink::insights` (Contributor Insights, alarms, dashboards) and [`control`]'s `ControllerFunction` and `insights_signals` | `aws-sdk-cloudwatch` |
//! | `publish` | `heatsink::publish::EventBridgeSink`: sampler reports onto EventBridge | `aws-sdk-eventbridge` |
//! | `lambda` | `heatsink::lambda` (cold start, stream-event helpers) and `heatsink::counter::aggregate` | `aws_lambda_events`, `aws-config`, `tracing-subscriber`, `aws-sdk-dynamodbstreams` |
//! | `cache` | `heatsink::cache`: the micro-cache for hot reads | `moka` |
//! | `full` | all of the above | |
//!
//! Every adapter takes an SDK client or an `aws_types::SdkConfig`: no adapter reads the
//! environment by itself, so the same code runs against AWS, LocalStack, moto, dynoxide or
//! DynamoDB Local. The one exception is `heatsink::lambda::start`, the cold start a Lambda binary calls.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
#[cfg(feature = "cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
pub mod cache;
pub mod clock;
pub mod control;
pub mod counter;
pub mod directory;
pub mod error;
pub mod http;
#[cfg(feature = "insights")]
#[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
pub mod insights;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod kinesis;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda;
pub mod metrics;
pub mod publish;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod reshard;
pub mod scatter;
pub mod schema;
pub mod shard;
#[cfg(feature = "streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
pub mod stream;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod testing;

/// The client sampler: Space-Saving top-K per partition over sliding windows (pure).
pub use heatsink_core::detect;
/// Admission decisions: GCRA buckets per key and tenant (pure).
pub use heatsink_core::guard;
/// Hot-key directory entries and the mitigation controller's decision (pure).
pub use heatsink_core::hot;
/// Key strategies: salted keys, calculated suffixes, GSI shards, the S planner (pure).
pub use heatsink_core::keys;
/// The KPL aggregated-record format: aggregation and deaggregation (pure).
pub use heatsink_core::kpl;
/// Merging sorted pages across shards (pure).
pub use heatsink_core::merge;
