//! The copy: a parallel Scan of the source, every item of the moved slots written to the target
//! as a snapshot row under the apply rule, at the RCU and WCU budget, with a checkpoint per
//! segment. While it runs the forward tail is read every minute (its changes applied, its
//! iterators kept fresh: an iterator expires after 15 minutes, and a copy can take hours).
//! Tables an earlier attrition move left items of the slots on are copied too ("carried").

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use heatsink_core::slots::apply::Version;
use heatsink_core::slots::{Keying, SlotRange, Way};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::super::MoveError;
use super::super::fence::{KeySchema, TOMBSTONE_ATTR, VERSION_ATTR, is_internal};
use super::apply::apply_to;
use super::calls::Ctx;
use super::{Mover, ms};
use crate::ddb::key_text::{key_from_text, key_text};
use crate::ddb::{Item, get_n, get_s};
use crate::error::AwsError;

/// How often the copy reads the forward tail.
const TAIL_EVERY: Duration = Duration::from_secs(60);

/// A rate limit: `take(units)` waits until `units` more fit the rate since the start.
pub(super) struct Pace {
    rate: f64,
    start: Instant,
    used: f64,
}

impl Pace {
    pub(super) fn new(rate: f64) -> Self {
        Self {
            rate: rate.max(1.0),
            start: Instant::now(),
            used: 0.0,
        }
    }

    pub(super) async fn take(&mut self, units: f64) {
        self.used += units;
        let due = self.start + Duration::from_secs_f64(self.used / self.rate);
        tokio::time::sleep_until(due).await;
    }
}

/// What the copy's segments did since the record last took it in.
#[derive(Debug, Default)]
struct Progress {
    scan: Vec<Option<String>>,
    scan_done: Vec<bool>,
    copied: u64,
    skipped: u64,
    rcu: f64,
    wcu: f64,
}

/// The version an item of the moved slots is copied at; refused without a numeric `v`.
pub(super) fn snapshot_version(item: &Item) -> Option<Version> {
    let v = get_n(item, VERSION_ATTR)?;
    Some(if item.contains_key(TOMBSTONE_ATTR) {
        Version::Tombstone(v)
    } else {
        Version::Live(v)
    })
}

/// One segment (or a whole carried table when `total` is 1): every page from `start` on.
#[allow(clippy::too_many_arguments)]
async fn segment(
    ctx: Ctx,
    ddb: aws_sdk_dynamodb::Client,
    (src, dst, keys): (String, String, KeySchema),
    (slots, keying): (SlotRange, Keying),
    (seg, total): (usize, usize),
    progress: Option<Arc<Mutex<Progress>>>,
    (rcu, wcu): (Arc<Mutex<Pace>>, Arc<Mutex<Pace>>),
    id: String,
) -> Result<(u64, u64, f64, f64), MoveError> {
    let mut start = match &progress {
        Some(p) => {
            let p = p.lock().await;
            if p.scan_done[seg] {
                return Ok((0, 0, 0.0, 0.0));
            }
            p.scan[seg].as_deref().and_then(|k| key_from_text(k).ok())
        }
        None => None,
    };
    let (mut copied, mut skipped, mut rcu_used, mut wcu_used) = (0u64, 0u64, 0.0f64, 0.0f64);
    loop {
        // paged by hand: the copy persists its cursor per segment between pages (a resumed
        // move continues there) and retries each page within the move's deadline.
        let out = ctx
            .retry(|| {
                let req = ddb
                    .scan()
                    .table_name(&src)
                    .segment(seg as i32)
                    .total_segments(total as i32)
                    .limit(100)
                    .consistent_read(true)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .set_exclusive_start_key(start.clone());
                let src = src.clone();
                async move {
                    req.send()
                        .await
                        .map_err(|e| MoveError::from(AwsError::dynamodb("Scan", &src, e)))
                }
            })
            .await?;
        let used = out
            .consumed_capacity()
            .and_then(|c| c.capacity_units())
            .unwrap_or(out.items().len().max(1) as f64 * 0.5);
        rcu.lock().await.take(used).await;
        rcu_used += used;
        let (mut page_copied, mut page_skipped) = (0u64, 0u64);
        for item in out.items() {
            let Some(pk) = get_s(item, "pk") else {
                continue;
            };
            if is_internal(pk) || !slots.contains(keying.slot_of(pk)) {
                continue;
            }
            let Some(v) = snapshot_version(item) else {
                return Err(MoveError::Unversioned {
                    id,
                    table: src,
                    key: key_text(&keys.key_of(item)).unwrap_or_else(|_| pk.to_owned()),
                });
            };
            wcu.lock().await.take(1.0).await;
            let written = ctx
                .retry(|| {
                    let (ddb, dst, keys, item) =
                        (ddb.clone(), dst.clone(), keys.clone(), item.clone());
                    async move { apply_to(&ddb, &dst, &keys, &item, v).await }
                })
                .await?;
            if written {
                page_copied += 1;
            } else {
                page_skipped += 1;
            }
        }
        copied += page_copied;
        skipped += page_skipped;
        wcu_used += (page_copied + page_skipped) as f64;
        let next = out.last_evaluated_key().cloned();
        if let Some(p) = &progress {
            let mut p = p.lock().await;
            p.copied += page_copied;
            p.skipped += page_skipped;
            p.rcu += used;
            p.wcu += (page_copied + page_skipped) as f64;
            match &next {
                Some(k) => p.scan[seg] = key_text(k).ok(),
                None => p.scan_done[seg] = true,
            }
        }
        match next {
            Some(k) => start = Some(k),
            None => return Ok((copied, skipped, rcu_used, wcu_used)),
        }
    }
}

