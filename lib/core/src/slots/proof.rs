//! The drain's proof: which stream shards must still show that the tail read past the fence.
//!
//! A write the old owner acknowledged for a slot committed before that slot's fence item (a
//! fenced write and the fence write serialize on the fence item; a plain write came from a map
//! older than the mark, which the mover waited out). DynamoDB Streams puts the changes of one
//! partition on one shard in commit order, but the items of one slot live in many partitions,
//! so their changes are spread over every shard of the stream. The tail has read every such
//! write once, on **every shard of the lineage**, it has read past the fence:
//!
//! * the fence record of *every* slot of the range on that shard (each write of a slot precedes
//!   that slot's fence record on the write's shard), or
//! * a **marker** record on that shard: an item the mover writes after the whole fence write
//!   returned, so it follows every fence item, and every acknowledged write, in commit order, or
//! * the shard is **closed and read to its end**; its children are then listed and must prove
//!   the same (a rollover before the fence can put acknowledged writes on a child), or
//! * the shard **opened after the fence**: its parent showed a marker (or the fence records of
//!   every slot) of this attempt, so the parent was still open when the whole fence was up and
//!   every write acknowledged before it went to the parent or an older shard. Without this, a
//!   stream that rolls shards over faster than the tail lists it is never proven.
//!
//! Only records of this **attempt** count: the fence and marker items carry the move id and the
//! attempt's token (the move's lease token when it fenced), so the fence records of an aborted
//! or interrupted earlier attempt cannot end a drain before this attempt's fence is even up. A
//! shard that closed since the last listing means the listing is stale: nothing is proven until
//! the stream is listed again. [`Drain::verdict`] says which shards still owe proof; no timer
//! stands in for it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::slot::SlotRange;

/// One fence of one move: the move and the token its fence and marker items carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attempt {
    /// The move.
    pub move_id: String,
    /// The attempt's token (the lease token of the controller that fenced).
    pub token: u64,
}

/// What the tail has seen on one stream shard during one attempt's drain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSeen {
    /// The shard is closed and the tail read it to its end.
    pub closed: bool,
    /// Slots of the range whose fence record of this attempt was read on this shard.
    pub fence_slots: BTreeSet<u16>,
    /// A marker record of this attempt was read on this shard.
    pub marker: bool,
    /// The shard's parent, as the listing named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The shard opened after the whole fence was up (a parent, or an older ancestor, was read
    /// past the fence by its records): it cannot hold a write acknowledged before the fence.
    #[serde(default)]
    pub after_fence: bool,
}

/// What [`Drain::verdict`] decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Every shard of the lineage was read past the fence: every write the old owner
    /// acknowledged has been read.
    Proven,
    /// A shard closed since the stream was last listed: list it (its children may hold
    /// acknowledged writes), then decide again.
    Relist,
    /// These shards have not shown a record past the fence yet (markers may help: write more).
    Waiting {
        /// The shards still owing proof.
        shards: Vec<String>,
    },
}

/// One attempt's drain over one stream (pure: the adapter feeds it what the tail reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    range: SlotRange,
    attempt: Attempt,
    shards: BTreeMap<String, ShardSeen>,
    relist: bool,
}

impl Drain {
    /// A drain of `attempt` over the shards the tail knows (`(shard, closed and read to its
    /// end)`); `stale_listing` when a shard closed since the stream was last listed (or the
    /// tail does not know when it was listed).
    pub fn new(
        range: SlotRange,
        attempt: Attempt,
        known: impl IntoIterator<Item = (String, bool)>,
        stale_listing: bool,
    ) -> Self {
        Self {
            range,
            attempt,
            shards: known
                .into_iter()
                .map(|(id, closed)| {
                    (
                        id,
                        ShardSeen {
                            closed,
                            ..ShardSeen::default()
                        },
                    )
                })
                .collect(),
            relist: stale_listing,
        }
    }

    /// The attempt.
    pub fn attempt(&self) -> &Attempt {
        &self.attempt
    }

    /// The stream was listed: these shards exist, each with the parent the listing names (new
    /// ones owe proof like the others, unless they opened after the fence).
    pub fn listed<I, S>(&mut self, shards: I)
    where
        I: IntoIterator<Item = (S, Option<S>)>,
        S: Into<String>,
    {
        for (id, parent) in shards {
            let id: String = id.into();
            let parent: Option<String> = parent.map(Into::into);
            let after = parent
                .as_ref()
                .and_then(|p| self.shards.get(p))
                .is_some_and(|p| p.after_fence || self.past_fence(p));
            let seen = self.shards.entry(id.clone()).or_default();
            if seen.parent.is_none() {
                seen.parent = parent;
            }
            if after && !seen.after_fence {
                seen.after_fence = true;
                self.descendants_after_fence(&id);
            }
        }
        self.relist = false;
    }

