//! The detection scene (`heatsink-demo detect`): p9 turns hot under writers that follow the
//! hot-key directory, and the controller salts it acting on one signal at a time.
//!
//! - **throttle reasons** (`--detect throttles`): a [`ThrottleWatch`] on the writers' own
//!   client reads DynamoDB's `ThrottlingReasons` on every attempt; the sampler is off, and the
//!   controller's only signal is the key-range throttles the writers saw. It runs at every
//!   poll and as soon as the watch says a key reached its threshold.
//! - **sampler** (`--detect sampler`): the simulator's 1-in-10 sample of the requests, read as
//!   a router's published report would arrive.
//! - **no detection** (`--detect off`): the controller never acts; the baseline a spike meets.
//!
//! All three by default, one after the other in one run against the same simulator settings. Each
//! path writes its own hot key (`p9-<run>-<path>`), so each starts cold; the partitions bank
//! nothing (DynamoDB's per-partition ceiling is not burstable), so the first throttle comes
//! as soon as the key is over. Glue only: the loop itself is
//! [`heatsink_testkit::onset::run`], which the onset benchmark measures.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use heatsink::detect::{Ceilings, ThrottleWatch};
use heatsink::hot::{CachedDirectory, Controller, ControllerConfig, Directory};
use heatsink::schema::{self, DEFAULT_PREFIX, Schema, Table};
use heatsink_cli::cmd::{CmdResult, sdk_config};
use heatsink_sim::{SimConfig, Simulator};
use heatsink_testkit::onset::{self, Detection, Onset, OnsetReport};
use serde::Serialize;

/// Which signal the controller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    /// DynamoDB's throttle reasons, read by the writers' own client (sampler off).
    Throttles,
    /// The simulator's 1-in-10 request sample.
    Sampler,
    /// No detection: the writers never salt (the baseline).
    Off,
    /// Throttle reasons, the sampler, then no detection.
    All,
}

impl Path {
    /// The paths to run, in order.
    fn runs(self) -> &'static [Path] {
        match self {
            Path::Throttles => &[Path::Throttles],
            Path::Sampler => &[Path::Sampler],
            Path::Off => &[Path::Off],
            Path::All => &[Path::Throttles, Path::Sampler, Path::Off],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Path::Throttles => "throttle reasons (sampler off)",
            Path::Sampler => "sampler (1 in 10)",
            Path::Off => "no detection",
            Path::All => "all",
        }
    }
}

/// `heatsink-demo detect`: the closed loop from onset to salting, per detection path.
#[derive(Debug, Args)]
pub struct DetectDemoArgs {
    /// Resource name prefix (the `counters` and `hotkeys` tables `heatsink local bootstrap`
    /// created).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Writes per second on the hot key at full scale (2,400: the celebrity post; 1–10,000).
    #[arg(long, default_value_t = 2400, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: u32,
    /// Scale the rate and the partitions' ceilings by s (0.1 = 240 writes/s against 100 WCU/s
    /// partitions: the same ratio at a speed a local emulator sustains; 0.01–1).
    #[arg(long, default_value_t = 0.1, value_parser = heatsink_cli::cmd::scale)]
    scale: f64,
    /// Seconds of load per path (1–600).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: u64,
    /// How often the controller reads its signal, and the writers' directory cache age
    /// (e.g. 100ms, 1s).
    #[arg(long, default_value = "100ms", value_parser = heatsink_cli::cmd::parse_duration)]
    poll: Duration,
    /// The signal the controller acts on.
    #[arg(long, value_enum, default_value = "all")]
    detect: Path,
    /// Partitions the simulator gives the counters table (1–1,000; 16, as the onset
    /// benchmark: S sub-keys then rarely share a partition).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    partitions: u32,
    /// Print the reports as JSON.
    #[arg(long)]
    json: bool,
}

/// One path's run.
#[derive(Debug, Serialize)]
struct PathRun {
    path: Path,
    key: String,
    report: OnsetReport,
    /// Key-range throttles the watch counted (throttle path only).
    key_range_throttles: Option<u64>,
}

