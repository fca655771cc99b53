//! `heatsink completions bash|zsh|fish|elvish|powershell`: the shell completion script, from the
//! command definition itself (`clap_complete`), so it names every subcommand and flag there is.
//!
//! ```text
//! heatsink completions bash > ~/.local/share/bash-completion/completions/heatsink
//! heatsink completions zsh  > "${fpath[1]}/_heatsink"
//! heatsink completions fish > ~/.config/fish/completions/heatsink.fish
//! ```
//! `heatsink-demo completions SHELL` does the same for the demo binary.

use clap::{Args, Command};
pub use clap_complete::Shell;

use super::CmdResult;

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The about text of `completions`, for binaries that add it with the builder.
pub const ABOUT: &str = "Print the shell completion script (bash, zsh, fish, elvish, powershell)";

/// The completion script of `command` for `shell`.
pub fn script(command: &mut Command, shell: Shell) -> String {
    let name = command.get_name().to_owned();
    let mut out = Vec::new();
    clap_complete::generate(shell, command, name, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Prints the completion script of `command` on stdout.
pub fn run(args: &CompletionsArgs, command: &mut Command) -> CmdResult {
    super::output::print_lines([script(command, args.shell)]);
    Ok(())
}

/// Whether `script`, `shell`'s completion script for the binary `bin`, offers the subcommand at
/// `path` (`["slots", "verify"]`) where `clap_complete` writes it: bash as a state of its own,
/// zsh in its parent's list, fish as a word completed after its parent (for tests).
pub fn offers(script: &str, shell: Shell, bin: &str, path: &[String]) -> bool {
    let Some(name) = path.last() else {
        return false;
    };
    match shell {
        Shell::Bash => {
            // clap_complete names a subcommand's function after its path, a `-` inside a
            // subcommand's name (`repair-fences`) as a word boundary too.
            let function = bin.replace('-', "__");
            let words: Vec<String> = path.iter().map(|p| p.replace('-', "__subcmd__")).collect();
            script.contains(&format!(
                "cmd=\"{function}__subcmd__{}\"",
                words.join("__subcmd__")
            ))
        }
        Shell::Zsh => script.contains(&format!("\n'{name}:")),
        Shell::Fish => {
            let function = bin.replace('-', "_");
            let condition = match path.len() {
                1 => format!("\"__fish_{function}_needs_command\""),
                _ => format!(
                    "\"__fish_{function}_using_subcommand {}; and not __fish_seen_subcommand_from ",
                    path[path.len() - 2]
                ),
            };
            let word = format!("-f -a \"{name}\"");
            script
                .lines()
                .any(|l| l.contains(&condition) && l.contains(&word))
        }
        _ => script.contains(name.as_str()),
    }
}

/// Every subcommand path of `command` (`slots`, `slots verify`, …), for tests.
pub fn subcommand_paths(command: &Command) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for sub in command.get_subcommands() {
        let name = sub.get_name().to_owned();
        paths.push(vec![name.clone()]);
        for mut rest in subcommand_paths(sub) {
            rest.insert(0, name.clone());
            paths.push(rest);
        }
    }
    paths
}