    /// `shard`'s own records show the whole fence up: a marker, or every slot's fence record.
    fn past_fence(&self, seen: &ShardSeen) -> bool {
        seen.marker || u32::try_from(seen.fence_slots.len()).unwrap_or(u32::MAX) >= self.range.len()
    }

    /// Marks every listed descendant of `shard` as opened after the fence.
    fn descendants_after_fence(&mut self, shard: &str) {
        let mut todo = vec![shard.to_owned()];
        while let Some(p) = todo.pop() {
            for (id, seen) in &mut self.shards {
                if !seen.after_fence && seen.parent.as_deref() == Some(p.as_str()) {
                    seen.after_fence = true;
                    todo.push(id.clone());
                }
            }
        }
    }

    /// A fence record of `slot` written by `move_id` with `token` was read on `shard`; counts
    /// only for this attempt and a slot of the range. Returns whether it counted.
    pub fn fence(&mut self, shard: &str, slot: u16, move_id: &str, token: u64) -> bool {
        if !self.is_this(move_id, token) || !self.range.contains(slot) {
            return false;
        }
        let was = self.shards.get(shard).is_some_and(|s| self.past_fence(s));
        let seen = self.shards.entry(shard.to_owned()).or_default();
        seen.fence_slots.insert(slot);
        if !was && self.past_fence(&self.shards[shard]) {
            self.descendants_after_fence(shard);
        }
        true
    }

    /// A marker record written by `move_id` with `token` was read on `shard`. Returns whether
    /// it counted (this attempt's only).
    pub fn marker(&mut self, shard: &str, move_id: &str, token: u64) -> bool {
        if !self.is_this(move_id, token) {
            return false;
        }
        let seen = self.shards.entry(shard.to_owned()).or_default();
        if !seen.marker {
            seen.marker = true;
            self.descendants_after_fence(shard);
        }
        true
    }

    /// `shard` is closed and the tail read it to its end (its children must be listed, unless
    /// the shard itself was read past the fence or opened after it: its children opened after
    /// the fence and owe nothing).
    pub fn closed(&mut self, shard: &str) {
        let seen = self.shards.entry(shard.to_owned()).or_default();
        if !seen.closed {
            seen.closed = true;
            let children_owe = !seen.after_fence && !self.past_fence(&self.shards[shard]);
            if children_owe {
                self.relist = true;
            }
        }
    }

    fn is_this(&self, move_id: &str, token: u64) -> bool {
        self.attempt.move_id == move_id && self.attempt.token == token
    }

    fn proven(&self, seen: &ShardSeen) -> bool {
        seen.closed || seen.after_fence || self.past_fence(seen)
    }

