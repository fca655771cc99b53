//! After a cut-over, and on the way out of a move: the soaks, the purges, the abort.
//!
//! Every delete of moved data and of fence items runs only in a phase persisted for it, after
//! [`heatsink_core::slots::may_delete`] has seen its evidence (the directory read for the
//! decision, the drain's recorded proof), and in transactions that carry the lease check, so a
//! controller that lost its lease cannot delete anything. No tail runs while a copy is being
//! deleted ([`heatsink_core::slots::Phase::may_tail`]): the purge's own deletes are never read
//! back as changes.

use std::time::Duration;

use aws_sdk_dynamodb::types::{Delete, DeleteRequest, TransactWriteItem, WriteRequest};
use heatsink_core::slots::{
    Delete as Deletion, Evidence, Phase, RangeState, Side, Way, may_delete,
};
use tokio::time::Instant;

use super::super::MoveError;
use super::super::directory::cancellation_codes;
use super::super::fence::{KeySchema, TOMBSTONE_ATTR, is_internal, marker_pk};
use super::Mover;
use super::copy::Pace;
use crate::ddb::{Condition, Item, OnlyIf, get_s};
use crate::error::AwsError;

/// Deletes per purge transaction (one more item checks the lease).
const DELETES_PER_TRANSACTION: usize = 99;

/// What a purge deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purge {
    /// Every item of the slots (not the toolkit's own items).
    All,
    /// Only the tombstones of the slots (the new owner keeps its live items).
    Tombstones,
}

/// How a purge transaction went.
enum Sent {
    Done,
    /// These items' own conditions failed (a tombstone replaced by a live write): drop them.
    Refused(Vec<usize>),
}

impl Mover {
    /// What the directory says now, for [`may_delete`].
    async fn evidence(&self) -> Result<Evidence, MoveError> {
        let map = self.ctx().retry(|| self.load_map()).await?;
        let entry = map.entry_of(self.record.slots.first);
        let whole = entry.range.covers(&self.record.slots);
        Ok(Evidence {
            forward_proven: self.record.forward.proven.is_some(),
            reverse_proven: self
                .record
                .reverse
                .as_ref()
                .is_some_and(|t| t.proven.is_some()),
            target_owns: whole && entry.owner == self.dst.table,
            source_owns: whole && entry.owner == self.src.table,
            marked_by_this_move: whole
                && matches!(&entry.state, RangeState::Moving { move_id } if *move_id == self.record.id),
        })
    }

    fn allow(&self, delete: Deletion, evidence: Evidence) -> Result<(), MoveError> {
        Ok(may_delete(
            &self.record.id,
            self.record.phase,
            delete,
            evidence,
        )?)
    }

