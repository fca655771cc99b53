//! Worker announcements: who is alive, before anyone holds a lease.
//!
//! A worker that only learns of its peers from the leases they hold sees itself alone at
//! start-up, takes every free lease, and the fleet then rebalances by steals (each stolen shard
//! is re-read from its last checkpoint). So every worker also keeps one *announcement* in the
//! lease table: its id and a heartbeat time, written at start and refreshed with every lease
//! renewal. [`live_workers`] counts a peer whose heartbeat is less than one lease duration old,
//! the same rule that makes a lease expire, so a crashed worker drops out of the count at the
//! latest when its leases become free. Announcements only size the fair share
//! ([`assign`](super::assign)); no lease ever depends on one, so a lost or stale row costs
//! balance for at most one lease duration, never correctness.

use std::collections::BTreeSet;

use super::Lease;

/// One worker's announcement, as read from the lease table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    /// The worker's name (`WorkerConfig::worker_id`).
    pub worker_id: String,
    /// When it last announced itself, on the clock leases are stamped with (ms since the epoch).
    pub heartbeat_ms: u64,
}

impl Announcement {
    /// True while the heartbeat is younger than `lease_duration_ms` at `now_ms`: a worker
    /// refreshes it every third of a lease, so a live one is never near the edge.
    pub fn is_live(&self, now_ms: u64, lease_duration_ms: u64) -> bool {
        now_ms < self.heartbeat_ms.saturating_add(lease_duration_ms)
    }
}

/// The live workers of an application as `me` sees them at `now_ms`: `me`, every worker with a
/// live announcement, and every live holder of a workable lease (a worker that announces
/// nothing, such as an older version, still counts by the leases it holds). Sorted, each once.
pub fn live_workers(
    me: &str,
    announced: &[Announcement],
    leases: &[Lease],
    now_ms: u64,
    lease_duration_ms: u64,
) -> Vec<String> {
    announced
        .iter()
        .filter(|a| a.is_live(now_ms, lease_duration_ms))
        .map(|a| a.worker_id.as_str())
        .chain(
            leases
                .iter()
                .filter(|l| l.state.is_workable())
                .filter_map(|l| l.live_owner(now_ms)),
        )
        .chain(std::iter::once(me))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{LeaseState, Progress};
    use super::*;

    fn announced(id: &str, heartbeat_ms: u64) -> Announcement {
        Announcement {
            worker_id: id.to_owned(),
            heartbeat_ms,
        }
    }

    #[test]
    fn a_heartbeat_counts_for_one_lease_duration() {
        let a = announced("w1", 1_000);
        assert!(a.is_live(1_000, 10_000));
        assert!(a.is_live(10_999, 10_000));
        assert!(!a.is_live(11_000, 10_000));
        // A peer whose clock runs ahead still counts; the sum never overflows.
        assert!(a.is_live(900, 10_000));
        assert!(announced("w1", u64::MAX).is_live(0, 10_000));
    }

    #[test]
    fn live_workers_are_me_the_announced_and_the_holders() {
        let held = Lease {
            shard_id: "shardId-0".into(),
            state: LeaseState::Processing,
            owner: Some("old".into()),
            counter: 1,
            expires_at_ms: 20_000,
            checkpoint: Progress::NotStarted,
            parents: Vec::new(),
        };
        let rows = [
            announced("w2", 5_000),
            announced("dead", 0),
            announced("w0", 5_000),
        ];
        assert_eq!(
            live_workers("w0", &rows, std::slice::from_ref(&held), 12_000, 10_000),
            ["old", "w0", "w2"]
        );
        // An expired lease's holder no longer counts, nor an unworkable lease's.
        assert_eq!(live_workers("w0", &[], &[held], 20_000, 10_000), ["w0"]);
    }
}
