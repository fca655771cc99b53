//! The owner's slot table: one fence item per slot that left a table, and the key schema that
//! names it.
//!
//! A fence item lives in the owner table itself, next to the data it guards (so a fenced write
//! checks it in the same `TransactWriteItems`, in any account or Region the table is in):
//! `pk = "#heatsink/slot/<slot>"` (and the sort key's zero value: `"#"`, `0` or one zero byte),
//! `st = "moved"`, `ep` = the epoch the slot is owned at elsewhere, `to` = the new owner, `mv`
//! and `tk` = the move and attempt token that wrote it. A write routed at epoch `e` is accepted
//! only when `ep < e` ([`heatsink_core::slots::admits`]), so a range can leave a table and come
//! back at a higher epoch without any fence being removed. Marker items
//! (`#heatsink/mark/<move>/<token>/<n>`) are written after a fence to prove a stream shard was
//! read past it. Items whose `pk` starts with `#heatsink/` are the toolkit's own: the mover
//! never copies, diffs or cleans them up as data.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::{
    AttributeValue, KeyType, KeysAndAttributes, ScalarAttributeType, StreamViewType,
};
use heatsink_core::slots::SlotRange;
use heatsink_core::slots::apply::Version;

use super::MoveError;
use crate::ddb::{Condition, Item, get_n, get_s, n, s};
use crate::error::AwsError;

/// The `pk` prefix of the toolkit's own items in an owner table.
pub const INTERNAL_PREFIX: &str = "#heatsink/";

/// Whether an item with this `pk` is a toolkit item (fence), not user data.
pub fn is_internal(pk: &str) -> bool {
    pk.starts_with(INTERNAL_PREFIX)
}

/// The attribute that marks a tombstone (a delete the mover carried as a versioned item).
pub const TOMBSTONE_ATTR: &str = "hs_tomb";

/// The version attribute every routed or moved item carries.
pub const VERSION_ATTR: &str = "v";

/// An owner table's key schema: `pk` (string) and an optional sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySchema {
    /// The sort key's name and type, if the table has one.
    pub sort_key: Option<(String, ScalarAttributeType)>,
}

/// What the mover and router need to know about an owner table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// The table.
    pub table: String,
    /// Its keys.
    pub keys: KeySchema,
    /// Its stream's ARN, when streaming.
    pub stream_arn: Option<String>,
    /// Its stream's view type.
    pub view: Option<StreamViewType>,
    /// Its warm throughput, billing mode and on-demand maximum.
    pub capacity: crate::schema::warm::TableCapacity,
}

impl TableInfo {
    /// Describes `table`; refuses a table whose partition key is not a string `pk`.
    pub async fn describe(
        ddb: &aws_sdk_dynamodb::Client,
        table: &str,
    ) -> Result<TableInfo, MoveError> {
        let out = ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("DescribeTable", table, e))?;
        let bad = |reason: String| MoveError::BadTable {
            table: table.to_owned(),
            reason,
        };
        let desc = out.table.ok_or_else(|| bad("no description".into()))?;
        let type_of = |name: &str| {
            desc.attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == name)
                .map(|d| d.attribute_type().clone())
        };
        let mut sort_key = None;
        let mut has_pk = false;
        for k in desc.key_schema() {
            match k.key_type() {
                KeyType::Hash => {
                    has_pk =
                        k.attribute_name() == "pk" && type_of("pk") == Some(ScalarAttributeType::S);
                }
                KeyType::Range => {
                    let t = type_of(k.attribute_name())
                        .ok_or_else(|| bad("sort key has no type".into()))?;
                    sort_key = Some((k.attribute_name().to_owned(), t));
                }
                _ => {}
            }
        }
        if !has_pk {
            return Err(bad(
                "its partition key is not a string attribute named `pk`".into(),
            ));
        }
        let stream = desc.stream_specification().filter(|s| s.stream_enabled());
        Ok(TableInfo {
            table: table.to_owned(),
            keys: KeySchema { sort_key },
            stream_arn: stream.and(desc.latest_stream_arn().map(str::to_owned)),
            view: stream.and_then(|s| s.stream_view_type().cloned()),
            capacity: crate::schema::warm::capacity_of(&desc),
        })
    }

    /// Refuses a table without a NEW_AND_OLD_IMAGES stream (the mover reads both images).
    pub fn require_stream(&self) -> Result<&str, MoveError> {
        match (&self.stream_arn, &self.view) {
            (Some(arn), Some(StreamViewType::NewAndOldImages)) => Ok(arn),
            _ => Err(MoveError::BadTable {
                table: self.table.clone(),
                reason: "it has no NEW_AND_OLD_IMAGES stream; enable one (aws dynamodb update-table --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES)".into(),
            }),
        }
    }
}

