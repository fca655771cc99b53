//! `heatsink-demo`: the celebrity post (docs/hot-keys.md) on the local stack, through the partition simulator.
//!
//! Sixteen posts take a baseline of likes while p9 takes `--rate` likes/s for `--duration`.
//! The same load runs three ways, side by side:
//! - **naive**: one `UpdateItem ADD` per like on the post's single counter item;
//! - **salted**: one `ADD` per like on one of p9's S = 8 sub-keys (`likes#p9#0..7`, round-robin);
//! - **pre-aggregated**: each like is made durable in `liked` by the likes API, the aggregator
//!   reads `liked`'s change stream in batches and flushes absolute totals conditionally, and
//!   one rebuilder pass repairs whatever a fault lost.
//!
//! It prints likes sent, counter write requests, the busiest partition's utilisation, throttles
//! and the final count against the truth. `--chaos` injects aggregator faults (lost acks,
//! duplicate batches, crashes before a flush); `--reshard-at` splits every stream shard in two
//! mid-run; `--park` makes a share of the stream's batches fail until the local event-source
//! mapping parks them, then redrives them through the toolkit's redrive and repair (see
//! `likes/pre.rs`); `--plot` draws per-partition utilisation (SVG or PNG, by the file's extension).
//! A pre-aggregated count that differs from the truth fails the run (exit 1).

mod pre;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use heatsink::keys::SaltedKey;
use heatsink::schema::{self, DEFAULT_PREFIX};
use heatsink_photo_app::schema::{Schema, Table};
use heatsink_sim::esm::EsmSettings;
use heatsink_sim::load::{LoadReport, OpenLoop};
use heatsink_sim::shape::SourceKind;
use heatsink_sim::{SimConfig, Simulator, Stats, partition_of};
use serde::Serialize;

use heatsink_cli::cmd::{CmdResult, sdk_config};

/// Arguments of `heatsink-demo`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DemoArgs {
    /// Another scene instead of the hot-key one (`move`: the live move of p9's slot).
    #[command(subcommand)]
    scene: Option<DemoScene>,
    /// Resource name prefix (the tables `heatsink local bootstrap` created).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Likes per second on the celebrity post p9 (default 2,400, as in docs/hot-keys.md; up to 10,000).
    #[arg(long, default_value_t = 2400, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: u32,
    /// Baseline likes per second on each of the other 15 posts (0–10,000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    baseline: u32,
    /// Seconds of load per strategy (1–3,600).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    duration: u64,
    /// Partitions the simulator gives each table (1–1,000).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    partitions: u32,
    /// Sub-keys of p9 for the salted strategy (8 fits 2,400 likes/s with headroom, see docs/write-sharding.md; 2–256).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=256))]
    salts: u16,
    /// Most likes in flight; beyond it the load generator sheds likes and reports how many
    /// (each in-flight like holds one HTTP connection to the simulator; 1–65,536).
    #[arg(long, default_value_t = 512,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    max_in_flight: usize,
    /// Scale rates and partition ceilings by s and the batching window by 1/s (0.1 = p9 at
    /// 240/s against 100 WCU/s partitions, the deployed 3 s window as 30 s): each batch then
    /// holds as many likes as at full scale, so the per-1,000 figures equal full scale's, at a
    /// speed a local emulator sustains (0.01–1). The steady-state figure needs a --duration of
    /// at least 2.5 scaled windows; 11.5 give it 10 windows, where one window's jitter is 10 %.
    #[arg(long, default_value_t = 1.0, value_parser = heatsink_cli::cmd::scale)]
    scale: f64,
    /// The pre-aggregated strategy's stream shape: `kinesis` (Kinesis Data Streams for
    /// DynamoDB, the deployed default) or `dynamodb-streams`.
    #[arg(long, default_value = heatsink_photo_app::esm::SOURCE)]
    source: SourceKind,
    /// Stream shards the simulator presents (default: the deployed like-events shard count; 1–64).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    stream_shards: Option<u32>,
    /// Kinesis shape: share of changes delivered a second time, under a new sequence number (0–1).
    #[arg(long, default_value_t = 0.01, value_parser = probability)]
    duplicates: f64,
    /// DynamoDB Streams shape: seconds between a shard's rollovers (1–86,400).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    rollover: u64,
    /// Faults for the pre-aggregated run: `lost-ack=P,dup-batch=P,crash=P,seed=N`.
    #[arg(long)]
    chaos: Option<String>,
    /// Pre-aggregated: split every stream shard in two this many seconds after the stream
    /// shaper starts (just before the load); each closes and two children name it as parent
    /// (0–3,600).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3_600))]
    reshard_at: Option<u64>,
    /// Pre-aggregated: share of stream batches (seeded by --chaos seed) that fail every delivery
    /// until the local event-source mapping parks them; each is then redriven (read back, its
    /// checks saved for the repair) and repaired, and the time to exact counts reported (0–1).
    #[arg(long, value_parser = probability)]
    park: Option<f64>,
    /// Print a machine-readable summary instead of the table.
    #[arg(long)]
    json: bool,
    /// Write a chart of per-partition write utilisation over time: SVG or PNG, by the file's
    /// extension (`.svg`, `.png`).
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{text} is not a probability in [0, 1]")),
    }
}

/// Fault probabilities for the aggregator.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Chaos {
    lost_ack: f64,
    dup_batch: f64,
    crash: f64,
    seed: u64,
}

