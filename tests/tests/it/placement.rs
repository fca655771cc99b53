//! Kinesis placement against kinesis-mock: the predicted shard of every chosen salt is the shard
//! Kinesis actually puts the record on, and the chosen salts spread a hot key evenly.

use aws_sdk_kinesis::primitives::Blob;
use heatsink::keys::{explicit_hash_keys, kinesis_hash_key, place_salts, shard_for};
use heatsink::kinesis::open_shard_ranges;
use heatsink_testkit::fixture;

#[tokio::test]
async fn chosen_salts_land_exactly_where_predicted_and_spread_evenly() {
    let fx = fixture!("chosen_salts_land_exactly_where_predicted_and_spread_evenly");
    let stream = fx.stream("placement", 4).await;
    let k = &fx.stack.kinesis;
    let shards = open_shard_ranges(k, &stream.name)
        .await
        .expect("shard ranges");
    assert_eq!(shards.len(), 4);
    let placed = place_salts("p9", 8, &shards).expect("placement");
    assert_eq!(placed.per_shard, [2, 2, 2, 2]);
    for sub in &placed.sub_keys {
        let put = k
            .put_record()
            .stream_name(&stream.name)
            .partition_key(&sub.partition_key)
            .data(Blob::new("like"))
            .send()
            .await
            .expect("put");
        assert_eq!(
            put.shard_id(),
            shards[sub.shard].shard_id,
            "{}",
            sub.partition_key
        );
        assert_eq!(
            shard_for(kinesis_hash_key(&sub.partition_key), &shards),
            Some(sub.shard)
        );
    }
}

#[tokio::test]
async fn explicit_hash_keys_override_the_partition_keys_hash() {
    let fx = fixture!("explicit_hash_keys_override_the_partition_keys_hash");
    let stream = fx.stream("explicit", 4).await;
    let k = &fx.stack.kinesis;
    let shards = open_shard_ranges(k, &stream.name)
        .await
        .expect("shard ranges");
    for ehk in explicit_hash_keys(&shards, 4).expect("hash keys") {
        let put = k
            .put_record()
            .stream_name(&stream.name)
            .partition_key("p9")
            .explicit_hash_key(ehk.as_decimal())
            .data(Blob::new("like"))
            .send()
            .await
            .expect("put");
        assert_eq!(put.shard_id(), shards[ehk.shard].shard_id);
    }
}
