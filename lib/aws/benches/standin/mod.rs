//! A Kinesis stand-in for benches that measure a client: the calls a producer and a polling
//! consumer make (CreateStream, DeleteStream, DescribeStreamSummary, ListShards,
//! GetShardIterator, GetRecords, PutRecords), served from memory over HTTP/1.1 on 127.0.0.1.
//!
//! Why: every emulator here spends more CPU per record than the clients do (kinesis-mock about
//! 300 µs a record served, kinesalite about 30 µs; a consumer about 4 µs), so a drain on them
//! measures the emulator. This one keeps each record's JSON as it was put and answers
//! GetRecords by concatenating those fragments, well under a microsecond a record, so the
//! client is what binds. It runs in its own process (the bench re-run with
//! `BENCH_STANDIN_SERVE=1`), so its CPU is measured apart from the client's.
//!
//! What it models: hash-key routing by MD5 of the partition key (or the explicit hash key) over
//! evenly split shards, 56-digit increasing sequence numbers, `MillisBehindLatest` as the age of
//! the first record not returned (0 at the tip), iterator types TRIM_HORIZON, LATEST,
//! AT/AFTER_SEQUENCE_NUMBER and AT_TIMESTAMP, the 10,000-record `Limit`, and **Kinesis's
//! per-shard limits** (`BENCH_STANDIN_LIMITS`: `all`, `reads` or `none`; the consumer bench
//! loads its records with `reads`, the producer bench runs with `all`): at most 5 GetRecords in any
//! second and 2 MiB a second of reads (a token bucket holding one second of it, which an answer
//! may overdraw: one answer holds at most 10 MiB, and after a 10 MiB answer the shard refuses
//! reads for 4 s, near the documented "the next 5 seconds"), and writes of 1,000 records and
//! 1 MiB a second (a token bucket holding one second of each). A call over a limit is answered
//! `ProvisionedThroughputExceededException` and a PutRecords entry over one fails with that
//! code, as on Kinesis, so a client that ignores the limits pays for it as it would on AWS. What
//! it does not model: resharding, retention, enhanced fan-out, signatures, paging of ListShards.
//! Never a test target: correctness stays on kinesis-mock.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ACCOUNT: &str = "000000000000";

/// Kinesis's per-shard limits (the service quotas).
const READS_PER_SECOND: usize = 5;
const READ_BYTES_PER_SECOND: f64 = 2.0 * 1_048_576.0;
const MAX_ANSWER_BYTES: usize = 10 * 1_048_576;
const WRITE_RECORDS_PER_SECOND: f64 = 1_000.0;
const WRITE_BYTES_PER_SECOND: f64 = 1_048_576.0;

/// One stored record: sequence number, arrival ms, data plus partition key bytes, and its JSON
/// as GetRecords returns it.
type Stored = (String, u64, usize, String);

struct Shard {
    id: String,
    start: u128,
    end: u128,
    records: Vec<Stored>,
    /// Start times (ms) of the last reads, at most [`READS_PER_SECOND`].
    reads: VecDeque<u64>,
    /// Read tokens in bytes (negative after an overdraw) and when they were last refilled (ms).
    read_tokens: (f64, u64),
    /// Write tokens (records, bytes) and when they were last refilled (ms).
    write_tokens: (f64, f64, u64),
}

impl Shard {
    fn new(id: String, start: u128, end: u128) -> Self {
        Self {
            id,
            start,
            end,
            records: Vec::new(),
            reads: VecDeque::new(),
            read_tokens: (READ_BYTES_PER_SECOND, now_ms()),
            write_tokens: (WRITE_RECORDS_PER_SECOND, WRITE_BYTES_PER_SECOND, now_ms()),
        }
    }

    /// Whether a read may start at `now` (ms); records it if so.
    fn may_read(&mut self, now: u64) -> bool {
        let (tokens, at) = &mut self.read_tokens;
        let elapsed = now.saturating_sub(*at) as f64 / 1_000.0;
        *tokens = (*tokens + elapsed * READ_BYTES_PER_SECOND).min(READ_BYTES_PER_SECOND);
        *at = now;
        if *tokens <= 0.0 {
            return false;
        }
        if self.reads.len() >= READS_PER_SECOND
            && self.reads.front().is_some_and(|&t| now < t + 1_000)
        {
            return false;
        }
        self.reads.push_back(now);
        while self.reads.len() > READS_PER_SECOND {
            self.reads.pop_front();
        }
        true
    }

