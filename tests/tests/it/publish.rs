//! The production sampler path on the stack: a router's report goes onto EventBridge, a rule
//! with the stacks' pattern routes it (here to an SQS queue standing in for the Lambda target),
//! and the event exactly as delivered drives the hotkey-controller against the real directory.
//! EventBridge and SQS are moto's on every lane.

use heatsink_integration::PhotoFixture;
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::QueueAttributeName;
use heatsink::detect::Report;
use heatsink::detect::{EventBridgeSink, PublishError, Publisher};
use heatsink::detect::{SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE};
use heatsink::hot::ControllerConfig;
use heatsink::hot::Mode;
use heatsink::hot::{Controller, Directory};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{fixture, sampled_hot_key};
use serde_json::{Value, json};

/// Whether the lane names EventBridge and SQS endpoints (never fall through to real AWS).
fn events_endpoints(test: &str) -> bool {
    let set = ["AWS_ENDPOINT_URL_EVENTBRIDGE", "AWS_ENDPOINT_URL_SQS"]
        .iter()
        .all(|v| std::env::var_os(v).is_some());
    if !set {
        assert!(
            std::env::var("HEATSINK_REQUIRE_STACK").as_deref() != Ok("1"),
            "{test}: HEATSINK_REQUIRE_STACK=1 but the EventBridge/SQS endpoints are unset"
        );
        eprintln!("skip: {test}: no EventBridge/SQS endpoint (run `make test`)");
    }
    set
}

/// A report naming p9 write-hot at 2,400/s and p1 read-hot at 9,000/s.
fn report() -> Report {
    serde_json::from_value(json!({"partitions": [],
        "hot": [sampled_hot_key("p1", "read", 9_000.0), sampled_hot_key("p9", "write", 2_400.0)]}))
    .expect("report")
}

/// Receives every message the queue delivers within `wait`, as JSON events.
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str, wait: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut events = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        for m in out.messages() {
            events.push(serde_json::from_str(m.body().unwrap_or("")).expect("an event body"));
            if let Some(h) = m.receipt_handle() {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(h)
                    .send()
                    .await
                    .expect("delete");
            }
        }
    }
    events
}

#[tokio::test]
async fn a_published_report_is_routed_by_the_stacks_rule_and_mitigated_by_the_controller() {
    let name = "a_published_report_is_routed_by_the_stacks_rule_and_mitigated_by_the_controller";
    let fx = fixture!(name);
    if !events_endpoints(name) {
        return;
    }
    fx.photo_table(Table::Hotkeys).await;
    let events = aws_sdk_eventbridge::Client::new(&fx.stack.config);
    let sqs = aws_sdk_sqs::Client::new(&fx.stack.config);
    let rule = format!("{}sampler-reports", fx.prefix());
    // The stacks' control bus (`<prefix>control`): reports are routed from it only.
    let bus = format!("{}control", fx.prefix());
    events
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("create the control bus");

    // The stacks' rule (infra/cdk HotkeyControllerSamplerReports), targeting a queue.
    let url = sqs
        .create_queue()
        .queue_name(&rule)
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_owned();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("queue arn");
    let pattern = json!({"source": [SAMPLER_SOURCE], "detail-type": [SAMPLER_DETAIL_TYPE]});
    events
        .put_rule()
        .name(&rule)
        .event_bus_name(&bus)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .expect("put rule");
    events
        .put_targets()
        .rule(&rule)
        .event_bus_name(&bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("controller")
                .arn(&arn)
                .build()
                .expect("target"),
        )
        .send()
        .await
        .expect("put targets");

    // A router publishes; a calm report and a report within the cadence are not sent.
    let sink = EventBridgeSink::new(events.clone(), &bus);
    let mut publisher = Publisher::new(sink, Duration::from_secs(5));
    let s = Duration::from_secs;
    assert_eq!(
        publisher
            .tick(&Report::default(), s(0))
            .await
            .expect("tick"),
        None
    );
    let sent = publisher.tick(&report(), s(1)).await.expect("publish");
    assert_eq!(sent.map(|p| p.keys), Some(2));
    assert_eq!(publisher.tick(&report(), s(2)).await.expect("tick"), None);
    // Something else on the bus with the same source but another detail-type is not routed,
    // nor is a well-formed report put on the default bus (why the sink needs the bus named).
    for (on, detail_type) in [
        (bus.as_str(), "something else"),
        ("default", SAMPLER_DETAIL_TYPE),
    ] {
        events
            .put_events()
            .entries(
                aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                    .event_bus_name(on)
                    .source(SAMPLER_SOURCE)
                    .detail_type(detail_type)
                    .detail(r#"{"partitions":[],"hot":[]}"#)
                    .build(),
            )
            .send()
            .await
            .expect("put an event that must not be routed");
    }

    let delivered = drain(&sqs, &url, Duration::from_secs(4)).await;
    assert_eq!(
        delivered.len(),
        1,
        "exactly the report is routed: {delivered:?}"
    );
    assert_eq!(delivered[0]["source"], SAMPLER_SOURCE);
    assert_eq!(delivered[0]["detail-type"], SAMPLER_DETAIL_TYPE);

    // The event as delivered drives the controller: p9 salted, p1 cached.
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let function = Controller::new(directory.clone(), ControllerConfig::new(vec![]));
    let outcome = function
        .handle(&delivered[0], SystemTime::now())
        .await
        .expect("handled");
    assert_eq!(outcome.trigger, "sampler");
    let entries = directory.list().await.expect("list");
    let modes: Vec<_> = entries
        .iter()
        .map(|e| (e.key.as_str(), e.mode, e.salts.current()))
        .collect();
    assert_eq!(modes, [("p1", Mode::Cache, 1), ("p9", Mode::Salt, 3)]);

    // Publishing to a bus that does not exist is a typed error, not a silent drop.
    let lost = EventBridgeSink::new(events.clone(), format!("{rule}-missing"));
    let mut nowhere = Publisher::new(lost, Duration::from_secs(5));
    let err = nowhere
        .tick(&report(), s(0))
        .await
        .expect_err("no such bus");
    assert!(
        matches!(&err, PublishError::Aws(e) if e.code() == Some("ResourceNotFoundException")),
        "{err}"
    );

    let _ = events
        .remove_targets()
        .rule(&rule)
        .event_bus_name(&bus)
        .ids("controller")
        .send()
        .await;
    let _ = events
        .delete_rule()
        .name(&rule)
        .event_bus_name(&bus)
        .send()
        .await;
    let _ = events.delete_event_bus().name(&bus).send().await;
    let _ = sqs.delete_queue().queue_url(&url).send().await;
}
