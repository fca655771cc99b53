//! Tests of the Contributor Insights adapters (aws-smithy-mocks: no emulator implements them).

use aws_sdk_cloudwatch::operation::get_insight_rule_report::GetInsightRuleReportOutput;
use aws_sdk_cloudwatch::operation::put_metric_alarm::PutMetricAlarmOutput;
use aws_sdk_cloudwatch::types::{InsightRuleContributorDatapoint, InsightRuleMetricDatapoint};
use aws_sdk_dynamodb::operation::describe_contributor_insights::DescribeContributorInsightsOutput;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
use aws_sdk_dynamodb::operation::list_contributor_insights::ListContributorInsightsOutput;
use aws_sdk_dynamodb::operation::update_contributor_insights::UpdateContributorInsightsOutput;
use aws_sdk_dynamodb::types::{
    ContributorInsightsSummary, GlobalSecondaryIndexDescription, TableDescription,
};
use aws_smithy_mocks::{Rule, mock};
use heatsink_core::detect::{Estimate, HotKey};

use super::*;
use crate::testing::mocked;
use crate::testing::{enabled_status as enabled, rule_name};

const TABLE: &str = "heatsink-likes";
const EPOCH: i64 = 1_700_000_000;

fn describe_table(gsis: &[&str]) -> Rule {
    let gsis: Vec<_> = gsis
        .iter()
        .map(|g| {
            GlobalSecondaryIndexDescription::builder()
                .index_name(*g)
                .build()
        })
        .collect();
    mock!(aws_sdk_dynamodb::Client::describe_table).then_output(move || {
        DescribeTableOutput::builder()
            .table(
                TableDescription::builder()
                    .table_name(TABLE)
                    .set_global_secondary_indexes(Some(gsis.clone()))
                    .build(),
            )
            .build()
    })
}

/// DescribeContributorInsights of `index` (None: the table) as the API reference shapes it.
fn describe_insights(index: Option<&'static str>, mode: &'static str, kinds: &[&str]) -> Rule {
    let slug = index.map_or(TABLE.to_owned(), |i| format!("{TABLE}-{i}"));
    let rules: Vec<String> = kinds.iter().map(|k| rule_name(k, &slug)).collect();
    mock!(aws_sdk_dynamodb::Client::describe_contributor_insights)
        .match_requests(move |r| r.index_name() == index)
        .then_output(move || {
            DescribeContributorInsightsOutput::builder()
                .table_name(TABLE)
                .set_index_name(index.map(str::to_owned))
                .set_contributor_insights_rule_list(Some(rules.clone()))
                .contributor_insights_status(ContributorInsightsStatus::Enabled)
                .contributor_insights_mode(ContributorInsightsMode::from(mode))
                .build()
        })
}

/// A GetInsightRuleReport answer for `rule` with `(keys, per-minute values)` contributors.
fn report(rule: String, contributors: Vec<(Vec<&'static str>, Vec<f64>)>) -> Rule {
    mock!(aws_sdk_cloudwatch::Client::get_insight_rule_report)
        .match_requests(move |r| r.rule_name() == Some(rule.as_str()))
        .then_output(move || {
            let contributors: Vec<InsightRuleContributor> = contributors
                .iter()
                .map(|(keys, values)| {
                    let points = values.iter().enumerate().map(|(i, v)| {
                        InsightRuleContributorDatapoint::builder()
                            .timestamp(DateTime::from_secs(EPOCH + 60 * i as i64))
                            .approximate_value(*v)
                            .build()
                    });
                    InsightRuleContributor::builder()
                        .set_keys(Some(keys.iter().map(|k| k.to_string()).collect()))
                        .approximate_aggregate_value(values.iter().sum())
                        .set_datapoints(Some(points.collect()))
                        .build()
                })
                .collect();
            GetInsightRuleReportOutput::builder()
                .key_labels("pk")
                .aggregation_statistic("Sum")
                .aggregate_value(
                    contributors
                        .iter()
                        .filter_map(|c| c.approximate_aggregate_value)
                        .sum(),
                )
                .approximate_unique_count(contributors.len() as i64)
                .set_contributors(Some(contributors))
                .metric_datapoints(
                    InsightRuleMetricDatapoint::builder()
                        .timestamp(DateTime::from_secs(EPOCH))
                        .max_contributor_value(0.0)
                        .build(),
                )
                .build()
        })
}

fn query() -> ReportQuery {
    ReportQuery::last(
        5,
        SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH as u64 + 300),
    )
}

