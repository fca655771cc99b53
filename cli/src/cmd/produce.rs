//! `heatsink produce`: put records on a Kinesis stream through `heatsink::kinesis::Producer`.
//!
//! Records come from stdin as JSON lines `{"partition_key": "...", "data": "..."}` (data as
//! UTF-8 text), or are generated with `--keys N --rate R --duration D [--zipf X]`. At the end
//! one line sums up what happened: records, requests, retried entries, aggregated records,
//! throttles, failed, salted, seconds (with `--json`, a JSON document with those fields, as
//! `heatsink::kinesis::ProducerReport` names them).

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use heatsink::hot::{CachedDirectory, Directory};
use heatsink::kinesis::{Producer, ProducerConfig, ProducerError, ProducerReport, Salting};
use heatsink::schema::{DEFAULT_PREFIX, Schema};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Zipf};
use serde::Deserialize;

use super::fail::{Service, Target};
use super::output::Output;
use super::{CmdResult, parse_duration, positive_rate, sdk_config};

/// Arguments of `heatsink produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Kinesis stream name.
    #[arg(long)]
    stream: String,
    /// Pack records bound for one shard into KPL aggregates.
    #[arg(long)]
    aggregate: bool,
    /// Salt hot partition keys from the hot-key directory (`<prefix>hotkeys`).
    #[arg(long)]
    salted: bool,
    /// Resource name prefix (the hot-key directory is `<prefix>hotkeys`).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Generate load over this many keys (`key-0` … `key-N-1`) instead of reading stdin.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    keys: Option<u32>,
    /// Generated records per second.
    #[arg(long, default_value = "1000", value_parser = positive_rate, requires = "keys")]
    rate: f64,
    /// How long to generate.
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "keys")]
    duration: Duration,
    /// Zipf exponent of the key popularity (0 = uniform; 1.1 = a few hot keys).
    #[arg(long, default_value = "0", value_parser = zipf_exponent, requires = "keys")]
    zipf: f64,
    /// Seed of the generated keys.
    #[arg(long, default_value = "1", requires = "keys")]
    seed: u64,
    #[command(flatten)]
    output: Output,
}

fn zipf_exponent(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if v.is_finite() && (0.0..=10.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{text} is outside [0, 10]"))
    }
}

/// One stdin line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    partition_key: String,
    data: String,
}

/// Puts the records and prints the summary line.
pub async fn run(args: ProduceArgs) -> CmdResult {
    let config = sdk_config().await;
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let salting = if args.salted {
        let ddb = aws_sdk_dynamodb::Client::new(&config);
        let dir = Directory::from_schema(ddb, &Schema::new(&args.prefix));
        Salting::Directory(Arc::new(CachedDirectory::new(dir, Duration::from_secs(5))))
    } else {
        Salting::Off
    };
    let producer_config = ProducerConfig {
        aggregate: args.aggregate,
        salting,
        ..ProducerConfig::default()
    };
    let target = || Target::new(&config, Service::Kinesis, "stream", &args.stream);
    let producer = Producer::start(kinesis, &args.stream, producer_config)
        .await
        .map_err(|e| {
            target()
                .if_missing("check --stream, or run 'heatsink local bootstrap'")
                .fail("start a producer on", &e)
        })?;
    let started = Instant::now();
    let fed = match args.keys {
        Some(keys) => generate(&producer, keys, &args).await,
        None => feed_stdin(&producer).await,
    };
    let print = |report: &ProducerReport| {
        let elapsed = started.elapsed();
        args.output.report(
            || summary(report, elapsed),
            || vec![summary_line(report, elapsed)],
        )
    };
    let report = match producer.shutdown().await {
        Ok(report) => report,
        Err(ProducerError::Put { source, report }) => {
            print(&report)?;
            return Err(target().fail("put records on", &source).into());
        }
        Err(e) => return Err(target().fail("flush the producer of", &e).into()),
    };
    print(&report)?;
    // A refused send is the producer's (its stream, its endpoint); a bad stdin line names itself.
    fed.map_err(|e| -> Box<dyn std::error::Error + Send + Sync> {
        if e.is::<ProducerError>() {
            Box::new(target().fail("put records on", &*e))
        } else {
            e
        }
    })?;
    if report.failed > 0 {
        return Err(format!(
            "{} records were not written to {} after every retry; re-run them (the summary counts them as failed)",
            report.failed, args.stream
        )
        .into());
    }
    Ok(())
}

