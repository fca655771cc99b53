//! `KinesisSource`: ListShards, GetShardIterator and GetRecords on a Kinesis data stream.

use aws_sdk_kinesis::types::{HashKeyRange, Record, ShardIteratorType};
use bytes::Bytes;
use heatsink_core::stream::ShardInfo;

use super::source::parse_seq;
use super::{RecordBatch, ShardSource, StartAt, StreamError, StreamRecord, Timeouts};

const SERVICE: &str = "Kinesis";

/// A Kinesis data stream as a [`ShardSource`].
#[derive(Clone, Debug)]
pub struct KinesisSource {
    client: aws_sdk_kinesis::Client,
    stream: String,
}

impl KinesisSource {
    /// The stream `stream` (a name) read through `client`, with the default [`Timeouts`] (a
    /// worker replaces them with its lease's).
    pub fn new(client: aws_sdk_kinesis::Client, stream: impl Into<String>) -> Self {
        Self {
            client,
            stream: stream.into(),
        }
        .with_timeouts(Timeouts::default())
    }
}

/// A shard's hash key range as numbers (`None` when absent or unparsable).
pub(super) fn hash_range(range: Option<&HashKeyRange>) -> Option<(u128, u128)> {
    let range = range?;
    let start = range.starting_hash_key().parse().ok()?;
    let end = range.ending_hash_key().parse().ok()?;
    Some((start, end))
}

/// Kinesis records as the worker's records, one per Kinesis record: a KPL aggregate stays whole
/// (the worker deaggregates it under its byte budget, `worker/expand.rs`), its partition key
/// and data as read. Shared by GetRecords and enhanced fan-out.
pub(super) fn kinesis_records(raw: Vec<Record>) -> Result<Vec<StreamRecord>, StreamError> {
    raw.into_iter()
        .map(|r| {
            Ok(StreamRecord {
                seq: parse_seq(r.sequence_number())?,
                sub_seq: None,
                partition_key: r.partition_key.unwrap_or_default().into(),
                data: Bytes::from(r.data.into_inner()),
                undecodable: None,
            })
        })
        .collect()
}

impl ShardSource for KinesisSource {
    fn stream(&self) -> &str {
        &self.stream
    }

    async fn identity(&self) -> Result<String, StreamError> {
        let out = self
            .client
            .describe_stream_summary()
            .stream_name(&self.stream)
            .send()
            .await
            .map_err(|e| {
                StreamError::from_sdk(SERVICE, "DescribeStreamSummary", &self.stream, e)
            })?;
        let summary = out
            .stream_description_summary()
            .ok_or_else(|| StreamError::NotFound {
                resource: self.stream.clone(),
                source: None,
            })?;
        let created = summary.stream_creation_timestamp();
        let created_ms =
            created.secs().saturating_mul(1_000) + i64::from(created.subsec_nanos() / 1_000_000);
        Ok(format!("{}@{created_ms}", summary.stream_arn()))
    }

    fn max_records(&self) -> i32 {
        10_000
    }

    /// GetRecords holds nothing on the service: an early read the take does not confirm is
    /// dropped at the cost of one call.
    fn discardable_reads(&self) -> bool {
        true
    }

