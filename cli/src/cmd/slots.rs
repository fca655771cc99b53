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
use heatsink::slots::balance::{BalanceConfig, BalancePlan, plan};
use heatsink::slots::mover::Mover;
use heatsink::slots::record::MoveRecord;
use heatsink::slots::verify::{AckLine, VerifyReport, verify};
use heatsink::slots::{Keying, RetryRule, Router, SlotDirectory, SlotMap, SlotRange};
use heatsink_sim::load::{LoadSpec, latency_quantile, run_load};
use serde_json::{Value, json};

use super::fail::{Failure, Target, aws_call, chain, env_endpoint};
use super::output::Output;
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
    /// How a key becomes a slot, for the directory's life: `hash` (CRC16 of the hash tag), or
    /// `ordered[:ALPHABET]` (the tag's own order: a slot range is a key interval; e.g.
    /// `ordered:0123456789bcdefghjkmnpqrstuvwxyz` for geohash cells).
    #[arg(long, alias = "mode", default_value = "hash", value_parser = parse_keying)]
    keying: Keying,
    #[command(flatten)]
    output: Output,
}

/// `--keying`: `hash`, `ordered` or `ordered:ALPHABET`.
fn parse_keying(text: &str) -> Result<Keying, String> {
    text.parse()
        .map_err(|e: heatsink::slots::SlotError| e.to_string())
}

/// Arguments of `slots status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
}

/// Arguments of `slots merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Two adjacent ranges, `A-B,C-D`.
    #[arg(long)]
    ranges: String,
    #[command(flatten)]
    output: Output,
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
    #[command(flatten)]
    output: Output,
}

/// Arguments of `slots verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The ack log `slots load` wrote.
    #[arg(long)]
    ack_log: std::path::PathBuf,
    #[command(flatten)]
    output: Output,
}

/// Where a plan's load comes from and whom it may give it to (`slots plan`, `autopilot`).
#[derive(Debug, Args)]
pub struct SamplesArgs {
    /// Load samples, one JSON line each: `{"key": K, "rate": R}` or `{"slot": S, "rate": R}`
    /// (required for a slot directory's plan).
    #[arg(long)]
    pub samples: Option<std::path::PathBuf>,
    /// What one owner serves at 100 %, in the samples' unit.
    #[arg(long, default_value = "1000", value_parser = super::positive_rate)]
    pub capacity: f64,
    /// Tables that own nothing yet and may take moves.
    #[arg(long)]
    pub spare: Vec<String>,
}

/// Arguments of `slots plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    dir: DirArgs,
    #[command(flatten)]
    load: SamplesArgs,
    /// The utilisation every owner should end under.
    #[arg(long, default_value = "0.7", value_parser = super::fraction)]
    target: f64,
    /// Hysteresis band around the target.
    #[arg(long, default_value = "0.1", value_parser = super::fraction)]
    band: f64,
    /// Carry the plan out, one move at a time (each move prints as `move start` does; with
    /// --json the plan and then each move's events are JSON lines).
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    output: Output,
}

/// Runs one `heatsink slots` subcommand.
pub async fn run(command: SlotsCommand) -> CmdResult {
    match command {
        SlotsCommand::Init(a) => {
            let dir = a.dir.open().await;
            let spec = Schema::new(&a.dir.prefix).table(Table::Slots);
            ensure_table(dir.client(), &spec)
                .await
                .map_err(|e| failed(&dir, "create the slot directory", &e))?;
            let map = dir
                .init_keyed(&a.owner, a.max_age, a.strict, a.keying.clone())
                .await
                .map_err(|e| failed(&dir, "initialize the slot directory", &e))?;
            a.output.report(
                || json!({"directory": dir.table(), "version": map.version, "owner": a.owner, "strict": map.strict, "max_age_ms": map.max_age_ms, "keying": map.keying}),
                || {
                    vec![format!(
                        "directory {} version {}: every slot to {} at epoch 1 (strict: {}, max age {} ms, keying {})",
                        dir.table(),
                        map.version,
                        a.owner,
                        map.strict,
                        map.max_age_ms,
                        map.keying
                    )]
                },
            )
        }
        SlotsCommand::Status(a) => status(a).await,
        SlotsCommand::Split(a) => {
            let dir = a.dir.open().await;
            let map = load_map(&dir).await?;
            dir.commit(&map.split(a.range, a.at)?)
                .await
                .map_err(|e| failed(&dir, "split a range of", &e))?;
            let version = map.version + 1;
            a.output.report(
                || json!({"directory": dir.table(), "split": a.range, "at": a.at, "version": version}),
                || vec![format!("split {} at {} (directory version {version})", a.range, a.at)],
            )
        }
        SlotsCommand::Merge(a) => {
            let dir = a.dir.open().await;
            let (x, y) = a.ranges.split_once(',').ok_or_else(|| {
                Failure::new(format!(
                    "--ranges {:?} is not two ranges: give them as A-B,C-D (see 'heatsink slots status')",
                    a.ranges
                ))
            })?;
            let (x, y): (SlotRange, SlotRange) = (x.parse()?, y.parse()?);
            let map = load_map(&dir).await?;
            dir.commit(&map.merge(x, y)?)
                .await
                .map_err(|e| failed(&dir, "merge two ranges of", &e))?;
            let version = map.version + 1;
            a.output.report(
                || json!({"directory": dir.table(), "merged": [x, y], "version": version}),
                || vec![format!("merged {x} and {y} (directory version {version})")],
            )
        }
        SlotsCommand::Load(a) => load(a).await,
        SlotsCommand::Verify(a) => verify_cmd(a).await,
        SlotsCommand::Plan(a) => plan_cmd(a).await,
    }
}

