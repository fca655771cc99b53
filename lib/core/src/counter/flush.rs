//! Accumulating deltas and deciding what a flush writes to a writer sub-key.

use std::collections::BTreeMap;

use super::{CounterError, CounterKey, Seq, SubKey, WriterId};

/// What the store holds in one writer sub-key: the absolute total and the seq it covers.
///
/// Invariant kept by [`decide`]: the total counts exactly this writer's entries for the key with a
/// seq at or below `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Absolute total of this writer's entries up to `seq`.
    pub total: i64,
    /// Newest entry the total includes.
    pub seq: Seq,
}

/// One key's accumulated changes: entries stamped with a seq, plus a not-yet-sealed delta.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDeltas {
    entries: Vec<(Seq, i64)>,
    timed: Vec<(Seq, Option<u64>, i64)>,
    pending: Option<i64>,
    events: u64,
}

impl KeyDeltas {
    /// Entries stamped with a seq (stream records, or sealed flushes), in the order added;
    /// consecutive entries with the same seq are merged.
    pub fn entries(&self) -> &[(Seq, i64)] {
        &self.entries
    }

    /// Records added with an event time ([`Deltas::add_record_at`]): `(seq, event ms, delta)`,
    /// one per record, what [`Buckets::advance`](super::Buckets::advance) counts per bucket.
    pub fn timed(&self) -> &[(Seq, Option<u64>, i64)] {
        &self.timed
    }

    /// The delta added with [`Deltas::add`] since the last [`Deltas::seal`], if any.
    pub fn pending(&self) -> Option<i64> {
        self.pending
    }

    /// Events added for this key (one per `add`/`add_record` call).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Net change of all entries and the pending delta (wide, so it cannot overflow).
    pub fn net(&self) -> i128 {
        let entries: i128 = self.entries.iter().map(|(_, d)| i128::from(*d)).sum();
        entries + i128::from(self.pending.unwrap_or(0))
    }

    fn push(&mut self, seq: Seq, delta: i64) -> Result<(), CounterError> {
        match self.entries.last_mut() {
            Some((last, sum)) if *last == seq => {
                *sum = sum.checked_add(delta).ok_or(CounterError::Overflow)?;
            }
            _ => self.entries.push((seq, delta)),
        }
        Ok(())
    }
}

/// Per-key deltas accumulated by one writer between flushes, with event totals.
///
/// Stream writers add each record with its own seq ([`Deltas::add_record`]), so a redelivered
/// record is recognised per record. Long-lived writers add seq-less deltas ([`Deltas::add`]) and
/// stamp them with their next flush number ([`Deltas::seal`]) just before planning a flush.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deltas {
    keys: BTreeMap<CounterKey, KeyDeltas>,
    events: u64,
}

impl Deltas {
    /// An empty accumulation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one event's delta for a long-lived writer; it is counted once sealed and flushed.
    pub fn add(&mut self, key: CounterKey, delta: i64) -> Result<(), CounterError> {
        let entry = self.keys.entry(key).or_default();
        let pending = entry.pending.unwrap_or(0);
        entry.pending = Some(pending.checked_add(delta).ok_or(CounterError::Overflow)?);
        entry.events += 1;
        self.events += 1;
        Ok(())
    }

    /// Adds one stream record's delta with the record's own sequence number.
    pub fn add_record(
        &mut self,
        key: CounterKey,
        seq: Seq,
        delta: i64,
    ) -> Result<(), CounterError> {
        let entry = self.keys.entry(key).or_default();
        entry.push(seq, delta)?;
        entry.events += 1;
        self.events += 1;
        Ok(())
    }

    /// [`Deltas::add_record`], with the event's own time (`liked_at`: Unix ms), so the writer
    /// sub-key's time buckets count it too (see [`Buckets`](super::Buckets)).
    pub fn add_record_at(
        &mut self,
        key: CounterKey,
        seq: Seq,
        delta: i64,
        event_ms: Option<u64>,
    ) -> Result<(), CounterError> {
        if event_ms.is_some() {
            self.keys
                .entry(key.clone())
                .or_default()
                .timed
                .push((seq.clone(), event_ms, delta));
        }
        self.add_record(key, seq, delta)
    }

