//! The pre-aggregated strategy: likes made durable in `liked`, its change stream re-cut by the
//! stream shaper (`--source`, `--stream-shards`, `--reshard-at`), delivered by the local
//! event-source mapping to the aggregator (`--chaos`, `--park`), then one rebuilder pass.
//!
//! **`--park P`.** A seeded share `P` of the stream's batches fails every delivery
//! ([`ParkPolicy`]): the local mapping gives up after [`esm::MAX_ATTEMPTS`] and sends the
//! batch's on-failure record (shard, first and last sequence numbers) to its destination, as
//! Lambda does once `MaximumRetryAttempts` are spent. Each parked batch is redriven with the
//! toolkit's own path, as the count-rebuilder does: [`Redrive::redrive`] reads the range back
//! from the shaped stream and saves its (post, bucket) checks with [`Repair::request`]; repair
//! runs then judge them (a trickle of likes on a post of its own keeps the stream's watermarks
//! moving, as production's traffic does) until every post's count equals its acknowledged likes.
//! The shaper serves the DynamoDB Streams API only, so in the Kinesis shape the parked batch is
//! read back through it: the same shard and sequence range on the same model, read by the
//! redrive's DynamoDB Streams reader instead of its Kinesis one (whose record decoding this
//! demo therefore does not exercise).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::counter::redrive::Redrive;
use heatsink::counter::repair::{GsiRecount, Repair, RepairOptions};
use heatsink::counter::{BucketSpec, CounterStore, FlushReport, ParkedBatch, ParkedSource};
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::mapper::{COUNTER, LikeMapper};
use heatsink_photo_app::rebuild::{RebuildOptions, rebuild};
use heatsink_photo_app::schema::Table;
use heatsink_photo_app::{Aggregator, LikeOutcome, LikesApi, aggregator};
use heatsink_sim::esm::{self, Batch, EsmReport, OnFailure, ParkPolicy};
use heatsink_sim::front::{ShapedListing, StreamShaper};
use heatsink_sim::load::LoadReport;
use heatsink_sim::shape::{ShapeConfig, SourceKind};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::Serialize;

use super::{Chaos, Outcome, Run, TableLoad, post_of, steady, trace};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const STRATEGY: &str = "pre-aggregated";

/// Longest wait, after the load, for the repair to make every post exact with parked batches.
const SETTLE_DEADLINE: Duration = Duration::from_secs(240);

/// Likes acknowledged during the load, shared with each like's task.
#[derive(Debug, Default)]
struct Tally {
    p9_sent: AtomicU64,
    p9_acked: AtomicU64,
    all_acked: AtomicU64,
    /// Acknowledged likes per post: each post's truth.
    by_post: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn acked(&self, post: &str) {
        self.all_acked.fetch_add(1, Ordering::Relaxed);
        if post.ends_with("-p9") {
            self.p9_acked.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut m) = self.by_post.lock() {
            *m.entry(post.to_owned()).or_default() += 1;
        }
    }
}

/// What `--reshard-at` and `--park` did (in the pre-aggregated outcome's JSON).
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Reshape {
    /// Times the shaped stream split every open shard in two (`--reshard-at`).
    reshards: u64,
    /// Shards closed by those splits (each with two children).
    split_shards: u64,
    /// Open shards when the run ended.
    open_shards: usize,
    /// Batches the local mapping parked after failing every delivery (`--park`).
    parked_batches: u64,
    /// Records in them (retries excluded).
    parked_records: u64,
    /// Of them, parked after every post was exact (trickle likes only): not redriven by the
    /// demo, which stops there; the rebuilder pass counts them.
    parked_after_exact: u64,
    /// Parked batches the demo took from the destination (to redrive).
    #[serde(skip)]
    parked_taken: u64,
    /// Parked batches read back and their checks saved for the repair.
    redriven_batches: u64,
    /// Parked batches whose redrive did not save, with the reason (the run then is not exact).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_redriven: Vec<String>,
    /// (post, bucket) checks the redrives saved.
    redrive_checks: u64,
    /// Repair runs after the load.
    repair_runs: u64,
    /// The last repair run's reason for judging nothing, if it was blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    repair_blocked: Option<String>,
    /// Checks the last repair run left because progress was not proven past them.
    repair_lagging: u64,
    /// What the repair runs corrected, post → likes.
    repair_corrected: BTreeMap<String, i64>,
    /// Likes on the trickle post that kept the watermarks moving after the load.
    trickle_likes: u64,
    /// Whether every post's count equalled its acknowledged likes before the final rebuilder
    /// pass (None: no `--park`, nothing waited for).
    exact_by_repair: Option<bool>,
    /// Seconds from the first parked batch to every post exact (the repair's doing).
    first_park_to_exact_s: Option<f64>,
    /// Seconds from the last parked batch to every post exact.
    last_park_to_exact_s: Option<f64>,
}