/// A failure of the slot directory `dir` (its table, on the DynamoDB endpoint), or the
/// library's refusal as it is (it names the command to run next).
pub(crate) fn failed(
    dir: &SlotDirectory,
    action: &str,
    e: &(dyn std::error::Error + 'static),
) -> Failure {
    failed_on(dir.table(), action, e)
}

/// [`failed`] for the directory table named `table`: an AWS call's failure names its table
/// (the directory, or an owner table) and the endpoint.
pub(crate) fn failed_on(
    table: &str,
    action: &str,
    e: &(dyn std::error::Error + 'static),
) -> Failure {
    let text = chain(e);
    let Some(call) = aws_call(&text) else {
        return Failure::new(text);
    };
    let next = if call.resource == table {
        "run 'heatsink slots init --owner TABLE' (or check --prefix)"
    } else {
        "the directory names it as an owner: check it exists, or move its slots ('heatsink slots status')"
    };
    Target::at(
        env_endpoint(call.service),
        call.service,
        "table",
        call.resource,
    )
    .if_missing(next)
    .fail(action, e)
}

/// The directory's map, or a one-line failure.
pub(crate) async fn load_map(dir: &SlotDirectory) -> Result<heatsink::slots::SlotMap, Failure> {
    dir.load()
        .await
        .map_err(|e| failed(dir, "read the slot directory", &e))
}

async fn status(a: StatusArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let map = load_map(&dir).await?;
    let moves = Mover::list(&dir)
        .await
        .map_err(|e| failed(&dir, "list the moves of", &e))?;
    a.output.report(
        || status_json(&map, &moves),
        || status_lines(dir.table(), &map, &moves),
    )
}

/// `slots status --json`: the map's version, strictness, max age and keying, every range (`first`,
/// `last`, `owner`, `epoch`, `state`) and every move (`id`, `slots`, `from`, `to`, `phase`).
fn status_json(map: &SlotMap, moves: &[MoveRecord]) -> Value {
    let ranges: Vec<_> = map
        .ranges
        .iter()
        .map(|r| json!({"first": r.range.first, "last": r.range.last, "owner": r.owner, "epoch": r.epoch, "state": r.state.name()}))
        .collect();
    let moves: Vec<_> = moves
        .iter()
        .map(|m| json!({"id": m.id, "slots": m.slots.to_string(), "from": m.from, "to": m.to, "phase": m.phase.name()}))
        .collect();
    json!({"version": map.version, "strict": map.strict, "max_age_ms": map.max_age_ms, "keying": map.keying, "ranges": ranges, "moves": moves})
}

/// `slots status`'s human form: the map, then the moves not yet final.
fn status_lines(table: &str, map: &SlotMap, moves: &[MoveRecord]) -> Vec<String> {
    let mut lines = vec![format!(
        "directory {table} version {} (strict: {}, max age {} ms, keying {})",
        map.version, map.strict, map.max_age_ms, map.keying
    )];
    for r in &map.ranges {
        lines.push(format!(
            "  {:>11}  {:<7} epoch {:<4} {}",
            r.range.to_string(),
            r.state.name(),
            r.epoch,
            r.owner
        ));
    }
    for m in moves.iter().filter(|m| !m.phase.is_final()) {
        lines.push(format!(
            "  move {} {} {} -> {} ({})",
            m.id,
            m.slots,
            m.from,
            m.to,
            m.phase.name()
        ));
    }
    lines
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
        .map_err(|e| {
            Failure::new(format!(
                "cannot open the ack log {}: {e}; check --ack-log",
                a.ack_log.display()
            ))
        })?;
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
        w.flush().map_err(|e| {
            Failure::new(format!(
                "cannot write the ack log {}: {e}; check the disk, then run 'heatsink slots load' again",
                a.ack_log.display()
            ))
        })?;
    }
    let q = |p| latency_quantile(&report.samples, 0, u64::MAX, p);
    let summary = LoadSummary {
        acked: report.acked,
        failed: report.failed,
        moved: report.moved,
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: q(1.0),
    };
    a.output.report(|| json!(summary), || vec![summary.line()])
}

/// What `slots load` did.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct LoadSummary {
    acked: u64,
    failed: u64,
    moved: u64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

impl LoadSummary {
    /// The human line.
    fn line(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} ms"));
        format!(
            "{} writes acknowledged, {} not, {} MOVED answers; latency p50 {} p99 {} max {}",
            self.acked,
            self.failed,
            self.moved,
            ms(self.p50_ms),
            ms(self.p99_ms),
            ms(self.max_ms)
        )
    }
}

