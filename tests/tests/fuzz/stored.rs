//! Decoders of what other writers store or send: hot-key directory items and move records
//! (DynamoDB items, read through mocked GetItem answers), sampler reports (EventBridge events
//! to the controller), and the likes API's paths and bodies (API Gateway requests).

use std::collections::HashMap;

use aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequest,
};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::Method;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
use aws_sdk_dynamodb::operation::query::QueryOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use heatsink::hot::{Directory, DirectoryError, Trigger};
use heatsink::slots::{MoveError, SlotDirectory};
use heatsink_photo_app::api::{LikesApi, MAX_PATH_BYTES};
use heatsink_photo_app::schema::Schema;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{fuzz, meter};

type Item = HashMap<String, AttributeValue>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A DynamoDB client whose every GetItem answers `item`.
fn answering(item: Item) -> aws_sdk_dynamodb::Client {
    let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(move || {
        GetItemOutput::builder()
            .set_item(Some(item.clone()))
            .build()
    });
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&get])
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A value for a number attribute: a number, a junk number, or another type.
fn number() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        20 => (0u64..200).prop_map(|n| AttributeValue::N(n.to_string())),
        1 => Just(AttributeValue::N("1e999".into())),
        1 => Just(AttributeValue::N("-3".into())),
        1 => Just(s("7")),
    ]
}

/// A hot-key directory item, sometimes damaged.
fn directory_item() -> impl Strategy<Value = Item> {
    (
        "[a-z0-9#]{0,12}",
        prop_oneof![5 => Just("cache"), 5 => Just("salt"), 5 => Just("limit"), 1 => Just("boil")],
        number(),
        number(),
        "\\PC{0,40}",
        proptest::option::of(number()),
        proptest::bool::weighted(0.9),
    )
        .prop_map(|(key, mode, salts, epoch, reason, limit, with_since)| {
            let mut item = Item::from([
                ("key".to_owned(), s(&key)),
                ("mode".to_owned(), s(mode)),
                ("salts".to_owned(), salts),
                ("epoch".to_owned(), epoch),
                ("reason".to_owned(), s(&reason)),
            ]);
            if with_since {
                item.insert("since".into(), AttributeValue::N("1".into()));
            }
            if let Some(limit) = limit {
                item.insert("limit_per_second".into(), limit);
            }
            item
        })
}

#[test]
fn a_directory_item_is_an_entry_or_malformed_naming_its_key() {
    let rt = runtime();
    let tally = fuzz("hot-key directory items", directory_item(), |item, t| {
        let key = match item.get("key") {
            Some(AttributeValue::S(k)) => k.clone(),
            _ => String::new(),
        };
        let dir = Directory::new(answering(item), "hotkeys");
        match rt.block_on(dir.get(&key)) {
            Ok(entry) => {
                t.accept();
                prop_assert!(entry.is_some());
            }
            Err(e @ DirectoryError::Malformed { .. }) => {
                prop_assert!(e.to_string().contains(&key));
                t.refuse(&e);
            }
            Err(e) => prop_assert!(false, "not a decoding error: {e}"),
        }
        Ok(())
    });
    assert!(
        tally.accepted > 0 && tally.refused.contains_key("Malformed"),
        "{tally:?}"
    );
}

/// A stored move item: its `record` attribute is JSON text of any shape, or absent, or not a
/// string.
fn move_item() -> impl Strategy<Value = Item> {
    let record = prop_oneof![
        3 => json_value().prop_map(|v| Some(s(&v.to_string()))),
        1 => "\\PC{0,80}".prop_map(|t| Some(s(&t))),
        1 => Just(Some(AttributeValue::N("1".into()))),
        1 => Just(None),
    ];
    record.prop_map(|record| {
        let mut item = Item::from([("pk".to_owned(), s("#move")), ("sk".to_owned(), s("mv-1"))]);
        if let Some(r) = record {
            item.insert("record".into(), r);
        }
        item
    })
}

/// Any JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn a_move_record_of_any_shape_is_refused_as_malformed_naming_the_move() {
    let rt = runtime();
    let tally = fuzz("move records", move_item(), |item, t| {
        let dir = SlotDirectory::new(answering(item), "slots");
        match rt.block_on(dir.move_record("mv-1")) {
            Ok(_) => t.accept(),
            Err(e @ MoveError::Malformed { .. }) => {
                prop_assert!(e.to_string().contains("mv-1"), "{e}");
                t.refuse(&e);
            }
            Err(e) => prop_assert!(false, "not a decoding error: {e}"),
        }
        Ok(())
    });
    assert!(tally.refused.contains_key("Malformed"), "{tally:?}");
}