fn parse_chaos(text: &str) -> Result<Chaos, String> {
    let mut chaos = Chaos::default();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--chaos: `{part}` is not key=value"))?;
        let p = || -> Result<f64, String> {
            let p: f64 = v
                .parse()
                .map_err(|_| format!("--chaos: {k}={v} is not a number"))?;
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(format!("--chaos: {k}={v} is not a probability in [0, 1]"))
            }
        };
        match k {
            "lost-ack" => chaos.lost_ack = p()?,
            "dup-batch" => chaos.dup_batch = p()?,
            "crash" => chaos.crash = p()?,
            "seed" => chaos.seed = v.parse().map_err(|_| format!("--chaos: seed={v}"))?,
            other => return Err(format!("--chaos: unknown fault `{other}`")),
        }
    }
    Ok(chaos)
}

/// Writes, throttles and the busiest partition of one table.
#[derive(Debug, Clone, Serialize)]
struct TableLoad {
    writes: u64,
    throttled: u64,
    max_partition_utilisation: f64,
}

/// One strategy's results.
#[derive(Debug, Clone, Serialize)]
struct Outcome {
    strategy: &'static str,
    /// The hot counter's partition key (salted: the base of its sub-keys).
    hot_key: String,
    /// Write requests on the counters table whose partition key is the hot counter's (salted:
    /// any of its sub-keys), counted per key by the partition simulator.
    hot_key_writes: u64,
    /// `hot_key_writes` per 1,000 acknowledged p9 likes, over the whole run (the final flush
    /// after the load stops included).
    hot_writes_per_1000: f64,
    /// The steady-state figure: hot-key writes per 1,000 p9 likes acknowledged over whole
    /// batching windows after the first one and a half (see [`steady`]); `None` when the load
    /// ran shorter than 2.5 windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    steady: Option<Steady>,
    /// p9 likes acknowledged.
    hot_likes_acked: u64,
    /// p9 likes the schedule offered (`--rate` x `--duration`).
    hot_likes_offered: u64,
    /// p9 likes sent (offered minus those shed at the in-flight cap).
    hot_likes_sent: u64,
    /// Likes of every post sent (p9 and the 15 baseline posts).
    likes_sent: u64,
    /// Likes of every post acknowledged.
    likes_acked: u64,
    /// Likes of every post never started because the in-flight cap was reached.
    shed: u64,
    /// Seconds from the first like sent to the last answer.
    load_seconds: f64,
    count_read: i64,
    truth: i64,
    /// Write requests admitted on the counters table.
    partition_writes: u64,
    /// Counter write requests per 1,000 likes sent (all posts).
    writes_per_1k_likes: f64,
    /// Counter write requests per second of load (`--duration`).
    writes_per_s: f64,
    throttled: u64,
    /// Throttled requests on the counters table.
    counter_throttled: u64,
    max_partition_utilisation: f64,
    /// Salted only: how many of p9's sub-keys hash to each counters partition (the key names
    /// carry the run's tag, so placement, and with it the busiest partition, changes per run).
    #[serde(skip_serializing_if = "Option::is_none")]
    salt_placement: Option<Vec<u32>>,
    /// Pre-aggregated, Kinesis shape only: the dedupe window stored with each of the hot
    /// counter's writer sub-keys when the run ended, read back from the counters table.
    #[serde(skip_serializing_if = "Option::is_none")]
    dedupe: Option<DedupeMemory>,
    /// Pre-aggregated only: the durable like writes on `liked` (spread by user).
    #[serde(skip_serializing_if = "Option::is_none")]
    liked: Option<TableLoad>,
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<BTreeMap<&'static str, u64>>,
    /// Pre-aggregated only: what the rebuilder pass after the drained load changed, post →
    /// drift (new `fix` minus old). Empty when every counter matched its durable likes.
    #[serde(skip_serializing_if = "Option::is_none")]
    rebuild_corrected: Option<BTreeMap<String, i64>>,
    /// Pre-aggregated with `--reshard-at` or `--park`: what they did.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    reshape: Option<pre::Reshape>,
    #[serde(skip)]
    stats: Option<Stats>,
    /// Hot-key writes over time (the plot's first series).
    #[serde(skip)]
    trace: Vec<Sample>,
}

/// The dedupe memory the aggregator keeps per shard, measured on the stored items.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct DedupeMemory {
    /// Bytes of the `recent` attribute per writer sub-key (one per stream shard), largest first.
    bytes_per_shard: Vec<usize>,
    /// Bytes of the largest writer item (all attributes' names and values).
    max_item_bytes: usize,
    /// The dedupe window the aggregator keeps, seconds of `ApproximateCreationDateTime`.
    window_s: f64,
    /// Acknowledged hot likes per second per shard in this run (the window holds about this x
    /// `window_s` changes).
    hot_per_shard_per_s: f64,
}

/// Bytes DynamoDB counts for an attribute value (strings and binaries by length, numbers by
/// digits, nested values summed): enough for a size estimate, not a billing figure.
fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(l) | AttributeValue::Ns(l) => l.iter().map(String::len).sum(),
        AttributeValue::L(l) => l.iter().map(value_bytes).sum(),
        AttributeValue::M(m) => m.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
        _ => 1,
    }
}

/// The hot key's writes and the acknowledged p9 likes at one moment of a strategy's load.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    /// Seconds since the load started.
    at: f64,
    /// Write requests on the hot key so far.
    writes: u64,
    /// p9 likes acknowledged so far.
    acked: u64,
}

/// Hot-key writes per 1,000 hot likes in the steady state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct Steady {
    /// `writes` per 1,000 of `acked`.
    hot_writes_per_1000: f64,
    /// Hot-key writes in the interval.
    writes: u64,
    /// p9 likes acknowledged in the interval.
    acked: u64,
    /// Whole batching windows the interval spans.
    windows: u64,
    /// Its length, seconds.
    seconds: f64,
}