#[tokio::test]
async fn mocked_report_names_hot_partition_key() {
    let table = describe_table(&[]);
    let insights = describe_insights(
        None,
        "ACCESSED_AND_THROTTLED_KEYS",
        &["PKC", "PKT", "SKC", "SKT"],
    );
    let pkc = report(
        rule_name("PKC", TABLE),
        vec![
            (vec!["likes#p9#3"], vec![30_000.0, 144_000.0, 90_000.0]),
            (vec!["likes#p1#0"], vec![600.0, 660.0, 540.0]),
        ],
    );
    let pkt = report(
        rule_name("PKT", TABLE),
        vec![(vec!["likes#p9#3"], vec![0.0, 120.0])],
    );
    let skc = report(rule_name("SKC", TABLE), vec![]);
    let ddb = mocked!(aws_sdk_dynamodb, table, insights);
    let cw = mocked!(aws_sdk_cloudwatch, pkc, pkt, skc);
    let hot = Insights::from_clients(ddb, cw)
        .hot_keys(TABLE, &query())
        .await
        .expect("report");
    assert!(hot.gaps.is_empty());
    let named: Vec<_> = hot
        .contributors
        .iter()
        .map(|c| (c.partition_key(), c.kind, c.max_value))
        .collect();
    assert_eq!(
        named,
        [
            (Some("likes#p9#3"), RuleKind::Pkc, 144_000.0),
            (Some("likes#p1#0"), RuleKind::Pkc, 660.0),
            (Some("likes#p9#3"), RuleKind::Pkt, 120.0),
        ]
    );
    let top = &hot.contributors[0];
    assert_eq!(top.peak_per_second(), 2_400.0);
    assert_eq!(top.approximate_aggregate_value, 264_000.0);
    assert_eq!(
        top.datapoints[1],
        Datapoint {
            epoch_secs: EPOCH + 60,
            value: 144_000.0
        }
    );
    assert_eq!(top.target, Target::table(TABLE));
    assert_eq!(skc.num_calls(), 0, "SKC is not read unless asked for");
}

#[tokio::test]
async fn mocked_empty_report_yields_no_contributors() {
    let ddb = mocked!(
        aws_sdk_dynamodb,
        describe_table(&[]),
        describe_insights(None, "ACCESSED_AND_THROTTLED_KEYS", &["PKC", "PKT"])
    );
    let cw = mocked!(
        aws_sdk_cloudwatch,
        report(rule_name("PKC", TABLE), vec![]),
        report(rule_name("PKT", TABLE), vec![])
    );
    let hot = Insights::from_clients(ddb, cw)
        .hot_keys(TABLE, &query())
        .await;
    assert_eq!(hot.expect("empty is fine"), HotKeys::default());
}

#[tokio::test]
async fn mocked_missing_table_is_a_typed_error() {
    use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
    let missing = mock!(aws_sdk_dynamodb::Client::describe_table).then_error(|| {
        DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("Requested resource not found")
                .build(),
        )
    });
    let insights = Insights::from_clients(
        mocked!(aws_sdk_dynamodb, missing),
        mocked!(aws_sdk_cloudwatch),
    );
    let err = insights
        .hot_keys("nope", &query())
        .await
        .expect_err("missing table");
    assert!(
        matches!(&err, InsightsError::TableNotFound { table } if table == "nope"),
        "{err}"
    );
}

#[tokio::test]
async fn mocked_deleted_rule_is_a_typed_error() {
    use aws_sdk_cloudwatch::types::error::ResourceNotFoundException;
    let gone = mock!(aws_sdk_cloudwatch::Client::get_insight_rule_report).then_error(|| {
        GetInsightRuleReportError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("rule not found")
                .build(),
        )
    });
    let insights =
        Insights::from_clients(mocked!(aws_sdk_dynamodb), mocked!(aws_sdk_cloudwatch, gone));
    let rule = InsightRule::new(Target::table(TABLE), rule_name("PKC", TABLE)).expect("rule");
    let err = insights
        .rule_report(&rule, &query())
        .await
        .expect_err("gone");
    assert!(
        matches!(&err, InsightsError::RuleNotFound { rule: r } if *r == rule.name),
        "{err}"
    );
}

