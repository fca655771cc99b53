//! `heatsink autopilot status|pause|resume|finish|reset|plan|run`: the slot directory's control
//! loop, one period at a time, and its kill switch.
//!
//! A period reads per-slot load samples, turns them into move proposals
//! (`heatsink_core::autopilot::propose::moves`: the balance line set from the mean owner load)
//! and lets the governor (`heatsink_core::autopilot::decide`) pick what runs, with the state
//! kept in the directory's table (`heatsink::slots::pilot`). `plan` shows the period's
//! decision and changes nothing; `run` records it (streaks, and with `--act` the move it starts,
//! saved *before* the move starts) and runs the move to its end through `move start`. Without
//! `--act` a run is a dry run: it counts streaks and starts nothing.

use clap::{Args, Subcommand};
use heatsink::autopilot::propose::{MoveProposal, Relative, moves};
use heatsink::autopilot::{Decision, HoldReason, Period, PilotConfig, Wait, decide};
use heatsink::slots::SlotDirectory;
use heatsink::slots::pilot::{PilotStore, Stored};
use serde_json::{Value, json};

use super::CmdResult;
use super::fail::Failure;
use super::output::Output;
use super::reshard::now_ms;
use super::slots::{DirArgs, SamplesArgs, failed, load_map, read_samples};

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

