//! Fence items: how an owner table refuses writes of a slot that left it, by epoch.
//!
//! When a slot leaves table `X` at epoch `e` (the new owner holds it at `e`), the mover writes
//! on `X` a fence item saying so ([`FenceItem`]: to whom, at which epoch, and the move and token
//! that wrote it). A fenced write routed to `X` with the epoch its map gives ([`admits`]) is
//! accepted only while no fence item says the slot left `X` at that epoch or later. Because
//! every flip raises the epoch, a range can come back to a table and leave again: after
//! `A → B → A` the fence on `A` (left at 2) admits `A`'s writes at epoch 3 and still refuses a
//! router whose map says `A` at 1. No fence has to be removed for ownership to return, so none
//! is removed on the way (removing one would let an ancient map write again).
//!
//! A fence item that refuses its own table's owner (an abort interrupted between its steps, a
//! hand edit) is an **orphan**; a table that gave a slot away without a fence refuses nothing.
//! [`repair`] says what `heatsink::slots::repair::repair_fences` (`heatsink move repair-fences`)
//! does about each.

use serde::{Deserialize, Serialize};

/// A fence item: the slot left this table for `to`, which owns it at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FenceItem {
    /// The table the slot went to.
    pub to: String,
    /// The epoch it is owned at there.
    pub epoch: u64,
    /// The move that wrote it (absent on items written before moves recorded it).
    #[serde(default)]
    pub move_id: Option<String>,
    /// The token of that move's attempt (its lease token when it fenced).
    #[serde(default)]
    pub token: Option<u64>,
}

/// Whether a table whose fence item for a slot is `fence` accepts a write routed to it at
/// `epoch` (the epoch of the router's map): only when no fence says the slot left at `epoch`
/// or later. The owner's condition expression: `attribute_not_exists(pk) OR ep < :e`.
pub fn admits(fence: Option<&FenceItem>, epoch: u64) -> bool {
    fence.is_none_or(|f| f.epoch < epoch)
}

/// What to do about one table's fence item of one slot ([`repair`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FenceRepair {
    /// Right as it is.
    Keep,
    /// An orphan that refuses the slot's owner: delete it (conditional on it being unchanged).
    Remove,
    /// The table gave the slot away and refuses nothing: write this fence.
    Write(FenceItem),
}

