//! The cut-over, both ways: wait out `max_age` after the mark, fence the old owner (conditional
//! on the range still marked by this move and on the lease), drain its stream until every shard
//! of the lineage is **proven** read past the fence ([`heatsink_core::slots::proof`]), then flip
//! the directory in one transaction with the record. Forward: source → target at epoch + 1.
//! Rollback: the same with the tables swapped, at epoch + 2, after its own mark and wait.
//!
//! Inside the pause (fence → flip) the mover does only the fence write, one save, the drain and
//! the flip: the other table's stream position and the map are read before the fence. Markers
//! (internal items written after the fence write returned) are written when the tail knows
//! more than one open shard, or when a shard is at its head without proof; a drain that has not
//! proven every shard within [`super::Limits::drain_deadline`] stops with
//! [`MoveError::Unproven`]: nothing is flipped or deleted, and the error names the next command.

use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, PutRequest, TransactWriteItem, WriteRequest};
use futures::StreamExt;
use heatsink_core::slots::proof::{Attempt, Drain, Verdict};
use heatsink_core::slots::{FenceItem, Phase, RangeState, SlotError, Way};
use tokio::time::Instant;

use super::super::MoveError;
use super::super::directory::cancellation_codes;
use super::super::fence::{KeySchema, fence_item, marker_pk};
use super::super::record::RollbackTimes;
use super::{Mover, ms};
use crate::clock::now_ms;
use crate::ddb::{n, s};
use crate::error::AwsError;

/// Records of the moved slots a poll round may still find for the tail to count as at the
/// head just before the fence (what is left then is read inside the pause).
const PRE_FENCE_RECORDS: u64 = 20;

/// Fence items per transaction (two more items check the mark and the lease).
const FENCES_PER_TRANSACTION: usize = 98;

/// Fence transactions in flight at once.
const FENCE_CONCURRENCY: usize = 8;

/// Between two listings inside the drain, while no known shard closed.
const DRAIN_LIST_INTERVAL: Duration = Duration::from_millis(250);

/// Least time between two rounds of markers.
const MARKER_INTERVAL: Duration = Duration::from_millis(20);

/// A shard that owes proof and has shown none of the markers written to it for this long gets a
/// new iterator, issued after the last record read ([`Mover::reissue`]): at most one
/// `GetShardIterator` per such shard per interval, and none where the markers show up.
const REISSUE_AFTER: Duration = Duration::from_secs(2);

impl Mover {
    /// The table `way`'s tail reads (the old owner of that cut-over).
    fn old_owner(&self, way: Way) -> (String, KeySchema) {
        match way {
            Way::Forward => (self.src.table.clone(), self.src.keys.clone()),
            Way::Reverse => (self.dst.table.clone(), self.dst.keys.clone()),
        }
    }

    /// The table `way`'s cut-over hands the slots to.
    fn new_owner(&self, way: Way) -> String {
        match way {
            Way::Forward => self.dst.table.clone(),
            Way::Reverse => self.src.table.clone(),
        }
    }

    /// The epoch the slots are owned at after `way`'s flip.
    fn epoch_after(&self, way: Way) -> Result<u64, MoveError> {
        let add = match way {
            Way::Forward => 1,
            Way::Reverse => 2,
        };
        Ok(self
            .record
            .epoch
            .checked_add(add)
            .ok_or(SlotError::EpochOverflow)?)
    }

    async fn wait_until(&self, ready_ms: u64) {
        let now = now_ms();
        if now < ready_ms {
            tokio::time::sleep(Duration::from_millis(ready_ms - now)).await;
        }
    }

