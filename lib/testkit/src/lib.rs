//! heatsink's internal test kit: the harness of the integration tests and the benches against
//! the local AWS stack ([`Fixture`], [`bench::Stack`]), the change-stream reader, and the
//! closed-loop onset scenario ([`onset`]), and a switchable network cut in front of an emulator
//! ([`cut`]).
//!
//! Tests reach the emulators only through the standard `AWS_ENDPOINT_URL_*` variables (written by
//! `localstack/stack env`), so the same suite runs against moto, dynoxide, kinesis-mock,
//! LocalStack or a user-run DynamoDB Local. Each test builds a [`Fixture`] with a unique name
//! prefix, creates what it needs from [`heatsink::schema`], and the fixture deletes everything it
//! created when dropped — also when the test panics — so tests run in parallel without clashing.
//!
//! Without endpoint variables a test prints a `skip:` line and passes, so a bare `cargo test`
//! on a laptop never touches a real AWS account; `make test` sets `HEATSINK_REQUIRE_STACK=1`,
//! which turns that skip into a failure so CI cannot pass by skipping.

pub mod bench;
pub mod calls;
pub mod cut;
pub mod onset;

use std::sync::Mutex;
use std::time::Duration;

use aws_config::SdkConfig;
use heatsink::schema::{self, Schema, StreamSpec, TableSpec};
use rand::Rng;

/// Clients for every service of one lane of the local stack.
#[derive(Clone, Debug)]
pub struct Stack {
    /// The loaded SDK configuration.
    pub config: SdkConfig,
    /// DynamoDB client.
    pub ddb: aws_sdk_dynamodb::Client,
    /// DynamoDB Streams client.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// Kinesis client.
    pub kinesis: aws_sdk_kinesis::Client,
    /// CloudWatch client.
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// Lane name from `HEATSINK_LANE` (`moto`, `dynoxide`, `localstack`, or `external`).
    pub lane: String,
}

impl Stack {
    /// Connects to the stack named by the environment, or returns `None` (after a `skip:` line).
    ///
    /// Panics when `HEATSINK_REQUIRE_STACK=1` and no endpoint is configured.
    pub async fn connect(test: &str) -> Option<Stack> {
        if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
            if std::env::var("HEATSINK_REQUIRE_STACK").as_deref() == Ok("1") {
                panic!("{test}: HEATSINK_REQUIRE_STACK=1 but AWS_ENDPOINT_URL_DYNAMODB is unset");
            }
            eprintln!(
                "skip: {test}: no local stack (run `make test`, or `eval \"$(localstack/stack env)\"`)"
            );
            return None;
        }
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Some(Stack {
            ddb: aws_sdk_dynamodb::Client::new(&config),
            streams: aws_sdk_dynamodbstreams::Client::new(&config),
            kinesis: aws_sdk_kinesis::Client::new(&config),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&config),
            lane: std::env::var("HEATSINK_LANE").unwrap_or_else(|_| "external".into()),
            config,
        })
    }

    /// A DynamoDB client for tests that mix plain writes with refused transactions on one
    /// table (live moves): one call at a time on the moto and LocalStack lanes, whose cancelled
    /// transactions revert concurrent writes (see `heatsink_sim::http`; LocalStack's host-mode
    /// DynamoDB showed it too: 2 of 13 puts read back older); the plain client elsewhere.
    pub fn isolated_ddb(&self) -> aws_sdk_dynamodb::Client {
        if self.lane == "moto" || self.lane == "localstack" {
            aws_sdk_dynamodb::Client::new(&heatsink_sim::http::bounded(&self.config, 1))
        } else {
            self.ddb.clone()
        }
    }

    /// Whether this lane's CloudWatch speaks the Rust SDK's rpc-v2-cbor protocol (moto does not).
    pub fn cloudwatch_speaks_cbor(&self) -> bool {
        std::env::var("HEATSINK_CLOUDWATCH_CBOR").as_deref() == Ok("1")
    }
}

/// A test's own uniquely named resources; deletes all of them on drop.
pub struct Fixture {
    /// The stack's clients.
    pub stack: Stack,
    /// The toolkit's tables under this fixture's unique prefix (`hs-<8 hex>-`); an application's
    /// own tables take the same prefix ([`Fixture::prefix`]).
    pub schema: Schema,
    tables: Mutex<Vec<String>>,
    streams: Mutex<Vec<String>>,
}

impl Fixture {
    /// A fixture for `test`, or `None` when no stack is configured (see [`Stack::connect`]).
    pub async fn new(test: &str) -> Option<Fixture> {
        let stack = Stack::connect(test).await?;
        Some(Self::with_stack(stack))
    }

    /// A fixture on an already connected stack.
    pub fn with_stack(stack: Stack) -> Fixture {
        // At least 11 characters before the logical name: dynoxide shortens stream shard ids of
        // tables with shorter names, and the suite must not depend on that quirk.
        let tag: u32 = rand::rng().random();
        Fixture {
            stack,
            schema: Schema::new(format!("hs-{tag:08x}-")),
            tables: Mutex::new(vec![]),
            streams: Mutex::new(vec![]),
        }
    }

    /// The latest stream ARN of `table` (panics when it has none: a test's setup error).
    pub async fn stream_arn(&self, table: &str) -> String {
        self.stack
            .ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap_or_else(|e| panic!("describing {table}: {e}"))
            .table
            .and_then(|t| t.latest_stream_arn)
            .unwrap_or_else(|| panic!("{table} has no stream"))
    }

    /// The prefix of every resource this fixture creates and deletes.
    pub fn prefix(&self) -> &str {
        self.schema.prefix()
    }

