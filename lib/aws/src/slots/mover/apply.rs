//! Writes under the apply rule: snapshot rows, tail changes and tombstones land on the other
//! table only when they rank above what it holds, so any order, any repeat and any overlap of
//! the copy and the tails leave the newest version ([`heatsink_core::slots::apply::wins`]).

use futures::StreamExt;
use heatsink_core::slots::apply::Version;
use heatsink_core::slots::tail::TailOp;

use super::super::MoveError;
use super::super::fence::{KeySchema, TOMBSTONE_ATTR, VERSION_ATTR, apply_rule};
use super::calls::Ctx;
use crate::ddb::{Condition, Item, OnlyIf, Written, flag, n};

/// Changes applied at once (the apply rule makes their order irrelevant).
const APPLY_CONCURRENCY: usize = 16;

/// Writes `item` at `version` under the apply rule; `Ok(false)` when the stored one ranks at or
/// above it.
pub(super) async fn apply_to(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    item: &Item,
    version: Version,
) -> Result<bool, MoveError> {
    let body = match version {
        Version::Live(_) => item.clone(),
        Version::Tombstone(v) => {
            let mut t = keys.key_of(item);
            t.insert(VERSION_ATTR.into(), n(v));
            t.insert(TOMBSTONE_ATTR.into(), flag(true));
            t
        }
    };
    let res = ddb
        .put_item()
        .table_name(table)
        .set_item(Some(body))
        .only_if(&apply_rule(version))
        .send()
        .await;
    Ok(res.written("PutItem", table)?)
}

/// Deletes `key` on `table` when its version is at most `v` (reverse replication of a delete).
pub(super) async fn delete_upto(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    key: Item,
    v: u64,
) -> Result<bool, MoveError> {
    let res = ddb
        .delete_item()
        .table_name(table)
        .set_key(Some(key))
        .only_if(&Condition::not_exists(VERSION_ATTR).or(Condition::le(VERSION_ATTR, n(v))))
        .send()
        .await;
    Ok(res.written("DeleteItem", table)?)
}

/// One tail write: the item (for a delete, its key) and what to do with it.
pub(super) struct Op {
    pub(super) item: Item,
    pub(super) op: TailOp,
}

/// Applies `ops` to `table`, each retried within the move's deadline; returns (written,
/// skipped by the apply rule).
pub(super) async fn apply_all(
    ctx: &Ctx,
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    ops: Vec<Op>,
) -> Result<(u64, u64), MoveError> {
    let results: Vec<Result<bool, MoveError>> = futures::stream::iter(ops.into_iter().map(|op| {
        let (ddb, table, keys) = (ddb.clone(), table.to_owned(), keys.clone());
        async move {
            ctx.retry(|| {
                let (ddb, table, keys, item) =
                    (ddb.clone(), table.clone(), keys.clone(), op.item.clone());
                async move {
                    match op.op {
                        TailOp::Apply(v) => apply_to(&ddb, &table, &keys, &item, v).await,
                        TailOp::DeleteUpTo(v) => {
                            delete_upto(&ddb, &table, keys.key_of(&item), v).await
                        }
                    }
                }
            })
            .await
        }
    }))
    .buffer_unordered(APPLY_CONCURRENCY)
    .collect()
    .await;
    let (mut written, mut skipped) = (0u64, 0u64);
    for r in results {
        if r? {
            written += 1;
        } else {
            skipped += 1;
        }
    }
    Ok((written, skipped))
}
