//! The throttle watch: DynamoDB's own throttling reasons, read on every attempt, as a hot-key
//! signal and a capacity signal.
//!
//! [`ThrottleWatch`] is an SDK interceptor. It reads which key each call carries (from the
//! call's input and the [`TableSpec`]s you give it) and, after **every attempt** (retries
//! included, not only the last answer after the SDK's retries), the `ThrottlingReasons` of a
//! `ThrottlingException`, `ProvisionedThroughputExceededException` or `RequestLimitExceeded`.
//! Each reason is classified by [`heatsink_core::throttle::classify`]:
//! - `…KeyRangeThroughputExceeded` (a partition is over its 1,000 WCU/s or 3,000 RCU/s): the key
//!   the request carried is counted in a sliding [`KeyThrottles`] window, and
//!   [`ThrottleWatch::signals`] names it for the [`crate::hot::Controller`], which salts it
//!   (write) or caches it (read). No sampling: the first throttled attempts are the signal.
//! - provisioned / account / on-demand-maximum reasons: counted per table, index and reason
//!   ([`ThrottleWatch::tally`]) and logged as `add-capacity`; they never name a key, because
//!   salting spreads load over more keys of the same starved table and fixes nothing.
//! - a throttle without reasons (emulators, endpoints from before August 2025) or with a reason
//!   this version does not know is counted and authorizes nothing.
//!
//! - a batch answered with entries left over (`UnprocessedItems` of BatchWriteItem,
//!   `UnprocessedKeys` of BatchGetItem: DynamoDB's answer when some of a batch's partitions
//!   throttle) and a transaction cancelled because one of its items was throttled
//!   (`TransactionCanceledException` with a `ThrottlingError` cancellation reason) are counted
//!   on their own ([`ThrottleTally::unprocessed`], [`ThrottleTally::transactions_throttled`]):
//!   neither carries a reason, so neither names a key or asks for capacity.
//!
//! The capacity log ([`crate::metrics::CapacityLog`]) logs the same classification per
//! throttled attempt (`throttle_reason`, `remedy`) for the calls it samples.
//!
//! ```
//! use heatsink::detect::throttle::ThrottleWatch;
//! use heatsink::schema::{Schema, Table};
//!
//! # fn f(sdk: &aws_types::SdkConfig) {
//! let schema = Schema::default();
//! let watch = ThrottleWatch::new(&[schema.table(Table::Counters)]);
//! let conf = aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(watch.clone()).build();
//! let ddb = aws_sdk_dynamodb::Client::from_conf(conf);
//! // … writers use `ddb`; a controller loop hands `watch.dynamodb_signals()` to
//! // `Controller::run` every few hundred milliseconds.
//! # let _ = (ddb, watch.dynamodb_signals());
//! # }
//! ```
//!
//! # Limits
//! The window's bounds are [`ThrottleConfig`]'s (1 s, 3 throttles, at most 1,024 keys, rate at
//! most 4 × the ceiling); a key-range throttle names the partition, and the key the request
//! carried is the local guess for the hot key on it (several keys of one batch are all named).
//! Keys are kept in memory only, never logged by the watch. Covered operations: GetItem,
//! PutItem, UpdateItem, DeleteItem, Query, Scan, BatchGetItem, BatchWriteItem (a Scan carries no
//! key: its throttles are only tallied); TransactWriteItems and TransactGetItems for the
//! cancellation count only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemOutput;
use aws_sdk_dynamodb::operation::transact_get_items::TransactGetItemsError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::CancellationReason;
use aws_smithy_runtime_api::client::interceptors::context::{Error as InterceptorError, Output};
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use heatsink_core::detect::{Ceilings, Kind};
use heatsink_core::hot::Signal;
pub use heatsink_core::throttle::{
    Class, KeyThrottles, Limit, Reason, Remedy, Resource, Scope, ThrottleConfig, classify,
};

use crate::metrics::capacity::{Call, KeyReader, throttle_of};
use crate::schema::TableSpec;

/// Throttled attempts counted by one [`ThrottleWatch`], by class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThrottleTally {
    /// Attempts the watch saw (throttled or not) on the operations it covers.
    pub attempts: u64,
    /// Throttled attempts with at least one key-range reason.
    pub key_range: u64,
    /// Capacity throttles per (table, index, reason code): add capacity, never salt.
    pub capacity: BTreeMap<(String, Option<String>, String), u64>,
    /// Throttled attempts that carried no reason, or only reasons this version does not know.
    pub unclassified: u64,
    /// Entries batch calls answered as left over (`UnprocessedItems` write requests,
    /// `UnprocessedKeys` keys): throttled inside a successful answer, with no reason given.
    pub unprocessed: u64,
    /// Transaction attempts cancelled with at least one `ThrottlingError` reason.
    pub transactions_throttled: u64,
}

