//! What a lease round deletes, as data: rows of shards gone past retention, and the
//! announcements of workers long silent.
//!
//! Per-round work stays proportional to the live shards and workers:
//! - a lease row whose shard the listing dropped, and whose parents it dropped too, is deleted
//!   once **two reads in a row** found it so ([`prune_rows`]): one listing that momentarily
//!   lacks a shard deletes nothing, and a child's row stays while its parent is listed. An empty
//!   listing (a failed or not yet made one) deletes nothing. A deleted row that was not read to
//!   its end is reported ([`Pruned::unread`]): its unread records are lost.
//! - an announcement silent for [`DEAD_WORKER_LEASES`] lease durations is deleted
//!   ([`silent_workers`]); it stopped counting towards the fair share after one. A worker never
//!   deletes its own.
//!
//! ```
//! use std::collections::BTreeSet;
//! use heatsink_core::stream::{Lease, ShardGraph, ShardInfo, prune_rows};
//!
//! let graph = ShardGraph::new(vec![ShardInfo::new("shardId-2")])?;
//! let rows = vec![
//!     Lease::discovered(&ShardInfo::new("shardId-1")), // no longer listed
//!     Lease::discovered(&ShardInfo::new("shardId-2")),
//! ];
//! let first = prune_rows(&graph, &rows, &BTreeSet::new()).expect("a listing");
//! assert!(first.delete.is_empty(), "one read is not enough");
//! let second = prune_rows(&graph, &rows, &first.unlisted).expect("a listing");
//! assert_eq!(second.delete.len(), 1);
//! assert_eq!(second.delete[0].lease.shard_id, "shardId-1");
//! assert!(second.delete[0].unread, "never read to its end: its records are lost");
//! # Ok::<(), heatsink_core::stream::StreamError>(())
//! ```

use std::collections::BTreeSet;

use super::{Announcement, Lease, LeaseState, ShardGraph};

/// An announcement whose heartbeat is this many lease durations old is deleted by any worker
/// that reads it (it stopped counting after one).
pub const DEAD_WORKER_LEASES: u64 = 10;

/// A lease row to delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pruned<'a> {
    /// The row as read (the delete is conditional on it).
    pub lease: &'a Lease,
    /// The shard was not read to its end: its unread records are lost (report it).
    pub unread: bool,
}

/// What [`prune_rows`] decided from one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowPrune<'a> {
    /// The shards found unlisted (with no listed parent) in this read: pass them as `before` to
    /// the next round's call.
    pub unlisted: BTreeSet<String>,
    /// The rows found unlisted in this read and the one before.
    pub delete: Vec<Pruned<'a>>,
}

/// The rows to delete given the listing, this read of the rows, and the shards found unlisted
/// the read before. `None` for an empty listing: nothing is deleted, and `before` stays.
pub fn prune_rows<'a>(
    graph: &ShardGraph,
    leases: &'a [Lease],
    before: &BTreeSet<String>,
) -> Option<RowPrune<'a>> {
    if graph.is_empty() {
        return None;
    }
    let gone: Vec<&Lease> = leases
        .iter()
        .filter(|l| !graph.contains(&l.shard_id))
        .filter(|l| !l.parents.iter().any(|p| graph.contains(p)))
        .collect();
    let delete = gone
        .iter()
        .filter(|l| before.contains(&l.shard_id))
        .map(|lease| Pruned {
            lease,
            unread: !lease.checkpoint.is_finished() && lease.state != LeaseState::Deleted,
        })
        .collect();
    Some(RowPrune {
        unlisted: gone.iter().map(|l| l.shard_id.clone()).collect(),
        delete,
    })
}

/// The announcements to delete: other workers' silent for [`DEAD_WORKER_LEASES`] lease
/// durations at `now_ms`.
pub fn silent_workers<'a>(
    workers: &'a [Announcement],
    me: &str,
    now_ms: u64,
    lease_duration_ms: u64,
) -> Vec<&'a Announcement> {
    let dead_after = lease_duration_ms.saturating_mul(DEAD_WORKER_LEASES);
    workers
        .iter()
        .filter(|a| a.worker_id != me && !a.is_live(now_ms, dead_after))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::stream::{Progress, ShardInfo};

    fn row(id: usize, parent: Option<usize>, finished: bool) -> Lease {
        let mut info = ShardInfo::new(format!("s{id}"));
        info.parent = parent.map(|p| format!("s{p}"));
        let mut lease = Lease::discovered(&info);
        if finished {
            lease.checkpoint = Progress::Finished;
        }
        lease
    }

    proptest! {
        #[test]
        fn a_row_is_deleted_only_after_two_reads_without_it_or_a_listed_parent(
            rows in proptest::collection::vec((0usize..12, proptest::option::of(0usize..12), any::<bool>()), 0..12),
            listings in proptest::collection::vec(proptest::collection::btree_set(0usize..12, 0..12), 1..6),
        ) {
            let mut by_id = BTreeMap::new();
            for (id, parent, finished) in rows {
                by_id.entry(id).or_insert_with(|| row(id, parent.filter(|p| *p != id), finished));
            }
            let leases: Vec<Lease> = by_id.into_values().collect();
            let mut before = BTreeSet::new();
            let mut previous: Option<BTreeSet<usize>> = None;
            for listed in listings {
                let graph = ShardGraph::new(listed.iter().map(|i| ShardInfo::new(format!("s{i}"))).collect()).unwrap();
                let absent = |l: &Lease, ids: &BTreeSet<usize>| {
                    let named = |s: &str| ids.iter().any(|i| format!("s{i}") == s);
                    !named(&l.shard_id) && !l.parents.iter().any(|p| named(p))
                };
                match prune_rows(&graph, &leases, &before) {
                    None => prop_assert!(listed.is_empty(), "only an empty listing decides nothing"),
                    Some(prune) => {
                        prop_assert!(!listed.is_empty(), "an empty listing deletes nothing");
                        for p in &prune.delete {
                            prop_assert!(absent(p.lease, &listed), "{} is listed or has a listed parent", p.lease.shard_id);
                            prop_assert!(previous.as_ref().is_some_and(|ids| absent(p.lease, ids)),
                                "{} was not found unlisted the read before", p.lease.shard_id);
                            prop_assert_eq!(p.unread, !p.lease.checkpoint.is_finished());
                        }
                        for l in &leases {
                            let twice = absent(l, &listed) && previous.as_ref().is_some_and(|ids| absent(l, ids));
                            prop_assert_eq!(twice, prune.delete.iter().any(|p| p.lease.shard_id == l.shard_id),
                                "{} unlisted twice must go", l.shard_id);
                        }
                        before = prune.unlisted;
                        previous = Some(listed);
                    }
                }
            }
        }

        #[test]
        fn only_other_workers_silent_for_ten_leases_are_pruned(
            beats in proptest::collection::vec((0usize..4, 0u64..300_000), 0..8),
            now in 0u64..400_000,
            duration in 1u64..20_000,
        ) {
            let workers: Vec<Announcement> = beats.iter().map(|(w, at)| Announcement {
                worker_id: format!("w{w}"),
                heartbeat_ms: *at,
            }).collect();
            let pruned = silent_workers(&workers, "w0", now, duration);
            for a in &workers {
                let dead = a.worker_id != "w0" && now.saturating_sub(a.heartbeat_ms) >= 10 * duration;
                prop_assert_eq!(dead, pruned.contains(&a), "{:?} at {}", a, now);
            }
        }
    }
}
