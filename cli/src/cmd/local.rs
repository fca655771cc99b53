//! `heatsink local …`: set up the resources on the local stack (or any endpoint).

use clap::{Args, Subcommand};
use heatsink::error::SchemaError;
use heatsink::schema::{self, DEFAULT_PREFIX, Ensured, Existence, Schema};
use heatsink_photo_app::schema::Schema as PhotoSchema;
use serde_json::{Value, json};

use super::fail::{self, Service, Target};
use super::output::Output;
use super::table::{Align, Grid};
use super::{CmdResult, sdk_config};

/// Subcommands of `heatsink local`.
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Create heatsink's tables that are missing (existing ones are left alone); with
    /// --photo-app also the reference photo app's tables and stream, which `heatsink-demo` uses.
    Bootstrap(BootstrapArgs),
}

/// Arguments of `heatsink local bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// Resource name prefix.
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Also create the photo app's tables (`liked`, `posts`) and its `like-events` stream.
    #[arg(long)]
    photo_app: bool,
    #[command(flatten)]
    output: Output,
}

/// Runs a `local` subcommand.
pub async fn run(cmd: LocalCommand) -> CmdResult {
    match cmd {
        LocalCommand::Bootstrap(args) => bootstrap(args).await,
    }
}

async fn bootstrap(args: BootstrapArgs) -> CmdResult {
    let config = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let kinesis = aws_sdk_kinesis::Client::new(&config);
    let (tables, streams) = if args.photo_app {
        let photo = PhotoSchema::new(args.prefix);
        (photo.tables(), photo.streams())
    } else {
        (Schema::new(args.prefix).tables(), vec![])
    };
    let mut report = schema::ensure_tables(&ddb, &tables)
        .await
        .map_err(|e| schema_failure(&config, &e))?;
    report.extend(
        schema::ensure_streams(&kinesis, &streams)
            .await
            .map_err(|e| schema_failure(&config, &e))?,
    );
    args.output
        .report(|| bootstrap_json(&report), || bootstrap_lines(&report))
}

/// `local bootstrap --json`: `{"resources": [{"kind", "name", "outcome"}]}`, outcome `created`
/// or `exists`.
fn bootstrap_json(report: &[Ensured]) -> Value {
    json!({ "resources": report })
}

/// `local bootstrap`'s human form: one line per table or stream.
fn bootstrap_lines(report: &[Ensured]) -> Vec<String> {
    let mut grid = Grid::headless(&[Align::Left, Align::Left, Align::Left]);
    for line in report {
        let what = match line.outcome {
            Existence::Created => "created",
            Existence::Exists => "exists, left alone",
        };
        grid.row([line.kind, line.name.as_str(), what]);
    }
    grid.lines()
}

/// A schema error as one line naming the table or stream, the endpoint and the next step.
pub fn schema_failure(config: &aws_config::SdkConfig, e: &SchemaError) -> fail::Failure {
    match e {
        SchemaError::Dynamo { resource, .. } => {
            Target::new(config, Service::DynamoDb, "table", resource).fail("create or check", e)
        }
        SchemaError::Kinesis { resource, .. } => {
            Target::new(config, Service::Kinesis, "stream", resource).fail("create or check", e)
        }
        other => fail::Failure::new(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_lists_every_resource_with_its_outcome() {
        let report = [
            Ensured {
                kind: "table",
                name: "heatsink-counters".into(),
                outcome: Existence::Created,
            },
            Ensured {
                kind: "stream",
                name: "heatsink-like-events".into(),
                outcome: Existence::Exists,
            },
        ];
        let v: Value = serde_json::from_str(&bootstrap_json(&report).to_string()).expect("parses");
        assert_eq!(
            v,
            json!({"resources": [
                {"kind": "table", "name": "heatsink-counters", "outcome": "created"},
                {"kind": "stream", "name": "heatsink-like-events", "outcome": "exists"},
            ]})
        );
        assert_eq!(
            bootstrap_lines(&report),
            [
                "table  heatsink-counters    created",
                "stream heatsink-like-events exists, left alone"
            ]
        );
    }
}
