//! Lineage-ordered stream reading: which shard may be read now, who reads it, and how leases move.
//!
//! A Kinesis stream (or a DynamoDB stream) is a set of shards, and resharding never moves old
//! records: after SplitShard, MergeShards or UpdateShardCount the parents are *closed* — they
//! keep their records — and new records go to the children. A key that was on a parent is on a
//! child afterwards. A reader that starts the child before finishing the parent can see a key's
//! newer records before its older ones. So a shard is read only when it is *eligible*: every
//! parent — `ParentShardId` **and** `AdjacentParentShardId` of a merge — has been read to
//! SHARD_END, or has been trimmed past retention. (vmware-go-kcl waited only for the parent of
//! a merge, so the adjacent parent's records of a key could arrive after the child's.)
//!
//! Who reads which shard is decided with *leases*, one row per shard in a lease table, moved by
//! the state machine below (the Java KCL's lease lifecycle, written down). Each change of holder
//! bumps the lease's `counter`, a fencing token: a worker that lost its lease (a zombie) can no
//! longer renew or checkpoint. [`assign`] spreads leases evenly over an application's workers.
//!
//! ```text
//!         ┌──────────── release (from LEASED or PROCESSING) ─────────────┐
//!         ▼                                                              │
//!   ┌────────────┐  take   ┌────────┐  checkpoint   ┌────────────┐       │
//!   │ DISCOVERED │────────▶│ LEASED │──────────────▶│ PROCESSING │───────┘
//!   └────────────┘         └────────┘◀──────────────└────────────┘
//!                            │    take (expired) / steal   │
//!                            │                             │
//!                            └────── reach_shard_end ──────┤
//!                                                          ▼
//!   ┌─────────┐  delete   ┌──────────────────┐  create_children  ┌───────────┐
//!   │ DELETED │◀──────────│ CHILDREN_CREATED │◀──────────────────│ SHARD_END │
//!   └─────────┘           └──────────────────┘                   └───────────┘
//!        ▲
//!        └── trim, from every other state (the shard vanished past retention)
//!
//!   Loops: LEASED ⟲ renew, take (expired), steal;  PROCESSING ⟲ checkpoint, renew.
//!   take, steal, release and reach_shard_end bump the fencing counter; renew does not.
//! ```
//!
//! Where things are: [`ShardInfo`] and [`ShardGraph`] (`graph.rs`), [`Progress`],
//! [`Checkpoints`] and [`eligible`] (`progress.rs`), [`Lease`], [`LeaseState`] and
//! [`LeaseEvent`] (`lease.rs`), [`assign`] (`assign.rs`), [`Announcement`] and [`live_workers`]
//! (`peers.rs`: workers announce themselves so a fleet starting together splits the leases in
//! its first round), [`ReadPace`] and [`ReadSize`] (`pace.rs`: at most 5 GetRecords per rolling second per shard,
//! small pages while that budget has room), [`plan_round`] and [`RoundPlan`]
//! (`round.rs`: one worker's whole lease round — repair, renew, stop, take, steal — decided from
//! one read of the lease table and handed to the adapter as data), and [`ReshardSim`], a pure
//! simulator of resharding histories for tests (`history.rs`).
//!
//! ```
//! use heatsink_core::stream::{Checkpoints, Progress, ShardGraph, ShardInfo, eligible};
//!
//! let closed = |id: &str| ShardInfo { ending_seq: Some("900".into()), ..ShardInfo::new(id) };
//! let merged = ShardInfo {
//!     parent: Some("shardId-0".into()),
//!     adjacent_parent: Some("shardId-1".into()),
//!     ..ShardInfo::new("shardId-2")
//! };
//! let graph = ShardGraph::new(vec![closed("shardId-0"), closed("shardId-1"), merged])?;
//! let mut done = Checkpoints::new();
//! assert_eq!(eligible(&graph, &done), ["shardId-0", "shardId-1"]);
//!
//! done.set("shardId-0", Progress::Finished);
//! // The merge child still waits for its adjacent parent.
//! assert_eq!(eligible(&graph, &done), ["shardId-1"]);
//!
//! done.set("shardId-1", Progress::Finished);
//! assert_eq!(eligible(&graph, &done), ["shardId-2"]);
//! assert_eq!(graph.children_of("shardId-1"), ["shardId-2"]);
//! # Ok::<(), heatsink_core::stream::StreamError>(())
//! ```
//!
//! Guarantees and limits:
//! 1. Per-key order: a key's records are handed out in the order they were put, across any
//!    number of splits, merges and rescalings, when each shard is read in order and only while
//!    eligible (0 reorderings over random resharding histories in the property tests).
//! 2. No deadlock: every listed closed shard becomes eligible and can finish once its listed
//!    ancestors finish; a trimmed (absent) parent never blocks; an open shard is always
//!    eligible once its parents finish.
//! 3. Delivery is at-least-once: after a takeover, records after the last checkpoint are read
//!    again, so record processors must be idempotent (the counters in `counter` are).
//! 4. Fencing: a worker's renew, checkpoint, release or SHARD_END is refused
//!    ([`StreamError::LeaseLost`]) after any change of holder; a checkpoint never moves back.
//! 5. Balance: planning rounds converge to held-lease counts that differ by at most 1 across
//!    live workers; a worker never steals past `target = ceil(assignable / workers)`, steals only
//!    from a worker holding at least 2 more, and a balanced table gets 0 moves. With every
//!    worker announced ([`Announcement`]), no worker holds more than `ceil(leases / workers)`
//!    after its first round, and a fleet started together needs no steal at all.
//! 6. [`eligible`] and [`assign`] are O(S log S) in the number of shards or leases.
//!
//! Adapters (Kinesis / DynamoDB Streams consumer, lease table) must:
//! - build the graph from every shard the stream lists, closed ones included (ListShards
//!   without a filter, all pages), and merge `ChildShards` from GetRecords as they arrive.
//! - start a child at its first record (TRIM_HORIZON), never LATEST, once the application runs:
//!   the initial position applies only on the application's first start (no lease row yet), and
//!   then to the current leaves, as the KCL does ([`first_start`]): with LATEST every closed
//!   shard is recorded finished and every open one starts at its tip, so nothing retained
//!   before the start is read, reshards or not.
//! - compute every lease change with [`Lease::apply`] and write it conditionally on the stored
//!   `counter` (and owner) being the ones it was computed from; a failed condition means
//!   someone else moved the lease: re-read, never retry blindly.
//! - hand the lease `counter` to the record processor as a fencing token and checkpoint only
//!   after the processor's effects are durable (for the counter aggregator: after its flush).
//! - at SHARD_END create the children's leases idempotently (`attribute_not_exists`), and
//!   periodically create leases for listed shards that have none, which covers a crash between
//!   SHARD_END and [`LeaseEvent::CreateChildren`].
//! - keep clock skew between workers well below the lease duration: expiry is judged on the
//!   taker's clock. Skew can cause duplicate reading, never a lost checkpoint (fencing).

