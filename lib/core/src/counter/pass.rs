//! The repair's pass plan: which (counter, bucket) checks one run of the incremental repair
//! makes, and where the next run resumes, as data ([`plan_span`], [`plan_posts`],
//! [`cursor_after`]). The adapter (`heatsink::counter::repair::Repair`) reads what these need
//! (the persisted [`RepairCursor`], the counters touched since it, the proven progress), makes
//! the checks ([`judge`](super::judge)) and persists what [`cursor_after`] returns.
//!
//! **The span.** A run judges the buckets `[from, horizon)`. `from` is the cursor's next bucket
//! (no lower than the oldest bucket the writer sub-keys still keep, and, for a first run, no
//! lower than where it was told to start). `horizon` is the bucket of `proven − settle` (the
//! aggregator has processed every change that bucket can receive), never past the bucket of the
//! run's clock (a bucket still filling) nor past a pinned end. A run stopped on its budget keeps
//! its horizon and the last counter it finished, so the next run resumes there instead of
//! starting over.
//!
//! **The checks.** Every counter touched in `[from, now]` is checked for every bucket of the
//! span; checks carried over from earlier runs (the bucket moved, or progress lagged) and checks
//! requested from outside (a redriven parked batch, [`Check`]) are added. Counters are visited in
//! id order, so "the last counter finished" is a position.
//!
//! **The invariant** (property-tested over interrupted and resumed runs): a check that is due is
//! never dropped silently. After [`PassPlan::cursor_after`], each one is either judged, or in the next
//! cursor (retry, or past the resume point), or counted in the returned `dropped` (more than
//! `max_retry` pending; reported and graphed, never hidden).
//!
//! ```
//! use heatsink_core::counter::{BucketSpec, Check, RepairCursor, SpanRule, plan_pass};
//! let spec = BucketSpec::new(60_000, 30)?;
//! let rule = SpanRule { now_ms: 10 * 60_000 + 5, proven_ms: Some(9 * 60_000), settle_ms: 60_000,
//!     spec, start_at: Some(6 * 60_000), until: None };
//! let plan = plan_pass(&RepairCursor::default(), &rule, ["p9".to_owned()], []);
//! // Buckets 6 and 7 (minutes): bucket 8 ends at 9:00, not yet `settle` behind `proven`.
//! assert_eq!((plan.span.from, plan.span.horizon), (6 * 60_000, 8 * 60_000));
//! assert_eq!(plan.posts[0].buckets, vec![6 * 60_000, 7 * 60_000]);
//! // Finished, with bucket 7 carried over (it moved while checked).
//! let (next, dropped) = plan.cursor_after(1, vec![Check::new("p9", 7 * 60_000)], 1_000);
//! assert_eq!((next.next, next.retry.len(), dropped), (8 * 60_000, 1, 0));
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::BucketSpec;

/// One (counter id, bucket start) to judge.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Check {
    /// The counter's id (the part after `<name>#`).
    pub id: String,
    /// The bucket's start (Unix ms).
    pub bucket: u64,
}

impl Check {
    /// The check of bucket `bucket` of counter `id`.
    pub fn new(id: impl Into<String>, bucket: u64) -> Self {
        Self {
            id: id.into(),
            bucket,
        }
    }
}

/// Where an interrupted pass stopped: its horizon and the last counter it finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The interrupted pass's horizon, kept so the resumed pass judges the same span.
    pub horizon: u64,
    /// The last counter id the interrupted pass finished (ids are visited in order).
    pub after: String,
}

/// The persisted position of the repair of one counter name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairCursor {
    /// First bucket start not yet judged for every counter touched in it (0: never ran).
    pub next: u64,
    /// A pass that stopped on its budget.
    pub resume: Option<Resume>,
    /// Checks carried over to the next run.
    pub retry: Vec<Check>,
}

/// What a pass's span is decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanRule {
    /// The run's clock (Unix ms).
    pub now_ms: u64,
    /// The aggregator's proven progress read at the start of the run (`None`: nothing proven).
    pub proven_ms: Option<u64>,
    /// How far proven progress must be past a bucket's end before it is closable.
    pub settle_ms: u64,
    /// The buckets' width and how many the writer sub-keys keep.
    pub spec: BucketSpec,
    /// Where a repair with no cursor yet starts (`None`: the oldest kept bucket).
    pub start_at: Option<u64>,
    /// A pinned end: buckets starting at or after this time's bucket are not closable.
    pub until: Option<u64>,
}

