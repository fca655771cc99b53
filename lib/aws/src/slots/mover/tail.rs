//! The stream tails: the source's stream into the target (forward) and the target's back into
//! the source (reverse). A poll reads every known shard once, applies what the tail rule
//! ([`heatsink_core::slots::tail::tail_op`]) makes of each record of the moved slots, and feeds
//! an attempt's [`Drain`] the fence and marker records and the shards it read to their end.
//!
//! Shards are listed (`DescribeStream`, every page) the first time, after a known shard closed
//! (its children are new shards), and at most once a second otherwise (the service allows 10
//! calls a second). Iterators are reused for up to 14 minutes, then issued again after the last
//! sequence number read; the copy polls the forward tail every minute so they stay fresh.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
use aws_sdk_dynamodbstreams::types::OperationType;
use heatsink_core::slots::Way;
use heatsink_core::slots::proof::Drain;
use heatsink_core::slots::tail::{Event, Image, tail_op};
use tokio::time::Instant;

use super::super::MoveError;
use super::super::fence::{
    KeySchema, TOMBSTONE_ATTR, VERSION_ATTR, fence_slot, is_internal, parse_fence, parse_marker,
};
use super::super::record::{ShardPos, Tail};
use super::apply::{Op, apply_all};
use super::{BatchFault, Mover};
use crate::clock::now_ms;
use crate::ddb::codec::stream_item_to_sdk;
use crate::ddb::key_text::key_text;
use crate::ddb::stream_listing::StreamListing;
use crate::ddb::stream_reader::{self, Position};
use crate::ddb::{Item, get_n, get_s};

/// Shard iterators expire after 15 minutes; one persisted longer than this is not reused.
const ITERATOR_TTL_MS: u64 = 14 * 60 * 1_000;

/// Least time between two shard listings of one tail while no known shard has closed.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// Records read per GetRecords.
const PAGE: i32 = 1_000;

/// What one poll found.
#[derive(Debug, Default)]
pub(super) struct Polled {
    /// Records of the moved slots read.
    pub(super) seen: u64,
    /// Age of the newest record read (ms), if any.
    pub(super) newest_age: Option<u64>,
    /// A shard returned a full page (more is waiting).
    pub(super) full: bool,
    /// Shards that returned no record (at their head).
    pub(super) at_head: BTreeSet<String>,
}

fn image(item: Option<&Item>) -> Option<Image> {
    item.map(|i| Image {
        version: get_n(i, VERSION_ATTR),
        tombstone: i.contains_key(TOMBSTONE_ATTR),
    })
}

impl Mover {
    fn tail(&self, way: Way) -> Tail {
        match way {
            Way::Forward => self.record.forward.clone(),
            Way::Reverse => self.record.reverse.clone().unwrap_or_default(),
        }
    }

    pub(super) fn tail_mut(&mut self, way: Way) -> &mut Tail {
        match way {
            Way::Forward => &mut self.record.forward,
            Way::Reverse => self.record.reverse.get_or_insert_with(Tail::default),
        }
    }

