//! One backoff rule for every retry in heatsink: capped doubling from `base`, bounded by a
//! deadline where the caller has one.
//!
//! The ceiling of the wait before retry `n` (1-based) is `base · 2^(n-1)`, at most `cap`,
//! saturating on any configuration. Two callers read it two ways:
//!
//! - **the slot mover** retries one failing call with [`Backoff::wait`]: the wait is drawn from
//!   `[c/2, c]` where `c` is the ceiling (half fixed so retries of one call never bunch at zero,
//!   half random so the mover's concurrent calls spread out). A call whose next wait would end
//!   past the step's `deadline` is not retried: the mover stops and reports the phase, the cause
//!   and the command that continues it.
//! - **the stream consumer** (its delivery policy, `stream::Delivery`, and its readers) pauses
//!   with [`Pauses`]: `base`, `2 × base`, … up to `cap` (a `base` above `cap` is waited once,
//!   then `cap`), back to `base` after a call went through; no deadline (the lease decides
//!   when to stop).
//!
//! ```
//! use std::time::Duration;
//! use heatsink_core::backoff::Backoff;
//!
//! let mut pauses = Backoff::new(Duration::from_millis(200), Duration::from_secs(1)).pauses();
//! let ms: Vec<u128> = (0..4).map(|_| pauses.pause().as_millis()).collect();
//! assert_eq!(ms, [200, 400, 800, 1_000]);
//! ```

use std::time::Duration;

/// Backoff for one call (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first wait.
    pub base: Duration,
    /// The longest single wait.
    pub cap: Duration,
    /// How long one call may keep failing before the caller stops ([`Duration::MAX`]: never).
    pub deadline: Duration,
}

impl Default for Backoff {
    /// 50 ms doubling to 5 s, for at most 2 minutes of failures of one call.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
            deadline: Duration::from_secs(120),
        }
    }
}

impl Backoff {
    /// Doubling from `base` up to `cap`, with no deadline.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            deadline: Duration::MAX,
        }
    }

    /// The ceiling of the wait before retry `n` (1-based): `base · 2^(n-1)`, at most `cap`.
    pub fn ceiling(&self, n: u32) -> Duration {
        let mut c = self.base;
        // Doubling saturates at `cap` (or at Duration::MAX) within ~100 steps; 0 stays 0.
        for _ in 1..n {
            if c >= self.cap || c.is_zero() {
                break;
            }
            c = c.saturating_mul(2);
        }
        c.min(self.cap)
    }

    /// The wait before retry `n` after `elapsed` of failures, with `jitter` in `0..1`; `None`
    /// when that wait would end past the deadline (stop and report).
    pub fn wait(&self, n: u32, elapsed: Duration, jitter: f64) -> Option<Duration> {
        let c = self.ceiling(n);
        let wait = c / 2 + (c / 2).mul_f64(jitter.clamp(0.0, 1.0));
        (elapsed.saturating_add(wait) <= self.deadline).then_some(wait)
    }

    /// The pauses of a retry loop without jitter: `base` first, then the ceilings.
    pub fn pauses(self) -> Pauses {
        Pauses {
            backoff: self,
            n: 0,
        }
    }
}

/// Successive pauses of one retry loop ([`Backoff::pauses`]): `base`, then `ceiling(2)`,
/// `ceiling(3)`, … (each the previous doubled, capped at `cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pauses {
    backoff: Backoff,
    n: u32,
}

impl Pauses {
    /// The pause to wait now; the following one doubles, capped at `cap`.
    pub fn pause(&mut self) -> Duration {
        self.n = self.n.saturating_add(1);
        if self.n == 1 {
            self.backoff.base
        } else {
            self.backoff.ceiling(self.n)
        }
    }

    /// Back to `base` (after a call went through).
    pub fn reset(&mut self) {
        self.n = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn waits_double_to_the_cap_and_stop_at_the_deadline() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(1), Duration::from_millis(50));
        assert_eq!(b.ceiling(3), Duration::from_millis(200));
        assert_eq!(b.ceiling(30), Duration::from_secs(5));
        assert_eq!(
            b.wait(1, Duration::ZERO, 0.0),
            Some(Duration::from_millis(25))
        );
        assert_eq!(
            b.wait(1, Duration::ZERO, 1.0),
            Some(Duration::from_millis(50))
        );
        assert_eq!(b.wait(30, Duration::from_secs(118), 0.0), None);
    }

    proptest! {
        /// The consumer's pauses are the mover's ceilings (its first is `base` as given), and
        /// a backoff made with `new` has no deadline: it never stops a retry.
        #[test]
        fn the_consumers_pauses_are_the_movers_ceilings_without_a_deadline(
            base_ms in 0u64..10_000,
            cap_ms in 0u64..60_000,
            n in 1u32..80,
            elapsed_s in 0u64..1_000_000_000,
        ) {
            let b = Backoff::new(Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
            let mut pauses = b.pauses();
            prop_assert_eq!(pauses.pause(), b.base);
            for i in 2..=n {
                prop_assert_eq!(pauses.pause(), b.ceiling(i));
            }
            prop_assert!(b.wait(n, Duration::from_secs(elapsed_s), 1.0).is_some());
        }

        /// Retrying as the rule says never waits past the cap, never runs past the deadline,
        /// and keeps trying until it would.
        #[test]
        fn retries_stay_within_the_cap_and_the_deadline(
            base_ms in 1u64..500,
            cap_ms in 50u64..10_000,
            deadline_ms in 0u64..60_000,
            call_ms in 0u64..2_000,
            jitter in prop::collection::vec(0.0f64..1.0, 200),
        ) {
            let b = Backoff {
                base: Duration::from_millis(base_ms),
                cap: Duration::from_millis(cap_ms.max(base_ms)),
                deadline: Duration::from_millis(deadline_ms),
            };
            let mut elapsed = Duration::ZERO;
            let mut n = 0u32;
            loop {
                elapsed += Duration::from_millis(call_ms); // the failed call itself
                n += 1;
                let j = jitter[(n as usize) % jitter.len()];
                match b.wait(n, elapsed, j) {
                    Some(w) => {
                        prop_assert!(w <= b.cap && w >= b.ceiling(n) / 2);
                        elapsed += w;
                        prop_assert!(elapsed <= b.deadline);
                    }
                    None => {
                        prop_assert!(elapsed + b.ceiling(n) > b.deadline);
                        break;
                    }
                }
                prop_assert!(n < 100_000);
            }
        }
    }
}
