//! count-rebuilder: on a schedule, recounts every counter from the durable events and writes
//! the difference into each counter's `fix` sub-key (the toolkit's
//! `heatsink::counter::rebuild`, over the recount `heatsink_photo_app::counting` configures:
//! the photo app's likes by default, any table's items per attribute with `HEATSINK_COUNTER`,
//! `HEATSINK_COUNT_BY`, `HEATSINK_EVENTS_TABLE`, `HEATSINK_EVENT_TIME_ATTRIBUTE`).
//!
//! After each run it prints the run's EMF metrics (dimension `Function=count-rebuilder`):
//! `CounterCorrectionLikes` (units the counters were off by), `CountersCorrected` and
//! `CountersUnsettled`, 0s included. The `counter-corrections` alarm fires on any correction.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_REBUILD_QUIET_SECONDS`, how
//! long a counter must have had no new event before it is corrected (default 60).

use std::time::Duration;

use heatsink::counter::rebuild::{RebuildOptions, rebuild};
use heatsink::metrics::Emf;
use heatsink_photo_app::counting::Counting;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{AppEmf, Function};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart { schema, ddb, .. } = start_lambda().await;
    let mut options = RebuildOptions::default();
    if let Ok(secs) = std::env::var("HEATSINK_REBUILD_QUIET_SECONDS") {
        options.quiet = Duration::from_secs(secs.parse()?);
    }
    let counting = Counting::from_env(&schema);
    let recount = counting.recount(&ddb);
    let (ddb, counting, recount, options) = (&ddb, &counting, &recount, &options);
    run(service_fn(move |_event: LambdaEvent<Value>| async move {
        let report = rebuild(
            ddb,
            &counting.counters_table,
            &counting.counter,
            recount,
            options.clone(),
        )
        .await?;
        tracing::info!(
            corrected = report.corrected.len(),
            unsettled = report.unsettled.len(),
            "rebuild done"
        );
        // Corrections are rare and each one is an incident (the counter-corrections alarm): name
        // the counters so the runbook can start from them.
        for (id, change) in &report.corrected {
            tracing::warn!(id = %id, change, "counter corrected");
        }
        Emf::new(Function::CountRebuilder).rebuild(&report).flush();
        Ok::<_, Error>(serde_json::to_value(report)?)
    }))
    .await
}
