//! `ShardSource`: the calls a lineage reader needs from Kinesis or DynamoDB Streams.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use heatsink_core::counter::Seq;
use heatsink_core::stream::{Position, ShardInfo};

use super::StreamError;

/// Where to start reading a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still retained (always used for a child shard).
    TrimHorizon,
    /// Only records put after the iterator is taken (the current leaves on an application's
    /// first start with `--from latest`).
    Latest,
    /// The first record put at or after this time, in ms since the epoch (Kinesis only).
    AtTimestamp(u64),
    /// Just after this record: resuming from a checkpoint.
    AfterSeq(Seq),
    /// At this record, whose sub-records up to the position's are done (resuming inside a
    /// KPL-aggregated record): the source re-reads the record, the worker skips what is done.
    AtSeq(Seq),
}

/// One record as the consumer sees it, whatever the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    /// Sequence number, padded so that it orders like the number.
    pub seq: Seq,
    /// The index of this user record inside a KPL-aggregated Kinesis record; `None` for a record
    /// that was not aggregated (and for an aggregate as a source returns it, before the worker
    /// deaggregates it).
    pub sub_seq: Option<u64>,
    /// Kinesis partition key; for DynamoDB Streams the item's keys as DynamoDB JSON. Shared: the
    /// user records of one aggregate that have the same key hold one copy of it.
    pub partition_key: Arc<str>,
    /// Kinesis data blob; for DynamoDB Streams `{"eventName","keys","newImage","oldImage"}` JSON.
    pub data: Bytes,
    /// Why this record, which starts with the KPL magic, does not decode as an aggregate (bad
    /// MD5, truncated, malformed); `None` for every record that decoded or was not aggregated.
    ///
    /// Set by the worker when it deaggregates ([`heatsink_core::kpl::Deaggregator::open`]: bad
    /// MD5, truncated, malformed, or over a bound such as a key table entry longer than
    /// Kinesis's 256 characters). Such a record is delivered whole, as the KCL does with an
    /// aggregate whose digest does not match: its bytes cannot become valid by retrying, so waiting on it would block the shard
    /// forever, and skipping it would checkpoint past a record nobody saw. The processor decides
    /// (store it, dead-letter it, or refuse the batch); the worker logs and counts it
    /// ([`super::WorkerStats::undecodable_aggregates`]).
    pub undecodable: Option<heatsink_core::kpl::KplError>,
}

impl StreamRecord {
    /// Where this record sits in its shard: what a checkpoint after it stores.
    pub fn position(&self) -> Position {
        Position {
            seq: self.seq.clone(),
            sub_seq: self.sub_seq,
        }
    }

    /// `{"shard", "seq", "sub_seq"?, "partition_key", "data", "data_encoding", "undecodable"?}`:
    /// `data` is the blob as text with `"data_encoding": "utf8"` when it is valid UTF-8, else
    /// base64 with `"data_encoding": "base64"`, so a reader never has to guess; `sub_seq` only
    /// for a sub-record of an aggregated record; `undecodable` (the reason) only for a record
    /// that carries the KPL magic but does not decode, delivered whole.
    pub fn to_json(&self, shard_id: &str) -> serde_json::Value {
        use base64::Engine;
        let (data, encoding) = match std::str::from_utf8(&self.data) {
            Ok(text) => (text.to_owned(), "utf8"),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(&self.data),
                "base64",
            ),
        };
        let mut out = serde_json::json!({
            "shard": shard_id,
            "seq": self.seq.to_decimal(),
            "partition_key": &*self.partition_key,
            "data": data,
            "data_encoding": encoding,
        });
        if let Some(map) = out.as_object_mut() {
            if let Some(sub) = self.sub_seq {
                map.insert("sub_seq".to_owned(), sub.into());
            }
            if let Some(e) = &self.undecodable {
                map.insert("undecodable".to_owned(), e.to_string().into());
            }
        }
        out
    }
}

