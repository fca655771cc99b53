//! The `slots` table: the map's meta item, one item per range, one per move.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use heatsink_core::slots::{Change, RangeEntry, RangeState, SlotError, SlotMap, SlotRange};

use super::MoveError;
use super::record::{MoveRecord, parse_record};
use crate::error::AwsError;

/// The partition of the map's items.
const DIR_PK: &str = "dir";
/// The partition of the move records.
pub const MOVE_PK: &str = "move";
const META_SK: &str = "meta";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

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

fn get_s<'a>(item: &'a HashMap<String, AttributeValue>, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn get_n<T: std::str::FromStr>(item: &HashMap<String, AttributeValue>, k: &str) -> Option<T> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
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

/// The move records of a directory ([`SlotDirectory::moves`]).
#[derive(Debug, Clone, Default)]
pub struct MoveList {
    /// The readable records, oldest first.
    pub records: Vec<MoveRecord>,
    /// Records that could not be read: (move id, what is wrong).
    pub malformed: Vec<(String, String)>,
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

    /// All slots to `owner` at epoch 1, version 1. Idempotent: when the directory exists with
    /// exactly that layout it returns it unchanged; any other layout is
    /// [`MoveError::AlreadyInitialized`].
    pub async fn init(
        &self,
        owner: &str,
        max_age: Duration,
        strict: bool,
    ) -> Result<SlotMap, MoveError> {
        let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        let map = SlotMap::initial(owner, max_age_ms, strict);
        let meta = Put::builder()
            .table_name(&self.table)
            .set_item(Some(HashMap::from([
                ("pk".to_owned(), s(DIR_PK)),
                ("sk".to_owned(), s(META_SK)),
                ("version".to_owned(), n(1)),
                ("strict".to_owned(), AttributeValue::Bool(strict)),
                ("max_age_ms".to_owned(), n(max_age_ms)),
            ])))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        let range = Put::builder()
            .table_name(&self.table)
            .set_item(Some(range_item(&map.ranges[0])))
            .condition_expression("attribute_not_exists(pk)")
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
                if found.ranges == map.ranges {
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
        let mut items = vec![];
        let mut start = None;
        loop {
            let out = self
                .ddb
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", s(DIR_PK))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
            items.extend(out.items().iter().cloned());
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
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
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", s(MOVE_PK))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut list = MoveList::default();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
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
        parse_record(&item)
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
                        .update_expression("SET version = :n")
                        .condition_expression("version = :v")
                        .expression_attribute_values(":n", n(next))
                        .expression_attribute_values(":v", n(change.from_version))
                        .build()
                        .map_err(bad)?,
                )
                .build(),
        );
        for edit in &change.edits {
            let cond_before = |b: &RangeEntry| (":sig".to_owned(), s(signature(b)));
            let item = match (&edit.before, &edit.after) {
                (before, Some(after)) => {
                    let mut put = Put::builder()
                        .table_name(&self.table)
                        .set_item(Some(range_item(after)));
                    put = match before {
                        Some(b) => {
                            let (k, v) = cond_before(b);
                            put.condition_expression("sig = :sig")
                                .expression_attribute_values(k, v)
                        }
                        None => put.condition_expression("attribute_not_exists(pk)"),
                    };
                    TransactWriteItem::builder().put(put.build().map_err(bad)?)
                }
                (Some(b), None) => {
                    let (k, v) = cond_before(b);
                    TransactWriteItem::builder().delete(
                        Delete::builder()
                            .table_name(&self.table)
                            .key("pk", s(DIR_PK))
                            .key("sk", s(range_sk(edit.first)))
                            .condition_expression("sig = :sig")
                            .expression_attribute_values(k, v)
                            .build()
                            .map_err(bad)?,
                    )
                }
                (None, None) => TransactWriteItem::builder().condition_check(
                    ConditionCheck::builder()
                        .table_name(&self.table)
                        .key("pk", s(DIR_PK))
                        .key("sk", s(range_sk(edit.first)))
                        .condition_expression("attribute_not_exists(pk)")
                        .build()
                        .map_err(bad)?,
                ),
            };
            req = req.transact_items(item.build());
        }
        for x in extra {
            req = req.transact_items(x);
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = AwsError::dynamodb("TransactWriteItems", &self.table, e);
                if err.code() == Some("TransactionCanceledException") {
                    Err(MoveError::Conflict {
                        table: self.table.clone(),
                    })
                } else {
                    Err(err.into())
                }
            }
        }
    }

    /// [`Self::commit_with`] with nothing extra.
    pub async fn commit(&self, change: &Change) -> Result<(), MoveError> {
        self.commit_with(change, vec![]).await
    }
}
