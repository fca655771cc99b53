//! Merged queries across 8 and 16 GSI shards vs one partition holding the same rows, and
//! parallel vs sequential fan-out, side by side in one run against the local stack.
//!
//! `eval "$(localstack/stack env --lane dynoxide)"; cargo bench -p heatsink --bench scatter`.
//! Without `AWS_ENDPOINT_URL_DYNAMODB` it prints a skip line and measures nothing.

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use criterion::Criterion;
use heatsink::scatter::{FanOut, MergedQuery};
use heatsink::schema::{self, GsiSpec, KeyAttr, TableSpec};

const ROWS: usize = 400;
const PAGE: usize = 100;

async fn seed(ddb: &aws_sdk_dynamodb::Client, table: &str, creator: &str, shards: usize) {
    let rows: Vec<WriteRequest> = (0..ROWS)
        .map(|i| {
            let shard = if shards == 1 {
                creator.to_owned()
            } else {
                format!("{creator}#{}", i % shards)
            };
            let put = PutRequest::builder()
                .item("post", AttributeValue::S(format!("{creator}-{i:05}")))
                .item("creator_shard", AttributeValue::S(shard))
                .item(
                    "created_at",
                    AttributeValue::S(format!("2026-01-01T{i:06}")),
                )
                .item("body", AttributeValue::S("x".repeat(200)))
                .build()
                .expect("valid put");
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    for chunk in rows.chunks(25) {
        ddb.batch_write_item()
            .request_items(table, chunk.to_vec())
            .send()
            .await
            .expect("seed");
    }
}

async fn read_all(ddb: &aws_sdk_dynamodb::Client, q: &MergedQuery) -> usize {
    let mut n = 0;
    let mut token: Option<String> = None;
    loop {
        let page = q.page(ddb, PAGE, token.as_deref()).await.expect("page");
        n += page.items.len();
        match page.next {
            Some(t) => token = Some(t),
            None => return n,
        }
    }
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        println!("skip: scatter bench needs the local stack (eval \"$(localstack/stack env)\")");
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (ddb, table) = rt.block_on(async {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let ddb = aws_sdk_dynamodb::Client::new(&config);
        // A posts table with a creator GSI, the shape the photo app shards.
        let spec = TableSpec::new(
            format!("bench-{:08x}-posts", rand::random::<u32>()),
            KeyAttr::s("post"),
        )
        .gsi(
            GsiSpec::new("by-creator", KeyAttr::s("creator_shard"))
                .sort_key(KeyAttr::s("created_at")),
        );
        schema::ensure_table(&ddb, &spec)
            .await
            .expect("posts table");
        for (creator, shards) in [("one", 1), ("eight", 8), ("sixteen", 16)] {
            seed(&ddb, &spec.name, creator, shards).await;
        }
        (ddb, spec.name)
    });
    let query = |creator: &str, shards: usize, fan: FanOut| {
        let names = if shards == 1 {
            vec![creator.to_owned()]
        } else {
            (0..shards).map(|n| format!("{creator}#{n}")).collect()
        };
        MergedQuery::gsi(
            &table,
            "by-creator",
            "creator_shard",
            "created_at",
            names,
            &["post"],
        )
        .fan_out(fan)
    };
    let mut g = c.benchmark_group(format!("read {ROWS} rows in pages of {PAGE}"));
    g.sample_size(20);
    let cases = [
        (
            "1 partition (plain Query)",
            query("one", 1, FanOut::default()),
        ),
        (
            "8 shards merged, parallel",
            query("eight", 8, FanOut::default()),
        ),
        (
            "8 shards merged, sequential",
            query("eight", 8, FanOut::sequential()),
        ),
        (
            "16 shards merged, parallel",
            query("sixteen", 16, FanOut::default()),
        ),
        (
            "16 shards merged, sequential",
            query("sixteen", 16, FanOut::sequential()),
        ),
    ];
    for (name, q) in &cases {
        assert_eq!(rt.block_on(read_all(&ddb, q)), ROWS, "{name}");
        g.bench_function(*name, |b| b.to_async(&rt).iter(|| read_all(&ddb, q)));
    }
    g.finish();
    rt.block_on(async {
        let _ = ddb.delete_table().table_name(&table).send().await;
    });
}

// What `criterion_group!`/`criterion_main!` expand to, written out: the macro's generated
// `pub fn benches` has no doc comment and would trip the workspace's `missing_docs` lint.
fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
