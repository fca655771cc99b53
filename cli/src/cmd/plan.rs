//! `heatsink plan`: size S for a hot key with the shard-load sizing rule and show each shard's
//! load (docs/write-sharding.md); `--esm`: the aggregator's event source mapping; `--warm`: a
//! table's warm throughput for a predicted spike (`heatsink::schema::warm`).

use clap::Args;
use heatsink::counter::{EsmPlan, EsmPlanRequest, esm_plan};
use heatsink::keys::{DEFAULT_TARGET, Plan, PlanRequest, evaluate, plan};
use heatsink::schema::warm::{
    self, Capacity, DEFAULT_HEADROOM, TableCapacity, WarmPlan, WarmRequest,
};
use serde_json::{Value, json};

use super::fail::Failure;
use super::output::{Output, round4};
use super::table::{Align, Grid};
use super::{CmdResult, fraction, non_negative_rate, positive_rate};

/// Most shards or partitions `plan` takes: a Kinesis stream's default shard quota per account
/// and region is far lower, and DynamoDB splits a table into at most thousands of partitions.
pub const MAX_SHARDS: u64 = 10_000;

/// Arguments of `heatsink plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The hot key's write rate, records (or WCU) per second (above 0, at most 1e9).
    #[arg(long, value_parser = positive_rate)]
    rate: f64,
    /// One shard's or partition's ceiling per second (Kinesis 1,000 records; DynamoDB 1,000 WCU;
    /// above 0, at most 1e9).
    #[arg(long, default_value_t = 1000.0, value_parser = positive_rate)]
    ceiling: f64,
    /// Number of shards (1–10,000).
    #[arg(long, required_unless_present_any = ["backgrounds", "esm", "warm"],
          value_parser = clap::value_parser!(u64).range(1..=MAX_SHARDS))]
    shards: Option<u64>,
    /// Every shard's other traffic per second (0 to 1e9).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative_rate)]
    background: f64,
    /// Per-shard other traffic, comma-separated (overrides --shards/--background; 1–10,000
    /// values, each 0 to 1e9).
    #[arg(long, value_delimiter = ',', value_parser = non_negative_rate)]
    backgrounds: Option<Vec<f64>>,
    /// Fraction of the ceiling a shard may reach (above 0, at most 1).
    #[arg(long, default_value_t = DEFAULT_TARGET, value_parser = fraction)]
    target: f64,
    /// Smallest S to consider, e.g. room for growth (1–256).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    min_salts: u16,
    /// Evaluate this S instead of searching for the smallest that fits (1–256).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    salts: Option<u16>,
    /// Size the aggregator's event source mapping instead: shards the ingest of --rate changes/s
    /// needs, and the hot key's writes/s and per 1,000 likes with the deployed batch size and
    /// window (or --batch-size, --window).
    #[arg(long)]
    esm: bool,
    /// With --esm: the stream's shards (default: the deployed like-events count; 1–10,000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    stream_shards: Option<u32>,
    /// With --esm: records per batch (default: the deployed batch size; 1–10,000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch_size: Option<u32>,
    /// With --esm: batching window in seconds (default: the deployed window; 0 to 300).
    #[arg(long, value_parser = super::non_negative_rate)]
    window: Option<f64>,
    /// Size the warm throughput of --table for a peak of --rate writes/s (and --read-rate
    /// reads/s): reads its warm throughput and on-demand maximum (DescribeTable) and prints what
    /// to raise. Warm throughput does not lift one partition's 1,000 WCU/s or 3,000 RCU/s.
    #[arg(long, requires = "table", conflicts_with = "esm")]
    warm: bool,
    /// With --warm: the table's name.
    #[arg(long, requires = "warm")]
    table: Option<String>,
    /// With --warm: plan this global secondary index of --table instead of the table (its
    /// peak: the writes that reach it and the reads it serves).
    #[arg(long, requires = "warm")]
    index: Option<String>,
    /// With --warm: the peak's read units per second (0 to 1e9).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative_rate, requires = "warm")]
    read_rate: f64,
    /// With --warm: fraction of the warm throughput the peak may use (above 0, at most 1).
    #[arg(long, default_value_t = DEFAULT_HEADROOM, value_parser = fraction, requires = "warm")]
    headroom: f64,
    /// With --warm: raise the warm throughput as planned (UpdateTable; it is never lowered
    /// again). Refused, nothing changed, when an on-demand maximum is below the peak.
    #[arg(long, requires = "warm")]
    apply: bool,
    #[command(flatten)]
    output: Output,
}

