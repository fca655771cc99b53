//! A directory of ordered keying (`slots init --keying ordered:<alphabet>`): geohash cells as
//! keys, so a slot range is a key interval — here the `9q` cell (the San Francisco Bay Area)
//! — moved live from `a` to `b` under a load on two cities, killed at every persisted phase,
//! with every acknowledged write read back (`verify`) and the other city untouched.

use heatsink::slots::Keying;

use super::*;

const GEOHASH: &str = "0123456789bcdefghjkmnpqrstuvwxyz";

/// Writes `keys` keys `<prefix><i>` (no tenant tag: the keys' own order) through `router`.
fn city_load(router: Router, prefix: &str, keys: u64) -> Load {
    start_load_spec(
        router,
        LoadSpec {
            keys,
            prefix: prefix.into(),
            tenants: None,
            rate: 8.0,
            duration: Duration::from_secs(600),
            max_in_flight: 8,
        },
    )
}

/// Owner tables `a` and `b` and a directory of geohash keying on `a`: the moving client, `a`,
/// `b`, the directory and its keying.
async fn geo_directory(
    fx: &Fixture,
) -> (
    aws_sdk_dynamodb::Client,
    String,
    String,
    SlotDirectory,
    Keying,
) {
    let ddb = move_ddb(fx);
    let (a, b) = (owner_table(fx, "a").await, owner_table(fx, "b").await);
    let spec = fx.schema.table(Table::Slots);
    fx.track_table(&spec.name);
    schema::ensure_table(&fx.stack.ddb, &spec)
        .await
        .expect("directory table");
    let dir = SlotDirectory::new(ddb.clone(), spec.name);
    let keying = Keying::ordered(GEOHASH).expect("alphabet");
    let map = dir
        .init_keyed(&a, MAX_AGE, false, keying.clone())
        .await
        .expect("init");
    assert_eq!(map.keying, keying);
    (ddb, a, b, dir, keying)
}

/// A move of `slots` to `to` in `mode`, started (not stepped) by a fresh controller.
async fn start_move(
    fx: &Fixture,
    ddb: &aws_sdk_dynamodb::Client,
    dir: &SlotDirectory,
    slots: SlotRange,
    to: &str,
    mode: MoveMode,
) -> Mover {
    Mover::start_with(
        ddb.clone(),
        fx.stack.streams.clone(),
        dir.clone(),
        MoveSpec {
            slots,
            to: to.to_owned(),
            mode,
            strict: false,
            budget: budget(),
        },
        limits(),
    )
    .await
    .expect("start")
}

#[tokio::test]
async fn an_ordered_directory_moves_a_geohash_interval_live_killed_at_every_phase_and_loses_no_write()
 {
    let fx = fixture!(
        "an_ordered_directory_moves_a_geohash_interval_live_killed_at_every_phase_and_loses_no_write"
    );
    let _serial = SERIAL.lock().await;
    let (ddb, a, b, dir, keying) = geo_directory(&fx).await;
    // Initializing again with another keying is refused: it is fixed for the directory's life.
    assert!(matches!(
        dir.init(&a, MAX_AGE, false).await,
        Err(MoveError::AlreadyInitialized { .. })
    ));
    assert_eq!(dir.load().await.expect("map").keying, keying);
    let router = Router::new(ddb.clone(), dir.clone(), MAX_AGE);

    // The `9q` cell is one interval of slots: every key starting with `9q`, and nothing else.
    let bay = SlotRange::new(keying.slot_of("9q"), keying.slot_of("9qzzzzzz")).expect("range");
    assert_eq!(bay.last - bay.first, 15, "a 2-symbol cell is 16 slots");
    let in_bay = |k: &str| bay.contains(keying.slot_of(k));
    assert!(in_bay("9q8yyk") && in_bay("9qh0") && !in_bay("9r00") && !in_bay("9pzz"));

    let sf = city_load(router.clone(), "9q8yy", 12);
    let oslo = city_load(router.clone(), "u4pru", 12);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mover = start_move(&fx, &ddb, &dir, bay, &b, MoveMode::Copy).await;
    assert_eq!(mover.record().keying, keying, "the record keeps the keying");
    let id = mover.record().id.clone();
    // Killed right after the start: its lease runs out and the next controller takes over.
    drop(mover);
    // Each step in a fresh controller opened from the persisted record: a kill at every phase.
    let mut phases = vec![];
    loop {
        let mut m = Mover::open_with(
            ddb.clone(),
            fx.stack.streams.clone(),
            dir.clone(),
            &id,
            limits(),
        )
        .await
        .expect("open");
        if m.record().phase.is_final() {
            break;
        }
        phases.push(held!(m.step().await).expect("step"));
    }
    assert_eq!(phases.last(), Some(&Phase::Done), "{phases:?}");
    // The copy found the interval's rows by their order (the diff had nothing to make up).
    let rec = Mover::open_with(
        ddb.clone(),
        fx.stack.streams.clone(),
        dir.clone(),
        &id,
        limits(),
    )
    .await
    .expect("open")
    .record()
    .clone();
    assert!(rec.copied > 0, "{rec:?}");
    assert!(rec.diff.as_ref().is_some_and(|d| d.clean()), "{rec:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, sf_acks) = sf.finish(&router).await;
    let (_, oslo_acks) = oslo.finish(&router).await;

    // San Francisco's keys were acknowledged by `a` before the flip and `b` after it; Oslo's
    // only by `a`.
    assert!(sf_acks.iter().all(|x| in_bay(&x.key)));
    assert!(sf_acks.iter().any(|x| x.owner == a) && sf_acks.iter().any(|x| x.owner == b));
    assert!(oslo_acks.iter().all(|x| x.owner == a && !in_bay(&x.key)));
    let map = dir.load().await.expect("map");
    assert_eq!(map.entry_of(keying.slot_of("9q8yy0")).owner, b);
    assert_eq!(map.entry_of(keying.slot_of("u4pru0")).owner, a);
    // The interval's rows live on `b` only; `a` keeps Oslo's and the fence items.
    let keys_of = |table: String| {
        let ddb = fx.stack.ddb.clone();
        async move {
            ddb.scan()
                .table_name(table)
                .send()
                .await
                .expect("scan")
                .items()
                .iter()
                .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()).cloned())
                .filter(|pk| !pk.starts_with("#heatsink/"))
                .collect::<Vec<_>>()
        }
    };
    let (on_a, on_b) = (keys_of(a.clone()).await, keys_of(b.clone()).await);
    assert!(on_a.iter().all(|k| !in_bay(k)) && on_a.iter().any(|k| k.starts_with("u4pru")));
    assert!(
        !on_b.is_empty() && on_b.iter().all(|k| in_bay(k)),
        "{on_b:?}"
    );
}

