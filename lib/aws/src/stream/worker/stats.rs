//! What a worker reports: its live counters ([`WorkerStats`]) and what each round did to its
//! leases ([`RoundReport`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use heatsink_core::stream::Lease;

use crate::metrics::Emf;
// Named by the docs only.
#[cfg(doc)]
use super::{Worker, WorkerConfig};

#[derive(Debug, Default)]
pub(super) struct StatsInner {
    pub(super) records: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) failed_attempts: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) checkpoint_writes: AtomicU64,
    pub(super) trimmed: AtomicU64,
    pub(super) undecodable: AtomicU64,
    pub(super) gone: AtomicU64,
    pub(super) last_record_ms: AtomicU64,
    pub(super) free_eligible: AtomicUsize,
    pub(super) rounds: AtomicU64,
    pub(super) startup_ms: AtomicU64,
    pub(super) first_record_ms: AtomicU64,
    pub(super) early_used: AtomicU64,
    pub(super) early_dropped: AtomicU64,
    /// Held shards and whether each has caught up with its tip (or its end).
    pub(super) held: Mutex<BTreeMap<String, bool>>,
    /// Stalled shards and the sequence range of the batch they are stuck on.
    pub(super) stalled: Mutex<BTreeMap<String, (String, String)>>,
}

/// Live counters of a worker, readable while it runs (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct WorkerStats(pub(super) Arc<StatsInner>);

impl WorkerStats {
    /// Records handed to the processor and acknowledged (or taken by the dead-letter sink).
    pub fn records_processed(&self) -> u64 {
        self.0.records.load(Ordering::Relaxed)
    }

    /// Processor attempts that failed (a batch retried five times counts five).
    pub fn failed_batches(&self) -> u64 {
        self.0.failed_attempts.load(Ordering::Relaxed)
    }

    /// Batches handed to the dead-letter sink and skipped.
    pub fn dead_lettered(&self) -> u64 {
        self.0.dead_lettered.load(Ordering::Relaxed)
    }

    /// Checkpoint writes that succeeded (SHARD_END not included).
    pub fn checkpoint_writes(&self) -> u64 {
        self.0.checkpoint_writes.load(Ordering::Relaxed)
    }

    /// Reads that hit records trimmed past retention (each restarts at TRIM_HORIZON; the trimmed
    /// records are lost), plus lease rows of unfinished shards pruned after retention.
    pub fn trimmed(&self) -> u64 {
        self.0.trimmed.load(Ordering::Relaxed)
    }

    /// Records that carry the KPL magic but do not decode, delivered whole with the reason in
    /// [`StreamRecord::undecodable`](crate::stream::StreamRecord::undecodable) (the shard is not blocked).
    pub fn undecodable_aggregates(&self) -> u64 {
        self.0.undecodable.load(Ordering::Relaxed)
    }

    /// Shards that vanished (not found) before their end; their leases were marked DELETED.
    pub fn gone_shards(&self) -> u64 {
        self.0.gone.load(Ordering::Relaxed)
    }

    /// Batches processed, dead-lettered ones included.
    pub fn batches(&self) -> u64 {
        self.0.batches.load(Ordering::Relaxed)
    }

    /// When the last record was processed (ms since the epoch; 0 if never).
    pub fn last_record_ms(&self) -> u64 {
        self.0.last_record_ms.load(Ordering::Relaxed)
    }

