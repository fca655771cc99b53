//! An enhanced fan-out endpoint for a stream whose shard was split: the one shape of
//! `SubscribeToShard` no local emulator serves.
//!
//! On AWS a subscription to a closed parent shard pushes the parent's last records and then an
//! event with `ChildShards` (and no `ContinuationSequenceNumber`): the parent's end. A consumer
//! must finish the parent there and only then read the children. kinesis-mock 0.6 never sends
//! that event after a reshard, so on it a fan-out consumer waits at the parent forever.
//!
//! [`FanOutSplit`] is a loopback Kinesis endpoint with one stream of three shards: a closed
//! parent and its two children, each holding the records given at start. It answers, in the
//! request and response shapes of the Kinesis API reference (JSON 1.1):
//! - `DescribeStreamSummary` (the consumer's stream identity) and `ListShards` (all three
//!   shards, the parent with an `EndingSequenceNumber`);
//! - `SubscribeToShard`: an `initial-response` message, then one `SubscribeToShardEvent` with
//!   the shard's records after the starting position. On the parent a second event follows
//!   with `ChildShards` and no continuation; on a child the event's
//!   `ContinuationSequenceNumber` is its last record, and the response ends (AWS ends a
//!   subscription after 5 minutes; the consumer subscribes again from its last position).
//!
//! Every subscription is logged ([`FanOutSplit::subscriptions`]) so a test can check the order
//! in which the consumer asked for the shards. Records are a shard's own: a parent's
//! sequence numbers are below its children's, as on AWS.
//!
//! ```no_run
//! # async fn f() -> Result<(), heatsink_sim::SimError> {
//! use heatsink_sim::fanout::FanOutSplit;
//! let split = FanOutSplit::start("likes", vec![vec![b"a".to_vec()], vec![], vec![]]).await?;
//! // point aws-sdk-kinesis at split.endpoint(), read split.consumer_arn() …
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::SimError;

const TARGET_PREFIX: &str = "Kinesis_20131202.";
/// The parent's shard id; the children are `shardId-000000000001` and `…02`.
pub const PARENT: &str = "shardId-000000000000";
const CHILDREN: [&str; 2] = ["shardId-000000000001", "shardId-000000000002"];
const MAX_HASH: &str = "340282366920938463463374607431768211455";
const MID_HASH: &str = "170141183460469231731687303715884105727";
const MID_HASH_PLUS_ONE: &str = "170141183460469231731687303715884105728";

/// One subscription a consumer opened: the shard and its starting position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The shard subscribed to.
    pub shard: String,
    /// `TRIM_HORIZON`, `AFTER_SEQUENCE_NUMBER`, …
    pub position: String,
    /// The sequence number of an `AT_`/`AFTER_SEQUENCE_NUMBER` position.
    pub sequence: Option<String>,
    /// Records the subscription's first event carried.
    pub records: usize,
}

struct Shared {
    stream: String,
    /// Records per shard: parent, first child, second child.
    records: [Vec<Vec<u8>>; 3],
    subscriptions: Mutex<Vec<Subscription>>,
}

/// A running fan-out endpoint for one split stream; stops when dropped.
pub struct FanOutSplit {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for FanOutSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanOutSplit")
            .field("addr", &self.addr)
            .field("stream", &self.shared.stream)
            .finish()
    }
}