/// The steady-state figure of a trace: from 1.5 windows after the load started (the first
/// batches have closed; half a window away from their flushes) over as many whole windows as
/// fit before the load stopped, so the first and the final flushes (after the load, when the
/// mapping drains the stream) are outside it. Each shard flushes a hot counter once per window
/// while its batches close on the window, so the interval holds the same number of flushes per
/// shard as windows, and dividing by the hot likes acknowledged in it gives the per-1,000 figure
/// the deployed stack sustains. `None` when fewer than 2.5 windows of load ran.
fn steady(trace: &[Sample], window: Duration, load_seconds: f64) -> Option<Steady> {
    let w = window.as_secs_f64().max(1e-3);
    let from = 1.5 * w;
    let windows = ((load_seconds - from) / w).floor();
    if !windows.is_finite() || windows < 1.0 {
        return None;
    }
    let to = from + windows * w;
    let at = |t: f64| trace.iter().rev().find(|s| s.at <= t).copied();
    let (a, b) = (at(from)?, at(to)?);
    let writes = b.writes.saturating_sub(a.writes);
    let acked = b.acked.saturating_sub(a.acked);
    Some(Steady {
        hot_writes_per_1000: if acked == 0 {
            0.0
        } else {
            writes as f64 * 1000.0 / acked as f64
        },
        writes,
        acked,
        windows: windows as u64,
        seconds: b.at - a.at,
    })
}

