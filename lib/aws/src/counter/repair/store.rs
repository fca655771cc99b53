//! The repair's own items in the counters table: the lease (one run at a time), the cursor
//! (where the next run resumes) and the `touched` index scan (which counters moved).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::counter::{Check, RepairCursor, Resume};

use super::{BucketRecount, Repair};
use crate::counter::rebuild::RebuildError;
use crate::counter::{CounterStoreError, TOUCHED_INDEX};
use crate::ddb::{Condition, KeyCondition, OnlyIf, Projecting, Projection, QueryKey, Written};
use crate::error::AwsError;

pub(super) fn rebuild_pk(name: &str) -> String {
    format!("#rebuild#{name}")
}

fn n_attr(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s_attr(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

impl<R: BucketRecount> Repair<'_, R> {
    pub(super) async fn acquire(&self) -> Result<bool, RebuildError> {
        let now = crate::clock::now_ms();
        let lease_ms = u64::try_from(self.options.lease.as_millis()).unwrap_or(u64::MAX);
        let out = self
            .ddb()
            .put_item()
            .table_name(self.table())
            .item("pk", s_attr(rebuild_pk(&self.name)))
            .item("sk", s_attr("lease"))
            .item("holder", s_attr(&self.options.holder))
            .item("expires", n_attr(now.saturating_add(lease_ms)))
            .only_if(
                &Condition::not_exists("pk")
                    .or(Condition::lt("expires", n_attr(now)))
                    .or(Condition::eq("holder", s_attr(&self.options.holder))),
            )
            .send()
            .await;
        Ok(out.written("PutItem", self.table())?)
    }

    pub(super) async fn release(&self) -> Result<(), RebuildError> {
        let out = self
            .ddb()
            .delete_item()
            .table_name(self.table())
            .key("pk", s_attr(rebuild_pk(&self.name)))
            .key("sk", s_attr("lease"))
            .only_if(&Condition::eq("holder", s_attr(&self.options.holder)))
            .send()
            .await;
        // Refused: someone took over an expired lease, theirs now, nothing to release.
        out.written("DeleteItem", self.table())?;
        Ok(())
    }

    pub(super) async fn load_cursor(&self) -> Result<RepairCursor, RebuildError> {
        let out = self
            .ddb()
            .get_item()
            .table_name(self.table())
            .key("pk", s_attr(rebuild_pk(&self.name)))
            .key("sk", s_attr("cursor"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", self.table(), e))?;
        let Some(item) = out.item else {
            return Ok(RepairCursor::default());
        };
        let bad = |reason: &str| {
            RebuildError::Counter(CounterStoreError::Malformed {
                pk: rebuild_pk(&self.name),
                sk: "cursor".into(),
                reason: reason.into(),
            })
        };
        let num = |v: &AttributeValue| v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
        let next = item
            .get("next")
            .and_then(num)
            .ok_or_else(|| bad("`next` is not a number"))?;
        let resume = match (item.get("horizon"), item.get("after")) {
            (Some(h), Some(a)) => Some(Resume {
                horizon: num(h).ok_or_else(|| bad("`horizon` is not a number"))?,
                after: a
                    .as_s()
                    .map_err(|_| bad("`after` is not a string"))?
                    .clone(),
            }),
            _ => None,
        };
        let mut retry = vec![];
        if let Some(list) = item.get("retry") {
            for v in list.as_l().map_err(|_| bad("`retry` is not a list"))? {
                let pair = v.as_l().map_err(|_| bad("a retry is not a list"))?;
                let id = pair.first().and_then(|v| v.as_s().ok()).cloned();
                let b = pair.get(1).and_then(num);
                match (id, b) {
                    (Some(id), Some(b)) => retry.push(Check::new(id, b)),
                    _ => return Err(bad("a retry is not [id, bucket]")),
                }
            }
        }
        Ok(RepairCursor {
            next,
            resume,
            retry,
        })
    }

    pub(super) async fn save_cursor(&self, c: &RepairCursor) -> Result<(), RebuildError> {
        let retry = c
            .retry
            .iter()
            .map(|c| AttributeValue::L(vec![s_attr(&c.id), n_attr(c.bucket)]))
            .collect();
        let mut req = self
            .ddb()
            .put_item()
            .table_name(self.table())
            .item("pk", s_attr(rebuild_pk(&self.name)))
            .item("sk", s_attr("cursor"))
            .item("next", n_attr(c.next))
            .item("retry", AttributeValue::L(retry));
        if let Some(r) = &c.resume {
            req = req
                .item("horizon", n_attr(r.horizon))
                .item("after", s_attr(&r.after));
        }
        req.send()
            .await
            .map_err(|e| AwsError::dynamodb("PutItem", self.table(), e))?;
        Ok(())
    }

    /// Ids of counter `name` whose writer sub-keys' newest bucket is `from` or later, through
    /// the write-sharded `touched` index ([`CounterStore::touch_shards`](crate::counter::CounterStore::touch_shards) Queries per bucket), oldest first up
    /// to the bucket of the run's start. A hot counter's index key moves to the current bucket
    /// with its flushes, so a last pass reads the previous and the current bucket of the clock
    /// *then*, in that order: a key that was in either when the first of the two was read is
    /// found, unless it moved twice during the two reads (which take far less than a bucket).
    pub(super) async fn touched(&self, from: u64) -> Result<BTreeSet<String>, RebuildError> {
        let spec = self.options.buckets;
        let prefix = format!("{}#", self.name);
        let mut ids = BTreeSet::new();
        let last = spec.start_of(crate::clock::now_ms());
        let mut starts: Vec<u64> = (from..=last)
            .step_by(spec.width_ms().max(1) as usize)
            .collect();
        let mut at = 0;
        let mut caught_up = false;
        loop {
            let Some(&start) = starts.get(at) else {
                if caught_up {
                    break;
                }
                caught_up = true;
                let now = spec.start_of(crate::clock::now_ms());
                starts.extend(
                    [now.saturating_sub(spec.width_ms()), now]
                        .into_iter()
                        .filter(|b| *b >= from),
                );
                continue;
            };
            at += 1;
            for n in 0..self.counters.touch_shards() {
                let key = format!("{}#{start}#{n}", self.name);
                debug_assert!(key.starts_with(&prefix));
                let mut pages = self
                    .ddb()
                    .query()
                    .table_name(self.table())
                    .index_name(TOUCHED_INDEX)
                    .query_key(&KeyCondition::partition(TOUCHED_INDEX, s_attr(&key)))
                    .projecting(&Projection::of(&["pk"]))
                    .into_paginator()
                    .send();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|e| AwsError::dynamodb("Query", self.table(), e))?;
                    for item in page.items() {
                        if let Some(id) = item
                            .get("pk")
                            .and_then(|v| v.as_s().ok())
                            .and_then(|pk| pk.strip_prefix(&prefix))
                        {
                            ids.insert(id.to_owned());
                        }
                    }
                }
            }
        }
        Ok(ids)
    }
}
