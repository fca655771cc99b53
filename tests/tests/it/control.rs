//! The hotkey-controller function on a real emulator: a sampler report becomes a directory
//! entry, and in the closed loop a key that turns hot under the simulator is named, salted by
//! the controller and spread by the writers, with one directory write and no flapping.

use heatsink_integration::PhotoFixture;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use heatsink::detect::Ceilings;
use heatsink::detect::ThrottleWatch;
use heatsink::detect::{SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE};
use heatsink::hot::ControllerConfig;
use heatsink::hot::Mode;
use heatsink::hot::{CachedDirectory, Controller, Directory};
use heatsink_photo_app::schema::Table;
use heatsink_sim::{Limits, SimConfig, Simulator};
use heatsink_testkit::onset::{self, Detection, Onset};
use heatsink_testkit::{Fixture, fixture, sampled_hot_key};
use serde_json::json;

/// The controller function over the fixture's directory, comparing rates with `ceilings`.
fn function(fx: &Fixture, ceilings: Ceilings) -> Controller {
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let mut config = ControllerConfig::new(vec![]);
    config.ceilings = ceilings;
    Controller::new(directory, config)
}

#[tokio::test]
async fn a_sampler_report_event_salts_the_write_hot_key_and_caches_the_read_hot_one() {
    let fx = fixture!("a_sampler_report_event_salts_the_write_hot_key_and_caches_the_read_hot_one");
    fx.photo_table(Table::Hotkeys).await;
    let f = function(&fx, Ceilings::dynamodb());
    let event = json!({"source": SAMPLER_SOURCE, "detail-type": SAMPLER_DETAIL_TYPE, "detail": {
        "partitions": [],
        "hot": [
            sampled_hot_key("p9", "write", 2_400.0),
            sampled_hot_key("p1", "read", 9_000.0),
            sampled_hot_key("p2", "write", 300.0),
        ]
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

/// The simulator of the closed-loop tests: 8 partitions of 50 WCU/s (150 RCU/s), 0.5 s banked.
async fn scaled_sim() -> Simulator {
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("fixture checked it");
    let mut config = SimConfig::new(&upstream);
    config.limits = Limits {
        partitions: 8,
        write_ceiling: 50.0,
        read_ceiling: 150.0,
        burst_seconds: 0.5,
    };
    Simulator::start(config).await.expect("simulator")
}

#[tokio::test]
async fn a_key_that_turns_hot_is_named_salted_and_spread_in_the_closed_loop() {
    let fx = fixture!("a_key_that_turns_hot_is_named_salted_and_spread_in_the_closed_loop");
    fx.photo_table(Table::Hotkeys).await;
    fx.photo_table(Table::Counters).await;
    // Scaled down 20× so every emulator keeps up on a busy machine: 50 WCU/s partitions and
    // 120 writes/s on p9 (the celebrity post's 2,400 against 1,000; docs/hot-keys.md).
    let sim = scaled_sim().await;
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
        table: fx.photo().table_name(Table::Counters),
        key: "p9".into(),
        rate: 120,
        duration: Duration::from_secs(5),
        poll: Duration::from_millis(250),
        detection: Detection::Sampler,
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
    // 120/s at 80% of 50 WCU/s needs S = 3. Early, partial-window estimates (1 in 10 of ~120/s
    // sampled) can start low and S grows as they settle: every directory write must be a growth
    // (the epoch counts them), never a calm mark or a removal, since salted sub-keys still
    // count as p9.
    assert!(report.salts >= 3, "{report:?}");
    let p9 = directory.get("p9").await.expect("get").expect("entry");
    assert_eq!((p9.mode, p9.calm_since), (Mode::Salt, None), "{report:?}");
    assert_eq!(
        p9.epoch, report.directory_writes as u64,
        "only this run wrote p9"
    );
    assert_eq!(p9.salts.current(), report.salts);
    assert!(
        report.directory_writes <= 4,
        "S settles in a few steps: {report:?}"
    );
    // What `heatsink top --from-sampler` reads: the salted sub-keys, over HTTP.
    let served = heatsink_sim::sampler::fetch_report(&sim.endpoint())
        .await
        .expect("report");
    assert!(
        served.hot.iter().any(|h| h.key.starts_with("p9#")),
        "{served:?}"
    );
    assert!(p9.reason.contains("write-hot"), "{}", p9.reason);
}

#[tokio::test]
async fn a_key_is_salted_from_throttle_reasons_alone_with_the_sampler_off() {
    let fx = fixture!("a_key_is_salted_from_throttle_reasons_alone_with_the_sampler_off");
    fx.photo_table(Table::Hotkeys).await;
    fx.photo_table(Table::Counters).await;
    // The closed loop above, scaled the same way, but the controller never reads the sampler:
    // its only signal is the key-range throttles the writers' own client saw, attempt by attempt.
    let sim = scaled_sim().await;
    let counters = fx.photo().table(Table::Counters);
    let watch = ThrottleWatch::new(&[counters]);
    let via_sim = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(sim.endpoint())
            .interceptor(watch.clone())
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
        table: fx.photo().table_name(Table::Counters),
        key: "p9".into(),
        rate: 120,
        duration: Duration::from_secs(5),
        poll: Duration::from_millis(250),
        detection: Detection::Throttles(watch.clone()),
    };
    let report = onset::run(&run, &sim, &via_sim, &f, cached)
        .await
        .expect("onset");
    eprintln!("onset from throttles: {report:?}\n{:?}", watch.tally());
    let detected = report.detected_ms.expect("the throttle reasons named p9");
    let salting = report.salting_ms.expect("writers salted");
    assert!(detected <= salting, "{report:?}");
    let tally = watch.tally();
    assert!(tally.key_range >= 3, "{tally:?}");
    assert!(
        tally.capacity.is_empty(),
        "the simulator throttles key ranges only"
    );
    let p9 = directory.get("p9").await.expect("get").expect("entry");
    assert_eq!((p9.mode, p9.calm_since), (Mode::Salt, None), "{report:?}");
    assert!(
        p9.salts.current() >= 3,
        "120/s over 50 WCU/s partitions: {p9:?}"
    );
    assert!(p9.reason.contains("throttle"), "{}", p9.reason);
    // One decision, sized from the rate the writers sent (120/s, retries excluded), not a
    // ceiling per throttled sub-key: S settles in a few steps as on the sampler path.
    assert!(
        report.directory_writes <= 4 && p9.salts.current() <= 8,
        "{report:?}"
    );
}

/// A client of `$krate` answering from aws-smithy-mocks `$rules` in any order (no emulator
/// implements Contributor Insights; the shapes follow the AWS API reference).
macro_rules! mocked {
    ($krate:ident $(, $rule:expr)* $(,)?) => {
        aws_smithy_mocks::mock_client!($krate, aws_smithy_mocks::RuleMode::MatchAny, [$(&$rule),*])
    };
}

#[tokio::test]
async fn mocked_insights_alarm_trigger_salts_the_named_key_in_the_real_directory() {
    use aws_sdk_cloudwatch::operation::get_insight_rule_report::GetInsightRuleReportOutput;
    use aws_sdk_cloudwatch::primitives::DateTime;
    use aws_sdk_cloudwatch::types::{InsightRuleContributor, InsightRuleContributorDatapoint};
    use aws_sdk_dynamodb::operation::describe_contributor_insights::DescribeContributorInsightsOutput;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::types::{ContributorInsightsStatus, TableDescription};
    use aws_smithy_mocks::mock;
    use heatsink::insights::Insights;

    let fx = fixture!("mocked_insights_alarm_trigger_salts_the_named_key_in_the_real_directory");
    fx.photo_table(Table::Hotkeys).await;
    let table = "heatsink-counters";
    let rule = format!("DynamoDBContributorInsights-PKC-{table}-1700000000000");
    let describe = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(move || {
        DescribeTableOutput::builder()
            .table(TableDescription::builder().table_name(table).build())
            .build()
    });
    let rules = vec![rule.clone()];
    let insights =
        mock!(aws_sdk_dynamodb::Client::describe_contributor_insights).then_output(move || {
            DescribeContributorInsightsOutput::builder()
                .table_name(table)
                .set_contributor_insights_rule_list(Some(rules.clone()))
                .contributor_insights_status(ContributorInsightsStatus::Enabled)
                .build()
        });
    // likes#p9's sub-keys were written 144,000 times in their busiest minute: 2,400 writes/s.
    let report = mock!(aws_sdk_cloudwatch::Client::get_insight_rule_report).then_output(|| {
        let contributor = |key: &str, per_minute: f64| {
            InsightRuleContributor::builder()
                .keys(key)
                .approximate_aggregate_value(per_minute)
                .datapoints(
                    InsightRuleContributorDatapoint::builder()
                        .timestamp(DateTime::from_secs(1_700_000_000))
                        .approximate_value(per_minute)
                        .build(),
                )
                .build()
        };
        GetInsightRuleReportOutput::builder()
            .key_labels("pk")
            .contributors(contributor("likes#p9", 144_000.0))
            .contributors(contributor("likes#p1", 600.0))
            .build()
    });
    let ddb = mocked!(aws_sdk_dynamodb, describe, insights);
    let cw = mocked!(aws_sdk_cloudwatch, report);
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let config = ControllerConfig::new(vec![(table.to_owned(), heatsink::detect::Kind::Write)]);
    let f =
        Controller::new(directory.clone(), config).with_insights(Insights::from_clients(ddb, cw));
    let alarm = json!({"detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
        "detail": {"alarmName": "heatsink-counters-pkc-hot", "state": {"value": "ALARM"}}});
    let outcome = f.handle(&alarm, SystemTime::now()).await.expect("handled");
    assert_eq!(
        (outcome.trigger, outcome.signals, outcome.hot_keys),
        ("alarm", 2, 1)
    );
    let p9 = directory
        .get("likes#p9")
        .await
        .expect("get")
        .expect("salted");
    assert_eq!((p9.mode, p9.salts.current()), (Mode::Salt, 3));
    assert!(p9.reason.contains("PKC"), "{}", p9.reason);
    assert!(
        directory.get("likes#p1").await.expect("get").is_none(),
        "10/s is cold"
    );
}

#[tokio::test]
async fn an_oversize_key_is_refused_alone_and_a_report_never_calms_a_key_it_does_not_name() {
    let fx = fixture!(
        "an_oversize_key_is_refused_alone_and_a_report_never_calms_a_key_it_does_not_name"
    );
    fx.photo_table(Table::Hotkeys).await;
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let mut config = ControllerConfig::new(vec![]);
    config.max_entries = 2;
    let f = Controller::new(directory.clone(), config);
    let report = |hot: Vec<serde_json::Value>| {
        json!({"source": SAMPLER_SOURCE, "detail-type": SAMPLER_DETAIL_TYPE,
            "detail": {"partitions": [], "hot": hot}})
    };
    let huge = "k".repeat(3_000);
    let now = SystemTime::now();
    let first = f
        .handle(
            &report(vec![
                sampled_hot_key("p9", "write", 2_400.0),
                sampled_hot_key(&huge, "write", 2_400.0),
                sampled_hot_key("bad key", "write", 2_400.0),
            ]),
            now,
        )
        .await
        .expect("one bad key does not fail the run");
    assert_eq!(first.hot_keys, 1, "{first:?}");
    assert_eq!(first.rejected.len(), 2, "{first:?}");
    assert!(first.rejected[0].contains("3000 bytes"), "{first:?}");
    // Another router's report, hours later, names other keys only: p9 is not calmed by it.
    let later = now + Duration::from_secs(6 * 3600);
    let other = f
        .handle(
            &report(vec![
                sampled_hot_key("p1", "write", 2_400.0),
                sampled_hot_key("p2", "write", 2_400.0),
            ]),
            later,
        )
        .await
        .expect("handled");
    let p9 = directory
        .get("p9")
        .await
        .expect("get")
        .expect("still salted");
    assert_eq!(
        (p9.mode, p9.salts.current(), p9.calm_since),
        (Mode::Salt, 3, None)
    );
    // The directory is bounded: p1 fits (2 live entries), p2 is refused with the reason.
    assert_eq!(other.hot_keys, 2, "{other:?}");
    assert!(
        other
            .rejected
            .iter()
            .any(|r| r.starts_with("p2: the directory is full")),
        "{other:?}"
    );
}

/// The demo's detection scene as a newcomer runs it (`heatsink-demo detect --detect throttles`):
/// the key is salted from DynamoDB's throttle reasons alone, the sampler never read; the scene
/// fails (exit 1) when a path never salts.
#[tokio::test]
async fn the_detect_scene_salts_the_key_from_throttle_reasons_with_the_sampler_off() {
    use clap::{Args, FromArgMatches};
    use heatsink_demo::detect::{DetectDemoArgs, detect_demo};

    let fx = fixture!("the_detect_scene_salts_the_key_from_throttle_reasons_with_the_sampler_off");
    fx.photo_table(Table::Hotkeys).await;
    fx.photo_table(Table::Counters).await;
    let args = |extra: &[&str]| {
        let argv: Vec<String> = ["detect", "--prefix", fx.prefix(), "--json"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        let matches = DetectDemoArgs::augment_args(clap::Command::new("detect"))
            .try_get_matches_from(argv)
            .expect("the scene's flags parse");
        DetectDemoArgs::from_arg_matches(&matches).expect("args")
    };
    detect_demo(args(&["--detect", "throttles", "--duration", "4"]))
        .await
        .expect("salted from throttle reasons");
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let entries = directory.list().await.expect("list");
    let salted: Vec<_> = entries
        .iter()
        .filter(|e| e.key.starts_with("p9-") && e.mode == Mode::Salt)
        .collect();
    assert_eq!(salted.len(), 1, "{entries:?}");
    assert!(
        salted[0].reason.contains("throttle"),
        "named by the throttle reasons: {}",
        salted[0].reason
    );
    // 1 write/s never turns a key hot: the scene says so and fails.
    let cold = detect_demo(args(&[
        "--detect",
        "throttles",
        "--duration",
        "1",
        "--rate",
        "1",
    ]))
    .await;
    assert!(
        cold.is_err_and(|e| e.to_string().contains("never salted")),
        "a path that never salts fails the scene"
    );
}