/// Samples the hot key's writes (`keys` on `table`, as the simulator counts them) and the
/// acknowledged p9 likes every 250 ms until `stop`, then once more.
async fn trace(
    sim: &Simulator,
    table: &str,
    keys: &[String],
    acked: &AtomicU64,
    stop: &AtomicBool,
    start: std::time::Instant,
) -> Vec<Sample> {
    let mut out = Vec::new();
    loop {
        let finished = stop.load(Ordering::Relaxed);
        let stats = sim.stats();
        out.push(Sample {
            at: start.elapsed().as_secs_f64(),
            writes: keys.iter().map(|k| stats.key_writes(table, k)).sum(),
            acked: acked.load(Ordering::Relaxed),
        });
        if finished {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

struct Run<'a> {
    args: &'a DemoArgs,
    sim: &'a Simulator,
    via_sim: aws_sdk_dynamodb::Client,
    direct: aws_sdk_dynamodb::Client,
    config: aws_config::SdkConfig,
    streams_upstream: String,
    esm: EsmSettings,
    schema: &'a Schema,
    tag: String,
}

fn post_of(tag: &str, strategy: &str, i: u64, baseline: u32, rate: u32) -> String {
    // Of every (rate + 15 × baseline) likes, `rate` go to p9 and `baseline` to each other post,
    // interleaved as real traffic is: like i takes slot (i × stride) mod cycle, a permutation of
    // each cycle because the stride (about cycle / golden ratio) is coprime to it. In blocks (all
    // of p9's likes, then the others') most stream batches would touch p9 alone, which flatters
    // the pre-aggregated strategy's writes per batch.
    let cycle = u64::from(rate) + 15 * u64::from(baseline);
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut stride = (cycle * 618 / 1000).max(1);
    while gcd(stride, cycle) != 1 {
        stride += 1;
    }
    let slot = (i % cycle) * stride % cycle;
    let n = if slot < u64::from(rate) {
        9
    } else {
        let other = (slot - u64::from(rate)) / u64::from(baseline.max(1));
        if other >= 9 { other + 1 } else { other }
    };
    format!("{tag}-{strategy}-p{n}")
}

impl Run<'_> {
    /// The open-loop schedule, shedding (and counting) likes beyond `--max-in-flight`.
    fn load(&self) -> OpenLoop {
        let rate = self.args.rate + 15 * self.args.baseline;
        let mut load = OpenLoop::new(rate, Duration::from_secs(self.args.duration));
        load.max_in_flight = self.args.max_in_flight.max(1);
        load
    }

    fn total(&self) -> u64 {
        u64::from(self.args.rate + 15 * self.args.baseline) * self.args.duration
    }

    fn counters(&self) -> String {
        self.schema.table_name(Table::Counters)
    }

    #[allow(clippy::too_many_arguments)]
    fn outcome(
        &self,
        strategy: &'static str,
        load: &LoadReport,
        sent: u64,
        acked: u64,
        all_acked: u64,
        count: i64,
        hot_key: String,
        hot_keys: &[String],
    ) -> Outcome {
        let stats = self.sim.stats();
        let table = self.counters();
        let writes = stats.table_writes(&table);
        let hot_key_writes: u64 = hot_keys.iter().map(|k| stats.key_writes(&table, k)).sum();
        Outcome {
            strategy,
            hot_key,
            hot_key_writes,
            hot_writes_per_1000: if acked == 0 {
                0.0
            } else {
                hot_key_writes as f64 * 1000.0 / acked as f64
            },
            hot_likes_acked: acked,
            steady: None,
            hot_likes_offered: u64::from(self.args.rate) * self.args.duration,
            hot_likes_sent: sent,
            likes_sent: load.sent,
            likes_acked: all_acked,
            shed: load.shed,
            load_seconds: load.elapsed.as_secs_f64(),
            count_read: count,
            truth: acked as i64,
            partition_writes: writes,
            writes_per_1k_likes: if load.sent == 0 {
                0.0
            } else {
                writes as f64 * 1000.0 / load.sent as f64
            },
            writes_per_s: writes as f64 / self.args.duration.max(1) as f64,
            throttled: stats.throttled(),
            counter_throttled: stats.table_throttled(&table),
            max_partition_utilisation: stats.max_utilisation(&table),
            salt_placement: None,
            dedupe: None,
            liked: None,
            faults: None,
            rebuild_corrected: None,
            reshape: None,
            stats: Some(stats),
            trace: Vec::new(),
        }
    }

    async fn additive(
        &self,
        strategy: &'static str,
        salts: u16,
    ) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
        self.sim.reset();
        let (tag, args, table) = (&self.tag, self.args, self.counters());
        let ddb = &self.via_sim;
        let phase = heatsink_cli::cmd::progress::Phase::start(strategy, self.total(), "likes sent");
        let (p9_sent, p9_acked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let all_acked = Arc::new(AtomicU64::new(0));
        // p9's counter: its one item, or its salted sub-keys.
        let p9 = format!("{strategy}#{tag}-{strategy}-p9");
        let keys: Vec<String> = if salts > 1 {
            SaltedKey::new(p9.clone(), salts)?.sub_keys()
        } else {
            vec![p9]
        };
        let stop = AtomicBool::new(false);
        let start = std::time::Instant::now();
        let load = async {
            let report = self
                .load()
                .run(
                    |i| {
                        let post = post_of(tag, strategy, i, args.baseline, args.rate);
                        let is_p9 = post.ends_with("-p9");
                        let acked = p9_acked.clone();
                        let all = all_acked.clone();
                        if is_p9 {
                            p9_sent.fetch_add(1, Ordering::Relaxed);
                        }
                        // Their own counter names: the rebuilder owns `likes#…` and would "correct" these.
                        let pk = if post.ends_with("-p9") && salts > 1 {
                            let salted = SaltedKey::new(format!("{strategy}#{post}"), salts);
                            salted
                                .and_then(|s| s.sub_key((i % u64::from(salts)) as u16))
                                .unwrap_or_default()
                        } else {
                            format!("{strategy}#{post}")
                        };
                        let update = ddb
                            .update_item()
                            .table_name(&table)
                            .key("pk", AttributeValue::S(pk))
                            .key("sk", AttributeValue::S("total".into()))
                            .update_expression("ADD #t :one")
                            .expression_attribute_names("#t", "total")
                            .expression_attribute_values(":one", AttributeValue::N("1".into()))
                            .send();
                        async move {
                            let r = update.await;
                            if r.is_ok() {
                                all.fetch_add(1, Ordering::Relaxed);
                                if is_p9 {
                                    acked.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            r
                        }
                    },
                    |sent| phase.set(sent),
                )
                .await;
            stop.store(true, Ordering::Relaxed);
            report
        };
        let (report, samples) = tokio::join!(
            load,
            trace(self.sim, &table, &keys, &p9_acked, &stop, start)
        );
        phase.finish();
        // The count of p9: its one item, or the sum of its salted sub-keys.
        let mut count = 0i64;
        for pk in keys.clone() {
            let item = self
                .direct
                .get_item()
                .table_name(&table)
                .key("pk", AttributeValue::S(pk))
                .key("sk", AttributeValue::S("total".into()))
                .consistent_read(true)
                .send()
                .await?
                .item;
            count += item
                .and_then(|i| {
                    i.get("total")
                        .and_then(|v| v.as_n().ok())
                        .and_then(|n| n.parse().ok())
                })
                .unwrap_or(0);
        }
        let mut out = self.outcome(
            strategy,
            &report,
            p9_sent.load(Ordering::Relaxed),
            p9_acked.load(Ordering::Relaxed),
            all_acked.load(Ordering::Relaxed),
            count,
            format!("{strategy}#{tag}-{strategy}-p9"),
            &keys,
        );
        if salts > 1 {
            let parts = self.args.partitions.max(1);
            let mut placement = vec![0u32; parts as usize];
            for k in SaltedKey::new(format!("{strategy}#{tag}-{strategy}-p9"), salts)?.sub_keys() {
                placement[partition_of(k.as_bytes(), parts) as usize] += 1;
            }
            out.salt_placement = Some(placement);
        }
        out.steady = steady(&samples, self.esm.window, report.elapsed.as_secs_f64());
        out.trace = samples;
        Ok(out)
    }
}

impl Run<'_> {
    /// Reads back the hot counter's writer sub-keys and measures their stored dedupe windows.
    async fn dedupe_memory(
        &self,
        hot: &str,
        load: &LoadReport,
        hot_acked: u64,
    ) -> Result<DedupeMemory, Box<dyn std::error::Error + Send + Sync>> {
        let items = self
            .direct
            .query()
            .table_name(self.counters())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(hot.to_owned()))
            .consistent_read(true)
            .send()
            .await?
            .items
            .unwrap_or_default();
        let mut bytes_per_shard: Vec<usize> = items
            .iter()
            .filter_map(|i| i.get("recent").map(value_bytes))
            .collect();
        bytes_per_shard.sort_unstable_by(|a, b| b.cmp(a));
        let max_item_bytes = items
            .iter()
            .map(|i| i.iter().map(|(k, v)| k.len() + value_bytes(v)).sum())
            .max()
            .unwrap_or(0);
        let seconds = load.elapsed.as_secs_f64().max(1e-3);
        Ok(DedupeMemory {
            bytes_per_shard,
            max_item_bytes,
            window_s: heatsink::counter::aggregate::DEDUPE_WINDOW.as_secs_f64(),
            hot_per_shard_per_s: hot_acked as f64 / seconds / f64::from(self.esm.shards.max(1)),
        })
    }
}

/// The other scenes of `heatsink-demo`.
#[derive(Debug, clap::Subcommand)]
pub enum DemoScene {
    /// Move p9's slot to a table of its own while p9 takes likes and caption edits; prints the
    /// writers' pause, the stale routers bounced, the writes acknowledged and lost, the diff.
    Move(crate::moves::MoveDemoArgs),
    /// A key turns hot under writers that follow the hot-key directory; the controller salts
    /// it from DynamoDB's throttle reasons alone (sampler off), then from the sampler; prints
    /// when each path named the key, wrote the directory and saw the first salted write.
    Detect(crate::detect::DetectDemoArgs),
}

/// Runs the scenario.
pub async fn run(args: DemoArgs) -> CmdResult {
    let mut args = args;
    match args.scene.take() {
        Some(DemoScene::Move(a)) => return crate::moves::move_demo(a).await,
        Some(DemoScene::Detect(a)) => return crate::detect::detect_demo(a).await,
        None => {}
    }
    let full = scale_args(&mut args)?;
    let chaos = match &args.chaos {
        Some(text) => parse_chaos(text)?,
        None => Chaos::default(),
    };
    if let Some(path) = &args.plot {
        // Refuse a bad --plot before minutes of load, not after.
        crate::chart::Format::of(path)?;
    }
    let stack = Stack::start(&args).await?;
    let run = stack.run(&args)?;
    if !args.json {
        print_intro(&args, &run.esm, full);
    }
    let outcomes = run_strategies(&run, &stack.config, chaos).await?;
    if let Some(path) = &args.plot {
        let panels = chart_panels(
            &outcomes,
            &stack.schema.table_name(Table::Counters),
            1000.0 * args.scale,
        );
        crate::chart::write(path, &panels)?;
        eprintln!("wrote {}", path.display());
    }
    if args.json {
        print_json(&args, &run.esm, full, chaos, &outcomes)?;
    } else {
        print_table(&outcomes);
        print_notes(&args, &run.esm, &outcomes);
    }
    stack.sim.stop();
    check_exact(&outcomes)
}

/// Scales `--rate` and `--baseline` by `--scale`; returns the unscaled (full-size) pair.
fn scale_args(args: &mut DemoArgs) -> Result<(u32, u32), Box<dyn std::error::Error + Send + Sync>> {
    if !(0.01..=1.0).contains(&args.scale) {
        return Err(format!("--scale {} is outside 0.01..=1", args.scale).into());
    }
    let full = (args.rate, args.baseline);
    args.rate = ((f64::from(args.rate) * args.scale).round() as u32).max(1);
    args.baseline = ((f64::from(args.baseline) * args.scale).round() as u32).max(1);
    Ok(full)
}

/// The local stack the scenario runs on: its tables and the partition simulator in front.
struct Stack {
    config: aws_config::SdkConfig,
    upstream: String,
    direct: aws_sdk_dynamodb::Client,
    via_sim: aws_sdk_dynamodb::Client,
    schema: Schema,
    sim: Simulator,
}

impl Stack {
    /// Checks the tables and starts the simulator (ceilings scaled by `--scale`).
    async fn start(args: &DemoArgs) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").map_err(|_| {
            "the demo runs on the local stack: eval \"$(localstack/stack env)\" first (make demo does)"
        })?;
        let config = sdk_config().await;
        let direct = aws_sdk_dynamodb::Client::new(&config);
        let schema = Schema::new(args.prefix.clone());
        for table in [Table::Liked, Table::Counters, Table::Posts] {
            schema::ensure_table(&direct, &schema.table(table))
                .await
                .map_err(|e| heatsink_cli::cmd::local::schema_failure(&config, &e))?;
        }
        let mut sim_config = SimConfig::new(&upstream);
        sim_config.limits.partitions = args.partitions;
        sim_config.limits.write_ceiling *= args.scale;
        sim_config.limits.read_ceiling *= args.scale;
        let sim = Simulator::start(sim_config).await.map_err(|e| {
            heatsink_cli::cmd::fail::Failure::new(format!(
                "cannot start the partition simulator in front of {upstream}: {}: check AWS_ENDPOINT_URL_DYNAMODB",
                heatsink_cli::cmd::fail::chain(&e)
            ))
        })?;
        let via_sim = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&config)
                .endpoint_url(sim.endpoint())
                .build(),
        );
        Ok(Self {
            config,
            upstream,
            direct,
            via_sim,
            schema,
            sim,
        })
    }

    /// The strategies' shared setup: the deployed event-source mapping (its window scaled by
    /// 1/s, so a batch holds as many likes as at full scale) and this run's tag.
    fn run<'a>(
        &'a self,
        args: &'a DemoArgs,
    ) -> Result<Run<'a>, Box<dyn std::error::Error + Send + Sync>> {
        let deployed = heatsink_photo_app::esm::deployed(&self.schema);
        let esm = EsmSettings {
            source: args.source,
            batch_size: deployed.batch_size,
            window: deployed.window.div_f64(args.scale),
            shards: args.stream_shards.unwrap_or(deployed.shards),
        };
        let tag = format!(
            "d{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs()
        );
        Ok(Run {
            args,
            sim: &self.sim,
            via_sim: self.via_sim.clone(),
            direct: self.direct.clone(),
            config: self.config.clone(),
            streams_upstream: std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
                .unwrap_or_else(|_| self.upstream.clone()),
            esm,
            schema: &self.schema,
            tag,
        })
    }
}

