//! The photo app's dashboard: the toolkit's hot-key widgets, then counter lag, stream iterator
//! age, the stream consumers' leases, count-rebuilder's corrections and repair progress, the
//! aggregator's dedupe and the autopilot's periods. Every EMF series is graphed with its [`Metric::emitter`], the only
//! `Function` that writes it.

use heatsink::insights::{AlarmPlan, InsightsStatus, graph};
use serde_json::{Value, json};

use crate::metrics::{DIMENSION, Metric, NAMESPACE};

/// Period of the count-rebuilder's series: it runs every 5 minutes (the stacks' schedule).
const REBUILD_PERIOD_SECS: i32 = 300;

/// The `count-rebuilder-repair-lag` alarm's threshold (both stacks), seconds: drawn on the
/// repair-progress widget.
const REPAIR_LAG_ALARM_SECS: i32 = 900;

/// Where the dashboard's stream and function widgets look.
#[derive(Debug, Clone, PartialEq)]
pub struct DashboardSpec {
    /// AWS region of every metric.
    pub region: String,
    /// Resource prefix of the deployed functions (`<prefix>likes-aggregator`).
    pub prefix: String,
    /// The Kinesis stream of like events, if deployed.
    pub stream: Option<String>,
}

/// The photo app's own widgets (counter lag, iterator age, leases, corrections, repair
/// progress, dedupe, autopilot).
pub fn app_widgets(spec: &DashboardSpec) -> [Value; 7] {
    let graph = |title: String, props: Value| graph(&spec.region, title, props);
    let emf = |m: Metric, options: Value| {
        json!([NAMESPACE, m.name(), DIMENSION, m.emitter().name(), options])
    };
    let mut iterator_age = vec![json!([
        "AWS/Lambda", "IteratorAge", "FunctionName", format!("{}likes-aggregator", spec.prefix),
        {"stat": "Maximum"}
    ])];
    iterator_age.extend(spec.stream.iter().map(|s| {
        json!(["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", s, {"stat": "Maximum"}])
    }));
    [
        graph(
            "Counter lag: events applied, not yet flushed".into(),
            json!({"metrics": [emf(Metric::CounterLagEvents, json!({"stat": "Maximum"}))]}),
        ),
        graph(
            "Stream iterator age (ms)".into(),
            json!({"metrics": iterator_age}),
        ),
        graph(
            "Stream consumer leases (heatsink tail --emf or an embedding service)".into(),
            json!({"metrics": [
                emf(Metric::LeasesHeld, json!({"stat": "Maximum", "label": "held (max per worker)"})),
                emf(Metric::LeasesExpired, json!({"stat": "Sum", "label": "expired, taken over"})),
            ]}),
        ),
        // count-rebuilder runs every 5 minutes: one datapoint per run, not per minute.
        graph(
            "Counter corrections (count-rebuilder)".into(),
            json!({"period": REBUILD_PERIOD_SECS, "metrics": [
                emf(Metric::CounterCorrectionLikes, json!({"stat": "Sum", "label": "likes corrected"})),
                emf(Metric::CountersCorrected, json!({"stat": "Sum", "label": "counters corrected"})),
                emf(Metric::CountersUnsettled, json!({"stat": "Maximum", "label": "counters unsettled", "yAxis": "right"})),
                emf(Metric::CounterRebuildCompleted, json!({"stat": "Sum", "label": "runs completed", "yAxis": "right"})),
            ]}),
        ),
        // Proven progress behind the run's clock (the repair-lag alarm's line), blocked runs (a
        // blocked run still completes, so only its own alarm sees it), lagging checks.
        graph(
            "Counter repair progress (count-rebuilder)".into(),
            json!({"period": REBUILD_PERIOD_SECS, "metrics": [
                emf(Metric::CounterRepairLag, json!({"stat": "Maximum", "label": "proven progress behind (s)"})),
                emf(Metric::CounterRepairBlocked, json!({"stat": "Maximum", "label": "run blocked", "yAxis": "right"})),
                emf(Metric::CounterRebuildLagging, json!({"stat": "Maximum", "label": "checks lagging", "yAxis": "right"})),
            ], "annotations": {"horizontal": [{"value": REPAIR_LAG_ALARM_SECS, "label": "alarm"}]}}),
        ),
        // The aggregator's silent paths, per batch: late (counted without a duplicate check),
        // shed identities (only when above 0), duplicates dropped, foreign records skipped.
        graph(
            "Counter dedupe (likes-aggregator): late, shed, duplicates, foreign".into(),
            json!({"metrics": [
                emf(Metric::CounterLateChanges, json!({"stat": "Sum", "label": "late, counted unchecked"})),
                emf(Metric::CounterDedupeShed, json!({"stat": "Sum", "label": "identities shed"})),
                emf(Metric::CounterDuplicatesDropped, json!({"stat": "Sum", "label": "duplicates dropped", "yAxis": "right"})),
                emf(Metric::CounterForeignRecords, json!({"stat": "Sum", "label": "foreign records skipped", "yAxis": "right"})),
            ]}),
        ),
        // The stream's control loop, every minute: its heartbeat, what it proposed and
        // started, and the three states an operator must see (paused, out of budget, an
        // operation whose end the shard map does not prove).
        graph(
            "Autopilot (like-events): periods, proposals, operations, holds".into(),
            json!({"metrics": [
                emf(Metric::AutopilotPeriodCompleted, json!({"stat": "Sum", "label": "periods completed"})),
                emf(Metric::AutopilotProposals, json!({"stat": "Maximum", "label": "proposals"})),
                emf(Metric::AutopilotOperationsStarted, json!({"stat": "Sum", "label": "splits and merges started"})),
                emf(Metric::AutopilotPaused, json!({"stat": "Maximum", "label": "paused", "yAxis": "right"})),
                emf(Metric::AutopilotOutOfBudget, json!({"stat": "Maximum", "label": "waiting on budget", "yAxis": "right"})),
                emf(Metric::AutopilotUnproven, json!({"stat": "Maximum", "label": "unproven in flight", "yAxis": "right"})),
            ]}),
        ),
    ]
}

