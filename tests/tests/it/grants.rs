//! Grants derived from calls: each function's handler runs with an SDK interceptor
//! (`heatsink_testkit::calls`) on every client it is given, over the paths it takes in
//! production, and the (action, resource) pairs it called must be exactly the function's `calls`
//! in `infra/grants.json` — which the CDK test (`infra/cdk/test/grants.test.ts`) and the
//! Terraform test (`infra/terraform/tests/test_grants.py`) compare with each role's grants. A
//! call nobody granted and a grant nobody calls both fail somewhere in that chain.
//!
//! DynamoDB and DynamoDB Streams run on the emulator. Contributor Insights (DescribeTable's GSI
//! list, DescribeContributorInsights) and CloudWatch GetInsightRuleReport are answered by
//! aws-smithy-mocks (no emulator implements them; shapes from the AWS API reference), with the
//! same recording interceptor on those clients: the `smithy_mock_` part of the controller test.

use heatsink_integration::PhotoFixture;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ApiGatewayV2httpRequest, ApiGatewayV2httpResponse,
};
use aws_lambda_events::http::Method;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use heatsink::counter::CounterStore;
use heatsink::detect::{SAMPLER_DETAIL_TYPE, SAMPLER_SOURCE};
use heatsink::hot::ControllerConfig;
use heatsink::hot::Gate;
use heatsink::hot::guard::{AdmissionConfig, Limit};
use heatsink::hot::{CachedDirectory, Controller, Directory};
use heatsink::insights::Insights;
use heatsink::lambda::dynamodb_event;
use heatsink_photo_app::schema::Table;
use heatsink_photo_app::{LikesApi, aggregator};
use heatsink_testkit::calls::{Call, CallLog};
use heatsink_testkit::{Fixture, fixture, sampled_hot_key, table_stream_records};
use serde_json::{Value, json};

const TABLES: [Table; 6] = [
    Table::Liked,
    Table::Counters,
    Table::Hotkeys,
    Table::Leases,
    Table::Posts,
    Table::Autopilot,
];

/// `infra/grants.json`, parsed.
fn grants_json() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/grants.json");
    let text = std::fs::read_to_string(&path).expect("infra/grants.json");
    serde_json::from_str(&text).expect("grants.json is JSON")
}

/// `infra/grants.json`'s `calls` of `function` that `keep` keeps, as `action resource`.
fn entries(function: &str, keep: impl Fn(&Value) -> bool) -> BTreeSet<String> {
    grants_json()["calls"][function]
        .as_array()
        .unwrap_or_else(|| panic!("grants.json has no calls for {function}"))
        .iter()
        .filter(|g| keep(g))
        .map(|g| {
            format!(
                "{} {}",
                g["action"].as_str().unwrap(),
                g["resource"].as_str().unwrap()
            )
        })
        .collect()
}

/// `infra/grants.json`'s `calls` of `function` that apply to `mode` (`action resource`), with
/// the calls granted only to an acting autopilot (`"act": true`) when `act`.
fn manifest(function: &str, mode: &str, act: bool) -> BTreeSet<String> {
    entries(function, |g| {
        g.get("modes")
            .and_then(Value::as_array)
            .is_none_or(|m| m.iter().any(|x| x == mode))
            && (act || g.get("act").and_then(Value::as_bool) != Some(true))
    })
}

/// `infra/grants.json`'s calls of `function` that only a path a recording run may not take
/// makes (`"path"`: why), as `action resource`.
fn path_only(function: &str) -> BTreeSet<String> {
    entries(function, |g| g.get("path").is_some())
}

