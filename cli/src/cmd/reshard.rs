//! `heatsink reshard plan|apply`: load-aware resharding of a Kinesis stream.
//!
//! `plan` samples the last `--sample` seconds of every open shard and prints, per shard, its
//! load, the chosen split key or the refusal with its reason, and the predicted max/mean load
//! after the plan next to what a midpoint split gives. `--json` prints
//! `{"shards":[{"shard_id","load","unplaced"?,"action","split_hash_key"?,"split_hash_keys"?,
//! "merge_with"?,"reason"?}], "predicted_max_over_mean","midpoint_max_over_mean","uniform_max_over_mean"}`
//! with hash keys as decimal strings.
//! `apply` carries the plan out one call at a time, journaled in `--state` so a re-run resumes,
//! and hands the keys it refused to split for ("salt it") to the hot-key controller, which
//! salts them in the directory `<prefix>hotkeys` (a producer with `--salted` then spreads
//! them); `--no-salt` leaves the directory alone. Its `--json` prints, at the end, `{"plan": …
//! as above, "salted": [key], "not_salted": [{"key","reason"}], "done", "operations",
//! "journal"}`; progress stays on stderr.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use heatsink::hot::ControllerConfig;
use heatsink::hot::{Controller, Directory};
use heatsink::kinesis::reshard::{Action, Op, Plan, PlanConfig};
use heatsink::kinesis::reshard::{
    ApplyConfig, Journal, ReshardError, Step, apply, hand_off_hot_keys, sample_and_plan,
};
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use serde_json::{Value, json};

use super::fail::{Failure, Service, Target};
use super::output::{Output, big, print_lines};
use super::{CmdResult, sdk_config};

/// `heatsink reshard` subcommands.
#[derive(Debug, Subcommand)]
pub enum ReshardCommand {
    /// Sample the stream and print the plan.
    Plan(PlanArgs),
    /// Sample, plan and carry the plan out (or resume one from --state).
    Apply(ApplyArgs),
}

/// Arguments of `heatsink reshard plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Kinesis stream name.
    #[arg(long)]
    stream: String,
    /// Seconds of each shard to sample (read with an AT_TIMESTAMP iterator).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    sample: u64,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `heatsink reshard apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Kinesis stream name.
    #[arg(long)]
    stream: String,
    /// Seconds of each shard to sample.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    sample: u64,
    /// The journal file (default `heatsink-reshard-<stream>.json` in the current directory).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Resource name prefix of the hot-key directory (`<prefix>hotkeys`) that refused keys are
    /// handed to.
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Do not hand refused keys to the hot-key directory (only print them).
    #[arg(long)]
    no_salt: bool,
    /// Finish an unfinished journal older than the plan window (1 h) instead of refusing it
    /// for the fresh plan.
    #[arg(long)]
    resume_stale: bool,
    #[command(flatten)]
    output: Output,
}

/// Now, Unix ms (0 before the epoch).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The `--json` shape of a plan.
pub fn plan_json(p: &Plan) -> Value {
    let shards: Vec<Value> = p
        .shards
        .iter()
        .map(|s| {
            let mut v = json!({
                "shard_id": s.shard_id,
                "load": (s.load * 1e4).round() / 1e4,
                "action": match s.action {
                    Action::Split => "split",
                    Action::Merge => "merge",
                    Action::None => "none",
                    Action::Refuse => "refuse",
                },
            });
            if s.unplaced > 0.0 {
                v["unplaced"] = json!((s.unplaced * 1e4).round() / 1e4);
            }
            if let Some(k) = s.split_hash_key {
                v["split_hash_key"] = big(k);
            }
            if !s.split_hash_keys.is_empty() {
                v["split_hash_keys"] = s.split_hash_keys.iter().copied().map(big).collect();
            }
            if let Some(other) = &s.merge_with {
                v["merge_with"] = json!(other);
            }
            if let Some(r) = &s.refusal {
                v["reason"] = json!(r.reason());
            }
            v
        })
        .collect();
    json!({
        "shards": shards,
        "predicted_max_over_mean": (p.predicted_max_over_mean * 1e4).round() / 1e4,
        "midpoint_max_over_mean": (p.midpoint_max_over_mean * 1e4).round() / 1e4,
        "uniform_max_over_mean": (p.uniform_max_over_mean * 1e4).round() / 1e4,
    })
}