    /// Every shard id of the stream, from all `DescribeStream` pages (a table's stream lists
    /// every shard of the last 24 h: more than one page of 100 on a large or old table).
    pub(super) async fn list_shards(&self, arn: &str) -> Result<Vec<String>, MoveError> {
        Ok(self
            .list_lineage(arn)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// Every shard of `arn` with the parent the listing names, through the stream's one
    /// listing ([`StreamListing`]: DescribeStream paged and paced, closed shards not re-read),
    /// retried within the move's deadline.
    pub(super) async fn list_lineage(
        &self,
        arn: &str,
    ) -> Result<Vec<(String, Option<String>)>, MoveError> {
        let listing = self.listing_of(arn);
        let shards = self
            .ctx()
            .retry(|| async { Ok(listing.sync(&self.streams, arn).await?) })
            .await?;
        Ok(shards.into_iter().map(|s| (s.shard_id, s.parent)).collect())
    }

    /// The listing this mover keeps for stream `arn` (one per stream: the forward and the
    /// reverse tail read different tables' streams).
    fn listing_of(&self, arn: &str) -> StreamListing {
        match self.listings.lock() {
            Ok(mut l) => l.entry(arn.to_owned()).or_default().clone(),
            // A poisoned map only loses what was remembered: list from the start.
            Err(_) => StreamListing::default(),
        }
    }

    /// A LATEST iterator for every listed shard of `arn`. Every shard gets one, closed or not:
    /// dynoxide lists its open shard with an `EndingSequenceNumber`, so that field cannot tell
    /// a closed shard here; a closed shard's first GetRecords ends it.
    pub(super) async fn latest_positions(
        &self,
        arn: &str,
    ) -> Result<BTreeMap<String, ShardPos>, MoveError> {
        let mut out = BTreeMap::new();
        let ctx = self.ctx();
        for id in self.list_shards(arn).await? {
            let it = ctx
                .retry(|| async {
                    Ok(stream_reader::iterator(&self.streams, arn, &id, Position::Latest).await?)
                })
                .await?;
            out.insert(
                id,
                ShardPos {
                    iterator: it,
                    iterator_ms: now_ms(),
                    ..ShardPos::default()
                },
            );
        }
        Ok(out)
    }

    /// The forward tail's positions: where the copy's tail starts (before the snapshot).
    pub(super) async fn record_positions(&mut self) -> Result<(), MoveError> {
        let arn = self.record.forward.stream_arn.clone();
        self.record.forward.shards = self.latest_positions(&arn).await?;
        self.listed[Way::Forward as usize] = Some((Instant::now(), 0));
        Ok(())
    }

    /// Records the target's stream position for the reverse tail, once.
    pub(super) async fn record_reverse(&mut self) -> Result<(), MoveError> {
        if self.record.reverse.is_none() {
            let arn = self.dst.require_stream()?.to_owned();
            let shards = self.latest_positions(&arn).await?;
            self.record.reverse = Some(Tail {
                stream_arn: arn,
                shards,
                ..Tail::default()
            });
            self.listed[Way::Reverse as usize] = Some((Instant::now(), 0));
        }
        Ok(())
    }

    /// Whether a poll of `way` lists the stream's shards: the first time, after a known shard
    /// closed (its children are new shards), or [`LIST_INTERVAL`] after the last listing.
    pub(super) fn listing_due(&self, way: Way, interval: Duration) -> bool {
        let tail = self.tail(way);
        if tail.shards.is_empty() {
            return true;
        }
        match self.listed[way as usize] {
            None => true,
            Some((at, closed)) => tail.closed_shards() > closed || at.elapsed() >= interval,
        }
    }

    /// Whether a shard closed since `way`'s last listing (or this mover never listed it): the
    /// drain's proof needs a fresh listing first.
    pub(super) fn listing_stale(&self, way: Way) -> bool {
        match self.listed[way as usize] {
            None => true,
            Some((_, closed)) => self.tail(way).closed_shards() > closed,
        }
    }

    /// Drops the iterators of `shards` on `way` that have read a record, so the next poll issues
    /// each again right after the last record read ([`Mover::issue_iterator`]): neither a record
    /// skipped nor one read twice. Asked for when the tail's progress is in doubt (a drain shard
    /// showing none of the markers written to it, a diff that still differs after a poll),
    /// because an iterator can go blind: moto answers every iterator issued before a cancelled
    /// `TransactWriteItems` on the table from the table as it was before that call. A shard that
    /// has read nothing yet keeps its iterator (issuing it again would start at the trim
    /// horizon). Returns how many were dropped.
    pub(super) fn reissue<'a>(
        &mut self,
        way: Way,
        shards: impl IntoIterator<Item = &'a str>,
    ) -> usize {
        let tail = self.tail_mut(way);
        let mut n = 0;
        for shard in shards {
            if let Some(pos) = tail.shards.get_mut(shard)
                && pos.after_seq.is_some()
                && pos.iterator.is_some()
            {
                pos.iterator = None;
                n += 1;
            }
        }
        n
    }

    /// One poll of `way`, listing when due.
    pub(super) async fn poll(
        &mut self,
        way: Way,
        drain: Option<&mut Drain>,
    ) -> Result<Polled, MoveError> {
        let due = self.listing_due(way, LIST_INTERVAL);
        self.poll_with(way, due, drain).await
    }

    /// One read of every known shard of `way` (after listing the stream when `discover`);
    /// applies what it reads and feeds `drain`.
    pub(super) async fn poll_with(
        &mut self,
        way: Way,
        discover: bool,
        mut drain: Option<&mut Drain>,
    ) -> Result<Polled, MoveError> {
        let mut tail = self.tail(way);
        let (target, keys) = match way {
            Way::Forward => (self.dst.table.clone(), self.dst.keys.clone()),
            Way::Reverse => (self.src.table.clone(), self.src.keys.clone()),
        };
        let shard_ids: Vec<String> = if discover || tail.shards.is_empty() {
            let lineage = self.list_lineage(&tail.stream_arn).await?;
            self.listed[way as usize] = Some((Instant::now(), tail.closed_shards()));
            if let Some(d) = drain.as_deref_mut() {
                d.listed(lineage.iter().map(|(id, p)| (id.clone(), p.clone())));
            }
            lineage.into_iter().map(|(id, _)| id).collect()
        } else {
            tail.shards.keys().cloned().collect()
        };
        let mut polled = Polled::default();
        for shard in shard_ids {
            let pos = tail.shards.entry(shard.clone()).or_default().clone();
            if pos.closed {
                if let Some(d) = drain.as_deref_mut() {
                    d.closed(&shard);
                }
                continue;
            }
            let Some(out) = self.read_page(&mut tail, &shard, &pos).await? else {
                continue;
            };
            let records = out.records();
            polled.full |= records.len() >= PAGE as usize;
            if records.is_empty() {
                polled.at_head.insert(shard.clone());
            }
            let fault = if records.is_empty() {
                BatchFault::Deliver
            } else {
                self.batches += 1;
                self.faults
                    .as_ref()
                    .map_or(BatchFault::Deliver, |f| f.batch(&shard, self.batches))
            };
            if fault == BatchFault::Lose {
                continue;
            }
            let times = if fault == BatchFault::Duplicate { 2 } else { 1 };
            let mut last_seq = pos.after_seq.clone();
            let mut ops: Vec<(String, Op)> = vec![];
            for _ in 0..times {
                for r in records {
                    tail.read += u64::from(r.dynamodb().is_some());
                    if let Some(op) = self.op_of(
                        way,
                        &shard,
                        r,
                        &mut last_seq,
                        &mut polled,
                        drain.as_deref_mut(),
                    )? {
                        ops.push(op);
                    }
                }
            }
            self.apply_batch(&target, &keys, ops).await?;
            let next = out.next_shard_iterator().map(str::to_owned);
            if next.is_none()
                && let Some(d) = drain.as_deref_mut()
            {
                d.closed(&shard);
            }
            tail.shards.insert(
                shard,
                ShardPos {
                    closed: next.is_none(),
                    iterator: next,
                    iterator_ms: now_ms(),
                    after_seq: last_seq,
                },
            );
        }
        *self.tail_mut(way) = tail;
        Ok(polled)
    }

    /// One `GetRecords` page of `shard` from `pos` (an iterator issued first when it has none
    /// or it is older than [`ITERATOR_TTL_MS`]). `None` when there is nothing to read this
    /// poll: the shard has no iterator yet, or it expired (then `tail` forgets it, and the
    /// next poll issues one after the last sequence number applied).
    async fn read_page(
        &self,
        tail: &mut Tail,
        shard: &str,
        pos: &ShardPos,
    ) -> Result<Option<GetRecordsOutput>, MoveError> {
        let iterator = match &pos.iterator {
            Some(it) if now_ms().saturating_sub(pos.iterator_ms) < ITERATOR_TTL_MS => it.clone(),
            _ => match self.issue_iterator(&tail.stream_arn, shard, pos).await? {
                Some(it) => it,
                None => return Ok(None),
            },
        };
        let res = self
            .ctx()
            .retry(|| async {
                Ok(stream_reader::page(&self.streams, &iterator, PAGE, shard).await?)
            })
            .await;
        match res {
            Ok(o) => Ok(Some(o)),
            Err(MoveError::Aws(err)) if err.code() == Some("ExpiredIteratorException") => {
                tail.shards.insert(
                    shard.to_owned(),
                    ShardPos {
                        iterator: None,
                        ..pos.clone()
                    },
                );
                Ok(None)
            }
            Err(MoveError::Aws(err)) if err.code() == Some("TrimmedDataAccessException") => {
                Err(MoveError::PositionExpired {
                    id: self.record.id.clone(),
                    shard: shard.to_owned(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// What one stream record of `shard` means for `way`'s tail: a fence or marker record of
    /// this move feeds `drain`; a change of a moved slot becomes the op the tail rule makes of
    /// it, keyed by its item key; anything else is read past. Advances `last_seq` and the
    /// newest age and moved-record count in `polled`.
    fn op_of(
        &self,
        way: Way,
        shard: &str,
        r: &aws_sdk_dynamodbstreams::types::Record,
        last_seq: &mut Option<String>,
        polled: &mut Polled,
        drain: Option<&mut Drain>,
    ) -> Result<Option<(String, Op)>, MoveError> {
        let Some(change) = r.dynamodb() else {
            return Ok(None);
        };
        if let Some(seq) = change.sequence_number() {
            *last_seq = Some(seq.to_owned());
        }
        if let Some(t) = change.approximate_creation_date_time() {
            let at = u64::try_from(t.to_millis().unwrap_or(0)).unwrap_or(0);
            let age = now_ms().saturating_sub(at);
            polled.newest_age = Some(polled.newest_age.map_or(age, |a| a.min(age)));
        }
        let (keys, source) = match way {
            Way::Forward => (&self.dst.keys, &self.src.table),
            Way::Reverse => (&self.src.keys, &self.dst.table),
        };
        let convert =
            |img: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
                img.map(stream_item_to_sdk)
                    .transpose()
                    .map_err(|e| MoveError::BadItem(format!("a stream record of {source}: {e}")))
            };
        let keys_img = convert(change.keys())?.unwrap_or_default();
        let Some(pk) = get_s(&keys_img, "pk").map(str::to_owned) else {
            return Ok(None);
        };
        let event = match r.event_name() {
            Some(OperationType::Insert) => Event::Insert,
            Some(OperationType::Remove) => Event::Remove,
            _ => Event::Modify,
        };
        let new = convert(change.new_image())?;
        if is_internal(&pk) {
            if event != Event::Remove
                && let Some(d) = drain
            {
                let fence = fence_slot(&pk)
                    .and_then(|slot| new.as_ref().and_then(parse_fence).map(|f| (slot, f)));
                if let Some((slot, f)) = fence {
                    if let (Some(m), Some(t)) = (f.move_id.as_deref(), f.token) {
                        d.fence(shard, slot, m, t);
                    }
                } else if let Some((m, t)) = parse_marker(&pk) {
                    d.marker(shard, m, t);
                }
            }
            return Ok(None);
        }
        if !self.record.slots.contains(self.record.keying.slot_of(&pk)) {
            return Ok(None);
        }
        polled.seen += 1;
        let old = convert(change.old_image())?;
        let op = tail_op(way, event, image(old.as_ref()), image(new.as_ref())).map_err(|_| {
            MoveError::Unversioned {
                id: self.record.id.clone(),
                table: source.clone(),
                key: key_text(&keys_img).unwrap_or_else(|_| pk.clone()),
            }
        })?;
        let item = match event {
            Event::Remove => old.unwrap_or_else(|| keys_img.clone()),
            _ => new.unwrap_or_else(|| keys_img.clone()),
        };
        let key = key_text(&keys.key_of(&keys_img)).unwrap_or_else(|_| pk.clone());
        Ok(Some((key, Op { item, op })))
    }

    /// Applies one shard's batch of ops to `target`. Within one shard an item's changes arrive
    /// in the order they were made, so only the last change of each key in the batch can win
    /// the apply rule: applying only that one keeps the result and cuts the writes by the
    /// key's repeats in the batch.
    async fn apply_batch(
        &mut self,
        target: &str,
        keys: &KeySchema,
        ops: Vec<(String, Op)>,
    ) -> Result<(), MoveError> {
        let batch_len = ops.len();
        let mut last: HashMap<String, Op> = HashMap::with_capacity(batch_len);
        for (key, op) in ops {
            last.insert(key, op);
        }
        self.record.skipped += (batch_len - last.len()) as u64;
        let (written, skipped) = apply_all(
            &self.ctx(),
            &self.ddb,
            target,
            keys,
            last.into_values().collect(),
        )
        .await?;
        self.record.applied += written;
        self.record.skipped += skipped;
        self.record.wcu += written as f64;
        Ok(())
    }

    /// An iterator for `shard` after its last applied record (from its trim horizon when the
    /// tail has read none of it: a shard that opened after the positions were recorded).
    async fn issue_iterator(
        &self,
        arn: &str,
        shard: &str,
        pos: &ShardPos,
    ) -> Result<Option<String>, MoveError> {
        let at = match &pos.after_seq {
            Some(s) => Position::After(s),
            None => Position::TrimHorizon,
        };
        let res = self
            .ctx()
            .retry(|| async { Ok(stream_reader::iterator(&self.streams, arn, shard, at).await?) })
            .await;
        match res {
            Ok(it) => Ok(it),
            Err(MoveError::Aws(err)) if err.code() == Some("TrimmedDataAccessException") => {
                Err(MoveError::PositionExpired {
                    id: self.record.id.clone(),
                    shard: shard.to_owned(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Polls until a round reaches the head of every shard (no full page) with the newest
    /// record at most `lag_target` old, persisting the checkpoint about once a second.
    pub(super) async fn catch_up(&mut self, way: Way) -> Result<(), MoveError> {
        let target = u64::try_from(self.record.budget.lag_target.as_millis()).unwrap_or(u64::MAX);
        let mut saved = Instant::now();
        for _ in 0..10_000 {
            let polled = self.poll(way, None).await?;
            if let Some(a) = polled.newest_age {
                self.record.lag_ms = Some(a);
            }
            if saved.elapsed() >= Duration::from_secs(1) {
                self.save().await?;
                saved = Instant::now();
            }
            if !polled.full && polled.newest_age.is_none_or(|a| a <= target) {
                break;
            }
        }
        Ok(())
    }
}