/// A recorded call in the manifest's logical terms: `table/<t>`, `table/<t>/stream`,
/// `insight-rule/DynamoDBContributorInsights-<K>-<prefix><t>-*`.
fn logical(fx: &Fixture, call: &Call) -> String {
    let prefix = fx.prefix();
    let name_of = |physical: &str| -> Option<&'static str> {
        TABLES.into_iter().find_map(|t| {
            (fx.photo().table_name(t) == physical).then(|| {
                let logical = fx.photo().table_name(t);
                Box::leak(logical[prefix.len()..].to_owned().into_boxed_str()) as &'static str
            })
        })
    };
    let r = &call.resource;
    let resource = if *r == fx.photo().like_events().name {
        "stream/like-events".to_owned()
    } else if *r == format!("{prefix}stream-failures") {
        "queue/stream-failures".to_owned()
    } else if let Some(t) = name_of(r) {
        format!("table/{t}")
    } else if let Some((table, index)) = r.split_once("/index/")
        && let Some(t) = name_of(table)
    {
        format!("table/{t}/index/{index}")
    } else if let Some((_, rest)) = r.split_once(":table/")
        && let Some((table, _)) = rest.split_once("/stream/")
        && let Some(t) = name_of(table)
    {
        format!("table/{t}/stream")
    } else if let Some(rest) = r.strip_prefix("DynamoDBContributorInsights-")
        && let Some((kind, table_and_time)) = rest.split_once('-')
        && let Some((table, time)) = table_and_time.rsplit_once('-')
        && time.chars().all(|c| c.is_ascii_digit())
        && let Some(t) = name_of(table)
    {
        format!("insight-rule/DynamoDBContributorInsights-{kind}-<prefix>{t}-*")
    } else {
        format!("UNKNOWN:{r}")
    };
    format!("{} {resource}", call.action)
}

fn assert_calls(fx: &Fixture, log: &CallLog, function: &str, mode: &str) {
    assert_calls_as(fx, log, function, mode, false);
}

/// [`assert_calls`] for a function that may act (`act`: the autopilot switched on).
fn assert_calls_as(fx: &Fixture, log: &CallLog, function: &str, mode: &str, act: bool) {
    let recorded: BTreeSet<String> = log.calls().iter().map(|c| logical(fx, c)).collect();
    let want = manifest(function, mode, act);
    let ungranted: Vec<_> = recorded.difference(&want).collect();
    let uncalled: Vec<_> = want.difference(&recorded).collect();
    assert!(
        ungranted.is_empty() && uncalled.is_empty(),
        "{function} ({mode}): called but not in infra/grants.json: {ungranted:?}; \
         in infra/grants.json but never called: {uncalled:?}"
    );
}

/// The stream's lineage as `heatsink::counter::lineage::for_stream_arn` builds it for the
/// functions (`HEATSINK_SOURCE_ARN`), its client recording into `log`: ListShards of the
/// `like-events` stream (`kinesis`), DescribeStream of `liked`'s stream (`dynamodb-streams`).
async fn lineage(
    fx: &Fixture,
    log: &CallLog,
    mode: &str,
) -> std::sync::Arc<dyn heatsink::counter::lineage::ShardListing> {
    use heatsink::counter::lineage::LineageCache;
    if mode == "kinesis" {
        let conf = aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build();
        std::sync::Arc::new(LineageCache::new(heatsink::stream::KinesisSource::new(
            aws_sdk_kinesis::Client::from_conf(conf),
            fx.photo().like_events().name,
        )))
    } else {
        let conf = aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build();
        std::sync::Arc::new(LineageCache::new(
            heatsink::stream::DynamoDbStreamsSource::new(
                aws_sdk_dynamodbstreams::Client::from_conf(conf),
                liked_stream_arn(fx).await,
            ),
        ))
    }
}

/// `liked`'s `LatestStreamArn`.
async fn liked_stream_arn(fx: &Fixture) -> String {
    fx.stack
        .ddb
        .describe_table()
        .table_name(fx.photo().table_name(Table::Liked))
        .send()
        .await
        .expect("describe liked")
        .table
        .and_then(|t| t.latest_stream_arn)
        .expect("liked has a stream")
}

fn ddb(fx: &Fixture, log: &CallLog) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(&fx.stack.config)
        .interceptor(log.interceptor())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

fn signed(method: Method, path: &str, sub: &str) -> ApiGatewayV2httpRequest {
    let mut req = ApiGatewayV2httpRequest::default();
    req.raw_path = Some(path.to_owned());
    req.request_context.http.method = method;
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims.insert("sub".to_owned(), sub.to_owned());
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    req.request_context.authorizer = Some(authorizer);
    req
}

async fn post(fx: &Fixture, post: &str) {
    fx.stack
        .ddb
        .put_item()
        .table_name(fx.photo().table_name(Table::Posts))
        .item("post", AttributeValue::S(post.into()))
        .send()
        .await
        .expect("post");
}

