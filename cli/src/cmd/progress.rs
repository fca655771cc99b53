//! Progress of a long phase: an `indicatif` bar on a terminal; when stderr is not a terminal
//! (a log, CI) no bar is drawn and one summary line per phase is printed when it ends.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One phase's progress towards a known total.
#[derive(Debug)]
pub struct Phase {
    bar: ProgressBar,
    name: String,
    unit: &'static str,
    total: u64,
    done: AtomicU64,
    started: Instant,
}

impl Phase {
    /// Starts a phase of `total` `unit`s (e.g. `likes sent`); draws a bar only on a terminal.
    pub fn start(name: &str, total: u64, unit: &'static str) -> Self {
        Self::with_terminal(name, total, unit, std::io::stderr().is_terminal())
    }

    /// [`Phase::start`] with the terminal test given (hidden bar when `terminal` is false).
    pub fn with_terminal(name: &str, total: u64, unit: &'static str, terminal: bool) -> Self {
        let target = if terminal {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        // The template is a constant; were it refused, the default style still shows the bar.
        if let Ok(style) =
            ProgressStyle::with_template("  {prefix:<15} [{bar:30}] {pos}/{len} {msg} ({eta})")
        {
            bar.set_style(style.progress_chars("#>-"));
        }
        bar.set_prefix(name.to_owned());
        bar.set_message(unit);
        Self {
            bar,
            name: name.to_owned(),
            unit,
            total,
            done: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// Records that `done` units are complete (redrawn at most a few times a second).
    pub fn set(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
        self.bar.set_position(done);
    }

    /// True when no bar is drawn (stderr is not a terminal).
    #[cfg(test)]
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// The summary line of the phase so far.
    pub fn summary(&self) -> String {
        format!(
            "  {}: {}/{} {} in {:.1} s",
            self.name,
            self.done.load(Ordering::Relaxed),
            self.total,
            self.unit,
            self.started.elapsed().as_secs_f64()
        )
    }

    /// Ends the phase: clears the bar and prints the summary line on stderr.
    pub fn finish(self) {
        self.bar.finish_and_clear();
        eprintln!("{}", self.summary());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_the_bar_is_hidden_and_one_summary_line_remains() {
        let phase = Phase::with_terminal("naive", 100, "likes sent", false);
        assert!(phase.is_hidden());
        for n in 0..=100 {
            phase.set(n);
        }
        let line = phase.summary();
        assert!(
            line.starts_with("  naive: 100/100 likes sent in "),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }
}
