//! `heatsink hot set|clear|list`: edit the hot-key directory by hand.
//!
//! Every edit reads the entry and writes conditionally on its epoch, exactly like the
//! controller, so a hand edit never silently overwrites a decision made in between (it fails
//! with "changed since epoch N"; run it again). Clearing a salt entry does not delete it: writers
//! go back to the plain key while readers keep reading the old sub-keys until `--drained`.

use clap::{Args, Subcommand, ValueEnum};
use heatsink::core::hot::{Change, Entry, Mode};
use heatsink::directory::{Directory, unix_now};
use heatsink::schema::{DEFAULT_PREFIX, Schema};

use super::{CmdResult, sdk_config};

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
pub struct Target {
    /// Resource name prefix (the directory is `<prefix>hotkeys`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
}

/// Arguments of `heatsink hot list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: Target,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `heatsink hot set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    #[command(flatten)]
    target: Target,
    /// The key (a partition key, or tenant#<id>).
    key: String,
    /// The mitigation.
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Salt mode: the number of sub-keys S (2–256).
    #[arg(long, required_if_eq("mode", "salt"))]
    salts: Option<u16>,
    /// Limit mode: requests per second admitted.
    #[arg(long, required_if_eq("mode", "limit"))]
    limit: Option<u32>,
    /// Cache and limit: seconds until the entry expires.
    #[arg(long, default_value_t = 3_600)]
    ttl: u64,
    /// Why (kept in the entry).
    #[arg(long, default_value = "set by hand")]
    reason: String,
}

/// Arguments of `heatsink hot clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// Salt entries: the old sub-keys are verified empty; remove the entry.
    #[arg(long)]
    drained: bool,
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
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let dir = |t: &Target| Directory::from_schema(ddb.clone(), &Schema::new(&t.prefix));
    match command {
        HotCommand::List(args) => list(&dir(&args.target), args.json).await,
        HotCommand::Set(args) => {
            let dir = dir(&args.target);
            let current = dir.get(&args.key).await?;
            let change = set(&args, current.as_ref(), unix_now())?;
            apply(&dir, change).await
        }
        HotCommand::Clear(args) => {
            let dir = dir(&args.target);
            let Some(current) = dir.get(&args.key).await? else {
                return Err(format!("{} has no hot-key entry in {}", args.key, dir.table()).into());
            };
            apply(&dir, clear(&current, args.drained)?).await
        }
    }
}

async fn list(dir: &Directory, json: bool) -> CmdResult {
    let entries = dir.list().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    if entries.is_empty() {
        println!("no hot keys in {}", dir.table());
        return Ok(());
    }
    let now = unix_now();
    println!(
        "{:<24} {:<6} {:>9} {:>6} {:>6} {:>9}  reason",
        "key", "mode", "S", "limit", "epoch", "age"
    );
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
        println!(
            "{:<24} {:<6} {:>9} {:>6} {:>6} {:>8}s  {}{state}",
            e.key,
            e.mode,
            salts,
            e.limit_per_second.map_or("-".into(), |l| l.to_string()),
            e.epoch,
            now.saturating_sub(e.since),
            e.reason
        );
    }
    Ok(())
}

/// The change `hot set` makes, from the current entry (if any).
fn set(args: &SetArgs, current: Option<&Entry>, now: u64) -> Result<Change, String> {
    let expires = now + args.ttl;
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
        entry.epoch = c.epoch + 1;
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
                    epoch: current.epoch + 1,
                    reason: "cleared by hand: draining".into(),
                    ..current.clone()
                },
                expected_epoch: Some(current.epoch),
            })
        }
    }
}

async fn apply(dir: &Directory, change: Change) -> CmdResult {
    dir.apply(&change).await?;
    match &change {
        Change::Put { entry, .. } => println!(
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
        Change::Remove { key, .. } => println!("{key}: removed"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
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
    fn a_salted_key_cannot_be_switched_to_cache_without_draining() {
        let current = Entry::salt("p9", 4, "auto", 10).unwrap();
        let err = set(&set_args(&["p9", "--mode", "cache"]), Some(&current), 20).unwrap_err();
        assert!(err.contains("clear it first"), "{err}");
        let limit = set(
            &set_args(&["t", "--mode", "limit", "--limit", "0"]),
            None,
            0,
        );
        assert!(limit.is_err());
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
}