/// What `table`'s fence item `fence` of a slot needs, given the directory's entry for the slot
/// (`owner` at `epoch`, `moving` when a move holds the range: its fences are its own business)
/// and whether `table` owned the slot before (a move history names it).
pub fn repair(
    table: &str,
    fence: Option<&FenceItem>,
    owner: &str,
    epoch: u64,
    moving: bool,
    owned_before: bool,
) -> FenceRepair {
    if moving {
        return FenceRepair::Keep;
    }
    if table == owner {
        return if admits(fence, epoch) {
            FenceRepair::Keep
        } else {
            FenceRepair::Remove
        };
    }
    match fence {
        None if owned_before => FenceRepair::Write(FenceItem {
            to: owner.to_owned(),
            epoch,
            move_id: None,
            token: None,
        }),
        _ => FenceRepair::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn fence(to: &str, epoch: u64) -> FenceItem {
        FenceItem {
            to: to.into(),
            epoch,
            move_id: Some("m".into()),
            token: Some(1),
        }
    }

    #[test]
    fn a_range_that_comes_back_is_accepted_at_its_new_epoch_and_refused_at_the_old_one() {
        // A → B (epoch 2) → A (epoch 3): A's fence says the slot left at 2.
        let on_a = fence("b", 2);
        assert!(!admits(Some(&on_a), 1), "a map from before the first move");
        assert!(admits(Some(&on_a), 3), "the owner again at 3");
        let on_b = fence("a", 3);
        assert!(!admits(Some(&on_b), 2), "B's own old epoch");
        assert!(admits(None, 1));
        assert_eq!(
            repair("a", Some(&on_a), "a", 3, false, true),
            FenceRepair::Keep
        );
        // An abort that left its fence: A owns at 1 and its fence refuses it.
        assert_eq!(
            repair("a", Some(&on_a), "a", 1, false, true),
            FenceRepair::Remove
        );
        assert_eq!(
            repair("a", Some(&on_a), "a", 1, true, true),
            FenceRepair::Keep,
            "a move in flight owns its fence"
        );
        assert!(matches!(
            repair("b", None, "a", 3, false, true),
            FenceRepair::Write(f) if f.to == "a" && f.epoch == 3
        ));
    }

    /// One slot moving between tables `t0..t3` by flips (each fencing the table it leaves at
    /// the new epoch), rollbacks (the same, back), aborts (a fence written then removed, or
    /// left behind when `crash`) and merges that raise the epoch. Every (owner, epoch) pair
    /// that was ever current is a map some router may still hold.
    #[derive(Debug, Clone)]
    enum Op {
        Move { to: u8 },
        Abort { to: u8, crash: bool },
        Merge { raise: u8 },
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                (0u8..4).prop_map(|to| Op::Move { to }),
                (0u8..4, any::<bool>()).prop_map(|(to, crash)| Op::Abort { to, crash }),
                (1u8..3).prop_map(|raise| Op::Merge { raise }),
            ],
            0..30,
        )
    }

    struct Slot {
        owner: String,
        epoch: u64,
        fences: BTreeMap<String, FenceItem>,
        maps: BTreeSet<(String, u64)>,
        owners: BTreeSet<String>,
    }

    impl Slot {
        fn run(ops: &[Op]) -> Slot {
            let mut s = Slot {
                owner: "t0".into(),
                epoch: 1,
                fences: BTreeMap::new(),
                maps: BTreeSet::from([("t0".to_owned(), 1)]),
                owners: BTreeSet::from(["t0".to_owned()]),
            };
            for op in ops {
                match op {
                    Op::Move { to } => {
                        let to = format!("t{to}");
                        if to == s.owner {
                            continue;
                        }
                        s.epoch += 1;
                        s.fences.insert(s.owner.clone(), fence(&to, s.epoch));
                        s.owner = to;
                        s.owners.insert(s.owner.clone());
                    }
                    Op::Abort { to, crash } => {
                        if format!("t{to}") == s.owner {
                            continue;
                        }
                        let before = s.fences.get(&s.owner).cloned();
                        s.fences
                            .insert(s.owner.clone(), fence(&format!("t{to}"), s.epoch + 1));
                        if !crash {
                            // The abort removes the fence it wrote; an older one stays as it was.
                            match before {
                                Some(f) => s.fences.insert(s.owner.clone(), f),
                                None => s.fences.remove(&s.owner),
                            };
                        }
                    }
                    Op::Merge { raise } => s.epoch += u64::from(*raise),
                }
                s.maps.insert((s.owner.clone(), s.epoch));
            }
            s
        }
    }

    proptest! {
        /// Without interrupted aborts, the owner accepts its current map and every table that
        /// gave the slot away refuses every map that named it, over any number of round trips.
        #[test]
        fn round_trips_keep_exactly_the_owner_writable(ops in ops()) {
            let clean: Vec<Op> = ops
                .into_iter()
                .map(|op| match op {
                    Op::Abort { to, .. } => Op::Abort { to, crash: false },
                    op => op,
                })
                .collect();
            let s = Slot::run(&clean);
            prop_assert!(admits(s.fences.get(&s.owner), s.epoch));
            for (table, e) in &s.maps {
                if table != &s.owner {
                    prop_assert!(!admits(s.fences.get(table), *e), "{} at {} accepted", table, e);
                }
            }
            for t in &s.owners {
                prop_assert_eq!(
                    repair(t, s.fences.get(t), &s.owner, s.epoch, false, true),
                    FenceRepair::Keep
                );
            }
        }

        /// After interrupted aborts, applying `repair` to every table leaves the owner
        /// writable and every former owner fenced.
        #[test]
        fn repair_recovers_orphans_and_missing_fences(ops in ops(), lost in prop::collection::vec(0u8..4, 0..3)) {
            let mut s = Slot::run(&ops);
            for t in lost {
                s.fences.remove(&format!("t{t}"));
            }
            for t in s.owners.clone() {
                match repair(&t, s.fences.get(&t), &s.owner, s.epoch, false, true) {
                    FenceRepair::Keep => {}
                    FenceRepair::Remove => { s.fences.remove(&t); }
                    FenceRepair::Write(f) => { s.fences.insert(t.clone(), f); }
                }
            }
            prop_assert!(admits(s.fences.get(&s.owner), s.epoch));
            for (table, e) in &s.maps {
                if table != &s.owner {
                    prop_assert!(!admits(s.fences.get(table), *e), "{} at {} accepted", table, e);
                }
            }
        }
    }
}
