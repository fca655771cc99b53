//! Scatter-gather against a real DynamoDB emulator: merged pagination over a write-sharded GSI
//! is indistinguishable from paging one sorted list, and bad tokens are refused.

use heatsink_integration::PhotoFixture;
use std::collections::HashSet;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use heatsink::scatter::{FanOut, Item, MergedQuery, ScatterError, batch_get};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::fixture;
use rand::{Rng, SeedableRng, rngs::StdRng};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// Writes `n` posts of creator `nova` spread over `shards` GSI shards; returns
/// `(created_at, shard, post)` per post. Timestamps repeat across shards (ties) but never within
/// one shard, so the expected global order is fully determined.
async fn seed_posts(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    shards: usize,
    n: usize,
    rng: &mut StdRng,
) -> Vec<(String, usize, String)> {
    let mut used: Vec<HashSet<u32>> = vec![HashSet::new(); shards];
    let mut rows = vec![];
    for i in 0..n {
        let shard = rng.random_range(0..shards);
        let mut t = rng.random_range(0..(n as u32));
        while !used[shard].insert(t) {
            t = rng.random_range(0..(n as u32 * 4));
        }
        rows.push((format!("2026-01-01T{t:06}"), shard, format!("post-{i:04}")));
    }
    for chunk in rows.chunks(25) {
        let writes: Vec<WriteRequest> = chunk
            .iter()
            .map(|(at, shard, post)| {
                let put = PutRequest::builder()
                    .item("post", s(post))
                    .item("creator_shard", s(&format!("nova#{shard}")))
                    .item("created_at", s(at))
                    .build()
                    .expect("valid put");
                WriteRequest::builder().put_request(put).build()
            })
            .collect();
        ddb.batch_write_item()
            .request_items(table, writes)
            .send()
            .await
            .expect("seed posts");
    }
    rows.sort();
    rows
}

fn gsi_query(table: &str, shards: usize) -> MergedQuery {
    MergedQuery::gsi(
        table,
        "by-creator",
        "creator_shard",
        "created_at",
        (0..shards).map(|n| format!("nova#{n}")).collect(),
        &["post"],
    )
}

fn post_of(item: &Item) -> String {
    item.get("post")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn paging_a_16_way_sharded_gsi_matches_one_sorted_list_exactly() {
    let fx = fixture!("paging_a_16_way_sharded_gsi_matches_one_sorted_list_exactly");
    let posts = fx.photo_table(Table::Posts).await;
    let mut rng = StdRng::seed_from_u64(16);
    let expected: Vec<String> = seed_posts(&fx.stack.ddb, &posts.name, 16, 300, &mut rng)
        .await
        .into_iter()
        .map(|(_, _, p)| p)
        .collect();
    let query = gsi_query(&posts.name, 16);
    for round in 0..3 {
        let mut got = vec![];
        let mut token: Option<String> = None;
        loop {
            let limit = rng.random_range(1..40);
            let page = query
                .page(&fx.stack.ddb, limit, token.as_deref())
                .await
                .expect("page");
            assert!(page.items.len() <= limit, "limit {limit} exceeded");
            if page.next.is_some() {
                assert_eq!(page.items.len(), limit, "only the last page may be short");
            }
            got.extend(page.items.iter().map(post_of));
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(
            got, expected,
            "round {round}: merged pages differ from the sorted list"
        );
    }
}

#[tokio::test]
async fn descending_pages_over_8_shards_are_the_reverse_order() {
    let fx = fixture!("descending_pages_over_8_shards_are_the_reverse_order");
    let posts = fx.photo_table(Table::Posts).await;
    let mut rng = StdRng::seed_from_u64(8);
    let mut expected: Vec<(String, usize, String)> =
        seed_posts(&fx.stack.ddb, &posts.name, 8, 120, &mut rng).await;
    // Descending: newest first; ties across shards still go to the lower shard first.
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let expected: Vec<String> = expected.into_iter().map(|(_, _, p)| p).collect();
    let query = gsi_query(&posts.name, 8)
        .descending(true)
        .fan_out(FanOut::sequential());
    let mut got = vec![];
    let mut token: Option<String> = None;
    loop {
        let page = query
            .page(&fx.stack.ddb, 7, token.as_deref())
            .await
            .expect("page");
        got.extend(page.items.iter().map(post_of));
        match page.next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_token_for_another_query_or_edited_by_hand_is_refused() {
    let fx = fixture!("a_token_for_another_query_or_edited_by_hand_is_refused");
    let posts = fx.photo_table(Table::Posts).await;
    let mut rng = StdRng::seed_from_u64(4);
    seed_posts(&fx.stack.ddb, &posts.name, 4, 20, &mut rng).await;
    let page = gsi_query(&posts.name, 4)
        .page(&fx.stack.ddb, 5, None)
        .await
        .expect("page");
    let token = page.next.expect("20 rows make more than one page of 5");
    let other = gsi_query(&posts.name, 8)
        .page(&fx.stack.ddb, 5, Some(&token))
        .await;
    assert!(
        matches!(
            other,
            Err(ScatterError::Token(
                heatsink::scatter::merge::TokenError::OtherQuery
            ))
        ),
        "{other:?}"
    );
    let mut edited = token.clone().into_bytes();
    let mid = edited.len() / 2;
    edited[mid] = if edited[mid] == b'x' { b'y' } else { b'x' };
    let edited = String::from_utf8(edited).expect("ascii");
    let refused = gsi_query(&posts.name, 4)
        .page(&fx.stack.ddb, 5, Some(&edited))
        .await;
    assert!(
        matches!(
            refused,
            Err(ScatterError::Token(
                heatsink::scatter::merge::TokenError::Malformed(_)
            ))
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn batch_get_reads_every_key_of_a_salted_counter() {
    let fx = fixture!("batch_get_reads_every_key_of_a_salted_counter");
    let counters = fx.photo_table(Table::Counters).await;
    let ddb = &fx.stack.ddb;
    for n in 0..8 {
        ddb.put_item()
            .table_name(&counters.name)
            .item("pk", s(&format!("likes#p9#{n}")))
            .item("sk", s("total"))
            .item("total", AttributeValue::N((n * 10).to_string()))
            .send()
            .await
            .expect("put");
    }
    let keys: Vec<Item> = (0..8)
        .map(|n| {
            Item::from([
                ("pk".into(), s(&format!("likes#p9#{n}"))),
                ("sk".into(), s("total")),
            ])
        })
        .collect();
    let items = batch_get(ddb, &counters.name, keys, Default::default())
        .await
        .expect("batch get");
    assert_eq!(items.len(), 8);
    assert_eq!(heatsink::scatter::sum_counter(&items, "total"), 280);
}