#[tokio::test]
async fn mocked_disabled_table_asks_to_enable() {
    let disabled =
        mock!(aws_sdk_dynamodb::Client::describe_contributor_insights).then_output(|| {
            DescribeContributorInsightsOutput::builder()
                .table_name(TABLE)
                .contributor_insights_status(ContributorInsightsStatus::Disabled)
                .build()
        });
    let ddb = mocked!(aws_sdk_dynamodb, describe_table(&[]), disabled);
    let err = Insights::from_clients(ddb, mocked!(aws_sdk_cloudwatch))
        .hot_keys(TABLE, &query())
        .await
        .expect_err("disabled");
    assert!(matches!(err, InsightsError::Disabled { ref status, .. } if status == "DISABLED"));
    assert!(
        err.to_string()
            .contains("heatsink top --table heatsink-likes --enable"),
        "{err}"
    );
}

#[tokio::test]
async fn mocked_enable_covers_the_table_and_every_gsi() {
    let update =
        mock!(aws_sdk_dynamodb::Client::update_contributor_insights).then_compute_output(|r| {
            UpdateContributorInsightsOutput::builder()
                .set_table_name(r.table_name().map(str::to_owned))
                .set_index_name(r.index_name().map(str::to_owned))
                .contributor_insights_status(ContributorInsightsStatus::Enabling)
                .set_contributor_insights_mode(r.contributor_insights_mode().cloned())
                .build()
        });
    let ddb = mocked!(
        aws_sdk_dynamodb,
        describe_table(&["by_post", "by_user"]),
        update
    );
    let statuses = Insights::from_clients(ddb, mocked!(aws_sdk_cloudwatch))
        .enable(TABLE, ContributorInsightsMode::ThrottledKeys)
        .await
        .expect("enable");
    let got: Vec<_> = statuses
        .iter()
        .map(|s| {
            (
                s.target.to_string(),
                s.mode.clone(),
                s.status_str().to_owned(),
            )
        })
        .collect();
    let both = Some(ContributorInsightsMode::AccessedAndThrottledKeys);
    assert_eq!(
        got,
        [
            (
                TABLE.to_owned(),
                Some(ContributorInsightsMode::ThrottledKeys),
                "ENABLING".to_owned()
            ),
            (
                format!("{TABLE}/by_post"),
                both.clone(),
                "ENABLING".to_owned()
            ),
            (format!("{TABLE}/by_user"), both, "ENABLING".to_owned()),
        ]
    );
    assert_eq!(update.num_calls(), 3);
}

#[tokio::test]
async fn mocked_gsi_in_throttled_mode_is_a_gap_and_its_pkc_is_read() {
    let ddb = mocked!(
        aws_sdk_dynamodb,
        describe_table(&["by_post", "by_user"]),
        describe_insights(None, "ACCESSED_AND_THROTTLED_KEYS", &["PKC", "PKT"]),
        describe_insights(
            Some("by_post"),
            "ACCESSED_AND_THROTTLED_KEYS",
            &["PKC", "PKT"]
        ),
        describe_insights(Some("by_user"), "THROTTLED_KEYS", &["PKT"]),
    );
    let gsi_pkc = report(
        rule_name("PKC", &format!("{TABLE}-by_post")),
        vec![(vec!["p9"], vec![72_000.0])],
    );
    let cw = mocked!(
        aws_sdk_cloudwatch,
        report(rule_name("PKC", TABLE), vec![]),
        report(rule_name("PKT", TABLE), vec![]),
        gsi_pkc,
        report(rule_name("PKT", &format!("{TABLE}-by_post")), vec![]),
        report(rule_name("PKT", &format!("{TABLE}-by_user")), vec![]),
    );
    let only_throttled = ReportQuery {
        kinds: vec![RuleKind::Pkt],
        ..query()
    };
    let hot = Insights::from_clients(ddb, cw)
        .hot_keys(TABLE, &only_throttled)
        .await
        .expect("report");
    assert_eq!(
        gsi_pkc.num_calls(),
        1,
        "a GSI's PKC is read even when only PKT is asked for"
    );
    assert_eq!(hot.contributors.len(), 1);
    assert_eq!(hot.contributors[0].target, Target::index(TABLE, "by_post"));
    assert_eq!(
        hot.gaps,
        [Gap::IndexWritesUnseen {
            target: Target::index(TABLE, "by_user")
        }]
    );
}

