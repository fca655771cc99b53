//! The partition simulator in front of a real DynamoDB emulator: a naive hot key is throttled,
//! the same load salted over sub-keys is not, and the SDK sees DynamoDB's own error.

use heatsink_integration::PhotoFixture;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::keys::SaltedKey;
use heatsink_photo_app::schema::Table;
use heatsink_sim::{Limits, SimConfig, Simulator};
use heatsink_testkit::fixture;

/// A simulator with small ceilings (20 WCU/s per partition), so a load that any emulator serves
/// (moto handles a few hundred requests a second) shows the effect within 2 s.
async fn small_sim() -> Simulator {
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("fixture checked it");
    let mut config = SimConfig::new(&upstream);
    config.limits = Limits {
        partitions: 8,
        write_ceiling: 20.0,
        read_ceiling: 60.0,
        burst_seconds: 0.5,
    };
    Simulator::start(config).await.expect("simulator starts")
}

/// A client through the simulator, with the SDK's retries off so every throttle is visible.
fn client_via(sim: &Simulator, config: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(config)
        .endpoint_url(sim.endpoint())
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// Sends `rate` one-WCU increments per second for `secs` seconds, each to `pk(i)`; returns
/// how many were throttled as seen by the SDK.
async fn drive(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    rate: usize,
    secs: usize,
    pk: impl Fn(usize) -> String,
) -> usize {
    let ticks = secs * 10;
    let per_tick = rate / 10;
    let mut throttled = 0;
    let mut interval = tokio::time::interval(Duration::from_millis(100));
    for t in 0..ticks {
        interval.tick().await;
        let calls = (0..per_tick).map(|j| {
            ddb.update_item()
                .table_name(table)
                .key("pk", AttributeValue::S(pk(t * per_tick + j)))
                .key("sk", AttributeValue::S("total".into()))
                .update_expression("ADD #t :one")
                .expression_attribute_names("#t", "total")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
        });
        for r in futures::future::join_all(calls).await {
            if let Err(e) = r {
                let service = e.into_service_error();
                assert!(
                    service.is_throttling_exception(),
                    "only on-demand throttles are expected, got {service:?}"
                );
                throttled += 1;
            }
        }
    }
    throttled
}

#[tokio::test]
async fn the_simulator_throttles_a_naive_hot_key_and_not_the_same_load_salted() {
    let fx = fixture!("the_simulator_throttles_a_naive_hot_key_and_not_the_same_load_salted");
    let counters = fx.photo_table(Table::Counters).await;
    let sim = small_sim().await;
    let ddb = client_via(&sim, &fx.stack.config);

    // 48 writes/s on one key: 2.4x a partition's ceiling, as p9's 2,400/s is against 1,000.
    let naive = drive(&ddb, &counters.name, 48, 2, |_| "likes#p9".into()).await;
    let stats = sim.stats();
    assert!(naive > 20, "a naive hot key must be throttled, got {naive}");
    assert_eq!(stats.table_throttled(&counters.name) as usize, naive);
    assert!(stats.max_utilisation(&counters.name) >= 0.95);

    // The same load over S = 16 salted sub-keys, round-robin.
    sim.reset();
    let salted = SaltedKey::new("likes#p9", 16).expect("valid key");
    let salted_throttled = drive(&ddb, &counters.name, 48, 2, |i| {
        salted.sub_key((i % 16) as u16).expect("salt in range")
    })
    .await;
    let stats = sim.stats();
    assert_eq!(salted_throttled, 0, "salted load must not be throttled");
    assert!(
        stats.max_utilisation(&counters.name) < 0.9,
        "{}",
        stats.max_utilisation(&counters.name)
    );
    assert!(
        stats
            .partitions
            .iter()
            .filter(|p| p.stats.writes > 0)
            .count()
            >= 6,
        "load must spread"
    );
}

/// Writes `pk = hot` back to back until one is refused; the refusal as the SDK parsed it.
async fn first_refusal(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> aws_sdk_dynamodb::operation::put_item::PutItemError {
    for _ in 0..200 {
        let r = ddb
            .put_item()
            .table_name(table)
            .item("pk", AttributeValue::S("hot".into()))
            .item("sk", AttributeValue::S("x".into()))
            .send()
            .await;
        if let Err(e) = r {
            return e.into_service_error();
        }
    }
    panic!("200 back-to-back writes exceed a 10-unit burst and 20 WCU/s");
}

#[tokio::test]
async fn an_on_demand_table_is_throttled_with_throttling_exception_and_its_key_range_reason() {
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    let fx = fixture!(
        "an_on_demand_table_is_throttled_with_throttling_exception_and_its_key_range_reason"
    );
    let counters = fx.photo_table(Table::Counters).await;
    let sim = small_sim().await;
    let ddb = client_via(&sim, &fx.stack.config);
    let err = first_refusal(&ddb, &counters.name).await;
    let PutItemError::ThrottlingException(e) = err else {
        panic!("expected ThrottlingException on an on-demand table, got {err:?}");
    };
    let reason = e.throttling_reasons().first().expect("a throttling reason");
    assert_eq!(
        reason.reason(),
        Some("TableWriteKeyRangeThroughputExceeded")
    );
    assert!(
        reason
            .resource()
            .is_some_and(|r| r.ends_with(&format!("table/{}", counters.name)))
    );
}

#[tokio::test]
async fn a_provisioned_table_is_throttled_with_provisioned_throughput_exceeded_and_its_reason() {
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, KeySchemaElement, KeyType, ProvisionedThroughput, ScalarAttributeType,
    };
    let fx = fixture!(
        "a_provisioned_table_is_throttled_with_provisioned_throughput_exceeded_and_its_reason"
    );
    let direct = aws_sdk_dynamodb::Client::new(&fx.stack.config);
    let name = format!("{}provisioned", fx.prefix());
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("complete")
    };
    let key = |n: &str, t| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .expect("complete")
    };
    direct
        .create_table()
        .table_name(&name)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(100)
                .write_capacity_units(100)
                .build()
                .expect("complete"),
        )
        .send()
        .await
        .expect("create the provisioned table");
    let sim = small_sim().await;
    let ddb = client_via(&sim, &fx.stack.config);
    let err = first_refusal(&ddb, &name).await;
    let _ = direct.delete_table().table_name(&name).send().await;
    let PutItemError::ProvisionedThroughputExceededException(e) = err else {
        panic!(
            "expected ProvisionedThroughputExceededException on a provisioned table, got {err:?}"
        );
    };
    let reason = e.throttling_reasons().first().expect("a throttling reason");
    assert_eq!(
        reason.reason(),
        Some("TableWriteKeyRangeThroughputExceeded")
    );
}

