//! Attrition moves (no copy; reads read the tables the slots came from): a delete through the
//! router stays deleted, a long move history with a malformed record does not stop reads of
//! the source, and a later copy move carries the attrition's source along.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use heatsink::slots::{MoveMode, Phase, Router, SlotRange};
use heatsink_testkit::fixture;

use super::{MAX_AGE, SERIAL, Scene, owner_table, raw_version, version};

async fn attrition_to_b(s: &Scene, old: &[String]) -> heatsink::slots::mover::MoveRecord {
    for k in old {
        let ack = s
            .router
            .put_versioned(k, 1, HashMap::new())
            .await
            .expect("put before");
        assert_eq!(ack.owner, s.a);
    }
    let spec = heatsink::slots::mover::MoveSpec {
        mode: MoveMode::Attrition,
        ..s.spec(false)
    };
    let mut m = s.start_spec(spec).await;
    m.run().await.expect("attrition move").clone()
}

fn old_keys(tag: &str) -> Vec<String> {
    (0..4).map(|i| format!("{{t0}}{tag}-{i}")).collect()
}

/// A delete of an item the source still holds (attrition copies nothing) is a versioned
/// tombstone on the target: the router's read of both sides keeps the tombstone, so the item
/// stays deleted until it is written again.
#[tokio::test]
async fn a_delete_during_an_attrition_move_stays_deleted() {
    let fx = fixture!("a_delete_during_an_attrition_move_stays_deleted");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let old = old_keys("old");
    let record = attrition_to_b(&s, &old).await;
    assert_eq!(record.phase, Phase::Done);
    let reader = Router::new(s.ddb.clone(), s.dir.clone(), MAX_AGE);
    let (owner, item) = reader.get_key(&old[0]).await.expect("read");
    assert_eq!((owner.as_str(), version(&item)), (s.b.as_str(), Some(1)));
    let ack = reader.delete_key(&old[0], 2).await.expect("delete");
    assert_eq!(ack.owner, s.b);
    assert_eq!(
        raw_version(&s.ddb, &s.a, &old[0]).await,
        Some(1),
        "the source keeps it"
    );
    for _ in 0..2 {
        let (_, item) = reader.get_key(&old[0]).await.expect("read after delete");
        assert_eq!(item, None, "the deleted item came back from the source");
        reader.invalidate().await;
    }
    // Deleting again at the same version is the same write (a retry), and a newer put wins.
    reader.delete_key(&old[0], 2).await.expect("delete again");
    reader
        .put_versioned(&old[0], 3, HashMap::new())
        .await
        .expect("put after delete");
    let (_, item) = reader.get_key(&old[0]).await.expect("read");
    assert_eq!(version(&item), Some(3));
    // The other items still read through to the source.
    let (_, item) = reader.get_key(&old[1]).await.expect("read");
    assert_eq!(version(&item), Some(1));
}

/// 1,200 finished moves in the history (past one 1 MB Query page) and one record edited into
/// nonsense: routers still read the attrition move's source for its slots.
#[tokio::test]
async fn twelve_hundred_old_move_records_and_a_malformed_one_leave_attrition_reads_reading_the_source()
 {
    let fx = fixture!(
        "twelve_hundred_old_move_records_and_a_malformed_one_leave_attrition_reads_reading_the_source"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let old = old_keys("hist");
    let record = attrition_to_b(&s, &old).await;
    let mut template = record.clone();
    template.mode = MoveMode::Copy;
    template.slots = SlotRange::single(0).expect("slot 0");
    let requests: Vec<WriteRequest> = (0..1_200)
        .map(|i| {
            let mut r = template.clone();
            r.id = format!("mv-0-old{i:05}");
            r.created_ms = i;
            let json = serde_json::to_string(&r).expect("json");
            (r.id, json)
        })
        .chain([("mv-0-garbled".to_owned(), "{not a record".to_owned())])
        .map(|(id, json)| {
            let put = PutRequest::builder()
                .item("pk", AttributeValue::S("move".into()))
                .item("sk", AttributeValue::S(id))
                .item("record", AttributeValue::S(json))
                .item("phase", AttributeValue::S("done".into()))
                .item("rev", AttributeValue::N("9".into()))
                .build()
                .expect("put");
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    for chunk in requests.chunks(25) {
        let mut pending = chunk.to_vec();
        while !pending.is_empty() {
            let out = s
                .ddb
                .batch_write_item()
                .request_items(s.dir.table(), pending)
                .send()
                .await
                .expect("history");
            pending = out
                .unprocessed_items()
                .and_then(|m| m.get(s.dir.table()))
                .cloned()
                .unwrap_or_default();
        }
    }
    let list = s.dir.moves().await.expect("moves");
    assert_eq!(list.records.len(), 1_201);
    assert_eq!(list.malformed.len(), 1);
    let reader = Router::new(s.ddb.clone(), s.dir.clone(), MAX_AGE);
    for k in &old {
        let (owner, item) = reader.get_key(k).await.expect("read");
        assert_eq!(owner, s.b);
        assert_eq!(version(&item), Some(1), "{k} read through to the source");
    }
}

/// A copy move of slots an attrition move brought to their owner: the attrition's source
/// still holds items nobody copied. The copy carries them along, so after it they read from
/// the new owner alone, and its cleanup deletes them from the old source too.
#[tokio::test]
async fn a_copy_move_of_an_attrition_range_carries_the_old_source_along() {
    let fx = fixture!("a_copy_move_of_an_attrition_range_carries_the_old_source_along");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let c = owner_table(&fx, "c").await;
    let old = old_keys("carry");
    attrition_to_b(&s, &old).await;
    // A newer version written after the attrition flip lands on b; the older one stays on a.
    s.router.invalidate().await;
    s.router
        .put_versioned(&old[1], 2, HashMap::new())
        .await
        .expect("newer on b");
    let mut spec = s.spec(false);
    spec.to = c.clone();
    let mut m = s.start_spec(spec).await;
    assert_eq!(m.record().carried, vec![s.a.clone()]);
    m.run().await.expect("copy move");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let reader = Router::new(s.ddb.clone(), s.dir.clone(), MAX_AGE);
    for (i, k) in old.iter().enumerate() {
        let (owner, item) = reader.get_key(k).await.expect("read");
        assert_eq!(owner, c);
        let want = if i == 1 { 2 } else { 1 };
        assert_eq!(version(&item), Some(want), "{k}");
        assert_eq!(
            raw_version(&s.ddb, &c, k).await,
            Some(want),
            "{k} is on {c}"
        );
        assert_eq!(
            raw_version(&s.ddb, &s.a, k).await,
            None,
            "{k} left on {}",
            s.a
        );
    }
}