/// likes-api as the Lambda builds it: admission over the cached directory, then the like, then
/// a count read.
async fn likes_api(fx: &Fixture) {
    let log = CallLog::new();
    let client = ddb(fx, &log);
    let directory = CachedDirectory::new(
        Directory::from_schema(client.clone(), &fx.schema),
        Duration::from_secs(5),
    );
    let gate = Gate::new(
        AdmissionConfig::default().tenant_limit(Limit::per_second(10, 20).expect("limit")),
        Some(std::sync::Arc::new(directory)),
    )
    .expect("gate");
    let api = LikesApi::new(client, &fx.photo()).with_gate(gate);
    let responses: Vec<ApiGatewayV2httpResponse> = vec![
        api.handle(signed(Method::POST, "/posts/p9/likes", "u1"))
            .await,
        api.handle(signed(Method::POST, "/posts/p9/likes", "u1"))
            .await,
        api.handle(signed(Method::GET, "/posts/p9", "u1")).await,
        api.handle(signed(Method::POST, "/posts/nope/likes", "u1"))
            .await,
    ];
    let codes: Vec<i64> = responses.iter().map(|r| r.status_code).collect();
    assert_eq!(codes, [201, 200, 200, 404]);
    assert_calls(fx, &log, "likes-api", "kinesis");
}

/// The same changes as Kinesis Data Streams for DynamoDB delivers them (each record's data is
/// the change as JSON), so the aggregator's Kinesis path runs too.
fn kinesis_event(dynamodb: &Value, table: &str) -> KinesisEvent {
    let records: Vec<Value> = dynamodb["Records"]
        .as_array()
        .expect("records")
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let change = json!({"awsRegion": "us-east-1", "eventID": r["eventID"], "eventName": r["eventName"],
                "userIdentity": null, "recordFormat": "application/json", "tableName": table,
                "dynamodb": r["dynamodb"], "eventSource": "aws:dynamodb"});
            let seq = format!("4962{i:07}");
            json!({"eventSource": "aws:kinesis", "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"), "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::000000000000:role/aggregator", "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/heatsink-like-events",
                "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "k", "sequenceNumber": seq,
                    "approximateArrivalTimestamp": 1.7e9,
                    "data": base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&change).expect("json"))}})
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("Kinesis event")
}

/// likes-aggregator over both sources, each with a fresh counters table state.
async fn likes_aggregator(fx: &Fixture) {
    let (arn, records) =
        table_stream_records(&fx.stack, &fx.photo().table_name(Table::Liked), 1).await;
    let event = dynamodb_event(&arn, &records).expect("event");
    for mode in ["dynamodb-streams", "kinesis"] {
        let log = CallLog::new();
        let streams_conf = aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build();
        // With its lineage, as the function runs with `HEATSINK_SOURCE_ARN` (both stacks set it).
        let agg = aggregator(
            CounterStore::new(ddb(fx, &log), fx.photo().table_name(Table::Counters)),
            Some(aws_sdk_dynamodbstreams::Client::from_conf(streams_conf)),
        )
        .with_lineage(lineage(fx, &log, mode).await);
        if mode == "dynamodb-streams" {
            let (resp, _) = agg.handle_dynamodb(event.clone()).await;
            assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
        } else {
            let value = serde_json::to_value(&event).expect("event json");
            let kinesis = kinesis_event(&value, &fx.photo().table_name(Table::Liked));
            let (resp, _) = agg.handle_kinesis(kinesis).await;
            assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
        }
        assert_calls(fx, &log, "likes-aggregator", mode);
    }
}