#[derive(Debug)]
struct State {
    keys: KeyThrottles,
    tally: ThrottleTally,
}

/// What the watch remembers of a call between serialization and its attempts.
#[derive(Debug, Clone)]
struct Watched(Call);

impl Storable for Watched {
    type Storer = StoreReplace<Self>;
}

/// Present once a call's first attempt was recorded: later attempts are retries.
#[derive(Debug, Clone)]
struct Attempted;

impl Storable for Attempted {
    type Storer = StoreReplace<Self>;
}

/// SDK interceptor: classifies the throttling reasons of every attempt and keeps the key-range
/// throttles per key (see the module docs). Clones share one state: give one clone to the
/// client and keep another to read [`ThrottleWatch::signals`].
#[derive(Debug, Clone)]
pub struct ThrottleWatch {
    keys: KeyReader,
    state: Arc<Mutex<State>>,
    origin: Instant,
    wake: Arc<tokio::sync::Notify>,
}

impl ThrottleWatch {
    /// A watch that knows the key attributes of `tables`, with the default [`ThrottleConfig`].
    pub fn new(tables: &[TableSpec]) -> Self {
        Self::with_config(tables, ThrottleConfig::default())
    }

    /// A watch with `config`'s window, threshold and bounds.
    pub fn with_config(tables: &[TableSpec], config: ThrottleConfig) -> Self {
        Self {
            keys: KeyReader::new(tables),
            state: Arc::new(Mutex::new(State {
                keys: KeyThrottles::new(config),
                tally: ThrottleTally::default(),
            })),
            origin: Instant::now(),
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Resolves when an attempt has brought a key to the signal threshold since the last time it
    /// resolved (or since the watch was made): [`ThrottleWatch::signals`] now names a key it did
    /// not name before. A controller loop waits on this beside its poll timer and runs as soon as
    /// a key turns hot instead of at its next tick (one poll interval sooner). Meant for one
    /// waiter: several share one wake-up.
    pub async fn crossed(&self) {
        self.wake.notified().await;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counters, never a half-made decision: go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The hot keys now, as controller signals against `ceiling(kind)` (source `throttle`).
    pub fn signals(&self, ceiling: impl Fn(Kind) -> f64) -> Vec<Signal> {
        let now = self.now_ms();
        self.state().keys.signals(now, ceiling)
    }

    /// [`ThrottleWatch::signals`] against DynamoDB's partition ceilings (3,000 RCU/s, 1,000 WCU/s).
    pub fn dynamodb_signals(&self) -> Vec<Signal> {
        self.signals(|kind| match kind {
            Kind::Read => Ceilings::DYNAMODB_READ,
            Kind::Write => Ceilings::DYNAMODB_WRITE,
        })
    }

    /// The counts so far.
    pub fn tally(&self) -> ThrottleTally {
        self.state().tally.clone()
    }

    /// Records one attempt of `call` (`first`, or a retry), throttled with `classes` if it was.
    fn record(&self, call: &Call, first: bool, throttled: Option<&[Class]>) {
        let now = self.now_ms();
        let kind = if call.op.writes() {
            Kind::Write
        } else {
            Kind::Read
        };
        let crossed = {
            let mut state = self.state();
            Self::record_locked(&mut state, call, first, throttled, kind, now)
        };
        if crossed {
            self.wake.notify_one();
        }
    }

    /// [`ThrottleWatch::record`] under the lock; whether a key reached the signal threshold.
    fn record_locked(
        state: &mut State,
        call: &Call,
        first: bool,
        throttled: Option<&[Class]>,
        kind: Kind,
        now: u64,
    ) -> bool {
        state.tally.attempts += 1;
        let classes = throttled.unwrap_or_default();
        if throttled.is_some() {
            if classes.iter().any(|c| c.remedy() == Some(Remedy::Spread)) {
                state.tally.key_range += 1;
            } else if classes.iter().all(|c| c.remedy().is_none()) {
                state.tally.unclassified += 1;
            }
        }
        for class in classes {
            if let Class::Capacity { reason, resource } = class {
                let (table, index) = match resource {
                    Some(r) => (r.table.clone(), r.index.clone()),
                    None => (
                        call.targets
                            .first()
                            .map(|t| t.table.clone())
                            .unwrap_or_default(),
                        None,
                    ),
                };
                tracing::warn!(
                    table = table.as_str(),
                    index = index.as_deref(),
                    throttle_reason = reason.code(),
                    remedy = Remedy::AddCapacity.name(),
                    "dynamodb capacity throttle"
                );
                *state
                    .tally
                    .capacity
                    .entry((table, index, reason.code()))
                    .or_default() += 1;
            }
        }
        let Some(hot) = classes.iter().find(|c| matches!(c, Class::HotKey { .. })) else {
            // Not a key-range throttle: counts toward the admitted share of tracked keys only.
            for t in &call.targets {
                if let Some(pk) = t.partition_key.as_deref() {
                    state
                        .keys
                        .attempt(&t.table, t.index.as_deref(), pk, kind, None, first, now);
                }
                for (gsi, value) in &t.gsi_keys {
                    state
                        .keys
                        .attempt(&t.table, Some(gsi), value, kind, None, first, now);
                }
            }
            return false;
        };
        let mut crossed = false;
        for t in &call.targets {
            // The key of the scope the throttle named: the table's key, or the index's (a
            // query's key on that index; a written item's value of that index's key).
            let scoped = match hot.resource() {
                Some(r) if r.table != t.table => None,
                Some(Resource {
                    index: Some(ix), ..
                }) => {
                    let key = if t.index.as_deref() == Some(ix.as_str()) {
                        t.partition_key.as_deref()
                    } else {
                        t.gsi_keys
                            .iter()
                            .find(|(g, _)| g == ix)
                            .map(|(_, v)| v.as_str())
                    };
                    key.map(|k| (Some(ix.as_str()), k))
                }
                _ => t.partition_key.as_deref().map(|k| (t.index.as_deref(), k)),
            };
            if let Some((index, key)) = scoped {
                crossed |= state
                    .keys
                    .attempt(&t.table, index, key, kind, Some(hot), first, now);
            }
        }
        crossed
    }
}

impl Intercept for ThrottleWatch {
    fn name(&self) -> &'static str {
        "heatsink::detect::ThrottleWatch"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(call) = self.keys.read(context, false) {
            cfg.interceptor_state().store_put(Watched(call));
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let first = cfg.load::<Attempted>().is_none();
        let (unprocessed, cancelled) = match context.output_or_error() {
            Some(Ok(output)) => (unprocessed_in(output), false),
            Some(Err(err)) => (0, cancelled_by_throttle(err)),
            None => (0, false),
        };
        if unprocessed > 0 || cancelled {
            let mut state = self.state();
            state.tally.unprocessed = state.tally.unprocessed.saturating_add(unprocessed);
            state.tally.transactions_throttled += u64::from(cancelled);
        }
        let Some(Watched(call)) = cfg.load::<Watched>() else {
            return Ok(());
        };
        let throttle = match context.output_or_error() {
            Some(Err(err)) => throttle_of(call.op, err),
            _ => None,
        };
        self.record(call, first, throttle.as_ref().map(|t| t.classes.as_slice()));
        cfg.interceptor_state().store_put(Attempted);
        Ok(())
    }
}

/// Entries a batch answer left over: BatchWriteItem's unprocessed write requests, BatchGetItem's
/// unprocessed keys; 0 for any other answer.
fn unprocessed_in(output: &Output) -> u64 {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    if let Some(o) = output.downcast_ref::<BatchWriteItemOutput>() {
        o.unprocessed_items()
            .map_or(0, |m| m.values().map(|v| count(v.len())).sum())
    } else if let Some(o) = output.downcast_ref::<BatchGetItemOutput>() {
        o.unprocessed_keys()
            .map_or(0, |m| m.values().map(|k| count(k.keys().len())).sum())
    } else {
        0
    }
}

/// Whether a transaction was cancelled because one of its items was throttled.
fn cancelled_by_throttle(err: &OrchestratorError<InterceptorError>) -> bool {
    let throttled = |reasons: &[CancellationReason]| {
        reasons.iter().any(|r| r.code() == Some("ThrottlingError"))
    };
    let Some(e) = err.as_operation_error() else {
        return false;
    };
    if let Some(TransactWriteItemsError::TransactionCanceledException(t)) = e.downcast_ref() {
        throttled(t.cancellation_reasons())
    } else if let Some(TransactGetItemsError::TransactionCanceledException(t)) = e.downcast_ref() {
        throttled(t.cancellation_reasons())
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;
    use crate::schema::{GsiSpec, KeyAttr};

    const ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/hs-counters";

    /// A throttle body as the DynamoDB API reference documents it (a list of `{reason,
    /// resource}` on the error), answered on the wire with HTTP 400. The member is spelled
    /// `throttlingReasons` on `ThrottlingException` and `ThrottlingReasons` on the other two
    /// (the service model's own spelling; the SDK reads nothing else).
    fn throttle_body(error: &str, reason: Option<(&str, &str)>) -> String {
        let reasons = match reason {
            Some((reason, resource)) => {
                serde_json::json!([{ "reason": reason, "resource": resource }])
            }
            None => serde_json::json!(null),
        };
        let mut body = serde_json::json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{error}"),
            "message": "Throughput exceeds the current capacity of your table or index.",
        });
        if !reasons.is_null() {
            let member = if error == "ThrottlingException" {
                "throttlingReasons"
            } else {
                "ThrottlingReasons"
            };
            body[member] = reasons;
        }
        body.to_string()
    }

    fn tables() -> Vec<TableSpec> {
        vec![
            TableSpec::new("hs-counters", KeyAttr::s("pk"))
                .gsi(GsiSpec::new("by-creator", KeyAttr::s("creator"))),
        ]
    }

    /// Answers `throttles` times with `body`, then succeeds; the client retries up to 5 times.
    async fn put_through(watch: &ThrottleWatch, body: String, throttles: usize) {
        let rule = mock!(aws_sdk_dynamodb::Client::put_item)
            .sequence()
            .http_status(400, Some(body))
            .times(throttles)
            .output(|| PutItemOutput::builder().build())
            .build();
        let w = watch.clone();
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule], |c| c
            .interceptor(w.clone())
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(5)
                    .with_initial_backoff(Duration::from_millis(1))
            ));
        ddb.put_item()
            .table_name("hs-counters")
            .item("pk", AttributeValue::S("p9".into()))
            .item("creator", AttributeValue::S("c1".into()))
            .send()
            .await
            .expect("the last attempt succeeds");
        assert_eq!(rule.num_calls(), throttles + 1);
    }

    #[tokio::test]
    async fn an_on_demand_key_range_throttle_names_the_key_on_every_retried_attempt_api_reference_shape()
     {
        let watch = ThrottleWatch::new(&tables());
        let body = throttle_body(
            "ThrottlingException",
            Some(("TableWriteKeyRangeThroughputExceeded", ARN)),
        );
        put_through(&watch, body, 3).await;
        let tally = watch.tally();
        assert_eq!((tally.attempts, tally.key_range), (4, 3));
        assert!(tally.capacity.is_empty());
        let signals = watch.dynamodb_signals();
        assert_eq!(signals.len(), 1, "{signals:?}");
        assert_eq!(
            (signals[0].key.as_str(), signals[0].kind),
            ("p9", Kind::Write)
        );
        // 3 of 4 attempts refused: 1,000 ÷ 0.25 = 4,000 WCU/s, the 4 × bound.
        assert_eq!(signals[0].rate, 4_000.0);
    }

    #[tokio::test]
    async fn the_watch_wakes_its_controller_when_a_key_reaches_the_threshold_and_not_before_api_reference_shape()
     {
        let watch = ThrottleWatch::new(&tables());
        let key_range = || {
            throttle_body(
                "ThrottlingException",
                Some(("TableWriteKeyRangeThroughputExceeded", ARN)),
            )
        };
        let woken = |watch: &ThrottleWatch| {
            let w = watch.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(50), w.crossed())
                    .await
                    .is_ok()
            }
        };
        put_through(&watch, key_range(), 2).await;
        assert!(
            !woken(&watch).await,
            "2 throttles: under the threshold of 3"
        );
        put_through(&watch, key_range(), 1).await;
        assert!(woken(&watch).await, "the third throttle names p9: wake now");
        put_through(&watch, key_range(), 2).await;
        assert!(
            !woken(&watch).await,
            "p9 is named already: more throttles are no new onset"
        );
        let capacity = throttle_body(
            "ProvisionedThroughputExceededException",
            Some(("TableWriteProvisionedThroughputExceeded", ARN)),
        );
        let other = ThrottleWatch::new(&tables());
        put_through(&other, capacity, 4).await;
        assert!(!woken(&other).await, "a capacity throttle names no key");
    }

    #[tokio::test]
    async fn a_provisioned_capacity_throttle_is_tallied_and_never_names_a_key_api_reference_shape()
    {
        let watch = ThrottleWatch::new(&tables());
        let body = throttle_body(
            "ProvisionedThroughputExceededException",
            Some(("TableWriteProvisionedThroughputExceeded", ARN)),
        );
        put_through(&watch, body, 3).await;
        let tally = watch.tally();
        assert_eq!((tally.attempts, tally.key_range), (4, 0));
        let key = (
            "hs-counters".to_owned(),
            None,
            "TableWriteProvisionedThroughputExceeded".to_owned(),
        );
        assert_eq!(tally.capacity.get(&key), Some(&3));
        assert!(watch.dynamodb_signals().is_empty());
    }

    #[tokio::test]
    async fn an_index_key_range_throttle_names_the_items_index_key_api_reference_shape() {
        let watch = ThrottleWatch::new(&tables());
        let body = throttle_body(
            "ThrottlingException",
            Some((
                "IndexWriteKeyRangeThroughputExceeded",
                &format!("{ARN}/index/by-creator"),
            )),
        );
        put_through(&watch, body, 4).await;
        let signals = watch.dynamodb_signals();
        assert_eq!(signals.len(), 1, "{signals:?}");
        assert_eq!(signals[0].key, "c1", "the GSI key value, not the table key");
    }

    #[tokio::test]
    async fn a_throttle_without_reasons_as_emulators_send_it_authorizes_nothing() {
        let watch = ThrottleWatch::new(&tables());
        let body = throttle_body("ProvisionedThroughputExceededException", None);
        put_through(&watch, body, 4).await;
        let tally = watch.tally();
        assert_eq!(
            (tally.attempts, tally.unclassified, tally.key_range),
            (5, 4, 0)
        );
        assert!(watch.dynamodb_signals().is_empty());
    }

    #[tokio::test]
    async fn batch_leftovers_and_throttled_transactions_are_counted_apart_and_name_no_key_api_reference_shape()
     {
        let watch = ThrottleWatch::new(&tables());
        // BatchWriteItem answered 200 with two of its three puts left over (the API reference's
        // `UnprocessedItems`: a map of table → write requests).
        let leftover =
            |pk: &str| serde_json::json!({ "PutRequest": { "Item": { "pk": { "S": pk } } } });
        let batch = serde_json::json!({
            "UnprocessedItems": { "hs-counters": [leftover("p2"), leftover("p3")] }
        });
        let batch_rule = mock!(aws_sdk_dynamodb::Client::batch_write_item)
            .sequence()
            .http_status(200, Some(batch.to_string()))
            .build();
        // TransactWriteItems cancelled: its second item throttled (`CancellationReasons`, one
        // per item in order, `None` for an item that was fine).
        let cancelled = serde_json::json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "message": "Transaction cancelled, please refer cancellation reasons for specific reasons [None, ThrottlingError]",
            "CancellationReasons": [
                { "Code": "None" },
                { "Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity of your table or index." }
            ]
        });
        let tx_rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
            .sequence()
            .http_status(400, Some(cancelled.to_string()))
            .build();
        // A transaction cancelled by a condition, not a throttle: not counted.
        let conditional = serde_json::json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "message": "Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed]",
            "CancellationReasons": [{ "Code": "ConditionalCheckFailed" }]
        });
        let cond_rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
            .sequence()
            .http_status(400, Some(conditional.to_string()))
            .build();
        let w = watch.clone();
        let ddb = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&batch_rule, &tx_rule, &cond_rule],
            |c| c
                .interceptor(w.clone())
                .retry_config(RetryConfig::disabled())
        );
        let put = |pk: &str| {
            aws_sdk_dynamodb::types::WriteRequest::builder()
                .put_request(
                    aws_sdk_dynamodb::types::PutRequest::builder()
                        .item("pk", AttributeValue::S(pk.into()))
                        .build()
                        .expect("item set"),
                )
                .build()
        };
        ddb.batch_write_item()
            .request_items("hs-counters", vec![put("p1"), put("p2"), put("p3")])
            .send()
            .await
            .expect("a batch with leftovers succeeds");
        let tx = || {
            aws_sdk_dynamodb::types::TransactWriteItem::builder()
                .put(
                    aws_sdk_dynamodb::types::Put::builder()
                        .table_name("hs-counters")
                        .item("pk", AttributeValue::S("p4".into()))
                        .build()
                        .expect("put set"),
                )
                .build()
        };
        for _ in 0..2 {
            let err = ddb.transact_write_items().transact_items(tx()).send().await;
            assert!(err.is_err(), "both transactions are cancelled");
        }
        let tally = watch.tally();
        assert_eq!(
            (tally.unprocessed, tally.transactions_throttled),
            (2, 1),
            "{tally:?}"
        );
        assert_eq!(
            (tally.key_range, tally.unclassified),
            (0, 0),
            "neither is a throttle with a reason"
        );
        assert!(tally.capacity.is_empty());
        assert!(watch.dynamodb_signals().is_empty());
    }
}
