//! `heatsink`: the operator commands (the demos are `heatsink-demo`, crate `heatsink-demo`).
//!
//! Every command reaches AWS through the standard configuration chain (`AWS_REGION`,
//! `AWS_ENDPOINT_URL_*`, credentials), so the same binary drives AWS or the local stack.

use heatsink_cli::cmd;
use heatsink_cli::cmd::exit::{self, Exit};

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// heatsink: keep hot keys from melting DynamoDB partitions and Kinesis shards.
#[derive(Debug, Parser)]
#[command(name = "heatsink", version, about, after_help = exit::footer(exit::CHECKS))]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with the local AWS stack (see `localstack/stack`).
    Local {
        #[command(subcommand)]
        command: cmd::local::LocalCommand,
    },
    /// Print the tables and streams heatsink uses.
    Schema(cmd::schema::SchemaArgs),
    /// Size S for a hot key so every shard, counting its other traffic, stays under target.
    Plan(cmd::plan::PlanArgs),
    /// Inspect where keys land.
    Keys {
        #[command(subcommand)]
        command: cmd::keys::KeysCommand,
    },
    /// Run the partition simulator: a throttling proxy in front of a DynamoDB endpoint.
    Sim(cmd::sim::SimArgs),
    /// Print a stream's shard tree (open/closed, parents, hash ranges, checkpoints for --app).
    Lineage(cmd::lineage::LineageArgs),
    /// Edit the hot-key directory by hand (epoch-conditional, like the controller).
    Hot {
        #[command(subcommand)]
        command: cmd::hot::HotCommand,
    },
    /// Run a worker of an application and print each record it processes (--json: JSON lines).
    Tail(cmd::tail::TailArgs),
    /// Print the hottest keys of a table and its GSIs from Contributor Insights (--enable turns it on).
    Top(cmd::top::TopArgs),
    /// The slot directory: slot ranges → owner table (init, status, split, merge, load, verify, plan).
    Slots {
        #[command(subcommand)]
        command: cmd::slots::SlotsCommand,
    },
    /// Live moves of slot ranges between tables (start, status, resume, abort, rollback, list,
    /// repair-fences).
    Move {
        #[command(subcommand)]
        command: cmd::r#move::MoveCommand,
    },
    /// Recount likes from the durable records and correct settled counters (what count-rebuilder runs).
    Rebuild(cmd::rebuild::RebuildArgs),
    /// Read the aggregator's parked batches back from the stream and hand the counters they moved
    /// to the repair (from `<prefix>stream-failures`, or --record files).
    Redrive(cmd::redrive::RedriveArgs),
    /// Put records on a Kinesis stream (stdin JSON lines or generated load); prints a summary.
    Produce(cmd::produce::ProduceArgs),
    /// Load-aware resharding of a Kinesis stream: plan (print) or apply (carry out, resumable).
    Reshard {
        #[command(subcommand)]
        command: cmd::reshard::ReshardCommand,
    },
    /// The slot directory's control loop, a period at a time (status, pause, resume, finish,
    /// reset, plan, run): moves from load, judged by the governor; dry run unless --act.
    Autopilot {
        #[command(subcommand)]
        command: cmd::autopilot::AutopilotCommand,
    },
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::CompletionsArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Local { command } => cmd::local::run(command).await,
        Command::Schema(args) => cmd::schema::run(args),
        Command::Sim(args) => cmd::sim::run(args).await,
        Command::Plan(args) => cmd::plan::run(args).await,
        Command::Keys { command } => cmd::keys::run(command).await,
        Command::Lineage(args) => cmd::lineage::run(args).await,
        Command::Tail(args) => cmd::tail::run(args).await,
        Command::Hot { command } => cmd::hot::run(command).await,
        Command::Top(args) => cmd::top::run(args).await,
        Command::Rebuild(args) => cmd::rebuild::run(args).await,
        Command::Redrive(args) => cmd::redrive::run(args).await,
        Command::Produce(args) => cmd::produce::run(args).await,
        Command::Reshard { command } => cmd::reshard::run(command).await,
        Command::Slots { command } => cmd::slots::run(command).await,
        Command::Move { command } => cmd::r#move::run(command).await,
        Command::Autopilot { command } => cmd::autopilot::run(command).await,
        Command::Completions(args) => cmd::completions::run(&args, &mut Cli::command()),
    };
    let exit = Exit::of(&result);
    if let Err(e) = result {
        // Commands wrap their AWS errors in one-line failures; any other error is folded to
        // one line here too (an AWS call's with its resource and endpoint), no SDK `Debug` dump.
        eprintln!("error: {}", cmd::fail::render_any(&*e));
    }
    exit.into()
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;

    fn refused(argv: &[&str]) -> ErrorKind {
        match Cli::try_parse_from(["heatsink"].iter().chain(argv)) {
            Ok(cli) => panic!("{argv:?} parsed: {cli:?}"),
            Err(e) => e.kind(),
        }
    }

    #[test]
    fn the_former_panics_are_parse_errors() {
        let max = u64::MAX.to_string();
        for argv in [
            &["plan", "--rate", "2400", "--shards", "18446744073709551615"][..],
            &["plan", "--rate", "2400", "--shards", "1000000000"],
            &["hot", "set", "p9", "--mode", "cache", "--ttl", &max],
            &["hot", "set", "p9", "--mode", "cache", "--ttl", "315360001"],
            &["hot", "set", "p9", "--mode", "cache", "--ttl", "0"],
            &["hot", "set", "p9", "--mode", "salt", "--salts", "1"],
            &["hot", "set", "p9", "--mode", "salt", "--salts", "257"],
            &["hot", "set", "t", "--mode", "limit", "--limit", "0"],
            &["keys", "where", "k", "--stream", "s", "--salts", "0"],
            &["top", "--table", "t", "--minutes", "0"],
            &["rebuild", "--quiet", "1000h"],
            &["tail", "--stream", "s", "--app", "a", "--idle-exit", "200h"],
        ] {
            assert_eq!(refused(argv), ErrorKind::ValueValidation, "{argv:?}");
        }
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn version_prints_the_crate_version() {
        let err = Cli::try_parse_from(["heatsink", "--version"]).expect_err("--version exits");
        assert_eq!(err.kind(), ErrorKind::DisplayVersion);
        assert_eq!(err.exit_code(), i32::from(Exit::Ok.code()));
        assert_eq!(
            err.to_string().trim(),
            format!("heatsink {}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn usage_errors_exit_with_the_documented_code() {
        let err = Cli::try_parse_from(["heatsink", "plan", "--rate", "x"]).expect_err("bad rate");
        assert_eq!(err.exit_code(), i32::from(Exit::Usage.code()));
    }

    #[test]
    fn the_help_footer_lists_every_exit_code() {
        let help = Cli::command().render_long_help().to_string();
        for exit in Exit::ALL {
            let line = format!("  {}  {}", exit.code(), exit.meaning());
            assert!(
                help.contains(&line),
                "{line:?} missing from --help:\n{help}"
            );
        }
        for (command, _) in exit::CHECKS {
            let path: Vec<&str> = command
                .split_whitespace()
                .take_while(|w| !w.starts_with('-') && *w != "*")
                .collect();
            assert!(
                find(&Cli::command(), &path).is_some(),
                "the footer names {command:?}, which is not a command"
            );
            assert!(help.contains(command), "{command}");
        }
        let short = Cli::command().render_help().to_string();
        assert!(short.contains("Exit codes:"), "-h shows the codes too");
    }

    /// The subcommand at `path` (`["slots", "verify"]`).
    fn find(root: &clap::Command, path: &[&str]) -> Option<clap::Command> {
        let mut cmd = root.clone();
        for name in path {
            cmd = cmd.find_subcommand(name)?.clone();
        }
        Some(cmd)
    }

    #[test]
    fn completion_scripts_name_every_subcommand() {
        use clap_complete::Shell;
        let paths = cmd::completions::subcommand_paths(&Cli::command());
        assert!(paths.len() > 20, "{paths:?}");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = cmd::completions::script(&mut Cli::command(), shell);
            for path in &paths {
                assert!(
                    cmd::completions::offers(&script, shell, "heatsink", path),
                    "{shell} completion lacks {}",
                    path.join(" ")
                );
            }
            // Flags of nested commands are completed too.
            assert!(
                script.contains("ack-log"),
                "{shell}: slots verify --ack-log"
            );
        }
        let parsed = Cli::try_parse_from(["heatsink", "completions", "zsh"]).expect("parse");
        assert!(matches!(parsed.command, Command::Completions(_)));
    }

    /// Leaf commands that print no report, so take no `--json`.
    const NO_REPORT: &[&str] = &["completions"];

    #[test]
    fn every_command_that_reports_takes_json() {
        let mut missing = Vec::new();
        for path in cmd::completions::subcommand_paths(&Cli::command()) {
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            let leaf = find(&Cli::command(), &words).expect("listed");
            if leaf.has_subcommands() || NO_REPORT.contains(&path.join(" ").as_str()) {
                continue;
            }
            if !leaf.get_arguments().any(|a| a.get_long() == Some("json")) {
                missing.push(path.join(" "));
            }
        }
        assert!(missing.is_empty(), "no --json: {missing:?}");
    }
}
