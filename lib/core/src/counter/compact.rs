//! Compaction: folding closed writers' sub-keys into one `settled` sub-key, so a counter read
//! stays bounded while DynamoDB Streams shards keep rolling over.
//!
//! In DynamoDB Streams mode every stream shard is a writer with its own `w#<shard>` item, and
//! shards roll over about every 4 hours: without compaction a hot post gains one item per shard
//! per rollover, forever, and its read (one Query summing every sub-key) grows with them.
//!
//! **Closed.** A writer is *closed* when its shard reached `SHARD_END` and the aggregator's flush
//! of every record up to it is written: its `w#` item's `seq` covers the shard's last record, so
//! no flush of it can ever count a new record. The aggregator proves it by *retiring* the shard
//! (`#flushed#<name>` / `w#<shard>`, `retired`) once a child shard delivers: Lambda starts a
//! child only after its parent's batches all finished. What a closed writer can still do is
//! replay an old batch (at-least-once delivery): every entry of it is at or below the stored seq.
//!
//! **Two steps per closed writer**, each in one `TransactWriteItems` with the `settled` update:
//! 1. *Fold*: add the writer's total to `settled` and turn its item into a **tombstone**:
//!    `total = 0`, the same `seq`, `folded = now`. A replayed batch reads the tombstone, finds
//!    every entry at or below `seq` ([`decide`](super::decide) → already applied) and writes
//!    nothing, before or after the fold. A plain delete would let that replay re-create `w#`
//!    (its put is conditional on `attribute_not_exists`) and count the batch twice.
//!    Only a closed writer may be folded: an open writer's flush that read `{total, seq}` before
//!    the fold and puts `total + new` after it still meets its condition (`seq` unchanged), and
//!    would count the folded total twice.
//! 2. *Reap*: delete a tombstone whose `folded` is at least `grace` old (deployed: 24 h, DynamoDB
//!    Streams' retention, so no record of the shard is left to deliver; and at least the time
//!    buckets' kept span, so no bucket repair still reads its buckets).
//!
//! Every action is conditional on exactly what was read (the `w#` item's `seq`, `total` and
//! `folded`; the `settled` item's `rev`), so the whole transaction lands once or not at all: a
//! retry after a commit reads tombstones and does nothing, a crash before the commit changed
//! nothing, and a transaction that lost a race is cancelled whole (re-read and decide again).
//! A tombstone whose writer flushed new records after all (its closure was wrong) is folded
//! again; that flush counts once only if it read the tombstone, not the item before the fold
//! (the open-writer race above), which is why closure must be proven, not guessed.
//!
//! **The bound.** After a compaction, a counter has at most `W_open + W_grace + S + 2` items:
//! open writers, closed writers folded within the last `grace` (tombstones), salts, `fix` and
//! `settled`. With rollovers every 4 h, a 24 h grace and a compaction every few minutes that is
//! at most 8 writer items per shard lineage (1 open + at most 7 closed within the grace and one
//! compaction period) instead of one more every 4 h forever. At most [`MAX_FOLDS`] writer
//! items go into one transaction (+1 for `settled`); more wait for the next round.
//!
//! ```
//! use std::collections::BTreeSet;
//! use heatsink_core::counter::{compact, CompactInput, FoldKind, Seq, WriterId, WriterItem};
//!
//! let old = WriterId::new("shardId-1")?;
//! let open = WriterId::new("shardId-2")?;
//! let items = [
//!     WriterItem { writer: old.clone(), total: 40, seq: Seq::from(9), folded_ms: None },
//!     WriterItem { writer: open.clone(), total: 2, seq: Seq::from(12), folded_ms: None },
//! ];
//! let closed = BTreeSet::from([old.clone()]);
//! let input = CompactInput {
//!     writers: &items,
//!     settled: None,
//!     closed: &closed,
//!     now_ms: 1_000,
//!     grace_ms: 500,
//!     max_folds: 25,
//! };
//! let plan = compact(&input)?;
//! assert_eq!(plan.folds.len(), 1);
//! assert_eq!(plan.folds[0].kind, FoldKind::Tombstone { folded_ms: 1_000 });
//! assert_eq!(plan.settled.map(|s| s.total), Some(40));
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```

use std::collections::BTreeSet;

use super::{CounterError, Seq, SubKey, WriterId};

/// Most writer items folded or reaped in one transaction; with the `settled` update that is 26
/// of the 100 actions `TransactWriteItems` allows, and 25 writer items of at most 72 KB (a full
/// dedupe window) stay below its 4 MB.
pub const MAX_FOLDS: usize = 25;

/// One writer sub-key as read for compaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterItem {
    /// Whose sub-key it is (`w#<writer>`).
    pub writer: WriterId,
    /// Its absolute total (0 for a tombstone).
    pub total: i64,
    /// Its stored seq: kept by a fold, so a replay is still recognised.
    pub seq: Seq,
    /// When it was folded into `settled` (Unix ms; `None`: never).
    pub folded_ms: Option<u64>,
}

