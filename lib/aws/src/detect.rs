//! Contributor Insights: DynamoDB names its own hot keys; alarms and a dashboard watch them.
//!
//! Client sampling ([`heatsink_core::detect`]) sees the requests *we* send. CloudWatch
//! Contributor Insights for DynamoDB sees every request the table serves, from any client, and
//! names the keys behind them. Enabled on a table or GSI ([`Insights::enable`]), DynamoDB creates
//! managed rules named `DynamoDBContributorInsights-<KIND>-<table>[-<index>]-<creation epoch ms>`
//! ([`RuleKind`]): `PKC` (most accessed partition keys) and `PKT` (most throttled partition keys),
//! plus `SKC`/`SKT` (partition + sort key pairs) when the key schema has a sort key. The names are
//! read from `DescribeContributorInsights`' `ContributorInsightsRuleList`, never guessed: they
//! change every time Contributor Insights is disabled and enabled again, so alarms built from them
//! ([`AlarmPlan`]) must be applied again after that.
//!
//! What the rules count, in numbers:
//! - **Reads and writes together.** `PKC` counts accesses (one event per item read or written,
//!   successful or throttled) and `PKT` counts throttled accesses; neither says which were reads and
//!   which were writes. For items of at most 1 KB written (1 WCU) or 4 KB read strongly (1 RCU) an
//!   access is one capacity unit; bigger items make the count an underestimate of units. Split by
//!   read and write with the client sampler, which counts units per [`Kind`].
//! - **One datapoint per minute.** A datapoint sums one minute, while a partition's ceilings
//!   (1,000 WCU/s, 3,000 RCU/s) hold per second. A key at 2,400 WCU/s for 10 s and idle for 50 s
//!   shows as 24,000 per minute = 400/s, under the ceiling although it was throttled for those
//!   10 s: Contributor Insights catches sustained heat; the sampler's 5 s windows catch bursts.
//!   Alarm thresholds are therefore per minute: 80 % of 1,000 WCU/s is `0.8 × 1,000 × 60 = 48,000`
//!   accesses in a datapoint ([`AlarmPlan::hot_key_threshold`]). A report names at most 100 keys
//!   per rule ([`MAX_CONTRIBUTORS`]).
//! - **Billed per event.** CloudWatch charges per rule-month (≈ $0.50; 2 rules per table or GSI,
//!   4 with a sort key) and per million events matched (≈ $0.03; list prices when this was
//!   written, see CloudWatch pricing). In `ACCESSED_AND_THROTTLED_KEYS` mode every access is an
//!   event: 1,000 accesses/s for 30 days are 2.6 billion events ≈ $78 per table or GSI. In
//!   `THROTTLED_KEYS` mode only throttled accesses are events, so it costs little until a key is hot
//!   — but then it has no `PKC` rule and names no key before it throttles.
//! - **The GSI blind spot.** A write to a table also writes each GSI; when a GSI partition cannot
//!   take it, the *table* write is throttled, and that index write throttling does not appear in the
//!   GSI's throttled-keys (`PKT`) graph. The only Contributor Insights signal for a hot GSI partition
//!   key is therefore the index's most-accessed rule (`PKC`): [`mode_for`] always enables GSIs in
//!   `ACCESSED_AND_THROTTLED_KEYS`, [`plan_report`] always reads a GSI's `PKC` and reports a
//!   [`Gap::IndexWritesUnseen`] when a GSI lacks it, and [`merge`] joins these keys with the client
//!   sampler's, which sees index writes from the writer's side.
//!
//! ```
//! use heatsink::detect::{AlarmPlan, RuleKind, insight_rule_metric};
//! let rule = "DynamoDBContributorInsights-PKC-heatsink-likes-by_post-1700000000000";
//! assert_eq!(RuleKind::from_rule_name(rule), Some(RuleKind::Pkc));
//! assert_eq!(
//!     insight_rule_metric(rule, "MaxContributorValue"),
//!     "INSIGHT_RULE_METRIC('DynamoDBContributorInsights-PKC-heatsink-likes-by_post-1700000000000', 'MaxContributorValue')"
//! );
//! // Alarm when one key takes 80 % of a partition's 1,000 WCU/s, per one-minute datapoint:
//! assert_eq!(AlarmPlan::new("heatsink-", 0.8)?.hot_key_threshold(), 48_000.0);
//! # Ok::<(), heatsink::detect::InsightsError>(())
//! ```
//!
//! Reading the hottest keys of a table and its GSIs:
//! ```no_run
//! # async fn f(config: aws_config::SdkConfig) -> Result<(), heatsink::detect::InsightsError> {
//! use std::time::SystemTime;
//! use heatsink::detect::{Insights, ReportQuery};
//! let insights = Insights::new(&config);
//! let hot = insights.hot_keys("heatsink-likes", &ReportQuery::last(5, SystemTime::now())).await?;
//! for c in &hot.contributors {
//!     println!("{} {:?} {:.0}/s", c.target, c.partition_key(), c.peak_per_second());
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::operation::get_insight_rule_report::GetInsightRuleReportError;
use aws_sdk_cloudwatch::operation::put_metric_alarm::PutMetricAlarmInput;
use aws_sdk_cloudwatch::operation::put_metric_alarm::builders::PutMetricAlarmInputBuilder;
use aws_sdk_cloudwatch::types::{
    ComparisonOperator, Dimension, InsightRuleContributor, Metric, MetricDataQuery, MetricStat,
};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::describe_contributor_insights::DescribeContributorInsightsError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::update_contributor_insights::UpdateContributorInsightsError;
use aws_sdk_dynamodb::types::{
    ContributorInsightsAction, ContributorInsightsMode, ContributorInsightsStatus,
};
use aws_smithy_types::DateTime;
use futures::future::try_join_all;
use heatsink_core::detect::{Ceilings, Kind, Report};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::describe;
use crate::metrics::{DIMENSION, Metric as EmfMetric};

