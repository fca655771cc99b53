//! Scatter-gather reads over the sub-keys or index shards of one logical key.
//!
//! Salting splits one hot key into S sub-keys and a write-sharded GSI splits one index key into
//! N shards; a reader has to ask all of them. This module does that in parallel with a bound on
//! concurrency and a timeout per shard, and says which shards answered: a partial result is
//! flagged ([`Gathered::missing`]), never passed off as complete.
//!
//! - [`FanOut::run`]: any per-shard async call, gathered in shard order.
//! - [`batch_get`]: point reads through BatchGetItem, `UnprocessedKeys` retried with backoff.
//! - [`MergedQuery`]: one Query per shard merged in sort-key order, paged with one opaque
//!   continuation token ([`heatsink_core::merge::Token`]), so paging a GSI sharded 16 ways feels
//!   exactly like paging one Query: no duplicates, no gaps, stable order, `limit` honoured.
//! - [`sum_counter`]: the sum of a counter's sub-key items.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::scatter::ScatterError> {
//! use heatsink::scatter::MergedQuery;
//! let q = MergedQuery::gsi("shop-orders", "by-creator", "creator_shard", "created_at",
//!     (0..16).map(|n| format!("nova#{n}")).collect(), &["post"]);
//! let first = q.page(&ddb, 20, None).await?;
//! let second = q.page(&ddb, 20, first.next.as_deref()).await?;
//! # Ok(()) }
//! ```

/// Merging sorted pages across shards (pure): the k-way merge and its continuation token.
pub use heatsink_core::merge;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use futures::StreamExt;
use heatsink_core::merge::{
    Cursor, KeyMap, KeyValue, PageEnd, ShardBuffer, Token, TokenError, fingerprint, merge_page,
};

use crate::ddb::codec::{core_key_value as key_value, key_item as to_item};
use crate::ddb::{KeyCondition, QueryKey, s};
use crate::error::AwsError;

/// One DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Errors of scatter-gather reads.
#[derive(Debug, thiserror::Error)]
pub enum ScatterError {
    /// The continuation token was refused; start again without a token.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Some shards did not answer, so a merged page cannot be built without a gap; retry.
    #[error("{} of {total} shards did not answer: {}", missing.len(), missing.join(", "))]
    Partial {
        /// The shards (partition values) that failed or timed out, with the reason.
        missing: Vec<String>,
        /// How many shards were asked.
        total: usize,
    },
    /// The request is invalid (empty shard list, zero limit, …).
    #[error("invalid scatter request: {0}")]
    Invalid(String),
    /// BatchGetItem still had unprocessed keys after every retry.
    #[error("BatchGetItem left {0} keys unprocessed after all retries")]
    Unprocessed(usize),
    /// DynamoDB refused the request or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl ScatterError {
    /// The failed DynamoDB call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            _ => None,
        }
    }
}

/// What became of one shard's request.
#[derive(Debug)]
pub enum ShardOutcome<T> {
    /// The shard answered.
    Answered(T),
    /// The call failed; the message says why.
    Failed(String),
    /// No answer within the per-shard timeout.
    TimedOut,
}

/// The answers of a fan-out, in the order the shards were given.
#[derive(Debug)]
pub struct Gathered<T> {
    /// `(shard, outcome)` per shard.
    pub shards: Vec<(String, ShardOutcome<T>)>,
}

impl<T> Gathered<T> {
    /// True when every shard answered.
    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// The shards that did not answer, each with the reason.
    pub fn missing(&self) -> Vec<String> {
        self.shards
            .iter()
            .filter_map(|(s, o)| match o {
                ShardOutcome::Answered(_) => None,
                ShardOutcome::Failed(e) => Some(format!("{s} ({e})")),
                ShardOutcome::TimedOut => Some(format!("{s} (timed out)")),
            })
            .collect()
    }

    /// The answers that arrived, with their shard.
    pub fn answered(&self) -> impl Iterator<Item = (&str, &T)> {
        self.shards.iter().filter_map(|(s, o)| match o {
            ShardOutcome::Answered(v) => Some((s.as_str(), v)),
            _ => None,
        })
    }