impl KeySchema {
    /// The key of the fence item of `slot`.
    pub fn fence_key(&self, slot: u16) -> HashMap<String, AttributeValue> {
        self.internal_key(format!("{INTERNAL_PREFIX}slot/{slot}"))
    }

    /// The key attributes of `item` (pk and the sort key).
    pub fn key_of(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::new();
        if let Some(pk) = item.get("pk") {
            key.insert("pk".to_owned(), pk.clone());
        }
        if let Some((name, _)) = &self.sort_key
            && let Some(v) = item.get(name)
        {
            key.insert(name.clone(), v.clone());
        }
        key
    }
}

pub use heatsink_core::slots::FenceItem;

/// The fence item's attributes besides its key.
const STATE_ATTR: &str = "st";
pub(crate) const EPOCH_ATTR: &str = "ep";
const TO_ATTR: &str = "to";
pub(crate) const MOVE_ATTR: &str = "mv";
pub(crate) const TOKEN_ATTR: &str = "tk";

/// The fence item of `slot` on a table with `keys`: `st = moved`, the epoch the slot is owned
/// at elsewhere (`ep`), the new owner (`to`), and the move and token that wrote it (`mv`, `tk`:
/// a new attempt's fence is a new stream record even when the rest is unchanged).
pub fn fence_item(keys: &KeySchema, slot: u16, fence: &FenceItem) -> Item {
    let mut item = keys.fence_key(slot);
    item.insert(STATE_ATTR.into(), s("moved"));
    item.insert(EPOCH_ATTR.into(), n(fence.epoch));
    item.insert(TO_ATTR.into(), s(&fence.to));
    if let Some(m) = &fence.move_id {
        item.insert(MOVE_ATTR.into(), s(m));
    }
    if let Some(t) = fence.token {
        item.insert(TOKEN_ATTR.into(), n(t));
    }
    item
}

/// Reads a fence item (`None`: not a fence item).
pub fn parse_fence(item: &Item) -> Option<FenceItem> {
    if get_s(item, STATE_ATTR) != Some("moved") {
        return None;
    }
    Some(FenceItem {
        to: get_s(item, TO_ATTR)?.to_owned(),
        epoch: get_n(item, EPOCH_ATTR)?,
        move_id: get_s(item, MOVE_ATTR).map(str::to_owned),
        token: get_n(item, TOKEN_ATTR),
    })
}

/// The slot a fence item's `pk` names, if it is one.
pub fn fence_slot(pk: &str) -> Option<u16> {
    pk.strip_prefix(INTERNAL_PREFIX)?
        .strip_prefix("slot/")?
        .parse()
        .ok()
}

/// The `pk` of marker `n` of move `move_id`'s attempt `token`: an item the mover writes after
/// a fence write returned, so its stream record follows every acknowledged write of the slots
/// on its shard (see `heatsink_core::slots::proof`).
pub fn marker_pk(move_id: &str, token: u64, n: u64) -> String {
    format!("{INTERNAL_PREFIX}mark/{move_id}/{token}/{n}")
}

