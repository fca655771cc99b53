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
use crate::ddb::{Projecting, Projection};
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
    /// Listing the stream's shards (the writers that must prove progress) failed.
    #[error("listing the stream's shards failed: {0}")]
    Lineage(#[source] BoxError),
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
    let mut pages = ddb
        .scan()
        .table_name(table)
        .projecting(&Projection::of(attrs))
        .consistent_read(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::dynamodb("Scan", table, e))?;
        page.items().iter().for_each(&mut each);
    }
    Ok(())
}

/// A malformed counter's error as text (the id is reported and left alone); any other
/// error (DynamoDB unreachable, throttled) stops the rebuild.
pub(crate) fn unrepairable(e: CounterStoreError) -> Result<String, RebuildError> {
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
