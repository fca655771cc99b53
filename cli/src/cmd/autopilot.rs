//! `heatsink autopilot status|pause|resume|finish|reset|plan|run`: a control loop one period at a
//! time, and its kill switch: a slot directory's loop by default, a Kinesis stream's with
//! `--stream NAME` (the loop the `autopilot` Lambda function runs every minute; its state is in
//! `<prefix>autopilot`).
//!
//! A period reads per-slot load samples, turns them into move proposals
//! (`heatsink_core::autopilot::propose::moves`: the balance line set from the mean owner load,
//! planned around the slots still cooling) and lets the governor
//! (`heatsink_core::autopilot::decide`) pick what runs, with the state kept in the directory's
//! table (`heatsink::autopilot::store`). `plan` shows the period's decision and changes
//! nothing; `run` records it (streaks, and with `--act` the operation it starts: every piece of
//! up to `--owners-per-operation` hot owners, saved *before* the first move starts) and runs
//! the pieces' moves one after another to their ends through `move start`. Without `--act` a
//! run is a dry run: it counts streaks and starts nothing.
//!
//! With `--stream`, a period samples the stream's shards instead of reading samples and runs
//! `heatsink::autopilot::stream::StreamLoop`: `run --act` records the split or merge, makes its
//! one call and returns; a later period proves its end from the shard map.

use clap::{Args, Subcommand};
use heatsink::autopilot::PilotConfig;
use heatsink::autopilot::directory::{DirectoryLoop, Load};
use heatsink::autopilot::propose::Relative;
use heatsink::autopilot::store::{PilotStore, Stored};
use heatsink::autopilot::stream::StreamLoop;
use heatsink::schema::{Schema, Table};
use heatsink::slots::SlotDirectory;
use serde_json::json;

use super::fail::{BOOTSTRAP_HINT, Failure, Service, Target, aws_call, chain, env_endpoint};
use super::output::Output;
use super::reshard::now_ms;
use super::slots::{DirArgs, SamplesArgs, failed_on, load_map};
use super::{CmdResult, sdk_config};

/// `heatsink autopilot` subcommands.
#[derive(Debug, Subcommand)]
pub enum AutopilotCommand {
    /// The loop's state: paused or not, the operation in flight, the last hour's and day's
    /// operations, the streaks.
    Status(StateArgs),
    /// Set the kill switch: the loop starts nothing from its next period until `resume`.
    Pause(PauseArgs),
    /// Clear the kill switch.
    Resume(StateArgs),
    /// Mark the operation in flight as ended (after finishing, aborting or rolling back its move
    /// by hand): the loop may start the next.
    Finish(FinishArgs),
    /// Forget the state (in flight, history, streaks), keeping the kill switch.
    Reset(StateArgs),
    /// This period's decision from the samples, as `run` would make it; changes nothing.
    Plan(PeriodArgs),
    /// One period: record the decision; with --act start the chosen move and run it to its end.
    Run(PeriodArgs),
}

/// Which loop: a slot directory's (the default) or a Kinesis stream's (`--stream`).
#[derive(Debug, Args, Clone)]
pub struct LoopArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// A Kinesis stream's loop (state in `<prefix>autopilot`), not the slot directory's.
    #[arg(long)]
    stream: Option<String>,
}

impl LoopArgs {
    /// The loop's store: the stream's item in the autopilot table, or the directory's.
    async fn store(&self) -> PilotStore {
        match &self.stream {
            Some(stream) => {
                let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
                let table = Schema::new(&self.dir.prefix).table_name(Table::Autopilot);
                PilotStore::for_stream(ddb, table, stream)
            }
            None => store_of(&self.dir.open().await),
        }
    }
}