    /// Takes the write tokens of one record of `bytes` at `now` (ms); false if there are none.
    fn may_write(&mut self, now: u64, bytes: usize) -> bool {
        let (records, data, at) = &mut self.write_tokens;
        let elapsed = now.saturating_sub(*at) as f64 / 1_000.0;
        *records = (*records + elapsed * WRITE_RECORDS_PER_SECOND).min(WRITE_RECORDS_PER_SECOND);
        *data = (*data + elapsed * WRITE_BYTES_PER_SECOND).min(WRITE_BYTES_PER_SECOND);
        *at = now;
        if *records < 1.0 || *data < bytes as f64 {
            return false;
        }
        *records -= 1.0;
        *data -= bytes as f64;
        true
    }
}

struct Stream {
    created: f64,
    shards: Vec<Shard>,
}

struct State {
    streams: HashMap<String, Stream>,
    next_seq: u128,
    /// Kinesis's per-shard read limits apply.
    read_limits: bool,
    /// Kinesis's per-shard write limits apply.
    write_limits: bool,
}

impl Default for State {
    fn default() -> Self {
        let limits = std::env::var("BENCH_STANDIN_LIMITS").unwrap_or_default();
        Self {
            streams: HashMap::new(),
            next_seq: 0,
            read_limits: limits != "none",
            write_limits: limits != "none" && limits != "reads",
        }
    }
}

type Shared = Arc<Mutex<State>>;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An error answer: (status, body).
fn err(kind: &str, message: &str) -> (u16, String) {
    (400, json!({"__type": kind, "message": message}).to_string())
}

fn throttled() -> (u16, String) {
    err(
        "ProvisionedThroughputExceededException",
        "Rate exceeded for shard",
    )
}

fn not_found(what: &str) -> (u16, String) {
    err("ResourceNotFoundException", &format!("{what} not found"))
}

fn arn(name: &str) -> String {
    format!("arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{name}")
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct PutEntry<'a> {
    #[serde(borrow)]
    Data: Cow<'a, str>,
    #[serde(borrow)]
    PartitionKey: Cow<'a, str>,
    #[serde(borrow, default)]
    ExplicitHashKey: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct PutRecords<'a> {
    #[serde(borrow)]
    StreamName: Cow<'a, str>,
    #[serde(borrow)]
    Records: Vec<PutEntry<'a>>,
}

fn put_records(state: &Shared, body: &[u8]) -> (u16, String) {
    let req: PutRecords<'_> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return err("SerializationException", &e.to_string()),
    };
    let Ok(mut st) = state.lock() else {
        return err("InternalFailure", "state poisoned");
    };
    let at = now_ms();
    let at_s = at as f64 / 1_000.0;
    let mut seq = st.next_seq;
    let limits = st.write_limits;
    let Some(stream) = st.streams.get_mut(req.StreamName.as_ref()) else {
        return not_found(&req.StreamName);
    };
    let mut failed = 0usize;
    let mut out = String::with_capacity(32 + req.Records.len() * 100);
    out.push_str("{\"Records\":[");
    for (i, e) in req.Records.iter().enumerate() {
        let Ok(hash) =
            heatsink_core::kpl::effective_hash_key(&e.PartitionKey, e.ExplicitHashKey.as_deref())
        else {
            return err("InvalidArgumentException", "bad partition or hash key");
        };
        let Some(shard) = stream
            .shards
            .iter_mut()
            .find(|s| s.start <= hash && hash <= s.end)
        else {
            return err("InternalFailure", "no shard for the hash key");
        };
        if i > 0 {
            out.push(',');
        }
        // The record's bytes: its data (base64 without the padding) plus its partition key.
        let bytes = e.Data.trim_end_matches('=').len() * 3 / 4 + e.PartitionKey.len();
        if limits && !shard.may_write(at, bytes) {
            failed += 1;
            out.push_str(
                "{\"ErrorCode\":\"ProvisionedThroughputExceededException\",\"ErrorMessage\":\"Rate exceeded for shard\"}",
            );
            continue;
        }
        seq += 1;
        let number = format!("{seq:056}");
        let record = format!(
            "{{\"SequenceNumber\":\"{number}\",\"ApproximateArrivalTimestamp\":{at_s:.3},\"Data\":\"{}\",\"PartitionKey\":{}}}",
            e.Data,
            Value::from(e.PartitionKey.as_ref())
        );
        out.push_str(&format!(
            "{{\"SequenceNumber\":\"{number}\",\"ShardId\":\"{}\"}}",
            shard.id
        ));
        shard.records.push((number, at, bytes, record));
    }
    out.push_str(&format!("],\"FailedRecordCount\":{failed}}}"));
    st.next_seq = seq;
    (200, out)
}

