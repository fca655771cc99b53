//! hotkey-controller: on an alarm state change, every minute, or a sampler report, names the hot
//! keys (Contributor Insights or the report) and updates the hot-key directory with hysteresis.
//! All logic is in `heatsink::hot::Controller`.
//!
//! Environment: `HEATSINK_PREFIX` (default `heatsink-`); `HEATSINK_CONTROLLER_TABLES`, a list of
//! `<table>:read|write` saying what each watched table's hot keys need (default: the counters
//! table, read-hot: the celebrity post's count).

use heatsink::hot::ControllerConfig;
use heatsink::hot::{Controller, Directory};
use heatsink::insights::Insights;
use heatsink::metrics::Emf;
use heatsink_photo_app::lambda::{LambdaStart, start_lambda};
use heatsink_photo_app::metrics::{Function, Metric};
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
    let tables = match std::env::var("HEATSINK_CONTROLLER_TABLES") {
        Ok(spec) => ControllerConfig::parse_tables(&spec)?,
        Err(_) => {
            ControllerConfig::parse_tables(&format!("{}:read", schema.table_name(Table::Counters)))?
        }
    };
    let settings = ControllerConfig::new(tables);
    let directory = Directory::from_schema(ddb, schema.toolkit());
    let function = Controller::new(directory, settings).with_insights(Insights::new(&sdk));
    let function = &function;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        // Cut before the deadline: the next schedule tick or report runs it again. Boxed: the
        // handler future is deep enough to overflow layout computation inline.
        let outcome = heatsink::lambda::before_deadline(
            event.context.deadline,
            Box::pin(function.handle(&event.payload, std::time::SystemTime::now())),
        )
        .await??;
        tracing::info!(
            trigger = outcome.trigger,
            signals = outcome.signals,
            changes = ?outcome.changes,
            conflicts = ?outcome.conflicts,
            rejected = ?outcome.rejected,
            hot_keys = outcome.hot_keys,
            "controller run"
        );
        Emf::new(Function::HotkeyController)
            .count(Metric::HotKeys, outcome.hot_keys as u64)
            .flush();
        Ok::<_, Error>(serde_json::to_value(outcome)?)
    }))
    .await
}
