//! `heatsink hot set|clear|list`: edit the hot-key directory by hand.
//!
//! Every edit reads the entry and writes conditionally on its epoch, exactly like the
//! controller, so a hand edit never silently overwrites a decision made in between (it fails
//! with "changed since epoch N"; run it again). Clearing a salt entry does not delete it: writers
//! go back to the plain key while readers keep reading the old sub-keys until `--drained`.

use clap::{Args, Subcommand, ValueEnum};
use heatsink::clock::now_secs;
use heatsink::hot::{Change, Entry, Mode};
use heatsink::hot::{Directory, DirectoryError, drain};
use heatsink::schema::{DEFAULT_PREFIX, Schema};

use serde_json::{Value, json};

use super::fail::{Failure, Service, Target};
use super::output::Output;
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// The longest `--ttl`: ten years, in seconds.
pub const MAX_TTL_SECS: u64 = 10 * 365 * 86_400;

/// The highest `--limit`, requests per second (far above any one key's traffic).
pub const MAX_LIMIT: u32 = 1_000_000;

/// `heatsink hot` subcommands.
#[derive(Debug, Subcommand)]
pub enum HotCommand {
    /// List every entry (expired ones marked).
    List(ListArgs),
    /// Turn a mitigation on for a key, or change it.
    Set(SetArgs),
    /// Turn a key's mitigation off (salt: start draining; with --drained: remove).
    Clear(ClearArgs),
}

/// Where the directory is.
#[derive(Debug, Args)]
pub struct DirTarget {
    /// Resource name prefix (the directory is `<prefix>hotkeys`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
}

