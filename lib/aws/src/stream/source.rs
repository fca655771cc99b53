//! `ShardSource`: the three calls a lineage reader needs from Kinesis or DynamoDB Streams.

use std::future::Future;

use bytes::Bytes;
use heatsink_core::counter::Seq;
use heatsink_core::stream::ShardInfo;

use super::StreamError;

/// Where to start reading a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still retained (always used for a child shard).
    TrimHorizon,
    /// Only records put after the iterator is taken (roots on an application's first start).
    Latest,
    /// Just after this record: resuming from a checkpoint.
    AfterSeq(Seq),
}

/// One record as the consumer sees it, whatever the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    /// Sequence number, padded so that it orders like the number.
    pub seq: Seq,
    /// Kinesis partition key; for DynamoDB Streams the item's keys as DynamoDB JSON.
    pub partition_key: String,
    /// Kinesis data blob; for DynamoDB Streams `{"eventName","keys","newImage","oldImage"}` JSON.
    pub data: Bytes,
}

impl StreamRecord {
    /// `{"shard", "seq", "partition_key", "data"}`: data as UTF-8 text if valid, else base64.
    pub fn to_json(&self, shard_id: &str) -> serde_json::Value {
        use base64::Engine;
        let data = match std::str::from_utf8(&self.data) {
            Ok(text) => text.to_owned(),
            Err(_) => base64::engine::general_purpose::STANDARD.encode(&self.data),
        };
        serde_json::json!({
            "shard": shard_id,
            "seq": self.seq.to_decimal(),
            "partition_key": self.partition_key,
            "data": data,
        })
    }
}

/// What one GetRecords call returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordBatch {
    /// Records in sequence order.
    pub records: Vec<StreamRecord>,
    /// The iterator for the next call; `None` once a closed shard is read to its end.
    pub next_iterator: Option<String>,
    /// Children announced at the end of a closed shard (Kinesis `ChildShards`; empty otherwise).
    pub child_shards: Vec<ShardInfo>,
    /// How far behind the tip this read is, in ms (Kinesis only); `Some(0)` means caught up.
    pub millis_behind: Option<i64>,
}

/// A stream read shard by shard: Kinesis Data Streams or DynamoDB Streams.
///
/// Errors are typed so the worker can act: [`StreamError::Throttled`] backs off,
/// [`StreamError::ExpiredIterator`] re-gets the iterator after the checkpoint,
/// [`StreamError::NotFound`] / [`StreamError::Trimmed`] mean the shard or its records are gone.
pub trait ShardSource: Send + Sync + 'static {
    /// The stream's name or ARN, for logs and lineage output.
    fn stream(&self) -> &str;

    /// Every shard the stream lists, closed ones included, all pages.
    fn list_shards(&self) -> impl Future<Output = Result<Vec<ShardInfo>, StreamError>> + Send;

    /// An iterator on `shard_id` starting at `start`.
    fn get_iterator(
        &self,
        shard_id: &str,
        start: &StartAt,
    ) -> impl Future<Output = Result<String, StreamError>> + Send;

    /// Up to `limit` records from `iterator`, the next iterator and any child shards.
    fn get_records(
        &self,
        iterator: &str,
        limit: i32,
    ) -> impl Future<Output = Result<RecordBatch, StreamError>> + Send;
}

/// Parses a source's sequence number into the padded form used for checkpoints.
pub(crate) fn parse_seq(raw: &str) -> Result<Seq, StreamError> {
    Seq::parse(raw).map_err(|_| StreamError::InvalidSequence(raw.to_owned()))
}
