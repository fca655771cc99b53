//! The DynamoDB counter store: conditional absolute flushes, one-Query reads, corrections.
//!
//! The decisions live in [`heatsink_core::counter`]; this module carries them out against the
//! `counters` table (`pk = likes#p9`, `sk = w#<writer> | s#<n> | fix | settled`). A flush reads
//! the writer's sub-keys with a strongly consistent BatchGetItem, plans absolute totals with
//! [`FlushPlan`], and writes each with a Put **conditional on the stored `seq` being exactly the
//! one it read** (`attribute_not_exists` for a first write). A condition that fails means another
//! flush of the same writer landed in between (a retry, a redelivery): the key is re-read and
//! decided again, so it counts once whatever the interleaving. A repeated flush is recognised and
//! reported as [`FlushReport::already_applied`], never as an error.
//!
//! ```no_run
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::counter::CounterStoreError> {
//! use heatsink::counter::{CounterKey, CounterStore, Deltas, Seq, WriterId};
//! let store = CounterStore::new(ddb, "heatsink-counters");
//! let mut batch = Deltas::new();
//! batch.add_record(CounterKey::new("likes", "p9")?, Seq::parse("1001")?, 1)?;
//! store.flush(&WriterId::new("shardId-000000000000")?, &batch).await?;
//! let count = store.read(&CounterKey::new("likes", "p9")?).await?.total();
//! # Ok(()) }
//! ```
//!
//! Limits: a flush touches each key of the batch with one read and one conditional put (so a
//! batch of 100 records for one hot post costs 2 requests, not 100); a key whose condition keeps
//! failing is retried [`MAX_ROUNDS`] times and then reported as an error for that batch.
//!
//! - `aggregate` (feature `lambda`): count your own change stream in your own Lambda, over a
//!   `aggregate::ChangeMapper` you write.
//! - [`repair`]: the scheduled incremental repair: per-bucket recounts of the counters touched
//!   since the last run, corrected only on proof of the aggregator's progress.
//! - `redrive` (features `lambda` and `streams`): a parked batch's changes read back from the
//!   stream into the repair's checks, so a lost change on a cold counter is corrected too.
//! - [`rebuild`]: the whole-table recount by hand (after an incident), correcting settled counters.
//! - [`compact`](mod@compact): fold closed writers' sub-keys into `settled` ([`CounterStore::compact`]), so
//!   a read stays bounded while DynamoDB Streams shards roll over.
//! - The pure decisions ([`Deltas`], [`FlushPlan`], [`Seq`], …) are re-exported from
//!   `heatsink_core::counter`, so one import path serves both layers.

#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod aggregate;
pub mod compact;
pub mod lineage;
pub mod rebuild;
#[cfg(all(feature = "lambda", feature = "streams"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "lambda", feature = "streams"))))]
pub mod redrive;
pub mod repair;

pub use heatsink_core::counter::*;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::ddb::{
    Condition, KeyCondition, OnlyIf, QueryKey, Update, Updating, Written, flag, get_flag, get_n,
    get_s, n, s,
};
use crate::error::AwsError;
use crate::scatter::{Backoff, Item, ScatterError, batch_get_with};

/// Rounds of re-read and re-plan for keys whose conditional put lost a race.
pub const MAX_ROUNDS: usize = 5;

/// Items of one counter partition a read takes at most (writer sub-keys of every stream shard
/// not yet compacted, salts, `fix`, `settled`); past it the read is refused, not cut short.
const MAX_PARTITION_ITEMS: usize = 100_000;

/// A counter sub-key as stored: a writer's (`total`, `seq`, time buckets, dedupe window), a
/// salt's (`total`), the `fix` (`total`, buckets, `ver`) or `settled`; a kind's absent fields
/// are absent from its item. Compaction's own attributes (`folded`, `rev`) are read apart.
#[derive(Debug, Default, Serialize, Deserialize)]
struct SubKeyRow {
    pk: String,
    sk: String,
    total: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<String>,
    /// Time buckets: start (ms, as text: a map key) → `[net, events]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bk: Option<BTreeMap<String, (i64, u64)>>,
    /// The lowest complete bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bl: Option<u64>,
    /// The bucket width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bw: Option<u64>,
    /// The fix's version (conditional writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ver: Option<u64>,
    /// The [`TOUCHED_INDEX`] key of a writer sub-key's newest bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    touched: Option<String>,
    /// The dedupe window ([`DedupeWindow::encode`]), binary.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "serde_bytes")]
    recent: Option<Vec<u8>>,
}

impl SubKeyRow {
    /// The row `item` holds; a field of the wrong type is [`CounterStoreError::Malformed`].
    fn read(item: &Item, pk: &str) -> Result<Self, CounterStoreError> {
        crate::ddb::row::from_item(item.clone()).map_err(|e| CounterStoreError::Malformed {
            pk: pk.to_owned(),
            sk: get_s(item, "sk").unwrap_or_default().to_owned(),
            reason: e.to_string(),
        })
    }

    fn malformed(&self, reason: &str) -> CounterStoreError {
        CounterStoreError::Malformed {
            pk: self.pk.clone(),
            sk: self.sk.clone(),
            reason: reason.to_owned(),
        }
    }

    /// The stored total and seq of a writer sub-key.
    fn stored(&self) -> Result<Stored, CounterStoreError> {
        let seq = self
            .seq
            .as_deref()
            .ok_or_else(|| self.malformed("no string `seq`"))?;
        let seq = Seq::parse(seq).map_err(|e| self.malformed(&e.to_string()))?;
        Ok(Stored {
            total: self.total,
            seq,
        })
    }

    /// The time buckets (`bk`, `bl`); a row written before buckets existed has none (low
    /// `u64::MAX`, empty: it claims nothing it does not hold, see [`Partition::knows`]). A
    /// malformed bucket is reported, never read as 0.
    fn buckets(&self) -> Result<Buckets, CounterStoreError> {
        let Some(bk) = &self.bk else {
            // No buckets yet: nothing of any bucket is known to be here, so nothing may be judged.
            return Ok(Buckets::from_parts(u64::MAX, BTreeMap::new()));
        };
        let low = self.bl.ok_or_else(|| self.malformed("`bk` without `bl`"))?;
        let mut map = BTreeMap::new();
        for (start, pair) in bk {
            let start: u64 = start
                .parse()
                .map_err(|_| self.malformed("a `bk` key is not a bucket start"))?;
            map.insert(start, *pair);
        }
        Ok(Buckets::from_parts(low, map))
    }

    /// `buckets` as the row's `bk` and `bl`.
    fn with_buckets(self, buckets: &Buckets) -> Self {
        Self {
            bk: Some(
                buckets
                    .iter()
                    .map(|(start, pair)| (start.to_string(), pair))
                    .collect(),
            ),
            bl: Some(buckets.low()),
            ..self
        }
    }

    /// The row as an item.
    fn item(&self) -> Result<Item, CounterStoreError> {
        crate::ddb::row::to_item(self).map_err(|e| self.malformed(&e.to_string()))
    }
}

/// Errors of the counter store.
#[derive(Debug, thiserror::Error)]
pub enum CounterStoreError {
    /// A counter rule was broken (bad key, bad seq, overflow); the input is at fault.
    #[error(transparent)]
    Counter(#[from] CounterError),
    /// A stored item does not have the shape the store writes (edited by hand?).
    #[error("counter item {pk}/{sk} is malformed: {reason}")]
    Malformed {
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// What is wrong.
        reason: String,
    },
    /// A key's conditional write lost the race [`MAX_ROUNDS`] times in a row; retry the batch.
    #[error("counter {0} kept changing under the flush; retry the batch")]
    Contended(String),
    /// DynamoDB refused the request or could not be reached; retry the batch.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The flush's BatchGetItem failed without a DynamoDB error (keys left unprocessed after
    /// every retry); retry the batch.
    #[error(transparent)]
    Read(ScatterError),
}

impl From<ScatterError> for CounterStoreError {
    fn from(e: ScatterError) -> Self {
        match e {
            ScatterError::Aws(e) => Self::Aws(e),
            other => Self::Read(other),
        }
    }
}

impl CounterStoreError {
    /// The failed DynamoDB call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            Self::Read(e) => e.aws(),
            _ => None,
        }
    }
}

