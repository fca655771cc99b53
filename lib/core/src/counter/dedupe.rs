//! Deduplicating changes that a source may deliver more than once under new sequence numbers
//! (Kinesis Data Streams for DynamoDB), inside the writer sub-key's absolute flush.
//!
//! The sequence-number rule of [`decide`](super::decide) makes a *redelivered record* (Lambda's
//! retry of a batch) count once. It cannot see a *duplicate change*: the same item change
//! published twice, each copy with its own Kinesis sequence number. For those, each change has an
//! identity of its own ([`ChangeId`]: item keys, `ApproximateCreationDateTime`, event name and
//! images, hashed), and each writer sub-key keeps the identities it counted within the last
//! `span` of creation time ([`DedupeWindow`], stored in the item next to `total` and `seq`). A
//! change whose identity is in the window is a duplicate and is not counted; the window moves
//! with the newest creation time counted and forgets older identities.
//!
//! Guarantees and limits:
//! 1. A duplicate delivered while its original's creation time is within `span` of the newest
//!    change counted by the same writer sub-key is never counted (property-tested).
//! 2. A change older than the window (`at + span < newest`) is counted and reported as
//!    [`DedupeDecision::late`]: it may be a duplicate whose original was forgotten. The deployed
//!    window (10 s) is far above the reordering AWS shows (sub-second); the `late` metric says
//!    when that assumption breaks, and the rebuild repairs the count.
//! 3. Storage: [`DedupeWindow::BYTES_PER_ID`] bytes per remembered change; a post taking `r`
//!    likes/s through one shard keeps `r × span` identities (600/s × 10 s = 6,000 ids = 72 KB).
//! 4. Identity collisions: 64-bit hashes; for 6,000 ids a collision (one like not counted) has
//!    probability below 10⁻¹¹ per flush.

use std::collections::BTreeMap;

use md5::{Digest, Md5};

use super::{CounterError, Seq, Stored};

/// A change's identity: the first 64 bits of MD5 over its identifying parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeId(pub u64);

impl ChangeId {
    /// The identity of a change made of `parts` (each length-prefixed, so `["ab","c"]` and
    /// `["a","bc"]` differ).
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut h = Md5::new();
        for p in parts {
            h.update((p.len() as u64).to_be_bytes());
            h.update(p);
        }
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Self(u64::from_be_bytes(first))
    }
}

/// What [`DedupeWindow::admit`] decided about one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Not seen within the window: count it.
    New,
    /// Seen within the window: do not count it.
    Duplicate,
    /// Older than the window: counted (it cannot be told from a forgotten original).
    Late,
}

/// The identities one writer sub-key counted within the last `span` ms of creation time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupeWindow {
    span_ms: u64,
    newest_ms: u64,
    ids: BTreeMap<ChangeId, u64>,
}

impl DedupeWindow {
    /// Bytes per remembered identity in [`DedupeWindow::encode`]: 8 (id) + 4 (age in ms).
    pub const BYTES_PER_ID: usize = 12;
    const VERSION: u8 = 1;

    /// An empty window of `span_ms` milliseconds (at most `u32::MAX`, about 49 days).
    pub fn new(span_ms: u64) -> Self {
        Self {
            span_ms: span_ms.min(u64::from(u32::MAX)),
            newest_ms: 0,
            ids: BTreeMap::new(),
        }
    }

    /// Identities remembered.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The newest creation time admitted (Unix ms).
    pub fn newest_ms(&self) -> u64 {
        self.newest_ms
    }

    /// Decides one change created at `at_ms`, remembering it when counted.
    pub fn admit(&mut self, id: ChangeId, at_ms: u64) -> Admit {
        if self.ids.contains_key(&id) {
            return Admit::Duplicate;
        }
        if at_ms.saturating_add(self.span_ms) < self.newest_ms {
            return Admit::Late;
        }
        self.ids.insert(id, at_ms);
        if at_ms > self.newest_ms {
            self.newest_ms = at_ms;
            let floor = self.newest_ms.saturating_sub(self.span_ms);
            self.ids.retain(|_, at| *at >= floor);
        }
        Admit::New
    }

