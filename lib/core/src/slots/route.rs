//! The router's retry rule: what to do with each answer an owner gives a routed write.

use std::time::Duration;

/// What an owner answered one routed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The write was stored.
    Accepted,
    /// The item already holds exactly this version: an earlier attempt of this same write was
    /// stored (its reply was lost). Success; nothing is written twice.
    AlreadyApplied,
    /// The item holds a newer version: this write lost to a later one (not an error).
    Superseded {
        /// The version stored.
        stored: u64,
    },
    /// The owner's fence item says the slot left: it went to `to` at `epoch` (or is about to,
    /// when the directory has not flipped yet).
    Moved {
        /// The table the slot went to.
        to: String,
        /// The epoch it is owned at there.
        epoch: u64,
    },
    /// Throttled, timed out or unreachable: the write may or may not have been stored.
    Transient,
}

/// What the router does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Stop: the write is durable at its version (or superseded by a newer one).
    Done,
    /// Reload the directory after `after`, then route the same write again.
    Reload {
        /// How long to wait first (zero on the first MOVED: the map is simply old).
        after: Duration,
    },
    /// Send the same write to the same owner again after a pause.
    Retry {
        /// The pause.
        after: Duration,
    },
    /// Give up: attempts exhausted. The write may or may not be stored; it is not acknowledged.
    GiveUp,
}

/// Bounded exponential backoff for routed writes.
///
/// Every retry sends the *same* item with the *same* version under the condition
/// `attribute_not_exists(v) OR v < :v`, so a retry of a write that was stored answers
/// [`Answer::AlreadyApplied`] and is never stored twice: retries are safe to repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryRule {
    /// Attempts that did not answer MOVED (throttled, timed out), the first included.
    pub max_attempts: u32,
    /// The first backoff.
    pub base: Duration,
    /// The longest single backoff after a transient failure.
    pub cap: Duration,
    /// The longest single backoff between MOVED answers, and the directory poll interval of a
    /// bounced write: while the slot is fenced the router polls the directory this often
    /// (sending the write again only once the map changed), so it writes to the new owner at
    /// most this long after the flip (the end of the pause).
    pub moved_cap: Duration,
    /// MOVED answers plus directory polls a write may spend before it gives up (a fence that
    /// outlasts about `max_moved × moved_cap` is a stuck move, not a pause).
    pub max_moved: u32,
    /// How long a write may keep retrying transient failures (throttled, timed out,
    /// unreachable) before it gives up unacknowledged: no retry starts past it, so a write to a
    /// hung owner ends within `deadline` plus its last attempt's call timeout. MOVED answers
    /// and directory polls are bounded by `max_moved` instead.
    pub deadline: Duration,
}

impl Default for RetryRule {
    /// 40 transient attempts, 5 ms doubling to 100 ms (about 3 s of throttling), retried for
    /// at most 10 s (a hung owner times out each attempt: four of the router's 2.5 s calls);
    /// between MOVED answers 5 then 10 ms, up to 500 of them (rides out a fence of about 5 s).
    fn default() -> Self {
        Self {
            max_attempts: 40,
            base: Duration::from_millis(5),
            cap: Duration::from_millis(100),
            moved_cap: Duration::from_millis(10),
            max_moved: 500,
            deadline: Duration::from_secs(10),
        }
    }
}

impl RetryRule {
    /// Whether a retry that waits `wait` after `elapsed` of the write still starts before
    /// [`RetryRule::deadline`]; when it does not, the write gives up unacknowledged.
    pub fn retry_in_time(&self, elapsed: Duration, wait: Duration) -> bool {
        elapsed.saturating_add(wait) < self.deadline
    }

