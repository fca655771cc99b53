//! The rebuild rule: recount a counter from durable events and correct its `fix` sub-key,
//! only when the comparison is sound.
//!
//! A pre-aggregated counter is a view; the durable events (one item per like, per order, …)
//! are the truth. A lost or doubled flush leaves the view off by some amount until a rebuild
//! recounts the truth and writes the difference into the counter's `fix` sub-key. The recount
//! is yours ([`Recount`]: scan your table, query an index, read a ledger); the rule is here:
//! a counter is corrected only when it is *settled*, that is its newest event is older than
//! [`RebuildOptions::quiet`] and its total without `fix` did not move between a read before
//! the recount and the read at correction. Anything else is reported as `unsettled` and left
//! for a later run, so in-flight events are never turned into a lasting error.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::counter::rebuild::RebuildError> {
//! use std::collections::BTreeMap;
//! use heatsink::counter::rebuild::{rebuild, Recount, RebuildOptions, Tally};
//!
//! /// Orders per product, recounted from a ledger the application keeps.
//! struct Ledger(BTreeMap<String, i64>);
//! impl Recount for Ledger {
//!     async fn recount(&self) -> Result<BTreeMap<String, Tally>, heatsink::counter::rebuild::BoxError> {
//!         Ok(self.0.iter().map(|(id, n)| (id.clone(), Tally { count: *n, newest_ms: 0 })).collect())
//!     }
//! }
//! let ledger = Ledger(BTreeMap::from([("p9".to_owned(), 12)]));
//! let report = rebuild(&ddb, "shop-counters", "orders", &ledger, RebuildOptions::default()).await?;
//! println!("corrected {:?}", report.corrected);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::counter::CounterKey;
use serde::Serialize;

use super::{CounterStore, CounterStoreError};
use crate::error::AwsError;
use crate::metrics::{Emf, MetricDef};

/// A boxed error from a user's [`Recount`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The durable truth of one counter: its event count and when its newest event became durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Events counted (negative only if the truth itself is a sum of signed events).
    pub count: i64,
    /// Unix milliseconds of the newest event; 0 when unknown (counts as old).
    pub newest_ms: u64,
}

/// Where a rebuild gets the truth: every counter id (the part after `name#`) with its tally.
pub trait Recount: Send + Sync {
    /// Counts the durable events of every id.
    fn recount(&self) -> impl Future<Output = Result<BTreeMap<String, Tally>, BoxError>> + Send;
}

/// A ready-made [`Recount`]: a consistent Scan of a table of durable events, one event per
/// item, grouped by the string value of `attribute`; `time_attribute` (Unix ms, a number) dates
/// each event, and an item without one counts as old (one whose time is not a number leaves its
/// counter unsettled). Items without `attribute` are not events.
/// A Scan reads the whole table every run: fine for small tables; give large ones an index or
/// an incremental recount of your own.
#[derive(Debug, Clone)]
pub struct ScanRecount {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    attribute: String,
    time_attribute: String,
}

impl ScanRecount {
    /// Recounts `table`'s items per value of `attribute`, dated by `time_attribute`.
    pub fn new(
        ddb: &aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        attribute: impl Into<String>,
        time_attribute: impl Into<String>,
    ) -> Self {
        Self {
            ddb: ddb.clone(),
            table: table.into(),
            attribute: attribute.into(),
            time_attribute: time_attribute.into(),
        }
    }
}

