//! `heatsink move start|status|resume|abort|rollback|list|repair-fences`: live moves of slot
//! ranges.
//!
//! `move start` prints the move id as the first line of stdout, one progress line per phase on
//! stderr, and ends with a summary on stdout (phase durations, items copied and applied, the
//! diff, the write pause); with `--json` both are JSON lines (`{"id"}`, then the summary as
//! `MoveRecord::summary` names its fields). `status`, `resume`, `abort` and `rollback` print
//! the same summary of the record (`--json`: the whole record). A move interrupted anywhere
//! continues with `move resume ID`; every refusal names the command that gets the move out of
//! it.
//!
//! `move repair-fences` reports the fence items that refuse their own table's owner (orphans)
//! and the tables that gave slots away without one; with `--apply` it removes and writes them.
//! It is refused while a move's controller runs, and leaves every range a move still holds to
//! that move.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use heatsink::slots::mover::{Budget, MoveSpec, Mover};
use heatsink::slots::{MoveError, MoveMode, SlotRange};

use heatsink::slots::record::MoveRecord;
use heatsink::slots::repair::{FenceFix, FenceReport, repair_fences};
use serde_json::json;

use super::fail::Failure;
use super::output::{Output, print_json_line, print_lines};
use super::slots::{DirArgs, failed_on};
use super::table::{Align, Grid};
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
    /// Find fence items that refuse their own table's owner (and missing ones); --apply fixes
    /// them.
    RepairFences(RepairArgs),
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
    /// Before the copy, raise the target's warm throughput to at least the source's and the
    /// copy's rates (UpdateTable; AWS bills the raise once and never lowers it). A move whose
    /// rates are over the target's on-demand maximum is refused either way.
    #[arg(long)]
    prewarm: bool,
    #[command(flatten)]
    output: Output,
}

impl StartArgs {
    /// The arguments `slots plan --apply` starts one planned move with.
    pub fn for_plan(dir: DirArgs, slots: SlotRange, to: String, output: Output) -> Self {
        Self {
            output,
            dir,
            slots,
            to,
            mode: ModeArg::Copy,
            strict: false,
            soak: Duration::from_secs(5),
            rcu: 1_000.0,
            wcu: 1_000.0,
            prewarm: false,
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
    #[command(flatten)]
    output: Output,
}

/// Arguments of `move list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    dir: DirArgs,
    #[command(flatten)]
    output: Output,
}

/// Arguments of `move repair-fences`.
#[derive(Debug, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Remove the orphans and write the missing fences (without it: report only).
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    output: Output,
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
            prewarm: a.prewarm,
            ..Budget::default()
        },
    };
    let table = dir.table().to_owned();
    let mut mover = Mover::start(ddb, streams, dir, spec)
        .await
        .map_err(|e| failed_on(&table, "start the move in", &e))?
        .with_progress(progress());
    let id = mover.record().id.clone();
    // The id first, so a script has it for `move resume` even if the run is cut short.
    if a.output.json {
        print_json_line(&json!({"id": id}));
    } else {
        print_lines([&id]);
    }
    let record = mover
        .run()
        .await
        .map_err(|e| failed_on(&table, &format!("run move {id} in"), &e))?;
    if a.output.json {
        print_json_line(&record.summary());
    } else {
        print_lines(record_lines(record));
    }
    Ok(())
}

/// A move record for people: what moved where, the phase, the copy, the diff, the pause.
pub fn record_lines(r: &MoveRecord) -> Vec<String> {
    let mode = match r.mode {
        MoveMode::Copy => "copy",
        MoveMode::Attrition => "attrition",
    };
    let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
    let parts = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k} {v} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines = vec![
        format!(
            "move {}: slots {} {} -> {} ({mode}), phase {}",
            r.id,
            r.slots,
            r.from,
            r.to,
            r.phase.name()
        ),
        format!(
            "  copied {}, applied {}, skipped {}, cleaned {}; {:.0} RCU, {:.0} WCU",
            r.copied, r.applied, r.skipped, r.cleaned, r.rcu, r.wcu
        ),
    ];
    lines.push(match &r.diff {
        Some(d) => format!(
            "  diff: {} ({} source items, {} target, missing {}, extra {}, mismatched {})",
            if d.clean() { "clean" } else { "DIFFERENCES" },
            d.source_items,
            d.target_items,
            d.missing,
            d.extra,
            d.mismatched
        ),
        None => "  diff: not run".to_owned(),
    });
    let mut pause = format!("  write pause {}", ms(r.pause_ms));
    if !r.pause_parts_ms.is_empty() {
        pause.push_str(&format!(" ({})", parts(&r.pause_parts_ms)));
    }
    pause.push_str(&format!("; tail lag {}", ms(r.lag_ms)));
    lines.push(pause);
    if !r.phase_ms.is_empty() {
        lines.push(format!("  phases: {}", parts(&r.phase_ms)));
    }
    lines
}