/// Arguments naming the loop.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(flatten)]
    target: LoopArgs,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `autopilot pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    target: LoopArgs,
    /// Who pauses and why (kept with the switch, shown by `status`).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `autopilot finish`.
#[derive(Debug, Args)]
pub struct FinishArgs {
    #[command(flatten)]
    target: LoopArgs,
    /// The operation's id (`autopilot status` shows it).
    #[arg(long)]
    id: String,
    #[command(flatten)]
    output: Output,
}

/// Arguments of one period.
#[derive(Debug, Args)]
pub struct PeriodArgs {
    #[command(flatten)]
    target: LoopArgs,
    #[command(flatten)]
    load: SamplesArgs,
    /// A directory's owner load from CloudWatch: each owner table's consumed write capacity
    /// over the last N minutes; `--samples`, if given, then names the hot slots within each
    /// owner (a top-K of keys) and the rest of its load is spread over its other slots.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1440))]
    cloudwatch_minutes: Option<u32>,
    /// A directory's hysteresis as a share of the mean owner load: an owner is relieved above
    /// (1.1 + band) × the mean, destinations are filled to (1.1 − band) × the mean.
    #[arg(long, default_value = "0.1", value_parser = super::fraction)]
    band: f64,
    /// Seconds of records a stream's period samples (`--stream` only).
    #[arg(long, default_value = "60", value_parser = clap::value_parser!(u64).range(1..))]
    sample_seconds: u64,
    /// Periods in a row an owner (or shard) must need relief before an operation runs.
    #[arg(long, default_value = "2", value_parser = clap::value_parser!(u32).range(1..))]
    sustain: u32,
    /// Minutes a moved range (a split or merged shard) is left alone.
    #[arg(long, default_value = "30")]
    cooldown_minutes: u64,
    /// Operations started in any rolling hour, at most.
    #[arg(long, default_value = "4")]
    per_hour: u32,
    /// Operations started in any rolling day, at most.
    #[arg(long, default_value = "10")]
    per_day: u32,
    /// Hot owners one operation relieves (a directory's loop; a stream's takes 1): each with
    /// every piece its plan moves, run one move after another.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..))]
    owners_per_operation: u32,
    /// Run the decision (`run` only): without it the loop only reports what it would do.
    #[arg(long)]
    act: bool,
    #[command(flatten)]
    output: Output,
}

/// Runs one `heatsink autopilot` subcommand.
pub async fn run(command: AutopilotCommand) -> CmdResult {
    match command {
        AutopilotCommand::Status(a) => {
            let store = a.target.store().await;
            let stored = load_state(&store).await?;
            let now = now_ms();
            a.output
                .report(|| json!(stored.state), || status_lines(&stored, now))
        }
        // The kill switch, its lifting and the reset write without reading the state first:
        // they land even when the state no longer reads (reset is the remedy for that).
        AutopilotCommand::Pause(a) => {
            let store = a.target.store().await;
            store
                .pause(&a.reason)
                .await
                .map_err(|e| store_failed(&store, "set the autopilot's kill switch in", &e))?;
            a.output.report(
                || json!({"paused": a.reason}),
                || {
                    vec![format!(
                        "autopilot paused ({}): it starts nothing from its next period; 'heatsink autopilot resume{}' lifts it",
                        a.reason,
                        store.selector()
                    )]
                },
            )
        }
        AutopilotCommand::Resume(a) => {
            let store = a.target.store().await;
            store
                .resume()
                .await
                .map_err(|e| store_failed(&store, "clear the autopilot's kill switch in", &e))?;
            a.output.report(
                || json!({"paused": null}),
                || vec!["autopilot resumed: streaks count afresh from its next period".into()],
            )
        }
        AutopilotCommand::Finish(a) => finish(a).await,
        AutopilotCommand::Reset(a) => {
            let store = a.target.store().await;
            store
                .reset()
                .await
                .map_err(|e| store_failed(&store, "reset the autopilot's state in", &e))?;
            a.output.report(
                || json!({"reset": true}),
                || vec!["autopilot state forgotten (the kill switch, if set, stays)".into()],
            )
        }
        AutopilotCommand::Plan(a) => period(a, false).await,
        AutopilotCommand::Run(a) => period(a, true).await,
    }
}

/// A directory's autopilot store, in the directory's table.
fn store_of(dir: &SlotDirectory) -> PilotStore {
    PilotStore::new(dir.client().clone(), dir.table())
}

/// A failed call on `store`'s table as one line, with the next step for a missing table.
fn store_failed(
    store: &PilotStore,
    action: &str,
    e: &(dyn std::error::Error + 'static),
) -> Failure {
    if store.selector().is_empty() {
        return failed_on(store.table(), action, e);
    }
    Target::at(
        env_endpoint(Service::DynamoDb),
        Service::DynamoDb,
        "table",
        store.table(),
    )
    .if_missing(BOOTSTRAP_HINT)
    .fail(action, e)
}

/// The autopilot's state, or a one-line failure.
async fn load_state(store: &PilotStore) -> Result<Stored, Failure> {
    store
        .load()
        .await
        .map_err(|e| store_failed(store, "read the autopilot's state in", &e))
}

async fn finish(a: FinishArgs) -> CmdResult {
    let store = a.target.store().await;
    let mut stored = load_state(&store).await?;
    if stored.state.in_flight.as_ref().map(|s| s.id.as_str()) != Some(a.id.as_str()) {
        return Err(Failure::new(format!(
            "autopilot operation {} is not in flight in {} (in flight: {}); check the id with 'heatsink autopilot status{}'",
            a.id,
            store.table(),
            stored.state.in_flight.as_ref().map_or("none", |s| s.id.as_str()),
            store.selector()
        ))
        .into());
    }
    stored.state.finished(&a.id);
    save(&store, &stored).await?;
    a.output.report(
        || json!({"finished": a.id}),
        || vec![format!("autopilot operation {} marked ended", a.id)],
    )
}

/// Saves `stored.state` on its revision; a lost race is a one-line failure.
async fn save(store: &PilotStore, stored: &Stored) -> Result<(), Failure> {
    let won = store
        .save(&stored.state, stored.rev)
        .await
        .map_err(|e| store_failed(store, "save the autopilot's state in", &e))?;
    if won {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "another autopilot period wrote the state in {} first; nothing was started: run the period again",
            store.table()
        )))
    }
}

/// The governor's rules from the options (the act switch only for `run`).
fn pilot_config(a: &PeriodArgs, record: bool) -> Result<PilotConfig, Failure> {
    if a.per_hour > a.per_day {
        return Err(Failure::new(format!(
            "--per-hour {} exceeds --per-day {}: lower --per-hour or raise --per-day",
            a.per_hour, a.per_day
        )));
    }
    Ok(PilotConfig {
        sustain: a.sustain,
        cooldown_ms: a.cooldown_minutes.saturating_mul(60_000),
        per_hour: a.per_hour,
        per_day: a.per_day,
        act: record && a.act,
        per_operation: a.owners_per_operation,
    })
}

async fn period(a: PeriodArgs, record: bool) -> CmdResult {
    let cfg = pilot_config(&a, record)?;
    if let Some(stream) = a.target.stream.clone() {
        return stream_period(a, &stream, cfg, record).await;
    }
    let dir = a.target.dir.open().await;
    let config = super::slots_sdk_config().await;
    let mut pilot = DirectoryLoop::new(
        aws_sdk_dynamodb::Client::new(&config),
        aws_sdk_dynamodbstreams::Client::new(&config),
        dir.clone(),
    );
    pilot.pilot = cfg;
    pilot.spare = a.load.spare.clone();
    pilot.relative = Relative {
        capacity: a.load.capacity,
        band: a.band,
        ..Relative::default()
    };
    pilot.progress = Some(std::sync::Arc::new(|line: &str| eprintln!("{line}")));
    let load = match a.cloudwatch_minutes {
        None => {
            let map = load_map(&dir).await?;
            Load::Slots(a.load.read(&map.keying)?)
        }
        Some(minutes) => {
            let sampled = match &a.load.samples {
                Some(_) => a.load.read(&load_map(&dir).await?.keying)?,
                None => std::collections::BTreeMap::new(),
            };
            Load::CloudWatch {
                client: aws_sdk_cloudwatch::Client::new(&sdk_config().await),
                minutes,
                sampled,
            }
        }
    };
    let now = now_ms();
    let report = if record {
        pilot.run(now, load).await
    } else {
        pilot.plan(now, load).await
    }
    .map_err(|e| directory_failed(&dir, &e))?;
    let lines = report.lines();
    for line in &lines {
        tracing::info!(target: "heatsink::autopilot", "{line}");
    }
    a.output.report(|| json!(report), || lines)
}

/// A directory period's failure as one line: a CloudWatch read names its remedy, a state or
/// directory read the table, a move its next command.
fn directory_failed(dir: &SlotDirectory, e: &heatsink::autopilot::AutopilotError) -> Failure {
    let text = chain(e);
    match aws_call(&text) {
        Some(call) if call.service == Service::CloudWatch => Failure::new(format!(
            "{text}: reading the owners' consumed capacity from CloudWatch failed; check the endpoint and cloudwatch:GetMetricData, or plan from --samples alone"
        )),
        Some(_)
            if !matches!(
                e,
                heatsink::autopilot::AutopilotError::Move { id: Some(_), .. }
            ) =>
        {
            failed_on(dir.table(), "run the autopilot's period on", e)
        }
        _ => Failure::new(text),
    }
}

/// One period of a stream's loop ([`StreamLoop`]): `run --act` makes the chosen operation's
/// one call and returns; a later period proves its end.
async fn stream_period(a: PeriodArgs, stream: &str, cfg: PilotConfig, record: bool) -> CmdResult {
    let config = sdk_config().await;
    let store = a.target.store().await;
    let mut pilot = StreamLoop::new(aws_sdk_kinesis::Client::new(&config), store.clone(), stream);
    pilot.pilot = cfg;
    pilot.sample_secs = a.sample_seconds;
    let now = now_ms();
    let period = if record {
        pilot.run(now).await
    } else {
        pilot.plan(now).await
    }
    .map_err(|e| {
        let text = chain(&e);
        match aws_call(&text) {
            Some(call) if call.service == Service::Kinesis => Target::at(
                env_endpoint(Service::Kinesis),
                Service::Kinesis,
                "stream",
                stream,
            )
            .if_missing(BOOTSTRAP_HINT)
            .fail("run the autopilot's period on", &e),
            Some(_) => store_failed(&store, "run the autopilot's period with its state in", &e),
            None => Failure::new(text),
        }
    })?;
    let lines = period.lines();
    for line in &lines {
        tracing::info!(target: "heatsink::autopilot", "{line}");
    }
    a.output.report(|| json!(period), || lines)
}

/// `autopilot status`'s human form.
fn status_lines(stored: &Stored, now: u64) -> Vec<String> {
    let s = &stored.state;
    let hour = s
        .history
        .iter()
        .filter(|h| now.saturating_sub(h.at_ms) < 3_600_000)
        .count();
    vec![
        match &s.paused {
            Some(why) => format!("paused: {why}"),
            None => "running (not paused)".into(),
        },
        match &s.in_flight {
            Some(f) => format!("in flight: {} since {} (Unix ms)", f.id, f.at_ms),
            None => "in flight: none".into(),
        },
        format!(
            "operations: {hour} in the last hour, {} in the last day",
            s.history.len()
        ),
        format!("streaks: {}, revision {}", s.streaks.len(), stored.rev),
    ]
}
