//! Counters: a hot count kept as per-writer absolute totals, summed on read.
//!
//! A hot counter (2,400 likes a second on post p9) is never written once per event. Each event is
//! made durable first, keyed by its user (`liked:{u}`), and the count is a view built from those
//! events' stream. A *writer* — a Lambda reading a stream shard, or a long-lived router — adds its
//! events up per key and *flushes* an **absolute total with a sequence number** to its own
//! sub-key, applied only if nothing newer is stored. A read sums the sub-keys. A rebuild job
//! recounts the durable events and writes the difference into a correction sub-key, so counts are
//! eventually exact even after a writer lost its buffer.
//!
//! One counter is one partition of the counters table:
//!
//! | pk         | sk           | written by                            | holds                  |
//! |------------|--------------|---------------------------------------|------------------------|
//! | `likes#p9` | `w#<writer>` | that writer only, conditional put     | absolute total + `seq` |
//! | `likes#p9` | `s#<n>`      | anyone, additive (`ADD`)              | salted partial sum     |
//! | `likes#p9` | `fix`        | the rebuild job, unconditional put    | correction             |
//! | `likes#p9` | `settled`    | compaction, conditional on `rev`      | closed writers' totals |
//!
//! Where things are: [`Seq`] and [`FlushCounter`] (`seq.rs`), [`CounterKey`], [`WriterId`] and
//! [`SubKey`] (`layout.rs`), [`Deltas`], [`decide`] and [`FlushPlan`] (`flush.rs`),
//! [`sum_counter`] and [`correction`] (`read.rs`), [`compact`] (`compact.rs`).
//!
//! ```
//! use std::collections::BTreeMap;
//! use heatsink_core::counter::{CounterKey, Deltas, FlushPlan, Seq, WriterId, sum_counter};
//!
//! let shard = WriterId::new("shardId-000000000000")?;
//! let p9 = CounterKey::new("likes", "p9")?;
//! let mut batch = Deltas::new();
//! batch.add_record(p9.clone(), Seq::parse("49590338271490256608559692538361571095921575989136588898")?, 1)?;
//! batch.add_record(p9.clone(), Seq::parse("49590338271490256608559692540925702759324208523137515618")?, 1)?;
//!
//! // Nothing stored yet for this shard's sub-key: write the absolute total 2.
//! let plan = FlushPlan::new(&shard, &batch, &BTreeMap::new())?;
//! let write = &plan.writes[0];
//! assert_eq!((write.pk.as_str(), write.sk.as_str(), write.total), ("likes#p9", "w#shardId-000000000000", 2));
//!
//! // The same batch redelivered after that write landed writes nothing.
//! let stored = BTreeMap::from([(p9.clone(), write.stored())]);
//! assert!(FlushPlan::new(&shard, &batch, &stored)?.writes.is_empty());
//!
//! // A read sums the writer sub-keys, the salted sub-keys and the correction.
//! let sum = sum_counter([("w#shardId-000000000000", 2), ("s#3", 5), ("fix", -1)])?;
//! assert_eq!(sum.total(), 6);
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```
//!
//! Guarantees and limits:
//! 1. A stream record is counted in its writer sub-key exactly once — 0 double counts, 0 losses —
//!    under any mix of retries, identical redeliveries, prefixes and splits of a batch (bisect on
//!    error), redelivery from a partial-batch-failure point, and replays of older batches,
//!    provided a record is delivered only after every earlier record of the same writer was
//!    delivered and flushed at least once (Lambda's per-shard order; see "Adapters" below).
//! 2. A long-lived writer's flush, retried any number of times or with a lost response, counts
//!    once. A crash loses at most the unflushed buffer (one flush interval, e.g. 500 ms),
//!    which stays missing until the next rebuild.
//! 3. Salted sub-keys are at-least-once: an additive write retried after a lost response counts
//!    twice, until the next rebuild.
//! 4. After a rebuild during which no flush lands, a read equals the recount exactly.
//! 5. A read is one Query of `W + S + 2` items (W writer sub-keys, S salts, `fix`, `settled`).
//!    Without compaction W grows by one per DynamoDB Streams shard rollover (about every 4 h),
//!    forever. With [`compact`] run over a counter, W is at most its open writers plus the
//!    closed ones folded within the tombstone grace: with a 24 h grace and 4 h rollovers at most
//!    8 per shard lineage (1 open + 7 closed), and no compaction step, retried or crashed, moves
//!    the sum.
//! 6. Totals are `i64`; arithmetic that would overflow is [`CounterError::Overflow`], never a wrap.
//!
//! Adapters (the DynamoDB counter store, the aggregator Lambda, routers) must:
//! - read the writer's sub-keys ([`Deltas::sub_keys`]) with a strongly consistent read, plan,
//!   and make each [`FlushWrite`] a put conditional on the stored `seq` being exactly
//!   [`FlushWrite::expected`] (`attribute_not_exists` when `None`). On a failed condition,
//!   re-read that key and [`decide`] again. A condition of only `seq < :new` also never counts
//!   twice for in-order delivery, but the equality is stronger and free.
//! - store `seq` as [`Seq::as_padded`] (a string attribute), never as a number.
//! - for stream writers, use the shard id as the [`WriterId`] and each record's own sequence
//!   number, with one batch in flight per shard (Lambda `ParallelizationFactor = 1`). With a
//!   higher factor, batches of one shard run concurrently and records of one counter key may be
//!   applied out of order — then a newer record's write hides an older, unapplied one. Allowed
//!   only if every record of a counter key has the same stream partition key.
//! - for long-lived writers, give each process a unique [`WriterId`], seal with a
//!   [`FlushCounter`] that has observed every stored seq read back, and keep unsettled keys'
//!   [`Deltas`] until their write succeeds or is found already applied.
//! - for salted sub-keys, `ADD` to `s#<n>`; for `fix`, put the absolute [`Correction::fix`].