#[tokio::test]
async fn mocked_list_collects_every_page() {
    let summary = |index: Option<&str>| {
        ContributorInsightsSummary::builder()
            .table_name(TABLE)
            .set_index_name(index.map(str::to_owned))
            .contributor_insights_status(ContributorInsightsStatus::Enabled)
            .build()
    };
    let pages = mock!(aws_sdk_dynamodb::Client::list_contributor_insights)
        .sequence()
        .output(move || {
            ListContributorInsightsOutput::builder()
                .contributor_insights_summaries(summary(None))
                .next_token("page-2")
                .build()
        })
        .output(move || {
            ListContributorInsightsOutput::builder()
                .contributor_insights_summaries(summary(Some("by_post")))
                .build()
        })
        .build();
    let listed = Insights::from_clients(
        mocked!(aws_sdk_dynamodb, pages),
        mocked!(aws_sdk_cloudwatch),
    )
    .list(Some(TABLE))
    .await
    .expect("list");
    let targets: Vec<_> = listed.iter().map(|s| s.target.clone()).collect();
    assert_eq!(
        targets,
        [Target::table(TABLE), Target::index(TABLE, "by_post")]
    );
    assert!(listed.iter().all(InsightsStatus::is_enabled));
}

#[tokio::test]
async fn mocked_put_alarms_sends_insight_rule_metric_math() {
    let rule = InsightRule::new(
        Target::index(TABLE, "by_post"),
        rule_name("PKC", &format!("{TABLE}-by_post")),
    )
    .expect("rule");
    let expected = insight_rule_metric(&rule.name, "MaxContributorValue");
    let put = mock!(aws_sdk_cloudwatch::Client::put_metric_alarm)
        .match_requests(move |r| {
            r.alarm_name() == Some("hs-heatsink-likes-by_post-pkc-hot")
                && r.threshold() == Some(48_000.0)
                && r.metrics()[0].expression() == Some(expected.as_str())
                && r.metrics()[0].period() == Some(60)
        })
        .then_output(|| PutMetricAlarmOutput::builder().build());
    let cw = mocked!(aws_sdk_cloudwatch, put);
    let plan = AlarmPlan::new("hs-", 0.8).expect("plan");
    let sent = put_alarms(&cw, vec![plan.hot_key(&rule)])
        .await
        .expect("put");
    assert_eq!((sent, put.num_calls()), (1, 1));
}

#[test]
fn rule_kinds_come_from_dynamodb_rule_names() {
    let kinds: Vec<_> = ["PKC", "PKT", "SKC", "SKT"]
        .iter()
        .map(|k| RuleKind::from_rule_name(&rule_name(k, "t-with-dashes-gsi")))
        .collect();
    assert_eq!(kinds, RuleKind::ALL.map(Some));
    assert_eq!(RuleKind::from_rule_name("my-own-rule"), None);
    assert_eq!(
        RuleKind::from_rule_name("DynamoDBContributorInsights-XYZ-t-1"),
        None
    );
}

#[test]
fn a_hot_key_alarm_fires_at_a_fraction_of_the_ceiling_per_minute() {
    let rule = InsightRule::new(Target::table(TABLE), rule_name("PKC", TABLE)).expect("rule");
    let alarm = AlarmPlan::new("hs-", 0.8).expect("plan").hot_key(&rule);
    let q = &alarm.get_metrics().as_ref().expect("metrics")[0];
    assert_eq!(
        q.expression(),
        Some(
            "INSIGHT_RULE_METRIC('DynamoDBContributorInsights-PKC-heatsink-likes-1700000000000', 'MaxContributorValue')"
        )
    );
    assert_eq!((q.period(), q.return_data()), (Some(60), Some(true)));
    // 0.8 × 1,000 WCU/s × 60 s per datapoint.
    assert_eq!(alarm.get_threshold(), &Some(48_000.0));
    assert_eq!(
        alarm.get_comparison_operator(),
        &Some(ComparisonOperator::GreaterThanOrEqualToThreshold)
    );
    assert_eq!(
        (
            alarm.get_evaluation_periods(),
            alarm.get_datapoints_to_alarm()
        ),
        (&Some(3), &Some(2))
    );
    let reads = AlarmPlan::new("hs-", 0.5)
        .and_then(|p| p.with_ceiling(Ceilings::DYNAMODB_READ))
        .expect("plan");
    assert_eq!(reads.hot_key_threshold(), 90_000.0);
    let throttled = InsightRule::new(Target::table(TABLE), rule_name("PKT", TABLE)).expect("rule");
    assert_eq!(reads.hot_key(&throttled).get_threshold(), &Some(1.0));
    assert!(AlarmPlan::new("hs-", 0.0).is_err());
    assert!(AlarmPlan::new("hs-", f64::NAN).is_err());
}

