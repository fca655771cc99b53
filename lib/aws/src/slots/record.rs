//! The persisted state of a live move: one item per move in the directory table (`pk = "move"`,
//! `sk` = the move id, the record as JSON in `record`).
//!
//! These types are always built: routers read attrition moves from them and `slots verify`
//! reports moves in flight without the mover (feature `streams`) being compiled.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::slots::{Keying, MoveMode, Phase, SlotRange};
use serde::{Deserialize, Serialize};

use super::MoveError;

/// Rates and targets of one move.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Read capacity the copy and the diff may use per second.
    pub rcu_per_sec: f64,
    /// Write capacity the copy and the cleanup may use per second.
    pub wcu_per_sec: f64,
    /// Parallel Scan segments.
    pub segments: u32,
    /// How long after the flip both tails run before the source copy is deleted.
    pub soak: Duration,
    /// The tail is caught up when it is at the head of every shard and its newest record is
    /// at most this old.
    pub lag_target: Duration,
    /// Before the copy, raise the target's warm throughput to at least the source's and the
    /// copy's rates (`UpdateTable`; AWS bills the raise once and never lowers it again).
    #[serde(default)]
    pub prewarm: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            rcu_per_sec: 1_000.0,
            wcu_per_sec: 1_000.0,
            segments: 4,
            soak: Duration::from_secs(5),
            lag_target: Duration::from_secs(1),
            prewarm: false,
        }
    }
}

/// Where the tail of one stream shard is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPos {
    /// The iterator to read next, if fresh.
    pub iterator: Option<String>,
    /// When `iterator` was issued.
    pub iterator_ms: u64,
    /// The last sequence number applied.
    pub after_seq: Option<String>,
    /// The shard is closed and read to its end.
    pub closed: bool,
}

/// A tail's checkpoint: one position per stream shard, and what its last drain proved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    /// The stream.
    pub stream_arn: String,
    /// Shard id → position. A shard not listed is read from its trim horizon.
    pub shards: BTreeMap<String, ShardPos>,
    /// This tail's drain proved every shard read past the fence (the flip needs it).
    pub fence_seen: bool,
    /// The slots whose fence records (of the proving attempt) this tail's drain read.
    #[serde(default)]
    pub fence_slots: BTreeSet<u16>,
    /// The token of the fence attempt whose drain proved every shard read past it.
    #[serde(default)]
    pub proven: Option<u64>,
    /// The shards that still owed proof when the last drain stopped without it.
    #[serde(default)]
    pub unproven: Vec<String>,
    /// Marker items written after this tail's fences: attempt token → how many (deleted
    /// after the flip).
    #[serde(default)]
    pub markers: BTreeMap<u64, u64>,
    /// Stream records read by this tail (every record, of any slot).
    #[serde(default)]
    pub read: u64,
}

impl Tail {
    /// Shards read to their end.
    pub fn closed_shards(&self) -> usize {
        self.shards.values().filter(|p| p.closed).count()
    }
}

/// What the diff found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffReport {
    /// Items of the slots on the source.
    pub source_items: u64,
    /// Items of the slots on the target (tombstones excluded).
    pub target_items: u64,
    /// On the source, not on the target.
    pub missing: u64,
    /// On the target, not on the source.
    pub extra: u64,
    /// On both, different.
    pub mismatched: u64,
    /// Up to 5 keys of each kind.
    pub samples: Vec<String>,
    /// Compare rounds (differences are re-read after catching up).
    pub rounds: u32,
}

impl DiffReport {
    /// No differences.
    pub fn clean(&self) -> bool {
        self.missing == 0 && self.extra == 0 && self.mismatched == 0
    }
}

