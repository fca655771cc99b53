//! The stream-shape simulator's HTTP front: a DynamoDB Streams endpoint that serves an
//! emulator's table streams in production's shapes ([`shape`](crate::shape)).
//!
//! Point a DynamoDB Streams client (the SDK, a consumer, the aggregator's shard lookup) at
//! [`StreamShaper::endpoint`] instead of the emulator. The first `DescribeStream`,
//! `GetShardIterator` or [`StreamShaper::watch`] of a stream ARN starts tailing that stream on the
//! emulator (from `TRIM_HORIZON`, every 50 ms); its records are re-cut by a [`ShapedStream`] and
//! served through `DescribeStream` (shards with lineage and sequence ranges, paginated by
//! `ExclusiveStartShardId`), `GetShardIterator` (`TRIM_HORIZON`, `LATEST`, `AT_SEQUENCE_NUMBER`,
//! `AFTER_SEQUENCE_NUMBER`; a sequence number of another shard is a `ValidationException`, as
//! on AWS) and `GetRecords` (no `NextShardIterator` at the end of a closed shard). Other
//! operations (`ListStreams`) are forwarded unchanged.
//!
//! ```no_run
//! # async fn f() -> Result<(), heatsink_sim::SimError> {
//! use std::time::Duration;
//! use heatsink_sim::front::StreamShaper;
//! use heatsink_sim::shape::{ShapeConfig, SourceKind};
//! let mut shape = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
//! shape.rollover = Some(Duration::from_secs(20));
//! let shaper = StreamShaper::start("http://127.0.0.1:5000", shape).await?;
//! // point aws-sdk-dynamodbstreams at shaper.endpoint() …
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::SimError;
use crate::shape::{ShapeConfig, ShapeError, ShapeStats, ShapedStream};

/// How often each watched stream is read from the emulator and the model ticked.
pub const TAIL_INTERVAL: Duration = Duration::from_millis(50);

const TARGET_PREFIX: &str = "DynamoDBStreams_20120810.";

/// What a tail does with the upstream records it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Records {
    /// Into the model.
    Shape,
    /// Read past (a stream watched from now on).
    Skip,
}

struct Watched {
    stream: ShapedStream,
    /// The upstream's `DescribeStream` answer minus its shards (table name, key schema, …).
    description: Value,
    /// Upstream shard id → where the shaper reads it.
    upstream: BTreeMap<String, Upstream>,
}

/// Where the shaper reads one upstream shard.
#[derive(Debug, Default, Clone)]
struct Upstream {
    /// The iterator of the next read; `None`: issue one after `after` (from `TRIM_HORIZON` when
    /// nothing was read yet).
    iterator: Option<String>,
    /// The sequence number of the last record read.
    after: Option<String>,
}

struct Shared {
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    config: ShapeConfig,
    started: Instant,
    streams: Mutex<HashMap<String, Watched>>,
    /// Headers of the first client request, reused for the shaper's own upstream calls.
    headers: Mutex<Option<hyper::HeaderMap>>,
    /// One tail at a time: two concurrent reads of the same upstream iterator would take the
    /// same records twice.
    tailing: tokio::sync::Mutex<()>,
}

