//! The hot-key directory and the mitigation controller on a real emulator: epoch-conditional
//! changes, TTL attribute, bounded-age snapshots that writers use as their salt policy, and a
//! key that turns hot, stays mitigated in the hysteresis band and cools down without flapping.

use heatsink_integration::PhotoFixture;
use std::time::Duration;

use heatsink::detect::Kind;
use heatsink::hot::{CachedDirectory, Controller, ControllerConfig, Directory, DirectoryError};
use heatsink::hot::{Change, Entry, Mode, Signal, Thresholds};
use heatsink::keys::SaltPolicy;
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{Fixture, fixture};

async fn directory(fx: &Fixture) -> Directory {
    fx.photo_table(Table::Hotkeys).await;
    Directory::from_schema(fx.stack.ddb.clone(), &fx.schema)
}

fn write(key: &str, rate: f64) -> Signal {
    Signal::new(key, Kind::Write, rate, 1_000.0, "test")
}

#[tokio::test]
async fn changes_apply_only_on_the_epoch_they_were_decided_from() {
    let fx = fixture!("changes_apply_only_on_the_epoch_they_were_decided_from");
    let dir = directory(&fx).await;
    let entry = Entry::cache("p1", "read-hot", 100, 3_700);
    let create = Change::Put {
        entry: entry.clone(),
        expected_epoch: None,
    };
    dir.apply(&create).await.expect("create");
    assert_eq!(dir.get("p1").await.expect("get"), Some(entry.clone()));
    // A second creator lost the race: typed conflict, nothing overwritten.
    let err = dir.apply(&create).await.expect_err("second create");
    assert!(
        matches!(err, DirectoryError::Conflict { expected: None, .. }),
        "{err}"
    );
    let salted = Entry {
        epoch: 2,
        ..Entry::salt("p1", 4, "write-hot", 100).expect("entry")
    };
    let upgrade = Change::Put {
        entry: salted.clone(),
        expected_epoch: Some(1),
    };
    dir.apply(&upgrade).await.expect("upgrade at epoch 1");
    let stale = dir.apply(&upgrade).await.expect_err("stale epoch");
    assert!(matches!(
        stale,
        DirectoryError::Conflict {
            expected: Some(1),
            ..
        }
    ));
    let stale_remove = Change::Remove {
        key: "p1".into(),
        expected_epoch: 1,
    };
    assert!(dir.apply(&stale_remove).await.is_err());
    assert_eq!(dir.list().await.expect("list"), vec![salted]);
    // The TTL attribute the table declares is the one written.
    let item = fx
        .stack
        .ddb
        .get_item()
        .table_name(dir.table())
        .key(
            "key",
            aws_sdk_dynamodb::types::AttributeValue::S("p1".into()),
        )
        .send()
        .await
        .expect("raw get")
        .item
        .expect("item");
    assert!(
        !item.contains_key("expires_at"),
        "salt entries never expire"
    );
    dir.apply(&Change::Remove {
        key: "p1".into(),
        expected_epoch: 2,
    })
    .await
    .expect("remove at epoch 2");
    assert!(dir.list().await.expect("list").is_empty());
}

#[tokio::test]
async fn a_hand_edited_item_is_reported_not_guessed() {
    let fx = fixture!("a_hand_edited_item_is_reported_not_guessed");
    let dir = directory(&fx).await;
    fx.stack
        .ddb
        .put_item()
        .table_name(dir.table())
        .item(
            "key",
            aws_sdk_dynamodb::types::AttributeValue::S("p7".into()),
        )
        .item(
            "mode",
            aws_sdk_dynamodb::types::AttributeValue::S("shard".into()),
        )
        .send()
        .await
        .expect("put");
    let err = dir.list().await.expect_err("malformed");
    assert!(
        matches!(&err, DirectoryError::Malformed { key, .. } if key == "p7"),
        "{err}"
    );
}