/// Seconds per Contributor Insights datapoint: DynamoDB's rules aggregate per minute.
pub const PERIOD_SECS: i32 = 60;
/// Period of the count-rebuilder's series: it runs every 5 minutes (the stacks' schedule).
const REBUILD_PERIOD_SECS: i32 = 300;
/// The most contributors one `GetInsightRuleReport` returns per rule.
pub const MAX_CONTRIBUTORS: i32 = 100;
/// CloudWatch namespace of the functions' Embedded Metric Format metrics.
pub const EMF_NAMESPACE: &str = crate::metrics::NAMESPACE;
/// The rule statistic alarms and graphs watch: the busiest key's count in one datapoint.
pub const MAX_CONTRIBUTOR_VALUE: &str = "MaxContributorValue";

const RULE_PREFIX: &str = "DynamoDBContributorInsights-";
const DYNAMODB_NAMESPACE: &str = "AWS/DynamoDB";

/// Errors of Contributor Insights, alarms and dashboards, named for what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum InsightsError {
    /// The table does not exist in this account and region; check the name.
    #[error("table {table} not found (check the name, account and region)")]
    TableNotFound {
        /// Table name.
        table: String,
    },
    /// Contributor Insights is not enabled anywhere on the table; enable it and wait a minute.
    #[error(
        "Contributor Insights is {status} on {target}; enable it (`heatsink top --table {} --enable`, or UpdateContributorInsights) and allow a minute for the first datapoint",
        .target.table
    )]
    Disabled {
        /// The table.
        target: Target,
        /// Its status (`DISABLED`, `ENABLING`, `FAILED`, …).
        status: String,
    },
    /// The rule is gone (Contributor Insights was disabled or re-enabled, which renames rules);
    /// describe the table again.
    #[error("insight rule {rule} not found; describe the table again (re-enabling renames rules)")]
    RuleNotFound {
        /// Rule name.
        rule: String,
    },
    /// An argument is out of range; fix the call.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The argument.
        field: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// DynamoDB refused the call or could not be reached; retry.
    #[error("DynamoDB {operation} on {resource} failed: {message}")]
    Dynamo {
        /// The API operation.
        operation: &'static str,
        /// Table or index.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
    /// CloudWatch refused the call or could not be reached; retry or fix the request.
    #[error("CloudWatch {operation} on {resource} failed: {message}")]
    CloudWatch {
        /// The API operation.
        operation: &'static str,
        /// Rule, alarm or dashboard.
        resource: String,
        /// The SDK error with its cause chain.
        message: String,
    },
}

/// A table or one of its global secondary indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Target {
    /// Table name.
    pub table: String,
    /// GSI name; `None` for the table itself.
    pub index: Option<String>,
}

