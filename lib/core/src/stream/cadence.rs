//! When a shard task writes its checkpoint, as data.
//!
//! Checkpoints are decoupled from batches: a write starts once `every_records` records or
//! `interval` have passed since the last one started, with at most one write in flight; a
//! finished write is collected before anything else; and processing that ran `2 ×
//! every_records` ahead of the write in flight waits for it. After a crash the next holder
//! re-reads at most `every_records` plus one batch of records, or `interval` plus one write's
//! worth, per shard. (Forced checkpoints — at SHARD_END, before a release, when the lease
//! lapses — are the adapter's, outside this cadence.)
//!
//! The adapter asks [`Cadence::next`] after each processed batch and on every tick, does what
//! the [`CheckpointStep`] says, and asks again until [`CheckpointStep::Idle`] or after a
//! [`CheckpointStep::Start`] (at most a collect and a start per call).
//!
//! ```
//! use std::time::Duration;
//! use heatsink_core::stream::{Cadence, CheckpointStep, CheckpointView, Inflight};
//!
//! let cadence = Cadence::new(100, Duration::from_secs(1));
//! let view = |uncheckpointed, inflight| CheckpointView {
//!     uncheckpointed,
//!     since_last: Duration::from_millis(10),
//!     inflight,
//!     pending: true,
//! };
//! assert_eq!(cadence.next(&view(99, Inflight::None)), CheckpointStep::Idle);
//! assert_eq!(cadence.next(&view(100, Inflight::None)), CheckpointStep::Start);
//! assert_eq!(cadence.next(&view(150, Inflight::Running)), CheckpointStep::Idle);
//! assert_eq!(cadence.next(&view(200, Inflight::Running)), CheckpointStep::Collect);
//! assert_eq!(cadence.next(&view(0, Inflight::Finished)), CheckpointStep::Collect);
//! ```

use std::time::Duration;

/// The checkpoint cadence of a shard task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    every_records: usize,
    interval: Duration,
}

/// The state of the one checkpoint write a shard task may have in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inflight {
    /// No write in flight.
    None,
    /// A write is running.
    Running,
    /// A write finished and was not collected yet.
    Finished,
}

/// What the cadence looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointView {
    /// Records processed since the last write started.
    pub uncheckpointed: usize,
    /// Time since the last write started.
    pub since_last: Duration,
    /// The write in flight.
    pub inflight: Inflight,
    /// Whether a processed position is waiting to be written.
    pub pending: bool,
}

/// What the shard task does with its checkpoint now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointStep {
    /// Nothing: go on processing.
    Idle,
    /// Wait for the write in flight and fold its result in (a failed write's position is
    /// pending again).
    Collect,
    /// Start writing the pending position (the records-since count starts again at 0).
    Start,
}

impl Cadence {
    /// A write every `every_records` records (at least 1) or every `interval`.
    pub fn new(every_records: usize, interval: Duration) -> Self {
        Self {
            every_records: every_records.max(1),
            interval,
        }
    }

    /// Whether a write is due.
    pub fn is_due(&self, uncheckpointed: usize, since_last: Duration) -> bool {
        uncheckpointed >= self.every_records || since_last >= self.interval
    }

