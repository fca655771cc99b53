//! Live resharding on DynamoDB: the slot directory table, the router, the owner's fence, and
//! the mover.
//!
//! The decisions are pure and live in `heatsink_core::slots` (re-exported here): slots
//! ([`slot_of`]), the directory map ([`SlotMap`], a different thing from the hot-key
//! [`crate::hot::directory`]), the router's [`RetryRule`], the apply rule ([`apply::wins`]), the
//! mover's [`Phase`]s and the [`balance`] plan. This module carries them out:
//!
//! * [`SlotDirectory`]: the `slots` table (see [`crate::schema::Table::Slots`]): one item per
//!   range and one for the map (`pk = "dir"`), one per move (`pk = "move"`). Every change is one
//!   `TransactWriteItems` conditional on the map version and on each range item as it was read,
//!   so a split, merge or flip decided from an old map fails whole ([`MoveError::Conflict`]).
//!   Each range item carries a signature of its fields: an item edited by hand is reported as
//!   [`SlotError::Corrupt`], never guessed at.
//! * [`Router`]: caches the map for at most `max_age`, writes versioned items to their owner
//!   (plain or fenced, see below), turns MOVED answers into reload-and-retry with the
//!   [`RetryRule`]. Retries resend the same version, so they are safe to repeat.
//! * [`fence`]: the owner's slot table, one fence item per slot that left a table.
//! * `mover` (feature `streams`): the live move as a persisted state machine.
//!
//! In an **attrition** move (no copy, for TTL'd data) the router's reads of the move's slots
//! read the owner and the other table and keep the higher version, for as long as the move is
//! not aborted or rolled back (two GetItems per read; nothing ends it when the source's items
//! have expired). Writes go to the owner only, so after the flip they land on the target.
//!
//! # How an owner refuses
//!
//! Each owner table carries a **fence item** per slot that has left it; a **fenced** write is
//! `TransactWriteItems` = `ConditionCheck(fence item: attribute_not_exists(pk) OR (st = owned
//! AND ep <= :e))` + the versioned `Put`, and a refused one returns the fence item: the MOVED
//! answer (new owner, epoch). Routers write fenced on ranges marked *moving* and, in a
//! **strict** directory (`heatsink slots init --strict`), on every range; elsewhere a plain
//! `PutItem` (1 WCU). The protocol and its proof sketch are in `heatsink_core::slots`; in
//! short: the mover marks the range moving, waits `max_age` (so every router that honours it
//! writes fenced), copies and tails, writes the fence items (the pause begins), drains the
//! stream through the fence, and flips the directory to epoch + 1 (the pause ends). Strict mode
//! also refuses a router whose map is older than `max_age`, at twice the write cost.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::slots::MoveError> {
//! use std::time::Duration;
//! use heatsink::slots::{Router, SlotDirectory, SlotRange};
//!
//! let dir = SlotDirectory::new(ddb.clone(), "heatsink-shards");
//! dir.init("posts", Duration::from_secs(1), false).await?; // idempotent
//! let map = dir.load().await?;
//! let change = map.split(SlotRange::ALL, 8_192)?;
//! dir.commit(&change).await?; // one TransactWriteItems, conditional on version and epochs
//!
//! let router = Router::new(ddb, dir, Duration::from_secs(1));
//! let ack = router.put_versioned("post:{p9}", 1, Default::default()).await?;
//! println!("stored at {} epoch {}", ack.owner, ack.epoch);
//! # Ok(()) }
//! ```
//!
//! Limits: 16,384 slots; a change touches at most 3 range items; the router reads the whole
//! map (one Query) at most once per `max_age`; the fence writes one item per moved slot.

pub mod calls;
mod directory;
pub mod fence;
#[cfg(feature = "streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
pub mod mover;
pub mod record;
pub mod repair;
mod router;
pub mod verify;

pub use directory::{MOVE_PK, MoveList, SlotDirectory};
pub use heatsink_core::slots::*;
pub use router::{Ack, Router, RouterStats};

use crate::error::AwsError;
use heatsink_core::slots::lease::Held;