/// An attrition move (no copy) of the `9q` interval of an ordered directory: the router reads
/// the interval's old rows through to the source, writes to the target only, and a delete of a
/// row the source still holds stays deleted; the rest of the key order stays on the source.
#[tokio::test]
async fn an_attrition_move_of_an_ordered_interval_reads_its_source_and_writes_its_target() {
    let fx =
        fixture!("an_attrition_move_of_an_ordered_interval_reads_its_source_and_writes_its_target");
    let _serial = SERIAL.lock().await;
    let (ddb, a, b, dir, keying) = geo_directory(&fx).await;
    let router = Router::new(ddb.clone(), dir.clone(), MAX_AGE);
    let bay = SlotRange::new(keying.slot_of("9q"), keying.slot_of("9qzzzzzz")).expect("range");
    let sf: Vec<String> = (0..4).map(|i| format!("9q8yy{i}")).collect();
    for k in sf.iter().chain([&"u4pru0".to_owned()]) {
        let ack = router
            .put_versioned(k, 1, HashMap::new())
            .await
            .expect("put before");
        assert_eq!(ack.owner, a);
    }
    let mut mover = start_move(&fx, &ddb, &dir, bay, &b, MoveMode::Attrition).await;
    let record = mover.run().await.expect("attrition move").clone();
    assert_eq!(record.phase, Phase::Done);
    assert_eq!(record.keying, keying, "the record keeps the keying");
    assert_eq!(record.copied, 0, "attrition copies nothing: {record:?}");

    let reader = Router::new(ddb.clone(), dir.clone(), MAX_AGE);
    // An old row of the interval is read through to the source, from the target's slot.
    let (owner, item) = reader.get_key(&sf[0]).await.expect("read");
    assert_eq!((owner.as_str(), version(&item)), (b.as_str(), Some(1)));
    // A write lands on the target only.
    let ack = reader
        .put_versioned(&sf[1], 2, HashMap::new())
        .await
        .expect("put after");
    assert_eq!(ack.owner, b);
    assert_eq!(raw_version(&fx.stack.ddb, &b, &sf[1]).await, Some(2));
    assert_eq!(raw_version(&fx.stack.ddb, &a, &sf[1]).await, Some(1));
    let (_, item) = reader.get_key(&sf[1]).await.expect("read after put");
    assert_eq!(version(&item), Some(2), "the target's newer write wins");
    // A delete of a row the source still holds stays deleted.
    reader.delete_key(&sf[2], 2).await.expect("delete");
    assert_eq!(raw_version(&fx.stack.ddb, &a, &sf[2]).await, Some(1));
    let (_, item) = reader.get_key(&sf[2]).await.expect("read after delete");
    assert_eq!(item, None, "the deleted row came back from the source");
    // Outside the interval nothing changed: Oslo is still the source's.
    let (owner, item) = reader.get_key("u4pru0").await.expect("read oslo");
    assert_eq!((owner.as_str(), version(&item)), (a.as_str(), Some(1)));
}