    /// Waits out `max_age` after the mark, catches the tail up, reads what the flip needs, and
    /// writes the old owner's fence items: the pause starts.
    pub(super) async fn fence(&mut self, way: Way) -> Result<(), MoveError> {
        let ready = match way {
            Way::Forward => self.record.ready_ms,
            Way::Reverse => self.record.rollback.as_ref().map_or(0, |r| r.ready_ms),
        };
        // A record from before `ready_ms` was kept: the wait counts from the mark.
        let ready = ready.max(
            self.record
                .marked_ms
                .saturating_add(self.record.max_age_ms)
                .saturating_add(50),
        );
        if way == Way::Reverse {
            self.catch_up(Way::Reverse).await?;
        }
        self.wait_until(ready).await;
        if self.record.mode == heatsink_core::slots::MoveMode::Copy || way == Way::Reverse {
            // Catch up to the head again so the pause drains only the last few records.
            for _ in 0..50 {
                let polled = self.poll(way, None).await?;
                if !polled.full && polled.seen <= PRE_FENCE_RECORDS {
                    break;
                }
            }
        }
        // Read before the fence, out of the pause: the other stream's position (forward: the
        // target's, for the reverse tail; rollback: the source's again, for the reverse soak)
        // and the map the flip is decided from.
        match way {
            Way::Forward => self.record_reverse().await?,
            Way::Reverse => {
                let arn = self.record.forward.stream_arn.clone();
                self.record.forward.shards = self.latest_positions(&arn).await?;
                self.listed[Way::Forward as usize] = Some((Instant::now(), 0));
            }
        }
        self.map_at_fence = Some(self.dir.load().await?);
        let now = now_ms();
        match way {
            Way::Forward => self.record.fenced_ms = Some(now),
            Way::Reverse => {
                if let Some(r) = self.record.rollback.as_mut() {
                    r.fenced_ms = Some(now);
                }
            }
        }
        let t = Instant::now();
        self.write_fences(way).await?;
        self.pause_part("fence", t);
        Ok(())
    }