/// Arguments naming the directory.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(flatten)]
    dir: DirArgs,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `autopilot pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    dir: DirArgs,
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
    dir: DirArgs,
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
    dir: DirArgs,
    #[command(flatten)]
    load: SamplesArgs,
    /// Periods in a row an owner must need relief before a move runs.
    #[arg(long, default_value = "2", value_parser = clap::value_parser!(u32).range(1..))]
    sustain: u32,
    /// Minutes a moved range stays where it went.
    #[arg(long, default_value = "30")]
    cooldown_minutes: u64,
    /// Moves started in any rolling hour, at most.
    #[arg(long, default_value = "4")]
    per_hour: u32,
    /// Moves started in any rolling day, at most.
    #[arg(long, default_value = "10")]
    per_day: u32,
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
            let dir = a.dir.open().await;
            let stored = load_state(&dir, &store_of(&dir)).await?;
            let now = now_ms();
            a.output
                .report(|| json!(stored.state), || status_lines(&stored, now))
        }
        // The kill switch, its lifting and the reset write without reading the state first:
        // they land even when the state no longer reads (reset is the remedy for that).
        AutopilotCommand::Pause(a) => {
            let dir = a.dir.open().await;
            store_of(&dir)
                .pause(&a.reason)
                .await
                .map_err(|e| failed(&dir, "set the autopilot's kill switch in", &e))?;
            a.output.report(
                || json!({"paused": a.reason}),
                || {
                    vec![format!(
                        "autopilot paused ({}): it starts nothing from its next period; 'heatsink autopilot resume' lifts it",
                        a.reason
                    )]
                },
            )
        }
        AutopilotCommand::Resume(a) => {
            let dir = a.dir.open().await;
            store_of(&dir)
                .resume()
                .await
                .map_err(|e| failed(&dir, "clear the autopilot's kill switch in", &e))?;
            a.output.report(
                || json!({"paused": null}),
                || vec!["autopilot resumed: streaks count afresh from its next period".into()],
            )
        }
        AutopilotCommand::Finish(a) => finish(a).await,
        AutopilotCommand::Reset(a) => {
            let dir = a.dir.open().await;
            store_of(&dir)
                .reset()
                .await
                .map_err(|e| failed(&dir, "reset the autopilot's state in", &e))?;
            a.output.report(
                || json!({"reset": true}),
                || vec!["autopilot state forgotten (the kill switch, if set, stays)".into()],
            )
        }
        AutopilotCommand::Plan(a) => period(a, false).await,
        AutopilotCommand::Run(a) => period(a, true).await,
    }
}

/// The autopilot's store in the directory's table.
fn store_of(dir: &SlotDirectory) -> PilotStore {
    PilotStore::new(dir.client().clone(), dir.table())
}

/// The autopilot's state, or a one-line failure.
async fn load_state(dir: &SlotDirectory, store: &PilotStore) -> Result<Stored, Failure> {
    store
        .load()
        .await
        .map_err(|e| failed(dir, "read the autopilot's state in", &e))
}

async fn finish(a: FinishArgs) -> CmdResult {
    let dir = a.dir.open().await;
    let store = store_of(&dir);
    let mut stored = load_state(&dir, &store).await?;
    if stored.state.in_flight.as_ref().map(|s| s.id.as_str()) != Some(a.id.as_str()) {
        return Err(Failure::new(format!(
            "autopilot operation {} is not in flight in {} (in flight: {}); check the id with 'heatsink autopilot status'",
            a.id,
            dir.table(),
            stored.state.in_flight.as_ref().map_or("none", |s| s.id.as_str())
        ))
        .into());
    }
    stored.state.finished(&a.id);
    save(&store, &dir, &stored).await?;
    a.output.report(
        || json!({"finished": a.id}),
        || vec![format!("autopilot operation {} marked ended", a.id)],
    )
}

/// Saves `stored.state` on its revision; a lost race is a one-line failure.
async fn save(store: &PilotStore, dir: &SlotDirectory, stored: &Stored) -> Result<(), Failure> {
    let won = store
        .save(&stored.state, stored.rev)
        .await
        .map_err(|e| failed(dir, "save the autopilot's state in", &e))?;
    if won {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "another autopilot period wrote the state in {} first; nothing was started: run the period again",
            dir.table()
        )))
    }
}

async fn period(a: PeriodArgs, record: bool) -> CmdResult {
    if a.per_hour > a.per_day {
        return Err(Failure::new(format!(
            "--per-hour {} exceeds --per-day {}: lower --per-hour or raise --per-day",
            a.per_hour, a.per_day
        ))
        .into());
    }
    let dir = a.dir.open().await;
    let map = load_map(&dir).await?;
    let store = store_of(&dir);
    let mut stored = load_state(&dir, &store).await?;
    let load = read_samples(&a.load.samples)?;
    let rel = Relative {
        capacity: a.load.capacity,
        ..Relative::default()
    };
    let planned = moves(&map, &a.load.spare, &load, &rel);
    let cfg = PilotConfig {
        sustain: a.sustain,
        cooldown_ms: a.cooldown_minutes.saturating_mul(60_000),
        per_hour: a.per_hour,
        per_day: a.per_day,
        act: record && a.act,
    };
    let now = now_ms();
    let proposals: Vec<_> = planned.iter().map(|m| m.proposal.clone()).collect();
    let p = decide(&cfg, &stored.state, &proposals, now)
        .map_err(|e| Failure::new(format!("{e}: check the autopilot's options")))?;
    let chosen = match &p.decision {
        Decision::Run(run) => planned
            .iter()
            .find(|m| m.proposal.subject == run.subject)
            .cloned(),
        _ => None,
    };
    let lines = decision_lines(&p, &planned);
    for line in &lines {
        tracing::info!(target: "heatsink::autopilot", "{line}");
    }
    if !record {
        return a.output.report(|| period_json(&p, &planned), || lines);
    }
    stored.state.streaks = p.streaks.clone();
    let id = format!("autopilot-{now}");
    if let Some(m) = &chosen {
        // Recorded before the move starts: a period that dies here leaves the operation in
        // flight, and the loop holds until 'autopilot finish' says it ended.
        stored.state.started(&id, &m.ran(), now);
    }
    save(&store, &dir, &stored).await?;
    a.output.report(|| period_json(&p, &planned), || lines)?;
    let Some(m) = chosen else {
        return Ok(());
    };
    let args = super::r#move::StartArgs::for_plan(
        a.dir.clone(),
        m.planned.slots,
        m.planned.to.clone(),
        a.output,
    );
    if let Err(e) = super::r#move::start(args).await {
        eprintln!(
            "the autopilot holds with {id} in flight: once the move is finished, aborted or rolled back, run 'heatsink autopilot finish --id {id}'"
        );
        return Err(e);
    }
    let mut after = load_state(&dir, &store).await?;
    after.state.finished(&id);
    save(&store, &dir, &after).await?;
    Ok(())
}

fn wait_text(w: &Wait) -> String {
    match w {
        Wait::Sustain { seen, need } => format!("proposed {seen} of {need} periods in a row"),
        Wait::Cooldown { until_ms } => format!("cooldown until {until_ms} (Unix ms)"),
        Wait::Budget { until_ms } => format!("budget spent until {until_ms} (Unix ms)"),
        Wait::Outranked => "a more urgent move goes first".into(),
        Wait::Held => "the loop holds".into(),
    }
}

/// One line per decision and per waiting proposal.
fn decision_lines(p: &Period, planned: &[MoveProposal]) -> Vec<String> {
    let piece = |subject: &str| {
        planned
            .iter()
            .find(|m| m.proposal.subject == subject)
            .map_or(String::new(), |m| {
                format!(
                    "move {} {} -> {} (load {:.1})",
                    m.planned.slots, m.planned.from, m.planned.to, m.planned.load
                )
            })
    };
    let mut lines = vec![match &p.decision {
        Decision::Run(r) => format!("run: {}", piece(&r.subject)),
        Decision::DryRun(r) => format!(
            "dry run: would {}; 'heatsink autopilot run --act' runs it",
            piece(&r.subject)
        ),
        Decision::Hold(HoldReason::Paused(why)) => {
            format!("hold: paused ({why}); 'heatsink autopilot resume' lifts it")
        }
        Decision::Hold(HoldReason::InFlight(id)) => format!(
            "hold: {id} in flight; once its move has ended, 'heatsink autopilot finish --id {id}'"
        ),
        Decision::Idle if planned.is_empty() => {
            "idle: every owner within 1.2 × the mean load".into()
        }
        Decision::Idle => "idle: no proposal may run yet".into(),
    }];
    for (w, why) in &p.waiting {
        lines.push(format!(
            "  waits: {} — {}",
            piece(&w.subject),
            wait_text(why)
        ));
    }
    lines
}

fn period_json(p: &Period, planned: &[MoveProposal]) -> Value {
    json!({
        "decision": p.decision,
        "waiting": p.waiting,
        "proposals": planned,
    })
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
