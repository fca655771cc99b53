//! Fence repair ([`repair_fences`], the library of `heatsink move repair-fences`): finds fence
//! items that refuse their own table's owner (orphans: an abort interrupted between its steps,
//! a hand edit) and tables that gave a slot away without one, and, asked to, fixes them
//! ([`heatsink_core::slots::fence::repair`] decides per slot).
//!
//! It never acts beside a running controller: while any move's lease runs it refuses with
//! [`MoveError::Held`], naming the holder. A range still marked moving is that move's business
//! even when nobody runs it (its fences are how it keeps writes out): it is listed in
//! [`FenceReport::moving`] with the command that finishes it, and none of its fences is
//! touched. Only a fence the rule proves orphan is removed: one on the range's owner that
//! refuses the owner's own epoch while no move holds the range (a move that flipped made
//! another table the owner; one that did not and finished removed its fence).
//!
//! It reads every fence item of every table the directory and the move history name
//! (BatchGetItem, 100 slots a call: 164 calls per table for all 16,384 slots). A removal is
//! conditional on the fence item being exactly as read (epoch, move and token), so a fence a
//! new move wrote in the meantime stays; a write is conditional on there being none.

use std::collections::{BTreeMap, BTreeSet};

use heatsink_core::slots::fence::{FenceRepair, repair};
use heatsink_core::slots::lease::running;
use heatsink_core::slots::{FenceItem, Phase, RangeState, SlotRange};
use serde::{Deserialize, Serialize};

use super::fence::{EPOCH_ATTR, MOVE_ATTR, TOKEN_ATTR, TableInfo, fence_item, read_fences};
use super::{MoveError, SlotDirectory};
use crate::ddb::{Condition, OnlyIf, Written, n, s};

/// One fence item found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceFix {
    /// The table holding (or missing) it.
    pub table: String,
    /// The slot.
    pub slot: u16,
    /// The fence item found (`None`: missing).
    pub found: Option<FenceItem>,
    /// What was (or would be) done: `remove` or `write`.
    pub action: String,
    /// Why, in words.
    pub why: String,
}

/// What [`repair_fences`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceReport {
    /// Tables read.
    pub tables: Vec<String>,
    /// Fence items read.
    pub fences: u64,
    /// What is wrong, one entry per slot and table.
    pub fixes: Vec<FenceFix>,
    /// Whether the fixes were applied.
    pub applied: bool,
    /// Ranges still marked moving (their fences left to their move), with the move.
    #[serde(default)]
    pub moving: Vec<MovingRange>,
}

/// A range a move still holds: [`repair_fences`] leaves its fences to that move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovingRange {
    /// The slots.
    pub slots: SlotRange,
    /// The move that marked them (`heatsink move resume ID` or `heatsink move abort ID`
    /// finishes it).
    pub move_id: String,
}

/// The tables that owned each slot at some point, from the move history (besides today's
/// owner): a source whose move flipped, a target whose move flipped (even if rolled back).
fn former_owners(records: &[super::record::MoveRecord]) -> Vec<(super::SlotRange, String)> {
    let mut out = vec![];
    for m in records {
        let flipped = m.phase.target_owns()
            || matches!(
                m.phase,
                Phase::RollbackFlipped | Phase::RollbackCleaning | Phase::RolledBack
            );
        if flipped {
            out.push((m.slots, m.from.clone()));
            out.push((m.slots, m.to.clone()));
        }
    }
    out
}