/// What the run is about to do, on stderr.
fn print_intro(args: &DemoArgs, esm: &EsmSettings, (full_rate, full_baseline): (u32, u32)) {
    eprintln!(
        "celebrity post p9 at {} likes/s, 15 other posts at {}/s each, {} s per strategy, through the simulator ({} partitions x {:.0} WCU/s)",
        args.rate,
        args.baseline,
        args.duration,
        args.partitions,
        1000.0 * args.scale
    );
    eprintln!(
        "pre-aggregated reads the {} shape as the stack deploys it (infra/esm.json): {} shards, batches of up to {} records or {:.1} s",
        match esm.source {
            SourceKind::Kinesis => "Kinesis Data Streams for DynamoDB",
            SourceKind::DynamoDbStreams => "DynamoDB Streams",
        },
        esm.shards,
        esm.batch_size,
        esm.window.as_secs_f64()
    );
    if let Some(at) = args.reshard_at {
        eprintln!("pre-aggregated: every stream shard splits in two {at} s in");
    }
    if let Some(p) = args.park {
        eprintln!(
            "pre-aggregated: {:.1} % of stream batches fail until parked, then are redriven and repaired",
            p * 100.0
        );
    }
    if args.scale < 1.0 {
        eprintln!(
            "(scaled {}: the full-size scenario's {full_rate} likes/s and {full_baseline}/s against 1,000 WCU/s partitions, same ratios)",
            args.scale
        );
    }
}

