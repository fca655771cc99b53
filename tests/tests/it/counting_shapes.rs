//! Exact counts on production's stream shapes, on a real emulator through the stream-shape
//! simulator (`sim_` tests: no emulator makes these shapes). The likes API writes durable likes
//! to the emulator's `liked` table; the simulator re-cuts its stream into several shards (with
//! rollovers, or with Kinesis-shape duplicates and reordering); the local event-source mapping
//! delivers batches to the real aggregator, with chaos (lost acks, duplicate batches, crashes
//! before a flush) on top. Every run ends with the count equal to the durable likes.

use heatsink_integration::PhotoFixture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::counter::CounterStore;
use heatsink_photo_app::schema::Table;
use heatsink_photo_app::{Aggregator, LikesApi, aggregator};
use heatsink_sim::esm::{self, Batch, EsmSettings};
use heatsink_sim::front::StreamShaper;
use heatsink_sim::shape::{ShapeConfig, SourceKind};
use heatsink_testkit::{Fixture, fixture};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Fault probabilities per batch.
#[derive(Clone, Copy)]
struct Chaos {
    lost_ack: f64,
    dup_batch: f64,
    crash: f64,
}

const CALM: Chaos = Chaos {
    lost_ack: 0.0,
    dup_batch: 0.0,
    crash: 0.0,
};
const STORMY: Chaos = Chaos {
    lost_ack: 0.15,
    dup_batch: 0.15,
    crash: 0.15,
};

struct Outcome {
    counts: Vec<(String, i64)>,
    truth: Vec<(String, i64)>,
    esm: esm::EsmReport,
    shape: heatsink_sim::shape::ShapeStats,
    failed_batches: u64,
}

/// One handler call as Lambda makes it: the aggregator's answer as the failed record's seq.
pub(crate) async fn invoke(
    agg: &Aggregator,
    source: SourceKind,
    event: &serde_json::Value,
) -> Option<String> {
    match source {
        SourceKind::DynamoDbStreams => {
            let (resp, _) = agg
                .handle_dynamodb(serde_json::from_value(event.clone()).expect("dynamodb event"))
                .await;
            resp.batch_item_failures
                .first()
                .and_then(|f| f.item_identifier.clone())
        }
        SourceKind::Kinesis => {
            let (resp, _) = agg
                .handle_kinesis(serde_json::from_value(event.clone()).expect("kinesis event"))
                .await;
            resp.batch_item_failures
                .first()
                .and_then(|f| f.item_identifier.clone())
        }
    }
}

/// Likes `users` × `posts` (p9 takes most) over `load` while the mapping delivers, then drains.
async fn run(
    fx: &Fixture,
    shape: ShapeConfig,
    batch_size: usize,
    users: u32,
    load: Duration,
    chaos: Chaos,
) -> Outcome {
    for t in [Table::Liked, Table::Counters, Table::Posts] {
        fx.photo_table(t).await;
    }
    let posts = ["p9", "p1", "p2"];
    for p in posts {
        fx.stack
            .ddb
            .put_item()
            .table_name(fx.photo().table_name(Table::Posts))
            .item("post", AttributeValue::S(p.into()))
            .send()
            .await
            .expect("post");
    }
    let liked = fx.photo().table_name(Table::Liked);
    let arn = fx
        .stack
        .ddb
        .describe_table()
        .table_name(&liked)
        .send()
        .await
        .expect("describe")
        .table
        .and_then(|t| t.latest_stream_arn)
        .expect("liked has a stream");
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .expect("the stack's endpoint");
    let source = shape.kind;
    let shaper = StreamShaper::start(&upstream, shape).await.expect("shaper");
    let streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .endpoint_url(shaper.endpoint())
            .build(),
    );
    let agg = aggregator(
        CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters)),
        Some(streams),
    )
    .with_table(&liked);
    let api = Arc::new(LikesApi::new(fx.stack.ddb.clone(), &fx.photo()));
    let done = Arc::new(AtomicBool::new(false));
    let liking = {
        let (api, done) = (api.clone(), done.clone());
        tokio::spawn(async move {
            // LIKERS users like at once (each paced over `load`), so the load takes `load`
            // rather than `users` round trips end to end; the stream still interleaves them.
            const LIKERS: u32 = 4;
            let pause = load * LIKERS / users.max(1);
            let likers = (0..LIKERS).map(|l| {
                let api = api.clone();
                async move {
                    let mut truth = std::collections::BTreeMap::<String, i64>::new();
                    for u in (l..users).step_by(LIKERS as usize) {
                        // p9 takes 3 of 5 likes; p1 and p2 one each.
                        let post = match u % 5 {
                            0 => "p1",
                            1 => "p2",
                            _ => "p9",
                        };
                        api.like(&format!("u{u}"), post).await.expect("like");
                        *truth.entry(post.to_owned()).or_default() += 1;
                        tokio::time::sleep(pause).await;
                    }
                    truth
                }
            });
            let mut truth = std::collections::BTreeMap::<String, i64>::new();
            for part in futures::future::join_all(likers).await {
                for (post, n) in part {
                    *truth.entry(post).or_default() += n;
                }
            }
            done.store(true, Ordering::Relaxed);
            truth
        })
    };
    let settings = EsmSettings {
        source,
        batch_size,
        window: Duration::from_millis(200),
        shards: shaper.config().shards,
    };
    let failed = Arc::new(AtomicU64::new(0));
    let mut rng = StdRng::seed_from_u64(13);
    let agg = &agg;
    let failed_in = failed.clone();
    let report = esm::run(
        &shaper,
        &arn,
        settings,
        |batch: Batch| {
            let (crash, lost, dup) = (
                rng.random_bool(chaos.crash),
                rng.random_bool(chaos.lost_ack),
                rng.random_bool(chaos.dup_batch),
            );
            let failed = failed_in.clone();
            async move {
                if crash && batch.seqs.len() > 1 {
                    // Crashed after flushing the first half: Lambda redelivers the whole batch.
                    let mut half = batch.event.clone();
                    if let Some(records) = half["Records"].as_array_mut() {
                        let keep = records.len() / 2;
                        records.truncate(keep);
                    }
                    invoke(agg, source, &half).await;
                }
                let answer = invoke(agg, source, &batch.event).await;
                if lost {
                    invoke(agg, source, &batch.event).await;
                }
                if dup {
                    invoke(agg, source, &batch.event).await;
                }
                if answer.is_some() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                answer
            }
        },
        || done.load(Ordering::Relaxed),
    )
    .await;
    let truth = liking.await.expect("load");
    let mut counts = vec![];
    for p in posts {
        counts.push((p.to_owned(), api.count(p).await.expect("count")));
    }
    let shape = shaper.stats(&arn).expect("watched");
    Outcome {
        counts,
        truth: posts
            .iter()
            .map(|p| ((*p).to_owned(), truth.get(*p).copied().unwrap_or(0)))
            .collect(),
        esm: report,
        shape,
        failed_batches: failed.load(Ordering::Relaxed),
    }
}

