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
//! 5. **Size guard.** The stored window never passes [`DedupeWindow::MAX_BYTES`] (128 KiB, about
//!    10,900 identities; the item limit is 400 KB): a flush whose window would pass it sheds the
//!    oldest identities first ([`DedupeWindow::shed_to`], [`DedupeDecision::shed`]) and never
//!    fails. The cost: a duplicate of a shed change is no longer recognised. The window remembers
//!    the newest creation time it shed, so such a change is counted and reported as
//!    [`Admit::Late`] like one older than the window (guarantee 2), never silently; the bucket
//!    repair corrects the count (its bucket cannot be judged before the writer's watermark,
//!    which stays a dedupe window behind the newest change, passes it).

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

/// The canonical text of a change's part (its `Keys`, an image, a scalar), what its
/// [`ChangeId`] hashes: compact JSON with every object's members sorted by name, and the
/// elements of DynamoDB's unordered sets (`SS`, `NS`, `BS`) sorted. Two deliveries of one change
/// have one canonical text whatever the order of their attributes in the record, and whatever
/// `serde_json`'s `preserve_order` feature (which keeps a parsed object's members in the
/// record's order, and which the workspace's test builds turn on while the Lambda builds do
/// not). For a part without sets the text is what `serde_json` writes for a sorted map, so the
/// identities of changes without sets are the ones earlier builds computed without that feature.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, false, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, set: bool, out: &mut String) {
    use serde_json::Value;
    let scalar = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&scalar(&Value::String(name.clone())));
                out.push(':');
                write_canonical(v, matches!(name.as_str(), "SS" | "NS" | "BS"), out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            let mut texts: Vec<String> = items.iter().map(canonical_json).collect();
            if set {
                texts.sort_unstable();
            }
            out.push('[');
            out.push_str(&texts.join(","));
            out.push(']');
        }
        other => out.push_str(&scalar(other)),
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
    /// The newest creation time of an identity shed by the size guard (0: none within the
    /// window): a change at or before it that is not remembered may be a duplicate of a shed one.
    shed_ms: u64,
    ids: BTreeMap<ChangeId, u64>,
}

impl DedupeWindow {
    /// Bytes per remembered identity in [`DedupeWindow::encode`]: 8 (id) + 4 (age in ms).
    pub const BYTES_PER_ID: usize = 12;
    /// The largest stored window, in bytes of [`DedupeWindow::encode`]: 128 KiB, about 10,900
    /// identities (a shard's 1,000 records/s over the 10 s window fit), a third of DynamoDB's
    /// 400 KB item limit with room for the rest of the writer sub-key (buckets, seq: under 4 KB).
    pub const MAX_BYTES: usize = 128 * 1024;
    const VERSION: u8 = 1;
    /// The form with the shed time (written only while it is within the window).
    const VERSION_SHED: u8 = 2;
    const HEADER: usize = 1 + 8;
    const HEADER_SHED: usize = 1 + 8 + 8;

    /// An empty window of `span_ms` milliseconds (at most `u32::MAX`, about 49 days).
    pub fn new(span_ms: u64) -> Self {
        Self {
            span_ms: span_ms.min(u64::from(u32::MAX)),
            newest_ms: 0,
            shed_ms: 0,
            ids: BTreeMap::new(),
        }
    }

    /// The newest creation time of an identity shed by [`DedupeWindow::shed_to`] that is still
    /// within the window, if any.
    pub fn shed_ms(&self) -> Option<u64> {
        self.shed_live().then_some(self.shed_ms)
    }

    /// True when the shed time is within the window (older ones are late by the span anyway).
    fn shed_live(&self) -> bool {
        self.shed_ms > 0 && self.shed_ms >= self.newest_ms.saturating_sub(self.span_ms)
    }

    /// The length of [`DedupeWindow::encode`]'s form.
    pub fn encoded_len(&self) -> usize {
        let header = if self.shed_live() {
            Self::HEADER_SHED
        } else {
            Self::HEADER
        };
        header + self.ids.len() * Self::BYTES_PER_ID
    }

