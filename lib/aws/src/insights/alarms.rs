//! Alarms on the hottest key and on throttles by reason.

use super::*;

/// `INSIGHT_RULE_METRIC('<rule>', '<metric>')`: a rule's statistic as a metric math expression.
pub fn insight_rule_metric(rule: &str, metric: &str) -> String {
    format!("INSIGHT_RULE_METRIC('{rule}', '{metric}')")
}

/// Why DynamoDB throttled, as CloudWatch counts it (one read and one write metric each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThrottleReason {
    /// Any reason (`ReadThrottleEvents`, `WriteThrottleEvents`).
    Any,
    /// One partition's key range over its ceiling: a hot key.
    KeyRange,
    /// Over the provisioned capacity of the table or GSI.
    Provisioned,
    /// Over the account's per-table quota (on-demand).
    AccountLimit,
    /// Over the table's configured on-demand maximum.
    MaxOnDemand,
}

impl ThrottleReason {
    /// Every reason, the catch-all first.
    pub const ALL: [Self; 5] = [
        Self::Any,
        Self::KeyRange,
        Self::Provisioned,
        Self::AccountLimit,
        Self::MaxOnDemand,
    ];

    /// The `AWS/DynamoDB` metrics counting it: reads, then writes.
    pub fn metrics(self) -> [&'static str; 2] {
        match self {
            Self::Any => ["ReadThrottleEvents", "WriteThrottleEvents"],
            Self::KeyRange => [
                "ReadKeyRangeThroughputThrottleEvents",
                "WriteKeyRangeThroughputThrottleEvents",
            ],
            Self::Provisioned => [
                "ReadProvisionedThroughputThrottleEvents",
                "WriteProvisionedThroughputThrottleEvents",
            ],
            Self::AccountLimit => [
                "ReadAccountLimitThrottleEvents",
                "WriteAccountLimitThrottleEvents",
            ],
            Self::MaxOnDemand => [
                "ReadMaxOnDemandThroughputThrottleEvents",
                "WriteMaxOnDemandThroughputThrottleEvents",
            ],
        }
    }

    /// Its part of alarm names.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::KeyRange => "key-range",
            Self::Provisioned => "provisioned",
            Self::AccountLimit => "account-limit",
            Self::MaxOnDemand => "max-on-demand",
        }
    }

    fn advice(self) -> &'static str {
        match self {
            Self::Any => "Requests were throttled; the reason alarms say why.",
            Self::KeyRange => "One partition exceeded its ceiling: a hot key. Salt it or cache it.",
            Self::Provisioned => {
                "Consumption exceeded provisioned capacity: raise it or smooth load."
            }
            Self::AccountLimit => "The account's per-table quota was hit: ask for more.",
            Self::MaxOnDemand => "The table's on-demand maximum was hit: raise it if intended.",
        }
    }
}

/// How hot-key and throttle alarms are named, when they fire and whom they notify.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmPlan {
    prefix: String,
    fraction: f64,
    ceiling: f64,
    actions: Vec<String>,
}

impl AlarmPlan {
    /// Alarms named `<prefix>…` firing at `fraction` of the 1,000 WCU/s partition ceiling.
    pub fn new(prefix: impl Into<String>, fraction: f64) -> Result<Self, InsightsError> {
        Self::checked(prefix.into(), fraction, Ceilings::DYNAMODB_WRITE)
    }

    /// The same plan against another per-second ceiling (e.g. 3,000 RCU/s for read-only tables).
    pub fn with_ceiling(self, ceiling: f64) -> Result<Self, InsightsError> {
        Ok(Self {
            actions: self.actions,
            ..Self::checked(self.prefix, self.fraction, ceiling)?
        })
    }

