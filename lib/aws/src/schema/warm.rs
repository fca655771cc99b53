//! Pre-warming a table for a predicted spike: read its warm throughput and on-demand maximum
//! (`DescribeTable`), plan with [`heatsink_core::warm::plan`], and raise it (`UpdateTable
//! WarmThroughput`) only when the plan allows.
//!
//! ```no_run
//! use heatsink::schema::warm::{Capacity, WarmRequest, describe, raise};
//!
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::schema::warm::WarmError> {
//! let table = describe(&ddb, "hs-counters").await?;
//! let plan = heatsink::schema::warm::plan(
//!     &WarmRequest::new(Capacity { read: 0, write: 10_000 }),
//!     &table,
//! );
//! raise(&ddb, "hs-counters", &plan).await?; // refused when an on-demand maximum is below the peak
//! # Ok(()) }
//! ```
//!
//! Raising is asynchronous on AWS (the table's warm throughput shows `UPDATING`, then
//! `ACTIVE`) and cannot be undone: warm throughput is never lowered. Local emulators do not
//! implement warm throughput; the tests use `aws-smithy-mocks` shapes from the API reference.

use aws_sdk_dynamodb::types::{
    BillingMode, GlobalSecondaryIndexUpdate, TableDescription, UpdateGlobalSecondaryIndexAction,
    WarmThroughput,
};
pub use heatsink_core::warm::{
    Capacity, DEFAULT_HEADROOM, Kind, Refusal, TableCapacity, WarmPlan, WarmRequest, plan,
};

use crate::error::AwsError;

/// Why a table's warm throughput could not be read or raised.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    /// DescribeTable or UpdateTable failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The table answered without a description.
    #[error("DynamoDB described {table} without a table description: check the table name")]
    NotFound {
        /// The table.
        table: String,
    },
    /// The table has no global secondary index of that name.
    #[error(
        "{table} has no global secondary index {index}: check --index (aws dynamodb describe-table)"
    )]
    NoIndex {
        /// The table.
        table: String,
        /// The index asked for.
        index: String,
    },
    /// The plan has refusals (an on-demand maximum below the peak): nothing was changed.
    #[error("{table}: not raised: {}", reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused {
        /// The table.
        table: String,
        /// Why.
        reasons: Vec<Refusal>,
    },
}

/// `table` as the plan reads it, from `DescribeTable` ([`describe_in`] for one of its GSIs).
pub async fn describe(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<TableCapacity, WarmError> {
    describe_in(ddb, table, None).await
}

/// `table`, or its global secondary index `index`, as the plan reads it, from `DescribeTable`
/// (an index bills as its table does; its warm throughput and maximum are its own).
pub async fn describe_in(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    index: Option<&str>,
) -> Result<TableCapacity, WarmError> {
    let out = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| AwsError::dynamodb("DescribeTable", table, e))?;
    let desc = out.table().ok_or_else(|| WarmError::NotFound {
        table: table.to_owned(),
    })?;
    let capacity = capacity_of(desc);
    let Some(index) = index else {
        return Ok(capacity);
    };
    let gsi = desc
        .global_secondary_indexes()
        .iter()
        .find(|g| g.index_name() == Some(index))
        .ok_or_else(|| WarmError::NoIndex {
            table: table.to_owned(),
            index: index.to_owned(),
        })?;
    Ok(TableCapacity {
        warm: gsi.warm_throughput().map_or(Capacity::default(), |w| {
            warm_units(w.read_units_per_second(), w.write_units_per_second())
        }),
        on_demand: capacity.on_demand,
        max: maximum(gsi.on_demand_throughput()),
    })
}