    /// Writes `way`'s fence items with this controller's token: transactions of up to 98
    /// items, each checking that the range is still marked by this move and that the lease is
    /// still this controller's (an abort that unmarked the range, or a controller that took the
    /// move over, wins; nothing is fenced after them).
    async fn write_fences(&mut self, way: Way) -> Result<(), MoveError> {
        let token = self.token();
        let (table, keys) = self.old_owner(way);
        let fence = FenceItem {
            to: self.new_owner(way),
            epoch: self.epoch_after(way)?,
            move_id: Some(self.record.id.clone()),
            token: Some(token),
        };
        let slots = self.record.slots;
        let puts: Vec<Put> = (slots.first..=slots.last)
            .map(|slot| {
                Put::builder()
                    .table_name(&table)
                    .set_item(Some(fence_item(&keys, slot, &fence)))
                    .build()
                    .map_err(|e| MoveError::BadItem(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let marked = self.dir.marked_check(slots.first, &self.record.id)?;
        let lease = self.dir.lease_check(&self.record.id, token)?;
        let ctx = self.ctx();
        let (id, ddb) = (self.record.id.clone(), self.ddb.clone());
        let batches: Vec<Vec<TransactWriteItem>> = puts
            .chunks(FENCES_PER_TRANSACTION)
            .map(|chunk| {
                [marked.clone(), lease.clone()]
                    .into_iter()
                    .chain(
                        chunk
                            .iter()
                            .map(|p| TransactWriteItem::builder().put(p.clone()).build()),
                    )
                    .collect()
            })
            .collect();
        let sends: Vec<_> = batches
            .into_iter()
            .map(|items| {
                let (ctx, ddb, table, id) = (ctx.clone(), ddb.clone(), table.clone(), id.clone());
                async move { fence_batch(&ctx, &ddb, &table, &id, slots, token, items).await }
            })
            .collect();
        let results: Vec<Result<(), MoveError>> = futures::stream::iter(sends)
            .buffer_unordered(FENCE_CONCURRENCY)
            .collect()
            .await;
        for r in results {
            r?;
        }
        self.fenced = Some(token);
        if !self.record.fence_tokens.contains(&token) {
            self.record.fence_tokens.push(token);
        }
        Ok(())
    }

    /// Writes `count` marker items on `way`'s old owner for this controller's attempt.
    async fn write_markers(&mut self, way: Way, count: u64) -> Result<(), MoveError> {
        let token = self.token();
        let (table, keys) = self.old_owner(way);
        let id = self.record.id.clone();
        let from = self.tail_mut(way).markers.get(&token).copied().unwrap_or(0);
        let requests: Vec<WriteRequest> = (from..from + count)
            .map(|i| {
                let mut item = keys.internal_key(marker_pk(&id, token, i));
                item.insert("mv".into(), s(&id));
                item.insert("tk".into(), n(token));
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|p| WriteRequest::builder().put_request(p).build())
                    .map_err(|e| MoveError::BadItem(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        self.batch_write(&table, requests).await?;
        *self.tail_mut(way).markers.entry(token).or_insert(0) += count;
        Ok(())
    }

    /// `BatchWriteItem` in chunks of 25, unprocessed items sent again, each call retried.
    pub(super) async fn batch_write(
        &self,
        table: &str,
        requests: Vec<WriteRequest>,
    ) -> Result<(), MoveError> {
        let ctx = self.ctx();
        for chunk in requests.chunks(25) {
            let mut pending = chunk.to_vec();
            while !pending.is_empty() {
                let out = ctx
                    .retry(|| {
                        let req = self
                            .ddb
                            .batch_write_item()
                            .request_items(table, pending.clone());
                        let table = table.to_owned();
                        async move {
                            req.send().await.map_err(|e| {
                                MoveError::from(AwsError::dynamodb("BatchWriteItem", table, e))
                            })
                        }
                    })
                    .await?;
                pending = out
                    .unprocessed_items()
                    .and_then(|m| m.get(table))
                    .cloned()
                    .unwrap_or_default();
                if !pending.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Ok(())
    }

    /// The drain (inside the pause): reads `way`'s stream until [`Drain::verdict`] proves every
    /// shard of the lineage read past this attempt's fence, writing markers where the fence
    /// records alone cannot prove a shard.
    pub(super) async fn drain_proof(&mut self, way: Way) -> Result<(), MoveError> {
        let token = self.token();
        let tail = match way {
            Way::Forward => self.record.forward.clone(),
            Way::Reverse => self.record.reverse.clone().unwrap_or_default(),
        };
        let mut drain = Drain::new(
            self.record.slots,
            Attempt {
                move_id: self.record.id.clone(),
                token,
            },
            tail.shards.iter().map(|(id, p)| (id.clone(), p.closed)),
            self.listing_stale(way),
        );
        let started = Instant::now();
        let open = tail.shards.values().filter(|p| !p.closed).count() as u64;
        let mut markers_at: Option<Instant> = None;
        let mut reissued_at = Instant::now();
        if open > 1 {
            // Several shards: the fence records of a few slots prove only the shards they land
            // on; markers (random keys: random shards) prove the others.
            self.write_markers(way, 2 * open).await?;
            markers_at = Some(Instant::now());
        }
        let mut listed = Instant::now();
        loop {
            let verdict = drain.verdict();
            if verdict == Verdict::Proven {
                break;
            }
            // The deadline holds whatever the verdict (a stream that keeps rolling shards over
            // asks for a listing again and again).
            if started.elapsed() >= self.limits.drain_deadline {
                let shards = drain.owing();
                let tail = self.tail_mut(way);
                tail.unproven = shards.clone();
                let (table, _) = self.old_owner(way);
                let err = MoveError::Unproven(Box::new(crate::slots::Unproven {
                    id: self.record.id.clone(),
                    phase: self.record.phase.name(),
                    table,
                    shards,
                    waited_ms: ms(started.elapsed()),
                    command: self.next_command(),
                    undo: if way == Way::Forward {
                        "abort"
                    } else {
                        "rollback"
                    },
                }));
                self.save().await?;
                return Err(err);
            }
            let discover = match verdict {
                Verdict::Relist => true,
                _ => listed.elapsed() >= DRAIN_LIST_INTERVAL,
            };
            let polled = self.poll_with(way, discover, Some(&mut drain)).await?;
            if discover {
                listed = Instant::now();
            }
            if let Verdict::Waiting { shards } = drain.verdict() {
                let idle: Vec<&String> = shards
                    .iter()
                    .filter(|s| polled.at_head.contains(*s))
                    .collect();
                if !idle.is_empty()
                    && markers_at.is_some()
                    && reissued_at.elapsed() >= REISSUE_AFTER
                {
                    let n = self.reissue(way, idle.iter().map(|s| s.as_str()));
                    tracing::debug!(
                        move_id = %self.record.id,
                        shards = ?idle,
                        reissued = n,
                        "no marker seen on these shards: issuing their iterators again"
                    );
                    reissued_at = Instant::now();
                }
                if !idle.is_empty() && markers_at.is_none_or(|t| t.elapsed() >= MARKER_INTERVAL) {
                    self.write_markers(way, 2 * idle.len() as u64).await?;
                    markers_at = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let tail = self.tail_mut(way);
        tail.proven = Some(token);
        tail.fence_seen = true;
        tail.fence_slots = drain.fence_slots();
        tail.unproven.clear();
        Ok(())
    }

    /// Fences again when this mover did not write the current fence (a resumed move: the
    /// drain counts only its own attempt's records), drains with proof, flips.
    pub(super) async fn drain_and_flip(&mut self, way: Way) -> Result<(), MoveError> {
        let t = Instant::now();
        if self.fenced != Some(self.token()) {
            if way == Way::Forward && self.record.mode == heatsink_core::slots::MoveMode::Copy {
                self.record_reverse().await?;
            }
            self.write_fences(way).await?;
        }
        if self.record.mode == heatsink_core::slots::MoveMode::Copy || way == Way::Reverse {
            self.drain_proof(way).await?;
        }
        self.pause_part("drain", t);
        let t = Instant::now();
        self.flip(way).await?;
        self.pause_part("flip", t);
        Ok(())
    }

    /// The flip, in one transaction with the record: `way`'s new owner at its epoch. Retried
    /// while the range is still marked by this move (the map read before the fence may have
    /// gone stale; a transaction may collide); refused once it is not.
    async fn flip(&mut self, way: Way) -> Result<(), MoveError> {
        let to = self.new_owner(way);
        let epoch = self.epoch_after(way)?;
        let next = match way {
            Way::Forward => Phase::Flipped,
            Way::Reverse => Phase::RollbackFlipped,
        };
        let before = self.record.phase;
        let mut cached = self.map_at_fence.take();
        let ctx = self.ctx();
        let started = Instant::now();
        let mut n = 0u32;
        loop {
            let map = match cached.take() {
                Some(m) => m,
                None => ctx.retry(|| self.load_map()).await?,
            };
            let entry = map.exact(self.record.slots)?.clone();
            match &entry.state {
                RangeState::Moving { move_id } if *move_id == self.record.id => {}
                _ if entry.owner == to && entry.epoch == epoch => {
                    // Flipped already: the step persists the phase.
                    return Ok(());
                }
                _ => {
                    return Err(MoveError::NotMarked {
                        id: self.record.id.clone(),
                        slots: self.record.slots,
                    });
                }
            }
            let change = map.flip(self.record.slots, &self.record.id, &to)?;
            self.record.phase = next;
            let fenced = match way {
                Way::Forward => self.record.fenced_ms,
                Way::Reverse => self.record.rollback.as_ref().and_then(|r| r.fenced_ms),
            };
            let pause = fenced.map(|f| now_ms().saturating_sub(f));
            match way {
                Way::Forward => self.record.pause_ms = pause,
                Way::Reverse => {
                    if let Some(r) = self.record.rollback.as_mut() {
                        r.pause_ms = pause;
                    }
                }
            }
            let (prev, put) = match self.bump() {
                Ok(x) => x,
                Err(e) => {
                    self.record.phase = before;
                    return Err(e);
                }
            };
            match self.dir.commit_with(&change, vec![put]).await {
                Ok(()) => break,
                Err(e) => {
                    self.unbump(prev);
                    self.record.phase = before;
                    match e {
                        MoveError::RecordRefused { .. } => match self.refused().await {
                            None => {
                                self.record.phase = next;
                                break;
                            }
                            Some(err) => return Err(err),
                        },
                        MoveError::Conflict { .. } => {}
                        e if e.is_transient() => self.back_off(&mut n, started, e).await?,
                        e => return Err(e),
                    }
                }
            }
        }
        let pause = match way {
            Way::Forward => self.record.pause_ms,
            Way::Reverse => self.record.rollback.as_ref().and_then(|r| r.pause_ms),
        };
        self.say(&format!(
            "{}: flipped to {to} at epoch {epoch} (writes paused {} ms)",
            self.record.id,
            pause.unwrap_or(0)
        ));
        Ok(())
    }

    /// The rollback's mark: the range marked moving again (on the target), in one transaction
    /// with the record, which carries when the wait after it ends.
    pub(super) async fn mark_rollback(&mut self) -> Result<(), MoveError> {
        let ctx = self.ctx();
        let started = Instant::now();
        let mut n = 0u32;
        loop {
            let map = ctx.retry(|| self.load_map()).await?;
            let entry = map.exact(self.record.slots)?.clone();
            if entry.owner != self.dst.table {
                return Err(MoveError::BadMove(format!(
                    "move {}: the directory names {} for slots {}, not {}; see `heatsink slots status`",
                    self.record.id, entry.owner, self.record.slots, self.dst.table
                )));
            }
            let change = map.mark_moving(self.record.slots, &self.record.id)?;
            let marked_ms = now_ms();
            let before = (self.record.phase, self.record.rollback.clone());
            self.record.phase = Phase::RollingBack;
            self.record.rollback = Some(RollbackTimes {
                marked_ms,
                ready_ms: marked_ms
                    .saturating_add(ms(self.limits.timeouts.operation))
                    .saturating_add(self.record.max_age_ms),
                ..RollbackTimes::default()
            });
            let (prev, put) = match self.bump() {
                Ok(x) => x,
                Err(e) => {
                    (self.record.phase, self.record.rollback) = before;
                    return Err(e);
                }
            };
            match self.dir.commit_with(&change, vec![put]).await {
                Ok(()) => {
                    if let Some(r) = self.record.rollback.as_mut() {
                        r.ready_ms = now_ms().saturating_add(self.record.max_age_ms);
                    }
                    return Ok(());
                }
                Err(e) => {
                    self.unbump(prev);
                    (self.record.phase, self.record.rollback) = before;
                    match e {
                        MoveError::RecordRefused { .. } => {
                            return Err(self.refused().await.unwrap_or(MoveError::BadMove(
                                format!("move {}: reload and retry", self.record.id),
                            )));
                        }
                        MoveError::Conflict { .. } => {}
                        e if e.is_transient() => self.back_off(&mut n, started, e).await?,
                        e => return Err(e),
                    }
                }
            }
        }
    }
}

/// One transaction of fence items (with the mark and lease checks first), retried while it is
/// only throttled or collides with another transaction.
async fn fence_batch(
    ctx: &super::calls::Ctx,
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &str,
    slots: heatsink_core::slots::SlotRange,
    token: u64,
    items: Vec<TransactWriteItem>,
) -> Result<(), MoveError> {
    ctx.retry(|| {
        let req = ddb
            .transact_write_items()
            .set_transact_items(Some(items.clone()));
        let (table, id) = (table.to_owned(), id.to_owned());
        async move {
            match req.send().await {
                Ok(_) => Ok(()),
                Err(e) => {
                    let codes = cancellation_codes(&e);
                    let err = AwsError::dynamodb("TransactWriteItems", &table, e);
                    let failed = |i: usize| {
                        codes.as_ref().and_then(|c| c.get(i)).map(String::as_str)
                            == Some("ConditionalCheckFailed")
                    };
                    if failed(0) {
                        Err(MoveError::NotMarked { id, slots })
                    } else if failed(1) {
                        Err(MoveError::LeaseLost { id, token })
                    } else if let Some(c) = codes {
                        Err(MoveError::TransactionBusy {
                            table,
                            reasons: c.join(","),
                        })
                    } else {
                        Err(err.into())
                    }
                }
            }
        }
    })
    .await
}
