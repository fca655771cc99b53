//! The consumer's failure policy as data: what a shard task does after each attempt at a batch.
//!
//! A batch the processor fails is retried with capped, doubling back-off until it succeeds or
//! the lease is lost; it is never checkpointed past. After `max_attempts` failed attempts the
//! shard is reported **stalled** (once per batch) while it keeps retrying. Skipping is opt-in:
//! with a dead-letter sink, every failed attempt from the `max_attempts`-th on offers the batch
//! to the sink, and only once the sink took it may the checkpoint move past it. A fenced
//! processor stops the shard; an aborting one stops the worker without checkpointing.
//!
//! [`Delivery`] decides, the adapter executes: it calls the processor, tells the policy how the
//! attempt ended ([`Attempt`]) and does what the returned [`DeliveryStep`] says.
//!
//! ```
//! use std::time::Duration;
//! use heatsink_core::stream::{Attempt, Backoff, Delivery, DeliveryStep, Stall};
//!
//! let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
//! let mut batch = Delivery::new(3, backoff, false); // 3 attempts, no dead-letter sink
//! let retry = |pause, stall| DeliveryStep::Retry { pause: Duration::from_millis(pause), stall };
//! assert_eq!(batch.attempted(Attempt::Failed), retry(200, Stall::No));
//! assert_eq!(batch.attempted(Attempt::Failed), retry(400, Stall::No));
//! assert_eq!(batch.attempted(Attempt::Failed), retry(800, Stall::Now)); // report it once
//! assert_eq!(batch.attempted(Attempt::Failed), retry(1_600, Stall::Already));
//! assert_eq!(batch.attempted(Attempt::Delivered), DeliveryStep::Done { recovered: true });
//! ```

use std::time::Duration;

use crate::backoff::{Backoff, Pauses};

/// How one attempt at a batch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The processor took the batch (its effects are durable).
    Delivered,
    /// The processor's fenced write was refused: a newer holder owns the shard.
    Fenced,
    /// The processor cannot deliver at all (`StreamError::Abort`).
    Abort,
    /// Any other failure: retry.
    Failed,
}

/// Whether a retry reports the shard stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Fewer than `max_attempts` attempts failed: an ordinary retry.
    No,
    /// This failure made the shard stalled: report it (error log, stalled-shard metric).
    Now,
    /// Stalled and reported before: retry quietly.
    Already,
}

/// What the shard task does next with the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStep {
    /// The batch is done: the checkpoint may move past it. `recovered`: it had been reported
    /// stalled (clear the report).
    Done {
        /// The batch had stalled the shard before it went through.
        recovered: bool,
    },
    /// Offer the batch to the dead-letter sink; once the sink took it the batch is done
    /// (skipped), a refusal goes to [`Delivery::dead_letter_refused`].
    DeadLetter,
    /// Wait `pause` (or stop if the lease lapses or shutdown comes first), then try again.
    Retry {
        /// How long to wait.
        pause: Duration,
        /// Whether to report the shard stalled.
        stall: Stall,
    },
    /// Stop the shard: its lease is lost.
    StopShard,
    /// Stop the worker without checkpointing the batch.
    StopWorker,
}

/// The failure policy applied to one batch, attempt after attempt.
#[derive(Clone, Debug)]
pub struct Delivery {
    max_attempts: u32,
    backoff: Pauses,
    has_sink: bool,
    attempts: u32,
    stalled: bool,
}