    /// Polls `way` for `how_long`, saving about once a second.
    async fn soak(&mut self, way: Way, how_long: Duration) -> Result<(), MoveError> {
        let until = Instant::now() + how_long;
        let mut saved = Instant::now();
        while Instant::now() < until {
            self.poll(way, None).await?;
            if saved.elapsed() >= Duration::from_secs(1) {
                self.save().await?;
                saved = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // One last round over every listed shard.
        self.poll_with(way, true, None).await?;
        Ok(())
    }

    fn soak_time(&self) -> Duration {
        self.record
            .budget
            .soak
            .max(Duration::from_millis(self.record.max_age_ms))
    }

    /// `flipped` → `cleaning`: the soak (the target's writes back to the source, so a rollback
    /// loses nothing; at least `max_age`, so routers with the old map stop reading the source),
    /// then the markers go. A flip recorded without proof (by an older mover) is proven first.
    pub(super) async fn soak_forward(&mut self) -> Result<(), MoveError> {
        if self.record.forward.proven.is_none() {
            self.prove_after_flip().await?;
        }
        let how_long = self.soak_time();
        self.soak(Way::Reverse, how_long).await?;
        self.delete_markers(Way::Forward).await
    }

    /// A flip an older mover committed without the drain's proof: the source refuses the
    /// slots (its fence), so markers written now follow every write it acknowledged; the
    /// forward tail reads until every shard shows one.
    async fn prove_after_flip(&mut self) -> Result<(), MoveError> {
        self.say(&format!(
            "{}: the flip was recorded without the drain's proof; proving it now",
            self.record.id
        ));
        self.fenced = Some(self.token());
        self.drain_proof(Way::Forward).await
    }

    /// `cleaning` → `cleaned`: the source's copy (and the carried tables' items) deleted at
    /// the WCU budget, then the target's tombstones.
    pub(super) async fn clean(&mut self) -> Result<(), MoveError> {
        let evidence = self.evidence().await?;
        self.allow(Deletion::Purge(Side::Source), evidence)?;
        let (src, keys) = (self.src.table.clone(), self.src.keys.clone());
        self.purge(&src, &keys, Purge::All).await?;
        for carried in self.record.carried.clone() {
            self.purge(&carried, &keys, Purge::All).await?;
        }
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, Purge::Tombstones).await
    }

    /// Before `aborting` is persisted: refused when the directory names the target already.
    pub(super) async fn begin_abort(&mut self) -> Result<(), MoveError> {
        let evidence = self.evidence().await?;
        if evidence.target_owns {
            heatsink_core::slots::check_abort(&self.record.id, Phase::Flipped)?;
        }
        Ok(())
    }

    /// `aborting` → `aborted`: the target's copy and this move's fence items deleted while the
    /// range is still marked by this move (no other move can start on it meanwhile), then the
    /// range unmarked in one transaction with the record.
    pub(super) async fn finish_abort(&mut self) -> Result<(), MoveError> {
        let evidence = self.evidence().await?;
        if !evidence.marked_by_this_move {
            return Err(MoveError::NotMarked {
                id: self.record.id.clone(),
                slots: self.record.slots,
            });
        }
        self.allow(Deletion::Purge(Side::Target), evidence)?;
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, Purge::All).await?;
        self.allow(Deletion::SourceFences, evidence)?;
        let (src, keys) = (self.src.table.clone(), self.src.keys.clone());
        self.delete_fences(&src, &keys).await?;
        self.delete_markers(Way::Forward).await?;
        let ctx = self.ctx();
        loop {
            let map = ctx.retry(|| self.load_map()).await?;
            let Some(change) = map.unmark(self.record.slots, &self.record.id)? else {
                return Err(MoveError::NotMarked {
                    id: self.record.id.clone(),
                    slots: self.record.slots,
                });
            };
            self.record.phase = Phase::Aborted;
            let (prev, put) = match self.bump() {
                Ok(x) => x,
                Err(e) => {
                    self.record.phase = Phase::Aborting;
                    return Err(e);
                }
            };
            match ctx
                .retry(|| {
                    let (dir, change, put) = (self.dir.clone(), change.clone(), put.clone());
                    async move { dir.commit_with(&change, vec![put]).await }
                })
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.unbump(prev);
                    self.record.phase = Phase::Aborting;
                    match e {
                        MoveError::Conflict { .. } => {}
                        MoveError::RecordRefused { .. } => match self.refused().await {
                            None => {
                                self.record.phase = Phase::Aborted;
                                return Ok(());
                            }
                            Some(err) => return Err(err),
                        },
                        e => return Err(e),
                    }
                }
            }
        }
    }

    /// `rollback_flipped` → `rollback_cleaning`: the reverse soak (the source's writes reach
    /// the target, which routers with the old map may still read for `max_age`), then the
    /// target's markers go.
    pub(super) async fn soak_reverse(&mut self) -> Result<(), MoveError> {
        let how_long = self.soak_time();
        self.soak(Way::Forward, how_long).await?;
        self.delete_markers(Way::Reverse).await
    }

    /// `rollback_cleaning` → `rolled_back`: the target's copy deleted (the rollback's drain
    /// proved every target shard read past its fence), and this move's fence items on the
    /// source, which owns the slots again at a higher epoch.
    pub(super) async fn finish_rollback(&mut self) -> Result<(), MoveError> {
        let evidence = self.evidence().await?;
        self.allow(Deletion::Purge(Side::Target), evidence)?;
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, Purge::All).await?;
        self.allow(Deletion::SourceFences, evidence)?;
        let (src, keys) = (self.src.table.clone(), self.src.keys.clone());
        self.delete_fences(&src, &keys).await?;
        self.delete_markers(Way::Forward).await
    }

    /// Deletes the markers `way`'s drains wrote (internal items, not data).
    async fn delete_markers(&mut self, way: Way) -> Result<(), MoveError> {
        let (table, keys) = match way {
            Way::Forward => (self.src.table.clone(), self.src.keys.clone()),
            Way::Reverse => (self.dst.table.clone(), self.dst.keys.clone()),
        };
        let markers = std::mem::take(&mut self.tail_mut(way).markers);
        let requests: Vec<WriteRequest> = markers
            .iter()
            .flat_map(|(token, count)| (0..*count).map(move |i| (*token, i)))
            .map(|(token, i)| {
                DeleteRequest::builder()
                    .set_key(Some(keys.internal_key(marker_pk(
                        &self.record.id,
                        token,
                        i,
                    ))))
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(|e| MoveError::BadItem(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        if let Err(e) = self.batch_write(&table, requests).await {
            self.tail_mut(way).markers = markers;
            return Err(e);
        }
        Ok(())
    }

    /// Deletes the fence items of the move's slots on `table`, in transactions carrying the
    /// lease check.
    async fn delete_fences(&mut self, table: &str, keys: &KeySchema) -> Result<(), MoveError> {
        let slots = self.record.slots;
        let fences: Vec<Item> = (slots.first..=slots.last)
            .map(|n| keys.fence_key(n))
            .collect();
        for chunk in fences.chunks(DELETES_PER_TRANSACTION) {
            self.delete_batch(table, chunk.to_vec(), Purge::All).await?;
        }
        Ok(())
    }

    /// Deletes `keys` from `table` in one transaction with the lease check; with
    /// `Purge::Tombstones` each only while it is still a tombstone (those that are not any more
    /// are left). Returns how many were deleted.
    async fn delete_batch(
        &self,
        table: &str,
        mut keys: Vec<Item>,
        what: Purge,
    ) -> Result<u64, MoveError> {
        let token = self.token();
        let lease = self.dir.lease_check(&self.record.id, token)?;
        let ctx = self.ctx();
        let id = self.record.id.clone();
        while !keys.is_empty() {
            let mut items = vec![lease.clone()];
            for k in &keys {
                let mut d = Delete::builder().table_name(table).set_key(Some(k.clone()));
                if what == Purge::Tombstones {
                    d = d.only_if(&Condition::exists(TOMBSTONE_ATTR));
                }
                let d = d.build().map_err(|e| MoveError::BadItem(e.to_string()))?;
                items.push(TransactWriteItem::builder().delete(d).build());
            }
            let sent = ctx
                .retry(|| {
                    let req = self
                        .ddb
                        .transact_write_items()
                        .set_transact_items(Some(items.clone()));
                    let id = id.clone();
                    let table = table.to_owned();
                    async move {
                        match req.send().await {
                            Ok(_) => Ok(Sent::Done),
                            Err(e) => {
                                let codes = cancellation_codes(&e);
                                let err = AwsError::dynamodb("TransactWriteItems", &table, e);
                                let Some(codes) = codes else {
                                    return Err(err.into());
                                };
                                let failed: Vec<usize> = codes
                                    .iter()
                                    .enumerate()
                                    .filter(|(_, c)| c.as_str() == "ConditionalCheckFailed")
                                    .map(|(i, _)| i)
                                    .collect();
                                if failed.contains(&0) {
                                    Err(MoveError::LeaseLost { id, token })
                                } else if failed.is_empty() {
                                    Err(MoveError::TransactionBusy {
                                        table: table.to_owned(),
                                        reasons: codes.join(","),
                                    })
                                } else {
                                    Ok(Sent::Refused(failed.into_iter().map(|i| i - 1).collect()))
                                }
                            }
                        }
                    }
                })
                .await?;
            match sent {
                Sent::Done => return Ok(keys.len() as u64),
                Sent::Refused(skip) => {
                    keys = keys
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| !skip.contains(i))
                        .map(|(_, k)| k)
                        .collect();
                }
            }
        }
        Ok(0)
    }

    /// Deletes every item of the slots on `table` (not the toolkit's own items; with
    /// `Purge::Tombstones`, only tombstones) at the WCU budget (2 per transactional delete).
    async fn purge(&mut self, table: &str, keys: &KeySchema, what: Purge) -> Result<(), MoveError> {
        let mut pace = Pace::new(self.record.budget.wcu_per_sec);
        let mut start: Option<Item> = None;
        let mut saved = Instant::now();
        loop {
            let page = self.scan_page(table, start.clone()).await?;
            let doomed: Vec<Item> = page
                .items()
                .iter()
                .filter(|item| {
                    get_s(item, "pk").is_some_and(|pk| {
                        !is_internal(pk)
                            && self.record.slots.contains(self.record.keying.slot_of(pk))
                    }) && (what == Purge::All || item.contains_key(TOMBSTONE_ATTR))
                })
                .map(|item| keys.key_of(item))
                .collect();
            for chunk in doomed.chunks(DELETES_PER_TRANSACTION) {
                let deleted = self.delete_batch(table, chunk.to_vec(), what).await?;
                self.record.cleaned += deleted;
                self.record.wcu += 2.0 * deleted as f64;
                if saved.elapsed() >= Duration::from_secs(1) {
                    self.save().await?;
                    saved = Instant::now();
                }
                pace.take(2.0 * chunk.len() as f64).await;
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(());
            }
        }
    }
}