/// The three strategies, one after another; a failure as one line naming the tables, the local
/// stack's endpoint and a next step.
async fn run_strategies(
    run: &Run<'_>,
    config: &aws_config::SdkConfig,
    chaos: Chaos,
) -> Result<Vec<Outcome>, heatsink_cli::cmd::fail::Failure> {
    let failed = |strategy: &str, e: Box<dyn std::error::Error + Send + Sync>| {
        let tables = format!(
            "{}, {} and {}",
            run.schema.table_name(Table::Liked),
            run.schema.table_name(Table::Counters),
            run.schema.table_name(Table::Posts)
        );
        heatsink_cli::cmd::fail::Target::new(
            config,
            heatsink_cli::cmd::fail::Service::DynamoDb,
            "tables",
            tables,
        )
        .fail(&format!("run the {strategy} strategy on"), &*e)
    };
    Ok(vec![
        run.additive("naive", 1)
            .await
            .map_err(|e| failed("naive", e))?,
        run.additive("salted", run.args.salts)
            .await
            .map_err(|e| failed("salted", e))?,
        run.pre_aggregated(chaos)
            .await
            .map_err(|e| failed("pre-aggregated", e))?,
    ])
}

/// `--json`: the machine-readable summary on stdout.
fn print_json(
    args: &DemoArgs,
    esm: &EsmSettings,
    (full_rate, _): (u32, u32),
    chaos: Chaos,
    outcomes: &[Outcome],
) -> Result<(), serde_json::Error> {
    let by_name: BTreeMap<&str, &Outcome> = outcomes.iter().map(|o| (o.strategy, o)).collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "rate": args.rate, "full_scale_rate": full_rate, "scale": args.scale, "duration_s": args.duration, "partitions": args.partitions,
            "esm": {"source": esm.source, "batch_size": esm.batch_size, "window_s": esm.window.as_secs_f64(), "shards": esm.shards},
            "salts": args.salts, "chaos": chaos, "reshard_at_s": args.reshard_at, "park": args.park,
            "strategies": by_name,
        }))?
    );
    Ok(())
}

/// The strategies side by side.
fn print_table(outcomes: &[Outcome]) {
    use heatsink_cli::cmd::table::{Align, Grid};
    let mut grid = Grid::new(&[
        ("strategy", Align::Left),
        ("hot-key writes", Align::Right),
        ("per 1k p9 likes", Align::Right),
        ("steady per 1k", Align::Right),
        ("p9 likes acked", Align::Right),
        ("counter writes", Align::Right),
        ("writes/1k", Align::Right),
        ("writes/s", Align::Right),
        ("max partition util.", Align::Right),
        ("throttled", Align::Right),
        ("count read", Align::Right),
        ("exact", Align::Right),
    ]);
    for o in outcomes {
        grid.row([
            o.strategy.to_owned(),
            o.hot_key_writes.to_string(),
            format!("{:.1}", o.hot_writes_per_1000),
            o.steady.map_or_else(
                || "-".to_owned(),
                |st| format!("{:.2}", st.hot_writes_per_1000),
            ),
            format!("{}/{}", o.hot_likes_acked, o.hot_likes_offered),
            o.partition_writes.to_string(),
            format!("{:.1}", o.writes_per_1k_likes),
            format!("{:.1}", o.writes_per_s),
            format!("{:.0}%", o.max_partition_utilisation * 100.0),
            o.counter_throttled.to_string(),
            format!("{}/{}", o.count_read, o.truth),
            if o.count_read == o.truth { "yes" } else { "NO" }.to_owned(),
        ]);
    }
    println!();
    grid.print();
}

