//! The repair rule: when a recount of one bucket may correct it, gated on the aggregator's
//! proven progress (per-writer flushed watermarks), never on wall-clock quiet.
//!
//! **Watermarks.** After every batch it flushed completely, a stream writer records how far it
//! got in change-creation time: `flushed_ms` = every change of its shard created at or before it
//! has been *processed* — counted, or given up on (a parked batch). A writer whose shard closed
//! and every child of which has delivered is *retired* (Lambda reads a child only after its
//! parents are read to their end). The aggregator's progress is the smallest watermark of the
//! writers the stream lists that are not retired, and nothing while one of them has none
//! ([`progress`](super::progress)).
//!
//! **The check of one bucket `b` of one counter**, in this order:
//! 1. read every writer sub-key's `(net, events)` of `b` (strongly consistent): `before`;
//! 2. recount the durable events whose event time is in `b`; the recount ends at `T` (the
//!    rebuilder's clock);
//! 3. read the watermarks: proven progress `≥ T + skew` is required;
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
//! use heatsink_core::counter::{Verdict, judge, needed_general, progress, Watermark, WriterId};
//! use heatsink_core::stream::ShardInfo;
//! let mark = |id: &str, at: u64, retired: bool| Watermark {
//!     writer: WriterId::new(id).unwrap(), flushed_ms: at, retired, lag_ms: None };
//! let marks = [mark("shardId-0", 10_500, false), mark("shardId-1", 12_000, false),
//!     mark("shardId-2", 1_000, true)];
//! let listing = ["shardId-0", "shardId-1", "shardId-2"].map(ShardInfo::new);
//! let proven = progress(&listing, &marks, true).proven;
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
    /// The largest delay from a change's creation to its arrival in the stream that the
    /// writer's last batch saw (Kinesis Data Streams for DynamoDB's replication lag; `None`
    /// where the source has none to see).
    pub lag_ms: Option<u64>,
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

/// The buckets of one counter to judge again: kept by every writer sub-key and known to the
/// `fix` item, older than `from` (the pass judges `[from, horizon)` anyway) and not older than
/// `oldest`, whose events summed over `writers` now differ from the events the `fix` recorded
/// when the bucket was last judged ([`Buckets::set_judged`](super::Buckets::set_judged); 0
/// when it never was). A change counted in a bucket after it was judged (a late change, a
/// duplicate beyond the window, a delete) moves its events, so its bucket is judged again;
/// a bucket nobody changed since is not.
pub fn rejudge(
    writers: &[&super::Buckets],
    fix: &super::Buckets,
    from: u64,
    oldest: u64,
) -> Vec<u64> {
    let mut starts: Vec<u64> = writers
        .iter()
        .flat_map(|b| b.iter().map(|(s, _)| s))
        .chain(fix.iter().map(|(s, _)| s))
        .filter(|s| *s >= oldest && *s < from)
        .collect();
    starts.sort_unstable();
    starts.dedup();
    starts
        .into_iter()
        .filter(|s| fix.knows(*s) && writers.iter().all(|w| w.knows(*s)))
        .filter(|s| {
            let events = writers
                .iter()
                .fold(0u64, |sum, w| sum.saturating_add(w.get(*s).1));
            events != fix.get(*s).1
        })
        .collect()
}

/// What a whole-count check reads of a counter, before and after the recount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WholeRead {
    /// The counter's total without its `fix` (writers, salts, `settled`).
    pub without_fix: i64,
    /// Changes counted in the writer sub-keys' kept buckets, summed: it moves with any counted
    /// change of a kept bucket, even when deltas cancel out.
    pub events: u64,
    /// Writer sub-keys (a new writer is a change).
    pub writers: usize,
    /// The newest bucket start any writer sub-key or the `fix` keeps (`None`: none).
    pub newest: Option<u64>,
}

/// What a whole-count check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeVerdict {
    /// Write this whole fix (its `change` may be 0).
    Correct(Correction),
    /// The counter moved while checked: a later run.
    Moved,
    /// The counter holds changes at or after the cutoff: judge it per bucket (or later).
    Busy,
    /// The aggregator has not proven it processed every change before the cutoff.
    Lagging,
}

