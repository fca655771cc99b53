//! A recorder of every AWS call a piece of code makes: an SDK interceptor that notes
//! (service, operation, resource) before each call is sent, for comparing a function's calls
//! with the IAM grants of the stacks (`infra/grants.json`, `tests/tests/it/grants.rs`).
//!
//! One [`CallLog`] is shared by the clients of one function; attach it with
//! [`CallLog::interceptor`] to each client's config (`.interceptor(log.interceptor())`). It sees
//! every call, including calls answered by `aws-smithy-mocks` (the interceptor runs before the
//! mock), failed calls and retried ones (recorded once: the set is what matters for IAM).
//!
//! The resource is read from the typed input of the operations heatsink's functions use
//! (table name, stream ARN, insight rule name). An operation this module does not know is
//! recorded with the resource `?`, so a comparison with the grants fails instead of passing
//! silently: teach [`resource`] the new operation.
//!
//! `TransactWriteItems` has no IAM action of its own: IAM authorizes each item of it as the
//! matching single-item action (`PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem`)
//! on that item's table, so a transaction is recorded as those calls.
//!
//! No crate records SDK calls as IAM actions; the interceptor API is the SDK's own.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::Input;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// One call: the IAM action (`dynamodb:PutItem`) and the physical resource it named.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The IAM action: the service's IAM prefix and the operation name.
    pub action: String,
    /// The resource as the call named it: a table name, a stream ARN, a rule name; `?` when the
    /// operation is unknown to [`resource`].
    pub resource: String,
}

/// The calls of one function, recorded by [`CallLog::interceptor`]s.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    calls: Arc<Mutex<BTreeSet<Call>>>,
    /// The stream of the last `GetShardIterator` per IAM prefix: a `GetRecords` names only its
    /// iterator, and IAM checks it against the stream the iterator was issued for.
    iterators: Arc<Mutex<std::collections::BTreeMap<String, String>>>,
}

impl CallLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// An interceptor recording into this log; attach one to every client of the function.
    pub fn interceptor(&self) -> Recorder {
        Recorder { log: self.clone() }
    }

    /// Every distinct call so far, sorted.
    pub fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn record(&self, call: Call) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(call);
        }
    }
}

/// The interceptor half of a [`CallLog`].
#[derive(Debug, Clone)]
pub struct Recorder {
    log: CallLog,
}

/// The IAM prefix of an SDK service name (`Metadata::service`).
fn iam_prefix(service: &str) -> String {
    match service {
        // DynamoDB Streams actions are `dynamodb:` actions in IAM.
        "DynamoDB" | "DynamoDB Streams" | "dynamodb" | "dynamodbstreams" => "dynamodb".into(),
        "CloudWatch" | "monitoring" | "cloudwatch" => "cloudwatch".into(),
        "EventBridge" | "events" | "eventbridge" => "events".into(),
        other => other.to_lowercase().replace(' ', ""),
    }
}

/// The resource named by `input` (an operation input of a known operation), else `?`.
pub fn resource(input: &Input) -> String {
    use aws_sdk_dynamodb::operation as ddb;
    use aws_sdk_dynamodbstreams::operation as streams;
    macro_rules! field {
        ($($ty:ty => $get:expr),* $(,)?) => {
            $(if let Some(i) = input.downcast_ref::<$ty>() {
                let get: fn(&$ty) -> Option<String> = $get;
                return get(i).unwrap_or_else(|| "?".into());
            })*
        };
    }
    field! {
        ddb::get_item::GetItemInput => |i| i.table_name.clone(),
        ddb::put_item::PutItemInput => |i| i.table_name.clone(),
        ddb::update_item::UpdateItemInput => |i| i.table_name.clone(),
        ddb::delete_item::DeleteItemInput => |i| i.table_name.clone(),
        ddb::query::QueryInput => |i| index(&i.table_name, &i.index_name),
        ddb::scan::ScanInput => |i| index(&i.table_name, &i.index_name),
        ddb::describe_table::DescribeTableInput => |i| i.table_name.clone(),
        ddb::describe_contributor_insights::DescribeContributorInsightsInput =>
            |i| index(&i.table_name, &i.index_name),
        ddb::batch_get_item::BatchGetItemInput =>
            |i| i.request_items.as_ref().map(|m| sorted_keys(m.keys())),
        ddb::batch_write_item::BatchWriteItemInput =>
            |i| i.request_items.as_ref().map(|m| sorted_keys(m.keys())),
        streams::describe_stream::DescribeStreamInput => |i| i.stream_arn.clone(),
        streams::get_shard_iterator::GetShardIteratorInput => |i| i.stream_arn.clone(),
        aws_sdk_cloudwatch::operation::get_insight_rule_report::GetInsightRuleReportInput =>
            |i| i.rule_name.clone(),
        // GetMetricData takes no resource in IAM.
        aws_sdk_cloudwatch::operation::get_metric_data::GetMetricDataInput => |_| Some("*".into()),
        // One page (a call with a `NextToken` names no stream: recorded as `?`).
        aws_sdk_kinesis::operation::list_shards::ListShardsInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::put_record::PutRecordInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::put_records::PutRecordsInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::split_shard::SplitShardInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        aws_sdk_kinesis::operation::merge_shards::MergeShardsInput =>
            |i| i.stream_name.clone().or_else(|| i.stream_arn.clone()),
        // The queue by the last part of its URL (its name).
        aws_sdk_sqs::operation::receive_message::ReceiveMessageInput =>
            |i| i.queue_url.as_deref().and_then(|u| u.rsplit('/').next()).map(str::to_owned),
        aws_sdk_sqs::operation::delete_message::DeleteMessageInput =>
            |i| i.queue_url.as_deref().and_then(|u| u.rsplit('/').next()).map(str::to_owned),
    }
    "?".into()
}