    /// Every answer in shard order, or [`ScatterError::Partial`] naming the shards that failed.
    pub fn into_complete(self) -> Result<Vec<T>, ScatterError> {
        let total = self.shards.len();
        let missing = self.missing();
        if !missing.is_empty() {
            return Err(ScatterError::Partial { missing, total });
        }
        Ok(self
            .shards
            .into_iter()
            .filter_map(|(_, o)| match o {
                ShardOutcome::Answered(v) => Some(v),
                _ => None,
            })
            .collect())
    }
}

/// How a fan-out runs: how many shards at once, and how long each may take.
#[derive(Debug, Clone, Copy)]
pub struct FanOut {
    /// Most requests in flight at once (1 = sequential).
    pub concurrency: usize,
    /// Time allowed to each shard's request.
    pub shard_timeout: Duration,
}

impl Default for FanOut {
    /// 16 shards at once, 2 s per shard: a DynamoDB read takes milliseconds, so 2 s only trips
    /// on a real fault, and 16 covers the common S ≤ 16 in one round.
    fn default() -> Self {
        Self {
            concurrency: 16,
            shard_timeout: Duration::from_secs(2),
        }
    }
}

impl FanOut {
    /// Sequential: one shard at a time (the baseline parallel fan-out is measured against).
    pub fn sequential() -> Self {
        Self {
            concurrency: 1,
            ..Self::default()
        }
    }

    /// Calls `call` once per shard, at most `concurrency` at a time, and gathers the outcomes.
    pub async fn run<S, T, E, F, Fut>(&self, shards: Vec<S>, call: F) -> Gathered<T>
    where
        S: ToString + Clone,
        E: std::fmt::Display,
        F: Fn(S) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let timeout = self.shard_timeout;
        let call = &call;
        let mut outcomes: Vec<(usize, String, ShardOutcome<T>)> =
            futures::stream::iter(shards.into_iter().enumerate())
                .map(|(i, shard)| async move {
                    let name = shard.to_string();
                    let outcome = match tokio::time::timeout(timeout, call(shard)).await {
                        Ok(Ok(v)) => ShardOutcome::Answered(v),
                        Ok(Err(e)) => ShardOutcome::Failed(e.to_string()),
                        Err(_) => ShardOutcome::TimedOut,
                    };
                    (i, name, outcome)
                })
                .buffer_unordered(self.concurrency.max(1))
                .collect()
                .await;
        outcomes.sort_by_key(|(i, _, _)| *i);
        Gathered {
            shards: outcomes.into_iter().map(|(_, s, o)| (s, o)).collect(),
        }
    }
}

/// Backoff for retrying `UnprocessedKeys`: exponential from `base`, capped, bounded attempts.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
    /// Attempts in total, the first included.
    pub attempts: u32,
}

impl Default for Backoff {
    /// 25 ms doubling to 1 s over 8 attempts (≈ 3 s in all), like the SDK's own retry budget.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(25),
            cap: Duration::from_secs(1),
            attempts: 8,
        }
    }
}

impl Backoff {
    /// The delay before retry number `n` (0-based), with full jitter.
    pub fn delay(&self, n: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << n.min(16));
        let ceiling = exp.min(self.cap);
        ceiling.mul_f64(rand::random::<f64>())
    }
}

/// Reads `keys` from `table` with BatchGetItem (100 keys a request), retrying `UnprocessedKeys`
/// with `backoff`; fails with [`ScatterError::Unprocessed`] if any remain after every attempt.
pub async fn batch_get(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: Vec<Item>,
    backoff: Backoff,
) -> Result<Vec<Item>, ScatterError> {
    batch_get_with(ddb, table, keys, backoff, false).await
}

