//! The router: a bounded-age cache of the map, and writes that follow MOVED answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use heatsink_core::slots::apply::Version;
use heatsink_core::slots::{Answer, Next, RangeEntry, RangeState, RetryRule, SlotMap};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::calls::{CallTimeouts, bounded_ddb};
use super::fence::{
    KeySchema, TOMBSTONE_ATTR, TableInfo, VERSION_ATTR, admits_condition, apply_rule, parse_fence,
};
use super::record::{MoveRecord, attrition_chain};
use super::{MoveError, SlotDirectory};
use crate::ddb::OnlyIf;
use crate::error::AwsError;
use crate::timeouts::{Timeouts, bounded};

/// A write the owner stored (or had stored: a retry of an applied write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The table that holds it.
    pub owner: String,
    /// The epoch the slot was owned at.
    pub epoch: u64,
    /// Attempts made, the first included.
    pub attempts: u32,
    /// MOVED answers on the way (a stale map bounced by the old owner).
    pub moved: u32,
    /// What the owner answered last: `Accepted`, `AlreadyApplied` or `Superseded`.
    pub answer: Answer,
}

/// Counters of one router, for progress lines and the demo.
#[derive(Debug, Default)]
pub struct RouterStats {
    /// MOVED answers received.
    pub moved: AtomicU64,
    /// Directory reloads.
    pub reloads: AtomicU64,
    /// Retries after a transient failure.
    pub retries: AtomicU64,
}

struct Inner {
    ddb: aws_sdk_dynamodb::Client,
    dir: SlotDirectory,
    max_age: Duration,
    strict: bool,
    rule: RetryRule,
    cache: Mutex<Option<(Arc<SlotMap>, Instant)>>,
    schemas: Mutex<HashMap<String, KeySchema>>,
    attrition: Mutex<Option<(Arc<Vec<MoveRecord>>, Instant)>>,
    stats: RouterStats,
}

/// Routes versioned items to the table that owns their slot (cheap to clone).
///
/// Items carry a string `pk` and a numeric version `v` that rises with every change of the
/// item (one writer per key, or a version from one authority per key: never a clock). The
/// router writes them under `attribute_not_exists(v) OR v < :v`, so a retry is never stored
/// twice and an older version never overwrites a newer one.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("directory", &self.inner.dir.table())
            .field("max_age", &self.inner.max_age)
            .field("strict", &self.inner.strict)
            .finish()
    }
}

fn version_of(item: &HashMap<String, AttributeValue>) -> Option<u64> {
    item.get(VERSION_ATTR)?.as_n().ok()?.parse().ok()
}

/// An item's place in the apply rule's order (a tombstone above the row it deleted).
fn rank(item: &HashMap<String, AttributeValue>) -> Option<(u64, u8)> {
    let v = version_of(item)?;
    Some(if item.contains_key(TOMBSTONE_ATTR) {
        Version::Tombstone(v).rank()
    } else {
        Version::Live(v).rank()
    })
}

impl Router {
    /// A router over `dir` that uses a loaded map for at most `max_age`.
    ///
    /// In a default directory `max_age` must not exceed the directory's own `max_age_ms`
    /// (what movers wait for); in a strict one any age is safe.
    pub fn new(ddb: aws_sdk_dynamodb::Client, dir: SlotDirectory, max_age: Duration) -> Self {
        Self::with(ddb, dir, max_age, false, RetryRule::default())
    }

    /// A router with its own strictness (fenced writes on every range) and retry rule.
    pub fn with(
        ddb: aws_sdk_dynamodb::Client,
        dir: SlotDirectory,
        max_age: Duration,
        strict: bool,
        rule: RetryRule,
    ) -> Self {
        // Every call bounded (a hung call must not hold a write): the router's client and the
        // directory reads it makes.
        let ddb = bounded_ddb(&ddb, CallTimeouts::default());
        let dir = SlotDirectory::new(ddb.clone(), dir.table());
        Self {
            inner: Arc::new(Inner {
                // No call waits forever: a client without a bound of its own gets the policy's.
                ddb: bounded!(aws_sdk_dynamodb, ddb, Timeouts::CALL),
                dir,
                max_age,
                strict,
                rule,
                cache: Mutex::new(None),
                schemas: Mutex::new(HashMap::new()),
                attrition: Mutex::new(None),
                stats: RouterStats::default(),
            }),
        }
    }

