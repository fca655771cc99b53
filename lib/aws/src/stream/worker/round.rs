//! One main-loop round: read the lease table, prune, plan ([`plan_round`]), and execute the
//! plan's conditional writes (repairs, takes and steals).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use heatsink_core::stream::{
    Acquire, Lease, LeaseRepair, Pruned, RoundInput, RoundPlan, ShardGraph, plan_round, prune_rows,
    silent_workers,
};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::shard::ShardExit;
use super::shared::{HeldLease, Shared};
use super::{DEAD_WORKER_LEASES, RecordProcessor, RoundReport};
use crate::clock::now_ms;
use crate::stream::{LeaseScan, ShardSource, StreamError};

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Plans this round from one read of the lease table ([`plan_round`]).
    pub(super) fn plan(&self, graph: &ShardGraph, scan: &LeaseScan, now: u64) -> RoundPlan {
        let held: BTreeMap<String, u64> = self
            .held
            .lock()
            .map(|h| h.iter().map(|(s, l)| (s.clone(), l.counter())).collect())
            .unwrap_or_default();
        plan_round(&RoundInput {
            worker_id: self.me(),
            now_ms: now,
            graph,
            leases: &scan.leases,
            malformed: &scan.malformed_rows(),
            held: &held,
            max_steals_per_round: self.config.max_steals_per_round,
            initial: self.config.initial_position,
            announced: &scan.workers,
            lease_duration_ms: self.duration_ms(),
        })
    }

    /// Start-up, inside `startup_wait`: creates the rows the first listing needs and `scan`
    /// lacks (the same conditional creates a round's repair makes, so a peer creating them too
    /// is harmless). A failure is logged; the first round repairs whatever is still missing.
    pub(super) async fn create_missing(&self, scan: &LeaseScan) {
        let graph = self.graph();
        let plan = self.plan(&graph, scan, now_ms());
        if let Err(e) = self.repair(&plan, scan).await {
            tracing::warn!(worker = %self.me(), error = %e,
                "creating lease rows at start-up failed; the first round retries");
        }
    }

    /// Writes the plan's repairs (missing rows created, malformed ones replaced, each
    /// conditionally, 16 at a time); true if any row was written.
    pub(super) async fn repair(
        &self,
        plan: &RoundPlan,
        scan: &LeaseScan,
    ) -> Result<bool, StreamError> {
        for shard in &plan.malformed_unlisted {
            let reason = scan.malformed_row(shard).map_or("", |m| m.reason.as_str());
            tracing::warn!(shard = %shard, reason = %reason,
                "malformed lease row for a shard the stream does not list; left alone");
        }
        let writes: Vec<_> = plan
            .repair
            .iter()
            .map(|repair| Box::pin(self.repair_one(repair, scan)))
            .collect();
        let results: Vec<Result<bool, StreamError>> = futures::stream::iter(writes)
            .buffer_unordered(16)
            .collect()
            .await;
        let mut changed = false;
        for r in results {
            changed |= r?;
        }
        Ok(changed)
    }

    pub(super) async fn repair_one(
        &self,
        repair: &LeaseRepair,
        scan: &LeaseScan,
    ) -> Result<bool, StreamError> {
        match repair {
            LeaseRepair::Create(lease) => self.leases.create(lease).await,
            LeaseRepair::Replace(lease) => {
                let Some(bad) = scan.malformed_row(&lease.shard_id) else {
                    return Ok(false);
                };
                tracing::warn!(shard = %bad.shard_id, reason = %bad.reason,
                    "malformed lease row; recreating it from the shard graph");
                self.leases.recreate(bad, lease).await
            }
        }
    }

    /// Deletes announcements of workers silent for [`DEAD_WORKER_LEASES`] lease durations (a
    /// crashed worker's row, which no longer counts anyway; core's [`silent_workers`]), so rows
    /// of workers with one-off ids do not pile up in every scan. Failures are logged; the next
    /// round tries again.
    pub(super) async fn prune_announcements(&self, scan: &LeaseScan, now: u64) {
        for gone in silent_workers(&scan.workers, self.me(), now, self.duration_ms()) {
            match self.leases.delete_announcement(gone).await {
                Ok(true) => tracing::info!(worker = %gone.worker_id,
                    "announcement of a worker silent for {DEAD_WORKER_LEASES} leases deleted"),
                Ok(false) => {}
                Err(e) => tracing::warn!(worker = %gone.worker_id, error = %e,
                    "deleting a dead worker's announcement failed"),
            }
        }
    }

    /// Deletes the rows core's [`prune_rows`] picks: shards the listing dropped (past
    /// retention) whose parents are gone too, found so two rounds in a row, so per-round work
    /// stays proportional to the live shards. A pruned row that was not finished is reported:
    /// its unread records are lost.
    pub(super) async fn prune(&self, graph: &ShardGraph, scan: &LeaseScan) {
        let prune = {
            let Ok(mut unlisted) = self.unlisted.lock() else {
                return;
            };
            let Some(mut prune) = prune_rows(graph, &scan.leases, &unlisted) else {
                return;
            };
            *unlisted = std::mem::take(&mut prune.unlisted);
            prune
        };
        for Pruned { lease, unread } in prune.delete {
            match self.leases.delete_row(lease).await {
                Ok(true) => {
                    if unread {
                        tracing::error!(shard = %lease.shard_id,
                            checkpoint = %lease.checkpoint.to_checkpoint(),
                            "shard trimmed past retention before it was read to its end: its \
                             unread records are lost; lease row deleted");
                        self.stats.0.trimmed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tracing::info!(shard = %lease.shard_id, "lease row of a trimmed shard deleted");
                    }
                    if let Ok(h) = self.held.lock()
                        && let Some(held) = h.get(&lease.shard_id)
                    {
                        held.mark_lost();
                    }
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(shard = %lease.shard_id, error = %e,
                    "deleting a trimmed shard's lease row failed"),
            }
        }
    }

    /// One main-loop round: read the lease table, plan, execute the plan (repair, and if a row
    /// was written read and plan again; stop lost shards; take and steal in parallel).
    pub(super) async fn round(
        self: &Arc<Self>,
        tasks: &mut JoinSet<(String, ShardExit)>,
        stop: &watch::Receiver<bool>,
        report: &mut RoundReport,
    ) -> Result<(), StreamError> {
        let me = self.me().to_owned();
        let graph = self.graph();
        let mut scan = self.leases.scan().await?;
        self.prune(&graph, &scan).await;
        let mut now = now_ms();
        self.prune_announcements(&scan, now).await;
        let mut plan = self.plan(&graph, &scan, now);
        if self.repair(&plan, &scan).await? {
            scan = self.leases.scan().await?;
            now = now_ms();
            plan = self.plan(&graph, &scan, now);
        }
        self.stats
            .0
            .free_eligible
            .store(plan.free_left, Ordering::Relaxed);
        for shard in &plan.stop_lost {
            let held = self.held.lock().ok().and_then(|h| h.get(shard).cloned());
            if let Some(h) = held
                && !h.lost.swap(true, Ordering::SeqCst)
            {
                tracing::info!(worker = %me, shard = %shard, "lease moved; stopping the shard");
                h.mark_lost();
                report.lost += 1;
            }
        }
        // Take, then steal, all in parallel; one read-back for the lot if asked.
        let held_now: BTreeSet<String> = self
            .held
            .lock()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default();
        let moves: Vec<(&Acquire, bool)> = plan
            .take
            .iter()
            .map(|a| (a, false))
            .chain(plan.steal.iter().map(|a| (a, true)))
            .filter(|(a, _)| !held_now.contains(&a.lease.shard_id))
            .collect();
        let results = futures::future::join_all(
            moves
                .iter()
                .map(|(acquire, steal)| self.acquire(acquire, *steal)),
        )
        .await;
        let mut won: Vec<(Lease, u64, &Acquire, bool)> = Vec::new();
        for ((acquire, steal), result) in moves.iter().zip(results) {
            if let Some((lease, sent)) = result? {
                won.push((lease, sent, acquire, *steal));
            }
        }
        if self.config.verify_takes && !won.is_empty() {
            let ids: Vec<String> = won.iter().map(|w| w.0.shard_id.clone()).collect();
            let rows: BTreeMap<String, Lease> = self
                .leases
                .get_many(&ids)
                .await?
                .into_iter()
                .map(|l| (l.shard_id.clone(), l))
                .collect();
            won.retain(|(lease, ..)| {
                let ok = rows.get(&lease.shard_id).is_some_and(|row| {
                    row.owner.as_deref() == Some(me.as_str()) && row.counter == lease.counter
                });
                if !ok {
                    tracing::debug!(worker = %me, shard = %lease.shard_id,
                        "take not confirmed on read-back");
                }
                ok
            });
        }
        for (lease, sent, acquire, steal) in won {
            report.acquired(&acquire.lease, steal, now);
            let shard = lease.shard_id.clone();
            tracing::info!(worker = %me, shard = %shard, counter = lease.counter, steal,
                "lease acquired");
            let early = self.take_early(&lease);
            let held = Arc::new(HeldLease {
                lease: Mutex::new(lease),
                valid_until: AtomicU64::new(sent.saturating_add(self.trusted_ms())),
                lost: AtomicBool::new(false),
                notify: Notify::new(),
            });
            if let Ok(mut h) = self.held.lock() {
                h.insert(shard.clone(), Arc::clone(&held));
            }
            self.stats.set_held(&shard, Some(false));
            let this = Arc::clone(self);
            tasks.spawn(this.run_shard(held, stop.clone(), early));
        }
        Ok(())
    }

    /// Executes one planned take or steal: the conditional write. `None` if another worker won
    /// the lease; else the lease and the monotonic time the write was sent.
    pub(super) async fn acquire(
        &self,
        acquire: &Acquire,
        steal: bool,
    ) -> Result<Option<(Lease, u64)>, StreamError> {
        let me = self.me();
        let current = &acquire.lease;
        let sent = self.mono_ms();
        let result = if steal {
            self.leases
                .steal(current, me, self.duration_ms(), acquire.floor)
                .await
        } else {
            self.leases
                .take(current, me, self.duration_ms(), acquire.floor)
                .await
        };
        match result {
            Ok(lease) => Ok(Some((lease, sent))),
            Err(e) if e.is_lease_lost() || matches!(e, StreamError::Core(_)) => {
                tracing::debug!(worker = %me, shard = %current.shard_id, error = %e,
                    "lease not acquired");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
