//! `heatsink top`: the hottest keys of a table and its GSIs, named by Contributor Insights.

use std::time::SystemTime;

use aws_sdk_dynamodb::types::ContributorInsightsMode;
use clap::{Args, ValueEnum};
use heatsink::insights::{
    Contributor, HotKeys, Insights, InsightsError, InsightsStatus, NamedKey, ReportQuery, RuleKind,
    Source, merge,
};
use heatsink_sim::sampler::fetch_report;

use super::fail::{self, Failure, Service, Target};
use serde_json::{Value, json};

use super::output::Output;
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// Arguments of `heatsink top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Table name (its GSIs are included).
    #[arg(long, required_unless_present = "from_sampler")]
    table: Option<String>,
    /// A running sampler's base URL (e.g. `heatsink sim`'s endpoint): read its `/_sim/hot`
    /// report instead of, or with --table together with, Contributor Insights.
    #[arg(long, value_name = "URL")]
    from_sampler: Option<String>,
    /// Minutes of history to read (Contributor Insights keeps one datapoint per minute).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1440))]
    minutes: u32,
    /// Keys per rule (1–100).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=100))]
    limit: i32,
    #[command(flatten)]
    output: Output,
    /// Enable Contributor Insights on the table and every GSI, then exit.
    #[arg(long)]
    enable: bool,
    /// Mode for --enable (GSIs always get accessed-and-throttled: only their most-accessed rule
    /// shows index write throttling).
    #[arg(long, value_enum, default_value_t = Mode::AccessedAndThrottled, requires = "enable")]
    mode: Mode,
}

/// Contributor Insights mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Every access is counted and billed: names hot keys before they throttle.
    AccessedAndThrottled,
    /// Only throttled accesses are counted and billed.
    Throttled,
}

impl From<Mode> for ContributorInsightsMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::AccessedAndThrottled => Self::AccessedAndThrottledKeys,
            Mode::Throttled => Self::ThrottledKeys,
        }
    }
}

/// Prints the hottest keys, or enables Contributor Insights with `--enable`.
pub async fn run(args: TopArgs) -> CmdResult {
    let sampled = match &args.from_sampler {
        Some(url) => Some(fetch_report(url).await.map_err(|e| {
            Failure::new(format!(
                "{}: check --from-sampler (is 'heatsink sim' running and listening there?)",
                fail::chain(&e)
            ))
        })?),
        None => None,
    };
    let Some(table) = &args.table else {
        let named = merge(&[], &sampled.unwrap_or_default());
        return args
            .output
            .report(|| named_json(&named), || named_lines(&named, "the sampler"));
    };
    let config = sdk_config().await;
    let insights = Insights::new(&config);
    let failed = |action: &str, e: InsightsError| -> Failure {
        match &e {
            InsightsError::Aws(aws) if aws.service() == "DynamoDB" => {
                Target::new(&config, Service::DynamoDb, "table", aws.resource())
                    .if_missing("check --table (and the region)")
                    .fail(action, &e)
            }
            InsightsError::Aws(aws) => {
                Target::new(&config, Service::CloudWatch, "insight rule", aws.resource())
                    .if_missing(
                        "describe the table again: re-enabling Contributor Insights renames rules",
                    )
                    .fail(action, &e)
            }
            _ => Failure::new(fail::chain(&e)),
        }
    };
    if args.enable {
        let statuses = insights
            .enable(table, args.mode.into())
            .await
            .map_err(|e| failed("enable Contributor Insights on", e))?;
        return args
            .output
            .report(|| enabled_json(&statuses), || enabled_lines(&statuses));
    }
    let query = ReportQuery {
        limit: args.limit,
        ..ReportQuery::last(args.minutes, SystemTime::now())
    };
    let hot = insights
        .hot_keys(table, &query)
        .await
        .map_err(|e| failed("read the Contributor Insights report of", e))?;
    if let Some(report) = sampled {
        let what = format!("{table} (Contributor Insights) and the sampler");
        let named = merge(&hot.contributors, &report);
        return args
            .output
            .report(|| named_json(&named), || named_lines(&named, &what));
    }
    args.output
        .report(|| json!(hot), || render(table, args.minutes, &hot))
}

/// Keys named by the sampler (and Contributor Insights), hottest first.
fn named_lines(named: &[NamedKey], what: &str) -> Vec<String> {
    let mut lines = vec![format!("hot keys named by {what}, hottest first")];
    let mut grid = Grid::new(&[
        ("key", Align::Left),
        ("per s", Align::Right),
        ("source", Align::Left),
    ]);
    for n in named {
        grid.row([
            n.key.clone(),
            format!("{:.1}", n.per_second),
            source_text(&n.source),
        ]);
    }
    lines.extend(grid.lines_indented(2));
    if named.is_empty() {
        lines.push("  none over the threshold in the window".into());
    }
    lines
}

/// `top --json` for named keys: `[{"key", "per_second", "source"}]`, hottest first.
fn named_json(named: &[NamedKey]) -> Value {
    Value::Array(named.iter().map(named_key_json).collect())
}

fn source_text(source: &Source) -> String {
    match source {
        Source::Insights { target, kind } => format!("{target} {}", kind.code()),
        Source::Sampler {
            partition,
            kind,
            certain,
        } => format!(
            "sampler {partition} {kind:?}{}",
            if *certain {
                ""
            } else {
                " (within the error bound)"
            }
        ),
    }
}

fn named_key_json(n: &NamedKey) -> Value {
    json!({"key": n.key, "per_second": n.per_second, "source": source_text(&n.source)})
}

