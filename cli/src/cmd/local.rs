//! `heatsink local …`: set up the resources on the local stack (or any endpoint).

use clap::{Args, Subcommand};
use heatsink::schema::{self, DEFAULT_PREFIX, Outcome, Schema};

use super::{CmdResult, sdk_config};

/// Subcommands of `heatsink local`.
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Create every table and stream that is missing (existing ones are left alone).
    Bootstrap(BootstrapArgs),
}

/// Arguments of `heatsink local bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// Resource name prefix.
    #[arg(long, env = "HEATSINK_PREFIX", default_value = DEFAULT_PREFIX)]
    prefix: String,
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
    let schema = Schema::new(args.prefix);
    let report = schema::ensure(&ddb, &kinesis, &schema).await?;
    for line in report {
        let what = match line.outcome {
            Outcome::Created => "created",
            Outcome::Exists => "exists, left alone",
        };
        println!("{:<6} {:<28} {what}", line.kind, line.name);
    }
    Ok(())
}
