//! The incremental repair: per-bucket recounts of the counters touched since the last run,
//! corrected only once the aggregator's flushed watermarks prove it processed every change the
//! recount saw (the rule: [`heatsink_core::counter::judge`]; the pass plan:
//! [`heatsink_core::counter::plan_pass`]). docs/counters.md states the guarantee and the bound.
//!
//! A run takes the repair's lease, plans its pass from the persisted cursor (which buckets are
//! closable, which counters were touched since, which checks were carried over), makes each
//! check in two halves around one wait for the watermarks per chunk of counters, writes the
//! per-bucket fixes the verdicts allow, and persists the cursor after every chunk, so a run
//! stopped on its budget (or killed) resumes where it stopped.
//!
//! After its bucket checks a run may *sweep* ([`RepairOptions::sweep`]): visit counters from a
//! cursor over the counters table and check each quiet one whole on the same proof
//! ([`heatsink_core::counter::judge_whole`]), so a change lost where no bucket check looks (a
//! parked batch on a cold counter that can no longer be redriven) is made up within one cycle.
//!
//! - [`BucketRecount`], [`GsiRecount`]: where the truth of one bucket comes from.
//! - [`Repair`], [`RepairOptions`], [`RepairReport`]: one run.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::counter::rebuild::RebuildError> {
//! use heatsink::counter::CounterStore;
//! use heatsink::counter::repair::{GsiRecount, Repair, RepairOptions};
//! let counters = CounterStore::new(ddb.clone(), "shop-counters");
//! // Orders per product, recounted through a write-sharded index `by-product` of `shop-orders`.
//! let recount = GsiRecount::new(&ddb, "shop-orders", "by-product", "product_shard", "ordered_at", 16);
//! let report = Repair::new(&counters, "orders", &recount, RepairOptions::default()).run().await?;
//! println!("corrected {:?}", report.corrected);
//! # Ok(()) }
//! ```

mod recount;
mod store;
mod sweep;

pub use recount::{BucketRecount, GsiRecount};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use heatsink_core::counter::{
    BucketSpec, Check, CounterKey, Gate, SpanRule, Verdict, WriterId, judge, needed_general,
    needed_insert_only, plan_pass, plan_span, progress,
};
use serde::Serialize;

use super::lineage::{Listing, ShardListing};

use super::rebuild::{CORRECTED, CORRECTION_UNITS, RebuildError, UNSETTLED, unrepairable};
use super::{CounterStore, CounterStoreError, FixItem};
use crate::metrics::{Emf, MetricDef};

/// Runs that finished their pass (1 per completed run, 0 for a run that stopped on its budget
/// or found another run holding the lease). Alarmed when missing: a run that times out emits
/// nothing, and that must page like a failing one.
pub const RUN_COMPLETED: MetricDef = MetricDef::count("CounterRebuildCompleted");
/// Bucket checks one run left because the aggregator had not proven its progress (carried
/// over to a later run), 0s included. Steadily above 0 means proven progress trails the
/// buckets: see [`REPAIR_LAG`].
pub const LAGGING: MetricDef = MetricDef::count("CounterRebuildLagging");
/// 1 when a run judged nothing because proven progress is blocked (a shard of the stream
/// without a watermark, replication lag past the settle time, nothing proven), else 0.
/// Alarm on it: a blocked repair must page, not look like a quiet one (a blocked run still
/// emits [`RUN_COMPLETED`], so the heartbeat does not see it). The photo app's stacks do:
/// `count-rebuilder-blocked`, Maximum ≥ 1 in three consecutive 5-minute periods (one blocked
/// run during a reshard is normal; three in a row mean a writer is silent), missing data not
/// breaching (the heartbeat covers missing runs).
pub const BLOCKED: MetricDef = MetricDef::count("CounterRepairBlocked");
/// How far the aggregator's proven progress is behind the rebuilder's clock (`now − proven`),
/// seconds; not emitted while nothing is proven ([`BLOCKED`] says so). The photo app's stacks
/// alarm at Maximum > 900 s in three consecutive 5-minute periods (`count-rebuilder-repair-lag`).
/// An idle shard (no records) holds proven progress back, so at low traffic it grows without
/// a fault.
pub const REPAIR_LAG: MetricDef = MetricDef::seconds("CounterRepairLag");

