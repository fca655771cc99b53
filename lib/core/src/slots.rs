//! Slots and the slot directory: which table owns a key, and how ownership changes safely.
//!
//! (Not to be confused with the *hot-key* directory, [`crate::hot`]: that one says which keys
//! to salt or cache. This one, the [`SlotMap`], says which table owns each slot.)
//!
//! # Key → slot → owner
//!
//! A key maps to one of 16,384 slots with the Redis Cluster function: CRC16/XMODEM of its hash
//! tag (the text inside the first non-empty `{…}`, else the whole key), mod 16,384 — or, in a
//! directory of ordered keying ([`Keying::Ordered`]), by the tag's own order, so a slot range
//! is a key interval (time buckets, geo cells). The slot of a key never changes. The [`SlotMap`] maps contiguous slot ranges to an owner table;
//! each range has an **epoch** (+1 each time it changes owner: the fencing token of its slots)
//! and the map has a **version** (+1 with every committed change).
//!
//! ```
//! use heatsink_core::slots::{slot_of, SlotMap, SlotRange};
//!
//! assert_eq!(slot_of("post:{p9}"), 12_067);
//! assert_eq!(slot_of("likes:{p9}:r0"), 12_067); // same tag, same slot, same owner
//! let map = SlotMap::initial("posts", 1_000, false);
//! let split = map.split(SlotRange::ALL, 8_192)?; // a Change, decided from version 1
//! let map = map.apply(&split)?;
//! assert_eq!(map.entry_of(12_067).range, SlotRange::new(8_192, 16_383)?);
//! assert!(map.apply(&split).is_err()); // decided from version 1; the map is at 2
//! # Ok::<(), heatsink_core::slots::SlotError>(())
//! ```
//!
//! # How an owner refuses a write (the protocol)
//!
//! DynamoDB has no server-side slot table, so each owner table carries one: a **fence item**
//! per slot that has left it (`pk = "#heatsink/slot/<slot>"`, holding `st = moved`, the epoch
//! and the new owner). A router writes a key of slot *s* to the owner *O* its map names, at the
//! epoch *e* its map gives, in one of two ways:
//!
//! * **plain** (a stable range of a default directory): `PutItem` with the version condition
//!   `attribute_not_exists(v) OR v < :v` (1 WCU);
//! * **fenced** (a range marked *moving*, or every range of a *strict* directory):
//!   `TransactWriteItems` = `ConditionCheck` on *O*'s fence item of *s*
//!   (`attribute_not_exists(pk) OR (st = owned AND ep <= :e)`) + the same `Put` (2 WCU + the
//!   check). A refusal returns the fence item, i.e. the MOVED answer: slot, new owner, epoch.
//!
//! A move of range *R* from *S* to *T* (directory version *v*, epoch *e*):
//!
//! 1. mark *R* moving (version *v+1*); wait the directory's `max_age` so every router that
//!    honours it writes *R* fenced;
//! 2. copy and tail (see [`apply`]) until *T* is within the lag target;
//! 3. **fence**: write *S*'s fence items for every slot of *R* (`moved → T, epoch e+1`). From
//!    here *S* refuses every fenced write of *R*: routers back off and reload;
//! 4. drain *S*'s stream into *T* until the fence record of every slot of *R* has been read
//!    (on a stream shard, each write *S* acknowledged for a slot precedes that slot's fence
//!    record, so it has been applied);
//! 5. **flip**: one transaction, conditional on version and epoch: *R* → *T* at epoch *e+1*;
//!    record *T*'s stream position for reverse replication;
//! 6. routers reload (on MOVED, or when their map ages out) and write to *T*.
//!
//! **Proof sketch (no acknowledged write lost).** A write acknowledged by *S* committed before
//! the fence items (a fenced write and the fence write serialize on the fence item; a plain
//! write of *R* can only come from a router whose map is older than the mark, and step 1 waited
//! until no such map is in use). So it is in *S*'s stream before the fence records, and step 4
//! applied it to *T* before step 5. A write acknowledged by *T* happened after the flip. The
//! apply rule keeps the highest version whatever the order, so neither overwrites the other.
//! Exactly one table accepts writes to *s* at any time: before step 3 only *S* (nobody routes
//! to *T*), between 3 and 5 nobody (the pause), after 5 only *T* (*S*'s fence is permanent).
//!
//! **Limits.** Default mode trusts routers to honour `max_age`: a router that checks its map's
//! age and is then paused for longer than the wait before writing could write *R* plain after
//! the fence. A **strict** directory closes that hole: every write is fenced, so even a router
//! with a map of any age is refused by *S* after step 3, at twice the write cost. The pause
//! (step 3 to step 5) is the fence write, persisting the phase, the drain and the flip: the
//! mover reads *T*'s stream position and the map before the fence, so nothing else is in it
//! (20–170 ms on the local dynoxide lane). A router bounced by the fence polls the directory
//! every [`RetryRule::moved_cap`] (10 ms), so it writes to *T* at most that long after the
//! flip. Reads are not fenced: a router whose map is up to `max_age` old reads the old owner.
//!
//! Pure parts here: [`slot_of`], [`Keying`] and [`SlotRange`], the [`SlotMap`] and its [`Change`]s, the
//! router's [`RetryRule`], the [`apply`] rule, the mover's [`Phase`]s, and the [`balance`] plan.
//! The DynamoDB adapters are `heatsink::slots`.