/// The move and token a marker's `pk` names, if it is one.
pub fn parse_marker(pk: &str) -> Option<(&str, u64)> {
    let rest = pk.strip_prefix(INTERNAL_PREFIX)?.strip_prefix("mark/")?;
    let mut parts = rest.split('/');
    let (move_id, token) = (parts.next()?, parts.next()?.parse().ok()?);
    parts.next()?;
    Some((move_id, token))
}

impl KeySchema {
    /// The key of an internal item with partition key `pk` (the sort key's zero value).
    pub fn internal_key(&self, pk: String) -> Item {
        let mut key = HashMap::from([("pk".to_owned(), AttributeValue::S(pk))]);
        if let Some((name, kind)) = &self.sort_key {
            let zero = match kind {
                ScalarAttributeType::N => AttributeValue::N("0".into()),
                ScalarAttributeType::B => AttributeValue::B(vec![0u8].into()),
                _ => AttributeValue::S("#".into()),
            };
            key.insert(name.clone(), zero);
        }
        key
    }
}

/// The apply rule as a condition ([`heatsink_core::slots::apply::wins`]): write `version` only
/// when the stored item ranks below it. A live row: `attribute_not_exists(v) OR v < :v`; a
/// tombstone also replaces the live row of its own version.
pub(crate) fn apply_rule(version: Version) -> Condition {
    let older = |v: u64| Condition::not_exists(VERSION_ATTR).or(Condition::lt(VERSION_ATTR, n(v)));
    match version {
        Version::Live(v) => older(v),
        Version::Tombstone(v) => older(v)
            .or(Condition::eq(VERSION_ATTR, n(v)).and(Condition::not_exists(TOMBSTONE_ATTR))),
    }
}

/// The owner's check of a fenced write routed at `epoch` ([`heatsink_core::slots::admits`]):
/// no fence item, or one that says the slot left at an earlier epoch.
pub(crate) fn admits_condition(epoch: u64) -> Condition {
    Condition::not_exists("pk").or(Condition::lt(EPOCH_ATTR, n(epoch)))
}

/// Reads the fence item of `slot` on `table` (strongly consistent).
pub async fn read_fence(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    slot: u16,
) -> Result<Option<FenceItem>, MoveError> {
    let out = ddb
        .get_item()
        .table_name(table)
        .set_key(Some(keys.fence_key(slot)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| AwsError::dynamodb("GetItem", table, e))?;
    Ok(out.item().and_then(parse_fence))
}

/// Reads the fence items of every slot of `slots` on `table` (BatchGetItem, 100 keys a call,
/// unprocessed keys read again): slot → fence, for the slots that have one.
pub async fn read_fences(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    slots: SlotRange,
) -> Result<BTreeMap<u16, FenceItem>, MoveError> {
    let all: Vec<Item> = (slots.first..=slots.last)
        .map(|n| keys.fence_key(n))
        .collect();
    let mut out = BTreeMap::new();
    for chunk in all.chunks(100) {
        let mut pending: Vec<Item> = chunk.to_vec();
        for round in 0..20u32 {
            if pending.is_empty() {
                break;
            }
            let ka = KeysAndAttributes::builder()
                .set_keys(Some(pending.clone()))
                .consistent_read(true)
                .build()
                .map_err(|e| MoveError::BadItem(e.to_string()))?;
            let res = ddb
                .batch_get_item()
                .request_items(table, ka)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("BatchGetItem", table, e))?;
            for item in res
                .responses()
                .and_then(|r| r.get(table))
                .into_iter()
                .flatten()
            {
                if let (Some(slot), Some(f)) =
                    (get_s(item, "pk").and_then(fence_slot), parse_fence(item))
                {
                    out.insert(slot, f);
                }
            }
            pending = res
                .unprocessed_keys()
                .and_then(|m| m.get(table))
                .map(|k| k.keys().to_vec())
                .unwrap_or_default();
            if !pending.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(10 << round.min(6))).await;
            }
        }
    }
    Ok(out)
}