#[tokio::test]
async fn the_stats_endpoint_serves_json_per_partition() {
    let fx = fixture!("the_stats_endpoint_serves_json_per_partition");
    let counters = fx.photo_table(Table::Counters).await;
    let sim = small_sim().await;
    let ddb = client_via(&sim, &fx.stack.config);
    drive(&ddb, &counters.name, 50, 1, |i| format!("k{i}")).await;
    let body = reqwest_free_get(sim.addr(), "/_sim/stats").await;
    let json: serde_json::Value = serde_json::from_str(&body).expect("stats are JSON");
    // Every request is either admitted or throttled, each on the partition of its key.
    let outcomes: u64 = json["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter(|p| p["table"] == counters.name.as_str())
        .map(|p| p["writes"].as_u64().unwrap_or(0) + p["throttled_writes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(outcomes, 50);
}

/// A minimal HTTP/1.1 GET over a TCP socket (the test crate carries no HTTP client).
async fn reqwest_free_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.expect("read");
    buf.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// Every `user` the stream-shape simulator serves for `arn` (all shards, from the trim horizon).
async fn shaped_users(streams: &aws_sdk_dynamodbstreams::Client, arn: &str) -> Vec<String> {
    let desc = streams
        .describe_stream()
        .stream_arn(arn)
        .send()
        .await
        .expect("describe");
    let mut users = vec![];
    let shards = desc.stream_description().map(|d| d.shards()).unwrap_or(&[]);
    for shard in shards.iter().filter_map(|s| s.shard_id()) {
        let it = streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("iterator");
        let out = streams
            .get_records()
            .set_shard_iterator(it.shard_iterator().map(str::to_owned))
            .send()
            .await
            .expect("records");
        users.extend(out.records().iter().filter_map(|r| {
            r.dynamodb()
                .and_then(|d| d.keys())
                .and_then(|k| k.get("user"))
                .and_then(|v| v.as_s().ok())
                .cloned()
        }));
    }
    users
}

/// The stream-shape simulator keeps serving a table's changes after a `TransactWriteItems` on
/// that table was cancelled. moto answers an iterator issued before a cancelled transaction from
/// the table as it was before the call (it restores a copy of the table), so a reader that keeps
/// its iterator never sees another change: the simulator issues its upstream iterator again
/// after every empty read (on dynoxide this passes either way).
#[tokio::test]
async fn the_stream_shaper_serves_writes_made_after_a_cancelled_transaction() {
    use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
    use heatsink_sim::front::StreamShaper;
    use heatsink_sim::shape::{ShapeConfig, SourceKind};

    let fx = fixture!("the_stream_shaper_serves_writes_made_after_a_cancelled_transaction");
    let liked = fx.photo_table(Table::Liked).await;
    let arn = fx.stream_arn(&liked.name).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .expect("the stack's endpoint");
    let shaper = StreamShaper::start(&upstream, ShapeConfig::new(SourceKind::DynamoDbStreams, 2))
        .await
        .expect("shaper");
    shaper.watch(&arn).await.expect("watch");
    let streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .endpoint_url(shaper.endpoint())
            .build(),
    );
    let like = |user: &str| {
        let mut item = std::collections::HashMap::new();
        item.insert("user".to_owned(), AttributeValue::S(user.into()));
        item.insert("post".to_owned(), AttributeValue::S("p1".into()));
        item
    };
    let served_within = |user: &'static str| {
        let streams = streams.clone();
        let arn = arn.clone();
        async move {
            for _ in 0..100 {
                if shaped_users(&streams, &arn).await.iter().any(|u| u == user) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }
    };
    fx.stack
        .ddb
        .put_item()
        .table_name(&liked.name)
        .set_item(Some(like("before")))
        .send()
        .await
        .expect("put");
    assert!(served_within("before").await, "the first write is served");
    // Cancelled: the item exists.
    let put = Put::builder()
        .table_name(&liked.name)
        .set_item(Some(like("before")))
        .condition_expression("attribute_not_exists(#u)")
        .expression_attribute_names("#u", "user")
        .build()
        .expect("put");
    let cancelled = fx
        .stack
        .ddb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .send()
        .await;
    assert!(cancelled.is_err(), "the transaction is cancelled");
    fx.stack
        .ddb
        .put_item()
        .table_name(&liked.name)
        .set_item(Some(like("after")))
        .send()
        .await
        .expect("put");
    assert!(
        served_within("after").await,
        "a write after the cancelled transaction is served within 10 s"
    );
    shaper.stop();
}

/// A table over its on-demand maximum, through the simulator (emulators have no maximum): the
/// writers' throttle watch tallies `TableWriteMaxOnDemandThroughputExceeded` as a capacity
/// throttle and never names a key (salting would fix nothing), and `heatsink plan --warm`'s
/// plan refuses to pre-warm it for a peak over the maximum while raising the warm throughput
/// of a table without one (the simulator answers `UpdateTable WarmThroughput`).
#[tokio::test]
async fn sim_a_table_over_its_on_demand_maximum_is_never_salted_and_not_prewarmed_past_it() {
    use heatsink::detect::ThrottleWatch;
    use heatsink::schema::warm::{self, Capacity, WarmRequest};
    use heatsink_sim::{TableMax, TableShape, WarmUnits};

    let fx = fixture!(
        "sim_a_table_over_its_on_demand_maximum_is_never_salted_and_not_prewarmed_past_it"
    );
    let counters = fx.photo_table(Table::Counters).await;
    let posts = fx.photo_table(Table::Posts).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("fixture checked it");
    let mut config = SimConfig::new(&upstream);
    config.tables.insert(
        counters.name.clone(),
        TableShape {
            max: TableMax {
                read: None,
                write: Some(20.0),
            },
            warm: Some(WarmUnits {
                read: 12_000,
                write: 4_000,
            }),
        },
    );
    let sim = Simulator::start(config).await.expect("simulator");
    let watch = ThrottleWatch::new(&[fx.photo().table(Table::Counters)]);
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
            .endpoint_url(sim.endpoint())
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .interceptor(watch.clone())
            .build(),
    );
    // 60 writes/s spread over 60 keys, far under every partition's 1,000 WCU/s, 3× the maximum.
    let throttled = drive(&ddb, &counters.name, 60, 2, |i| format!("k{i}")).await;
    assert!(throttled > 0, "over the table's maximum");
    let tally = watch.tally();
    assert_eq!(tally.key_range, 0, "{tally:?}");
    let reason = (
        counters.name.clone(),
        None,
        "TableWriteMaxOnDemandThroughputExceeded".to_owned(),
    );
    assert_eq!(
        tally.capacity.get(&reason).copied(),
        Some(throttled as u64),
        "{tally:?}"
    );
    assert!(watch.dynamodb_signals().is_empty(), "no key is named");
    // DescribeTable through the simulator shows the maximum and the warm throughput.
    let table = warm::describe(&ddb, &counters.name)
        .await
        .expect("describe");
    assert_eq!(table.max.write, 20);
    assert_eq!(
        table.warm,
        Capacity {
            read: 12_000,
            write: 4_000
        }
    );
    let plan = warm::plan(
        &WarmRequest::new(Capacity {
            read: 0,
            write: 100,
        }),
        &table,
    );
    assert!(table.on_demand, "the photo app's tables are on demand");
    let err = warm::raise(&ddb, &counters.name, &plan)
        .await
        .expect_err("refused under the maximum");
    assert!(err.to_string().contains("20 writes/s"), "{err}");
    // A table with no maximum is raised, and DescribeTable shows the new warm throughput.
    let before = warm::describe(&ddb, &posts.name).await.expect("describe");
    assert_eq!(before.max, Capacity::UNBOUNDED);
    // moto reports a warm throughput of its own, dynoxide none: ask for 8,000 reads and
    // 2,000 writes above whatever it is.
    let peak = Capacity {
        read: before.warm.read + 8_000,
        write: before.warm.write + 2_000,
    };
    let plan = warm::plan(&WarmRequest::new(peak), &before);
    assert!(warm::raise(&ddb, &posts.name, &plan).await.expect("raised"));
    let after = warm::describe(&ddb, &posts.name).await.expect("describe");
    assert_eq!(
        after.warm,
        Capacity {
            read: (peak.read as f64 / 0.8).ceil() as u64,
            write: (peak.write as f64 / 0.8).ceil() as u64,
        }
    );
    sim.stop();
}
