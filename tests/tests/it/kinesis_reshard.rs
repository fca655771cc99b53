//! `heatsink::reshard` on kinesis-mock: sampling with AT_TIMESTAMP iterators sees a load that
//! sits in a narrow hash range, the plan splits at its load median (not the midpoint), apply
//! carries it out and journals it, and a resume after the call finds it done.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use heatsink::keys::kinesis_hash_key;
use heatsink::kinesis::{Producer, ProducerConfig, ShardLimits, open_shard_ranges};
use heatsink::reshard::plan_types::{Action, Op, PlanConfig, ReshardState, plan};
use heatsink::reshard::{ApplyConfig, Journal, Step, apply, sample};
use heatsink_testkit::fixture;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_in_a_narrow_hash_range_is_sampled_split_at_its_median_and_journaled() {
    let fx = fixture!("a_load_in_a_narrow_hash_range_is_sampled_split_at_its_median_and_journaled");
    let stream = fx.stream("reshard", 1).await;
    let k = &fx.stack.kinesis;
    // Partition keys whose hash keys sit in the lowest 1/64 of the hash space.
    let keys: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|pk| kinesis_hash_key(pk) < 1u128 << 122)
        .take(400)
        .collect();
    let config = ProducerConfig {
        linger: Duration::from_millis(5),
        limits: ShardLimits {
            records_per_second: 1e9,
            bytes_per_second: 1e12,
        },
        ..ProducerConfig::default()
    };
    let p = Producer::start(k.clone(), &stream.name, config)
        .await
        .expect("start");
    for i in 0..2_000 {
        p.send(keys[i % keys.len()].clone(), vec![b'x'; 50])
            .await
            .expect("queued");
    }
    p.shutdown().await.expect("flushed");

    let samples = sample(k, &stream.name, 60, now_ms() + 1_000)
        .await
        .expect("sampled");
    assert_eq!(samples.len(), 1);
    assert_eq!(
        samples[0].samples.len(),
        2_000,
        "AT_TIMESTAMP over the last 60 s reads every record"
    );
    // 2,000 records in 60 s is 3 % of a shard: lower the thresholds to the scale of the test.
    let cfg = PlanConfig {
        split_at: 0.02,
        max_splits_per_shard: 1,
        ..PlanConfig::default()
    };
    let planned = plan(&samples, &ReshardState::default(), &cfg, now_ms() / 1_000).expect("plan");
    assert_eq!(planned.shards[0].action, Action::Split);
    let at = planned.shards[0].split_hash_key.expect("a split key");
    assert!(
        at < 1u128 << 122,
        "split inside the hot range, not at the midpoint 2^127"
    );
    assert!(planned.predicted_max_over_mean < 1.1);
    assert!(planned.midpoint_max_over_mean > 1.9);

    let dir = std::env::temp_dir().join(format!("hs-reshard-{}", stream.name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("journal.json");
    let _ = std::fs::remove_file(&path);
    let mut steps = vec![];
    let cfg = ApplyConfig {
        deadline: Duration::from_secs(30),
        poll: Duration::from_millis(100),
        ..ApplyConfig::default()
    };
    let journal = apply(k, &stream.name, &path, Some(&planned), &cfg, |s| {
        steps.push(s)
    })
    .await
    .expect("applied");
    assert_eq!((journal.done, journal.ops.len()), (1, 1));
    assert!(
        steps.iter().any(|s| matches!(s, Step::Done { index: 0 })),
        "{steps:?}"
    );
    let open: Vec<(u128, u128)> = open_shard_ranges(k, &stream.name)
        .await
        .expect("open shards")
        .iter()
        .map(|r| (r.start, r.end))
        .collect();
    assert_eq!(open, vec![(0, at - 1), (at, u128::MAX)]);
    assert_eq!(
        Journal::load(&path).expect("readable"),
        Some(journal.clone())
    );

    // A crash after the call but before the journal write: the resume finds it done.
    let crashed = Journal { done: 0, ..journal };
    crashed.save(&path).expect("saved");
    let mut resumed = vec![];
    let again = apply(k, &stream.name, &path, None, &cfg, |s| resumed.push(s))
        .await
        .expect("resumed");
    assert_eq!(again.done, 1);
    assert_eq!(resumed.last(), Some(&Step::AlreadyDone { index: 0 }));
    assert!(matches!(again.ops[0], Op::Split { at: a, .. } if a == at));
    let _ = std::fs::remove_dir_all(&dir);
}
