//! `heatsink rebuild`: a whole-table recount by hand, e.g. after an incident.
//!
//! `heatsink_photo_app::rebuild::rebuild` (the scheduled function runs the incremental,
//! watermark-gated `repair` instead; this one scans): every post's durable likes are
//! counted from `liked` and each settled counter's `fix` is set so the count equals them. Posts
//! liked within `--quiet` or whose counter moved while counting are listed as unsettled and left
//! alone; run it again once they are quiet (or with `--quiet 0s` when the aggregator is known to
//! be drained, e.g. with writes stopped).

use std::time::{Duration, Instant};

use clap::Args;
use heatsink::schema::DEFAULT_PREFIX;
use heatsink_photo_app::rebuild::{RebuildOptions, RebuildReport, rebuild};
use heatsink_photo_app::schema::{Schema, Table};

use serde_json::json;

use super::fail::{Service, Target};
use super::output::Output;
use super::table::{Align, Grid};
use super::{CmdResult, parse_duration, sdk_config};

/// Arguments of `heatsink rebuild`.
#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Resource name prefix (tables `<prefix>liked` and `<prefix>counters`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Correct a post only if it had no like for this long (e.g. 60s, 0s; at most 168h).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    quiet: Duration,
    #[command(flatten)]
    output: Output,
}

/// Runs one rebuild and prints what it corrected.
pub async fn run(args: RebuildArgs) -> CmdResult {
    let schema = Schema::new(args.prefix.clone());
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    eprintln!(
        "heatsink rebuild: recounting {} into {} (quiet {:?}) …",
        schema.table_name(Table::Liked),
        schema.table_name(Table::Counters),
        args.quiet
    );
    let started = Instant::now();
    let report = rebuild(&ddb, &schema, RebuildOptions { quiet: args.quiet })
        .await
        .map_err(|e| {
            let tables = format!(
                "{} and {}",
                schema.table_name(Table::Liked),
                schema.table_name(Table::Counters)
            );
            Target::new(&config, Service::DynamoDb, "tables", tables).fail("recount", &e)
        })?;
    args.output.report(|| json!(report), || render(&report))?;
    eprintln!(
        "heatsink rebuild: done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The report for a terminal: totals, then each correction and each post left alone.
fn render(r: &RebuildReport) -> Vec<String> {
    let mut lines = vec![format!(
        "{} durable likes scanned, {} counters checked, {} corrected, {} unsettled, {} skipped",
        r.events_scanned,
        r.counters_checked,
        r.corrected.len(),
        r.unsettled.len(),
        r.skipped.len()
    )];
    let mut grid = Grid::headless(&[Align::Left, Align::Left, Align::Right, Align::Left]);
    for (post, change) in &r.corrected {
        grid.row([
            "corrected".to_owned(),
            post.clone(),
            format!("{change:+}"),
            String::new(),
        ]);
    }
    for post in &r.unsettled {
        grid.row([
            "unsettled",
            post.as_str(),
            "",
            "liked recently or counting moved; left for a later run",
        ]);
    }
    for post in &r.skipped {
        grid.row([
            "skipped",
            post.as_str(),
            "",
            "malformed id or counter items (see the log)",
        ]);
    }
    lines.extend(grid.lines_indented(2));
    lines
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        rebuild: RebuildArgs,
    }

    #[test]
    fn quiet_defaults_to_a_minute_and_reads_units() {
        let cli = Cli::try_parse_from(["rebuild"]).expect("parse");
        assert_eq!(cli.rebuild.quiet, Duration::from_secs(60));
        let cli = Cli::try_parse_from(["rebuild", "--quiet", "0s", "--json"]).expect("parse");
        assert_eq!(cli.rebuild.quiet, Duration::ZERO);
        assert!(cli.rebuild.output.json);
        assert!(Cli::try_parse_from(["rebuild", "--quiet", "soon"]).is_err());
    }

    #[test]
    fn the_report_lists_corrections_with_their_sign_and_what_was_left_alone() {
        let mut r = RebuildReport {
            events_scanned: 13,
            counters_checked: 2,
            ..RebuildReport::default()
        };
        r.corrected.insert("p1".into(), 4);
        r.corrected.insert("p2".into(), -1);
        r.unsettled.push("p9".into());
        let v: serde_json::Value = serde_json::from_str(&json!(r).to_string()).expect("parses");
        assert_eq!(
            (v["events_scanned"].as_u64(), v["counters_checked"].as_u64()),
            (Some(13), Some(2))
        );
        assert_eq!(v["corrected"], json!({"p1": 4, "p2": -1}));
        assert_eq!(v["unsettled"], json!(["p9"]));
        assert_eq!(v["skipped"], json!([]));
        let lines = render(&r);
        assert_eq!(
            lines[0],
            "13 durable likes scanned, 2 counters checked, 2 corrected, 1 unsettled, 0 skipped"
        );
        assert_eq!(lines[1], "  corrected p1 +4");
        assert_eq!(lines[2], "  corrected p2 -1");
        assert!(
            lines[3].starts_with("  unsettled p9    liked recently"),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 4);
    }
}