/// The buckets one pass judges: `[from, horizon)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassSpan {
    /// The first bucket judged for touched counters.
    pub from: u64,
    /// Buckets starting before this are closable.
    pub horizon: u64,
    /// The oldest bucket the writer sub-keys still keep at the run's clock: older checks
    /// cannot be judged per bucket.
    pub oldest: u64,
    /// Resuming an interrupted pass: counters up to and including this id are done.
    pub after: Option<String>,
    /// The cursor's next bucket as read (kept when the pass stops early).
    pub read_next: u64,
}

impl PassSpan {
    /// The closable bucket starts, oldest first.
    pub fn closable(&self, spec: BucketSpec) -> Vec<u64> {
        let width = spec.width_ms().max(1);
        let mut out = vec![];
        let mut b = self.from;
        while b < self.horizon {
            out.push(b);
            b = b.saturating_add(width);
        }
        out
    }
}

/// Decides a pass's span from the persisted cursor (see the module docs).
pub fn plan_span(cursor: &RepairCursor, rule: &SpanRule) -> PassSpan {
    let spec = rule.spec;
    let oldest = spec
        .low_for(spec.start_of(rule.now_ms))
        .saturating_add(spec.width_ms());
    let fresh = rule.start_at.map_or(0, |at| spec.start_of(at));
    let from = cursor
        .next
        .max(oldest)
        .max(if cursor.next == 0 { fresh } else { 0 });
    let (horizon, after) = match &cursor.resume {
        Some(r) => (r.horizon, Some(r.after.clone())),
        None => (
            rule.proven_ms
                .map_or(0, |p| spec.start_of(p.saturating_sub(rule.settle_ms))),
            None,
        ),
    };
    // The bucket of `now` is still filling whatever the watermarks say (they may run ahead of
    // this clock by the skew); a pinned end holds the horizon further back.
    let end = rule.until.map_or(rule.now_ms, |u| u.min(rule.now_ms));
    PassSpan {
        from,
        horizon: horizon.min(spec.start_of(end)),
        oldest,
        after,
        read_next: cursor.next,
    }
}

/// The checks of one counter in a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostChecks {
    /// The counter's id.
    pub id: String,
    /// Bucket starts to judge, oldest first.
    pub buckets: Vec<u64>,
    /// Buckets older than the writer sub-keys keep (a carried or requested check that waited
    /// too long): they cannot be judged per bucket, only by a whole-count check.
    pub too_old: Vec<u64>,
}

/// One pass, planned: its span, the counters to visit in id order, and the carried checks it
/// is responsible for (so that stopping early loses none of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassPlan {
    /// The buckets judged.
    pub span: PassSpan,
    /// The counters to visit, by id.
    pub posts: Vec<PostChecks>,
    /// The cursor's carried checks as read.
    carried: Vec<Check>,
}

/// Plans a pass: the span ([`plan_span`]), then every `touched` counter for every closable
/// bucket, plus the cursor's carried checks and `requested` ones (from outside: a redriven
/// parked batch; the caller keeps those until judged), skipping counters an interrupted pass
/// already finished.
pub fn plan_pass(
    cursor: &RepairCursor,
    rule: &SpanRule,
    touched: impl IntoIterator<Item = String>,
    requested: impl IntoIterator<Item = Check>,
) -> PassPlan {
    let span = plan_span(cursor, rule);
    let closable = span.closable(rule.spec);
    let mut by_id: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for c in cursor.retry.iter().cloned().chain(requested) {
        by_id.entry(c.id).or_default().insert(c.bucket);
    }
    if !closable.is_empty() {
        for id in touched {
            by_id
                .entry(id)
                .or_default()
                .extend(closable.iter().copied());
        }
    }
    let posts = by_id
        .into_iter()
        .filter(|(id, _)| span.after.as_ref().is_none_or(|a| id > a))
        .map(|(id, buckets)| {
            let (buckets, too_old): (Vec<u64>, Vec<u64>) =
                buckets.into_iter().partition(|b| *b >= span.oldest);
            PostChecks {
                id,
                buckets,
                too_old,
            }
        })
        .collect();
    PassPlan {
        span,
        posts,
        carried: cursor.retry.clone(),
    }
}

