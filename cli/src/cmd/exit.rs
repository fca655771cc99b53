//! Exit codes: what `heatsink` and `heatsink-demo` return, and the footer of `--help` that
//! lists them.
//!
//! Three codes, the same for every command: 0 when it did what was asked, 1 when it failed or a
//! check it ran found a problem (one line on stderr: what failed, where, the next step; see
//! [`super::fail`]), 2 when the command line was not understood (clap's usage error, before
//! anything ran). `main` is the only place that turns a result into a code ([`Exit::of`]), so a
//! command cannot invent a fourth; [`Exit::ALL`] is what the footer lists, and a test checks
//! that no command exits another way.

use std::process::ExitCode;

/// How a command ended, as its process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It did what it was asked (and any check it ran found nothing wrong).
    Ok,
    /// It failed, or a check it ran found a problem: one line on stderr says what failed,
    /// where, and the next step.
    Failure,
    /// The command line was not understood (clap's usage error): nothing ran.
    Usage,
}

impl Exit {
    /// Every code a command can end with.
    pub const ALL: [Self; 3] = [Self::Ok, Self::Failure, Self::Usage];

    /// The process exit code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Failure => 1,
            Self::Usage => 2,
        }
    }

    /// What the code means, for the footer.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Ok => "done (and every check passed)",
            Self::Failure => {
                "failed, or a check found a problem: one line on stderr says what failed, where (resource, endpoint) and the next step"
            }
            Self::Usage => "usage error: the command line was not understood, nothing ran",
        }
    }

    /// The code of a command's result.
    pub fn of<T, E>(result: &Result<T, E>) -> Self {
        match result {
            Ok(_) => Self::Ok,
            Err(_) => Self::Failure,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}

/// The checks of `heatsink` that end with [`Exit::Failure`] when they find a problem (after
/// printing their report), for the footer: command, and what makes it exit 1.
pub const CHECKS: &[(&str, &str)] = &[
    (
        "slots verify",
        "an acknowledged write was lost or a slot has two owners (report printed first)",
    ),
    (
        "produce",
        "records were not written after every retry (summary printed first)",
    ),
    (
        "tail",
        "stdout closed: the batch is not checkpointed, so a re-run prints it",
    ),
    (
        "hot clear --drained",
        "a sub-key readers still read holds items",
    ),
    (
        "move *",
        "a refusal: the line names the move command that gets out of it",
    ),
];

/// The `--help` footer: every code of [`Exit::ALL`] with its meaning, then the checks that
/// exit 1 on a finding.
pub fn footer(checks: &[(&str, &str)]) -> String {
    let mut text = String::from("Exit codes:\n");
    for exit in Exit::ALL {
        text.push_str(&format!("  {}  {}\n", exit.code(), exit.meaning()));
    }
    if !checks.is_empty() {
        text.push_str("\nChecks that exit 1 when they find a problem:\n");
        let width = checks.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
        for (command, when) in checks {
            text.push_str(&format!("  {command:<width$}  {when}\n"));
        }
    }
    text.push_str(
        "\nEvery command that reports prints a human form; --json prints JSON on stdout.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_distinct_and_usage_is_claps() {
        let codes: std::collections::BTreeSet<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), Exit::ALL.len());
        let usage = clap::Command::new("t")
            .try_get_matches_from(["t", "--nope"])
            .expect_err("unknown flag");
        assert_eq!(usage.exit_code(), i32::from(Exit::Usage.code()));
        assert_eq!(Exit::of(&Ok::<(), ()>(())), Exit::Ok);
        assert_eq!(Exit::of(&Err::<(), ()>(())), Exit::Failure);
    }

    /// Every `.rs` file under `dir`, with its text.
    fn sources(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).expect("source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(sources(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("readable");
                out.push((path, text));
            }
        }
        out
    }

    #[test]
    fn no_command_exits_but_through_exit() {
        // `main` of each binary returns `Exit::of(&result).into()`; nothing else picks a code.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let demo = root.join("../lib/demo/src");
        let files: Vec<_> = sources(&root.join("src"))
            .into_iter()
            .chain(sources(&demo))
            .collect();
        assert!(files.len() > 20, "found the sources");
        // Assembled, so this file does not match itself.
        let (exit, code) = (["process", "::exit("].concat(), ["ExitCode", "::"].concat());
        for (path, text) in &files {
            assert!(!text.contains(&exit), "{} calls {exit}", path.display());
            if path.ends_with("cmd/exit.rs") {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                assert!(
                    !line.contains(&code),
                    "{}:{}: an exit code not from Exit: {line}",
                    path.display(),
                    n + 1
                );
            }
        }
    }

    #[test]
    fn the_footer_lists_every_code_and_every_check() {
        let text = footer(CHECKS);
        for exit in Exit::ALL {
            let line = format!("\n  {}  {}", exit.code(), exit.meaning());
            assert!(text.contains(&line), "{line:?} missing from:\n{text}");
        }
        for (command, when) in CHECKS {
            assert!(text.contains(command) && text.contains(when), "{command}");
        }
    }
}