/// The per-item calls IAM checks for a `TransactWriteItems` input; None for other inputs.
pub fn transact_items(input: &Input) -> Option<Vec<Call>> {
    let i = input
        .downcast_ref::<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput>(
        )?;
    let call = |action: &str, table: &str| Call {
        action: format!("dynamodb:{action}"),
        resource: table.to_owned(),
    };
    Some(
        i.transact_items()
            .iter()
            .map(|item| {
                if let Some(p) = item.put() {
                    call("PutItem", p.table_name())
                } else if let Some(u) = item.update() {
                    call("UpdateItem", u.table_name())
                } else if let Some(d) = item.delete() {
                    call("DeleteItem", d.table_name())
                } else if let Some(c) = item.condition_check() {
                    call("ConditionCheckItem", c.table_name())
                } else {
                    call("TransactWriteItems", "?")
                }
            })
            .collect(),
    )
}

fn index(table: &Option<String>, index: &Option<String>) -> Option<String> {
    let table = table.clone()?;
    Some(match index {
        Some(ix) => format!("{table}/index/{ix}"),
        None => table,
    })
}

fn sorted_keys<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let mut keys: Vec<&str> = keys.map(String::as_str).collect();
    keys.sort_unstable();
    keys.join(",")
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "heatsink_testkit::calls::Recorder"
    }

    // Not `read_before_execution`: the operation's metadata is in the bag only once its runtime
    // plugins ran, just before serialization.
    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, operation) = match cfg.load::<Metadata>() {
            Some(m) => (m.service().to_owned(), m.name().to_owned()),
            None => ("?".to_owned(), "?".to_owned()),
        };
        if let Some(items) = transact_items(context.input()) {
            for call in items {
                self.log.record(call);
            }
            return Ok(());
        }
        let prefix = iam_prefix(&service);
        let mut resource = resource(context.input());
        if let Ok(mut iterators) = self.log.iterators.lock() {
            match operation.as_str() {
                "GetShardIterator" => {
                    iterators.insert(prefix.clone(), resource.clone());
                }
                "GetRecords" if resource == "?" => {
                    resource = iterators.get(&prefix).cloned().unwrap_or(resource);
                }
                _ => {}
            }
        }
        self.log.record(Call {
            action: format!("{prefix}:{operation}"),
            resource,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
    use aws_sdk_dynamodb::types::{
        AttributeValue, ConditionCheck, Delete, TransactWriteItem, Update,
    };

    #[test]
    fn a_transaction_is_recorded_as_the_single_item_actions_iam_checks() {
        let key = |b: aws_sdk_dynamodb::types::builders::UpdateBuilder| {
            b.key("pk", AttributeValue::S("k".into()))
                .update_expression("SET a = :a")
        };
        let input = TransactWriteItemsInput::builder()
            .transact_items(
                TransactWriteItem::builder()
                    .update(
                        key(Update::builder().table_name("counters"))
                            .build()
                            .unwrap(),
                    )
                    .build(),
            )
            .transact_items(
                TransactWriteItem::builder()
                    .delete(
                        Delete::builder()
                            .table_name("counters")
                            .key("pk", AttributeValue::S("k".into()))
                            .build()
                            .unwrap(),
                    )
                    .build(),
            )
            .transact_items(
                TransactWriteItem::builder()
                    .condition_check(
                        ConditionCheck::builder()
                            .table_name("shards")
                            .key("pk", AttributeValue::S("k".into()))
                            .condition_expression("attribute_exists(pk)")
                            .build()
                            .unwrap(),
                    )
                    .build(),
            )
            .build()
            .unwrap();
        let calls: BTreeSet<(String, String)> = transact_items(&Input::erase(input))
            .expect("a transaction")
            .into_iter()
            .map(|c| (c.action, c.resource))
            .collect();
        let want: BTreeSet<(String, String)> = [
            ("dynamodb:UpdateItem", "counters"),
            ("dynamodb:DeleteItem", "counters"),
            ("dynamodb:ConditionCheckItem", "shards"),
        ]
        .into_iter()
        .map(|(a, r)| (a.to_owned(), r.to_owned()))
        .collect();
        assert_eq!(calls, want);
        let other = aws_sdk_dynamodb::operation::get_item::GetItemInput::builder()
            .table_name("t")
            .build()
            .unwrap();
        assert!(transact_items(&Input::erase(other)).is_none());
    }
}
