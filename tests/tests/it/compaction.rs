//! Compaction of closed writers' sub-keys (`heatsink::counter::CounterStore::compact`) on the
//! local stack: a counter with three closed (retired) stream-shard writers and one open writer
//! is folded into `settled` (tombstones first, deleted after the grace), its read never moves,
//! its item count drops, a replay of a closed shard's last batch is refused by the tombstone,
//! and a retry of each step is a no-op.
//!
//! Time is scaled down: a 1.5 s tombstone grace instead of the 24 h stream retention, and 1 ms
//! buckets keeping 1 (so the grace is not raised to the buckets' kept span).

use heatsink_integration::PhotoFixture;
use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::counter::compact::CompactReport;
use heatsink::counter::{BucketSpec, CounterKey, CounterStore, Deltas, Seq, WriterId};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{Fixture, fixture};

const GRACE: Duration = Duration::from_millis(1_500);

fn store(fx: &Fixture) -> CounterStore {
    CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters))
        .with_buckets(BucketSpec::new(1, 1).expect("spec"))
}

/// Records `first..first + n` of `writer` for `key`, each +1, flushed.
async fn flush(store: &CounterStore, key: &CounterKey, writer: &WriterId, first: u64, n: u64) {
    let mut batch = Deltas::new();
    for seq in first..first + n {
        batch
            .add_record(key.clone(), Seq::from(seq), 1)
            .expect("record");
    }
    store.flush(writer, &batch).await.expect("flush");
}

/// The sort keys of the counter's partition.
async fn sort_keys(fx: &Fixture, key: &CounterKey) -> Vec<String> {
    let out = fx
        .stack
        .ddb
        .query()
        .table_name(fx.photo().table_name(Table::Counters))
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(key.pk()))
        .consistent_read(true)
        .send()
        .await
        .expect("query");
    out.items()
        .iter()
        .filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned())
        .collect()
}

#[tokio::test]
async fn closed_writers_are_folded_into_settled_without_moving_the_read() {
    let fx = fixture!("closed_writers_are_folded_into_settled_without_moving_the_read");
    fx.photo_table(Table::Counters).await;
    let counters = store(&fx);
    let key = CounterKey::new("likes", "p9").expect("key");
    let shard = |i: u32| WriterId::new(format!("shardId-0000000{i}")).expect("writer");
    // Three rolled-over shards (5, 7 and 9 likes) and the open one (4 likes), plus a fix of -2.
    for (i, n) in [(1, 5), (2, 7), (3, 9), (4, 4)] {
        flush(&counters, &key, &shard(i), 100, n).await;
    }
    counters.correct(&key, 23).await.expect("fix");
    assert_eq!(counters.read(&key).await.expect("read").total(), 23);
    // The aggregator retires a shard once its child delivers; the compactor reads those marks.
    for i in 1..=3 {
        counters.retire("likes", &shard(i)).await.expect("retire");
    }
    let closed: BTreeSet<WriterId> = counters
        .progress("likes")
        .await
        .expect("progress")
        .into_iter()
        .filter(|m| m.retired)
        .map(|m| m.writer)
        .collect();
    assert_eq!(closed.len(), 3);
    let before = sort_keys(&fx, &key).await;
    assert_eq!(before.len(), 5, "{before:?}");

    // Step 1: fold. The three totals move to `settled`, their items become tombstones.
    let fold = counters
        .compact(&key, &closed, GRACE)
        .await
        .expect("compact");
    assert_eq!((fold.folded, fold.reaped, fold.settled_gain), (3, 0, 21));
    let sum = counters.read(&key).await.expect("read");
    assert_eq!((sum.total(), sum.settled(), sum.writers()), (23, 21, 4));
    assert_eq!(sort_keys(&fx, &key).await.len(), 6, "tombstones + settled");
    // A retry finds tombstones: nothing to do.
    let retry = counters.compact(&key, &closed, GRACE).await.expect("retry");
    assert_eq!(
        retry,
        CompactReport {
            items_before: 6,
            ..CompactReport::default()
        }
    );
    // A closed shard's last batch delivered again reads its tombstone: already applied.
    let mut replay = Deltas::new();
    for seq in 100..109 {
        replay
            .add_record(key.clone(), Seq::from(seq), 1)
            .expect("record");
    }
    let replayed = counters.flush(&shard(3), &replay).await.expect("replay");
    assert_eq!((replayed.writes, replayed.already_applied), (0, 1));
    assert_eq!(counters.read(&key).await.expect("read").total(), 23);

    // Step 2: after the grace, the tombstones are reaped.
    tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
    let reap = counters.compact(&key, &closed, GRACE).await.expect("reap");
    assert_eq!((reap.folded, reap.reaped, reap.settled_gain), (0, 3, 0));
    let mut after = sort_keys(&fx, &key).await;
    after.sort();
    assert_eq!(after, ["fix", "settled", "w#shardId-00000004"]);
    assert_eq!(counters.read(&key).await.expect("read").total(), 23);
    let again = counters.compact(&key, &closed, GRACE).await.expect("again");
    assert_eq!((again.folded, again.reaped, again.items_before), (0, 0, 3));

    // The open writer carries on, counted once on top of `settled`.
    flush(&counters, &key, &shard(4), 104, 3).await;
    assert_eq!(counters.read(&key).await.expect("read").total(), 26);
}