    /// The next step for `view`.
    pub fn next(&self, view: &CheckpointView) -> CheckpointStep {
        match view.inflight {
            Inflight::Finished => CheckpointStep::Collect,
            Inflight::Running if view.uncheckpointed >= self.every_records.saturating_mul(2) => {
                CheckpointStep::Collect
            }
            Inflight::Running => CheckpointStep::Idle,
            Inflight::None if view.pending && self.is_due(view.uncheckpointed, view.since_last) => {
                CheckpointStep::Start
            }
            Inflight::None => CheckpointStep::Idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn inflight() -> impl Strategy<Value = Inflight> {
        prop_oneof![
            Just(Inflight::None),
            Just(Inflight::Running),
            Just(Inflight::Finished)
        ]
    }

    /// A shard task driven by the cadence: batches of `sizes` records, `gap_ms` apart; a write
    /// finishes `write_ms` after it starts and fails when `fails` says so.
    struct Sim {
        cadence: Cadence,
        now: u64,
        started_at: u64,
        uncheckpointed: usize,
        pending: Option<u64>,
        inflight: Option<(u64, u64, bool)>, // (position, done at, fails)
        durable: u64,
        processed: u64,
    }

    impl Sim {
        fn view(&self) -> CheckpointView {
            CheckpointView {
                uncheckpointed: self.uncheckpointed,
                since_last: Duration::from_millis(self.now - self.started_at),
                inflight: match self.inflight {
                    None => Inflight::None,
                    Some((_, done, _)) if done <= self.now => Inflight::Finished,
                    Some(_) => Inflight::Running,
                },
                pending: self.pending.is_some(),
            }
        }

        /// Follows the cadence until idle; returns the steps taken.
        fn settle(&mut self, write_ms: u64, fails: bool) -> Vec<CheckpointStep> {
            let mut steps = Vec::new();
            loop {
                let step = self.cadence.next(&self.view());
                steps.push(step);
                match step {
                    CheckpointStep::Idle => return steps,
                    CheckpointStep::Collect => {
                        let (position, done, failed) = self.inflight.take().unwrap();
                        self.now = self.now.max(done); // waiting for it
                        if failed {
                            self.pending.get_or_insert(position);
                        } else {
                            self.durable = self.durable.max(position);
                        }
                    }
                    CheckpointStep::Start => {
                        assert!(self.inflight.is_none(), "one write in flight");
                        let position = self.pending.take().unwrap();
                        self.inflight = Some((position, self.now + write_ms, fails));
                        self.uncheckpointed = 0;
                        self.started_at = self.now;
                        return steps;
                    }
                }
                assert!(steps.len() <= 2, "a collect, then a start or idle");
            }
        }
    }

    proptest! {
        #[test]
        fn one_write_in_flight_none_idle_while_due_and_processing_never_twice_the_cadence_ahead(
            every in 1usize..50,
            interval_ms in 1u64..2_000,
            batches in proptest::collection::vec((1usize..40, 0u64..300, 0u64..500, any::<bool>()), 1..120),
        ) {
            let mut sim = Sim {
                cadence: Cadence::new(every, Duration::from_millis(interval_ms)),
                now: 0, started_at: 0, uncheckpointed: 0, pending: None, inflight: None,
                durable: 0, processed: 0,
            };
            for (size, gap, write_ms, fails) in batches {
                sim.now += gap;
                sim.processed += size as u64;
                sim.pending = Some(sim.processed);
                sim.uncheckpointed += size;
                let steps = sim.settle(write_ms, fails);
                let due = sim.uncheckpointed >= every || sim.now - sim.started_at >= interval_ms;
                prop_assert!(sim.inflight.is_some() || !due || sim.pending.is_none(),
                    "idle with a due write and none in flight: {:?}", steps);
                // Processing never runs 2 x every ahead of the write in flight.
                prop_assert!(sim.inflight.is_none() || sim.uncheckpointed < 2 * every);
                prop_assert!(sim.durable <= sim.processed, "never past what was processed");
            }
        }

        #[test]
        fn a_finished_write_is_collected_first_and_a_start_needs_a_pending_position(
            every in 1usize..1_000,
            interval_ms in 0u64..5_000,
            uncheckpointed in 0usize..5_000,
            since in 0u64..10_000,
            inflight in inflight(),
            pending in any::<bool>(),
        ) {
            let cadence = Cadence::new(every, Duration::from_millis(interval_ms));
            let view = CheckpointView {
                uncheckpointed,
                since_last: Duration::from_millis(since),
                inflight,
                pending,
            };
            let step = cadence.next(&view);
            if inflight == Inflight::Finished {
                prop_assert_eq!(step, CheckpointStep::Collect);
            }
            if step == CheckpointStep::Start {
                prop_assert!(pending && inflight == Inflight::None);
                prop_assert!(uncheckpointed >= every || since >= interval_ms);
            }
            if step == CheckpointStep::Collect && inflight == Inflight::Running {
                prop_assert!(uncheckpointed >= 2 * every);
            }
        }
    }
}
