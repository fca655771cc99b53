//! The lease of one shard: who reads it, under which fencing token, and where its life stands.

use std::fmt;

use super::{Position, Progress, ShardInfo, StreamError};

/// Where a shard's lease is in its life; the module doc draws the diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseState {
    /// The lease row exists and nobody holds it (new, released, or its holder reached no end).
    Discovered,
    /// A worker holds the lease and has not checkpointed yet.
    Leased,
    /// A worker holds the lease and has checkpointed at least once.
    Processing,
    /// The shard was read to its end; checkpoint SHARD_END; nobody holds it.
    ShardEnd,
    /// The children's leases exist: the shard's part of the lineage is done.
    ChildrenCreated,
    /// The lease row is gone (cleanup after retention, or the shard was trimmed unread).
    Deleted,
}

impl LeaseState {
    /// The state after `event`, or [`StreamError::IllegalTransition`]: the diagram as a function.
    ///
    /// Ownership, fencing and expiry are checked by [`Lease::apply`]; this checks only the shape.
    pub fn after(self, event: &LeaseEvent) -> Result<Self, StreamError> {
        use LeaseEvent as E;
        use LeaseState as S;
        let next = match (self, event) {
            (S::Discovered, E::Take { .. }) => S::Leased,
            (S::Leased | S::Processing, E::Take { .. } | E::Steal { .. }) => S::Leased,
            (S::Leased | S::Processing, E::Renew { .. }) => self,
            (S::Leased | S::Processing, E::Checkpoint { .. }) => S::Processing,
            (S::Leased | S::Processing, E::Release { .. }) => S::Discovered,
            (S::Leased | S::Processing, E::ReachShardEnd { .. }) => S::ShardEnd,
            (S::ShardEnd, E::CreateChildren) => S::ChildrenCreated,
            (S::ChildrenCreated, E::Delete) => S::Deleted,
            (from, E::Trim) if from != S::Deleted => S::Deleted,
            (from, event) => {
                return Err(StreamError::IllegalTransition {
                    from,
                    event: event.name(),
                });
            }
        };
        Ok(next)
    }

    /// True while the shard still needs a reader (`Discovered`, `Leased`, `Processing`).
    pub fn is_workable(self) -> bool {
        matches!(self, Self::Discovered | Self::Leased | Self::Processing)
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Discovered => "DISCOVERED",
            Self::Leased => "LEASED",
            Self::Processing => "PROCESSING",
            Self::ShardEnd => "SHARD_END",
            Self::ChildrenCreated => "CHILDREN_CREATED",
            Self::Deleted => "DELETED",
        };
        f.write_str(name)
    }
}

/// Something that happens to a lease. Times are milliseconds on the acting worker's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A worker takes an unowned or expired lease (takeover).
    Take {
        /// The taker.
        worker: String,
        /// Now.
        now_ms: u64,
        /// How long the lease lasts without renewal.
        duration_ms: u64,
    },
    /// A worker takes a live lease from another worker, to even out the spread.
    Steal {
        /// The thief.
        worker: String,
        /// Now.
        now_ms: u64,
        /// How long the lease lasts without renewal.
        duration_ms: u64,
    },
    /// The holder extends its lease.
    Renew {
        /// The holder.
        worker: String,
        /// The fencing token it holds.
        counter: u64,
        /// Now.
        now_ms: u64,
        /// New lease length from now.
        duration_ms: u64,
    },
    /// The holder records that every record up to `seq` is processed.
    Checkpoint {
        /// The holder.
        worker: String,
        /// The fencing token it holds.
        counter: u64,
        /// Last processed position (sequence number, and sub-sequence inside an aggregate).
        position: Position,
    },
    /// The holder gives the lease up (graceful handoff or shutdown); the checkpoint stays.
    Release {
        /// The holder.
        worker: String,
        /// The fencing token it holds.
        counter: u64,
    },
    /// The holder processed the shard's last record: checkpoint SHARD_END.
    ReachShardEnd {
        /// The holder.
        worker: String,
        /// The fencing token it holds.
        counter: u64,
    },
    /// Leases for every child of the shard were created (idempotently; any worker may do it).
    CreateChildren,
    /// The finished shard is past retention; its lease row is removed.
    Delete,
    /// The shard vanished from the listing (past retention) in any state; unread records are lost.
    Trim,
}

impl LeaseEvent {
    /// The event's name in errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Take { .. } => "take",
            Self::Steal { .. } => "steal",
            Self::Renew { .. } => "renew",
            Self::Checkpoint { .. } => "checkpoint",
            Self::Release { .. } => "release",
            Self::ReachShardEnd { .. } => "reach_shard_end",
            Self::CreateChildren => "create_children",
            Self::Delete => "delete",
            Self::Trim => "trim",
        }
    }
}