/// How a repair run judges buckets and bounds itself.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairOptions {
    /// Bucket width and how many are kept: the aggregator's (its writer sub-keys store `bw`).
    pub buckets: BucketSpec,
    /// A bucket is judged once the aggregator's proven progress is this far past its end: the
    /// API's longest delay from stamping `liked_at` to the durable write, plus the index's
    /// propagation. Only makes a check likely to succeed; soundness comes from the watermark.
    pub settle: Duration,
    /// Allowed difference between the rebuilder's clock and DynamoDB's.
    pub skew: Duration,
    /// How long a run's lease holds (longer than the function's timeout).
    pub lease: Duration,
    /// A run stops starting new posts after this, persisting its cursor (below the timeout).
    pub budget: Duration,
    /// Who runs (the lease holder; e.g. the Lambda request id).
    pub holder: String,
    /// Most (post, bucket) checks carried to the next run; beyond it they are dropped and
    /// reported.
    pub max_retry: usize,
    /// The events table is written only by conditional inserts (never removed or changed; the
    /// photo app's `liked`): a bucket is judged on the progress read at the start of the run
    /// ([`needed_insert_only`]) with no wait after the recount, which also repairs counters
    /// while the stream is idle. `false`: the general rule ([`needed_general`]), waiting for
    /// progress past each chunk's recounts.
    pub insert_only: bool,
    /// Where a repair with no cursor yet starts (Unix ms; `None`: the oldest bucket the writer
    /// sub-keys keep, `keep` buckets back).
    pub start_at: Option<u64>,
    /// A pinned end: buckets starting at or after the bucket of this time (Unix ms) are not
    /// judged this run, whatever the clock says (`None`: the run's clock). The cursor moves no
    /// further, so the next run carries on from there. Pins a run's bucket span, so that its
    /// requests depend on the data and not on when it runs (the request-ratio test).
    pub until: Option<u64>,
    /// Posts whose first halves are done before one wait for the watermarks.
    pub chunk: usize,
    /// Longest wait for the watermarks to pass a chunk's recounts (then its checks are
    /// `lagging` and carried over).
    pub max_wait: Duration,
    /// How often the watermarks are read while waiting.
    pub poll: Duration,
    /// Compact every checked post ([`CounterStore::compact`]) with this tombstone grace: fold
    /// the sub-keys of retired writers (closed DynamoDB Streams shards) into `settled` and reap
    /// tombstones older than it: at least the stream's retention
    /// ([`STREAM_RETENTION`](super::compact::STREAM_RETENTION) for DynamoDB Streams; a Kinesis
    /// stream's configured retention, up to 365 days, for retired Kinesis parents).
    /// One more Query per checked post and a transaction when due; needs `UpdateItem` on the
    /// counters table. `None` (the default): no compaction.
    pub compact: Option<Duration>,
    /// Counters the sweep visits per run after the bucket checks (0, the default: no sweep):
    /// each quiet one is checked whole ([`heatsink_core::counter::judge_whole`]) from a
    /// persisted cursor over the counters table, so a lost change no bucket check sees (a
    /// parked batch on a cold counter) is made up within `sweep_quiet` plus one cycle
    /// (`⌈counters / sweep⌉` runs). Only with `insert_only` (the proof needs it); one more
    /// Scan page per 200 items, two partition reads per counter visited and a recount per
    /// quiet one.
    pub sweep: usize,
    /// A counter is swept once its newest kept bucket ended this long ago (a busier one is
    /// the bucket checks' work, and its recount would read every event it has).
    pub sweep_quiet: Duration,
}

