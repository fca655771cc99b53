//! The partition simulator: hot partitions, reproduced on a laptop.
//!
//! DynamoDB Local, moto and dynoxide never throttle, so a hot key looks healthy until it reaches
//! AWS. The simulator is a loopback HTTP proxy in front of any DynamoDB endpoint that models
//! what AWS enforces per partition: each table (and each GSI) has `partitions` partitions, an
//! item lives on `MD5(partition-key value) mod partitions`, and every partition may consume at
//! most 1,000 WCU/s and 3,000 RCU/s (token buckets with a configurable burst). Capacity units
//! come from item size: 1 WCU per started KB written, 1 RCU per started 4 KB read, half for an
//! eventually consistent read, double inside a transaction. A request that would overdraw a
//! partition is answered as DynamoDB answers it: `ThrottlingException` on an on-demand table,
//! `ProvisionedThroughputExceededException` on a provisioned one, with the throttling reason
//! naming the key range of the table or index and its ARN (`TableWriteKeyRangeThroughputExceeded`,
//! `IndexReadKeyRangeThroughputExceeded`, …), so the SDK's retry logic engages exactly as against
//! AWS and a throttle-reason reader sees what it would see there. A table given an on-demand
//! maximum ([`SimConfig::tables`], [`TableShape`]) is refused over it with
//! `TableWriteMaxOnDemandThroughputExceeded` (or the read one) before any partition is over;
//! its `DescribeTable` reports `OnDemandThroughput` and `WarmThroughput`, and an `UpdateTable`
//! with `WarmThroughput` raises the latter (the simulator answers it: emulators have neither).
//!
//! Per-partition consumed capacity, throttles and a per-second history are served as JSON at
//! `GET /_sim/stats`, the sampled hot keys ([`sampler`]) at `GET /_sim/hot`, and both are
//! cleared by `POST /_sim/reset`, on the same port.
//!
//! ```no_run
//! # async fn f() -> Result<(), heatsink_sim::SimError> {
//! use heatsink_sim::{SimConfig, Simulator};
//! let sim = Simulator::start(SimConfig::new("http://127.0.0.1:5000")).await?;
//! // point the SDK at sim.endpoint() instead of the emulator …
//! let stats = sim.stats();
//! println!("throttled: {}", stats.throttled());
//! # Ok(()) }
//! ```
//!
//! Limits of the model: partitions are fixed (AWS splits partitions over minutes, which a test
//! run never lasts); an UpdateItem is charged for its key and the values it sets (exact for
//! counters, a lower bound for large items); a batch is admitted or throttled whole (AWS returns
//! the throttled part as `UnprocessedItems`); Scans and stream reads pass through uncharged.
//!
//! Beside the simulators sits the local tooling the demos, tests and benches drive them with:
//! one open-loop load generator ([`load`]: any call at a fixed rate, or versioned writes through
//! a slot router with an acknowledgement log) and an SDK HTTP client with a bound on calls in
//! flight ([`http`], for emulators whose transactions are not isolated).

pub mod day;
pub mod esm;
pub mod fanout;
pub mod front;
pub mod http;
pub mod load;
pub mod model;
pub mod request;
pub mod sampler;
mod serve;
pub mod shape;

/// Where the simulator places a partition-key value: MD5 of its bytes modulo the partition count.
pub use model::partition_of;

use std::collections::HashMap;
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
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

pub use model::{Access, Limit, Limits, PartitionId, PartitionStats, Refused, TableMax};
use model::{Charge, Partitions, item_size, read_units};
use request::{Plan, TableKeys, plan, tables_of};
use sampler::{Sampler, accessed_keys};