impl Target {
    /// The table itself.
    pub fn table(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            index: None,
        }
    }

    /// One of the table's GSIs.
    pub fn index(table: impl Into<String>, index: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            index: Some(index.into()),
        }
    }

    /// `table` or `table-index`: the resource part of rule and alarm names.
    pub fn slug(&self) -> String {
        match &self.index {
            Some(i) => format!("{}-{i}", self.table),
            None => self.table.clone(),
        }
    }

    fn dimensions(&self) -> Vec<Dimension> {
        let dim = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
        let mut dims = vec![dim("TableName", &self.table)];
        dims.extend(
            self.index
                .iter()
                .map(|i| dim("GlobalSecondaryIndexName", i)),
        );
        dims
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.index {
            Some(i) => write!(f, "{}/{i}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

/// Which of DynamoDB's four managed rules: accessed or throttled, partition key or full key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum RuleKind {
    /// `PKC`: most accessed partition keys (reads and writes, successful or throttled).
    #[serde(rename = "PKC")]
    Pkc,
    /// `PKT`: most throttled partition keys (reads and writes).
    #[serde(rename = "PKT")]
    Pkt,
    /// `SKC`: most accessed partition + sort keys (tables and GSIs with a sort key).
    #[serde(rename = "SKC")]
    Skc,
    /// `SKT`: most throttled partition + sort keys (tables and GSIs with a sort key).
    #[serde(rename = "SKT")]
    Skt,
}

impl RuleKind {
    /// Every kind, in the order DynamoDB lists them.
    pub const ALL: [RuleKind; 4] = [Self::Pkc, Self::Pkt, Self::Skc, Self::Skt];

    /// The code in the rule name (`PKC`, `PKT`, `SKC`, `SKT`).
    pub fn code(self) -> &'static str {
        match self {
            Self::Pkc => "PKC",
            Self::Pkt => "PKT",
            Self::Skc => "SKC",
            Self::Skt => "SKT",
        }
    }

    /// The kind of a DynamoDB managed rule name, or `None` for any other rule.
    pub fn from_rule_name(name: &str) -> Option<Self> {
        let code = name.strip_prefix(RULE_PREFIX)?.split('-').next()?;
        Self::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether the rule counts throttled accesses only (`PKT`, `SKT`).
    pub fn is_throttled(self) -> bool {
        matches!(self, Self::Pkt | Self::Skt)
    }

    /// What the rule ranks, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Pkc => "most accessed partition keys (reads + writes)",
            Self::Pkt => "most throttled partition keys (reads + writes)",
            Self::Skc => "most accessed keys (partition + sort)",
            Self::Skt => "most throttled keys (partition + sort)",
        }
    }
}

/// One managed Contributor Insights rule of a table or GSI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InsightRule {
    /// The table or GSI it watches.
    pub target: Target,
    /// Its CloudWatch name, from `ContributorInsightsRuleList`.
    pub name: String,
    /// What it counts.
    pub kind: RuleKind,
}

impl InsightRule {
    /// The rule `name` of `target`, or `None` if it is not a DynamoDB managed rule name.
    pub fn new(target: Target, name: impl Into<String>) -> Option<Self> {
        let name = name.into();
        let kind = RuleKind::from_rule_name(&name)?;
        Some(Self { target, name, kind })
    }
}

/// Contributor Insights on one table or GSI: status, mode and rules.
#[derive(Debug, Clone, PartialEq)]
pub struct InsightsStatus {
    /// The table or GSI.
    pub target: Target,
    /// `ENABLED`, `ENABLING`, `DISABLED`, … (`None` if DynamoDB did not say).
    pub status: Option<ContributorInsightsStatus>,
    /// `ACCESSED_AND_THROTTLED_KEYS` or `THROTTLED_KEYS`, when reported.
    pub mode: Option<ContributorInsightsMode>,
    /// The managed rules (empty from Update and List calls, which do not name them).
    pub rules: Vec<InsightRule>,
    /// The last failure, for a `FAILED` status.
    pub failure: Option<String>,
}

impl InsightsStatus {
    /// Whether Contributor Insights is `ENABLED`.
    pub fn is_enabled(&self) -> bool {
        self.status == Some(ContributorInsightsStatus::Enabled)
    }

    /// The status as DynamoDB spells it (`UNKNOWN` if absent).
    pub fn status_str(&self) -> &str {
        self.status.as_ref().map_or("UNKNOWN", |s| s.as_str())
    }

    /// The rule of `kind`, if the target has one.
    pub fn rule(&self, kind: RuleKind) -> Option<&InsightRule> {
        self.rules.iter().find(|r| r.kind == kind)
    }
}

