//! The DynamoDB counter store: conditional absolute flushes, one-Query reads, corrections.
//!
//! The decisions live in [`heatsink_core::counter`]; this module carries them out against the
//! `counters` table (`pk = likes#p9`, `sk = w#<writer> | s#<n> | fix`). A flush reads the
//! writer's sub-keys with a strongly consistent BatchGetItem, plans absolute totals with
//! [`FlushPlan`], and writes each with a Put **conditional on the stored `seq` being exactly the
//! one it read** (`attribute_not_exists` for a first write). A condition that fails means another
//! flush of the same writer landed in between (a retry, a redelivery): the key is re-read and
//! decided again, so it counts once whatever the interleaving. A repeated flush is recognised and
//! reported as [`FlushReport::already_applied`], never as an error.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::counter::CounterStoreError> {
//! use heatsink::counter::{CounterKey, CounterStore, Deltas, Seq, WriterId};
//! let store = CounterStore::new(ddb, "heatsink-counters");
//! let mut batch = Deltas::new();
//! batch.add_record(CounterKey::new("likes", "p9")?, Seq::parse("1001")?, 1)?;
//! store.flush(&WriterId::new("shardId-000000000000")?, &batch).await?;
//! let count = store.read(&CounterKey::new("likes", "p9")?).await?.total();
//! # Ok(()) }
//! ```
//!
//! Limits: a flush touches each key of the batch with one read and one conditional put (so a
//! batch of 100 records for one hot post costs 2 requests, not 100); a key whose condition keeps
//! failing is retried [`MAX_ROUNDS`] times and then reported as an error for that batch.
//!
//! - `aggregate` (feature `lambda`): count your own change stream in your own Lambda, over a
//!   `aggregate::ChangeMapper` you write.
//! - [`rebuild`]: recount from durable events and correct settled counters.
//! - The pure decisions ([`Deltas`], [`FlushPlan`], [`Seq`], …) are re-exported from
//!   `heatsink_core::counter`, so one import path serves both layers.

#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod aggregate;
pub mod rebuild;

pub use heatsink_core::counter::*;

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::AwsError;
use crate::scatter::{Backoff, Item, ScatterError, batch_get_with};

/// Rounds of re-read and re-plan for keys whose conditional put lost a race.
pub const MAX_ROUNDS: usize = 5;

/// Errors of the counter store.
#[derive(Debug, thiserror::Error)]
pub enum CounterStoreError {
    /// A counter rule was broken (bad key, bad seq, overflow); the input is at fault.
    #[error(transparent)]
    Counter(#[from] CounterError),
    /// A stored item does not have the shape the store writes (edited by hand?).
    #[error("counter item {pk}/{sk} is malformed: {reason}")]
    Malformed {
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// What is wrong.
        reason: String,
    },
    /// A key's conditional write lost the race [`MAX_ROUNDS`] times in a row; retry the batch.
    #[error("counter {0} kept changing under the flush; retry the batch")]
    Contended(String),
    /// DynamoDB refused the request or could not be reached; retry the batch.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The flush's BatchGetItem failed without a DynamoDB error (keys left unprocessed after
    /// every retry); retry the batch.
    #[error(transparent)]
    Read(ScatterError),
}

impl From<ScatterError> for CounterStoreError {
    fn from(e: ScatterError) -> Self {
        match e {
            ScatterError::Aws(e) => Self::Aws(e),
            other => Self::Read(other),
        }
    }
}

impl CounterStoreError {
    /// The failed DynamoDB call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            Self::Read(e) => e.aws(),
            _ => None,
        }
    }
}

/// What a flush did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlushReport {
    /// Conditional puts that landed.
    pub writes: u64,
    /// Keys whose records were all already applied (a retry or redelivery): no write.
    pub already_applied: u64,
    /// Conditional puts that lost a race and were re-planned.
    pub conflicts: u64,
    /// Records counted by this flush.
    pub counted: u64,
    /// Records skipped as already counted.
    pub skipped: u64,
    /// Duplicate changes dropped by the dedupe window ([`CounterStore::flush_changes`]).
    pub duplicates: u64,
    /// Changes older than the dedupe window, counted anyway (possible double counts).
    pub late: u64,
    /// Largest dedupe window written, in bytes of identities (the dedupe memory of one
    /// writer sub-key).
    pub dedupe_bytes: usize,
}

/// The counters table.
#[derive(Debug, Clone)]
pub struct CounterStore {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn get_s<'a>(item: &'a Item, attr: &str) -> Option<&'a str> {
    item.get(attr)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn get_n(item: &Item, attr: &str) -> Option<i64> {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
}