/// What a flush did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlushReport {
    /// Conditional puts that landed.
    pub writes: u64,
    /// Keys whose records were all already applied (a retry or redelivery): no write.
    pub already_applied: u64,
    /// Conditional puts that lost a race and were re-planned.
    pub conflicts: u64,
    /// Records counted by this flush.
    pub counted: u64,
    /// Records skipped as already counted.
    pub skipped: u64,
    /// Duplicate changes dropped by the dedupe window ([`CounterStore::flush_changes`]).
    pub duplicates: u64,
    /// Changes older than the dedupe window, counted anyway (possible double counts).
    pub late: u64,
    /// Largest dedupe window written, in bytes of identities (the dedupe memory of one
    /// writer sub-key).
    pub dedupe_bytes: usize,
    /// Identities the dedupe window's size guard shed to keep `recent` within
    /// [`DedupeWindow::MAX_BYTES`] (a duplicate of one is counted and reported as `late`).
    pub shed: u64,
}

/// The counters table.
#[derive(Debug, Clone)]
pub struct CounterStore {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    buckets: BucketSpec,
    touch_shards: u16,
}

/// Partitions of the `touched` index a bucket's writer sub-keys spread over (the index key is
/// `<name>#<bucket start>#<n>`, see [`touched_key`]): every flush of a bucket writes the same
/// index key otherwise, and an index partition takes 1,000 writes/s like a table's.
pub const TOUCH_SHARDS: u16 = 16;

/// The `touched` index of the counters table: writer sub-keys by their newest time bucket.
pub const TOUCHED_INDEX: &str = "touched";

/// The partition key of counter `name`'s writer watermarks (`#` first, so it is never a counter).
pub fn progress_pk(name: &str) -> String {
    format!("#flushed#{name}")
}

/// The `touched` index key of a writer sub-key of `pk` touched in the bucket starting at
/// `start`, spread over `shards` index partitions: `<name>#<start>#<n>` with
/// `n = stable_hash64(pk) mod shards`, the toolkit's one index-sharding rule
/// ([`CalculatedSuffix`](heatsink_core::keys::CalculatedSuffix), as in
/// [`GsiShard`](heatsink_core::keys::GsiShard); the prefix ends in digits, which a `GsiShard`
/// refuses as ambiguous, so the suffix is joined here). A reader Queries every `n`, so keys
/// written under an older suffix rule are still read.
pub fn touched_key(name: &str, start: u64, pk: &str, shards: u16) -> String {
    let n =
        heatsink_core::keys::CalculatedSuffix::new(shards.clamp(1, heatsink_core::keys::MAX_SALTS))
            .map_or(0, |s| s.suffix(pk.as_bytes()));
    format!("{name}#{start}#{n}")
}

/// The `fix` item with its per-bucket corrections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixItem {
    /// The whole correction (what a read adds).
    pub total: i64,
    /// Per-bucket absolute corrections; their sum is part of `total`.
    pub buckets: Buckets,
    /// Version for conditional writes (`None`: no item, or one written before versions).
    pub version: Option<u64>,
}