impl Default for RepairOptions {
    fn default() -> Self {
        Self {
            buckets: BucketSpec::default(),
            settle: Duration::from_secs(60),
            skew: Duration::from_secs(1),
            lease: Duration::from_secs(600),
            budget: Duration::from_secs(240),
            holder: format!("rebuilder-{}", crate::clock::now_ms()),
            max_retry: 1_000,
            insert_only: false,
            start_at: None,
            until: None,
            chunk: 100,
            max_wait: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            compact: None,
            sweep: 0,
            sweep_quiet: Duration::from_secs(30 * 60),
        }
    }
}

/// What one repair run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepairReport {
    /// The run finished its pass (false: it stopped on its budget, cursor persisted, or
    /// another run held the lease).
    pub completed: bool,
    /// Another run held the lease; this one did nothing.
    pub busy: bool,
    /// The aggregator's proven progress (Unix ms), if any writer is active.
    pub proven_ms: Option<u64>,
    /// Why this run judged nothing, when proven progress is blocked (then `completed` is
    /// false and the cursor did not move).
    pub blocked: Option<Blocked>,
    /// `now − proven` (ms) when progress is proven: the [`REPAIR_LAG`] metric.
    pub lag_ms: Option<u64>,
    /// Buckets starting before this were closable this run.
    pub horizon_ms: u64,
    /// The first bucket this run looked at.
    pub from_ms: u64,
    /// Counters (ids) touched since the last run, and carried-over checks' ids.
    pub posts_checked: u64,
    /// Bucket checks made.
    pub buckets_checked: u64,
    /// Bucket corrections that changed a fix, summed per id.
    pub corrected: BTreeMap<String, i64>,
    /// (id, bucket start) left for a later run: the bucket moved while checked, or another
    /// rebuild changed the fix in between.
    pub moved: Vec<(String, u64)>,
    /// Checks left because the aggregator had not proven its progress.
    pub lagging: u64,
    /// Ids left alone: malformed counter items, a bucket width that is not ours, or an id the
    /// aggregator rejects; with the reason.
    pub skipped: Vec<(String, String)>,
    /// Carried-over checks dropped because more than `max_retry` were pending.
    pub dropped: u64,
    /// Carried-over checks whose bucket the writer sub-keys no longer keep (they waited longer
    /// than the kept span): not judged per bucket; a whole-count check covers them.
    pub too_old: u64,
    /// Writer sub-keys folded into `settled` or reaped ([`RepairOptions::compact`]).
    pub compacted: u64,
    /// Counters the sweep checked whole ([`RepairOptions::sweep`]); their corrections are in
    /// `corrected`.
    pub swept: u64,
    /// Counters the sweep visited and left to the bucket checks: not quiet, or they moved,
    /// held changes past the cutoff, or progress lagged.
    pub sweep_warm: u64,
    /// Sweep cycles this run finished (the cursor went back to the table's start).
    pub sweep_cycles_done: u64,
}

impl RepairReport {
    /// Adds the run's metrics to `emf`: [`RUN_COMPLETED`], [`CORRECTION_UNITS`],
    /// [`CORRECTED`], [`UNSETTLED`] (moved checks), [`LAGGING`] and [`BLOCKED`], 0s included;
    /// [`REPAIR_LAG`] when progress is proven.
    pub fn metrics(&self, emf: &mut Emf) {
        let units = self
            .corrected
            .values()
            .fold(0u64, |sum, c| sum.saturating_add(c.unsigned_abs()));
        emf.count(RUN_COMPLETED, u64::from(self.completed))
            .count(CORRECTION_UNITS, units)
            .count(CORRECTED, self.corrected.len() as u64)
            .count(UNSETTLED, self.moved.len() as u64)
            .count(LAGGING, self.lagging)
            .count(BLOCKED, u64::from(self.blocked.is_some()));
        if let Some(lag) = self.lag_ms {
            emf.seconds(REPAIR_LAG, Duration::from_millis(lag));
        }
    }
}

