//! Consumer memory with 1 MB records in flight, on kinesis-mock: `heatsink::stream::Worker`
//! side by side with a naive consumer that reads every shard to its end into memory before
//! processing. `BENCH_RECORDS` records of 1 MiB of random (incompressible) bytes are put on a
//! stream of `BENCH_SHARDS` shards, spread evenly by explicit hash key, once; then each
//! consumer drains the stream in **its own child process** (this binary re-run with
//! `BENCH_RSS_ROLE`), so every run starts from a clean allocator and its `/proc/self/status`
//! peak (`VmHWM`) is its own. The child reads its RSS once its clients are built and have made
//! one call (the baseline), resets `VmHWM` (`/proc/self/clear_refs`), and samples `VmRSS` every
//! 50 ms while it drains; the processor touches every byte (a checksum) and holds each batch
//! `BENCH_HOLD_MS` (default 100 ms), so the fetchers run ahead and records pile up as far as the
//! consumer lets them. One warm-up pair, then `BENCH_RUNS` pairs in ABBA order, medians
//! reported.
//!
//! ```text
//! AWS_ENDPOINT_URL_KINESIS=… AWS_ENDPOINT_URL_DYNAMODB=… cargo bench -p heatsink --bench consumer_rss
//! ```
//! Knobs (env): `BENCH_RECORDS` (default 1000), `BENCH_SHARDS` (default 4), `BENCH_RUNS`
//! (default 2), `BENCH_HOLD_MS` (default 100), `BENCH_RECORD_BYTES` (default 1 MiB),
//! `BENCH_SOURCE=fake`: both consumers read an in-process `ShardSource` that answers
//! GetRecords as AWS shapes it (≤ 10 MiB per answer) instead of kinesis-mock, which serves
//! about 1.3 MB/s (a 1,000 × 1 MiB drain there takes a quarter of an hour). Leases stay on
//! DynamoDB (`AWS_ENDPOINT_URL_DYNAMODB`) either way. `BENCH_KPL=1` (with the fake source):
//! every record is a KPL aggregate of `BENCH_RECORD_BYTES` holding as many user records as fit
//! (empty data, one 256-character key: 6 bytes each, 174,718 per MiB), the worst expansion a
//! valid aggregate has; only heatsink runs (a consumer that expands whole answers would need
//! gigabytes), and the bound of the stream module's guarantee 7 is printed beside its peak.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use heatsink::schema::{self, Schema, StreamSpec, Table};
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordBatch, RecordProcessor, ShardInfo, ShardSource,
    StartAt, StreamError, StreamRecord, Timeouts, Worker, WorkerConfig,
};
use heatsink_core::counter::Seq;
use rand::RngCore;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TIMEOUT: Duration = Duration::from_secs(600);
const MIB: f64 = 1_048_576.0;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_str(name: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("{name} not set").into())
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets `VmHWM` to the current RSS (Linux: `5` to `/proc/self/clear_refs`).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Samples `VmRSS` every 50 ms; the largest sample so far.
fn sampler() -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let max = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&max);
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tick.tick().await;
            seen.fetch_max(rss().0, Ordering::Relaxed);
        }
    });
    (max, task)
}

/// What a processor saw: records, bytes, the largest batch, a checksum of every byte.
#[derive(Clone, Default)]
struct Seen {
    records: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    max_batch_bytes: Arc<AtomicUsize>,
    max_batch_records: Arc<AtomicUsize>,
    checksum: Arc<AtomicU64>,
}

impl Seen {
    /// Touches every byte of `data` (the "little work"); returns its sum.
    fn work<'a>(&self, data: impl Iterator<Item = &'a [u8]>) {
        let (mut n, mut bytes, mut sum) = (0usize, 0usize, 0u64);
        for d in data {
            n += 1;
            bytes += d.len();
            sum = d.iter().fold(sum, |s, b| s.wrapping_add(u64::from(*b)));
        }
        self.records.fetch_add(n as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.max_batch_bytes.fetch_max(bytes, Ordering::Relaxed);
        self.max_batch_records.fetch_max(n, Ordering::Relaxed);
        self.checksum.fetch_add(sum, Ordering::Relaxed);
    }
}

/// heatsink's processor: the work, then a hold, per batch.
struct Hold {
    seen: Seen,
    hold: Duration,
}

impl RecordProcessor for Hold {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        self.seen.work(batch.records.iter().map(|r| &r.data[..]));
        tokio::time::sleep(self.hold).await;
        Ok(())
    }
}