#[tokio::test]
async fn sim_two_open_stream_shards_every_batch_finds_its_writer_and_counts_once() {
    let fx = fixture!("sim_two_open_stream_shards_every_batch_finds_its_writer_and_counts_once");
    let shape = ShapeConfig::new(SourceKind::DynamoDbStreams, 2);
    let out = run(&fx, shape, 10, 60, Duration::from_secs(1), CALM).await;
    assert_eq!(
        out.failed_batches, 0,
        "a batch of the second open shard was refused as ambiguous"
    );
    assert_eq!(out.esm.parked, 0, "no batch was given up on");
    assert_eq!(out.counts, out.truth);
}

#[tokio::test]
async fn sim_four_stream_shards_rolling_over_with_chaos_count_every_durable_like_once() {
    let fx =
        fixture!("sim_four_stream_shards_rolling_over_with_chaos_count_every_durable_like_once");
    let mut shape = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
    // 20 s in production-like runs; 1 s keeps the semantics (every slot rolls at least twice
    // during the 3 s load) at a twentieth of the CI time.
    shape.rollover = Some(Duration::from_secs(1));
    let out = run(&fx, shape, 25, 240, Duration::from_secs(3), STORMY).await;
    assert!(
        out.shape.rollovers >= 8,
        "every shard rolled at least twice: {:?}",
        out.shape
    );
    assert!(out.esm.shards >= 8, "closed parents were read to their end");
    assert_eq!(out.esm.parked, 0, "no batch was given up on");
    assert_eq!(out.counts, out.truth);
}

#[tokio::test]
async fn sim_kinesis_shape_with_duplicates_reordering_and_chaos_counts_every_change_once() {
    let fx =
        fixture!("sim_kinesis_shape_with_duplicates_reordering_and_chaos_counts_every_change_once");
    let mut shape = ShapeConfig::new(SourceKind::Kinesis, 4);
    shape.duplicates = 0.05;
    shape.reorder = 8;
    shape.seed = 7;
    let out = run(&fx, shape, 50, 240, Duration::from_secs(2), STORMY).await;
    assert!(
        out.shape.duplicates >= 4,
        "duplicates were delivered: {:?}",
        out.shape
    );
    assert!(out.shape.reordered > 0, "records were reordered");
    assert_eq!(out.esm.parked, 0, "no batch was given up on");
    assert_eq!(out.counts, out.truth);
}

#[tokio::test]
async fn a_counter_item_whose_total_is_not_a_number_is_reported_not_read_as_zero() {
    let fx = fixture!("a_counter_item_whose_total_is_not_a_number_is_reported_not_read_as_zero");
    fx.photo_table(Table::Counters).await;
    let counters = fx.photo().table_name(Table::Counters);
    for (sk, total) in [
        ("w#shardId-000000000000", AttributeValue::N("5".into())),
        ("fix", AttributeValue::S("five".into())),
    ] {
        fx.stack
            .ddb
            .put_item()
            .table_name(&counters)
            .item("pk", AttributeValue::S("likes#p9".into()))
            .item("sk", AttributeValue::S(sk.into()))
            .item("total", total)
            .send()
            .await
            .expect("put");
    }
    let store = CounterStore::new(fx.stack.ddb.clone(), counters);
    let key = heatsink::counter::CounterKey::new("likes", "p9").expect("key");
    let err = store.read(&key).await.expect_err("a malformed total");
    assert!(
        matches!(err, heatsink::counter::CounterStoreError::Malformed { ref sk, .. } if sk == "fix"),
        "{err}"
    );
}