fn get_records(state: &Shared, req: &Value) -> (u16, String) {
    let it = req["ShardIterator"].as_str().unwrap_or_default();
    let limit = req["Limit"].as_u64().unwrap_or(10_000).clamp(1, 10_000) as usize;
    // "name|shard index|position"
    let mut parts = it.rsplitn(3, '|');
    let (Some(pos), Some(shard), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return err("InvalidArgumentException", "Invalid ShardIterator.");
    };
    let (Ok(pos), Ok(shard)) = (pos.parse::<usize>(), shard.parse::<usize>()) else {
        return err("InvalidArgumentException", "Invalid ShardIterator.");
    };
    let Ok(mut st) = state.lock() else {
        return err("InternalFailure", "state poisoned");
    };
    let limits = st.read_limits;
    let Some(s) = st
        .streams
        .get_mut(name)
        .and_then(|s| s.shards.get_mut(shard))
    else {
        return not_found(name);
    };
    let now = now_ms();
    if limits && !s.may_read(now) {
        return throttled();
    }
    let from = pos.min(s.records.len());
    let (mut to, mut bytes) = (from, 0usize);
    while to < s.records.len() && to - from < limit && bytes + s.records[to].2 <= MAX_ANSWER_BYTES {
        bytes += s.records[to].2;
        to += 1;
    }
    if limits {
        s.read_tokens.0 -= bytes as f64;
    }
    let behind = s
        .records
        .get(to)
        .map_or(0, |(_, at, ..)| now.saturating_sub(*at).max(1));
    let answer: usize = s.records[from..to].iter().map(|r| r.3.len() + 1).sum();
    let mut out = String::with_capacity(128 + answer);
    out.push_str("{\"Records\":[");
    for (i, (.., json)) in s.records[from..to].iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(json);
    }
    out.push_str(&format!(
        "],\"NextShardIterator\":\"{name}|{shard}|{to}\",\"MillisBehindLatest\":{behind}}}"
    ));
    (200, out)
}

fn get_shard_iterator(state: &Shared, req: &Value) -> (u16, String) {
    let name = req["StreamName"].as_str().unwrap_or_default();
    let shard_id = req["ShardId"].as_str().unwrap_or_default();
    let Ok(st) = state.lock() else {
        return err("InternalFailure", "state poisoned");
    };
    let Some(stream) = st.streams.get(name) else {
        return not_found(name);
    };
    let Some((index, shard)) = stream
        .shards
        .iter()
        .enumerate()
        .find(|(_, s)| s.id == shard_id)
    else {
        return not_found(shard_id);
    };
    let seq = req["StartingSequenceNumber"]
        .as_str()
        .map(|s| format!("{:0>56}", s.trim_start_matches('0')));
    let at_seq = |s: &str| shard.records.partition_point(|(n, ..)| n.as_str() < s);
    let pos = match req["ShardIteratorType"].as_str().unwrap_or_default() {
        "TRIM_HORIZON" => 0,
        "LATEST" => shard.records.len(),
        "AT_SEQUENCE_NUMBER" => at_seq(seq.as_deref().unwrap_or_default()),
        "AFTER_SEQUENCE_NUMBER" => {
            let s = seq.as_deref().unwrap_or_default();
            shard.records.partition_point(|(n, ..)| n.as_str() <= s)
        }
        "AT_TIMESTAMP" => {
            let t = (req["Timestamp"].as_f64().unwrap_or(0.0) * 1_000.0) as u64;
            shard.records.partition_point(|(_, at, ..)| *at < t)
        }
        other => {
            return err(
                "InvalidArgumentException",
                &format!("iterator type {other}"),
            );
        }
    };
    (
        200,
        json!({"ShardIterator": format!("{name}|{index}|{pos}")}).to_string(),
    )
}

fn shard_json(s: &Shard) -> Value {
    json!({
        "ShardId": s.id,
        "HashKeyRange": {"StartingHashKey": s.start.to_string(), "EndingHashKey": s.end.to_string()},
        "SequenceNumberRange": {"StartingSequenceNumber": format!("{:056}", 0)},
    })
}