/// Errors of the slot directory, the router and the mover.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// A refusal of the pure directory logic (bad range, busy, hand-edited directory, …).
    #[error(transparent)]
    Shard(#[from] SlotError),
    /// A transition the move's phase does not allow; carries the recovery command.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// `slots init` has not run on this directory table.
    #[error("the slot directory {table} is empty; run `heatsink slots init --owner TABLE`")]
    NotInitialized {
        /// The directory table.
        table: String,
    },
    /// `slots init` on a directory that exists with another owner layout.
    #[error(
        "the slot directory {table} already exists (version {version}); nothing changed (see `heatsink slots status`)"
    )]
    AlreadyInitialized {
        /// The directory table.
        table: String,
        /// Its version.
        version: u64,
    },
    /// The directory changed between read and commit (another split, merge or move).
    #[error(
        "the slot directory {table} changed while this change was decided; nothing was written: reload and retry"
    )]
    Conflict {
        /// The directory table.
        table: String,
    },
    /// A transaction's extra item (the move record riding with a directory change) was
    /// refused: the record changed or another controller holds the move.
    #[error(
        "the move record in {table} changed while this change was written (another controller?); nothing was written: see `heatsink move status`"
    )]
    RecordRefused {
        /// The directory table.
        table: String,
    },
    /// A transaction collided with another one on the same items, or was throttled: nothing
    /// was written, and it may be sent again as it is.
    #[error("a transaction on {table} was cancelled ({reasons}); nothing was written: retry")]
    TransactionBusy {
        /// The table.
        table: String,
        /// The cancellation reasons, one per item.
        reasons: String,
    },
    /// Another controller runs this move (its lease has not ended).
    #[error(transparent)]
    Held(#[from] Held),
    /// This controller's lease was taken over while it ran: it stopped before its next write.
    #[error(
        "move {id}: another controller took the move over (lease token {token} is no longer current); this one stopped; see `heatsink move status {id}`"
    )]
    LeaseLost {
        /// The move.
        id: String,
        /// The token this controller held.
        token: u64,
    },
    /// A call kept failing (throttling, timeouts, unreachable) past the step's deadline.
    #[error(
        "move {id} stopped in phase {phase}: {cause} (retried for {waited_ms} ms); nothing unproven was deleted; next: {command}"
    )]
    Stalled {
        /// The move.
        id: String,
        /// Its phase.
        phase: &'static str,
        /// The last failure.
        cause: String,
        /// How long it was retried.
        waited_ms: u64,
        /// The command that continues the move.
        command: String,
    },
    /// The drain did not prove every stream shard read past the fence before its deadline.
    #[error(transparent)]
    Unproven(Box<Unproven>),
    /// An item of the moved slots has no numeric version `v` (the apply rule cannot order it).
    #[error(
        "move {id}: item {key} on {table} has no numeric version `v`, so the move cannot order its changes; write it through a router (which gives every item a `v`) or delete it, then run `heatsink move resume {id}` (or `heatsink move abort {id}`)"
    )]
    Unversioned {
        /// The move.
        id: String,
        /// The table it was read from.
        table: String,
        /// The item's key.
        key: String,
    },
    /// The fence write was refused: the range is no longer marked by this move (an abort).
    #[error(
        "move {id}: slots {slots} are no longer marked moving by this move (aborted?); nothing was fenced; see `heatsink move status {id}`"
    )]
    NotMarked {
        /// The move.
        id: String,
        /// The slots.
        slots: SlotRange,
    },
    /// An item or key the router cannot route.
    #[error("cannot route: {0}")]
    BadItem(String),
    /// A table the mover cannot use (wrong key schema, no stream, wrong stream view, …).
    #[error("table {table} cannot take part in a move: {reason}")]
    BadTable {
        /// The table.
        table: String,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// A move request the directory cannot take (to the current owner, two moves of a slot).
    #[error("{0}")]
    BadMove(String),
    /// The move does not exist.
    #[error("no move {id} in {table}; see `heatsink move list --json`")]
    NoSuchMove {
        /// The move id.
        id: String,
        /// The directory table.
        table: String,
    },
    /// The router gave up after its attempts (the write is not acknowledged).
    #[error(
        "write of {key:?} not acknowledged after {attempts} attempts (slot {slot} is moving or the owner is throttled); retry later"
    )]
    GaveUp {
        /// The key.
        key: String,
        /// Its slot.
        slot: u16,
        /// Attempts made.
        attempts: u32,
    },
    /// The router kept meeting transient failures (timeouts, throttling, an unreachable
    /// owner) until its retry deadline ([`RetryRule::deadline`]): the write may or may not be
    /// stored, and is not acknowledged.
    #[error(
        "write of {key:?} (slot {slot}) not acknowledged after {attempts} attempts in {waited_ms} ms: {cause}; it may or may not be stored: send it again (a retry of the same version is never stored twice)"
    )]
    Unanswered {
        /// The key.
        key: String,
        /// Its slot.
        slot: u16,
        /// Attempts made.
        attempts: u32,
        /// How long the write was retried.
        waited_ms: u64,
        /// The last failure.
        cause: String,
    },
    /// The recorded stream position is past the stream's 24-hour retention.
    #[error(
        "move {id}: the recorded stream position on {shard} is past retention (TrimmedDataAccess); the copy cannot resume: run `heatsink move abort {id}` and start the move again"
    )]
    PositionExpired {
        /// The move.
        id: String,
        /// The stream shard.
        shard: String,
    },
    /// The diff found differences that did not clear after catching up again.
    #[error(
        "move {id}: the diff found {missing} missing, {extra} extra and {mismatched} mismatched items (samples {samples:?}); nothing was fenced: run `heatsink move resume {id}` to diff again or `heatsink move abort {id}`"
    )]
    DiffFailed {
        /// The move.
        id: String,
        /// Items on the source and not the target.
        missing: u64,
        /// Items on the target and not the source.
        extra: u64,
        /// Items that differ.
        mismatched: u64,
        /// Sample keys.
        samples: Vec<String>,
    },
    /// A stored move record is not readable (edited by hand?).
    #[error("move record {id} is malformed: {reason}")]
    Malformed {
        /// The move id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// DynamoDB or DynamoDB Streams refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl MoveError {
    /// Worth retrying after a pause: throttling, a timeout, an unreachable endpoint, a
    /// transaction that collided with another.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Aws(e) => e.is_transient(),
            Self::TransactionBusy { .. } => true,
            _ => false,
        }
    }
}

/// A drain that did not prove, within its deadline, that every stream shard was read past the
/// fence ([`MoveError::Unproven`]): nothing was flipped or deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "move {id} stopped in phase {phase}: no proof within {waited_ms} ms that the tail read past the fence on stream shards {shards:?} of {table}; nothing was deleted or flipped and the slots stay fenced (writes to them are refused); next: {command} to keep draining, or heatsink move {undo} {id} to give the slots back to {table}"
)]
pub struct Unproven {
    /// The move.
    pub id: String,
    /// Its phase.
    pub phase: &'static str,
    /// The table whose stream was drained.
    pub table: String,
    /// The shards still owing proof.
    pub shards: Vec<String>,
    /// How long the drain ran.
    pub waited_ms: u64,
    /// The command that continues the drain.
    pub command: String,
    /// `abort` or `rollback`: the way back.
    pub undo: &'static str,
}
