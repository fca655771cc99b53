//! Onset to mitigation: a key turns hot at 2,400 writes/s → the sampler names it → the
//! hotkey-controller writes the directory → writers salt. Side by side in one run: the sampler
//! path polled every 250 ms and every 1 s (directory cache age equal to the poll), over several
//! trials each, with the time of every step from the first hot write.
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

use heatsink::hot::ControllerConfig;
use heatsink::hot::{CachedDirectory, Controller, Directory};
use heatsink::schema::Table;
use heatsink_testkit::bench::{Stack, env_or};
use heatsink_testkit::onset::{self, Onset, OnsetReport};

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
    let schema = &stack.schema;
    let directory = Directory::from_schema(stack.direct.clone(), schema);
    println!(
        "onset: {rate} writes/s on one key through the simulator (16 partitions, 1,000 WCU/s each); controller on the sampler report (1 in 10 sampled, 2 s window); {trials} trials each"
    );
    println!(
        "{:<22} {:>16} {:>16} {:>16} {:>7} {:>9} {:>10}",
        "poll = directory age",
        "detected ms",
        "directory ms",
        "salting ms",
        "S",
        "dir writes",
        "util after"
    );
    for poll_ms in [250u64, 1_000] {
        let mut runs: Vec<OnsetReport> = Vec::new();
        for trial in 0..trials {
            let (sim, via_sim) = stack.simulator(16).await;
            let poll = Duration::from_millis(poll_ms);
            let function = Controller::new(directory.clone(), ControllerConfig::new(vec![]));
            let cached = Arc::new(CachedDirectory::new(directory.clone(), poll));
            let run = Onset {
                table: schema.table_name(Table::Counters),
                key: format!("post-{poll_ms}-{trial}"),
                rate,
                duration: Duration::from_secs(4),
                poll,
            };
            let report = onset::run(&run, &sim, &via_sim, &function, cached)
                .await
                .expect("onset run");
            if std::env::var_os("ONSET_VERBOSE").is_some() {
                eprintln!("{report:?}\n{:?}", sim.hot().hot.first());
            }
            runs.push(report);
            sim.stop();
        }
        let col =
            |f: fn(&OnsetReport) -> Option<u64>| median_max(runs.iter().filter_map(f).collect());
        let salts: Vec<u16> = runs.iter().map(|r| r.salts).collect();
        let writes: Vec<usize> = runs.iter().map(|r| r.directory_writes).collect();
        let util = runs
            .iter()
            .map(|r| r.max_utilisation_after)
            .fold(0.0, f64::max);
        println!(
            "{:<22} {:>16} {:>16} {:>16} {:>7} {:>9} {:>9.0}%",
            format!("{poll_ms} ms"),
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