/// The whole `PutDashboard` body: [`heatsink::insights::dashboard_body`] with [`app_widgets`].
pub fn dashboard_body(
    spec: &DashboardSpec,
    plan: &AlarmPlan,
    statuses: &[InsightsStatus],
) -> Value {
    heatsink::insights::dashboard_body(&spec.region, plan, statuses, app_widgets(spec))
}

#[cfg(test)]
mod tests {
    use heatsink::insights::{RuleKind, Target};
    use heatsink::testing::enabled_status as enabled;

    use super::*;

    const TABLE: &str = "heatsink-likes";

    #[test]
    fn dashboard_shows_ceilings_contributors_throttles_and_streams() {
        let spec = DashboardSpec {
            region: "us-east-1".into(),
            prefix: "hs-".into(),
            stream: Some("hs-like-events".into()),
        };
        let plan = AlarmPlan::new("hs-", 0.8).expect("plan");
        let statuses = [
            enabled(Target::table(TABLE), &RuleKind::ALL),
            enabled(Target::index(TABLE, "by_post"), &[RuleKind::Pkc]),
        ];
        let body = dashboard_body(&spec, &plan, &statuses);
        let widgets = body["widgets"].as_array().expect("widgets");
        let titles: Vec<&str> = widgets
            .iter()
            .filter_map(|w| w["properties"]["title"].as_str())
            .collect();
        assert_eq!(
            titles
                .iter()
                .filter(|t| t.contains("hottest partition key"))
                .count(),
            2
        );
        assert_eq!(titles.iter().filter(|t| t.contains("most ")).count(), 3);
        assert_eq!(
            titles
                .iter()
                .filter(|t| t.contains("throttles by reason"))
                .count(),
            2
        );
        let text = body.to_string();
        for needle in [
            "INSIGHT_RULE_METRIC('DynamoDBContributorInsights-PKC-heatsink-likes-1700000000000', 'MaxContributorValue') / 60",
            "\"value\":800.0",
            "WriteKeyRangeThroughputThrottleEvents",
            "CounterLagEvents",
            "GetRecords.IteratorAgeMilliseconds",
            "hs-likes-aggregator",
            "LeasesHeld",
            "CounterCorrectionLikes",
        ] {
            assert!(text.contains(needle), "dashboard lacks {needle}");
        }

        // Every EMF series names the one emitter that writes it: leases come from stream
        // consumers, never from a Lambda function.
        let leases = widgets
            .iter()
            .find(|w| {
                w["properties"]["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Stream consumer leases"))
            })
            .expect("leases widget");
        let series: Vec<(&str, &str)> = leases["properties"]["metrics"]
            .as_array()
            .expect("series")
            .iter()
            .map(|m| {
                (
                    m[1].as_str().expect("metric"),
                    m[3].as_str().expect("emitter"),
                )
            })
            .collect();
        assert_eq!(
            series,
            [
                ("LeasesHeld", "stream-consumer"),
                ("LeasesExpired", "stream-consumer")
            ]
        );
        let emf_series: Vec<&Value> = widgets
            .iter()
            .filter_map(|w| w["properties"]["metrics"].as_array())
            .flatten()
            .filter(|m| m[0] == NAMESPACE)
            .collect();
        assert_eq!(
            emf_series.len(),
            20,
            "counter lag, the two lease series, the three correction series and runs completed, \
             the three repair-progress series, the four dedupe series and the six autopilot series"
        );
        for m in emf_series {
            let metric = Metric::ALL
                .iter()
                .find(|x| m[1] == x.name())
                .expect("a metric we emit");
            assert_eq!(m[2], DIMENSION);
            assert_eq!(m[3], metric.emitter().name(), "{m}");
        }
    }

    #[test]
    fn dashboard_graphs_the_rebuilders_corrections_per_run() {
        let spec = DashboardSpec {
            region: "us-east-1".into(),
            prefix: "hs-".into(),
            stream: None,
        };
        let plan = AlarmPlan::new("hs-", 0.8).expect("plan");
        let body = dashboard_body(&spec, &plan, &[]);
        let widget = body["widgets"]
            .as_array()
            .expect("widgets")
            .iter()
            .find(|w| w["properties"]["title"] == "Counter corrections (count-rebuilder)")
            .expect("corrections widget");
        // Same series as the CDK and Terraform dashboards: one datapoint per 5-minute run.
        assert_eq!(widget["properties"]["period"], 300);
        assert_eq!(
            widget["properties"]["metrics"],
            json!([
                ["heatsink", "CounterCorrectionLikes", "Function", "count-rebuilder",
                    {"stat": "Sum", "label": "likes corrected"}],
                ["heatsink", "CountersCorrected", "Function", "count-rebuilder",
                    {"stat": "Sum", "label": "counters corrected"}],
                ["heatsink", "CountersUnsettled", "Function", "count-rebuilder",
                    {"stat": "Maximum", "label": "counters unsettled", "yAxis": "right"}],
                ["heatsink", "CounterRebuildCompleted", "Function", "count-rebuilder",
                    {"stat": "Sum", "label": "runs completed", "yAxis": "right"}],
            ])
        );
    }

    /// The same series as the CDK and Terraform dashboards (`Counter repair progress`, `Counter
    /// dedupe`): the repair's lag, blocked runs and lagging checks per 5-minute run, with the
    /// repair-lag alarm's line; the aggregator's late, shed, duplicate and foreign counts.
    #[test]
    fn dashboard_graphs_the_repairs_progress_and_the_aggregators_dedupe() {
        let spec = DashboardSpec {
            region: "us-east-1".into(),
            prefix: "hs-".into(),
            stream: None,
        };
        let widgets = app_widgets(&spec);
        let titled = |title: &str| {
            widgets
                .iter()
                .find(|w| w["properties"]["title"] == title)
                .unwrap_or_else(|| panic!("{title}"))
        };
        let repair = titled("Counter repair progress (count-rebuilder)");
        assert_eq!(repair["properties"]["period"], 300);
        assert_eq!(
            repair["properties"]["annotations"],
            json!({"horizontal": [{"value": 900, "label": "alarm"}]})
        );
        assert_eq!(
            repair["properties"]["metrics"],
            json!([
                ["heatsink", "CounterRepairLag", "Function", "count-rebuilder",
                    {"stat": "Maximum", "label": "proven progress behind (s)"}],
                ["heatsink", "CounterRepairBlocked", "Function", "count-rebuilder",
                    {"stat": "Maximum", "label": "run blocked", "yAxis": "right"}],
                ["heatsink", "CounterRebuildLagging", "Function", "count-rebuilder",
                    {"stat": "Maximum", "label": "checks lagging", "yAxis": "right"}],
            ])
        );
        let dedupe = titled("Counter dedupe (likes-aggregator): late, shed, duplicates, foreign");
        assert_eq!(dedupe["properties"]["period"], 60);
        assert_eq!(
            dedupe["properties"]["metrics"],
            json!([
                ["heatsink", "CounterLateChanges", "Function", "likes-aggregator",
                    {"stat": "Sum", "label": "late, counted unchecked"}],
                ["heatsink", "CounterDedupeShed", "Function", "likes-aggregator",
                    {"stat": "Sum", "label": "identities shed"}],
                ["heatsink", "CounterDuplicatesDropped", "Function", "likes-aggregator",
                    {"stat": "Sum", "label": "duplicates dropped", "yAxis": "right"}],
                ["heatsink", "CounterForeignRecords", "Function", "likes-aggregator",
                    {"stat": "Sum", "label": "foreign records skipped", "yAxis": "right"}],
            ])
        );
    }
}