/// The mode to enable on `target` when `requested` is asked for: GSIs always get
/// `ACCESSED_AND_THROTTLED_KEYS`, because index write throttling shows only in their `PKC` rule.
pub fn mode_for(target: &Target, requested: ContributorInsightsMode) -> ContributorInsightsMode {
    match target.index {
        Some(_) => ContributorInsightsMode::AccessedAndThrottledKeys,
        None => requested,
    }
}

/// One value of a contributor: its count in the datapoint starting at `epoch_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Datapoint {
    /// Start of the datapoint, seconds since the Unix epoch.
    pub epoch_secs: i64,
    /// Accesses (or throttled accesses) in the datapoint.
    pub value: f64,
}

/// A key named by a Contributor Insights report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contributor {
    /// The table or GSI.
    #[serde(flatten)]
    pub target: Target,
    /// The rule that named it.
    pub rule: String,
    /// What the rule counts.
    #[serde(rename = "rule_kind")]
    pub kind: RuleKind,
    /// The key values: `[partition]` for `PKC`/`PKT`, `[partition, sort]` for `SKC`/`SKT`.
    pub keys: Vec<String>,
    /// Its count over the whole window (CloudWatch's `ApproximateAggregateValue`).
    pub approximate_aggregate_value: f64,
    /// Its largest count in one datapoint (0 when the report carried no datapoints).
    pub max_value: f64,
    /// Seconds per datapoint.
    pub period_secs: i32,
    /// Its count per datapoint.
    pub datapoints: Vec<Datapoint>,
}

impl Contributor {
    /// Converts one contributor of `rule`'s report (`period_secs` per datapoint).
    pub fn from_report(rule: &InsightRule, c: &InsightRuleContributor, period_secs: i32) -> Self {
        let datapoints: Vec<Datapoint> = c
            .datapoints()
            .iter()
            .filter_map(|d| {
                Some(Datapoint {
                    epoch_secs: d.timestamp()?.secs(),
                    value: d.approximate_value()?,
                })
            })
            .collect();
        Self {
            target: rule.target.clone(),
            rule: rule.name.clone(),
            kind: rule.kind,
            keys: c.keys().to_vec(),
            approximate_aggregate_value: c.approximate_aggregate_value().unwrap_or(0.0),
            max_value: datapoints.iter().map(|d| d.value).fold(0.0, f64::max),
            period_secs,
            datapoints,
        }
    }

    /// The partition key value (the first key of every DynamoDB rule).
    pub fn partition_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
    }

    /// The busiest datapoint as a rate: `max_value / period_secs`, accesses per second.
    pub fn peak_per_second(&self) -> f64 {
        self.max_value / f64::from(self.period_secs.max(1))
    }
}

/// Sorts contributors hottest first: busiest datapoint, then window total, then key.
pub fn sort_hottest_first(contributors: &mut [Contributor]) {
    contributors.sort_by(|a, b| {
        b.max_value
            .total_cmp(&a.max_value)
            .then(
                b.approximate_aggregate_value
                    .total_cmp(&a.approximate_aggregate_value),
            )
            .then_with(|| a.keys.cmp(&b.keys))
            .then_with(|| a.target.cmp(&b.target))
    });
}

/// Which window and rules a report reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportQuery {
    /// End of the window.
    pub end: SystemTime,
    /// Length of the window, minutes (one datapoint each).
    pub minutes: u32,
    /// Contributors per rule, 1 to [`MAX_CONTRIBUTORS`].
    pub limit: i32,
    /// Rules to read on every enabled target (a GSI's `PKC` is read regardless).
    pub kinds: Vec<RuleKind>,
}

impl ReportQuery {
    /// The last `minutes` before `end`, 10 keys per rule, `PKC` and `PKT`.
    pub fn last(minutes: u32, end: SystemTime) -> Self {
        Self {
            end,
            minutes,
            limit: 10,
            kinds: vec![RuleKind::Pkc, RuleKind::Pkt],
        }
    }

    fn start(&self) -> Result<SystemTime, InsightsError> {
        if !(1..=MAX_CONTRIBUTORS).contains(&self.limit) {
            return Err(InsightsError::Invalid {
                field: "limit",
                reason: "must be 1 to 100 contributors per rule",
            });
        }
        let window = Duration::from_secs(u64::from(self.minutes) * 60);
        match self.end.checked_sub(window) {
            Some(start) if self.minutes > 0 => Ok(start),
            _ => Err(InsightsError::Invalid {
                field: "minutes",
                reason: "must be at least 1 and end after the Unix epoch",
            }),
        }
    }
}