impl Recount for ScanRecount {
    async fn recount(&self) -> Result<BTreeMap<String, Tally>, BoxError> {
        let mut truth: BTreeMap<String, Tally> = BTreeMap::new();
        let attrs = [self.attribute.as_str(), self.time_attribute.as_str()];
        scan_projected(&self.ddb, &self.table, &attrs, |item| {
            let Some(id) = item.get(&self.attribute).and_then(|v| v.as_s().ok()) else {
                return;
            };
            // No time: an old event. A time that is not a Unix-ms number is not read as 0 (which
            // would make the counter look settled): it counts as newest, so the counter is left
            // unsettled and reported rather than corrected from a bad item.
            let at = match item.get(&self.time_attribute) {
                None => 0,
                Some(v) => match v.as_n().ok().and_then(|n| n.parse::<u64>().ok()) {
                    Some(at) => at,
                    None => {
                        tracing::warn!(id = %id, attribute = %self.time_attribute, "event time is not a number; counter left unsettled");
                        u64::MAX
                    }
                },
            };
            let tally = truth.entry(id.to_owned()).or_default();
            tally.count = tally.count.saturating_add(1);
            tally.newest_ms = tally.newest_ms.max(at);
        })
        .await?;
        Ok(truth)
    }
}

/// Errors of a rebuild run (a malformed counter is reported in the run's report instead).
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Scanning the counters table failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// Reading or correcting a counter failed (DynamoDB unreachable, throttled).
    #[error(transparent)]
    Counter(#[from] CounterStoreError),
    /// The user's recount failed.
    #[error("recount failed: {0}")]
    Recount(#[source] BoxError),
}

/// Sum of the absolute changes one run wrote into `fix`: how far the counters were off.
pub const CORRECTION_UNITS: MetricDef = MetricDef::count("CounterCorrectionLikes");
/// Counters one run corrected.
pub const CORRECTED: MetricDef = MetricDef::count("CountersCorrected");
/// Counters one run left for a later one (unsettled).
pub const UNSETTLED: MetricDef = MetricDef::count("CountersUnsettled");

/// What a rebuild corrected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RebuildReport {
    /// Durable events the recount counted.
    pub events_scanned: u64,
    /// Counters checked against their recount.
    pub counters_checked: u64,
    /// Counters whose `fix` changed, by id, with the change.
    pub corrected: BTreeMap<String, i64>,
    /// Ids left for a later run: an event within the quiet period, or their counter moved while
    /// this run counted (a correction then would be off by the events in flight).
    pub unsettled: Vec<String>,
    /// Ids whose id or counter items are malformed; reported, left alone.
    pub skipped: Vec<String>,
}

/// How a rebuild decides that a counter can be compared with its durable events.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildOptions {
    /// A counter is corrected only if its newest event is at least this old: every event the
    /// count compares against must have had time to be flushed by the aggregator. Without it,
    /// an event still in the stream would be counted once by the `fix` and again by its flush.
    pub quiet: std::time::Duration,
}

impl Default for RebuildOptions {
    /// One minute: well beyond the aggregator's normal lag (a batching window of seconds).
    fn default() -> Self {
        Self {
            quiet: std::time::Duration::from_secs(60),
        }
    }
}

/// Calls `each` with the attributes `attrs` of every item of `table` (a consistent, paginated
/// Scan that projects only those attributes): what a [`Recount`] over a whole table runs.
pub async fn scan_projected(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    attrs: &[&str],
    mut each: impl FnMut(&HashMap<String, AttributeValue>),
) -> Result<(), AwsError> {
    let names: Vec<String> = (0..attrs.len()).map(|i| format!("#a{i}")).collect();
    let mut start = None;
    loop {
        let out = ddb
            .scan()
            .table_name(table)
            .projection_expression(names.join(", "))
            .set_expression_attribute_names(Some(
                names
                    .iter()
                    .cloned()
                    .zip(attrs.iter().map(|a| (*a).to_owned()))
                    .collect(),
            ))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("Scan", table, e))?;
        out.items().iter().for_each(&mut each);
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok(());
        }
    }
}

/// A malformed counter's error as text (the id is reported and left alone); any other
/// error (DynamoDB unreachable, throttled) stops the rebuild.
fn unrepairable(e: CounterStoreError) -> Result<String, RebuildError> {
    match e {
        CounterStoreError::Counter(_) | CounterStoreError::Malformed { .. } => Ok(e.to_string()),
        e => Err(e.into()),
    }
}