#[test]
fn throttle_alarms_sum_reads_and_writes_per_reason_and_index() {
    let plan = AlarmPlan::new("hs-", 0.8)
        .expect("plan")
        .with_actions(vec!["arn:sns".into()]);
    let alarm = plan.throttled(&Target::index(TABLE, "by_post"), ThrottleReason::KeyRange);
    assert_eq!(
        alarm.get_alarm_name().as_deref(),
        Some("hs-heatsink-likes-by_post-throttled-key-range")
    );
    assert_eq!(
        alarm.get_alarm_actions().as_deref(),
        Some(&["arn:sns".to_owned()][..])
    );
    let queries = alarm.get_metrics().as_ref().expect("metrics");
    assert_eq!(queries[0].expression(), Some("m0 + m1"));
    let metric = |i: usize| {
        let m = queries[i]
            .metric_stat()
            .and_then(|s| s.metric())
            .expect("metric");
        let dims: Vec<_> = m
            .dimensions()
            .iter()
            .map(|d| (d.name().unwrap_or(""), d.value().unwrap_or("")))
            .collect();
        (m.metric_name().unwrap_or("").to_owned(), dims)
    };
    let dims = vec![
        ("TableName", TABLE),
        ("GlobalSecondaryIndexName", "by_post"),
    ];
    assert_eq!(
        metric(1),
        (
            "ReadKeyRangeThroughputThrottleEvents".to_owned(),
            dims.clone()
        )
    );
    assert_eq!(
        metric(2),
        ("WriteKeyRangeThroughputThrottleEvents".to_owned(), dims)
    );
    let statuses = [
        enabled(Target::table(TABLE), &RuleKind::ALL),
        enabled(Target::index(TABLE, "by_post"), &[RuleKind::Pkc]),
    ];
    // PKC + PKT of the table, PKC of the GSI, and 5 reasons for each of the 2 targets.
    assert_eq!(plan.alarms(&statuses).len(), 3 + 2 * 5);
}

#[test]
fn sampler_and_insights_merge_hottest_first() {
    let rule =
        InsightRule::new(Target::index(TABLE, "by_post"), rule_name("PKC", "x")).expect("rule");
    let contributor = Contributor {
        target: rule.target.clone(),
        rule: rule.name.clone(),
        kind: RuleKind::Pkc,
        keys: vec!["p9".into()],
        approximate_aggregate_value: 90_000.0,
        max_value: 90_000.0,
        period_secs: 60,
        datapoints: vec![],
    };
    let sampled = Report {
        partitions: vec![],
        hot: vec![HotKey {
            partition: "S2".into(),
            key: "p9".into(),
            kind: Kind::Write,
            estimate: 2_360.0,
            lower_bound: 2_300.0,
            error_bound: 60.0,
            share_of_ceiling: 2.36,
            share_of_partition: 0.93,
            certain: true,
            sampled: Estimate {
                count: 118,
                error: 3,
            },
        }],
    };
    let named = merge(&[contributor], &sampled);
    let got: Vec<_> = named
        .iter()
        .map(|n| (n.key.as_str(), n.per_second))
        .collect();
    assert_eq!(got, [("p9", 2_360.0), ("p9", 1_500.0)]);
    assert!(matches!(
        named[0].source,
        Source::Sampler {
            kind: Kind::Write,
            certain: true,
            ..
        }
    ));
    assert!(
        matches!(&named[1].source, Source::Insights { target, kind: RuleKind::Pkc } if target.index.is_some())
    );
}

#[test]
fn a_table_with_nothing_enabled_is_refused_and_partial_coverage_is_a_gap() {
    let mut off = enabled(Target::table(TABLE), &[]);
    off.status = Some(ContributorInsightsStatus::Disabled);
    assert!(matches!(
        plan_report(std::slice::from_ref(&off), &[RuleKind::Pkc]),
        Err(InsightsError::Disabled { .. })
    ));
    let gsi = enabled(
        Target::index(TABLE, "by_post"),
        &[RuleKind::Pkc, RuleKind::Pkt],
    );
    let plan = plan_report(&[off, gsi], &[RuleKind::Pkt]).expect("plan");
    assert_eq!(
        plan.rules.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [RuleKind::Pkc, RuleKind::Pkt]
    );
    assert_eq!(
        plan.gaps,
        [Gap::NotEnabled {
            target: Target::table(TABLE),
            status: "DISABLED".into()
        }]
    );
}
