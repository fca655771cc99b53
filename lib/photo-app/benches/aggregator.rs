//! Aggregator cost per 1,000 change records: the pre-aggregating aggregator against
//! the naive consumer (one `UpdateItem ADD` per record), side by side in one run.
//!
//! - **pure**: the aggregator's in-process work on a 1,000-record event: decoding the Lambda
//!   payload, reading each record as a like, and summing per post (the same public steps
//!   `Aggregator::handle_dynamodb`/`handle_kinesis` take: `like_event`, `Seq::parse`,
//!   `CounterKey::new`, `Deltas::add_record`), for the DynamoDB Streams and the
//!   Kinesis-for-DynamoDB event formats. No I/O.
//! - **handler**: `Aggregator::handle_dynamodb` / `handle_kinesis` on the same events against the
//!   local DynamoDB (its BatchGetItem + conditional Puts), every call with fresh sequence numbers
//!   so every call really flushes; and the naive consumer (parse + one `UpdateItem ADD` per
//!   record, 16 in flight).
//!
//! Criterion reports wall time; afterwards a table gives wall **and process CPU time**
//! (`/proc/self/stat` utime + stime, summed over several seconds of calls) per 1,000 records.
//! CPU time is the robust number on a shared machine: it does not include waiting for the
//! emulator (a separate process) or for other builds.
//!
//! The events are built from real stream records of a `liked` table (the post mix of
//! `heatsink-demo`: 2,400 likes/s on p9, 10/s on each of 15 others) with
//! [`heatsink::lambda::dynamodb_event`], as the tests and the demo do.
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink --bench aggregator` (env `AGG_RECORDS`, default 1000, sets the batch
//! size; `AGG_CPU_SECONDS`, default 3, the CPU window per row). Without
//! `AWS_ENDPOINT_URL_DYNAMODB` only the pure part runs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::Record;
use base64::Engine as _;
use criterion::{BatchSize, Criterion, SamplingMode};
use futures::StreamExt;
use heatsink::counter::CounterStore;
use heatsink::counter::{CounterKey, Deltas, Seq};
use heatsink::lambda::dynamodb_event;
use heatsink::schema;
use heatsink_photo_app::aggregator::{AggregateReport, aggregator};
use heatsink_photo_app::mapper::{COUNTER, like_event};
use heatsink_photo_app::schema::{Schema, Table};
use serde_json::{Value, json};

/// The demo's mix: of every 2,550 likes, 2,400 go to p9 and 10 to each of 15 other posts,
/// interleaved (a stride coprime to 2,550), so 1,000 records hold about 941 likes of p9.
fn post_of(i: u64) -> String {
    let slot = (i * 7919) % 2550;
    let n = if slot < 2400 {
        9
    } else {
        let other = (slot - 2400) / 10;
        if other >= 9 { other + 1 } else { other }
    };
    format!("p{n}")
}

/// CPU time of this process: the sum of every live thread's run time from
/// `/proc/self/task/*/schedstat` (nanoseconds), or `/proc/self/stat` utime + stime (10 ms ticks)
/// where schedstat is missing.
fn cpu_time() -> Duration {
    let threads: Option<u64> = std::fs::read_dir("/proc/self/task").ok().and_then(|dir| {
        dir.flatten()
            .map(|t| {
                std::fs::read_to_string(t.path().join("schedstat"))
                    .ok()?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    });
    if let Some(ns) = threads.filter(|ns| *ns > 0) {
        return Duration::from_nanos(ns);
    }
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after "(comm) ": state is field 3, utime 14, stime 15 (1-based).
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // USER_HZ is 100 on every Linux ABI.
    Duration::from_millis(ticks * 10)
}

/// What the handler's Lambda would do with the event before calling the aggregator, plus the
/// aggregator's per-record work up to the flush (`Aggregator::aggregate` without I/O).
fn pure_dynamodb(event: &DynamoDbEvent) -> Deltas {
    let mut deltas = Deltas::new();
    let mut posts = BTreeMap::new();
    for r in &event.records {
        let seq = r.change.sequence_number.clone().unwrap_or_default();
        let mut change = serde_json::to_value(r).expect("record serialises");
        if let Some(obj) = change.as_object_mut()
            && !obj.contains_key("dynamodb")
            && let Some(c) = obj.remove("change")
        {
            obj.insert("dynamodb".into(), c);
        }
        let ev = like_event(&change).expect("a like");
        let key = CounterKey::new(COUNTER, &ev.post).expect("key");
        *posts.entry(key.clone()).or_insert(0u64) += 1;
        deltas
            .add_record(key, Seq::parse(&seq).expect("seq"), ev.delta)
            .expect("in order");
    }
    deltas
}

fn pure_kinesis(event: &KinesisEvent) -> Deltas {
    let mut deltas = Deltas::new();
    let mut posts = BTreeMap::new();
    for r in &event.records {
        let seq = &r.kinesis.sequence_number;
        let change: Value = serde_json::from_slice(&r.kinesis.data.0).expect("JSON change");
        let ev = like_event(&change).expect("a like");
        let key = CounterKey::new(COUNTER, &ev.post).expect("key");
        *posts.entry(key.clone()).or_insert(0u64) += 1;
        deltas
            .add_record(key, Seq::parse(seq).expect("seq"), ev.delta)
            .expect("in order");
    }
    deltas
}

/// Kinesis Data Streams for DynamoDB: each record's data is the change record as JSON.
fn kinesis_event(dynamodb: &DynamoDbEvent, table: &str, round: u64) -> KinesisEvent {
    let records: Vec<Value> = dynamodb
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let v = serde_json::to_value(r).expect("record serialises");
            let change = json!({
                "awsRegion": "us-east-1",
                "eventID": v.get("eventID"),
                "eventName": v.get("eventName"),
                "userIdentity": null,
                "recordFormat": "application/json",
                "tableName": table,
                "dynamodb": v.get("dynamodb").or_else(|| v.get("change")),
                "eventSource": "aws:dynamodb",
            });
            let seq = format!("{round}{i:07}");
            json!({
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::000000000000:role/aggregator",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/heatsink-like-events",
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": "k",
                    "sequenceNumber": seq,
                    "approximateArrivalTimestamp": 1.7e9,
                    "data": base64::engine::general_purpose::STANDARD
                        .encode(serde_json::to_vec(&change).expect("json")),
                }
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("Kinesis event")
}

/// The same event with every sequence number moved above every earlier round's, so a handler
/// call flushes for real (a repeated seq would be recognised and skipped).
fn shifted(event: &DynamoDbEvent, round: u64) -> DynamoDbEvent {
    let width = event
        .records
        .iter()
        .filter_map(|r| r.change.sequence_number.as_ref().map(String::len))
        .max()
        .unwrap_or(1);
    let mut e = event.clone();
    for r in &mut e.records {
        if let Some(s) = r.change.sequence_number.as_mut() {
            *s = format!("{round}{s:0>width$}");
        }
    }
    e
}

/// The stored stream records of `n` likes written with the demo's post mix.
async fn liked_records(
    ddb: &aws_sdk_dynamodb::Client,
    streams: &aws_sdk_dynamodbstreams::Client,
    table: &str,
    n: u64,
) -> (String, Vec<Record>) {
    futures::stream::iter(0..n)
        .map(|i| {
            ddb.put_item()
                .table_name(table)
                .item("user", AttributeValue::S(format!("u{i}")))
                .item("post", AttributeValue::S(post_of(i)))
                .send()
        })
        .buffer_unordered(16)
        .for_each(|r| async {
            r.expect("put like");
        })
        .await;
    let want = usize::try_from(n).expect("a bench-sized count");
    let (arn, all) = heatsink_testkit::stream_records(ddb, streams, table, want).await;
    assert_eq!(all.len(), want, "every like is on the stream");
    (arn, all)
}

/// The naive consumer: parse each record, one `UpdateItem ADD 1` on the post's counter item.
async fn naive(ddb: &aws_sdk_dynamodb::Client, table: &str, event: &DynamoDbEvent) -> u64 {
    let likes: Vec<String> = event
        .records
        .iter()
        .map(|r| {
            let v = serde_json::to_value(r).expect("record serialises");
            like_event(&v).expect("a like").post
        })
        .collect();
    futures::stream::iter(likes)
        .map(|post| {
            ddb.update_item()
                .table_name(table)
                .key("pk", AttributeValue::S(format!("naive#{post}")))
                .key("sk", AttributeValue::S("total".into()))
                .update_expression("ADD #t :one")
                .expression_attribute_names("#t", "total")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
        })
        .buffer_unordered(16)
        .fold(0u64, |n, r| async move {
            r.expect("update");
            n + 1
        })
        .await
}

/// DynamoDB requests one aggregator call made (BatchGetItem rounds + conditional Puts).
fn requests(report: &AggregateReport) -> u64 {
    let f = &report.flush;
    let rounds = 1 + f.conflicts.min(1);
    rounds + f.writes + f.conflicts
}

struct Row {
    what: &'static str,
    calls: u64,
    wall: Duration,
    cpu: Duration,
    requests_per_call: f64,
}

/// Repeats `call` for at least `window` of wall time (at least 3 calls). `call()` prepares an
/// event and returns the future that handles it; only the future is timed (wall and CPU).
async fn measure<F, Fut>(what: &'static str, window: Duration, mut call: F) -> Row
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let started = Instant::now();
    let (mut calls, mut reqs, mut wall, mut cpu) = (0u64, 0u64, Duration::ZERO, Duration::ZERO);
    while calls < 3 || started.elapsed() < window {
        let handled = call();
        let (c0, t0) = (cpu_time(), Instant::now());
        reqs += handled.await;
        wall += t0.elapsed();
        cpu += cpu_time().saturating_sub(c0);
        calls += 1;
    }
    Row {
        what,
        calls,
        wall: wall / calls as u32,
        cpu: cpu / calls as u32,
        requests_per_call: reqs as f64 / calls as f64,
    }
}

fn main() {
    let n: u64 = std::env::var("AGG_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let window = Duration::from_secs_f64(
        std::env::var("AGG_CPU_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3.0),
    );
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let stack = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok();
    if !stack {
        println!(
            "note: no local stack (eval \"$(localstack/stack env --lane dynoxide)\"): pure part only"
        );
    }
    // Events: from a real `liked` table's stream on the stack, or synthetic records without it.
    let schema = Schema::new(format!("bench-{:08x}-", rand::random::<u32>()));
    let clients = stack.then(|| {
        rt.block_on(async {
            let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            let ddb = aws_sdk_dynamodb::Client::new(&config);
            let streams = aws_sdk_dynamodbstreams::Client::new(&config);
            for t in [Table::Liked, Table::Counters] {
                schema::ensure_table(&ddb, &schema.table(t))
                    .await
                    .expect("create table");
            }
            (ddb, streams)
        })
    });
    let (arn, records) = match &clients {
        Some((ddb, streams)) => rt.block_on(liked_records(
            ddb,
            streams,
            &schema.table_name(Table::Liked),
            n,
        )),
        None => {
            let records = (0..n)
                .map(|i| {
                    use aws_sdk_dynamodbstreams::types::{
                        AttributeValue as A, OperationType, StreamRecord,
                    };
                    let image = std::collections::HashMap::from([
                        ("user".to_owned(), A::S(format!("u{i}"))),
                        ("post".to_owned(), A::S(post_of(i))),
                    ]);
                    Record::builder()
                        .event_id(format!("e{i}"))
                        .event_name(OperationType::Insert)
                        .dynamodb(
                            StreamRecord::builder()
                                .set_keys(Some(image.clone()))
                                .set_new_image(Some(image))
                                .sequence_number(format!("{}", 1000 + i))
                                .build(),
                        )
                        .build()
                })
                .collect();
            (
                "arn:aws:dynamodb:us-east-1:000000000000:table/x/stream/1".to_owned(),
                records,
            )
        }
    };
    let ddb_event = dynamodb_event(&arn, &records).expect("Lambda event");
    let liked_table = schema.table_name(Table::Liked);
    let kin_event = kinesis_event(&ddb_event, &liked_table, 1);
    let ddb_bytes = serde_json::to_vec(&ddb_event).expect("json");
    let kin_bytes = serde_json::to_vec(&kin_event).expect("json");
    let p9_per_batch = (0..n).filter(|i| post_of(*i) == "p9").count() as u64;
    println!(
        "{n} records per event: {p9_per_batch} on p9, {} on 15 other posts; event JSON {} KiB (DynamoDB Streams), {} KiB (Kinesis)",
        n - p9_per_batch,
        ddb_bytes.len() / 1024,
        kin_bytes.len() / 1024
    );

    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group(format!("aggregator-pure-{n}"));
        g.bench_function("dynamodb-decode", |b| {
            b.iter(|| serde_json::from_slice::<DynamoDbEvent>(&ddb_bytes).expect("decode"))
        });
        g.bench_function("dynamodb-aggregate", |b| {
            b.iter(|| pure_dynamodb(&ddb_event))
        });
        g.bench_function("kinesis-decode", |b| {
            b.iter(|| serde_json::from_slice::<KinesisEvent>(&kin_bytes).expect("decode"))
        });
        g.bench_function("kinesis-aggregate", |b| b.iter(|| pure_kinesis(&kin_event)));
        g.finish();
    }
    let round = AtomicU64::new(1);
    let counted = AtomicU64::new(0);
    let counters = schema.table_name(Table::Counters);
    let agg = clients.as_ref().map(|(ddb, streams)| {
        aggregator(
            CounterStore::new(ddb.clone(), counters.clone()),
            Some(streams.clone()),
        )
    });
    let handler_dynamodb = |ev: DynamoDbEvent| {
        let (agg, counted) = (agg.as_ref().expect("stack"), &counted);
        async move {
            let (resp, report) = agg.handle_dynamodb(ev).await;
            assert!(resp.batch_item_failures.is_empty(), "{report:?}");
            assert_eq!(report.flush.counted, n, "{report:?}");
            counted.fetch_add(1, Ordering::Relaxed);
            requests(&report)
        }
    };
    let handler_kinesis = |ev: KinesisEvent| {
        let (agg, counted) = (agg.as_ref().expect("stack"), &counted);
        async move {
            let (resp, report) = agg.handle_kinesis(ev).await;
            assert!(resp.batch_item_failures.is_empty(), "{report:?}");
            assert_eq!(report.flush.counted, n, "{report:?}");
            counted.fetch_add(1, Ordering::Relaxed);
            requests(&report)
        }
    };
    let next = || round.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some((ddb, _)) = &clients {
        // The first call resolves the stream's shards (one DescribeStream, then cached).
        rt.block_on(handler_dynamodb(shifted(&ddb_event, next())));
        let mut g = c.benchmark_group(format!("aggregator-handler-{n}"));
        g.sampling_mode(SamplingMode::Flat).sample_size(10);
        g.bench_function("dynamodb-streams", |b| {
            b.to_async(&rt).iter_batched(
                || shifted(&ddb_event, next()),
                handler_dynamodb,
                BatchSize::PerIteration,
            )
        });
        g.bench_function("kinesis", |b| {
            b.to_async(&rt).iter_batched(
                || kinesis_event(&ddb_event, &liked_table, next()),
                handler_kinesis,
                BatchSize::PerIteration,
            )
        });
        g.bench_function("naive-update-per-record", |b| {
            b.to_async(&rt).iter(|| naive(ddb, &counters, &ddb_event))
        });
        g.finish();
    }
    c.final_summary();

    // Wall and CPU per event, several seconds each; each event is built before its call is timed.
    let mut rows = vec![];
    rows.push(rt.block_on(measure(
        "pure: decode + aggregate (DynamoDB Streams)",
        window,
        || async {
            let d = serde_json::from_slice::<DynamoDbEvent>(&ddb_bytes).expect("decode");
            std::hint::black_box(pure_dynamodb(&d));
            0
        },
    )));
    rows.push(rt.block_on(measure(
        "pure: decode + aggregate (Kinesis)",
        window,
        || async {
            let k = serde_json::from_slice::<KinesisEvent>(&kin_bytes).expect("decode");
            std::hint::black_box(pure_kinesis(&k));
            0
        },
    )));
    if let Some((ddb, _)) = &clients {
        rows.push(
            rt.block_on(measure("handler: DynamoDB Streams event", window, || {
                handler_dynamodb(shifted(&ddb_event, next()))
            })),
        );
        rows.push(rt.block_on(measure("handler: Kinesis event", window, || {
            handler_kinesis(kinesis_event(&ddb_event, &liked_table, next()))
        })));
        rows.push(rt.block_on(measure(
            "naive: parse + UpdateItem ADD per record (16 in flight)",
            window,
            || naive(ddb, &counters, &ddb_event),
        )));
    }
    println!(
        "\nper {n}-record event, averaged over >= {:.0} s of calls each (CPU: this process, all threads)",
        window.as_secs_f64()
    );
    println!(
        "{:<58} {:>7} {:>10} {:>10} {:>12}",
        "what", "calls", "wall ms", "CPU ms", "DDB requests"
    );
    for r in &rows {
        println!(
            "{:<58} {:>7} {:>10.2} {:>10.2} {:>12.1}",
            r.what,
            r.calls,
            r.wall.as_secs_f64() * 1e3,
            r.cpu.as_secs_f64() * 1e3,
            r.requests_per_call
        );
    }

    if let Some((ddb, _)) = &clients {
        // Every handler call counted its batch exactly once: p9's counter says so.
        let store = CounterStore::new(ddb.clone(), counters.clone());
        let p9 = rt
            .block_on(store.read(&CounterKey::new(COUNTER, "p9").expect("key")))
            .expect("read p9")
            .total() as u64;
        let calls = counted.load(Ordering::Relaxed);
        println!(
            "check: p9 counter = {p9}, expected {} ({calls} handler calls x {p9_per_batch}): {}",
            calls * p9_per_batch,
            if p9 == calls * p9_per_batch {
                "exact"
            } else {
                "MISMATCH"
            }
        );
        rt.block_on(async {
            for t in [Table::Liked, Table::Counters] {
                let _ = ddb
                    .delete_table()
                    .table_name(schema.table_name(t))
                    .send()
                    .await;
            }
        });
        assert_eq!(
            p9,
            calls * p9_per_batch,
            "the aggregator over- or under-counted"
        );
    }
}
