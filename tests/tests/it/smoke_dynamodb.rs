//! The DynamoDB lane works: typed conditional failures, transaction cancellation reasons, GSIs
//! and the change stream behave as heatsink relies on.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use heatsink_integration::PhotoFixture;
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{fixture, table_stream_records};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

#[tokio::test]
async fn a_conditional_write_on_an_existing_item_is_rejected_with_a_typed_error() {
    let fx = fixture!("a_conditional_write_on_an_existing_item_is_rejected_with_a_typed_error");
    let liked = fx.photo_table(Table::Liked).await;
    let put = || {
        fx.stack
            .ddb
            .put_item()
            .table_name(&liked.name)
            .item("user", s("u1"))
            .item("post", s("p9"))
            .condition_expression("attribute_not_exists(#u)")
            .expression_attribute_names("#u", "user")
    };
    put().send().await.expect("first like is written");
    let err = put()
        .send()
        .await
        .expect_err("a repeated like must be rejected");
    let service = err
        .as_service_error()
        .expect("a service error, not a transport one");
    assert!(
        service.is_conditional_check_failed_exception(),
        "expected ConditionalCheckFailedException, got {service:?}"
    );
}

#[tokio::test]
async fn a_cancelled_transaction_reports_a_reason_per_item() {
    let fx = fixture!("a_cancelled_transaction_reports_a_reason_per_item");
    let counters = fx.photo_table(Table::Counters).await;
    let ddb = &fx.stack.ddb;
    ddb.put_item()
        .table_name(&counters.name)
        .item("pk", s("likes#p9"))
        .item("sk", s("w#a"))
        .send()
        .await
        .expect("seed item");
    let put = |sk: &str| {
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(&counters.name)
                    .item("pk", s("likes#p9"))
                    .item("sk", s(sk))
                    .condition_expression("attribute_not_exists(pk)")
                    .build()
                    .expect("valid put"),
            )
            .build()
    };
    let err = ddb
        .transact_write_items()
        .transact_items(put("w#b"))
        .transact_items(put("w#a"))
        .send()
        .await
        .expect_err("the second put must cancel the transaction");
    let service = err.into_service_error();
    let reasons: Vec<String> = match &service {
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(t) => t
            .cancellation_reasons()
            .iter()
            .map(|r| r.code().unwrap_or("").to_owned())
            .collect(),
        other => panic!("expected TransactionCanceledException, got {other:?}"),
    };
    assert_eq!(reasons, ["None", "ConditionalCheckFailed"]);
    let untouched = ddb
        .get_item()
        .table_name(&counters.name)
        .key("pk", s("likes#p9"))
        .key("sk", s("w#b"))
        .send()
        .await
        .expect("get");
    assert!(
        untouched.item.is_none(),
        "a cancelled transaction must write nothing"
    );
}

#[tokio::test]
async fn a_gsi_query_returns_one_index_shard_in_sort_key_order() {
    let fx = fixture!("a_gsi_query_returns_one_index_shard_in_sort_key_order");
    let posts = fx.photo_table(Table::Posts).await;
    let ddb = &fx.stack.ddb;
    for (post, shard, at) in [
        ("p1", "nova#0", "2026-01-03"),
        ("p2", "nova#1", "2026-01-01"),
        ("p3", "nova#0", "2026-01-01"),
        ("p4", "nova#0", "2026-01-02"),
    ] {
        ddb.put_item()
            .table_name(&posts.name)
            .item("post", s(post))
            .item("creator_shard", s(shard))
            .item("created_at", s(at))
            .send()
            .await
            .expect("put post");
    }
    let gsi = posts.gsis[0].name.as_str();
    let out = ddb
        .query()
        .table_name(&posts.name)
        .index_name(gsi)
        .key_condition_expression("creator_shard = :c")
        .expression_attribute_values(":c", s("nova#0"))
        .send()
        .await
        .expect("GSI query");
    let got: Vec<&str> = out
        .items()
        .iter()
        .filter_map(|i| {
            i.get("post")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
        })
        .collect();
    assert_eq!(got, ["p3", "p4", "p1"]);
}

#[tokio::test]
async fn the_liked_tables_change_stream_carries_each_new_like() {
    let fx = fixture!("the_liked_tables_change_stream_carries_each_new_like");
    let liked = fx.photo_table(Table::Liked).await;
    let ddb = &fx.stack.ddb;
    for user in ["u1", "u2", "u3"] {
        ddb.put_item()
            .table_name(&liked.name)
            .item("user", s(user))
            .item("post", s("p9"))
            .send()
            .await
            .expect("put like");
    }
    let (_, records) = table_stream_records(&fx.stack, &liked.name, 3).await;
    let users: Vec<String> = records
        .iter()
        .filter_map(|r| r.dynamodb()?.keys()?.get("user")?.as_s().ok().cloned())
        .collect();
    let mut users = users;
    users.sort();
    assert_eq!(users, ["u1", "u2", "u3"]);
}