/// What `plan --warm` found and did.
#[derive(Debug, Clone)]
struct WarmReport {
    table: String,
    request: WarmRequest,
    capacity: TableCapacity,
    plan: WarmPlan,
    applied: bool,
}

/// `plan --warm`: DescribeTable, the plan, and with `--apply` the UpdateTable.
async fn warm_report(
    args: &PlanArgs,
    table: &str,
) -> Result<WarmReport, Box<dyn std::error::Error + Send + Sync>> {
    let config = super::sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let index = args.index.as_deref();
    let capacity = warm::describe_in(&ddb, table, index).await?;
    let request = WarmRequest {
        peak: Capacity::per_second(args.read_rate, args.rate),
        headroom: args.headroom,
    };
    let plan = warm::plan(&request, &capacity);
    let applied = if args.apply {
        warm::raise_in(&ddb, table, index, &plan).await?
    } else {
        false
    };
    Ok(WarmReport {
        table: index.map_or_else(|| table.to_owned(), |i| format!("{table} index {i}")),
        request,
        capacity,
        plan,
        applied,
    })
}

/// A maximum as JSON: `null` for none.
fn max_json(v: u64) -> Value {
    if v == u64::MAX { Value::Null } else { json!(v) }
}

/// `plan --warm --json`.
fn warm_json(r: &WarmReport) -> Value {
    let cap = |c: Capacity| json!({"read": c.read, "write": c.write});
    json!({
        "table": r.table,
        "peak": cap(r.request.peak),
        "headroom": r.request.headroom,
        "warm": cap(r.capacity.warm),
        "on_demand": r.capacity.on_demand,
        "on_demand_max": {"read": max_json(r.capacity.max.read), "write": max_json(r.capacity.max.write)},
        "target": cap(r.plan.target),
        "raise": r.plan.update.is_some(),
        "refusals": r.plan.refusals.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "applied": r.applied,
    })
}

/// `plan --warm`'s human form: one row per kind, then what to do next.
fn warm_lines(r: &WarmReport) -> Vec<String> {
    let mut grid = Grid::new(&[
        ("", Align::Left),
        ("peak/s", Align::Right),
        ("warm today", Align::Right),
        ("warm needed", Align::Right),
        ("on-demand max", Align::Right),
    ]);
    for kind in warm::Kind::ALL {
        let pick = |c: Capacity| match kind {
            warm::Kind::Read => c.read,
            warm::Kind::Write => c.write,
        };
        let max = pick(r.capacity.max);
        grid.row([
            kind.noun().to_owned(),
            pick(r.request.peak).to_string(),
            pick(r.capacity.warm).to_string(),
            pick(r.plan.target).to_string(),
            if !r.capacity.on_demand || max == u64::MAX {
                "-".to_owned()
            } else {
                max.to_string()
            },
        ]);
    }
    let mut lines = vec![format!(
        "{}: warm throughput for a peak at {:.0}% of it",
        r.table,
        r.request.headroom * 100.0
    )];
    lines.extend(grid.lines());
    for refusal in &r.plan.refusals {
        lines.push(format!("REFUSED: {refusal}"));
    }
    lines.push(match (&r.plan.update, r.applied) {
        (None, _) => "warm enough: nothing to raise".to_owned(),
        (Some(t), true) => format!(
            "raised to {} reads/s, {} writes/s (UpdateTable sent; the table shows UPDATING, then ACTIVE)",
            t.read, t.write
        ),
        (Some(t), false) if r.plan.refusals.is_empty() => format!(
            "raise to {} reads/s, {} writes/s: run again with --apply (warm throughput is never lowered)",
            t.read, t.write
        ),
        (Some(_), false) => "not applicable until the maximum is raised".to_owned(),
    });
    lines.push(
        "warm throughput is per table: one partition still serves at most 1,000 WCU/s and 3,000 RCU/s, so a key over them needs salting (heatsink plan --rate R --shards N) or caching".to_owned(),
    );
    lines
}