/// `move repair-fences`.
async fn repair(a: RepairArgs) -> CmdResult {
    let (ddb, _) = clients().await;
    let dir = a.dir.open().await;
    let report = repair_fences(&ddb, &dir, a.apply)
        .await
        .map_err(|e| repair_failed(dir.table(), &e))?;
    a.output
        .report(|| json!(report), || repair_lines(dir.table(), &report))
}

/// `move repair-fences`'s one-line failure: a running controller is named with the command
/// to wait on it; any other failure as every move command words it.
fn repair_failed(table: &str, e: &MoveError) -> Failure {
    match e {
        MoveError::Held(h) => Failure::new(format!(
            "repair-fences refused on directory {table}: move {} is run by {} (its lease ends in {} ms); wait for it to finish ('heatsink move status {}'), then run 'heatsink move repair-fences' again",
            h.move_id, h.holder, h.left_ms, h.move_id
        )),
        other => failed_on(table, "repair the fences of", other),
    }
}

/// The fixes of `fixes` as rows: consecutive slots of one table with the same finding and
/// action share a row (`A-B`), so an orphaned range of 8,192 slots is one line.
fn fix_rows(fixes: &[FenceFix]) -> Vec<[String; 4]> {
    let found = |f: &FenceFix| match &f.found {
        Some(x) => format!(
            "-> {} at epoch {}{}",
            x.to,
            x.epoch,
            x.move_id
                .as_ref()
                .map_or(String::new(), |m| format!(" (move {m})"))
        ),
        None => "none".to_owned(),
    };
    let mut rows: Vec<([String; 4], u16, u16)> = vec![];
    for f in fixes {
        let cells = [f.table.clone(), String::new(), found(f), f.action.clone()];
        match rows.last_mut() {
            Some((last, _, end))
                if *end + 1 == f.slot
                    && last[0] == cells[0]
                    && last[2] == cells[2]
                    && last[3] == cells[3] =>
            {
                *end = f.slot;
            }
            _ => rows.push((cells, f.slot, f.slot)),
        }
    }
    rows.into_iter()
        .map(|(mut cells, first, last)| {
            cells[1] = if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            };
            cells
        })
        .collect()
}

/// `move repair-fences`'s human form: what was read, a table of what is wrong, the ranges left
/// to their moves, and the next command.
fn repair_lines(table: &str, r: &FenceReport) -> Vec<String> {
    let mut lines = vec![format!(
        "read {} fence items on {} tables ({}) of directory {table}",
        r.fences,
        r.tables.len(),
        r.tables.join(", ")
    )];
    if !r.fixes.is_empty() {
        let mut grid = Grid::new(&[
            ("TABLE", Align::Left),
            ("SLOTS", Align::Right),
            ("FENCE FOUND", Align::Left),
            (if r.applied { "DONE" } else { "TO DO" }, Align::Left),
        ]);
        for row in fix_rows(&r.fixes) {
            grid.row(row);
        }
        lines.extend(grid.lines_indented(2));
    }
    for m in &r.moving {
        lines.push(format!(
            "slots {} are held by move {}: its fences are left to it (finish it with 'heatsink move resume {}' or 'heatsink move abort {}')",
            m.slots, m.move_id, m.move_id, m.move_id
        ));
    }
    lines.push(match (r.fixes.len(), r.applied) {
        (0, _) => "no orphan or missing fence: nothing to do".to_owned(),
        (n, true) => format!("fixed {n} fence items (removals only where unchanged since read)"),
        (n, false) => format!(
            "{n} fence items to fix; nothing changed (dry run): run 'heatsink move repair-fences --apply' to fix them"
        ),
    });
    lines
}

