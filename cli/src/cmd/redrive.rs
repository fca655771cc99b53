//! `heatsink redrive`: parked batches of the aggregator back to the repair.
//!
//! The aggregator's event-source mapping parks a batch it gave up on: it sends an on-failure
//! record (shard and sequence range, not the records) to `<prefix>stream-failures` and moves on.
//! This command reads each record (from that queue, or from `--record` files), reads the range
//! back from the stream (`heatsink::counter::redrive::Redrive`), and saves the (counter, bucket)
//! checks it moved into the repair's cursor (`Repair::request`); the next repair run recounts
//! those buckets and corrects them on proof. A queue message is deleted only after its checks
//! are saved: a record whose read was not complete (past retention, the tip, a deadline), or
//! whose checks could not be saved (a repair run holds the lease, the cursor is full), stays in
//! the queue, is listed with the next step, and the command exits 1.
//!
//! The counter is the one the deployed rebuilder repairs: the photo app's likes, or the one
//! `HEATSINK_COUNTER`, `HEATSINK_COUNT_BY`, `HEATSINK_EVENTS_TABLE` and
//! `HEATSINK_EVENT_TIME_ATTRIBUTE` name.

use std::time::Duration;

use clap::Args;
use heatsink::counter::CounterStore;
use heatsink::counter::redrive::{Redrive, RedriveError, Redriven};
use heatsink::counter::repair::{Repair, RepairOptions};
use heatsink::schema::DEFAULT_PREFIX;
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::schema::Schema;
use serde_json::json;

use super::fail::{Failure, Service, Target};
use super::output::Output;
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// Arguments of `heatsink redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// Resource name prefix (tables `<prefix>counters`, `<prefix>liked`; queue
    /// `<prefix>stream-failures`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// The on-failure queue to drain, by URL or name (default `<prefix>stream-failures`).
    #[arg(long, conflicts_with = "record")]
    queue: Option<String>,
    /// Read on-failure records from these files instead of the queue (one JSON record each).
    #[arg(long, value_name = "FILE")]
    record: Vec<std::path::PathBuf>,
    /// Most queue messages taken in one run.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max: u32,
    #[command(flatten)]
    output: Output,
}

/// Drains parked batches into the repair and prints one row per batch.
pub async fn run(args: RedriveArgs) -> CmdResult {
    let schema = Schema::new(args.prefix.clone());
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let counting = Counting::from_env(&schema);
    let mapper = counting.mapper();
    let counters = CounterStore::new(ddb.clone(), counting.counters_table.clone());
    let recount = counting.bucket_recount(&ddb);
    let options = RepairOptions {
        holder: format!("heatsink-redrive-{}", heatsink::clock::now_ms()),
        // Held for one cursor read and write; a killed redrive blocks runs for at most this.
        lease: Duration::from_secs(60),
        ..RepairOptions::default()
    };
    // The repair's bucket width: the checks saved are buckets the repair judges. By hand, the
    // drain takes every batch up to --max (each read bounded by the redrive's deadline).
    let redrive = Redrive::new(&*mapper, &counting.counter, options.buckets)
        .with_kinesis(aws_sdk_kinesis::Client::new(&config))
        .with_streams(aws_sdk_dynamodbstreams::Client::new(&config))
        .drain_budget(Duration::from_secs(24 * 3600));
    let repair = Repair::new(&counters, &counting.counter, &recount, options);
    let failed = |e: RedriveError| {
        Failure::new(format!(
            "redrive stopped: {e}; check the endpoint and credentials, then run the same redrive again (saved batches were deleted, the rest are kept)"
        ))
    };
    let rows = if args.record.is_empty() {
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue = args
            .queue
            .clone()
            .unwrap_or_else(|| format!("{}stream-failures", args.prefix));
        let url = if queue.starts_with("https://") || queue.starts_with("http://") {
            queue.clone()
        } else {
            let target = Target::new(&config, Service::Sqs, "queue", queue.clone());
            sqs.get_queue_url()
                .queue_name(&queue)
                .send()
                .await
                .map_err(|e| target.sdk("find", &e))?
                .queue_url
                .unwrap_or_default()
        };
        redrive
            .drain(&sqs, &url, args.max, &repair)
            .await
            .map_err(failed)?
    } else {
        let mut rows = vec![];
        for path in &args.record {
            let bytes = std::fs::read(path)
                .map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?;
            rows.push(
                redrive
                    .redrive(path.display().to_string(), &bytes, &repair)
                    .await
                    .map_err(failed)?,
            );
        }
        rows
    };
    args.output.report(|| json!(rows), || render(&rows))?;
    let left: Vec<&Redriven> = rows.iter().filter(|r| !r.saved()).collect();
    match left.first() {
        None => Ok(()),
        Some(first) => Err(Failure::new(format!(
            "redrive: {} of {} parked batches were not redriven; first, {}: {}",
            left.len(),
            rows.len(),
            first.source,
            first.detail.as_deref().unwrap_or(first.result)
        ))
        .into()),
    }
}

/// The report for a terminal: a summary line, then one row per batch.
fn render(rows: &[Redriven]) -> Vec<String> {
    let saved = rows.iter().filter(|r| r.saved()).count();
    let checks: usize = rows.iter().filter(|r| r.saved()).map(|r| r.checks).sum();
    let mut lines = vec![format!(
        "{} parked batches: {saved} redriven ({checks} checks saved for the repair's next run), {} left",
        rows.len(),
        rows.len() - saved
    )];
    let mut grid = Grid::new(&[
        ("batch", Align::Left),
        ("result", Align::Left),
        ("shard", Align::Left),
        ("records", Align::Right),
        ("checks", Align::Right),
        ("next", Align::Left),
    ]);
    for r in rows {
        grid.row([
            r.source.clone(),
            r.result.to_owned(),
            r.shard.clone().unwrap_or_default(),
            r.records.to_string(),
            r.checks.to_string(),
            r.detail.clone().unwrap_or_default(),
        ]);
    }
    if !rows.is_empty() {
        lines.extend(grid.lines_indented(2));
    }
    lines
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        redrive: RedriveArgs,
    }

    #[test]
    fn the_queue_and_record_files_exclude_each_other_and_max_is_bounded() {
        assert!(Cli::try_parse_from(["redrive", "--queue", "q", "--record", "f"]).is_err());
        assert!(Cli::try_parse_from(["redrive", "--max", "0"]).is_err());
        let cli =
            Cli::try_parse_from(["redrive", "--record", "a", "--record", "b"]).expect("parse");
        assert_eq!(cli.redrive.record.len(), 2);
        assert_eq!(cli.redrive.max, 100);
    }

    #[test]
    fn the_report_counts_what_was_saved_and_names_the_next_step_of_the_rest() {
        let row = |result, checks, detail: Option<&str>| Redriven {
            source: "m1".into(),
            result,
            shard: Some("shardId-000000000001".into()),
            records: 3,
            checks,
            unbucketed: vec![],
            detail: detail.map(str::to_owned),
        };
        let rows = [
            row("saved", 2, None),
            row("gap", 0, Some("past retention; run `heatsink rebuild`")),
        ];
        let lines = render(&rows);
        assert_eq!(
            lines[0],
            "2 parked batches: 1 redriven (2 checks saved for the repair's next run), 1 left"
        );
        assert!(
            lines.iter().any(|l| l.contains("heatsink rebuild")),
            "{lines:?}"
        );
    }
}
