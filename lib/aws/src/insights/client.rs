//! The Contributor Insights client: enable, describe, list and read reports.

use super::*;

/// Contributor Insights on a table and its GSIs, through DynamoDB and CloudWatch clients.
#[derive(Debug, Clone)]
pub struct Insights {
    ddb: aws_sdk_dynamodb::Client,
    cloudwatch: aws_sdk_cloudwatch::Client,
}

impl Insights {
    /// Clients built from `config` (with [`crate::timeouts::Timeouts::CALL`] unless `config`
    /// bounds its operations).
    pub fn new(config: &aws_types::SdkConfig) -> Self {
        use crate::timeouts::{Timeouts, bounded};
        Self::from_clients(
            bounded!(
                aws_sdk_dynamodb,
                aws_sdk_dynamodb::Client::new(config),
                Timeouts::CALL
            ),
            bounded!(
                aws_sdk_cloudwatch,
                aws_sdk_cloudwatch::Client::new(config),
                Timeouts::CALL
            ),
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

pub(crate) fn ddb_error<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
    not_found: impl Fn(&E) -> bool,
) -> InsightsError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    if e.as_service_error().is_some_and(not_found) {
        let table = resource.split('/').next().unwrap_or(resource);
        return InsightsError::TableNotFound {
            table: table.to_owned(),
        };
    }
    AwsError::new("DynamoDB", operation, resource, e).into()
}

pub(crate) fn cw_error<E, R>(
    operation: &'static str,
    resource: &str,
    e: SdkError<E, R>,
    not_found: impl Fn(&E) -> bool,
) -> InsightsError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    if e.as_service_error().is_some_and(not_found) {
        return InsightsError::RuleNotFound {
            rule: resource.to_owned(),
        };
    }
    AwsError::new("CloudWatch", operation, resource, e).into()
}