/// A count of units from the API (`None` for a missing or negative one).
fn units(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

/// A reported warm throughput (a missing or negative figure reads as 0).
fn warm_units(read: Option<i64>, write: Option<i64>) -> Capacity {
    Capacity {
        read: units(read).unwrap_or(0),
        write: units(write).unwrap_or(0),
    }
}

/// An `OnDemandThroughput` as maxima ([`Capacity::UNBOUNDED`] where unset or `-1`).
fn maximum(m: Option<&aws_sdk_dynamodb::types::OnDemandThroughput>) -> Capacity {
    m.map_or(Capacity::UNBOUNDED, |m| Capacity {
        read: units(m.max_read_request_units()).unwrap_or(u64::MAX),
        write: units(m.max_write_request_units()).unwrap_or(u64::MAX),
    })
}

/// The warm throughput, billing mode and on-demand maximum of a table description. A missing
/// warm figure reads as 0 (the plan then asks for the need), a missing or negative maximum as
/// none (`-1` is the API's "no maximum"); a table is on demand when its `BillingModeSummary`
/// says so, or, without one, when it has no provisioned write capacity.
pub fn capacity_of(desc: &TableDescription) -> TableCapacity {
    let warm = desc.warm_throughput().map_or(Capacity::default(), |w| {
        warm_units(w.read_units_per_second(), w.write_units_per_second())
    });
    // `BillingModeSummary` is absent from a table that was never on demand; an on-demand
    // table reports zero provisioned units where it reports any.
    let on_demand = match desc.billing_mode_summary().and_then(|b| b.billing_mode()) {
        Some(m) => *m == BillingMode::PayPerRequest,
        None => desc
            .provisioned_throughput()
            .and_then(|p| p.write_capacity_units())
            .is_none_or(|w| w == 0),
    };
    TableCapacity {
        warm,
        on_demand,
        max: maximum(desc.on_demand_throughput()),
    }
}

/// Raises `table`'s warm throughput to `plan`'s target ([`raise_in`] for one of its GSIs).
pub async fn raise(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    plan: &WarmPlan,
) -> Result<bool, WarmError> {
    raise_in(ddb, table, None, plan).await
}

/// Raises the warm throughput of `table` (or of its GSI `index`) to `plan`'s target: one
/// `UpdateTable` when the plan is [`WarmPlan::applicable`], nothing when today's covers the
/// peak, [`WarmError::Refused`] (nothing changed) when an on-demand maximum is below it.
/// Returns whether it called.
pub async fn raise_in(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    index: Option<&str>,
    plan: &WarmPlan,
) -> Result<bool, WarmError> {
    if !plan.refusals.is_empty() {
        return Err(WarmError::Refused {
            table: index.map_or_else(|| table.to_owned(), |i| format!("{table} index {i}")),
            reasons: plan.refusals.clone(),
        });
    }
    let Some(target) = plan.update else {
        return Ok(false);
    };
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let warm = WarmThroughput::builder()
        .read_units_per_second(to_i64(target.read))
        .write_units_per_second(to_i64(target.write))
        .build();
    let req = ddb.update_table().table_name(table);
    let req = match index {
        None => req.warm_throughput(warm),
        Some(i) => req.global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .update(
                    UpdateGlobalSecondaryIndexAction::builder()
                        .index_name(i)
                        .warm_throughput(warm)
                        .build()
                        .map_err(|e| WarmError::NoIndex {
                            table: table.to_owned(),
                            index: format!("{i}: {e}"),
                        })?,
                )
                .build(),
        ),
    };
    req.send()
        .await
        .map_err(|e| AwsError::dynamodb("UpdateTable", table, e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::operation::update_table::{UpdateTableInput, UpdateTableOutput};
    use aws_sdk_dynamodb::types::{
        BillingModeSummary, OnDemandThroughput, TableWarmThroughputDescription,
    };
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    /// A `DescribeTable` answer as the API reference shapes it: an on-demand table warm at
    /// 12,000 reads and 4,000 writes, with an on-demand maximum of `max_writes` (-1: none).
    fn described(max_writes: i64) -> DescribeTableOutput {
        DescribeTableOutput::builder()
            .table(
                TableDescription::builder()
                    .table_name("hs-counters")
                    .billing_mode_summary(
                        BillingModeSummary::builder()
                            .billing_mode(BillingMode::PayPerRequest)
                            .build(),
                    )
                    .warm_throughput(
                        TableWarmThroughputDescription::builder()
                            .read_units_per_second(12_000)
                            .write_units_per_second(4_000)
                            .build(),
                    )
                    .on_demand_throughput(
                        OnDemandThroughput::builder()
                            .max_read_request_units(-1)
                            .max_write_request_units(max_writes)
                            .build(),
                    )
                    .build(),
            )
            .build()
    }

    #[tokio::test]
    async fn a_spike_raises_the_write_warm_throughput_once_and_keeps_the_reads_api_reference_shape()
    {
        let describe_rule =
            mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| described(-1));
        let update_rule = mock!(aws_sdk_dynamodb::Client::update_table)
            .match_requests(|r: &UpdateTableInput| {
                r.table_name() == Some("hs-counters")
                    && r.warm_throughput().is_some_and(|w| {
                        w.read_units_per_second() == Some(12_000)
                            && w.write_units_per_second() == Some(12_500)
                    })
            })
            .then_output(|| UpdateTableOutput::builder().build());
        let ddb = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&describe_rule, &update_rule]
        );
        let table = describe(&ddb, "hs-counters").await.expect("described");
        assert_eq!(
            (table.warm, table.on_demand, table.max),
            (
                Capacity {
                    read: 12_000,
                    write: 4_000
                },
                true,
                Capacity::UNBOUNDED
            )
        );
        let p = plan(
            &WarmRequest::new(Capacity {
                read: 0,
                write: 10_000,
            }),
            &table,
        );
        assert!(raise(&ddb, "hs-counters", &p).await.expect("raised"));
        assert_eq!(update_rule.num_calls(), 1);
        // Warm already: no call.
        let calm = plan(&WarmRequest::new(Capacity { read: 1, write: 1 }), &table);
        assert!(
            !raise(&ddb, "hs-counters", &calm)
                .await
                .expect("nothing to do")
        );
        assert_eq!(update_rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn an_on_demand_maximum_below_the_peak_refuses_and_changes_nothing_api_reference_shape() {
        let describe_rule =
            mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| described(5_000));
        let update_rule = mock!(aws_sdk_dynamodb::Client::update_table)
            .then_output(|| UpdateTableOutput::builder().build());
        let ddb = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&describe_rule, &update_rule]
        );
        let table = describe(&ddb, "hs-counters").await.expect("described");
        let p = plan(
            &WarmRequest::new(Capacity {
                read: 0,
                write: 10_000,
            }),
            &table,
        );
        let err = raise(&ddb, "hs-counters", &p).await.expect_err("refused");
        let line = err.to_string();
        assert!(
            line.contains("5000 writes/s") && line.contains("MaxOnDemandThroughputExceeded"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        assert_eq!(update_rule.num_calls(), 0, "nothing changed");
    }

    #[tokio::test]
    async fn an_index_is_planned_from_its_own_warm_throughput_and_raised_by_name_api_reference_shape()
     {
        use aws_sdk_dynamodb::types::{
            GlobalSecondaryIndexDescription, GlobalSecondaryIndexWarmThroughputDescription,
        };
        let describe_rule = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| {
            let mut out = described(-1);
            if let Some(t) = out.table.as_mut() {
                t.global_secondary_indexes = Some(vec![
                    GlobalSecondaryIndexDescription::builder()
                        .index_name("by-post")
                        .warm_throughput(
                            GlobalSecondaryIndexWarmThroughputDescription::builder()
                                .read_units_per_second(12_000)
                                .write_units_per_second(4_000)
                                .build(),
                        )
                        .on_demand_throughput(
                            OnDemandThroughput::builder()
                                .max_read_request_units(-1)
                                .max_write_request_units(20_000)
                                .build(),
                        )
                        .build(),
                ]);
            }
            out
        });
        let update_rule = mock!(aws_sdk_dynamodb::Client::update_table)
            .match_requests(|r: &UpdateTableInput| {
                r.warm_throughput().is_none()
                    && r.global_secondary_index_updates().len() == 1
                    && r.global_secondary_index_updates()[0]
                        .update()
                        .is_some_and(|u| {
                            u.index_name() == "by-post"
                                && u.warm_throughput()
                                    .is_some_and(|w| w.write_units_per_second() == Some(12_500))
                        })
            })
            .then_output(|| UpdateTableOutput::builder().build());
        let ddb = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&describe_rule, &update_rule]
        );
        let index = describe_in(&ddb, "hs-liked", Some("by-post"))
            .await
            .expect("described");
        assert_eq!(
            (index.warm.write, index.max.write, index.on_demand),
            (4_000, 20_000, true)
        );
        let p = plan(
            &WarmRequest::new(Capacity {
                read: 0,
                write: 10_000,
            }),
            &index,
        );
        assert!(
            raise_in(&ddb, "hs-liked", Some("by-post"), &p)
                .await
                .expect("raised")
        );
        assert_eq!(update_rule.num_calls(), 1);
        let err = describe_in(&ddb, "hs-liked", Some("by-day"))
            .await
            .expect_err("no such index");
        assert!(
            err.to_string().contains("no global secondary index by-day"),
            "{err}"
        );
    }
}