mod assign;
mod cadence;
mod delivery;
mod graph;
mod history;
mod lease;
mod pace;
mod peers;
mod progress;
mod prune;
mod recovery;
mod round;
#[cfg(test)]
mod tests;

pub use crate::backoff::{Backoff, Pauses};
pub use assign::{Assignment, Steal, assign, take_order};
pub use cadence::{Cadence, CheckpointStep, CheckpointView, Inflight};
pub use delivery::{Attempt, Delivery, DeliveryStep, Stall};
pub use graph::{ShardGraph, ShardInfo};
pub use history::{ReshardOp, ReshardSim, SimRecord};
pub use lease::{Lease, LeaseEvent, LeaseState};
pub use pace::{ReadAnswer, ReadPace, ReadSize};
pub use peers::{Announcement, live_workers};
pub use progress::{
    AT_TIMESTAMP, Checkpoints, LATEST, Position, Progress, SHARD_END, TRIM_HORIZON, eligible,
};
pub use prune::{DEAD_WORKER_LEASES, Pruned, RowPrune, prune_rows, silent_workers};
pub use recovery::{ReadFailure, Recovery};
pub use round::{
    Acquire, InitialPosition, LeaseRepair, MalformedRow, RoundInput, RoundPlan, first_start,
    plan_round,
};

/// Everything that can go wrong building the shard graph or moving a lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// A listed shard is malformed (empty id, adjacent parent without parent, bad range…).
    #[error("shard {shard_id:?} is invalid: {reason}")]
    InvalidShard {
        /// The shard.
        shard_id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The same shard id was listed twice; the listing is corrupt or pages overlap.
    #[error("shard {0:?} is listed twice")]
    DuplicateShard(String),
    /// A shard names itself as a parent.
    #[error("shard {0:?} is its own parent")]
    SelfParent(String),
    /// Parent links form a cycle through this shard; no shard on it could ever be read.
    #[error("shard {0:?} is on a lineage cycle")]
    Cycle(String),
    /// A shard was re-listed with different parents or a changed value; keep the old graph.
    #[error("shard {shard_id:?} was re-listed with a different {field}")]
    ConflictingShard {
        /// The shard.
        shard_id: String,
        /// The field that differs.
        field: &'static str,
    },
    /// A stored checkpoint is neither a sentinel nor a sequence number.
    #[error("checkpoint {0:?} is not TRIM_HORIZON, SHARD_END or a sequence number")]
    InvalidCheckpoint(String),
    /// The event cannot happen in this state (the diagram has no such arrow).
    #[error("a lease in state {from} cannot {event}")]
    IllegalTransition {
        /// The lease's state.
        from: LeaseState,
        /// The refused event.
        event: &'static str,
    },
    /// The lease is held and unexpired; steal it or wait for expiry.
    #[error("lease of {shard_id:?} is held by {owner:?} until {expires_at_ms} ms")]
    LeaseHeld {
        /// The shard.
        shard_id: String,
        /// Its holder.
        owner: String,
        /// When it lapses unless renewed.
        expires_at_ms: u64,
    },
    /// A worker tried to steal a lease it already holds.
    #[error("lease of {shard_id:?} is already held by this worker")]
    AlreadyOwner {
        /// The shard.
        shard_id: String,
    },
    /// The worker no longer holds the lease (or holds an old fencing token): stop processing
    /// the shard and drop its buffered work.
    #[error("lease of {shard_id:?} was lost; now held by {holder:?} with counter {counter}")]
    LeaseLost {
        /// The shard.
        shard_id: String,
        /// Who holds it now, if anyone.
        holder: Option<String>,
        /// The current fencing token.
        counter: u64,
    },
    /// A checkpoint would move backwards.
    #[error("checkpoint of {shard_id:?} would move back from {stored} to {attempted}")]
    CheckpointRegression {
        /// The shard.
        shard_id: String,
        /// The stored checkpoint.
        stored: String,
        /// The refused one.
        attempted: String,
    },
}
