//! GetRecords pacing on one shard: at most `calls` requests in any rolling window
//! ([`ReadPace`]), and how many records each one asks for ([`ReadSize`]).
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
//!
//! ## Page size
//!
//! The call budget, not the page size, is what a reader that is behind runs out of, and only
//! when its calls come back faster than the budget refills. [`ReadSize`] therefore asks for a
//! small page (1,000 records by default: one second of a shard's maximum write rate) while the
//! window has room, and for the cap (10,000 on Kinesis) on the call after which the next one
//! would have to wait: the last call a window allows may as well take everything the service
//! gives. Once the budget does bind (a reader that is behind waits for the window), the page
//! doubles, up to the cap; once the reader reaches the shard's tip, it is back to the first
//! page ([`ReadAnswer::Tip`]). A wait after a failed call or at the tip grows nothing. Small pages hand the first records to the processor sooner, let
//! fetching and processing overlap in finer steps, and cost a slow server (kinesis-mock: about
//! 1.5× the CPU per record at 10,000 than at 1,000) less per record; big pages keep a
//! backlog draining at up to 5 × the cap per second where calls are fast.
//!
//! ```
//! use heatsink_core::stream::{ReadAnswer, ReadPace, ReadSize};
//!
//! // A shard 5,625 records behind; every call takes 150 ms.
//! let (mut pace, mut size) = (ReadPace::new(5, 1_000), ReadSize::new(1_000, 10_000));
//! let (mut now, mut left, mut asked) = (0u64, 5_625usize, Vec::new());
//! while left > 0 {
//!     assert_eq!(pace.earliest(now), now); // never waits for the window
//!     let limit = size.limit(&pace, now);
//!     pace.record(now);
//!     asked.push(limit);
//!     left -= left.min(limit);
//!     now += 150;
//!     size.answered(150, ReadAnswer::Behind);
//! }
//! // Four pages of 1,000; the fifth call would leave the sixth waiting until 1,000 ms, so it
//! // asks for the cap and gets the remaining 1,625.
//! assert_eq!(asked, [1_000, 1_000, 1_000, 1_000, 10_000]);
//! ```
//!
//! Guarantee (property-tested): every limit lies between the first page and the cap; with a
//! steady call latency a reader waits for the window only right after a call that asked for
//! the cap; and the page never shrinks while the reader is behind, and grows only when a
//! reader that is behind waits.

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

/// What one GetRecords found, as [`ReadSize::answered`] counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAnswer {
    /// Records with more behind them: the reader is behind, and a wait for the window means
    /// the call budget binds.
    Behind,
    /// The shard's tip: the backlog is gone, the next one starts from the first page.
    Tip,
    /// The call failed: nothing is known of the backlog, so a wait it causes grows nothing.
    Failed,
}

/// How many records one shard's next GetRecords asks for (module docs, *Page size*): the page
/// while the call budget has room, the cap on the last call before the budget would make the
/// reader wait, and a page that doubles each time the budget did make a reader that was behind
/// wait. A pure state machine over millisecond times from the same clock as its [`ReadPace`].
#[derive(Clone, Debug)]
pub struct ReadSize {
    /// The page a reader starts with, and returns to at the tip.
    first: usize,
    page: usize,
    cap: usize,
    /// The last call's latency: when the next call could start after one starting now.
    latency_ms: u64,
    /// Whether the last answer left the reader behind ([`ReadAnswer::Behind`]).
    behind: bool,
}

impl ReadSize {
    /// Pages of `page` records, at most `cap` (both at least 1; a page above the cap is the cap).
    pub fn new(page: usize, cap: usize) -> Self {
        let cap = cap.max(1);
        let first = page.clamp(1, cap);
        Self {
            first,
            page: first,
            cap,
            latency_ms: 0,
            behind: false,
        }
    }

    /// The current page: what a call asks for while the budget has room.
    pub fn page(&self) -> usize {
        self.page
    }

    /// The most one call asks for.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The limit for a call starting at `now_ms` (not yet recorded in `pace`): the cap if the
    /// call after it, expected one latency later, would have to wait for the window; else the
    /// page.
    pub fn limit(&self, pace: &ReadPace, now_ms: u64) -> usize {
        let mut after = pace.clone();
        after.record(now_ms);
        let next = now_ms.saturating_add(self.latency_ms);
        if after.earliest(next) > next {
            self.cap
        } else {
            self.page
        }
    }