/// count-rebuilder (the incremental repair, as the function runs it, compaction on and the
/// lineage of `mode`'s source as the stacks deploy it) over a post whose counter is one like
/// short, so the run corrects (and writes) its bucket's fix, and which a retired shard also
/// counted, so the run folds that shard's sub-key (`TransactWriteItems`: UpdateItem twice on
/// counters). The writer that counted is the source's one listed shard, so the run is not
/// blocked. `fx`: a fixture of its own per mode (the run's cursor is the counters table's).
async fn count_rebuilder(fx: &Fixture, mode: &str) {
    let now = heatsink::clock::now_ms();
    let spec = heatsink::counter::BucketSpec::default();
    // Two minutes back: closed whatever the watermarks the aggregator test left say.
    let at = spec.start_of(now).saturating_sub(2 * spec.width_ms());
    for user in ["u2", "u3", "u4"] {
        fx.stack
            .ddb
            .put_item()
            .table_name(fx.photo().table_name(Table::Liked))
            .item("user", AttributeValue::S(user.into()))
            .item("post", AttributeValue::S("p10".into()))
            .item("liked_at", AttributeValue::N(at.to_string()))
            .item(
                heatsink_photo_app::schema::POST_SHARD,
                AttributeValue::S(
                    heatsink_photo_app::schema::post_shard("p10", user).expect("post id"),
                ),
            )
            .send()
            .await
            .expect("a like");
    }
    // The aggregator counted one of the two likes and is past them.
    let setup = CounterStore::new(fx.stack.ddb.clone(), fx.photo().table_name(Table::Counters));
    // The source's one shard, listed outside the recorded calls.
    let listed = lineage(fx, &CallLog::new(), mode)
        .await
        .list(0)
        .await
        .expect("the source's shards")
        .shards;
    let [shard] = listed.as_slice() else {
        panic!("{mode}: one shard expected, listed {listed:?}");
    };
    let writer = heatsink::counter::WriterId::new(&shard.shard_id).expect("writer");
    let mut deltas = heatsink::counter::Deltas::new();
    deltas
        .add_record_at(
            heatsink::counter::CounterKey::new("likes", "p10").expect("key"),
            heatsink::counter::Seq::from(1),
            1,
            Some(at),
        )
        .expect("delta");
    setup.flush(&writer, &deltas).await.expect("flush");
    setup
        .record_progress("likes", &writer, now + 3_600_000, None)
        .await
        .expect("progress");
    // A parent shard that counted another like and is closed: its child delivered.
    let parent = heatsink::counter::WriterId::new("shardId-000000000001-parent").expect("writer");
    setup.flush(&parent, &deltas).await.expect("flush");
    setup.retire("likes", &parent).await.expect("retire");
    let log = CallLog::new();
    let lineage = lineage(fx, &log, mode).await;
    let client = ddb(fx, &log);
    let counters = CounterStore::new(client.clone(), fx.photo().table_name(Table::Counters));
    let recount = heatsink_photo_app::rebuild::liked_bucket_recount(&client, &fx.photo());
    let options = heatsink::counter::repair::RepairOptions {
        insert_only: true,
        settle: Duration::ZERO,
        compact: Some(heatsink::counter::compact::STREAM_RETENTION),
        // The sweep, as the function runs it for likes (a Scan page of the counters table).
        sweep: 200,
        ..heatsink::counter::repair::RepairOptions::default()
    };
    // The function drains stream-failures first: one parked batch of the source, read back
    // (GetShardIterator, GetRecords), its checks saved, its message deleted.
    let url = parked_batch_queued(fx, mode, &shard.shard_id, at).await;
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build(),
    );
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build(),
    );
    let streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .interceptor(log.interceptor())
            .build(),
    );
    let mapper = heatsink_photo_app::mapper::LikeMapper;
    let redrive = heatsink::counter::redrive::Redrive::new(&mapper, "likes", spec)
        .with_kinesis(kinesis)
        .with_streams(streams);
    let requester =
        heatsink::counter::repair::Repair::new(&counters, "likes", &recount, options.clone());
    let rows = redrive
        .drain(&sqs, &url, 10, &requester)
        .await
        .expect("drain");
    assert!(
        rows.len() == 1 && rows.iter().all(|r| r.saved() && r.checks == 1),
        "{mode}: {rows:?}"
    );
    let report =
        heatsink_photo_app::rebuild::repair(&counters, &recount, options, lineage.as_ref())
            .await
            .expect("repair");
    assert_eq!(report.corrected.get("p10"), Some(&1), "{report:?}");
    assert_eq!(
        report.compacted, 1,
        "the retired shard was folded: {report:?}"
    );
    assert_calls(fx, &log, "count-rebuilder", mode);
}