    /// Creates `spec` (named under [`Fixture::prefix`] by its maker) and waits for ACTIVE;
    /// deleted with the fixture. Any application's tables: the kit knows none of them.
    pub async fn table(&self, spec: TableSpec) -> TableSpec {
        self.track_table(&spec.name);
        schema::ensure_table(&self.stack.ddb, &spec)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", spec.name));
        spec
    }

    /// [`Fixture::table`] for each of `specs`, in order.
    pub async fn tables(&self, specs: &[TableSpec]) -> Vec<TableSpec> {
        let mut made = Vec::with_capacity(specs.len());
        for spec in specs {
            made.push(self.table(spec.clone()).await);
        }
        made
    }

    /// Creates a Kinesis stream with `shards` shards under this fixture's prefix and waits for ACTIVE.
    pub async fn stream(&self, logical: &'static str, shards: i32) -> StreamSpec {
        let spec = StreamSpec {
            logical: logical.into(),
            name: format!("{}{logical}", self.schema.prefix()),
            shards,
        };
        self.track_stream(&spec.name);
        schema::ensure_stream(&self.stack.kinesis, &spec)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", spec.name));
        spec
    }

    /// Registers a table created by other means for deletion.
    pub fn track_table(&self, name: &str) {
        if let Ok(mut t) = self.tables.lock() {
            t.push(name.to_owned());
        }
    }

    /// Registers a stream created by other means for deletion.
    pub fn track_stream(&self, name: &str) {
        if let Ok(mut s) = self.streams.lock() {
            s.push(name.to_owned());
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let tables = std::mem::take(self.tables.get_mut().unwrap_or_else(|e| e.into_inner()));
        let streams = std::mem::take(self.streams.get_mut().unwrap_or_else(|e| e.into_inner()));
        if tables.is_empty() && streams.is_empty() {
            return;
        }
        let config = self.stack.config.clone();
        // Drop cannot await, and the test's runtime may be shutting down: delete on a thread with
        // its own small runtime and wait for it, so the emulator is clean when the test returns.
        // The cleanup builds its own clients: pooled connections of the test's clients belong to
        // the test's runtime, which is blocked in this drop, so reusing them stalls each call
        // until the pool gives up on the connection.
        let cleanup = std::thread::spawn(move || {
            let ddb = aws_sdk_dynamodb::Client::new(&config);
            let kinesis = aws_sdk_kinesis::Client::new(&config);
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                for t in tables {
                    let _ = ddb.delete_table().table_name(&t).send().await;
                }
                for s in streams {
                    let _ = kinesis
                        .delete_stream()
                        .stream_name(&s)
                        .enforce_consumer_deletion(true)
                        .send()
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// Retries `probe` every 50 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Skips the rest of a test when no stack is configured: `let fx = fixture!("name");`.
#[macro_export]
macro_rules! fixture {
    ($name:expr) => {
        match $crate::Fixture::new($name).await {
            Some(fx) => fx,
            None => return,
        }
    };
}

/// One hot key as a sampler report carries it (the JSON of `heatsink::detect::HotKey`),
/// certain and at its estimate, on partition `t/p1`.
pub fn sampled_hot_key(key: &str, kind: &str, estimate: f64) -> serde_json::Value {
    serde_json::json!({"partition": "t/p1", "key": key, "kind": kind, "estimate": estimate,
        "lower_bound": estimate, "error_bound": 0.0, "share_of_ceiling": 1.0,
        "share_of_partition": 1.0, "certain": true, "sampled": {"count": 1, "error": 0}})
}

/// Every record Kinesis holds on `shard` of `stream`, from the trim horizon, page by page until
/// an empty page (the tip of an open shard) or the end of a closed one.
pub async fn kinesis_shard_records(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
) -> Vec<aws_sdk_kinesis::types::Record> {
    let mut it = k
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator;
    let mut all = vec![];
    while let Some(i) = it.take() {
        let page = k
            .get_records()
            .shard_iterator(i)
            .limit(10_000)
            .send()
            .await
            .expect("get records");
        if page.records().is_empty() {
            break;
        }
        all.extend(page.records().iter().cloned());
        it = page.next_shard_iterator;
    }
    all
}

/// Every record of `table`'s change stream so far (all shards, from the trim horizon), waiting
/// up to 15 s until at least `at_least` have arrived; returns the stream ARN with them.
pub async fn table_stream_records(
    stack: &Stack,
    table: &str,
    at_least: usize,
) -> (String, Vec<aws_sdk_dynamodbstreams::types::Record>) {
    stream_records(&stack.ddb, &stack.streams, table, at_least).await
}

/// [`table_stream_records`] over plain clients (for benches that build their own).
pub async fn stream_records(
    ddb: &aws_sdk_dynamodb::Client,
    streams: &aws_sdk_dynamodbstreams::Client,
    table: &str,
    at_least: usize,
) -> (String, Vec<aws_sdk_dynamodbstreams::types::Record>) {
    let arn = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .expect("describe table")
        .table
        .and_then(|t| t.latest_stream_arn)
        .unwrap_or_else(|| panic!("{table} has no stream"));
    let records = eventually("stream records", Duration::from_secs(15), || async {
        let desc = streams
            .describe_stream()
            .stream_arn(&arn)
            .send()
            .await
            .ok()?;
        let mut all = vec![];
        for shard in desc.stream_description()?.shards() {
            let mut it = streams
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(shard.shard_id()?)
                .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
                .send()
                .await
                .ok()?
                .shard_iterator;
            while let Some(i) = it.take() {
                let out = streams.get_records().shard_iterator(i).send().await.ok()?;
                if out.records().is_empty() {
                    break;
                }
                all.extend(out.records().iter().cloned());
                it = out.next_shard_iterator;
            }
        }
        (all.len() >= at_least).then_some(all)
    })
    .await;
    (arn, records)
}
