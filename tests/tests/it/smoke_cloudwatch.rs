//! The CloudWatch lane works, where its emulator speaks the SDK's rpc-v2-cbor protocol.

use std::time::Duration;

use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use heatsink_testkit::{eventually, fixture};

#[tokio::test]
async fn a_put_metric_is_listed_back() {
    let fx = fixture!("a_put_metric_is_listed_back");
    if !fx.stack.cloudwatch_speaks_cbor() {
        eprintln!(
            "skip: a_put_metric_is_listed_back: lane `{}` serves CloudWatch without the SDK's \
             rpc-v2-cbor protocol; it runs on the localstack lane",
            fx.stack.lane
        );
        return;
    }
    let cw = &fx.stack.cloudwatch;
    let namespace = format!("{}smoke", fx.prefix());
    cw.put_metric_data()
        .namespace(&namespace)
        .metric_data(
            MetricDatum::builder()
                .metric_name("ThrottledRequests")
                .dimensions(Dimension::builder().name("Partition").value("p3").build())
                .unit(StandardUnit::Count)
                .value(7.0)
                .build(),
        )
        .send()
        .await
        .expect("put metric");
    let listed = eventually(
        "the metric to be listed",
        Duration::from_secs(10),
        || async {
            let out = cw.list_metrics().namespace(&namespace).send().await.ok()?;
            let names: Vec<String> = out
                .metrics()
                .iter()
                .filter_map(|m| m.metric_name().map(str::to_owned))
                .collect();
            (!names.is_empty()).then_some(names)
        },
    )
    .await;
    assert_eq!(listed, ["ThrottledRequests"]);
}