/// The lines under the table: the steady state, shedding, placement, the pre-aggregated
/// strategy's stream and faults.
fn print_notes(args: &DemoArgs, esm: &EsmSettings, outcomes: &[Outcome]) {
    if let Some(st) = outcomes.iter().find_map(|o| o.steady) {
        println!(
            "steady per 1k: hot-key writes per 1,000 p9 likes over {} whole batching windows ({:.0} s) after the first 1.5",
            st.windows, st.seconds
        );
    } else {
        println!(
            "steady per 1k: -, the load ran under 2.5 batching windows ({:.0} s each): raise --duration",
            esm.window.as_secs_f64()
        );
    }
    let per = |name: &str| {
        outcomes
            .iter()
            .find(|o| o.strategy == name)
            .and_then(|o| o.steady)
            .map(|st| st.hot_writes_per_1000)
    };
    if let (Some(naive), Some(pre)) = (per("naive"), per("pre-aggregated"))
        && pre > 0.0
    {
        println!(
            "pre-aggregated: {:.0}x fewer hot-key writes per p9 like than naive (steady state)",
            naive / pre
        );
    }
    if let Some(shed) = outcomes
        .iter()
        .filter(|o| o.shed > 0)
        .map(|o| format!("{} {}", o.strategy, o.shed))
        .reduce(|a, b| format!("{a}, {b}"))
    {
        println!("likes shed at the in-flight cap (the target could not keep up): {shed}");
    }
    if let Some(p) = outcomes.iter().find_map(|o| o.salt_placement.as_ref()) {
        println!(
            "salted: p9's {} sub-keys per counters partition: {p:?}",
            args.salts
        );
    }
    if let Some(last) = outcomes.last() {
        print_pre_notes(last);
    }
}

/// The pre-aggregated strategy's durable writes, dedupe memory, faults, reshards and parking.
fn print_pre_notes(o: &Outcome) {
    if let Some(l) = &o.liked {
        println!(
            "pre-aggregated durable likes on `liked`: {} writes, busiest partition {:.0}%, {} throttled",
            l.writes,
            l.max_partition_utilisation * 100.0,
            l.throttled
        );
    }
    if let Some(d) = &o.dedupe {
        let max = d.bytes_per_shard.first().copied().unwrap_or(0);
        println!(
            "pre-aggregated dedupe memory (stored, per shard): largest {max} bytes over {} shards (~{:.0} bytes per hot like of a {:.0} s window at {:.1} hot likes/s per shard), largest writer item {} bytes",
            d.bytes_per_shard.len(),
            max as f64 / (d.hot_per_shard_per_s * d.window_s).max(1e-9),
            d.window_s,
            d.hot_per_shard_per_s,
            d.max_item_bytes
        );
    }
    if let Some(f) = &o.faults {
        println!("pre-aggregated faults injected: {f:?}");
    }
    if let Some(r) = &o.reshape {
        println!("pre-aggregated reshards and parked batches: {r}");
    }
}

/// The run's verdict: a pre-aggregated count that is not the truth fails it (exit 1), and so
/// does a `--park` run whose redrive and repair did not make every post exact.
fn check_exact(outcomes: &[Outcome]) -> CmdResult {
    let last = outcomes.last().ok_or("no outcome")?;
    if last.count_read != last.truth {
        return Err(format!(
            "pre-aggregated count {} != truth {} (acknowledged p9 likes)",
            last.count_read, last.truth
        )
        .into());
    }
    if let Some(r) = &last.reshape
        && !r.repaired()
    {
        return Err(format!(
            "the parked batches' redrive and repair did not make every post exact in time (the rebuilder pass did): {r}"
        )
        .into());
    }
    Ok(())
}

/// The chart of `--plot`: one panel per strategy, one series per counters partition (its write
/// utilisation, % of `ceiling`, per second from the first second with writes), and a throttle
/// mark at each second a throttling partition ran at 95 % of its ceiling or more (the simulator
/// counts throttles per partition, not per second).
fn chart_panels(outcomes: &[Outcome], table: &str, ceiling: f64) -> Vec<crate::chart::Panel> {
    use crate::chart::{Panel, Series};
    outcomes
        .iter()
        .map(|o| {
            let parts: Vec<_> = o
                .stats
                .iter()
                .flat_map(|s| s.partitions.iter())
                .filter(|p| p.id.table == table && p.id.index.is_none())
                .collect();
            let first = parts
                .iter()
                .filter_map(|p| p.stats.wcu_per_second.iter().position(|v| *v > 0.0))
                .min()
                .unwrap_or(0);
            // The hot key's own writes first: what the strategies differ in.
            let hot = Series {
                name: "hot key (p9's counter)".to_owned(),
                points: per_second(&o.trace)
                    .into_iter()
                    .map(|(t, w)| (t, w / ceiling.max(f64::MIN_POSITIVE) * 100.0))
                    .collect(),
                throttles: Vec::new(),
            };
            let series = std::iter::once(hot)
                .chain(parts.iter().map(|p| {
                    let per_second = p.stats.wcu_per_second.get(first..).unwrap_or_default();
                    let points: Vec<(f64, f64)> = per_second
                        .iter()
                        .enumerate()
                        .map(|(t, v)| (t as f64, v / ceiling.max(f64::MIN_POSITIVE) * 100.0))
                        .collect();
                    let throttles = if p.stats.throttled_writes > 0 {
                        points.iter().copied().filter(|(_, u)| *u >= 95.0).collect()
                    } else {
                        Vec::new()
                    };
                    let name = if p.stats.throttled_writes > 0 {
                        format!(
                            "p{} ({} throttled)",
                            p.id.partition, p.stats.throttled_writes
                        )
                    } else {
                        format!("p{}", p.id.partition)
                    };
                    Series {
                        name,
                        points,
                        throttles,
                    }
                }))
                .collect();
            Panel {
                title: format!("{}: {table} partitions", o.strategy),
                series,
            }
        })
        .collect()
}