async fn verify_cmd(a: VerifyArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let text = std::fs::read_to_string(&a.ack_log).map_err(|e| {
        Failure::new(format!(
            "cannot read the ack log {}: {e}; check --ack-log (the file 'heatsink slots load --ack-log' wrote)",
            a.ack_log.display()
        ))
    })?;
    let acks = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str::<AckLine>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Failure::new(format!(
                "{} is not an ack log ({e}): give --ack-log the file 'heatsink slots load' wrote",
                a.ack_log.display()
            ))
        })?;
    let table = dir.table().to_owned();
    let router = Router::new(dir.client().clone(), dir, Duration::from_secs(1));
    let report = verify(&router, &acks)
        .await
        .map_err(|e| failed_on(&table, "read back the acknowledged writes through", &e))?;
    a.output
        .report(|| json!(report), || vec![verify_line(&report)])?;
    verify_outcome(&report, &table)
}

/// `slots verify`'s human line.
fn verify_line(r: &VerifyReport) -> String {
    let mut line = format!(
        "{} acknowledged writes of {} keys checked: {} lost",
        r.acked, r.keys, r.lost
    );
    if !r.lost_samples.is_empty() {
        line.push_str(&format!(" (e.g. {})", r.lost_samples.join(", ")));
    }
    if !r.double_owned.is_empty() {
        line.push_str(&format!("; slots with two owners: {:?}", r.double_owned));
    }
    line
}

/// Exit 1 (one line) when the check found a lost write or a slot with two owners.
fn verify_outcome(r: &VerifyReport, table: &str) -> CmdResult {
    if r.ok() {
        return Ok(());
    }
    let mut what = Vec::new();
    if r.lost > 0 {
        what.push(format!(
            "{} acknowledged writes read back below their version (e.g. {})",
            r.lost,
            r.lost_samples.join(", ")
        ));
    }
    if !r.double_owned.is_empty() {
        what.push(format!(
            "slots {:?} accept writes on two tables",
            r.double_owned
        ));
    }
    Err(Failure::new(format!(
        "verify failed on the tables of directory {table}: {}: keep the ack log, see the moves with 'heatsink move list' and finish or roll back the one holding those slots",
        what.join("; ")
    ))
    .into())
}

async fn plan_cmd(a: PlanArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let map = load_map(&dir).await?;
    let load = a.load.read(&map.keying)?;
    let cfg = BalanceConfig {
        capacity: a.load.capacity,
        target: a.target,
        band: a.band,
    };
    let p = plan(&map, &a.load.spare, &load, &cfg);
    if a.apply && a.output.json {
        // The plan, then each move's events: JSON lines.
        super::output::print_json_line(&json!(p));
    } else {
        a.output
            .report(|| json!(p), || plan_lines(&p, cfg.target))?;
    }
    if a.apply {
        for mv in &p.moves {
            let args = super::r#move::StartArgs::for_plan(
                a.dir.clone(),
                mv.slots,
                mv.to.clone(),
                a.output,
            );
            super::r#move::start(args).await?;
        }
    }
    Ok(())
}

/// Per-slot load from the samples file at `path` (`--samples`).
impl SamplesArgs {
    /// The per-slot load of `--samples`, or a one-line failure naming the flag.
    pub(crate) fn read(&self, keying: &Keying) -> Result<BTreeMap<u16, f64>, Failure> {
        let Some(path) = &self.samples else {
            return Err(Failure::new(
                "no load samples: pass --samples FILE (one {\"key\" or \"slot\", \"rate\"} per line)",
            ));
        };
        read_samples(path, keying)
    }
}

