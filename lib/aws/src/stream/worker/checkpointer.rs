//! The checkpointer: a shard task's checkpoint writes, decoupled from its batches (one write in
//! flight, started when enough records or time have passed — core's [`Cadence`] decides —
//! forced at the end).

use std::sync::atomic::Ordering;
use std::time::Instant;

use heatsink_core::stream::{Cadence, CheckpointStep, CheckpointView, Inflight, Lease, Position};

use super::RecordProcessor;
use super::shard::ShardExit;
use super::shared::{HeldLease, Shared};
use crate::stream::{ShardSource, StreamError};

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Does what core's [`Cadence`] says: collects a finished write, waits for the one in
    /// flight if processing ran far ahead of it, starts one if due and none is in flight.
    pub(super) async fn maybe_checkpoint(
        &self,
        cp: &mut Checkpointer,
        held: &HeldLease,
    ) -> Result<(), ShardExit> {
        let cadence = Cadence::new(
            self.config.checkpoint_every_records,
            self.config.checkpoint_interval,
        );
        loop {
            match cadence.next(&cp.view()) {
                CheckpointStep::Idle => return Ok(()),
                CheckpointStep::Collect => self.collect(cp, held).await?,
                CheckpointStep::Start => {
                    let Some(position) = cp.pending.take() else {
                        return Ok(());
                    };
                    let table = self.leases.clone();
                    let lease = cp.lease.clone();
                    cp.inflight_position = Some(position.clone());
                    cp.inflight = Some(tokio::spawn(async move {
                        table.checkpoint(&lease, position).await
                    }));
                    cp.uncheckpointed = 0;
                    cp.since = Instant::now();
                    return Ok(());
                }
            }
        }
    }

    /// Waits for the write in flight and folds its result in.
    pub(super) async fn collect(
        &self,
        cp: &mut Checkpointer,
        held: &HeldLease,
    ) -> Result<(), ShardExit> {
        let Some(write) = cp.inflight.take() else {
            return Ok(());
        };
        let position = cp.inflight_position.take();
        match write.await {
            Ok(Ok(next)) => {
                self.stats
                    .0
                    .checkpoint_writes
                    .fetch_add(1, Ordering::Relaxed);
                cp.lease = next;
                held.set_checkpoint(&cp.lease);
                Ok(())
            }
            Ok(Err(e)) if e.is_lease_lost() => {
                held.mark_lost();
                Err(ShardExit::Lost)
            }
            other => {
                if let Ok(Err(e)) = &other {
                    tracing::warn!(shard = %cp.lease.shard_id, error = %e, "checkpoint failed; retrying");
                }
                if cp.pending.is_none() {
                    cp.pending = position;
                }
                Ok(())
            }
        }
    }

    /// Forces the checkpoint of everything processed: waits for the write in flight, then
    /// writes what is pending, retrying (when `retry`) while the lease is valid.
    pub(super) async fn flush(
        &self,
        cp: &mut Checkpointer,
        held: &HeldLease,
        retry: bool,
    ) -> Result<(), ShardExit> {
        self.collect(cp, held).await?;
        let Some(position) = cp.pending.take() else {
            return Ok(());
        };
        let mut backoff = self.backoff();
        loop {
            match self.leases.checkpoint(&cp.lease, position.clone()).await {
                Ok(next) => {
                    self.stats
                        .0
                        .checkpoint_writes
                        .fetch_add(1, Ordering::Relaxed);
                    cp.lease = next;
                    held.set_checkpoint(&cp.lease);
                    cp.uncheckpointed = 0;
                    return Ok(());
                }
                Err(e) if e.is_lease_lost() => {
                    held.mark_lost();
                    return Err(ShardExit::Lost);
                }
                Err(e) => {
                    tracing::warn!(shard = %cp.lease.shard_id, error = %e, "checkpoint failed");
                    if !retry || !self.is_valid(held) {
                        cp.pending = Some(position);
                        return Err(ShardExit::Lost);
                    }
                    tokio::time::sleep(backoff.pause()).await;
                }
            }
        }
    }
}

/// A shard task's checkpoint state: what is durable, what is processed but not yet written,
/// and the one write in flight.
pub(super) struct Checkpointer {
    /// The row as last written (its checkpoint is the durable one).
    pub(super) lease: Lease,
    /// The last processed position not yet written.
    pub(super) pending: Option<Position>,
    /// Records processed since the last write started.
    pub(super) uncheckpointed: usize,
    /// When the last write started.
    pub(super) since: Instant,
    pub(super) inflight: Option<tokio::task::JoinHandle<Result<Lease, StreamError>>>,
    pub(super) inflight_position: Option<Position>,
}

impl Checkpointer {
    pub(super) fn new(lease: Lease) -> Self {
        Self {
            lease,
            pending: None,
            uncheckpointed: 0,
            since: Instant::now(),
            inflight: None,
            inflight_position: None,
        }
    }

    pub(super) fn processed(&mut self, position: Position, records: usize) {
        self.pending = Some(position);
        self.uncheckpointed = self.uncheckpointed.saturating_add(records);
    }

    /// What core's [`Cadence`] decides from.
    pub(super) fn view(&self) -> CheckpointView {
        CheckpointView {
            uncheckpointed: self.uncheckpointed,
            since_last: self.since.elapsed(),
            inflight: match &self.inflight {
                None => Inflight::None,
                Some(write) if write.is_finished() => Inflight::Finished,
                Some(_) => Inflight::Running,
            },
            pending: self.pending.is_some(),
        }
    }

    /// The last processed position, written or not.
    pub(super) fn done(&self) -> Option<&Position> {
        self.pending
            .as_ref()
            .or(self.inflight_position.as_ref())
            .or_else(|| self.lease.checkpoint.position())
    }
}