/// [`batch_get`] with a choice of strongly consistent reads (a flush must read what it last wrote).
pub async fn batch_get_with(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: Vec<Item>,
    backoff: Backoff,
    consistent: bool,
) -> Result<Vec<Item>, ScatterError> {
    let mut items = vec![];
    for chunk in keys.chunks(100) {
        let mut pending = chunk.to_vec();
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt >= backoff.attempts {
                return Err(ScatterError::Unprocessed(pending.len()));
            }
            if attempt > 0 {
                tokio::time::sleep(backoff.delay(attempt - 1)).await;
            }
            attempt += 1;
            let request = KeysAndAttributes::builder()
                .set_keys(Some(pending.clone()))
                .consistent_read(consistent)
                .build()
                .map_err(|e| ScatterError::Invalid(e.to_string()))?;
            let out = ddb
                .batch_get_item()
                .request_items(table, request)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("BatchGetItem", table, e))?;
            if let Some(mut got) = out.responses {
                items.extend(got.remove(table).unwrap_or_default());
            }
            pending = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(table))
                .map(|k| k.keys)
                .unwrap_or_default();
        }
    }
    Ok(items)
}

/// Sums a numeric attribute over items (a counter's sub-keys); missing or non-numeric is 0.
pub fn sum_counter<'a>(items: impl IntoIterator<Item = &'a Item>, attr: &str) -> i64 {
    items
        .into_iter()
        .filter_map(|i| i.get(attr))
        .filter_map(|v| v.as_n().ok())
        .filter_map(|n| n.parse::<i64>().ok())
        .sum()
}

/// One page of a merged query.
#[derive(Debug, Clone)]
pub struct Page {
    /// Up to `limit` items in merged sort-key order.
    pub items: Vec<Item>,
    /// The token for the next page; `None` when this was the last one.
    pub next: Option<String>,
}

/// A Query of the same key condition across N shards, merged in sort-key order.
#[derive(Debug, Clone)]
pub struct MergedQuery {
    table: String,
    index: Option<String>,
    partition_attr: String,
    sort_attr: String,
    shards: Vec<String>,
    key_attrs: Vec<String>,
    descending: bool,
    fan_out: FanOut,
}

impl MergedQuery {
    /// A merged query over a write-sharded GSI.
    ///
    /// `shards` are the index partition values (`nova#0..nova#15`); `table_keys` names the base
    /// table's key attributes, which DynamoDB needs in a GSI's `ExclusiveStartKey`.
    pub fn gsi(
        table: &str,
        index: &str,
        partition_attr: &str,
        sort_attr: &str,
        shards: Vec<String>,
        table_keys: &[&str],
    ) -> Self {
        let mut key_attrs: Vec<String> = table_keys.iter().map(|s| (*s).to_owned()).collect();
        for a in [partition_attr, sort_attr] {
            if !key_attrs.iter().any(|k| k == a) {
                key_attrs.push(a.to_owned());
            }
        }
        Self {
            table: table.to_owned(),
            index: Some(index.to_owned()),
            partition_attr: partition_attr.to_owned(),
            sort_attr: sort_attr.to_owned(),
            shards,
            key_attrs,
            descending: false,
            fan_out: FanOut::default(),
        }
    }

    /// A merged query over salted sub-keys of a base table (`pk = k#0..k#S-1`, sorted by `sk`).
    pub fn table(table: &str, partition_attr: &str, sort_attr: &str, shards: Vec<String>) -> Self {
        Self {
            table: table.to_owned(),
            index: None,
            partition_attr: partition_attr.to_owned(),
            sort_attr: sort_attr.to_owned(),
            shards,
            key_attrs: vec![partition_attr.to_owned(), sort_attr.to_owned()],
            descending: false,
            fan_out: FanOut::default(),
        }
    }

    /// Newest first (descending sort key) instead of oldest first.
    pub fn descending(mut self, yes: bool) -> Self {
        self.descending = yes;
        self
    }

    /// Concurrency and per-shard timeout of each refill round.
    pub fn fan_out(mut self, fan_out: FanOut) -> Self {
        self.fan_out = fan_out;
        self
    }

    fn fingerprint(&self) -> String {
        let mut parts = vec![
            self.table.as_str(),
            self.index.as_deref().unwrap_or(""),
            self.partition_attr.as_str(),
            self.sort_attr.as_str(),
            if self.descending { "desc" } else { "asc" },
        ];
        parts.extend(self.shards.iter().map(String::as_str));
        fingerprint(&parts)
    }

