//! `heatsink sim`: run the partition simulator in front of a DynamoDB endpoint.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use heatsink::detect::{EventBridgeSink, Publisher};
use heatsink_sim::{Limits, SimConfig, Simulator};

use super::fail::{self, Failure, Service, Target};
use super::{CmdResult, burst_seconds, positive_rate, sdk_config};

/// Most partitions per table the simulator models (DynamoDB's own split limit is far above what
/// one local proxy can usefully show).
pub const MAX_PARTITIONS: i64 = 1_000;

/// Arguments of `heatsink sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// The DynamoDB endpoint to forward to.
    #[arg(long, env = "AWS_ENDPOINT_URL_DYNAMODB")]
    upstream: String,
    /// Where to listen (loopback only; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8100")]
    listen: SocketAddr,
    /// Partitions per table and per index (1–1,000).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=MAX_PARTITIONS))]
    partitions: u32,
    /// Write ceiling per partition, WCU/s (above 0, at most 1e9).
    #[arg(long, default_value_t = 1000.0, value_parser = positive_rate)]
    write_ceiling: f64,
    /// Read ceiling per partition, RCU/s (above 0, at most 1e9).
    #[arg(long, default_value_t = 3000.0, value_parser = positive_rate)]
    read_ceiling: f64,
    /// Burst a partition may bank while idle, in seconds of its ceiling (0–3,600).
    #[arg(long, default_value_t = 1.0, value_parser = burst_seconds)]
    burst_seconds: f64,
    /// The hot-key sampler at /_sim/hot records 1 item request in N (1–1,000,000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    sample_one_in: u32,
    /// Publish the sampler's report to EventBridge every SECS seconds while it names hot keys
    /// (source `heatsink.sampler`; the stacks route it to the hotkey-controller; 1–86,400).
    #[arg(long, value_name = "SECS", requires = "event_bus", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    publish_every: Option<u64>,
    /// The event bus to publish on (name or ARN): the stack's control bus, `<prefix>control`
    /// (`heatsink-control` by default); required with --publish-every, since the stacks route
    /// reports from that bus only.
    #[arg(long, requires = "publish_every")]
    event_bus: Option<String>,
    /// Print the events (listening, published, stopped) as JSON lines on stdout instead of
    /// lines on stderr.
    #[arg(long)]
    json: bool,
}

/// One thing the simulator reports while it runs.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// It serves at `endpoint`.
    Listening {
        endpoint: String,
        upstream: String,
        partitions: u32,
        write_ceiling: f64,
        read_ceiling: f64,
    },
    /// It publishes hot-key reports to `event_bus`.
    Publishing { event_bus: String, every_s: u64 },
    /// A report went out.
    Published { keys: usize, dropped_keys: usize },
    /// A publish failed (retried at the next tick); the line says what, where and what next.
    PublishFailed { error: String },
    /// Ctrl-C: the final statistics.
    Stopped { requests: u64, throttled: u64 },
}

impl Event {
    /// The human line (on stderr).
    fn line(&self) -> String {
        match self {
            Self::Listening {
                endpoint,
                upstream,
                partitions,
                write_ceiling,
                read_ceiling,
            } => format!(
                "heatsink sim: {endpoint} -> {upstream} ({partitions} partitions/table, {write_ceiling} WCU/s and {read_ceiling} RCU/s each); stats at {endpoint}/_sim/stats, hot keys at {endpoint}/_sim/hot; Ctrl-C stops"
            ),
            Self::Publishing { event_bus, every_s } => format!(
                "heatsink sim: publishing hot-key reports to EventBridge bus {event_bus} at most every {every_s} s"
            ),
            Self::Published { keys, dropped_keys } => format!(
                "heatsink sim: published {keys} hot key(s){}",
                if *dropped_keys > 0 {
                    format!(" ({dropped_keys} colder ones left out to fit one event)")
                } else {
                    String::new()
                }
            ),
            Self::PublishFailed { error } => format!("heatsink sim: {error} (retrying in 1 s)"),
            Self::Stopped {
                requests,
                throttled,
            } => format!("heatsink sim: {requests} requests, {throttled} throttled"),
        }
    }

    /// The JSON line (`--json`, on stdout): `{"event": NAME, …the fields}`.
    fn json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Self::Listening {
                endpoint,
                upstream,
                partitions,
                write_ceiling,
                read_ceiling,
            } => json!({"event": "listening", "endpoint": endpoint, "upstream": upstream,
                "partitions": partitions, "write_ceiling": write_ceiling, "read_ceiling": read_ceiling}),
            Self::Publishing { event_bus, every_s } => {
                json!({"event": "publishing", "event_bus": event_bus, "every_s": every_s})
            }
            Self::Published { keys, dropped_keys } => {
                json!({"event": "published", "keys": keys, "dropped_keys": dropped_keys})
            }
            Self::PublishFailed { error } => json!({"event": "publish_failed", "error": error}),
            Self::Stopped {
                requests,
                throttled,
            } => json!({"event": "stopped", "requests": requests, "throttled": throttled}),
        }
    }

    /// Reports the event: a JSON line on stdout with `--json`, else a line on stderr.
    fn emit(&self, json: bool) {
        if json {
            super::output::print_json_line(&self.json());
        } else {
            eprintln!("{}", self.line());
        }
    }
}