/// Why a repair run judged nothing: what blocks proven progress, the shard, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// `silent-shard` (a shard of the stream without a watermark), `replication-lag` (a
    /// shard's changes arrive later than the settle time) or `nothing-proven` (no watermark).
    pub reason: &'static str,
    /// The shard holding progress back, when one does.
    pub shard: Option<String>,
    /// What it says, with the next command.
    pub detail: String,
}

impl Blocked {
    fn from_gate(gate: &Gate, name: &str) -> Option<Self> {
        let next = "check the aggregator's errors, redrive its parked batches (`heatsink redrive` with the rebuilder's `HEATSINK_*` environment), then rerun the repair";
        match gate {
            Gate::Open(_) => None,
            Gate::Silent(shards) => Some(Self {
                reason: "silent-shard",
                shard: shards.first().cloned(),
                detail: format!(
                    "shard(s) {} of the stream have no flushed watermark for `{name}`: their changes may still be uncounted; {next}",
                    shards.join(", ")
                ),
            }),
            Gate::ReplicationLag { writer, lag_ms } => Some(Self {
                reason: "replication-lag",
                shard: Some(writer.as_str().to_owned()),
                detail: format!(
                    "shard {} last saw changes arrive {lag_ms} ms after they were made, more than the settle time; the repair waits for the stream to catch up (AgeOfOldestUnreplicatedRecord), then rerun",
                    writer.as_str()
                ),
            }),
            Gate::NothingProven => Some(Self {
                reason: "nothing-proven",
                shard: None,
                detail: format!(
                    "no shard has recorded a flushed watermark for `{name}`: the aggregator is not running with progress for this counter; {next}"
                ),
            }),
        }
    }
}

/// What [`Repair::request`] did with checks from outside (a redrive's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Requested {
    /// Saved in the cursor: the next run judges them.
    Saved {
        /// Checks that were not already carried.
        added: usize,
        /// Checks the cursor carries now.
        carried: usize,
    },
    /// Another run holds the repair's lease: nothing saved; request again once it is done.
    Busy,
    /// They would take the carried checks past [`RepairOptions::max_retry`]: nothing saved;
    /// run the repair (it judges the carried ones), then request again.
    Full {
        /// Checks the cursor carries.
        carried: usize,
        /// New checks asked for.
        adding: usize,
        /// The most it carries.
        max: usize,
    },
}

/// The incremental repair of counter `name` in `counters` (see the module docs for the rule):
/// one run at a time (a lease), resumable (a persisted cursor), work proportional to the
/// counters touched since the last run.
#[derive(Debug)]
pub struct Repair<'a, R> {
    counters: &'a CounterStore,
    name: String,
    recount: &'a R,
    options: RepairOptions,
    lineage: Option<&'a dyn ShardListing>,
}

impl<'a, R: BucketRecount> Repair<'a, R> {
    /// A repair of counter `name` over `counters`, recounting with `recount`.
    pub fn new(
        counters: &'a CounterStore,
        name: impl Into<String>,
        recount: &'a R,
        options: RepairOptions,
    ) -> Self {
        Self {
            counters,
            name: name.into(),
            recount,
            options,
            lineage: None,
        }
    }

    /// Judges only on progress proven by every shard `lineage` lists (the stream the aggregator
    /// reads): a shard without a watermark blocks the run and is reported
    /// ([`RepairReport::blocked`]). Without a lineage the watermarks found are the writers,
    /// which cannot see a shard that has never flushed: production runs set it.
    pub fn with_lineage(mut self, lineage: &'a dyn ShardListing) -> Self {
        self.lineage = Some(lineage);
        self
    }

    /// The repair's gate now: the watermarks, then a listing of the lineage taken no earlier
    /// than they were read (a listing older than them would not show a shard that flushed
    /// since; its watermark then still counts, never ignored).
    async fn gate(&self) -> Result<Gate, RebuildError> {
        let marks = self.counters.progress(&self.name).await?;
        let read_at = crate::clock::now_ms();
        let (listing, newer) = match self.lineage {
            None => (Listing::default(), false),
            Some(l) => {
                let listing = l.list(read_at).await.map_err(RebuildError::Lineage)?;
                let newer = listing.taken_ms >= read_at;
                (listing, newer)
            }
        };
        let p = progress(&listing.shards, &marks, newer);
        Ok(p.gate(millis(self.options.settle)))
    }