    /// Forgets the oldest identities (by creation time, then id) until the stored form fits
    /// `max_bytes`, and remembers the newest creation time forgotten; returns how many were
    /// forgotten. Every identity kept is at least as new as every one forgotten, and no more
    /// are forgotten than the bound needs.
    pub fn shed_to(&mut self, max_bytes: usize) -> u64 {
        let room = max_bytes.saturating_sub(Self::HEADER_SHED) / Self::BYTES_PER_ID;
        if self.encoded_len() <= max_bytes || self.ids.len() <= room {
            return 0;
        }
        let mut by_age: Vec<(u64, ChangeId)> = self.ids.iter().map(|(id, at)| (*at, *id)).collect();
        by_age.sort_unstable();
        let excess = self.ids.len() - room;
        for (at, id) in &by_age[..excess] {
            self.ids.remove(id);
            self.shed_ms = self.shed_ms.max(*at);
        }
        excess as u64
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

    /// Adds `other`'s identities to this window (the newest creation time and shed time are
    /// the larger of the two; identities older than the span below the new newest are
    /// forgotten). Seeds a reshard child's window with its parents' windows, so a duplicate
    /// whose original a parent counted is still recognised on the child.
    pub fn merge(&mut self, other: &DedupeWindow) {
        for (id, at) in &other.ids {
            let slot = self.ids.entry(*id).or_insert(*at);
            *slot = (*slot).max(*at);
        }
        self.newest_ms = self.newest_ms.max(other.newest_ms);
        self.shed_ms = self.shed_ms.max(other.shed_ms);
        let floor = self.newest_ms.saturating_sub(self.span_ms);
        self.ids.retain(|_, at| *at >= floor);
        if !self.shed_live() {
            self.shed_ms = 0;
        }
    }

    /// Decides one change created at `at_ms`, remembering it when counted.
    pub fn admit(&mut self, id: ChangeId, at_ms: u64) -> Admit {
        if self.ids.contains_key(&id) {
            return Admit::Duplicate;
        }
        if at_ms.saturating_add(self.span_ms) < self.newest_ms
            || (self.shed_live() && at_ms <= self.shed_ms)
        {
            return Admit::Late;
        }
        self.ids.insert(id, at_ms);
        if at_ms > self.newest_ms {
            self.newest_ms = at_ms;
            let floor = self.newest_ms.saturating_sub(self.span_ms);
            self.ids.retain(|_, at| *at >= floor);
            if !self.shed_live() {
                self.shed_ms = 0;
            }
        }
        Admit::New
    }

    /// The stored form: version, newest time, then each id with its age below the newest.
    /// While an identity shed by the size guard is within the window, version 2 with the shed
    /// time after the newest time; version 1 otherwise (what earlier builds read).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        if self.shed_live() {
            out.push(Self::VERSION_SHED);
            out.extend_from_slice(&self.newest_ms.to_be_bytes());
            out.extend_from_slice(&self.shed_ms.to_be_bytes());
        } else {
            out.push(Self::VERSION);
            out.extend_from_slice(&self.newest_ms.to_be_bytes());
        }
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
        let header = match version {
            Self::VERSION => 8,
            Self::VERSION_SHED => 16,
            _ => return Err(bad("unknown version")),
        };
        if rest.len() < header || (rest.len() - header) % Self::BYTES_PER_ID != 0 {
            return Err(bad("truncated"));
        }
        let (head, ids) = rest.split_at(header);
        let (newest, shed) = head.split_at(8);
        let mut w = Self::new(span_ms);
        w.newest_ms = u64::from_be_bytes(newest.try_into().map_err(|_| bad("truncated"))?);
        if !shed.is_empty() {
            w.shed_ms = u64::from_be_bytes(shed.try_into().map_err(|_| bad("truncated"))?);
        }
        for chunk in ids.chunks_exact(Self::BYTES_PER_ID) {
            let (id, age) = chunk.split_at(8);
            let id = u64::from_be_bytes(id.try_into().map_err(|_| bad("truncated"))?);
            let age = u32::from_be_bytes(age.try_into().map_err(|_| bad("truncated"))?);
            w.ids
                .insert(ChangeId(id), w.newest_ms.saturating_sub(u64::from(age)));
        }
        let floor = w.newest_ms.saturating_sub(w.span_ms);
        w.ids.retain(|_, at| *at >= floor);
        if !w.shed_live() {
            w.shed_ms = 0;
        }
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
    /// Changes older than the window (or than an identity the size guard shed), counted anyway.
    pub late: u64,
    /// Identities the size guard forgot so the stored window stays within its bound
    /// ([`DedupeWindow::MAX_BYTES`]); 0 almost always.
    pub shed: u64,
    /// `(event ms, delta)` of every counted change with an event time: what the writer
    /// sub-key's time buckets add.
    pub counted_events: Vec<(u64, i64)>,
}