mod bucket;
mod compact;
mod dedupe;
mod esm;
mod flush;
mod layout;
mod pass;
mod progress;
mod read;
mod redrive;
mod repair;
mod seq;
mod sweep;
#[cfg(test)]
mod tests;

pub use bucket::{BucketSpec, Buckets};
pub use compact::{
    CompactInput, Compaction, Fold, FoldKind, MAX_FOLDS, Settled, SettledWrite, WriterItem, compact,
};
pub use dedupe::{
    Admit, Change, ChangeId, DedupeDecision, DedupeWindow, canonical_json, decide_deduped,
    decide_deduped_seeded, decide_deduped_within,
};
pub use esm::{
    EsmPlan, EsmPlanRequest, SHARD_BYTES_PER_SECOND, SHARD_RECORDS_PER_SECOND, SHARD_TARGET,
    esm_plan,
};
pub use flush::{Deltas, FlushDecision, FlushPlan, FlushWrite, KeyDeltas, Stored, decide};
pub use layout::{CounterKey, SubKey, WriterId};
pub use pass::{
    Check, PassPlan, PassSpan, PostChecks, RepairCursor, Resume, SpanRule, plan_pass, plan_span,
};
pub use progress::{Gate, Progress, progress, retire_due};
pub use read::{Correction, CounterSum, correction, sum_counter};
pub use redrive::{
    MAX_PARKED_BATCH, MAX_PARKED_BYTES, ParkedBatch, ParkedError, ParkedSource, RangeOutcome,
    RangeRead,
};
pub use repair::{
    Verdict, Watermark, WholeRead, WholeVerdict, judge, judge_whole, needed_general,
    needed_insert_only, rejudge,
};
pub use seq::{FlushCounter, Seq};
pub use sweep::{is_quiet, sweep_horizon};

/// Everything that can go wrong building, flushing or reading a counter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    /// A sequence number was an empty string; the adapter passed a missing attribute.
    #[error("sequence number is empty")]
    EmptySeq,
    /// A sequence number had a character other than `0-9`; reject the record or item.
    #[error("sequence number {0:?} is not a decimal number")]
    SeqNotDecimal(String),
    /// A sequence number has more significant digits than the stored width holds.
    #[error("sequence number has {digits} significant digits, more than the {max} stored")]
    SeqTooLong {
        /// Significant digits of the input.
        digits: usize,
        /// [`Seq::WIDTH`].
        max: usize,
    },
    /// A counter name or key cannot form a valid partition key.
    #[error("counter key {pk:?} is invalid: {reason}")]
    InvalidCounterKey {
        /// The partition key that was attempted.
        pk: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A writer id cannot form a valid sort key.
    #[error("writer id {id:?} is invalid: {reason}")]
    InvalidWriterId {
        /// The id given.
        id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An item's sort key is not `w#<writer>`, `s#<n>` or `fix`; something else writes the
    /// counters table.
    #[error("sort key {0:?} is not w#<writer>, s#<n> or fix")]
    UnknownSortKey(String),
    /// A stored dedupe window is not in the form [`DedupeWindow::encode`] writes.
    #[error("stored dedupe window is malformed: {0}")]
    BadDedupeWindow(&'static str),
    /// A bucket width of 0, or more than 1,000 buckets kept ([`BucketSpec::new`]).
    #[error("bucket width must be at least 1 ms and at most 1,000 buckets kept")]
    BadBucketSpec,
    /// A total, sum or flush number would leave its integer range.
    #[error("counter arithmetic overflowed")]
    Overflow,
}