/// A sampler report as the controller receives it, sometimes hostile.
fn sampler_event() -> impl Strategy<Value = Value> {
    let hot = (
        "[a-z0-9]{1,8}",
        prop_oneof![60 => "[a-z0-9#]{1,20}", 1 => (1_000usize..3_000).prop_map(|n| "k".repeat(n)), 1 => Just(String::new())],
        prop_oneof![30 => Just("read"), 30 => Just("write"), 1 => Just("sideways")],
        prop_oneof![60 => (0.0f64..1e6).prop_map(Value::from), 1 => Just(json!("fast")), 1 => Just(json!(-1.0))],
    )
        .prop_map(|(partition, key, kind, estimate)| {
            json!({"partition": partition, "key": key, "kind": kind, "estimate": estimate,
                   "lower_bound": 1.0, "error_bound": 0.0, "share_of_ceiling": 0.5,
                   "share_of_partition": 0.5, "certain": true,
                   "sampled": {"count": 3, "error": 5}})
        });
    let detail = prop_oneof![
        4 => proptest::collection::vec(hot, 0..20).prop_map(|hot| json!({"partitions": [], "hot": hot})),
        1 => json_value(),
    ];
    (detail, prop_oneof![4 => Just("heatsink.sampler"), 1 => Just("aws.events")]).prop_map(
        |(detail, source)| json!({"source": source, "detail-type": "heatsink hot-key report", "detail": detail}),
    )
}

/// What `Trigger::parse` may hold for an event of `n` bytes of JSON: a copy of the detail and
/// the report decoded from it, at most 16 × the event.
fn trigger_bound(n: usize) -> usize {
    16 * n + 4_096
}

#[test]
fn a_sampler_report_is_a_trigger_or_a_bad_event() {
    let tally = fuzz("sampler reports", sampler_event(), |event, t| {
        let size = event.to_string().len();
        let (parsed, peak) = meter::measure(|| Trigger::parse(&event));
        t.allocated(peak, size, trigger_bound(size))?;
        match parsed {
            Ok(_) => t.accept(),
            Err(e) => {
                prop_assert!(!e.to_string().contains('\n'), "{e}");
                t.refuse(&e);
            }
        }
        Ok(())
    });
    assert!(tally.accepted > 0 && !tally.refused.is_empty(), "{tally:?}");
}

/// A request to the likes API: any method, a path that routes or not (some over the bound),
/// claims or none, a body that is never read.
fn request() -> impl Strategy<Value = ApiGatewayV2httpRequest> {
    (
        prop_oneof![Just(Method::GET), Just(Method::POST), Just(Method::DELETE)],
        prop_oneof![
            3 => "[a-zA-Z0-9_.-]{1,20}".prop_map(|p| format!("/posts/{p}/likes")),
            2 => "[a-zA-Z0-9_.-]{1,20}".prop_map(|p| format!("/posts/{p}")),
            1 => "\\PC{0,200}",
            1 => (MAX_PATH_BYTES..20_000).prop_map(|n| format!("/posts/{}", "p".repeat(n))),
            1 => (1usize..2_000).prop_map(|n| "/".repeat(n)),
        ],
        proptest::option::of("\\PC{0,140}"),
        proptest::option::of("\\PC{0,2000}"),
    )
        .prop_map(|(method, path, user, body)| {
            let mut req = ApiGatewayV2httpRequest::default();
            req.request_context.http.method = method;
            req.raw_path = Some(path);
            req.body = body;
            if let Some(user) = user {
                let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
                jwt.claims.insert("sub".into(), user);
                let mut authorizer = ApiGatewayRequestAuthorizer::default();
                authorizer.jwt = Some(jwt);
                req.request_context.authorizer = Some(authorizer);
            }
            req
        })
}

#[test]
fn every_request_gets_a_known_status_and_a_bounded_json_answer() {
    let rt = runtime();
    let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| {
        GetItemOutput::builder()
            .item("post", AttributeValue::S("p9".into()))
            .build()
    });
    let query =
        mock!(aws_sdk_dynamodb::Client::query).then_output(|| QueryOutput::builder().build());
    let put =
        mock!(aws_sdk_dynamodb::Client::put_item).then_output(|| PutItemOutput::builder().build());
    let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&get, &query, &put]);
    let api = LikesApi::new(ddb, &Schema::default());
    let tally = fuzz("likes API requests", request(), |req, t| {
        let long = req
            .raw_path
            .as_ref()
            .is_some_and(|p| p.len() > MAX_PATH_BYTES);
        let calls = get.num_calls() + query.num_calls() + put.num_calls();
        let resp = rt.block_on(api.handle(req));
        let status = resp.status_code;
        prop_assert!(
            [200, 201, 400, 401, 404, 405, 429, 500].contains(&status),
            "{status}"
        );
        let Some(Body::Text(body)) = &resp.body else {
            return Err(TestCaseError::fail("no JSON body"));
        };
        prop_assert!(body.len() <= 1_024, "{} bytes of answer", body.len());
        prop_assert!(serde_json::from_str::<Value>(body).is_ok());
        if long {
            prop_assert_eq!(status, 404);
            prop_assert_eq!(get.num_calls() + query.num_calls() + put.num_calls(), calls);
        }
        if status < 300 {
            t.accept();
        } else {
            t.refuse(&status);
        }
        Ok(())
    });
    assert!(tally.accepted > 0 && tally.refused.len() >= 3, "{tally:?}");
}
