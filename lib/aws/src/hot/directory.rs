//! The hot-key directory in DynamoDB, its bounded-age cache, and the controller that edits it.
//!
//! The `hotkeys` table holds one item per mitigated key: `key → {mode, salts, draining, epoch,
//! reason, since, calm_since, expires_at}` ([`heatsink_core::hot::Entry`]). Every change is a
//! conditional write on the epoch it was decided from (`attribute_not_exists(#k)` for a new
//! entry), so a controller that decided on an old view loses with [`DirectoryError::Conflict`]
//! instead of overwriting a newer decision. `expires_at` is the table's TTL attribute: DynamoDB
//! deletes expired cache and limit entries within days, and readers ignore them from the second
//! they expire.
//!
//! Routers and writers do not read the table per request: [`CachedDirectory`] keeps a
//! [`Snapshot`] at most `max_age` old (one Scan per `max_age` per process; the directory holds
//! only the hot keys, a few items), and the snapshot is the write-sharding
//! [`SaltPolicy`](heatsink_core::keys::SaltPolicy). A decision therefore reaches every writer
//! within `max_age` plus one Scan.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::hot::DirectoryError> {
//! use std::time::Duration;
//! use heatsink::detect::Kind;
//! use heatsink::hot::{ControllerConfig, Signal};
//! use heatsink::keys::SaltPolicy;
//! use heatsink::clock::now_secs;
//! use heatsink::hot::{CachedDirectory, Controller, Directory};
//!
//! let directory = Directory::new(ddb, "heatsink-hotkeys");
//! let controller = Controller::new(directory.clone(), ControllerConfig::default());
//! let signal = Signal::new("p9", Kind::Write, 2_400.0, 1_000.0, "sampler");
//! controller.run(&[signal], now_secs()).await?;
//!
//! let cached = CachedDirectory::new(directory, Duration::from_millis(500));
//! assert_eq!(cached.snapshot().await?.salts("p9"), 3);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::hot::{Change, Entry, HotError, Mode, Snapshot};
use heatsink_core::keys::SaltState;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::ddb::{Condition, OnlyIf, Written, n, s};
use crate::error::AwsError;
use crate::schema::{Schema, Table};

/// Items a listing reads at most: the directory holds the hot keys of a deployment, a few
/// dozen; past this the listing is refused, not cut short.
const MAX_ENTRIES: usize = 100_000;

/// Errors of the hot-key directory.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// The stored epoch is not the one the change was decided from (someone changed it first).
    #[error(
        "hot-key entry {key:?} changed since epoch {expected:?} was read; re-read and decide again"
    )]
    Conflict {
        /// The key.
        key: String,
        /// The epoch the change expected (`None`: expected no entry).
        expected: Option<u64>,
    },
    /// A stored item is not a valid entry (edited by hand?); it is reported, not guessed at.
    #[error("hot-key item {key:?} is malformed: {reason}")]
    Malformed {
        /// The item's key attribute, if readable.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The entry or the requested edit breaks a directory rule.
    #[error(transparent)]
    Hot(#[from] HotError),
    /// DynamoDB refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The cached directory's last refresh failed less than a back-off ago and it holds no
    /// snapshot young enough to serve ([`CachedDirectory`]); nothing was read this time.
    #[error(
        "hot-key directory unreadable (last failure {failed_ms} ms ago: {reason}); next read in {retry_in_ms} ms"
    )]
    Unavailable {
        /// Milliseconds since the failed refresh.
        failed_ms: u64,
        /// Milliseconds until the next refresh is tried.
        retry_in_ms: u64,
        /// The failure, as text (the typed error was returned to the caller that hit it).
        reason: String,
    },
}

impl DirectoryError {
    /// The failed DynamoDB call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            _ => None,
        }
    }
}

/// The stored shape of an entry: flat attributes, `expires_at` named for the table's TTL.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    key: String,
    mode: Mode,
    salts: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    draining: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit_per_second: Option<u32>,
    epoch: u64,
    reason: String,
    since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    calm_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<u64>,
}

impl From<&Entry> for Record {
    fn from(e: &Entry) -> Self {
        Self {
            key: e.key.clone(),
            mode: e.mode,
            salts: e.salts.current(),
            draining: e.salts.draining(),
            limit_per_second: e.limit_per_second,
            epoch: e.epoch,
            reason: e.reason.clone(),
            since: e.since,
            calm_since: e.calm_since,
            expires_at: e.expires,
        }
    }
}