    /// The shards this worker holds now.
    pub fn held_shards(&self) -> Vec<String> {
        self.0
            .held
            .lock()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The shards whose current batch failed `max_attempts` times and is still being retried.
    pub fn stalled_shards(&self) -> Vec<String> {
        self.0
            .stalled
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Milliseconds the start-up work took (announce and the first shard listing side by side,
    /// then the missing lease rows created), all inside `startup_wait` when it is shorter:
    /// anything above `startup_wait` delays the first round.
    pub fn startup_ms(&self) -> u64 {
        self.0.startup_ms.load(Ordering::Relaxed)
    }

    /// Milliseconds from the worker's start (once the stream's identity is read) until the
    /// processor first acknowledged a batch; 0 before that.
    pub fn first_record_ms(&self) -> u64 {
        self.0.first_record_ms.load(Ordering::Relaxed)
    }

    /// Early first reads ([`WorkerConfig::early_read`]) as (used, dropped): used ones were
    /// handed to the shard's reader after the first round took their lease at the checkpoint
    /// they read from (a refused call as its first refusal, so throttling backs off as usual);
    /// dropped ones were not (lease taken by a peer, or its checkpoint moved or reset) and none
    /// of their records reached the processor.
    pub fn early_reads(&self) -> (u64, u64) {
        (
            self.0.early_used.load(Ordering::Relaxed),
            self.0.early_dropped.load(Ordering::Relaxed),
        )
    }

    /// Main-loop rounds completed.
    pub fn rounds(&self) -> u64 {
        self.0.rounds.load(Ordering::Relaxed)
    }

    /// True when every held shard is at its tip and no eligible shard was left unowned last round.
    pub fn is_caught_up(&self) -> bool {
        self.rounds() > 0
            && self.0.free_eligible.load(Ordering::Relaxed) == 0
            && self
                .0
                .held
                .lock()
                .map(|h| h.values().all(|caught_up| *caught_up))
                .unwrap_or(false)
    }

    pub(super) fn set_held(&self, shard: &str, caught_up: Option<bool>) {
        if let Ok(mut h) = self.0.held.lock() {
            match caught_up {
                Some(c) => {
                    h.insert(shard.to_owned(), c);
                }
                None => {
                    h.remove(shard);
                }
            }
        }
    }

    pub(super) fn set_stalled(&self, shard: &str, range: Option<(String, String)>) {
        if let Ok(mut s) = self.0.stalled.lock() {
            match range {
                Some(r) => {
                    s.insert(shard.to_owned(), r);
                }
                None => {
                    s.remove(shard);
                }
            }
        }
    }

    /// The consumer-health metrics ([`crate::stream::metrics::SHARDS_STALLED`], and the
    /// dead-lettered batches and trimmed reads since `since`) into `emf`; returns the counts to
    /// pass as `since` next time.
    pub fn health_metrics(&self, emf: &mut Emf, since: (u64, u64)) -> (u64, u64) {
        let now = (self.dead_lettered(), self.trimmed());
        emf.count(
            crate::stream::metrics::SHARDS_STALLED,
            self.stalled_shards().len() as u64,
        )
        .count(
            crate::stream::metrics::BATCHES_DEAD_LETTERED,
            now.0.saturating_sub(since.0),
        )
        .count(
            crate::stream::metrics::TRIMMED_READS,
            now.1.saturating_sub(since.1),
        );
        now
    }
}

/// What one main-loop round did to this worker's leases, handed to [`Worker::on_round`].
///
/// A round that fails part-way (a lease-table read failed) is reported too, with what it did
/// before failing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Leases this worker holds at the end of the round.
    pub held: usize,
    /// Leases acquired this round that nobody held (new shards, released or expired leases).
    pub taken: usize,
    /// Of `taken`, leases that had expired: their holder stopped renewing (crashed, hung or
    /// partitioned) without releasing them. Only the taker can tell an expiry from a release, and
    /// only one taker wins a lease, so the sum over all workers counts each expiry once.
    pub expired: usize,
    /// Leases stolen from a live holder this round to even out the assignment.
    pub stolen: usize,
    /// Leases this worker found moved to another worker (stolen, or taken after its own lease
    /// expired) and stopped reading, in the round or by a refused renewal since the last round.
    pub lost: usize,
}

impl RoundReport {
    /// Counts a confirmed take (`steal` false) or steal of `previous`, the row as it was read at
    /// `now_ms` before the acquisition.
    pub fn acquired(&mut self, previous: &Lease, steal: bool, now_ms: u64) {
        if steal {
            self.stolen += 1;
            return;
        }
        self.taken += 1;
        if previous.is_expired(now_ms) {
            self.expired += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use heatsink_core::stream::{LeaseState, Progress};

    use super::*;

    fn row(owner: Option<&str>, expires_at_ms: u64) -> Lease {
        Lease {
            shard_id: "shardId-000000000001".into(),
            state: if owner.is_some() {
                LeaseState::Leased
            } else {
                LeaseState::Discovered
            },
            owner: owner.map(str::to_owned),
            counter: 7,
            expires_at_ms,
            checkpoint: Progress::NotStarted,
            parents: vec![],
        }
    }

    #[test]
    fn only_a_take_of_a_lapsed_lease_counts_as_expired() {
        let now = 1_700_000_010_000;
        let mut report = RoundReport::default();
        report.acquired(&row(None, 0), false, now); // new shard or released lease
        report.acquired(&row(Some("w2"), now - 1), false, now); // w2 stopped renewing
        report.acquired(&row(Some("w3"), now + 5_000), true, now); // rebalancing
        assert_eq!(
            report,
            RoundReport {
                held: 0,
                taken: 2,
                expired: 1,
                stolen: 1,
                lost: 0,
            }
        );
    }
}