impl PassPlan {
    /// The cursor to persist once the first `visited` counters of [`PassPlan::posts`] are done
    /// (all of them: the pass completed; fewer: it stopped on its budget, or this is the save
    /// after a chunk), with `retry` the checks the visited counters carry over. Carried checks
    /// of counters not visited, or skipped because an interrupted pass had finished them, are
    /// kept. More than `max_retry` pending checks: the oldest buckets are kept and the number
    /// left out is returned as `dropped` (the caller reports it).
    pub fn cursor_after(
        &self,
        visited: usize,
        mut retry: Vec<Check>,
        max_retry: usize,
    ) -> (RepairCursor, u64) {
        let span = &self.span;
        let visited = visited.min(self.posts.len());
        let done: BTreeSet<&str> = self.posts[..visited]
            .iter()
            .map(|p| p.id.as_str())
            .collect();
        // Carried checks this pass did not judge: of counters not visited (yet), or of ones an
        // interrupted pass finished (this pass skips them).
        retry.extend(
            self.carried
                .iter()
                .filter(|c| !done.contains(c.id.as_str()))
                .cloned(),
        );
        let completed = visited == self.posts.len();
        let cursor = if completed {
            RepairCursor {
                next: span.horizon.max(span.from),
                resume: None,
                retry: vec![],
            }
        } else {
            let after = self.posts[..visited]
                .last()
                .map(|p| p.id.clone())
                .or_else(|| span.after.clone());
            RepairCursor {
                // Keep the span: touched counters of `[from, horizon)` not yet visited are
                // found again by the resumed pass.
                next: span.read_next,
                resume: after.map(|after| Resume {
                    horizon: span.horizon,
                    after,
                }),
                retry: vec![],
            }
        };
        retry.sort_by(|a, b| (a.bucket, &a.id).cmp(&(b.bucket, &b.id)));
        retry.dedup();
        let dropped = retry.len().saturating_sub(max_retry) as u64;
        retry.truncate(max_retry);
        (RepairCursor { retry, ..cursor }, dropped)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const W: u64 = 1_000;

    fn spec() -> BucketSpec {
        BucketSpec::new(W, 30).expect("spec")
    }

    fn rule(now: u64, proven: Option<u64>) -> SpanRule {
        SpanRule {
            now_ms: now,
            proven_ms: proven,
            settle_ms: 2 * W,
            spec: spec(),
            start_at: Some(90 * W + 5),
            until: None,
        }
    }

    #[test]
    fn a_first_run_starts_where_told_and_stops_at_the_settled_horizon() {
        let span = plan_span(&RepairCursor::default(), &rule(100 * W + 10, Some(99 * W)));
        assert_eq!((span.from, span.horizon), (90 * W, 97 * W));
        // Nothing proven: nothing closable.
        let none = plan_span(&RepairCursor::default(), &rule(100 * W, None));
        assert!(none.closable(spec()).is_empty());
        // Progress ahead of the clock: the current bucket is still filling.
        let ahead = plan_span(&RepairCursor::default(), &rule(100 * W, Some(200 * W)));
        assert_eq!(ahead.horizon, 100 * W);
        // A pinned end holds it further back.
        let pinned = SpanRule {
            until: Some(93 * W + 1),
            ..rule(100 * W, Some(99 * W))
        };
        assert_eq!(plan_span(&RepairCursor::default(), &pinned).horizon, 93 * W);
    }

    #[test]
    fn a_resumed_pass_keeps_its_horizon_skips_finished_counters_and_keeps_their_retries() {
        let cursor = RepairCursor {
            next: 90 * W,
            resume: Some(Resume {
                horizon: 95 * W,
                after: "p3".into(),
            }),
            retry: vec![Check::new("p1", 91 * W), Check::new("p7", 92 * W)],
        };
        let plan = plan_pass(
            &cursor,
            &rule(100 * W, Some(99 * W)),
            ["p1".to_owned(), "p5".to_owned()],
            [],
        );
        assert_eq!((plan.span.from, plan.span.horizon), (90 * W, 95 * W));
        let ids: Vec<&str> = plan.posts.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["p5", "p7"]);
        // Completed: p1's carried check was not visited, so it stays carried.
        let (next, _) = plan.cursor_after(2, vec![], 100);
        assert_eq!(next.retry, vec![Check::new("p1", 91 * W)]);
        assert_eq!((next.next, next.resume), (95 * W, None));
        // Stopped after p5: p7's carried check stays too, and the pass resumes after p5.
        let (next, _) = plan.cursor_after(1, vec![], 100);
        assert_eq!(
            next.retry,
            vec![Check::new("p1", 91 * W), Check::new("p7", 92 * W)]
        );
        assert_eq!(
            next.resume,
            Some(Resume {
                horizon: 95 * W,
                after: "p5".into()
            })
        );
    }