/// Checks every fence item of every table the directory `dir` names (see the module docs);
/// with `apply`, removes orphans and writes missing fences. Refused with [`MoveError::Held`]
/// while any move's lease runs.
pub async fn repair_fences(
    ddb: &aws_sdk_dynamodb::Client,
    dir: &SlotDirectory,
    apply: bool,
) -> Result<FenceReport, MoveError> {
    let list = dir.moves().await?;
    let leases = list.leases.iter().map(|(id, l)| (id.as_str(), l));
    if let Some(held) = running(leases, crate::clock::now_ms()) {
        return Err(held.into());
    }
    let map = dir.load().await?;
    let moves = list.records;
    let history = former_owners(&moves);
    let mut tables: BTreeSet<String> = map.owners().into_iter().collect();
    tables.extend(history.iter().map(|(_, t)| t.clone()));
    let mut report = FenceReport {
        tables: tables.iter().cloned().collect(),
        applied: apply,
        moving: map
            .ranges
            .iter()
            .filter_map(|e| match &e.state {
                RangeState::Moving { move_id } => Some(MovingRange {
                    slots: e.range,
                    move_id: move_id.clone(),
                }),
                RangeState::Stable => None,
            })
            .collect(),
        ..FenceReport::default()
    };
    for table in &tables {
        let info = match TableInfo::describe(ddb, table).await {
            Ok(i) => i,
            Err(MoveError::Aws(e)) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        for entry in &map.ranges {
            let fences: BTreeMap<u16, FenceItem> =
                read_fences(ddb, table, &info.keys, entry.range).await?;
            report.fences += fences.len() as u64;
            let moving = matches!(entry.state, RangeState::Moving { .. });
            for slot in entry.range.first..=entry.range.last {
                let fence = fences.get(&slot);
                if fence.is_none() && *table == entry.owner {
                    continue;
                }
                let owned_before = history.iter().any(|(r, t)| t == table && r.contains(slot));
                let fix = match repair(
                    table,
                    fence,
                    &entry.owner,
                    entry.epoch,
                    moving,
                    owned_before,
                ) {
                    FenceRepair::Keep => continue,
                    FenceRepair::Remove => FenceFix {
                        table: table.clone(),
                        slot,
                        found: fence.cloned(),
                        action: "remove".into(),
                        why: format!(
                            "it refuses the owner's writes ({table} owns slot {slot} at epoch {})",
                            entry.epoch
                        ),
                    },
                    FenceRepair::Write(f) => FenceFix {
                        table: table.clone(),
                        slot,
                        found: None,
                        action: format!("write (moved to {} at epoch {})", f.to, f.epoch),
                        why: format!(
                            "{table} gave slot {slot} away without a fence, so a stale router could still write there"
                        ),
                    },
                };
                if apply {
                    apply_fix(ddb, table, &info, &fix, &entry.owner, entry.epoch).await?;
                }
                report.fixes.push(fix);
            }
        }
    }
    Ok(report)
}

/// The condition that a fence item is still exactly `f` (its epoch, move and token): a fence
/// a move wrote after it was read is not removed.
fn unchanged(f: &FenceItem) -> Condition {
    let epoch = Condition::eq(EPOCH_ATTR, n(f.epoch));
    let by = match &f.move_id {
        Some(m) => Condition::eq(MOVE_ATTR, s(m)),
        None => Condition::not_exists(MOVE_ATTR),
    };
    let token = match f.token {
        Some(t) => Condition::eq(TOKEN_ATTR, n(t)),
        None => Condition::not_exists(TOKEN_ATTR),
    };
    epoch.and(by).and(token)
}

async fn apply_fix(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    info: &TableInfo,
    fix: &FenceFix,
    owner: &str,
    epoch: u64,
) -> Result<(), MoveError> {
    let res = match &fix.found {
        Some(f) => ddb
            .delete_item()
            .table_name(table)
            .set_key(Some(info.keys.fence_key(fix.slot)))
            .only_if(&unchanged(f))
            .send()
            .await
            .written("DeleteItem", table),
        None => {
            let fence = FenceItem {
                to: owner.to_owned(),
                epoch,
                move_id: None,
                token: None,
            };
            ddb.put_item()
                .table_name(table)
                .set_item(Some(fence_item(&info.keys, fix.slot, &fence)))
                .only_if(&Condition::not_exists("pk"))
                .send()
                .await
                .written("PutItem", table)
        }
    };
    // Refused: changed since it was read, whatever wrote it decided; leave it.
    res?;
    Ok(())
}
