//! `heatsink-demo`: the two scenes of docs/hot-keys.md and docs/moves.md on the local
//! stack.
//!
//! - `heatsink-demo [FLAGS]`: the celebrity post p9 takes likes at a rate one partition cannot
//!   absorb, written naively, salted, and pre-aggregated from the stream; prints throttles, the
//!   hot-key writes per 1,000 likes and whether each count is exact (`heatsink_demo::likes`).
//! - `heatsink-demo move [FLAGS]`: p9's slot moves to a table of its own while writers keep
//!   writing; prints the writers' pause and every acknowledged write checked (`heatsink_demo::moves`).
//!
//! Run `heatsink local bootstrap --photo-app` first (`make demo` does both).

use std::process::ExitCode;

use clap::Parser;

/// The heatsink demos on the local stack (`make demo`).
#[derive(Debug, Parser)]
#[command(name = "heatsink-demo", version, about)]
struct Cli {
    #[command(flatten)]
    args: heatsink_demo::likes::DemoArgs,
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
    match heatsink_demo::likes::run(cli.args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", heatsink_cli::cmd::fail::render_any(&*e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use clap::error::ErrorKind;

    use super::*;

    #[test]
    fn out_of_range_flags_are_parse_errors() {
        let max = u64::MAX.to_string();
        for argv in [
            &["--duration", "0"][..],
            &["--duration", &max],
            &["--salts", "1000"],
            &["--max-in-flight", "0"],
            &["--scale", "NaN"],
            &["--partitions", "0"],
        ] {
            let parsed = Cli::try_parse_from(["heatsink-demo"].iter().chain(argv));
            assert_eq!(
                parsed.map(|_| ()).map_err(|e| e.kind()),
                Err(ErrorKind::ValueValidation),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn the_demo_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
