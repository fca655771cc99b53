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
    #[arg(long, required_unless_present = "backgrounds",
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
}

/// Prints the plan as a table.
pub fn run(args: PlanArgs) -> CmdResult {
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
    fn too_many_backgrounds_is_an_error() {
        let many = vec!["0"; 10_001].join(",");
        let cli = parse(&["--rate", "1", "--backgrounds", &many]).expect("parse");
        let err = run(cli.plan).expect_err("over 10,000 shards");
        assert!(err.to_string().contains("1 to 10000"), "{err}");
    }
}