/// One counter partition read whole: every writer sub-key's buckets, and the fix.
#[derive(Debug, Clone, Default)]
pub struct Partition {
    /// Writer sub-keys: sort key, total, buckets and their width (`bw`; `None` when absent).
    pub writers: Vec<(String, i64, Buckets, Option<u64>)>,
    /// The `fix` item.
    pub fix: FixItem,
    /// The whole sum.
    pub sum: CounterSum,
}

impl Partition {
    /// `(net, events)` of bucket `start` summed over the writer sub-keys.
    pub fn bucket(&self, start: u64) -> (i64, u64) {
        self.writers.iter().fold((0, 0), |(n, k), (_, _, b, _)| {
            let (bn, bk) = b.get(start);
            (n.saturating_add(bn), k.saturating_add(bk))
        })
    }

    /// True when every writer sub-key and the fix still know bucket `start` completely.
    pub fn knows(&self, start: u64) -> bool {
        self.fix.buckets.knows(start) && self.writers.iter().all(|(_, _, b, _)| b.knows(start))
    }

    /// What a whole-count check ([`judge_whole`]) compares: the total without the fix, the
    /// changes counted in the kept buckets, the writer sub-keys, the newest kept bucket (the
    /// writers' or the fix's).
    pub fn whole_read(&self) -> WholeRead {
        let events = self
            .writers
            .iter()
            .flat_map(|(_, _, b, _)| b.iter())
            .fold(0u64, |sum, (_, (_, e))| sum.saturating_add(e));
        let newest = self
            .writers
            .iter()
            .filter_map(|(_, _, b, _)| b.newest())
            .chain(self.fix.buckets.newest())
            .max();
        WholeRead {
            without_fix: self.sum.without_fix(),
            events,
            writers: self.writers.len(),
            newest,
        }
    }
}