/// Serves until Ctrl-C, then prints the final statistics.
pub async fn run(args: SimArgs) -> CmdResult {
    if !args.listen.ip().is_loopback() {
        return Err(format!("--listen {} is not a loopback address", args.listen).into());
    }
    let mut config = SimConfig {
        upstream: args.upstream.clone(),
        listen: args.listen,
        limits: Limits {
            partitions: args.partitions,
            write_ceiling: args.write_ceiling,
            read_ceiling: args.read_ceiling,
            burst_seconds: args.burst_seconds,
        },
        ..SimConfig::new(&args.upstream)
    };
    config.sampler.sample_one_in = args.sample_one_in;
    let sim = Simulator::start(config).await.map_err(|e| {
        Failure::new(format!(
            "cannot start the simulator in front of {}: {}: check --upstream and --listen (port 0 picks a free one)",
            args.upstream,
            fail::chain(&e)
        ))
    })?;
    Event::Listening {
        endpoint: sim.endpoint().to_string(),
        upstream: args.upstream.clone(),
        partitions: args.partitions,
        write_ceiling: args.write_ceiling,
        read_ceiling: args.read_ceiling,
    }
    .emit(args.json);
    match (args.publish_every, args.event_bus) {
        (Some(secs), Some(bus)) => publish_until_ctrl_c(&sim, secs, bus, args.json).await?,
        // clap requires --event-bus with --publish-every, so this is the no-publishing case.
        _ => tokio::signal::ctrl_c().await?,
    }
    let stats = sim.stats();
    Event::Stopped {
        requests: stats.requests,
        throttled: stats.throttled(),
    }
    .emit(args.json);
    sim.stop();
    Ok(())
}

/// Every second, offers the sampler's report to a publisher with a `secs`-second cadence.
async fn publish_until_ctrl_c(sim: &Simulator, secs: u64, bus: String, json: bool) -> CmdResult {
    let config = sdk_config().await;
    let client = aws_sdk_eventbridge::Client::new(&config);
    let target = Target::new(&config, Service::EventBridge, "event bus", &bus)
        .if_missing("check --event-bus");
    let every = Duration::from_secs(secs);
    Event::Publishing {
        event_bus: bus.clone(),
        every_s: secs,
    }
    .emit(json);
    let mut publisher = Publisher::new(EventBridgeSink::new(client, bus), every);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            stop = &mut ctrl_c => return Ok(stop?),
            _ = tick.tick() => {}
        }
        let report = sim.hot();
        match publisher.tick(&report, sim.elapsed()).await {
            Ok(Some(p)) => Event::Published {
                keys: p.keys,
                dropped_keys: p.dropped_keys,
            }
            .emit(json),
            Ok(None) => {}
            // A failed publish is retried at the next tick; the proxy keeps serving.
            Err(e) => Event::PublishFailed {
                error: target.fail("publish the hot-key report to", &e).to_string(),
            }
            .emit(json),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn an_event_bus_needs_a_publish_cadence_and_publishing_needs_a_named_bus() {
        let up = ["sim", "--upstream", "http://127.0.0.1:8001"];
        assert!(Cli::try_parse_from(up.iter().chain(&["--event-bus", "b"])).is_err());
        let no_bus = Cli::try_parse_from(up.iter().chain(&["--publish-every", "2"]))
            .expect_err("no default bus: the stacks route reports from their control bus only");
        assert_eq!(
            no_bus.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        let cli =
            Cli::try_parse_from(
                up.iter()
                    .chain(&["--publish-every", "2", "--event-bus", "b"]),
            )
            .expect("parse");
        assert_eq!(cli.sim.publish_every, Some(2));
        assert_eq!(cli.sim.event_bus.as_deref(), Some("b"));
    }

    #[test]
    fn each_event_line_and_json_line_carry_the_same_facts() {
        let events = [
            Event::Listening {
                endpoint: "http://127.0.0.1:8100".into(),
                upstream: "http://127.0.0.1:5000".into(),
                partitions: 4,
                write_ceiling: 1000.0,
                read_ceiling: 3000.0,
            },
            Event::Publishing {
                event_bus: "heatsink-control".into(),
                every_s: 2,
            },
            Event::Published {
                keys: 3,
                dropped_keys: 1,
            },
            Event::PublishFailed {
                error: "cannot reach EventBridge".into(),
            },
            Event::Stopped {
                requests: 1200,
                throttled: 17,
            },
        ];
        for event in &events {
            let text = event.json().to_string();
            assert!(!text.contains('\n'), "one JSON line: {text}");
            let v: serde_json::Value = serde_json::from_str(&text).expect("parses");
            let line = event.line();
            let fields = v.as_object().expect("an object");
            assert!(fields["event"].is_string());
            for (name, value) in fields.iter().filter(|(k, _)| *k != "event") {
                // Numbers as Rust prints them (3000.0 as `3000`).
                let shown = match (value.as_str(), value.as_f64()) {
                    (Some(text), _) => text.to_owned(),
                    (None, Some(n)) => n.to_string(),
                    _ => value.to_string(),
                };
                assert!(line.contains(&shown), "{name} = {shown} not in {line:?}");
            }
        }
    }

    #[test]
    fn numbers_out_of_range_are_clap_errors() {
        let up = ["sim", "--upstream", "http://127.0.0.1:8001"];
        for bad in [
            &["--partitions", "0"][..],
            &["--partitions", "4294967295"],
            &["--write-ceiling", "0"],
            &["--read-ceiling", "NaN"],
            &["--burst-seconds=-1"],
            &["--sample-one-in", "0"],
            &["--publish-every", "0"],
            &["--publish-every", "18446744073709551615"],
        ] {
            let err = Cli::try_parse_from(up.iter().chain(bad)).expect_err(&bad.join(" "));
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad:?}"
            );
        }
    }
}