#[tokio::test]
async fn controller_salts_a_hot_key_holds_it_in_the_band_and_cools_down_once() {
    let fx = fixture!("controller_salts_a_hot_key_holds_it_in_the_band_and_cools_down_once");
    let dir = directory(&fx).await;
    let cfg = Thresholds::default();
    let controller = Controller::new(
        dir.clone(),
        ControllerConfig {
            thresholds: cfg.clone(),
            ..ControllerConfig::default()
        },
    );
    let cached = CachedDirectory::new(dir.clone(), Duration::from_millis(200));
    assert_eq!(cached.snapshot().await.expect("empty").salts("p9"), 1);

    let t0 = 1_000;
    let report = controller
        .run(&[write("p9", 2_400.0)], t0)
        .await
        .expect("run");
    assert_eq!(report.applied.len(), 1);
    // Writers see the decision within max_age.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let snap = cached.snapshot().await.expect("snapshot");
    assert_eq!(snap.salts("p9"), 3);
    assert_eq!(snap.write_set("p9").expect("set"), ["p9#0", "p9#1", "p9#2"]);

    // Rates wobbling around the on line and inside the band change nothing: no flapping.
    let mut writes = 0;
    for (i, rate) in [850.0, 790.0, 600.0, 820.0, 510.0, 700.0]
        .into_iter()
        .enumerate()
    {
        let r = controller
            .run(&[write("p9", rate)], t0 + 10 * (i as u64 + 1))
            .await;
        writes += r.expect("run").applied.len();
    }
    assert_eq!(
        writes, 0,
        "nothing written while the key stays at or over off_share"
    );

    // Calm: marked once, then let go after merge_delay (and min_age), to S = 1 draining.
    let calm_at = t0 + 100;
    assert_eq!(
        controller
            .run(&[write("p9", 100.0)], calm_at)
            .await
            .expect("run")
            .applied
            .len(),
        1
    );
    let before = calm_at + cfg.merge_delay - 1;
    assert!(
        controller
            .run(&[], before)
            .await
            .expect("run")
            .applied
            .is_empty()
    );
    let after = controller
        .run(&[], calm_at + cfg.merge_delay)
        .await
        .expect("run");
    assert_eq!(after.applied.len(), 1);
    let p9 = dir
        .get("p9")
        .await
        .expect("get")
        .expect("still there: draining");
    assert_eq!(
        (p9.mode, p9.salts.current(), p9.salts.draining()),
        (Mode::Salt, 1, Some(3))
    );
    assert_eq!(
        p9.epoch, 3,
        "created, marked calm, cooled: three writes in all"
    );
}

#[tokio::test]
async fn a_controller_that_decided_on_a_stale_view_loses_and_redecides() {
    let fx = fixture!("a_controller_that_decided_on_a_stale_view_loses_and_redecides");
    let dir = directory(&fx).await;
    let signals = [write("p9", 4_000.0)];
    // B decided from an empty directory, then A wrote first.
    let stale = heatsink::hot::decide(&signals, &[], 50, &Thresholds::default());
    let a = Controller::new(dir.clone(), ControllerConfig::default());
    assert_eq!(a.run(&signals, 50).await.expect("a").applied.len(), 1);
    let err = dir.apply(&stale[0]).await.expect_err("stale create");
    assert!(matches!(err, DirectoryError::Conflict { .. }), "{err}");
    // B's run re-reads, finds the same decision in place and writes nothing.
    let b = Controller::new(dir.clone(), ControllerConfig::default());
    let rb = b.run(&signals, 51).await.expect("b");
    assert!(rb.applied.is_empty() && rb.conflicts.is_empty(), "{rb:?}");
    let p9 = dir.get("p9").await.expect("get").expect("entry");
    assert_eq!((p9.epoch, p9.salts.current()), (1, 5));
}

#[tokio::test]
async fn a_salted_key_is_drained_only_when_every_sub_key_readers_read_is_empty() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use heatsink::hot::drain;

    let fx = fixture!("a_salted_key_is_drained_only_when_every_sub_key_readers_read_is_empty");
    // Any table keyed by a string partition key holds sub-keys; the directory's own will do.
    let spec = fx.photo_table(Table::Hotkeys).await;
    let (table, attr) = (spec.name.clone(), spec.partition_key.name.clone());
    let entry = Entry::salt("likes#p9", 3, "write-hot", 100).expect("entry");
    let sub_keys = drain::sub_keys_to_verify(&entry).expect("read set");
    assert_eq!(sub_keys, ["likes#p9#0", "likes#p9#1", "likes#p9#2"]);
    let ddb = &fx.stack.ddb;
    let holding = drain::sub_keys_holding_items(ddb, &table, &attr, &sub_keys).await;
    assert!(holding.expect("query").is_empty(), "nothing written yet");
    // One item left under the middle sub-key: the drain is not proven, and it is named.
    fx.stack
        .ddb
        .put_item()
        .table_name(&table)
        .item(&attr, AttributeValue::S("likes#p9#1".into()))
        .send()
        .await
        .expect("put");
    let holding = drain::sub_keys_holding_items(ddb, &table, &attr, &sub_keys).await;
    assert_eq!(holding.expect("query"), ["likes#p9#1"]);
}
