//! The cost of one rebuilder run against the size of the `liked` table: the scheduled
//! incremental repair (`heatsink_photo_app::rebuild::repair`, i.e.
//! `heatsink::counter::repair::Repair` over `liked_bucket_recount`) against the whole-table
//! recount (`heatsink_photo_app::rebuild::rebuild`: a Scan of `liked` and of `counters`, what
//! the rebuilder did every run before the repair), side by side in one run, ABBA order after a
//! warm-up of each.
//!
//! The shape is `repair_requests` of `tests/tests/it/rebuild_repair.rs`: per size, `size` old
//! likes (an hour back, over 100 posts, their counters flushed by one writer), then per run 3
//! posts liked 10 times each about two minutes ago whose counters are 1, 2 and 3 likes short
//! (a lost batch), and the writer's flushed watermark at the run's clock. Every run gets its own
//! 3 fresh posts (the previous run's are deleted first, so each run sees 100 + 3 counters) and
//! a fresh repair cursor; the repair's span is pinned to the fresh likes' bucket
//! (`start_at`/`until`). Buckets, settle and quiet are the deployed defaults (60 s buckets, 30
//! kept; settle 60 s; quiet 60 s).
//!
//! Per size and method it prints the DynamoDB requests of one run by operation (a counting SDK
//! interceptor on the run's own client; Queries by index), the capacity units the responses
//! report (`ReturnConsumedCapacity=TOTAL` set by the interceptor; `-` when the emulator reports
//! none), the run's seconds (median, min–max), and whether the run corrected exactly the short
//! posts by exactly their shortfall (asserted: both methods must fix the same counts).
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink-photo-app --bench rebuild --profile dev` (env `REBUILD_SIZES`, default
//! `10000,100000` old likes; `REBUILD_TRIALS`, default 4 runs of each method per size).
//! The time is spent in the emulator, so the dev profile measures the same thing as release.
//! Without `AWS_ENDPOINT_URL_DYNAMODB` it prints a skip line and exits 0.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation as op;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, DeleteRequest, PutRequest, ReturnConsumedCapacity,
    WriteRequest,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use heatsink::counter::{BucketSpec, CounterKey, CounterStore, Deltas, Seq, WriterId};
use heatsink_photo_app::rebuild::{
    RebuildOptions, RepairOptions, liked_bucket_recount, rebuild, repair,
};
use heatsink_photo_app::schema::{POST_SHARD, Schema, Table, post_shard};
use heatsink_testkit::Fixture;
use heatsink_testkit::bench::env_or;

/// Likes per fresh post; fresh post `k` of a run has `k + 1` of them missing from its counter.
const FRESH_LIKES: u32 = 10;
const FRESH_POSTS: u32 = 3;
const OLD_POSTS: u32 = 100;

// ---------------------------------------------------------------------------------------------
// Request counting
// ---------------------------------------------------------------------------------------------

/// Counts a client's operations (`Query` by index, `Scan` by table) and sums the capacity
/// units their responses report.
#[derive(Debug, Clone, Default)]
struct Requests {
    ops: Arc<Mutex<BTreeMap<String, u64>>>,
    /// (capacity units, responses that reported any)
    capacity: Arc<Mutex<(f64, u64)>>,
}

impl Requests {
    fn take(&self) -> (BTreeMap<String, u64>, Option<f64>) {
        let ops = self
            .ops
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default();
        let (units, reported) = self
            .capacity
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default();
        (ops, (reported > 0).then_some(units))
    }
}

/// The logical name of a prefixed table (`hs-1234abcd-liked` → `liked`).
fn logical(table: Option<&str>) -> &str {
    table.and_then(|t| t.rsplit('-').next()).unwrap_or("?")
}

fn units(c: Option<&ConsumedCapacity>) -> Option<f64> {
    c.and_then(|c| c.capacity_units())
}

impl Intercept for Requests {
    fn name(&self) -> &'static str {
        "rebuild-bench Requests"
    }

    fn modify_before_serialization(
        &self,
        ctx: &mut BeforeSerializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg
            .load::<Metadata>()
            .map_or_else(|| "?".to_owned(), |m| m.name().to_owned());
        let input = ctx.input_mut();
        let total = Some(ReturnConsumedCapacity::Total);
        let label = if let Some(q) = input.downcast_mut::<op::query::QueryInput>() {
            q.return_consumed_capacity = total;
            match q.index_name() {
                Some(ix) => format!("Query {ix}"),
                None => format!("Query {}", logical(q.table_name())),
            }
        } else if let Some(s) = input.downcast_mut::<op::scan::ScanInput>() {
            s.return_consumed_capacity = total;
            format!("Scan {}", logical(s.table_name()))
        } else {
            if let Some(i) = input.downcast_mut::<op::get_item::GetItemInput>() {
                i.return_consumed_capacity = total;
            } else if let Some(i) = input.downcast_mut::<op::put_item::PutItemInput>() {
                i.return_consumed_capacity = total;
            } else if let Some(i) = input.downcast_mut::<op::update_item::UpdateItemInput>() {
                i.return_consumed_capacity = total;
            } else if let Some(i) = input.downcast_mut::<op::delete_item::DeleteItemInput>() {
                i.return_consumed_capacity = total;
            } else if let Some(i) =
                input.downcast_mut::<op::transact_write_items::TransactWriteItemsInput>()
            {
                i.return_consumed_capacity = total;
            } else if let Some(i) = input.downcast_mut::<op::batch_get_item::BatchGetItemInput>() {
                i.return_consumed_capacity = total;
            }
            name
        };
        if let Ok(mut ops) = self.ops.lock() {
            *ops.entry(label).or_default() += 1;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        ctx: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(out) = ctx.output_or_error() else {
            return Ok(());
        };
        let one = if let Some(o) = out.downcast_ref::<op::query::QueryOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) = out.downcast_ref::<op::scan::ScanOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) = out.downcast_ref::<op::get_item::GetItemOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) = out.downcast_ref::<op::put_item::PutItemOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) = out.downcast_ref::<op::update_item::UpdateItemOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) = out.downcast_ref::<op::delete_item::DeleteItemOutput>() {
            units(o.consumed_capacity())
        } else if let Some(o) =
            out.downcast_ref::<op::transact_write_items::TransactWriteItemsOutput>()
        {
            let v: Vec<f64> = o
                .consumed_capacity()
                .iter()
                .filter_map(|c| c.capacity_units())
                .collect();
            (!v.is_empty()).then(|| v.iter().sum())
        } else if let Some(o) = out.downcast_ref::<op::batch_get_item::BatchGetItemOutput>() {
            let v: Vec<f64> = o
                .consumed_capacity()
                .iter()
                .filter_map(|c| c.capacity_units())
                .collect();
            (!v.is_empty()).then(|| v.iter().sum())
        } else {
            None
        };
        if let (Some(u), Ok(mut c)) = (one, self.capacity.lock()) {
            c.0 += u;
            c.1 += 1;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The world: tables, old likes, and each run's fresh, short posts
// ---------------------------------------------------------------------------------------------

struct World {
    fx: Fixture,
    liked: String,
    counters_table: String,
    /// Setup's store (uncounted client).
    store: CounterStore,
    writer: WriterId,
    spec: BucketSpec,
    /// Records flushed so far by the writer (its sequence numbers).
    seq: u64,
    /// The previous run's fresh likes (user, post), deleted before the next run.
    fresh: Vec<(String, String)>,
    old: u32,
}

fn like(user: &str, post: &str, at: u64) -> WriteRequest {
    let put = PutRequest::builder()
        .item("user", AttributeValue::S(user.to_owned()))
        .item("post", AttributeValue::S(post.to_owned()))
        .item("liked_at", AttributeValue::N(at.to_string()))
        .item(
            POST_SHARD,
            AttributeValue::S(post_shard(post, user).expect("post id")),
        )
        .build()
        .expect("put");
    WriteRequest::builder().put_request(put).build()
}

fn unlike(user: &str, post: &str) -> WriteRequest {
    let del = DeleteRequest::builder()
        .key("user", AttributeValue::S(user.to_owned()))
        .key("post", AttributeValue::S(post.to_owned()))
        .build()
        .expect("delete");
    WriteRequest::builder().delete_request(del).build()
}

/// One BatchWriteItem of up to 25 requests, re-sent until nothing is left unprocessed.
async fn batch_write(ddb: aws_sdk_dynamodb::Client, table: String, mut reqs: Vec<WriteRequest>) {
    let mut backoff = Duration::from_millis(20);
    while !reqs.is_empty() {
        let out = ddb
            .batch_write_item()
            .request_items(&table, reqs)
            .send()
            .await
            .expect("batch write");
        reqs = out
            .unprocessed_items
            .and_then(|mut u| u.remove(&table))
            .unwrap_or_default();
        if !reqs.is_empty() {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// Writes `reqs` in BatchWriteItems of 25, 8 in flight.
async fn write_all(ddb: &aws_sdk_dynamodb::Client, table: &str, reqs: Vec<WriteRequest>) {
    let mut set = tokio::task::JoinSet::new();
    let mut it = reqs.into_iter().peekable();
    while it.peek().is_some() {
        let chunk: Vec<WriteRequest> = it.by_ref().take(25).collect();
        if set.len() >= 8
            && let Some(r) = set.join_next().await
        {
            r.expect("batch task");
        }
        set.spawn(batch_write(ddb.clone(), table.to_owned(), chunk));
    }
    while let Some(r) = set.join_next().await {
        r.expect("batch task");
    }
}

impl World {
    /// Tables, `old` old likes over 100 posts an hour back, their counters flushed.
    async fn new(old: u32) -> Option<World> {
        let fx = Fixture::new("rebuild-bench").await?;
        let photo = Schema::new(fx.prefix());
        fx.tables(&[photo.table(Table::Liked), photo.table(Table::Counters)])
            .await;
        let liked = photo.table_name(Table::Liked);
        let counters_table = photo.table_name(Table::Counters);
        let spec = BucketSpec::default();
        let store =
            CounterStore::new(fx.stack.ddb.clone(), counters_table.clone()).with_buckets(spec);
        let writer = WriterId::new("shardId-000000000000").expect("writer");
        let hour_ago = heatsink::clock::now_ms() - 3_600_000;
        let t = Instant::now();
        let old_likes: Vec<(String, String, u64)> = (0..old)
            .map(|i| {
                (
                    format!("o{i}"),
                    format!("old{}", i % OLD_POSTS),
                    hour_ago + u64::from(i % 1_000_000),
                )
            })
            .collect();
        let reqs = old_likes.iter().map(|(u, p, at)| like(u, p, *at)).collect();
        write_all(&fx.stack.ddb, &liked, reqs).await;
        eprintln!(
            "  loaded {old} old likes in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let mut deltas = Deltas::new();
        for (i, (_, p, at)) in old_likes.iter().enumerate() {
            let key = CounterKey::new("likes", p.clone()).expect("key");
            deltas
                .add_record_at(key, Seq::from(i as u64 + 1), 1, Some(*at))
                .expect("delta");
        }
        store.flush(&writer, &deltas).await.expect("flush old");
        Some(World {
            fx,
            liked,
            counters_table,
            store,
            writer,
            spec,
            seq: u64::from(old),
            fresh: vec![],
            old,
        })
    }

    /// Before run `run`: deletes the previous run's fresh likes, counters and the repair cursor,
    /// then likes 3 new posts 10 times each two buckets back, flushes their counters short by
    /// 1, 2 and 3 and records the writer's progress at the clock. Returns the fresh likes'
    /// bucket and each fresh post's true count and shortfall.
    async fn prepare(&mut self, run: u32) -> (u64, BTreeMap<String, (i64, i64)>) {
        let ddb = self.fx.stack.ddb.clone();
        let previous = std::mem::take(&mut self.fresh);
        let posts: std::collections::BTreeSet<String> =
            previous.iter().map(|(_, p)| p.clone()).collect();
        if !previous.is_empty() {
            let reqs = previous.iter().map(|(u, p)| unlike(u, p)).collect();
            write_all(&ddb, &self.liked, reqs).await;
        }
        let mut keys = vec![(
            AttributeValue::S("#rebuild#likes".into()),
            AttributeValue::S("cursor".into()),
        )];
        for p in posts {
            let pk = CounterKey::new("likes", p).expect("key").pk();
            let out = ddb
                .query()
                .table_name(&self.counters_table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(pk))
                .consistent_read(true)
                .send()
                .await
                .expect("query fresh counter");
            for item in out.items() {
                if let (Some(pk), Some(sk)) = (item.get("pk"), item.get("sk")) {
                    keys.push((pk.clone(), sk.clone()));
                }
            }
        }
        for (pk, sk) in keys {
            ddb.delete_item()
                .table_name(&self.counters_table)
                .key("pk", pk)
                .key("sk", sk)
                .send()
                .await
                .expect("delete counter item");
        }
        let now = heatsink::clock::now_ms();
        let bucket = self.spec.start_of(now) - 2 * self.spec.width_ms();
        let mut reqs = vec![];
        let mut deltas = Deltas::new();
        let mut truth = BTreeMap::new();
        for k in 0..FRESH_POSTS {
            let post = format!("hot{run}-{k}");
            let short = i64::from(k + 1);
            truth.insert(post.clone(), (i64::from(FRESH_LIKES), short));
            for i in 0..FRESH_LIKES {
                let user = format!("n{run}-{k}-{i}");
                let at = bucket + u64::from(k * FRESH_LIKES + i) * 10;
                reqs.push(like(&user, &post, at));
                self.fresh.push((user, post.clone()));
                self.seq += 1;
                // The first `short` likes of post k are lost on the way to the counter.
                if i64::from(i) < short {
                    continue;
                }
                let key = CounterKey::new("likes", post.clone()).expect("key");
                deltas
                    .add_record_at(key, Seq::from(self.seq), 1, Some(at))
                    .expect("delta");
            }
        }
        write_all(&ddb, &self.liked, reqs).await;
        self.store
            .flush(&self.writer, &deltas)
            .await
            .expect("flush fresh");
        self.store
            .record_progress("likes", &self.writer, heatsink::clock::now_ms(), None)
            .await
            .expect("progress");
        (bucket, truth)
    }

    /// A client of the stack counting into `requests`.
    fn counted(&self, requests: &Requests) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&self.fx.stack.config)
                .interceptor(requests.clone())
                .build(),
        )
    }

    /// Whether every fresh post reads its true count.
    async fn exact(&self, truth: &BTreeMap<String, (i64, i64)>) -> bool {
        for (post, (count, _)) in truth {
            let key = CounterKey::new("likes", post.clone()).expect("key");
            let sum = self.store.read(&key).await.expect("read");
            if sum.total() != *count {
                eprintln!("  {post}: reads {} not {count}", sum.total());
                return false;
            }
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// One run of each method
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Method {
    Ours,
    Naive,
}

struct Run {
    ops: BTreeMap<String, u64>,
    capacity: Option<f64>,
    secs: f64,
    exact: bool,
}

async fn run(w: &mut World, method: Method, n: u32) -> Run {
    let (bucket, truth) = w.prepare(n).await;
    let want: BTreeMap<String, i64> = truth.iter().map(|(p, (_, s))| (p.clone(), *s)).collect();
    let requests = Requests::default();
    let ddb = w.counted(&requests);
    let t = Instant::now();
    let corrected = match method {
        Method::Ours => {
            let store =
                CounterStore::new(ddb.clone(), w.counters_table.clone()).with_buckets(w.spec);
            let recount = liked_bucket_recount(&ddb, &Schema::new(w.fx.prefix()));
            let options = RepairOptions {
                buckets: w.spec,
                insert_only: true,
                holder: format!("bench-{n}"),
                start_at: Some(bucket),
                until: Some(bucket + w.spec.width_ms()),
                ..RepairOptions::default()
            };
            let lineage = heatsink::counter::lineage::Shards::open([w.writer.as_str()]);
            let report = repair(&store, &recount, options, &lineage)
                .await
                .expect("repair");
            assert!(report.completed, "{report:?}");
            assert_eq!(report.posts_checked, u64::from(FRESH_POSTS), "{report:?}");
            assert!(report.skipped.is_empty(), "{report:?}");
            report.corrected
        }
        Method::Naive => {
            let report = rebuild(&ddb, &Schema::new(w.fx.prefix()), RebuildOptions::default())
                .await
                .expect("rebuild");
            assert_eq!(
                report.events_scanned,
                u64::from(w.old + FRESH_POSTS * FRESH_LIKES),
                "the whole table was counted"
            );
            assert_eq!(
                report.counters_checked,
                u64::from(OLD_POSTS + FRESH_POSTS),
                "{:?}",
                report.unsettled
            );
            report.corrected
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let (ops, capacity) = requests.take();
    // A bench that measures a wrong answer is worthless: both must fix exactly the short posts.
    assert_eq!(corrected, want, "{method:?} corrected the short posts");
    let exact = w.exact(&truth).await;
    assert!(exact, "{method:?} left a fresh post off");
    Run {
        ops,
        capacity,
        secs,
        exact,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One table row's figures.
struct Summary {
    requests: f64,
    ops: BTreeMap<String, f64>,
    capacity: Option<f64>,
    secs: f64,
    min: f64,
    max: f64,
    exact: String,
}

fn summarize(runs: &[Run]) -> Summary {
    let mut names: std::collections::BTreeSet<&String> = Default::default();
    for r in runs {
        names.extend(r.ops.keys());
    }
    let ops = names
        .into_iter()
        .map(|n| {
            let v = runs
                .iter()
                .map(|r| r.ops.get(n).copied().unwrap_or(0) as f64)
                .collect();
            (n.clone(), median(v))
        })
        .collect();
    let secs: Vec<f64> = runs.iter().map(|r| r.secs).collect();
    let caps: Vec<f64> = runs.iter().filter_map(|r| r.capacity).collect();
    Summary {
        requests: median(
            runs.iter()
                .map(|r| r.ops.values().sum::<u64>() as f64)
                .collect(),
        ),
        ops,
        capacity: (!caps.is_empty()).then(|| median(caps)),
        secs: median(secs.clone()),
        min: secs.iter().copied().fold(f64::INFINITY, f64::min),
        max: secs.iter().copied().fold(0.0, f64::max),
        exact: format!("{}/{}", runs.iter().filter(|r| r.exact).count(), runs.len()),
    }
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[tokio::main]
async fn main() {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        println!("skip: rebuild bench needs the local stack (eval \"$(localstack/stack env)\")");
        return;
    }
    let sizes: Vec<u32> = std::env::var("REBUILD_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let trials = env_or("REBUILD_TRIALS", 4).max(1);
    let lane = std::env::var("HEATSINK_LANE").unwrap_or_else(|_| "external".into());
    println!(
        "rebuild bench: lane {lane}, sizes {sizes:?} old likes over {OLD_POSTS} posts, \
         {FRESH_POSTS} fresh posts short by 1/2/3 per run, {trials} runs of each method per size (ABBA)"
    );
    let mut rows: Vec<(u32, Method, Summary)> = vec![];
    for size in sizes {
        let Some(mut w) = World::new(size).await else {
            return;
        };
        let mut n = 0;
        // Warm-up (connections, first reads of the tables); checked, not reported.
        for m in [Method::Ours, Method::Naive] {
            run(&mut w, m, n).await;
            n += 1;
        }
        let mut runs: BTreeMap<Method, Vec<Run>> = BTreeMap::new();
        for trial in 0..trials {
            let order = if trial % 2 == 0 {
                [Method::Ours, Method::Naive]
            } else {
                [Method::Naive, Method::Ours]
            };
            for m in order {
                let r = run(&mut w, m, n).await;
                n += 1;
                eprintln!(
                    "  {size} {m:?} trial {trial}: {} requests, {:.3} s, {:?}",
                    r.ops.values().sum::<u64>(),
                    r.secs,
                    r.ops
                );
                runs.entry(m).or_default().push(r);
            }
        }
        for (m, rs) in runs {
            rows.push((size, m, summarize(&rs)));
        }
        drop(w);
    }
    println!();
    println!(
        "| old likes | method | requests / run (median) | by operation (median per run) | capacity units / run | seconds / run, median (min–max) | fixed the short posts exactly |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (size, m, s) in &rows {
        let method = match m {
            Method::Ours => "ours: `Repair` (incremental)",
            Method::Naive => "naive: whole-table recount",
        };
        let ops: Vec<String> = s
            .ops
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        println!(
            "| {size} | {method} | {} | {} | {} | {:.3} ({:.3}–{:.3}) | {} |",
            num(s.requests),
            ops.join(", "),
            s.capacity.map_or("-".into(), |c| format!("{c:.1}")),
            s.secs,
            s.min,
            s.max,
            s.exact
        );
    }
    for m in [Method::Ours, Method::Naive] {
        let of: Vec<&Summary> = rows
            .iter()
            .filter(|(_, k, _)| *k == m)
            .map(|(_, _, s)| s)
            .collect();
        if let (Some(first), Some(last)) = (of.first(), of.last())
            && of.len() > 1
        {
            println!(
                "{m:?}: largest / smallest size: requests {:.2}x, seconds {:.2}x",
                last.requests / first.requests,
                last.secs / first.secs
            );
        }
    }
}