/// The child's result line: `role baseline hwm sampled seconds records bytes max_batch_bytes
/// max_batch_records checksum`.
struct Outcome {
    role: String,
    baseline: u64,
    hwm: u64,
    sampled: u64,
    seconds: f64,
    max_batch_bytes: u64,
    max_batch_records: u64,
}

impl Outcome {
    fn parse(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.strip_prefix("RSS ")?.split_whitespace().collect();
        Some(Self {
            role: (*f.first()?).to_owned(),
            baseline: f.get(1)?.parse().ok()?,
            hwm: f.get(2)?.parse().ok()?,
            sampled: f.get(3)?.parse().ok()?,
            seconds: f.get(4)?.parse().ok()?,
            max_batch_bytes: f.get(7)?.parse().ok()?,
            max_batch_records: f.get(8)?.parse().ok()?,
        })
    }

    fn peak(&self) -> u64 {
        self.hwm.max(self.sampled)
    }
}

/// Child: drains the stream as `role`, prints one `RSS …` line.
async fn child(role: &str) -> Result<(), BoxError> {
    let stream = env_str("BENCH_RSS_STREAM")?;
    let n = env_usize("BENCH_RECORDS", 1_000);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    // One call each, so the baseline includes warmed clients and connection pools.
    ddb.list_tables().limit(1).send().await?;
    // kinesis-mock serves about 1.3 MB/s on one core: a 9 MiB answer takes 7 s alone and
    // 4 shards' answers queue behind each other, so calls get minutes, not a lease's quarter.
    let slow = Timeouts {
        attempt: Duration::from_secs(300),
        operation: Duration::from_secs(600),
    };
    if std::env::var("BENCH_SOURCE").as_deref() == Ok("fake") {
        let size = env_usize("BENCH_RECORD_BYTES", 1 << 20);
        let shards = env_usize("BENCH_SHARDS", 4);
        let source = FakeKinesis::new(n, shards, size);
        let users = match source.aggregate {
            Some(_) => n.div_ceil(shards) * shards * kpl_users(size),
            None => n,
        };
        drain(role, source, slow, ddb, users as u64).await
    } else {
        kinesis
            .describe_stream_summary()
            .stream_name(&stream)
            .send()
            .await?;
        let source = KinesisSource::new(kinesis, &stream).with_timeouts(slow);
        drain(role, source, slow, ddb, n as u64).await
    }
}