impl CounterStore {
    /// A store on `table` (the schema's `counters` table).
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            ddb,
            table: table.into(),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The stored `(total, seq)` of `writer`'s sub-key for each of `keys` (strongly consistent).
    pub async fn stored(
        &self,
        writer: &WriterId,
        keys: &[CounterKey],
    ) -> Result<BTreeMap<CounterKey, Stored>, CounterStoreError> {
        let sk = SubKey::Writer(writer.clone()).sort_key();
        let by_pk: HashMap<String, CounterKey> = keys.iter().map(|k| (k.pk(), k.clone())).collect();
        let requests: Vec<Item> = keys
            .iter()
            .map(|k| Item::from([("pk".into(), s(k.pk())), ("sk".into(), s(sk.clone()))]))
            .collect();
        let items =
            batch_get_with(&self.ddb, &self.table, requests, Backoff::default(), true).await?;
        let mut out = BTreeMap::new();
        for item in items {
            let pk = get_s(&item, "pk").unwrap_or_default().to_owned();
            let Some(key) = by_pk.get(&pk) else { continue };
            out.insert(key.clone(), Self::parse_stored(&item, &pk, &sk)?);
        }
        Ok(out)
    }

    fn parse_stored(item: &Item, pk: &str, sk: &str) -> Result<Stored, CounterStoreError> {
        let malformed = |reason: &str| CounterStoreError::Malformed {
            pk: pk.to_owned(),
            sk: sk.to_owned(),
            reason: reason.to_owned(),
        };
        let total = get_n(item, "total").ok_or_else(|| malformed("no numeric `total`"))?;
        let seq = get_s(item, "seq").ok_or_else(|| malformed("no string `seq`"))?;
        let seq = Seq::parse(seq).map_err(|e| malformed(&e.to_string()))?;
        Ok(Stored { total, seq })
    }