/// A running stream-shape simulator; dropping it (or [`StreamShaper::stop`]) stops it.
pub struct StreamShaper {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for StreamShaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamShaper")
            .field("addr", &self.addr)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl StreamShaper {
    /// Listens on a free loopback port in front of the DynamoDB Streams endpoint `upstream`.
    pub async fn start(upstream: &str, config: ShapeConfig) -> Result<Self, SimError> {
        let up: Uri = upstream
            .parse()
            .map_err(|_| SimError::BadUpstream(upstream.to_owned()))?;
        if up.scheme_str() != Some("http") || up.authority().is_none() {
            return Err(SimError::BadUpstream(upstream.to_owned()));
        }
        let (listener, addr) = crate::serve::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let shared = Arc::new(Shared {
            upstream: up,
            client: Client::builder(TokioExecutor::new()).build_http(),
            config,
            started: Instant::now(),
            streams: Mutex::new(HashMap::new()),
            headers: Mutex::new(None),
            tailing: tokio::sync::Mutex::new(()),
        });
        let (stop, stopped) = watch::channel(false);
        crate::serve::serve(listener, shared.clone(), stopped.clone(), handle);
        let tailing = shared.clone();
        let mut stop_tailing = stopped;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(TAIL_INTERVAL) => {}
                    _ = stop_tailing.changed() => return,
                }
                tailing.tail_all().await;
            }
        });
        Ok(Self { addr, shared, stop })
    }

    /// The endpoint URL to give a DynamoDB Streams client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shape served.
    pub fn config(&self) -> &ShapeConfig {
        &self.shared.config
    }

    /// Starts tailing `arn` now (a consumer's first request does it too).
    pub async fn watch(&self, arn: &str) -> Result<(), String> {
        self.shared.watch(arn, None).await
    }

    /// Starts tailing `arn` from its end now: the records the emulator already holds (earlier
    /// runs' changes) are read past and never shaped, only those written from now on. Nothing
    /// when `arn` is watched already.
    pub async fn watch_from_now(&self, arn: &str) -> Result<(), String> {
        // No tail may run between registering the stream and reading past its records.
        let _one_at_a_time = self.shared.tailing.lock().await;
        if self.shared.register(arn, None).await? {
            self.shared.tail_locked(arn, Records::Skip).await?;
        }
        Ok(())
    }

    /// What the model did to `arn`'s stream so far.
    pub fn stats(&self, arn: &str) -> Option<ShapeStats> {
        let streams = self.shared.streams.lock().ok()?;
        streams.get(arn).map(|w| w.stream.stats())
    }

    /// Reads `arn`'s shaped stream in process: `f` gets the model (for an in-process consumer
    /// such as the [`esm`](crate::esm) emulator).
    pub fn with_stream<T>(&self, arn: &str, f: impl FnOnce(&ShapedStream) -> T) -> Option<T> {
        let streams = self.shared.streams.lock().ok()?;
        streams.get(arn).map(|w| f(&w.stream))
    }

    /// Reads the emulator and ticks the model once, now (the background task does it every
    /// [`TAIL_INTERVAL`]); for consumers that must see every record written so far.
    pub async fn sync(&self) {
        self.shared.tail_all().await;
    }

    /// Stops serving and tailing.
    pub fn stop(self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for StreamShaper {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Shared {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    async fn call(&self, op: &str, body: &Value) -> Result<Value, String> {
        let authority = self.upstream.authority().map_or("", |a| a.as_str());
        let uri: Uri = format!("http://{authority}/")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let mut req = Request::builder().method("POST").uri(uri);
        let headers = self.headers.lock().ok().and_then(|h| h.clone());
        for (name, value) in headers.iter().flatten() {
            if name != hyper::header::HOST
                && name != hyper::header::CONTENT_LENGTH
                && name.as_str() != "x-amz-target"
            {
                req = req.header(name, value);
            }
        }
        if headers.is_none() {
            // The emulators read the region and account from the credential scope only.
            // (dynoxide also wants a date header next to it; neither checks the signature.)
            req = req.header("x-amz-date", "20260101T000000Z").header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0",
            );
        }
        let req = req
            .header("x-amz-target", format!("{TARGET_PREFIX}{op}"))
            .header("content-type", "application/x-amz-json-1.0")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(v)
        } else {
            Err(format!("{op} on the emulator: {status} {v}"))
        }
    }

    async fn watch(&self, arn: &str, headers: Option<&hyper::HeaderMap>) -> Result<(), String> {
        if self.register(arn, headers).await? {
            self.tail(arn).await?;
        }
        Ok(())
    }

    /// Adds `arn` to the watched streams (an empty model); `false` when it was watched already.
    async fn register(
        &self,
        arn: &str,
        headers: Option<&hyper::HeaderMap>,
    ) -> Result<bool, String> {
        if let (Some(h), Ok(mut stored)) = (headers, self.headers.lock())
            && stored.is_none()
        {
            *stored = Some(h.clone());
        }
        if self.streams.lock().is_ok_and(|s| s.contains_key(arn)) {
            return Ok(false);
        }
        let desc = self
            .call("DescribeStream", &json!({"StreamArn": arn}))
            .await?;
        let mut description = desc.get("StreamDescription").cloned().unwrap_or_default();
        if let Some(d) = description.as_object_mut() {
            d.remove("Shards");
            d.remove("LastEvaluatedShardId");
        }
        if let Ok(mut streams) = self.streams.lock() {
            streams.entry(arn.to_owned()).or_insert_with(|| Watched {
                stream: ShapedStream::new(self.config.clone()),
                description,
                upstream: BTreeMap::new(),
            });
        }
        Ok(true)
    }

    async fn tail_all(&self) {
        let arns: Vec<String> = self
            .streams
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        for arn in arns {
            if let Err(e) = self.tail(&arn).await {
                tracing::warn!(stream = %arn, error = %e, "stream shaper cannot read the emulator");
            }
        }
    }

    /// Reads every new upstream record of `arn` into its model, in upstream order.
    async fn tail(&self, arn: &str) -> Result<(), String> {
        // A tail in progress reads everything this one would: skip rather than queue behind it.
        let Ok(_one_at_a_time) = self.tailing.try_lock() else {
            return Ok(());
        };
        self.tail_locked(arn, Records::Shape).await
    }

    /// [`Shared::tail`] with `tailing` held by the caller; `keep` says whether the records read
    /// go into the model or are only read past.
    async fn tail_locked(&self, arn: &str, keep: Records) -> Result<(), String> {
        let mut start: Option<String> = None;
        let mut upstream_shards = vec![];
        loop {
            let mut body = json!({"StreamArn": arn});
            if let Some(s) = &start {
                body["ExclusiveStartShardId"] = json!(s);
            }
            let desc = self.call("DescribeStream", &body).await?;
            for sh in desc
                .pointer("/StreamDescription/Shards")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(id) = sh.get("ShardId").and_then(Value::as_str) {
                    upstream_shards.push(id.to_owned());
                }
            }
            start = desc
                .pointer("/StreamDescription/LastEvaluatedShardId")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if start.is_none() {
                break;
            }
        }
        for shard in upstream_shards {
            loop {
                let at = self
                    .streams
                    .lock()
                    .ok()
                    .and_then(|s| s.get(arn).and_then(|w| w.upstream.get(&shard).cloned()))
                    .unwrap_or_default();
                let it = match at.iterator {
                    Some(it) => it,
                    None => match self.issue(arn, &shard, at.after.as_deref()).await? {
                        Some(it) => it,
                        None => break,
                    },
                };
                let out = self
                    .call("GetRecords", &json!({"ShardIterator": it, "Limit": 1000}))
                    .await?;
                let records = out
                    .get("Records")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let next = out
                    .get("NextShardIterator")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let now = self.now();
                let empty = records.is_empty();
                if let Ok(mut s) = self.streams.lock()
                    && let Some(w) = s.get_mut(arn)
                {
                    let up = w.upstream.entry(shard.clone()).or_default();
                    if let Some(seq) = records
                        .last()
                        .and_then(|r| r.pointer("/dynamodb/SequenceNumber"))
                        .and_then(Value::as_str)
                    {
                        up.after = Some(seq.to_owned());
                    }
                    // After a read that found nothing, the next round issues a new iterator after
                    // the last record read: moto answers an iterator issued before a cancelled
                    // `TransactWriteItems` on the table from the table as it was before that call
                    // (it restores a copy), so an idle iterator may never see a new record; and
                    // an emulator's open shard may answer an empty read without a next iterator.
                    up.iterator = if empty { None } else { next };
                    if keep == Records::Shape {
                        for r in records {
                            w.stream.push(r, now);
                        }
                    }
                }
                if empty {
                    break;
                }
            }
        }
        let now = self.now();
        if let Ok(mut s) = self.streams.lock()
            && let Some(w) = s.get_mut(arn)
        {
            w.stream.tick(now);
        }
        Ok(())
    }

    /// A new iterator on upstream `shard` of `arn`, after `after` (from `TRIM_HORIZON` when
    /// nothing was read yet); `None` when the upstream answers without one.
    async fn issue(
        &self,
        arn: &str,
        shard: &str,
        after: Option<&str>,
    ) -> Result<Option<String>, String> {
        let mut req = json!({"StreamArn": arn, "ShardId": shard});
        match after {
            Some(seq) => {
                req["ShardIteratorType"] = json!("AFTER_SEQUENCE_NUMBER");
                req["SequenceNumber"] = json!(seq);
            }
            None => req["ShardIteratorType"] = json!("TRIM_HORIZON"),
        }
        let out = self.call("GetShardIterator", &req).await?;
        Ok(out
            .get("ShardIterator")
            .and_then(Value::as_str)
            .map(str::to_owned))
    }
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    resp
}

