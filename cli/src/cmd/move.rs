//! `heatsink move start|status|resume|abort|rollback|list`: live moves of slot ranges.
//!
//! `move start` prints the move id as the first line of stdout, one progress line per phase on
//! stderr, and ends with a one-line JSON summary on stdout (phase durations, items copied and
//! applied, the diff, the write pause). A move interrupted anywhere continues with
//! `move resume ID`; every refusal names the command that gets the move out of it.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use heatsink::slots::mover::{Budget, MoveSpec, Mover};
use heatsink::slots::{MoveMode, SlotRange};

use super::slots::DirArgs;
use super::{CmdResult, parse_duration, slots_sdk_config};

/// `heatsink move` subcommands.
#[derive(Debug, Subcommand)]
pub enum MoveCommand {
    /// Start a move and run it to completion.
    Start(StartArgs),
    /// Print a move's record as JSON.
    Status(IdArgs),
    /// Continue an interrupted move from its last persisted phase.
    Resume(IdArgs),
    /// Abandon a move before its flip (the source keeps the slots).
    Abort(IdArgs),
    /// Return the slots to the source after the flip (before cleanup).
    Rollback(IdArgs),
    /// List every move.
    List(ListArgs),
}

/// How the move carries the data.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Snapshot, tail, diff, fence, flip.
    Copy,
    /// No copy (TTL'd data): fence and flip at once.
    Attrition,
}

/// Arguments of `move start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The slots, `A-B` (or one slot).
    #[arg(long)]
    slots: SlotRange,
    /// The target table.
    #[arg(long)]
    to: String,
    /// Copy or attrition.
    #[arg(long, value_enum, default_value = "copy")]
    mode: ModeArg,
    /// Refuse to start unless the directory is strict.
    #[arg(long)]
    strict: bool,
    /// How long both tails run after the flip before the source copy is deleted.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    soak: Duration,
    /// Read capacity per second for the copy and the diff.
    #[arg(long, default_value = "1000", value_parser = super::positive_rate)]
    rcu: f64,
    /// Write capacity per second for the copy and the cleanup.
    #[arg(long, default_value = "1000", value_parser = super::positive_rate)]
    wcu: f64,
}

impl StartArgs {
    /// The arguments `slots plan --apply` starts one planned move with.
    pub fn for_plan(dir: DirArgs, slots: SlotRange, to: String) -> Self {
        Self {
            dir,
            slots,
            to,
            mode: ModeArg::Copy,
            strict: false,
            soak: Duration::from_secs(5),
            rcu: 1_000.0,
            wcu: 1_000.0,
        }
    }
}

/// Arguments naming one move.
#[derive(Debug, Args)]
pub struct IdArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The move id (`move list`).
    id: String,
}

/// Arguments of `move list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

async fn clients() -> (aws_sdk_dynamodb::Client, aws_sdk_dynamodbstreams::Client) {
    let config = slots_sdk_config().await;
    (
        aws_sdk_dynamodb::Client::new(&config),
        aws_sdk_dynamodbstreams::Client::new(&config),
    )
}

fn progress() -> heatsink::slots::mover::MoveProgress {
    Arc::new(|line: &str| eprintln!("{line}"))
}

/// `move start`.
pub async fn start(a: StartArgs) -> CmdResult {
    let (ddb, streams) = clients().await;
    let dir = a.dir.open().await;
    let spec = MoveSpec {
        slots: a.slots,
        to: a.to,
        mode: match a.mode {
            ModeArg::Copy => MoveMode::Copy,
            ModeArg::Attrition => MoveMode::Attrition,
        },
        strict: a.strict,
        budget: Budget {
            rcu_per_sec: a.rcu,
            wcu_per_sec: a.wcu,
            soak: a.soak,
            ..Budget::default()
        },
    };
    let mut mover = Mover::start(ddb, streams, dir, spec)
        .await?
        .with_progress(progress());
    println!("{}", mover.record().id);
    let record = mover.run().await?;
    println!("{}", record.summary());
    Ok(())
}

/// Runs one `heatsink move` subcommand.
pub async fn run(command: MoveCommand) -> CmdResult {
    match command {
        MoveCommand::Start(a) => start(a).await,
        MoveCommand::List(a) => {
            let dir = a.dir.open().await;
            let moves = Mover::list(&dir).await?;
            if a.json {
                println!("{}", serde_json::to_string(&moves)?);
            } else {
                for m in moves {
                    println!(
                        "{} {} {} -> {} {}",
                        m.id,
                        m.slots,
                        m.from,
                        m.to,
                        m.phase.name()
                    );
                }
            }
            Ok(())
        }
        other => {
            let (ddb, streams) = clients().await;
            let (a, what) = match other {
                MoveCommand::Status(a) => (a, "status"),
                MoveCommand::Resume(a) => (a, "resume"),
                MoveCommand::Abort(a) => (a, "abort"),
                MoveCommand::Rollback(a) => (a, "rollback"),
                _ => return Ok(()),
            };
            let dir = a.dir.open().await;
            let mut mover = Mover::open(ddb, streams, dir, &a.id)
                .await?
                .with_progress(progress());
            match what {
                "resume" => {
                    mover.run().await?;
                }
                "abort" => mover.abort().await?,
                "rollback" => mover.rollback().await?,
                _ => {}
            }
            println!("{}", serde_json::to_string(mover.record())?);
            Ok(())
        }
    }
}