/// One row of the lease table: state, holder, fencing token, expiry, checkpoint, parents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The shard this lease is for.
    pub shard_id: String,
    /// Where the lease is in its life.
    pub state: LeaseState,
    /// The worker holding it (`Leased`/`Processing` only).
    pub owner: Option<String>,
    /// Fencing token: bumped on every change of holder, never on renewal. Each write by a
    /// holder (renew, checkpoint, and the record processor's own writes) must carry it.
    pub counter: u64,
    /// When the lease lapses unless renewed (meaningful while held).
    pub expires_at_ms: u64,
    /// How far the shard has been read.
    pub checkpoint: Progress,
    /// The shard's parents, so a worker can check eligibility from the lease table alone.
    pub parents: Vec<String>,
}

impl Lease {
    /// The new, unowned lease of a discovered shard.
    pub fn discovered(info: &ShardInfo) -> Self {
        Self {
            shard_id: info.shard_id.clone(),
            state: LeaseState::Discovered,
            owner: None,
            counter: 0,
            expires_at_ms: 0,
            checkpoint: Progress::NotStarted,
            parents: info.parents().map(str::to_owned).collect(),
        }
    }

    /// True when the lease is held but lapsed at `now_ms`: anyone may take it.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.owner.is_some() && now_ms >= self.expires_at_ms
    }

    /// The holder at `now_ms`, if the lease is held and not lapsed.
    pub fn live_owner(&self, now_ms: u64) -> Option<&str> {
        self.owner.as_deref().filter(|_| !self.is_expired(now_ms))
    }

    /// The lease after `event`, or why the event is refused; the lease itself is unchanged.
    ///
    /// The adapter writes the result conditionally on the stored `counter` (and owner) still
    /// being this lease's, so concurrent takers cannot both win.
    pub fn apply(&self, event: &LeaseEvent) -> Result<Self, StreamError> {
        let state = self.state.after(event)?;
        let mut next = self.clone();
        next.state = state;
        match event {
            LeaseEvent::Take {
                worker,
                now_ms,
                duration_ms,
            } => {
                if let Some(owner) = self.live_owner(*now_ms) {
                    return Err(StreamError::LeaseHeld {
                        shard_id: self.shard_id.clone(),
                        owner: owner.to_owned(),
                        expires_at_ms: self.expires_at_ms,
                    });
                }
                next.hand_to(worker, now_ms.saturating_add(*duration_ms));
            }
            LeaseEvent::Steal {
                worker,
                now_ms,
                duration_ms,
            } => {
                if self.owner.as_deref() == Some(worker.as_str()) {
                    return Err(StreamError::AlreadyOwner {
                        shard_id: self.shard_id.clone(),
                    });
                }
                next.hand_to(worker, now_ms.saturating_add(*duration_ms));
            }
            LeaseEvent::Renew {
                worker,
                counter,
                now_ms,
                duration_ms,
            } => {
                self.check_holder(worker, *counter)?;
                next.expires_at_ms = now_ms.saturating_add(*duration_ms);
            }
            LeaseEvent::Checkpoint {
                worker,
                counter,
                position,
            } => {
                self.check_holder(worker, *counter)?;
                if let Progress::InProgress(done) = &self.checkpoint
                    && position < done
                {
                    return Err(StreamError::CheckpointRegression {
                        shard_id: self.shard_id.clone(),
                        stored: done.to_string(),
                        attempted: position.to_string(),
                    });
                }
                next.checkpoint = Progress::InProgress(position.clone());
            }
            LeaseEvent::Release { worker, counter } => {
                self.check_holder(worker, *counter)?;
                next.release();
            }
            LeaseEvent::ReachShardEnd { worker, counter } => {
                self.check_holder(worker, *counter)?;
                next.release();
                next.checkpoint = Progress::Finished;
            }
            LeaseEvent::CreateChildren | LeaseEvent::Delete => {}
            LeaseEvent::Trim => {
                next.owner = None;
                next.expires_at_ms = 0;
            }
        }
        Ok(next)
    }

    fn check_holder(&self, worker: &str, counter: u64) -> Result<(), StreamError> {
        if self.owner.as_deref() == Some(worker) && self.counter == counter {
            Ok(())
        } else {
            Err(StreamError::LeaseLost {
                shard_id: self.shard_id.clone(),
                holder: self.owner.clone(),
                counter: self.counter,
            })
        }
    }

    fn hand_to(&mut self, worker: &str, expires_at_ms: u64) {
        self.owner = Some(worker.to_owned());
        self.counter = self.counter.saturating_add(1);
        self.expires_at_ms = expires_at_ms;
    }

    fn release(&mut self) {
        self.owner = None;
        self.counter = self.counter.saturating_add(1);
        self.expires_at_ms = 0;
    }
}
