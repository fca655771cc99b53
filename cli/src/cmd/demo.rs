//! `heatsink demo`: the main scenario on the local stack.
//!
//! Writes a few durable likes, reads them back through the `liked` table's change stream and
//! prints what it did: proof that every service of the stack answers. The celebrity-post scenario
//! (naive vs salted vs pre-aggregated through the partition simulator) replaces it once counters land.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use clap::Args;
use heatsink::schema::{DEFAULT_PREFIX, Schema, Table};

use super::{CmdResult, sdk_config};

/// Arguments of `heatsink demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Resource name prefix (the tables `heatsink local bootstrap` created).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// How many likes to write.
    #[arg(long, default_value_t = 20)]
    likes: u32,
}

/// Runs the scenario.
pub async fn run(args: DemoArgs) -> CmdResult {
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let streams = aws_sdk_dynamodbstreams::Client::new(&config);
    let schema = Schema::new(args.prefix);
    let liked = schema.table_name(Table::Liked);
    let run_id = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let post = format!("demo-{run_id}");
    let start = Instant::now();
    for i in 0..args.likes {
        ddb.put_item()
            .table_name(&liked)
            .item("user", AttributeValue::S(format!("u{i}")))
            .item("post", AttributeValue::S(post.clone()))
            .condition_expression("attribute_not_exists(#u)")
            .expression_attribute_names("#u", "user")
            .send()
            .await?;
    }
    println!(
        "wrote {} durable likes of {post} into {liked} in {:?}",
        args.likes,
        start.elapsed()
    );
    let arn = ddb
        .describe_table()
        .table_name(&liked)
        .send()
        .await?
        .table
        .and_then(|t| t.latest_stream_arn)
        .ok_or("the liked table has no stream: run `heatsink local bootstrap`")?;
    let start = Instant::now();
    let mut seen = 0u32;
    while start.elapsed() < Duration::from_secs(10) && seen < args.likes {
        seen = 0;
        let desc = streams.describe_stream().stream_arn(&arn).send().await?;
        for shard in desc
            .stream_description()
            .map(|d| d.shards())
            .unwrap_or_default()
        {
            let Some(id) = shard.shard_id() else { continue };
            let mut it = streams
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await?
                .shard_iterator;
            while let Some(i) = it.take() {
                let out = streams.get_records().shard_iterator(i).send().await?;
                let n = out
                    .records()
                    .iter()
                    .filter(|r| {
                        r.dynamodb()
                            .and_then(|d| d.keys())
                            .and_then(|k| k.get("post"))
                            .is_some_and(|p| p.as_s().is_ok_and(|p| *p == post))
                    })
                    .count();
                seen += n as u32;
                if out.records().is_empty() {
                    break;
                }
                it = out.next_shard_iterator;
            }
        }
    }
    println!(
        "read {seen} of them back from the change stream in {:?}",
        start.elapsed()
    );
    if seen != args.likes {
        return Err(format!("expected {} stream records, saw {seen}", args.likes).into());
    }
    Ok(())
}