/// Runs the scene and prints one row per path; fails when a path never salted the key.
pub async fn detect_demo(a: DetectDemoArgs) -> CmdResult {
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").map_err(|_| {
        "the demo runs on the local stack: eval \"$(localstack/stack env)\" first (make demo does)"
    })?;
    let config = sdk_config().await;
    let direct = aws_sdk_dynamodb::Client::new(&config);
    let schema = Schema::new(a.prefix.clone());
    for table in [Table::Counters, Table::Hotkeys] {
        schema::ensure_table(&direct, &schema.table(table))
            .await
            .map_err(|e| heatsink_cli::cmd::local::schema_failure(&config, &e))?;
    }
    let rate = scaled(a.rate, a.scale);
    let (read, write) = (
        Ceilings::DYNAMODB_READ * a.scale,
        Ceilings::DYNAMODB_WRITE * a.scale,
    );
    let directory = Directory::from_schema(direct.clone(), &schema);
    let tag = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    if !a.json {
        eprintln!(
            "one key at {rate} writes/s through the simulator ({} partitions x {write:.0} WCU/s, nothing banked), {} s per path, controller poll and directory age {} ms",
            a.partitions,
            a.duration,
            a.poll.as_millis()
        );
    }
    let mut runs = vec![];
    for &path in a.detect.runs() {
        let mut sim_config = SimConfig::new(&upstream);
        sim_config.limits.partitions = a.partitions;
        sim_config.limits.write_ceiling = write;
        sim_config.limits.read_ceiling = read;
        sim_config.limits.burst_seconds = 0.0;
        let sim = Simulator::start(sim_config).await.map_err(|e| {
            heatsink_cli::cmd::fail::Failure::new(format!(
                "cannot start the partition simulator in front of {upstream}: {}: check AWS_ENDPOINT_URL_DYNAMODB",
                heatsink_cli::cmd::fail::chain(&e)
            ))
        })?;
        let via_sim = aws_sdk_dynamodb::config::Builder::from(&config).endpoint_url(sim.endpoint());
        let (detection, writers, watch) = match path {
            Path::Throttles => {
                let watch = ThrottleWatch::new(&[schema.table(Table::Counters)]);
                let client =
                    aws_sdk_dynamodb::Client::from_conf(via_sim.interceptor(watch.clone()).build());
                (Detection::Throttles(watch.clone()), client, Some(watch))
            }
            Path::Sampler => (
                Detection::Sampler,
                aws_sdk_dynamodb::Client::from_conf(via_sim.build()),
                None,
            ),
            _ => (
                Detection::Off,
                aws_sdk_dynamodb::Client::from_conf(via_sim.build()),
                None,
            ),
        };
        let mut controller = ControllerConfig::new(vec![]);
        controller.ceilings = Ceilings::new(Some(read), Some(write), Ceilings::DEFAULT_THRESHOLD)?;
        let function = Controller::new(directory.clone(), controller);
        let cached = Arc::new(CachedDirectory::new(directory.clone(), a.poll));
        let key = format!(
            "p9-{tag}-{}",
            match path {
                Path::Sampler => "s",
                Path::Off => "o",
                _ => "t",
            }
        );
        let run = Onset {
            table: schema.table_name(Table::Counters),
            key: key.clone(),
            rate,
            duration: Duration::from_secs(a.duration),
            poll: a.poll,
            detection,
        };
        let report = onset::run(&run, &sim, &writers, &function, cached).await?;
        sim.stop();
        runs.push(PathRun {
            path,
            key,
            report,
            key_range_throttles: watch.map(|w| w.tally().key_range),
        });
    }
    if a.json {
        println!("{}", serde_json::to_string(&runs)?);
    } else {
        print_table(&runs);
    }
    match runs
        .iter()
        .find(|r| r.path != Path::Off && r.report.salting_ms.is_none())
    {
        Some(r) => Err(format!(
            "{}: the key was never salted within {} s: run longer (--duration) or at a higher --rate",
            r.path.label(),
            a.duration
        )
        .into()),
        None => Ok(()),
    }
}

/// `rate × scale`, at least 1.
fn scaled(rate: u32, scale: f64) -> u32 {
    ((f64::from(rate) * scale).round() as u32).max(1)
}

fn print_table(runs: &[PathRun]) {
    use heatsink_cli::cmd::table::{Align, Grid};
    let ms = |v: Option<u64>| v.map_or_else(|| "never".to_owned(), |v| format!("{v} ms"));
    let mut grid = Grid::new(&[
        ("signal", Align::Left),
        ("key named", Align::Right),
        ("directory written", Align::Right),
        ("first salted write", Align::Right),
        ("S", Align::Right),
        ("throttled before / after", Align::Right),
        ("writes failed / sent", Align::Right),
        ("util. after", Align::Right),
    ]);
    for r in runs {
        grid.row([
            r.path.label().to_owned(),
            ms(r.report.detected_ms),
            ms(r.report.directory_ms),
            ms(r.report.salting_ms),
            r.report.salts.to_string(),
            format!(
                "{} / {}",
                r.report.throttled_before, r.report.throttled_after
            ),
            format!("{} / {}", r.report.load.failed, r.report.load.sent),
            format!("{:.0}%", r.report.max_utilisation_after * 100.0),
        ]);
    }
    println!();
    grid.print();
    println!(
        "(times from the first hot write; throttled before = requests refused up to the controller poll that first saw a salted write; util. after = the busiest partition's writes over its ceiling from the first whole second after salting)"
    );
    if let Some(t) = runs.iter().find_map(|r| r.key_range_throttles) {
        println!(
            "throttle reasons: the writers' client saw {t} key-range throttles (TableWriteKeyRangeThroughputExceeded); the controller never read the sampler"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_runs_the_throttle_path_the_sampler_then_none() {
        assert_eq!(
            Path::All.runs(),
            [Path::Throttles, Path::Sampler, Path::Off]
        );
        assert_eq!(Path::Sampler.runs(), [Path::Sampler]);
        assert_eq!(scaled(2_400, 0.1), 240);
        assert_eq!(scaled(1, 0.01), 1, "never a zero rate");
    }
}
