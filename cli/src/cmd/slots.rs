//! `heatsink slots init|status|split|merge|load|verify|plan`: the slot directory by hand, and
//! the load generator and verifier the move runbooks use.
//!
//! The directory table is `<prefix>slots` (`--prefix`, default `heatsink-`). Every edit is
//! one transaction conditional on the map version and the ranges it was decided from, so two
//! operators (or an operator and a mover) never both win; the loser gets a one-line error and
//! runs the command again.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::{Args, Subcommand};
use heatsink::schema::{DEFAULT_PREFIX, Schema, Table, ensure_table};
use heatsink::slots::balance::{BalanceConfig, plan};
use heatsink::slots::mover::Mover;
use heatsink::slots::verify::{AckLine, verify};
use heatsink::slots::{RetryRule, Router, SlotDirectory, SlotRange, slot_of};
use heatsink_sim::load::{LoadSpec, latency_quantile, run_load};

use super::{CmdResult, parse_duration, slots_sdk_config};

/// `heatsink slots` subcommands.
#[derive(Debug, Subcommand)]
pub enum SlotsCommand {
    /// All slots to TABLE at epoch 1 (creates the directory table; idempotent).
    Init(InitArgs),
    /// Print the directory and its moves.
    Status(StatusArgs),
    /// Split a range in two at slot S (S starts the right part).
    Split(SplitArgs),
    /// Merge two adjacent ranges of one owner.
    Merge(MergeArgs),
    /// Write versioned items through a router and log each acknowledged write.
    Load(LoadArgs),
    /// Check every acknowledged write is readable at or above its version; exit 1 otherwise.
    Verify(VerifyArgs),
    /// Plan moves from per-slot load so every owner ends under a target utilisation.
    Plan(PlanArgs),
}

/// Where the directory is.
#[derive(Debug, Args, Clone)]
pub struct DirArgs {
    /// Resource name prefix (the directory is `<prefix>slots`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
}

impl DirArgs {
    /// The directory on the configured endpoint.
    pub async fn open(&self) -> SlotDirectory {
        let ddb = aws_sdk_dynamodb::Client::new(&slots_sdk_config().await);
        SlotDirectory::from_schema(ddb, &Schema::new(&self.prefix))
    }
}

/// Arguments of `slots init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The table that owns every slot.
    #[arg(long)]
    owner: String,
    /// The longest a router may use a loaded map (movers wait this long before fencing).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    max_age: Duration,
    /// Strict directory: routers check the owner's fence on every write (2x write cost).
    #[arg(long)]
    strict: bool,
}

/// Arguments of `slots status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `slots split`.
#[derive(Debug, Args)]
pub struct SplitArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The range, `A-B`, exactly as `slots status` shows it.
    #[arg(long)]
    range: SlotRange,
    /// The first slot of the right part.
    #[arg(long)]
    at: u16,
}

/// Arguments of `slots merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Two adjacent ranges, `A-B,C-D`.
    #[arg(long)]
    ranges: String,
}

/// Arguments of `slots load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// How many keys (`key-0` … `key-N-1`).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    keys: u64,
    /// Tag keys with N tenants (`{t3}key-7`): each tenant's keys share one slot.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    tenants: Option<u64>,
    /// Writes per second.
    #[arg(long, default_value = "100", value_parser = super::positive_rate)]
    rate: f64,
    /// How long to write.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Append one JSON line per acknowledged write here.
    #[arg(long)]
    ack_log: std::path::PathBuf,
    /// The router's map max-age (longer than the directory's is only safe when strict).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    directory_max_age: Duration,
    /// Fenced writes on every range, whatever the directory says.
    #[arg(long)]
    strict: bool,
}

/// Arguments of `slots verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The ack log `slots load` wrote.
    #[arg(long)]
    ack_log: std::path::PathBuf,
}

/// Arguments of `slots plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Load samples, one JSON line each: `{"key": K, "rate": R}` or `{"slot": S, "rate": R}`.
    #[arg(long)]
    samples: std::path::PathBuf,
    /// What one owner serves at 100 %, in the samples' unit.
    #[arg(long, default_value = "1000", value_parser = super::positive_rate)]
    capacity: f64,
    /// The utilisation every owner should end under.
    #[arg(long, default_value = "0.7", value_parser = super::fraction)]
    target: f64,
    /// Hysteresis band around the target.
    #[arg(long, default_value = "0.1", value_parser = super::fraction)]
    band: f64,
    /// Tables that own nothing yet and may take moves.
    #[arg(long)]
    spare: Vec<String>,
    /// Carry the plan out, one move at a time.
    #[arg(long)]
    apply: bool,
}

