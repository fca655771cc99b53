//! Compaction against the counters table: read one counter's partition, ask
//! [`heatsink_core::counter::compact`], commit the decision as one `TransactWriteItems`.
//!
//! Every action of the transaction is conditional on what the Query read (see the core module
//! docs), so it lands whole or not at all: a cancelled transaction (another compaction or a
//! flush changed an item in between) is re-read and decided again, up to [`MAX_ROUNDS`] times.
//! IAM: `dynamodb:Query`, `dynamodb:UpdateItem` (tombstones, `settled`) and
//! `dynamodb:DeleteItem` (reaped tombstones) on the counters table.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};
use heatsink_core::counter::{
    CompactInput, Compaction, CounterKey, FoldKind, MAX_FOLDS, Settled, SubKey, WriterId,
    WriterItem, compact,
};

use super::{CounterStore, CounterStoreError, MAX_ROUNDS};
use crate::ddb::{Condition, OnlyIf, Update, Updating, get_n, get_s, n, s};
use crate::error::AwsError;

/// DynamoDB Streams keeps a record 24 hours: a tombstone this old has no record left to replay.
/// (A Kinesis stream keeps records as long as it is configured to, 24 hours to 365 days: use
/// that retention as the grace for retired Kinesis parents.)
pub const STREAM_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// What one [`CounterStore::compact`] did to one counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompactReport {
    /// Closed writers' items folded into `settled` (now tombstones).
    pub folded: u64,
    /// Tombstones deleted after their grace.
    pub reaped: u64,
    /// What `settled` gained (the folded totals).
    pub settled_gain: i64,
    /// Transactions cancelled by a concurrent change and decided again.
    pub conflicts: u64,
    /// Items of the partition read before the first transaction.
    pub items_before: usize,
}

impl CounterStore {
    /// Compacts counter `key`: folds the writer items of `closed` writers (shard ended, final
    /// flush written: see [`heatsink_core::counter::compact`]) into its `settled` item and
    /// reaps tombstones older than `grace`, raised to at least the time buckets' kept span
    /// (so bucket repair never loses a bucket it may still judge). One strongly consistent
    /// Query per round, one transaction of at most [`MAX_FOLDS`] + 1 actions. A retry after a
    /// commit finds nothing to do.
    pub async fn compact(
        &self,
        key: &CounterKey,
        closed: &BTreeSet<WriterId>,
        grace: Duration,
    ) -> Result<CompactReport, CounterStoreError> {
        let spec = self.buckets();
        let kept_ms = spec
            .width_ms()
            .saturating_mul(u64::from(spec.keep()).saturating_add(1));
        let grace_ms = u64::try_from(grace.as_millis())
            .unwrap_or(u64::MAX)
            .max(kept_ms);
        let pk = key.pk();
        let mut report = CompactReport::default();
        for round in 0..MAX_ROUNDS {
            let (writers, settled, items) = self.compactable(&pk).await?;
            if round == 0 {
                report.items_before = items;
            }
            let decision = compact(&CompactInput {
                writers: &writers,
                settled,
                closed,
                now_ms: crate::clock::now_ms(),
                grace_ms,
                max_folds: MAX_FOLDS,
            })?;
            if decision.is_empty() {
                return Ok(report);
            }
            if self.commit(&pk, &decision).await? {
                report.reaped += decision.deleted() as u64;
                report.folded += (decision.folds.len() - decision.deleted()) as u64;
                report.settled_gain = report
                    .settled_gain
                    .saturating_add(decision.folds.iter().map(|f| f.total).sum());
                if !decision.more {
                    return Ok(report);
                }
            } else {
                report.conflicts += 1;
            }
        }
        Err(CounterStoreError::Contended(pk))
    }

    /// The partition's writer items and `settled` item, and how many items it has.
    async fn compactable(
        &self,
        pk: &str,
    ) -> Result<(Vec<WriterItem>, Option<Settled>, usize), CounterStoreError> {
        let items = self.query_partition(pk).await?;
        let mut writers = vec![];
        let mut settled = None;
        for item in &items {
            let Some(sk) = get_s(item, "sk") else {
                continue;
            };
            let malformed = |reason: &str| CounterStoreError::Malformed {
                pk: pk.to_owned(),
                sk: sk.to_owned(),
                reason: reason.to_owned(),
            };
            match SubKey::parse(sk)? {
                SubKey::Writer(writer) => {
                    let stored = Self::parse_stored(item, pk)?;
                    let folded_ms = match item.get("folded") {
                        None => None,
                        Some(_) => Some(
                            get_n(item, "folded")
                                .ok_or_else(|| malformed("`folded` is not a whole number"))?,
                        ),
                    };
                    writers.push(WriterItem {
                        writer,
                        total: stored.total,
                        seq: stored.seq,
                        folded_ms,
                    });
                }
                SubKey::Settled => {
                    let total = get_n(item, "total").ok_or_else(|| malformed("no `total`"))?;
                    let rev =
                        get_n::<u64>(item, "rev").ok_or_else(|| malformed("no whole `rev`"))?;
                    settled = Some(Settled { total, rev });
                }
                SubKey::Salt(_) | SubKey::Fix => {}
            }
        }
        Ok((writers, settled, items.len()))
    }