fn handle(state: &Shared, target: &str, body: &[u8]) -> (u16, String) {
    let op = target.rsplit('.').next().unwrap_or_default();
    if op == "PutRecords" {
        return put_records(state, body);
    }
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if op == "GetRecords" {
        return get_records(state, &req);
    }
    if op == "GetShardIterator" {
        return get_shard_iterator(state, &req);
    }
    let name = req["StreamName"].as_str().unwrap_or_default().to_owned();
    let Ok(mut st) = state.lock() else {
        return err("InternalFailure", "state poisoned");
    };
    match op {
        "CreateStream" => {
            if st.streams.contains_key(&name) {
                return err("ResourceInUseException", &format!("{name} exists"));
            }
            let n = req["ShardCount"].as_u64().unwrap_or(1).clamp(1, 1_000) as u128;
            let width = u128::MAX / n;
            let shards = (0..n)
                .map(|i| {
                    let end = if i + 1 == n {
                        u128::MAX
                    } else {
                        (i + 1) * width - 1
                    };
                    Shard::new(format!("shardId-{i:012}"), i * width, end)
                })
                .collect();
            let created = now_ms() as f64 / 1_000.0;
            st.streams.insert(name, Stream { created, shards });
            (200, "{}".into())
        }
        "DeleteStream" => match st.streams.remove(&name) {
            Some(_) => (200, "{}".into()),
            None => not_found(&name),
        },
        "DescribeStreamSummary" => match st.streams.get(&name) {
            Some(s) => (
                200,
                json!({"StreamDescriptionSummary": {
                    "StreamName": name,
                    "StreamARN": arn(&name),
                    "StreamStatus": "ACTIVE",
                    "StreamModeDetails": {"StreamMode": "PROVISIONED"},
                    "RetentionPeriodHours": 24,
                    "StreamCreationTimestamp": s.created,
                    "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                    "EncryptionType": "NONE",
                    "OpenShardCount": s.shards.len(),
                    "ConsumerCount": 0,
                }})
                .to_string(),
            ),
            None => not_found(&name),
        },
        "ListShards" => match st.streams.get(&name) {
            Some(s) => (
                200,
                json!({"Shards": s.shards.iter().map(shard_json).collect::<Vec<_>>()}).to_string(),
            ),
            None => not_found(&name),
        },
        "ListStreams" => (
            200,
            json!({"StreamNames": st.streams.keys().collect::<Vec<_>>(), "HasMoreStreams": false})
                .to_string(),
        ),
        other => err("UnknownOperationException", other),
    }
}

/// Serves one connection: HTTP/1.1 requests with a Content-Length body, kept alive.
async fn connection(state: Shared, socket: TcpStream) -> Result<(), BoxError> {
    socket.set_nodelay(true)?;
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        let (mut length, mut target) = (0usize, String::new());
        line.clear();
        if read.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        loop {
            line.clear();
            if read.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("x-amz-target") {
                    target = v.to_owned();
                }
            }
        }
        body.resize(length, 0);
        read.read_exact(&mut body).await?;
        let (status, answer) = handle(&state, &target, &body);
        let head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/x-amz-json-1.1\r\nx-amzn-requestid: standin\r\ncontent-length: {}\r\n\r\n",
            if status == 200 { "OK" } else { "Bad Request" },
            answer.len()
        );
        write.write_all(head.as_bytes()).await?;
        write.write_all(answer.as_bytes()).await?;
    }
}

/// Serves on a free port of 127.0.0.1 until the process ends; prints `STANDIN PORT` first.
pub async fn serve() -> Result<(), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("STANDIN {}", listener.local_addr()?.port());
    let state = Shared::default();
    loop {
        let (socket, _) = listener.accept().await?;
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let _ = connection(state, socket).await;
        });
    }
}

/// A running stand-in process; killed when dropped.
pub struct StandIn {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl StandIn {
    /// Starts this bench binary as a stand-in (`BENCH_STANDIN_SERVE=1`) with Kinesis's limits
    /// `limits` (`all`, `reads`, `none`; `BENCH_STANDIN_LIMITS` overrides it) and waits for its
    /// port.
    pub fn start(limits: &str) -> Result<Self, BoxError> {
        use std::io::BufRead;
        let limits = std::env::var("BENCH_STANDIN_LIMITS").unwrap_or_else(|_| limits.to_owned());
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env("BENCH_STANDIN_SERVE", "1")
            .env("BENCH_STANDIN_LIMITS", limits)
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("stand-in without stdout")?;
        let mut first = String::new();
        std::io::BufReader::new(stdout).read_line(&mut first)?;
        let port = first
            .strip_prefix("STANDIN ")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .ok_or_else(|| format!("stand-in said {first:?}"))?;
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Kinesis endpoint a bench measures: the stand-in with `limits` when
/// `BENCH_KINESIS=standin` (started here; it stops when the returned [`StandIn`] is dropped),
/// else `AWS_ENDPOINT_URL_KINESIS`; with its URL and a client for it.
pub fn endpoint(
    config: &aws_config::SdkConfig,
    limits: &str,
) -> Result<(Option<StandIn>, String, aws_sdk_kinesis::Client), BoxError> {
    let standin = match std::env::var("BENCH_KINESIS").as_deref() {
        Ok("standin") => Some(StandIn::start(limits)?),
        _ => None,
    };
    let url = match &standin {
        Some(s) => s.url.clone(),
        None => std::env::var("AWS_ENDPOINT_URL_KINESIS").unwrap_or_default(),
    };
    let client = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(config)
            .endpoint_url(&url)
            .build(),
    );
    Ok((standin, url, client))
}
