//! `heatsink::kinesis::Producer` on kinesis-mock: every record lands once, on the shard its
//! hash key belongs to, plain or KPL-aggregated; heatsink's aggregates read back from the
//! stream deaggregate with another implementation; a salted hot key spreads over shards.
//!
//! Multi-threaded runtimes: the fixture deletes its streams from a thread of its own when it
//! drops, and on a single-threaded runtime that thread waits ~14 s for pooled connections that
//! the blocked runtime can no longer drive.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use heatsink::hot::{Entry, Snapshot};
use heatsink::keys::{ShardRange, parse_hash_key};
use heatsink::kinesis::kpl::Deaggregator;
use heatsink::kinesis::{Producer, ProducerConfig, Salting};
use heatsink_testkit::{fixture, kinesis_shard_records};
use serde_json::{Value, json};

use crate::kinesis_kpl::{peer_python, run_peer};

/// One Kinesis record read back: its shard (with range), partition key and data.
pub(crate) struct Stored {
    pub shard: ShardRange,
    pub partition_key: String,
    pub data: Vec<u8>,
}

/// Every record of every shard of `stream`, from the trim horizon.
pub(crate) async fn read_all(k: &aws_sdk_kinesis::Client, stream: &str) -> Vec<Stored> {
    let shards = k
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("list shards");
    let mut out = vec![];
    for s in shards.shards() {
        let range = s.hash_key_range().expect("a range");
        let shard = ShardRange::new(
            s.shard_id(),
            parse_hash_key(range.starting_hash_key()).expect("decimal"),
            parse_hash_key(range.ending_hash_key()).expect("decimal"),
        );
        for r in kinesis_shard_records(k, stream, s.shard_id()).await {
            out.push(Stored {
                shard: shard.clone(),
                partition_key: r.partition_key().unwrap_or_default().to_owned(),
                data: r.data().as_ref().to_vec(),
            });
        }
    }
    out
}

fn config(aggregate: bool) -> ProducerConfig {
    ProducerConfig {
        aggregate,
        linger: Duration::from_millis(5),
        ..ProducerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_producer_writes_every_record_once_on_its_shard_plain_or_aggregated() {
    let fx = fixture!("the_producer_writes_every_record_once_on_its_shard_plain_or_aggregated");
    for aggregate in [false, true] {
        let stream = fx
            .stream(if aggregate { "prod-agg" } else { "prod-plain" }, 4)
            .await;
        let k = &fx.stack.kinesis;
        let p = Producer::start(k.clone(), &stream.name, config(aggregate))
            .await
            .expect("start");
        for i in 0..1_500 {
            p.send(format!("user-{}", i % 97), format!("like {i}").into_bytes())
                .await
                .expect("queued");
        }
        let report = p.shutdown().await.expect("flushed");
        assert_eq!(
            (report.records, report.failed),
            (1_500, 0),
            "aggregate={aggregate}"
        );
        let stored = read_all(k, &stream.name).await;
        let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut aggregates = 0;
        for s in &stored {
            let d = Deaggregator::for_shard(s.shard.start, s.shard.end)
                .deaggregate(&s.data, &s.partition_key)
                .expect("valid");
            aggregates += usize::from(d.aggregated);
            assert_eq!(
                d.out_of_range, 0,
                "every user record is on its predicted shard"
            );
            for r in d.records {
                *seen.entry(r.data).or_default() += 1;
            }
        }
        assert_eq!(seen.len(), 1_500, "aggregate={aggregate}");
        assert!(
            seen.values().all(|&c| c == 1),
            "no duplicates (aggregate={aggregate})"
        );
        if aggregate {
            assert!(
                aggregates > 0 && stored.len() < 300,
                "{} Kinesis records",
                stored.len()
            );
            assert_eq!(report.aggregated_records as usize, aggregates);
        } else {
            assert_eq!(stored.len(), 1_500);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_aggregates_read_from_kinesis_deaggregate_with_aws_kinesis_agg() {
    let fx = fixture!("producer_aggregates_read_from_kinesis_deaggregate_with_aws_kinesis_agg");
    let Some(python) =
        peer_python("producer_aggregates_read_from_kinesis_deaggregate_with_aws_kinesis_agg")
    else {
        return;
    };
    let stream = fx.stream("prod-peer", 2).await;
    let k = &fx.stack.kinesis;
    let p = Producer::start(k.clone(), &stream.name, config(true))
        .await
        .expect("start");
    let mut sent = BTreeSet::new();
    for i in 0..400 {
        let data = format!("{{\"like\":{i}}}");
        p.send(format!("post-{}", i % 13), data.clone().into_bytes())
            .await
            .expect("queued");
        sent.insert(data);
    }
    p.shutdown().await.expect("flushed");
    let stored = read_all(k, &stream.name).await;
    let input: Vec<Value> = stored
        .iter()
        .map(|s| json!({"partition_key": s.partition_key, "data_b64": B64.encode(&s.data)}))
        .collect();
    let peer = run_peer(&python, "deaggregate", &Value::from(input));
    let got: BTreeSet<String> = peer
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| {
            String::from_utf8(
                B64.decode(r["data_b64"].as_str().expect("data"))
                    .expect("b64"),
            )
            .expect("utf-8")
        })
        .collect();
    assert_eq!(peer.as_array().map(Vec::len), Some(400));
    assert_eq!(got, sent);
    assert!(
        peer.as_array()
            .expect("list")
            .iter()
            .any(|r| r["aggregated"] == json!(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_salted_hot_key_is_spread_over_distinct_shards_on_kinesis() {
    let fx = fixture!("a_salted_hot_key_is_spread_over_distinct_shards_on_kinesis");
    let stream = fx.stream("prod-salt", 4).await;
    let k = &fx.stack.kinesis;
    let snapshot = Snapshot::new([Entry::salt("p9", 4, "hot", 1).expect("valid")], 1);
    let config = ProducerConfig {
        salting: Salting::Fixed(Arc::new(snapshot)),
        ..config(false)
    };
    let p = Producer::start(k.clone(), &stream.name, config)
        .await
        .expect("start");
    for i in 0..200 {
        p.send("p9", format!("like {i}").into_bytes())
            .await
            .expect("queued");
    }
    let report = p.shutdown().await.expect("flushed");
    assert_eq!(report.salted, 200);
    let stored = read_all(k, &stream.name).await;
    let shards: BTreeSet<&str> = stored.iter().map(|s| s.shard.shard_id.as_str()).collect();
    let keys: BTreeSet<&str> = stored.iter().map(|s| s.partition_key.as_str()).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert_eq!(shards.len(), 4, "4 sub-keys on 4 distinct shards");
}
