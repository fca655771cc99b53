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
//! After each run it prints the run's EMF metrics (dimension `Function=count-rebuilder`,
//! `heatsink_photo_app::metrics::AppEmf::repair`): `CounterRebuildCompleted` (1 when the pass
//! finished), `CounterCorrectionLikes`, `CountersCorrected`, `CountersUnsettled` (bucket checks
//! that moved), `CounterRebuildLagging` and `CounterRepairBlocked`, 0s included, and
//! `CounterRepairLag` when progress is proven. A run that times out emits nothing: the
//! heartbeat alarm treats missing data as breaching. Both stacks alarm on a blocked repair
//! (`count-rebuilder-blocked`: three blocked runs in a row) and on proven progress more than
//! 15 minutes behind (`count-rebuilder-repair-lag`), missing data not breaching.
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
//!
//! The sweep: after the bucket checks, a run visits up to `HEATSINK_SWEEP_PER_RUN` counters
//! (default 200 for the photo app's likes, whose `liked` table is insert-only; 0 turns it off)
//! from a cursor kept in the counters table, and checks each one quiet for
//! `HEATSINK_SWEEP_QUIET_SECONDS` (default 1,800) whole, on the same proven progress: a like
//! lost on a cold post (a parked batch never redriven) is made up within the quiet time plus
//! one cycle of `⌈posts / 200⌉` runs (`swept`, `sweep_warm`, `sweep_cycles_done` in the report).
//!
//! `HEATSINK_STREAM_FAILURES_URL` (both stacks set it to the aggregator's `stream-failures`
//! queue): before each repair, the run redrives up to `HEATSINK_REDRIVE_MAX` (default 10) parked
//! batches (`heatsink::counter::redrive::Redrive::drain`: no new batch after 60 s, 5 s a read, never
//! cancelled while it holds the repair's lease): each range is read back
//! from the stream and, when the read is complete, the (post, bucket) checks it moved are saved
//! for this run; a message is deleted only then. A batch that cannot be redriven stays in the
//! queue (its alarms keep firing) and is listed in the run's `redriven` with the next step.

use std::time::Duration;

use heatsink::counter::CounterStore;
use heatsink::counter::lineage::{ShardListing, for_stream_arn};
use heatsink::counter::redrive::Redrive;
use heatsink::counter::repair::{Repair, RepairOptions};
use heatsink::metrics::Emf;
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{AppEmf, Function};
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
    // The sweep of quiet counters: on by default where the insert-only rule holds.
    if counting_likes {
        options.sweep = 200;
    }
    if let Ok(v) = std::env::var("HEATSINK_SWEEP_PER_RUN") {
        options.sweep = v
            .parse()
            .map_err(|e| format!("HEATSINK_SWEEP_PER_RUN={v:?} is not a whole number: {e}"))?;
    }
    if let Some(quiet) = seconds("HEATSINK_SWEEP_QUIET_SECONDS")? {
        options.sweep_quiet = quiet;
    }
    let counting = Counting::from_env(&schema);
    let recount = counting.bucket_recount(&ddb);
    let counters = CounterStore::new(ddb.clone(), counting.counters_table.clone());
    // Parked batches: redriven before each repair when the queue is named.
    let failures = std::env::var("HEATSINK_STREAM_FAILURES_URL").ok();
    let redrive_max: u32 = match std::env::var("HEATSINK_REDRIVE_MAX") {
        Ok(v) => v
            .parse()
            .map_err(|e| format!("HEATSINK_REDRIVE_MAX={v:?} is not a whole number: {e}"))?,
        Err(_) => 10,
    };
    let sqs = aws_sdk_sqs::Client::new(&config);
    let mapper = counting.mapper();
    // The repair's bucket width: the checks a redrive saves are buckets the repair judges.
    let redrive = Redrive::new(&*mapper, &counting.counter, options.buckets)
        .with_kinesis(aws_sdk_kinesis::Client::new(&config))
        .with_streams(aws_sdk_dynamodbstreams::Client::new(&config))
        .deadline(Duration::from_secs(5))
        .drain_budget(Duration::from_secs(60));
    let (counters, counting, recount, options) = (&counters, &counting, &recount, &options);
    let (failures, sqs, redrive) = (failures.as_deref(), &sqs, &redrive);
    let lineage = lineage.as_deref();
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let mut options = options.clone();
        options.holder = event.context.request_id.clone();
        let repair = Repair::new(counters, &counting.counter, recount, options);
        let repair = match lineage {
            Some(l) => repair.with_lineage(l),
            None => repair,
        };
        // Parked batches first, so this run judges what they held. A drain that fails or runs
        // out of time deletes nothing it did not save: the repair goes on regardless.
        let mut redriven = vec![];
        if let Some(url) = failures {
            // Bounded from inside (60 s of new batches, 5 s a read): never cancelled while a
            // request holds the repair's lease.
            match redrive.drain(sqs, url, redrive_max, &repair).await {
                Ok(rows) => redriven = rows,
                Err(e) => tracing::error!(error = %e, "redrive stopped; parked batches kept"),
            }
            for r in &redriven {
                tracing::info!(batch = %r.source, result = r.result, shard = ?r.shard, checks = r.checks, detail = ?r.detail, "parked batch");
            }
        }
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
            swept = report.swept,
            blocked = ?report.blocked,
            "repair done"
        );
        Emf::new(Function::CountRebuilder).repair(&report).flush();
        let mut out = serde_json::to_value(report)?;
        out["redriven"] = serde_json::to_value(&redriven)?;
        Ok::<_, Error>(out)
    }))
    .await
}