    fn ddb(&self) -> &aws_sdk_dynamodb::Client {
        self.counters.client()
    }

    fn table(&self) -> &str {
        self.counters.table()
    }
    /// One run: take the lease, judge every closable bucket of every counter touched since the
    /// cursor (and the carried-over checks), move the cursor, release the lease.
    pub async fn run(&self) -> Result<RepairReport, RebuildError> {
        let mut report = RepairReport::default();
        if !self.acquire().await? {
            report.busy = true;
            return Ok(report);
        }
        let result = self.pass(&mut report).await;
        let released = self.release().await;
        result?;
        released?;
        Ok(report)
    }
    /// Adds `checks` to those the next run judges (a redrive's: counters and buckets a parked
    /// batch moved, which no counted change touched). Taken under the repair's lease, so it
    /// never races a run's cursor; all or nothing: refused when another run holds the lease
    /// ([`Requested::Busy`]) or when the carried checks would pass `max_retry`
    /// ([`Requested::Full`]), so no requested check is ever dropped.
    pub async fn request(&self, checks: &[Check]) -> Result<Requested, RebuildError> {
        if !self.acquire().await? {
            return Ok(Requested::Busy);
        }
        let result = self.add_checks(checks).await;
        let released = self.release().await;
        let requested = result?;
        released?;
        Ok(requested)
    }

    async fn add_checks(&self, checks: &[Check]) -> Result<Requested, RebuildError> {
        let mut cursor = self.load_cursor().await?;
        let carried: BTreeSet<Check> = cursor.retry.iter().cloned().collect();
        let mut all = carried.clone();
        all.extend(checks.iter().cloned());
        let added = all.len() - carried.len();
        if all.len() > self.options.max_retry {
            return Ok(Requested::Full {
                carried: carried.len(),
                adding: added,
                max: self.options.max_retry,
            });
        }
        if added > 0 {
            cursor.retry = all.into_iter().collect();
            self.save_cursor(&cursor).await?;
        }
        Ok(Requested::Saved {
            added,
            carried: cursor.retry.len(),
        })
    }