fn error(kind: &str, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    let mut resp = reply(
        StatusCode::BAD_REQUEST,
        json!({"__type": format!("com.amazonaws.dynamodb.v20120810#{kind}"), "message": message.to_string()}),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        resp.headers_mut().insert("x-amzn-errortype", v);
    }
    resp
}

/// An iterator is `<arn>|<shard>|<position>`: opaque to clients, as on AWS.
fn iterator(arn: &str, shard: &str, position: usize) -> String {
    format!("{arn}|{shard}|{position}")
}

fn parse_iterator(it: &str) -> Option<(&str, &str, usize)> {
    let mut parts = it.rsplitn(3, '|');
    let position = parts.next()?.parse().ok()?;
    let shard = parts.next()?;
    let arn = parts.next()?;
    Some((arn, shard, position))
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
    let arn = json
        .get("StreamArn")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    Ok(match op.as_str() {
        "DescribeStream" | "GetShardIterator" => {
            if let Err(e) = shared.watch(&arn, Some(&parts.headers)).await {
                return Ok(error("ResourceNotFoundException", e));
            }
            if op == "DescribeStream" {
                describe(&shared, &arn, &json)
            } else {
                get_iterator(&shared, &arn, &json)
            }
        }
        "GetRecords" => get_records(&shared, &json),
        _ => match shared.call(&op, &json).await {
            Ok(v) => reply(StatusCode::OK, v),
            Err(e) => error("InternalServerError", e),
        },
    })
}