    /// Stamps every pending delta with a flush number, making it an entry a flush can count.
    ///
    /// Take `seq` from a [`FlushCounter`](super::FlushCounter) after observing the stored seqs of
    /// the keys being flushed, so it is above all of them.
    pub fn seal(&mut self, seq: &Seq) -> Result<(), CounterError> {
        for entry in self.keys.values_mut() {
            if let Some(delta) = entry.pending.take() {
                entry.push(seq.clone(), delta)?;
            }
        }
        Ok(())
    }

    /// Total events added, across keys.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Number of keys with accumulated changes.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when nothing has been added (or everything was removed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// One key's accumulated changes.
    pub fn get(&self, key: &CounterKey) -> Option<&KeyDeltas> {
        self.keys.get(key)
    }

    /// Keys and their changes, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&CounterKey, &KeyDeltas)> {
        self.keys.iter()
    }

    /// Drops a key's changes once its flush is settled (written, or already applied).
    pub fn remove(&mut self, key: &CounterKey) -> Option<KeyDeltas> {
        self.keys.remove(key)
    }

    /// Smallest entry seq (a stream batch's first record).
    pub fn first_seq(&self) -> Option<&Seq> {
        self.seqs().min()
    }

    /// Largest entry seq (a stream batch's last record).
    pub fn last_seq(&self) -> Option<&Seq> {
        self.seqs().max()
    }

    /// The `(pk, sk)` of this writer's sub-key for every key: what to read before planning.
    pub fn sub_keys(&self, writer: &WriterId) -> Vec<(String, String)> {
        let sk = SubKey::Writer(writer.clone()).sort_key();
        self.keys.keys().map(|k| (k.pk(), sk.clone())).collect()
    }

    fn seqs(&self) -> impl Iterator<Item = &Seq> {
        self.keys
            .values()
            .flat_map(|k| k.entries.iter().map(|(seq, _)| seq))
    }
}

/// What a flush does with one key, given what the store holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlushDecision {
    /// Write `total` and `seq`, on condition that the stored seq is still `expected` (or the
    /// item is absent when `expected` is `None`).
    Write {
        /// New absolute total.
        total: i64,
        /// Newest entry counted; strictly above `expected`.
        seq: Seq,
        /// The stored seq this decision was made from: the write's condition.
        expected: Option<Seq>,
        /// Entries counted (seq above the stored seq).
        counted: u64,
        /// Entries skipped as already applied (seq at or below the stored seq).
        skipped: u64,
    },
    /// Every entry is at or below the stored seq: a redelivery or an older batch; write nothing.
    AlreadyApplied {
        /// Entries skipped.
        skipped: u64,
    },
    /// No entries to flush (nothing added, or only unsealed deltas).
    Nothing,
}

/// Decides one writer sub-key's flush: count only entries newer than the stored seq.
///
/// `stored` is what the adapter just read (`None`: no item). The result's total is absolute, so a
/// retried write of the same decision cannot count twice, and entries at or below the stored seq
/// (a redelivered batch, an overlapping split, an older batch) are skipped one by one.
pub fn decide(
    stored: Option<&Stored>,
    entries: &[(Seq, i64)],
) -> Result<FlushDecision, CounterError> {
    if entries.is_empty() {
        return Ok(FlushDecision::Nothing);
    }
    let floor = stored.map(|s| &s.seq);
    let mut total = stored.map_or(0, |s| s.total);
    let mut newest: Option<&Seq> = None;
    let (mut counted, mut skipped) = (0u64, 0u64);
    for (seq, delta) in entries {
        if floor.is_some_and(|floor| seq <= floor) {
            skipped += 1;
            continue;
        }
        total = total.checked_add(*delta).ok_or(CounterError::Overflow)?;
        counted += 1;
        if newest.is_none_or(|n| seq > n) {
            newest = Some(seq);
        }
    }
    Ok(match newest {
        None => FlushDecision::AlreadyApplied { skipped },
        Some(seq) => FlushDecision::Write {
            total,
            seq: seq.clone(),
            expected: floor.cloned(),
            counted,
            skipped,
        },
    })
}