/// What `plan --esm` computed: the request as sized and the mapping's plan.
#[derive(Debug, Clone)]
struct EsmReport {
    request: EsmPlanRequest,
    plan: EsmPlan,
}

impl EsmReport {
    /// True when the stream's shards carry the rate at 80 % of a shard's ceilings.
    fn enough_shards(&self) -> bool {
        self.plan.shards_needed <= self.request.shards
    }
}

/// `plan --esm`: the mapping's shards, batches and the hot key's writes.
fn esm_report(args: &PlanArgs) -> Result<EsmReport, Failure> {
    let deployed = heatsink_photo_app::esm::deployed(&heatsink_photo_app::Schema::new("heatsink-"));
    let window = match args.window {
        Some(w) if w > 300.0 => {
            return Err(Failure::new(format!(
                "--window {w} is over Lambda's 300 s batching window: give at most 300"
            )));
        }
        Some(w) => std::time::Duration::from_secs_f64(w),
        None => deployed.window,
    };
    let shards = args.stream_shards.unwrap_or(deployed.shards);
    let batch = args
        .batch_size
        .unwrap_or(u32::try_from(deployed.batch_size).unwrap_or(u32::MAX));
    let request = EsmPlanRequest::new(args.rate, shards, batch, window);
    let plan = esm_plan(&request);
    Ok(EsmReport { request, plan })
}

/// `plan --esm --json`: the request (`rate`, `shards`, `batch_size`, `window_s`) and the
/// plan's fields as `heatsink::counter::EsmPlan` names them.
fn esm_json(r: &EsmReport) -> Value {
    let (q, p) = (&r.request, &r.plan);
    json!({
        "rate": q.rate,
        "shards": q.shards,
        "batch_size": q.batch_size,
        "window_s": q.window.as_secs_f64(),
        "shards_needed": p.shards_needed,
        "enough_shards": r.enough_shards(),
        "per_shard_rate": round4(p.per_shard_rate),
        "batches_per_shard_per_second": round4(p.batches_per_shard_per_second),
        "records_per_batch": round4(p.records_per_batch),
        "hot_writes_per_second": round4(p.hot_writes_per_second),
        "hot_writes_per_1000": round4(p.hot_writes_per_1000),
    })
}

/// `plan --esm`'s human form.
fn esm_lines(r: &EsmReport) -> Vec<String> {
    let (q, plan) = (&r.request, &r.plan);
    let mut grid = Grid::new(&[("", Align::Left), ("value", Align::Right)]);
    grid.row(["changes/s".into(), format!("{:.0}", q.rate)]);
    grid.row(["batch size".into(), q.batch_size.to_string()]);
    grid.row([
        "batching window".into(),
        format!("{:.1} s", q.window.as_secs_f64()),
    ]);
    grid.row(["stream shards".into(), q.shards.to_string()]);
    grid.row([
        "shards needed for ingest (80% of 1,000 records/s, 1 MB/s)".into(),
        plan.shards_needed.to_string(),
    ]);
    grid.row([
        "records/s per shard".into(),
        format!("{:.0}", plan.per_shard_rate),
    ]);
    grid.row([
        "batches/s per shard".into(),
        format!("{:.2}", plan.batches_per_shard_per_second),
    ]);
    grid.row([
        "records per batch".into(),
        format!("{:.0}", plan.records_per_batch),
    ]);
    grid.row([
        "hot-key writes/s".into(),
        format!("{:.1}", plan.hot_writes_per_second),
    ]);
    grid.row([
        "hot-key writes per 1,000 likes".into(),
        format!("{:.2}", plan.hot_writes_per_1000),
    ]);
    let mut lines = grid.lines();
    if !r.enough_shards() {
        lines.push(format!(
            "NOT ENOUGH SHARDS: {} carry {:.0} records/s at 80%; give the stream {} (or on-demand)",
            q.shards,
            f64::from(q.shards) * 800.0,
            plan.shards_needed
        ));
    }
    lines
}