use heatsink_core::detect::{Ceilings, DetectorConfig, Report};

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A sampler report could not be fetched or parsed.
    #[error("cannot read the sampler report at {url}: {reason}")]
    Fetch {
        /// The report's URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The sampler or ceilings are misconfigured.
    #[error(transparent)]
    Sampler(#[from] heatsink_core::detect::DetectError),
    /// The upstream URL is not an `http://host:port` URL.
    #[error("upstream `{0}` is not an http:// URL with a host")]
    BadUpstream(String),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How to run a simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The DynamoDB endpoint to forward to (`http://127.0.0.1:5000`).
    pub upstream: String,
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Partition count, ceilings and burst.
    pub limits: Limits,
    /// The hot-key sampler served at `/_sim/hot`: 1 in 10 item requests, a 2 s window in 4
    /// sub-windows (a hot key is named within about half a second of its onset).
    pub sampler: DetectorConfig,
    /// Share of a partition's ceiling above which `/_sim/hot` names a key. Default 0.1.
    pub hot_threshold: f64,
    /// What the simulator says of a table that an emulator cannot (its on-demand maximum,
    /// enforced; its warm throughput, reported), by table name. Empty by default.
    pub tables: HashMap<String, TableShape>,
}

/// A table's capacity settings as DynamoDB has them and emulators do not: `DescribeTable`
/// through the simulator reports them (`OnDemandThroughput`, `WarmThroughput` with status
/// `ACTIVE`), an `UpdateTable` with `WarmThroughput` raises the warm throughput (never lowers
/// it; answered by the simulator, the emulator never sees the parameter), and requests over
/// the maximum are refused with `…MaxOnDemandThroughputExceeded`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TableShape {
    /// The on-demand maximum (request units per second per kind; `None`: no maximum).
    pub max: TableMax,
    /// The warm throughput, read and write units per second (`None`: not reported).
    pub warm: Option<WarmUnits>,
}

/// Warm throughput: read and write units per second a table serves instantly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WarmUnits {
    /// `ReadUnitsPerSecond`.
    pub read: u64,
    /// `WriteUnitsPerSecond`.
    pub write: u64,
}

impl TableShape {
    /// Adds what this shape says to a `TableDescription` JSON object.
    fn describe_into(&self, table: &mut Value) {
        let Some(t) = table.as_object_mut() else {
            return;
        };
        if let Some(w) = self.warm {
            t.insert(
                "WarmThroughput".into(),
                serde_json::json!({"ReadUnitsPerSecond": w.read, "WriteUnitsPerSecond": w.write, "Status": "ACTIVE"}),
            );
        }
        let max = |v: Option<f64>| v.map_or(-1, |v| v.round() as i64);
        t.insert(
            "OnDemandThroughput".into(),
            serde_json::json!({"MaxReadRequestUnits": max(self.max.read), "MaxWriteRequestUnits": max(self.max.write)}),
        );
    }
}

impl SimConfig {
    /// Defaults in front of `upstream`: a free loopback port, 4 partitions, AWS's ceilings.
    pub fn new(upstream: &str) -> Self {
        Self {
            upstream: upstream.to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            limits: Limits::default(),
            sampler: DetectorConfig {
                sample_one_in: 10,
                window: Duration::from_secs(2),
                sub_windows: 4,
                ..DetectorConfig::default()
            },
            hot_threshold: Ceilings::DEFAULT_THRESHOLD,
            tables: HashMap::new(),
        }
    }
}

/// Most requests forwarded to the upstream at once. Emulators serve one request at a time
/// behind a database lock; an open-loop load with thousands of requests in flight would otherwise
/// open a connection each, overflow the emulator's accept backlog and stall in 1–3 s SYN
/// retransmits. Requests beyond the bound wait here, and the pool stays on keep-alive connections.
const UPSTREAM_CONCURRENCY: usize = 32;

struct Shared {
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream_slots: tokio::sync::Semaphore,
    started: Instant,
    partitions: Mutex<Partitions>,
    keys: Mutex<HashMap<String, TableKeys>>,
    requests: Mutex<u64>,
    sampler: Mutex<Sampler>,
    /// Admitted write requests per (table, partition-key value).
    key_writes: Mutex<HashMap<(String, String), u64>>,
    /// Tables' capacity settings the emulator does not have ([`SimConfig::tables`]).
    shapes: Mutex<HashMap<String, TableShape>>,
}

