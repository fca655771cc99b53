//! Where the repair gets the truth of one bucket: [`BucketRecount`], and the ready-made
//! [`GsiRecount`] over a write-sharded index of the events table.

use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::keys::GsiShard;

use crate::counter::rebuild::BoxError;
use crate::ddb::{KeyCondition, QueryKey};
use crate::error::AwsError;

/// Where a repair gets the truth of one bucket: the durable events of one id whose event time
/// is in `[start_ms, end_ms)`.
pub trait BucketRecount: Send + Sync {
    /// Net durable events of `id` with an event time in `[start_ms, end_ms)`.
    fn recount(
        &self,
        id: &str,
        start_ms: u64,
        end_ms: u64,
    ) -> impl Future<Output = Result<i64, BoxError>> + Send;

    /// Whether the aggregator counts this id at all: an id it rejects (its records fail the
    /// mapper) is never corrected, whatever the events table holds.
    fn accepts(&self, id: &str) -> bool {
        let _ = id;
        true
    }
}

/// A ready-made [`BucketRecount`]: `Select COUNT` Queries of a write-sharded GSI of the events
/// table, keyed by [`GsiShard`] (`<id>#<n>`, `n = stable_hash64(spread) mod shards`: the
/// toolkit's one index-sharding rule, e.g. the photo app's `post_shard` spread by the user) and
/// sorted by the event time (`time_attribute`, a number of Unix ms). Cost per bucket: `shards`
/// Queries (more only when a shard's bucket exceeds 1 MB of index entries, about 20,000
/// events).
///
/// It reads every index shard of the id, so it counts an event whatever shard number its item
/// carries: items written under an older rule with the same shard count (the photo app's
/// `post_shard` before it moved to [`GsiShard`], see docs/counters.md) are counted too.
///
/// A GSI is eventually consistent: the repair judges a bucket only `settle` after its end, and
/// relies on index propagation being shorter than that (AWS: typically well under a second).
#[derive(Debug, Clone)]
pub struct GsiRecount {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    index: String,
    shard_attribute: String,
    time_attribute: String,
    shards: u16,
    accepts: Option<fn(&str) -> bool>,
}

impl GsiRecount {
    /// Recounts through `index` of `table`, `shards` index shards per id (1 to
    /// [`MAX_SALTS`](heatsink_core::keys::MAX_SALTS); more is clamped).
    pub fn new(
        ddb: &aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        index: impl Into<String>,
        shard_attribute: impl Into<String>,
        time_attribute: impl Into<String>,
        shards: u16,
    ) -> Self {
        Self {
            ddb: ddb.clone(),
            table: table.into(),
            index: index.into(),
            shard_attribute: shard_attribute.into(),
            time_attribute: time_attribute.into(),
            shards: shards.clamp(1, heatsink_core::keys::MAX_SALTS),
            accepts: None,
        }
    }

    /// Corrects only ids `accepts` allows (the aggregator's own id rule).
    pub fn accepting(mut self, accepts: fn(&str) -> bool) -> Self {
        self.accepts = Some(accepts);
        self
    }

    /// The index rule of an id: what a writer of the events table puts in the shard attribute.
    pub fn rule(&self, id: &str) -> Result<GsiShard, BoxError> {
        Ok(GsiShard::new(id, self.shards)?)
    }
}

impl BucketRecount for GsiRecount {
    async fn recount(&self, id: &str, start_ms: u64, end_ms: u64) -> Result<i64, BoxError> {
        let mut total: i64 = 0;
        for key in self.rule(id)?.all_shards() {
            let pages = self
                .ddb
                .query()
                .table_name(&self.table)
                .index_name(&self.index)
                .query_key(
                    &KeyCondition::partition(&self.shard_attribute, AttributeValue::S(key))
                        .sort_between(
                            &self.time_attribute,
                            AttributeValue::N(start_ms.to_string()),
                            AttributeValue::N(end_ms.saturating_sub(1).to_string()),
                        ),
                )
                .select(aws_sdk_dynamodb::types::Select::Count)
                .into_paginator()
                .send()
                .collect::<Vec<_>>()
                .await;
            for page in pages {
                let page = page.map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
                total = total
                    .checked_add(i64::from(page.count))
                    .ok_or("recount overflowed")?;
            }
        }
        Ok(total)
    }

    fn accepts(&self, id: &str) -> bool {
        self.rule(id).is_ok() && self.accepts.is_none_or(|f| f(id))
    }
}