fn describe(shared: &Shared, arn: &str, req: &Value) -> Response<Full<Bytes>> {
    let Ok(streams) = shared.streams.lock() else {
        return error("InternalServerError", "lock poisoned");
    };
    let Some(w) = streams.get(arn) else {
        return error("ResourceNotFoundException", format!("stream {arn}"));
    };
    let limit = req
        .get("Limit")
        .and_then(Value::as_u64)
        .map_or(100, |l| l.clamp(1, 100) as usize);
    let after = req.get("ExclusiveStartShardId").and_then(Value::as_str);
    let all = w.stream.describe();
    let from = after
        .and_then(|a| all.iter().position(|s| s.shard_id == a))
        .map_or(0, |i| i + 1);
    let page: Vec<_> = all.iter().skip(from).take(limit).collect();
    let more = from + page.len() < all.len();
    let shards: Vec<Value> = page
        .iter()
        .map(|s| {
            let mut range = json!({"StartingSequenceNumber": s.first_seq});
            if let Some(end) = &s.end_seq {
                range["EndingSequenceNumber"] = json!(end);
            }
            let mut v = json!({"ShardId": s.shard_id, "SequenceNumberRange": range});
            if let Some(p) = &s.parent {
                v["ParentShardId"] = json!(p);
            }
            v
        })
        .collect();
    let mut d = w.description.clone();
    d["StreamArn"] = json!(arn);
    d["Shards"] = json!(shards);
    if more && let Some(last) = page.last() {
        d["LastEvaluatedShardId"] = json!(last.shard_id);
    }
    reply(StatusCode::OK, json!({"StreamDescription": d}))
}