    /// The stored form: version, newest time, then each id with its age below the newest.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.ids.len() * Self::BYTES_PER_ID);
        out.push(Self::VERSION);
        out.extend_from_slice(&self.newest_ms.to_be_bytes());
        for (id, at) in &self.ids {
            out.extend_from_slice(&id.0.to_be_bytes());
            let age = u32::try_from(self.newest_ms.saturating_sub(*at)).unwrap_or(u32::MAX);
            out.extend_from_slice(&age.to_be_bytes());
        }
        out
    }

    /// Reads [`DedupeWindow::encode`]'s form back, with a window of `span_ms`.
    pub fn decode(bytes: &[u8], span_ms: u64) -> Result<Self, CounterError> {
        let bad = |reason: &'static str| CounterError::BadDedupeWindow(reason);
        let (&version, rest) = bytes.split_first().ok_or(bad("empty"))?;
        if version != Self::VERSION {
            return Err(bad("unknown version"));
        }
        if rest.len() < 8 || (rest.len() - 8) % Self::BYTES_PER_ID != 0 {
            return Err(bad("truncated"));
        }
        let (newest, ids) = rest.split_at(8);
        let mut w = Self::new(span_ms);
        w.newest_ms = u64::from_be_bytes(newest.try_into().map_err(|_| bad("truncated"))?);
        for chunk in ids.chunks_exact(Self::BYTES_PER_ID) {
            let (id, age) = chunk.split_at(8);
            let id = u64::from_be_bytes(id.try_into().map_err(|_| bad("truncated"))?);
            let age = u32::from_be_bytes(age.try_into().map_err(|_| bad("truncated"))?);
            w.ids
                .insert(ChangeId(id), w.newest_ms.saturating_sub(u64::from(age)));
        }
        let floor = w.newest_ms.saturating_sub(w.span_ms);
        w.ids.retain(|_, at| *at >= floor);
        Ok(w)
    }
}

/// One change of a deduplicated batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The record's sequence number in its shard.
    pub seq: Seq,
    /// Its delta.
    pub delta: i64,
    /// Its identity.
    pub id: ChangeId,
    /// Its creation time (Unix ms).
    pub at_ms: u64,
    /// The event's own time (`liked_at`, Unix ms) for the writer sub-key's time buckets.
    pub event_ms: Option<u64>,
}

/// A deduplicated flush of one writer sub-key: write `total`, `seq` and `window` if the stored
/// seq is still `expected`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeDecision {
    /// New absolute total.
    pub total: i64,
    /// Newest seq covered.
    pub seq: Seq,
    /// The write's condition (None: the item must not exist).
    pub expected: Option<Seq>,
    /// The window to store.
    pub window: DedupeWindow,
    /// Changes counted.
    pub counted: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Records at or below the stored seq (redelivered), skipped.
    pub skipped: u64,
    /// Changes older than the window, counted anyway.
    pub late: u64,
    /// `(event ms, delta)` of every counted change with an event time: what the writer
    /// sub-key's time buckets add.
    pub counted_events: Vec<(u64, i64)>,
}

