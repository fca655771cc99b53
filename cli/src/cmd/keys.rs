//! `heatsink keys where`: which Kinesis shard a key, and each of its salts, lands on.

use std::collections::BTreeSet;

use clap::{Args, Subcommand};
use heatsink::keys::{
    KeyError, Placement, SaltedKey, ShardRange, kinesis_hash_key, place_salts, shard_for,
};
use heatsink::kinesis::open_shard_ranges;
use serde_json::{Value, json};

use super::fail::{Failure, Service, Target};
use super::output::{Output, big};
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
    #[command(flatten)]
    output: Output,
}

/// Runs a `keys` subcommand.
pub async fn run(cmd: KeysCommand) -> CmdResult {
    let KeysCommand::Where(args) = cmd;
    let config = sdk_config().await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let target = || {
        Target::new(&config, Service::Kinesis, "stream", &args.stream)
            .if_missing("check --stream (or run 'heatsink local bootstrap')")
    };
    let shards = open_shard_ranges(&kinesis, &args.stream)
        .await
        .map_err(|e| target().fail("list the shards of", &e))?;
    let report = where_report(&args.key, args.salts, &shards).map_err(|e| {
        Failure::new(format!(
            "cannot place the salts of {} on the {} open shards of {}: {e}",
            args.key,
            shards.len(),
            args.stream
        ))
    })?;
    args.output.report(
        || where_json(&args.stream, &report),
        || where_lines(&args.stream, &report),
    )
}

/// One sub-key (or the key itself) and the shard its hash key lands on.
#[derive(Debug, Clone, PartialEq)]
struct Landing {
    partition_key: String,
    salt: Option<u32>,
    hash_key: u128,
    /// `None` when no open shard covers the hash key (a listing taken mid-reshard).
    shard_id: Option<String>,
}

/// What `keys where` found, from the stream's open shards (no I/O).
#[derive(Debug, Clone)]
struct WhereReport {
    shards: Vec<ShardRange>,
    key: Landing,
    /// `key#0` … `key#S-1`.
    naive: Vec<Landing>,
    /// The salts `place_salts` chose.
    placement: Placement,
}

impl WhereReport {
    /// Distinct shards the naive sub-keys reach.
    fn naive_reach(&self) -> usize {
        let reached: BTreeSet<&str> = self
            .naive
            .iter()
            .filter_map(|l| l.shard_id.as_deref())
            .collect();
        reached.len()
    }
}

fn landing(shards: &[ShardRange], partition_key: String, salt: Option<u32>) -> Landing {
    let hash_key = kinesis_hash_key(&partition_key);
    Landing {
        shard_id: shard_for(hash_key, shards).map(|i| shards[i].shard_id.clone()),
        partition_key,
        salt,
        hash_key,
    }
}

fn where_report(key: &str, salts: u16, shards: &[ShardRange]) -> Result<WhereReport, KeyError> {
    let salted = SaltedKey::new(key.to_owned(), salts)?;
    let naive = salted
        .sub_keys()
        .into_iter()
        .zip(0u32..)
        .map(|(sub, salt)| landing(shards, sub, Some(salt)))
        .collect();
    Ok(WhereReport {
        shards: shards.to_vec(),
        key: landing(shards, key.to_owned(), None),
        naive,
        placement: place_salts(key, salts, shards)?,
    })
}

fn landing_json(l: &Landing) -> Value {
    let mut v = json!({
        "partition_key": l.partition_key,
        "hash_key": big(l.hash_key),
        "shard_id": l.shard_id,
    });
    if let Some(salt) = l.salt {
        v["salt"] = json!(salt);
    }
    v
}