/// Hot-key writes per second from a trace: `(second, writes in the second before it)` at each
/// whole second the trace covers.
fn per_second(trace: &[Sample]) -> Vec<(f64, f64)> {
    let at = |t: f64| {
        trace
            .iter()
            .rev()
            .find(|s| s.at <= t)
            .map_or(0, |s| s.writes)
    };
    let end = trace.last().map_or(0.0, |s| s.at).floor() as u64;
    (1..=end)
        .map(|t| {
            let t = t as f64;
            (t, at(t).saturating_sub(at(t - 1.0)) as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace of 13 shards each flushing the hot key once per `w`-second window (just after each
    /// window closes), p9 likes acknowledged at `rate`/s, the load stopping at `end` and one
    /// final flush per shard after it.
    fn windowed_trace(w: f64, rate: f64, end: f64) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut t = 0.0;
        while t <= end + w {
            let flushes = (t.min(end) / w).floor() as u64 + u64::from(t >= end + 0.5);
            out.push(Sample {
                at: t,
                writes: 13 * flushes,
                acked: (rate * t.min(end)) as u64,
            });
            t += 0.25;
        }
        out
    }

    #[test]
    fn the_steady_figure_spans_whole_windows_and_leaves_out_the_first_and_final_flushes() {
        // 3 s windows, 240 p9 likes/s, 36 s of load: 10 whole windows from 4.5 s to 34.5 s.
        let trace = windowed_trace(3.0, 240.0, 36.0);
        let st = steady(&trace, Duration::from_secs(3), 36.0).expect("long enough");
        assert_eq!(st.windows, 10);
        assert_eq!(st.writes, 130, "13 shards x 10 windows");
        assert_eq!(st.acked, 7_200, "240/s x 30 s");
        assert!((st.hot_writes_per_1000 - 130.0 * 1000.0 / 7_200.0).abs() < 1e-9);
        // The whole-run figure is higher: the final flushes count against no further likes.
        let last = trace.last().expect("samples");
        assert!(last.writes as f64 / last.acked as f64 > st.writes as f64 / st.acked as f64);
        // Under 2.5 windows there is no steady state to report.
        assert_eq!(steady(&trace, Duration::from_secs(3), 7.4), None);
        assert!(steady(&trace, Duration::from_secs(3), 7.5).is_some());
    }

    #[test]
    fn per_second_differences_the_cumulative_writes() {
        let trace = [
            Sample {
                at: 0.0,
                writes: 0,
                acked: 0,
            },
            Sample {
                at: 0.5,
                writes: 3,
                acked: 0,
            },
            Sample {
                at: 1.0,
                writes: 5,
                acked: 0,
            },
            Sample {
                at: 2.2,
                writes: 9,
                acked: 0,
            },
        ];
        assert_eq!(per_second(&trace), vec![(1.0, 5.0), (2.0, 0.0)]);
    }

    fn pre_outcome(count_read: i64, truth: i64, reshape: Option<pre::Reshape>) -> Outcome {
        Outcome {
            strategy: "pre-aggregated",
            hot_key: "likes#p9".into(),
            hot_key_writes: 0,
            hot_writes_per_1000: 0.0,
            steady: None,
            hot_likes_acked: 0,
            hot_likes_offered: 0,
            hot_likes_sent: 0,
            likes_sent: 0,
            likes_acked: 0,
            shed: 0,
            load_seconds: 0.0,
            count_read,
            truth,
            partition_writes: 0,
            writes_per_1k_likes: 0.0,
            writes_per_s: 0.0,
            throttled: 0,
            counter_throttled: 0,
            max_partition_utilisation: 0.0,
            salt_placement: None,
            dedupe: None,
            liked: None,
            faults: None,
            rebuild_corrected: None,
            reshape,
            stats: None,
            trace: Vec::new(),
        }
    }

    #[test]
    fn a_count_off_the_truth_or_posts_the_repair_left_inexact_fail_the_run() {
        assert!(check_exact(&[pre_outcome(7, 7, None)]).is_ok());
        let off = check_exact(&[pre_outcome(6, 7, None)]).expect_err("count off");
        assert!(off.to_string().contains("6 != truth 7"), "{off}");
        assert!(check_exact(&[pre_outcome(7, 7, Some(pre::Reshape::default()))]).is_ok());
        let stuck = pre::Reshape::not_repaired();
        let err = check_exact(&[pre_outcome(7, 7, Some(stuck))]).expect_err("not repaired");
        assert!(
            err.to_string().contains("did not make every post exact"),
            "{err}"
        );
        // The figures land in the pre-aggregated outcome's JSON beside the count.
        let json =
            serde_json::to_value(pre_outcome(7, 7, Some(pre::Reshape::default()))).expect("json");
        for key in [
            "count_read",
            "likes_acked",
            "hot_writes_per_1000",
            "reshards",
            "parked_batches",
            "redriven_batches",
        ] {
            assert!(json.get(key).is_some(), "{key} missing: {json}");
        }
    }

    #[test]
    fn chaos_flags_parse_and_bad_ones_are_refused() {
        let c = parse_chaos("lost-ack=0.1,dup-batch=0.2,crash=0.05,seed=7").expect("valid");
        assert_eq!(
            (c.lost_ack, c.dup_batch, c.crash, c.seed),
            (0.1, 0.2, 0.05, 7)
        );
        assert!(parse_chaos("crash=2").is_err());
        assert!(parse_chaos("boom=0.1").is_err());
        assert!(parse_chaos("crash").is_err());
    }

    #[test]
    fn the_load_mix_sends_rate_to_p9_and_baseline_to_each_other_post() {
        let mut counts = BTreeMap::new();
        for i in 0..(2400 + 15 * 10) {
            *counts.entry(post_of("t", "s", i, 10, 2400)).or_insert(0) += 1;
        }
        assert_eq!(counts["t-s-p9"], 2400);
        assert_eq!(counts.len(), 16);
        assert!(
            counts
                .iter()
                .filter(|(k, _)| !k.ends_with("p9"))
                .all(|(_, v)| *v == 10)
        );
    }
}