fn read_samples(path: &std::path::Path, keying: &Keying) -> Result<BTreeMap<u16, f64>, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::new(format!(
            "cannot read the samples {}: {e}; check --samples",
            path.display()
        ))
    })?;
    parse_samples(&text, path, keying)
}

/// Per-slot load from the samples' JSON lines (`{"key" or "slot", "rate"}`).
pub(crate) fn parse_samples(
    text: &str,
    path: &std::path::Path,
    keying: &Keying,
) -> Result<BTreeMap<u16, f64>, Failure> {
    let mut load: BTreeMap<u16, f64> = BTreeMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| {
            Failure::new(format!(
                "{} line {}: {why}; each line must be {{\"key\" or \"slot\", \"rate\"}}",
                path.display(),
                n + 1
            ))
        };
        let v: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let rate = v["rate"].as_f64().filter(|r| r.is_finite() && *r >= 0.0);
        let slot = v["slot"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| *s < heatsink::slots::SLOTS)
            .or_else(|| v["key"].as_str().map(|k| keying.slot_of(k)));
        let (Some(slot), Some(rate)) = (slot, rate) else {
            return Err(bad(
                "no slot (0-16383) or key, or no rate of 0 or more".into()
            ));
        };
        *load.entry(slot).or_insert(0.0) += rate;
    }
    Ok(load)
}