/// The plan's human form: one line per shard, then the predicted balance.
fn plan_lines(p: &Plan) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &p.shards {
        let what = match (s.action, &s.refusal) {
            (Action::Split, _) => format!(
                "split at {}",
                s.split_hash_keys
                    .iter()
                    .map(u128::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (Action::Merge, _) => {
                format!("merge with {}", s.merge_with.clone().unwrap_or_default())
            }
            (_, Some(r)) => format!("refuse: {}", r.reason()),
            _ => "none".to_owned(),
        };
        // Load whose placement the sample cannot see (explicit hash keys): said, not hidden.
        let unplaced = if s.unplaced > 0.0 {
            format!(" ({:.1}% placed by explicit hash keys)", s.unplaced * 100.0)
        } else {
            String::new()
        };
        lines.push(format!(
            "{:<24} load {:>6.1}%{unplaced}  {what}",
            s.shard_id,
            s.load * 100.0
        ));
    }
    lines.push(format!(
        "predicted max/mean after the plan: {:.2} (midpoint split: {:.2}, uniform UpdateShardCount: {:.2})",
        p.predicted_max_over_mean, p.midpoint_max_over_mean, p.uniform_max_over_mean
    ));
    lines
}

/// What `apply` did besides the plan: keys handed to the directory (or not, with why), and the
/// journal's progress.
#[derive(Debug, Default)]
struct Applied {
    salted: Vec<String>,
    not_salted: Vec<(String, String)>,
    done: usize,
    operations: usize,
    journal: PathBuf,
}

/// `reshard apply --json`.
fn apply_json(plan: &Plan, a: &Applied) -> Value {
    json!({
        "plan": plan_json(plan),
        "salted": a.salted,
        "not_salted": a.not_salted.iter().map(|(key, reason)| json!({"key": key, "reason": reason})).collect::<Vec<_>>(),
        "done": a.done,
        "operations": a.operations,
        "journal": a.journal.display().to_string(),
    })
}

/// `reshard apply`'s closing line.
fn applied_line(a: &Applied) -> String {
    format!(
        "{} of {} operations done; journal {}",
        a.done,
        a.operations,
        a.journal.display()
    )
}

/// Runs a `reshard` subcommand.
pub async fn run(command: ReshardCommand) -> CmdResult {
    let config = sdk_config().await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let (stream, secs) = match &command {
        ReshardCommand::Plan(a) => (a.stream.clone(), a.sample),
        ReshardCommand::Apply(a) => (a.stream.clone(), a.sample),
    };
    let target = || Target::new(&config, Service::Kinesis, "stream", &stream);
    let path = match &command {
        ReshardCommand::Apply(a) => a
            .state
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("heatsink-reshard-{stream}.json"))),
        ReshardCommand::Plan(_) => PathBuf::new(),
    };
    let state = match &command {
        ReshardCommand::Apply(_) => Journal::load(&path)
            .map_err(|e| {
                Failure::new(format!(
                    "{e}: fix or move the journal file, or give another --state (a new file starts a new plan)"
                ))
            })?
            .map(|j| j.state)
            .unwrap_or_default(),
        ReshardCommand::Plan(_) => Default::default(),
    };
    let plan = sample_and_plan(
        &kinesis,
        &stream,
        secs,
        now_ms(),
        &state,
        &PlanConfig::default(),
    )
    .await
    .map_err(|e| {
        target()
            .if_missing("check --stream, or run 'heatsink local bootstrap'")
            .fail("sample", &e)
    })?;
    match command {
        ReshardCommand::Plan(a) => a.output.report(|| plan_json(&plan), || plan_lines(&plan)),
        ReshardCommand::Apply(a) => {
            if !a.output.json {
                print_lines(plan_lines(&plan));
            }
            let mut applied = Applied {
                journal: path.clone(),
                ..Applied::default()
            };
            if !plan.hot_keys.is_empty() && !a.no_salt {
                let ddb = aws_sdk_dynamodb::Client::new(&config);
                let directory = Directory::from_schema(ddb, &Schema::new(&a.prefix));
                let table = directory.table().to_owned();
                let controller = Controller::new(directory, ControllerConfig::default());
                let report =
                    hand_off_hot_keys(&controller, &plan, &PlanConfig::default(), now_ms() / 1_000)
                        .await
                        .map_err(|e| {
                            Target::new(&config, Service::DynamoDb, "table", &table)
                                .if_missing("run 'heatsink local bootstrap', or pass --prefix")
                                .fail("hand hot keys to the directory", &e)
                        })?;
                for change in &report.applied {
                    eprintln!(
                        "salt it: {} handed to the hot-key directory {table}",
                        change.key()
                    );
                    applied.salted.push(change.key().to_owned());
                }
                for (key, why) in &report.refused {
                    eprintln!("salt it: {key} not written to {table}: {why}");
                    applied.not_salted.push((key.clone(), why.to_string()));
                }
            }
            let journal = apply(
                &kinesis,
                &stream,
                &path,
                Some(&plan),
                &ApplyConfig {
                    resume_stale: a.resume_stale,
                    ..ApplyConfig::default()
                },
                |step| match step {
                    Step::Starting { index, total, op } => {
                        let what = match op {
                            Op::Split { at, .. } => format!("SplitShard at {at}"),
                            Op::Merge { .. } => "MergeShards".to_owned(),
                        };
                        eprintln!("[{}/{total}] {what} …", index + 1);
                    }
                    Step::Backoff { code, wait } => {
                        eprintln!("  {code}: retrying in {:.1} s", wait.as_secs_f64());
                    }
                    Step::Done { index } => eprintln!("  step {} done, stream ACTIVE", index + 1),
                    Step::AlreadyDone { index } => {
                        eprintln!("  step {} was already done (resumed)", index + 1);
                    }
                },
            )
            .await
            .map_err(|e| match e {
                // These say what stopped and the next step themselves; a quota is no throttle.
                ReshardError::Quota { .. }
                | ReshardError::StaleJournal { .. }
                | ReshardError::Ledger { .. } => Failure::new(e.to_string()),
                e => target().fail("reshard", &e),
            })?;
            applied.done = journal.done;
            applied.operations = journal.ops.len();
            a.output.report(
                || apply_json(&plan, &applied),
                || vec![applied_line(&applied)],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heatsink::kinesis::reshard::{ReshardState, Sample, ShardSample, plan};

    #[test]
    fn the_json_has_the_documented_shape_with_decimal_hash_keys() {
        let samples = (0..2_000u128)
            .map(|i| Sample {
                hash_key: i << 90,
                bytes: 50,
                at_ms: 0,
                partition_key: format!("k{i}"),
            })
            .collect();
        let hot: Vec<Sample> = (0..900)
            .map(|_| Sample {
                hash_key: 7,
                bytes: 50,
                at_ms: 0,
                partition_key: "p9".into(),
            })
            .collect();
        let shards = vec![
            ShardSample::new("shardId-0", 0, (1u128 << 127) - 1, 1.0, samples),
            ShardSample::new("shardId-1", 1u128 << 127, u128::MAX, 1.0, vec![]),
        ];
        let p = plan(&shards, &ReshardState::default(), &PlanConfig::default(), 0).unwrap();
        let v = plan_json(&p);
        let first = &v["shards"][0];
        assert_eq!(first["action"], "split");
        let key: u128 = first["split_hash_key"].as_str().unwrap().parse().unwrap();
        assert!(key > 0 && key < 1u128 << 127);
        assert_eq!(v["shards"][1]["action"], "none");
        assert!(v["shards"][1].get("split_hash_key").is_none());
        assert!(v["predicted_max_over_mean"].is_number());
        assert!(v["midpoint_max_over_mean"].is_number());
        // Sorted: serde_json keeps insertion order when another crate enables `preserve_order`.
        let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "midpoint_max_over_mean",
                "predicted_max_over_mean",
                "shards",
                "uniform_max_over_mean"
            ]
        );
        // What the human form shows, the JSON carries.
        let v: Value = serde_json::from_str(&v.to_string()).expect("parses");
        let human = plan_lines(&p);
        assert!(
            human[0].starts_with("shardId-0") && human[0].contains("split at"),
            "{}",
            human[0]
        );
        let split_keys: Vec<&str> = v["shards"][0]["split_hash_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert!(
            human[0].ends_with(&format!("split at {}", split_keys.join(", "))),
            "{}",
            human[0]
        );
        let load = v["shards"][0]["load"].as_f64().unwrap() * 100.0;
        assert!(
            human[0].contains(&format!("load {load:>6.1}%")),
            "{}",
            human[0]
        );
        let last = human.last().unwrap();
        for field in [
            "predicted_max_over_mean",
            "midpoint_max_over_mean",
            "uniform_max_over_mean",
        ] {
            let shown = format!("{:.2}", v[field].as_f64().unwrap());
            assert!(last.contains(&shown), "{field} {shown} in {last}");
        }
        let applied = Applied {
            salted: vec!["p9".into()],
            not_salted: vec![("p8".into(), "changed since epoch 2".into())],
            done: 1,
            operations: 2,
            journal: PathBuf::from("j.json"),
        };
        let a: Value = serde_json::from_str(&apply_json(&p, &applied).to_string()).expect("parses");
        assert_eq!(a["plan"], v);
        assert_eq!(
            (a["done"].as_u64(), a["operations"].as_u64()),
            (Some(1), Some(2))
        );
        assert_eq!(a["journal"], "j.json");
        assert_eq!(a["salted"], json!(["p9"]));
        assert_eq!(a["not_salted"][0]["reason"], "changed since epoch 2");
        assert_eq!(
            applied_line(&applied),
            "1 of 2 operations done; journal j.json"
        );

        let refused = plan(
            &[ShardSample::new("s", 0, u128::MAX, 1.0, hot)],
            &ReshardState::default(),
            &PlanConfig::default(),
            0,
        )
        .unwrap();
        let r = &plan_json(&refused)["shards"][0];
        assert_eq!(r["action"], "refuse");
        assert!(r["reason"].as_str().unwrap().starts_with("salt it"));
    }
}