/// Judges a whole-count check of an insert-only events table (a cold counter, or one whose
/// carried check is older than the kept buckets): the recount counts the durable events with
/// an event time before `cutoff`, the reads before and after it must be equal, hold nothing at
/// or after `cutoff`, and the progress read before the first must be at least `cutoff +
/// settle` (every event before `cutoff` was created by then and so processed). Then the
/// counter's total is exactly its count of those events, and `fix = recount − total` is
/// exact for them (the same argument as [`judge`]'s insert-only rule, over `(−∞, cutoff)`).
pub fn judge_whole(
    before: WholeRead,
    recount: i64,
    after: WholeRead,
    cutoff: u64,
    proven: Option<u64>,
    settle_ms: u64,
    current_fix: i64,
) -> Result<WholeVerdict, CounterError> {
    if proven.is_none_or(|p| p < needed_insert_only(cutoff, settle_ms)) {
        return Ok(WholeVerdict::Lagging);
    }
    if [before.newest, after.newest]
        .iter()
        .any(|n| n.is_some_and(|n| n >= cutoff))
    {
        return Ok(WholeVerdict::Busy);
    }
    if before != after {
        return Ok(WholeVerdict::Moved);
    }
    Ok(WholeVerdict::Correct(correction(
        recount,
        before.without_fix,
        current_fix,
    )?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn nothing_proven_judges_nothing() {
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

    #[test]
    fn a_bucket_whose_events_changed_after_it_was_judged_is_judged_again() {
        use crate::counter::{BucketSpec, Buckets};
        let spec = BucketSpec::new(1_000, 30).unwrap();
        let mut w = Buckets::default();
        for at in [10_100, 11_100, 11_200, 12_100] {
            w.add(spec, at, 1).unwrap();
        }
        let mut fix = Buckets::from_parts(0, Default::default());
        fix.set_judged(10_000, 0, 1);
        fix.set_judged(11_000, 1, 2);
        // 12 s was never judged: its 1 event differs from 0. The pass judges 13 s on.
        assert_eq!(rejudge(&[&w], &fix, 13_000, 0), vec![12_000]);
        // A late change lands in 10 s: judged again.
        w.add(spec, 10_500, 1).unwrap();
        assert_eq!(rejudge(&[&w], &fix, 13_000, 0), vec![10_000, 12_000]);
        // Below `oldest`, or at or after `from`: not here.
        assert!(rejudge(&[&w], &fix, 10_000, 0).is_empty());
        assert_eq!(rejudge(&[&w], &fix, 13_000, 11_000), vec![12_000]);
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

        /// A whole-count check of insert-only likes (each created within `settle` of its event
        /// time, processed some time later, counted 0, 1 or 2 times): a correction it allows
        /// leaves the count of the likes before the cutoff exact.
        #[test]
        fn a_whole_check_corrects_the_likes_before_the_cutoff_exactly(
            evs in proptest::collection::vec((0u64..3_000, 0u64..300, 0u64..600,
                prop_oneof![8 => Just(1u8), 1 => Just(0u8), 1 => Just(2u8)]), 0..40),
            t0 in 1_000u64..4_000,
            gap in 0u64..300,
        ) {
            let settle = 300;
            let evs: Vec<(u64, Ev)> = evs.into_iter().map(|(at, delay, lag, times)| (at, Ev {
                created: at + delay, processed: at + delay + lag, times, delta: 1 })).collect();
            let proven = evs.iter().filter(|(_, e)| e.processed > t0).map(|(_, e)| e.created.saturating_sub(1)).min()
                .unwrap_or(t0).min(t0);
            let cutoff = proven.saturating_sub(settle);
            let read = |t: u64| {
                let counted: Vec<&(u64, Ev)> = evs.iter().filter(|(_, e)| e.processed <= t && e.times > 0).collect();
                WholeRead {
                    without_fix: evs.iter().filter(|(_, e)| e.processed <= t).map(|(_, e)| i64::from(e.times)).sum(),
                    events: evs.iter().filter(|(_, e)| e.processed <= t).map(|(_, e)| u64::from(e.times)).sum(),
                    writers: 1,
                    newest: counted.iter().map(|(at, _)| *at).max(),
                }
            };
            let (t1, t3) = (t0 + 1, t0 + 2 + gap);
            let recount = evs.iter().filter(|(at, e)| *at < cutoff && e.created <= t1 + gap).count() as i64;
            if let WholeVerdict::Correct(c) = judge_whole(read(t1), recount, read(t3), cutoff, Some(proven), settle, 0).unwrap() {
                let before: Vec<&(u64, Ev)> = evs.iter().filter(|(at, _)| *at < cutoff).collect();
                let counted: i64 = before.iter().map(|(_, e)| i64::from(e.times)).sum();
                prop_assert_eq!(counted + c.fix, before.len() as i64, "evs {:?}", evs);
            }
        }
    }
}
