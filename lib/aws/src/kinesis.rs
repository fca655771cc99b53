//! Kinesis placement: which shard a partition key lands on, and salts that spread a hot key.
//!
//! Kinesis hashes a partition key with MD5 into 0..2^128 and sends the record to the open shard
//! whose hash-key range holds it ([`heatsink_core::keys::kinesis_hash_key`]). Because that hash
//! is public, a hot key's salts can be *chosen* to land on distinct shards instead of hoping:
//! where the slot function is known, check where each sub-key lands (docs/write-sharding.md).
//! This module reads the open shards' ranges from the stream and feeds them to the pure
//! placement code.
//!
//! [`Producer`] puts records for a user: batched, paced per shard, retried per entry, with
//! optional KPL aggregation and salting of hot keys (`kinesis/producer.rs`).

use aws_sdk_kinesis::error::BuildError;
use aws_sdk_kinesis::types::{Shard, ShardFilter, ShardFilterType};
use heatsink_core::keys::{KeyError, ShardRange, parse_hash_key, validate_shards};

use crate::error::AwsError;

mod pace;
mod producer;
pub mod reshard;

/// The KPL aggregated-record format: aggregation and deaggregation (pure).
pub use heatsink_core::kpl;

pub use pace::{Pacer, ShardLimits};
pub use producer::{
    DEFAULT_MAX_BUFFERED_BYTES, KEY_ALLOWANCE, MAX_BYTES_PER_RECORD, MAX_BYTES_PER_REQUEST,
    MAX_LARGE_RECORD_BYTES, MAX_RECORDS_PER_REQUEST, METRIC_AGGREGATED, METRIC_FAILED,
    METRIC_RECORDS, METRIC_REQUESTS, METRIC_RETRIED, METRIC_THROTTLES, Producer, ProducerConfig,
    ProducerError, ProducerReport, Salting, UserRecord,
};

/// Errors of Kinesis placement.
#[derive(Debug, thiserror::Error)]
pub enum KinesisError {
    /// Kinesis refused the call or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The ListShards request could not be built (a bug on our side, not Kinesis's answer).
    #[error("ListShards request for {stream} could not be built: {source}")]
    Request {
        /// Stream name.
        stream: String,
        /// What the SDK's builder refused.
        source: BuildError,
    },
    /// The shard map Kinesis returned is not usable (gaps, overlaps, bad numbers).
    #[error("shard map of {stream}: {source}")]
    SlotMap {
        /// Stream name.
        stream: String,
        /// What is wrong.
        source: KeyError,
    },
}

impl KinesisError {
    /// The failed Kinesis call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            _ => None,
        }
    }
}

/// Every shard ListShards answers for `stream` (narrowed by `filter`), all pages: the one
/// ListShards pager (the SDK has no paginator for it). With a token ListShards refuses the stream
/// name and the filter, so only the first page carries them; an empty token ends the listing.
pub(crate) async fn list_shards(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    filter: Option<ShardFilter>,
) -> Result<Vec<Shard>, AwsError> {
    let mut shards = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let req = match &next {
            Some(token) => kinesis.list_shards().next_token(token),
            None => kinesis
                .list_shards()
                .stream_name(stream)
                .set_shard_filter(filter.clone()),
        };
        let out = req
            .send()
            .await
            .map_err(|e| AwsError::new("Kinesis", "ListShards", stream, e))?;
        match out.next_token {
            Some(token) if !token.is_empty() => next = Some(token),
            _ => next = None,
        }
        shards.extend(out.shards.unwrap_or_default());
        if next.is_none() {
            return Ok(shards);
        }
    }
}

/// The open shards of `stream`, sorted by starting hash key, validated to cover 0..2^128 once.
pub async fn open_shard_ranges(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<Vec<ShardRange>, KinesisError> {
    let map_err = |source| KinesisError::SlotMap {
        stream: stream.to_owned(),
        source,
    };
    let at_latest = ShardFilter::builder()
        .r#type(ShardFilterType::AtLatest)
        .build()
        .map_err(|source| KinesisError::Request {
            stream: stream.to_owned(),
            source,
        })?;
    let mut ranges = vec![];
    for shard in list_shards(kinesis, stream, Some(at_latest)).await? {
        // AT_LATEST lists open shards; the ending-sequence check guards emulators that ignore it.
        if shard
            .sequence_number_range()
            .and_then(|r| r.ending_sequence_number())
            .is_some()
        {
            continue;
        }
        let Some(range) = shard.hash_key_range() else {
            continue;
        };
        ranges.push(ShardRange::new(
            shard.shard_id(),
            parse_hash_key(range.starting_hash_key()).map_err(map_err)?,
            parse_hash_key(range.ending_hash_key()).map_err(map_err)?,
        ));
    }
    ranges.sort_by_key(|r| r.start);
    validate_shards(&ranges).map_err(map_err)?;
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use crate::testing::mocked;
    use aws_sdk_kinesis::config::http::HttpResponse;
    use aws_sdk_kinesis::error::{ErrorMetadata, SdkError};
    use aws_sdk_kinesis::operation::list_shards::ListShardsError;
    use aws_sdk_kinesis::types::error::ResourceNotFoundException;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;

    /// A Kinesis client answering from `rule`.
    fn kinesis(rule: Rule) -> aws_sdk_kinesis::Client {
        mocked!(aws_sdk_kinesis, rule)
    }

    #[tokio::test]
    async fn a_missing_stream_keeps_the_sdk_error_as_the_source() {
        let list = mock!(aws_sdk_kinesis::Client::list_shards).then_error(|| {
            ListShardsError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message("Stream t-likes not found")
                    .meta(
                        ErrorMetadata::builder()
                            .code("ResourceNotFoundException")
                            .message("Stream t-likes not found")
                            .build(),
                    )
                    .build(),
            )
        });
        let err = open_shard_ranges(&kinesis(list), "t-likes")
            .await
            .expect_err("mocked to fail");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_not_found());
        assert!(!aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        assert_eq!(
            err.to_string(),
            "Kinesis ListShards on t-likes failed: ResourceNotFoundException: Stream t-likes not found"
        );
        let sdk = in_chain::<SdkError<ListShardsError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(ListShardsError::is_resource_not_found_exception)
        );
    }
}