/// Decides a deduplicated flush: records at or below the stored seq are redeliveries (skipped),
/// the rest go through the window. `None`: nothing to write (everything was redelivered or a
/// duplicate; the stored state already covers it, so a later redelivery decides the same).
pub fn decide_deduped(
    stored: Option<(&Stored, &DedupeWindow)>,
    changes: &[Change],
    span_ms: u64,
) -> Result<Option<DedupeDecision>, CounterError> {
    let floor = stored.map(|(s, _)| &s.seq);
    let mut window = stored.map_or_else(|| DedupeWindow::new(span_ms), |(_, w)| w.clone());
    window.span_ms = span_ms.min(u64::from(u32::MAX));
    let mut total = stored.map_or(0, |(s, _)| s.total);
    let mut newest: Option<&Seq> = None;
    let (mut counted, mut duplicates, mut skipped, mut late) = (0, 0, 0, 0);
    let mut counted_events = vec![];
    for c in changes {
        if floor.is_some_and(|f| c.seq <= *f) {
            skipped += 1;
            continue;
        }
        if newest.is_none_or(|n| c.seq > *n) {
            newest = Some(&c.seq);
        }
        match window.admit(c.id, c.at_ms) {
            Admit::Duplicate => {
                duplicates += 1;
                continue;
            }
            Admit::Late => late += 1,
            Admit::New => {}
        }
        total = total.checked_add(c.delta).ok_or(CounterError::Overflow)?;
        counted += 1;
        if let Some(at) = c.event_ms {
            counted_events.push((at, c.delta));
        }
    }
    Ok(match newest {
        Some(seq) if counted > 0 => Some(DedupeDecision {
            total,
            seq: seq.clone(),
            expected: floor.cloned(),
            window,
            counted,
            duplicates,
            skipped,
            late,
            counted_events,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_window_round_trips_and_refuses_garbage() {
        let mut w = DedupeWindow::new(10_000);
        assert_eq!(w.admit(ChangeId(1), 1_000), Admit::New);
        assert_eq!(w.admit(ChangeId(2), 5_000), Admit::New);
        assert_eq!(w.admit(ChangeId(1), 1_000), Admit::Duplicate);
        let bytes = w.encode();
        assert_eq!(bytes.len(), 9 + 2 * DedupeWindow::BYTES_PER_ID);
        assert_eq!(DedupeWindow::decode(&bytes, 10_000), Ok(w.clone()));
        assert!(DedupeWindow::decode(&bytes[..bytes.len() - 1], 10_000).is_err());
        assert!(DedupeWindow::decode(&[], 10_000).is_err());
        assert!(DedupeWindow::decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0], 10_000).is_err());
        // 20 s later the first two are forgotten; a change 11 s older than the newest is late.
        assert_eq!(w.admit(ChangeId(3), 25_000), Admit::New);
        assert_eq!(w.len(), 1);
        assert_eq!(w.admit(ChangeId(4), 14_000), Admit::Late);
    }

    #[test]
    fn identities_are_length_prefixed() {
        assert_ne!(ChangeId::of(&[b"ab", b"c"]), ChangeId::of(&[b"a", b"bc"]));
        assert_eq!(ChangeId::of(&[b"x"]), ChangeId::of(&[b"x"]));
    }

    /// A store of one writer sub-key: (total, seq, window) as the adapter keeps it.
    type Store = Option<(Stored, DedupeWindow)>;

    fn apply(store: &mut Store, batch: &[Change], span: u64) {
        let stored = store.as_ref().map(|(s, w)| (s, w));
        if let Some(d) = decide_deduped(stored, batch, span).expect("no overflow") {
            assert_eq!(d.expected, store.as_ref().map(|(s, _)| s.seq.clone()));
            *store = Some((
                Stored {
                    total: d.total,
                    seq: d.seq,
                },
                // What the item holds is what decode gives back.
                DedupeWindow::decode(&d.window.encode(), span).expect("decodes"),
            ));
        }
    }

    proptest! {
        /// Distinct changes, each delivered once plus duplicates up to `lag` records later
        /// (within the window), in batches, with lost acks (a batch applied twice) and crashes
        /// (a prefix applied, then the whole batch): the total is the sum of distinct changes.
        #[test]
        fn duplicates_within_the_window_and_redeliveries_count_once(
            deltas in proptest::collection::vec(prop_oneof![Just(1i64), Just(-1i64)], 1..120),
            dup in proptest::collection::vec((any::<bool>(), 1usize..20), 120),
            cuts in proptest::collection::vec(1usize..30, 1..40),
            faults in proptest::collection::vec(0u8..4, 40),
            jitter in proptest::collection::vec(0u64..40, 120),
        ) {
            let span = 1_000; // 1 s window; changes 10 ms apart, duplicates at most 200 ms late.
            let mut stream: Vec<(usize, ChangeId, u64, i64)> = vec![];
            let mut pending: Vec<(usize, usize)> = vec![]; // (deliver at position, change)
            for (i, d) in deltas.iter().enumerate() {
                let at = 1_000_000 + i as u64 * 10 + jitter[i]; // bounded reordering of times
                stream.push((i, ChangeId::of(&[&i.to_be_bytes()]), at, *d));
                if dup[i].0 { pending.push((stream.len() + dup[i].1, i)); }
                pending.sort();
                while pending.first().is_some_and(|(p, _)| *p <= stream.len()) {
                    let (_, j) = pending.remove(0);
                    let (_, id, at, d) = stream.iter().find(|c| c.0 == j).copied().expect("original");
                    stream.push((j, id, at, d));
                }
            }
            for (_, j) in pending { let c = stream.iter().find(|c| c.0 == j).copied().expect("o"); stream.push(c); }
            let changes: Vec<Change> = stream.iter().enumerate().map(|(n, (_, id, at, d))| Change {
                seq: Seq::from_u64(100 + n as u64), delta: *d, id: *id, at_ms: *at, event_ms: None,
            }).collect();
            let mut store: Store = None;
            let (mut at, mut k) = (0usize, 0usize);
            while at < changes.len() {
                let end = (at + cuts[k % cuts.len()]).min(changes.len());
                let batch = &changes[at..end];
                match faults[k % faults.len()] {
                    1 => { apply(&mut store, batch, span); apply(&mut store, batch, span); }
                    2 => { apply(&mut store, &batch[..batch.len() / 2], span); apply(&mut store, batch, span); }
                    3 if k > 0 => { // an older batch replayed
                        let from = at.saturating_sub(5);
                        apply(&mut store, &changes[from..at], span);
                        apply(&mut store, batch, span);
                    }
                    _ => apply(&mut store, batch, span),
                }
                at = end;
                k += 1;
            }
            let truth: i64 = deltas.iter().sum();
            prop_assert_eq!(store.map_or(0, |(s, _)| s.total), truth);
        }
    }
}
