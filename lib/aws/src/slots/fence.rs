//! The owner's slot table: one fence item per slot that left a table, and the key schema that
//! names it.
//!
//! A fence item lives in the owner table itself, next to the data it guards (so a fenced write
//! checks it in the same `TransactWriteItems`, in any account or Region the table is in):
//! `pk = "#heatsink/slot/<slot>"` (and the sort key's zero value: `"#"`, `0` or one zero byte),
//! `st = "moved"`, `ep` = the epoch the slot is owned at elsewhere, `to` = the new owner.
//! Items whose `pk` starts with `#heatsink/` are the toolkit's own: the mover never copies,
//! diffs or cleans them up.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, KeyType, PutRequest, ScalarAttributeType, StreamViewType,
    WriteRequest,
};
use futures::future::try_join_all;
use heatsink_core::slots::SlotRange;

use super::MoveError;
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
        let mut key = HashMap::from([(
            "pk".to_owned(),
            AttributeValue::S(format!("{INTERNAL_PREFIX}slot/{slot}")),
        )]);
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

/// A fence item's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceItem {
    /// The table the slot went to.
    pub to: String,
    /// The epoch it is owned at there.
    pub epoch: u64,
}

/// Reads a fence item (`None`: the slot never left, or came back).
pub fn parse_fence(item: &HashMap<String, AttributeValue>) -> Option<FenceItem> {
    if item
        .get("st")
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        != Some("moved")
    {
        return None;
    }
    Some(FenceItem {
        to: item.get("to")?.as_s().ok()?.clone(),
        epoch: item.get("ep")?.as_n().ok()?.parse().ok()?,
    })
}

async fn batch(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    mut requests: Vec<WriteRequest>,
) -> Result<(), MoveError> {
    // Unprocessed items are retried with a short pause (BatchWriteItem's documented contract).
    for round in 0..20u32 {
        if requests.is_empty() {
            return Ok(());
        }
        let out = ddb
            .batch_write_item()
            .request_items(table, requests)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("BatchWriteItem", table, e))?;
        requests = out
            .unprocessed_items()
            .and_then(|m| m.get(table))
            .cloned()
            .unwrap_or_default();
        if !requests.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10 << round.min(6))).await;
        }
    }
    Err(MoveError::BadItem(format!(
        "BatchWriteItem on {table} left items unprocessed after 20 rounds"
    )))
}

/// Writes the fence items of every slot of `slots` on `table` (25 per `BatchWriteItem`, the
/// batches in parallel). Idempotent.
pub async fn write_fences(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    slots: SlotRange,
    fence: &FenceItem,
) -> Result<(), MoveError> {
    let requests: Vec<WriteRequest> = (slots.first..=slots.last)
        .filter_map(|slot| {
            let mut item = keys.fence_key(slot);
            item.insert("st".into(), AttributeValue::S("moved".into()));
            item.insert("ep".into(), AttributeValue::N(fence.epoch.to_string()));
            item.insert("to".into(), AttributeValue::S(fence.to.clone()));
            let put = PutRequest::builder().set_item(Some(item)).build().ok()?;
            Some(WriteRequest::builder().put_request(put).build())
        })
        .collect();
    try_join_all(requests.chunks(25).map(|c| batch(ddb, table, c.to_vec()))).await?;
    Ok(())
}

/// Deletes the fence items of `slots` on `table` (the slots are owned there again). Idempotent.
pub async fn delete_fences(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    slots: SlotRange,
) -> Result<(), MoveError> {
    let requests: Vec<WriteRequest> = (slots.first..=slots.last)
        .filter_map(|slot| {
            let del = DeleteRequest::builder()
                .set_key(Some(keys.fence_key(slot)))
                .build()
                .ok()?;
            Some(WriteRequest::builder().delete_request(del).build())
        })
        .collect();
    try_join_all(requests.chunks(25).map(|c| batch(ddb, table, c.to_vec()))).await?;
    Ok(())
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
