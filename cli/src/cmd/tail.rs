//! `heatsink tail`: run one worker of an application and print each record it processes.
//!
//! Several `tail` processes with the same `--app` share the stream's shards through the lease
//! table; each prints, as one JSON line per record, what it processes, in processing order, and
//! checkpoints as it goes. Ctrl-C stops after the current batch and releases the leases.
//!
//! A record prints as one line `SHARD SEQ[/SUB_SEQ] PARTITION_KEY DATA` (control characters
//! escaped, data that is not UTF-8 as `base64:…`); with `--json` as one JSON line
//! `{"shard", "seq", "sub_seq"?, "partition_key", "data", "data_encoding"}`: `data` is the record
//! as text when `data_encoding` is `"utf8"`, base64 when it is `"base64"`. A record that carries
//! the KPL magic but does not decode within the bounds (`docs/bounds.md`) is printed whole with
//! `"undecodable"` (the reason; `(undecodable: …)` on its line), its data cut to the first
//! 4 KiB (`"data_truncated"`, `"data_len"`; `(first 4096 of N bytes)`), and `tail` reads on.
//! stdout is written without blocking the runtime, one write and flush per batch; when it cannot
//! be written (a closed pipe) `tail` stops without checkpointing the batch and exits non-zero, so
//! a re-run prints it.
//!
//! With `--emf`, every lease round also writes one CloudWatch Embedded Metric Format line to
//! stderr (`LeasesHeld`, `LeasesExpired`, dimension `Function=stream-consumer`): run under a log
//! shipper that sends stderr to CloudWatch Logs and the stacks' dashboard plots them. stdout
//! carries only the records.

use std::time::Duration;

use clap::{Args, ValueEnum};
use heatsink::clock::now_ms;
use heatsink::schema::{self, DEFAULT_PREFIX, Schema, Table};
use heatsink::stream::{
    DynamoDbStreamsSource, InitialPosition, KinesisSource, LeaseTable, ProcessBatch,
    RecordProcessor, ShardSource, StreamError, StreamRecord, Worker, WorkerConfig, WorkerStats,
};
use tokio::io::AsyncWriteExt;

use super::fail::{Service, Target};
use super::lineage::is_dynamodb_stream;
use super::local::schema_failure;
use super::{CmdResult, parse_duration, sdk_config};

/// Where a new application starts reading shards that have no parent.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum From {
    /// The oldest retained record.
    TrimHorizon,
    /// Only records put from now on.
    Latest,
}

/// Arguments of `heatsink tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Kinesis stream name, or a DynamoDB stream ARN (`arn:aws:dynamodb:…/stream/…`).
    #[arg(long)]
    stream: String,
    /// Application name: workers of one application share the shards and checkpoints.
    #[arg(long)]
    app: String,
    /// Where the application starts on its first run (no lease row yet), applied to the current
    /// shards: `latest` reads nothing retained before the start, reshards or not. Later runs
    /// resume from the checkpoints, and new child shards start at their first record.
    #[arg(long, value_enum, default_value = "trim-horizon")]
    from: From,
    /// Print each record as a JSON line `{"shard", "seq", "sub_seq"?, "partition_key", "data",
    /// "data_encoding", "undecodable"?}` instead of `SHARD SEQ[/SUB_SEQ] PARTITION_KEY DATA`.
    #[arg(long)]
    json: bool,
    /// Exit 0 after this long (`30s`, `500ms`, `2m`; at most 168h) with no records and every
    /// reachable shard finished or caught up.
    #[arg(long, value_parser = parse_duration)]
    idle_exit: Option<Duration>,
    /// This worker's name in the lease table (default `tail-<pid>-<ms>`).
    #[arg(long)]
    worker_id: Option<String>,
    /// Resource name prefix (the lease table is `<prefix>leases`, created if missing).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Write each lease round's metrics (LeasesHeld, LeasesExpired) to stderr as EMF JSON lines,
    /// dimension Function=stream-consumer; stdout stays records only.
    #[arg(long)]
    emf: bool,
    /// Read each lease take back before using it: only for emulators whose conditional writes
    /// are not atomic under concurrency (moto 5.2.5); AWS and dynoxide do not need it.
    #[arg(long, env = "HEATSINK_VERIFY_TAKES")]
    verify_takes: bool,
}