    fn with_timeouts(self, timeouts: Timeouts) -> Self {
        let conf = self
            .client
            .config()
            .to_builder()
            .timeout_config(timeouts.config())
            .build();
        Self {
            client: aws_sdk_kinesis::Client::from_conf(conf),
            stream: self.stream,
        }
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        let listed = crate::kinesis::list_shards(&self.client, &self.stream, None).await?;
        Ok(listed
            .iter()
            .map(|s| {
                let seqs = s.sequence_number_range();
                ShardInfo {
                    shard_id: s.shard_id().to_owned(),
                    parent: s.parent_shard_id().map(str::to_owned),
                    adjacent_parent: s.adjacent_parent_shard_id().map(str::to_owned),
                    hash_range: hash_range(s.hash_key_range()),
                    starting_seq: seqs.map(|r| r.starting_sequence_number().to_owned()),
                    ending_seq: seqs.and_then(|r| r.ending_sequence_number().map(str::to_owned)),
                }
            })
            .collect())
    }

    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        let req = self
            .client
            .get_shard_iterator()
            .stream_name(&self.stream)
            .shard_id(shard_id);
        let req = match start {
            StartAt::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            StartAt::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
            StartAt::AtTimestamp(ms) => req
                .shard_iterator_type(ShardIteratorType::AtTimestamp)
                .timestamp(aws_smithy_types::DateTime::from_millis(
                    i64::try_from(*ms).unwrap_or(i64::MAX),
                )),
            StartAt::AfterSeq(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq.to_decimal()),
            StartAt::AtSeq(seq) => req
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(seq.to_decimal()),
        };
        let resource = format!("{}/{shard_id}", self.stream);
        let out = req
            .send()
            .await
            .map_err(|e| StreamError::from_sdk(SERVICE, "GetShardIterator", &resource, e))?;
        out.shard_iterator()
            .map(str::to_owned)
            .ok_or(StreamError::NotFound {
                resource,
                source: None,
            })
    }

    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordBatch, StreamError> {
        let mut out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await
            .map_err(|e| StreamError::from_sdk(SERVICE, "GetRecords", &self.stream, e))?;
        let records = kinesis_records(std::mem::take(&mut out.records))?;
        let mut child_shards = Vec::new();
        for c in out.child_shards() {
            child_shards.push(ShardInfo::from_child_shard(
                c.shard_id(),
                c.parent_shards(),
                hash_range(c.hash_key_range()),
            )?);
        }
        Ok(RecordBatch {
            records,
            next_iterator: out.next_shard_iterator().map(str::to_owned),
            child_shards,
            millis_behind: out.millis_behind_latest(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::in_chain;
    use crate::testing::mocked;
    use aws_sdk_kinesis::config::http::HttpResponse;
    use aws_sdk_kinesis::error::SdkError;
    use aws_sdk_kinesis::operation::get_records::GetRecordsError;
    use aws_sdk_kinesis::types::error::{
        ExpiredIteratorException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::error::AwsError;

    /// A Kinesis client answering from `rule`.
    fn kinesis(rule: Rule) -> aws_sdk_kinesis::Client {
        mocked!(aws_sdk_kinesis, rule)
    }

    use crate::testing::error_meta as meta;

    async fn get_records_failing_with(err: fn() -> GetRecordsError) -> StreamError {
        let get = mock!(aws_sdk_kinesis::Client::get_records).then_error(err);
        KinesisSource::new(kinesis(get), "t-likes")
            .get_records("AAAA", 100)
            .await
            .expect_err("mocked to fail")
    }

    #[tokio::test]
    async fn get_records_failures_are_classified_and_keep_the_sdk_error() {
        let err = get_records_failing_with(|| {
            GetRecordsError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(meta("ProvisionedThroughputExceededException"))
                    .build(),
            )
        })
        .await;
        assert!(matches!(err, StreamError::Throttled(_)), "{err:?}");
        assert!(err.is_transient());
        assert_eq!(err.to_string(), "Kinesis throttled GetRecords on t-likes");
        let aws = err.aws().expect("an AWS failure");
        assert!(aws.is_throttling());
        assert!(!aws.is_conditional_check_failed());
        let sdk = in_chain::<SdkError<GetRecordsError, HttpResponse>>(&err)
            .expect("the SDK error is in the source chain");
        assert!(
            sdk.as_service_error()
                .is_some_and(GetRecordsError::is_provisioned_throughput_exceeded_exception)
        );

        let err = get_records_failing_with(|| {
            GetRecordsError::ExpiredIteratorException(
                ExpiredIteratorException::builder()
                    .meta(meta("ExpiredIteratorException"))
                    .build(),
            )
        })
        .await;
        assert!(matches!(err, StreamError::ExpiredIterator(_)), "{err:?}");
        assert!(!err.is_transient());
        assert_eq!(
            err.aws().and_then(AwsError::code),
            Some("ExpiredIteratorException")
        );
        assert!(in_chain::<SdkError<GetRecordsError, HttpResponse>>(&err).is_some());
    }
}