/// The `settled` item as read: its total and revision (the condition of the next update).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// Folded totals so far.
    pub total: i64,
    /// Incremented by every update.
    pub rev: u64,
}

/// What one compaction is decided from: one counter's items, read together.
#[derive(Clone, Copy, Debug)]
pub struct CompactInput<'a> {
    /// Every writer sub-key of the counter.
    pub writers: &'a [WriterItem],
    /// The `settled` item (`None`: absent).
    pub settled: Option<Settled>,
    /// Writers known closed (see the module docs: shard ended and its final flush written).
    pub closed: &'a BTreeSet<WriterId>,
    /// The compactor's clock (Unix ms): the `folded` stamp and the grace check.
    pub now_ms: u64,
    /// How long a tombstone stays before it is reaped: longer than any closed writer can
    /// still deliver a replay.
    pub grace_ms: u64,
    /// Most writer items in one decision ([`MAX_FOLDS`] for DynamoDB).
    pub max_folds: usize,
}

/// What happens to one writer item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldKind {
    /// Set `total = 0` and `folded = folded_ms`, keeping `seq`: its total moves to `settled`.
    Tombstone {
        /// The new `folded` stamp.
        folded_ms: u64,
    },
    /// Delete the item (a tombstone older than the grace; its total is 0).
    Delete,
}

/// One writer item's action, conditional on the item being exactly as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    /// The writer.
    pub writer: WriterId,
    /// Its sort key, `w#<writer>`.
    pub sk: String,
    /// Condition: stored `seq` is this.
    pub seq: Seq,
    /// Condition: stored `total` is this (also what `settled` gains).
    pub total: i64,
    /// Condition: stored `folded` is this (`None`: the attribute is absent).
    pub folded_ms: Option<u64>,
    /// What to write.
    pub kind: FoldKind,
}

/// The `settled` update: `total` and `rev`, conditional on the stored revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettledWrite {
    /// New total: the old one plus every folded total.
    pub total: i64,
    /// New revision.
    pub rev: u64,
    /// Condition: the stored revision (`None`: the item must not exist).
    pub expected_rev: Option<u64>,
}

/// A compaction decision: the actions of one transaction (nothing to do when `folds` is empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Writer items to tombstone or delete, in sort-key order, at most `max_folds`.
    pub folds: Vec<Fold>,
    /// The `settled` update, when the folded totals change it.
    pub settled: Option<SettledWrite>,
    /// More writer items were due than `max_folds`: decide again after this one commits.
    pub more: bool,
}

impl Compaction {
    /// True when nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.folds.is_empty()
    }

    /// Writer items this deletes (the counter's item count drops by this much).
    pub fn deleted(&self) -> usize {
        self.folds
            .iter()
            .filter(|f| f.kind == FoldKind::Delete)
            .count()
    }
}

