//! The renewer: every third of the lease duration, renews every held lease in parallel and
//! refreshes the worker's announcement, on its own task so a hung main loop cannot let a live
//! worker's leases lapse.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::RecordProcessor;
use super::shared::{HeldLease, Shared, sleep_or_stop};
use crate::stream::ShardSource;

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Writes this worker's announcement; a failure is logged, never fatal (it only sizes the
    /// peers' fair share, and the next renewal writes it again).
    pub(super) async fn announce(&self) {
        if !self.announcing.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = self.leases.announce(self.me()).await {
            tracing::warn!(worker = %self.me(), error = %e,
                "announcement failed; peers count this worker by its leases until the next one");
        }
    }

    /// Renews every held lease and the announcement in parallel, every third of the lease
    /// duration, until stopped.
    pub(super) async fn renew_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let period = self.config.lease_duration / 3;
        loop {
            if sleep_or_stop(period, &mut stop).await {
                return;
            }
            let held: Vec<Arc<HeldLease>> = self
                .held
                .lock()
                .map(|h| h.values().cloned().collect())
                .unwrap_or_default();
            let renewals = futures::future::join_all(held.iter().map(|h| self.renew_one(h)));
            futures::future::join(renewals, self.announce()).await;
        }
    }

    pub(super) async fn renew_one(&self, held: &HeldLease) {
        if held.lost.load(Ordering::SeqCst) {
            return;
        }
        let Some(lease) = held.snapshot() else { return };
        if !lease.state.is_workable() {
            return; // at SHARD_END: the task is creating the children's leases
        }
        let sent = self.mono_ms();
        match self.leases.renew(&lease, self.duration_ms()).await {
            Ok(renewed) => {
                held.valid_until
                    .fetch_max(sent.saturating_add(self.trusted_ms()), Ordering::SeqCst);
                if let Ok(mut l) = held.lease.lock() {
                    l.expires_at_ms = renewed.expires_at_ms;
                }
            }
            Err(e) if e.is_lease_lost() => {
                tracing::info!(worker = %self.me(), shard = %lease.shard_id,
                    "renewal refused: lease lost; stopping the shard");
                held.mark_lost();
                self.lost_since_round.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(worker = %self.me(), shard = %lease.shard_id, error = %e,
                    "renew failed; the shard stops if its lease lapses")
            }
        }
    }
}