/// Decides a deduplicated flush: records at or below the stored seq are redeliveries (skipped),
/// the rest go through the window, which is then held within [`DedupeWindow::MAX_BYTES`]. `None`:
/// nothing to write (everything was redelivered or a duplicate; the stored state already covers
/// it, so a later redelivery decides the same).
pub fn decide_deduped(
    stored: Option<(&Stored, &DedupeWindow)>,
    changes: &[Change],
    span_ms: u64,
) -> Result<Option<DedupeDecision>, CounterError> {
    decide_deduped_within(stored, changes, span_ms, DedupeWindow::MAX_BYTES)
}

/// [`decide_deduped`] with the stored window held within `max_bytes` instead of
/// [`DedupeWindow::MAX_BYTES`] (the oldest identities shed first, [`DedupeWindow::shed_to`]).
pub fn decide_deduped_within(
    stored: Option<(&Stored, &DedupeWindow)>,
    changes: &[Change],
    span_ms: u64,
    max_bytes: usize,
) -> Result<Option<DedupeDecision>, CounterError> {
    decide_deduped_seeded(stored, None, changes, span_ms, max_bytes)
}

/// [`decide_deduped_within`] for a writer sub-key whose first flush starts from `seed` instead
/// of an empty window: its stream parents' windows merged ([`DedupeWindow::merge`]), so a
/// duplicate that straddles a reshard (the original counted by the parent, the copy delivered
/// to the child) is dropped. `seed` is used only when nothing is stored yet.
pub fn decide_deduped_seeded(
    stored: Option<(&Stored, &DedupeWindow)>,
    seed: Option<&DedupeWindow>,
    changes: &[Change],
    span_ms: u64,
    max_bytes: usize,
) -> Result<Option<DedupeDecision>, CounterError> {
    let floor = stored.map(|(s, _)| &s.seq);
    let mut window = match (stored, seed) {
        (Some((_, w)), _) => w.clone(),
        (None, Some(seed)) => {
            let mut w = DedupeWindow::new(span_ms);
            w.merge(seed);
            w
        }
        (None, None) => DedupeWindow::new(span_ms),
    };
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
    let shed = window.shed_to(max_bytes);
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
            shed,
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
    fn a_full_window_sheds_its_oldest_and_calls_a_change_at_or_before_them_late() {
        let mut w = DedupeWindow::new(10_000);
        for i in 0..10u64 {
            assert_eq!(w.admit(ChangeId(i), 1_000 + i), Admit::New);
        }
        // Room for 4 identities with the shed time.
        let bound = 17 + 4 * DedupeWindow::BYTES_PER_ID;
        assert_eq!(w.shed_to(bound), 6);
        assert_eq!(w.encode().len(), bound);
        assert_eq!(w.shed_ms(), Some(1_005));
        // The stored form keeps the shed time (version 2) and reads back equal.
        let back = DedupeWindow::decode(&w.encode(), 10_000).expect("decodes");
        assert_eq!(back, w);
        // A kept one is still a duplicate; a shed one is late (counted, reported), never New.
        let mut w = back;
        assert_eq!(w.admit(ChangeId(9), 1_009), Admit::Duplicate);
        assert_eq!(w.admit(ChangeId(2), 1_002), Admit::Late);
        assert_eq!(w.admit(ChangeId(77), 1_005), Admit::Late);
        assert_eq!(w.admit(ChangeId(78), 1_006), Admit::New);
        // Once the window moves past the shed time, the form is version 1 again.
        assert_eq!(w.admit(ChangeId(79), 20_000), Admit::New);
        assert_eq!(w.shed_ms(), None);
        assert_eq!(w.encode()[0], 1);
        // Within the bound: nothing shed.
        assert_eq!(w.shed_to(bound), 0);
    }

    #[test]
    fn a_flush_over_the_bound_sheds_and_still_counts_every_change() {
        let changes: Vec<Change> = (0..50u64)
            .map(|i| Change {
                seq: Seq::from_u64(100 + i),
                delta: 1,
                id: ChangeId(i),
                at_ms: 1_000 + i,
                event_ms: None,
            })
            .collect();
        let bound = 17 + 10 * DedupeWindow::BYTES_PER_ID;
        let d = decide_deduped_within(None, &changes, 10_000, bound)
            .expect("decides")
            .expect("writes");
        assert_eq!((d.total, d.counted, d.shed), (50, 50, 40));
        assert!(d.window.encode().len() <= bound);
        // The default bound holds a shard's 1,000 records/s over the 10 s window.
        const { assert!(17 + 10_000 * DedupeWindow::BYTES_PER_ID <= DedupeWindow::MAX_BYTES) };
        let d = decide_deduped(None, &changes, 10_000)
            .expect("decides")
            .expect("writes");
        assert_eq!(d.shed, 0);
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

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    ".{0,6}".prop_filter("not a set type", |k| {
                        !matches!(k.as_str(), "SS" | "NS" | "BS")
                    }),
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn canonical_text_sorts_members_at_every_level_and_only_sets_elements() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"b":{"L":[{"S":"z"},{"S":"a"}]},"a":{"SS":["z","a"]},"c":{"M":{"y":{"N":"1"},"x":{"NS":["2","10"]}}}}"#,
        )
        .expect("json");
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"SS":["a","z"]},"b":{"L":[{"S":"z"},{"S":"a"}]},"c":{"M":{"x":{"NS":["10","2"]},"y":{"N":"1"}}}}"#
        );
    }

    /// One change record: id `id` created at `at` on a shard, the `n`th record of it.
    fn rec(n: usize, id: u64, at: u64) -> Change {
        Change {
            seq: Seq::from(n as u64 + 1),
            delta: 1,
            id: ChangeId(id),
            at_ms: at,
            event_ms: None,
        }
    }

    proptest! {
        /// A reshard (a split: one parent; a merge: two) with duplicates straddling it: the
        /// parents count their changes, then each child starts from its parents' windows and
        /// drops every duplicate of a change a parent counted within the window, so the
        /// parents' and the child's totals add up to the distinct changes. Without the seed
        /// (an empty first window) the straddling duplicates would count twice.
        #[test]
        fn a_duplicate_straddling_a_reshard_counts_once(
            parents in 1usize..3,
            before in proptest::collection::vec(0u64..500, 1..40),
            after in proptest::collection::vec(500u64..800, 0..40),
            dups in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let span = 1_000;
            // Changes before the reshard, round-robin over the parents; ids are their index.
            let mut windows = vec![];
            let mut total = 0i64;
            for p in 0..parents {
                let mine: Vec<Change> = before.iter().enumerate()
                    .filter(|(i, _)| i % parents == p)
                    .map(|(i, at)| rec(i, i as u64, *at)).collect();
                let d = decide_deduped(None, &mine, span).expect("decide");
                if let Some(d) = d {
                    total += d.total;
                    windows.push(d.window);
                }
            }
            let mut seed = DedupeWindow::new(span);
            for w in &windows {
                seed.merge(w);
            }
            // On the child: duplicates of the parents' changes (new seqs), then new changes.
            let mut child: Vec<Change> = before.iter().enumerate()
                .filter(|(i, _)| dups[*i % dups.len()])
                .map(|(i, at)| (i as u64, *at)).collect::<Vec<_>>().into_iter()
                .chain(after.iter().enumerate().map(|(j, at)| (1_000 + j as u64, *at)))
                .enumerate().map(|(n, (id, at))| rec(n, id, at)).collect();
            child.sort_by_key(|c| c.seq.clone());
            if let Some(d) = decide_deduped_seeded(None, Some(&seed), &child, span, DedupeWindow::MAX_BYTES)
                .expect("decide")
            {
                total += d.total;
            }
            prop_assert_eq!(total, (before.len() + after.len()) as i64);
        }

        /// Canonical text is valid JSON of the same value, and, for a value without sets, the
        /// text `serde_json` writes for sorted maps (this crate's build has no `preserve_order`),
        /// so identities of changes without sets are the ones earlier builds computed.
        #[test]
        fn canonical_text_is_the_value_and_serde_jsons_sorted_text(v in json_value()) {
            let text = canonical_json(&v);
            let back: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            prop_assert_eq!(&back, &v);
            let sorted = serde_json::from_str::<serde_json::Value>(r#"{"b":1,"a":2}"#)
                .expect("json").to_string().starts_with(r#"{"a""#);
            if sorted {
                prop_assert_eq!(text, v.to_string());
            }
        }

        /// The size guard: after any admits and any bound (at least the 17-byte header), the
        /// stored form never passes the bound, every identity kept is at least as new as every
        /// one shed, no more are shed than the bound needs, the stored form reads back equal,
        /// and a shed identity delivered again is late, never new.
        #[test]
        fn the_stored_window_never_passes_its_bound_and_sheds_only_the_oldest(
            admits in proptest::collection::vec((0u64..400, 0u64..3_000), 0..300),
            rooms in 0usize..120,
            spare in 0usize..DedupeWindow::BYTES_PER_ID,
        ) {
            let bound = 17 + rooms * DedupeWindow::BYTES_PER_ID + spare;
            let mut w = DedupeWindow::new(1_000);
            for (id, at) in &admits {
                w.admit(ChangeId(*id), 10_000 + at);
            }
            let before = w.clone();
            let shed = w.shed_to(bound);
            let bytes = w.encode();
            prop_assert!(bytes.len() <= bound, "{} > {bound}", bytes.len());
            prop_assert_eq!(bytes.len(), w.encoded_len());
            prop_assert_eq!(before.len() - w.len(), shed as usize);
            let kept: Vec<(ChangeId, u64)> = w.ids.iter().map(|(i, a)| (*i, *a)).collect();
            let gone: Vec<(ChangeId, u64)> = before.ids.iter()
                .filter(|(i, _)| !w.ids.contains_key(i)).map(|(i, a)| (*i, *a)).collect();
            if let (Some(oldest_kept), Some(newest_gone)) =
                (kept.iter().map(|(i, a)| (*a, *i)).min(), gone.iter().map(|(i, a)| (*a, *i)).max())
            {
                prop_assert!(oldest_kept > newest_gone, "kept {oldest_kept:?} shed {newest_gone:?}");
            }
            if shed > 0 {
                // Maximal: one more identity would not fit.
                prop_assert!(bytes.len() + DedupeWindow::BYTES_PER_ID > bound);
            } else {
                prop_assert_eq!(&w, &before);
            }
            let mut back = DedupeWindow::decode(&bytes, 1_000).expect("decodes");
            prop_assert_eq!(&back, &w);
            for (id, at) in gone {
                prop_assert_ne!(back.admit(id, at), Admit::New);
            }
        }

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