/// Most data bytes printed of a record delivered whole because it does not decode (a hostile
/// KPL aggregate is up to 1 MiB): its line carries the first 4 KiB, `"data_truncated": true`
/// and `"data_len"`, so one such record prints at most about 6 KB.
const UNDECODABLE_DATA_BYTES: usize = 4_096;

/// The JSON line of `record`, bounded for a record that does not decode.
fn line(record: &StreamRecord, shard: &str) -> serde_json::Value {
    if record.undecodable.is_none() || record.data.len() <= UNDECODABLE_DATA_BYTES {
        return record.to_json(shard);
    }
    let cut = StreamRecord {
        data: record.data.slice(..UNDECODABLE_DATA_BYTES),
        ..record.clone()
    };
    let mut line = cut.to_json(shard);
    if let Some(map) = line.as_object_mut() {
        map.insert("data_truncated".to_owned(), true.into());
        map.insert("data_len".to_owned(), record.data.len().into());
    }
    line
}

/// Prints each record as a line (or a JSON line); one non-blocking write and flush of stdout
/// per batch.
struct Printer<W> {
    out: tokio::sync::Mutex<W>,
    json: bool,
}

/// A record's human line, from its JSON form: `SHARD SEQ[/SUB_SEQ] PARTITION_KEY DATA`, the
/// data's control characters escaped (one record, one line), binary data as `base64:…`, and
/// ` (undecodable: REASON)` for a KPL record that did not decode.
fn record_line(record: &serde_json::Value) -> String {
    let text = |field: &str| record[field].as_str().unwrap_or_default();
    let seq = match record["sub_seq"].as_u64() {
        Some(sub) => format!("{}/{sub}", text("seq")),
        None => text("seq").to_owned(),
    };
    let encoding = if text("data_encoding") == "base64" {
        "base64:"
    } else {
        ""
    };
    let mut line = format!(
        "{} {seq} {} {encoding}{}",
        text("shard"),
        escape_controls(text("partition_key")),
        escape_controls(text("data"))
    );
    if let Some(why) = record["undecodable"].as_str() {
        line.push_str(&format!(" (undecodable: {why})"));
    }
    if let Some(len) = record["data_len"].as_u64() {
        line.push_str(&format!(" (first {UNDECODABLE_DATA_BYTES} of {len} bytes)"));
    }
    line
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`), so a record stays one line.
fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl<W: tokio::io::AsyncWrite + Unpin + Send + Sync + 'static> RecordProcessor for Printer<W> {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut text = String::new();
        for record in &batch.records {
            let json = line(record, &batch.shard_id);
            if self.json {
                text.push_str(&json.to_string());
            } else {
                text.push_str(&record_line(&json));
            }
            text.push('\n');
        }
        let mut out = self.out.lock().await;
        let written = match out.write_all(text.as_bytes()).await {
            Ok(()) => out.flush().await,
            Err(e) => Err(e),
        };
        // Nowhere to print (EPIPE, closed stdout): retrying cannot help, and skipping would
        // checkpoint records nobody saw. Stop, and let `tail` exit non-zero.
        written.map_err(|e| StreamError::Abort(Box::new(e)))
    }
}

/// Runs a tail worker until Ctrl-C or `--idle-exit`.
pub async fn run(args: TailArgs) -> CmdResult {
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let schema = Schema::new(&args.prefix);
    schema::ensure_table(&ddb, &schema.table(Table::Leases))
        .await
        .map_err(|e| schema_failure(&config, &e))?;
    let leases = LeaseTable::from_schema(ddb, &schema, &args.app);
    let worker_id = args
        .worker_id
        .clone()
        .unwrap_or_else(|| format!("tail-{}-{}", std::process::id(), now_ms()));
    let mut worker_config = WorkerConfig::new(worker_id);
    worker_config.initial_position = match args.from {
        From::TrimHorizon => InitialPosition::TrimHorizon,
        From::Latest => InitialPosition::Latest,
    };
    worker_config.sync_interval = Duration::from_secs(10);
    worker_config.verify_takes = args.verify_takes;
    let printer = Printer {
        out: tokio::sync::Mutex::new(tokio::io::stdout()),
        json: args.json,
    };
    if is_dynamodb_stream(&args.stream) {
        let source =
            DynamoDbStreamsSource::new(aws_sdk_dynamodbstreams::Client::new(&config), &args.stream);
        let target = stream_target(&config, Service::DynamoDbStreams, &args.stream);
        tail(source, leases, printer, worker_config, &args, &target).await
    } else {
        let source = KinesisSource::new(aws_sdk_kinesis::Client::new(&config), &args.stream);
        let target = stream_target(&config, Service::Kinesis, &args.stream);
        tail(source, leases, printer, worker_config, &args, &target).await
    }
}

/// Where the stream's calls go, for one-line failures.
fn stream_target(config: &aws_config::SdkConfig, service: Service, stream: &str) -> Target {
    Target::new(config, service, "stream", stream).if_missing(
        "check --stream (a Kinesis stream name or a DynamoDB stream ARN), or run 'heatsink local bootstrap'",
    )
}

async fn tail<S: ShardSource, W: tokio::io::AsyncWrite + Unpin + Send + Sync + 'static>(
    source: S,
    leases: LeaseTable,
    printer: Printer<W>,
    config: WorkerConfig,
    args: &TailArgs,
    target: &Target,
) -> CmdResult {
    // Fail fast on a missing stream rather than retrying forever in the worker.
    source
        .list_shards()
        .await
        .map_err(|e| target.fail("list the shards of", &e))?;
    let mut worker = Worker::new(source, leases, printer, config);
    if args.emf {
        worker = worker.emit_emf(std::io::stderr());
    }
    let stats = worker.stats();
    let idle_exit = args.idle_exit;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = idle(stats, idle_exit) => {}
        }
    };
    worker.run(shutdown).await.map_err(|e| match e {
        StreamError::Abort(_) => target.fail("print the records of", &e),
        _ => target.fail("read", &e),
    })?;
    Ok(())
}

/// Completes once the worker has been idle for `limit` (never without a limit).
async fn idle(stats: WorkerStats, limit: Option<Duration>) {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    let started = now_ms();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let last = stats.last_record_ms().max(started);
        if now_ms().saturating_sub(last) >= limit_ms && stats.is_caught_up() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tail: TailArgs,
    }

    #[test]
    fn emf_is_opt_in() {
        let base = ["tail", "--stream", "s", "--app", "a"];
        let off = Cli::try_parse_from(base).expect("parse");
        assert!(!off.tail.emf);
        let on = Cli::try_parse_from(base.iter().chain(&["--emf"])).expect("parse");
        assert!(on.tail.emf);
    }

    #[test]
    fn a_record_line_shows_what_its_json_line_carries() {
        use heatsink::counter::Seq;
        use heatsink::stream::StreamRecord;
        let record = |data: &[u8], sub_seq| StreamRecord {
            seq: Seq::parse("49590338271490256608559692538361571095921575989136588898")
                .expect("a sequence number"),
            sub_seq,
            partition_key: "likes#p9".into(),
            data: data.to_vec().into(),
            undecodable: None,
        };
        let text = record(b"{\"post\":\"p9\"}\nnext", None).to_json("shardId-000000000001");
        let parsed: serde_json::Value =
            serde_json::from_str(&text.to_string()).expect("one JSON line parses");
        assert!(!text.to_string().contains('\n'));
        assert_eq!(
            record_line(&parsed),
            "shardId-000000000001 49590338271490256608559692538361571095921575989136588898 likes#p9 {\"post\":\"p9\"}\\nnext"
        );
        let binary = record(&[0xff, 0x00], Some(3)).to_json("s");
        assert_eq!(binary["data_encoding"], "base64");
        assert_eq!(binary["sub_seq"], 3);
        assert!(
            record_line(&binary).ends_with("/3 likes#p9 base64:/wA="),
            "{}",
            record_line(&binary)
        );
        // A hostile aggregate: both forms bounded, both say so.
        let hostile = StreamRecord {
            undecodable: Some(heatsink_core_kpl_error()),
            ..record(&vec![b'x'; 10_000], None)
        };
        let json = line(&hostile, "s");
        assert_eq!(
            (json["data_truncated"].as_bool(), json["data_len"].as_u64()),
            (Some(true), Some(10_000))
        );
        let human = record_line(&json);
        assert!(
            human.len() < UNDECODABLE_DATA_BYTES + 300,
            "{}",
            human.len()
        );
        assert!(human.ends_with("(first 4096 of 10000 bytes)"), "{human}");
        assert!(
            human.contains("(undecodable: aggregated record's MD5 trailer"),
            "{human}"
        );
    }

    fn heatsink_core_kpl_error() -> heatsink::kinesis::kpl::KplError {
        heatsink::kinesis::kpl::KplError::BadDigest {
            expected: "00".into(),
            found: "ff".into(),
        }
    }

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3 fortnights").is_err());
    }
}