    /// The shards still owing proof (also while the listing is stale).
    pub fn owing(&self) -> Vec<String> {
        self.shards
            .iter()
            .filter(|(_, seen)| !self.proven(seen))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether the tail has read past the fence on every shard of the lineage.
    pub fn verdict(&self) -> Verdict {
        if self.relist {
            return Verdict::Relist;
        }
        let shards = self.owing();
        if shards.is_empty() {
            Verdict::Proven
        } else {
            Verdict::Waiting { shards }
        }
    }

    /// Shards known to the drain.
    pub fn shards(&self) -> &BTreeMap<String, ShardSeen> {
        &self.shards
    }

    /// Distinct slots of the range whose fence record was read, on any shard.
    pub fn fence_slots(&self) -> BTreeSet<u16> {
        self.shards
            .values()
            .flat_map(|s| s.fence_slots.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attempt(token: u64) -> Attempt {
        Attempt {
            move_id: "mv".into(),
            token,
        }
    }

    #[test]
    fn one_shard_is_proven_by_the_fence_records_of_every_slot_of_this_attempt() {
        let range = SlotRange::new(10, 11).expect("range");
        let mut d = Drain::new(range, attempt(2), [("s0".to_owned(), false)], false);
        assert!(!d.fence("s0", 10, "mv", 1), "an earlier attempt's record");
        assert!(!d.fence("s0", 10, "other", 2), "another move's record");
        assert!(d.fence("s0", 10, "mv", 2));
        assert_eq!(
            d.verdict(),
            Verdict::Waiting {
                shards: vec!["s0".into()]
            }
        );
        assert!(d.fence("s0", 11, "mv", 2));
        assert_eq!(d.verdict(), Verdict::Proven);
    }

    #[test]
    fn a_closed_shard_asks_for_a_listing_and_its_children_owe_proof() {
        let range = SlotRange::single(7).expect("range");
        let mut d = Drain::new(
            range,
            attempt(1),
            [("a".to_owned(), false), ("b".to_owned(), false)],
            false,
        );
        d.fence("a", 7, "mv", 1);
        d.closed("b");
        assert_eq!(d.verdict(), Verdict::Relist);
        d.listed([("a", None), ("b", None), ("b1", Some("b"))]);
        assert_eq!(
            d.verdict(),
            Verdict::Waiting {
                shards: vec!["b1".into()]
            }
        );
        assert!(!d.marker("b1", "mv", 0));
        d.marker("b1", "mv", 1);
        assert_eq!(d.verdict(), Verdict::Proven);
    }

    #[test]
    fn a_shard_opened_after_the_parent_showed_the_whole_fence_owes_no_proof() {
        let range = SlotRange::new(7, 8).expect("range");
        let mut d = Drain::new(range, attempt(1), [("a".to_owned(), false)], false);
        // A child listed before its parent's marker is read, and a grandchild after.
        d.listed([("a", None), ("a1", Some("a"))]);
        assert_eq!(
            d.verdict(),
            Verdict::Waiting {
                shards: vec!["a".into(), "a1".into()]
            }
        );
        d.marker("a", "mv", 1);
        d.listed([("a", None), ("a1", Some("a")), ("a2", Some("a1"))]);
        assert_eq!(d.verdict(), Verdict::Proven);
        // One slot's fence record on a parent is not the whole fence: its child still owes.
        let mut d = Drain::new(range, attempt(1), [("b".to_owned(), false)], false);
        d.fence("b", 7, "mv", 1);
        d.listed([("b", None), ("b1", Some("b"))]);
        assert_eq!(
            d.verdict(),
            Verdict::Waiting {
                shards: vec!["b".into(), "b1".into()]
            }
        );
        d.fence("b", 8, "mv", 1);
        assert_eq!(d.verdict(), Verdict::Proven);
        // A shard that closes after its marker asks for no listing: its children owe nothing.
        d.closed("b");
        assert_eq!(d.verdict(), Verdict::Proven);
    }

    /// A record of the simulated stream.
    #[derive(Debug, Clone)]
    enum Rec {
        /// A write of a slot of the range the old owner acknowledged.
        Acked,
        Other,
        Fence {
            slot: u16,
            token: u64,
        },
        Marker {
            token: u64,
        },
    }

    #[derive(Debug, Default)]
    struct Shard {
        id: String,
        parent: Option<String>,
        records: Vec<Rec>,
        closed: bool,
        read: usize,
    }

    /// A stream of `partitions` partitions, each a lineage of shards that roll over; the old
    /// owner's fence is written slot by slot (attempt 2; an earlier attempt 1 left records),
    /// then markers; a tail reads and lists in any interleaving with the writes.
    struct World {
        range: SlotRange,
        shards: Vec<Shard>,
        open: Vec<usize>,
        fenced: BTreeSet<u16>,
        fencing: bool,
        known: BTreeSet<usize>,
        drain: Drain,
    }

    impl World {
        fn new(partitions: usize, slots: u16) -> World {
            let range = SlotRange::new(100, 100 + slots - 1).expect("range");
            let shards: Vec<Shard> = (0..partitions)
                .map(|p| Shard {
                    id: format!("p{p}-0"),
                    ..Shard::default()
                })
                .collect();
            let known: BTreeSet<usize> = (0..partitions).collect();
            let drain = Drain::new(
                range,
                attempt(2),
                shards.iter().map(|s| (s.id.clone(), false)),
                false,
            );
            World {
                range,
                open: (0..partitions).collect(),
                shards,
                fenced: BTreeSet::new(),
                fencing: false,
                known,
                drain,
            }
        }

        fn append(&mut self, partition: usize, rec: Rec) {
            let i = self.open[partition % self.open.len()];
            self.shards[i].records.push(rec);
        }

        fn all_fenced(&self) -> bool {
            self.fenced.len() as u32 == self.range.len()
        }

        fn step(&mut self, op: u8, a: u8, b: u8) {
            let p = usize::from(a);
            let slot = self.range.first + u16::from(b) % self.range.len() as u16;
            match op % 7 {
                // A write of a slot of the range: acknowledged only before its fence.
                0 | 1 => {
                    if !self.fenced.contains(&slot) {
                        self.append(p, Rec::Acked);
                    }
                }
                2 => self.append(p, Rec::Other),
                // A rollover: the partition's shard closes and a child opens.
                3 => {
                    let part = p % self.open.len();
                    let i = self.open[part];
                    self.shards[i].closed = true;
                    let generation = self.shards.len();
                    let parent = Some(self.shards[i].id.clone());
                    self.shards.push(Shard {
                        id: format!("p{part}-{generation}"),
                        parent,
                        ..Shard::default()
                    });
                    self.open[part] = self.shards.len() - 1;
                }
                // The fence, slot by slot; an earlier attempt's records before it; markers
                // once the whole fence write returned.
                4 => {
                    if !self.fencing {
                        if b.is_multiple_of(3) {
                            self.append(p, Rec::Fence { slot, token: 1 });
                        } else if b % 3 == 1 {
                            self.append(p, Rec::Marker { token: 1 });
                        } else {
                            self.fencing = true;
                        }
                    } else if !self.all_fenced() {
                        let next = (0..self.range.len() as u16)
                            .map(|k| {
                                self.range.first + (k + u16::from(b)) % self.range.len() as u16
                            })
                            .find(|s| !self.fenced.contains(s))
                            .expect("a slot left to fence");
                        self.fenced.insert(next);
                        // The fence item's key hashes to some partition.
                        self.append(
                            p,
                            Rec::Fence {
                                slot: next,
                                token: 2,
                            },
                        );
                    } else {
                        self.append(p, Rec::Marker { token: 2 });
                    }
                }
                // The tail reads up to b records of a shard it knows.
                5 => {
                    let known: Vec<usize> = self.known.iter().copied().collect();
                    let i = known[p % known.len()];
                    self.read(i, usize::from(b % 8) + 1);
                }
                // The tail lists the stream.
                _ => self.list(),
            }
        }

        fn read(&mut self, i: usize, n: usize) {
            let shard = &mut self.shards[i];
            let end = (shard.read + n).min(shard.records.len());
            let recs: Vec<Rec> = shard.records[shard.read..end].to_vec();
            shard.read = end;
            let (id, done) = (shard.id.clone(), shard.closed && end == shard.records.len());
            for r in recs {
                match r {
                    Rec::Fence { slot, token } => {
                        self.drain.fence(&id, slot, "mv", token);
                    }
                    Rec::Marker { token } => {
                        self.drain.marker(&id, "mv", token);
                    }
                    Rec::Acked | Rec::Other => {}
                }
            }
            if done {
                self.drain.closed(&id);
            }
        }

        fn list(&mut self) {
            self.known = (0..self.shards.len()).collect();
            let ids: Vec<(String, Option<String>)> = self
                .shards
                .iter()
                .map(|s| (s.id.clone(), s.parent.clone()))
                .collect();
            self.drain.listed(ids);
        }

        /// Every acknowledged write of the range has been read.
        fn all_acked_read(&self) -> bool {
            self.shards
                .iter()
                .all(|s| s.records[s.read..].iter().all(|r| !matches!(r, Rec::Acked)))
        }
    }

    proptest! {
        /// Safety: whenever the drain says proven, the whole fence is up (no slot of the range
        /// can acknowledge another write on the old owner) and the tail has read every write
        /// the old owner acknowledged, on every shard of every lineage.
        #[test]
        fn proven_means_every_acknowledged_write_was_read(
            partitions in 1usize..5,
            slots in 1u16..4,
            ops in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..300),
        ) {
            let mut w = World::new(partitions, slots);
            for (op, a, b) in ops {
                w.step(op, a, b);
                if w.drain.verdict() == Verdict::Proven {
                    prop_assert!(w.all_fenced(), "proven before the fence was up");
                    prop_assert!(w.all_acked_read(), "proven with an acknowledged write unread");
                }
            }
        }

        /// Liveness: once the fence is up and a marker reached every open shard, a tail that
        /// lists and reads everything is proven.
        #[test]
        fn a_tail_that_reads_everything_after_markers_on_every_shard_is_proven(
            partitions in 1usize..5,
            slots in 1u16..4,
            ops in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 0..200),
        ) {
            let mut w = World::new(partitions, slots);
            for (op, a, b) in ops {
                w.step(op, a, b);
            }
            w.fencing = true;
            let mut k = 0u8;
            while !w.all_fenced() {
                w.step(4, k, k);
                k = k.wrapping_add(1);
            }
            for p in 0..partitions {
                w.append(p, Rec::Marker { token: 2 });
            }
            for _ in 0..(w.shards.len() + 2) {
                w.list();
                for i in 0..w.shards.len() {
                    w.read(i, usize::MAX / 2);
                }
            }
            prop_assert_eq!(w.drain.verdict(), Verdict::Proven);
            prop_assert!(w.all_acked_read());
        }
    }
}