/// `keys where --json`: the key, the naive sub-keys and the placed ones, each with its hash key
/// (a decimal string) and shard; `per_shard` counts placed sub-keys in the order of `shards`.
fn where_json(stream: &str, r: &WhereReport) -> Value {
    let placed: Vec<Value> = r
        .placement
        .sub_keys
        .iter()
        .map(|p| {
            json!({
                "partition_key": p.partition_key,
                "salt": p.salt,
                "hash_key": big(p.hash_key),
                "shard_id": r.shards.get(p.shard).map(|s| s.shard_id.as_str()),
            })
        })
        .collect();
    json!({
        "stream": stream,
        "shards": r.shards.iter().map(|s| s.shard_id.as_str()).collect::<Vec<_>>(),
        "key": landing_json(&r.key),
        "salts": r.naive.len(),
        "naive": {
            "sub_keys": r.naive.iter().map(landing_json).collect::<Vec<_>>(),
            "shards_reached": r.naive_reach(),
        },
        "placed": {
            "sub_keys": placed,
            "per_shard": r.placement.per_shard,
            "on_target": r.placement.on_target,
        },
    })
}

/// `keys where`'s human form.
fn where_lines(stream: &str, r: &WhereReport) -> Vec<String> {
    let mut lines = vec![format!("{} open shards in {stream}", r.shards.len())];
    let mut grid = Grid::new(&[
        ("partition key", Align::Left),
        ("hash key", Align::Left),
        ("shard", Align::Left),
    ]);
    for l in std::iter::once(&r.key).chain(&r.naive) {
        grid.row([
            l.partition_key.clone(),
            l.hash_key.to_string(),
            l.shard_id.clone().unwrap_or_else(|| "?".into()),
        ]);
    }
    lines.extend(grid.lines());
    lines.push(format!(
        "naive salts 0..{} reach {} of {} shards",
        r.naive.len().saturating_sub(1),
        r.naive_reach(),
        r.shards.len()
    ));
    let salts: Vec<String> = r
        .placement
        .sub_keys
        .iter()
        .map(|s| s.salt.to_string())
        .collect();
    lines.push(format!(
        "chosen salts [{}] spread {:?} sub-keys per shard{}",
        salts.join(", "),
        r.placement.per_shard,
        if r.placement.on_target {
            ""
        } else {
            " (best found, not even)"
        }
    ));
    lines
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

    fn four_shards() -> Vec<ShardRange> {
        (0..4u128)
            .map(|i| ShardRange {
                shard_id: format!("shardId-00000000000{i}"),
                start: i << 126,
                end: if i == 3 {
                    u128::MAX
                } else {
                    ((i + 1) << 126) - 1
                },
            })
            .collect()
    }

    #[test]
    fn the_json_carries_what_the_table_shows() {
        let shards = four_shards();
        let r = where_report("p9", 8, &shards).expect("placed");
        let text = where_json("s", &r).to_string();
        let v: Value = serde_json::from_str(&text).expect("parses");
        let human = where_lines("s", &r);
        assert_eq!(human[0], "4 open shards in s");
        assert_eq!(v["stream"], "s");
        assert_eq!(v["shards"].as_array().map(Vec::len), Some(4));
        assert_eq!(v["key"]["partition_key"], "p9");
        let hash: u128 = v["key"]["hash_key"].as_str().unwrap().parse().unwrap();
        assert_eq!(hash, kinesis_hash_key("p9"));
        assert!(human[2].contains(&hash.to_string()), "{human:?}");
        let naive = v["naive"]["sub_keys"].as_array().unwrap();
        assert_eq!(naive.len(), 8);
        for (i, sub) in naive.iter().enumerate() {
            assert_eq!(sub["partition_key"], format!("p9#{i}"));
            assert_eq!(sub["salt"], i);
            let shard = sub["shard_id"]
                .as_str()
                .expect("every hash key has a shard");
            assert!(human[3 + i].ends_with(shard), "{}", human[3 + i]);
        }
        let reach = v["naive"]["shards_reached"].as_u64().unwrap();
        assert!(
            human[11].contains(&format!("reach {reach} of 4")),
            "{}",
            human[11]
        );
        assert_eq!(v["placed"]["sub_keys"].as_array().map(Vec::len), Some(8));
        assert_eq!(v["placed"]["per_shard"], json!([2, 2, 2, 2]));
        assert_eq!(v["placed"]["on_target"], true);
        assert!(human[12].contains("spread [2, 2, 2, 2]"), "{}", human[12]);
        assert_eq!(human.len(), 13);
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