impl Reshape {
    /// False only when `--park` ran and its redrive and repair did not make every post exact.
    pub(super) fn repaired(&self) -> bool {
        self.exact_by_repair != Some(false)
    }

    /// A `--park` run whose repair did not make every post exact (for tests).
    #[cfg(test)]
    pub(super) fn not_repaired() -> Self {
        Self {
            exact_by_repair: Some(false),
            ..Self::default()
        }
    }
}

impl std::fmt::Display for Reshape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} reshards ({} shards split, {} open at the end); {} batches parked ({} records), {} redriven ({} checks saved), {} repair runs corrected {:?}",
            self.reshards,
            self.split_shards,
            self.open_shards,
            self.parked_batches,
            self.parked_records,
            self.redriven_batches,
            self.redrive_checks,
            self.repair_runs,
            self.repair_corrected,
        )?;
        match (
            self.exact_by_repair,
            self.first_park_to_exact_s,
            self.last_park_to_exact_s,
        ) {
            (Some(true), Some(first), Some(last)) => write!(
                f,
                "; every post exact {first:.1} s after the first parked batch, {last:.1} s after the last"
            ),
            (Some(true), ..) => f.write_str("; every post exact"),
            (Some(false), ..) => write!(
                f,
                "; NOT exact by the repair (kept: {:?}, last run blocked: {:?}, lagging: {})",
                self.not_redriven, self.repair_blocked, self.repair_lagging
            ),
            (None, ..) => Ok(()),
        }
    }
}

/// A parked batch as the shaper serves it: its shard and range on the table stream `arn`
/// through the DynamoDB Streams API (the shaper serves no Kinesis API; see the module docs).
fn through_shaper(batch: ParkedBatch, arn: &str) -> ParkedBatch {
    ParkedBatch {
        source: ParkedSource::DynamoDbStreams,
        stream_arn: arn.to_owned(),
        ..batch
    }
}

/// The pre-aggregated run's moving parts, shared by its phases.
struct Pre {
    /// The shaper (stopped when the last holder, this or the aggregator's lineage, drops it).
    shaper: Arc<StreamShaper>,
    /// Its shards, as the aggregator and the repair list them.
    listing: Arc<ShapedListing>,
    arn: String,
    agg: Aggregator,
    streams: aws_sdk_dynamodbstreams::Client,
    api: Arc<LikesApi>,
    tally: Arc<Tally>,
    /// The load has ended.
    loaded: AtomicBool,
    /// The load has ended and the parked batches are settled: the mapping may drain and stop.
    settled: AtomicBool,
    destination: OnFailure,
    faults: Mutex<BTreeMap<&'static str, u64>>,
}