/// A running simulator; dropping it (or [`Simulator::stop`]) shuts the listener down.
pub struct Simulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

/// One partition's report in [`Stats`].
#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    /// Which partition.
    #[serde(flatten)]
    pub id: PartitionId,
    /// Its counters and history.
    #[serde(flatten)]
    pub stats: PartitionStats,
    /// Highest WCU/s in any second, as a fraction of the write ceiling.
    pub max_write_utilisation: f64,
    /// Highest RCU/s in any second, as a fraction of the read ceiling.
    pub max_read_utilisation: f64,
}

/// One partition's write utilisation over time ([`Stats::write_utilisation`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionSeries {
    /// The partition's index within its table.
    pub partition: u32,
    /// Consumed WCU in each second since the simulator started, over the write ceiling.
    pub per_second: Vec<f64>,
    /// Write requests this partition refused.
    pub throttled: u64,
}

/// Everything the simulator measured, as served at `/_sim/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Partitions per table and index.
    pub partitions_per_table: u32,
    /// WCU/s per partition.
    pub write_ceiling: f64,
    /// RCU/s per partition.
    pub read_ceiling: f64,
    /// Requests seen (all operations).
    pub requests: u64,
    /// Every partition that saw traffic.
    pub partitions: Vec<PartitionReport>,
    /// Admitted write requests per partition-key value (PutItem, UpdateItem, DeleteItem and
    /// each BatchWriteItem request), one entry per table and key written.
    pub key_writes: Vec<KeyWrites>,
}

/// Write requests admitted for one partition-key value ([`Stats::key_writes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyWrites {
    /// Table name.
    pub table: String,
    /// The partition-key value as text.
    pub key: String,
    /// Write requests admitted with that partition key.
    pub writes: u64,
}

impl Stats {
    /// Write requests admitted on `table` whose partition key is `key`: the writes a hot key's
    /// partition took for that key alone.
    pub fn key_writes(&self, table: &str, key: &str) -> u64 {
        self.key_writes
            .iter()
            .filter(|k| k.table == table && k.key == key)
            .map(|k| k.writes)
            .sum()
    }

    /// Throttled requests, reads and writes, over all partitions.
    pub fn throttled(&self) -> u64 {
        self.partitions
            .iter()
            .map(|p| p.stats.throttled_reads + p.stats.throttled_writes)
            .sum()
    }

    /// Write requests admitted on `table`'s partitions (its GSIs excluded).
    pub fn table_writes(&self, table: &str) -> u64 {
        self.partitions
            .iter()
            .filter(|p| p.id.table == table && p.id.index.is_none())
            .map(|p| p.stats.writes)
            .sum()
    }

    /// Throttled requests on `table`'s partitions (its GSIs included).
    pub fn table_throttled(&self, table: &str) -> u64 {
        self.partitions
            .iter()
            .filter(|p| p.id.table == table)
            .map(|p| p.stats.throttled_reads + p.stats.throttled_writes)
            .sum()
    }

    /// The partition of `table` (not of a GSI) that a string partition-key value lands on.
    pub fn partition_of(&self, key: &str) -> u32 {
        model::partition_of(key.as_bytes(), self.partitions_per_table)
    }

    /// Write utilisation per second of each partition of `table` (its GSIs excluded), as a
    /// fraction of the write ceiling (1.0 = at the ceiling), with the throttled writes per
    /// partition: what a chart of the table's hot partitions plots.
    pub fn write_utilisation(&self, table: &str) -> Vec<PartitionSeries> {
        let ceiling = if self.write_ceiling > 0.0 {
            self.write_ceiling
        } else {
            1.0
        };
        self.partitions
            .iter()
            .filter(|p| p.id.table == table && p.id.index.is_none())
            .map(|p| PartitionSeries {
                partition: p.id.partition,
                per_second: p.stats.wcu_per_second.iter().map(|v| v / ceiling).collect(),
                throttled: p.stats.throttled_writes,
            })
            .collect()
    }

