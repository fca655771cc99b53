//! Hot counters end to end on a real emulator: the likes API writes durable likes, the
//! aggregator (driven with real Lambda events built from the `liked` table's change stream)
//! flushes conditional absolute totals, and the rebuilder repairs what a crash lost. Every fault
//! ends with the exact count.

use heatsink_integration::PhotoFixture;
use std::time::Duration;

use aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequest,
};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::Method;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::Record;
use heatsink::counter::CounterStore;
use heatsink::lambda::dynamodb_event;
use heatsink_photo_app::rebuild::{Rebuild, RebuildOptions, rebuild};
use heatsink_photo_app::schema::Table;
use heatsink_photo_app::{Aggregator, LikesApi, aggregator};
use heatsink_testkit::{Fixture, fixture, table_stream_records};

async fn setup(fx: &Fixture, posts: &[&str]) -> (LikesApi, Aggregator) {
    for t in [Table::Liked, Table::Counters, Table::Posts] {
        fx.photo_table(t).await;
    }
    for p in posts {
        fx.stack
            .ddb
            .put_item()
            .table_name(fx.photo().table_name(Table::Posts))
            .item("post", AttributeValue::S((*p).into()))
            .send()
            .await
            .expect("post");
    }
    let ddb = fx.stack.ddb.clone();
    let api = LikesApi::new(ddb.clone(), &fx.photo());
    let agg = aggregator(
        CounterStore::new(ddb, fx.photo().table_name(Table::Counters)),
        Some(fx.stack.streams.clone()),
    );
    (api, agg)
}

/// A rebuild that trusts the stream to be drained: no quiet period (the tests flush by hand).
fn settled() -> RebuildOptions {
    RebuildOptions {
        quiet: Duration::ZERO,
    }
}

/// Every record of the `liked` table's stream so far, with the stream ARN.
async fn stream_records(fx: &Fixture, at_least: usize) -> (String, Vec<Record>) {
    table_stream_records(&fx.stack, &fx.photo().table_name(Table::Liked), at_least).await
}

fn request(method: Method, path: &str, user: Option<&str>) -> ApiGatewayV2httpRequest {
    let mut req = ApiGatewayV2httpRequest::default();
    req.raw_path = Some(path.to_owned());
    req.request_context.http.method = method;
    // The user as API Gateway's JWT authorizer hands it over: the verified `sub` claim.
    if let Some(u) = user {
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims.insert("sub".to_owned(), u.to_owned());
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        authorizer.jwt = Some(jwt);
        req.request_context.authorizer = Some(authorizer);
    }
    req
}

fn body(resp: &aws_lambda_events::apigw::ApiGatewayV2httpResponse) -> serde_json::Value {
    match &resp.body {
        Some(Body::Text(t)) => serde_json::from_str(t).expect("json body"),
        other => panic!("expected a JSON body, got {other:?}"),
    }
}

#[tokio::test]
async fn the_api_answers_likes_counts_and_bad_requests_with_the_right_codes() {
    let fx = fixture!("the_api_answers_likes_counts_and_bad_requests_with_the_right_codes");
    let (api, _) = setup(&fx, &["p9"]).await;
    let first = api
        .handle(request(Method::POST, "/posts/p9/likes", Some("u1")))
        .await;
    assert_eq!(first.status_code, 201);
    assert_eq!(body(&first)["result"], "liked");
    let again = api
        .handle(request(Method::POST, "/posts/p9/likes", Some("u1")))
        .await;
    assert_eq!(again.status_code, 200);
    assert_eq!(body(&again)["result"], "already_liked");
    let cases = [
        (request(Method::POST, "/posts/p9/likes", None), 401),
        (request(Method::POST, "/posts/p%20x/likes", Some("u1")), 400),
        (request(Method::POST, "/posts/nope/likes", Some("u1")), 404),
        (request(Method::GET, "/posts/nope", None), 404),
        (request(Method::GET, "/users/u1", None), 404),
        (request(Method::DELETE, "/posts/p9", None), 405),
    ];
    for (req, want) in cases {
        let path = req.raw_path.clone();
        let resp = api.handle(req).await;
        assert_eq!(resp.status_code, want, "{path:?}");
        assert!(body(&resp)["error"].is_string());
    }
    let count = api.handle(request(Method::GET, "/posts/p9", None)).await;
    assert_eq!(
        body(&count)["likes"],
        0,
        "nothing flushed yet: the count is a view"
    );
}