impl TryFrom<Record> for Entry {
    type Error = HotError;

    fn try_from(r: Record) -> Result<Self, HotError> {
        let steady = SaltState::steady(r.salts)?;
        let salts = match r.draining {
            None => steady,
            // Rebuild "current S, old S draining" the way it was made: from old to current.
            Some(old) => SaltState::steady(old)?.transition_to(r.salts)?,
        };
        let entry = Entry {
            key: r.key,
            mode: r.mode,
            salts,
            limit_per_second: r.limit_per_second,
            epoch: r.epoch,
            reason: r.reason,
            since: r.since,
            calm_since: r.calm_since,
            expires: r.expires_at,
        };
        entry.validate()?;
        Ok(entry)
    }
}

type Item = HashMap<String, AttributeValue>;

fn to_item(entry: &Entry) -> Result<Item, DirectoryError> {
    crate::ddb::row::to_item(&Record::from(entry)).map_err(|e| DirectoryError::Malformed {
        key: entry.key.clone(),
        reason: e.to_string(),
    })
}

fn from_item(item: Item) -> Result<Entry, DirectoryError> {
    let key = crate::ddb::get_s(&item, "key")
        .unwrap_or_default()
        .to_owned();
    let malformed = |reason: String| DirectoryError::Malformed {
        key: key.clone(),
        reason,
    };
    let record: Record = crate::ddb::row::from_item(item).map_err(|e| malformed(e.to_string()))?;
    Entry::try_from(record).map_err(|e| malformed(e.to_string()))
}

/// The `hotkeys` table: read entries, apply epoch-conditional changes.
#[derive(Debug, Clone)]
pub struct Directory {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
}