    /// The router's counters.
    pub fn stats(&self) -> &RouterStats {
        &self.inner.stats
    }

    /// The directory it reads.
    pub fn directory(&self) -> &SlotDirectory {
        &self.inner.dir
    }

    /// The cached map, reloaded when older than `max_age` (in a default directory, at most the
    /// directory's own `max_age`: movers wait only that long after a mark).
    pub async fn map(&self) -> Result<Arc<SlotMap>, MoveError> {
        let mut cache = self.inner.cache.lock().await;
        if let Some((map, at)) = cache.as_ref()
            && at.elapsed() < self.age_limit(map)
        {
            return Ok(map.clone());
        }
        let map = Arc::new(self.inner.dir.load().await?);
        self.inner.stats.reloads.fetch_add(1, Ordering::Relaxed);
        *cache = Some((map.clone(), Instant::now()));
        Ok(map)
    }

    /// How long `map` may be used: the router's `max_age`, at most the directory's in a default
    /// directory (whose movers wait only the directory's before they fence). In a strict one
    /// every write is fenced, so a map of any age is refused by an old owner and may be kept.
    fn age_limit(&self, map: &SlotMap) -> Duration {
        if map.strict || self.inner.strict {
            self.inner.max_age
        } else {
            self.inner
                .max_age
                .min(Duration::from_millis(map.max_age_ms))
        }
    }

    /// The map after a MOVED answer to a write routed with version `seen`: the cached one if
    /// it is newer or was read less than `moved_cap` ago (another write of this router just
    /// reloaded: concurrent writes bounced by one fence share one directory read per poll),
    /// else a fresh read.
    async fn refresh(&self, seen: u64) -> Result<Arc<SlotMap>, MoveError> {
        let mut cache = self.inner.cache.lock().await;
        if let Some((map, at)) = cache.as_ref()
            && (map.version > seen || at.elapsed() < self.inner.rule.moved_cap)
        {
            return Ok(map.clone());
        }
        let map = Arc::new(self.inner.dir.load().await?);
        self.inner.stats.reloads.fetch_add(1, Ordering::Relaxed);
        *cache = Some((map.clone(), Instant::now()));
        Ok(map)
    }

    /// After a MOVED answer to a write routed with map version `seen`: the first map newer
    /// than `seen`. While the directory is unchanged (the fence is up, the flip has not
    /// committed) the write is not sent again, since the old owner would only refuse it
    /// again (and a refused transaction still costs the old owner write capacity); it polls
    /// the directory every `moved_cap`, the router's writes sharing one read per poll. Each
    /// poll and each MOVED answer count towards `max_moved` (`waited`), so a fence that
    /// outlasts about `max_moved × moved_cap` is given up as a stuck move.
    async fn await_change(
        &self,
        seen: u64,
        key: &str,
        slot: u16,
        attempt: u32,
        waited: &mut u32,
    ) -> Result<Arc<SlotMap>, MoveError> {
        let rule = self.inner.rule;
        loop {
            let map = self.refresh(seen).await?;
            if map.version > seen {
                return Ok(map);
            }
            *waited = waited.saturating_add(1);
            if *waited >= rule.max_moved {
                return Err(MoveError::GaveUp {
                    key: key.to_owned(),
                    slot,
                    attempts: attempt,
                });
            }
            tokio::time::sleep(rule.moved_cap).await;
        }
    }

    /// Drops the cached map; the next call reads the directory.
    pub async fn invalidate(&self) {
        *self.inner.cache.lock().await = None;
    }

    async fn keys(&self, table: &str) -> Result<KeySchema, MoveError> {
        if let Some(k) = self.inner.schemas.lock().await.get(table) {
            return Ok(k.clone());
        }
        let info = TableInfo::describe(&self.inner.ddb, table).await?;
        self.inner
            .schemas
            .lock()
            .await
            .insert(table.to_owned(), info.keys.clone());
        Ok(info.keys)
    }