/// `slots plan`'s human form: each move, each owner's utilisation after them, the owners no move
/// helps.
fn plan_lines(p: &BalancePlan, target: f64) -> Vec<String> {
    let mut lines = Vec::new();
    if p.moves.is_empty() {
        lines.push(format!(
            "no move needed: every owner ends under {:.0}%",
            target * 100.0
        ));
    }
    for mv in &p.moves {
        lines.push(format!(
            "move {} {} -> {} (load {:.1})",
            mv.slots, mv.from, mv.to, mv.load
        ));
    }
    for (owner, utilisation) in &p.after {
        lines.push(format!("  {owner}: {:.1}% after", utilisation * 100.0));
    }
    for owner in &p.stuck {
        lines.push(format!(
            "  {owner}: still over target, one slot too hot for any table: salt its hot key instead"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use heatsink::slots::RangeEntry;

    use super::*;

    #[test]
    fn the_status_json_carries_every_range_and_open_move_the_lines_show() {
        let mut map = SlotMap::initial("posts", 1000, false);
        map.ranges = vec![
            RangeEntry::stable(
                SlotRange {
                    first: 0,
                    last: 12066,
                },
                "posts",
                1,
            ),
            RangeEntry::stable(
                SlotRange {
                    first: 12067,
                    last: 12067,
                },
                "posts-p9",
                2,
            ),
            RangeEntry::stable(
                SlotRange {
                    first: 12068,
                    last: 16383,
                },
                "posts",
                1,
            ),
        ];
        let mut open = crate::cmd::r#move::tests::done_record();
        open.id = "m-2".into();
        open.phase = heatsink::slots::Phase::Copied;
        let moves = vec![crate::cmd::r#move::tests::done_record(), open];
        let v: Value =
            serde_json::from_str(&status_json(&map, &moves).to_string()).expect("parses");
        let lines = status_lines("heatsink-slots", &map, &moves);
        assert_eq!(
            lines[0],
            "directory heatsink-slots version 1 (strict: false, max age 1000 ms, keying hash)"
        );
        assert_eq!(
            (
                v["version"].as_u64(),
                v["strict"].as_bool(),
                v["max_age_ms"].as_u64(),
                v["keying"].as_str()
            ),
            (Some(1), Some(false), Some(1000), Some("hash"))
        );
        let ranges = v["ranges"].as_array().unwrap();
        assert_eq!(ranges.len(), 3);
        for (range, line) in ranges.iter().zip(&lines[1..]) {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[0], format!("{}-{}", range["first"], range["last"]));
            assert_eq!(Some(cells[1]), range["state"].as_str());
            assert_eq!(cells[3], range["epoch"].to_string());
            assert_eq!(Some(cells[4]), range["owner"].as_str());
        }
        // The JSON lists every move; the lines only the open one.
        assert_eq!(v["moves"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            lines[4],
            "  move m-2 12067-12067 posts -> posts-p9 (copied)"
        );
        assert_eq!(lines.len(), 5);
        assert_eq!(v["moves"][1]["phase"], "copied");
    }

    #[test]
    fn verify_reports_lost_writes_on_one_line_and_fails() {
        let ok = VerifyReport {
            keys: 4,
            acked: 40,
            ..VerifyReport::default()
        };
        assert_eq!(
            verify_line(&ok),
            "40 acknowledged writes of 4 keys checked: 0 lost"
        );
        assert!(verify_outcome(&ok, "heatsink-slots").is_ok());
        let lost = VerifyReport {
            keys: 4,
            acked: 40,
            lost: 1,
            lost_samples: vec!["{t1}key-1 acked=2 found=Some(1)".into()],
            double_owned: vec![7],
        };
        let v: Value = serde_json::from_str(&json!(lost).to_string()).expect("parses");
        assert_eq!(
            (v["lost"].as_u64(), v["acked"].as_u64(), v["keys"].as_u64()),
            (Some(1), Some(40), Some(4))
        );
        assert_eq!(v["double_owned"], json!([7]));
        let line = verify_line(&lost);
        assert!(
            line.contains("1 lost (e.g. {t1}key-1 acked=2 found=Some(1))")
                && line.contains("two owners: [7]"),
            "{line}"
        );
        let err = verify_outcome(&lost, "heatsink-slots")
            .expect_err("a lost write fails")
            .to_string();
        assert!(!err.contains('\n'));
        assert!(
            err.contains("heatsink-slots") && err.contains("'heatsink move list'"),
            "{err}"
        );
    }

    #[test]
    fn a_plan_prints_each_move_and_what_it_leaves() {
        let p = BalancePlan {
            moves: vec![heatsink::slots::balance::PlannedMove {
                slots: SlotRange {
                    first: 12067,
                    last: 12067,
                },
                from: "posts".into(),
                to: "posts-p9".into(),
                load: 900.0,
            }],
            after: BTreeMap::from([("posts".into(), 0.5), ("posts-p9".into(), 0.9)]),
            stuck: vec!["posts-p9".into()],
        };
        let v: Value = serde_json::from_str(&json!(p).to_string()).expect("parses");
        let lines = plan_lines(&p, 0.7);
        assert_eq!(lines[0], "move 12067-12067 posts -> posts-p9 (load 900.0)");
        assert_eq!(
            v["moves"][0]["slots"],
            json!({"first": 12067, "last": 12067})
        );
        assert_eq!(v["moves"][0]["load"], 900.0);
        assert_eq!(lines[1], "  posts: 50.0% after");
        assert_eq!(v["after"]["posts-p9"], 0.9);
        assert!(
            lines[3].starts_with("  posts-p9: still over target"),
            "{}",
            lines[3]
        );
        assert_eq!(v["stuck"], json!(["posts-p9"]));
    }

    #[test]
    fn samples_are_read_by_key_or_slot_and_refused_with_their_line() {
        let path = std::path::Path::new("samples.jsonl");
        let load = parse_samples(
            "{\"key\": \"{p9}\", \"rate\": 2}\n\n{\"slot\": 12067, \"rate\": 3}\n",
            path,
            &Keying::Hash,
        )
        .expect("parses");
        assert_eq!(
            load,
            BTreeMap::from([(heatsink::slots::slot_of("p9"), 5.0)])
        );
        // In an ordered directory a key's slot is its order.
        let geo = Keying::ordered("0123456789bcdefghjkmnpqrstuvwxyz").expect("alphabet");
        let load = parse_samples("{\"key\": \"9q8yy\", \"rate\": 2}", path, &geo).expect("parses");
        assert_eq!(load, BTreeMap::from([(geo.slot_of("9q8yy"), 2.0)]));
        let err = parse_samples("{\"slot\": 16384, \"rate\": 1}", path, &Keying::Hash)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("samples.jsonl line 1: "), "{err}");
    }

    #[test]
    fn the_load_summary_line_shows_its_json_fields() {
        let s = LoadSummary {
            acked: 500,
            failed: 2,
            moved: 7,
            p50_ms: Some(3.25),
            p99_ms: Some(40.0),
            max_ms: None,
        };
        let v: Value = serde_json::from_str(&json!(s).to_string()).expect("parses");
        assert_eq!(
            (
                v["acked"].as_u64(),
                v["failed"].as_u64(),
                v["moved"].as_u64()
            ),
            (Some(500), Some(2), Some(7))
        );
        assert_eq!(v["max_ms"], Value::Null);
        assert_eq!(
            s.line(),
            "500 writes acknowledged, 2 not, 7 MOVED answers; latency p50 3.2 ms p99 40.0 ms max -"
        );
    }
}