/// The scheduled repair with `RepairOptions::compact`: the posts it checks are compacted over
/// the writers the watermarks mark retired, and the counted part of the read does not move
/// (the repair's own bucket corrections change only `fix`).
#[tokio::test]
async fn the_repair_run_compacts_the_posts_it_checks_over_retired_writers() {
    let fx = fixture!("the_repair_run_compacts_the_posts_it_checks_over_retired_writers");
    for t in [Table::Liked, Table::Counters] {
        fx.photo_table(t).await;
    }
    let spec = BucketSpec::new(1_000, 30).expect("spec");
    let counters = CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters))
        .with_buckets(spec);
    let key = CounterKey::new("likes", "p9").expect("key");
    let shard = |i: u32| WriterId::new(format!("shardId-0000000{i}")).expect("writer");
    let now = heatsink::clock::now_ms();
    let at = spec.start_of(now) - 3_000;
    for (i, n) in [(1u32, 3u64), (2, 4), (3, 5)] {
        let mut batch = Deltas::new();
        for seq in 1..=n {
            batch
                .add_record_at(key.clone(), Seq::from(seq), 1, Some(at + seq))
                .expect("record");
        }
        counters.flush(&shard(i), &batch).await.expect("flush");
    }
    counters
        .record_progress("likes", &shard(3), now + 60_000, None)
        .await
        .expect("progress");
    for i in [1, 2] {
        counters.retire("likes", &shard(i)).await.expect("retire");
    }
    let before = counters.read(&key).await.expect("read");
    let recount = heatsink_photo_app::rebuild::liked_bucket_recount(&fx.stack.ddb, &fx.photo());
    let options = heatsink::counter::repair::RepairOptions {
        buckets: spec,
        start_at: Some(at - 2_000),
        settle: Duration::ZERO,
        lease: Duration::from_secs(30),
        holder: "test".into(),
        insert_only: true,
        compact: Some(heatsink::counter::compact::STREAM_RETENTION),
        ..heatsink::counter::repair::RepairOptions::default()
    };
    let report = heatsink::counter::repair::Repair::new(&counters, "likes", &recount, options)
        .run()
        .await
        .expect("repair");
    assert_eq!(
        (report.posts_checked, report.compacted),
        (1, 2),
        "{report:?}"
    );
    let after = counters.read(&key).await.expect("read");
    assert_eq!((after.settled(), after.writers()), (7, 5));
    assert_eq!(after.without_fix(), before.without_fix());
}
