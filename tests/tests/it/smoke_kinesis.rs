//! The Kinesis lane works: records round-trip, and a split shows its lineage.

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ShardIteratorType;
use heatsink_testkit::{eventually, fixture};

#[tokio::test]
async fn a_put_record_is_read_back_from_its_shard() {
    let fx = fixture!("a_put_record_is_read_back_from_its_shard");
    let stream = fx.stream("smoke", 1).await;
    let k = &fx.stack.kinesis;
    let put = k
        .put_record()
        .stream_name(&stream.name)
        .partition_key("p9")
        .data(Blob::new("like u1"))
        .send()
        .await
        .expect("put record");
    let it = k
        .get_shard_iterator()
        .stream_name(&stream.name)
        .shard_id(put.shard_id())
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator
        .expect("an open shard has an iterator");
    let recs = k
        .get_records()
        .shard_iterator(it)
        .send()
        .await
        .expect("get records");
    let rec = recs.records().first().expect("the record");
    assert_eq!(rec.partition_key(), Some("p9"));
    assert_eq!(rec.data().as_ref(), b"like u1");
    assert_eq!(rec.sequence_number(), put.sequence_number());
}

#[tokio::test]
async fn a_split_shard_closes_its_parent_and_names_it_in_both_children() {
    let fx = fixture!("a_split_shard_closes_its_parent_and_names_it_in_both_children");
    let stream = fx.stream("split", 1).await;
    let k = &fx.stack.kinesis;
    let parent = k
        .list_shards()
        .stream_name(&stream.name)
        .send()
        .await
        .expect("list shards")
        .shards()[0]
        .shard_id()
        .to_owned();
    let midpoint = (u128::MAX / 2).to_string();
    k.split_shard()
        .stream_name(&stream.name)
        .shard_to_split(&parent)
        .new_starting_hash_key(&midpoint)
        .send()
        .await
        .expect("split");
    let shards = eventually("the split to finish", Duration::from_secs(10), || async {
        let shards = k
            .list_shards()
            .stream_name(&stream.name)
            .send()
            .await
            .ok()?
            .shards;
        let shards = shards?;
        (shards.len() == 3).then_some(shards)
    })
    .await;
    let closed = shards
        .iter()
        .find(|s| s.shard_id() == parent)
        .expect("parent listed");
    assert!(
        closed
            .sequence_number_range()
            .and_then(|r| r.ending_sequence_number())
            .is_some(),
        "the parent must be closed"
    );
    let children: Vec<_> = shards.iter().filter(|s| s.shard_id() != parent).collect();
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(c.parent_shard_id(), Some(parent.as_str()));
    }
    let starts: Vec<&str> = children
        .iter()
        .filter_map(|c| c.hash_key_range().map(|r| r.starting_hash_key()))
        .collect();
    assert!(
        starts.contains(&"0") && starts.contains(&midpoint.as_str()),
        "{starts:?}"
    );
}
