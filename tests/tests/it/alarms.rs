//! Hot-key and throttle alarms and the dashboard, put and read back on a CloudWatch that speaks the
//! SDK's rpc-v2-cbor protocol (the LocalStack lane). No emulator runs Contributor Insights, so the
//! rules the alarms watch are named by hand in DynamoDB's format.

use aws_sdk_cloudwatch::types::MetricAlarm;
use heatsink::insights::{
    AlarmPlan, InsightRule, InsightsStatus, Target, ThrottleReason, insight_rule_metric,
    put_alarms, put_dashboard,
};
use heatsink_photo_app::dashboard::{DashboardSpec, dashboard_body};
use heatsink_testkit::Fixture;

/// The fixture, or `None` (after a `skip:` line) on a lane whose CloudWatch lacks CBOR.
async fn cloudwatch_fixture(test: &str) -> Option<Fixture> {
    let fx = Fixture::new(test).await?;
    if !fx.stack.cloudwatch_speaks_cbor() {
        eprintln!(
            "skip: {test}: lane `{}` serves CloudWatch without the SDK's rpc-v2-cbor protocol; it \
             runs on the localstack lane",
            fx.stack.lane
        );
        return None;
    }
    Some(fx)
}

/// A table and one GSI with Contributor Insights enabled, as DescribeContributorInsights lists them.
fn statuses(table: &str) -> Vec<InsightsStatus> {
    let status = |target: Target| {
        let rules = ["PKC", "PKT"]
            .iter()
            .filter_map(|k| {
                let name = format!(
                    "DynamoDBContributorInsights-{k}-{}-1700000000000",
                    target.slug()
                );
                InsightRule::new(target.clone(), name)
            })
            .collect();
        InsightsStatus {
            target,
            status: Some(aws_sdk_dynamodb::types::ContributorInsightsStatus::Enabled),
            mode: None,
            rules,
            failure: None,
        }
    };
    vec![
        status(Target::table(table)),
        status(Target::index(table, "by_post")),
    ]
}

#[tokio::test]
async fn hot_key_and_throttle_alarms_are_described_back() {
    let Some(fx) = cloudwatch_fixture("hot_key_and_throttle_alarms_are_described_back").await
    else {
        return;
    };
    let cw = &fx.stack.cloudwatch;
    let prefix = fx.prefix().to_owned();
    let statuses = statuses(&format!("{prefix}likes"));
    let plan = AlarmPlan::new(&prefix, 0.8).expect("plan");
    let alarms = plan.alarms(&statuses);
    let put = put_alarms(cw, alarms).await;
    let described: Vec<MetricAlarm> = cw
        .describe_alarms()
        .alarm_name_prefix(&prefix)
        .send()
        .await
        .expect("describe alarms")
        .metric_alarms()
        .to_vec();
    let names: Vec<String> = described
        .iter()
        .filter_map(|a| a.alarm_name().map(str::to_owned))
        .collect();
    let _ = cw
        .delete_alarms()
        .set_alarm_names(Some(names.clone()))
        .send()
        .await;
    // 2 targets × (PKC + PKT + 5 throttle reasons).
    assert_eq!(put.expect("put alarms"), 14);
    assert_eq!(names.len(), 14, "{names:?}");

    let pkc = &statuses[1].rules[0];
    let hot = described
        .iter()
        .find(|a| a.alarm_name() == Some(&format!("{prefix}{prefix}likes-by_post-pkc-hot")))
        .expect("GSI hot-key alarm");
    assert_eq!(hot.threshold(), Some(48_000.0));
    assert_eq!(
        hot.metrics()[0].expression(),
        Some(insight_rule_metric(&pkc.name, "MaxContributorValue").as_str())
    );
    assert_eq!(hot.metrics()[0].period(), Some(60));

    let key_range = format!(
        "{prefix}{prefix}likes-by_post-throttled-{}",
        ThrottleReason::KeyRange.slug()
    );
    let throttled = described
        .iter()
        .find(|a| a.alarm_name() == Some(key_range.as_str()))
        .expect("key-range throttle alarm");
    let metric_names: Vec<&str> = throttled
        .metrics()
        .iter()
        .filter_map(|q| q.metric_stat()?.metric()?.metric_name())
        .collect();
    assert_eq!(
        metric_names,
        [
            "ReadKeyRangeThroughputThrottleEvents",
            "WriteKeyRangeThroughputThrottleEvents"
        ]
    );
    assert_eq!(throttled.metrics()[0].expression(), Some("m0 + m1"));
}

#[tokio::test]
async fn the_dashboard_is_stored_as_put() {
    let Some(fx) = cloudwatch_fixture("the_dashboard_is_stored_as_put").await else {
        return;
    };
    let cw = &fx.stack.cloudwatch;
    let prefix = fx.prefix().to_owned();
    let spec = DashboardSpec {
        region: "us-east-1".into(),
        prefix: prefix.clone(),
        stream: Some(format!("{prefix}like-events")),
    };
    let plan = AlarmPlan::new(&prefix, 0.8).expect("plan");
    let body = dashboard_body(&spec, &plan, &statuses(&format!("{prefix}likes")));
    let name = format!("{prefix}hot-keys");
    let warnings = put_dashboard(cw, &name, &body).await;
    let got = cw.get_dashboard().dashboard_name(&name).send().await;
    let _ = cw.delete_dashboards().dashboard_names(&name).send().await;
    assert_eq!(warnings.expect("put dashboard"), Vec::<String>::new());
    let stored: serde_json::Value = serde_json::from_str(
        got.expect("get dashboard")
            .dashboard_body()
            .expect("a body"),
    )
    .expect("JSON body");
    assert_eq!(stored, body);
}
