//! The slot directory as data: slot ranges → owner table, an epoch per range, a version for
//! the whole map; split, merge, mark and flip as [`Change`]s decided from one version.

use serde::{Deserialize, Serialize};

use super::SlotError;
use super::keying::Keying;
use super::slot::{LAST_SLOT, SlotRange};

/// What a range is doing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum RangeState {
    /// Served by its owner; routers write with a plain version-conditional put (or fenced, in
    /// a strict directory).
    Stable,
    /// A move is under way: routers write through the fence check, so the owner's fence
    /// item can refuse them.
    Moving {
        /// The move that marked it.
        move_id: String,
    },
}

impl RangeState {
    /// `stable` or `moving`, as `slots status` prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stable => "stable",
            Self::Moving { .. } => "moving",
        }
    }
}

/// One entry of the directory: a slot range, its owner and the epoch it is owned at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RangeEntry {
    /// The slots.
    pub range: SlotRange,
    /// The table that owns them.
    pub owner: String,
    /// Goes up by one each time the range changes owner; the fencing token of its slots.
    pub epoch: u64,
    /// Stable or moving.
    pub state: RangeState,
}

impl RangeEntry {
    /// A stable entry.
    pub fn stable(range: SlotRange, owner: impl Into<String>, epoch: u64) -> Self {
        Self {
            range,
            owner: owner.into(),
            epoch,
            state: RangeState::Stable,
        }
    }
}

/// One edit of a [`Change`], keyed by the first slot of a range (one directory item per range).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    /// The item's key: the first slot of the range before and after.
    pub first: u16,
    /// What the item must hold for the change to apply (`None`: it must not exist).
    pub before: Option<RangeEntry>,
    /// What it holds after (`None`: deleted).
    pub after: Option<RangeEntry>,
}

/// A directory change decided from map version `from_version`: every edit's `before` is a
/// condition, and the map version must still be `from_version`. The adapter writes it as one
/// `TransactWriteItems`, so it applies whole or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The version the change was decided from; the map is `from_version + 1` after it.
    pub from_version: u64,
    /// The range items written.
    pub edits: Vec<Edit>,
}

/// The directory: every slot in exactly one range, sorted by first slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMap {
    /// Goes up by one with every committed change.
    pub version: u64,
    /// Strict directory: routers check the owner's fence item on every write.
    pub strict: bool,
    /// The longest a router may use a loaded map, in milliseconds (movers wait this long
    /// after marking a range before they fence it).
    pub max_age_ms: u64,
    /// The ranges, sorted, contiguous, covering `0-16383`.
    pub ranges: Vec<RangeEntry>,
    /// How a key becomes a slot, fixed at `slots init` (hash unless the directory orders keys).
    #[serde(default)]
    pub keying: Keying,
}

impl SlotMap {
    /// The map `slots init` writes: every slot owned by `owner` at epoch 1, version 1.
    pub fn initial(owner: impl Into<String>, max_age_ms: u64, strict: bool) -> Self {
        Self {
            version: 1,
            strict,
            max_age_ms,
            ranges: vec![RangeEntry::stable(SlotRange::ALL, owner, 1)],
            keying: Keying::Hash,
        }
    }

    /// The slot of `key` under this directory's [`Keying`].
    pub fn slot_of(&self, key: &str) -> u16 {
        self.keying.slot_of(key)
    }

    /// Checks the invariants a hand edit can break: ranges sorted, contiguous and covering
    /// every slot, epochs at least 1, owners named.
    pub fn validate(&self) -> Result<(), SlotError> {
        let corrupt = |detail: String| Err(SlotError::Corrupt { detail });
        let mut next: u32 = 0;
        for r in &self.ranges {
            if u32::from(r.range.first) != next {
                return corrupt(if u32::from(r.range.first) < next {
                    format!("range {} overlaps the range before it", r.range)
                } else {
                    format!("slots {next}-{} belong to no range", r.range.first - 1)
                });
            }
            if r.range.first > r.range.last || r.range.last > LAST_SLOT {
                return corrupt(format!("range {} is not a slot range", r.range));
            }
            if r.epoch == 0 || r.owner.is_empty() {
                return corrupt(format!("range {} has no owner or epoch 0", r.range));
            }
            next = u32::from(r.range.last) + 1;
        }
        if next != u32::from(LAST_SLOT) + 1 {
            return corrupt(format!("slots {next}-{LAST_SLOT} belong to no range"));
        }
        if self.version == 0 {
            return corrupt("map version 0".into());
        }
        Ok(())
    }