    /// The backoff before retry number `n` (1-based): `base · 2^(n-1)`, at most `cap`.
    pub fn backoff(&self, n: u32) -> Duration {
        let factor = 1u32
            .checked_shl(n.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The decision after attempt number `attempt` (1-based) got `answer`. `moved_before`
    /// counts the MOVED answers this write already had: the first reloads at once (the map
    /// was old), later ones back off up to `moved_cap` (the slot is fenced and the flip has
    /// not committed yet).
    pub fn next(&self, attempt: u32, moved_before: u32, answer: &Answer) -> Next {
        let transient = attempt.saturating_sub(moved_before);
        match answer {
            Answer::Accepted | Answer::AlreadyApplied | Answer::Superseded { .. } => Next::Done,
            Answer::Moved { .. } if moved_before.saturating_add(1) >= self.max_moved => {
                Next::GiveUp
            }
            Answer::Transient if transient >= self.max_attempts => Next::GiveUp,
            Answer::Moved { .. } if moved_before == 0 => Next::Reload {
                after: Duration::ZERO,
            },
            Answer::Moved { .. } => Next::Reload {
                after: self.backoff(moved_before).min(self.moved_cap),
            },
            Answer::Transient => Next::Retry {
                after: self.backoff(transient),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A model of one slot on two owners: a source whose fence goes up at step `fence_at`, a
    /// directory that flips at `flip_at`, a router whose map is old until it reloads, and a
    /// link that loses replies (the write was stored, the router hears Transient).
    #[derive(Debug)]
    struct World {
        fence_at: u32,
        flip_at: u32,
        lost_replies: Vec<bool>,
        stored: [Option<u64>; 2],
        stores: [u32; 2],
        step: u32,
    }

    impl World {
        fn directory(&self) -> usize {
            usize::from(self.step >= self.flip_at)
        }

        fn send(&mut self, owner: usize, version: u64) -> Answer {
            self.step += 1;
            let fenced = owner == 0 && self.step >= self.fence_at;
            if fenced {
                return Answer::Moved {
                    to: "t1".into(),
                    epoch: 2,
                };
            }
            if owner == 1 && self.step < self.flip_at {
                // The target refuses until it owns the slot (nobody routes there before).
                return Answer::Transient;
            }
            let answer = match self.stored[owner] {
                Some(v) if v == version => Answer::AlreadyApplied,
                Some(v) if v > version => Answer::Superseded { stored: v },
                _ => {
                    self.stored[owner] = Some(version);
                    self.stores[owner] += 1;
                    Answer::Accepted
                }
            };
            let lost = self
                .lost_replies
                .get(self.step as usize)
                .copied()
                .unwrap_or(false);
            if lost { Answer::Transient } else { answer }
        }
    }

    fn run(rule: &RetryRule, world: &mut World, version: u64) -> (Next, usize) {
        let mut owner = 0; // the router's map is the old one
        let mut moved = 0;
        // Bounded, so a rule that never gives up fails the property instead of hanging it.
        for attempt in 1..=2_000 {
            let answer = world.send(owner, version);
            match rule.next(attempt, moved, &answer) {
                Next::Done => return (Next::Done, owner),
                Next::GiveUp => return (Next::GiveUp, owner),
                Next::Reload { .. } => {
                    moved += 1;
                    owner = world.directory();
                }
                Next::Retry { .. } => {}
            }
        }
        (Next::GiveUp, owner)
    }

    proptest! {
        #[test]
        fn a_routed_write_lands_once_on_the_owner_that_holds_the_slot(
            fence_at in 1u32..20,
            gap in 0u32..300,
            lost in prop::collection::vec(any::<bool>(), 0..30),
        ) {
            let rule = RetryRule::default();
            let mut w = World { fence_at, flip_at: fence_at + gap, lost_replies: lost, stored: [None, None], stores: [0, 0], step: 0 };
            let (next, owner) = run(&rule, &mut w, 7);
            prop_assert_eq!(next, Next::Done);
            // Never stored twice on one side (retries are safe to repeat), never on the target
            // before the flip, and never on the source after its fence (the model refuses).
            prop_assert!(w.stores[0] <= 1 && w.stores[1] <= 1, "{:?}", w.stores);
            if owner == 1 { prop_assert!(w.step >= w.flip_at); }
            // What the source accepted before its fence, the mover's drain carries to the
            // target; so after the flip the owner holds the write whichever side took it.
            let drained = if w.step >= w.flip_at { w.stored[1].max(w.stored[0]) } else { w.stored[0] };
            prop_assert_eq!(drained, Some(7));
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_attempts_are_bounded() {
        let rule = RetryRule::default();
        assert_eq!(rule.backoff(1), Duration::from_millis(5));
        assert_eq!(rule.backoff(3), Duration::from_millis(20));
        assert_eq!(rule.backoff(30), Duration::from_millis(100));
        assert_eq!(rule.next(40, 0, &Answer::Transient), Next::GiveUp);
        // MOVED answers do not use up the transient attempts, and back off at most 10 ms.
        assert_eq!(
            rule.next(45, 10, &Answer::Transient),
            Next::Retry {
                after: Duration::from_millis(100)
            }
        );
        let moved = Answer::Moved {
            to: "t".into(),
            epoch: 2,
        };
        assert_eq!(
            rule.next(30, 29, &moved),
            Next::Reload {
                after: Duration::from_millis(10)
            }
        );
        assert_eq!(rule.next(500, 499, &moved), Next::GiveUp);
        assert_eq!(
            rule.next(
                1,
                0,
                &Answer::Moved {
                    to: "t".into(),
                    epoch: 2
                }
            ),
            Next::Reload {
                after: Duration::ZERO
            }
        );
        assert_eq!(
            rule.next(
                2,
                1,
                &Answer::Moved {
                    to: "t".into(),
                    epoch: 2
                }
            ),
            Next::Reload {
                after: Duration::from_millis(5)
            }
        );
        assert_eq!(rule.next(2, 1, &Answer::AlreadyApplied), Next::Done);
    }

    #[test]
    fn no_retry_starts_past_the_deadline() {
        let rule = RetryRule::default();
        let ms = Duration::from_millis;
        // A hung owner: four 2.5 s timeouts, then the fifth retry would start past 10 s.
        assert!(rule.retry_in_time(ms(7_520), ms(20)));
        assert!(!rule.retry_in_time(ms(10_030), ms(40)));
        assert!(
            !rule.retry_in_time(ms(9_990), ms(10)),
            "ends at the deadline"
        );
        assert!(!rule.retry_in_time(Duration::MAX, ms(1)), "saturates");
    }
}