impl CounterStore {
    /// A store on `table` (the schema's `counters` table).
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            // No call waits forever: a client without a bound of its own gets the policy's.
            ddb: crate::timeouts::bounded!(aws_sdk_dynamodb, ddb, crate::timeouts::Timeouts::CALL),
            table: table.into(),
            buckets: BucketSpec::default(),
            touch_shards: TOUCH_SHARDS,
        }
    }

    /// Spreads the `touched` index over `shards` partitions instead of [`TOUCH_SHARDS`] (the
    /// rebuilder reads the same store's setting; a small table or a test needs fewer).
    pub fn with_touch_shards(mut self, shards: u16) -> Self {
        self.touch_shards = shards.clamp(1, heatsink_core::keys::MAX_SALTS);
        self
    }

    /// Partitions of the `touched` index.
    pub fn touch_shards(&self) -> u16 {
        self.touch_shards
    }

    /// Buckets writer sub-keys by `spec` (the rebuilder must use the same width).
    pub fn with_buckets(mut self, spec: BucketSpec) -> Self {
        self.buckets = spec;
        self
    }

    /// The bucket spec flushes use.
    pub fn buckets(&self) -> BucketSpec {
        self.buckets
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &aws_sdk_dynamodb::Client {
        &self.ddb
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The stored `(total, seq)` of `writer`'s sub-key for each of `keys` (strongly consistent).
    pub async fn stored(
        &self,
        writer: &WriterId,
        keys: &[CounterKey],
    ) -> Result<BTreeMap<CounterKey, Stored>, CounterStoreError> {
        Ok(self
            .stored_buckets(writer, keys)
            .await?
            .into_iter()
            .map(|(k, (s, _))| (k, s))
            .collect())
    }

    /// [`CounterStore::stored`] with each sub-key's time buckets.
    async fn stored_buckets(
        &self,
        writer: &WriterId,
        keys: &[CounterKey],
    ) -> Result<BTreeMap<CounterKey, (Stored, Buckets)>, CounterStoreError> {
        let sk = SubKey::Writer(writer.clone()).sort_key();
        let by_pk: HashMap<String, CounterKey> = keys.iter().map(|k| (k.pk(), k.clone())).collect();
        let requests: Vec<Item> = keys
            .iter()
            .map(|k| Item::from([("pk".into(), s(k.pk())), ("sk".into(), s(sk.clone()))]))
            .collect();
        let items =
            batch_get_with(&self.ddb, &self.table, requests, Backoff::default(), true).await?;
        let mut out = BTreeMap::new();
        for item in items {
            let pk = get_s(&item, "pk").unwrap_or_default().to_owned();
            let Some(key) = by_pk.get(&pk) else { continue };
            let row = SubKeyRow::read(&item, &pk)?;
            out.insert(key.clone(), (row.stored()?, row.buckets()?));
        }
        Ok(out)
    }

    /// The stored total and seq of a writer sub-key item.
    fn parse_stored(item: &Item, pk: &str) -> Result<Stored, CounterStoreError> {
        SubKeyRow::read(item, pk)?.stored()
    }

    /// Flushes `deltas` as absolute totals to `writer`'s sub-keys; idempotent under retries.
    pub async fn flush(
        &self,
        writer: &WriterId,
        deltas: &Deltas,
    ) -> Result<FlushReport, CounterStoreError> {
        let mut report = FlushReport::default();
        let mut remaining: Vec<CounterKey> = deltas.iter().map(|(k, _)| k.clone()).collect();
        for _ in 0..MAX_ROUNDS {
            if remaining.is_empty() {
                return Ok(report);
            }
            let full = self.stored_buckets(writer, &remaining).await?;
            let stored: BTreeMap<CounterKey, Stored> = full
                .iter()
                .map(|(k, (s, _))| (k.clone(), s.clone()))
                .collect();
            let mut batch = Deltas::new();
            for key in &remaining {
                if let Some(d) = deltas.get(key) {
                    for (seq, delta) in d.entries() {
                        batch.add_record(key.clone(), seq.clone(), *delta)?;
                    }
                }
            }
            let plan = FlushPlan::new(writer, &batch, &stored)?;
            report.already_applied += plan.already_applied.len() as u64;
            let mut bucketed = Vec::with_capacity(plan.writes.len());
            for w in &plan.writes {
                let timed = deltas.get(&w.key).map(KeyDeltas::timed).unwrap_or(&[]);
                let first = timed.iter().filter_map(|(_, at, _)| *at).min();
                let before = full
                    .get(&w.key)
                    .map(|(_, b)| upgraded(b.clone(), self.buckets, first))
                    .unwrap_or_default();
                bucketed.push(before.advance(w.expected.as_ref(), timed, self.buckets)?);
            }
            let results = futures::future::join_all(
                plan.writes
                    .iter()
                    .zip(&bucketed)
                    .map(|(w, b)| self.put(w, b)),
            )
            .await;
            let mut lost = vec![];
            for (w, r) in plan.writes.iter().zip(results) {
                match r {
                    Ok(true) => {
                        report.writes += 1;
                        if let Some(d) = batch.get(&w.key) {
                            let (c, sk) = count_applied(d.entries(), w);
                            report.counted += c;
                            report.skipped += sk;
                        }
                    }
                    Ok(false) => {
                        report.conflicts += 1;
                        lost.push(w.key.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            remaining = lost;
        }
        match remaining.first() {
            None => Ok(report),
            Some(k) => Err(CounterStoreError::Contended(k.pk())),
        }
    }

    /// Flushes `changes` (per counter key, in shard order) as absolute totals to `writer`'s
    /// sub-keys, dropping duplicate changes through each sub-key's stored dedupe window of
    /// `span_ms` ([`heatsink_core::counter::decide_deduped`]). Idempotent under retries, like
    /// [`CounterStore::flush`]; the window is stored in the item's `recent` attribute.
    pub async fn flush_changes(
        &self,
        writer: &WriterId,
        changes: &BTreeMap<CounterKey, Vec<Change>>,
        span_ms: u64,
    ) -> Result<FlushReport, CounterStoreError> {
        self.flush_changes_after(writer, &[], changes, span_ms)
            .await
    }

    /// [`CounterStore::flush_changes`] for a writer whose shard was split or merged from
    /// `parents`: a sub-key's first flush starts from its parents' stored windows of the same
    /// counter, merged ([`heatsink_core::counter::decide_deduped_seeded`]), so a duplicate that
    /// straddles the reshard (the original counted by a parent, the copy delivered to the
    /// child) is dropped. Costs one more BatchGetItem of the parents' sub-keys for the counters
    /// the writer has not flushed yet.
    pub async fn flush_changes_after(
        &self,
        writer: &WriterId,
        parents: &[WriterId],
        changes: &BTreeMap<CounterKey, Vec<Change>>,
        span_ms: u64,
    ) -> Result<FlushReport, CounterStoreError> {
        let mut report = FlushReport::default();
        let sk = SubKey::Writer(writer.clone()).sort_key();
        let mut remaining: Vec<CounterKey> = changes.keys().cloned().collect();
        let mut seeds: BTreeMap<CounterKey, DedupeWindow> = BTreeMap::new();
        for _ in 0..MAX_ROUNDS {
            if remaining.is_empty() {
                return Ok(report);
            }
            let stored = self.stored_windows(&sk, &remaining, span_ms).await?;
            let first: Vec<CounterKey> = remaining
                .iter()
                .filter(|k| !stored.contains_key(*k) && !seeds.contains_key(*k))
                .cloned()
                .collect();
            for parent in parents {
                if first.is_empty() {
                    break;
                }
                let psk = SubKey::Writer(parent.clone()).sort_key();
                for (key, (_, window, _)) in self.stored_windows(&psk, &first, span_ms).await? {
                    seeds
                        .entry(key)
                        .or_insert_with(|| DedupeWindow::new(span_ms))
                        .merge(&window);
                }
            }
            let mut decisions = vec![];
            for key in &remaining {
                let Some(batch) = changes.get(key) else {
                    continue;
                };
                let current = stored.get(key).map(|(s, w, _)| (s, w));
                let seed = seeds.get(key);
                match decide_deduped_seeded(current, seed, batch, span_ms, DedupeWindow::MAX_BYTES)?
                {
                    Some(d) => {
                        let first = d.counted_events.iter().map(|(at, _)| *at).min();
                        let mut buckets = stored
                            .get(key)
                            .map(|(_, _, b)| upgraded(b.clone(), self.buckets, first))
                            .unwrap_or_default();
                        for (at, delta) in &d.counted_events {
                            buckets.add(self.buckets, *at, *delta)?;
                        }
                        buckets.trim(self.buckets);
                        decisions.push((key.clone(), (d, buckets)));
                    }
                    None => {
                        report.already_applied += 1;
                        report.skipped += batch.len() as u64;
                    }
                }
            }
            let pks: Vec<String> = decisions.iter().map(|(key, _)| key.pk()).collect();
            let results = futures::future::join_all(
                decisions
                    .iter()
                    .zip(&pks)
                    .map(|((_, (d, b)), pk)| self.put_windowed(pk, &sk, d, b)),
            )
            .await;
            let mut lost = vec![];
            for ((key, (d, _)), r) in decisions.iter().zip(results) {
                match r {
                    Ok(true) => {
                        report.writes += 1;
                        report.counted += d.counted;
                        report.skipped += d.skipped;
                        report.duplicates += d.duplicates;
                        report.late += d.late;
                        report.shed += d.shed;
                        if d.shed > 0 {
                            tracing::warn!(
                                counter = %key,
                                writer = writer.as_str(),
                                shed = d.shed,
                                "dedupe window at its size bound: oldest identities shed (a duplicate of one counts as late; the bucket repair corrects it)"
                            );
                        }
                        report.dedupe_bytes = report
                            .dedupe_bytes
                            .max(d.window.len() * DedupeWindow::BYTES_PER_ID);
                    }
                    Ok(false) => {
                        report.conflicts += 1;
                        lost.push(key.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            remaining = lost;
        }
        match remaining.first() {
            None => Ok(report),
            Some(k) => Err(CounterStoreError::Contended(k.pk())),
        }
    }

    /// The stored `(total, seq)` and dedupe window of sub-key `sk` for each of `keys`.
    async fn stored_windows(
        &self,
        sk: &str,
        keys: &[CounterKey],
        span_ms: u64,
    ) -> Result<BTreeMap<CounterKey, (Stored, DedupeWindow, Buckets)>, CounterStoreError> {
        let by_pk: HashMap<String, CounterKey> = keys.iter().map(|k| (k.pk(), k.clone())).collect();
        let requests: Vec<Item> = keys
            .iter()
            .map(|k| Item::from([("pk".into(), s(k.pk())), ("sk".into(), s(sk))]))
            .collect();
        let items =
            batch_get_with(&self.ddb, &self.table, requests, Backoff::default(), true).await?;
        let mut out = BTreeMap::new();
        for item in items {
            let pk = get_s(&item, "pk").unwrap_or_default().to_owned();
            let Some(key) = by_pk.get(&pk) else { continue };
            let row = SubKeyRow::read(&item, &pk)?;
            let window = match &row.recent {
                None => DedupeWindow::new(span_ms),
                Some(bytes) => DedupeWindow::decode(bytes, span_ms)
                    .map_err(|e| row.malformed(&e.to_string()))?,
            };
            out.insert(key.clone(), (row.stored()?, window, row.buckets()?));
        }
        Ok(out)
    }

    async fn put_windowed(
        &self,
        pk: &str,
        sk: &str,
        d: &DedupeDecision,
        buckets: &Buckets,
    ) -> Result<bool, CounterStoreError> {
        let row = SubKeyRow {
            pk: pk.to_owned(),
            sk: sk.to_owned(),
            total: d.total,
            seq: Some(d.seq.as_padded().to_owned()),
            recent: Some(d.window.encode()),
            ..SubKeyRow::default()
        };
        self.put_expecting(self.bucketed_row(row, buckets), d.expected.as_ref())
            .await
    }

    /// One conditional put; `Ok(false)` when the condition failed (someone flushed in between).
    async fn put(&self, w: &FlushWrite, buckets: &Buckets) -> Result<bool, CounterStoreError> {
        let row = SubKeyRow {
            pk: w.pk.clone(),
            sk: w.sk.clone(),
            total: w.total,
            seq: Some(w.seq.as_padded().to_owned()),
            ..SubKeyRow::default()
        };
        self.put_expecting(self.bucketed_row(row, buckets), w.expected.as_ref())
            .await
    }

    /// A writer sub-key's time buckets on its row: `bk` (start → [net, events]), `bl` (lowest
    /// complete bucket), `bw` (width) and the `touched` index key of its newest bucket.
    fn bucketed_row(&self, row: SubKeyRow, buckets: &Buckets) -> SubKeyRow {
        let touched = match (buckets.newest(), CounterKey::parse_pk(&row.pk)) {
            (Some(newest), Ok(key)) => {
                Some(touched_key(key.name(), newest, &row.pk, self.touch_shards))
            }
            _ => None,
        };
        SubKeyRow {
            bw: Some(self.buckets.width_ms()),
            touched,
            ..row.with_buckets(buckets)
        }
    }

    /// Puts `row` on the condition that the item's `seq` is still `expected` (or that the item
    /// does not exist yet); `Ok(false)` when the condition failed (someone flushed in between).
    async fn put_expecting(
        &self,
        row: SubKeyRow,
        expected: Option<&Seq>,
    ) -> Result<bool, CounterStoreError> {
        let unchanged = match expected {
            None => Condition::not_exists("pk"),
            Some(expected) => Condition::eq("seq", s(expected.as_padded())),
        };
        self.put_if(&row, &unchanged).await
    }

    /// Puts `row` if `condition` holds; `Ok(false)` when it did not (nothing written).
    async fn put_if(
        &self,
        row: &SubKeyRow,
        condition: &Condition,
    ) -> Result<bool, CounterStoreError> {
        let req = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(row.item()?))
            .only_if(condition);
        Ok(req.send().await.written("PutItem", &self.table)?)
    }

    /// Reads one counter: one Query of its partition, summing writer, salted and `fix` sub-keys.
    pub async fn read(&self, key: &CounterKey) -> Result<CounterSum, CounterStoreError> {
        let pk = key.pk();
        let items = self.query_partition(&pk).await?;
        let mut pairs: Vec<(String, i64)> = Vec::with_capacity(items.len());
        for i in &items {
            let Some(sk) = get_s(i, "sk") else { continue };
            // A total that is missing or not a number is reported, never read as 0.
            let total = get_n::<i64>(i, "total").ok_or_else(|| CounterStoreError::Malformed {
                pk: pk.clone(),
                sk: sk.to_owned(),
                reason: "no numeric `total`".into(),
            })?;
            pairs.push((sk.to_owned(), total));
        }
        Ok(sum_counter(pairs)?)
    }

    /// Every item of partition `pk` (strongly consistent, every page).
    async fn query_partition(&self, pk: &str) -> Result<Vec<Item>, CounterStoreError> {
        let pages = self
            .ddb
            .query()
            .table_name(&self.table)
            .query_key(&KeyCondition::partition("pk", s(pk)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        crate::ddb::read_all(pages, MAX_PARTITION_ITEMS)
            .await
            .map_err(|e| {
                e.into_error(
                    |e| AwsError::dynamodb("Query", &self.table, e).into(),
                    |bound| CounterStoreError::Malformed {
                        pk: pk.to_owned(),
                        sk: String::new(),
                        reason: format!("the partition holds more than {bound} items"),
                    },
                )
            })
    }

    /// Records that `writer` processed every change it carries created at or before
    /// `flushed_ms` (its flushed watermark for counter `name`); never moves it back. `lag_ms`:
    /// the largest delay from a change's creation to its arrival in the stream the batch saw
    /// (Kinesis Data Streams for DynamoDB's replication lag), recorded with the watermark so
    /// that the repair's gate sees it ([`Progress::gate`]).
    pub async fn record_progress(
        &self,
        name: &str,
        writer: &WriterId,
        flushed_ms: u64,
        lag_ms: Option<u64>,
    ) -> Result<(), CounterStoreError> {
        let update = match lag_ms {
            Some(lag) => Update::new().set("at", n(flushed_ms)).set("lag", n(lag)),
            None => Update::new().set("at", n(flushed_ms)),
        };
        let out = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(progress_pk(name)))
            .key("sk", s(SubKey::Writer(writer.clone()).sort_key()))
            .updating(&update)
            .only_if(&Condition::not_exists("at").or(Condition::lt("at", n(flushed_ms))))
            .send()
            .await;
        if out.written("UpdateItem", &self.table)? {
            return Ok(());
        }
        // The watermark did not advance (late changes arrived): their delay is the news the
        // repair's gate needs, so it is recorded all the same.
        let Some(lag) = lag_ms else { return Ok(()) };
        self.ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(progress_pk(name)))
            .key("sk", s(SubKey::Writer(writer.clone()).sort_key()))
            .updating(&Update::new().set("lag", n(lag)))
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("UpdateItem", &self.table, e))?;
        Ok(())
    }

    /// Marks `writer` retired for counter `name`: its shard is closed and read to its end (its
    /// child shard has delivered), so it holds back no change.
    pub async fn retire(&self, name: &str, writer: &WriterId) -> Result<(), CounterStoreError> {
        self.ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(progress_pk(name)))
            .key("sk", s(SubKey::Writer(writer.clone()).sort_key()))
            .updating(&Update::new().set("retired", flag(true)))
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("UpdateItem", &self.table, e))?;
        Ok(())
    }

    /// Every writer watermark of counter `name` (one strongly consistent Query).
    pub async fn progress(&self, name: &str) -> Result<Vec<Watermark>, CounterStoreError> {
        let pk = progress_pk(name);
        let mut out = vec![];
        for item in self.query_partition(&pk).await? {
            let sk = get_s(&item, "sk").unwrap_or_default().to_owned();
            let malformed = |reason: &str| CounterStoreError::Malformed {
                pk: pk.clone(),
                sk: sk.clone(),
                reason: reason.to_owned(),
            };
            let writer = match SubKey::parse(&sk) {
                Ok(SubKey::Writer(w)) => w,
                _ => return Err(malformed("not a writer sort key")),
            };
            let retired = get_flag(&item, "retired") == Some(true);
            let flushed_ms = match item.get("at") {
                None if retired => 0,
                None => return Err(malformed("no `at`")),
                Some(v) => v
                    .as_n()
                    .ok()
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| malformed("`at` is not a whole number"))?,
            };
            let lag_ms = match item.get("lag") {
                None => None,
                Some(v) => Some(
                    v.as_n()
                        .ok()
                        .and_then(|n| n.parse::<u64>().ok())
                        .ok_or_else(|| malformed("`lag` is not a whole number"))?,
                ),
            };
            out.push(Watermark {
                writer,
                flushed_ms,
                retired,
                lag_ms,
            });
        }
        Ok(out)
    }

    /// Reads one counter partition whole (one strongly consistent Query): the writer
    /// sub-keys with their time buckets, the `fix` with its per-bucket corrections, the sum.
    pub async fn read_partition(&self, key: &CounterKey) -> Result<Partition, CounterStoreError> {
        let pk = key.pk();
        let items = self.query_partition(&pk).await?;
        let mut part = Partition {
            fix: FixItem {
                buckets: Buckets::from_parts(0, BTreeMap::new()),
                ..FixItem::default()
            },
            ..Partition::default()
        };
        let mut pairs = Vec::with_capacity(items.len());
        for i in &items {
            let Some(sk) = get_s(i, "sk") else { continue };
            let total = get_n::<i64>(i, "total").ok_or_else(|| CounterStoreError::Malformed {
                pk: pk.clone(),
                sk: sk.to_owned(),
                reason: "no numeric `total`".into(),
            })?;
            pairs.push((sk.to_owned(), total));
            match SubKey::parse(sk)? {
                SubKey::Writer(_) => {
                    let row = SubKeyRow::read(i, &pk)?;
                    part.writers
                        .push((sk.to_owned(), total, row.buckets()?, row.bw));
                }
                SubKey::Fix => {
                    let row = SubKeyRow::read(i, &pk)?;
                    let buckets = match row.bk {
                        // A fix without buckets (an old whole-counter fix): it may already cover
                        // any bucket's drift, so none below its `bl` may be judged again.
                        None => Buckets::from_parts(row.bl.unwrap_or(u64::MAX), BTreeMap::new()),
                        Some(_) => row.buckets()?,
                    };
                    part.fix = FixItem {
                        total,
                        buckets,
                        version: row.ver,
                    };
                }
                SubKey::Salt(_) | SubKey::Settled => {}
            }
        }
        part.sum = sum_counter(pairs)?;
        Ok(part)
    }

    /// Sets bucket `start`'s correction in the `fix` item to `fix_b` (absolute), adjusting the
    /// fix total by the difference, on condition that the fix item is still `current` (its
    /// version). `Ok(false)`: another rebuild changed it in between (re-read and judge again).
    pub async fn set_bucket_fix(
        &self,
        key: &CounterKey,
        current: &FixItem,
        start: u64,
        fix_b: i64,
    ) -> Result<bool, CounterStoreError> {
        let mut buckets = current.buckets.clone();
        let old = buckets.set(start, fix_b).ok_or(CounterError::Overflow)?;
        buckets.trim(self.buckets);
        let total = current
            .total
            .checked_sub(old)
            .and_then(|t| t.checked_add(fix_b))
            .ok_or(CounterError::Overflow)?;
        self.put_fix(key, current, total, &buckets).await
    }

    /// Writes the `fix` item of `key` as `total` with `buckets`, one version past `current`,
    /// on condition that the stored one is still `current` (its version). `Ok(false)`: another
    /// rebuild changed it in between.
    async fn put_fix(
        &self,
        key: &CounterKey,
        current: &FixItem,
        total: i64,
        buckets: &Buckets,
    ) -> Result<bool, CounterStoreError> {
        let row = SubKeyRow {
            pk: key.pk(),
            sk: SubKey::Fix.sort_key(),
            total,
            ver: Some(current.version.unwrap_or(0).saturating_add(1)),
            ..SubKeyRow::default()
        }
        .with_buckets(buckets);
        let unchanged = match current.version {
            None => Condition::not_exists("ver"),
            Some(v) => Condition::eq("ver", n(v)),
        };
        self.put_if(&row, &unchanged).await
    }

    /// Sets the whole `fix` to `fix` (absolute) after a whole-count check at `cutoff`
    /// ([`judge_whole`]): no per-bucket corrections, none judged below `cutoff` again (the
    /// fix's `low`), on condition that the fix item is still `current` (its version).
    /// `Ok(false)`: another rebuild changed it in between (judge again later).
    pub async fn set_whole_fix(
        &self,
        key: &CounterKey,
        current: &FixItem,
        cutoff: u64,
        fix: i64,
    ) -> Result<bool, CounterStoreError> {
        let buckets = Buckets::from_parts(cutoff, BTreeMap::new());
        self.put_fix(key, current, fix, &buckets).await
    }

    /// Adds `delta` to a salted sub-key with `ADD` (the salted strategy; at-least-once).
    pub async fn add_salted(
        &self,
        key: &CounterKey,
        salt: u32,
        delta: i64,
    ) -> Result<(), CounterStoreError> {
        self.ddb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(key.pk()))
            .key("sk", s(SubKey::Salt(salt).sort_key()))
            .updating(&Update::new().add("total", n(delta)))
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("UpdateItem", &self.table, e))?;
        Ok(())
    }

    /// [`CounterStore::correct`], only if the counter's total without `fix` is still
    /// `expected_without_fix`; `None` (nothing written) if it moved.
    pub async fn correct_if_unmoved(
        &self,
        key: &CounterKey,
        true_count: i64,
        expected_without_fix: i64,
    ) -> Result<Option<Correction>, CounterStoreError> {
        let sum = self.read(key).await?;
        if sum.without_fix() != expected_without_fix {
            return Ok(None);
        }
        self.write_fix(key, &sum, true_count).await.map(Some)
    }

    /// Sets the correction so that a read equals `true_count`; returns what changed.
    pub async fn correct(
        &self,
        key: &CounterKey,
        true_count: i64,
    ) -> Result<Correction, CounterStoreError> {
        let sum = self.read(key).await?;
        self.write_fix(key, &sum, true_count).await
    }

    /// Writes the `fix` that makes `sum` read as `true_count`, if it differs from the stored one.
    async fn write_fix(
        &self,
        key: &CounterKey,
        sum: &CounterSum,
        true_count: i64,
    ) -> Result<Correction, CounterStoreError> {
        let fix = correction(true_count, sum.without_fix(), sum.fix())?;
        if fix.change != 0 {
            let row = SubKeyRow {
                pk: key.pk(),
                sk: SubKey::Fix.sort_key(),
                total: fix.fix,
                // A whole-counter fix covers every bucket up to now: bucket repair may judge
                // only buckets that start after it (see `read_partition`).
                bl: Some(
                    self.buckets
                        .end_of(self.buckets.start_of(crate::clock::now_ms())),
                ),
                ..SubKeyRow::default()
            };
            self.ddb
                .put_item()
                .table_name(&self.table)
                .set_item(Some(row.item()?))
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("PutItem", &self.table, e))?;
        }
        Ok(fix)
    }
}

/// A writer sub-key written before time buckets existed (low `u64::MAX`) starts its buckets
/// after the bucket of the first event this flush counts: that bucket's earlier events are in
/// `total` only, so it is never claimed complete.
fn upgraded(buckets: Buckets, spec: BucketSpec, first_event: Option<u64>) -> Buckets {
    if buckets.low() != u64::MAX {
        return buckets;
    }
    let low = first_event.map_or(u64::MAX, |at| spec.end_of(spec.start_of(at)));
    Buckets::from_parts(low, BTreeMap::new())
}

/// Records of `entries` a landed write counted and skipped (those above its expected seq).
fn count_applied(entries: &[(Seq, i64)], w: &FlushWrite) -> (u64, u64) {
    let mut counted = 0;
    let mut skipped = 0;
    for (seq, _) in entries {
        if w.expected.as_ref().is_some_and(|e| seq <= e) {
            skipped += 1;
        } else {
            counted += 1;
        }
    }
    (counted, skipped)
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    use aws_sdk_dynamodb::error::SdkError;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::testing::mocked;

    /// A table of one writer sub-key behind mocked BatchGetItem and PutItem: a put lands only
    /// if its condition holds on the stored item, as DynamoDB decides ([`crate::ddb::eval`]).
    /// Right after the first read, another flush of the same writer (a redelivery reaching
    /// seq 12) lands, as a racing Lambda invocation would.
    #[tokio::test]
    async fn smithy_mock_a_flush_that_loses_a_race_re_reads_and_never_overwrites_the_winner() {
        use std::sync::{Arc, Mutex};

        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
        use aws_smithy_mocks::MockResponse;

        let key = CounterKey::new("likes", "p9").expect("key");
        let writer = WriterId::new("shardId-1").expect("writer");
        let sub_key = |total: i64, seq: u64| {
            Item::from([
                ("pk".to_owned(), s(key.pk())),
                (
                    "sk".to_owned(),
                    s(SubKey::Writer(writer.clone()).sort_key()),
                ),
                ("total".to_owned(), n(total)),
                ("seq".to_owned(), s(Seq::from(seq).as_padded())),
            ])
        };
        let stored = Arc::new(Mutex::new(sub_key(5, 10)));
        let winner = sub_key(7, 12);
        let reads = Arc::new(Mutex::new(0));
        let get = {
            let (stored, reads) = (stored.clone(), reads.clone());
            mock!(aws_sdk_dynamodb::Client::batch_get_item).then_compute_output(move |_| {
                let item = stored.lock().expect("lock").clone();
                let mut reads = reads.lock().expect("lock");
                *reads += 1;
                if *reads == 1 {
                    *stored.lock().expect("lock") = winner.clone();
                }
                BatchGetItemOutput::builder()
                    .responses("t-counters", vec![item])
                    .build()
            })
        };
        let put = {
            let stored = stored.clone();
            mock!(aws_sdk_dynamodb::Client::put_item).then_compute_response(move |r| {
                let mut stored = stored.lock().expect("lock");
                let holds = crate::ddb::eval::holds(
                    r.condition_expression().unwrap_or_default(),
                    &r.expression_attribute_names().cloned().unwrap_or_default(),
                    &r.expression_attribute_values().cloned().unwrap_or_default(),
                    Some(&stored),
                );
                if holds {
                    *stored = r.item().cloned().unwrap_or_default();
                    MockResponse::Output(PutItemOutput::builder().build())
                } else {
                    MockResponse::Error(PutItemError::ConditionalCheckFailedException(
                        ConditionalCheckFailedException::builder()
                            .meta(crate::testing::error_meta(
                                "ConditionalCheckFailedException",
                            ))
                            .build(),
                    ))
                }
            })
        };
        let ddb = mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled());
            get, put);
        let mut batch = Deltas::new();
        batch
            .add_record(key.clone(), Seq::from(11), 1)
            .expect("delta");
        let report = CounterStore::new(ddb, "t-counters")
            .flush(&writer, &batch)
            .await
            .expect("flush");
        assert_eq!(
            (report.conflicts, report.already_applied),
            (1, 1),
            "{report:?}"
        );
        let stored = stored.lock().expect("lock");
        assert_eq!(
            get_n::<i64>(&stored, "total"),
            Some(7),
            "the winner's total stays"
        );
        assert_eq!(get_s(&stored, "seq"), Some(Seq::from(12).as_padded()));
    }

    async fn add_salted_failing_with(err: fn() -> UpdateItemError) -> CounterStoreError {
        let update = mock!(aws_sdk_dynamodb::Client::update_item).then_error(err);
        let ddb =
            mocked!(aws_sdk_dynamodb with |c| c.retry_config(RetryConfig::disabled()); update);
        let key = CounterKey::new("likes", "p9").expect("valid key");
        CounterStore::new(ddb, "t-counters")
            .add_salted(&key, 3, 1)
            .await
            .expect_err("mocked to fail")
    }

    use crate::testing::error_meta as meta;

    #[tokio::test]
    async fn a_failed_update_reaches_the_sdk_error_through_the_store_error() {
        let err = add_salted_failing_with(|| {
            UpdateItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(meta("ProvisionedThroughputExceededException"))
                    .build(),
            )
        })
        .await;
        assert!(matches!(err, CounterStoreError::Aws(_)), "{err:?}");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        assert_eq!(
            (aws.operation(), aws.resource()),
            ("UpdateItem", "t-counters")
        );
        let sdk = in_chain::<SdkError<UpdateItemError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(UpdateItemError::is_provisioned_throughput_exceeded_exception)
        );

        let err = add_salted_failing_with(|| {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta("ConditionalCheckFailedException"))
                    .build(),
            )
        })
        .await;
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_conditional_check_failed());
        assert!(!aws.is_throttling());
    }
}