/// Drains `source` as `role` with the RSS sampler running; prints the `RSS …` line.
async fn drain<S: ShardSource + Clone>(
    role: &str,
    source: S,
    timeouts: Timeouts,
    ddb: aws_sdk_dynamodb::Client,
    n: u64,
) -> Result<(), BoxError> {
    let hold = Duration::from_millis(env_usize("BENCH_HOLD_MS", 100) as u64);
    let (baseline, _) = rss();
    let reset = reset_peak();
    let (sampled, sampling) = sampler();
    let seen = Seen::default();
    let start = Instant::now();
    match role {
        "heatsink" => {
            let leases = env_str("BENCH_RSS_LEASES")?;
            let app = env_str("BENCH_RSS_APP")?;
            let mut c = WorkerConfig::new(&app);
            c.lease_duration = Duration::from_secs(60);
            c.timeouts = Some(timeouts);
            c.renew_interval = Duration::from_secs(1);
            c.sync_interval = Duration::from_secs(2);
            c.idle_poll = Duration::from_millis(200);
            c.verify_takes = std::env::var("HEATSINK_VERIFY_TAKES").as_deref() != Ok("0");
            let worker = Worker::new(
                source,
                LeaseTable::new(ddb, &leases, &app),
                Hold {
                    seen: seen.clone(),
                    hold,
                },
                c,
            );
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(worker.run(async move {
                let _ = rx.await;
            }));
            while seen.records.load(Ordering::Relaxed) < n {
                if start.elapsed() > TIMEOUT || task.is_finished() {
                    return Err(format!(
                        "heatsink: {} of {n} records",
                        seen.records.load(Ordering::Relaxed)
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let _ = tx.send(());
            task.await??;
        }
        "naive" => naive(source, n, hold, &seen).await?,
        other => return Err(format!("unknown role {other}").into()),
    }
    let seconds = start.elapsed().as_secs_f64();
    sampling.abort();
    let (_, hwm) = rss();
    let hwm = if reset { hwm } else { 0 };
    println!(
        "RSS {role} {baseline} {hwm} {} {seconds:.3} {} {} {} {} {}",
        sampled.load(Ordering::Relaxed),
        seen.records.load(Ordering::Relaxed),
        seen.bytes.load(Ordering::Relaxed),
        seen.max_batch_bytes.load(Ordering::Relaxed),
        seen.max_batch_records.load(Ordering::Relaxed),
        seen.checksum.load(Ordering::Relaxed),
    );
    Ok(())
}

/// The naive consumer: every shard read to its tip into memory (shards in parallel, the same
/// source and GetRecords limit as heatsink's, 200 ms between calls), then each shard's records
/// processed in the answers they came in, with the same hold per answer.
async fn naive<S: ShardSource + Clone>(
    source: S,
    n: u64,
    hold: Duration,
    seen: &Seen,
) -> Result<(), BoxError> {
    let mut reads = Vec::new();
    for s in source.list_shards().await? {
        let source = source.clone();
        reads.push(tokio::spawn(async move {
            let mut iterator = source
                .get_iterator(&s.shard_id, &StartAt::TrimHorizon)
                .await?;
            let mut batches = Vec::new();
            loop {
                let out = source.get_records(&iterator, source.max_records()).await?;
                let caught_up = out.records.is_empty() || out.millis_behind == Some(0);
                if !out.records.is_empty() {
                    batches.push(out.records);
                }
                match out.next_iterator {
                    Some(next) if !caught_up => iterator = next,
                    _ => break,
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok::<_, StreamError>(batches)
        }));
    }
    let mut all = Vec::new();
    for r in reads {
        all.push(r.await??);
    }
    for batches in all {
        for batch in batches {
            seen.work(batch.iter().map(|r| &r.data[..]));
            tokio::time::sleep(hold).await;
        }
    }
    let got = seen.records.load(Ordering::Relaxed);
    if got < n {
        return Err(format!("naive: {got} of {n} records").into());
    }
    Ok(())
}

/// An in-process Kinesis stand-in (`BENCH_SOURCE=fake`): `shards` open shards of `per_shard`
/// records of `size` bytes each; every `GetRecords` answer is shaped by the AWS limits (at most
/// 10 MiB of data and keys, at most `limit` records) and its data are freshly allocated, as
/// the SDK's decoded blobs are. No HTTP, no JSON: what it measures is the consumer's own
/// holding, not the SDK's transient response buffers.
#[derive(Clone)]
struct FakeKinesis {
    shards: usize,
    per_shard: usize,
    size: usize,
    pool: bytes::Bytes,
    /// With `BENCH_KPL=1`: the one aggregate every record is (copied per record).
    aggregate: Option<bytes::Bytes>,
}

/// User records of the `BENCH_KPL` aggregate of `size` bytes.
fn kpl_users(size: usize) -> usize {
    size.saturating_sub(300) / 6
}

/// An aggregate of `size` bytes at most: one 256-character key, then empty user records.
fn kpl_aggregate(size: usize) -> bytes::Bytes {
    use md5::{Digest, Md5};
    let mut body = vec![0x0a, 0x80, 0x02];
    body.extend("k".repeat(256).as_bytes());
    body.extend([0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00].repeat(kpl_users(size)));
    let mut data = heatsink::kinesis::kpl::MAGIC.to_vec();
    data.extend_from_slice(&body);
    data.extend_from_slice(&Md5::digest(&body));
    data.into()
}

const ANSWER_CAP: usize = 10 << 20;

impl FakeKinesis {
    fn new(records: usize, shards: usize, size: usize) -> Self {
        let mut pool = vec![0u8; size + 4096];
        rand::rng().fill_bytes(&mut pool);
        let kpl = std::env::var("BENCH_KPL").as_deref() == Ok("1");
        Self {
            shards,
            per_shard: records.div_ceil(shards),
            size,
            pool: pool.into(),
            aggregate: kpl.then(|| kpl_aggregate(size)),
        }
    }
}

impl ShardSource for FakeKinesis {
    fn stream(&self) -> &str {
        "fake"
    }

    async fn identity(&self) -> Result<String, StreamError> {
        Ok("arn:aws:kinesis:us-east-1:000000000000:stream/fake@1".to_owned())
    }

    fn max_records(&self) -> i32 {
        10_000
    }

    fn with_timeouts(self, _: Timeouts) -> Self {
        self
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        let width = u128::MAX / self.shards as u128;
        Ok((0..self.shards)
            .map(|i| {
                let mut s = ShardInfo::new(format!("shardId-{i:012}"));
                s.hash_range = Some((width * i as u128, width * (i as u128 + 1) - 1));
                s.starting_seq = Some("1".to_owned());
                s
            })
            .collect())
    }

    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        let next = match start {
            StartAt::AfterSeq(seq) => seq.to_decimal().parse::<usize>().unwrap_or(0),
            StartAt::AtSeq(seq) => seq.to_decimal().parse::<usize>().unwrap_or(1) - 1,
            _ => 0,
        };
        Ok(format!("{shard_id}/{next}"))
    }

    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordBatch, StreamError> {
        let (shard, next) = iterator
            .rsplit_once('/')
            .and_then(|(s, n)| Some((s.to_owned(), n.parse::<usize>().ok()?)))
            .ok_or_else(|| StreamError::NotFound {
                resource: iterator.to_owned(),
                source: None,
            })?;
        let mut records = Vec::new();
        let mut bytes = 0;
        let mut at = next;
        while at < self.per_shard && records.len() < usize::try_from(limit).unwrap_or(0) {
            let key = format!("k{at}");
            if bytes + self.size + key.len() > ANSWER_CAP {
                break;
            }
            bytes += self.size + key.len();
            // A fresh buffer per record, as the SDK's base64 decoding allocates one.
            let off = at % 4096;
            let data = match &self.aggregate {
                Some(a) => bytes::Bytes::from(a.to_vec()),
                None => bytes::Bytes::from(self.pool[off..off + self.size].to_vec()),
            };
            at += 1;
            records.push(StreamRecord {
                seq: Seq::from(at as u64),
                sub_seq: None,
                partition_key: key.into(),
                data,
                undecodable: None,
            });
        }
        let behind = if at >= self.per_shard { 0 } else { 1_000 };
        Ok(RecordBatch {
            records,
            next_iterator: Some(format!("{shard}/{at}")),
            child_shards: Vec::new(),
            millis_behind: Some(behind),
        })
    }
}

/// Puts `n` records of `size` random bytes, `per_call` per PutRecords, spread over `shards`
/// evenly by explicit hash key.
async fn produce(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    n: usize,
    size: usize,
    shards: usize,
) -> Result<(), BoxError> {
    // At most 5 MiB per PutRecords, keys included.
    let per_call = ((5 << 20) / (size + 64)).clamp(1, 500);
    let width = u128::MAX / shards as u128;
    let mut rng = rand::rng();
    let mut i = 0;
    while i < n {
        let end = (i + per_call).min(n);
        let mut entries = Vec::new();
        for j in i..end {
            let mut data = vec![0u8; size];
            rng.fill_bytes(&mut data);
            let hash = width * (j % shards) as u128 + width / 2;
            entries.push(
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("k{j}"))
                    .explicit_hash_key(hash.to_string())
                    .data(Blob::new(data))
                    .build()?,
            );
        }
        let out = k
            .put_records()
            .stream_name(stream)
            .set_records(Some(entries))
            .send()
            .await?;
        if out.failed_record_count().unwrap_or(0) > 0 {
            return Err("records refused while producing".into());
        }
        i = end;
    }
    Ok(())
}

/// Runs one child; its outcome.
fn run_child(role: &str, stream: &str, leases: &str, app: &str) -> Result<Outcome, BoxError> {
    let out = Command::new(std::env::current_exe()?)
        .env("BENCH_RSS_ROLE", role)
        .env("BENCH_RSS_STREAM", stream)
        .env("BENCH_RSS_LEASES", leases)
        .env("BENCH_RSS_APP", app)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{role} child failed: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    stdout
        .lines()
        .find_map(Outcome::parse)
        .ok_or_else(|| format!("{role} child printed no RSS line: {stdout}").into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn mib(b: u64) -> f64 {
    b as f64 / MIB
}

async fn bench() -> Result<(), BoxError> {
    let records = env_usize("BENCH_RECORDS", 1_000);
    let shards = env_usize("BENCH_SHARDS", 4);
    let size = env_usize("BENCH_RECORD_BYTES", 1 << 20);
    let runs = env_usize("BENCH_RUNS", 2).max(1);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let tag = heatsink::clock::now_ms() % 1_000_000;
    let schema = Schema::new(format!("hs-rss-{tag:06}-"));
    let leases = schema.table(Table::Leases);
    schema::ensure_table(&ddb, &leases).await?;
    let stream = StreamSpec {
        logical: "consumer".into(),
        name: format!("{}consumer", schema.prefix()),
        shards: i32::try_from(shards)?,
    };
    let fake = std::env::var("BENCH_SOURCE").as_deref() == Ok("fake");
    let put = Instant::now();
    if !fake {
        schema::ensure_stream(&kinesis, &stream).await?;
        produce(&kinesis, &stream.name, records, size, shards).await?;
    }
    println!(
        "consumer_rss: {records} records of {size} random bytes on {shards} shards of {} (put in {:.1} s), hold {} ms per batch",
        if fake {
            "the in-process fake source"
        } else {
            &stream.name
        },
        put.elapsed().as_secs_f64(),
        env_usize("BENCH_HOLD_MS", 100)
    );
    let mut app = 0usize;
    let mut next_app = || {
        app += 1;
        format!("rss{app}")
    };
    let mut results: Vec<Outcome> = Vec::new();
    let kpl = fake && std::env::var("BENCH_KPL").as_deref() == Ok("1");
    let roles: &[&str] = if kpl {
        &["heatsink"]
    } else {
        &["heatsink", "naive"]
    };
    // Warm-up pair (page cache, emulator JIT), not counted.
    for &role in roles {
        let o = run_child(role, &stream.name, &leases.name, &next_app())?;
        println!(
            "warm-up {role}: peak {:.0} MiB, {:.1} s",
            mib(o.peak()),
            o.seconds
        );
    }
    for run in 0..runs {
        let mut order = roles.to_vec();
        if run % 2 == 1 {
            order.reverse();
        }
        for role in order {
            let o = run_child(role, &stream.name, &leases.name, &next_app())?;
            println!(
                "run {run} {role}: baseline {:.0} MiB, VmHWM {:.0} MiB, sampled max {:.0} MiB, {:.1} s, largest batch {} records / {:.1} MiB",
                mib(o.baseline),
                mib(o.hwm),
                mib(o.sampled),
                o.seconds,
                o.max_batch_records,
                mib(o.max_batch_bytes)
            );
            results.push(o);
        }
    }
    let batch = results.iter().map(|o| o.max_batch_bytes).max().unwrap_or(0);
    let answer = (batch as f64).min(10.0 * MIB);
    // The brief's model: per shard 2 queued answers + 1 in processing.
    let by_count = shards as f64 * 3.0 * answer / MIB;
    // The worker's own bound: below prefetch_bytes (16 MiB) before a call, plus one answer.
    let by_bytes = shards as f64 * (16.0 * MIB + answer) / MIB;
    let total = (records * size) as f64 / MIB;
    println!(
        "{:<22} {:>13} {:>11} {:>13} {:>9}",
        "consumer (median)", "baseline MiB", "peak MiB", "peak-base MiB", "seconds"
    );
    for &role in roles {
        let mine: Vec<&Outcome> = results.iter().filter(|o| o.role == role).collect();
        let base = median(mine.iter().map(|o| mib(o.baseline)).collect());
        let peak = median(mine.iter().map(|o| mib(o.peak())).collect());
        let delta = median(
            mine.iter()
                .map(|o| mib(o.peak().saturating_sub(o.baseline)))
                .collect(),
        );
        let secs = median(mine.iter().map(|o| o.seconds).collect());
        println!(
            "{:<22} {:>13.0} {:>11.0} {:>13.0} {:>9.1}   deltas {:?}",
            role,
            base,
            peak,
            delta,
            secs,
            mine.iter()
                .map(|o| mib(o.peak().saturating_sub(o.baseline)).round())
                .collect::<Vec<_>>()
        );
    }
    if kpl {
        // Guarantee 7: per shard prefetch_bytes + one answer + one batch of 10,000 user
        // records (128 bytes each) + the aggregate's tables (one key: nothing).
        let bound = shards as f64 * (16.0 + 10.0 + 10_000.0 * 128.0 / MIB);
        println!(
            "KPL aggregates of {size} bytes, {} user records each; bound shards x (16 MiB + 10 MiB + 1.2 MiB) = {bound:.0} MiB",
            kpl_users(size)
        );
    } else {
        println!(
            "records in the stream: {total:.0} MiB; largest answer {:.1} MiB; bound shards x 3 answers = {by_count:.0} MiB; shards x (prefetch_bytes 16 MiB + 1 answer) = {by_bytes:.0} MiB",
            batch as f64 / MIB
        );
    }
    if !fake {
        let _ = kinesis
            .delete_stream()
            .stream_name(&stream.name)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }
    let _ = ddb.delete_table().table_name(&leases.name).send().await;
    Ok(())
}

fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_none()
        || std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none()
    {
        println!(
            "skip: consumer_rss bench needs AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB (the local stack)"
        );
        return;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("consumer_rss bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    let role = std::env::var("BENCH_RSS_ROLE").ok();
    let result = match role.as_deref() {
        Some(role) => runtime.block_on(child(role)),
        None => runtime.block_on(bench()),
    };
    if let Err(e) = result {
        eprintln!("consumer_rss bench failed: {e}");
        std::process::exit(1);
    }
}