impl Run<'_> {
    pub(super) async fn pre_aggregated(&self, chaos: Chaos) -> Result<Outcome, BoxError> {
        self.sim.reset();
        self.seed_posts().await?;
        let pre = self.start_pre(chaos).await?;
        let start = Instant::now();
        let hot = format!("likes#{}-{STRATEGY}-p9", self.tag);
        let hot_keys = [hot.clone()];
        let counters = self.counters();
        let (report, (delivered, reshape), samples) = tokio::join!(
            self.load_likes(&pre),
            async { tokio::join!(self.consume(&pre, chaos), self.settle_parked(&pre, start)) },
            trace(
                self.sim,
                &counters,
                &hot_keys,
                &pre.tally.p9_acked,
                &pre.settled,
                start
            )
        );
        let mut reshape = reshape?;
        self.finish_reshape(&pre, &delivered, &mut reshape);
        let faults = self.fault_counts(&pre, &delivered);
        let mut out = self.pre_outcome(&pre, &report, hot, &hot_keys).await?;
        out.faults = Some(faults);
        out.reshape =
            (self.args.reshard_at.is_some() || self.args.park.is_some()).then_some(reshape);
        out.steady = steady(&samples, self.esm.window, report.elapsed.as_secs_f64());
        out.trace = samples;
        Ok(out)
    }

    /// The 16 posts (and the trickle post `--park` likes after the load).
    async fn seed_posts(&self) -> Result<(), BoxError> {
        let names = (0..16)
            .map(|n| format!("p{n}"))
            .chain(self.args.park.map(|_| "tick".to_owned()));
        for name in names {
            self.direct
                .put_item()
                .table_name(self.schema.table_name(Table::Posts))
                .item(
                    "post",
                    AttributeValue::S(format!("{}-{STRATEGY}-{name}", self.tag)),
                )
                .send()
                .await?;
        }
        Ok(())
    }

    /// The stream as production shapes it: the deployed shard count, rollovers or duplicates,
    /// a reshard at `--reshard-at`.
    fn shape(&self, chaos: Chaos) -> ShapeConfig {
        let mut shape = ShapeConfig::new(self.esm.source, self.esm.shards);
        match self.esm.source {
            SourceKind::DynamoDbStreams => {
                shape.rollover = Some(Duration::from_secs(self.args.rollover));
            }
            SourceKind::Kinesis => {
                shape.duplicates = self.args.duplicates;
                shape.reorder = 8;
            }
        }
        shape.seed = chaos.seed;
        shape.split_at = self.args.reshard_at.map(Duration::from_secs);
        shape
    }

    /// Starts the shaper on `liked`'s stream and the aggregator reading through it.
    async fn start_pre(&self, chaos: Chaos) -> Result<Pre, BoxError> {
        let liked = self.schema.table_name(Table::Liked);
        let arn = self
            .direct
            .describe_table()
            .table_name(&liked)
            .send()
            .await?
            .table
            .and_then(|t| t.latest_stream_arn)
            .ok_or("the liked table has no stream: run `heatsink local bootstrap`")?;
        let shaper =
            Arc::new(StreamShaper::start(&self.streams_upstream, self.shape(chaos)).await?);
        let listing = Arc::new(ShapedListing::new(shaper.clone(), &arn));
        let streams = aws_sdk_dynamodbstreams::Client::from_conf(
            aws_sdk_dynamodbstreams::config::Builder::from(&self.config)
                .endpoint_url(shaper.endpoint())
                .build(),
        );
        let agg = aggregator(
            CounterStore::new(self.via_sim.clone(), self.counters()),
            Some(streams.clone()),
        )
        .with_table(&liked)
        .with_lineage(listing.clone());
        // Skip whatever earlier runs left in the stream: only this run's likes are shaped.
        shaper.watch_from_now(&arn).await?;
        let faults = [
            "lost_ack",
            "dup_batch",
            "crash",
            "batches",
            "deduped",
            "late",
            "park_failures",
        ];
        Ok(Pre {
            shaper,
            listing,
            arn,
            agg,
            streams,
            api: Arc::new(LikesApi::new(self.via_sim.clone(), self.schema)),
            tally: Arc::new(Tally::default()),
            loaded: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            destination: OnFailure::new(),
            faults: Mutex::new(faults.into_iter().map(|k| (k, 0)).collect()),
        })
    }

    /// The open-loop likes through the likes API; marks the load ended (and, without `--park`,
    /// settled).
    async fn load_likes(&self, pre: &Pre) -> LoadReport {
        let (tag, args) = (&self.tag, self.args);
        let phase = heatsink_cli::cmd::progress::Phase::start(STRATEGY, self.total(), "likes sent");
        let report = self
            .load()
            .run(
                |i| {
                    let post = post_of(tag, STRATEGY, i, args.baseline, args.rate);
                    let user = format!("{tag}-u{i}");
                    if post.ends_with("-p9") {
                        pre.tally.p9_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    let (api, tally) = (pre.api.clone(), pre.tally.clone());
                    async move {
                        let r = api.like(&user, &post).await;
                        if matches!(r, Ok(LikeOutcome::Liked)) {
                            tally.acked(&post);
                        }
                        r
                    }
                },
                |sent| phase.set(sent),
            )
            .await;
        phase.finish();
        pre.loaded.store(true, Ordering::Relaxed);
        if self.args.park.is_none() {
            pre.settled.store(true, Ordering::Relaxed);
        }
        report
    }

    /// The local event-source mapping delivering the shaped stream to the aggregator, with the
    /// chaos faults and `--park`'s always-failing batches, until the run is settled.
    async fn consume(&self, pre: &Pre, chaos: Chaos) -> EsmReport {
        let mut rng = StdRng::seed_from_u64(chaos.seed);
        let park = ParkPolicy {
            fraction: self.args.park.unwrap_or(0.0),
            seed: chaos.seed,
        };
        let (source, agg, faults) = (self.esm.source, &pre.agg, &pre.faults);
        esm::run_to(
            &pre.shaper,
            &pre.arn,
            self.esm,
            &pre.destination,
            |batch: Batch| {
                let (crash, lost, dup) = (
                    rng.random_bool(chaos.crash),
                    rng.random_bool(chaos.lost_ack),
                    rng.random_bool(chaos.dup_batch),
                );
                let first = batch.seqs.first().cloned().unwrap_or_default();
                let parks = park.fails(&batch.shard, &first);
                async move {
                    if parks {
                        // Fails before counting anything, on every delivery: parked in the end.
                        add(faults, "park_failures", 1);
                        return Some(first);
                    }
                    deliver(agg, source, batch, faults, (crash, lost, dup)).await
                }
            },
            || pre.settled.load(Ordering::Relaxed),
        )
        .await
    }

    /// With `--park`: redrives each parked batch as it arrives and, once the load has ended,
    /// runs the repair (while trickle likes keep the stream's watermarks moving) until every
    /// post is exact or [`SETTLE_DEADLINE`] passes; then marks the run settled.
    async fn settle_parked(&self, pre: &Pre, start: Instant) -> Result<Reshape, BoxError> {
        let mut out = Reshape::default();
        if self.args.park.is_none() {
            return Ok(out);
        }
        let result = self.settle_loop(pre, start, &mut out).await;
        pre.settled.store(true, Ordering::Relaxed);
        result.map(|()| out)
    }

    async fn settle_loop(
        &self,
        pre: &Pre,
        start: Instant,
        out: &mut Reshape,
    ) -> Result<(), BoxError> {
        let counting = Counting::likes(self.schema);
        let recount: GsiRecount = counting.bucket_recount(&self.direct);
        let counters = CounterStore::new(self.direct.clone(), self.counters());
        let repair =
            Repair::new(&counters, COUNTER, &recount, repair_options()).with_lineage(&*pre.listing);
        let redrive = Redrive::new(&LikeMapper, COUNTER, BucketSpec::default())
            .with_streams(pre.streams.clone())
            .deadline(Duration::from_secs(5));
        let (mut pending, mut parked_at) = (Vec::<ParkedBatch>::new(), Vec::<Instant>::new());
        let mut loaded_at: Option<Instant> = None;
        loop {
            for batch in pre.destination.take() {
                parked_at.push(Instant::now());
                out.parked_taken += 1;
                pending.push(through_shaper(batch, &pre.arn));
            }
            pending = redrive_pending(&redrive, &repair, pending, out).await?;
            if !pre.loaded.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let since_load = *loaded_at.get_or_insert_with(Instant::now);
            out.trickle_likes += self.trickle(pre, out.trickle_likes).await;
            let report = repair.run().await?;
            out.repair_runs += 1;
            out.repair_blocked = report.blocked.map(|b| b.detail);
            out.repair_lagging = report.lagging;
            for (post, n) in report.corrected {
                *out.repair_corrected.entry(post).or_default() += n;
            }
            // Exact means every acknowledged like is counted: no batch of the load is still
            // failing its deliveries, and every parked one was redriven and repaired.
            if pending.is_empty() && self.all_exact(pre).await? {
                let now = Instant::now();
                out.exact_by_repair = Some(true);
                out.first_park_to_exact_s = parked_at.first().map(|t| (now - *t).as_secs_f64());
                out.last_park_to_exact_s = parked_at.last().map(|t| (now - *t).as_secs_f64());
                return Ok(());
            }
            if since_load.elapsed() > SETTLE_DEADLINE {
                out.exact_by_repair = Some(false);
                out.not_redriven = pending
                    .iter()
                    .map(|b| {
                        format!(
                            "{} {}..{}",
                            b.shard_id,
                            b.start_seq.to_decimal(),
                            b.end_seq.to_decimal()
                        )
                    })
                    .collect();
                eprintln!(
                    "  parked batches: not exact {:.0} s after the load (started {:.0} s ago); the rebuilder pass follows",
                    SETTLE_DEADLINE.as_secs_f64(),
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Ten likes on the trickle post (users numbered from `from`): the stream keeps flowing
    /// after the load, so every shard's watermark moves past the parked batches' buckets.
    async fn trickle(&self, pre: &Pre, from: u64) -> u64 {
        let post = format!("{}-{STRATEGY}-tick", self.tag);
        let mut liked = 0;
        for i in from..from.saturating_add(10) {
            let user = format!("{}-t{i}", self.tag);
            if matches!(pre.api.like(&user, &post).await, Ok(LikeOutcome::Liked)) {
                liked += 1;
            }
        }
        liked
    }

    /// Whether every loaded post's count equals its acknowledged likes.
    async fn all_exact(&self, pre: &Pre) -> Result<bool, BoxError> {
        let truth = pre
            .tally
            .by_post
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        for (post, acked) in truth {
            let count = pre.api.count(&post).await?;
            if u64::try_from(count).ok() != Some(acked) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn finish_reshape(&self, pre: &Pre, delivered: &EsmReport, out: &mut Reshape) {
        if let Some(shaped) = pre.shaper.stats(&pre.arn) {
            out.reshards = shaped.splits;
            out.split_shards = shaped.split_shards;
        }
        out.open_shards = pre
            .shaper
            .with_stream(&pre.arn, |s| s.open_shards())
            .unwrap_or(0);
        out.parked_batches = delivered.parked_batches;
        if self.args.park.is_some() {
            out.parked_after_exact = delivered.parked_batches.saturating_sub(out.parked_taken);
        }
        out.parked_records = delivered.parked;
    }

    fn fault_counts(&self, pre: &Pre, delivered: &EsmReport) -> BTreeMap<&'static str, u64> {
        let mut faults = pre.faults.lock().map(|f| f.clone()).unwrap_or_default();
        faults.insert("parked", delivered.parked);
        if let Some(shaped) = pre.shaper.stats(&pre.arn) {
            faults.insert("stream_duplicates", shaped.duplicates);
            faults.insert("stream_reordered", shaped.reordered);
            faults.insert("stream_rollovers", shaped.rollovers);
            faults.insert("stream_splits", shaped.splits);
        }
        faults
    }

    /// One rebuilder pass over the drained stream, then p9's count and the outcome.
    async fn pre_outcome(
        &self,
        pre: &Pre,
        report: &LoadReport,
        hot: String,
        hot_keys: &[String],
    ) -> Result<Outcome, BoxError> {
        // The load is over and the stream drained: every like has been flushed or lost for good,
        // so no quiet period is needed to tell the two apart.
        let settled = RebuildOptions {
            quiet: Duration::ZERO,
        };
        let rebuilt = rebuild(&self.direct, self.schema, settled).await?;
        eprintln!(
            "  rebuilder: {} durable likes scanned, {} counters corrected",
            rebuilt.events_scanned,
            rebuilt.corrected.len()
        );
        let count = pre
            .api
            .count(&format!("{}-{STRATEGY}-p9", self.tag))
            .await?;
        let p9_acked = pre.tally.p9_acked.load(Ordering::Relaxed);
        let mut out = self.outcome(
            STRATEGY,
            report,
            pre.tally.p9_sent.load(Ordering::Relaxed),
            p9_acked,
            pre.tally.all_acked.load(Ordering::Relaxed),
            count,
            hot.clone(),
            hot_keys,
        );
        if let Some(stats) = &out.stats {
            let liked = self.schema.table_name(Table::Liked);
            out.liked = Some(TableLoad {
                writes: stats.table_writes(&liked),
                throttled: stats.table_throttled(&liked),
                max_partition_utilisation: stats.max_utilisation(&liked),
            });
        }
        out.rebuild_corrected = Some(rebuilt.corrected);
        if self.esm.source == SourceKind::Kinesis {
            out.dedupe = Some(self.dedupe_memory(&hot, report, p9_acked).await?);
        }
        Ok(out)
    }
}

/// Redrives each pending parked batch ([`Redrive::redrive`]: read back, checks saved with
/// [`Repair::request`]); returns those not saved (`unfinished`, `busy`) for the next round.
async fn redrive_pending(
    redrive: &Redrive<'_, LikeMapper>,
    repair: &Repair<'_, GsiRecount>,
    pending: Vec<ParkedBatch>,
    out: &mut Reshape,
) -> Result<Vec<ParkedBatch>, BoxError> {
    let mut kept = vec![];
    for batch in pending {
        let source = format!("{}:{}", batch.shard_id, batch.start_seq.to_decimal());
        let record = batch.to_record().to_string();
        let row = redrive.redrive(source, record.as_bytes(), repair).await?;
        if row.saved() {
            out.redriven_batches += 1;
            out.redrive_checks += row.checks as u64;
        } else {
            kept.push(batch);
        }
    }
    Ok(kept)
}

/// The repair the demo runs after the load: the deployed rule (insert-only `liked`), a short
/// settle (the local API writes within milliseconds of stamping `liked_at`), its cursor
/// starting three buckets back.
fn repair_options() -> RepairOptions {
    let buckets = BucketSpec::default();
    RepairOptions {
        buckets,
        start_at: Some(heatsink::clock::now_ms().saturating_sub(3 * buckets.width_ms())),
        settle: Duration::from_secs(1),
        skew: Duration::from_millis(100),
        lease: Duration::from_secs(30),
        holder: "heatsink-demo".into(),
        insert_only: true,
        max_wait: Duration::from_secs(3),
        poll: Duration::from_millis(100),
        ..RepairOptions::default()
    }
}

fn add(faults: &Mutex<BTreeMap<&'static str, u64>>, k: &'static str, n: u64) {
    if let Ok(mut f) = faults.lock() {
        *f.entry(k).or_default() += n;
    }
}

/// One batch to the aggregator as Lambda delivers it under `--chaos`: a crash after half of it
/// was flushed, a lost acknowledgement (delivered again), a duplicate delivery. Returns the
/// failed record's id, if any.
async fn deliver(
    agg: &Aggregator,
    source: SourceKind,
    batch: Batch,
    faults: &Mutex<BTreeMap<&'static str, u64>>,
    (crash, lost, dup): (bool, bool, bool),
) -> Option<String> {
    // Changes the dedupe window dropped, and changes counted although older than it (possible
    // double counts the rebuilder repairs).
    let flushed = |f: &FlushReport| {
        add(faults, "deduped", f.duplicates);
        add(faults, "late", f.late);
    };
    add(faults, "batches", 1);
    if crash && batch.seqs.len() > 1 {
        // A crash part-way: the first half was flushed, then the process died; Lambda
        // redelivers the whole batch.
        add(faults, "crash", 1);
        let mut half = batch.event.clone();
        if let Some(records) = half["Records"].as_array_mut() {
            let keep = records.len() / 2;
            records.truncate(keep);
        }
        flushed(&invoke(agg, source, half).await.1);
    }
    let (answer, report) = invoke(agg, source, batch.event.clone()).await;
    flushed(&report);
    if lost {
        // The flush landed but its response was lost: Lambda retries the batch.
        add(faults, "lost_ack", 1);
        flushed(&invoke(agg, source, batch.event.clone()).await.1);
    }
    if dup {
        add(faults, "dup_batch", 1);
        flushed(&invoke(agg, source, batch.event).await.1);
    }
    answer
}

/// One aggregator invocation as Lambda makes it: the failed record's id, if any, and what the
/// invocation's flush did.
async fn invoke(
    agg: &Aggregator,
    source: SourceKind,
    event: serde_json::Value,
) -> (Option<String>, FlushReport) {
    match source {
        SourceKind::DynamoDbStreams => match serde_json::from_value(event) {
            Ok(event) => {
                let (resp, report) = agg.handle_dynamodb(event).await;
                let failed = resp.batch_item_failures.first();
                (failed.and_then(|f| f.item_identifier.clone()), report.flush)
            }
            Err(_) => (None, FlushReport::default()),
        },
        SourceKind::Kinesis => match serde_json::from_value(event) {
            Ok(event) => {
                let (resp, report) = agg.handle_kinesis(event).await;
                let failed = resp.batch_item_failures.first();
                (failed.and_then(|f| f.item_identifier.clone()), report.flush)
            }
            Err(_) => (None, FlushReport::default()),
        },
    }
}

#[cfg(test)]
mod tests {
    use heatsink::counter::Seq;

    use super::*;

    #[test]
    fn a_kinesis_parked_batch_is_read_back_through_the_shapers_streams_api() {
        let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/p-liked/stream/2026";
        let kinesis = esm::parked_batch(
            SourceKind::Kinesis,
            arn,
            "shardId-000000000003",
            &[
                "100000000000000000007".into(),
                "100000000000000000021".into(),
            ],
        )
        .expect("parked");
        let read = through_shaper(kinesis.clone(), arn);
        assert_eq!(read.source, ParkedSource::DynamoDbStreams);
        assert_eq!(read.stream_arn, arn);
        // The same shard and range: only the API it is read through differs.
        assert_eq!(
            (
                &read.shard_id,
                &read.start_seq,
                &read.end_seq,
                read.batch_size
            ),
            (
                &kinesis.shard_id,
                &Seq::parse("100000000000000000007").expect("seq"),
                &kinesis.end_seq,
                2
            )
        );
        // And its on-failure record is one the redrive reads.
        let again = ParkedBatch::parse(read.to_record().to_string().as_bytes()).expect("record");
        assert_eq!(again, read);
    }

    #[test]
    fn the_tally_keeps_each_posts_truth() {
        let t = Tally::default();
        for post in [
            "t-pre-aggregated-p9",
            "t-pre-aggregated-p9",
            "t-pre-aggregated-p1",
        ] {
            t.acked(post);
        }
        assert_eq!(t.p9_acked.load(Ordering::Relaxed), 2);
        assert_eq!(t.all_acked.load(Ordering::Relaxed), 3);
        let by_post = t.by_post.lock().expect("lock").clone();
        assert_eq!(by_post["t-pre-aggregated-p1"], 1);
    }
}
