//! The mover's retry rule for one failing call: capped, jittered exponential backoff inside a
//! deadline.
//!
//! Throttling, timeouts and dispatch failures are retried: the wait before retry `n` is drawn
//! from `[c/2, c]` where `c = min(cap, base · 2^(n-1))` (half fixed so retries of one call
//! never bunch at zero, half random so the mover's concurrent calls spread out). A call whose
//! next wait would end past the step's deadline is not retried: the mover stops and reports
//! the phase, the cause and the command that continues it.

use std::time::Duration;

/// Backoff for one call (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first wait.
    pub base: Duration,
    /// The longest single wait.
    pub cap: Duration,
    /// How long one call may keep failing before the mover stops.
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
    /// The ceiling of the wait before retry `n` (1-based): `base · 2^(n-1)`, at most `cap`.
    pub fn ceiling(&self, n: u32) -> Duration {
        let factor = 1u32
            .checked_shl(n.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before retry `n` after `elapsed` of failures, with `jitter` in `0..1`; `None`
    /// when that wait would end past the deadline (stop and report).
    pub fn wait(&self, n: u32, elapsed: Duration, jitter: f64) -> Option<Duration> {
        let c = self.ceiling(n);
        let wait = c / 2 + (c / 2).mul_f64(jitter.clamp(0.0, 1.0));
        (elapsed.saturating_add(wait) <= self.deadline).then_some(wait)
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