/// What one GetRecords call returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordBatch {
    /// Records in sequence order, as the stream holds them: a KPL aggregate is one record here
    /// (the [`super::Worker`] deaggregates it within its byte budget before the processor sees
    /// it).
    pub records: Vec<StreamRecord>,
    /// The iterator for the next call; `None` once a closed shard is read to its end.
    pub next_iterator: Option<String>,
    /// Children announced at the end of a closed shard (Kinesis `ChildShards`; empty otherwise).
    pub child_shards: Vec<ShardInfo>,
    /// How far behind the tip this read is, in ms (Kinesis only); `Some(0)` means caught up.
    pub millis_behind: Option<i64>,
}

pub use crate::timeouts::Timeouts;

/// A stream read shard by shard: Kinesis Data Streams or DynamoDB Streams.
///
/// Errors are typed so the worker can act: [`StreamError::Throttled`] backs off,
/// [`StreamError::ExpiredIterator`] re-gets the iterator after the checkpoint,
/// [`StreamError::NotFound`] / [`StreamError::Trimmed`] mean the shard or its records are gone.
pub trait ShardSource: Send + Sync + 'static {
    /// The stream's name or ARN, for logs and lineage output.
    fn stream(&self) -> &str;

    /// What names this stream and no other, a recreated one of the same name included (the ARN
    /// plus its creation time): every lease row carries it, and a worker refuses rows of
    /// another stream ([`StreamError::ForeignLease`]).
    fn identity(&self) -> impl Future<Output = Result<String, StreamError>> + Send;

    /// GetRecords limit the worker uses unless configured: the service's maximum.
    fn max_records(&self) -> i32;

    /// Whether a read may start before the lease it reads under is confirmed, and be thrown
    /// away if the take fails (the worker's early first read, [`super::WorkerConfig::early_read`]).
    ///
    /// True only where a read leaves nothing behind on the service: a GetRecords call, which
    /// costs one of the shard's 5 calls per second and its records' share of the read
    /// throughput. False (the default) where a read holds a resource, as an enhanced fan-out
    /// subscription does: a shard has one per consumer, so a subscription opened by a worker
    /// that then loses the take would shut out the worker that won it.
    fn discardable_reads(&self) -> bool {
        false
    }

    /// The same source with `timeouts` on its SDK client.
    fn with_timeouts(self, timeouts: Timeouts) -> Self
    where
        Self: Sized;

    /// Every shard the stream lists, closed ones included (a source may cache what cannot
    /// change, but the answer is the whole listing).
    fn list_shards(&self) -> impl Future<Output = Result<Vec<ShardInfo>, StreamError>> + Send;

    /// An iterator on `shard_id` starting at `start`.
    fn get_iterator(
        &self,
        shard_id: &str,
        start: &StartAt,
    ) -> impl Future<Output = Result<String, StreamError>> + Send;

    /// Up to `limit` records from `iterator`, the next iterator and any child shards. Records
    /// come as the stream holds them: KPL aggregates whole, unchecked (the worker deaggregates
    /// them, so their user records are materialised only within its byte budget).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_line_says_how_its_data_is_encoded_and_carries_sub_seq_only_in_an_aggregate() {
        let text = StreamRecord {
            seq: Seq::from(42),
            sub_seq: None,
            partition_key: "k".into(),
            data: Bytes::from_static(b"hello"),
            undecodable: None,
        };
        let line = text.to_json("shardId-1");
        assert_eq!(line["data"], "hello");
        assert_eq!(line["data_encoding"], "utf8");
        assert_eq!(line["seq"], "42");
        assert!(line.get("sub_seq").is_none());
        let binary = StreamRecord {
            sub_seq: Some(3),
            data: Bytes::from_static(&[0xff, 0x00]),
            ..text
        };
        let line = binary.to_json("shardId-1");
        assert_eq!(line["data"], "/wA=");
        assert_eq!(line["data_encoding"], "base64");
        assert_eq!(line["sub_seq"], 3);
        assert_eq!(binary.position(), Position::sub_record(Seq::from(42), 3));
        assert!(line.get("undecodable").is_none());
        let broken = StreamRecord {
            sub_seq: None,
            undecodable: Some(heatsink_core::kpl::KplError::Truncated { len: 7, min: 20 }),
            ..binary
        };
        let line = broken.to_json("shardId-1");
        assert_eq!(
            line["undecodable"],
            heatsink_core::kpl::KplError::Truncated { len: 7, min: 20 }.to_string()
        );
        assert!(line.get("sub_seq").is_none());
    }
}