/// Arguments of `heatsink hot list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: DirTarget,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `heatsink hot set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    #[command(flatten)]
    target: DirTarget,
    /// The key (a partition key, or `tenant#<id>`).
    key: String,
    /// The mitigation.
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Salt mode: the number of sub-keys S (2–256).
    #[arg(long, required_if_eq("mode", "salt"), value_parser = clap::value_parser!(u16).range(2..=256))]
    salts: Option<u16>,
    /// Limit mode: requests per second admitted (1–1,000,000).
    #[arg(long, required_if_eq("mode", "limit"),
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIMIT)))]
    limit: Option<u32>,
    /// Cache and limit: seconds until the entry expires (1 s to 10 years).
    #[arg(long, default_value_t = 3_600, value_parser = clap::value_parser!(u64).range(1..=MAX_TTL_SECS))]
    ttl: u64,
    /// Why (kept in the entry).
    #[arg(long, default_value = "set by hand")]
    reason: String,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `heatsink hot clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    #[command(flatten)]
    target: DirTarget,
    /// The key.
    key: String,
    /// Salt entries: verify that every sub-key readers still read (all but the plain key) is
    /// empty in --table, then remove the entry; refuses, naming the non-empty sub-keys, if not.
    #[arg(long)]
    drained: bool,
    /// With --drained: the salted table whose items the key's sub-keys partition.
    #[arg(long, value_name = "TABLE")]
    table: Option<String>,
    /// With --drained: the table's partition-key attribute (a string holding the sub-key).
    #[arg(long, value_name = "ATTR", default_value = "pk", requires = "table")]
    key_attribute: String,
    #[command(flatten)]
    output: Output,
}

/// The mitigation named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Cache,
    Salt,
    Limit,
}

/// Runs a `heatsink hot` subcommand.
pub async fn run(command: HotCommand) -> CmdResult {
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let dir = |t: &DirTarget| Directory::from_schema(ddb.clone(), &Schema::new(&t.prefix));
    // Directory errors as one line naming the table, the endpoint and the next step.
    let failed = |dir: &Directory, action: &str, e: DirectoryError| -> Failure {
        match e {
            DirectoryError::Aws(_) => {
                Target::new(&config, Service::DynamoDb, "table", dir.table()).fail(action, &e)
            }
            other => Failure::new(other.to_string()),
        }
    };
    match command {
        HotCommand::List(args) => list(&dir(&args.target), args.output, &failed).await,
        HotCommand::Set(args) => {
            let dir = dir(&args.target);
            let current = dir
                .get(&args.key)
                .await
                .map_err(|e| failed(&dir, "read the hot-key entry from", e))?;
            let change = set(&args, current.as_ref(), now_secs())?;
            apply(&dir, change, args.output, &failed).await
        }
        HotCommand::Clear(args) => {
            let dir = dir(&args.target);
            let Some(current) = dir
                .get(&args.key)
                .await
                .map_err(|e| failed(&dir, "read the hot-key entry from", e))?
            else {
                return Err(format!(
                    "{} has no hot-key entry in {}: check the key with 'heatsink hot list' (or --prefix)",
                    args.key,
                    dir.table()
                )
                .into());
            };
            if args.drained {
                let check = drain::sub_keys_to_verify(&current)
                    .map_err(|e| format!("{}: {e}", current.key))?;
                if !check.is_empty() {
                    let table = args.table.as_deref().ok_or_else(|| {
                        format!(
                            "{}: --drained needs --table TABLE (and --key-attribute if it is not pk) to verify that {} are empty",
                            current.key,
                            check.join(", ")
                        )
                    })?;
                    let target = Target::new(&config, Service::DynamoDb, "table", table)
                        .if_missing("check --table");
                    let non_empty =
                        drain::sub_keys_holding_items(&ddb, table, &args.key_attribute, &check)
                            .await
                            .map_err(|e| target.fail("query the sub-keys of", &e))?;
                    refuse_unless_drained(&current, table, &non_empty)?;
                }
            }
            apply(&dir, clear(&current, args.drained)?, args.output, &failed).await
        }
    }
}

/// Refuses the removal of `entry` while any of its sub-keys in `table` holds items.
fn refuse_unless_drained(entry: &Entry, table: &str, non_empty: &[String]) -> Result<(), String> {
    // The drain proper (old-only sub-keys) is the core's rule; the current set is checked too
    // because removing the entry sends readers back to the plain key alone.
    let drained = entry
        .salts
        .finish_drain(&entry.key, |k| !non_empty.iter().any(|n| n == k));
    if non_empty.is_empty() && drained.is_ok() {
        return Ok(());
    }
    let next = if entry.salts.current() > 1 {
        format!(
            "start the drain with 'heatsink hot clear {}' (writers go back to the plain key), move their items to {} or delete them, then run 'heatsink hot clear {} --drained' again",
            entry.key, entry.key, entry.key
        )
    } else {
        format!(
            "move their items to {} or delete them, then run 'heatsink hot clear {} --drained' again",
            entry.key, entry.key
        )
    };
    Err(format!(
        "{}: not drained, sub-key(s) {} of table {table} still hold items (readers would stop reading them): {next}",
        entry.key,
        non_empty.join(", ")
    ))
}

/// How a directory error becomes a one-line failure.
type Failed<'a> = dyn Fn(&Directory, &str, DirectoryError) -> Failure + 'a;

async fn list(dir: &Directory, output: Output, failed: &Failed<'_>) -> CmdResult {
    let entries = dir
        .list()
        .await
        .map_err(|e| failed(dir, "list the hot-key entries of", e))?;
    output.report(
        || json!(entries),
        || list_lines(dir.table(), &entries, now_secs()),
    )
}

/// `hot list`'s human form at `now` (`--json` prints the entries as the library serializes them).
fn list_lines(table: &str, entries: &[Entry], now: u64) -> Vec<String> {
    if entries.is_empty() {
        return vec![format!("no hot keys in {table}")];
    }
    let mut grid = Grid::new(&[
        ("key", Align::Left),
        ("mode", Align::Left),
        ("S", Align::Right),
        ("limit", Align::Right),
        ("epoch", Align::Right),
        ("age", Align::Right),
        ("reason", Align::Left),
    ]);
    for e in entries {
        let salts = match e.salts.draining() {
            Some(old) => format!("{}<-{old}", e.salts.current()),
            None => e.salts.current().to_string(),
        };
        let state = match (e.is_live(now), e.calm_since) {
            (false, _) => " [expired]".to_owned(),
            (true, Some(t)) => format!(" [calm {}s]", now.saturating_sub(t)),
            (true, None) => String::new(),
        };
        grid.row([
            e.key.clone(),
            e.mode.to_string(),
            salts,
            e.limit_per_second.map_or("-".into(), |l| l.to_string()),
            e.epoch.to_string(),
            format!("{}s", now.saturating_sub(e.since)),
            format!("{}{state}", e.reason),
        ]);
    }
    grid.lines()
}

/// The change `hot set` makes, from the current entry (if any).
fn set(args: &SetArgs, current: Option<&Entry>, now: u64) -> Result<Change, String> {
    let expires = now.checked_add(args.ttl).ok_or_else(|| {
        format!(
            "--ttl {}: now + ttl overflows; give at most {MAX_TTL_SECS} s (10 years)",
            args.ttl
        )
    })?;
    let mut entry = match args.mode {
        ModeArg::Cache => Entry::cache(&args.key, &args.reason, now, expires),
        ModeArg::Limit => {
            let limit = args.limit.ok_or("--limit is required with --mode limit")?;
            if limit == 0 {
                return Err("--limit must be at least 1 request per second".into());
            }
            Entry::limit(&args.key, limit, &args.reason, now, expires)
        }
        ModeArg::Salt => {
            let salts = args.salts.ok_or("--salts is required with --mode salt")?;
            let from = current.filter(|c| c.mode == Mode::Salt).map(|c| c.salts);
            let state = from
                .unwrap_or_default()
                .transition_to(salts)
                .map_err(|e| format!("{}: {e}", args.key))?;
            let mut e =
                Entry::salt(&args.key, salts, &args.reason, now).map_err(|e| e.to_string())?;
            e.salts = state;
            e
        }
    };
    if let Some(c) = current {
        if c.mode == Mode::Salt && entry.mode != Mode::Salt && c.salts.current() > 1 {
            return Err(format!(
                "{} is salted over {} sub-keys: clear it first (writers must drain back to the plain key)",
                c.key,
                c.salts.current()
            ));
        }
        entry.epoch = c.epoch.checked_add(1).ok_or_else(|| {
            format!(
                "{}: epoch {} is at its maximum; remove the entry with 'heatsink hot clear {} --drained' and set it again",
                c.key, c.epoch, c.key
            )
        })?;
    }
    Ok(Change::Put {
        entry,
        expected_epoch: current.map(|c| c.epoch),
    })
}

/// The change `hot clear` makes.
fn clear(current: &Entry, drained: bool) -> Result<Change, String> {
    let remove = Change::Remove {
        key: current.key.clone(),
        expected_epoch: current.epoch,
    };
    match current.mode {
        Mode::Cache | Mode::Limit => Ok(remove),
        Mode::Salt if drained => Ok(remove),
        Mode::Salt if current.salts.current() == 1 => Err(format!(
            "{} is draining its old sub-keys; once they are empty run: heatsink hot clear {} --drained",
            current.key, current.key
        )),
        Mode::Salt => {
            let salts = current
                .salts
                .transition_to(1)
                .map_err(|e| format!("{}: {e}", current.key))?;
            Ok(Change::Put {
                entry: Entry {
                    salts,
                    epoch: current.epoch.saturating_add(1),
                    reason: "cleared by hand: draining".into(),
                    ..current.clone()
                },
                expected_epoch: Some(current.epoch),
            })
        }
    }
}

async fn apply(dir: &Directory, change: Change, output: Output, failed: &Failed<'_>) -> CmdResult {
    dir.apply(&change)
        .await
        .map_err(|e| failed(dir, "write the hot-key entry to", e))?;
    output.report(|| change_json(&change), || vec![change_line(&change)])
}

/// `hot set|clear --json`: `{"key", "change": "put", "entry"}` (the entry as `hot list --json`
/// prints it) or `{"key", "change": "remove"}`.
fn change_json(change: &Change) -> Value {
    match change {
        Change::Put { entry, .. } => json!({"key": entry.key, "change": "put", "entry": entry}),
        Change::Remove { key, .. } => json!({"key": key, "change": "remove"}),
    }
}

/// What `hot set|clear` did, on one line.
fn change_line(change: &Change) -> String {
    match change {
        Change::Put { entry, .. } => format!(
            "{}: {} S={}{} epoch {}",
            entry.key,
            entry.mode,
            entry.salts.current(),
            entry
                .salts
                .draining()
                .map_or(String::new(), |d| format!(" (draining {d})")),
            entry.epoch
        ),
        Change::Remove { key, .. } => format!("{key}: removed"),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        hot: HotCommand,
    }

    fn set_args(argv: &[&str]) -> SetArgs {
        let argv = ["hot", "set"].iter().chain(argv);
        match Cli::try_parse_from(argv).expect("parse").hot {
            HotCommand::Set(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn set_salt_grows_from_the_current_entry_at_its_epoch() {
        let current = Entry {
            epoch: 4,
            ..Entry::salt("p9", 4, "auto", 10).unwrap()
        };
        let change = set(
            &set_args(&["p9", "--mode", "salt", "--salts", "8"]),
            Some(&current),
            20,
        );
        let Ok(Change::Put {
            entry,
            expected_epoch,
        }) = change
        else {
            panic!("{change:?}")
        };
        assert_eq!(
            (entry.salts.current(), entry.epoch, expected_epoch),
            (8, 5, Some(4))
        );
        assert!(
            Cli::try_parse_from(["hot", "set", "p9", "--mode", "salt"]).is_err(),
            "S required"
        );
    }

    #[test]
    fn the_json_of_a_change_carries_what_its_line_says() {
        let salted = Entry::salt("likes#p9", 4, "auto", 10).unwrap();
        let Ok(drain) = clear(&salted, false) else {
            panic!()
        };
        let v: Value = serde_json::from_str(&change_json(&drain).to_string()).expect("parses");
        assert_eq!(
            change_line(&drain),
            "likes#p9: salt S=1 (draining 4) epoch 2"
        );
        assert_eq!(
            (v["key"].as_str(), v["change"].as_str()),
            (Some("likes#p9"), Some("put"))
        );
        let entry = &v["entry"];
        assert_eq!(entry["mode"], "salt");
        assert_eq!(entry["salts"], json!({"current": 1, "draining": 4}));
        assert_eq!(entry["epoch"], 2);
        let remove = clear(&Entry::cache("p1", "r", 0, 10), false).unwrap();
        assert_eq!(change_line(&remove), "p1: removed");
        assert_eq!(
            change_json(&remove),
            json!({"key": "p1", "change": "remove"})
        );
    }

    #[test]
    fn the_list_json_carries_every_column_of_the_table() {
        let mut salted = Entry::salt("likes#p9", 8, "launch day", 100).unwrap();
        salted.epoch = 3;
        let limit = Entry::limit("tenant#7", 50, "abuse", 100, 150);
        let entries = vec![salted, limit];
        let lines = list_lines("heatsink-hotkeys", &entries, 160);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["key", "mode", "S", "limit", "epoch", "age", "reason"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["likes#p9", "salt", "8<-1", "-", "3", "60s", "launch", "day"]
        );
        assert!(lines[2].contains("[expired]"), "{}", lines[2]);
        let v: Value = serde_json::from_str(&json!(entries).to_string()).expect("parses");
        let first = &v[0];
        assert_eq!(first["key"], "likes#p9");
        assert_eq!(first["mode"], "salt");
        assert_eq!(first["salts"], json!({"current": 8, "draining": 1}));
        assert_eq!(first["epoch"], 3);
        assert_eq!(first["since"], 100);
        assert_eq!(first["reason"], "launch day");
        assert_eq!(v[1]["limit_per_second"], 50);
        assert_eq!(v[1]["expires"], 150);
        assert_eq!(list_lines("t", &[], 0), ["no hot keys in t"]);
    }

    #[test]
    fn a_salted_key_cannot_be_switched_to_cache_without_draining() {
        let current = Entry::salt("p9", 4, "auto", 10).unwrap();
        let err = set(&set_args(&["p9", "--mode", "cache"]), Some(&current), 20).unwrap_err();
        assert!(err.contains("clear it first"), "{err}");
        let limit = Cli::try_parse_from(["hot", "set", "t", "--mode", "limit", "--limit", "0"]);
        assert!(limit.is_err(), "--limit 0 is refused by the parser");
    }

    #[test]
    fn clear_drains_salts_then_removes_only_when_drained() {
        let salted = Entry::salt("p9", 4, "auto", 10).unwrap();
        let Ok(Change::Put {
            entry: draining, ..
        }) = clear(&salted, false)
        else {
            panic!()
        };
        assert_eq!(
            (draining.salts.current(), draining.salts.draining()),
            (1, Some(4))
        );
        assert!(clear(&draining, false).unwrap_err().contains("--drained"));
        assert!(matches!(clear(&draining, true), Ok(Change::Remove { .. })));
        let cache = Entry::cache("p1", "r", 0, 10);
        assert!(matches!(
            clear(&cache, false),
            Ok(Change::Remove {
                expected_epoch: 1,
                ..
            })
        ));
    }

    #[test]
    fn ttl_is_bounded_and_now_plus_ttl_cannot_overflow() {
        let args = set_args(&["p1", "--mode", "cache", "--ttl", "315360000"]);
        assert!(set(&args, None, now_secs()).is_ok());
        let err = set(&args, None, u64::MAX - 5).unwrap_err();
        assert!(err.contains("overflows"), "{err}");
        let e = Cli::try_parse_from(["hot", "set", "p1", "--mode", "cache", "--ttl", "315360001"])
            .expect_err("over 10 years");
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
    }

    fn draining() -> Entry {
        let salted = Entry::salt("likes#p9", 4, "auto", 10).unwrap();
        let Ok(Change::Put { entry, .. }) = clear(&salted, false) else {
            panic!()
        };
        entry
    }

    #[test]
    fn drained_checks_every_sub_key_readers_still_read_except_the_plain_key() {
        assert_eq!(
            drain::sub_keys_to_verify(&draining()).unwrap(),
            ["likes#p9#0", "likes#p9#1", "likes#p9#2", "likes#p9#3"]
        );
        // A steady salted entry: removing it would hide its current sub-keys too.
        let steady = Entry::salt("likes#p9", 2, "auto", 10).unwrap();
        assert_eq!(
            drain::sub_keys_to_verify(&steady).unwrap(),
            ["likes#p9#0", "likes#p9#1"]
        );
        assert!(
            drain::sub_keys_to_verify(&Entry::cache("p1", "r", 0, 10))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn drained_is_refused_naming_the_non_empty_sub_keys_and_what_to_do() {
        let entry = draining();
        assert_eq!(
            refuse_unless_drained(&entry, "heatsink-counters", &[]),
            Ok(())
        );
        let err = refuse_unless_drained(
            &entry,
            "heatsink-counters",
            &["likes#p9#1".into(), "likes#p9#3".into()],
        )
        .unwrap_err();
        assert!(err.contains("likes#p9#1, likes#p9#3"), "{err}");
        assert!(err.contains("table heatsink-counters"), "{err}");
        assert!(
            err.contains("heatsink hot clear likes#p9 --drained"),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let steady = Entry::salt("likes#p9", 2, "auto", 10).unwrap();
        let err = refuse_unless_drained(&steady, "t", &["likes#p9#0".into()]).unwrap_err();
        assert!(
            err.contains("start the drain with 'heatsink hot clear likes#p9'"),
            "{err}"
        );
    }

    #[test]
    fn table_flags_belong_to_clear() {
        assert!(Cli::try_parse_from(["hot", "clear", "k", "--drained", "--table", "t"]).is_ok());
        assert!(
            Cli::try_parse_from(["hot", "clear", "k", "--key-attribute", "id"]).is_err(),
            "--key-attribute needs --table"
        );
    }
}