/// Runs one `heatsink move` subcommand.
pub async fn run(command: MoveCommand) -> CmdResult {
    match command {
        MoveCommand::Start(a) => start(a).await,
        MoveCommand::RepairFences(a) => repair(a).await,
        MoveCommand::List(a) => {
            let dir = a.dir.open().await;
            let moves = Mover::list(&dir)
                .await
                .map_err(|e| failed_on(dir.table(), "list the moves of", &e))?;
            a.output.report(
                || json!(moves),
                || {
                    moves
                        .iter()
                        .map(|m| {
                            format!(
                                "{} {} {} -> {} {}",
                                m.id,
                                m.slots,
                                m.from,
                                m.to,
                                m.phase.name()
                            )
                        })
                        .collect()
                },
            )
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
            let table = dir.table().to_owned();
            let action = match what {
                "status" => format!("read move {} from", a.id),
                "rollback" => format!("roll back move {} in", a.id),
                _ => format!("{what} move {} in", a.id),
            };
            let failed = |e: MoveError| failed_on(&table, &action, &e);
            let mut mover = Mover::open(ddb, streams, dir, &a.id)
                .await
                .map_err(failed)?
                .with_progress(progress());
            match what {
                "resume" => {
                    mover.run().await.map_err(failed)?;
                }
                "abort" => mover.abort().await.map_err(failed)?,
                "rollback" => mover.rollback().await.map_err(failed)?,
                _ => {}
            }
            let record = mover.record();
            a.output.report(|| json!(record), || record_lines(record))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Value;

    use super::*;

    /// A finished copy move as the mover stores it.
    pub(crate) fn done_record() -> MoveRecord {
        serde_json::from_value(json!({
            "id": "m-1", "slots": {"first": 12067, "last": 12067}, "from": "posts", "to": "posts-p9",
            "mode": "copy", "strict": false, "phase": "done", "epoch": 1, "marked_ms": 0,
            "max_age_ms": 1000,
            "budget": {"rcu_per_sec": 1000.0, "wcu_per_sec": 1000.0, "segments": 4,
                "soak": {"secs": 5, "nanos": 0}, "lag_target": {"secs": 1, "nanos": 0}},
            "forward": {"stream_arn": "arn", "shards": {}, "fence_seen": true},
            "reverse": null, "scan": [], "scan_done": [],
            "copied": 120, "applied": 31, "skipped": 2, "rcu": 60.5, "wcu": 151.0,
            "diff": {"source_items": 120, "target_items": 120, "missing": 0, "extra": 0,
                "mismatched": 0, "samples": [], "rounds": 1},
            "phase_ms": {"copied": 800, "flipped": 40},
            "fenced_ms": 10, "pause_ms": 45, "pause_parts_ms": {"drain": 30, "fence": 15},
            "cleaned": 120, "lag_ms": 200, "rev": 9, "created_ms": 0,
        }))
        .expect("a move record")
    }

    fn orphan(slot: u16) -> FenceFix {
        FenceFix {
            table: "posts".into(),
            slot,
            found: Some(heatsink::slots::FenceItem {
                to: "posts-p9".into(),
                epoch: 2,
                move_id: Some("m-9".into()),
                token: Some(1),
            }),
            action: "remove".into(),
            why: "it refuses the owner's writes".into(),
        }
    }

    #[test]
    fn repair_fences_groups_consecutive_slots_and_says_the_next_command() {
        let mut fixes: Vec<FenceFix> = (0..=8191).map(orphan).collect();
        fixes.push(orphan(9000));
        fixes.push(FenceFix {
            table: "posts-p9".into(),
            slot: 9001,
            found: None,
            action: "write (moved to posts at epoch 3)".into(),
            why: "gave it away".into(),
        });
        let mut report = FenceReport {
            tables: vec!["posts".into(), "posts-p9".into()],
            fences: 8193,
            fixes,
            applied: false,
            moving: vec![heatsink::slots::repair::MovingRange {
                slots: SlotRange::new(12000, 12067).expect("range"),
                move_id: "m-2".into(),
            }],
        };
        let lines = repair_lines("heatsink-slots", &report);
        assert_eq!(
            lines[0],
            "read 8193 fence items on 2 tables (posts, posts-p9) of directory heatsink-slots"
        );
        assert_eq!(
            lines[1..4],
            [
                "  TABLE     SLOTS FENCE FOUND                       TO DO",
                "  posts    0-8191 -> posts-p9 at epoch 2 (move m-9) remove",
                "  posts      9000 -> posts-p9 at epoch 2 (move m-9) remove",
            ]
        );
        assert_eq!(
            lines[4],
            "  posts-p9   9001 none                              write (moved to posts at epoch 3)"
        );
        assert!(
            lines[5].starts_with("slots 12000-12067 are held by move m-2")
                && lines[5].contains("'heatsink move resume m-2'"),
            "{}",
            lines[5]
        );
        assert_eq!(
            lines[6],
            "8194 fence items to fix; nothing changed (dry run): run 'heatsink move repair-fences --apply' to fix them"
        );
        report.applied = true;
        let done = repair_lines("heatsink-slots", &report);
        assert!(done[1].ends_with("DONE"), "{}", done[1]);
        assert!(done.last().expect("line").starts_with("fixed 8194"));
        report.fixes.clear();
        report.moving.clear();
        assert_eq!(
            repair_lines("t", &report).last().map(String::as_str),
            Some("no orphan or missing fence: nothing to do")
        );
        let v: Value = serde_json::from_str(&json!(report).to_string()).expect("parses");
        assert_eq!(v["applied"], true);
    }

    #[test]
    fn a_running_controller_refuses_repair_fences_in_one_line_naming_it() {
        let held = MoveError::Held(heatsink::slots::lease::Held {
            move_id: "m-7".into(),
            holder: "host:42:ab".into(),
            until_ms: 10_000,
            left_ms: 4_200,
        });
        let line = repair_failed("heatsink-slots", &held).to_string();
        assert_eq!(line.lines().count(), 1, "{line}");
        for part in [
            "heatsink-slots",
            "m-7",
            "host:42:ab",
            "4200 ms",
            "'heatsink move status m-7'",
            "'heatsink move repair-fences' again",
        ] {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
    }

    #[test]
    fn the_summary_line_and_its_json_carry_the_same_facts() {
        let r = done_record();
        let lines = record_lines(&r);
        assert_eq!(
            lines[0],
            "move m-1: slots 12067-12067 posts -> posts-p9 (copy), phase done"
        );
        assert_eq!(
            lines[1],
            "  copied 120, applied 31, skipped 2, cleaned 120; 60 RCU, 151 WCU"
        );
        assert_eq!(
            lines[2],
            "  diff: clean (120 source items, 120 target, missing 0, extra 0, mismatched 0)"
        );
        assert_eq!(
            lines[3],
            "  write pause 45 ms (drain 30 ms, fence 15 ms); tail lag 200 ms"
        );
        assert_eq!(lines[4], "  phases: copied 800 ms, flipped 40 ms");
        let v: Value = serde_json::from_str(&r.summary().to_string()).expect("parses");
        assert_eq!(
            (v["id"].as_str(), v["phase"].as_str()),
            (Some("m-1"), Some("done"))
        );
        assert_eq!(
            (v["from"].as_str(), v["to"].as_str()),
            (Some("posts"), Some("posts-p9"))
        );
        assert_eq!(v["slots"], "12067-12067");
        for (field, n) in [
            ("copied", 120),
            ("applied", 31),
            ("skipped", 2),
            ("cleaned", 120),
            ("pause_ms", 45),
            ("lag_ms", 200),
        ] {
            assert_eq!(v[field], n, "{field}");
        }
        assert_eq!(v["pause_parts_ms"]["drain"], 30);
        assert_eq!(v["phase_ms"]["copied"], 800);
        assert_eq!(v["diff"]["missing"], 0);
        // `status --json` prints the whole record, which reads back as the same record.
        let whole: MoveRecord = serde_json::from_value(json!(r)).expect("round trip");
        assert_eq!(whole, r);
    }
}