    fn checked(prefix: String, fraction: f64, ceiling: f64) -> Result<Self, InsightsError> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(ceiling) || !positive(fraction) {
            return Err(InsightsError::Invalid {
                field: "ceiling/fraction",
                reason: "must be positive, finite numbers",
            });
        }
        Ok(Self {
            prefix,
            fraction,
            ceiling,
            actions: Vec::new(),
        })
    }

    /// The same plan notifying `actions` (SNS topic ARNs) on ALARM and OK.
    pub fn with_actions(self, actions: Vec<String>) -> Self {
        Self { actions, ..self }
    }

    /// Alarm name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The per-second line a hot key crosses: `fraction × ceiling`.
    pub fn hot_key_per_second(&self) -> f64 {
        self.fraction * self.ceiling
    }

    /// The same line per one-minute datapoint: `fraction × ceiling × 60`.
    pub fn hot_key_threshold(&self) -> f64 {
        self.hot_key_per_second() * f64::from(PERIOD_SECS)
    }

    /// An alarm on a rule's `MaxContributorValue`: an accessed rule fires at
    /// [`hot_key_threshold`](Self::hot_key_threshold), a throttled one at 1 throttled access per
    /// minute; both when 2 of 3 minutes breach.
    pub fn hot_key(&self, rule: &InsightRule) -> PutMetricAlarmInputBuilder {
        let (threshold, description) = if rule.kind.is_throttled() {
            (1.0, format!("{}: a key is being throttled", rule.target))
        } else {
            (
                self.hot_key_threshold(),
                format!(
                    "{}: one key above {:.0} accesses/s ({} % of the {:.0}/s partition ceiling)",
                    rule.target,
                    self.hot_key_per_second(),
                    self.fraction * 100.0,
                    self.ceiling
                ),
            )
        };
        let query = MetricDataQuery::builder()
            .id("hottest")
            .expression(insight_rule_metric(&rule.name, MAX_CONTRIBUTOR_VALUE))
            .label(format!("{} {}", rule.target, rule.kind.code()))
            .period(PERIOD_SECS)
            .return_data(true)
            .build();
        let name = format!(
            "{}{}-{}-hot",
            self.prefix,
            rule.target.slug(),
            rule.kind.code().to_lowercase()
        );
        self.alarm(name, description, threshold, vec![query])
    }

    /// An alarm on the sum of a target's read and write throttle events for `reason`, firing at
    /// 1 event per minute in 2 of 3 minutes.
    pub fn throttled(&self, target: &Target, reason: ThrottleReason) -> PutMetricAlarmInputBuilder {
        let metric = |i: usize, name: &str| {
            let metric = Metric::builder()
                .namespace(DYNAMODB_NAMESPACE)
                .metric_name(name)
                .set_dimensions(Some(target.dimensions()))
                .build();
            let stat = MetricStat::builder()
                .metric(metric)
                .period(PERIOD_SECS)
                .stat("Sum")
                .build();
            MetricDataQuery::builder()
                .id(format!("m{i}"))
                .metric_stat(stat)
                .return_data(false)
                .build()
        };
        let [read, write] = reason.metrics();
        let total = MetricDataQuery::builder()
            .id("total")
            .expression("m0 + m1")
            .label(format!("{target} {} throttle events", reason.slug()))
            .return_data(true)
            .build();
        let name = format!(
            "{}{}-throttled-{}",
            self.prefix,
            target.slug(),
            reason.slug()
        );
        let description = format!("{target}: {}", reason.advice());
        self.alarm(
            name,
            description,
            1.0,
            vec![total, metric(0, read), metric(1, write)],
        )
    }

    /// Every alarm for `statuses`: `PKC` and `PKT` of each target with rules, and each throttle
    /// reason of each target.
    pub fn alarms(&self, statuses: &[InsightsStatus]) -> Vec<PutMetricAlarmInputBuilder> {
        let hot = statuses
            .iter()
            .flat_map(|s| &s.rules)
            .filter(|r| matches!(r.kind, RuleKind::Pkc | RuleKind::Pkt))
            .map(|r| self.hot_key(r));
        let throttled = statuses.iter().flat_map(|s| {
            ThrottleReason::ALL
                .into_iter()
                .map(|reason| self.throttled(&s.target, reason))
        });
        hot.chain(throttled).collect()
    }

    fn alarm(
        &self,
        name: String,
        description: String,
        threshold: f64,
        queries: Vec<MetricDataQuery>,
    ) -> PutMetricAlarmInputBuilder {
        let actions = (!self.actions.is_empty()).then(|| self.actions.clone());
        PutMetricAlarmInput::builder()
            .alarm_name(name)
            .alarm_description(description)
            .set_metrics(Some(queries))
            .threshold(threshold)
            .comparison_operator(ComparisonOperator::GreaterThanOrEqualToThreshold)
            .evaluation_periods(3)
            .datapoints_to_alarm(2)
            .treat_missing_data("notBreaching")
            .set_alarm_actions(actions.clone())
            .set_ok_actions(actions)
    }
}

/// Creates or updates every alarm (PutMetricAlarm, one at a time); returns how many were put.
pub async fn put_alarms(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    alarms: Vec<PutMetricAlarmInputBuilder>,
) -> Result<usize, InsightsError> {
    let count = alarms.len();
    for alarm in alarms {
        let name = alarm.get_alarm_name().clone().unwrap_or_default();
        alarm
            .send_with(cloudwatch)
            .await
            .map_err(|e| cw_error("PutMetricAlarm", &name, e, |_| false))?;
    }
    Ok(count)
}
