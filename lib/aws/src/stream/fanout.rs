//! `FanOutSource`: a Kinesis data stream read through enhanced fan-out (SubscribeToShard).
//!
//! A registered consumer gets its own 2 MiB/s per shard, pushed over HTTP/2, instead of sharing
//! the shard's 2 MiB/s and 5 GetRecords calls per second with every other reader. The worker
//! does not change: this source fits the same [`ShardSource`] calls.
//!
//! - [`ShardSource::get_iterator`] makes no call. It returns a token that names the shard and
//!   the starting position.
//! - [`ShardSource::get_records`] subscribes from the token's position the first time, then
//!   reads the next pushed event. Its next token is `AFTER_SEQUENCE_NUMBER` of the event's
//!   `ContinuationSequenceNumber`, the position AWS says to checkpoint with.
//! - The subscription stays open between calls, keyed by shard, and is reused while the
//!   caller follows its tokens.
//! - AWS ends every subscription after 5 minutes. The next call then subscribes again from the
//!   last token, so no record is skipped or read twice across the renewal.
//! - An event that carries `ChildShards` is the shard's end. It is returned with no next token,
//!   as GetRecords' SHARD_END is, so parents still finish before children. kinesis-mock 0.6
//!   never sends that event after a reshard (a worker on it waits at the closed parent), so
//!   this path is tested through the simulator's fan-out split shape
//!   (`heatsink_sim::fanout`, the integration test `fanout::sim_fan_out_ends_a_split_parent_…`).
//!
//! Limits:
//! - `limit` is ignored: the service pushes what it has, up to about 2 MiB per event.
//! - A call waits at most [`FanOutSource::with_wait`] (1 s by default) for an event. If none
//!   arrives in time it returns an empty batch with the same token and keeps the subscription.
//! - Consumers are registered with [`FanOutSource::register`], and there are at most 20 per
//!   stream. Deregistering is the caller's job ([`FanOutSource::deregister`]).
//! - A shard can have one subscription per consumer at a time, and a new one at most every 5 s.
//!   A second worker of the same application holding the same consumer is refused with
//!   `ResourceInUseException`. The worker retries that as a transient error.
//!
//! ```no_run
//! # async fn demo(kinesis: aws_sdk_kinesis::Client) -> Result<(), heatsink::stream::StreamError> {
//! use heatsink::stream::FanOutSource;
//! // Registers the consumer "likes-aggregator" if it is missing and waits for ACTIVE.
//! let source = FanOutSource::register(kinesis, "like-events", "likes-aggregator").await?;
//! // …then `Worker::new(source, leases, processor, config)` as with `KinesisSource`.
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardOutput;
use aws_sdk_kinesis::types::{
    ConsumerStatus, ShardIteratorType, StartingPosition, SubscribeToShardEventStream,
};
use heatsink_core::stream::ShardInfo;

use super::kinesis::{hash_range, kinesis_records};
use super::{KinesisSource, RecordBatch, ShardSource, StartAt, StreamError, Timeouts};

const SERVICE: &str = "Kinesis";

/// How long [`FanOutSource::register`] waits for a new consumer to become ACTIVE.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// A Kinesis data stream read through an enhanced fan-out consumer, as a [`ShardSource`].
#[derive(Clone, Debug)]
pub struct FanOutSource {
    /// Listing and identity: the plain source's calls, with the worker's timeouts.
    listing: KinesisSource,
    /// SubscribeToShard: no operation timeout, since the response is a stream that lives up to
    /// 5 minutes. A call is bounded by `wait` per event instead.
    client: aws_sdk_kinesis::Client,
    consumer_arn: String,
    wait: Duration,
    live: Arc<Mutex<HashMap<String, Live>>>,
}

/// An open subscription and the token its next event continues.
#[derive(Debug)]
struct Live {
    token: String,
    out: SubscribeToShardOutput,
}

impl FanOutSource {
    /// Reads `stream` through the already registered consumer `consumer_arn`.
    pub fn new(
        client: aws_sdk_kinesis::Client,
        stream: impl Into<String>,
        consumer_arn: impl Into<String>,
    ) -> Self {
        Self {
            listing: KinesisSource::new(client.clone(), stream),
            client,
            consumer_arn: consumer_arn.into(),
            wait: Duration::from_secs(1),
            live: Arc::default(),
        }
    }

