//! `heatsink plan`: size S for a hot key with the shard-load sizing rule and show each shard's
//! load (docs/write-sharding.md).

use clap::Args;
use heatsink::keys::{DEFAULT_TARGET, PlanRequest, evaluate, plan};

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
    #[arg(long, required_unless_present_any = ["backgrounds", "esm"],
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
}

/// `plan --esm`: the mapping's shards, batches and the hot key's writes.
fn run_esm(args: &PlanArgs) -> CmdResult {
    use heatsink::counter::{EsmPlanRequest, esm_plan};
    let deployed = heatsink_photo_app::esm::deployed(&heatsink_photo_app::Schema::new("heatsink-"));
    let window = match args.window {
        Some(w) if w > 300.0 => return Err("--window is at most 300 s (Lambda's limit)".into()),
        Some(w) => std::time::Duration::from_secs_f64(w),
        None => deployed.window,
    };
    let shards = args.stream_shards.unwrap_or(deployed.shards);
    let batch = args
        .batch_size
        .unwrap_or(u32::try_from(deployed.batch_size).unwrap_or(u32::MAX));
    let plan = esm_plan(&EsmPlanRequest::new(args.rate, shards, batch, window));
    let mut grid = Grid::new(&[("", Align::Left), ("value", Align::Right)]);
    grid.row(["changes/s".into(), format!("{:.0}", args.rate)]);
    grid.row(["batch size".into(), batch.to_string()]);
    grid.row([
        "batching window".into(),
        format!("{:.1} s", window.as_secs_f64()),
    ]);
    grid.row(["stream shards".into(), shards.to_string()]);
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
    grid.print();
    if plan.shards_needed > shards {
        println!(
            "NOT ENOUGH SHARDS: {shards} carry {:.0} records/s at 80%; give the stream {} (or on-demand)",
            f64::from(shards) * 800.0,
            plan.shards_needed
        );
    }
    Ok(())
}

/// Prints the plan as a table.
pub fn run(args: PlanArgs) -> CmdResult {
    if args.esm {
        return run_esm(&args);
    }
    let background = match (args.backgrounds, args.shards) {
        (Some(b), _) => b,
        (None, Some(n)) => {
            // `n` is at most MAX_SHARDS (the parser's range), so this cannot overflow memory.
            let n = usize::try_from(n.min(MAX_SHARDS)).map_err(|_| "--shards is too large")?;
            vec![args.background; n]
        }
        (None, None) => {
            return Err("plan needs the shards: give --shards N or --backgrounds B1,B2,…".into());
        }
    };
    if background.is_empty() || background.len() as u64 > MAX_SHARDS {
        return Err(format!(
            "--backgrounds has {} values: give 1 to {MAX_SHARDS} (one per shard)",
            background.len()
        )
        .into());
    }
    let request = PlanRequest::new(args.rate, args.ceiling, background)
        .with_target(args.target)
        .with_min_salts(args.min_salts);
    let result = match args.salts {
        Some(s) => evaluate(&request, s)?,
        None => plan(&request)?,
    };
    println!(
        "S = {} sub-keys, {:.1}/s each; every shard at or under {:.0}% of {}/s: {}",
        result.salts,
        args.rate / f64::from(result.salts),
        args.target * 100.0,
        args.ceiling,
        if result.max_utilisation <= args.target + 1e-9 {
            "yes"
        } else {
            "NO"
        }
    );
    let mut grid = Grid::new(&[
        ("shard", Align::Right),
        ("sub-keys", Align::Right),
        ("background", Align::Right),
        ("load/s", Align::Right),
        ("utilisation", Align::Right),
    ]);
    for (load, bg) in result.per_shard.iter().zip(&request.background) {
        grid.row([
            load.shard.to_string(),
            load.subkeys.to_string(),
            format!("{bg:.1}"),
            format!("{:.1}", load.load),
            format!("{:.1}%", load.utilisation * 100.0),
        ]);
    }
    grid.print();
    Ok(())
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

    #[test]
    fn out_of_range_numbers_are_clap_errors_not_panics() {
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
        assert!(run(ok.plan).is_ok());
    }

    #[test]
    fn esm_mode_needs_no_shards_and_refuses_a_window_over_lambdas_limit() {
        let ok = parse(&["--esm", "--rate", "10000", "--stream-shards", "4"]).expect("parse");
        assert!(run(ok.plan).is_ok());
        let long = parse(&["--esm", "--rate", "2400", "--window", "301"]).expect("parse");
        assert!(run(long.plan).is_err());
    }

    #[test]
    fn too_many_backgrounds_is_an_error() {
        let many = vec!["0"; 10_001].join(",");
        let cli = parse(&["--rate", "1", "--backgrounds", &many]).expect("parse");
        let err = run(cli.plan).expect_err("over 10,000 shards");
        assert!(err.to_string().contains("1 to 10000"), "{err}");
    }
}