/// A rebuild in progress: the counters as they were before the durable events were counted.
///
/// [`rebuild`] runs [`Rebuild::begin`] then [`Rebuild::finish`]; they are separate so a test
/// can land a flush in between and see the counter left alone rather than mis-corrected.
#[derive(Debug)]
pub struct Rebuild {
    counters: CounterStore,
    name: String,
    options: RebuildOptions,
    /// Each existing counter's total without `fix`, read before the durable likes are counted.
    before: BTreeMap<String, Result<i64, String>>,
    report: RebuildReport,
}

impl Rebuild {
    /// Reads every existing counter named `name` in `counters_table` (one Query each) before
    /// anything is counted.
    pub async fn begin(
        ddb: &aws_sdk_dynamodb::Client,
        counters_table: &str,
        name: &str,
        options: RebuildOptions,
    ) -> Result<Self, RebuildError> {
        let counters = CounterStore::new(ddb.clone(), counters_table.to_owned());
        let prefix = format!("{name}#");
        let mut ids = std::collections::BTreeSet::new();
        scan_projected(ddb, counters_table, &["pk"], |item| {
            if let Some(id) = item
                .get("pk")
                .and_then(|v| v.as_s().ok())
                .and_then(|pk| pk.strip_prefix(&prefix))
            {
                ids.insert(id.to_owned());
            }
        })
        .await?;
        let mut before = BTreeMap::new();
        for id in ids {
            // An unreadable counter is remembered as such: `finish` reports it and moves on.
            let sum = match CounterKey::new(name, &id) {
                Ok(key) => match counters.read(&key).await {
                    Ok(sum) => Ok(sum.without_fix()),
                    Err(e) => Err(unrepairable(e)?),
                },
                Err(e) => Err(e.to_string()),
            };
            before.insert(id, sum);
        }
        Ok(Self {
            counters,
            name: name.to_owned(),
            options,
            before,
            report: RebuildReport::default(),
        })
    }

    /// Counts the durable events with `recount` and corrects every settled counter's `fix`.
    pub async fn finish(mut self, recount: &impl Recount) -> Result<RebuildReport, RebuildError> {
        let mut truth: BTreeMap<String, (i64, u64)> = recount
            .recount()
            .await
            .map_err(RebuildError::Recount)?
            .into_iter()
            .map(|(id, t)| (id, (t.count, t.newest_ms)))
            .collect();
        self.report.events_scanned = truth
            .values()
            .fold(0u64, |sum, (n, _)| sum.saturating_add(n.unsigned_abs()));
        // Ids whose events were all removed still have counter items: check those too.
        for id in self.before.keys() {
            truth.entry(id.clone()).or_insert((0, 0));
        }
        let quiet_ms = u64::try_from(self.options.quiet.as_millis()).unwrap_or(u64::MAX);
        let cutoff = crate::clock::now_ms().saturating_sub(quiet_ms);
        for (id, (count, newest)) in truth {
            let key = match CounterKey::new(&self.name, &id) {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!(id = %id, error = %e, "not a counter key; left alone");
                    self.report.skipped.push(id);
                    continue;
                }
            };
            let settled = quiet_ms == 0 || newest <= cutoff;
            let outcome = match self.before.get(&id) {
                Some(Err(e)) => Err(e.clone()),
                _ if !settled => Ok(None),
                before => {
                    let before = before.and_then(|b| b.as_ref().ok()).copied().unwrap_or(0);
                    match self.counters.correct_if_unmoved(&key, count, before).await {
                        Ok(fix) => Ok(fix),
                        Err(e) => Err(unrepairable(e)?),
                    }
                }
            };
            match outcome {
                Ok(Some(fix)) => {
                    self.report.counters_checked += 1;
                    if fix.change != 0 {
                        self.report.corrected.insert(id, fix.change);
                    }
                }
                // Liked within the quiet period, or the counter moved while counting.
                Ok(None) => self.report.unsettled.push(id),
                // One malformed counter (an item edited by hand) must not stop the others' repair.
                Err(e) => {
                    tracing::warn!(id = %id, error = %e, "counter not repairable; left alone");
                    self.report.skipped.push(id);
                }
            }
        }
        Ok(self.report)
    }
}