impl Directory {
    /// The directory in `table`.
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            // No call waits forever: a client without a bound of its own gets the policy's.
            ddb: crate::timeouts::bounded!(aws_sdk_dynamodb, ddb, crate::timeouts::Timeouts::CALL),
            table: table.into(),
        }
    }

    /// The directory in `schema`'s `hotkeys` table.
    pub fn from_schema(ddb: aws_sdk_dynamodb::Client, schema: &Schema) -> Self {
        Self::new(ddb, schema.table_name(Table::Hotkeys))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// One key's entry, expired or not (strongly consistent).
    pub async fn get(&self, key: &str) -> Result<Option<Entry>, DirectoryError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("key", s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", &self.table, e))?;
        out.item.map(from_item).transpose()
    }

    /// Every stored entry, expired ones included (a Scan: the directory holds only hot keys).
    ///
    /// A malformed item fails the whole listing: acting on a partial directory could undo a
    /// salt that readers still depend on.
    pub async fn list(&self) -> Result<Vec<Entry>, DirectoryError> {
        let mut entries = self
            .scan()
            .await?
            .into_iter()
            .map(from_item)
            .collect::<Result<Vec<_>, _>>()?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Every item of the table (a strongly consistent Scan, every page).
    async fn scan(&self) -> Result<Vec<Item>, DirectoryError> {
        let pages = self
            .ddb
            .scan()
            .table_name(&self.table)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        crate::ddb::read_all(pages, MAX_ENTRIES).await.map_err(|e| {
            e.into_error(
                |e| AwsError::dynamodb("Scan", &self.table, e).into(),
                |bound| DirectoryError::Malformed {
                    key: String::new(),
                    reason: format!("the directory holds more than {bound} items"),
                },
            )
        })
    }

    /// The live entries at `now`.
    pub async fn snapshot(&self, now: u64) -> Result<Snapshot, DirectoryError> {
        Ok(Snapshot::new(self.list().await?, now))
    }

    /// Every well-formed entry, and the malformed items skipped (for readers: one bad item,
    /// edited by hand, must not blind every writer; the controller uses the strict [`Directory::list`]).
    pub async fn list_lenient(&self) -> Result<(Vec<Entry>, Vec<DirectoryError>), DirectoryError> {
        let mut entries = Vec::new();
        let mut malformed = Vec::new();
        for item in self.scan().await? {
            match from_item(item) {
                Ok(e) => entries.push(e),
                Err(e) => malformed.push(e),
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((entries, malformed))
    }

    /// Applies one change if the stored epoch is still the one it was decided from.
    pub async fn apply(&self, change: &Change) -> Result<(), DirectoryError> {
        let conflict = |expected| DirectoryError::Conflict {
            key: change.key().to_owned(),
            expected,
        };
        match change {
            Change::Put {
                entry,
                expected_epoch,
            } => {
                entry.validate()?;
                let unchanged = match expected_epoch {
                    None => Condition::not_exists("key"),
                    Some(epoch) => Condition::eq("epoch", n(*epoch)),
                };
                let put = self
                    .ddb
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(to_item(entry)?))
                    .only_if(&unchanged);
                if put.send().await.written("PutItem", &self.table)? {
                    Ok(())
                } else {
                    Err(conflict(*expected_epoch))
                }
            }
            Change::Remove {
                key,
                expected_epoch,
            } => {
                let delete = self
                    .ddb
                    .delete_item()
                    .table_name(&self.table)
                    .key("key", s(key))
                    .only_if(&Condition::eq("epoch", n(*expected_epoch)));
                if delete.send().await.written("DeleteItem", &self.table)? {
                    Ok(())
                } else {
                    Err(conflict(Some(*expected_epoch)))
                }
            }
        }
    }
}

/// A directory snapshot shared by a process's writers and readers, at most `max_age` old while
/// the table answers, at most `max_stale` old when it does not.
///
/// The hot path is a read lock and a clock read; one caller refreshes while the others wait for
/// it (a Scan per `max_age`, not per request). Reads degrade instead of failing:
/// - a malformed item is skipped (and logged with its key): the other entries still apply;
/// - a failed refresh keeps serving the last good snapshot until it is `max_stale` old (default
///   60 s; keep it below the controller's merge delay, 600 s by default, so a salt transition
///   is never finished while a writer still uses the older S);
/// - after a failure nobody reads the table for a back-off (1 s, doubling to 30 s while
///   failures continue): a table in trouble gets one Scan per back-off per process, not one per
///   request. Within it, with no usable snapshot, the answer is [`DirectoryError::Unavailable`].
#[derive(Debug)]
pub struct CachedDirectory {
    directory: Directory,
    max_age: Duration,
    max_stale: Duration,
    current: std::sync::RwLock<Option<(Instant, Arc<Snapshot>)>>,
    failure: std::sync::RwLock<Option<Failure>>,
    refresh: Mutex<()>,
}

#[derive(Debug, Clone)]
struct Failure {
    at: Instant,
    backoff: Duration,
    reason: String,
}

/// The first back-off after a failed refresh; it doubles per failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest back-off between refreshes of a failing directory.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How old a snapshot may be served while refreshes fail, by default.
pub const DEFAULT_MAX_STALE: Duration = Duration::from_secs(60);

impl CachedDirectory {
    /// A cache of `directory` refreshed when older than `max_age`.
    pub fn new(directory: Directory, max_age: Duration) -> Self {
        Self {
            directory,
            max_age,
            max_stale: DEFAULT_MAX_STALE.max(max_age),
            current: std::sync::RwLock::new(None),
            failure: std::sync::RwLock::new(None),
            refresh: Mutex::new(()),
        }
    }

    /// Serves the last good snapshot for at most `max_stale` while refreshes fail (at least
    /// `max_age`).
    #[must_use]
    pub fn with_max_stale(mut self, max_stale: Duration) -> Self {
        self.max_stale = max_stale.max(self.max_age);
        self
    }

    /// The bound on a snapshot's age.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    fn younger_than(&self, bound: Duration) -> Option<Arc<Snapshot>> {
        let current = self.current.read().ok()?;
        let (at, snap) = current.as_ref()?;
        (at.elapsed() < bound).then(|| Arc::clone(snap))
    }

    /// The failure whose back-off has not run out yet.
    fn backing_off(&self) -> Option<Failure> {
        let failure = self.failure.read().ok()?;
        failure
            .as_ref()
            .filter(|f| f.at.elapsed() < f.backoff)
            .cloned()
    }

    fn stale_or_unavailable(&self, failure: &Failure) -> Result<Arc<Snapshot>, DirectoryError> {
        if let Some(snap) = self.younger_than(self.max_stale) {
            return Ok(snap);
        }
        let failed = failure.at.elapsed();
        Err(DirectoryError::Unavailable {
            failed_ms: u64::try_from(failed.as_millis()).unwrap_or(u64::MAX),
            retry_in_ms: u64::try_from(failure.backoff.saturating_sub(failed).as_millis())
                .unwrap_or(u64::MAX),
            reason: failure.reason.clone(),
        })
    }

    /// A snapshot at most `max_age` old, loading one if needed; the last good one (at most
    /// `max_stale` old) while the table cannot be read.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>, DirectoryError> {
        if let Some(snap) = self.younger_than(self.max_age) {
            return Ok(snap);
        }
        if let Some(failure) = self.backing_off() {
            return self.stale_or_unavailable(&failure);
        }
        let _one_refresh = self.refresh.lock().await;
        // Whoever held the lock before us may have refreshed (or failed) already.
        if let Some(snap) = self.younger_than(self.max_age) {
            return Ok(snap);
        }
        if let Some(failure) = self.backing_off() {
            return self.stale_or_unavailable(&failure);
        }
        let loaded_at = Instant::now();
        match self.directory.list_lenient().await {
            Ok((entries, malformed)) => {
                for bad in &malformed {
                    tracing::warn!(error = %bad, table = self.directory.table(), "hot-key item skipped");
                }
                let snap = Arc::new(Snapshot::new(entries, crate::clock::now_secs()));
                if let Ok(mut current) = self.current.write() {
                    *current = Some((loaded_at, Arc::clone(&snap)));
                }
                if let Ok(mut failure) = self.failure.write() {
                    *failure = None;
                }
                Ok(snap)
            }
            Err(e) => {
                let backoff = self
                    .failure
                    .read()
                    .ok()
                    .and_then(|f| f.as_ref().map(|f| f.backoff))
                    .map_or(FIRST_BACKOFF, |b| b.saturating_mul(2).min(MAX_BACKOFF));
                if let Ok(mut failure) = self.failure.write() {
                    *failure = Some(Failure {
                        at: Instant::now(),
                        backoff,
                        reason: e.to_string(),
                    });
                }
                match self.younger_than(self.max_stale) {
                    Some(snap) => {
                        tracing::warn!(error = %e, "hot-key directory unreadable; serving the last snapshot");
                        Ok(snap)
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// Drops the cached snapshot (and any back-off) so the next call reads the table (after a
    /// local edit).
    pub fn invalidate(&self) {
        if let Ok(mut current) = self.current.write() {
            *current = None;
        }
        if let Ok(mut failure) = self.failure.write() {
            *failure = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::error::SdkError;
    use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::testing::mocked;

    use crate::testing::error_meta as meta;

    #[tokio::test]
    async fn a_failed_condition_is_a_conflict_and_other_failures_keep_the_sdk_error() {
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(|| {
            PutItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(meta("ProvisionedThroughputExceededException"))
                    .build(),
            )
        });
        let delete = mock!(aws_sdk_dynamodb::Client::delete_item).then_error(|| {
            DeleteItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta("ConditionalCheckFailedException"))
                    .build(),
            )
        });
        let ddb =
            mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); put, delete);
        let directory = Directory::new(ddb, "t-hotkeys");

        let put = Change::Put {
            entry: Entry::cache("p1", "read-hot", 10, 3_610),
            expected_epoch: None,
        };
        let err = directory.apply(&put).await.expect_err("mocked to fail");
        assert!(matches!(err, DirectoryError::Aws(_)), "{err:?}");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        assert_eq!((aws.operation(), aws.resource()), ("PutItem", "t-hotkeys"));
        let sdk = in_chain::<SdkError<PutItemError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(PutItemError::is_provisioned_throughput_exceeded_exception)
        );

        let remove = Change::Remove {
            key: "p1".into(),
            expected_epoch: 4,
        };
        let err = directory.apply(&remove).await.expect_err("mocked to fail");
        assert!(
            matches!(&err, DirectoryError::Conflict { key, expected: Some(4) } if key == "p1"),
            "{err:?}"
        );
        assert!(err.aws().is_none());
    }

    #[test]
    fn records_round_trip_every_mode_and_salt_state() {
        let mut draining = Entry::salt("p9", 4, "write-hot", 10).unwrap();
        draining.salts = draining.salts.transition_to(1).unwrap();
        draining.calm_since = Some(20);
        draining.epoch = 5;
        let entries = [
            Entry::salt("p9", 8, "write-hot", 10).unwrap(),
            draining,
            Entry::cache("p1", "read-hot", 10, 3_610),
            Entry::limit("tenant#t1", 200, "abuse", 10, 3_610),
        ];
        for e in entries {
            let item = to_item(&e).unwrap();
            assert!(
                e.expires.is_none() || item.contains_key("expires_at"),
                "TTL attribute name"
            );
            assert_eq!(from_item(item).unwrap(), e);
        }
    }

    /// A Scan answer of `items` (the directory's records).
    fn scan_of(items: Vec<Item>) -> aws_sdk_dynamodb::operation::scan::ScanOutput {
        aws_sdk_dynamodb::operation::scan::ScanOutput::builder()
            .set_items(Some(items))
            .build()
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_reads_skip_malformed_items_keep_the_last_snapshot_and_back_off() {
        use aws_sdk_dynamodb::operation::scan::ScanError;
        use heatsink_core::keys::SaltPolicy;
        let good = to_item(&Entry::salt("p9", 4, "write-hot", 0).unwrap()).unwrap();
        let mut bad = to_item(&Entry::cache("p1", "r", 0, u64::MAX / 2)).unwrap();
        bad.insert("mode".into(), AttributeValue::S("shard".into()));
        let (g, b) = (good.clone(), bad.clone());
        let ok = mock!(aws_sdk_dynamodb::Client::scan)
            .sequence()
            .output(move || scan_of(vec![g.clone(), b.clone()]))
            .error(|| {
                ScanError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .meta(meta("ProvisionedThroughputExceededException"))
                        .build(),
                )
            })
            .times(20)
            .build();
        let ddb = mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); ok);
        let cached = CachedDirectory::new(Directory::new(ddb, "t-hotkeys"), Duration::from_secs(5))
            .with_max_stale(Duration::from_secs(20));
        // One malformed item is skipped; the good one applies.
        assert_eq!(cached.snapshot().await.unwrap().salts("p9"), 4);
        assert_eq!(ok.num_calls(), 1);
        // The table fails: the last snapshot is served, and within the back-off nobody Scans.
        tokio::time::advance(Duration::from_secs(6)).await;
        for _ in 0..50 {
            assert_eq!(cached.snapshot().await.unwrap().salts("p9"), 4);
        }
        assert_eq!(ok.num_calls(), 2, "one failed Scan, then the back-off");
        // Back-offs double (1 s, 2 s, 4 s, …): about one Scan per back-off, not per request.
        for _ in 0..12 {
            tokio::time::advance(Duration::from_secs(1)).await;
            let _ = cached.snapshot().await;
        }
        let scans = ok.num_calls();
        assert!(
            (4..=6).contains(&scans),
            "{scans} Scans in 18 s of failures"
        );
        // Past max_stale the snapshot is no longer served: a typed error instead.
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut unavailable = 0;
        for _ in 0..5 {
            match cached.snapshot().await {
                Err(DirectoryError::Unavailable { .. }) => unavailable += 1,
                Err(DirectoryError::Aws(e)) => assert!(e.is_throttling()),
                other => panic!("stale snapshot served past max_stale: {other:?}"),
            }
        }
        assert!(unavailable >= 4, "{unavailable}");
    }

    #[test]
    fn malformed_items_are_typed_errors() {
        let mut item = to_item(&Entry::cache("p1", "r", 0, 10)).unwrap();
        item.insert("mode".into(), AttributeValue::S("shard".into()));
        assert!(matches!(
            from_item(item),
            Err(DirectoryError::Malformed { key, .. }) if key == "p1"
        ));
        let mut item = to_item(&Entry::salt("p9", 4, "r", 0).unwrap()).unwrap();
        item.insert("salts".into(), AttributeValue::N("0".into()));
        assert!(matches!(
            from_item(item),
            Err(DirectoryError::Malformed { .. })
        ));
        let mut item = to_item(&Entry::limit("t", 5, "r", 0, 9)).unwrap();
        item.remove("limit_per_second");
        assert!(matches!(
            from_item(item),
            Err(DirectoryError::Malformed { .. })
        ));
    }
}
