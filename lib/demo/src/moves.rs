//! The live-move scene (`heatsink-demo move`): p9's slot moves to a table of its own
//! while a load generator writes versioned likes and caption edits to p9 and the other posts.
//!
//! Glue only: [`run_load`] writes `{pk: "p0" … "p15", v}` through one [`Router`], a copy-mode
//! [`Mover`] moves `slot_of("p9")` from the demo's posts table to its p9 table, and [`verify`]
//! checks every acknowledged write afterwards, as `heatsink slots verify` does. The demo owns
//! three tables (`<prefix>demo-move-posts`, `<prefix>demo-move-p9` and its own directory
//! `<prefix>demo-move-shards`) and deletes and recreates them on every run, so it starts from
//! the same state on a fresh stack and after an earlier (possibly killed) run.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::operation::delete_table::DeleteTableError;
use serde::Serialize;

use clap::Args;
use heatsink::error::{AwsError, SchemaError};
use heatsink::schema::{self, DEFAULT_PREFIX, KeyAttr, Schema, StreamView, Table, TableSpec};
use heatsink::slots::mover::{Budget, DiffReport, MoveProgress, MoveSpec, Mover};
use heatsink::slots::verify::{AckLine, VerifyReport, verify};
use heatsink::slots::{MoveError, MoveMode, Router, SlotDirectory, SlotRange, slot_of};
use heatsink_cli::cmd::CmdResult;
use heatsink_sim::load::{LoadSpec, latency_quantile, run_load};

/// Errors of the move demo.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The directory, router or mover failed.
    #[error(transparent)]
    Reshard(#[from] MoveError),
    /// A demo table could not be created.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A DynamoDB call failed (deleting an earlier run's tables).
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The load task panicked.
    #[error("the load generator stopped: {0}")]
    Load(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoSpec {
    /// Resource name prefix of the demo's tables.
    pub prefix: String,
    /// Writes per second over the 16 posts (each post gets 1/16 of them).
    pub rate: f64,
    /// Load before the move starts and after it ends (the move itself runs in between).
    pub settle: Duration,
    /// The directory's and the router's map max-age.
    pub max_age: Duration,
    /// The move's soak before the source copy is cleaned.
    pub soak: Duration,
}

impl Default for DemoSpec {
    fn default() -> Self {
        Self {
            prefix: heatsink::schema::DEFAULT_PREFIX.into(),
            rate: 100.0,
            settle: Duration::from_secs(2),
            max_age: Duration::from_millis(300),
            soak: Duration::from_secs(1),
        }
    }
}

/// What the demo measured.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The moved slot (p9's).
    pub slot: u16,
    /// Where it was and where it went.
    pub from: String,
    /// The table of its own.
    pub to: String,
    /// The move's id.
    pub move_id: String,
    /// Writes acknowledged (all posts).
    pub acknowledged: u64,
    /// Writes of p9 acknowledged.
    pub acknowledged_p9: u64,
    /// Acknowledged writes read back below their version (must be 0).
    pub lost: u64,
    /// Writes the router gave up on (not acknowledged, so not lost).
    pub failed: u64,
    /// MOVED answers: writes of a stale router bounced by the old owner and retried.
    pub moved: u64,
    /// p50 of the latency of p9's-slot writes in flight during the fence → flip window, in ms (`None`: no write
    /// was issued in it).
    pub pause_p50_ms: Option<f64>,
    /// p99 of the same.
    pub pause_p99_ms: Option<f64>,
    /// The mover's own fence → flip time, in ms.
    pub mover_pause_ms: Option<u64>,
    /// The diff of both sides before the fence.
    pub diff: Option<DiffReport>,
    /// The verifier's report.
    pub verify: VerifyReport,
}

async fn drop_table(ddb: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), DemoError> {
    match ddb.delete_table().table_name(name).send().await {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(DeleteTableError::ResourceNotFoundException(_))
            ) =>
        {
            return Ok(());
        }
        Err(e) => return Err(AwsError::dynamodb("DeleteTable", name, e).into()),
    }
    for _ in 0..600 {
        match ddb.describe_table().table_name(name).send().await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => {
                let err = AwsError::dynamodb("DescribeTable", name, e);
                if err.is_not_found() {
                    return Ok(());
                }
                return Err(err.into());
            }
        }
    }
    Ok(())
}

