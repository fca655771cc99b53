//! The `slots` table: the map's meta item, one item per range, one per move.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use heatsink_core::slots::lease::Lease;
use heatsink_core::slots::{Change, Keying, RangeEntry, RangeState, SlotError, SlotMap, SlotRange};

use super::MoveError;
use super::record::{MoveRecord, parse_record};
use crate::ddb::{
    Condition, KeyCondition, OnlyIf, QueryKey, Update as Set, Updating, Written, get_n, get_s, n, s,
};
use crate::error::AwsError;

/// The partition of the map's items.
const DIR_PK: &str = "dir";
/// The partition of the move records.
pub const MOVE_PK: &str = "move";
const META_SK: &str = "meta";

/// Attributes of a move record item besides its key: the record as JSON, its phase and
/// revision, and the lease (holder, until, token).
#[cfg_attr(not(feature = "streams"), allow(dead_code))]
pub(crate) const RECORD_ATTR: &str = "record";
#[cfg_attr(not(feature = "streams"), allow(dead_code))]
pub(crate) const PHASE_ATTR: &str = "phase";
#[cfg_attr(not(feature = "streams"), allow(dead_code))]
pub(crate) const REV_ATTR: &str = "rev";
pub(crate) const HOLDER_ATTR: &str = "holder";
pub(crate) const UNTIL_ATTR: &str = "until";
pub(crate) const TOKEN_ATTR: &str = "token";

fn range_sk(first: u16) -> String {
    format!("range#{first:05}")
}

/// The signature of a range item: its fields as canonical JSON. A hand edit of any field
/// without the signature is detected on load.
fn signature(e: &RangeEntry) -> String {
    serde_json::to_string(e).unwrap_or_default()
}

fn range_item(e: &RangeEntry) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        ("pk".to_owned(), s(DIR_PK)),
        ("sk".to_owned(), s(range_sk(e.range.first))),
        ("first".to_owned(), n(e.range.first)),
        ("last".to_owned(), n(e.range.last)),
        ("owner".to_owned(), s(&e.owner)),
        ("epoch".to_owned(), n(e.epoch)),
        ("state".to_owned(), s(e.state.name())),
        ("sig".to_owned(), s(signature(e))),
    ]);
    if let RangeState::Moving { move_id } = &e.state {
        item.insert("move_id".to_owned(), s(move_id));
    }
    item
}

fn parse_range(item: &HashMap<String, AttributeValue>) -> Result<RangeEntry, SlotError> {
    let sk = get_s(item, "sk").unwrap_or("?").to_owned();
    let corrupt = |what: &str| SlotError::Corrupt {
        detail: format!("range item {sk}: {what}"),
    };
    let first = get_n(item, "first").ok_or_else(|| corrupt("no first"))?;
    let last = get_n(item, "last").ok_or_else(|| corrupt("no last"))?;
    let owner = get_s(item, "owner").ok_or_else(|| corrupt("no owner"))?;
    let epoch = get_n(item, "epoch").ok_or_else(|| corrupt("no epoch"))?;
    let state = match (get_s(item, "state"), get_s(item, "move_id")) {
        (Some("stable"), _) => RangeState::Stable,
        (Some("moving"), Some(m)) => RangeState::Moving {
            move_id: m.to_owned(),
        },
        _ => return Err(corrupt("state is not stable or moving (with move_id)")),
    };
    let entry = RangeEntry {
        range: SlotRange::new(first, last).map_err(|_| corrupt("not a slot range"))?,
        owner: owner.to_owned(),
        epoch,
        state,
    };
    if get_s(item, "sig") != Some(signature(&entry).as_str()) || sk != range_sk(first) {
        return Err(corrupt(
            "its fields do not match its signature (edited by hand)",
        ));
    }
    Ok(entry)
}

/// The lease stored on a move record item (`None`: never taken).
fn parse_lease(item: &HashMap<String, AttributeValue>) -> Option<Lease> {
    match (
        get_s(item, HOLDER_ATTR),
        get_n(item, UNTIL_ATTR),
        get_n(item, TOKEN_ATTR),
    ) {
        (Some(holder), Some(until_ms), Some(token)) => Some(Lease {
            holder: holder.to_owned(),
            until_ms,
            token,
        }),
        _ => None,
    }
}

/// The move records of a directory ([`SlotDirectory::moves`]).
#[derive(Debug, Clone, Default)]
pub struct MoveList {
    /// The readable records, oldest first.
    pub records: Vec<MoveRecord>,
    /// Records that could not be read: (move id, what is wrong).
    pub malformed: Vec<(String, String)>,
    /// The lease of each move that ever had a controller, by move id (a released lease stays,
    /// expired: its token is the move's fencing counter).
    pub leases: BTreeMap<String, Lease>,
}

