//! lineage_consumer: consume a Kinesis stream in lineage order across a reshard, with leases
//! in DynamoDB and every write of the processor fenced by its lease's token.
//!
//! Five versions of three keys are put on a 2-shard stream, resharded to 4 after the second
//! round. A [`Worker`] reads parents before children, so each key's versions reach the
//! [`RecordProcessor`] in order; the processor keeps a "latest version per key" table whose
//! writes carry the batch's [`Fence`], so a worker that lost its lease cannot overwrite a newer
//! holder's work. Exits non-zero if a key went backwards or the table does not end at v5.
//!
//! Run against the local stack (creates a stream and two tables named `ex<random>-…`, deletes
//! them at the end):
//!
//! ```sh
//! localstack/stack up && eval "$(localstack/stack env --lane moto)"
//! cargo run -p heatsink-examples --example lineage_consumer
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ScalingType;
use heatsink::schema::{
    KeyAttr, Schema, StreamSpec, Table, TableSpec, ensure_stream, ensure_tables, wait_stream_active,
};
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, StreamError, Worker, WorkerConfig,
};
use heatsink_examples::{BoxError, Scratch};

const KEYS: [&str; 3] = ["p1", "p2", "p9"];
const VERSIONS: u64 = 5;

/// Writes each key's latest version (records are `key:version`), fenced by the lease token.
struct LatestPerKey {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    /// The last version seen per key: lineage order means it never goes down.
    seen: Mutex<HashMap<String, u64>>,
}

impl LatestPerKey {
    /// Records `key`'s version; an older one than already seen means the order broke.
    fn observe(&self, key: &str, version: u64) -> Result<(), StreamError> {
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| StreamError::Processor("poisoned".into()))?;
        let last = seen.insert(key.to_owned(), version).unwrap_or(0);
        if version < last {
            return Err(StreamError::Processor(
                format!("{key}: v{version} after v{last}").into(),
            ));
        }
        Ok(())
    }
}

impl RecordProcessor for LatestPerKey {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let fence = batch.fence();
        for record in &batch.records {
            let text = String::from_utf8_lossy(&record.data);
            let (key, version) = text
                .split_once(':')
                .ok_or_else(|| StreamError::Processor("not key:version".into()))?;
            let version: u64 = version
                .parse()
                .map_err(|e| StreamError::Processor(Box::new(e)))?;
            self.observe(key, version)?;
            println!("{} token {} {key} v{version}", batch.shard_id, batch.token);
            let put = self
                .ddb
                .put_item()
                .table_name(&self.table)
                .item("pk", AttributeValue::S(key.to_owned()))
                .item("version", AttributeValue::N(version.to_string()));
            fence.check(&self.table, fence.put(put).send().await)?;
        }
        Ok(()) // durable: the worker checkpoints after the last record
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut scratch = Scratch::new().await?;
    let result = run(&mut scratch).await;
    scratch.cleanup().await;
    result
}

async fn run(scratch: &mut Scratch) -> Result<(), BoxError> {
    let (ddb, kinesis) = (
        aws_sdk_dynamodb::Client::new(&scratch.config),
        aws_sdk_kinesis::Client::new(&scratch.config),
    );
    let stream = StreamSpec {
        logical: "events".into(),
        name: scratch.stream("events"),
        shards: 2,
    };
    let leases = Schema::new(&scratch.prefix).table(Table::Leases);
    scratch.table("leases");
    let latest = TableSpec::new(scratch.table("latest"), KeyAttr::s("pk"));
    ensure_tables(&ddb, &[leases.clone(), latest.clone()]).await?;
    ensure_stream(&kinesis, &stream).await?;

    for version in 1..=VERSIONS {
        if version == 3 {
            // Reshard: the 2 shards close, 4 children take new records.
            kinesis
                .update_shard_count()
                .stream_name(&stream.name)
                .target_shard_count(4)
                .scaling_type(ScalingType::UniformScaling)
                .send()
                .await?;
            wait_stream_active(&kinesis, &stream.name).await?;
        }
        for key in KEYS {
            kinesis
                .put_record()
                .stream_name(&stream.name)
                .partition_key(key)
                .data(Blob::new(format!("{key}:{version}")))
                .send()
                .await?;
        }
    }

    let mut config = WorkerConfig::new("worker-1");
    config.renew_interval = Duration::from_millis(300);
    config.idle_poll = Duration::from_millis(100);
    let processor = LatestPerKey {
        ddb: ddb.clone(),
        table: latest.name.clone(),
        seen: Mutex::default(),
    };
    let worker = Worker::new(
        KinesisSource::new(kinesis, &stream.name),
        LeaseTable::new(ddb.clone(), &leases.name, "latest-per-key"),
        processor,
        config,
    );
    let stats = worker.stats();
    let expected = KEYS.len() as u64 * VERSIONS;
    let done = async move {
        let start = Instant::now();
        while !(stats.records_processed() >= expected && stats.is_caught_up())
            && start.elapsed() < Duration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    worker.run(done).await?; // returns once `done` resolves and the shards are released

    for key in KEYS {
        let item = ddb
            .get_item()
            .table_name(&latest.name)
            .key("pk", AttributeValue::S(key.into()))
            .consistent_read(true)
            .send()
            .await?
            .item;
        let version = item
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_n().ok());
        println!("latest {key}: v{}", version.map_or("?", String::as_str));
        if version.map(String::as_str) != Some("5") {
            return Err(format!("{key} ends at {version:?}, expected v{VERSIONS}").into());
        }
    }
    Ok(())
}
