//! Generic dashboard widgets: hot keys against the partition ceilings, contributors and
//! throttles; applications append their own series.

use super::*;

/// One time-series widget of a CloudWatch dashboard: `title`, in `region`, one-minute
/// datapoints unless `props` sets a `period`; `props` (metrics, annotations, …) is merged in.
pub fn graph(region: &str, title: String, props: Value) -> Value {
    let mut p =
        json!({"title": title, "region": region, "view": "timeSeries", "period": PERIOD_SECS});
    if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), props) {
        p.extend(extra);
    }
    json!({"type": "metric", "width": 8, "height": 6, "properties": p})
}

/// A `PutDashboard` body in `region`: the hottest key per second of each `PKC` rule against the
/// partition ceilings and the alarm line, top contributors of each `PKC`/`PKT` rule, throttles by
/// reason per target, then `extra` widgets (an application's own series, built with [`graph`]).
pub fn dashboard_body(
    region: &str,
    plan: &AlarmPlan,
    statuses: &[InsightsStatus],
    extra: impl IntoIterator<Item = Value>,
) -> Value {
    let graph = |title: String, props: Value| graph(region, title, props);
    let rules: Vec<&InsightRule> = statuses
        .iter()
        .flat_map(|s| &s.rules)
        .filter(|r| matches!(r.kind, RuleKind::Pkc | RuleKind::Pkt))
        .collect();
    let capacity = rules.iter().filter(|r| r.kind == RuleKind::Pkc).map(|r| {
        let expr = format!("{} / {PERIOD_SECS}", insight_rule_metric(&r.name, MAX_CONTRIBUTOR_VALUE));
        let line = |value: f64, label: &str| json!({"value": value, "label": label});
        graph(
            format!("{}: hottest partition key, accesses/s", r.target),
            json!({
                "metrics": [[{"expression": expr, "label": "MaxContributorValue / 60", "id": "e1"}]],
                "yAxis": {"left": {"min": 0}},
                "annotations": {"horizontal": [
                    line(Ceilings::DYNAMODB_WRITE, "1,000 WCU/s partition ceiling"),
                    line(Ceilings::DYNAMODB_READ, "3,000 RCU/s partition ceiling"),
                    line(plan.hot_key_per_second(), "alarm"),
                ]},
            }),
        )
    });
    let contributors = rules.iter().map(|r| {
        graph(
            format!("{}: {}", r.target, r.kind.describe()),
            json!({
                "insightRule": {"maxContributorCount": 10, "orderBy": "Sum", "ruleName": r.name},
                "legend": {"position": "bottom"},
            }),
        )
    });
    let throttles = statuses.iter().map(|s| {
        let metrics: Vec<Value> = ThrottleReason::ALL[1..]
            .iter()
            .flat_map(|reason| reason.metrics())
            .map(|m| {
                let mut row = vec![json!(DYNAMODB_NAMESPACE), json!(m)];
                for d in s.target.dimensions() {
                    row.extend([json!(d.name()), json!(d.value())]);
                }
                row.push(json!({"stat": "Sum", "label": m.trim_end_matches("ThrottleEvents")}));
                Value::Array(row)
            })
            .collect();
        graph(
            format!("{}: throttles by reason", s.target),
            json!({"metrics": metrics, "stacked": true}),
        )
    });
    let header = json!({"type": "text", "width": 24, "height": 2, "properties": {"markdown": format!(
        "# {}hot keys\nHottest key per second against the per-partition ceilings (1,000 WCU/s, \
         3,000 RCU/s; Contributor Insights counts reads and writes together, per minute).",
        plan.prefix()
    )}});
    let widgets: Vec<Value> = std::iter::once(header)
        .chain(capacity)
        .chain(contributors)
        .chain(throttles)
        .chain(extra)
        .collect();
    json!({"periodOverride": "inherit", "widgets": widgets})
}

/// Creates or replaces dashboard `name` (PutDashboard); returns CloudWatch's validation warnings.
pub async fn put_dashboard(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    name: &str,
    body: &Value,
) -> Result<Vec<String>, InsightsError> {
    let out = cloudwatch
        .put_dashboard()
        .dashboard_name(name)
        .dashboard_body(body.to_string())
        .send()
        .await
        .map_err(|e| cw_error("PutDashboard", name, e, |_| false))?;
    Ok(out
        .dashboard_validation_messages()
        .iter()
        .map(|m| {
            format!(
                "{}: {}",
                m.data_path().unwrap_or("/"),
                m.message().unwrap_or_default()
            )
        })
        .collect())
}
