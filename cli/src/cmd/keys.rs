//! `heatsink keys where`: which Kinesis shard a key, and each of its salts, lands on.

use clap::{Args, Subcommand};
use heatsink::keys::{SaltedKey, kinesis_hash_key, place_salts, shard_for};
use heatsink::kinesis::open_shard_ranges;

use super::fail::{Service, Target};
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// Subcommands of `heatsink keys`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Show the shard a partition key lands on, and where its salted sub-keys land.
    Where(WhereArgs),
}

/// Arguments of `heatsink keys where`.
#[derive(Debug, Args)]
pub struct WhereArgs {
    /// The logical partition key.
    key: String,
    /// The Kinesis stream.
    #[arg(long)]
    stream: String,
    /// Salts to show (`key#0..key#S-1`; 1–256).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    salts: u16,
}

/// Runs a `keys` subcommand.
pub async fn run(cmd: KeysCommand) -> CmdResult {
    let KeysCommand::Where(args) = cmd;
    let config = sdk_config().await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let shards = open_shard_ranges(&kinesis, &args.stream)
        .await
        .map_err(|e| {
            Target::new(&config, Service::Kinesis, "stream", &args.stream)
                .if_missing("check --stream (or run 'heatsink local bootstrap')")
                .fail("list the shards of", &e)
        })?;
    let shard_name = |hash: u128| {
        shard_for(hash, &shards)
            .map(|i| shards[i].shard_id.clone())
            .unwrap_or_else(|| "?".into())
    };
    let hash = kinesis_hash_key(&args.key);
    println!("{} open shards in {}", shards.len(), args.stream);
    let mut grid = Grid::new(&[
        ("partition key", Align::Left),
        ("hash key", Align::Left),
        ("shard", Align::Left),
    ]);
    grid.row([args.key.clone(), hash.to_string(), shard_name(hash)]);
    let salted = SaltedKey::new(args.key.clone(), args.salts)?;
    let mut used = std::collections::BTreeSet::new();
    for sub in salted.sub_keys() {
        let h = kinesis_hash_key(&sub);
        let name = shard_name(h);
        used.insert(name.clone());
        grid.row([sub, h.to_string(), name]);
    }
    grid.print();
    println!(
        "naive salts {}..{} reach {} of {} shards",
        0,
        args.salts.saturating_sub(1),
        used.len(),
        shards.len()
    );
    let placed = place_salts(&args.key, args.salts, &shards)?;
    let salts: Vec<String> = placed.sub_keys.iter().map(|s| s.salt.to_string()).collect();
    println!(
        "chosen salts [{}] spread {:?} sub-keys per shard{}",
        salts.join(", "),
        placed.per_shard,
        if placed.on_target {
            ""
        } else {
            " (best found, not even)"
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        keys: KeysCommand,
    }

    #[test]
    fn salts_are_bounded_to_1_through_256() {
        let parse =
            |s: &str| Cli::try_parse_from(["keys", "where", "p9", "--stream", "s", "--salts", s]);
        assert!(parse("256").is_ok());
        for bad in ["0", "257", "65536"] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        }
    }
}