    /// Registers the consumer `consumer` on `stream` if it is missing (or finds it), waits until
    /// it is ACTIVE (up to 120 s), and reads through it.
    pub async fn register(
        client: aws_sdk_kinesis::Client,
        stream: &str,
        consumer: &str,
    ) -> Result<Self, StreamError> {
        let summary = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|e| StreamError::from_sdk(SERVICE, "DescribeStreamSummary", stream, e))?;
        let stream_arn = summary
            .stream_description_summary()
            .map(|s| s.stream_arn().to_owned())
            .ok_or_else(|| StreamError::NotFound {
                resource: stream.to_owned(),
                source: None,
            })?;
        let resource = format!("{stream_arn}/consumer/{consumer}");
        let registered = client
            .register_stream_consumer()
            .stream_arn(&stream_arn)
            .consumer_name(consumer)
            .send()
            .await;
        let mut arn = match registered {
            Ok(out) => out.consumer().map(|c| c.consumer_arn().to_owned()),
            // Already registered (by an earlier run or another worker): look it up.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) =>
            {
                None
            }
            Err(e) => {
                return Err(StreamError::from_sdk(
                    SERVICE,
                    "RegisterStreamConsumer",
                    &resource,
                    e,
                ));
            }
        };
        let started = Instant::now();
        loop {
            let req = client.describe_stream_consumer();
            let req = match &arn {
                Some(a) => req.consumer_arn(a),
                None => req.stream_arn(&stream_arn).consumer_name(consumer),
            };
            let out = req.send().await.map_err(|e| {
                StreamError::from_sdk(SERVICE, "DescribeStreamConsumer", &resource, e)
            })?;
            if let Some(d) = out.consumer_description() {
                arn = Some(d.consumer_arn().to_owned());
                if d.consumer_status() == &ConsumerStatus::Active {
                    return Ok(Self::new(client, stream, d.consumer_arn()));
                }
            }
            if started.elapsed() >= ACTIVE_TIMEOUT {
                return Err(StreamError::NotFound {
                    resource: format!("{resource} (not ACTIVE after 120 s)"),
                    source: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The same source waiting at most `wait` for a pushed event per call.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The consumer's ARN.
    pub fn consumer_arn(&self) -> &str {
        &self.consumer_arn
    }

    /// Deregisters the consumer (a stream holds at most 20).
    pub async fn deregister(&self) -> Result<(), StreamError> {
        self.client
            .deregister_stream_consumer()
            .consumer_arn(&self.consumer_arn)
            .send()
            .await
            .map_err(|e| {
                StreamError::from_sdk(SERVICE, "DeregisterStreamConsumer", &self.consumer_arn, e)
            })?;
        Ok(())
    }

    async fn subscribe(&self, shard: &str, from: StartingPosition) -> Result<Live, StreamError> {
        let resource = format!("{}/{shard}", self.consumer_arn);
        let out = self
            .client
            .subscribe_to_shard()
            .consumer_arn(&self.consumer_arn)
            .shard_id(shard)
            .starting_position(from)
            .send()
            .await
            .map_err(|e| StreamError::from_sdk(SERVICE, "SubscribeToShard", &resource, e))?;
        Ok(Live {
            token: String::new(),
            out,
        })
    }

    fn take_live(&self, shard: &str, token: &str) -> Option<Live> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match live.remove(shard) {
            Some(l) if l.token == token => Some(l),
            // Another position was asked for (a restart from the checkpoint): drop the old one.
            _ => None,
        }
    }

    fn keep_live(&self, shard: &str, live: Live) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(shard.to_owned(), live);
    }
}

/// A token is `shard|kind|value`: shard ids never contain `|`.
fn token(shard: &str, start: &StartAt) -> String {
    match start {
        StartAt::TrimHorizon => format!("{shard}|TRIM_HORIZON|"),
        StartAt::Latest => format!("{shard}|LATEST|"),
        StartAt::AtTimestamp(ms) => format!("{shard}|AT_TIMESTAMP|{ms}"),
        StartAt::AfterSeq(seq) => format!("{shard}|AFTER_SEQUENCE_NUMBER|{}", seq.to_decimal()),
        StartAt::AtSeq(seq) => format!("{shard}|AT_SEQUENCE_NUMBER|{}", seq.to_decimal()),
    }
}

/// The shard and starting position a token names.
fn parse_token(token: &str) -> Result<(&str, StartingPosition), StreamError> {
    let bad = || StreamError::InvalidSequence(format!("not a fan-out position: {token}"));
    let mut parts = token.splitn(3, '|');
    let (Some(shard), Some(kind), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let kind = ShardIteratorType::from(kind);
    let position = StartingPosition::builder().r#type(kind.clone());
    let position = match kind {
        ShardIteratorType::TrimHorizon | ShardIteratorType::Latest => position,
        ShardIteratorType::AtTimestamp => {
            let ms: i64 = value.parse().map_err(|_| bad())?;
            position.timestamp(aws_smithy_types::DateTime::from_millis(ms))
        }
        ShardIteratorType::AfterSequenceNumber | ShardIteratorType::AtSequenceNumber => {
            position.sequence_number(value)
        }
        _ => return Err(bad()),
    };
    Ok((shard, position.build().map_err(|_| bad())?))
}

impl ShardSource for FanOutSource {
    fn stream(&self) -> &str {
        self.listing.stream()
    }

    async fn identity(&self) -> Result<String, StreamError> {
        self.listing.identity().await
    }

    fn max_records(&self) -> i32 {
        self.listing.max_records()
    }

    fn with_timeouts(self, timeouts: Timeouts) -> Self {
        // The listing gets the lease's timeouts. The subscription client keeps only a connect
        // timeout: an operation timeout would cut the pushed stream.
        let conf = self
            .client
            .config()
            .to_builder()
            .timeout_config(
                aws_smithy_types::timeout::TimeoutConfig::builder()
                    .connect_timeout(timeouts.attempt)
                    .build(),
            )
            .build();
        Self {
            listing: self.listing.with_timeouts(timeouts),
            client: aws_sdk_kinesis::Client::from_conf(conf),
            ..self
        }
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        self.listing.list_shards().await
    }

    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        Ok(token(shard_id, start))
    }

    async fn get_records(&self, iterator: &str, _limit: i32) -> Result<RecordBatch, StreamError> {
        let (shard, from) = parse_token(iterator)?;
        let mut live = match self.take_live(shard, iterator) {
            Some(l) => l,
            None => self.subscribe(shard, from.clone()).await?,
        };
        let resource = format!("{}/{shard}", self.consumer_arn);
        // At most one renewal per call: a subscription AWS ended (after 5 minutes) is replaced
        // from the same position once.
        for renewed in [false, true] {
            let event = match tokio::time::timeout(self.wait, live.out.event_stream.recv()).await {
                // Nothing pushed in time: caught up. Same token, subscription kept.
                Err(_elapsed) => None,
                Ok(Ok(event)) => Some(event),
                Ok(Err(e)) => {
                    return Err(StreamError::from_sdk(
                        SERVICE,
                        "SubscribeToShard",
                        &resource,
                        e,
                    ));
                }
            };
            let ev = match event {
                None => break,
                Some(None) if !renewed => {
                    live = self.subscribe(shard, from.clone()).await?;
                    continue;
                }
                Some(None) => break,
                Some(Some(SubscribeToShardEventStream::SubscribeToShardEvent(ev))) => ev,
                // A variant this SDK does not know: skip it, keep the position.
                Some(Some(_)) => break,
            };
            let records = kinesis_records(ev.records)?;
            let mut child_shards = Vec::new();
            for c in ev.child_shards.unwrap_or_default() {
                child_shards.push(ShardInfo::from_child_shard(
                    c.shard_id(),
                    c.parent_shards(),
                    hash_range(c.hash_key_range()),
                )?);
            }
            let next_iterator =
                if child_shards.is_empty() && !ev.continuation_sequence_number.is_empty() {
                    let next = format!(
                        "{shard}|AFTER_SEQUENCE_NUMBER|{}",
                        ev.continuation_sequence_number
                    );
                    live.token.clone_from(&next);
                    self.keep_live(shard, live);
                    Some(next)
                } else {
                    // The shard's end: the subscription is over, and so is the shard.
                    None
                };
            return Ok(RecordBatch {
                records,
                next_iterator,
                child_shards,
                millis_behind: Some(ev.millis_behind_latest),
            });
        }
        live.token = iterator.to_owned();
        self.keep_live(shard, live);
        Ok(RecordBatch {
            records: Vec::new(),
            next_iterator: Some(iterator.to_owned()),
            child_shards: Vec::new(),
            millis_behind: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heatsink_core::counter::Seq;

    #[test]
    fn a_token_names_its_shard_and_position_and_a_foreign_one_is_refused() {
        let seq = Seq::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
        for (start, kind, value) in [
            (StartAt::TrimHorizon, ShardIteratorType::TrimHorizon, None),
            (StartAt::Latest, ShardIteratorType::Latest, None),
            (
                StartAt::AfterSeq(seq.clone()),
                ShardIteratorType::AfterSequenceNumber,
                Some(seq.to_decimal()),
            ),
            (
                StartAt::AtSeq(seq.clone()),
                ShardIteratorType::AtSequenceNumber,
                Some(seq.to_decimal()),
            ),
        ] {
            let t = token("shardId-000000000003", &start);
            let (shard, position) = parse_token(&t).unwrap();
            assert_eq!(shard, "shardId-000000000003");
            assert_eq!(position.r#type(), &kind);
            assert_eq!(position.sequence_number(), value);
        }
        let (_, at) = parse_token(&token("s", &StartAt::AtTimestamp(1_700_000_000_123))).unwrap();
        assert_eq!(
            at.timestamp().map(|t| t.to_millis().unwrap()),
            Some(1_700_000_000_123)
        );
        for bad in [
            "",
            "s",
            "s|",
            "s|AT_TIMESTAMP|soon",
            "s|SIDEWAYS|1",
            "AAAAiteratorAAAA",
        ] {
            assert!(
                matches!(parse_token(bad), Err(StreamError::InvalidSequence(_))),
                "{bad:?}"
            );
        }
    }
}
