//! `DynamoDbStreamsSource`: DescribeStream, GetShardIterator and GetRecords on a table's stream.

use bytes::Bytes;
use heatsink_core::stream::ShardInfo;

use super::source::parse_seq;
use super::{RecordBatch, ShardSource, StartAt, StreamError, StreamRecord, Timeouts};
use crate::ddb::json::stream_image_json;
use crate::ddb::stream_listing::StreamListing;
use crate::ddb::stream_reader::{self, Position};

const SERVICE: &str = "DynamoDB Streams";

/// A DynamoDB table's change stream (by stream ARN) as a [`ShardSource`].
///
/// Each record's `partition_key` is the item's keys as DynamoDB JSON with sorted attribute
/// names (so one item always has one key), and `data` is
/// `{"eventName", "keys", "newImage", "oldImage"}` as DynamoDB JSON (names sorted, binary as
/// base64; an attribute of a type the SDK does not know as `{"UNKNOWN": null}`).
///
/// The shard listing (heatsink's one DynamoDB Streams listing) is kept between syncs and
/// paced: a sync pages only from the last shard known to be closed before the first open one,
/// every [`DynamoDbStreamsSource::FULL_LISTING_EVERY`]th sync pages the whole stream so shards
/// trimmed past retention drop out, and DescribeStream calls are spaced at least
/// [`DynamoDbStreamsSource::MIN_DESCRIBE_INTERVAL`] apart (10 TPS).
#[derive(Clone, Debug)]
pub struct DynamoDbStreamsSource {
    client: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    listing: StreamListing,
}

impl DynamoDbStreamsSource {
    /// Every this many syncs the whole stream is paged (to see shards trimmed past retention).
    pub const FULL_LISTING_EVERY: u64 = StreamListing::FULL_LISTING_EVERY;

    /// Least time between two DescribeStream calls of this source (10 per second at most).
    pub const MIN_DESCRIBE_INTERVAL: std::time::Duration = StreamListing::MIN_DESCRIBE_INTERVAL;

    /// The stream with ARN `stream_arn` (a table's `LatestStreamArn`) read through `client`,
    /// with the default [`Timeouts`] (a worker replaces them with its lease's).
    pub fn new(client: aws_sdk_dynamodbstreams::Client, stream_arn: impl Into<String>) -> Self {
        Self {
            client,
            stream_arn: stream_arn.into(),
            listing: StreamListing::default(),
        }
        .with_timeouts(Timeouts::default())
    }
}

impl ShardSource for DynamoDbStreamsSource {
    fn stream(&self) -> &str {
        &self.stream_arn
    }

    async fn identity(&self) -> Result<String, StreamError> {
        // The ARN ends in the stream's label, its creation time: a table's re-enabled stream
        // has a new one.
        Ok(self.stream_arn.clone())
    }