/// What `plan` computed: the request and the salt count with every shard's load.
#[derive(Debug, Clone)]
struct SaltsReport {
    request: PlanRequest,
    plan: Plan,
}

impl SaltsReport {
    /// True when every shard is at or under the target.
    fn fits(&self) -> bool {
        self.plan.max_utilisation <= self.request.target + 1e-9
    }
}

/// Sizes S (or evaluates `--salts`).
fn salts_report(args: PlanArgs) -> Result<SaltsReport, Failure> {
    let background = match (args.backgrounds, args.shards) {
        (Some(b), _) => b,
        (None, Some(n)) => {
            // `n` is at most MAX_SHARDS (the parser's range), so this cannot overflow memory.
            let n = usize::try_from(n.min(MAX_SHARDS))
                .map_err(|_| Failure::new("--shards is too large: give at most 10000"))?;
            vec![args.background; n]
        }
        (None, None) => {
            return Err(Failure::new(
                "plan needs the shards: give --shards N or --backgrounds B1,B2,…",
            ));
        }
    };
    if background.is_empty() || background.len() as u64 > MAX_SHARDS {
        return Err(Failure::new(format!(
            "--backgrounds has {} values: give 1 to {MAX_SHARDS} (one per shard)",
            background.len()
        )));
    }
    let request = PlanRequest::new(args.rate, args.ceiling, background)
        .with_target(args.target)
        .with_min_salts(args.min_salts);
    let plan = match args.salts {
        Some(s) => evaluate(&request, s),
        None => plan(&request),
    }
    .map_err(|e| {
        Failure::new(format!(
            "no salt count fits --rate {} on {} shards: {e}",
            args.rate,
            request.background.len()
        ))
    })?;
    Ok(SaltsReport { request, plan })
}

/// `plan --json`: the request, S, whether every shard fits the target, and `per_shard` as
/// `heatsink::keys::ShardLoad` names it (with each shard's background).
fn salts_json(r: &SaltsReport) -> Value {
    let (q, p) = (&r.request, &r.plan);
    let per_shard: Vec<Value> = p
        .per_shard
        .iter()
        .zip(&q.background)
        .map(|(load, bg)| {
            json!({
                "shard": load.shard,
                "subkeys": load.subkeys,
                "background": *bg,
                "load": round4(load.load),
                "utilisation": round4(load.utilisation),
            })
        })
        .collect();
    json!({
        "rate": q.rate,
        "ceiling": q.ceiling,
        "target": q.target,
        "salts": p.salts,
        "rate_per_salt": round4(q.rate / f64::from(p.salts)),
        "fits": r.fits(),
        "max_utilisation": round4(p.max_utilisation),
        "per_shard": per_shard,
    })
}

/// `plan`'s human form: the verdict, then one row per shard.
fn salts_lines(r: &SaltsReport) -> Vec<String> {
    let (q, p) = (&r.request, &r.plan);
    let mut lines = vec![format!(
        "S = {} sub-keys, {:.1}/s each; every shard at or under {:.0}% of {}/s: {}",
        p.salts,
        q.rate / f64::from(p.salts),
        q.target * 100.0,
        q.ceiling,
        if r.fits() { "yes" } else { "NO" }
    )];
    let mut grid = Grid::new(&[
        ("shard", Align::Right),
        ("sub-keys", Align::Right),
        ("background", Align::Right),
        ("load/s", Align::Right),
        ("utilisation", Align::Right),
    ]);
    for (load, bg) in p.per_shard.iter().zip(&q.background) {
        grid.row([
            load.shard.to_string(),
            load.subkeys.to_string(),
            format!("{bg:.1}"),
            format!("{:.1}", load.load),
            format!("{:.1}%", load.utilisation * 100.0),
        ]);
    }
    lines.extend(grid.lines());
    lines
}

