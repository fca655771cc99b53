//! `--json`: every command that reports prints a human form by default and, with `--json`, JSON
//! on stdout: one document, or one JSON line per event where the command streams (`tail`, `sim`,
//! `move start`). Progress and warnings stay on stderr in both forms, so stdout parses.
//!
//! Field names are the library's (`shard_id`, `slots`, `salts`, `epoch`, `counter`, …); hash
//! keys and sequence numbers, which do not fit a JSON number exactly, are decimal strings.

use std::io::Write;

use clap::Args;
use serde_json::Value;

use super::CmdResult;

/// The `--json` flag of a command that prints one report.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct Output {
    /// Print JSON on stdout instead of the human form (one document; JSON lines where the
    /// command streams).
    #[arg(long)]
    pub json: bool,
}

impl Output {
    /// Prints `json()` with `--json`, else the lines of `human()`.
    pub fn report(
        self,
        json: impl FnOnce() -> Value,
        human: impl FnOnce() -> Vec<String>,
    ) -> CmdResult {
        if self.json {
            print_json(&json())
        } else {
            print_lines(human());
            Ok(())
        }
    }
}

/// Prints lines on stdout; stops quietly when stdout is closed (`| head`).
pub fn print_lines<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) {
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{}", line.as_ref()).is_err() {
            return;
        }
    }
}

/// Prints one JSON document (pretty) on stdout.
pub fn print_json(value: &Value) -> CmdResult {
    print_lines([serde_json::to_string_pretty(value)?]);
    Ok(())
}

/// Prints one JSON line on stdout and flushes it (a streaming command's event).
pub fn print_json_line(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}").and_then(|()| out.flush());
}

/// A `u128` (hash key) as JSON: a decimal string, since JSON numbers lose precision past 2^53.
pub fn big(n: u128) -> Value {
    Value::String(n.to_string())
}

/// A float rounded to 4 decimals, so reports do not print `0.30000000000000004`.
pub fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_numbers_are_strings_and_floats_are_rounded() {
        assert_eq!(big(u128::MAX), Value::String(u128::MAX.to_string()));
        assert_eq!(round4(0.1 + 0.2), 0.3);
    }
}