    async fn pass(&self, report: &mut RepairReport) -> Result<(), RebuildError> {
        let started = Instant::now();
        let spec = self.options.buckets;
        let cursor = self.load_cursor().await?;
        let gate = self.gate().await?;
        let marks = self.counters.progress(&self.name).await?;
        if let Some(blocked) = Blocked::from_gate(&gate, &self.name) {
            tracing::warn!(reason = blocked.reason, shard = ?blocked.shard, detail = %blocked.detail, "repair blocked; nothing judged");
            report.blocked = Some(blocked);
            return Ok(());
        }
        let proven = match gate {
            Gate::Open(p) => Some(p),
            _ => None,
        };
        report.proven_ms = proven;
        report.lag_ms = proven.map(|p| crate::clock::now_ms().saturating_sub(p));
        let closed: BTreeSet<WriterId> = marks
            .iter()
            .filter(|m| m.retired)
            .map(|m| m.writer.clone())
            .collect();
        let rule = SpanRule {
            now_ms: crate::clock::now_ms(),
            proven_ms: proven,
            settle_ms: millis(self.options.settle),
            spec,
            start_at: self.options.start_at,
            until: self.options.until,
        };
        let span = plan_span(&cursor, &rule);
        let touched = if span.closable(spec).is_empty() {
            BTreeSet::new()
        } else {
            self.touched(span.from).await?
        };
        let plan = plan_pass(&cursor, &rule, touched, []);
        report.from_ms = plan.span.from;
        report.horizon_ms = plan.span.horizon;
        let mut retry: Vec<Check> = vec![];
        let mut visited = 0;
        for chunk in plan.posts.chunks(self.options.chunk.max(1)) {
            if started.elapsed() > self.options.budget {
                tracing::warn!(
                    checked = report.posts_checked,
                    "rebuild budget spent; cursor persisted"
                );
                break;
            }
            // Steps 1 and 2 for every post of the chunk, one wait for the watermarks (step 3),
            // then step 4: the wait is paid once per chunk, not once per post.
            let mut firsts = Vec::with_capacity(chunk.len());
            for post in chunk {
                report.posts_checked += 1;
                if !post.too_old.is_empty() {
                    tracing::warn!(id = %post.id, buckets = ?post.too_old, "checks older than the kept buckets; left to a whole-count check");
                    report.too_old += post.too_old.len() as u64;
                }
                if let Some(first) = self.first_half(&post.id, &post.buckets, report).await? {
                    firsts.push(first);
                }
            }
            let recount_end = crate::clock::now_ms();
            let proven = if self.options.insert_only {
                proven
            } else {
                self.wait_for_progress(recount_end).await?
            };
            for first in firsts {
                self.second_half(first, recount_end, proven, report, &mut retry)
                    .await?;
            }
            if let Some(grace) = self.options.compact {
                for post in chunk {
                    self.compact_post(&post.id, &closed, grace, report).await?;
                }
            }
            visited += chunk.len();
            let (saved, _) = plan.cursor_after(visited, retry.clone(), self.options.max_retry);
            self.save_cursor(&saved).await?;
        }
        let (next, dropped) = plan.cursor_after(visited, retry, self.options.max_retry);
        report.dropped = dropped;
        report.completed = visited == plan.posts.len();
        self.save_cursor(&next).await?;
        if let Some(proven) = proven
            && report.completed
            && self.options.insert_only
            && self.options.sweep > 0
        {
            self.sweep(proven, started, report).await?;
        }
        Ok(())
    }

    /// Compacts one checked post over the retired writers; a malformed counter is skipped and
    /// reported, a DynamoDB failure stops the run (its cursor is saved per chunk).
    async fn compact_post(
        &self,
        id: &str,
        closed: &BTreeSet<WriterId>,
        grace: Duration,
        report: &mut RepairReport,
    ) -> Result<(), RebuildError> {
        if closed.is_empty() {
            return Ok(());
        }
        let Ok(key) = CounterKey::new(&self.name, id) else {
            return Ok(()); // reported by the first half
        };
        match self.counters.compact(&key, closed, grace).await {
            Ok(r) => report.compacted += r.folded + r.reaped,
            Err(CounterStoreError::Contended(_)) => {
                tracing::warn!(id, "counter kept changing under compaction; next run");
            }
            Err(e) => skip(report, id, unrepairable(e)?),
        }
        Ok(())
    }

    /// Polls the watermarks until the aggregator's proven progress reaches `recount_end` plus
    /// the skew allowance, or `max_wait` passes; returns the progress last read.
    async fn wait_for_progress(&self, recount_end: u64) -> Result<Option<u64>, RebuildError> {
        let skew_ms = millis(self.options.skew);
        let needed = recount_end.saturating_add(skew_ms);
        let waited = Instant::now();
        loop {
            let proven = match self.gate().await? {
                Gate::Open(p) => Some(p),
                _ => None,
            };
            if proven.is_some_and(|p| p >= needed) || waited.elapsed() >= self.options.max_wait {
                return Ok(proven);
            }
            tokio::time::sleep(self.options.poll).await;
        }
    }