/// Prints the plan (a table, or JSON with `--json`).
pub async fn run(args: PlanArgs) -> CmdResult {
    let output = args.output;
    if let Some(table) = args.table.as_deref().filter(|_| args.warm) {
        let r = warm_report(&args, table).await?;
        return output.report(|| warm_json(&r), || warm_lines(&r));
    }
    if args.esm {
        let r = esm_report(&args)?;
        return output.report(|| esm_json(&r), || esm_lines(&r));
    }
    let r = salts_report(args)?;
    output.report(|| salts_json(&r), || salts_lines(&r))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        plan: PlanArgs,
    }

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["plan"].iter().chain(argv))
    }

    #[tokio::test]
    async fn out_of_range_numbers_are_clap_errors_not_panics() {
        for argv in [
            &["--rate", "2400", "--shards", "18446744073709551615"][..],
            &["--rate", "2400", "--shards", "1000000000"],
            &["--rate", "2400", "--shards", "0"],
            &["--rate", "NaN", "--shards", "4"],
            &["--rate=-5", "--shards", "4"],
            &["--rate", "inf", "--shards", "4"],
            &["--rate", "2400", "--ceiling", "0", "--shards", "4"],
            &["--rate", "2400", "--target", "1.5", "--shards", "4"],
            &["--rate", "2400", "--salts", "257", "--shards", "4"],
            &["--rate", "2400", "--min-salts", "0", "--shards", "4"],
            &["--rate", "2400", "--backgrounds", "1,NaN"],
        ] {
            let err = parse(argv).expect_err(&argv.join(" "));
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{argv:?}"
            );
        }
        let ok = parse(&["--rate", "2400", "--shards", "10000"]).expect("10,000 shards");
        assert!(run(ok.plan).await.is_ok());
    }

    #[tokio::test]
    async fn esm_mode_needs_no_shards_and_refuses_a_window_over_lambdas_limit() {
        let ok = parse(&["--esm", "--rate", "10000", "--stream-shards", "4"]).expect("parse");
        assert!(run(ok.plan).await.is_ok());
        let long = parse(&["--esm", "--rate", "2400", "--window", "301"]).expect("parse");
        assert!(run(long.plan).await.is_err());
    }

    #[test]
    fn the_json_carries_s_the_verdict_and_every_shards_load() {
        let cli = parse(&[
            "--rate",
            "2400",
            "--backgrounds",
            "200,200,150,200",
            "--min-salts",
            "8",
        ])
        .expect("parse");
        let r = salts_report(cli.plan).expect("a plan");
        let v: Value = serde_json::from_str(&salts_json(&r).to_string()).expect("parses");
        let human = salts_lines(&r);
        assert_eq!(v["salts"], 8);
        assert!(
            human[0].starts_with("S = 8 sub-keys, 300.0/s each"),
            "{}",
            human[0]
        );
        assert_eq!(v["rate_per_salt"], 300.0);
        assert_eq!(v["fits"], true);
        assert!(human[0].ends_with(": yes"), "{}", human[0]);
        assert_eq!(
            (v["target"].as_f64(), v["ceiling"].as_f64()),
            (Some(0.8), Some(1000.0))
        );
        let shards = v["per_shard"].as_array().unwrap();
        assert_eq!(shards.len(), 4);
        for (i, shard) in shards.iter().enumerate() {
            assert_eq!(shard["shard"], i);
            let row = &human[2 + i];
            let cells: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cells[1], shard["subkeys"].to_string(), "{row}");
            assert_eq!(
                cells[2].parse::<f64>().ok(),
                shard["background"].as_f64(),
                "{row}"
            );
            assert_eq!(
                cells[3].parse::<f64>().ok(),
                shard["load"].as_f64(),
                "{row}"
            );
            let pct = shard["utilisation"].as_f64().unwrap() * 100.0;
            assert_eq!(cells[4], format!("{pct:.1}%"), "{row}");
        }
        assert!(v["max_utilisation"].as_f64().unwrap() <= 0.8);
    }

    #[test]
    fn the_esm_json_carries_every_row_and_the_shard_verdict() {
        let cli = parse(&[
            "--esm",
            "--rate",
            "10000",
            "--stream-shards",
            "4",
            "--batch-size",
            "100",
            "--window",
            "3",
        ])
        .expect("parse");
        let r = esm_report(&cli.plan).expect("a plan");
        let v: Value = serde_json::from_str(&esm_json(&r).to_string()).expect("parses");
        let human = esm_lines(&r);
        assert_eq!(v["rate"], 10000.0);
        assert_eq!(v["shards"], 4);
        assert_eq!(v["batch_size"], 100);
        assert_eq!(v["window_s"], 3.0);
        let needed = v["shards_needed"].as_u64().unwrap();
        assert!(needed > 4, "10,000 changes/s need more than 4 shards");
        assert_eq!(v["enough_shards"], false);
        let last = human.last().unwrap();
        assert!(
            last.starts_with("NOT ENOUGH SHARDS")
                && last.contains(&format!("give the stream {needed}")),
            "{last}"
        );
        for field in [
            "per_shard_rate",
            "batches_per_shard_per_second",
            "records_per_batch",
            "hot_writes_per_second",
            "hot_writes_per_1000",
        ] {
            assert!(v[field].as_f64().is_some_and(f64::is_finite), "{field}");
        }
        let hot = human
            .iter()
            .find(|l| l.starts_with("hot-key writes/s"))
            .unwrap();
        let shown = format!("{:.1}", v["hot_writes_per_second"].as_f64().unwrap());
        assert!(hot.ends_with(&shown), "{hot} vs {shown}");
    }

    #[tokio::test]
    async fn too_many_backgrounds_is_an_error() {
        let many = vec!["0"; 10_001].join(",");
        let cli = parse(&["--rate", "1", "--backgrounds", &many]).expect("parse");
        let err = run(cli.plan).await.expect_err("over 10,000 shards");
        assert!(err.to_string().contains("1 to 10000"), "{err}");
    }

    #[test]
    fn warm_needs_a_table_and_no_shards_and_apply_needs_warm() {
        assert!(parse(&["--rate", "10000", "--warm", "--table", "hs-counters"]).is_ok());
        for argv in [
            &["--rate", "10000", "--warm"][..],
            &["--rate", "10000", "--shards", "4", "--apply"],
            &["--rate", "10000", "--shards", "4", "--table", "t"],
            &["--rate", "10000", "--warm", "--table", "t", "--esm"],
            &[
                "--rate",
                "10000",
                "--warm",
                "--table",
                "t",
                "--headroom",
                "0",
            ],
        ] {
            assert!(parse(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn the_warm_report_names_what_to_raise_the_refusal_and_the_partition_ceiling() {
        let capacity = TableCapacity {
            warm: Capacity {
                read: 12_000,
                write: 4_000,
            },
            on_demand: true,
            max: Capacity {
                read: u64::MAX,
                write: 5_000,
            },
        };
        let report = |write: u64| {
            let request = WarmRequest::new(Capacity { read: 0, write });
            WarmReport {
                table: "hs-counters".into(),
                request,
                capacity,
                plan: warm::plan(&request, &capacity),
                applied: false,
            }
        };
        let ok = report(4_000);
        let lines = warm_lines(&ok);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("raise to 12000 reads/s, 5000 writes/s")
                    && l.contains("--apply")),
            "{lines:#?}"
        );
        assert!(lines.iter().any(|l| l.contains("1,000 WCU/s")));
        let v = warm_json(&ok);
        assert_eq!(v["target"]["write"], 5_000);
        assert_eq!(v["on_demand_max"]["read"], Value::Null);
        assert_eq!(v["raise"], true);
        let refused = report(10_000);
        let lines = warm_lines(&refused);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("REFUSED: ") && l.contains("5000 writes/s")),
            "{lines:#?}"
        );
        assert_eq!(
            warm_json(&refused)["refusals"].as_array().map(Vec::len),
            Some(1)
        );
        let calm = report(100);
        assert!(
            warm_lines(&calm)
                .iter()
                .any(|l| l == "warm enough: nothing to raise")
        );
    }
}