    /// The highest utilisation (reads or writes) any partition of `table` reached in any second.
    pub fn max_utilisation(&self, table: &str) -> f64 {
        self.partitions
            .iter()
            .filter(|p| p.id.table == table)
            .map(|p| p.max_write_utilisation.max(p.max_read_utilisation))
            .fold(0.0, f64::max)
    }
}

impl Simulator {
    /// Binds the listener and starts serving in the background.
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
        let upstream: Uri = config
            .upstream
            .parse()
            .map_err(|_| SimError::BadUpstream(config.upstream.clone()))?;
        if upstream.scheme_str() != Some("http") || upstream.authority().is_none() {
            return Err(SimError::BadUpstream(config.upstream));
        }
        let (listener, addr) = serve::bind(config.listen).await?;
        let ceilings = Ceilings::new(
            Some(config.limits.read_ceiling),
            Some(config.limits.write_ceiling),
            config.hot_threshold,
        )?;
        let sampler = Sampler::new(config.sampler.clone(), ceilings)?;
        let shared = Arc::new(Shared {
            upstream,
            client: Client::builder(TokioExecutor::new()).build_http(),
            upstream_slots: tokio::sync::Semaphore::new(UPSTREAM_CONCURRENCY),
            started: Instant::now(),
            partitions: Mutex::new({
                let mut p = Partitions::new(config.limits);
                for (table, shape) in &config.tables {
                    p.set_max(table, shape.max);
                }
                p
            }),
            keys: Mutex::new(HashMap::new()),
            requests: Mutex::new(0),
            sampler: Mutex::new(sampler),
            key_writes: Mutex::new(HashMap::new()),
            shapes: Mutex::new(config.tables.clone()),
        });
        let (stop, stopped) = watch::channel(false);
        serve::serve(listener, shared.clone(), stopped, handle);
        Ok(Self { addr, shared, stop })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL to give the SDK (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A snapshot of what it measured.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Time since the simulator started (the origin of its per-second history).
    pub fn elapsed(&self) -> Duration {
        self.shared.now()
    }

    /// The sampler's hot-key report now (what `GET /_sim/hot` serves).
    pub fn hot(&self) -> Report {
        self.shared.hot()
    }

    /// Clears statistics and refills every partition.
    pub fn reset(&self) {
        if let Ok(mut s) = self.shared.sampler.lock() {
            s.reset();
        }
        if let Ok(mut p) = self.shared.partitions.lock() {
            p.reset();
        }
        if let Ok(mut r) = self.shared.requests.lock() {
            *r = 0;
        }
        if let Ok(mut k) = self.shared.key_writes.lock() {
            k.clear();
        }
    }

    /// Stops accepting connections.
    pub fn stop(self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Shared {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn hot(&self) -> Report {
        let now = self.now();
        self.sampler
            .lock()
            .map(|s| s.report(now))
            .unwrap_or_default()
    }

    fn stats(&self) -> Stats {
        let (limits, snapshot) = match self.partitions.lock() {
            Ok(p) => (p.limits(), p.snapshot()),
            Err(_) => (Limits::default(), vec![]),
        };
        let peak =
            |series: &[f64], ceiling: f64| series.iter().copied().fold(0.0, f64::max) / ceiling;
        Stats {
            partitions_per_table: limits.partitions,
            write_ceiling: limits.write_ceiling,
            read_ceiling: limits.read_ceiling,
            requests: self.requests.lock().map(|r| *r).unwrap_or(0),
            key_writes: self
                .key_writes
                .lock()
                .map(|k| {
                    let mut v: Vec<KeyWrites> = k
                        .iter()
                        .map(|((table, key), writes)| KeyWrites {
                            table: table.clone(),
                            key: key.clone(),
                            writes: *writes,
                        })
                        .collect();
                    v.sort_by(|a, b| b.writes.cmp(&a.writes).then_with(|| a.key.cmp(&b.key)));
                    v
                })
                .unwrap_or_default(),
            partitions: snapshot
                .into_iter()
                .map(|(id, stats)| PartitionReport {
                    max_write_utilisation: peak(&stats.wcu_per_second, limits.write_ceiling),
                    max_read_utilisation: peak(&stats.rcu_per_second, limits.read_ceiling),
                    id,
                    stats,
                })
                .collect(),
        }
    }

    async fn forward(
        &self,
        parts: &hyper::http::request::Parts,
        body: Bytes,
    ) -> Result<(hyper::http::response::Parts, Bytes), String> {
        let _slot = self
            .upstream_slots
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = self.upstream.authority().map_or("", |a| a.as_str());
        let uri: Uri = format!("http://{authority}{path}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        let mut req = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            if name != hyper::header::HOST {
                req = req.header(name, value);
            }
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let (rparts, rbody) = resp.into_parts();
        let bytes = rbody.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((rparts, bytes))
    }

    /// Learns the key schema of each table not seen yet (DescribeTable through the upstream).
    /// Takes an `UpdateTable`'s `WarmThroughput` out of the request (the simulator keeps warm
    /// throughput: an emulator has no such parameter): the request to forward without it, or
    /// the simulator's own answer when nothing else was asked for.
    async fn take_warm(
        &self,
        op: &str,
        parsed: Option<&Value>,
        parts: hyper::http::request::Parts,
        body: Bytes,
    ) -> Result<(hyper::http::request::Parts, Bytes), Response<Full<Bytes>>> {
        let Some(json) =
            parsed.filter(|j| op == "UpdateTable" && j.get("WarmThroughput").is_some())
        else {
            return Ok((parts, body));
        };
        let table = json["TableName"].as_str().unwrap_or("").to_owned();
        self.raise_warm(&table, &json["WarmThroughput"]);
        let mut rest = json.clone();
        if let Some(o) = rest.as_object_mut() {
            o.remove("WarmThroughput");
        }
        if rest.as_object().is_some_and(|o| o.len() <= 1) {
            // Nothing else to change: the table as DescribeTable shows it.
            return Err(self.describe_as(&parts, &table, "TableDescription").await);
        }
        let mut parts = parts;
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
        Ok((parts, Bytes::from(rest.to_string())))
    }

    /// A `DescribeTable` or `UpdateTable` answer with the table's [`TableShape`] added, if the
    /// simulator keeps one for it; any other answer unchanged.
    fn describe_shape(
        &self,
        op: &str,
        (mut rparts, rbody): (hyper::http::response::Parts, Bytes),
    ) -> (hyper::http::response::Parts, Bytes) {
        let member = match op {
            "DescribeTable" => "Table",
            "UpdateTable" => "TableDescription",
            _ => return (rparts, rbody),
        };
        if rparts.status.is_success()
            && let Ok(mut answer) = serde_json::from_slice::<Value>(&rbody)
            && let Some(shape) = answer
                .pointer(&format!("/{member}/TableName"))
                .and_then(Value::as_str)
                .and_then(|t| self.shape_of(t))
        {
            shape.describe_into(&mut answer[member]);
            rparts.headers.remove(hyper::header::CONTENT_LENGTH);
            return (rparts, Bytes::from(answer.to_string()));
        }
        (rparts, rbody)
    }

    /// `table`'s capacity settings, if the simulator keeps any.
    fn shape_of(&self, table: &str) -> Option<TableShape> {
        self.shapes.lock().ok()?.get(table).copied()
    }

    /// Raises `table`'s warm throughput to the `WarmThroughput` asked for, per kind never below
    /// what it is (DynamoDB never lowers it).
    fn raise_warm(&self, table: &str, asked: &Value) {
        let units = |k: &str| asked.get(k).and_then(Value::as_u64).unwrap_or(0);
        if let Ok(mut shapes) = self.shapes.lock() {
            let shape = shapes.entry(table.to_owned()).or_default();
            let now = shape.warm.unwrap_or_default();
            shape.warm = Some(WarmUnits {
                read: now.read.max(units("ReadUnitsPerSecond")),
                write: now.write.max(units("WriteUnitsPerSecond")),
            });
        }
    }

    /// The upstream's `DescribeTable` of `table` with this simulator's [`TableShape`], as the
    /// answer's `member` (`Table`, or `TableDescription` for an `UpdateTable`).
    async fn describe_as(
        &self,
        parts: &hyper::http::request::Parts,
        table: &str,
        member: &str,
    ) -> Response<Full<Bytes>> {
        match self.describe_upstream(parts, table).await {
            Ok((rp, rb)) if rp.status.is_success() => {
                let mut desc = serde_json::from_slice::<Value>(&rb)
                    .ok()
                    .and_then(|mut v| v.get_mut("Table").map(Value::take))
                    .unwrap_or_default();
                if let Some(shape) = self.shape_of(table) {
                    shape.describe_into(&mut desc);
                }
                json_response(
                    StatusCode::OK,
                    serde_json::json!({ member: desc }).to_string(),
                )
            }
            Ok((rp, rb)) => Response::from_parts(rp, Full::new(rb)),
            Err(e) => unreachable_upstream(e),
        }
    }

    /// The upstream's `DescribeTable` answer for `table`, sent with `parts`' headers.
    async fn describe_upstream(
        &self,
        parts: &hyper::http::request::Parts,
        table: &str,
    ) -> Result<(hyper::http::response::Parts, Bytes), String> {
        let mut describe = parts.clone();
        describe.headers.insert(
            "x-amz-target",
            hyper::header::HeaderValue::from_static("DynamoDB_20120810.DescribeTable"),
        );
        describe.headers.remove(hyper::header::CONTENT_LENGTH);
        let body = serde_json::json!({ "TableName": table }).to_string();
        self.forward(&describe, Bytes::from(body))
            .await
            .map_err(|e| e.to_string())
    }

    async fn learn_tables(&self, parts: &hyper::http::request::Parts, tables: &[String]) {
        for table in tables {
            let known = self
                .keys
                .lock()
                .map(|k| k.contains_key(table))
                .unwrap_or(true);
            if known {
                continue;
            }
            if let Ok((rp, rb)) = self.describe_upstream(parts, table).await
                && rp.status.is_success()
                && let Some(keys) = serde_json::from_slice::<Value>(&rb)
                    .ok()
                    .as_ref()
                    .and_then(TableKeys::from_describe)
                && let Ok(mut k) = self.keys.lock()
            {
                k.insert(table.clone(), keys);
            }
        }
    }
}

/// The answer when the upstream cannot be reached: a 502 with DynamoDB's error shape.
fn unreachable_upstream(e: impl std::fmt::Display) -> Response<Full<Bytes>> {
    let msg = serde_json::json!({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": format!("heatsink sim: upstream unreachable: {e}")});
    json_response(StatusCode::BAD_GATEWAY, msg.to_string())
}

fn json_response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    resp
}

/// DynamoDB's throttling answer for a hot partition, as DynamoDB gives it since August 2025:
/// `ThrottlingException` on an on-demand table, `ProvisionedThroughputExceededException` on a
/// provisioned one, each with one `{reason, resource}` naming the key range of the table or
/// index (`TableWriteKeyRangeThroughputExceeded`, `IndexReadKeyRangeThroughputExceeded`, …)
/// and its ARN. The list's member is `throttlingReasons` on `ThrottlingException` and
/// `ThrottlingReasons` on the other (the service model's spellings; the SDK reads only those).
fn throttle_response(refused: &Refused, provisioned: bool) -> Response<Full<Bytes>> {
    let c = &refused.charge;
    let resource = if c.partition.index.is_some() {
        "Index"
    } else {
        "Table"
    };
    let op = match c.access {
        Access::Read => "Read",
        Access::Write => "Write",
    };
    let arn = match &c.partition.index {
        Some(i) => format!(
            "arn:aws:dynamodb:us-east-1:000000000000:table/{}/index/{i}",
            c.partition.table
        ),
        None => format!(
            "arn:aws:dynamodb:us-east-1:000000000000:table/{}",
            c.partition.table
        ),
    };
    let (error, member) = if provisioned {
        (
            "ProvisionedThroughputExceededException",
            "ThrottlingReasons",
        )
    } else {
        ("ThrottlingException", "throttlingReasons")
    };
    let mut body = serde_json::json!({
        "__type": format!("com.amazonaws.dynamodb.v20120810#{error}"),
        "message": format!(
            "Throughput exceeds the current capacity for one or more partitions of your {}. (heatsink sim: partition {})",
            resource.to_lowercase(), c.partition.partition
        ),
    });
    let limit = match refused.limit {
        Limit::KeyRange => "KeyRange",
        Limit::MaxOnDemand => "MaxOnDemand",
    };
    body[member] = serde_json::json!([{
        "reason": format!("{resource}{op}{limit}ThroughputExceeded"),
        "resource": arn,
    }]);
    let mut resp = json_response(StatusCode::BAD_REQUEST, body.to_string());
    resp.headers_mut().insert(
        "x-amzn-errortype",
        hyper::header::HeaderValue::from_static(error),
    );
    resp
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    if parts.uri.path().starts_with("/_sim/") {
        return Ok(control(&shared, &parts));
    }
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                format!("{{\"message\":\"{e}\"}}"),
            ));
        }
    };
    if let Ok(mut r) = shared.requests.lock() {
        *r += 1;
    }
    let op = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.strip_prefix("DynamoDB_20120810."))
        .unwrap_or("")
        .to_owned();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let mut settle = None;
    if let Some(json) = &parsed {
        let tables = tables_of(&op, json);
        shared.learn_tables(&parts, &tables).await;
        let partitions = shared
            .partitions
            .lock()
            .map(|p| p.limits().partitions)
            .unwrap_or(1);
        let (planned, accessed) = match shared.keys.lock() {
            Ok(keys) => (
                plan(&op, json, &keys, partitions),
                accessed_keys(&op, json, &keys),
            ),
            Err(_) => (Plan::PassThrough, vec![]),
        };
        if !accessed.is_empty()
            && let Ok(mut s) = shared.sampler.lock()
        {
            s.observe(&accessed, partitions, shared.now());
        }
        if let Plan::Charge { pre, read } = planned {
            let now = shared.now();
            let admitted = match shared.partitions.lock() {
                Ok(mut p) => p.admit(&pre, now),
                Err(_) => Ok(()),
            };
            if let Err(over) = admitted {
                let provisioned = shared
                    .keys
                    .lock()
                    .ok()
                    .and_then(|k| k.get(&over.charge.partition.table).map(|t| t.provisioned))
                    .unwrap_or(false);
                return Ok(throttle_response(&over, provisioned));
            }
            settle = read;
        }
        if let Ok(mut k) = shared.key_writes.lock() {
            for a in accessed
                .iter()
                .filter(|a| a.kind == heatsink_core::detect::Kind::Write)
            {
                *k.entry((a.table.clone(), a.key.clone())).or_default() += 1;
            }
        }
    }
    let (parts, body) = match shared.take_warm(&op, parsed.as_ref(), parts, body).await {
        Ok(request) => request,
        Err(answered) => return Ok(answered),
    };
    let (rparts, rbody) = match shared.forward(&parts, body).await {
        Ok(r) => shared.describe_shape(&op, r),
        Err(e) => return Ok(unreachable_upstream(e)),
    };
    if let Some(read) = settle
        && rparts.status.is_success()
        && let Ok(answer) = serde_json::from_slice::<Value>(&rbody)
    {
        let size: usize = if let Some(item) = answer.get("Item").and_then(Value::as_object) {
            item_size(item)
        } else {
            answer
                .get("Items")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_object)
                        .map(item_size)
                        .sum()
                })
                .unwrap_or(0)
        };
        let extra = read_units(size, read.consistent) * read.multiplier - read.prepaid;
        if extra > 0.0
            && let Ok(mut p) = shared.partitions.lock()
        {
            let now = shared.now();
            p.record(
                &Charge {
                    partition: read.partition,
                    access: Access::Read,
                    units: extra,
                },
                now,
            );
        }
    }
    let mut resp = Response::from_parts(rparts, Full::new(rbody));
    resp.headers_mut().remove(hyper::header::TRANSFER_ENCODING);
    Ok(resp)
}

