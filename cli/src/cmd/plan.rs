//! `heatsink plan`: size S for a hot key with the shard-load sizing rule and show each shard's
//! load (docs/write-sharding.md).

use clap::Args;
use heatsink::core::keys::{DEFAULT_TARGET, PlanRequest, evaluate, plan};

use super::CmdResult;

/// Arguments of `heatsink plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The hot key's write rate, records (or WCU) per second.
    #[arg(long)]
    rate: f64,
    /// One shard's or partition's ceiling per second (Kinesis 1,000 records; DynamoDB 1,000 WCU).
    #[arg(long, default_value_t = 1000.0)]
    ceiling: f64,
    /// Number of shards.
    #[arg(long, required_unless_present = "backgrounds")]
    shards: Option<usize>,
    /// Every shard's other traffic per second.
    #[arg(long, default_value_t = 0.0)]
    background: f64,
    /// Per-shard other traffic, comma-separated (overrides --shards/--background).
    #[arg(long, value_delimiter = ',')]
    backgrounds: Option<Vec<f64>>,
    /// Fraction of the ceiling a shard may reach.
    #[arg(long, default_value_t = DEFAULT_TARGET)]
    target: f64,
    /// Smallest S to consider (e.g. room for growth).
    #[arg(long, default_value_t = 1)]
    min_salts: u16,
    /// Evaluate this S instead of searching for the smallest that fits.
    #[arg(long)]
    salts: Option<u16>,
}

/// Prints the plan as a table.
pub fn run(args: PlanArgs) -> CmdResult {
    let background = match (args.backgrounds, args.shards) {
        (Some(b), _) => b,
        (None, Some(n)) => vec![args.background; n],
        (None, None) => return Err("give --shards or --backgrounds".into()),
    };
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
    println!(
        "{:>5} {:>9} {:>11} {:>9} {:>12}",
        "shard", "sub-keys", "background", "load/s", "utilisation"
    );
    for (load, bg) in result.per_shard.iter().zip(&request.background) {
        println!(
            "{:>5} {:>9} {:>11.1} {:>9.1} {:>11.1}%",
            load.shard,
            load.subkeys,
            bg,
            load.load,
            load.utilisation * 100.0
        );
    }
    Ok(())
}