/// Something a report could not see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gap", rename_all = "snake_case")]
pub enum Gap {
    /// Contributor Insights is not enabled on this table or GSI: its keys are not named.
    NotEnabled {
        /// The table or GSI.
        target: Target,
        /// Its status.
        status: String,
    },
    /// A GSI without a `PKC` rule (`THROTTLED_KEYS` mode): its index write throttling is unseen.
    IndexWritesUnseen {
        /// The GSI.
        target: Target,
    },
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotEnabled { target, status } => {
                write!(
                    f,
                    "{target}: Contributor Insights is {status}; its keys are not named"
                )
            }
            Self::IndexWritesUnseen { target } => write!(
                f,
                "{target}: THROTTLED_KEYS mode has no most-accessed rule, and index write throttling \
                 is not in the throttled graph; enable ACCESSED_AND_THROTTLED_KEYS or rely on the \
                 client sampler"
            ),
        }
    }
}

/// The rules a report reads and what it cannot see.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReportPlan {
    /// Rules to read, table first.
    pub rules: Vec<InsightRule>,
    /// Targets or signals left out.
    pub gaps: Vec<Gap>,
}

/// Decides which rules to read: `kinds` on every enabled target plus each GSI's `PKC` (the GSI
/// blind spot); fails with [`InsightsError::Disabled`] when no target is enabled.
pub fn plan_report(
    statuses: &[InsightsStatus],
    kinds: &[RuleKind],
) -> Result<ReportPlan, InsightsError> {
    if let Some(first) = statuses.first()
        && !statuses.iter().any(InsightsStatus::is_enabled)
    {
        return Err(InsightsError::Disabled {
            target: first.target.clone(),
            status: first.status_str().to_owned(),
        });
    }
    let mut plan = ReportPlan::default();
    for s in statuses {
        if !s.is_enabled() {
            plan.gaps.push(Gap::NotEnabled {
                target: s.target.clone(),
                status: s.status_str().to_owned(),
            });
            continue;
        }
        let is_index = s.target.index.is_some();
        if is_index && s.rule(RuleKind::Pkc).is_none() {
            plan.gaps.push(Gap::IndexWritesUnseen {
                target: s.target.clone(),
            });
        }
        let wanted = |k: RuleKind| kinds.contains(&k) || (is_index && k == RuleKind::Pkc);
        plan.rules
            .extend(s.rules.iter().filter(|r| wanted(r.kind)).cloned());
    }
    Ok(plan)
}

/// The hottest keys of a table and its GSIs.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct HotKeys {
    /// Contributors of every rule read, hottest first.
    pub contributors: Vec<Contributor>,
    /// What could not be seen.
    pub gaps: Vec<Gap>,
}

/// Where a named key came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A Contributor Insights rule of a table or GSI (rates are accesses, reads + writes).
    Insights {
        /// The table or GSI.
        target: Target,
        /// The rule that named it.
        kind: RuleKind,
    },
    /// The client sampler (rates are capacity units of one kind).
    Sampler {
        /// The partition (or shard) id the sampler counted it under.
        partition: String,
        /// Read or write.
        kind: Kind,
        /// Whether even its lower bound is over the threshold.
        certain: bool,
    },
}

/// A hot key with its rate and where it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedKey {
    /// The partition key value.
    pub key: String,
    /// Its rate per second (the busiest minute for Contributor Insights).
    pub per_second: f64,
    /// Who named it.
    pub source: Source,
}

/// Joins Contributor Insights contributors and a client sampler [`Report`] into one list, hottest
/// first. A GSI's `PKC` keys and the sampler's write keys together cover the GSI blind spot.
pub fn merge(contributors: &[Contributor], sampled: &Report) -> Vec<NamedKey> {
    let insights = contributors.iter().filter_map(|c| {
        Some(NamedKey {
            key: c.partition_key()?.to_owned(),
            per_second: c.peak_per_second(),
            source: Source::Insights {
                target: c.target.clone(),
                kind: c.kind,
            },
        })
    });
    let samples = sampled.hot.iter().map(|h| NamedKey {
        key: h.key.clone(),
        per_second: h.estimate,
        source: Source::Sampler {
            partition: h.partition.clone(),
            kind: h.kind,
            certain: h.certain,
        },
    });
    let mut named: Vec<NamedKey> = insights.chain(samples).collect();
    named.sort_by(|a, b| {
        b.per_second
            .total_cmp(&a.per_second)
            .then_with(|| a.key.cmp(&b.key))
    });
    named
}