/// Each table's and index's Contributor Insights status and mode (`-` for none).
fn enabled_rows(statuses: &[InsightsStatus]) -> Vec<(String, &str, &str)> {
    statuses
        .iter()
        .map(|s| {
            let mode = s.mode.as_ref().map_or("-", |m| m.as_str());
            (s.target.to_string(), s.status_str(), mode)
        })
        .collect()
}

/// `top --enable --json`: `[{"target", "status", "mode"}]`.
fn enabled_json(statuses: &[InsightsStatus]) -> Value {
    enabled_rows(statuses)
        .iter()
        .map(|(t, s, m)| json!({"target": t, "status": s, "mode": m}))
        .collect()
}

/// `top --enable`'s human form.
fn enabled_lines(statuses: &[InsightsStatus]) -> Vec<String> {
    let mut grid = Grid::headless(&[Align::Left, Align::Left, Align::Left]);
    for (target, status, mode) in enabled_rows(statuses) {
        grid.row([target.as_str(), status, mode]);
    }
    let mut lines = grid.lines();
    lines.push(
        "the first datapoint appears about a minute after ENABLED; then run `heatsink top`".into(),
    );
    lines
}

/// The report as lines: one section per rule kind, hottest first, then the gaps.
fn render(table: &str, minutes: u32, hot: &HotKeys) -> Vec<String> {
    let mut lines = vec![format!(
        "{table}: hottest keys over the last {minutes} min (Contributor Insights, 1 datapoint/min)"
    )];
    for kind in RuleKind::ALL {
        let rows: Vec<&Contributor> = hot.contributors.iter().filter(|c| c.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        lines.push(format!("{} ({})", kind.describe(), kind.code()));
        let mut grid = Grid::new(&[
            ("table/index", Align::Left),
            ("key", Align::Left),
            ("peak/min", Align::Right),
            ("peak/s", Align::Right),
            ("total", Align::Right),
        ]);
        for c in rows {
            grid.row([
                c.target.to_string(),
                c.keys.join(" | "),
                format!("{:.0}", c.max_value),
                format!("{:.1}", c.peak_per_second()),
                format!("{:.0}", c.approximate_aggregate_value),
            ]);
        }
        lines.extend(grid.lines_indented(2));
    }
    if hot.contributors.is_empty() {
        lines.push(
            "no contributors in the window (no traffic, or enabled less than a minute ago)".into(),
        );
    }
    lines.extend(hot.gaps.iter().map(|g| format!("gap: {g}")));
    lines
}

#[cfg(test)]
mod tests {
    use heatsink::insights::{Gap, Target};

    use super::*;

    #[test]
    fn sampler_keys_print_with_their_partition_and_certainty() {
        use heatsink::detect::{Estimate, HotKey, Kind};
        let mut report = heatsink::detect::Report::default();
        report.hot.push(HotKey {
            partition: "counters/p3".into(),
            key: "likes#p9".into(),
            kind: Kind::Write,
            estimate: 2_400.0,
            lower_bound: 2_300.0,
            error_bound: 100.0,
            share_of_ceiling: 2.4,
            share_of_partition: 0.98,
            certain: false,
            sampled: Estimate {
                count: 240,
                error: 10,
            },
        });
        let named = merge(&[], &report);
        assert_eq!(
            source_text(&named[0].source),
            "sampler counters/p3 Write (within the error bound)"
        );
        let v: Value = serde_json::from_str(&named_json(&named).to_string()).expect("parses");
        assert_eq!(v[0]["per_second"], 2_400.0);
        assert_eq!(v[0]["key"], "likes#p9");
        assert_eq!(
            v[0]["source"],
            "sampler counters/p3 Write (within the error bound)"
        );
        let lines = named_lines(&named, "the sampler");
        assert!(
            lines[2].starts_with("  likes#p9 2400.0 sampler counters/p3 Write"),
            "{lines:?}"
        );
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            top: TopArgs,
        }
        use clap::Parser;
        assert!(
            Cli::try_parse_from(["top"]).is_err(),
            "--table or --from-sampler"
        );
        assert!(Cli::try_parse_from(["top", "--from-sampler", "http://127.0.0.1:8100"]).is_ok());
    }

    #[test]
    fn sections_follow_rule_kinds_and_gaps_come_last() {
        let c = Contributor {
            target: Target::table("likes"),
            rule: "DynamoDBContributorInsights-PKT-likes-1".into(),
            kind: RuleKind::Pkt,
            keys: vec!["likes#p9#3".into()],
            approximate_aggregate_value: 300.0,
            max_value: 120.0,
            period_secs: 60,
            datapoints: vec![],
        };
        let hot = HotKeys {
            contributors: vec![c],
            gaps: vec![Gap::IndexWritesUnseen {
                target: Target::index("likes", "by_user"),
            }],
        };
        let lines = render("likes", 5, &hot);
        let v: Value = serde_json::from_str(&json!(hot).to_string()).expect("parses");
        let c = &v["contributors"][0];
        assert_eq!(c["keys"], json!(["likes#p9#3"]));
        assert_eq!(c["max_value"], 120.0);
        assert_eq!(c["approximate_aggregate_value"], 300.0);
        assert_eq!(
            (c["table"].as_str(), c["rule_kind"].as_str()),
            (Some("likes"), Some("PKT"))
        );
        assert_eq!(v["gaps"].as_array().map(Vec::len), Some(1));
        assert!(lines[1].starts_with("most throttled partition keys"));
        assert!(lines[3].contains("likes#p9#3") && lines[3].contains("2.0"));
        assert!(lines[4].starts_with("gap: likes/by_user"));
    }
}