/// A parked batch of `mode`'s source (one like of p10 by u2 at `at` on `shard`) in a
/// `<prefix>stream-failures` queue, as the aggregator's mapping parks it; returns the queue's URL.
/// Made with unrecorded clients.
async fn parked_batch_queued(fx: &Fixture, mode: &str, shard: &str, at: u64) -> String {
    use heatsink::counter::{ParkedBatch, ParkedSource, Seq};
    let (source, arn, seq) = if mode == "kinesis" {
        let change = json!({"awsRegion": "us-east-1", "eventID": "e1", "eventName": "INSERT",
            "recordFormat": "application/json", "eventSource": "aws:dynamodb",
            "tableName": fx.photo().table_name(Table::Liked),
            "dynamodb": {"ApproximateCreationDateTime": at,
                "Keys": {"user": {"S": "u2"}, "post": {"S": "p10"}},
                "NewImage": {"user": {"S": "u2"}, "post": {"S": "p10"}, "liked_at": {"N": at.to_string()}}}});
        let name = fx.photo().like_events().name;
        let put = fx
            .stack
            .kinesis
            .put_record()
            .stream_name(&name)
            .partition_key("p10")
            .data(aws_sdk_kinesis::primitives::Blob::new(change.to_string()))
            .send()
            .await
            .expect("put");
        assert_eq!(put.shard_id, shard, "the stream's one shard");
        (
            ParkedSource::Kinesis,
            format!("arn:aws:kinesis:us-east-1:000000000000:stream/{name}"),
            put.sequence_number,
        )
    } else {
        let (arn, records) =
            table_stream_records(&fx.stack, &fx.photo().table_name(Table::Liked), 1).await;
        let seq = records
            .first()
            .and_then(|r| r.dynamodb())
            .and_then(|c| c.sequence_number())
            .expect("a record")
            .to_owned();
        (ParkedSource::DynamoDbStreams, arn, seq)
    };
    let seq = Seq::parse(&seq).expect("seq");
    let parked = ParkedBatch {
        source,
        stream_arn: arn,
        shard_id: shard.to_owned(),
        start_seq: seq.clone(),
        end_seq: seq,
        batch_size: 1,
        first_arrival_ms: None,
        condition: None,
    };
    let sqs = aws_sdk_sqs::Client::new(&fx.stack.config);
    let url = sqs
        .create_queue()
        .queue_name(format!("{}stream-failures", fx.prefix()))
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    sqs.send_message()
        .queue_url(&url)
        .message_body(parked.to_record().to_string())
        .send()
        .await
        .expect("park");
    url
}

