//! Test helpers for the unit tests of heatsink and of crates built on it (feature `test-util`).

/// A client of the SDK crate `$krate` (`aws_sdk_dynamodb`, `aws_sdk_cloudwatch`, ...) answering
/// from the aws-smithy-mocks `$rule`s in any order: `mock_client!` in `RuleMode::MatchAny`,
/// with the SDK's test defaults (region, credentials). `$krate with $conf; $rule, ...` also
/// applies `$conf` (a `Fn(config::Builder) -> config::Builder`) to the config, e.g. to add an
/// interceptor.
#[macro_export]
macro_rules! mocked {
    ($krate:ident with $conf:expr; $($rule:expr),* $(,)?) => {
        aws_smithy_mocks::mock_client!(
            $krate,
            aws_smithy_mocks::RuleMode::MatchAny,
            [$(&$rule),*],
            $conf
        )
    };
    ($krate:ident $(, $rule:expr)* $(,)?) => {
        $crate::mocked!($krate with |conf| conf; $($rule),*)
    };
}

pub use crate::mocked;

/// The error metadata of a mocked service error with `code` (every SDK crate re-exports this
/// one type), for `aws-smithy-mocks` rules that answer with an error.
pub fn error_meta(code: &str) -> aws_smithy_types::error::ErrorMetadata {
    aws_smithy_types::error::ErrorMetadata::builder()
        .code(code)
        .message("mocked")
        .build()
}

/// The first error of type `T` in `err`'s source chain, `err` included: how a test proves an
/// area error kept the SDK error whole.
pub fn in_chain<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(err), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

/// A `ListShards` answer of one open shard, `shard_id`, covering the whole hash-key space and
/// starting at sequence number `first_sequence`: the smallest stream a mocked Kinesis client
/// lists.
#[cfg(feature = "kinesis")]
pub fn one_shard(
    shard_id: &str,
    first_sequence: &str,
) -> Result<
    aws_sdk_kinesis::operation::list_shards::ListShardsOutput,
    aws_sdk_kinesis::error::BuildError,
> {
    use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange, Shard};
    let shard = Shard::builder()
        .shard_id(shard_id)
        .hash_key_range(
            HashKeyRange::builder()
                .starting_hash_key("0")
                .ending_hash_key(u128::MAX.to_string())
                .build()?,
        )
        .sequence_number_range(
            SequenceNumberRange::builder()
                .starting_sequence_number(first_sequence)
                .build()?,
        )
        .build()?;
    Ok(ListShardsOutput::builder().shards(shard).build())
}

/// A `DescribeStreamSummary` answer's summary for the one-shard stream `s` (24 h retention,
/// provisioned fields as the API reference requires them) in `status`, still a builder so a
/// test adds what it is about (a record distribution strategy, a mode, a record size).
#[cfg(feature = "kinesis")]
pub fn stream_summary(
    status: aws_sdk_kinesis::types::StreamStatus,
) -> aws_sdk_kinesis::types::builders::StreamDescriptionSummaryBuilder {
    aws_sdk_kinesis::types::StreamDescriptionSummary::builder()
        .stream_name("s")
        .stream_arn("arn:aws:kinesis:us-east-1:123456789012:stream/s")
        .stream_status(status)
        .retention_period_hours(24)
        .stream_creation_timestamp(aws_sdk_kinesis::primitives::DateTime::from_secs(0))
        .set_enhanced_monitoring(Some(vec![]))
        .open_shard_count(1)
}

/// An insight rule's name as DynamoDB makes it: `kind` (`PKC`, `PKT`, …) on the target `slug`,
/// created at 1,700,000,000,000 ms.
#[cfg(feature = "insights")]
pub fn rule_name(kind: &str, slug: &str) -> String {
    format!(
        "{}{kind}-{slug}-1700000000000",
        crate::insights::RULE_PREFIX
    )
}

/// `target` with Contributor Insights enabled (`ACCESSED_AND_THROTTLED_KEYS`) and the rules of
/// `kinds`, as `Insights::describe` reports it.
#[cfg(feature = "insights")]
pub fn enabled_status(
    target: crate::insights::Target,
    kinds: &[crate::insights::RuleKind],
) -> crate::insights::InsightsStatus {
    use aws_sdk_dynamodb::types::{ContributorInsightsMode, ContributorInsightsStatus};
    let slug = target.slug();
    crate::insights::InsightsStatus {
        rules: kinds
            .iter()
            .filter_map(|k| {
                crate::insights::InsightRule::new(target.clone(), rule_name(k.code(), &slug))
            })
            .collect(),
        target,
        status: Some(ContributorInsightsStatus::Enabled),
        mode: Some(ContributorInsightsMode::AccessedAndThrottledKeys),
        failure: None,
    }
}