    /// Writes `{pk: key, v: version, ..attrs}` through the directory.
    pub async fn put_versioned(
        &self,
        key: &str,
        version: u64,
        mut attrs: HashMap<String, AttributeValue>,
    ) -> Result<Ack, MoveError> {
        attrs.insert("pk".into(), AttributeValue::S(key.to_owned()));
        attrs.insert(VERSION_ATTR.into(), AttributeValue::N(version.to_string()));
        self.put(attrs).await
    }

    /// Writes a whole item (string `pk`, numeric `v`, the sort key when the owner has one) to
    /// the owner of its slot, following MOVED answers with the [`RetryRule`].
    ///
    /// This is the one place the version rule is enforced for items of routed slots: an item
    /// without a numeric `v` is refused here ([`MoveError::BadItem`]), and a move refuses to
    /// carry one written around the router ([`MoveError::Unversioned`]).
    pub async fn put(&self, item: HashMap<String, AttributeValue>) -> Result<Ack, MoveError> {
        let version = version_of(&item).ok_or_else(|| {
            MoveError::BadItem(format!(
                "item {:?} has no numeric version `v`",
                item.get("pk")
            ))
        })?;
        self.write(item, Version::Live(version)).await
    }

    /// Deletes an item by writing a **tombstone** at `version` (higher than the version it
    /// deletes): `key` (`pk` and the sort key, if any) plus `attrs` (a TTL attribute, say),
    /// with `v = version` and the tombstone mark. Reads treat a tombstone as absent, and
    /// because it is versioned it wins over older copies wherever they are: the other side of
    /// an attrition move, a late stream record, a snapshot row. Tombstones stay until removed
    /// (a move's cleanup removes those of its slots on the new owner) or until their TTL.
    pub async fn delete(
        &self,
        key: HashMap<String, AttributeValue>,
        version: u64,
        attrs: HashMap<String, AttributeValue>,
    ) -> Result<Ack, MoveError> {
        let mut item = attrs;
        item.extend(key);
        self.write(item, Version::Tombstone(version)).await
    }

    /// [`Self::delete`] of `{pk: key}` on a table without a sort key.
    pub async fn delete_key(&self, key: &str, version: u64) -> Result<Ack, MoveError> {
        let key = HashMap::from([("pk".to_owned(), AttributeValue::S(key.to_owned()))]);
        self.delete(key, version, HashMap::new()).await
    }

    async fn write(
        &self,
        item: HashMap<String, AttributeValue>,
        version: Version,
    ) -> Result<Ack, MoveError> {
        let key = item
            .get("pk")
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(|| MoveError::BadItem("the item has no string `pk`".into()))?;
        if super::fence::is_internal(&key) {
            return Err(MoveError::BadItem(format!(
                "{key:?}: keys starting with {} are reserved",
                super::fence::INTERNAL_PREFIX
            )));
        }
        // The keying is fixed at `slots init`: any map of the directory gives the slot.
        let slot = self.map().await?.slot_of(&key);
        let started = Instant::now();
        // The last transient failure, for the error when the retry deadline ends the write.
        let mut cause: Option<String> = None;
        let mut moved = 0u32;
        // MOVED answers and directory polls while bounced: the give-up budget (`max_moved`).
        let mut waited = 0u32;
        let mut bounced: Option<u64> = None;
        for attempt in 1.. {
            let map = match bounced.take() {
                Some(seen) => {
                    self.await_change(seen, &key, slot, attempt, &mut waited)
                        .await?
                }
                None => self.map().await?,
            };
            let entry = map.entry_of(slot);
            let fenced =
                self.inner.strict || map.strict || matches!(entry.state, RangeState::Moving { .. });
            let answer = self
                .attempt(entry, fenced, slot, &item, version, &mut cause)
                .await?;
            let rule = self.inner.rule;
            let next = match rule.next(attempt, moved, &answer) {
                Next::Reload { .. } if waited.saturating_add(1) >= rule.max_moved => Next::GiveUp,
                next => next,
            };
            match next {
                Next::Done => {
                    return Ok(Ack {
                        owner: entry.owner.clone(),
                        epoch: entry.epoch,
                        attempts: attempt,
                        moved,
                        answer,
                    });
                }
                Next::GiveUp => {
                    return Err(MoveError::GaveUp {
                        key,
                        slot,
                        attempts: attempt,
                    });
                }
                Next::Reload { after } => {
                    moved += 1;
                    waited = waited.saturating_add(1);
                    self.inner.stats.moved.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(after).await;
                    bounced = Some(map.version);
                }
                Next::Retry { after } if !rule.retry_in_time(started.elapsed(), after) => {
                    return Err(MoveError::Unanswered {
                        key,
                        slot,
                        attempts: attempt,
                        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        cause: cause.unwrap_or_else(|| {
                            "the owner answered with a transient failure".into()
                        }),
                    });
                }
                Next::Retry { after } => {
                    self.inner.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(after).await;
                }
            }
        }
        unreachable!("the retry rule gives up after max_attempts or max_moved")
    }