/// hotkey-controller: a sampler report salts a key (Scan + PutItem), the schedule reads
/// Contributor Insights (mocked), and a later schedule past the cool-down removes the entry
/// (DeleteItem).
async fn smithy_mock_hotkey_controller(fx: &Fixture) {
    use aws_sdk_cloudwatch::operation::get_insight_rule_report::GetInsightRuleReportOutput;
    use aws_sdk_dynamodb::operation::describe_contributor_insights::DescribeContributorInsightsOutput;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::types::{ContributorInsightsStatus, TableDescription};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    let log = CallLog::new();
    let counters = fx.photo().table_name(Table::Counters);
    // What DynamoDB lists for a table with a sort key in ACCESSED_AND_THROTTLED_KEYS mode.
    let rules: Vec<String> = ["PKC", "PKT", "SKC", "SKT"]
        .iter()
        .map(|k| format!("DynamoDBContributorInsights-{k}-{counters}-1700000000000"))
        .collect();
    let table = counters.clone();
    // The table's GSIs as the schema creates them: the controller reads each index's rules too.
    let gsis: Vec<String> = fx
        .photo()
        .table(Table::Counters)
        .gsis
        .iter()
        .map(|g| g.name.clone())
        .collect();
    let describe = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(move || {
        let indexes = gsis
            .iter()
            .map(|g| {
                aws_sdk_dynamodb::types::GlobalSecondaryIndexDescription::builder()
                    .index_name(g)
                    .build()
            })
            .collect();
        DescribeTableOutput::builder()
            .table(
                TableDescription::builder()
                    .table_name(&table)
                    .set_global_secondary_indexes(Some(indexes))
                    .build(),
            )
            .build()
    });
    let table = counters.clone();
    let insights =
        mock!(aws_sdk_dynamodb::Client::describe_contributor_insights).then_output(move || {
            DescribeContributorInsightsOutput::builder()
                .table_name(&table)
                .set_contributor_insights_rule_list(Some(rules.clone()))
                .contributor_insights_status(ContributorInsightsStatus::Enabled)
                .build()
        });
    let report = mock!(aws_sdk_cloudwatch::Client::get_insight_rule_report).then_output(|| {
        GetInsightRuleReportOutput::builder()
            .key_labels("pk")
            .build()
    });
    let recorder = log.interceptor();
    let mocked_ddb = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        [&describe, &insights],
        |c| c.interceptor(recorder.clone())
    );
    let mocked_cw = mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&report], |c| c
        .interceptor(recorder.clone()));
    let directory = Directory::from_schema(ddb(fx, &log), &fx.schema);
    let f = Controller::new(
        directory,
        ControllerConfig::new(vec![(counters, heatsink::detect::Kind::Read)]),
    )
    .with_insights(Insights::from_clients(mocked_ddb, mocked_cw));
    let now = SystemTime::now();
    let report = json!({"source": SAMPLER_SOURCE, "detail-type": SAMPLER_DETAIL_TYPE, "detail": {
        "partitions": [], "hot": [sampled_hot_key("likes#p9", "read", 9_000.0)]}});
    let salted = f.handle(&report, now).await.expect("sampler report");
    assert_eq!(salted.hot_keys, 1, "{salted:?}");
    let tick = json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
    // Long after: the cached entry has expired and calm keys are removed.
    let later = now + Duration::from_secs(30 * 24 * 3600);
    let calm = f.handle(&tick, later).await.expect("schedule");
    assert!(
        calm.changes.iter().any(|c| c.ends_with("removed")),
        "{calm:?}"
    );
    assert_calls(fx, &log, "hotkey-controller", "kinesis");
}

#[tokio::test]
async fn every_function_calls_exactly_what_infra_grants_json_grants_it() {
    let fx = fixture!("every_function_calls_exactly_what_infra_grants_json_grants_it");
    for t in [
        Table::Liked,
        Table::Counters,
        Table::Hotkeys,
        Table::Posts,
        Table::Autopilot,
    ] {
        fx.photo_table(t).await;
    }
    fx.stream("like-events", 1).await;
    post(&fx, "p9").await;
    likes_api(&fx).await;
    likes_aggregator(&fx).await;
    count_rebuilder(&fx, "kinesis").await;
    let streams = fixture!("every_function_calls_exactly_what_infra_grants_json_grants_it");
    for t in [Table::Liked, Table::Counters] {
        streams.photo_table(t).await;
    }
    count_rebuilder(&streams, "dynamodb-streams").await;
    smithy_mock_hotkey_controller(&fx).await;
    // Last: it reshards like-events.
    autopilot(&fx).await;
    // Every function of the stacks is covered (a new function needs its own run above;
    // directory-autopilot, a block over a team's directory, has its own test below).
    let functions: BTreeMap<String, Value> =
        serde_json::from_value(grants_json()["calls"].clone()).expect("calls");
    assert_eq!(
        functions.keys().collect::<Vec<_>>(),
        [
            "autopilot",
            "count-rebuilder",
            "directory-autopilot",
            "hotkey-controller",
            "likes-aggregator",
            "likes-api"
        ]
    );
}