/// Contributor Insights on a table and its GSIs, through DynamoDB and CloudWatch clients.
#[derive(Debug, Clone)]
pub struct Insights {
    ddb: aws_sdk_dynamodb::Client,
    cloudwatch: aws_sdk_cloudwatch::Client,
}

impl Insights {
    /// Clients built from `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Self::from_clients(
            aws_sdk_dynamodb::Client::new(config),
            aws_sdk_cloudwatch::Client::new(config),
        )
    }

    /// Uses the given clients.
    pub fn from_clients(
        ddb: aws_sdk_dynamodb::Client,
        cloudwatch: aws_sdk_cloudwatch::Client,
    ) -> Self {
        Self { ddb, cloudwatch }
    }

    /// The table and each of its GSIs (from DescribeTable).
    pub async fn targets(&self, table: &str) -> Result<Vec<Target>, InsightsError> {
        let out = self
            .ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| {
                ddb_error(
                    "DescribeTable",
                    table,
                    e,
                    DescribeTableError::is_resource_not_found_exception,
                )
            })?;
        let gsis = out
            .table()
            .map(|t| t.global_secondary_indexes())
            .unwrap_or_default();
        let indexes = gsis
            .iter()
            .filter_map(|g| g.index_name())
            .map(|i| Target::index(table, i));
        Ok(std::iter::once(Target::table(table))
            .chain(indexes)
            .collect())
    }

    /// Enables Contributor Insights on the table (in `mode`) and on every GSI (see [`mode_for`]).
    pub async fn enable(
        &self,
        table: &str,
        mode: ContributorInsightsMode,
    ) -> Result<Vec<InsightsStatus>, InsightsError> {
        self.update(table, ContributorInsightsAction::Enable, Some(mode))
            .await
    }

    /// Disables Contributor Insights on the table and every GSI (its rules are deleted).
    pub async fn disable(&self, table: &str) -> Result<Vec<InsightsStatus>, InsightsError> {
        self.update(table, ContributorInsightsAction::Disable, None)
            .await
    }

    async fn update(
        &self,
        table: &str,
        action: ContributorInsightsAction,
        mode: Option<ContributorInsightsMode>,
    ) -> Result<Vec<InsightsStatus>, InsightsError> {
        let mut statuses = Vec::new();
        // One at a time: DynamoDB refuses overlapping updates of one table's settings.
        for target in self.targets(table).await? {
            let out = self
                .ddb
                .update_contributor_insights()
                .table_name(&target.table)
                .set_index_name(target.index.clone())
                .contributor_insights_action(action.clone())
                .set_contributor_insights_mode(mode.clone().map(|m| mode_for(&target, m)))
                .send()
                .await
                .map_err(|e| {
                    ddb_error(
                        "UpdateContributorInsights",
                        &target.to_string(),
                        e,
                        UpdateContributorInsightsError::is_resource_not_found_exception,
                    )
                })?;
            statuses.push(InsightsStatus {
                target,
                status: out.contributor_insights_status,
                mode: out.contributor_insights_mode,
                rules: Vec::new(),
                failure: None,
            });
        }
        Ok(statuses)
    }

    /// Status, mode and rule names of the table and every GSI (DescribeContributorInsights).
    pub async fn describe(&self, table: &str) -> Result<Vec<InsightsStatus>, InsightsError> {
        let targets = self.targets(table).await?;
        try_join_all(targets.into_iter().map(|t| self.describe_target(t))).await
    }

    async fn describe_target(&self, target: Target) -> Result<InsightsStatus, InsightsError> {
        let out = self
            .ddb
            .describe_contributor_insights()
            .table_name(&target.table)
            .set_index_name(target.index.clone())
            .send()
            .await
            .map_err(|e| {
                ddb_error(
                    "DescribeContributorInsights",
                    &target.to_string(),
                    e,
                    DescribeContributorInsightsError::is_resource_not_found_exception,
                )
            })?;
        let rules = out
            .contributor_insights_rule_list()
            .iter()
            .filter_map(|name| InsightRule::new(target.clone(), name))
            .collect();
        let failure = out.failure_exception().map(|f| {
            format!(
                "{}: {}",
                f.exception_name().unwrap_or("failure"),
                f.exception_description().unwrap_or_default()
            )
        });
        Ok(InsightsStatus {
            target,
            status: out.contributor_insights_status,
            mode: out.contributor_insights_mode,
            rules,
            failure,
        })
    }

    /// Every table and GSI with Contributor Insights settings (ListContributorInsights, all
    /// pages), optionally of one table; rules are not listed.
    pub async fn list(&self, table: Option<&str>) -> Result<Vec<InsightsStatus>, InsightsError> {
        let resource = table.unwrap_or("all tables");
        let pages: Vec<_> = self
            .ddb
            .list_contributor_insights()
            .set_table_name(table.map(str::to_owned))
            .into_paginator()
            .send()
            .collect::<Result<_, _>>()
            .await
            .map_err(|e| ddb_error("ListContributorInsights", resource, e, |_| false))?;
        Ok(pages
            .iter()
            .flat_map(|p| p.contributor_insights_summaries())
            .map(|s| InsightsStatus {
                target: Target {
                    table: s.table_name().unwrap_or_default().to_owned(),
                    index: s.index_name().map(str::to_owned),
                },
                status: s.contributor_insights_status().cloned(),
                mode: s.contributor_insights_mode().cloned(),
                rules: Vec::new(),
                failure: None,
            })
            .collect())
    }

    /// One rule's contributors over the query's window (GetInsightRuleReport, one datapoint per
    /// minute, ranked by their sum), in CloudWatch's order.
    pub async fn rule_report(
        &self,
        rule: &InsightRule,
        query: &ReportQuery,
    ) -> Result<Vec<Contributor>, InsightsError> {
        let start = query.start()?;
        let out = self
            .cloudwatch
            .get_insight_rule_report()
            .rule_name(&rule.name)
            .start_time(DateTime::from(start))
            .end_time(DateTime::from(query.end))
            .period(PERIOD_SECS)
            .max_contributor_count(query.limit)
            .order_by("Sum")
            .send()
            .await
            .map_err(|e| {
                cw_error(
                    "GetInsightRuleReport",
                    &rule.name,
                    e,
                    GetInsightRuleReportError::is_resource_not_found_exception,
                )
            })?;
        Ok(out
            .contributors()
            .iter()
            .map(|c| Contributor::from_report(rule, c, PERIOD_SECS))
            .collect())
    }

    /// The hottest keys of `table` and its GSIs: describes them, reads the rules of
    /// [`plan_report`] in parallel and sorts every contributor hottest first.
    pub async fn hot_keys(
        &self,
        table: &str,
        query: &ReportQuery,
    ) -> Result<HotKeys, InsightsError> {
        query.start()?;
        let plan = plan_report(&self.describe(table).await?, &query.kinds)?;
        let reports = try_join_all(plan.rules.iter().map(|r| self.rule_report(r, query))).await?;
        let mut contributors: Vec<Contributor> = reports.into_iter().flatten().collect();
        sort_hottest_first(&mut contributors);
        Ok(HotKeys {
            contributors,
            gaps: plan.gaps,
        })
    }
}

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