/// The slot directory table (`pk`, `sk`): the [`SlotMap`] and the move records.
#[derive(Clone, Debug)]
pub struct SlotDirectory {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
}

impl SlotDirectory {
    /// The directory in table `table` (create it with [`crate::schema::Table::Slots`]).
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            // No call waits forever: a client without a bound of its own gets the policy's.
            ddb: crate::timeouts::bounded!(aws_sdk_dynamodb, ddb, crate::timeouts::Timeouts::CALL),
            table: table.into(),
        }
    }

    /// The directory of a toolkit schema (`<prefix>slots`).
    pub fn from_schema(ddb: aws_sdk_dynamodb::Client, schema: &crate::schema::Schema) -> Self {
        Self::new(ddb, schema.table_name(crate::schema::Table::Slots))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The client.
    pub fn client(&self) -> &aws_sdk_dynamodb::Client {
        &self.ddb
    }

    /// All slots to `owner` at epoch 1, version 1, hash keying. Idempotent: when the directory
    /// exists with exactly that layout it returns it unchanged; any other layout is
    /// [`MoveError::AlreadyInitialized`].
    pub async fn init(
        &self,
        owner: &str,
        max_age: Duration,
        strict: bool,
    ) -> Result<SlotMap, MoveError> {
        self.init_keyed(owner, max_age, strict, Keying::Hash).await
    }

    /// [`SlotDirectory::init`] with the directory's [`Keying`]: hash, or ordered (a slot range
    /// is then an interval of the keys' order). Fixed for the directory's life: every router
    /// and mover takes it from the map.
    pub async fn init_keyed(
        &self,
        owner: &str,
        max_age: Duration,
        strict: bool,
        keying: Keying,
    ) -> Result<SlotMap, MoveError> {
        let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        let map = SlotMap {
            keying: keying.clone(),
            ..SlotMap::initial(owner, max_age_ms, strict)
        };
        let meta = Put::builder()
            .table_name(&self.table)
            .set_item(Some(HashMap::from([
                ("pk".to_owned(), s(DIR_PK)),
                ("sk".to_owned(), s(META_SK)),
                ("version".to_owned(), n(1u8)),
                ("strict".to_owned(), AttributeValue::Bool(strict)),
                ("max_age_ms".to_owned(), n(max_age_ms)),
                ("keying".to_owned(), s(keying.to_string())),
            ])))
            .only_if(&Condition::not_exists("pk"))
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        let range = Put::builder()
            .table_name(&self.table)
            .set_item(Some(range_item(&map.ranges[0])))
            .only_if(&Condition::not_exists("pk"))
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        let res = self
            .ddb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(meta).build())
            .transact_items(TransactWriteItem::builder().put(range).build())
            .send()
            .await;
        match res {
            Ok(_) => Ok(map),
            Err(e) => {
                let err = AwsError::dynamodb("TransactWriteItems", &self.table, e);
                if err.code() != Some("TransactionCanceledException") {
                    return Err(err.into());
                }
                let found = self.load().await?;
                if found.ranges == map.ranges && found.keying == map.keying {
                    Ok(found)
                } else {
                    Err(MoveError::AlreadyInitialized {
                        table: self.table.clone(),
                        version: found.version,
                    })
                }
            }
        }
    }

    /// Reads and checks the whole map (one strongly consistent Query).
    pub async fn load(&self) -> Result<SlotMap, MoveError> {
        let mut pages = self
            .ddb
            .query()
            .table_name(&self.table)
            .query_key(&KeyCondition::partition("pk", s(DIR_PK)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut items = vec![];
        while let Some(item) = pages.next().await {
            items.push(item.map_err(|e| AwsError::dynamodb("Query", &self.table, e))?);
        }
        let Some(meta) = items.iter().find(|i| get_s(i, "sk") == Some(META_SK)) else {
            return Err(MoveError::NotInitialized {
                table: self.table.clone(),
            });
        };
        let version = get_n(meta, "version").ok_or_else(|| SlotError::Corrupt {
            detail: "meta item has no version".into(),
        })?;
        let strict = meta
            .get("strict")
            .and_then(|v| v.as_bool().ok())
            .copied()
            .unwrap_or(false);
        let max_age_ms = get_n(meta, "max_age_ms").unwrap_or(1_000);
        // A directory made before keyings were recorded hashes.
        let keying = match get_s(meta, "keying") {
            Some(text) => text.parse::<Keying>()?,
            None => Keying::Hash,
        };
        let mut ranges = items
            .iter()
            .filter(|i| get_s(i, "sk").is_some_and(|k| k.starts_with("range#")))
            .map(parse_range)
            .collect::<Result<Vec<_>, _>>()?;
        ranges.sort_by_key(|r| r.range.first);
        let map = SlotMap {
            version,
            strict,
            max_age_ms,
            ranges,
            keying,
        };
        map.validate()?;
        Ok(map)
    }

    /// Every move record of the directory, oldest first, read page by page (the history grows
    /// with each move, past one 1 MB Query page after about a thousand moves). A record that
    /// cannot be read is not fatal to the others: it is skipped, named in
    /// [`MoveList::malformed`] and logged, so one hand-edited item cannot stop every routed
    /// read.
    pub async fn moves(&self) -> Result<MoveList, MoveError> {
        let mut pages = self
            .ddb
            .query()
            .table_name(&self.table)
            .query_key(&KeyCondition::partition("pk", s(MOVE_PK)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut list = MoveList::default();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
            if let (Some(id), Some(lease)) = (get_s(&item, "sk"), parse_lease(&item)) {
                list.leases.insert(id.to_owned(), lease);
            }
            match parse_record(&item) {
                Ok(record) => list.records.push(record),
                Err(MoveError::Malformed { id, reason }) => {
                    tracing::warn!(table = %self.table, move_id = %id, %reason, "skipping a malformed move record");
                    list.malformed.push((id, reason));
                }
                Err(other) => return Err(other),
            }
        }
        list.records.sort_by_key(|m| m.created_ms);
        Ok(list)
    }

    /// The move record `id` (strongly consistent).
    pub async fn move_record(&self, id: &str) -> Result<MoveRecord, MoveError> {
        Ok(self.move_entry(id).await?.0)
    }

    /// The move record `id` and its lease as stored (strongly consistent).
    pub(crate) async fn move_entry(
        &self,
        id: &str,
    ) -> Result<(MoveRecord, Option<Lease>), MoveError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("pk", s(MOVE_PK))
            .key("sk", s(id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", &self.table, e))?;
        let item = out.item.ok_or_else(|| MoveError::NoSuchMove {
            id: id.to_owned(),
            table: self.table.clone(),
        })?;
        let lease = parse_lease(&item);
        Ok((parse_record(&item)?, lease))
    }

    /// The key of move record `id`.
    #[cfg_attr(not(feature = "streams"), allow(dead_code))]
    pub(crate) fn move_key(&self, id: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("pk".to_owned(), s(MOVE_PK)), ("sk".to_owned(), s(id))])
    }

    /// A transaction item that holds only while move `id`'s lease token is `token`: the
    /// fencing check every destructive transaction of a move carries.
    #[cfg_attr(not(feature = "streams"), allow(dead_code))]
    pub(crate) fn lease_check(&self, id: &str, token: u64) -> Result<TransactWriteItem, MoveError> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(self.move_key(id)))
            .only_if(&Condition::eq(TOKEN_ATTR, n(token)))
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// A transaction item that holds only while the range starting at `first` is marked
    /// moving by move `id` (the fence write's check: an abort that unmarked it wins).
    #[cfg_attr(not(feature = "streams"), allow(dead_code))]
    pub(crate) fn marked_check(
        &self,
        first: u16,
        id: &str,
    ) -> Result<TransactWriteItem, MoveError> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .key("pk", s(DIR_PK))
            .key("sk", s(range_sk(first)))
            .only_if(&Condition::eq("state", s("moving")).and(Condition::eq("move_id", s(id))))
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Takes move `id`'s lease from `read` (as read, `None`: never taken) to `lease`:
    /// conditional on the token read, so of two controllers taking it at once one wins.
    /// `Ok(false)`: another controller changed it first.
    #[cfg_attr(not(feature = "streams"), allow(dead_code))]
    pub(crate) async fn swap_lease(
        &self,
        id: &str,
        read: Option<&Lease>,
        lease: &Lease,
    ) -> Result<bool, MoveError> {
        let cond = match read {
            Some(l) => Condition::eq(TOKEN_ATTR, n(l.token)),
            None => Condition::exists("pk").and(Condition::not_exists(TOKEN_ATTR)),
        };
        let res = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.move_key(id)))
            .only_if(&cond)
            .updating(
                &Set::new()
                    .set(HOLDER_ATTR, s(&lease.holder))
                    .set(UNTIL_ATTR, n(lease.until_ms))
                    .set(TOKEN_ATTR, n(lease.token)),
            )
            .send()
            .await;
        Ok(res.written("UpdateItem", &self.table)?)
    }

    /// Extends (or, with `until_ms` 0, releases) move `id`'s lease held with `token`;
    /// `Ok(false)` when another controller holds it now.
    #[cfg_attr(not(feature = "streams"), allow(dead_code))]
    pub(crate) async fn extend_lease(
        &self,
        id: &str,
        token: u64,
        until_ms: u64,
    ) -> Result<bool, MoveError> {
        let res = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.move_key(id)))
            .only_if(&Condition::eq(TOKEN_ATTR, n(token)))
            .updating(&Set::new().set(UNTIL_ATTR, n(until_ms)))
            .send()
            .await;
        Ok(res.written("UpdateItem", &self.table)?)
    }

    /// Commits `change` as one `TransactWriteItems`: the map version must still be
    /// `change.from_version`, and every edited range item must be exactly as it was decided
    /// from. `extra` items (a move record's update) ride in the same transaction.
    pub async fn commit_with(
        &self,
        change: &Change,
        extra: Vec<TransactWriteItem>,
    ) -> Result<(), MoveError> {
        let bad = |e: aws_sdk_dynamodb::error::BuildError| MoveError::BadItem(e.to_string());
        let next = change
            .from_version
            .checked_add(1)
            .ok_or(SlotError::EpochOverflow)?;
        let mut req = self.ddb.transact_write_items().transact_items(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(&self.table)
                        .key("pk", s(DIR_PK))
                        .key("sk", s(META_SK))
                        .updating(&Set::new().set("version", n(next)))
                        .only_if(&Condition::eq("version", n(change.from_version)))
                        .build()
                        .map_err(bad)?,
                )
                .build(),
        );
        for edit in &change.edits {
            let as_read = |b: &RangeEntry| Condition::eq("sig", s(signature(b)));
            let item = match (&edit.before, &edit.after) {
                (before, Some(after)) => {
                    let put = Put::builder()
                        .table_name(&self.table)
                        .set_item(Some(range_item(after)))
                        .only_if(&match before {
                            Some(b) => as_read(b),
                            None => Condition::not_exists("pk"),
                        });
                    TransactWriteItem::builder().put(put.build().map_err(bad)?)
                }
                (Some(b), None) => TransactWriteItem::builder().delete(
                    Delete::builder()
                        .table_name(&self.table)
                        .key("pk", s(DIR_PK))
                        .key("sk", s(range_sk(edit.first)))
                        .only_if(&as_read(b))
                        .build()
                        .map_err(bad)?,
                ),
                (None, None) => TransactWriteItem::builder().condition_check(
                    ConditionCheck::builder()
                        .table_name(&self.table)
                        .key("pk", s(DIR_PK))
                        .key("sk", s(range_sk(edit.first)))
                        .only_if(&Condition::not_exists("pk"))
                        .build()
                        .map_err(bad)?,
                ),
            };
            req = req.transact_items(item.build());
        }
        for x in extra {
            req = req.transact_items(x);
        }
        let map_items = 1 + change.edits.len();
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let reasons = cancellation_codes(&e);
                let err = AwsError::dynamodb("TransactWriteItems", &self.table, e);
                let Some(reasons) = reasons else {
                    return Err(err.into());
                };
                let failed = |i: &usize| {
                    reasons
                        .get(*i)
                        .is_some_and(|c| c == "ConditionalCheckFailed")
                };
                if (map_items..reasons.len()).any(|i| failed(&i)) {
                    Err(MoveError::RecordRefused {
                        table: self.table.clone(),
                    })
                } else if (0..map_items).any(|i| failed(&i)) {
                    Err(MoveError::Conflict {
                        table: self.table.clone(),
                    })
                } else {
                    // Another transaction on the same items, or throttling: try again as is.
                    Err(MoveError::TransactionBusy {
                        table: self.table.clone(),
                        reasons: reasons.join(","),
                    })
                }
            }
        }
    }

    /// [`Self::commit_with`] with nothing extra.
    pub async fn commit(&self, change: &Change) -> Result<(), MoveError> {
        self.commit_with(change, vec![]).await
    }
}

/// The cancellation reason codes of a cancelled `TransactWriteItems` (one per item, `None`
/// where the item was fine), or `None` when the call failed otherwise.
pub(crate) fn cancellation_codes<R>(
    e: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        R,
    >,
) -> Option<Vec<String>> {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(t)) => Some(
            t.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect(),
        ),
        _ => None,
    }
}