impl Mover {
    /// Takes the segments' progress into the record (checkpoints and counts).
    async fn absorb(&mut self, progress: &Arc<Mutex<Progress>>) {
        let mut p = progress.lock().await;
        self.record.scan = p.scan.clone();
        self.record.scan_done = p.scan_done.clone();
        self.record.copied += std::mem::take(&mut p.copied);
        self.record.skipped += std::mem::take(&mut p.skipped);
        self.record.rcu += std::mem::take(&mut p.rcu);
        self.record.wcu += std::mem::take(&mut p.wcu);
    }

    /// The parallel Scan: every item of the slots, written to the target as a snapshot row;
    /// then the carried tables' items.
    pub(super) async fn copy(&mut self) -> Result<(), MoveError> {
        let segments = self.record.scan.len();
        let progress = Arc::new(Mutex::new(Progress {
            scan: self.record.scan.clone(),
            scan_done: self.record.scan_done.clone(),
            ..Progress::default()
        }));
        let rcu = Arc::new(Mutex::new(Pace::new(self.record.budget.rcu_per_sec)));
        let wcu = Arc::new(Mutex::new(Pace::new(self.record.budget.wcu_per_sec)));
        let tables = (
            self.src.table.clone(),
            self.dst.table.clone(),
            self.dst.keys.clone(),
        );
        // The segments run as tasks of their own, so they keep going while this task reads the
        // tail (a segment's call in flight must not wait for the tail: on a client that sends
        // one call at a time it would hold the only connection). Dropped with the copy.
        let mut tasks = tokio::task::JoinSet::new();
        for seg in 0..segments {
            tasks.spawn(segment(
                self.ctx(),
                self.ddb.clone(),
                tables.clone(),
                (self.record.slots, self.record.keying.clone()),
                (seg, segments),
                Some(progress.clone()),
                (rcu.clone(), wcu.clone()),
                self.record.id.clone(),
            ));
        }
        // The forward tail is read once at the start (the positions may be old: a resumed
        // copy) and then every minute.
        let mut next_tail = Instant::now();
        let res: Result<(), MoveError> = loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    None => break Ok(()),
                    Some(Ok(Ok(_))) => {}
                    Some(Ok(Err(e))) => break Err(e),
                    Some(Err(e)) => break Err(MoveError::BadMove(format!("a copy segment failed: {e}"))),
                },
                _ = tokio::time::sleep_until(next_tail) => {
                    self.poll(Way::Forward, None).await?;
                    self.absorb(&progress).await;
                    self.save().await?;
                    next_tail = Instant::now() + TAIL_EVERY;
                }
            }
        };
        tasks.abort_all();
        self.absorb(&progress).await;
        if let Err(e) = res {
            // Keep the finished pages: a resume continues from them.
            let _ = self.save().await;
            return Err(e);
        }
        for carried in self.record.carried.clone() {
            let t0 = Instant::now();
            let (c, k, r, w) = segment(
                self.ctx(),
                self.ddb.clone(),
                (carried.clone(), tables.1.clone(), tables.2.clone()),
                (self.record.slots, self.record.keying.clone()),
                (0, 1),
                None,
                (rcu.clone(), wcu.clone()),
                self.record.id.clone(),
            )
            .await?;
            self.record.copied += c;
            self.record.skipped += k;
            self.record.rcu += r;
            self.record.wcu += w;
            self.say(&format!(
                "{}: carried {c} items from {carried} (left there by an attrition move) in {} ms",
                self.record.id,
                ms(t0.elapsed())
            ));
        }
        self.say(&format!(
            "{}: copied {} items ({} skipped as older)",
            self.record.id, self.record.copied, self.record.skipped
        ));
        Ok(())
    }
}
