//! directory-autopilot: on a schedule (every 5 minutes in the stacks' block), one period of a
//! slot directory's control loop (`heatsink::autopilot::directory::DirectoryLoop`): prove
//! from the move records how far the operation in flight got, or measure each owner table's
//! consumed write capacity from CloudWatch, plan, decide, and — only when switched to act —
//! record the operation before its first move and run its moves through the mover. All logic
//! is in the library.
//!
//! A dry run by default: the loop logs what it would do (one line per decision and per waiting
//! proposal) and emits its metrics, and moves nothing. The stacks switch it to act with the
//! block's `act` (CDK) or `act` (Terraform), which also grants the mover's calls on the owner
//! tables. The kill switch is `heatsink autopilot pause --prefix <prefix> --reason ...`,
//! honoured from the next period (a paused loop neither starts nor continues a move).
//!
//! A period runs moves until 60 s before the function's deadline, then stops them where they
//! are (each move's record holds its last phase) and answers; the next period continues from
//! the records. EMF metrics (dimension `Function=directory-autopilot`), every period, 0s
//! included: `AutopilotPeriodCompleted` (the heartbeat), `AutopilotOperationsStarted`,
//! `AutopilotPaused`, `AutopilotUnproven`, `AutopilotOutOfBudget`, `AutopilotProposals`.
//!
//! Environment: `HEATSINK_DIRECTORY_TABLE` (the directory, `<prefix>slots`; required);
//! `HEATSINK_AUTOPILOT_SPARE` (comma-separated tables that own nothing yet and may take slots);
//! `HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES` (minutes of consumed capacity measured, default 5);
//! `HEATSINK_AUTOPILOT_CAPACITY` (write units per second one owner serves at 100 %, default
//! 1,000); `HEATSINK_AUTOPILOT_BAND` (hysteresis as a share of the mean owner load, default
//! 0.1: relieved above 1.2 × the mean, filled to 1.0 ×); the governor's (`heatsink::lambda::pilot_from_env`: `HEATSINK_AUTOPILOT_ACT`,
//! `_SUSTAIN`, `_COOLDOWN_MINUTES`, `_PER_HOUR`, `_PER_DAY`, `_OWNERS_PER_OPERATION`).

use std::time::Duration;

use heatsink::autopilot::directory::{DirectoryLoop, Load};
use heatsink::autopilot::propose::Relative;
use heatsink::lambda::env_or;
use heatsink::metrics::Emf;
use heatsink::slots::SlotDirectory;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

/// What a period keeps after stopping its moves: the answer, the metrics, and the cut move's
/// lease left to run out before the next period.
const STOP_BEFORE_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<(), Error> {
    let start = heatsink::lambda::start(|_| vec![]).await;
    let table = std::env::var("HEATSINK_DIRECTORY_TABLE")
        .map_err(|_| "HEATSINK_DIRECTORY_TABLE is not set: name the slot directory's table")?;
    let spare: Vec<String> = std::env::var("HEATSINK_AUTOPILOT_SPARE")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let minutes: u32 = env_or("HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES", 5)?;
    let capacity: f64 = env_or("HEATSINK_AUTOPILOT_CAPACITY", 1_000.0)?;
    let band: f64 = env_or("HEATSINK_AUTOPILOT_BAND", Relative::default().band)?;
    if !((1..=1_440).contains(&minutes)
        && capacity.is_finite()
        && capacity > 0.0
        && band > 0.0
        && band <= 1.0)
    {
        return Err(format!(
            "HEATSINK_AUTOPILOT_CLOUDWATCH_MINUTES={minutes} (1 to 1440), HEATSINK_AUTOPILOT_CAPACITY={capacity} (above 0) or HEATSINK_AUTOPILOT_BAND={band} (above 0, at most 1) is out of range"
        )
        .into());
    }
    let dir = SlotDirectory::new(start.ddb.clone(), &table);
    let mut pilot = DirectoryLoop::new(
        start.ddb.clone(),
        aws_sdk_dynamodbstreams::Client::new(&start.config),
        dir,
    );
    pilot.pilot = heatsink::lambda::pilot_from_env()?;
    pilot.spare = spare;
    pilot.relative = Relative {
        capacity,
        band,
        ..Relative::default()
    };
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&start.config);
    tracing::info!(table, act = pilot.pilot.act, "directory-autopilot starts");
    let (pilot, cloudwatch) = (&pilot, &cloudwatch);
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let now = heatsink::clock::now_ms();
        let mut period = pilot.clone();
        period.move_time = Some(
            heatsink::lambda::budget(event.context.deadline, now)
                .saturating_sub(STOP_BEFORE_DEADLINE),
        );
        let load = Load::CloudWatch {
            client: cloudwatch.clone(),
            minutes,
            sampled: Default::default(),
        };
        // Reads and saves before and after the moves are cut at the deadline too: a period
        // cut after it recorded an operation leaves it in flight, and the next continues it.
        let report =
            heatsink::lambda::before_deadline(event.context.deadline, period.run(now, load))
                .await??;
        for line in report.lines() {
            tracing::info!(target: "heatsink::autopilot", "{line}");
        }
        let mut emf = Emf::new("directory-autopilot");
        report.metrics(&mut emf);
        emf.flush();
        Ok::<_, Error>(serde_json::to_value(report)?)
    }))
    .await
}