/// Recounts every counter named `name` in `counters_table` with `recount` and writes the
/// difference into its `fix` sub-key.
///
/// Only settled counters are corrected: no event newer than `options.quiet`, and a counter that
/// did not move while the events were counted (read before and again at the correction). A
/// counter still moving is reported as `unsettled` and left for a later run, so the rebuilder
/// never turns a hot key's in-flight events into a lasting error. A flush that lands between the
/// second read and the `fix` write (milliseconds) can still leave an error; the next run that
/// finds the counter settled removes it.
pub async fn rebuild(
    ddb: &aws_sdk_dynamodb::Client,
    counters_table: &str,
    name: &str,
    recount: &impl Recount,
    options: RebuildOptions,
) -> Result<RebuildReport, RebuildError> {
    Rebuild::begin(ddb, counters_table, name, options)
        .await?
        .finish(recount)
        .await
}

impl RebuildReport {
    /// Adds the run's metrics to `emf`, all three always (a 0 is a data point: "every counter
    /// was exact", so the graph shows 0 rather than a gap): [`CORRECTION_UNITS`], the sum of the
    /// absolute changes written into `fix` (saturating); [`CORRECTED`]; [`UNSETTLED`]. Skipped
    /// ids are logged by the rebuild, not counted here.
    pub fn metrics(&self, emf: &mut Emf) {
        let units = self.corrected.values().fold(0u64, |sum, change| {
            sum.saturating_add(change.unsigned_abs())
        });
        emf.count(CORRECTION_UNITS, units)
            .count(CORRECTED, self.corrected.len() as u64)
            .count(UNSETTLED, self.unsettled.len() as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// Incremental repair: per-bucket recounts of the posts touched since the last run, gated on the
// aggregator's flushed watermarks.
// ---------------------------------------------------------------------------------------------

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use heatsink_core::counter::{
    BucketSpec, Verdict, WriterId, judge, needed_general, needed_insert_only,
    proven_through_expected,
};

use super::{FixItem, TOUCHED_INDEX};

/// Runs that finished their pass (1 per completed run, 0 for a run that stopped on its budget
/// or found another run holding the lease). Alarmed when missing: a run that times out emits
/// nothing, and that must page like a failing one.
pub const RUN_COMPLETED: MetricDef = MetricDef::count("CounterRebuildCompleted");
/// Bucket checks one run left because the aggregator had not proven its progress.
pub const LAGGING: MetricDef = MetricDef::count("CounterRebuildLagging");

/// Where a repair gets the truth of one bucket: the durable events of one id whose event time
/// is in `[start_ms, end_ms)`.
pub trait BucketRecount: Send + Sync {
    /// Net durable events of `id` with an event time in `[start_ms, end_ms)`.
    fn recount(
        &self,
        id: &str,
        start_ms: u64,
        end_ms: u64,
    ) -> impl Future<Output = Result<i64, BoxError>> + Send;

    /// Whether the aggregator counts this id at all: an id it rejects (its records fail the
    /// mapper) is never corrected, whatever the events table holds.
    fn accepts(&self, id: &str) -> bool {
        let _ = id;
        true
    }
}

/// The shard of a write-sharded by-id index key: `<id>#<n>`, `n = MD5(spread) mod shards`
/// (`spread` is the item's own key, e.g. the user, so one id's events spread evenly).
pub fn sharded_key(id: &str, spread: &str, shards: u32) -> String {
    use md5::Digest;
    let d = md5::Md5::digest(spread.as_bytes());
    let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % shards.max(1);
    format!("{id}#{n}")
}

/// A ready-made [`BucketRecount`]: `Select COUNT` Queries of a write-sharded GSI of the events
/// table, keyed `<id>#<n>` (`shard_attribute`, see [`sharded_key`]) and sorted by the event time
/// (`time_attribute`, a number of Unix ms). Cost per bucket: `shards` Queries (more only when a
/// shard's bucket exceeds 1 MB of index entries, about 20,000 events).
///
/// A GSI is eventually consistent: the repair judges a bucket only `settle` after its end, and
/// relies on index propagation being shorter than that (AWS: typically well under a second).
#[derive(Debug, Clone)]
pub struct GsiRecount {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    index: String,
    shard_attribute: String,
    time_attribute: String,
    shards: u32,
    accepts: Option<fn(&str) -> bool>,
}

impl GsiRecount {
    /// Recounts through `index` of `table`, `shards` shards per id.
    pub fn new(
        ddb: &aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        index: impl Into<String>,
        shard_attribute: impl Into<String>,
        time_attribute: impl Into<String>,
        shards: u32,
    ) -> Self {
        Self {
            ddb: ddb.clone(),
            table: table.into(),
            index: index.into(),
            shard_attribute: shard_attribute.into(),
            time_attribute: time_attribute.into(),
            shards: shards.max(1),
            accepts: None,
        }
    }

    /// Corrects only ids `accepts` allows (the aggregator's own id rule).
    pub fn accepting(mut self, accepts: fn(&str) -> bool) -> Self {
        self.accepts = Some(accepts);
        self
    }
}

impl BucketRecount for GsiRecount {
    async fn recount(&self, id: &str, start_ms: u64, end_ms: u64) -> Result<i64, BoxError> {
        let mut total: i64 = 0;
        for n in 0..self.shards {
            let mut start = None;
            loop {
                let out = self
                    .ddb
                    .query()
                    .table_name(&self.table)
                    .index_name(&self.index)
                    .key_condition_expression("#s = :s AND #t BETWEEN :a AND :b")
                    .expression_attribute_names("#s", &self.shard_attribute)
                    .expression_attribute_names("#t", &self.time_attribute)
                    .expression_attribute_values(":s", AttributeValue::S(format!("{id}#{n}")))
                    .expression_attribute_values(":a", AttributeValue::N(start_ms.to_string()))
                    .expression_attribute_values(
                        ":b",
                        AttributeValue::N(end_ms.saturating_sub(1).to_string()),
                    )
                    .select(aws_sdk_dynamodb::types::Select::Count)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|e| AwsError::dynamodb("Query", &self.table, e))?;
                total = total
                    .checked_add(i64::from(out.count))
                    .ok_or("recount overflowed")?;
                start = out.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
        }
        Ok(total)
    }

    fn accepts(&self, id: &str) -> bool {
        self.accepts.is_none_or(|f| f(id))
    }
}

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
    /// The source's writers (its stream shards), when known: one without a watermark proves
    /// nothing (an empty list trusts the watermarks found, which cannot see a shard that has
    /// never flushed).
    pub expected: Vec<WriterId>,
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
            expected: vec![],
            insert_only: false,
            start_at: None,
            until: None,
            chunk: 100,
            max_wait: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            compact: None,
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
    /// Writer sub-keys folded into `settled` or reaped ([`RepairOptions::compact`]).
    pub compacted: u64,
}

impl RepairReport {
    /// Adds the run's metrics to `emf`: [`RUN_COMPLETED`], [`CORRECTION_UNITS`],
    /// [`CORRECTED`], [`UNSETTLED`] (moved checks) and [`LAGGING`], 0s included.
    pub fn metrics(&self, emf: &mut Emf) {
        let units = self
            .corrected
            .values()
            .fold(0u64, |sum, c| sum.saturating_add(c.unsigned_abs()));
        emf.count(RUN_COMPLETED, u64::from(self.completed))
            .count(CORRECTION_UNITS, units)
            .count(CORRECTED, self.corrected.len() as u64)
            .count(UNSETTLED, self.moved.len() as u64)
            .count(LAGGING, self.lagging);
    }
}

/// The persisted position of the repair of one counter name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Cursor {
    /// First bucket start not yet judged for every post touched in it.
    next: u64,
    /// A run that stopped mid-pass: its horizon, and the last id it finished.
    resume: Option<(u64, String)>,
    /// (id, bucket start) checks carried over.
    retry: Vec<(String, u64)>,
}

fn rebuild_pk(name: &str) -> String {
    format!("#rebuild#{name}")
}

fn n_attr(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s_attr(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
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
        }
    }

