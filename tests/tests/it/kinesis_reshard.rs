//! `heatsink::kinesis::reshard` on kinesis-mock: sampling with AT_TIMESTAMP iterators sees a load that
//! sits in a narrow hash range, the plan splits at its load median (not the midpoint), apply
//! carries it out and journals it, and a resume after the call finds it done. A key that
//! holds most of its shard is refused ("salt it"), handed to the hot-key directory, and the
//! producer then salts it over distinct shards.

use heatsink_integration::PhotoFixture;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use heatsink::hot::{CachedDirectory, Controller, Directory};
use heatsink::hot::{ControllerConfig, Mode};
use heatsink::keys::kinesis_hash_key;
use heatsink::kinesis::reshard::{Action, Op, PlanConfig, Refusal, ReshardState, plan};
use heatsink::kinesis::reshard::{
    ApplyConfig, Journal, Step, apply, created_within, hand_off_hot_keys, sample,
};
use heatsink::kinesis::{Producer, ProducerConfig, Salting, ShardLimits, open_shard_ranges};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::fixture;

use crate::kinesis_produce::read_all;

fn unpaced() -> ProducerConfig {
    ProducerConfig {
        linger: Duration::from_millis(5),
        limits: ShardLimits {
            records_per_second: 1e9,
            bytes_per_second: 1e12,
        },
        ..ProducerConfig::default()
    }
}

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
    let p = Producer::start(k.clone(), &stream.name, unpaced())
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
    // The cooldown's source: ListShards with an AT_TIMESTAMP filter on the children just made.
    let ids: Vec<String> = open_shard_ranges(k, &stream.name)
        .await
        .expect("open shards")
        .into_iter()
        .map(|r| r.shard_id)
        .collect();
    let now_secs = now_ms() / 1_000;
    let young = created_within(k, &stream.name, &ids, now_secs, 900)
        .await
        .expect("ListShards with an AT_TIMESTAMP filter answers");
    eprintln!(
        "created_at on {}: {young:?} (now {now_secs})",
        fx.stack.lane
    );
    assert!(young.values().all(|&t| t <= now_secs), "{young:?}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holding_most_of_its_shard_is_refused_handed_to_the_directory_and_salted() {
    let fx =
        fixture!("a_key_holding_most_of_its_shard_is_refused_handed_to_the_directory_and_salted");
    fx.photo_table(Table::Hotkeys).await;
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    let stream = fx.stream("reshard-hot", 2).await;
    let k = &fx.stack.kinesis;
    // 300 writes of p9 and 200 over other keys: p9 holds ≥ 60 % of its shard.
    let p = Producer::start(k.clone(), &stream.name, unpaced())
        .await
        .expect("start");
    for i in 0..500 {
        let key = if i % 5 < 3 {
            "p9".to_owned()
        } else {
            format!("other-{i}")
        };
        p.send(key, vec![b'x'; 40]).await.expect("queued");
    }
    p.shutdown().await.expect("flushed");

    let samples = sample(k, &stream.name, 60, now_ms() + 1_000)
        .await
        .expect("sampled");
    // 500 records in 60 s is under 1 % of a shard: thresholds at the scale of the test.
    let cfg = PlanConfig {
        split_at: 0.004,
        ..PlanConfig::default()
    };
    let planned = plan(&samples, &ReshardState::default(), &cfg, now_ms() / 1_000).expect("plan");
    let hot_shard = open_shard_ranges(k, &stream.name)
        .await
        .expect("open shards")
        .into_iter()
        .find(|r| (r.start..=r.end).contains(&kinesis_hash_key("p9")))
        .expect("p9's shard");
    let row = planned
        .shards
        .iter()
        .find(|s| s.shard_id == hot_shard.shard_id)
        .expect("p9's shard planned");
    assert_eq!(row.action, Action::Refuse, "{row:?}");
    assert!(
        matches!(&row.refusal, Some(Refusal::HotKey { partition_key, .. }) if partition_key == "p9"),
        "{row:?}"
    );
    assert!(
        row.refusal
            .as_ref()
            .is_some_and(|r| r.reason().starts_with("salt it"))
    );
    assert!(
        !planned
            .ops
            .iter()
            .any(|op| matches!(op, Op::Split { start, .. } if *start == hot_shard.start)),
        "no split of p9's shard: {:?}",
        planned.ops
    );

    // apply carries out nothing for the refused shard; the key goes to the directory instead.
    let dir = std::env::temp_dir().join(format!("hs-reshard-{}", stream.name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("journal.json");
    let acfg = ApplyConfig {
        deadline: Duration::from_secs(30),
        poll: Duration::from_millis(100),
        ..ApplyConfig::default()
    };
    apply(k, &stream.name, &path, Some(&planned), &acfg, |_| {})
        .await
        .expect("applied");
    assert_eq!(
        open_shard_ranges(k, &stream.name)
            .await
            .expect("open")
            .len(),
        2,
        "the refused shard was not split"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let controller = Controller::new(directory.clone(), ControllerConfig::default());
    let report = hand_off_hot_keys(&controller, &planned, &cfg, now_ms() / 1_000)
        .await
        .expect("handed off");
    assert_eq!(
        report.applied.iter().map(|c| c.key()).collect::<Vec<_>>(),
        ["p9"]
    );
    let entry = directory
        .get("p9")
        .await
        .expect("read")
        .expect("p9 is in the directory");
    assert_eq!(entry.mode, Mode::Salt);
    assert!(entry.salts.current() >= 2, "{entry:?}");

    // A producer salting from the directory spreads p9 over sub-keys on distinct shards.
    let cached = Arc::new(CachedDirectory::new(directory, Duration::from_millis(200)));
    let config = ProducerConfig {
        salting: Salting::Directory(cached),
        ..unpaced()
    };
    let p = Producer::start(k.clone(), &stream.name, config)
        .await
        .expect("start");
    for i in 0..60 {
        p.send("p9", format!("salted {i}").into_bytes())
            .await
            .expect("queued");
    }
    let report = p.shutdown().await.expect("flushed");
    assert_eq!(report.salted, 60);
    let stored = read_all(k, &stream.name).await;
    let salted: Vec<_> = stored
        .iter()
        .filter(|s| s.data.starts_with(b"salted "))
        .collect();
    assert_eq!(salted.len(), 60);
    let keys: BTreeSet<&str> = salted.iter().map(|s| s.partition_key.as_str()).collect();
    let shards: BTreeSet<&str> = salted.iter().map(|s| s.shard.shard_id.as_str()).collect();
    assert!(keys.len() >= 2 && !keys.contains("p9"), "{keys:?}");
    assert_eq!(shards.len(), 2, "sub-keys on both shards: {shards:?}");
}

/// Records put with an `ExplicitHashKey` (as the producer does for salted keys) land where the
/// key says, not where their partition key hashes; `GetRecords` does not return the explicit key.
/// Here every record goes to shard 0's lower eighth while its partition key hashes into shard 1:
/// the sampled load is counted on the shard the records were read from (shard 0 is hot, shard 1
/// idle), their placement is reported unknown (`unplaced`), and the split falls at shard 0's
/// midpoint instead of a plan that calls the hot shard idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_placed_by_explicit_hash_keys_count_on_the_shard_they_were_read_from() {
    use aws_sdk_kinesis::primitives::Blob;
    use aws_sdk_kinesis::types::PutRecordsRequestEntry;
    let fx =
        fixture!("records_placed_by_explicit_hash_keys_count_on_the_shard_they_were_read_from");
    let stream = fx.stream("explicit", 2).await;
    let k = &fx.stack.kinesis;
    let ranges = open_shard_ranges(k, &stream.name)
        .await
        .expect("open shards");
    assert_eq!(ranges.len(), 2);
    let (first, second) = (&ranges[0], &ranges[1]);
    let eighth = (first.end - first.start) / 8;
    let keys: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|pk| (second.start..=second.end).contains(&kinesis_hash_key(pk)))
        .take(400)
        .collect();
    let entries: Vec<PutRecordsRequestEntry> = keys
        .iter()
        .enumerate()
        .map(|(i, pk)| {
            PutRecordsRequestEntry::builder()
                .partition_key(pk)
                .explicit_hash_key((first.start + (i as u128 % 97) * (eighth / 97)).to_string())
                .data(Blob::new(vec![b'x'; 100]))
                .build()
                .expect("entry")
        })
        .collect();
    let out = k
        .put_records()
        .stream_name(&stream.name)
        .set_records(Some(entries))
        .send()
        .await
        .expect("put");
    assert_eq!(out.failed_record_count(), Some(0));
    assert!(
        out.records()
            .iter()
            .all(|r| r.shard_id() == Some(first.shard_id.as_str())),
        "the explicit hash keys placed every record on shard 0"
    );
    let samples = sample(k, &stream.name, 60, now_ms() + 1_000)
        .await
        .expect("sampled");
    // 400 records in 60 s: lower the threshold to the scale of the test.
    let cfg = PlanConfig {
        split_at: 0.005,
        ..PlanConfig::default()
    };
    let planned = plan(&samples, &ReshardState::default(), &cfg, now_ms() / 1_000).expect("plan");
    let line = |id: &str| {
        planned
            .shards
            .iter()
            .find(|s| s.shard_id == id)
            .expect("planned")
            .clone()
    };
    let hot = line(&first.shard_id);
    let want = 400.0 / 1_000.0 / 60.0;
    assert!((hot.load - want).abs() < 1e-9, "{hot:?}");
    assert!((hot.unplaced - hot.load).abs() < 1e-12, "{hot:?}");
    assert_eq!(hot.action, Action::Split, "{hot:?}");
    assert_eq!(
        hot.split_hash_key,
        Some(first.start + (first.end - first.start) / 2 + 1),
        "placement unknown: the midpoint"
    );
    let idle = line(&second.shard_id);
    assert_eq!((idle.load, idle.action), (0.0, Action::None), "{idle:?}");
}
