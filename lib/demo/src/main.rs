//! `heatsink-demo`: the two scenes of docs/hot-keys.md and docs/moves.md on the local
//! stack.
//!
//! - `heatsink-demo [FLAGS]`: the celebrity post p9 takes likes at a rate one partition cannot
//!   absorb, written naively, salted, and pre-aggregated from the stream; prints throttles, the
//!   hot-key writes per 1,000 likes and whether each count is exact (`heatsink_demo::likes`).
//! - `heatsink-demo move [FLAGS]`: p9's slot moves to a table of its own while writers keep
//!   writing; prints the writers' pause and every acknowledged write checked (`heatsink_demo::moves`).
//! - `heatsink-demo detect [FLAGS]`: a key turns hot; the controller salts it from DynamoDB's
//!   throttle reasons alone (sampler off), then from the sampler; prints onset to salting per
//!   signal (`heatsink_demo::detect`).
//! - `heatsink-demo completions SHELL`: the shell completion script.
//!
//! Run `heatsink local bootstrap --photo-app` first (`make demo` does both). Exit codes as
//! `heatsink`'s (0 done, 1 failed or a check found a problem, 2 usage), listed in `--help`.

use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser};
use heatsink_cli::cmd::completions::{self, CompletionsArgs};
use heatsink_cli::cmd::exit::{self, Exit};

/// The checks of `heatsink-demo` that exit 1 when they find a problem.
const CHECKS: &[(&str, &str)] = &[
    (
        "heatsink-demo",
        "(the likes scene) the pre-aggregated count differs from the truth (report printed first)",
    ),
    (
        "move",
        "an acknowledged write was lost (report printed first)",
    ),
    (
        "detect",
        "a detection path never salted the key within --duration (report printed first)",
    ),
];

/// The heatsink demos on the local stack (`make demo`).
#[derive(Debug, Parser)]
#[command(name = "heatsink-demo", version, about, after_help = exit::footer(CHECKS))]
struct Cli {
    #[command(flatten)]
    args: heatsink_demo::likes::DemoArgs,
}

/// The demo's command line: the scenes (`Cli`) and `completions`, which the scenes' own
/// subcommand enum does not hold, added beside them.
fn command() -> clap::Command {
    Cli::command().subcommand(
        CompletionsArgs::augment_args(clap::Command::new("completions")).about(completions::ABOUT),
    )
}

/// What the command line asks for.
enum Run {
    /// A scene.
    Demo(Box<Cli>),
    /// The completion script.
    Completions(CompletionsArgs),
}

/// Parses `argv` (clap's usage error on failure).
fn parse<I, T>(argv: I) -> Result<Run, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(argv)?;
    match matches.subcommand() {
        Some(("completions", sub)) => Ok(Run::Completions(CompletionsArgs::from_arg_matches(sub)?)),
        _ => Ok(Run::Demo(Box::new(Cli::from_arg_matches(&matches)?))),
    }
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
    let run = parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let result = match run {
        Run::Demo(cli) => heatsink_demo::likes::run(cli.args).await,
        Run::Completions(args) => completions::run(&args, &mut command()),
    };
    let exit = Exit::of(&result);
    if let Err(e) = result {
        eprintln!("error: {}", heatsink_cli::cmd::fail::render_any(&*e));
    }
    exit.into()
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn refused(argv: &[&str]) -> ErrorKind {
        match parse(["heatsink-demo"].iter().chain(argv)) {
            Ok(_) => panic!("{argv:?} parsed"),
            Err(e) => e.kind(),
        }
    }

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
            &["--park", "1.5"],
            &["--park=-0.1"],
            &["--reshard-at", "3601"],
        ] {
            assert_eq!(refused(argv), ErrorKind::ValueValidation, "{argv:?}");
        }
    }

    #[test]
    fn the_demo_cli_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn version_prints_the_crate_version() {
        let err = match parse(["heatsink-demo", "--version"]) {
            Ok(_) => panic!("--version exits"),
            Err(e) => e,
        };
        assert_eq!(err.kind(), ErrorKind::DisplayVersion);
        assert_eq!(err.exit_code(), i32::from(Exit::Ok.code()));
        assert_eq!(
            err.to_string().trim(),
            format!("heatsink-demo {}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(refused(&["--nope"]), ErrorKind::UnknownArgument);
        let usage = parse(["heatsink-demo", "--nope"])
            .err()
            .expect("usage error");
        assert_eq!(usage.exit_code(), i32::from(Exit::Usage.code()));
    }

    #[test]
    fn the_help_footer_lists_every_exit_code() {
        let help = command().render_long_help().to_string();
        for exit in Exit::ALL {
            let line = format!("  {}  {}", exit.code(), exit.meaning());
            assert!(
                help.contains(&line),
                "{line:?} missing from --help:\n{help}"
            );
        }
        for (check, _) in CHECKS {
            let name = check.trim_start_matches("heatsink-demo");
            assert!(
                name.is_empty() || command().find_subcommand(name).is_some(),
                "the footer names {check:?}, which is not a scene"
            );
        }
    }

    #[test]
    fn completions_name_every_scene_and_the_scenes_still_parse() {
        use completions::Shell;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = completions::script(&mut command(), shell);
            let paths = completions::subcommand_paths(&command());
            assert_eq!(paths.len(), 3, "{paths:?}");
            for path in paths {
                assert!(
                    completions::offers(&script, shell, "heatsink-demo", &path),
                    "{shell} lacks {}",
                    path.join(" ")
                );
            }
            assert!(script.contains("settle"), "{shell}: move --settle");
            assert!(script.contains("chaos"), "{shell}: --chaos");
        }
        assert!(matches!(
            parse(["heatsink-demo", "completions", "fish"]),
            Ok(Run::Completions(_))
        ));
        assert!(matches!(
            parse(["heatsink-demo", "move", "--json"]),
            Ok(Run::Demo(_))
        ));
        assert!(matches!(
            parse(["heatsink-demo", "--json"]),
            Ok(Run::Demo(_))
        ));
    }
}