    #[test]
    fn a_check_older_than_the_kept_buckets_is_set_apart_and_too_many_retries_are_counted() {
        let cursor = RepairCursor {
            next: 95 * W,
            resume: None,
            retry: vec![Check::new("p1", 10 * W), Check::new("p1", 96 * W)],
        };
        let plan = plan_pass(&cursor, &rule(100 * W, Some(99 * W)), [], []);
        assert_eq!(plan.posts[0].buckets, vec![96 * W]);
        assert_eq!(plan.posts[0].too_old, vec![10 * W]);
        let retry = (0..5)
            .map(|i| Check::new(format!("p{i}"), 96 * W))
            .collect();
        let (next, dropped) = plan.cursor_after(1, retry, 3);
        assert_eq!((next.retry.len(), dropped), (3, 2));
    }

    /// Runs of the repair over a model: changes of counters in the current buckets (an insert
    /// is created in its own bucket, so none lands in a bucket already closable), the `touched`
    /// index holding each counter's newest bucket, verdicts drawn at random (judged, or carried
    /// over: moved or lagging), budgets that stop a pass after a few counters, resumed passes.
    #[derive(Debug, Clone)]
    struct Run {
        changes: Vec<(u8, bool)>,
        proven_step: u64,
        budget: usize,
        verdicts: Vec<bool>,
    }

    fn runs() -> impl Strategy<Value = Vec<Run>> {
        proptest::collection::vec(
            (
                proptest::collection::vec((0u8..6, any::<bool>()), 0..8),
                0u64..3,
                1usize..5,
                proptest::collection::vec(any::<bool>(), 1..20),
            )
                .prop_map(|(changes, proven_step, budget, verdicts)| Run {
                    changes,
                    proven_step,
                    budget,
                    verdicts,
                }),
            1..16,
        )
    }

    proptest! {
        /// Every change's (counter, bucket) check is judged once its bucket is closable, or is
        /// pending in the cursor (carried, or still ahead of it), or is counted as dropped.
        #[test]
        fn no_due_check_is_ever_dropped_silently(runs in runs(), max_retry in 1usize..30) {
            let spec = spec();
            let mut cursor = RepairCursor::default();
            let mut newest: BTreeMap<String, u64> = BTreeMap::new();
            let mut changes: BTreeSet<Check> = BTreeSet::new();
            let mut judged: BTreeSet<Check> = BTreeSet::new();
            let mut dropped_total = 0u64;
            let mut now = 100 * W;
            let mut proven = 98 * W;
            for run in runs {
                now += W;
                proven = (proven + run.proven_step * W).min(now);
                for (post, previous) in &run.changes {
                    // This bucket or the one before: neither is closable yet (settle 2 buckets).
                    let b = spec.start_of(now) - if *previous { W } else { 0 };
                    let id = format!("p{post}");
                    changes.insert(Check::new(id.clone(), b));
                    let n = newest.entry(id).or_default();
                    *n = (*n).max(b);
                }
                let rule = rule(now, Some(proven));
                let from = plan_span(&cursor, &rule).from;
                let touched: Vec<String> =
                    newest.iter().filter(|(_, b)| **b >= from).map(|(id, _)| id.clone()).collect();
                let plan = plan_pass(&cursor, &rule, touched, []);
                let mut retry = vec![];
                let mut verdicts = run.verdicts.iter().cycle();
                let visited = plan.posts.len().min(run.budget);
                for post in &plan.posts[..visited] {
                    for b in &post.buckets {
                        let c = Check::new(post.id.clone(), *b);
                        if *verdicts.next().unwrap_or(&true) { judged.insert(c); } else { retry.push(c); }
                    }
                }
                let (next, dropped) = plan.cursor_after(visited, retry, max_retry);
                prop_assert!(next.next >= cursor.next, "the cursor never moves back");
                dropped_total += dropped;
                cursor = next;
            }
            let pending = |c: &Check| {
                cursor.retry.contains(c)
                    || match &cursor.resume {
                        // A resumed pass visits the counters after `after` below its horizon,
                        // and a later pass everything from that horizon on.
                        Some(r) => c.id > r.after || c.bucket >= r.horizon,
                        None => c.bucket >= cursor.next,
                    }
            };
            let lost: Vec<&Check> =
                changes.iter().filter(|c| !judged.contains(*c) && !pending(c)).collect();
            prop_assert!(lost.len() as u64 <= dropped_total, "lost {:?}, {} dropped", lost, dropped_total);
        }
    }
}
