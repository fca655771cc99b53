//! Onset to mitigation: a key turns hot at 2,400 writes/s → a detector names it → the
//! hotkey-controller writes the directory → writers salt. Side by side in one run, trials
//! alternating between paths: the sampler path polled every 250 ms and every 1 s, and the
//! throttle-reason path (the writers' own key-range throttles, every attempt, no sampling)
//! polled every 250 ms and every 100 ms (directory cache age equal to the poll), with the time of
//! every step from the first hot write. The simulator's partitions bank `ONSET_BURST` seconds of
//! their ceiling (default 1, the simulator's default), so no throttle can come before the bank is
//! drained: at 2,400/s against 1,000 WCU/s with 1 s banked, about 710 ms after the onset.
//!
//! The Contributor Insights path cannot run locally (no emulator); its floor is arithmetic:
//! one-minute datapoints, published after the minute closes, and an alarm that needs at least
//! one datapoint over the line: 60–120 s before the controller is even invoked.
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink-testkit --bench onset` (env `ONSET_RATE`, `ONSET_TRIALS` override).
//! Without `AWS_ENDPOINT_URL_DYNAMODB` it prints a skip line and exits 0.

use std::sync::Arc;
use std::time::Duration;

use heatsink::detect::ThrottleWatch;
use heatsink::hot::ControllerConfig;
use heatsink::hot::{CachedDirectory, Controller, Directory};
use heatsink::schema::Table;
use heatsink_testkit::bench::{Stack, env_or};
use heatsink_testkit::onset::{self, Detection, Onset, OnsetReport};

/// The median and the worst of some milliseconds.
fn median_max(mut v: Vec<u64>) -> String {
    if v.is_empty() {
        return "never".into();
    }
    v.sort_unstable();
    format!("{} / {}", v[v.len() / 2], v[v.len() - 1])
}

#[tokio::main]
async fn main() {
    let Some(stack) = Stack::up("onset", &[Table::Counters, Table::Hotkeys]).await else {
        return;
    };
    let rate = env_or("ONSET_RATE", 2_400);
    let trials = env_or("ONSET_TRIALS", 5);
    let burst: f64 = std::env::var("ONSET_BURST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let schema = &stack.schema;
    let directory = Directory::from_schema(stack.direct.clone(), schema);
    println!(
        "onset: {rate} writes/s on one key through the simulator (16 partitions, 1,000 WCU/s each, {burst} s banked); sampler 1 in 10, 2 s window; throttle window 1 s, 3 throttles; {trials} trials each, paths alternating"
    );
    println!(
        "{:<30} {:>16} {:>16} {:>16} {:>7} {:>9} {:>10}",
        "path, poll = directory age",
        "detected ms",
        "directory ms",
        "salting ms",
        "S",
        "dir writes",
        "util after"
    );
    // (label, throttle path?, poll ms)
    let paths = [
        ("sampler, 250 ms", false, 250u64),
        ("throttle reasons, 250 ms", true, 250),
        ("sampler, 1 s", false, 1_000),
        ("throttle reasons, 100 ms", true, 100),
    ];
    let mut runs: Vec<Vec<OnsetReport>> = vec![Vec::new(); paths.len()];
    for trial in 0..trials {
        // Alternate the order each trial so no path always runs on a warmer machine.
        let order: Vec<usize> = if trial % 2 == 0 {
            (0..paths.len()).collect()
        } else {
            (0..paths.len()).rev().collect()
        };
        for i in order {
            let (label, throttles, poll_ms) = paths[i];
            let (sim, via_sim) = stack.simulator_with(16, burst).await;
            let poll = Duration::from_millis(poll_ms);
            let (detection, writers) = if throttles {
                let watch = ThrottleWatch::new(&[schema.table(Table::Counters)]);
                let conf = via_sim
                    .config()
                    .to_builder()
                    .interceptor(watch.clone())
                    .build();
                (
                    Detection::Throttles(watch),
                    aws_sdk_dynamodb::Client::from_conf(conf),
                )
            } else {
                (Detection::Sampler, via_sim)
            };
            let function = Controller::new(directory.clone(), ControllerConfig::new(vec![]));
            let cached = Arc::new(CachedDirectory::new(directory.clone(), poll));
            let run = Onset {
                table: schema.table_name(Table::Counters),
                key: format!("post-{i}-{trial}"),
                rate,
                duration: Duration::from_secs(4),
                poll,
                detection,
            };
            let report = onset::run(&run, &sim, &writers, &function, cached)
                .await
                .expect("onset run");
            if std::env::var_os("ONSET_VERBOSE").is_some() {
                eprintln!("{label}: {report:?}");
            }
            runs[i].push(report);
            sim.stop();
        }
    }
    for (i, (label, _, _)) in paths.iter().enumerate() {
        let runs = &runs[i];
        let col =
            |f: fn(&OnsetReport) -> Option<u64>| median_max(runs.iter().filter_map(f).collect());
        let salts: Vec<u16> = runs.iter().map(|r| r.salts).collect();
        let writes: Vec<usize> = runs.iter().map(|r| r.directory_writes).collect();
        let util = runs
            .iter()
            .map(|r| r.max_utilisation_after)
            .fold(0.0, f64::max);
        println!(
            "{:<30} {:>16} {:>16} {:>16} {:>7} {:>9} {:>9.0}%",
            label,
            col(|r| r.detected_ms),
            col(|r| r.directory_ms),
            col(|r| r.salting_ms),
            format!("{salts:?}"),
            format!("{writes:?}"),
            util * 100.0
        );
    }
    println!(
        "(median / worst of the trials; util after = busiest partition's WCU/s over its ceiling from the first whole second after salting, worst trial)"
    );
    stack.down().await;
}
