//! The check behind `heatsink slots verify`: was every acknowledged write kept?
//!
//! A load of versioned writes (`heatsink_sim::load::run_load`, `heatsink slots load`) logs each
//! acknowledged write as an [`AckLine`] (what `--ack-log` appends). [`verify`] reads every
//! acknowledged key back through a freshly loaded map and checks it is at or above the
//! acknowledged version, and that no slot has two tables accepting writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

#[cfg(feature = "streams")]
use heatsink_core::slots::Phase;
use heatsink_core::slots::admits;
use serde::{Deserialize, Serialize};

use super::fence::{TableInfo, read_fence};
use super::{MoveError, Router};

/// One acknowledged write, as `slots load --ack-log` writes it (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckLine {
    /// The key.
    pub key: String,
    /// The version acknowledged.
    pub version: u64,
    /// The table that acknowledged it.
    pub owner: String,
    /// The epoch it was owned at.
    pub epoch: u64,
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Keys checked.
    pub keys: u64,
    /// Acknowledged writes in the log.
    pub acked: u64,
    /// Keys read back below their acknowledged version (lost writes), with samples.
    pub lost: u64,
    /// Up to 10 lost keys: `key acked=N found=M`.
    pub lost_samples: Vec<String>,
    /// Slots where two tables would accept writes.
    pub double_owned: Vec<u16>,
}

impl VerifyReport {
    /// Nothing lost and no slot with two owners.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.double_owned.is_empty()
    }
}

/// Checks `acks` against the tables (through `router`, with a freshly loaded map).
pub async fn verify(router: &Router, acks: &[AckLine]) -> Result<VerifyReport, MoveError> {
    router.invalidate().await;
    let map = router.map().await?;
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by: HashMap<(&str, u64), &AckLine> = HashMap::new();
    for a in acks {
        let e = want.entry(a.key.as_str()).or_insert(0);
        *e = (*e).max(a.version);
        by.insert((a.key.as_str(), a.version), a);
    }
    let mut report = VerifyReport {
        keys: want.len() as u64,
        acked: acks.len() as u64,
        ..Default::default()
    };
    for (key, v) in &want {
        let (read_from, item) = router.get_key(key).await?;
        let found = item
            .as_ref()
            .and_then(|i| i.get("v"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if found.is_none_or(|f| f < *v) {
            report.lost += 1;
            if report.lost_samples.len() < 10 {
                let at = by
                    .get(&(*key, *v))
                    .map(|a| format!("{} epoch {}", a.owner, a.epoch));
                report.lost_samples.push(format!(
                    "{key} acked={v} by {} found={found:?} on {read_from}",
                    at.unwrap_or_default()
                ));
            }
        }
    }
    // Every table that gave a slot away must refuse it (its fence item) to every map that named
    // it, and its owner must not. A table gave the slot away at the flip to epoch E (a move's
    // epoch + 1, a rollback's + 2): the maps that named it are older than E. A slot moved on
    // again (a to b to c) leaves a's fence at b's epoch, which is enough: no map names a after.
    #[cfg_attr(not(feature = "streams"), allow(unused_mut))]
    let mut gave_away: BTreeMap<u16, BTreeMap<String, u64>> = BTreeMap::new();
    #[cfg(feature = "streams")]
    for m in router.directory().moves().await?.records {
        let loser = match m.phase {
            p if p.target_owns() => Some((m.from.clone(), m.epoch.saturating_add(1))),
            Phase::RollbackFlipped | Phase::RollbackCleaning | Phase::RolledBack => {
                Some((m.to.clone(), m.epoch.saturating_add(2)))
            }
            _ => None,
        };
        if let Some((t, flipped_at)) = loser {
            for slot in want
                .keys()
                .map(|k| map.slot_of(k))
                .filter(|s| m.slots.contains(*s))
            {
                let at = gave_away
                    .entry(slot)
                    .or_default()
                    .entry(t.clone())
                    .or_insert(0);
                *at = (*at).max(flipped_at);
            }
        }
    }
    let mut infos: HashMap<String, TableInfo> = HashMap::new();
    let slots: BTreeSet<u16> = want.keys().map(|k| map.slot_of(k)).collect();
    for slot in slots {
        let owner = map.entry_of(slot).owner.clone();
        let epoch = map.entry_of(slot).epoch;
        let mut tables: Vec<(String, u64)> = gave_away
            .get(&slot)
            .map(|s| s.iter().map(|(t, e)| (t.clone(), *e)).collect())
            .unwrap_or_default();
        tables.retain(|(t, _)| *t != owner);
        tables.push((owner.clone(), epoch));
        for (t, at) in tables {
            if !infos.contains_key(&t) {
                infos.insert(
                    t.clone(),
                    TableInfo::describe(router_client(router), &t).await?,
                );
            }
            let keys = &infos[&t].keys;
            let fence = read_fence(router_client(router), &t, keys, slot).await?;
            // The owner must take writes at its epoch; a table that gave the slot away must
            // refuse every map that named it (all older than the flip that took it away).
            let accepts = if t == owner {
                admits(fence.as_ref(), epoch)
            } else {
                admits(fence.as_ref(), at.saturating_sub(1))
            };
            if (t == owner) != accepts && !report.double_owned.contains(&slot) {
                report.double_owned.push(slot);
            }
        }
    }
    Ok(report)
}

fn router_client(router: &Router) -> &aws_sdk_dynamodb::Client {
    router.directory().client()
}