    /// Returns up to `limit` items after `token` (none = from the start) and the next token.
    pub async fn page(
        &self,
        ddb: &aws_sdk_dynamodb::Client,
        limit: usize,
        token: Option<&str>,
    ) -> Result<Page, ScatterError> {
        if self.shards.is_empty() {
            return Err(ScatterError::Invalid("no shards to query".into()));
        }
        if limit == 0 {
            return Err(ScatterError::Invalid("limit must be at least 1".into()));
        }
        let query_id = self.fingerprint();
        let mut token = match token {
            Some(t) => Token::decode(t, &query_id, self.shards.len())?,
            None => Token::start(self.shards.len())?,
        };
        // A forged cursor must not read another partition: its partition value must be its shard's.
        for (cursor, shard) in token.cursors.iter().zip(&self.shards) {
            if let Cursor::After(key) = cursor {
                let ok = key.get(&self.partition_attr) == Some(&KeyValue::S(shard.clone()))
                    && self.key_attrs.iter().all(|a| key.contains_key(a));
                if !ok {
                    return Err(
                        TokenError::Malformed("cursor does not match its shard".into()).into(),
                    );
                }
            }
        }
        let mut buffers: Vec<ShardBuffer<Item>> = token
            .cursors
            .iter()
            .map(|c| match c {
                Cursor::Done => ShardBuffer::done(),
                _ => ShardBuffer::new(vec![], true),
            })
            .collect();
        let mut resume: Vec<Option<Item>> = token
            .cursors
            .iter()
            .map(|c| match c {
                Cursor::After(k) => Some(to_item(k)),
                _ => None,
            })
            .collect();
        let sort_attr = self.sort_attr.clone();
        let descending = self.descending;
        let mut rows: Vec<(usize, Item)> = vec![];
        loop {
            let end = merge_page(
                &mut buffers,
                limit,
                |item: &Item| SortKey {
                    value: item.get(&sort_attr).and_then(key_value),
                    descending,
                },
                &mut rows,
            );
            let PageEnd::Refill(idx) = end else { break };
            let want = (limit - rows.len()).clamp(1, 1000) as i32;
            let calls: Vec<(usize, Option<Item>)> =
                idx.iter().map(|&i| (i, resume[i].clone())).collect();
            let gathered = self
                .fan_out
                .run(
                    calls.into_iter().map(ShardCall).collect(),
                    |ShardCall((i, start))| self.query_shard(ddb, i, start, want),
                )
                .await;
            let total = self.shards.len();
            let answers = gathered.into_complete().map_err(|e| match e {
                ScatterError::Partial { missing, .. } => ScatterError::Partial { missing, total },
                other => other,
            })?;
            for (i, items, last_key) in answers {
                let more = last_key.is_some();
                resume[i] = last_key.or_else(|| resume[i].clone());
                buffers[i].refill(items, more);
            }
        }
        // Each shard resumes after the last row this page took from it.
        let mut took_from = vec![false; self.shards.len()];
        for (i, item) in rows.iter().rev() {
            if !took_from[*i] {
                took_from[*i] = true;
                token.cursors[*i] = Cursor::After(self.key_of(item));
            }
        }
        for (i, buf) in buffers.iter().enumerate() {
            if buf.is_exhausted() {
                token.cursors[i] = Cursor::Done;
            }
        }
        let next = (!token.is_finished()).then(|| token.encode(&query_id));
        Ok(Page {
            items: rows.into_iter().map(|(_, item)| item).collect(),
            next,
        })
    }

    async fn query_shard(
        &self,
        ddb: &aws_sdk_dynamodb::Client,
        i: usize,
        start: Option<Item>,
        limit: i32,
    ) -> Result<(usize, Vec<Item>, Option<Item>), AwsError> {
        // paged by hand: one page per call; the merged read keeps each shard's cursor in its
        // continuation token between the caller's pages.
        let out = ddb
            .query()
            .table_name(&self.table)
            .set_index_name(self.index.clone())
            .query_key(&KeyCondition::partition(
                &self.partition_attr,
                s(&self.shards[i]),
            ))
            .scan_index_forward(!self.descending)
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
        Ok((i, out.items.unwrap_or_default(), out.last_evaluated_key))
    }

