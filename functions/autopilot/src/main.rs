//! autopilot: every minute (an EventBridge schedule), one period of `like-events`' control
//! loop (`heatsink::autopilot::stream::StreamLoop`): settle the operation in flight from the
//! shard map, sample each shard's load, plan, decide, and — only when switched to act — record
//! the chosen split or merge before making its one call. All logic is in the library.
//!
//! A dry run by default: the loop logs what it would do (one line per decision, each waiting
//! proposal and each hot key named for salting, which no split helps) and emits its metrics, and
//! changes nothing on the stream. The stacks switch it to act with `autopilotAct` (CDK) or
//! `autopilot_act` (Terraform), which also grants `kinesis:SplitShard` and
//! `kinesis:MergeShards`. The kill switch is `heatsink autopilot pause --stream <stream>`,
//! honoured from the next period.
//!
//! EMF metrics (dimension `Function=autopilot`), every period, 0s included:
//! `AutopilotPeriodCompleted` (the heartbeat), `AutopilotOperationsStarted`, `AutopilotPaused`,
//! `AutopilotUnproven`, `AutopilotOutOfBudget`, `AutopilotProposals`. A period that fails or
//! times out emits nothing, and the `autopilot-failing` alarm sees the missing heartbeat.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_AUTOPILOT_ACT` (`true` acts;
//! unset or `false` is a dry run; anything else refuses to start); `HEATSINK_AUTOPILOT_STREAM`
//! (default `<prefix>like-events`); the governor's rules, each optional:
//! `HEATSINK_AUTOPILOT_SUSTAIN` (periods in a row, default 2), `HEATSINK_AUTOPILOT_COOLDOWN_MINUTES`
//! (30), `HEATSINK_AUTOPILOT_PER_HOUR` (4), `HEATSINK_AUTOPILOT_PER_DAY` (10),
//! `HEATSINK_AUTOPILOT_SAMPLE_SECONDS` (60). The state is in `<prefix>autopilot`.

use heatsink::autopilot::store::PilotStore;
use heatsink::autopilot::stream::StreamLoop;
use heatsink::metrics::Emf;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{AppEmf, Function};
use heatsink_photo_app::schema::Table;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart {
        config: sdk,
        schema,
        ddb,
    } = start_lambda().await;
    let stream =
        std::env::var("HEATSINK_AUTOPILOT_STREAM").unwrap_or_else(|_| schema.like_events().name);
    // (StreamLoop runs one reshard an operation whatever `per_operation` says.)
    let pilot = heatsink::lambda::pilot_from_env()?;
    let store = PilotStore::for_stream(ddb, schema.table_name(Table::Autopilot), &stream);
    let mut function = StreamLoop::new(aws_sdk_kinesis::Client::new(&sdk), store, &stream);
    function.pilot = pilot;
    function.sample_secs = heatsink::lambda::env_or("HEATSINK_AUTOPILOT_SAMPLE_SECONDS", 60)?;
    tracing::info!(stream, act = pilot.act, "autopilot starts");
    let function = &function;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        // Cut before the deadline: a period cut after it recorded an operation leaves it in
        // flight, and the next period settles it from the shard map.
        let period = heatsink::lambda::before_deadline(
            event.context.deadline,
            Box::pin(function.run(heatsink::clock::now_ms())),
        )
        .await??;
        for line in period.lines() {
            tracing::info!(target: "heatsink::autopilot", "{line}");
        }
        Emf::new(Function::Autopilot).autopilot(&period).flush();
        Ok::<_, Error>(serde_json::to_value(period)?)
    }))
    .await
}
