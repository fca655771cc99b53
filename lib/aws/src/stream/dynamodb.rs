//! `DynamoDbStreamsSource`: DescribeStream, GetShardIterator and GetRecords on a table's stream.

use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use bytes::Bytes;
use heatsink_core::stream::ShardInfo;
use serde_json::{Map, Value};

use super::source::parse_seq;
use super::{RecordBatch, ShardSource, StartAt, StreamError, StreamRecord};

const SERVICE: &str = "DynamoDB Streams";

/// A DynamoDB table's change stream (by stream ARN) as a [`ShardSource`].
///
/// Each record's `partition_key` is the item's keys as DynamoDB JSON with sorted attribute
/// names (so one item always has one key), and `data` is
/// `{"eventName", "keys", "newImage", "oldImage"}` as DynamoDB JSON.
#[derive(Clone, Debug)]
pub struct DynamoDbStreamsSource {
    client: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
}

impl DynamoDbStreamsSource {
    /// The stream with ARN `stream_arn` (a table's `LatestStreamArn`) read through `client`.
    pub fn new(client: aws_sdk_dynamodbstreams::Client, stream_arn: impl Into<String>) -> Self {
        Self {
            client,
            stream_arn: stream_arn.into(),
        }
    }
}

/// An attribute value as DynamoDB JSON (`{"S": "x"}`, `{"N": "1"}`, …); binary as base64.
fn to_json(value: &AttributeValue) -> Value {
    use base64::Engine;
    let b64 = |b: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(b));
    let (tag, inner) = match value {
        AttributeValue::S(s) => ("S", Value::String(s.clone())),
        AttributeValue::N(n) => ("N", Value::String(n.clone())),
        AttributeValue::B(b) => ("B", b64(b.as_ref())),
        AttributeValue::Bool(b) => ("BOOL", Value::Bool(*b)),
        AttributeValue::Null(b) => ("NULL", Value::Bool(*b)),
        AttributeValue::Ss(v) => ("SS", v.iter().cloned().map(Value::String).collect()),
        AttributeValue::Ns(v) => ("NS", v.iter().cloned().map(Value::String).collect()),
        AttributeValue::Bs(v) => ("BS", v.iter().map(|b| b64(b.as_ref())).collect()),
        AttributeValue::L(v) => ("L", v.iter().map(to_json).collect()),
        AttributeValue::M(m) => ("M", map_json(Some(m))),
        _ => ("UNKNOWN", Value::Null),
    };
    let mut out = Map::new();
    out.insert(tag.to_owned(), inner);
    Value::Object(out)
}

fn map_json(map: Option<&std::collections::HashMap<String, AttributeValue>>) -> Value {
    match map {
        None => Value::Null,
        // serde_json's Map is ordered by key, so the rendering is deterministic.
        Some(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

impl ShardSource for DynamoDbStreamsSource {
    fn stream(&self) -> &str {
        &self.stream_arn
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| {
                    StreamError::from_sdk(SERVICE, "DescribeStream", &self.stream_arn, e)
                })?;
            let Some(desc) = out.stream_description() else {
                return Ok(shards);
            };
            for s in desc.shards() {
                let Some(id) = s.shard_id() else { continue };
                let seqs = s.sequence_number_range();
                shards.push(ShardInfo {
                    parent: s.parent_shard_id().map(str::to_owned),
                    starting_seq: seqs
                        .and_then(|r| r.starting_sequence_number().map(str::to_owned)),
                    ending_seq: seqs.and_then(|r| r.ending_sequence_number().map(str::to_owned)),
                    ..ShardInfo::new(id)
                });
            }
            match desc.last_evaluated_shard_id() {
                Some(last) if !last.is_empty() => start = Some(last.to_owned()),
                _ => return Ok(shards),
            }
        }
    }

    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        let req = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard_id);
        let req = match start {
            StartAt::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            StartAt::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
            StartAt::AfterSeq(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq.to_decimal()),
        };
        let resource = format!("{}/{shard_id}", self.stream_arn);
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
        let out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await
            .map_err(|e| StreamError::from_sdk(SERVICE, "GetRecords", &self.stream_arn, e))?;
        let mut records = Vec::with_capacity(out.records().len());
        for r in out.records() {
            let Some(change) = r.dynamodb() else { continue };
            let raw = change.sequence_number().unwrap_or_default();
            let keys = map_json(change.keys());
            let data = serde_json::json!({
                "eventName": r.event_name().map(|e| e.as_str()),
                "keys": keys,
                "newImage": map_json(change.new_image()),
                "oldImage": map_json(change.old_image()),
            });
            records.push(StreamRecord {
                seq: parse_seq(raw)?,
                partition_key: keys.to_string(),
                data: Bytes::from(data.to_string()),
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