pub mod apply;
/// The mover's retry rule: the one backoff of [`crate::backoff`].
pub use crate::backoff;
pub mod balance;
pub mod fence;
mod keying;
pub mod lease;
mod map;
mod phase;
pub mod proof;
mod route;
mod slot;
pub mod tail;

pub use fence::{FenceItem, admits};
pub use keying::Keying;
pub use map::{Change, Edit, RangeEntry, RangeState, SlotMap};
pub use phase::{
    Delete, Evidence, MoveMode, Path, Phase, Refusal, Side, Way, check_abort, check_resume,
    check_rollback, may_delete,
};
pub use route::{Answer, Next, RetryRule};
pub use slot::{LAST_SLOT, SLOTS, SlotRange, hash_tag, slot_of};

/// Refusals of the pure directory logic: each says what was wrong and nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// Not a keying, or an alphabet that orders nothing ([`Keying`]).
    #[error("{0}")]
    Keying(String),
    /// Not a slot range (`first > last`, or past slot 16,383).
    #[error("{first}-{last} is not a slot range (0-16383, first <= last)")]
    BadRange {
        /// First slot asked for.
        first: u16,
        /// Last slot asked for.
        last: u16,
    },
    /// Text that is not `A-B`.
    #[error("{0:?} is not a slot range like 100-200")]
    Parse(String),
    /// The range is not one entry of the directory.
    #[error(
        "{range} is not a range of the directory (ranges there: {known:?}); see `heatsink slots status`"
    )]
    UnknownRange {
        /// What was asked for.
        range: SlotRange,
        /// The directory's ranges overlapping it.
        known: Vec<SlotRange>,
    },
    /// The split point is not inside the range.
    #[error("cannot split {range} at {at}: the split slot must be in {}..={}", range.first + 1, range.last)]
    BadSplit {
        /// The range.
        range: SlotRange,
        /// The slot asked for.
        at: u16,
    },
    /// Merge of ranges that do not touch.
    #[error("{a} and {b} are not adjacent")]
    NotAdjacent {
        /// First range.
        a: SlotRange,
        /// Second range.
        b: SlotRange,
    },
    /// Merge of ranges of different owners.
    #[error("{a} and {b} have different owners ({} and {}): move one first", owners.0, owners.1)]
    OwnersDiffer {
        /// First range.
        a: SlotRange,
        /// Second range.
        b: SlotRange,
        /// Their owners.
        owners: (String, String),
    },
    /// A move holds the range.
    #[error("{range} is held by move {move_id}; finish it or run `heatsink move abort {move_id}`")]
    Busy {
        /// The range.
        range: SlotRange,
        /// The move.
        move_id: String,
    },
    /// The range is not held by this move.
    #[error("{range} is not marked moving by move {move_id}")]
    NotMoving {
        /// The range.
        range: SlotRange,
        /// The move.
        move_id: String,
    },
    /// The change was decided from another version, or a range changed under it.
    #[error(
        "the directory changed (change decided from version {expected}, directory at {found}): reload and decide again"
    )]
    Conflict {
        /// The version the change was decided from.
        expected: u64,
        /// The version found.
        found: u64,
    },
    /// The stored directory breaks an invariant (edited by hand?).
    #[error(
        "the slot directory is inconsistent: {detail} (edited by hand? restore it from `heatsink slots status --json` output)"
    )]
    Corrupt {
        /// The first broken invariant.
        detail: String,
    },
    /// An epoch or version at `u64::MAX`.
    #[error("epoch or version overflow")]
    EpochOverflow,
}
