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
//! use heatsink::insights::{AlarmPlan, RuleKind, insight_rule_metric};
//! let rule = "DynamoDBContributorInsights-PKC-heatsink-likes-by_post-1700000000000";
//! assert_eq!(RuleKind::from_rule_name(rule), Some(RuleKind::Pkc));
//! assert_eq!(
//!     insight_rule_metric(rule, "MaxContributorValue"),
//!     "INSIGHT_RULE_METRIC('DynamoDBContributorInsights-PKC-heatsink-likes-by_post-1700000000000', 'MaxContributorValue')"
//! );
//! // Alarm when one key takes 80 % of a partition's 1,000 WCU/s, per one-minute datapoint:
//! assert_eq!(AlarmPlan::new("heatsink-", 0.8)?.hot_key_threshold(), 48_000.0);
//! # Ok::<(), heatsink::insights::InsightsError>(())
//! ```
//!
//! Reading the hottest keys of a table and its GSIs:
//! ```no_run
//! # async fn f(config: aws_config::SdkConfig) -> Result<(), heatsink::insights::InsightsError> {
//! use std::time::SystemTime;
//! use heatsink::insights::{Insights, ReportQuery};
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

use crate::error::AwsError;

mod alarms;
mod client;
mod dashboard;
mod report;
mod rules;
#[cfg(test)]
mod tests;

pub use alarms::*;
pub use client::*;
pub use dashboard::*;
pub use report::*;
pub use rules::*;

/// Seconds per Contributor Insights datapoint: DynamoDB's rules aggregate per minute.
pub const PERIOD_SECS: i32 = 60;
/// The most contributors one `GetInsightRuleReport` returns per rule.
pub const MAX_CONTRIBUTORS: i32 = 100;
/// The rule statistic alarms and graphs watch: the busiest key's count in one datapoint.
pub const MAX_CONTRIBUTOR_VALUE: &str = "MaxContributorValue";

pub(crate) const RULE_PREFIX: &str = "DynamoDBContributorInsights-";
pub(crate) const DYNAMODB_NAMESPACE: &str = "AWS/DynamoDB";

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
    /// DynamoDB or CloudWatch refused the call or could not be reached; retry or fix the
    /// request ([`AwsError::is_transient`] tells which).
    #[error(transparent)]
    Aws(#[from] AwsError),
}