/// A `PutDashboard` body: the hottest key per second of each `PKC` rule against the partition
/// ceilings and the alarm line, top contributors of each `PKC`/`PKT` rule, throttles by reason per
/// target, counter lag, stream iterator age, the stream consumers' leases and count-rebuilder's
/// corrections. Every EMF series is graphed with its [`EmfMetric::emitter`], the only `Function`
/// that writes it.
pub fn dashboard_body(
    spec: &DashboardSpec,
    plan: &AlarmPlan,
    statuses: &[InsightsStatus],
) -> Value {
    let region = spec.region.as_str();
    let graph = |title: String, props: Value| {
        let mut p =
            json!({"title": title, "region": region, "view": "timeSeries", "period": PERIOD_SECS});
        if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), props) {
            p.extend(extra);
        }
        json!({"type": "metric", "width": 8, "height": 6, "properties": p})
    };
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
    let emf = |m: EmfMetric, options: Value| {
        json!([
            EMF_NAMESPACE,
            m.name(),
            DIMENSION,
            m.emitter().name(),
            options
        ])
    };
    let mut iterator_age = vec![json!([
        "AWS/Lambda", "IteratorAge", "FunctionName", format!("{}likes-aggregator", spec.prefix),
        {"stat": "Maximum"}
    ])];
    iterator_age.extend(spec.stream.iter().map(|s| {
        json!(["AWS/Kinesis", "GetRecords.IteratorAgeMilliseconds", "StreamName", s, {"stat": "Maximum"}])
    }));
    let streams = [
        graph(
            "Counter lag: events applied, not yet flushed".into(),
            json!({"metrics": [emf(EmfMetric::CounterLagEvents, json!({"stat": "Maximum"}))]}),
        ),
        graph(
            "Stream iterator age (ms)".into(),
            json!({"metrics": iterator_age}),
        ),
        graph(
            "Stream consumer leases (heatsink tail --emf or an embedding service)".into(),
            json!({"metrics": [
                emf(EmfMetric::LeasesHeld, json!({"stat": "Maximum", "label": "held (max per worker)"})),
                emf(EmfMetric::LeasesExpired, json!({"stat": "Sum", "label": "expired, taken over"})),
            ]}),
        ),
        // count-rebuilder runs every 5 minutes: one datapoint per run, not per minute.
        graph(
            "Counter corrections (count-rebuilder)".into(),
            json!({"period": REBUILD_PERIOD_SECS, "metrics": [
                emf(EmfMetric::CounterCorrectionLikes, json!({"stat": "Sum", "label": "likes corrected"})),
                emf(EmfMetric::CountersCorrected, json!({"stat": "Sum", "label": "counters corrected"})),
                emf(EmfMetric::CountersUnsettled, json!({"stat": "Maximum", "label": "counters unsettled", "yAxis": "right"})),
            ]}),
        ),
    ];
    let header = json!({"type": "text", "width": 24, "height": 2, "properties": {"markdown": format!(
        "# {}hot keys\nHottest key per second against the per-partition ceilings (1,000 WCU/s, \
         3,000 RCU/s; Contributor Insights counts reads and writes together, per minute).",
        plan.prefix()
    )}});
    let widgets: Vec<Value> = std::iter::once(header)
        .chain(capacity)
        .chain(contributors)
        .chain(throttles)
        .chain(streams)
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

