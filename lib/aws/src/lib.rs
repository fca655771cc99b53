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
//! The modules follow what a team does with a hot key, in order.
//!
//! **Spread** a hot key's writes over S sub-keys ([`keys`]), and **read it back** with one
//! merged, bounded fan-out ([`scatter`]):
//!
//! ```
//! use heatsink::keys::SaltedKey;
//! let key = SaltedKey::new("likes#p9", 4)?;
//! assert_eq!(key.sub_keys(), ["likes#p9#0", "likes#p9#1", "likes#p9#2", "likes#p9#3"]);
//! # Ok::<(), heatsink::keys::KeyError>(())
//! ```
//!
//! **Count** without one write per event ([`counter`]): an aggregator sums a change-stream
//! batch per key and flushes absolute totals under a conditional write, so a retried batch
//! never counts twice; the rebuild and the repair correct a counter from the durable events,
//! only on proof that every writer has passed the events they judge.
//!
//! **Find** the hot key: DynamoDB's own throttling reasons read on every attempt
//! ([`detect::throttle`]: a key-range throttle names the key, a capacity throttle never does);
//! the client sampler and its reports ([`detect`]) within seconds; Contributor Insights
//! (`insights`, feature `insights`) from every caller, a minute later.
//!
//! **Mitigate** without a deploy ([`hot`]): the hot-key directory tells writers which keys to
//! salt, cache or limit, epoch by epoch; the controller edits it with hysteresis; the
//! admission gate refuses excess requests with a `Retry-After`; the micro-cache serves hot
//! reads with single-flight (feature `cache`).
//!
//! **Consume** streams in lineage order (`stream`, feature `streams`): parents before children
//! across splits and merges, leases in DynamoDB, fencing tokens for your writes, KPL
//! aggregates deaggregated.
//!
//! **Produce** to Kinesis (`kinesis`, feature `kinesis`): batching, retry of failed entries
//! only, per-shard pacing, hot keys salted onto distinct shards, optional KPL aggregation; and
//! **reshard** a stream by its measured load (`kinesis::reshard`): split a hot shard at the
//! median of its hash keys, merge cold neighbours, refuse when one key dominates (salt it).
//!
//! **Move** slot ranges between tables live ([`slots`]): the slot directory, routers that
//! follow it, the owners' fence items, and the mover — a persisted, resumable state machine
//! that copies, tails, fences and flips, and deletes moved data only on proof.
//!
//! Underneath: [`schema`] (tables as data), [`metrics`] (EMF and capacity log lines),
//! [`timeouts`] (one attempt and operation timeout policy for every SDK call), [`retries`]
//! (the retry policy pinned against changes of the SDK's defaults),
//! `lambda` (cold start and stream-event helpers, feature `lambda`), [`error`] (one
//! [`error::AwsError`] for every failed call) and [`clock`].
//!
//! Each pure module of `heatsink-core` is re-exported where its adapter lives: `keys` as
//! [`keys`], `merge` as [`scatter::merge`], `counter` inside [`counter`], `detect` inside
//! [`detect`], `throttle` inside [`detect::throttle`], `hot` inside [`hot`] and `guard` as [`hot::guard`], `slots` inside [`slots`],
//! `stream` inside `stream`, `kpl` as `kinesis::kpl` and `reshard` inside `kinesis::reshard`.
//! The design notes in the repository's `docs/` explain each area with its numbers.
//!
//! # Features
//!
//! The DynamoDB pieces are always on; everything else is opt-in, so a service that only salts
//! its keys does not compile the Kinesis or CloudWatch SDKs. Each feature builds alone
//! (`make features` checks it).
//!
//! | feature | what it adds | extra dependencies |
//! |---|---|---|
//! | *(always)* | [`keys`], [`scatter`], [`counter`] (store, rebuild, repair), [`detect`] (sampler, report encoding, `Publisher`), [`hot`] (directory, controller, admission), [`slots`] (directory, router, fences, move records), [`schema`], [`metrics`] | `aws-sdk-dynamodb` |
//! | `kinesis` | `heatsink::kinesis`: where keys land on a stream, the producer, resharding | `aws-sdk-kinesis` |
//! | `streams` | `heatsink::stream`: the lineage-ordered consumer (Kinesis and DynamoDB Streams); the slot mover (`slots::mover`) | `aws-sdk-kinesis`, `aws-sdk-dynamodbstreams`, `aws-sdk-sqs` |
//! | `insights` | `heatsink::insights` (Contributor Insights, alarms, dashboards) and the controller's Lambda entry (`hot::Controller::handle`) | `aws-sdk-cloudwatch` |
//! | `publish` | `heatsink::detect::EventBridgeSink`: sampler reports onto EventBridge | `aws-sdk-eventbridge` |
//! | `lambda` | `heatsink::lambda` (cold start, stream-event helpers) and `heatsink::counter::aggregate` | `aws_lambda_events`, `aws-config`, `tracing-subscriber`, `aws-sdk-dynamodbstreams` |
//! | `cache` | `heatsink::hot::cache`: the micro-cache for hot reads | `moka` |
//! | `full` | all of the above | |
//!
//! Every adapter takes an SDK client or an `aws_types::SdkConfig`: no adapter reads the
//! environment by itself, so the same code runs against AWS, LocalStack, moto, dynoxide or
//! DynamoDB Local. The one exception is `heatsink::lambda::start`, the cold start a Lambda binary calls.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod autopilot;
pub mod clock;
pub mod counter;
mod ddb;
pub mod detect;
pub mod error;
pub mod hot;
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
pub mod retries;
pub mod scatter;
pub mod schema;
pub mod slots;
#[cfg(feature = "streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
pub mod stream;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod testing;
pub mod timeouts;

/// Key strategies: salted keys, calculated suffixes, GSI shards, the S planner (pure).
pub use heatsink_core::keys;