    /// A call came back after `latency_ms` (the next call's expected latency) with `answer`;
    /// at the tip the page is back to the first.
    pub fn answered(&mut self, latency_ms: u64, answer: ReadAnswer) {
        self.latency_ms = latency_ms;
        self.behind = answer == ReadAnswer::Behind;
        if answer == ReadAnswer::Tip {
            self.page = self.first;
        }
    }

    /// The reader has to wait for the window: if its last answer left it behind, the budget
    /// binds, so the page doubles (up to the cap).
    pub fn paced(&mut self) {
        if self.behind {
            self.page = self.page.saturating_mul(2).min(self.cap);
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

    /// One simulated reader on a shard `backlog` records behind, every call taking `latency`
    /// ms, driven as the worker drives it: (start, limit, waited before it) per call.
    fn drain(
        calls: usize,
        page: usize,
        cap: usize,
        latency: u64,
        backlog: usize,
    ) -> (Vec<(u64, usize, bool)>, ReadSize) {
        let mut pace = ReadPace::new(calls, 1_000);
        let mut size = ReadSize::new(page, cap);
        let (mut now, mut left, mut log) = (0u64, backlog, Vec::new());
        while left > 0 && log.len() < 10_000 {
            let at = pace.earliest(now);
            let waited = at > now;
            if waited {
                size.paced();
            }
            let limit = size.limit(&pace, at);
            pace.record(at);
            log.push((at, limit, waited));
            left -= left.min(limit);
            now = at + latency;
            size.answered(latency, ReadAnswer::Behind);
        }
        (log, size)
    }

    proptest! {
        /// Limits stay between the page and the cap; with a steady latency the reader waits
        /// for the window only right after a call that asked for the cap, and never after a
        /// page; the page never shrinks and never passes the cap.
        #[test]
        fn the_window_stalls_a_reader_only_after_it_asked_for_the_cap(
            calls in 1usize..8,
            page in 1usize..3_000,
            cap in 1usize..12_000,
            latency in 0u64..1_500,
            backlog in 0usize..200_000,
        ) {
            let (log, size) = drain(calls, page, cap, latency, backlog);
            let first = page.clamp(1, cap.max(1));
            let mut last_page = first;
            for (i, &(_, limit, waited)) in log.iter().enumerate() {
                prop_assert!(limit >= first && limit <= cap.max(1), "limit {} outside [{}, {}]", limit, first, cap);
                if waited {
                    let before = log.get(i.wrapping_sub(1)).map(|c| c.1);
                    prop_assert_eq!(before, Some(cap.max(1)), "call {} waited after asking {:?}", i, before);
                }
                prop_assert!(limit >= last_page || limit == cap.max(1));
                if limit != cap.max(1) {
                    last_page = limit;
                }
            }
            prop_assert!(size.page() >= first && size.page() <= size.cap());
        }
    }

    #[test]
    fn a_bound_budget_doubles_the_page_up_to_the_cap() {
        // Fast calls on a deep backlog: each window fills, so each wait doubles the page.
        let (log, size) = drain(5, 1_000, 10_000, 10, 200_000);
        let pages: Vec<usize> = log.iter().filter(|c| c.2).map(|c| c.1).take(5).collect();
        assert_eq!(pages, [2_000, 4_000, 8_000, 10_000, 10_000]);
        assert_eq!(size.page(), 10_000);
        // Slow calls never wait, so the page stays put.
        let (log, size) = drain(5, 1_000, 10_000, 250, 20_000);
        assert!(log.iter().all(|c| !c.2 && c.1 == 1_000));
        assert_eq!(size.page(), 1_000);
    }

    #[test]
    fn the_tip_brings_the_page_back_to_the_first() {
        let (_, mut size) = drain(5, 1_000, 10_000, 10, 200_000);
        assert_eq!(size.page(), 10_000);
        size.answered(10, ReadAnswer::Tip);
        assert_eq!(size.page(), 1_000);
        // The latency is kept: a fresh window still asks for the first page.
        assert_eq!(size.limit(&ReadPace::new(5, 1_000), 0), 1_000);
    }

    #[test]
    fn only_a_wait_behind_a_backlog_grows_the_page() {
        let mut size = ReadSize::new(1_000, 10_000);
        size.paced(); // before any answer: nothing known of a backlog
        assert_eq!(size.page(), 1_000);
        size.answered(10, ReadAnswer::Failed);
        size.paced();
        assert_eq!(size.page(), 1_000, "a wait after a failed call");
        size.answered(10, ReadAnswer::Tip);
        size.paced();
        assert_eq!(size.page(), 1_000, "a wait at the tip");
        size.answered(10, ReadAnswer::Behind);
        size.paced();
        assert_eq!(size.page(), 2_000, "a wait behind a backlog");
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