fn ddb_error<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
    not_found: impl Fn(&E) -> bool,
) -> InsightsError
where
    E: std::error::Error + 'static,
    R: fmt::Debug,
{
    if e.as_service_error().is_some_and(not_found) {
        let table = resource.split('/').next().unwrap_or(resource);
        return InsightsError::TableNotFound {
            table: table.to_owned(),
        };
    }
    InsightsError::Dynamo {
        operation,
        resource: resource.to_owned(),
        message: describe(&e),
    }
}

fn cw_error<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
    not_found: impl Fn(&E) -> bool,
) -> InsightsError
where
    E: std::error::Error + 'static,
    R: fmt::Debug,
{
    if e.as_service_error().is_some_and(not_found) {
        return InsightsError::RuleNotFound {
            rule: resource.to_owned(),
        };
    }
    InsightsError::CloudWatch {
        operation,
        resource: resource.to_owned(),
        message: describe(&e),
    }
}

#[cfg(test)]
mod tests {
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

    const TABLE: &str = "heatsink-likes";
    const EPOCH: i64 = 1_700_000_000;

    fn rule_name(kind: &str, slug: &str) -> String {
        format!("{RULE_PREFIX}{kind}-{slug}-1700000000000")
    }

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

    fn enabled(target: Target, kinds: &[RuleKind]) -> InsightsStatus {
        let slug = target.slug();
        InsightsStatus {
            rules: kinds
                .iter()
                .filter_map(|k| InsightRule::new(target.clone(), rule_name(k.code(), &slug)))
                .collect(),
            target,
            status: Some(ContributorInsightsStatus::Enabled),
            mode: Some(ContributorInsightsMode::AccessedAndThrottledKeys),
            failure: None,
        }
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
        let update = mock!(aws_sdk_dynamodb::Client::update_contributor_insights)
            .then_compute_output(|r| {
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
        let throttled =
            InsightRule::new(Target::table(TABLE), rule_name("PKT", TABLE)).expect("rule");
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
            .filter(|m| m[0] == EMF_NAMESPACE)
            .collect();
        assert_eq!(
            emf_series.len(),
            6,
            "counter lag, the two lease series and the three correction series"
        );
        for m in emf_series {
            let metric = EmfMetric::ALL
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
            ])
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
}