impl Delivery {
    /// The policy for a fresh batch: `max_attempts` (at least 1) before it stalls or goes to
    /// the sink, `backoff` between attempts, `has_sink` when skipping is enabled.
    pub fn new(max_attempts: u32, backoff: Backoff, has_sink: bool) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            backoff: backoff.pauses(),
            has_sink,
            attempts: 0,
            stalled: false,
        }
    }

    /// Attempts made so far (for logs).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether the batch has stalled the shard.
    pub fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// Folds in how an attempt ended.
    pub fn attempted(&mut self, attempt: Attempt) -> DeliveryStep {
        self.attempts = self.attempts.saturating_add(1);
        match attempt {
            Attempt::Delivered => DeliveryStep::Done {
                recovered: self.stalled,
            },
            Attempt::Fenced => DeliveryStep::StopShard,
            Attempt::Abort => DeliveryStep::StopWorker,
            Attempt::Failed if self.attempts >= self.max_attempts && self.has_sink => {
                DeliveryStep::DeadLetter
            }
            Attempt::Failed => self.retry(),
        }
    }

    /// The dead-letter sink refused the batch: it stalls the shard and is retried.
    pub fn dead_letter_refused(&mut self) -> DeliveryStep {
        self.retry()
    }

    fn retry(&mut self) -> DeliveryStep {
        let stall = if self.attempts < self.max_attempts {
            Stall::No
        } else if self.stalled {
            Stall::Already
        } else {
            self.stalled = true;
            Stall::Now
        };
        DeliveryStep::Retry {
            pause: self.backoff.pause(),
            stall,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn attempt() -> impl Strategy<Value = Attempt> {
        prop_oneof![
            1 => Just(Attempt::Delivered),
            1 => Just(Attempt::Fenced),
            1 => Just(Attempt::Abort),
            6 => Just(Attempt::Failed),
        ]
    }

    /// Runs one batch through the policy: attempts in order, the sink refusing or taking it.
    /// Returns every step taken, ending at the first terminal one.
    fn run(
        max_attempts: u32,
        has_sink: bool,
        attempts: &[Attempt],
        sink_takes: &[bool],
        first: u64,
        max: u64,
    ) -> Vec<DeliveryStep> {
        let backoff = Backoff::new(Duration::from_millis(first), Duration::from_millis(max));
        let mut d = Delivery::new(max_attempts, backoff, has_sink);
        let mut sink = sink_takes.iter().copied().cycle();
        let mut steps = Vec::new();
        for a in attempts {
            let mut step = d.attempted(*a);
            if step == DeliveryStep::DeadLetter {
                steps.push(step);
                if sink.next().unwrap_or(false) {
                    break; // the sink took it: skipped
                }
                step = d.dead_letter_refused();
            }
            steps.push(step);
            if !matches!(step, DeliveryStep::Retry { .. }) {
                break;
            }
        }
        steps
    }

    proptest! {
        #[test]
        fn a_failed_batch_is_never_done_and_reaches_the_sink_only_after_max_attempts(
            max_attempts in 0u32..6,
            has_sink in any::<bool>(),
            attempts in proptest::collection::vec(attempt(), 1..30),
            sink_takes in proptest::collection::vec(any::<bool>(), 1..4),
        ) {
            let steps = run(max_attempts, has_sink, &attempts, &sink_takes, 200, 5_000);
            let mut failed = 0u32;
            let mut i = 0;
            for a in &attempts {
                let Some(step) = steps.get(i) else { break };
                match a {
                    Attempt::Failed => {
                        failed += 1;
                        prop_assert!(!matches!(step, DeliveryStep::Done { .. }),
                            "a failed attempt never moves the checkpoint");
                        if *step == DeliveryStep::DeadLetter {
                            prop_assert!(has_sink, "no sink, no skipping");
                            prop_assert!(failed >= max_attempts.max(1),
                                "the sink only after max_attempts failures");
                            i += 1;
                        }
                    }
                    Attempt::Delivered => {
                        prop_assert!(matches!(steps[i], DeliveryStep::Done { .. }), "delivered is done");
                    }
                    Attempt::Fenced => prop_assert_eq!(steps[i], DeliveryStep::StopShard),
                    Attempt::Abort => prop_assert_eq!(steps[i], DeliveryStep::StopWorker),
                }
                i += 1;
            }
        }

        #[test]
        fn a_stall_is_reported_once_at_max_attempts_and_cleared_by_success(
            max_attempts in 1u32..6,
            failures in 0u32..12,
            has_sink in any::<bool>(),
        ) {
            let mut attempts = vec![Attempt::Failed; failures as usize];
            attempts.push(Attempt::Delivered);
            // The sink refuses everything: with or without one, the batch stalls alike.
            let steps = run(max_attempts, has_sink, &attempts, &[false], 200, 5_000);
            let stalls: Vec<Stall> = steps.iter().filter_map(|s| match s {
                DeliveryStep::Retry { stall, .. } => Some(*stall),
                _ => None,
            }).collect();
            prop_assert_eq!(stalls.len(), failures as usize);
            for (n, stall) in stalls.iter().enumerate() {
                let attempt = u32::try_from(n).unwrap() + 1;
                let want = if attempt < max_attempts {
                    Stall::No
                } else if attempt == max_attempts {
                    Stall::Now
                } else {
                    Stall::Already
                };
                prop_assert_eq!(*stall, want, "attempt {}", attempt);
            }
            prop_assert_eq!(
                steps.last().copied(),
                Some(DeliveryStep::Done { recovered: failures >= max_attempts })
            );
        }

        #[test]
        fn pauses_double_from_the_first_and_never_pass_the_cap(
            first in 0u64..10_000,
            max in 0u64..60_000,
            n in 1usize..80,
        ) {
            let mut b =
                Backoff::new(Duration::from_millis(first), Duration::from_millis(max)).pauses();
            let pauses: Vec<Duration> = (0..n).map(|_| b.pause()).collect();
            prop_assert_eq!(pauses[0], Duration::from_millis(first));
            for w in pauses.windows(2) {
                prop_assert!(w[1] <= Duration::from_millis(max));
                prop_assert!(w[1] == (w[0] * 2).min(Duration::from_millis(max)));
            }
            b.reset();
            prop_assert_eq!(b.pause(), Duration::from_millis(first));
        }
    }

    #[test]
    fn a_huge_back_off_saturates_instead_of_panicking() {
        let mut b = Backoff::new(Duration::MAX, Duration::MAX).pauses();
        assert_eq!(b.pause(), Duration::MAX);
        assert_eq!(b.pause(), Duration::MAX);
    }

    #[test]
    fn a_sink_that_takes_the_batch_skips_it_only_after_max_attempts() {
        let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        let mut d = Delivery::new(2, backoff, true);
        assert!(matches!(
            d.attempted(Attempt::Failed),
            DeliveryStep::Retry {
                stall: Stall::No,
                ..
            }
        ));
        assert_eq!(d.attempted(Attempt::Failed), DeliveryStep::DeadLetter);
        assert!(matches!(
            d.dead_letter_refused(),
            DeliveryStep::Retry {
                stall: Stall::Now,
                ..
            }
        ));
        assert_eq!(d.attempted(Attempt::Failed), DeliveryStep::DeadLetter);
    }
}