impl FanOutSplit {
    /// Listens on a free loopback port, serving `stream` with `records` as the data of the
    /// parent, the first child and the second child (record `i` of shard `s` has the
    /// partition key `<s>-<i>`).
    pub async fn start(stream: &str, records: Vec<Vec<Vec<u8>>>) -> Result<Self, SimError> {
        let mut it = records.into_iter();
        let shards = [
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
            it.next().unwrap_or_default(),
        ];
        let (listener, addr) = crate::serve::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let shared = Arc::new(Shared {
            stream: stream.to_owned(),
            records: shards,
            subscriptions: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = watch::channel(false);
        crate::serve::serve(listener, shared.clone(), stopped, handle);
        Ok(Self { addr, shared, stop })
    }

    /// The endpoint URL to give the Kinesis client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The stream's ARN.
    pub fn stream_arn(&self) -> String {
        stream_arn(&self.shared.stream)
    }

    /// The ARN of the (pre-registered) consumer to subscribe with.
    pub fn consumer_arn(&self) -> String {
        format!("{}/consumer/fanout:1700000000", self.stream_arn())
    }

    /// Every subscription so far, in the order they were opened.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.shared
            .subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FanOutSplit {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn stream_arn(stream: &str) -> String {
    format!("arn:aws:kinesis:us-east-1:000000000000:stream/{stream}")
}

/// The first 41 of a sequence number's 56 digits (AWS's are 56 digits long).
const SEQ_STEM: &str = "49590338271490256608559692538361571095921";

/// The sequence number of record `i` of shard `s` (`i` may be -1: before the first record):
/// every parent record below every child's, all of one length so they also sort as text.
fn sequence(s: usize, i: i64) -> String {
    let n = (s as i64) * 1_000_000 + i + 1;
    format!("{SEQ_STEM}{n:015}")
}

/// The index in shard `s` of the record with sequence number `seq` (None: not shard `s`'s).
fn index_of(s: usize, seq: &str) -> Option<i64> {
    let n: i64 = seq.strip_prefix(SEQ_STEM)?.parse().ok()?;
    let i = n - (s as i64) * 1_000_000 - 1;
    (-1..1_000_000).contains(&i).then_some(i)
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.1"),
    );
    resp
}

fn error(kind: &str, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    reply(
        StatusCode::BAD_REQUEST,
        json!({"__type": kind, "message": message.to_string()}),
    )
}

fn shard_json(s: usize, records: usize) -> Value {
    let (id, parent, range) = match s {
        0 => (PARENT, None, ("0", MAX_HASH)),
        1 => (CHILDREN[0], Some(PARENT), ("0", MID_HASH)),
        _ => (CHILDREN[1], Some(PARENT), (MID_HASH_PLUS_ONE, MAX_HASH)),
    };
    let mut seq = json!({ "StartingSequenceNumber": sequence(s, 0) });
    if s == 0 {
        let last = i64::try_from(records).unwrap_or(i64::MAX).saturating_sub(1);
        seq["EndingSequenceNumber"] = json!(sequence(0, last.max(0)));
    }
    let mut v = json!({
        "ShardId": id,
        "HashKeyRange": {"StartingHashKey": range.0, "EndingHashKey": range.1},
        "SequenceNumberRange": seq,
    });
    if let Some(p) = parent {
        v["ParentShardId"] = json!(p);
    }
    v
}

fn event(event_type: &str, payload: &Value) -> Result<Vec<u8>, String> {
    let message = Message::new_from_parts(
        vec![
            Header::new(":message-type", HeaderValue::String("event".into())),
            Header::new(
                ":event-type",
                HeaderValue::String(event_type.to_owned().into()),
            ),
            Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ),
        ],
        Bytes::from(payload.to_string()),
    );
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&message, &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn subscribe(shared: &Shared, req: &Value) -> Response<Full<Bytes>> {
    let shard = req.get("ShardId").and_then(Value::as_str).unwrap_or("");
    let Some(s) = std::iter::once(PARENT)
        .chain(CHILDREN)
        .position(|id| id == shard)
    else {
        return error("ResourceNotFoundException", format!("no shard {shard}"));
    };
    let position = req
        .pointer("/StartingPosition/Type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let after: Option<String> = req
        .pointer("/StartingPosition/SequenceNumber")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let first = match (position.as_str(), &after) {
        ("TRIM_HORIZON", _) => 0,
        ("AFTER_SEQUENCE_NUMBER" | "AT_SEQUENCE_NUMBER", Some(n)) => {
            // A sequence number of another shard is refused, as on AWS.
            let Some(index) = index_of(s, n) else {
                return error(
                    "InvalidArgumentException",
                    format!("sequence number {n} is not of shard {shard}"),
                );
            };
            let first = if position == "AT_SEQUENCE_NUMBER" {
                index
            } else {
                index + 1
            };
            usize::try_from(first.max(0)).unwrap_or(usize::MAX)
        }
        _ => {
            return error(
                "ValidationException",
                format!("starting position {position} is not served here"),
            );
        }
    };
    let records = &shared.records[s];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let pushed: Vec<Value> = records
        .iter()
        .enumerate()
        .skip(first)
        .map(|(i, data)| {
            json!({
                "SequenceNumber": sequence(s, i64::try_from(i).unwrap_or(i64::MAX)),
                "ApproximateArrivalTimestamp": now,
                "Data": base64::engine::general_purpose::STANDARD.encode(data),
                "PartitionKey": format!("{s}-{i}"),
            })
        })
        .collect();
    shared
        .subscriptions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Subscription {
            shard: shard.to_owned(),
            position: position.clone(),
            sequence: after.clone(),
            records: pushed.len(),
        });
    // The continuation of a child: its last record, or the position it was asked from.
    let continuation = match records.len().checked_sub(1) {
        Some(last) if first <= last => sequence(s, i64::try_from(last).unwrap_or(i64::MAX)),
        _ => after.unwrap_or_else(|| sequence(s, -1)),
    };
    let mut body = Vec::new();
    let mut events = vec![("initial-response", json!({}))];
    if s == 0 {
        // The parent: its records, then its end (ChildShards, no continuation).
        if !pushed.is_empty() {
            events.push((
                "SubscribeToShardEvent",
                json!({"Records": pushed, "ContinuationSequenceNumber": continuation, "MillisBehindLatest": 0}),
            ));
        }
        let children: Vec<Value> = CHILDREN
            .iter()
            .enumerate()
            .map(|(c, id)| {
                let range = shard_json(c + 1, 0)["HashKeyRange"].clone();
                json!({"ShardId": id, "ParentShards": [PARENT], "HashKeyRange": range})
            })
            .collect();
        events.push((
            "SubscribeToShardEvent",
            json!({"Records": [], "MillisBehindLatest": 0, "ChildShards": children}),
        ));
    } else {
        events.push((
            "SubscribeToShardEvent",
            json!({"Records": pushed, "ContinuationSequenceNumber": continuation, "MillisBehindLatest": 0}),
        ));
    }
    for (kind, payload) in &events {
        match event(kind, payload) {
            Ok(bytes) => body.extend(bytes),
            Err(e) => return error("InternalFailure", e),
        }
    }
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    resp
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(error("ValidationException", e)),
    };
    let op = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.strip_prefix(TARGET_PREFIX))
        .unwrap_or("")
        .to_owned();
    let json: Value = serde_json::from_slice(&body).unwrap_or_default();
    let lens = shared.records.each_ref().map(Vec::len);
    Ok(match op.as_str() {
        "DescribeStreamSummary" => reply(
            StatusCode::OK,
            json!({"StreamDescriptionSummary": {
                "StreamName": shared.stream,
                "StreamARN": stream_arn(&shared.stream),
                "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": "PROVISIONED"},
                "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": 1_700_000_000.0,
                "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE",
                "OpenShardCount": 2,
                "ConsumerCount": 1,
            }}),
        ),
        "ListShards" => reply(
            StatusCode::OK,
            json!({"Shards": (0..3).map(|s| shard_json(s, lens[s])).collect::<Vec<_>>()}),
        ),
        "SubscribeToShard" => subscribe(&shared, &json),
        other => error(
            "UnknownOperationException",
            format!("{other} is not served by the fan-out split shape"),
        ),
    })
}