/// autopilot as the Lambda builds it, over like-events: a dry run (the stacks' default) reads
/// and decides but never reshards; switched to act it splits a hot shard, proves the split
/// from the shard map and merges the cold children (rules scaled to the test: no sustain, no
/// cooldown, no merge hold).
async fn autopilot(fx: &Fixture) {
    use heatsink::autopilot::store::PilotStore;
    use heatsink::autopilot::stream::StreamLoop;
    use heatsink::autopilot::{PilotConfig, Settle};
    use heatsink::kinesis::reshard::PlanConfig;

    let stream = fx.photo().like_events().name;
    let keys = (0..)
        .map(|i| format!("k{i}"))
        .filter(|pk| heatsink::keys::kinesis_hash_key(pk) < 1u128 << 122)
        .take(300);
    for key in keys {
        fx.stack
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(key)
            .data(aws_sdk_kinesis::primitives::Blob::new(vec![b'x'; 20]))
            .send()
            .await
            .expect("record");
    }
    let pilot = |log: &CallLog, act: bool| {
        let kinesis = aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
                .interceptor(log.interceptor())
                .build(),
        );
        let table = fx.photo().table_name(Table::Autopilot);
        let mut l = StreamLoop::new(
            kinesis,
            PilotStore::for_stream(ddb(fx, log), table, &stream),
            &stream,
        );
        l.pilot = PilotConfig {
            sustain: 1,
            cooldown_ms: 0,
            act,
            ..PilotConfig::default()
        };
        l.plan = PlanConfig {
            split_at: 0.002,
            max_splits_per_shard: 1,
            hold_secs: 0,
            ..PlanConfig::default()
        };
        l
    };
    let now = || heatsink::clock::now_ms();
    let log = CallLog::new();
    let dry = pilot(&log, false).run(now()).await.expect("dry run");
    assert!(
        matches!(dry.decision, heatsink::autopilot::Decision::DryRun(_)),
        "{:?}",
        dry.lines()
    );
    assert_calls(fx, &log, "autopilot", "kinesis");

    let log = CallLog::new();
    let acting = pilot(&log, true);
    let split = acting.run(now()).await.expect("split");
    assert!(split.started.is_some(), "{:?}", split.lines());
    let mut merged = None;
    for _ in 0..100 {
        let p = acting.run(now()).await.expect("period");
        if p.started.is_some() {
            assert!(
                matches!(p.settled, Some((_, Settle::Ended))),
                "{:?}",
                p.lines()
            );
            merged = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let merged = merged.expect("the cold children merged");
    assert_eq!(
        merged.started.map(|s| s.kind),
        Some(heatsink::autopilot::Kind::Merge)
    );
    assert_calls_as(fx, &log, "autopilot", "kinesis", true);
}

/// directory-autopilot as the Lambda builds it, over a slot directory whose owner `a` carries
/// every slot and spares `b` and `c`, in the manifest's logical terms: the directory table is
/// `table/directory`, every owner and spare `table/owner` (their streams `table/owner/stream`).
/// A dry run reads the owners' load from CloudWatch (aws-smithy-mocks: the emulators' CloudWatch
/// does not answer the SDK's protocol on every lane) and moves nothing; switched to act, a
/// period records the operation and runs its moves to their ends (per-slot samples keep the
/// pieces narrow for moto).
#[tokio::test]
async fn smithy_mock_cloudwatch_directory_autopilot_calls_exactly_what_infra_grants_json_grants_it()
{
    use aws_sdk_cloudwatch::operation::get_metric_data::GetMetricDataOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use heatsink::autopilot::directory::{DirectoryLoop, Load};
    use heatsink::autopilot::{Decision, PilotConfig};
    use heatsink::schema::{KeyAttr, StreamView, TableSpec, ensure_table};
    use heatsink::slots::SlotDirectory;

    let fx = fixture!(
        "smithy_mock_cloudwatch_directory_autopilot_calls_exactly_what_infra_grants_json_grants_it"
    );
    let dir_spec = fx.schema.table(heatsink::schema::Table::Slots);
    fx.track_table(&dir_spec.name);
    ensure_table(&fx.stack.ddb, &dir_spec)
        .await
        .expect("directory table");
    let owners: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|o| format!("{}dir-{o}", fx.prefix()))
        .collect();
    for name in &owners {
        let spec =
            TableSpec::new(name.clone(), KeyAttr::s("pk")).stream(StreamView::NewAndOldImages);
        fx.track_table(name);
        ensure_table(&fx.stack.ddb, &spec)
            .await
            .expect("owner table");
    }
    SlotDirectory::new(fx.stack.ddb.clone(), &dir_spec.name)
        .init(&owners[0], Duration::from_millis(300), false)
        .await
        .expect("init");
    // Rows in the hot slots, so the moves copy, diff, fence and purge real items.
    for slot in [0u16, 100, 101, 102, 103, 16_383] {
        let keys = (0..)
            .map(|i| format!("row-{i}"))
            .filter(|k| heatsink::slots::slot_of(k) == slot)
            .take(2);
        for key in keys {
            fx.stack
                .ddb
                .put_item()
                .table_name(&owners[0])
                .item("pk", AttributeValue::S(key))
                .item("v", AttributeValue::N("1".into()))
                .send()
                .await
                .expect("row");
        }
    }
    let logical = |call: &Call| -> String {
        let r = &call.resource;
        let resource = if *r == dir_spec.name {
            "table/directory".to_owned()
        } else if owners.contains(r) {
            "table/owner".to_owned()
        } else if let Some((_, rest)) = r.split_once(":table/")
            && let Some((table, _)) = rest.split_once("/stream/")
            && owners.iter().any(|o| o == table)
        {
            "table/owner/stream".to_owned()
        } else if r == "*" {
            "*".to_owned()
        } else {
            format!("UNKNOWN:{r}")
        };
        format!("{} {resource}", call.action)
    };
    let check = |log: &CallLog, act: bool| {
        let recorded: BTreeSet<String> = log.calls().iter().map(logical).collect();
        let want = manifest("directory-autopilot", "kinesis", act);
        // Calls only a path this run does not take makes (grants.json `"path"`): granted,
        // and not required here.
        let on_paths = path_only("directory-autopilot");
        let ungranted: Vec<_> = recorded.difference(&want).collect();
        let uncalled: Vec<_> = want
            .difference(&recorded)
            .filter(|c| !on_paths.contains(*c))
            .collect();
        assert!(
            ungranted.is_empty() && uncalled.is_empty(),
            "directory-autopilot (act {act}): called but not in infra/grants.json: {ungranted:?}; \
             in infra/grants.json but never called: {uncalled:?}"
        );
    };
    let idle = mock!(aws_sdk_cloudwatch::Client::get_metric_data)
        .then_output(|| GetMetricDataOutput::builder().build());
    let pilot = |log: &CallLog, act: bool| {
        let ddb = aws_sdk_dynamodb::Client::from_conf(
            crate::slots::move_ddb(&fx)
                .config()
                .to_builder()
                .interceptor(log.interceptor())
                .build(),
        );
        let streams = aws_sdk_dynamodbstreams::Client::from_conf(
            fx.stack
                .streams
                .config()
                .to_builder()
                .interceptor(log.interceptor())
                .build(),
        );
        let mut l = DirectoryLoop::new(
            ddb.clone(),
            streams,
            SlotDirectory::new(ddb, &dir_spec.name),
        );
        l.spare = owners[1..].to_vec();
        l.pilot = PilotConfig {
            sustain: 1,
            cooldown_ms: 0,
            act,
            ..PilotConfig::default()
        };
        l
    };
    let cloudwatch = |log: &CallLog| Load::CloudWatch {
        client: mock_client!(aws_sdk_cloudwatch, RuleMode::MatchAny, [&idle], |c| c
            .interceptor(log.interceptor())),
        minutes: 5,
        sampled: BTreeMap::new(),
    };
    let now = heatsink::clock::now_ms;

    let log = CallLog::new();
    let dry = pilot(&log, false)
        .run(now(), cloudwatch(&log))
        .await
        .expect("dry run");
    assert!(
        dry.started.is_none() && dry.moved.is_empty(),
        "{:?}",
        dry.lines()
    );
    check(&log, false);

    // Acting: a CloudWatch period (idle owners, nothing to do), then one on samples that makes
    // a hot on two narrow pieces and moves them.
    let log = CallLog::new();
    let acting = pilot(&log, true);
    acting
        .run(now(), cloudwatch(&log))
        .await
        .expect("idle period");
    let hot: BTreeMap<u16, f64> = [
        (0u16, 300.0),
        (100, 250.0),
        (101, 250.0),
        (102, 250.0),
        (103, 250.0),
        (16_383, 300.0),
    ]
    .into();
    let period = acting
        .run(now(), Load::Slots(hot))
        .await
        .expect("acting period");
    assert!(
        matches!(
            period.decided.as_ref().map(|d| &d.period.decision),
            Some(Decision::Run(_))
        ),
        "{:?}",
        period.lines()
    );
    assert!(
        !period.moved.is_empty() && period.ended.is_some(),
        "{:?}",
        period.lines()
    );
    check(&log, true);
}