    /// What a refused write of `version` means, given the item the owner holds.
    fn settled(stored: Option<&HashMap<String, AttributeValue>>, version: Version) -> Answer {
        let tomb = stored.is_some_and(|i| i.contains_key(TOMBSTONE_ATTR));
        let (v, want_tomb) = match version {
            Version::Live(v) => (v, false),
            Version::Tombstone(v) => (v, true),
        };
        match stored.and_then(version_of) {
            Some(s) if s == v && tomb == want_tomb => Answer::AlreadyApplied,
            Some(s) => Answer::Superseded { stored: s },
            None => Answer::Transient,
        }
    }

    async fn read_item(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
    ) -> Result<Option<HashMap<String, AttributeValue>>, MoveError> {
        let out = self
            .inner
            .ddb
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", table, e))?;
        Ok(out.item)
    }

    async fn attempt(
        &self,
        entry: &RangeEntry,
        fenced: bool,
        slot: u16,
        item: &HashMap<String, AttributeValue>,
        version: Version,
        cause: &mut Option<String>,
    ) -> Result<Answer, MoveError> {
        let (owner, epoch) = (entry.owner.as_str(), entry.epoch);
        let ddb = &self.inner.ddb;
        let keys = self.keys(owner).await?;
        let bad = |e: aws_sdk_dynamodb::error::BuildError| MoveError::BadItem(e.to_string());
        let cond = apply_rule(version);
        let item = &match version {
            Version::Live(_) => item.clone(),
            Version::Tombstone(v) => {
                let mut t = item.clone();
                t.insert(VERSION_ATTR.into(), AttributeValue::N(v.to_string()));
                t.insert(TOMBSTONE_ATTR.into(), AttributeValue::Bool(true));
                t
            }
        };
        if !fenced {
            let res = ddb
                .put_item()
                .table_name(owner)
                .set_item(Some(item.clone()))
                .only_if(&cond)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return match res {
                Ok(_) => Ok(Answer::Accepted),
                Err(e) => {
                    if let Some(PutItemError::ConditionalCheckFailedException(c)) =
                        e.as_service_error()
                    {
                        let stored = match c.item() {
                            Some(i) => Some(i.clone()),
                            None => self.read_item(owner, keys.key_of(item)).await?,
                        };
                        return Ok(Self::settled(stored.as_ref(), version));
                    }
                    let err = AwsError::dynamodb("PutItem", owner, e);
                    if err.is_transient() {
                        *cause = Some(err.to_string());
                        Ok(Answer::Transient)
                    } else {
                        Err(err.into())
                    }
                }
            };
        }
        let check = ConditionCheck::builder()
            .table_name(owner)
            .set_key(Some(keys.fence_key(slot)))
            .only_if(&admits_condition(epoch))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(bad)?;
        let put = Put::builder()
            .table_name(owner)
            .set_item(Some(item.clone()))
            .only_if(&cond)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(bad)?;
        let res = ddb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(check).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .send()
            .await;
        match res {
            Ok(_) => Ok(Answer::Accepted),
            Err(e) => {
                let reasons = match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(t)) => {
                        Some(t.cancellation_reasons().to_vec())
                    }
                    _ => None,
                };
                let Some(reasons) = reasons else {
                    let err = AwsError::dynamodb("TransactWriteItems", owner, e);
                    return if err.is_transient() {
                        *cause = Some(err.to_string());
                        Ok(Answer::Transient)
                    } else {
                        Err(err.into())
                    };
                };
                let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                if code(0) == "ConditionalCheckFailed" {
                    let fence = match reasons[0].item() {
                        Some(i) => parse_fence(i),
                        None => super::fence::read_fence(ddb, owner, &keys, slot).await?,
                    };
                    return Ok(match fence {
                        Some(f) => Answer::Moved {
                            to: f.to,
                            epoch: f.epoch,
                        },
                        None => Answer::Transient,
                    });
                }
                if code(1) == "ConditionalCheckFailed" {
                    let stored = match reasons.get(1).and_then(|r| r.item()) {
                        Some(i) => Some(i.clone()),
                        None => self.read_item(owner, keys.key_of(item)).await?,
                    };
                    return Ok(Self::settled(stored.as_ref(), version));
                }
                // TransactionConflict, throttling: the write may be retried as it is.
                *cause = Some(format!(
                    "TransactWriteItems on {owner} cancelled ({})",
                    (0..reasons.len()).map(code).collect::<Vec<_>>().join(", ")
                ));
                Ok(Answer::Transient)
            }
        }
    }

    /// The directory's move records, cached for `max_age` like the map (every page of the
    /// history is read; a malformed record is skipped and logged by the directory).
    async fn moves(&self) -> Result<Arc<Vec<MoveRecord>>, MoveError> {
        let mut cache = self.inner.attrition.lock().await;
        if let Some((list, at)) = cache.as_ref()
            && at.elapsed() < self.inner.max_age
        {
            return Ok(list.clone());
        }
        let list = Arc::new(self.inner.dir.moves().await?.records);
        *cache = Some((list.clone(), Instant::now()));
        Ok(list)
    }

    /// Reads `key` from `owner` and, when attrition moves brought the slot there, from the
    /// tables they left items on ([`attrition_chain`]), keeping the newest version (a
    /// tombstone counts as one, so a delete on the owner hides older copies elsewhere).
    /// Tombstones read as absent.
    async fn read_routed(
        &self,
        slot: u16,
        owner: &str,
        key: HashMap<String, AttributeValue>,
    ) -> Result<Option<HashMap<String, AttributeValue>>, MoveError> {
        let mut item = self.read_item(owner, key.clone()).await?;
        let moves = self.moves().await?;
        for other in attrition_chain(&moves, slot, owner) {
            let theirs = self.read_item(&other, key.clone()).await?;
            let newer = match (&item, &theirs) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(a), Some(b)) => rank(b) > rank(a),
            };
            if newer {
                item = theirs;
            }
        }
        Ok(item.filter(|i| !i.contains_key(TOMBSTONE_ATTR)))
    }

    /// Reads an item by key (`pk` and the sort key, if any) from the owner of its slot; a
    /// tombstone reads as absent. In a slot under an attrition move it reads both tables and
    /// returns the higher version (see the module docs).
    pub async fn get(
        &self,
        key: HashMap<String, AttributeValue>,
    ) -> Result<Option<HashMap<String, AttributeValue>>, MoveError> {
        let pk = key
            .get("pk")
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| MoveError::BadItem("the key has no string `pk`".into()))?;
        let map = self.map().await?;
        let slot = map.slot_of(pk);
        let owner = map.entry_of(slot).owner.clone();
        self.read_routed(slot, &owner, key).await
    }

    /// [`Self::get`] of `{pk: key}` on a table without a sort key, with the owner it was
    /// routed to (in an attrition move the item may have been read from the other side).
    pub async fn get_key(
        &self,
        key: &str,
    ) -> Result<(String, Option<HashMap<String, AttributeValue>>), MoveError> {
        let map = self.map().await?;
        let slot = map.slot_of(key);
        let owner = map.entry_of(slot).owner.clone();
        let item = self
            .read_routed(
                slot,
                &owner,
                HashMap::from([("pk".to_owned(), AttributeValue::S(key.to_owned()))]),
            )
            .await?;
        Ok((owner, item))
    }
}
