//! What each owner of a slot directory serves, from CloudWatch: the input a directory's loop
//! reads instead of a samples file, with the sampler's hot slots on top
//! ([`estimate_slot_load`](heatsink_core::autopilot::propose::estimate_slot_load)).
//!
//! One `GetMetricData` call (paged) reads `AWS/DynamoDB` `ConsumedWriteCapacityUnits`, the
//! `Sum` over the window, for every owner table, and divides by the window: write capacity
//! units per second, the unit a partition's 1,000 WCU/s limit is in. DynamoDB publishes the
//! metric once a minute and only for a minute with writes, so a table CloudWatch has no
//! datapoint for over the whole window is idle (0). A call that fails fails the period: no
//! load is guessed.
//!
//! ```no_run
//! # async fn f(cw: aws_sdk_cloudwatch::Client) -> Result<(), heatsink::autopilot::AutopilotError> {
//! use heatsink::autopilot::measure::owner_wcu;
//! let owners = ["posts-p1".to_owned(), "posts-p2".to_owned()];
//! let wcu = owner_wcu(&cw, &owners, 5, 1_800_000_000_000).await?;
//! println!("{wcu:?}"); // {"posts-p1": 812.4, "posts-p2": 97.0}
//! # Ok(()) }
//! ```
//!
//! Limits: CloudWatch lags a minute or two behind the writes, so a window shorter than
//! 5 minutes reads a partial last minute; at most 500 tables a call (pages beyond are read).

use std::collections::BTreeMap;

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};

use super::AutopilotError;
use crate::error::AwsError;
use crate::timeouts::Timeouts;

/// The metric read: write capacity consumed, summed per period.
pub const METRIC: &str = "ConsumedWriteCapacityUnits";

/// Write capacity units per second each of `tables` consumed over the `minutes` (1–1,440)
/// ending at `now_ms` (rounded down to the minute), from CloudWatch. Every table is in the
/// answer: a table without datapoints consumed 0.
pub async fn owner_wcu(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    tables: &[String],
    minutes: u32,
    now_ms: u64,
) -> Result<BTreeMap<String, f64>, AutopilotError> {
    let minutes = minutes.clamp(1, 1_440);
    let cloudwatch =
        &crate::timeouts::bounded!(aws_sdk_cloudwatch, cloudwatch.clone(), Timeouts::CALL);
    let end_s = now_ms / 60_000 * 60;
    let start_s = end_s.saturating_sub(u64::from(minutes) * 60);
    let window_s = f64::from(minutes) * 60.0;
    let mut out: BTreeMap<String, f64> = tables.iter().map(|t| (t.clone(), 0.0)).collect();
    for (chunk_no, chunk) in tables.chunks(500).enumerate() {
        let queries: Vec<MetricDataQuery> = chunk
            .iter()
            .enumerate()
            .map(|(i, table)| {
                MetricDataQuery::builder()
                    .id(format!("t{i}"))
                    .metric_stat(
                        MetricStat::builder()
                            .metric(
                                Metric::builder()
                                    .namespace("AWS/DynamoDB")
                                    .metric_name(METRIC)
                                    .dimensions(
                                        Dimension::builder().name("TableName").value(table).build(),
                                    )
                                    .build(),
                            )
                            .period(i32::try_from(minutes * 60).unwrap_or(86_400))
                            .stat("Sum")
                            .build(),
                    )
                    .return_data(true)
                    .build()
            })
            .collect();
        let mut next: Option<String> = None;
        loop {
            let page = cloudwatch
                .get_metric_data()
                .set_metric_data_queries(Some(queries.clone()))
                .start_time(DateTime::from_secs(i64::try_from(start_s).unwrap_or(0)))
                .end_time(DateTime::from_secs(
                    i64::try_from(end_s).unwrap_or(i64::MAX),
                ))
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| {
                    AwsError::new(
                        "CloudWatch",
                        "GetMetricData",
                        format!("{METRIC} of {} tables (batch {chunk_no})", chunk.len()),
                        e,
                    )
                })?;
            for r in page.metric_data_results() {
                let Some(table) = r
                    .id()
                    .and_then(|id| id.strip_prefix('t'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| chunk.get(n))
                else {
                    continue;
                };
                let sum: f64 = r.values().iter().filter(|v| v.is_finite()).sum();
                if let Some(e) = out.get_mut(table) {
                    *e += sum.max(0.0) / window_s;
                }
            }
            next = page.next_token().map(str::to_owned);
            if next.is_none() {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use aws_sdk_cloudwatch::operation::get_metric_data::{GetMetricDataError, GetMetricDataOutput};
    use aws_sdk_cloudwatch::types::MetricDataResult;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;
    use crate::testing::error_meta;

    /// Two pages: the first sums 30,000 WCU over 5 minutes for `a`, the second adds 6,000;
    /// `b` has no datapoints (idle); `c` 600.
    #[tokio::test]
    async fn smithy_mock_owner_wcu_sums_every_page_per_second_and_an_idle_table_is_zero() {
        let first = mock!(aws_sdk_cloudwatch::Client::get_metric_data)
            .match_requests(|r| r.next_token().is_none())
            .then_output(|| {
                GetMetricDataOutput::builder()
                    .metric_data_results(
                        MetricDataResult::builder()
                            .id("t0")
                            .values(30_000.0)
                            .build(),
                    )
                    .metric_data_results(MetricDataResult::builder().id("t1").build())
                    .metric_data_results(MetricDataResult::builder().id("t2").values(600.0).build())
                    .next_token("page-2")
                    .build()
            });
        let second = mock!(aws_sdk_cloudwatch::Client::get_metric_data)
            .match_requests(|r| r.next_token() == Some("page-2"))
            .then_output(|| {
                GetMetricDataOutput::builder()
                    .metric_data_results(
                        MetricDataResult::builder().id("t0").values(6_000.0).build(),
                    )
                    .build()
            });
        let cw = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&first, &second]);
        let tables = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let wcu = owner_wcu(&cw, &tables, 5, 1_800_000_030_000)
            .await
            .expect("measured");
        assert_eq!(wcu["a"], 120.0, "36,000 WCU over 300 s");
        assert_eq!(wcu["b"], 0.0, "no datapoints: idle");
        assert_eq!(wcu["c"], 2.0);
        assert_eq!(first.num_calls() + second.num_calls(), 2);
    }

    /// A denied call fails the period with the call named: no load is guessed.
    #[tokio::test]
    async fn smithy_mock_a_denied_get_metric_data_fails_naming_the_call() {
        let denied = mock!(aws_sdk_cloudwatch::Client::get_metric_data)
            .then_error(|| GetMetricDataError::generic(error_meta("AccessDeniedException")));
        let cw = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&denied]);
        let err = owner_wcu(&cw, &["a".to_owned()], 5, 1_800_000_000_000)
            .await
            .expect_err("denied");
        let text = err.to_string();
        assert!(text.contains("GetMetricData"), "{text}");
    }
}