    /// The entry that owns `slot`.
    pub fn entry_of(&self, slot: u16) -> &RangeEntry {
        let i = self
            .ranges
            .partition_point(|r| r.range.last < slot)
            .min(self.ranges.len().saturating_sub(1));
        &self.ranges[i]
    }

    /// The entry whose range is exactly `range`.
    pub fn exact(&self, range: SlotRange) -> Result<&RangeEntry, SlotError> {
        self.ranges
            .iter()
            .find(|r| r.range == range)
            .ok_or_else(|| SlotError::UnknownRange {
                range,
                known: self.nearby(range),
            })
    }

    fn nearby(&self, range: SlotRange) -> Vec<SlotRange> {
        self.ranges
            .iter()
            .filter(|r| r.range.overlaps(&range))
            .map(|r| r.range)
            .collect()
    }

    /// Every table that owns a range.
    pub fn owners(&self) -> Vec<String> {
        let mut out: Vec<String> = self.ranges.iter().map(|r| r.owner.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Splits the range `range` so that `at` is the first slot of the right part.
    ///
    /// Both parts keep the owner and epoch (ownership does not change). Refused when `range`
    /// is not exactly one entry, `at` is not inside it, or a move holds it.
    pub fn split(&self, range: SlotRange, at: u16) -> Result<Change, SlotError> {
        let entry = self.exact(range)?;
        if at <= range.first || at > range.last {
            return Err(SlotError::BadSplit { range, at });
        }
        busy(entry)?;
        let left = RangeEntry {
            range: SlotRange::new(range.first, at - 1)?,
            ..entry.clone()
        };
        let right = RangeEntry {
            range: SlotRange::new(at, range.last)?,
            ..entry.clone()
        };
        Ok(Change {
            from_version: self.version,
            edits: vec![
                Edit {
                    first: range.first,
                    before: Some(entry.clone()),
                    after: Some(left),
                },
                Edit {
                    first: at,
                    before: None,
                    after: Some(right),
                },
            ],
        })
    }

    /// Merges two adjacent ranges of one owner; the result carries the larger epoch.
    pub fn merge(&self, a: SlotRange, b: SlotRange) -> Result<Change, SlotError> {
        let (a, b) = if a.first <= b.first { (a, b) } else { (b, a) };
        let left = self.exact(a)?;
        let right = self.exact(b)?;
        if u32::from(a.last) + 1 != u32::from(b.first) {
            return Err(SlotError::NotAdjacent { a, b });
        }
        if left.owner != right.owner {
            return Err(SlotError::OwnersDiffer {
                a,
                b,
                owners: (left.owner.clone(), right.owner.clone()),
            });
        }
        busy(left)?;
        busy(right)?;
        let merged = RangeEntry::stable(
            SlotRange::new(a.first, b.last)?,
            left.owner.clone(),
            left.epoch.max(right.epoch),
        );
        Ok(Change {
            from_version: self.version,
            edits: vec![
                Edit {
                    first: a.first,
                    before: Some(left.clone()),
                    after: Some(merged),
                },
                Edit {
                    first: b.first,
                    before: Some(right.clone()),
                    after: None,
                },
            ],
        })
    }

    /// Splits so that `range` is exactly one entry (no-op edits when it already is). Refused
    /// when `range` crosses two entries.
    pub fn isolate(&self, range: SlotRange) -> Result<Option<Change>, SlotError> {
        let entry = self.entry_of(range.first);
        if !entry.range.covers(&range) {
            return Err(SlotError::UnknownRange {
                range,
                known: self.nearby(range),
            });
        }
        if entry.range == range {
            return Ok(None);
        }
        busy(entry)?;
        let mut pieces = vec![];
        if entry.range.first < range.first {
            pieces.push(SlotRange::new(entry.range.first, range.first - 1)?);
        }
        pieces.push(range);
        if range.last < entry.range.last {
            pieces.push(SlotRange::new(range.last + 1, entry.range.last)?);
        }
        let edits = pieces
            .into_iter()
            .map(|p| Edit {
                first: p.first,
                before: (p.first == entry.range.first).then(|| entry.clone()),
                after: Some(RangeEntry {
                    range: p,
                    ..entry.clone()
                }),
            })
            .collect();
        Ok(Some(Change {
            from_version: self.version,
            edits,
        }))
    }

    /// Marks the exact range `range` as held by move `move_id`.
    pub fn mark_moving(&self, range: SlotRange, move_id: &str) -> Result<Change, SlotError> {
        let entry = self.exact(range)?;
        busy(entry)?;
        Ok(self.replace(
            entry,
            RangeEntry {
                state: RangeState::Moving {
                    move_id: move_id.to_owned(),
                },
                ..entry.clone()
            },
        ))
    }

    /// Returns the exact range `range` to stable without changing its owner (abort).
    pub fn unmark(&self, range: SlotRange, move_id: &str) -> Result<Option<Change>, SlotError> {
        let entry = self.exact(range)?;
        match &entry.state {
            RangeState::Moving { move_id: m } if m == move_id => Ok(Some(self.replace(
                entry,
                RangeEntry {
                    state: RangeState::Stable,
                    ..entry.clone()
                },
            ))),
            _ => Ok(None),
        }
    }

    /// The flip: the range held by `move_id` goes to `to` at epoch + 1, stable.
    pub fn flip(&self, range: SlotRange, move_id: &str, to: &str) -> Result<Change, SlotError> {
        let entry = self.exact(range)?;
        match &entry.state {
            RangeState::Moving { move_id: m } if m == move_id => {}
            _ => {
                return Err(SlotError::NotMoving {
                    range,
                    move_id: move_id.to_owned(),
                });
            }
        }
        let epoch = entry.epoch.checked_add(1).ok_or(SlotError::EpochOverflow)?;
        Ok(self.replace(
            entry,
            RangeEntry {
                range,
                owner: to.to_owned(),
                epoch,
                state: RangeState::Stable,
            },
        ))
    }

    fn replace(&self, entry: &RangeEntry, after: RangeEntry) -> Change {
        Change {
            from_version: self.version,
            edits: vec![Edit {
                first: entry.range.first,
                before: Some(entry.clone()),
                after: Some(after),
            }],
        }
    }

    /// The map after `change`, or [`SlotError::Conflict`] when it was decided from another
    /// version or an edit's `before` no longer holds: what the directory table's transaction
    /// condition checks, as a pure function.
    pub fn apply(&self, change: &Change) -> Result<SlotMap, SlotError> {
        if change.from_version != self.version {
            return Err(SlotError::Conflict {
                expected: change.from_version,
                found: self.version,
            });
        }
        let mut ranges = self.ranges.clone();
        for edit in &change.edits {
            let pos = ranges.iter().position(|r| r.range.first == edit.first);
            match (&edit.before, pos) {
                (None, None) => {}
                (Some(b), Some(i)) if &ranges[i] == b => {}
                _ => {
                    return Err(SlotError::Conflict {
                        expected: change.from_version,
                        found: self.version,
                    });
                }
            }
            if let Some(i) = pos {
                ranges.remove(i);
            }
            if let Some(a) = &edit.after {
                ranges.push(a.clone());
            }
        }
        ranges.sort_by_key(|r| r.range.first);
        let next = SlotMap {
            version: self
                .version
                .checked_add(1)
                .ok_or(SlotError::EpochOverflow)?,
            ranges,
            ..self.clone()
        };
        next.validate()?;
        Ok(next)
    }
}

fn busy(entry: &RangeEntry) -> Result<(), SlotError> {
    match &entry.state {
        RangeState::Stable => Ok(()),
        RangeState::Moving { move_id } => Err(SlotError::Busy {
            range: entry.range,
            move_id: move_id.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::slot::SLOTS;
    use proptest::prelude::*;

    fn r(a: u16, b: u16) -> SlotRange {
        SlotRange::new(a, b).expect("range")
    }

    #[test]
    fn init_split_merge_round_trip() {
        let m = SlotMap::initial("t", 1_000, false);
        m.validate().expect("valid");
        let s = m
            .apply(&m.split(SlotRange::ALL, 8_192).expect("split"))
            .expect("apply");
        assert_eq!(s.version, 2);
        assert_eq!(s.ranges.len(), 2);
        assert_eq!(s.entry_of(8_191).range, r(0, 8_191));
        assert_eq!(s.entry_of(8_192).range, r(8_192, LAST_SLOT));
        let back = s
            .apply(&s.merge(r(8_192, LAST_SLOT), r(0, 8_191)).expect("merge"))
            .expect("apply");
        assert_eq!(back.ranges, m.ranges);
        assert_eq!(back.version, 3);
    }

    #[test]
    fn bad_requests_get_typed_errors_and_change_nothing() {
        let m = SlotMap::initial("t", 1_000, false);
        assert!(matches!(
            m.split(r(0, 10), 5),
            Err(SlotError::UnknownRange { .. })
        ));
        assert!(matches!(
            m.split(SlotRange::ALL, 0),
            Err(SlotError::BadSplit { .. })
        ));
        let s = m
            .apply(&m.split(SlotRange::ALL, 100).expect("split"))
            .expect("apply");
        assert!(matches!(
            s.merge(r(0, 99), r(0, 99)),
            Err(SlotError::NotAdjacent { .. })
        ));
        let moving = s
            .apply(&s.mark_moving(r(0, 99), "m1").expect("mark"))
            .expect("apply");
        assert!(matches!(
            moving.split(r(0, 99), 50),
            Err(SlotError::Busy { .. })
        ));
        assert!(matches!(
            moving.mark_moving(r(0, 99), "m2"),
            Err(SlotError::Busy { .. })
        ));
        let flipped = moving
            .apply(&moving.flip(r(0, 99), "m1", "u").expect("flip"))
            .expect("apply");
        assert_eq!(flipped.entry_of(0).epoch, 2);
        assert!(matches!(
            flipped.merge(r(0, 99), r(100, LAST_SLOT)),
            Err(SlotError::OwnersDiffer { .. })
        ));
        // A change decided from an old version is refused whole.
        let stale = m.split(SlotRange::ALL, 7).expect("split");
        assert!(matches!(s.apply(&stale), Err(SlotError::Conflict { .. })));
    }

    #[test]
    fn hand_edits_are_caught() {
        let mut m = SlotMap::initial("t", 1_000, false);
        m.ranges[0].range.last = 100;
        assert!(matches!(m.validate(), Err(SlotError::Corrupt { .. })));
        let mut m = SlotMap::initial("t", 1_000, false);
        m.ranges.push(RangeEntry::stable(r(5, 6), "u", 1));
        assert!(matches!(m.validate(), Err(SlotError::Corrupt { .. })));
    }

    #[test]
    fn isolate_carves_a_range_out_of_its_entry() {
        let m = SlotMap::initial("t", 1_000, false);
        let c = m.isolate(r(10, 20)).expect("isolate").expect("change");
        let n = m.apply(&c).expect("apply");
        assert_eq!(n.exact(r(10, 20)).expect("exact").owner, "t");
        assert_eq!(n.ranges.len(), 3);
        assert_eq!(n.isolate(r(10, 20)).expect("again"), None);
        assert!(n.isolate(r(5, 15)).is_err(), "crosses two entries");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Split(u16, u16),
        Merge(u16),
        Flip(u16, u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                (0..SLOTS, 0..SLOTS).prop_map(|(a, b)| Op::Split(a, b)),
                (0..SLOTS).prop_map(Op::Merge),
                (0..SLOTS, 0u8..3).prop_map(|(a, o)| Op::Flip(a, o)),
            ],
            1..40,
        )
    }

    proptest! {
        #[test]
        fn split_and_merge_keep_every_slot_in_exactly_one_range_and_owners_unchanged(ops in ops()) {
            let mut m = SlotMap::initial("t0", 1_000, false);
            for op in ops {
                let before = m.clone();
                let change = match op {
                    Op::Split(s, at) => m.split(m.entry_of(s).range, at),
                    Op::Merge(s) => {
                        let e = m.entry_of(s).range;
                        if e.last == LAST_SLOT { continue; }
                        m.merge(e, m.entry_of(e.last + 1).range)
                    }
                    Op::Flip(s, o) => {
                        let e = m.entry_of(s).range;
                        let marked = m.apply(&m.mark_moving(e, "mv").unwrap()).unwrap();
                        let flip = marked.flip(e, "mv", &format!("t{o}")).unwrap();
                        let after = marked.apply(&flip).unwrap();
                        prop_assert_eq!(after.entry_of(s).epoch, before.entry_of(s).epoch + 1);
                        m = after;
                        continue;
                    }
                };
                let Ok(change) = change else { continue };
                let after = m.apply(&change).unwrap();
                after.validate().unwrap();
                prop_assert_eq!(after.version, m.version + 1);
                for slot in (0..SLOTS).step_by(97).chain([0, LAST_SLOT]) {
                    // Split and merge never change who owns a slot, and never lower its epoch.
                    prop_assert_eq!(&after.entry_of(slot).owner, &m.entry_of(slot).owner);
                    prop_assert!(after.entry_of(slot).epoch >= m.entry_of(slot).epoch);
                }
                // Applying the same change twice is refused: it was decided from the old version.
                prop_assert!(after.apply(&change).is_err());
                m = after;
            }
        }
    }
}