    /// Sends `decision` as one transaction; `Ok(false)` when it was cancelled by a condition
    /// or a conflicting write (nothing of it landed: re-read and decide again).
    async fn commit(&self, pk: &str, decision: &Compaction) -> Result<bool, CounterStoreError> {
        let bad = |e: aws_sdk_dynamodb::error::BuildError| CounterStoreError::Malformed {
            pk: pk.to_owned(),
            sk: String::new(),
            reason: e.to_string(),
        };
        let mut req = self.ddb.transact_write_items();
        for fold in &decision.folds {
            // The writer item exactly as read: seq, total, and folded or not.
            let unchanged = Condition::eq("seq", s(fold.seq.as_padded()))
                .and(Condition::eq("total", n(fold.total)))
                .and(match fold.folded_ms {
                    None => Condition::not_exists("folded"),
                    Some(f) => Condition::eq("folded", n(f)),
                });
            let action = match fold.kind {
                FoldKind::Tombstone { folded_ms } => {
                    let u = aws_sdk_dynamodb::types::Update::builder()
                        .table_name(&self.table)
                        .key("pk", s(pk))
                        .key("sk", s(&fold.sk))
                        .updating(
                            &Update::new()
                                .set("total", n(0u8))
                                .set("folded", n(folded_ms)),
                        )
                        .only_if(&unchanged);
                    TransactWriteItem::builder()
                        .update(u.build().map_err(bad)?)
                        .build()
                }
                FoldKind::Delete => {
                    let d = Delete::builder()
                        .table_name(&self.table)
                        .key("pk", s(pk))
                        .key("sk", s(&fold.sk))
                        .only_if(&unchanged);
                    TransactWriteItem::builder()
                        .delete(d.build().map_err(bad)?)
                        .build()
                }
            };
            req = req.transact_items(action);
        }
        if let Some(settled) = decision.settled {
            let unchanged = match settled.expected_rev {
                None => Condition::not_exists("rev"),
                Some(r) => Condition::eq("rev", n(r)),
            };
            let u = aws_sdk_dynamodb::types::Update::builder()
                .table_name(&self.table)
                .key("pk", s(pk))
                .key("sk", s(SubKey::Settled.sort_key()))
                .updating(
                    &Update::new()
                        .set("total", n(settled.total))
                        .set("rev", n(settled.rev)),
                )
                .only_if(&unchanged);
            req = req.transact_items(
                TransactWriteItem::builder()
                    .update(u.build().map_err(bad)?)
                    .build(),
            );
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) => {
                if let Some(TransactWriteItemsError::TransactionCanceledException(t)) =
                    e.as_service_error()
                {
                    let retry = t.cancellation_reasons().iter().any(|r| {
                        matches!(
                            r.code(),
                            Some("ConditionalCheckFailed" | "TransactionConflict")
                        )
                    });
                    if retry {
                        return Ok(false);
                    }
                }
                Err(AwsError::dynamodb("TransactWriteItems", &self.table, e).into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::error::SdkError;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::{ResourceNotFoundException, TransactionCanceledException};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;
    use crate::testing::{in_chain, mocked};

    /// One closed writer (`w#shardId-1`, total 5, seq 9) and nothing else.
    fn partition() -> QueryOutput {
        let item = HashMap::from([
            ("pk".to_owned(), s("likes#p9")),
            ("sk".to_owned(), s("w#shardId-1")),
            ("total".to_owned(), n(5)),
            (
                "seq".to_owned(),
                s(heatsink_core::counter::Seq::from(9).as_padded()),
            ),
        ]);
        QueryOutput::builder().items(item).count(1).build()
    }

    use crate::testing::error_meta as meta;

    #[tokio::test]
    async fn smithy_mock_a_cancelled_compaction_is_decided_again_and_a_failure_keeps_the_sdk_error()
    {
        let closed = BTreeSet::from([WriterId::new("shardId-1").expect("writer")]);
        let key = CounterKey::new("likes", "p9").expect("key");
        // Cancelled by a condition: re-read; the second read finds the item already folded.
        let query = mock!(aws_sdk_dynamodb::Client::query).then_output(partition);
        let cancelled = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder()
                    .cancellation_reasons(
                        CancellationReason::builder()
                            .code("ConditionalCheckFailed")
                            .build(),
                    )
                    .meta(meta("TransactionCanceledException"))
                    .build(),
            )
        });
        let folded = mock!(aws_sdk_dynamodb::Client::query)
            .then_output(|| QueryOutput::builder().count(0).build());
        let ddb = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&query, &cancelled, &folded],
            |c| c.retry_config(RetryConfig::disabled())
        );
        let report = CounterStore::new(ddb, "t-counters")
            .compact(&key, &closed, Duration::ZERO)
            .await
            .expect("decided again");
        assert_eq!(
            (report.conflicts, report.folded, report.items_before),
            (1, 0, 1)
        );

        // Any other failure is the store's Aws error, the SDK error kept whole.
        let query = mock!(aws_sdk_dynamodb::Client::query).then_output(partition);
        let missing = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_error(|| {
            TransactWriteItemsError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .build(),
            )
        });
        let ddb = mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled());
            query, missing);
        let err = CounterStore::new(ddb, "t-counters")
            .compact(&key, &closed, Duration::ZERO)
            .await
            .expect_err("mocked to fail");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_not_found());
        assert_eq!(aws.operation(), "TransactWriteItems");
        assert!(in_chain::<SdkError<TransactWriteItemsError, HttpResponse>>(&err).is_some());
    }
}