/// Runs the scene: fresh tables, load on p0 … p15, p9's slot moved while it runs, verify.
pub async fn run_move_demo(
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    spec: &DemoSpec,
    progress: MoveProgress,
) -> Result<DemoReport, DemoError> {
    let from = format!("{}demo-move-posts", spec.prefix);
    let to = format!("{}demo-move-p9", spec.prefix);
    let mut dir_spec = Schema::new(spec.prefix.clone()).table(Table::Slots);
    dir_spec.name = format!("{}demo-move-shards", spec.prefix);
    for t in [&from, &to, &dir_spec.name] {
        drop_table(&ddb, t).await?;
    }
    for t in [&from, &to] {
        let s = TableSpec::new(t.clone(), KeyAttr::s("pk")).stream(StreamView::NewAndOldImages);
        schema::ensure_table(&ddb, &s).await?;
    }
    schema::ensure_table(&ddb, &dir_spec).await?;
    let dir = SlotDirectory::new(ddb.clone(), dir_spec.name.clone());
    dir.init(&from, spec.max_age, false).await?;
    progress(&format!(
        "demo: {from} owns every slot; p9 takes likes and caption edits"
    ));

    let router = Router::new(ddb.clone(), dir.clone(), spec.max_age);
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<Mutex<Vec<AckLine>>> = Arc::new(Mutex::new(vec![]));
    let sink = acks.clone();
    let load = LoadSpec {
        keys: 16,
        prefix: "p".into(),
        tenants: None,
        rate: spec.rate,
        duration: Duration::from_secs(3_600),
        max_in_flight: 32,
    };
    let task = tokio::spawn(run_load(router.clone(), load, stop.clone(), move |a| {
        if let Ok(mut v) = sink.lock() {
            v.push(a.clone());
        }
    }));
    tokio::time::sleep(spec.settle).await;

    let slot = slot_of("p9");
    let moved = async {
        let mut mover = Mover::start(
            ddb.clone(),
            streams,
            dir.clone(),
            MoveSpec {
                slots: SlotRange::single(slot)?,
                to: to.clone(),
                mode: MoveMode::Copy,
                strict: false,
                budget: Budget {
                    soak: spec.soak,
                    ..Budget::default()
                },
            },
        )
        .await?
        .with_progress(progress.clone());
        progress(&format!(
            "demo: moving slot {slot} (p9) to {to}, move {}",
            mover.record().id
        ));
        Ok::<_, MoveError>(mover.run().await?.clone())
    }
    .await;
    tokio::time::sleep(spec.settle).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = task.await.map_err(|e| DemoError::Load(e.to_string()))?;
    let record = moved?;

    let acks = acks.lock().map(|v| v.clone()).unwrap_or_default();
    let checked = verify(&router, &acks).await?;
    // The writers' pause: latencies of p9's-slot writes in flight at any time between fence
    // and flip (a writer of p9 waits for its write to settle, so most were issued before it).
    let (p50, p99) = match (record.fenced_ms, record.pause_ms) {
        (Some(at), Some(ms)) => {
            let end = at.saturating_add(ms);
            let paused: Vec<_> = report
                .samples
                .iter()
                .filter(|s| {
                    s.slot == slot
                        && s.issued_ms <= end
                        && s.issued_ms.saturating_add(s.latency_us / 1_000) >= at
                })
                .copied()
                .collect();
            (
                latency_quantile(&paused, 0, u64::MAX, 0.5),
                latency_quantile(&paused, 0, u64::MAX, 0.99),
            )
        }
        _ => (None, None),
    };
    Ok(DemoReport {
        slot,
        from,
        to,
        move_id: record.id.clone(),
        acknowledged: report.acked,
        acknowledged_p9: acks.iter().filter(|a| a.key == "p9").count() as u64,
        lost: checked.lost,
        failed: report.failed,
        moved: report.moved,
        pause_p50_ms: p50,
        pause_p99_ms: p99,
        mover_pause_ms: record.pause_ms,
        diff: record.diff.clone(),
        verify: checked,
    })
}

/// Arguments of `heatsink-demo move`.
#[derive(Debug, Args)]
pub struct MoveDemoArgs {
    /// Resource name prefix (the demo's tables are `<prefix>demo-move-*`, recreated each run).
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Versioned writes per second over posts p0 … p15.
    #[arg(long, default_value = "100", value_parser = heatsink_cli::cmd::positive_rate)]
    rate: f64,
    /// Load before the move and after it.
    #[arg(long, default_value = "2s", value_parser = heatsink_cli::cmd::parse_duration)]
    settle: std::time::Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the move scene with `a` and prints its report (JSON with `--json`); fails if an
/// acknowledged write was lost.
pub async fn move_demo(a: MoveDemoArgs) -> CmdResult {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err() {
        return Err(
            "the demo runs on the local stack: eval \"$(localstack/stack env)\" first".into(),
        );
    }
    let config = heatsink_cli::cmd::slots_sdk_config().await;
    let spec = DemoSpec {
        prefix: a.prefix,
        rate: a.rate,
        settle: a.settle,
        ..DemoSpec::default()
    };
    let r = run_move_demo(
        aws_sdk_dynamodb::Client::new(&config),
        aws_sdk_dynamodbstreams::Client::new(&config),
        &spec,
        std::sync::Arc::new(|line: &str| eprintln!("{line}")),
    )
    .await?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} ms"));
        println!(
            "moved slot {} (p9) from {} to {} (move {})",
            r.slot, r.from, r.to, r.move_id
        );
        println!(
            "write pause on p9's slot: p50 {} p99 {} (mover fence -> flip {} ms)",
            ms(r.pause_p50_ms),
            ms(r.pause_p99_ms),
            r.mover_pause_ms.map_or("-".to_owned(), |v| v.to_string())
        );
        println!("stale routers bounced (MOVED): {}", r.moved);
        println!(
            "writes acknowledged: {} (p9: {}), lost: {}, not acknowledged: {}",
            r.acknowledged, r.acknowledged_p9, r.lost, r.failed
        );
        match &r.diff {
            Some(d) => println!(
                "diff: {} ({} source items, {} target, missing {}, extra {}, mismatched {})",
                if d.clean() { "clean" } else { "DIFFERENCES" },
                d.source_items,
                d.target_items,
                d.missing,
                d.extra,
                d.mismatched
            ),
            None => println!("diff: not run"),
        }
    }
    if !r.verify.ok() {
        return Err(format!("acknowledged writes lost: {:?}", r.verify.lost_samples).into());
    }
    Ok(())
}
