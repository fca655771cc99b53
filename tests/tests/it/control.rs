//! The hotkey-controller function on a real emulator: a sampler report becomes a directory
//! entry, and in the closed loop a key that turns hot under the simulator is named, salted by
//! the controller and spread by the writers, with one directory write and no flapping.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use heatsink::control::{ControllerConfig, ControllerFunction, SAMPLER_SOURCE};
use heatsink::core::detect::Ceilings;
use heatsink::core::hot::{ControlConfig, Mode};
use heatsink::directory::{CachedDirectory, Controller, Directory};
use heatsink::schema::Table;
use heatsink::sim::onset::{self, Onset};
use heatsink::sim::{Limits, SimConfig, Simulator};
use heatsink_integration::{Fixture, fixture};
use serde_json::json;

/// The controller function over the fixture's directory, comparing rates with `ceilings`.
fn function(fx: &Fixture, ceilings: Ceilings) -> ControllerFunction {
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let mut config = ControllerConfig::new(vec![]);
    config.ceilings = ceilings;
    ControllerFunction::new(
        Controller::new(directory, ControlConfig::default()),
        None,
        config,
    )
}

#[tokio::test]
async fn a_sampler_report_event_salts_the_write_hot_key_and_caches_the_read_hot_one() {
    let fx = fixture!("a_sampler_report_event_salts_the_write_hot_key_and_caches_the_read_hot_one");
    fx.table(Table::Hotkeys).await;
    let f = function(&fx, Ceilings::dynamodb());
    let hot = |key: &str, kind: &str, estimate: f64| {
        json!({"partition": "t/p1", "key": key, "kind": kind, "estimate": estimate,
               "lower_bound": estimate, "error_bound": 0.0, "share_of_ceiling": 1.0,
               "share_of_partition": 1.0, "certain": true, "sampled": {"count": 1, "error": 0}})
    };
    let event = json!({"source": SAMPLER_SOURCE, "detail-type": "Hot keys sampled", "detail": {
        "partitions": [],
        "hot": [hot("p9", "write", 2_400.0), hot("p1", "read", 9_000.0), hot("p2", "write", 300.0)]
    }});
    let outcome = f.handle(&event, SystemTime::now()).await.expect("handled");
    assert_eq!(outcome.trigger, "sampler");
    assert_eq!(outcome.signals, 3);
    assert_eq!(outcome.hot_keys, 2, "p2 at 30% is left alone: {outcome:?}");
    let dir = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let entries = dir.list().await.expect("list");
    let modes: Vec<_> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.mode, e.salts.current()))
        .collect();
    assert_eq!(modes, [("p1", Mode::Cache, 1), ("p9", Mode::Salt, 3)]);
    // The same report again changes nothing (a retried invocation never flaps the directory).
    let again = f.handle(&event, SystemTime::now()).await.expect("handled");
    assert!(again.changes.is_empty(), "{again:?}");
    // A malformed event is a typed error, and the directory is untouched.
    let bad = json!({"source": SAMPLER_SOURCE, "detail": {"hot": "p9"}});
    assert!(f.handle(&bad, SystemTime::now()).await.is_err());
    assert_eq!(dir.list().await.expect("list"), entries);
}

#[tokio::test]
async fn a_key_that_turns_hot_is_named_salted_and_spread_in_the_closed_loop() {
    let fx = fixture!("a_key_that_turns_hot_is_named_salted_and_spread_in_the_closed_loop");
    fx.table(Table::Hotkeys).await;
    fx.table(Table::Counters).await;
    // Scaled down 20× so every emulator keeps up on a busy machine: 50 WCU/s partitions and
    // 120 writes/s on p9 (the seed's 2,400 against 1,000).
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("fixture checked it");
    let mut config = SimConfig::new(&upstream);
    config.limits = Limits {
        partitions: 8,
        write_ceiling: 50.0,
        read_ceiling: 150.0,
        burst_seconds: 0.5,
    };
    let sim = Simulator::start(config).await.expect("simulator");
    let via_sim = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(sim.endpoint())
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build(),
    );
    let ceilings = Ceilings::new(Some(150.0), Some(50.0), 0.1).expect("ceilings");
    let f = function(&fx, ceilings);
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let cached = Arc::new(CachedDirectory::new(
        directory.clone(),
        Duration::from_millis(250),
    ));
    let run = Onset {
        table: fx.schema.table_name(Table::Counters),
        key: "p9".into(),
        rate: 120,
        duration: Duration::from_secs(5),
        poll: Duration::from_millis(250),
    };
    let report = onset::run(&run, &sim, &via_sim, &f, cached)
        .await
        .expect("onset");
    eprintln!("onset: {report:?}");
    let detected = report.detected_ms.expect("the sampler named p9");
    let written = report
        .directory_ms
        .expect("the controller wrote the directory");
    let salting = report.salting_ms.expect("writers salted");
    // Writers may see the entry before the controller's run returns (it re-reads the directory
    // after writing), so only "named before anything changed" is ordered.
    assert!(detected <= written && detected <= salting, "{report:?}");
    // 120/s at 80% of 50 WCU/s needs S = 3; an early, partial-window estimate may start at 2
    // and grow once. Salted sub-keys still count as p9, so the key never looks calm.
    assert!(report.salts >= 3, "{report:?}");
    assert!(
        report.directory_writes <= 2,
        "create, at most one growth: {report:?}"
    );
    let p9 = directory.get("p9").await.expect("get").expect("entry");
    assert_eq!((p9.mode, p9.calm_since), (Mode::Salt, None));
    // What `heatsink top --from-sampler` reads: the salted sub-keys, over HTTP.
    let served = heatsink::sim::sampler::fetch_report(&sim.endpoint())
        .await
        .expect("report");
    assert!(
        served.hot.iter().any(|h| h.key.starts_with("p9#")),
        "{served:?}"
    );
    assert!(p9.reason.contains("write-hot"), "{}", p9.reason);
}