fn get_iterator(shared: &Shared, arn: &str, req: &Value) -> Response<Full<Bytes>> {
    let Ok(streams) = shared.streams.lock() else {
        return error("InternalServerError", "lock poisoned");
    };
    let Some(w) = streams.get(arn) else {
        return error("ResourceNotFoundException", format!("stream {arn}"));
    };
    let shard = req.get("ShardId").and_then(Value::as_str).unwrap_or("");
    let seq = req
        .get("SequenceNumber")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = req
        .get("ShardIteratorType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let position = match kind {
        "TRIM_HORIZON" => w.stream.latest(shard).map(|_| 0),
        "LATEST" => w.stream.latest(shard),
        "AT_SEQUENCE_NUMBER" => w.stream.position_of(shard, seq, false),
        "AFTER_SEQUENCE_NUMBER" => w.stream.position_of(shard, seq, true),
        other => return error("ValidationException", format!("ShardIteratorType {other}")),
    };
    match position {
        Ok(p) => reply(
            StatusCode::OK,
            json!({"ShardIterator": iterator(arn, shard, p)}),
        ),
        Err(e @ ShapeError::NoShard(_)) => error("ResourceNotFoundException", e),
        Err(e) => error("ValidationException", e),
    }
}

fn get_records(shared: &Shared, req: &Value) -> Response<Full<Bytes>> {
    let it = req
        .get("ShardIterator")
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some((arn, shard, position)) = parse_iterator(it) else {
        return error("ValidationException", "invalid ShardIterator");
    };
    let limit = req
        .get("Limit")
        .and_then(Value::as_u64)
        .map_or(1000, |l| l.clamp(1, 1000) as usize);
    let Ok(streams) = shared.streams.lock() else {
        return error("InternalServerError", "lock poisoned");
    };
    let Some(w) = streams.get(arn) else {
        return error("ResourceNotFoundException", format!("stream {arn}"));
    };
    match w.stream.read(shard, position, limit) {
        Ok((records, next)) => {
            let mut out = json!({"Records": records});
            if let Some(n) = next {
                out["NextShardIterator"] = json!(iterator(arn, shard, n));
            }
            reply(StatusCode::OK, out)
        }
        Err(e) => error("ResourceNotFoundException", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterators_round_trip_with_arns_holding_colons_and_slashes() {
        let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/2026-01-01T00:00:00.000";
        let it = iterator(arn, "shardId-1", 42);
        assert_eq!(parse_iterator(&it), Some((arn, "shardId-1", 42)));
        assert_eq!(parse_iterator("nonsense"), None);
    }
}

/// A shaped stream's shards as the counter path's lineage
/// ([`ShardListing`](heatsink::counter::lineage::ShardListing)): every shard a change could be
/// in, and which shard a split or rollover closed, as production lists a stream (`ListShards`,
/// `DescribeStream`). The aggregator retires parents and seeds a child's dedupe windows from it;
/// the repair takes its expected writers from it.
#[derive(Debug, Clone)]
pub struct ShapedListing {
    shaper: Arc<StreamShaper>,
    arn: String,
}

impl ShapedListing {
    /// The listing of `arn`'s shaped stream (the shaper must [`StreamShaper::watch`] it).
    pub fn new(shaper: Arc<StreamShaper>, arn: &str) -> Self {
        Self {
            shaper,
            arn: arn.to_owned(),
        }
    }
}

impl heatsink::counter::lineage::ShardListing for ShapedListing {
    fn list(
        &self,
        _: u64,
    ) -> futures::future::BoxFuture<
        '_,
        Result<heatsink::counter::lineage::Listing, heatsink::counter::rebuild::BoxError>,
    > {
        use heatsink::counter::lineage::{Listing, ShardInfo};
        Box::pin(async move {
            let taken_ms = heatsink::clock::now_ms();
            let views = self
                .shaper
                .with_stream(&self.arn, |s| s.describe())
                .ok_or("the shaped stream is not watched")?;
            let shards = views
                .into_iter()
                .map(|v| ShardInfo {
                    parent: v.parent,
                    starting_seq: Some(v.first_seq),
                    ending_seq: v.end_seq,
                    ..ShardInfo::new(v.shard_id)
                })
                .collect();
            Ok(Listing { shards, taken_ms })
        })
    }
}