    fn max_records(&self) -> i32 {
        1_000
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
            client: aws_sdk_dynamodbstreams::Client::from_conf(conf),
            ..self
        }
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        Ok(self.listing.sync(&self.client, &self.stream_arn).await?)
    }

    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        let position = match start {
            StartAt::TrimHorizon => Position::TrimHorizon,
            StartAt::Latest => Position::Latest,
            StartAt::AtTimestamp(_) => {
                return Err(StreamError::Unsupported {
                    source_kind: SERVICE,
                    what: "AT_TIMESTAMP (DynamoDB Streams has no such iterator)",
                });
            }
            StartAt::AfterSeq(seq) => Position::After(seq.to_decimal()),
            StartAt::AtSeq(seq) => Position::At(seq.to_decimal()),
        };
        stream_reader::iterator(&self.client, &self.stream_arn, shard_id, position)
            .await?
            .ok_or_else(|| StreamError::NotFound {
                resource: format!("{}/{shard_id}", self.stream_arn),
                source: None,
            })
    }

    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordBatch, StreamError> {
        let out = stream_reader::page(&self.client, iterator, limit, &self.stream_arn).await?;
        let mut records = Vec::with_capacity(out.records().len());
        for r in out.records() {
            let Some(change) = r.dynamodb() else { continue };
            let raw = change.sequence_number().unwrap_or_default();
            let keys = stream_image_json(change.keys());
            let data = serde_json::json!({
                "eventName": r.event_name().map(|e| e.as_str()),
                "keys": keys,
                "newImage": stream_image_json(change.new_image()),
                "oldImage": stream_image_json(change.old_image()),
            });
            records.push(StreamRecord {
                seq: parse_seq(raw)?,
                sub_seq: None,
                partition_key: keys.to_string().into(),
                data: Bytes::from(data.to_string()),
                undecodable: None,
            });
        }
        Ok(RecordBatch {
            records,
            next_iterator: out.next_shard_iterator().map(str::to_owned),
            child_shards: Vec::new(),
            millis_behind: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodbstreams::operation::describe_stream::DescribeStreamOutput;
    use aws_sdk_dynamodbstreams::types::{SequenceNumberRange, Shard, StreamDescription};
    use aws_smithy_mocks::mock;

    use super::*;

    fn shard(id: &str, parent: Option<&str>, closed: bool) -> Shard {
        let range = SequenceNumberRange::builder().starting_sequence_number("100");
        let range = if closed {
            range.ending_sequence_number("200")
        } else {
            range
        };
        Shard::builder()
            .shard_id(id)
            .set_parent_shard_id(parent.map(str::to_owned))
            .sequence_number_range(range.build())
            .build()
    }

    fn page(shards: Vec<Shard>) -> DescribeStreamOutput {
        DescribeStreamOutput::builder()
            .stream_description(
                StreamDescription::builder()
                    .set_shards(Some(shards))
                    .build(),
            )
            .build()
    }

    /// Several open shards, two rollovers: the second sync pages only from the last closed shard
    /// before the first open one, and the answer is still the whole listing.
    #[tokio::test]
    async fn smithy_mock_dynamodb_streams_sync_pages_from_the_last_settled_shard_not_the_start() {
        let full = mock!(aws_sdk_dynamodbstreams::Client::describe_stream)
            .match_requests(|r| r.exclusive_start_shard_id().is_none())
            .then_output(|| {
                page(vec![
                    shard("s0", None, true),
                    shard("s1", Some("s0"), true),
                    shard("a1", None, false),
                    shard("s2", Some("s1"), false),
                ])
            });
        let incremental = mock!(aws_sdk_dynamodbstreams::Client::describe_stream)
            .match_requests(|r| r.exclusive_start_shard_id() == Some("s1"))
            .then_output(|| {
                page(vec![
                    shard("a1", None, true),
                    shard("s2", Some("s1"), false),
                    shard("a2", Some("a1"), false),
                ])
            });
        let client = crate::mocked!(aws_sdk_dynamodbstreams, full, incremental);
        let source =
            DynamoDbStreamsSource::new(client, "arn:aws:dynamodb:us-east-1:1:table/t/stream/x");
        let first = source.list_shards().await.expect("first sync");
        assert_eq!(first.len(), 4);
        let second = source.list_shards().await.expect("second sync");
        let ids: Vec<&str> = second.iter().map(|s| s.shard_id.as_str()).collect();
        assert_eq!(ids, ["s0", "s1", "a1", "s2", "a2"]);
        assert!(second[2].is_closed(), "a1's rollover seen");
        assert_eq!((full.num_calls(), incremental.num_calls()), (1, 1));
    }

    /// A two-attribute binary key has one text, names sorted and bytes as base64, whatever
    /// order the SDK's map holds it in.
    #[tokio::test]
    async fn smithy_mock_a_record_key_has_one_sorted_text_with_binary_as_base64() {
        use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
        use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, Record};
        let record = |keys: &[(&str, AttributeValue)]| {
            let mut change =
                aws_sdk_dynamodbstreams::types::StreamRecord::builder().sequence_number("100");
            for (name, value) in keys {
                change = change.keys(*name, value.clone());
            }
            Record::builder()
                .event_name(OperationType::Insert)
                .dynamodb(change.build())
                .build()
        };
        let pk = ("pk", AttributeValue::S("a".into()));
        let sk = ("sk", AttributeValue::B(vec![0u8, 7].into()));
        let (one, two) = (
            record(&[pk.clone(), sk.clone()]),
            record(&[sk.clone(), pk.clone()]),
        );
        let get = mock!(aws_sdk_dynamodbstreams::Client::get_records).then_output(move || {
            GetRecordsOutput::builder()
                .records(one.clone())
                .records(two.clone())
                .build()
        });
        let client = crate::mocked!(aws_sdk_dynamodbstreams, get);
        let source =
            DynamoDbStreamsSource::new(client, "arn:aws:dynamodb:us-east-1:1:table/t/stream/x");
        let batch = source.get_records("it", 10).await.expect("records");
        let expected = r#"{"pk":{"S":"a"},"sk":{"B":"AAc="}}"#;
        for r in &batch.records {
            assert_eq!(&*r.partition_key, expected);
            let data: serde_json::Value = serde_json::from_slice(&r.data).expect("json");
            assert_eq!(data["keys"]["sk"]["B"], "AAc=");
        }
    }
}