/// One conditional write of a flush: `counters[pk, sk] = {total, seq}` if the stored seq is
/// still `expected`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushWrite {
    /// The counter written.
    pub key: CounterKey,
    /// Partition key, `<name>#<key>`.
    pub pk: String,
    /// Sort key, `w#<writer>`.
    pub sk: String,
    /// New absolute total.
    pub total: i64,
    /// Seq stored with the total.
    pub seq: Seq,
    /// Condition: the stored seq must equal this (`None`: the item must not exist).
    pub expected: Option<Seq>,
}

impl FlushWrite {
    /// What the store holds once this write succeeds (a long-lived writer remembers it).
    pub fn stored(&self) -> Stored {
        Stored {
            total: self.total,
            seq: self.seq.clone(),
        }
    }
}

/// The writes of one flush: one conditional write per key with new entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushPlan {
    /// Conditional writes, in key order.
    pub writes: Vec<FlushWrite>,
    /// Keys whose entries were all applied before (redelivered or older).
    pub already_applied: Vec<CounterKey>,
    /// Entries counted across keys.
    pub counted: u64,
    /// Entries skipped as already applied across keys.
    pub skipped: u64,
}

impl FlushPlan {
    /// Plans a flush of `deltas` by `writer`, given what its sub-keys hold now.
    ///
    /// `stored` holds the writer's sub-key for every key of `deltas` that has an item; a key
    /// missing from it is taken as absent, so read every sub-key in [`Deltas::sub_keys`] first.
    /// Pending (unsealed) deltas are not flushed.
    pub fn new(
        writer: &WriterId,
        deltas: &Deltas,
        stored: &BTreeMap<CounterKey, Stored>,
    ) -> Result<Self, CounterError> {
        let sk = SubKey::Writer(writer.clone()).sort_key();
        let mut plan = Self::default();
        for (key, changes) in deltas.iter() {
            match decide(stored.get(key), changes.entries())? {
                FlushDecision::Write {
                    total,
                    seq,
                    expected,
                    counted,
                    skipped,
                } => {
                    plan.counted += counted;
                    plan.skipped += skipped;
                    plan.writes.push(FlushWrite {
                        key: key.clone(),
                        pk: key.pk(),
                        sk: sk.clone(),
                        total,
                        seq,
                        expected,
                    });
                }
                FlushDecision::AlreadyApplied { skipped } => {
                    plan.skipped += skipped;
                    plan.already_applied.push(key.clone());
                }
                FlushDecision::Nothing => {}
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Seq {
        Seq::from(n)
    }

    fn stored(total: i64, seq: u64) -> Stored {
        Stored { total, seq: s(seq) }
    }

    fn write(decision: FlushDecision) -> (i64, Seq) {
        match decision {
            FlushDecision::Write { total, seq, .. } => (total, seq),
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn a_first_flush_writes_the_batch_total_on_an_absent_item() {
        let d = decide(None, &[(s(5), 1), (s(6), 1), (s(9), -1)]).unwrap();
        assert_eq!(
            d,
            FlushDecision::Write {
                total: 1,
                seq: s(9),
                expected: None,
                counted: 3,
                skipped: 0
            }
        );
    }

    #[test]
    fn a_redelivered_batch_never_counts_twice() {
        let batch = [(s(5), 1), (s(6), 1), (s(9), 1)];
        let (total, seq) = write(decide(Some(&stored(10, 4)), &batch).unwrap());
        assert_eq!(total, 13);
        let after = Stored { total, seq };
        assert_eq!(
            decide(Some(&after), &batch).unwrap(),
            FlushDecision::AlreadyApplied { skipped: 3 }
        );
    }

    #[test]
    fn an_older_batch_is_a_no_op() {
        assert_eq!(
            decide(Some(&stored(10, 20)), &[(s(3), 1), (s(4), 1)]).unwrap(),
            FlushDecision::AlreadyApplied { skipped: 2 }
        );
    }

    #[test]
    fn a_partially_overlapping_batch_counts_only_its_new_records() {
        // Records 5..=7 were applied; the redelivery after a bisect covers 6..=9.
        let d = decide(
            Some(&stored(3, 7)),
            &[(s(6), 1), (s(7), 1), (s(8), 1), (s(9), 1)],
        )
        .unwrap();
        assert_eq!(
            d,
            FlushDecision::Write {
                total: 5,
                seq: s(9),
                expected: Some(s(7)),
                counted: 2,
                skipped: 2
            }
        );
    }

    #[test]
    fn an_empty_batch_writes_nothing() {
        assert_eq!(
            decide(Some(&stored(1, 1)), &[]).unwrap(),
            FlushDecision::Nothing
        );
    }

    #[test]
    fn a_flush_that_would_overflow_is_an_error_not_a_wrap() {
        assert_eq!(
            decide(Some(&stored(i64::MAX, 1)), &[(s(2), 1)]),
            Err(CounterError::Overflow)
        );
        let mut deltas = Deltas::new();
        let key = CounterKey::new("likes", "p9").unwrap();
        deltas.add(key.clone(), i64::MAX).unwrap();
        assert_eq!(deltas.add(key, 1), Err(CounterError::Overflow));
    }

    #[test]
    fn deltas_count_events_and_merge_entries_of_one_flush() {
        let p9 = CounterKey::new("likes", "p9").unwrap();
        let p1 = CounterKey::new("likes", "p1").unwrap();
        let mut deltas = Deltas::new();
        deltas.add(p9.clone(), 1).unwrap();
        deltas.add(p9.clone(), 1).unwrap();
        deltas.add(p1.clone(), -1).unwrap();
        assert_eq!(deltas.events(), 3);
        assert_eq!(deltas.get(&p9).unwrap().pending(), Some(2));
        deltas.seal(&s(1)).unwrap();
        deltas.add(p9.clone(), 1).unwrap();
        deltas.seal(&s(2)).unwrap();
        assert_eq!(deltas.get(&p9).unwrap().entries(), &[(s(1), 2), (s(2), 1)]);
        assert_eq!(deltas.get(&p9).unwrap().net(), 3);
        assert_eq!(deltas.get(&p1).unwrap().entries(), &[(s(1), -1)]);
        assert_eq!(
            (deltas.first_seq(), deltas.last_seq()),
            (Some(&s(1)), Some(&s(2)))
        );
        let writer = WriterId::new("router-1").unwrap();
        assert_eq!(
            deltas.sub_keys(&writer),
            vec![
                ("likes#p1".to_owned(), "w#router-1".to_owned()),
                ("likes#p9".to_owned(), "w#router-1".to_owned())
            ]
        );
    }

    #[test]
    fn a_flush_plan_writes_each_key_to_the_writers_own_sub_key() {
        let writer = WriterId::new("shardId-000000000001").unwrap();
        let p9 = CounterKey::new("likes", "p9").unwrap();
        let p1 = CounterKey::new("likes", "p1").unwrap();
        let mut batch = Deltas::new();
        for (key, seq) in [(&p9, 10), (&p1, 11), (&p9, 12)] {
            batch.add_record(key.clone(), s(seq), 1).unwrap();
        }
        let known = BTreeMap::from([(p9.clone(), stored(100, 12)), (p1.clone(), stored(7, 3))]);
        let plan = FlushPlan::new(&writer, &batch, &known).unwrap();
        assert_eq!(plan.already_applied, vec![p9]);
        assert_eq!(
            plan.writes,
            vec![FlushWrite {
                key: p1.clone(),
                pk: "likes#p1".into(),
                sk: "w#shardId-000000000001".into(),
                total: 8,
                seq: s(11),
                expected: Some(s(3)),
            }]
        );
        assert_eq!((plan.counted, plan.skipped), (1, 2));
    }

    #[test]
    fn unsealed_deltas_are_not_flushed() {
        let writer = WriterId::new("router-1").unwrap();
        let mut deltas = Deltas::new();
        deltas
            .add(CounterKey::new("likes", "p9").unwrap(), 1)
            .unwrap();
        let plan = FlushPlan::new(&writer, &deltas, &BTreeMap::new()).unwrap();
        assert!(plan.writes.is_empty() && plan.already_applied.is_empty());
    }
}