#[tokio::test]
async fn duplicate_batches_lost_acks_and_crashes_never_change_the_final_count() {
    let fx = fixture!("duplicate_batches_lost_acks_and_crashes_never_change_the_final_count");
    let (api, agg) = setup(&fx, &["p9", "p1"]).await;
    for i in 0..30 {
        let post = if i % 3 == 0 { "p1" } else { "p9" };
        api.like(&format!("u{i}"), post).await.expect("like");
    }
    let (arn, records) = stream_records(&fx, 30).await;
    assert_eq!(records.len(), 30);
    // Deliver in three batches; the second is delivered twice (a redelivery), and the first is
    // re-sent after its flush landed (a lost acknowledgement, retried by Lambda).
    let batches: Vec<&[Record]> = records.chunks(10).collect();
    for (i, batch) in batches.iter().enumerate() {
        let event = dynamodb_event(&arn, batch).expect("event");
        let (resp, report) = agg.handle_dynamodb(event.clone()).await;
        assert!(resp.batch_item_failures.is_empty(), "{report:?}");
        if i == 1 {
            let (resp, again) = agg.handle_dynamodb(event).await;
            assert!(resp.batch_item_failures.is_empty());
            assert_eq!(again.flush.counted, 0, "a duplicate batch counts nothing");
        }
    }
    let (_, retried) = agg
        .handle_dynamodb(dynamodb_event(&arn, batches[0]).expect("event"))
        .await;
    assert_eq!(retried.flush.counted, 0);
    // An overlapping redelivery (bisect-on-error halves) counts only what is new: nothing.
    let (_, overlap) = agg
        .handle_dynamodb(dynamodb_event(&arn, &records[5..25]).expect("event"))
        .await;
    assert_eq!(overlap.flush.counted, 0);
    assert_eq!(api.count("p9").await.expect("count"), 20);
    assert_eq!(api.count("p1").await.expect("count"), 10);
    let report = rebuild(&fx.stack.ddb, &fx.photo(), settled())
        .await
        .expect("rebuild");
    assert!(
        report.corrected.is_empty(),
        "nothing to correct: {report:?}"
    );
}

#[tokio::test]
async fn a_crash_before_the_flush_is_repaired_by_the_rebuilder_exactly() {
    let fx = fixture!("a_crash_before_the_flush_is_repaired_by_the_rebuilder_exactly");
    let (api, agg) = setup(&fx, &["p9"]).await;
    for i in 0..12 {
        api.like(&format!("u{i}"), "p9").await.expect("like");
    }
    let (arn, records) = stream_records(&fx, 12).await;
    // The aggregator "crashes" after reading records 0..4 (never flushed), and the stream moves
    // on past them (retention or an operator skipping the batch): only 4..12 are ever flushed.
    let (_, report) = agg
        .handle_dynamodb(dynamodb_event(&arn, &records[4..]).expect("event"))
        .await;
    assert_eq!(report.flush.counted, 8);
    assert_eq!(
        api.count("p9").await.expect("count"),
        8,
        "short by the lost batch"
    );
    let fixed = rebuild(&fx.stack.ddb, &fx.photo(), settled())
        .await
        .expect("rebuild");
    assert_eq!(fixed.corrected.get("p9"), Some(&4));
    assert_eq!(
        api.count("p9").await.expect("count"),
        12,
        "exact after one rebuild"
    );
    let again = rebuild(&fx.stack.ddb, &fx.photo(), settled())
        .await
        .expect("rebuild");
    assert!(
        again.corrected.is_empty(),
        "a second rebuild changes nothing"
    );
}

#[tokio::test]
async fn a_post_still_being_liked_is_left_for_a_later_rebuild_not_mis_corrected() {
    let fx = fixture!("a_post_still_being_liked_is_left_for_a_later_rebuild_not_mis_corrected");
    let (api, agg) = setup(&fx, &["p9", "p1"]).await;
    for i in 0..12 {
        api.like(&format!("u{i}"), "p9").await.expect("like");
    }
    api.like("u0", "p1").await.expect("like");
    let (arn, records) = stream_records(&fx, 13).await;
    let p9: Vec<Record> = records
        .iter()
        .filter(|r| format!("{:?}", r.dynamodb()).contains("\"p9\""))
        .cloned()
        .collect();
    assert_eq!(p9.len(), 12);
    // 8 of p9's likes are flushed; 4 are still in the stream (the aggregator is behind).
    agg.handle_dynamodb(dynamodb_event(&arn, &p9[..8]).expect("event"))
        .await;
    assert_eq!(api.count("p9").await.expect("count"), 8);

    // Within the quiet period nothing is corrected: the 4 in flight are not lost, and a fix of
    // +4 now would count them twice once they are flushed.
    let hour = RebuildOptions {
        quiet: Duration::from_secs(3_600),
    };
    let early = rebuild(&fx.stack.ddb, &fx.photo(), hour)
        .await
        .expect("rebuild");
    assert!(early.corrected.is_empty(), "{early:?}");
    assert_eq!(early.unsettled, ["p1", "p9"]);

    // A flush that lands while a rebuild is counting: the counter moved, so p9 is left alone.
    let run = Rebuild::begin(&fx.stack.ddb, &fx.photo(), settled())
        .await
        .expect("begin");
    agg.handle_dynamodb(dynamodb_event(&arn, &p9[8..]).expect("event"))
        .await;
    let racing = run.finish().await.expect("finish");
    assert_eq!(racing.unsettled, ["p9"], "{racing:?}");
    assert!(!racing.corrected.contains_key("p9"), "{racing:?}");
    assert_eq!(
        racing.corrected.get("p1"),
        Some(&1),
        "p1 was never flushed: repaired"
    );
    assert_eq!(
        api.count("p9").await.expect("count"),
        12,
        "exact, no fix needed"
    );
    assert_eq!(api.count("p1").await.expect("count"), 1);

    // Settled: nothing left to correct, nothing double-counted.
    let after = rebuild(&fx.stack.ddb, &fx.photo(), settled())
        .await
        .expect("rebuild");
    assert!(
        after.corrected.is_empty() && after.unsettled.is_empty(),
        "{after:?}"
    );
    assert_eq!(api.count("p9").await.expect("count"), 12);
}

