//! The repair rule: when a recount of one bucket may correct it, gated on the aggregator's
//! proven progress (per-writer flushed watermarks), never on wall-clock quiet.
//!
//! **Watermarks.** After every batch it flushed completely, a stream writer records how far it
//! got in change-creation time: `flushed_ms` = every change of its shard created at or before it
//! has been *processed* — counted, or given up on (a parked batch). A writer whose shard closed
//! and whose child shard has delivered is *retired* (Lambda reads a child only after its parent
//! is read to its end). The aggregator's progress is the smallest watermark of the writers that
//! are not retired ([`proven_through`]).
//!
//! **The check of one bucket `b` of one counter**, in this order:
//! 1. read every writer sub-key's `(net, events)` of `b` (strongly consistent): `before`;
//! 2. recount the durable events whose event time is in `b`; the recount ends at `T` (the
//!    rebuilder's clock);
//! 3. read the watermarks: `proven_through ≥ T + skew` is required;
//! 4. read `b` again: `after`.
//!
//! Correct `b`'s fix to `recount − before.net` iff step 3 holds and `after.events ==
//! before.events` ([`judge`]).
//!
//! **Why this never corrects a change the aggregator will still count** (proof sketch). Let `P`
//! be the changes of `b` created before `T`: the recount counts exactly them. By step 3 every
//! change of `P` was processed before step 4. A change counted between step 1 and step 4 would
//! raise `events`, so none was: every change of `P` that the aggregator counts at all was
//! counted before step 1 (a change it gave up on adds nothing, and is exactly the drift the fix
//! must make up). No change created after `T` can have been counted before step 1, which is
//! earlier in time. So `before` counts the changes of `P` as the aggregator will ever count them
//! (`m_c` times each, `m_c ∈ {0, 1, 2, …}`), and `recount − before.net = Σ_{c∈P} (1 − m_c)·δ_c`,
//! the drift of exactly those changes: the fix is exact for `P`, and changes of `b` after `T`
//! (late writes, removals) are judged by a later check. A lagging aggregator fails step 3; a
//! bucket still filling fails the events test; neither is corrected. `events` (not `net`) is
//! compared so that a +1 and a −1 counted in between cannot hide each other.
//!
//! **Why a hot post is still repaired.** Its whole count never stops moving, but a bucket stops
//! once its last like is processed: likes are stamped with `liked_at` before they are durable,
//! so `b`'s changes are created by `end(b) + api_delay` and processed by then plus the
//! aggregator's lag. From then on steps 1–4 see the same `events` and the bucket is judged.
//!
//! ```
//! use heatsink_core::counter::{Verdict, judge, needed_general, proven_through, Watermark, WriterId};
//! let marks = [
//!     Watermark { writer: WriterId::new("shardId-0")?, flushed_ms: 10_500, retired: false },
//!     Watermark { writer: WriterId::new("shardId-1")?, flushed_ms: 12_000, retired: false },
//!     Watermark { writer: WriterId::new("shardId-2")?, flushed_ms: 1_000, retired: true },
//! ];
//! let proven = proven_through(&marks);
//! assert_eq!(proven, Some(10_500));
//! // Recount finished at 10,000 ms with a 200 ms skew allowance: the aggregator is past it.
//! let v = judge((98, 98), 100, (98, 98), proven, needed_general(10_000, 200), 0)?;
//! assert!(matches!(v, Verdict::Correct(c) if c.fix == 2 && c.change == 2));
//! // Recount finished at 10,400: the aggregator has not proven it flushed everything before.
//! let late = needed_general(10_400, 200);
//! assert!(matches!(judge((98, 98), 100, (98, 98), proven, late, 0)?, Verdict::Lagging { .. }));
//! // The bucket moved while counting: left for a later run.
//! assert_eq!(judge((98, 98), 100, (99, 99), proven, 10_000, 0)?, Verdict::Moved);
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```

use super::{Correction, CounterError, WriterId, correction};

/// One writer's flushed watermark, as the aggregator records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    /// The writer (stream shard).
    pub writer: WriterId,
    /// Every change of this writer created at or before this Unix ms has been processed.
    pub flushed_ms: u64,
    /// The writer's shard is closed and read to its end: it holds back nothing.
    pub retired: bool,
}

/// The aggregator's proven progress: the smallest watermark of the writers not retired, or
/// `None` when no writer is active (nothing proven: no correction may be made).
pub fn proven_through(marks: &[Watermark]) -> Option<u64> {
    marks
        .iter()
        .filter(|m| !m.retired)
        .map(|m| m.flushed_ms)
        .min()
}

/// [`proven_through`], when the source's writers are known (the stream's shards): a writer
/// of `expected` that has no watermark yet holds back every change it carries, so nothing is
/// proven until it flushes once (or is retired).
pub fn proven_through_expected(marks: &[Watermark], expected: &[WriterId]) -> Option<u64> {
    if expected
        .iter()
        .any(|w| !marks.iter().any(|m| &m.writer == w))
    {
        return None;
    }
    proven_through(marks)
}

/// The general rule's requirement: progress read *after* the recount (step 3) at least its end
/// plus the clock-skew allowance.
pub fn needed_general(recount_end_ms: u64, skew_ms: u64) -> u64 {
    recount_end_ms.saturating_add(skew_ms)
}

/// The insert-only rule's requirement (an events table written only by conditional inserts,
/// like `liked`): every change of bucket `[start, end)` is an insert created at most `settle`
/// after its event time, so progress read *before* step 1 of at least `end + settle` means the
/// aggregator had processed all of the bucket before the check began; no wait after the
/// recount is needed. `settle` must bound the API's delay from stamping the event time to
/// the durable write.
pub fn needed_insert_only(bucket_end_ms: u64, settle_ms: u64) -> u64 {
    bucket_end_ms.saturating_add(settle_ms)
}

/// What a bucket check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write this bucket's fix (its `change` may be 0: the bucket was exact).
    Correct(Correction),
    /// A change of the bucket was counted while checking: look again in a later run.
    Moved,
    /// The aggregator has not proven it processed every change the recount saw.
    Lagging {
        /// The aggregator's proven progress (`None`: no active writer).
        proven: Option<u64>,
        /// What the check needed: the recount's end plus the skew allowance.
        needed: u64,
    },
}

/// Judges one bucket check (see the module docs for the order of the steps).
///
/// `before`/`after` are the bucket's `(net, events)` summed over the writer sub-keys,
/// `recount` the durable events' net in the bucket, `proven` the aggregator's progress and
/// `needed` what it must have reached: [`needed_general`] (any events table) or
/// [`needed_insert_only`] (an events table whose items are never removed or changed);
/// `current_fix` the bucket's stored fix.
pub fn judge(
    before: (i64, u64),
    recount: i64,
    after: (i64, u64),
    proven: Option<u64>,
    needed: u64,
    current_fix: i64,
) -> Result<Verdict, CounterError> {
    if proven.is_none_or(|p| p < needed) {
        return Ok(Verdict::Lagging { proven, needed });
    }
    if after.1 != before.1 {
        return Ok(Verdict::Moved);
    }
    Ok(Verdict::Correct(correction(
        recount,
        before.0,
        current_fix,
    )?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn mark(id: &str, at: u64, retired: bool) -> Watermark {
        Watermark {
            writer: WriterId::new(id).unwrap(),
            flushed_ms: at,
            retired,
        }
    }

    #[test]
    fn an_expected_writer_without_a_watermark_proves_nothing() {
        let marks = [mark("a", 50, false)];
        let b = WriterId::new("b").unwrap();
        assert_eq!(proven_through_expected(&marks, &[]), Some(50));
        assert_eq!(
            proven_through_expected(&marks, std::slice::from_ref(&b)),
            None
        );
        assert_eq!(
            proven_through_expected(&[mark("a", 50, false), mark("b", 9, true)], &[b]),
            Some(50)
        );
    }

    #[test]
    fn no_active_writer_proves_nothing() {
        assert_eq!(proven_through(&[]), None);
        assert_eq!(proven_through(&[mark("a", 5, true)]), None);
        assert_eq!(
            judge((0, 0), 3, (0, 0), None, 0, 0).unwrap(),
            Verdict::Lagging {
                proven: None,
                needed: 0
            }
        );
    }

    /// One change of the modelled bucket: when DynamoDB created it, when the aggregator
    /// processes it, how many times it counts (0 lost, 1 exact, 2 duplicated), its delta.
    #[derive(Debug, Clone)]
    struct Ev {
        created: u64,
        processed: u64,
        times: u8,
        delta: i64,
    }

    fn model() -> impl Strategy<Value = (Vec<Ev>, u64, u64, u64, u64, u64)> {
        let ev = (
            0u64..1_000,
            0u64..400,
            prop_oneof![8 => Just(1u8), 1 => Just(0u8), 1 => Just(2u8)],
            prop_oneof![4 => Just(1i64), 1 => Just(-1i64)],
        )
            .prop_map(|(created, lag, times, delta)| Ev {
                created,
                processed: created + lag,
                times,
                delta,
            });
        (
            proptest::collection::vec(ev, 0..40),
            0u64..1_400, // step 1 (read before)
            0u64..200,   // recount duration
            0u64..300,   // then watermark read
            0u64..100,   // then read after
            0u64..50,    // skew allowance
        )
            .prop_map(|(evs, t1, dur, w, a, skew)| {
                (
                    evs,
                    t1,
                    t1 + 1 + dur,
                    t1 + 1 + dur + w,
                    t1 + 2 + dur + w + a,
                    skew,
                )
            })
    }

    /// The bucket as the aggregator has it at `t`: (net, events) of the changes processed by `t`.
    fn flushed(evs: &[Ev], t: u64) -> (i64, u64) {
        evs.iter()
            .filter(|e| e.processed <= t)
            .fold((0, 0), |(n, k), e| {
                (n + e.delta * i64::from(e.times), k + u64::from(e.times))
            })
    }

    proptest! {
        /// Insert-only events (each created within `settle` of its event time, in bucket
        /// [0, 1000)): with progress read before step 1 past `end + settle`, a correction is
        /// exact for every event of the bucket, whatever happens after.
        #[test]
        fn an_insert_only_bucket_past_its_settle_is_corrected_exactly(
            evs in proptest::collection::vec((0u64..1_000, 0u64..300, 0u64..400,
                prop_oneof![8 => Just(1u8), 1 => Just(0u8), 1 => Just(2u8)]), 0..40),
            t0 in 900u64..2_000,
            gap in 0u64..200,
        ) {
            let settle = 300;
            let evs: Vec<Ev> = evs.into_iter().map(|(at, delay, lag, times)| Ev {
                created: at + delay, processed: at + delay + lag, times, delta: 1 }).collect();
            // Progress at t0: changes created at or before it that are processed by t0.
            let proven = evs.iter().filter(|e| e.processed > t0).map(|e| e.created.saturating_sub(1)).min()
                .unwrap_or(t0).min(t0);
            let t1 = t0 + 1;
            let before = flushed(&evs, t1);
            let recount = evs.iter().filter(|e| e.created <= t1 + gap).count() as i64;
            let after = flushed(&evs, t1 + gap + 1);
            if let Verdict::Correct(c) = judge(before, recount, after, Some(proven), needed_insert_only(1_000, settle), 0).unwrap() {
                let counted: i64 = evs.iter().map(|e| i64::from(e.times)).sum();
                prop_assert_eq!(counted + c.fix, evs.len() as i64, "evs {:?}", evs);
            }
        }

        /// Whatever the lag, losses and duplicates: a correction the rule allows leaves the
        /// bucket exact once the aggregator has processed every change created before the
        /// recount, and never makes up for a change the aggregator will still count.
        #[test]
        fn a_correction_is_exact_for_the_changes_before_the_recount(
            (evs, t1, t_end, t3, t4, skew) in model(),
        ) {
            let before = flushed(&evs, t1);
            // The recount sees every change created before it ended (real clock).
            let recount: i64 = evs.iter().filter(|e| e.created <= t_end).map(|e| e.delta).sum();
            // Watermark read at t3: every change created at or before it... minus the laggards.
            let proven = evs.iter().filter(|e| e.processed > t3).map(|e| e.created.saturating_sub(1)).min()
                .unwrap_or(t3).min(t3);
            let after = flushed(&evs, t4);
            if let Verdict::Correct(c) = judge(before, recount, after, Some(proven), needed_general(t_end, skew), 0).unwrap() {
                // Once everything created up to the recount is processed, count + fix is the truth
                // of those changes, however many later changes the aggregator counts.
                let early: Vec<&Ev> = evs.iter().filter(|e| e.created <= t_end).collect();
                let counted: i64 = early.iter().map(|e| e.delta * i64::from(e.times)).sum();
                let truth: i64 = early.iter().map(|e| e.delta).sum();
                prop_assert_eq!(counted + c.fix, truth, "evs {:?}", evs);
            }
        }
    }
}