    /// Steps 1 and 2 of a check of `buckets` of counter `id`: read the partition, recount each
    /// bucket it knows. `None` when there is nothing to judge (or the id is left alone).
    async fn first_half(
        &self,
        id: &str,
        buckets: &[u64],
        report: &mut RepairReport,
    ) -> Result<Option<FirstHalf>, RebuildError> {
        let spec = self.options.buckets;
        if !self.recount.accepts(id) {
            skip(report, id, "an id the aggregator rejects".into());
            return Ok(None);
        }
        let key = match CounterKey::new(&self.name, id) {
            Ok(k) => k,
            Err(e) => {
                skip(report, id, e.to_string());
                return Ok(None);
            }
        };
        let before = match self.counters.read_partition(&key).await {
            Ok(p) => p,
            Err(e) => {
                skip(report, id, unrepairable(e)?);
                return Ok(None);
            }
        };
        if let Some((sk, _, _, w)) = before
            .writers
            .iter()
            .find(|(_, _, b, w)| b.low() != u64::MAX && *w != Some(spec.width_ms()))
        {
            let reason = format!("{sk} has buckets {w:?} ms wide, not {}", spec.width_ms());
            skip(report, id, reason);
            return Ok(None);
        }
        let mut judged = vec![];
        for b in buckets.iter().copied().filter(|b| before.knows(*b)) {
            let r = self
                .recount
                .recount(id, b, spec.end_of(b))
                .await
                .map_err(RebuildError::Recount)?;
            judged.push((b, before.bucket(b), r));
        }
        if judged.is_empty() {
            return Ok(None);
        }
        Ok(Some(FirstHalf {
            id: id.to_owned(),
            key,
            judged,
        }))
    }

    /// Step 4 and the verdicts of one check begun by [`Repair::first_half`].
    async fn second_half(
        &self,
        first: FirstHalf,
        recount_end: u64,
        proven: Option<u64>,
        report: &mut RepairReport,
        retry: &mut Vec<Check>,
    ) -> Result<(), RebuildError> {
        let spec = self.options.buckets;
        let FirstHalf { id, key, judged } = first;
        let after = match self.counters.read_partition(&key).await {
            Ok(p) => p,
            Err(e) => {
                skip(report, &id, unrepairable(e)?);
                return Ok(());
            }
        };
        let skew_ms = millis(self.options.skew);
        let settle_ms = millis(self.options.settle);
        let mut fix: FixItem = after.fix.clone();
        for (b, before, r) in judged {
            let needed = if self.options.insert_only {
                needed_insert_only(spec.end_of(b), settle_ms)
            } else {
                needed_general(recount_end, skew_ms)
            };
            report.buckets_checked += 1;
            if !after.knows(b) {
                continue;
            }
            let current = fix.buckets.get(b).0;
            let verdict = judge(before, r, after.bucket(b), proven, needed, current)
                .map_err(CounterStoreError::from)?;
            match verdict {
                Verdict::Correct(c) if c.change == 0 => {}
                Verdict::Correct(c) => {
                    if self.counters.set_bucket_fix(&key, &fix, b, c.fix).await? {
                        fix.total = fix.total.saturating_sub(current).saturating_add(c.fix);
                        fix.buckets.set(b, c.fix);
                        fix.buckets.trim(spec);
                        fix.version = Some(fix.version.unwrap_or(0).saturating_add(1));
                        *report.corrected.entry(id.clone()).or_default() += c.change;
                        tracing::warn!(id = %id, bucket = b, change = c.change, "bucket corrected");
                    } else {
                        report.moved.push((id.clone(), b));
                        retry.push(Check::new(id.clone(), b));
                    }
                }
                Verdict::Moved => {
                    report.moved.push((id.clone(), b));
                    retry.push(Check::new(id.clone(), b));
                }
                Verdict::Lagging { .. } => {
                    report.lagging += 1;
                    retry.push(Check::new(id.clone(), b));
                }
            }
        }
        Ok(())
    }
}

/// Steps 1 and 2 of one counter's check: each bucket's `(net, events)` before and its recount.
#[derive(Debug)]
struct FirstHalf {
    id: String,
    key: CounterKey,
    judged: Vec<(u64, (i64, u64), i64)>,
}

fn skip(report: &mut RepairReport, id: &str, reason: String) {
    tracing::warn!(id = %id, reason = %reason, "counter left alone");
    report.skipped.push((id.to_owned(), reason));
}

/// A duration in whole ms, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