/// Runs one `heatsink slots` subcommand.
pub async fn run(command: SlotsCommand) -> CmdResult {
    match command {
        SlotsCommand::Init(a) => {
            let dir = a.dir.open().await;
            let spec = Schema::new(&a.dir.prefix).table(Table::Slots);
            ensure_table(dir.client(), &spec).await?;
            let map = dir.init(&a.owner, a.max_age, a.strict).await?;
            println!(
                "{}",
                serde_json::json!({"directory": dir.table(), "version": map.version, "owner": a.owner, "strict": map.strict})
            );
            Ok(())
        }
        SlotsCommand::Status(a) => status(a).await,
        SlotsCommand::Split(a) => {
            let dir = a.dir.open().await;
            let map = dir.load().await?;
            dir.commit(&map.split(a.range, a.at)?).await?;
            println!(
                "split {} at {} (directory version {})",
                a.range,
                a.at,
                map.version + 1
            );
            Ok(())
        }
        SlotsCommand::Merge(a) => {
            let dir = a.dir.open().await;
            let (x, y) = a
                .ranges
                .split_once(',')
                .ok_or_else(|| format!("--ranges {:?} is not A-B,C-D", a.ranges))?;
            let (x, y): (SlotRange, SlotRange) = (x.parse()?, y.parse()?);
            let map = dir.load().await?;
            dir.commit(&map.merge(x, y)?).await?;
            println!("merged {x} and {y} (directory version {})", map.version + 1);
            Ok(())
        }
        SlotsCommand::Load(a) => load(a).await,
        SlotsCommand::Verify(a) => {
            let dir = a.dir.open().await;
            let text = std::fs::read_to_string(&a.ack_log)
                .map_err(|e| format!("reading {}: {e}", a.ack_log.display()))?;
            let acks = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str::<AckLine>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{} is not an ack log: {e}", a.ack_log.display()))?;
            let router = Router::new(dir.client().clone(), dir, Duration::from_secs(1));
            let report = verify(&router, &acks).await?;
            println!("{}", serde_json::to_string(&report)?);
            if !report.ok() {
                std::process::exit(1);
            }
            Ok(())
        }
        SlotsCommand::Plan(a) => plan_cmd(a).await,
    }
}

async fn status(a: StatusArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let map = dir.load().await?;
    let moves = Mover::list(&dir).await?;
    if a.json {
        let ranges: Vec<_> = map
            .ranges
            .iter()
            .map(|r| serde_json::json!({"first": r.range.first, "last": r.range.last, "owner": r.owner, "epoch": r.epoch, "state": r.state.name()}))
            .collect();
        let moves: Vec<_> = moves
            .iter()
            .map(|m| serde_json::json!({"id": m.id, "slots": m.slots.to_string(), "from": m.from, "to": m.to, "phase": m.phase.name()}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"version": map.version, "strict": map.strict, "max_age_ms": map.max_age_ms, "ranges": ranges, "moves": moves})
        );
        return Ok(());
    }
    println!(
        "directory {} version {} (strict: {}, max age {} ms)",
        dir.table(),
        map.version,
        map.strict,
        map.max_age_ms
    );
    for r in &map.ranges {
        println!(
            "  {:>11}  {:<7} epoch {:<4} {}",
            r.range.to_string(),
            r.state.name(),
            r.epoch,
            r.owner
        );
    }
    for m in moves.iter().filter(|m| !m.phase.is_final()) {
        println!(
            "  move {} {} {} -> {} ({})",
            m.id,
            m.slots,
            m.from,
            m.to,
            m.phase.name()
        );
    }
    Ok(())
}

async fn load(a: LoadArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let router = Router::with(
        dir.client().clone(),
        dir,
        a.directory_max_age,
        a.strict,
        RetryRule::default(),
    );
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.ack_log)
        .map_err(|e| format!("opening {}: {e}", a.ack_log.display()))?;
    let sink = Arc::new(std::sync::Mutex::new(std::io::BufWriter::new(file)));
    let writer = sink.clone();
    let spec = LoadSpec {
        keys: a.keys,
        prefix: "key-".into(),
        tenants: a.tenants,
        rate: a.rate,
        duration: a.duration,
        max_in_flight: 64,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let report = run_load(router, spec, stop, move |ack| {
        if let Ok(mut w) = writer.lock()
            && let Ok(line) = serde_json::to_string(ack)
        {
            let _ = writeln!(w, "{line}");
        }
    })
    .await;
    if let Ok(mut w) = sink.lock() {
        w.flush()?;
    }
    let q = |p| latency_quantile(&report.samples, 0, u64::MAX, p);
    eprintln!(
        "{}",
        serde_json::json!({"acked": report.acked, "failed": report.failed, "moved": report.moved,
            "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": q(1.0)})
    );
    Ok(())
}

async fn plan_cmd(a: PlanArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let map = dir.load().await?;
    let text = std::fs::read_to_string(&a.samples)
        .map_err(|e| format!("reading {}: {e}", a.samples.display()))?;
    let mut load: BTreeMap<u16, f64> = BTreeMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("{} line {}: {e}", a.samples.display(), n + 1))?;
        let rate = v["rate"].as_f64().filter(|r| r.is_finite() && *r >= 0.0);
        let slot = v["slot"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| *s < heatsink::slots::SLOTS)
            .or_else(|| v["key"].as_str().map(slot_of));
        let (Some(slot), Some(rate)) = (slot, rate) else {
            return Err(format!(
                "{} line {}: want {{\"key\" or \"slot\", \"rate\"}}",
                a.samples.display(),
                n + 1
            )
            .into());
        };
        *load.entry(slot).or_insert(0.0) += rate;
    }
    let cfg = BalanceConfig {
        capacity: a.capacity,
        target: a.target,
        band: a.band,
    };
    let p = plan(&map, &a.spare, &load, &cfg);
    println!("{}", serde_json::to_string(&p)?);
    if a.apply {
        for mv in &p.moves {
            let args = super::r#move::StartArgs::for_plan(a.dir.clone(), mv.slots, mv.to.clone());
            super::r#move::start(args).await?;
        }
    }
    Ok(())
}