/// Decides one counter's compaction: fold every closed writer's nonzero total into `settled`
/// (leaving a tombstone), and delete tombstones older than the grace. Open writers are never
/// touched. Pure: the adapter writes the result as one transaction of conditional actions.
pub fn compact(input: &CompactInput<'_>) -> Result<Compaction, CounterError> {
    let mut writers: Vec<&WriterItem> = input.writers.iter().collect();
    writers.sort_by(|a, b| a.writer.cmp(&b.writer));
    let mut out = Compaction::default();
    let mut gained = 0i64;
    for item in writers {
        if !input.closed.contains(&item.writer) {
            continue;
        }
        let kind = match item.folded_ms {
            // A tombstone whose grace is over: nothing can replay into it any more.
            Some(folded) if item.total == 0 => {
                if folded.saturating_add(input.grace_ms) > input.now_ms {
                    continue;
                }
                FoldKind::Delete
            }
            // Never folded, or flushed again after its fold: fold (again), restarting the grace.
            _ => FoldKind::Tombstone {
                folded_ms: input.now_ms,
            },
        };
        if out.folds.len() == input.max_folds {
            out.more = true;
            break;
        }
        gained = gained
            .checked_add(item.total)
            .ok_or(CounterError::Overflow)?;
        out.folds.push(Fold {
            writer: item.writer.clone(),
            sk: SubKey::Writer(item.writer.clone()).sort_key(),
            seq: item.seq.clone(),
            total: item.total,
            folded_ms: item.folded_ms,
            kind,
        });
    }
    if gained != 0 {
        let (old, expected_rev) = match input.settled {
            Some(s) => (s.total, Some(s.rev)),
            None => (0, None),
        };
        out.settled = Some(SettledWrite {
            total: old.checked_add(gained).ok_or(CounterError::Overflow)?,
            rev: expected_rev
                .map_or(Some(1), |r| r.checked_add(1))
                .ok_or(CounterError::Overflow)?,
            expected_rev,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! A model counters table applying flushes ([`decide`](super::super::decide), a put
    //! conditional on the stored seq) and compactions (all-or-nothing conditional transactions)
    //! in any interleaving: a flush's read and its put, and a compaction's read and its commit,
    //! are separate steps, so each can land between the other's.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::super::{FlushDecision, Stored, decide, sum_counter};
    use super::*;

    const WRITERS: usize = 4;
    const GRACE: u64 = 10;
    const FIX: i64 = 3;

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Row {
        total: i64,
        seq: Seq,
        folded: Option<u64>,
    }

    /// A flush's conditional put, planned from what it read.
    #[derive(Clone, Debug)]
    struct Put {
        total: i64,
        seq: Seq,
        expected: Option<Seq>,
        /// Records 1..=covers are counted once this lands.
        covers: u64,
    }

    #[derive(Clone, Debug, Default)]
    struct Writer {
        /// Records produced: seqs 1..=records, each +1.
        records: u64,
        /// Highest record counted by a put that landed.
        applied: u64,
        closed_at: Option<u64>,
        inflight: Option<Put>,
    }

    #[derive(Debug, Default)]
    struct World {
        rows: BTreeMap<WriterId, Row>,
        settled: Option<Settled>,
        writers: Vec<Writer>,
        now: u64,
        /// Compactions read but not yet committed (two may race).
        pending: [Option<Compaction>; 2],
        max_folds: usize,
    }

    fn wid(i: usize) -> WriterId {
        WriterId::new(format!("shardId-{i}")).unwrap()
    }

    impl World {
        fn new(max_folds: usize) -> Self {
            Self {
                writers: vec![Writer::default(); WRITERS],
                max_folds,
                ..Self::default()
            }
        }

        /// What a read returns: the sum over every item, with a constant `fix`.
        fn sum(&self) -> i64 {
            let mut items: Vec<(String, i64)> = self
                .rows
                .iter()
                .map(|(w, r)| (SubKey::Writer(w.clone()).sort_key(), r.total))
                .collect();
            if let Some(s) = self.settled {
                items.push(("settled".into(), s.total));
            }
            items.push(("fix".into(), FIX));
            sum_counter(items).unwrap().total()
        }

        /// Every change counted exactly once: each writer's records up to its applied one.
        fn truth(&self) -> i64 {
            self.writers.iter().map(|w| w.applied as i64).sum::<i64>() + FIX
        }

        fn closed(&self) -> BTreeSet<WriterId> {
            (0..WRITERS)
                .filter(|i| self.writers[*i].closed_at.is_some())
                .map(wid)
                .collect()
        }

        /// A closed writer can still replay an old batch, until the grace after its closing.
        fn can_deliver(&self, i: usize) -> bool {
            self.writers[i]
                .closed_at
                .is_none_or(|c| self.now < c + GRACE)
        }

        fn plan_flush(&mut self, i: usize, back: u64, len: u64) {
            if self.writers[i].inflight.is_some() || !self.can_deliver(i) {
                return;
            }
            let w = &self.writers[i];
            // In order: a batch starts at or before the first record not yet counted.
            let lo = (w.applied + 1).saturating_sub(back).max(1);
            let hi = (lo + len).min(w.records);
            if lo > hi {
                return;
            }
            let entries: Vec<(Seq, i64)> = (lo..=hi).map(|n| (Seq::from(n), 1)).collect();
            let stored = self.rows.get(&wid(i)).map(|r| Stored {
                total: r.total,
                seq: r.seq.clone(),
            });
            if let FlushDecision::Write {
                total,
                seq,
                expected,
                ..
            } = decide(stored.as_ref(), &entries).unwrap()
            {
                self.writers[i].inflight = Some(Put {
                    total,
                    seq,
                    expected,
                    covers: hi,
                });
            }
        }

        fn commit_flush(&mut self, i: usize) {
            let Some(put) = self.writers[i].inflight.take() else {
                return;
            };
            let id = wid(i);
            let current = self.rows.get(&id).map(|r| r.seq.clone());
            if current != put.expected {
                return; // condition failed: the batch is redelivered later
            }
            // A put replaces the whole item, `folded` included.
            self.rows.insert(
                id,
                Row {
                    total: put.total,
                    seq: put.seq,
                    folded: None,
                },
            );
            let w = &mut self.writers[i];
            w.applied = w.applied.max(put.covers);
        }

        /// Closing needs the final flush written: every record counted, nothing in flight.
        fn close(&mut self, i: usize) {
            let w = &mut self.writers[i];
            if w.closed_at.is_none() && w.inflight.is_none() && w.applied == w.records {
                w.closed_at = Some(self.now);
            }
        }

        fn decide_compaction(&self) -> Compaction {
            let items: Vec<WriterItem> = self
                .rows
                .iter()
                .map(|(w, r)| WriterItem {
                    writer: w.clone(),
                    total: r.total,
                    seq: r.seq.clone(),
                    folded_ms: r.folded,
                })
                .collect();
            let closed = self.closed();
            let c = compact(&CompactInput {
                writers: &items,
                settled: self.settled,
                closed: &closed,
                now_ms: self.now,
                grace_ms: GRACE,
                max_folds: self.max_folds,
            })
            .unwrap();
            assert!(c.folds.len() <= self.max_folds);
            c
        }

        /// One `TransactWriteItems`: every condition holds and all of it lands, or none of it.
        fn transact(&mut self, c: &Compaction) -> bool {
            let rows_ok = c.folds.iter().all(|f| {
                self.rows.get(&f.writer).is_some_and(|r| {
                    r.seq == f.seq && r.total == f.total && r.folded == f.folded_ms
                })
            });
            let settled_ok = c
                .settled
                .is_none_or(|s| self.settled.map(|x| x.rev) == s.expected_rev);
            if !(rows_ok && settled_ok) || c.is_empty() {
                return false;
            }
            for f in &c.folds {
                match f.kind {
                    FoldKind::Delete => {
                        self.rows.remove(&f.writer);
                    }
                    FoldKind::Tombstone { folded_ms } => {
                        if let Some(r) = self.rows.get_mut(&f.writer) {
                            r.total = 0;
                            r.folded = Some(folded_ms);
                        }
                    }
                }
            }
            if let Some(s) = c.settled {
                self.settled = Some(Settled {
                    total: s.total,
                    rev: s.rev,
                });
            }
            true
        }

        /// Compacts until nothing is due (at most a few rounds of `max_folds`).
        fn compact_fully(&mut self) {
            for _ in 0..=WRITERS {
                let c = self.decide_compaction();
                if c.is_empty() {
                    return;
                }
                assert!(self.transact(&c), "a fresh compaction commits");
            }
            panic!("compaction did not converge");
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Produce(usize, u64),
        PlanFlush(usize, u64, u64),
        CommitFlush(usize),
        Close(usize),
        Tick(u64),
        ReadCompaction(usize),
        /// Commit a read compaction; a crash drops it, a retry sends it a second time.
        CommitCompaction {
            slot: usize,
            crash: bool,
            retry: bool,
        },
        CompactFully,
    }

    fn op() -> impl Strategy<Value = Op> {
        let w = 0..WRITERS;
        prop_oneof![
            3 => (w.clone(), 1u64..6).prop_map(|(i, n)| Op::Produce(i, n)),
            4 => (w.clone(), 0u64..8, 0u64..6).prop_map(|(i, b, l)| Op::PlanFlush(i, b, l)),
            4 => w.clone().prop_map(Op::CommitFlush),
            1 => w.prop_map(Op::Close),
            2 => (1u64..6).prop_map(Op::Tick),
            2 => (0usize..2).prop_map(Op::ReadCompaction),
            2 => (0usize..2, any::<bool>(), any::<bool>())
                .prop_map(|(slot, crash, retry)| Op::CommitCompaction { slot, crash, retry }),
            1 => Just(Op::CompactFully),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn compaction_keeps_every_change_counted_exactly_once_and_the_read_bounded(
            ops in prop::collection::vec(op(), 0..80),
            max_folds in 1usize..4,
        ) {
            let mut world = World::new(max_folds);
            for op in ops {
                match op {
                    Op::Produce(i, n) => {
                        if world.writers[i].closed_at.is_none() {
                            world.writers[i].records += n;
                        }
                    }
                    Op::PlanFlush(i, back, len) => world.plan_flush(i, back, len),
                    Op::CommitFlush(i) => world.commit_flush(i),
                    Op::Close(i) => world.close(i),
                    Op::Tick(dt) => world.now += dt,
                    Op::ReadCompaction(slot) => world.pending[slot] = Some(world.decide_compaction()),
                    Op::CommitCompaction { slot, crash, retry } => {
                        if let Some(c) = world.pending[slot].take() {
                            let before = world.sum();
                            if !crash && world.transact(&c) && retry {
                                prop_assert!(!world.transact(&c), "a retried commit must be refused");
                            }
                            prop_assert_eq!(world.sum(), before, "a compaction never moves the read");
                        }
                    }
                    Op::CompactFully => {
                        world.compact_fully();
                        // Bounded: open writers, tombstones in their grace, `settled`, `fix`.
                        let closed = world.closed();
                        for (w, r) in &world.rows {
                            if closed.contains(w) {
                                prop_assert_eq!(r.total, 0, "{} folded", w);
                                prop_assert!(r.folded.is_some_and(|f| world.now < f + GRACE), "{} reaped", w);
                            }
                        }
                        let open = WRITERS - closed.len();
                        let in_grace = world.rows.values().filter(|r| r.folded.is_some()).count();
                        prop_assert!(world.rows.len() <= open + in_grace);
                    }
                }
                prop_assert_eq!(world.sum(), world.truth());
            }
            // Every writer closes and its grace passes: only `settled` and `fix` are left.
            for i in 0..WRITERS {
                world.commit_flush(i);
                world.close(i);
            }
            world.compact_fully();
            world.now += 2 * GRACE + 1;
            world.compact_fully();
            let closed = world.closed();
            prop_assert!(world.rows.keys().all(|w| !closed.contains(w)));
            prop_assert_eq!(world.sum(), world.truth());
        }
    }

    #[test]
    fn a_replay_after_the_fold_reads_the_tombstone_and_writes_nothing() {
        let mut world = World::new(MAX_FOLDS);
        world.writers[0].records = 3;
        world.plan_flush(0, 0, 5);
        world.commit_flush(0);
        world.close(0);
        world.compact_fully();
        assert_eq!(world.rows[&wid(0)].total, 0);
        assert_eq!(world.settled.map(|s| s.total), Some(3));
        // The final batch again (at-least-once delivery): already applied, nothing planned.
        world.plan_flush(0, 3, 5);
        assert!(world.writers[0].inflight.is_none());
        assert_eq!(world.sum(), 3 + FIX);
        // Reaped only after the grace; a retry of the same decision is then a no-op.
        world.now += GRACE;
        let reap = world.decide_compaction();
        assert_eq!(reap.deleted(), 1);
        assert!(world.transact(&reap));
        assert!(!world.transact(&reap));
        assert!(world.rows.is_empty() && world.decide_compaction().is_empty());
        assert_eq!(world.sum(), 3 + FIX);
    }

    #[test]
    fn two_racing_compactions_of_different_writers_fold_each_once() {
        let mut world = World::new(1);
        for i in 0..3 {
            world.writers[i].records = 2 + i as u64;
            world.plan_flush(i, 0, 9);
            world.commit_flush(i);
        }
        world.close(2);
        world.compact_fully(); // `settled` exists: rev 1
        world.close(1);
        let stale = world.decide_compaction(); // folds shardId-1
        world.close(0);
        let fresh = world.decide_compaction(); // folds shardId-0 (one per transaction)
        assert_ne!(stale.folds[0].writer, fresh.folds[0].writer);
        assert!(world.transact(&fresh));
        // Same `settled` revision read: the stale one is cancelled whole, not half-applied.
        assert!(!world.transact(&stale));
        world.compact_fully();
        assert_eq!(world.settled.map(|s| s.total), Some(2 + 3 + 4));
        assert_eq!(world.sum(), world.truth());
    }

    #[test]
    fn an_open_writer_is_never_touched_and_more_than_max_folds_wait() {
        let items: Vec<WriterItem> = (0..5)
            .map(|i| WriterItem {
                writer: wid(i),
                total: 10,
                seq: Seq::from(7),
                folded_ms: None,
            })
            .collect();
        let closed: BTreeSet<WriterId> = (0..4).map(wid).collect();
        let c = compact(&CompactInput {
            writers: &items,
            settled: Some(Settled { total: 5, rev: 2 }),
            closed: &closed,
            now_ms: 100,
            grace_ms: GRACE,
            max_folds: 3,
        })
        .unwrap();
        assert_eq!(c.folds.len(), 3);
        assert!(c.more);
        assert!(c.folds.iter().all(|f| f.writer != wid(4)));
        assert_eq!(
            c.settled,
            Some(SettledWrite {
                total: 35,
                rev: 3,
                expected_rev: Some(2)
            })
        );
    }

    #[test]
    fn a_fold_that_would_overflow_is_an_error() {
        let items = [WriterItem {
            writer: wid(0),
            total: 1,
            seq: Seq::from(1),
            folded_ms: None,
        }];
        let closed = BTreeSet::from([wid(0)]);
        let input = CompactInput {
            writers: &items,
            settled: Some(Settled {
                total: i64::MAX,
                rev: 1,
            }),
            closed: &closed,
            now_ms: 0,
            grace_ms: 0,
            max_folds: 1,
        };
        assert_eq!(compact(&input), Err(CounterError::Overflow));
    }
}
