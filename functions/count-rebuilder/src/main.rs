//! count-rebuilder: on a schedule, recounts every post's likes from the durable `liked` records
//! and writes the difference into each counter's `fix` sub-key (`heatsink::likes::rebuild`).
//!
//! After each run it prints the run's EMF metrics (`heatsink::metrics::Emf::rebuild`, dimension
//! `Function=count-rebuilder`): `CounterCorrectionLikes` (likes the counters were off by),
//! `CountersCorrected` and `CountersUnsettled`, 0s included. The `counter-corrections` alarm
//! fires on any correction.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_REBUILD_QUIET_SECONDS`, how
//! long a post must have had no new like before its counter is corrected (default 60).

use std::time::Duration;

use heatsink::likes::RebuildOptions;
use heatsink::metrics::{Emf, Function, LambdaStart, start_lambda};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let LambdaStart { schema, ddb, .. } = start_lambda().await;
    let mut options = RebuildOptions::default();
    if let Ok(secs) = std::env::var("HEATSINK_REBUILD_QUIET_SECONDS") {
        options.quiet = Duration::from_secs(secs.parse()?);
    }
    let (ddb, schema, options) = (&ddb, &schema, &options);
    run(service_fn(move |_event: LambdaEvent<Value>| async move {
        let report = heatsink::likes::rebuild(ddb, schema, options.clone()).await?;
        tracing::info!(
            corrected = report.corrected.len(),
            unsettled = report.unsettled.len(),
            "rebuild done"
        );
        // Corrections are rare and each one is an incident (the counter-corrections alarm): name
        // the posts so the runbook can start from them.
        for (post, change) in &report.corrected {
            tracing::warn!(post = %post, change, "counter corrected");
        }
        Emf::new(Function::CountRebuilder).rebuild(&report).flush();
        Ok::<_, Error>(serde_json::to_value(report)?)
    }))
    .await
}