    fn ddb(&self) -> &aws_sdk_dynamodb::Client {
        self.counters.client()
    }

    fn table(&self) -> &str {
        self.counters.table()
    }

    async fn acquire(&self) -> Result<bool, RebuildError> {
        let now = crate::clock::now_ms();
        let lease_ms = u64::try_from(self.options.lease.as_millis()).unwrap_or(u64::MAX);
        let out = self
            .ddb()
            .put_item()
            .table_name(self.table())
            .item("pk", s_attr(rebuild_pk(&self.name)))
            .item("sk", s_attr("lease"))
            .item("holder", s_attr(&self.options.holder))
            .item("expires", n_attr(now.saturating_add(lease_ms)))
            .condition_expression("attribute_not_exists(pk) OR expires < :now OR holder = :me")
            .expression_attribute_values(":now", n_attr(now))
            .expression_attribute_values(":me", s_attr(&self.options.holder))
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = AwsError::dynamodb("PutItem", self.table(), e);
                if e.is_conditional_check_failed() {
                    Ok(false)
                } else {
                    Err(e.into())
                }
            }
        }
    }

    async fn release(&self) -> Result<(), RebuildError> {
        let out = self
            .ddb()
            .delete_item()
            .table_name(self.table())
            .key("pk", s_attr(rebuild_pk(&self.name)))
            .key("sk", s_attr("lease"))
            .condition_expression("holder = :me")
            .expression_attribute_values(":me", s_attr(&self.options.holder))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = AwsError::dynamodb("DeleteItem", self.table(), e);
                // Someone took over an expired lease: theirs now, nothing to release.
                if e.is_conditional_check_failed() {
                    Ok(())
                } else {
                    Err(e.into())
                }
            }
        }
    }

    async fn load_cursor(&self) -> Result<Cursor, RebuildError> {
        let out = self
            .ddb()
            .get_item()
            .table_name(self.table())
            .key("pk", s_attr(rebuild_pk(&self.name)))
            .key("sk", s_attr("cursor"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", self.table(), e))?;
        let Some(item) = out.item else {
            return Ok(Cursor::default());
        };
        let bad = |reason: &str| {
            RebuildError::Counter(CounterStoreError::Malformed {
                pk: rebuild_pk(&self.name),
                sk: "cursor".into(),
                reason: reason.into(),
            })
        };
        let num = |v: &AttributeValue| v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
        let next = item
            .get("next")
            .and_then(num)
            .ok_or_else(|| bad("`next` is not a number"))?;
        let resume = match (item.get("horizon"), item.get("after")) {
            (Some(h), Some(a)) => Some((
                num(h).ok_or_else(|| bad("`horizon` is not a number"))?,
                a.as_s()
                    .map_err(|_| bad("`after` is not a string"))?
                    .clone(),
            )),
            _ => None,
        };
        let mut retry = vec![];
        if let Some(list) = item.get("retry") {
            for v in list.as_l().map_err(|_| bad("`retry` is not a list"))? {
                let pair = v.as_l().map_err(|_| bad("a retry is not a list"))?;
                let id = pair.first().and_then(|v| v.as_s().ok()).cloned();
                let b = pair.get(1).and_then(num);
                match (id, b) {
                    (Some(id), Some(b)) => retry.push((id, b)),
                    _ => return Err(bad("a retry is not [id, bucket]")),
                }
            }
        }
        Ok(Cursor {
            next,
            resume,
            retry,
        })
    }

    async fn save_cursor(&self, c: &Cursor) -> Result<(), RebuildError> {
        let retry = c
            .retry
            .iter()
            .map(|(id, b)| AttributeValue::L(vec![s_attr(id), n_attr(*b)]))
            .collect();
        let mut req = self
            .ddb()
            .put_item()
            .table_name(self.table())
            .item("pk", s_attr(rebuild_pk(&self.name)))
            .item("sk", s_attr("cursor"))
            .item("next", n_attr(c.next))
            .item("retry", AttributeValue::L(retry));
        if let Some((h, after)) = &c.resume {
            req = req.item("horizon", n_attr(*h)).item("after", s_attr(after));
        }
        req.send()
            .await
            .map_err(|e| AwsError::dynamodb("PutItem", self.table(), e))?;
        Ok(())
    }

    /// Ids of counter `name` whose writer sub-keys' newest bucket is `from` or later, through
    /// the write-sharded `touched` index ([`CounterStore::touch_shards`] Queries per bucket), oldest first up
    /// to the bucket of the run's start. A hot counter's index key moves to the current bucket
    /// with its flushes, so a last pass reads the previous and the current bucket of the clock
    /// *then*, in that order: a key that was in either when the first of the two was read is
    /// found, unless it moved twice during the two reads (which take far less than a bucket).
    async fn touched(&self, from: u64) -> Result<BTreeSet<String>, RebuildError> {
        let spec = self.options.buckets;
        let prefix = format!("{}#", self.name);
        let mut ids = BTreeSet::new();
        let last = spec.start_of(crate::clock::now_ms());
        let mut starts: Vec<u64> = (from..=last)
            .step_by(spec.width_ms().max(1) as usize)
            .collect();
        let mut at = 0;
        let mut caught_up = false;
        loop {
            let Some(&start) = starts.get(at) else {
                if caught_up {
                    break;
                }
                caught_up = true;
                let now = spec.start_of(crate::clock::now_ms());
                starts.extend(
                    [now.saturating_sub(spec.width_ms()), now]
                        .into_iter()
                        .filter(|b| *b >= from),
                );
                continue;
            };
            at += 1;
            for n in 0..self.counters.touch_shards() {
                let key = format!("{}#{start}#{n}", self.name);
                debug_assert!(key.starts_with(&prefix));
                let mut page = None;
                loop {
                    let out = self
                        .ddb()
                        .query()
                        .table_name(self.table())
                        .index_name(TOUCHED_INDEX)
                        .key_condition_expression("#t = :t")
                        .expression_attribute_names("#t", TOUCHED_INDEX)
                        .expression_attribute_values(":t", s_attr(&key))
                        .projection_expression("pk")
                        .set_exclusive_start_key(page)
                        .send()
                        .await
                        .map_err(|e| AwsError::dynamodb("Query", self.table(), e))?;
                    for item in out.items() {
                        if let Some(id) = item
                            .get("pk")
                            .and_then(|v| v.as_s().ok())
                            .and_then(|pk| pk.strip_prefix(&prefix))
                        {
                            ids.insert(id.to_owned());
                        }
                    }
                    page = out.last_evaluated_key;
                    if page.is_none() {
                        break;
                    }
                }
            }
        }
        Ok(ids)
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

    async fn pass(&self, report: &mut RepairReport) -> Result<(), RebuildError> {
        let started = Instant::now();
        let spec = self.options.buckets;
        let width = spec.width_ms();
        let settle_ms = u64::try_from(self.options.settle.as_millis()).unwrap_or(u64::MAX);
        let now = crate::clock::now_ms();
        let mut cursor = self.load_cursor().await?;
        // Buckets older than the writers keep are unknown: start no lower than that.
        let oldest = spec.low_for(spec.start_of(now)).saturating_add(width);
        let fresh = self.options.start_at.map_or(0, |at| spec.start_of(at));
        let from = cursor
            .next
            .max(oldest)
            .max(if cursor.next == 0 { fresh } else { 0 });
        report.from_ms = from;
        let marks = self.counters.progress(&self.name).await?;
        let proven = proven_through_expected(&marks, &self.options.expected);
        report.proven_ms = proven;
        let closed: BTreeSet<WriterId> = marks
            .iter()
            .filter(|m| m.retired)
            .map(|m| m.writer.clone())
            .collect();
        let (horizon, after) = match cursor.resume.take() {
            Some((h, after)) => (h, Some(after)),
            None => (
                proven.map_or(0, |p| spec.start_of(p.saturating_sub(settle_ms))),
                None,
            ),
        };
        // The bucket of `now` is still filling whatever the watermarks say (they may run ahead
        // of this clock by the skew); a pinned end holds the horizon further back.
        let end = self.options.until.map_or(now, |u| u.min(now));
        let horizon = horizon.min(spec.start_of(end));
        report.horizon_ms = horizon;
        let carried = std::mem::take(&mut cursor.retry);
        let mut retry: Vec<(String, u64)> = vec![];
        let mut by_id: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (id, b) in carried {
            by_id.entry(id).or_default().insert(b);
        }
        let closable: Vec<u64> = (from..horizon).step_by(width.max(1) as usize).collect();
        if !closable.is_empty() {
            for id in self.touched(from).await? {
                by_id
                    .entry(id)
                    .or_default()
                    .extend(closable.iter().copied());
            }
        }
        let mut done_all = true;
        let pending: Vec<(&String, &BTreeSet<u64>)> = by_id
            .iter()
            .filter(|(id, _)| after.as_ref().is_none_or(|a| *id > a))
            .collect();
        for chunk in pending.chunks(self.options.chunk.max(1)) {
            if started.elapsed() > self.options.budget {
                tracing::warn!(
                    checked = report.posts_checked,
                    "rebuild budget spent; cursor persisted"
                );
                done_all = false;
                break;
            }
            // Steps 1 and 2 for every post of the chunk, one wait for the watermarks (step 3),
            // then step 4: the wait is paid once per chunk, not once per post.
            let mut firsts = Vec::with_capacity(chunk.len());
            for (id, buckets) in chunk {
                report.posts_checked += 1;
                let buckets: Vec<u64> = buckets.iter().copied().filter(|b| *b >= oldest).collect();
                if let Some(first) = self.first_half(id, &buckets, report).await? {
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
                for (id, _) in chunk {
                    self.compact_post(id, &closed, grace, report).await?;
                }
            }
            if let Some((id, _)) = chunk.last() {
                cursor.resume = Some((horizon, (*id).clone()));
                let mut c = cursor.clone();
                c.next = from;
                c.retry = retry.clone();
                self.save_cursor(&c).await?;
            }
        }
        if retry.len() > self.options.max_retry {
            report.dropped = (retry.len() - self.options.max_retry) as u64;
            retry.truncate(self.options.max_retry);
        }
        cursor.retry = retry;
        if done_all {
            cursor.next = horizon.max(from);
            cursor.resume = None;
            report.completed = true;
        } else {
            cursor.next = from;
        }
        self.save_cursor(&cursor).await
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
        let skew_ms = u64::try_from(self.options.skew.as_millis()).unwrap_or(u64::MAX);
        let needed = recount_end.saturating_add(skew_ms);
        let waited = Instant::now();
        loop {
            let proven = proven_through_expected(
                &self.counters.progress(&self.name).await?,
                &self.options.expected,
            );
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
        retry: &mut Vec<(String, u64)>,
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
        let skew_ms = u64::try_from(self.options.skew.as_millis()).unwrap_or(u64::MAX);
        let settle_ms = u64::try_from(self.options.settle.as_millis()).unwrap_or(u64::MAX);
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
                        retry.push((id.clone(), b));
                    }
                }
                Verdict::Moved => {
                    report.moved.push((id.clone(), b));
                    retry.push((id.clone(), b));
                }
                Verdict::Lagging { .. } => {
                    report.lagging += 1;
                    retry.push((id.clone(), b));
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