fn control(shared: &Shared, parts: &hyper::http::request::Parts) -> Response<Full<Bytes>> {
    match (parts.method.as_str(), parts.uri.path()) {
        ("GET", "/_sim/stats") => json_response(
            StatusCode::OK,
            serde_json::to_string(&shared.stats()).unwrap_or_else(|_| "{}".into()),
        ),
        ("GET", "/_sim/hot") => json_response(
            StatusCode::OK,
            serde_json::to_string(&shared.hot()).unwrap_or_else(|_| "{}".into()),
        ),
        ("POST", "/_sim/reset") => {
            if let Ok(mut p) = shared.partitions.lock() {
                p.reset();
            }
            if let Ok(mut s) = shared.sampler.lock() {
                s.reset();
            }
            if let Ok(mut k) = shared.key_writes.lock() {
                k.clear();
            }
            json_response(StatusCode::OK, "{\"reset\":true}".into())
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            "{\"message\":\"GET /_sim/stats, GET /_sim/hot or POST /_sim/reset\"}".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(c: &Charge, provisioned: bool) -> (String, Value) {
        answer_for(c, Limit::KeyRange, provisioned).await
    }

    async fn answer_for(c: &Charge, limit: Limit, provisioned: bool) -> (String, Value) {
        let refused = Refused {
            charge: c.clone(),
            limit,
        };
        let resp = throttle_response(&refused, provisioned);
        let kind = resp.headers()["x-amzn-errortype"]
            .to_str()
            .unwrap()
            .to_owned();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (kind, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_hot_partition_answers_in_the_tables_capacity_mode_with_the_scoped_reason() {
        let index_write = Charge {
            partition: PartitionId {
                table: "t".into(),
                index: Some("by-creator".into()),
                partition: 3,
            },
            access: Access::Write,
            units: 1.0,
        };
        let (kind, body) = answer(&index_write, false).await;
        assert_eq!(kind, "ThrottlingException");
        assert_eq!(
            body["__type"],
            "com.amazonaws.dynamodb.v20120810#ThrottlingException"
        );
        // The service model spells the member `throttlingReasons` on this error only.
        assert!(body.get("ThrottlingReasons").is_none());
        assert_eq!(
            body["throttlingReasons"][0]["reason"],
            "IndexWriteKeyRangeThroughputExceeded"
        );
        assert_eq!(
            body["throttlingReasons"][0]["resource"],
            "arn:aws:dynamodb:us-east-1:000000000000:table/t/index/by-creator"
        );
        let table_read = Charge {
            partition: PartitionId {
                table: "t".into(),
                index: None,
                partition: 0,
            },
            access: Access::Read,
            units: 0.5,
        };
        let (kind, body) = answer(&table_read, true).await;
        assert_eq!(kind, "ProvisionedThroughputExceededException");
        assert_eq!(
            body["ThrottlingReasons"][0]["reason"],
            "TableReadKeyRangeThroughputExceeded"
        );
    }

    #[tokio::test]
    async fn a_table_over_its_on_demand_maximum_answers_the_max_on_demand_reason_api_reference_shape()
     {
        let write = Charge {
            partition: PartitionId {
                table: "t".into(),
                index: None,
                partition: 1,
            },
            access: Access::Write,
            units: 1.0,
        };
        let (kind, body) = answer_for(&write, Limit::MaxOnDemand, false).await;
        assert_eq!(kind, "ThrottlingException");
        assert_eq!(
            body["throttlingReasons"][0]["reason"],
            "TableWriteMaxOnDemandThroughputExceeded"
        );
        assert_eq!(
            body["throttlingReasons"][0]["resource"],
            "arn:aws:dynamodb:us-east-1:000000000000:table/t"
        );
    }
}
