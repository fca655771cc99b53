//! count-rebuilder: on a schedule (every 5 minutes), repairs the counters touched since its last
//! run, one time bucket at a time (the toolkit's `heatsink::counter::repair::Repair`, over the
//! per-bucket recount `heatsink_photo_app::counting` configures: the photo app's likes through
//! `liked`'s `by-post` index by default, any table's items per attribute with
//! `HEATSINK_COUNTER`, `HEATSINK_COUNT_BY`, `HEATSINK_EVENTS_TABLE`,
//! `HEATSINK_EVENT_TIME_ATTRIBUTE`). A bucket is corrected only once the aggregator's flushed
//! watermarks prove it processed every change the recount saw, so a hot post is repaired while
//! it is still being liked and a lagging aggregator's likes are never made up twice.
//!
//! One run at a time: reserved concurrency 1, no asynchronous retries, and a lease item in the
//! counters table. A run stops starting new posts after `HEATSINK_REBUILD_BUDGET_SECONDS`
//! (default 240, below the 300 s timeout) and persists its cursor; the next run resumes.
//!
//! After each run it prints the run's EMF metrics (dimension `Function=count-rebuilder`):
//! `CounterRebuildCompleted` (1 when the pass finished), `CounterCorrectionLikes`,
//! `CountersCorrected`, `CountersUnsettled` (bucket checks that moved) and
//! `CounterRebuildLagging`, 0s included. A run that times out emits nothing: the heartbeat
//! alarm treats missing data as breaching.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_REBUILD_SETTLE_SECONDS`
//! (default 60): how far the aggregator's proven progress must be past a bucket's end before
//! it is judged; `HEATSINK_COMPACT_GRACE_SECONDS` (unset: no compaction; 86400 for DynamoDB
//! Streams and a 24 h Kinesis stream; both stacks set it to the like-events retention):
//! compact every checked post over the retired shards (`RepairOptions::compact`), which needs
//! `dynamodb:UpdateItem` on the counters table (granted by both stacks);
//! `HEATSINK_SOURCE_ARN`: the stream the aggregator reads (the Kinesis stream's ARN, or the
//! events table's `LatestStreamArn`). Every shard it lists must prove progress before a bucket
//! is judged (`Repair::with_lineage`): a shard that has never recorded a watermark blocks the
//! run (`blocked` in its report, `CounterRepairBlocked` = 1) instead of being ignored. Both
//! stacks set it to the source they deploy and grant the listing call (`kinesis:ListShards` or
//! `dynamodb:DescribeStream` on it). Unset, the run trusts the watermarks it finds, which cannot
//! see a shard that never flushed: the function logs that at every start.
//!
//! A run that cannot prove progress judges nothing, moves no cursor and reports `blocked` with
//! the shard and the next step; `CounterRepairLag` is `now − proven` in seconds.

use std::time::Duration;

use heatsink::counter::CounterStore;
use heatsink::counter::lineage::{ShardListing, for_stream_arn};
use heatsink::counter::repair::{Repair, RepairOptions};
use heatsink::metrics::Emf;
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::Function;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

fn seconds(var: &str) -> Result<Option<Duration>, Error> {
    match std::env::var(var) {
        Ok(v) => Ok(Some(Duration::from_secs(v.parse().map_err(|e| {
            format!("{var}={v:?} is not a whole number of seconds: {e}")
        })?))),
        Err(_) => Ok(None),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart {
        config,
        schema,
        ddb,
    } = start_lambda().await;
    let lineage: Option<std::sync::Arc<dyn ShardListing>> = match std::env::var(
        "HEATSINK_SOURCE_ARN",
    ) {
        Ok(arn) => {
            Some(for_stream_arn(&config, &arn).map_err(|e| format!("HEATSINK_SOURCE_ARN: {e}"))?)
        }
        Err(_) => {
            tracing::warn!(
                "HEATSINK_SOURCE_ARN is not set: a shard that never flushed cannot block repairs; set it to the stream the aggregator reads"
            );
            None
        }
    };
    let mut options = RepairOptions::default();
    let counting_likes = Counting::from_env(&schema).is_likes();
    // `liked` is written only by conditional inserts (likes-api): the insert-only rule.
    options.insert_only = counting_likes;
    if let Some(settle) = seconds("HEATSINK_REBUILD_SETTLE_SECONDS")? {
        options.settle = settle;
    }
    if let Some(budget) = seconds("HEATSINK_REBUILD_BUDGET_SECONDS")? {
        options.budget = budget;
    }
    options.compact = seconds("HEATSINK_COMPACT_GRACE_SECONDS")?;
    let counting = Counting::from_env(&schema);
    let recount = counting.bucket_recount(&ddb);
    let counters = CounterStore::new(ddb.clone(), counting.counters_table.clone());
    let (counters, counting, recount, options) = (&counters, &counting, &recount, &options);
    let lineage = lineage.as_deref();
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let mut options = options.clone();
        options.holder = event.context.request_id.clone();
        let repair = Repair::new(counters, &counting.counter, recount, options);
        let repair = match lineage {
            Some(l) => repair.with_lineage(l),
            None => repair,
        };
        // Cut before the deadline: the repair's lease and cursor make the next run go on.
        let report =
            heatsink::lambda::before_deadline(event.context.deadline, repair.run()).await??;
        tracing::info!(
            completed = report.completed,
            busy = report.busy,
            posts = report.posts_checked,
            buckets = report.buckets_checked,
            corrected = report.corrected.len(),
            lagging = report.lagging,
            compacted = report.compacted,
            blocked = ?report.blocked,
            "repair done"
        );
        let mut emf = Emf::new(Function::CountRebuilder);
        report.metrics(&mut emf);
        emf.flush();
        Ok::<_, Error>(serde_json::to_value(report)?)
    }))
    .await
}