    /// Flushes `deltas` as absolute totals to `writer`'s sub-keys; idempotent under retries.
    pub async fn flush(
        &self,
        writer: &WriterId,
        deltas: &Deltas,
    ) -> Result<FlushReport, CounterStoreError> {
        let mut report = FlushReport::default();
        let mut remaining: Vec<CounterKey> = deltas.iter().map(|(k, _)| k.clone()).collect();
        for _ in 0..MAX_ROUNDS {
            if remaining.is_empty() {
                return Ok(report);
            }
            let stored = self.stored(writer, &remaining).await?;
            let mut batch = Deltas::new();
            for key in &remaining {
                if let Some(d) = deltas.get(key) {
                    for (seq, delta) in d.entries() {
                        batch.add_record(key.clone(), seq.clone(), *delta)?;
                    }
                }
            }
            let plan = FlushPlan::new(writer, &batch, &stored)?;
            report.already_applied += plan.already_applied.len() as u64;
            let results = futures::future::join_all(plan.writes.iter().map(|w| self.put(w))).await;
            let mut lost = vec![];
            for (w, r) in plan.writes.iter().zip(results) {
                match r {
                    Ok(true) => {
                        report.writes += 1;
                        if let Some(d) = batch.get(&w.key) {
                            let (c, sk) = count_applied(d.entries(), w);
                            report.counted += c;
                            report.skipped += sk;
                        }
                    }
                    Ok(false) => {
                        report.conflicts += 1;
                        lost.push(w.key.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            remaining = lost;
        }
        match remaining.first() {
            None => Ok(report),
            Some(k) => Err(CounterStoreError::Contended(k.pk())),
        }
    }

    /// Flushes `changes` (per counter key, in shard order) as absolute totals to `writer`'s
    /// sub-keys, dropping duplicate changes through each sub-key's stored dedupe window of
    /// `span_ms` ([`heatsink_core::counter::decide_deduped`]). Idempotent under retries, like
    /// [`CounterStore::flush`]; the window is stored in the item's `recent` attribute.
    pub async fn flush_changes(
        &self,
        writer: &WriterId,
        changes: &BTreeMap<CounterKey, Vec<Change>>,
        span_ms: u64,
    ) -> Result<FlushReport, CounterStoreError> {
        let mut report = FlushReport::default();
        let sk = SubKey::Writer(writer.clone()).sort_key();
        let mut remaining: Vec<CounterKey> = changes.keys().cloned().collect();
        for _ in 0..MAX_ROUNDS {
            if remaining.is_empty() {
                return Ok(report);
            }
            let stored = self.stored_windows(&sk, &remaining, span_ms).await?;
            let mut decisions = vec![];
            for key in &remaining {
                let Some(batch) = changes.get(key) else {
                    continue;
                };
                let current = stored.get(key).map(|(s, w)| (s, w));
                match decide_deduped(current, batch, span_ms)? {
                    Some(d) => decisions.push((key.clone(), d)),
                    None => {
                        report.already_applied += 1;
                        report.skipped += batch.len() as u64;
                    }
                }
            }
            let pks: Vec<String> = decisions.iter().map(|(key, _)| key.pk()).collect();
            let results = futures::future::join_all(
                decisions
                    .iter()
                    .zip(&pks)
                    .map(|((_, d), pk)| self.put_windowed(pk, &sk, d)),
            )
            .await;
            let mut lost = vec![];
            for ((key, d), r) in decisions.iter().zip(results) {
                match r {
                    Ok(true) => {
                        report.writes += 1;
                        report.counted += d.counted;
                        report.skipped += d.skipped;
                        report.duplicates += d.duplicates;
                        report.late += d.late;
                        report.dedupe_bytes = report
                            .dedupe_bytes
                            .max(d.window.len() * DedupeWindow::BYTES_PER_ID);
                    }
                    Ok(false) => {
                        report.conflicts += 1;
                        lost.push(key.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            remaining = lost;
        }
        match remaining.first() {
            None => Ok(report),
            Some(k) => Err(CounterStoreError::Contended(k.pk())),
        }
    }

    /// The stored `(total, seq)` and dedupe window of sub-key `sk` for each of `keys`.
    async fn stored_windows(
        &self,
        sk: &str,
        keys: &[CounterKey],
        span_ms: u64,
    ) -> Result<BTreeMap<CounterKey, (Stored, DedupeWindow)>, CounterStoreError> {
        let by_pk: HashMap<String, CounterKey> = keys.iter().map(|k| (k.pk(), k.clone())).collect();
        let requests: Vec<Item> = keys
            .iter()
            .map(|k| Item::from([("pk".into(), s(k.pk())), ("sk".into(), s(sk))]))
            .collect();
        let items =
            batch_get_with(&self.ddb, &self.table, requests, Backoff::default(), true).await?;
        let mut out = BTreeMap::new();
        for item in items {
            let pk = get_s(&item, "pk").unwrap_or_default().to_owned();
            let Some(key) = by_pk.get(&pk) else { continue };
            let stored = Self::parse_stored(&item, &pk, sk)?;
            let window = match item.get("recent") {
                None => DedupeWindow::new(span_ms),
                Some(v) => {
                    let bytes = v.as_b().map_err(|_| CounterStoreError::Malformed {
                        pk: pk.clone(),
                        sk: sk.to_owned(),
                        reason: "`recent` is not binary".into(),
                    })?;
                    DedupeWindow::decode(bytes.as_ref(), span_ms).map_err(|e| {
                        CounterStoreError::Malformed {
                            pk: pk.clone(),
                            sk: sk.to_owned(),
                            reason: e.to_string(),
                        }
                    })?
                }
            };
            out.insert(key.clone(), (stored, window));
        }
        Ok(out)
    }

    async fn put_windowed(
        &self,
        pk: &str,
        sk: &str,
        d: &DedupeDecision,
    ) -> Result<bool, CounterStoreError> {
        let req = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(pk))
            .item("sk", s(sk))
            .item("total", AttributeValue::N(d.total.to_string()))
            .item("seq", s(d.seq.as_padded()))
            .item(
                "recent",
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(d.window.encode())),
            );
        self.put_expecting(req, d.expected.as_ref()).await
    }

    /// One conditional put; `Ok(false)` when the condition failed (someone flushed in between).
    async fn put(&self, w: &FlushWrite) -> Result<bool, CounterStoreError> {
        let req = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .item("pk", s(w.pk.clone()))
            .item("sk", s(w.sk.clone()))
            .item("total", AttributeValue::N(w.total.to_string()))
            .item("seq", s(w.seq.as_padded()));
        self.put_expecting(req, w.expected.as_ref()).await
    }

    /// Sends `req` on the condition that the item's `seq` is still `expected` (or that the item
    /// does not exist yet); `Ok(false)` when the condition failed (someone flushed in between).
    async fn put_expecting(
        &self,
        req: aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder,
        expected: Option<&Seq>,
    ) -> Result<bool, CounterStoreError> {
        let req = match expected {
            None => req.condition_expression("attribute_not_exists(pk)"),
            Some(expected) => req
                .condition_expression("seq = :expected")
                .expression_attribute_values(":expected", s(expected.as_padded())),
        };
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = AwsError::dynamodb("PutItem", &self.table, e);
                if e.is_conditional_check_failed() {
                    Ok(false)
                } else {
                    Err(e.into())
                }
            }
        }
    }

    /// Reads one counter: one Query of its partition, summing writer, salted and `fix` sub-keys.
    pub async fn read(&self, key: &CounterKey) -> Result<CounterSum, CounterStoreError> {
        let pk = key.pk();
        let items = self.query_partition(&pk).await?;
        let mut pairs: Vec<(String, i64)> = Vec::with_capacity(items.len());
        for i in &items {
            let Some(sk) = get_s(i, "sk") else { continue };
            // A total that is missing or not a number is reported, never read as 0.
            let total = get_n(i, "total").ok_or_else(|| CounterStoreError::Malformed {
                pk: pk.clone(),
                sk: sk.to_owned(),
                reason: "no numeric `total`".into(),
            })?;
            pairs.push((sk.to_owned(), total));
        }
        Ok(sum_counter(pairs)?)
    }

    async fn query_partition(&self, pk: &str) -> Result<Vec<Item>, CounterStoreError> {
        let mut items = vec![];
        let mut start = None;
        loop {
            let out = self
                .ddb
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(pk))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    /// Adds `delta` to a salted sub-key with `ADD` (the salted strategy; at-least-once).
    pub async fn add_salted(
        &self,
        key: &CounterKey,
        salt: u32,
        delta: i64,
    ) -> Result<(), CounterStoreError> {
        self.ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(key.pk()))
            .key("sk", s(SubKey::Salt(salt).sort_key()))
            .update_expression("ADD #t :d")
            .expression_attribute_names("#t", "total")
            .expression_attribute_values(":d", AttributeValue::N(delta.to_string()))
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("UpdateItem", &self.table, e))?;
        Ok(())
    }

    /// [`CounterStore::correct`], only if the counter's total without `fix` is still
    /// `expected_without_fix`; `None` (nothing written) if it moved.
    pub async fn correct_if_unmoved(
        &self,
        key: &CounterKey,
        true_count: i64,
        expected_without_fix: i64,
    ) -> Result<Option<Correction>, CounterStoreError> {
        let sum = self.read(key).await?;
        if sum.without_fix() != expected_without_fix {
            return Ok(None);
        }
        self.write_fix(key, &sum, true_count).await.map(Some)
    }

    /// Sets the correction so that a read equals `true_count`; returns what changed.
    pub async fn correct(
        &self,
        key: &CounterKey,
        true_count: i64,
    ) -> Result<Correction, CounterStoreError> {
        let sum = self.read(key).await?;
        self.write_fix(key, &sum, true_count).await
    }

    /// Writes the `fix` that makes `sum` read as `true_count`, if it differs from the stored one.
    async fn write_fix(
        &self,
        key: &CounterKey,
        sum: &CounterSum,
        true_count: i64,
    ) -> Result<Correction, CounterStoreError> {
        let fix = correction(true_count, sum.without_fix(), sum.fix())?;
        if fix.change != 0 {
            self.ddb
                .put_item()
                .table_name(&self.table)
                .item("pk", s(key.pk()))
                .item("sk", s(SubKey::Fix.sort_key()))
                .item("total", AttributeValue::N(fix.fix.to_string()))
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("PutItem", &self.table, e))?;
        }
        Ok(fix)
    }
}

/// Records of `entries` a landed write counted and skipped (those above its expected seq).
fn count_applied(entries: &[(Seq, i64)], w: &FlushWrite) -> (u64, u64) {
    let mut counted = 0;
    let mut skipped = 0;
    for (seq, _) in entries {
        if w.expected.as_ref().is_some_and(|e| seq <= e) {
            skipped += 1;
        } else {
            counted += 1;
        }
    }
    (counted, skipped)
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::testing::mocked;

    async fn add_salted_failing_with(err: fn() -> UpdateItemError) -> CounterStoreError {
        let update = mock!(aws_sdk_dynamodb::Client::update_item).then_error(err);
        let ddb =
            mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); update);
        let key = CounterKey::new("likes", "p9").expect("valid key");
        CounterStore::new(ddb, "t-counters")
            .add_salted(&key, 3, 1)
            .await
            .expect_err("mocked to fail")
    }

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder()
            .code(code)
            .message("mocked")
            .build()
    }

    #[tokio::test]
    async fn a_failed_update_reaches_the_sdk_error_through_the_store_error() {
        let err = add_salted_failing_with(|| {
            UpdateItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(meta("ProvisionedThroughputExceededException"))
                    .build(),
            )
        })
        .await;
        assert!(matches!(err, CounterStoreError::Aws(_)), "{err:?}");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        assert_eq!(
            (aws.operation(), aws.resource()),
            ("UpdateItem", "t-counters")
        );
        let sdk = in_chain::<SdkError<UpdateItemError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(UpdateItemError::is_provisioned_throughput_exceeded_exception)
        );

        let err = add_salted_failing_with(|| {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta("ConditionalCheckFailedException"))
                    .build(),
            )
        })
        .await;
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_conditional_check_failed());
        assert!(!aws.is_throttling());
    }
}