/// The persisted state of one move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// The move id (`mv-<ms>-<hex>`).
    pub id: String,
    /// The slots.
    pub slots: SlotRange,
    /// The source table.
    pub from: String,
    /// The target table.
    pub to: String,
    /// Copy or attrition.
    pub mode: MoveMode,
    /// The directory was strict.
    pub strict: bool,
    /// The directory's keying (how a key becomes a slot), fixed at `slots init`.
    #[serde(default)]
    pub keying: Keying,
    /// Where the move is.
    pub phase: Phase,
    /// The range's epoch when the move started (the flip makes it `epoch + 1`).
    pub epoch: u64,
    /// When the range was marked moving (ms).
    pub marked_ms: u64,
    /// The directory's `max_age_ms` at the mark.
    pub max_age_ms: u64,
    /// Rates.
    pub budget: Budget,
    /// The forward tail (source → target).
    pub forward: Tail,
    /// The reverse tail (target → source), recorded before the flip.
    pub reverse: Option<Tail>,
    /// Scan checkpoints per segment (`None` with `scan_done` false: not started).
    pub scan: Vec<Option<String>>,
    /// Segments finished.
    pub scan_done: Vec<bool>,
    /// Items written by the copy.
    pub copied: u64,
    /// Stream records applied (forward and reverse).
    pub applied: u64,
    /// Stream records and rows the apply rule skipped (older or repeated).
    pub skipped: u64,
    /// RCU consumed by scans (as reported, or estimated at 0.5 per item).
    pub rcu: f64,
    /// WCU used by writes (1 per item written).
    pub wcu: f64,
    /// The diff.
    pub diff: Option<DiffReport>,
    /// Phase → milliseconds spent reaching it.
    pub phase_ms: BTreeMap<String, u64>,
    /// When the fence items were written.
    pub fenced_ms: Option<u64>,
    /// Fence → flip committed, ms: the window in which the slots take no writes.
    pub pause_ms: Option<u64>,
    /// Where the pause went, ms: `fence` (writing the fence items), `save` (persisting the
    /// fenced phase), `drain` (the stream through the fence records), `flip` (the directory
    /// transaction).
    #[serde(default)]
    pub pause_parts_ms: BTreeMap<String, u64>,
    /// Items deleted by cleanup, abort or rollback.
    pub cleaned: u64,
    /// The catch-up lag when the tail stopped (ms behind the newest record).
    pub lag_ms: Option<u64>,
    /// Record revision (conditional saves).
    pub rev: u64,
    /// Created (ms).
    pub created_ms: u64,
    /// When the wait after the mark ends (ms): `max_age` after the mark committed. Saved in
    /// the mark's own transaction (bounded by the transaction's timeout), then tightened to
    /// `max_age` after the moment the transaction returned.
    #[serde(default)]
    pub ready_ms: u64,
    /// The rollback's own timings, once a rollback has begun.
    #[serde(default)]
    pub rollback: Option<RollbackTimes>,
    /// Attempts of the fence (each a lease token; the drain counts only the last one's
    /// fence and marker records).
    #[serde(default)]
    pub fence_tokens: Vec<u64>,
    /// Tables an earlier attrition move left items of the slots on (still read by routers):
    /// the copy carries their items along, and cleanup deletes them with the source's.
    #[serde(default)]
    pub carried: Vec<String>,
}

/// When a rollback marked, fenced and flipped back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackTimes {
    /// The range was marked moving on the target (ms).
    pub marked_ms: u64,
    /// The wait after that mark ends (ms), saved with the mark.
    pub ready_ms: u64,
    /// The target's fence items were written (ms).
    pub fenced_ms: Option<u64>,
    /// Fence → flip back, ms.
    pub pause_ms: Option<u64>,
    /// Where that pause went, ms.
    #[serde(default)]
    pub pause_parts_ms: BTreeMap<String, u64>,
}

impl MoveRecord {
    /// The one-line JSON summary `move start` ends with.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id, "slots": self.slots.to_string(), "from": self.from, "to": self.to,
            "mode": self.mode, "phase": self.phase.name(), "phase_ms": self.phase_ms,
            "copied": self.copied, "applied": self.applied, "skipped": self.skipped,
            "diff": self.diff, "pause_ms": self.pause_ms, "pause_parts_ms": self.pause_parts_ms,
            "lag_ms": self.lag_ms,
            "rcu": self.rcu, "wcu": self.wcu, "cleaned": self.cleaned,
        })
    }
}

/// The tables besides `owner` that hold items of `slot` a reader must also read: the sources
/// of the unbroken chain of attrition moves that brought the slot to `owner` (newest first),
/// each of which copied nothing. A copy move ends the chain (it copied, and carried, every
/// item); moves that never flipped, or were rolled back, do not count.
pub fn attrition_chain(records: &[MoveRecord], slot: u16, owner: &str) -> Vec<String> {
    let mut effective: Vec<&MoveRecord> = records
        .iter()
        .filter(|m| m.slots.contains(slot) && m.phase.target_owns())
        .collect();
    effective.sort_by_key(|m| std::cmp::Reverse(m.created_ms));
    let mut table = owner;
    let mut out = vec![];
    for m in effective {
        if m.to != table {
            continue;
        }
        if m.mode == MoveMode::Copy {
            break;
        }
        if !out.contains(&m.from) && m.from != owner {
            out.push(m.from.clone());
        }
        table = &m.from;
    }
    out
}

/// Reads one stored move item: the record's JSON, checked against the item's `sk`.
pub(crate) fn parse_record(
    item: &HashMap<String, AttributeValue>,
) -> Result<MoveRecord, MoveError> {
    let id = item
        .get("sk")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let json = item
        .get("record")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| MoveError::Malformed {
            id: id.clone(),
            reason: "no record attribute".into(),
        })?;
    serde_json::from_str(json).map_err(|e| MoveError::Malformed {
        id,
        reason: e.to_string(),
    })
}