    fn key_of(&self, item: &Item) -> KeyMap {
        self.key_attrs
            .iter()
            .filter_map(|a| item.get(a).and_then(key_value).map(|v| (a.clone(), v)))
            .collect()
    }
}

/// A refill request for one shard, named after its index for fan-out reporting.
#[derive(Clone)]
struct ShardCall((usize, Option<Item>));

impl std::fmt::Display for ShardCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard {}", self.0.0)
    }
}

#[derive(PartialEq, Eq)]
struct SortKey {
    value: Option<KeyValue>,
    descending: bool,
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let ord = match (&self.value, &other.value) {
            (Some(a), Some(b)) => a.sort_cmp(b),
            (a, b) => a.is_some().cmp(&b.is_some()),
        };
        if self.descending { ord.reverse() } else { ord }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
    use aws_sdk_dynamodb::operation::query::QueryError;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::testing::mocked;

    fn throttled() -> ProvisionedThroughputExceededException {
        ProvisionedThroughputExceededException::builder()
            .message("slow down")
            .meta(
                ErrorMetadata::builder()
                    .code("ProvisionedThroughputExceededException")
                    .message("slow down")
                    .build(),
            )
            .build()
    }

    #[tokio::test]
    async fn a_failed_batch_get_reaches_the_sdk_error_and_a_failed_shard_names_the_call() {
        let get = mock!(aws_sdk_dynamodb::Client::batch_get_item)
            .then_error(|| BatchGetItemError::ProvisionedThroughputExceededException(throttled()));
        let query = mock!(aws_sdk_dynamodb::Client::query)
            .then_error(|| QueryError::ProvisionedThroughputExceededException(throttled()));
        let ddb =
            mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); get, query);
        let key = Item::from([("pk".to_owned(), AttributeValue::S("p9#0".into()))]);
        let err = batch_get(&ddb, "t-orders", vec![key], Backoff::default())
            .await
            .expect_err("mocked to fail");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        assert_eq!(
            (aws.operation(), aws.resource()),
            ("BatchGetItem", "t-orders")
        );
        let sdk = in_chain::<SdkError<BatchGetItemError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(BatchGetItemError::is_provisioned_throughput_exceeded_exception)
        );

        let q = MergedQuery::table("t-orders", "pk", "sk", vec!["p9#0".into()]);
        let err = q.page(&ddb, 10, None).await.expect_err("mocked to fail");
        assert!(
            matches!(&err, ScatterError::Partial { missing, total: 1 }
                if missing == &["shard 0 (DynamoDB Query on t-orders failed: ProvisionedThroughputExceededException: slow down)"]),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_slow_shard_is_reported_missing_not_dropped_silently() {
        let fan = FanOut {
            concurrency: 4,
            shard_timeout: Duration::from_millis(50),
        };
        let gathered = fan
            .run(vec!["s0", "s1", "s2"], |s| async move {
                if s == "s1" {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                if s == "s2" {
                    return Err("boom");
                }
                Ok::<_, &str>(s.len())
            })
            .await;
        assert!(!gathered.is_complete());
        assert_eq!(gathered.missing(), ["s1 (timed out)", "s2 (boom)"]);
        assert_eq!(gathered.answered().collect::<Vec<_>>(), [("s0", &2)]);
        assert!(matches!(
            gathered.into_complete(),
            Err(ScatterError::Partial { total: 3, .. })
        ));
    }

    #[tokio::test]
    async fn concurrency_is_bounded() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let in_flight = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let fan = FanOut {
            concurrency: 3,
            shard_timeout: Duration::from_secs(5),
        };
        let gathered = fan
            .run((0..12).collect::<Vec<u32>>(), |_| async {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await;
        assert!(gathered.is_complete());
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_counter_sum_adds_every_numeric_sub_key() {
        let item = |n: &str| Item::from([("total".to_owned(), AttributeValue::N(n.to_owned()))]);
        let items = [item("5"), item("-2"), item("40"), Item::new()];
        assert_eq!(sum_counter(&items, "total"), 43);
    }

    #[test]
    fn backoff_never_exceeds_its_cap() {
        let b = Backoff::default();
        for n in 0..40 {
            assert!(b.delay(n) <= b.cap);
        }
    }
}
