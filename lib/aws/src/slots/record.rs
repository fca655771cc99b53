//! The persisted state of a live move: one item per move in the directory table (`pk = "move"`,
//! `sk` = the move id, the record as JSON in `record`).
//!
//! These types are always built: routers read attrition moves from them and `slots verify`
//! reports moves in flight without the mover (feature `streams`) being compiled.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::slots::{MoveMode, Phase, SlotRange};
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
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            rcu_per_sec: 1_000.0,
            wcu_per_sec: 1_000.0,
            segments: 4,
            soak: Duration::from_secs(5),
            lag_target: Duration::from_secs(1),
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

/// A tail's checkpoint: one position per stream shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    /// The stream.
    pub stream_arn: String,
    /// Shard id → position. A shard not listed is read from its trim horizon.
    pub shards: BTreeMap<String, ShardPos>,
    /// The fence records of this tail's drain were seen: one for every slot of the range.
    pub fence_seen: bool,
    /// The slots whose fence records this tail has seen so far.
    #[serde(default)]
    pub fence_slots: BTreeSet<u16>,
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