/// The summary's human form.
pub fn summary_line(r: &ProducerReport, elapsed: Duration) -> String {
    format!(
        "{} records in {} requests in {:.1} s: {} retried entries, {} aggregated records, {} throttles, {} failed, {} salted",
        r.records,
        r.requests,
        elapsed.as_secs_f64(),
        r.retried_entries,
        r.aggregated_records,
        r.throttles,
        r.failed,
        r.salted
    )
}

/// The JSON summary (`--json`).
pub fn summary(r: &ProducerReport, elapsed: Duration) -> serde_json::Value {
    serde_json::json!({
        "records": r.records,
        "requests": r.requests,
        "retried_entries": r.retried_entries,
        "aggregated_records": r.aggregated_records,
        "throttles": r.throttles,
        "failed": r.failed,
        "salted": r.salted,
        "seconds": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
    })
}

/// Sends stdin's JSON lines; a bad line stops the feed (what came before is still flushed).
async fn feed_stdin(producer: &Producer) -> CmdResult {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Line, String>>(1_024);
    // Blocking stdin reads on their own thread, handed over through a bounded channel.
    let reader = std::thread::spawn(move || {
        for (n, line) in std::io::stdin().lock().lines().enumerate() {
            let parsed = match line {
                Ok(l) if l.trim().is_empty() => continue,
                Ok(l) => serde_json::from_str::<Line>(&l).map_err(|e| {
                    format!(
                        "stdin line {}: {e}; each line must be {{\"partition_key\": \"…\", \"data\": \"…\"}}",
                        n + 1
                    )
                }),
                Err(e) => Err(format!("reading stdin line {}: {e}", n + 1)),
            };
            let stop = parsed.is_err();
            if tx.blocking_send(parsed).is_err() || stop {
                break;
            }
        }
    });
    let mut result: CmdResult = Ok(());
    while let Some(line) = rx.recv().await {
        match line {
            Ok(l) => {
                if let Err(e) = producer.send(l.partition_key, l.data.into_bytes()).await {
                    result = Err(e.into());
                    break;
                }
            }
            Err(e) => {
                result = Err(e.into());
                break;
            }
        }
    }
    drop(rx);
    let _ = reader.join();
    result
}

/// Sends `rate` records per second for `duration`, keys drawn from Zipf(`zipf`) over `keys`.
async fn generate(producer: &Producer, keys: u32, args: &ProduceArgs) -> CmdResult {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let zipf = Zipf::new(f64::from(keys), args.zipf).map_err(|e| format!("--zipf: {e}"))?;
    let tick = Duration::from_millis(10);
    let per_tick = args.rate * tick.as_secs_f64();
    let start = tokio::time::Instant::now();
    let mut owed = 0.0;
    let mut sent: u64 = 0;
    let mut interval = tokio::time::interval(tick);
    while start.elapsed() < args.duration {
        interval.tick().await;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            // Zipf samples ranks 1..=keys as floats.
            let rank = zipf.sample(&mut rng) as u64;
            let data = format!("{{\"n\":{sent},\"key\":{rank}}}");
            producer
                .send(format!("key-{}", rank.saturating_sub(1)), data.into_bytes())
                .await?;
            sent += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_has_the_documented_fields() {
        let r = ProducerReport {
            records: 10,
            requests: 2,
            retried_entries: 3,
            aggregated_records: 1,
            throttles: 4,
            failed: 5,
            salted: 6,
            ..ProducerReport::default()
        };
        let s = summary(&r, Duration::from_millis(1500));
        assert_eq!(s["records"], 10);
        assert_eq!(s["requests"], 2);
        assert_eq!(s["retried_entries"], 3);
        assert_eq!(s["aggregated_records"], 1);
        assert_eq!(s["throttles"], 4);
        assert_eq!(s["seconds"], 1.5);
        assert!(!s.to_string().contains('\n'));
        let parsed: serde_json::Value = serde_json::from_str(&s.to_string()).expect("parses");
        let line = summary_line(&r, Duration::from_millis(1500));
        assert_eq!(
            line,
            "10 records in 2 requests in 1.5 s: 3 retried entries, 1 aggregated records, 4 throttles, 5 failed, 6 salted"
        );
        for field in [
            "records",
            "requests",
            "retried_entries",
            "aggregated_records",
            "throttles",
            "failed",
            "salted",
        ] {
            let shown = parsed[field].to_string();
            assert!(line.contains(&shown), "{field} = {shown} not in {line}");
        }
    }

    #[test]
    fn zipf_exponents_are_bounded() {
        assert!(zipf_exponent("1.1").is_ok());
        for bad in ["-1", "NaN", "11", "x"] {
            assert!(zipf_exponent(bad).is_err(), "{bad}");
        }
    }
}
