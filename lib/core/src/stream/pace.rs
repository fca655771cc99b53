//! GetRecords pacing on one shard: at most `calls` requests in any rolling window.
//!
//! Kinesis allows 5 `GetRecords` per second per shard. Spacing every call 200 ms apart keeps
//! to that, but a reader draining a backlog then idles 200 ms minus the call's time after
//! every answer (at 1,000 records an answer and 40 ms a call, 4 of every 5 seconds). The limit
//! is per second, not per 200 ms: five calls back to back and then a pause until the first is a
//! second old is just as legal, and a backlog drains as fast as the service answers. The
//! caller still waits its idle poll after an answer that was caught up; this only decides
//! how soon a reader that is behind may ask again.
//!
//! ```
//! use heatsink_core::stream::ReadPace;
//!
//! let mut pace = ReadPace::new(5, 1_000);
//! for at in [0, 40, 80, 120, 160] {
//!     assert_eq!(pace.earliest(at), at); // the first five go at once
//!     pace.record(at);
//! }
//! assert_eq!(pace.earliest(200), 1_000); // the sixth waits until the first is 1 s old
//! ```
//!
//! Guarantee (property-tested): calls started no earlier than [`ReadPace::earliest`] never put
//! more than `calls` starts in any half-open window of `window_ms`; and a call is never delayed
//! while fewer than `calls` starts lie in the window before it.

use std::collections::VecDeque;

/// Rolling-window pacing of one shard's reads (a pure state machine over millisecond times
/// from one monotonic clock).
#[derive(Clone, Debug)]
pub struct ReadPace {
    calls: usize,
    window_ms: u64,
    /// Start times of the last `calls` requests, oldest first.
    recent: VecDeque<u64>,
}

impl ReadPace {
    /// At most `calls` (at least 1) requests in any `window_ms`; Kinesis: `new(5, 1_000)`.
    pub fn new(calls: usize, window_ms: u64) -> Self {
        let calls = calls.max(1);
        Self {
            calls,
            window_ms,
            recent: VecDeque::with_capacity(calls),
        }
    }

    /// The earliest time (≥ `now_ms`) the next request may start.
    pub fn earliest(&self, now_ms: u64) -> u64 {
        match self.recent.front() {
            Some(&oldest) if self.recent.len() >= self.calls => {
                now_ms.max(oldest.saturating_add(self.window_ms))
            }
            _ => now_ms,
        }
    }

    /// Records that a request started at `at_ms` (not earlier than the last one recorded).
    pub fn record(&mut self, at_ms: u64) {
        self.recent.push_back(at_ms);
        while self.recent.len() > self.calls {
            self.recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the callers' delays, no window of `window_ms` holds more than `calls`
        /// starts, and no start waited while the window before it had room.
        #[test]
        fn no_window_holds_more_than_the_limit_and_no_call_waits_needlessly(
            calls in 1usize..8,
            window_ms in 1u64..2_000,
            gaps in proptest::collection::vec(0u64..600, 1..200),
        ) {
            let mut pace = ReadPace::new(calls, window_ms);
            let mut starts: Vec<u64> = Vec::new();
            let mut now = 0u64;
            for gap in gaps {
                now += gap;
                let at = pace.earliest(now);
                prop_assert!(at >= now);
                let before = starts.iter().filter(|&&s| s + window_ms > now).count();
                if before < calls {
                    prop_assert_eq!(at, now, "waited with {} of {} in the window", before, calls);
                }
                pace.record(at);
                starts.push(at);
                now = at;
            }
            for (i, &s) in starts.iter().enumerate() {
                let in_window = starts[i..].iter().take_while(|&&t| t < s + window_ms).count();
                prop_assert!(in_window <= calls, "{} starts in [{}, {})", in_window, s, s + window_ms);
            }
        }
    }

    #[test]
    fn a_drained_window_lets_the_next_burst_go_at_once() {
        let mut pace = ReadPace::new(2, 100);
        pace.record(0);
        pace.record(10);
        assert_eq!(pace.earliest(20), 100);
        pace.record(100);
        assert_eq!(pace.earliest(105), 110);
        assert_eq!(pace.earliest(500), 500);
    }
}