#[tokio::test]
async fn a_poison_record_is_reported_and_blocks_nothing_before_it() {
    let fx = fixture!("a_poison_record_is_reported_and_blocks_nothing_before_it");
    let (api, agg) = setup(&fx, &["p9"]).await;
    for i in 0..5 {
        api.like(&format!("u{i}"), "p9").await.expect("like");
    }
    let (arn, records) = stream_records(&fx, 5).await;
    let mut event = dynamodb_event(&arn, &records).expect("event");
    // Record 3 loses its `post` attribute (a hand edit, a schema change): it cannot be counted.
    let poisoned = event.records[3]
        .change
        .sequence_number
        .clone()
        .expect("seq");
    event.records[3].change.new_image.remove("post");
    let (resp, report) = agg.handle_dynamodb(event).await;
    let failures: Vec<_> = resp
        .batch_item_failures
        .iter()
        .filter_map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(
        failures,
        [poisoned],
        "Lambda must retry from the bad record"
    );
    assert_eq!(report.flush.counted, 3, "records before it are flushed");
    assert_eq!(api.count("p9").await.expect("count"), 3);
    // Lambda retries from the bad record; once it is readable again the rest count exactly once.
    let (resp, _) = agg
        .handle_dynamodb(dynamodb_event(&arn, &records[3..]).expect("event"))
        .await;
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(api.count("p9").await.expect("count"), 5);
}

#[tokio::test]
async fn likes_over_a_limit_from_the_directory_get_429_and_write_nothing() {
    use std::sync::Arc;

    use heatsink::clock::now_secs;
    use heatsink::hot::Gate;
    use heatsink::hot::guard::{AdmissionConfig, Limit};
    use heatsink::hot::{CachedDirectory, Directory};
    use heatsink::hot::{Change, Entry};

    let fx = fixture!("likes_over_a_limit_from_the_directory_get_429_and_write_nothing");
    let (api, _) = setup(&fx, &["p1", "p2", "p3"]).await;
    fx.photo_table(Table::Hotkeys).await;
    let directory = Directory::from_schema(fx.stack.ddb.clone(), &fx.schema);
    // The bot u9 is limited to 1 like/s by a directory entry; everyone else gets 100/s.
    let entry = Entry::limit(
        "tenant#u9",
        1,
        "abusive tenant",
        now_secs(),
        now_secs() + 600,
    );
    directory
        .apply(&Change::Put {
            entry,
            expected_epoch: None,
        })
        .await
        .expect("limit u9");
    let cached = Arc::new(CachedDirectory::new(directory, Duration::from_secs(5)));
    let gate = Gate::new(
        AdmissionConfig::default().tenant_limit(Limit::per_second(100, 100).expect("limit")),
        Some(cached),
    )
    .expect("gate");
    let api = api.with_gate(gate);
    let first = api
        .handle(request(Method::POST, "/posts/p1/likes", Some("u9")))
        .await;
    assert_eq!(first.status_code, 201);
    let refused = api
        .handle(request(Method::POST, "/posts/p2/likes", Some("u9")))
        .await;
    assert_eq!(refused.status_code, 429, "{:?}", refused.body);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(body(&refused)["retry_after"], 1);
    let other = api
        .handle(request(Method::POST, "/posts/p2/likes", Some("u1")))
        .await;
    assert_eq!(other.status_code, 201, "the limit is u9's alone");
    // Nothing was written for the refused like: u9 has exactly one durable like.
    let u9 = fx
        .stack
        .ddb
        .query()
        .table_name(fx.photo().table_name(Table::Liked))
        .key_condition_expression("#u = :u")
        .expression_attribute_names("#u", "user")
        .expression_attribute_values(":u", AttributeValue::S("u9".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("query");
    assert_eq!(u9.count, 1);
}
