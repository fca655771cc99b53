//! The autopilot: a control loop that reshards a Kinesis stream, or rebalances a slot
//! directory, as load moves — one period at a time, every decision proven before it acts.
//!
//! The rules are pure and live in `heatsink_core::autopilot` (re-exported here): the
//! governor ([`decide`]) picks at most one operation per period from what the load plans
//! propose ([`propose`]), with a sustain rule, cooldowns per span, hour and day budgets, one
//! operation in flight, a kill switch and a dry run. This module adds what runs them against
//! AWS:
//!
//! - [`store`]: the loop's state and kill switch, one DynamoDB item per loop, written
//!   conditionally on the revision read, so two overlapping periods never both start an
//!   operation;
//! - [`stream`] (feature `kinesis`): one period of a stream's loop — sample each shard's
//!   load, plan, decide, and (acting) record the split or merge *before* making its one call.
//!   The operation ends only when a later listing shows its result; a call that timed out,
//!   or a stream that is ACTIVE without the result, holds the loop and names the command
//!   that releases it;
//! - [`measure`] (feature `insights`): what each owner table of a directory serves, from
//!   CloudWatch, for a directory's loop to plan from instead of a samples file;
//! - the metrics every period emits ([`PERIOD_COMPLETED`], [`STARTED`], [`PAUSED`],
//!   [`UNPROVEN`], [`OUT_OF_BUDGET`], [`PROPOSALS`]): the stacks alarm on a missing heartbeat,
//!   a pause, a spent budget and an unproven operation.
//!
//! A slot directory's loop runs from the command line (`heatsink autopilot run`, which moves
//! slots through the mover); a stream's loop runs in the `autopilot` Lambda function every
//! minute, or as `heatsink autopilot run --stream NAME`.
//!
//! ```
//! use heatsink::autopilot::{decide, Decision, PilotConfig, PilotState};
//!
//! // Dry run (the default): nothing proposed, nothing to do.
//! let p = decide(&PilotConfig::default(), &PilotState::default(), &[], 60_000)?;
//! assert_eq!(p.decision, Decision::Idle);
//! # Ok::<(), heatsink::autopilot::PilotError>(())
//! ```
//!
//! Limits: one operation per loop per period (a 1-minute schedule splits or merges at most one
//! shard a minute, and the default budget is 4 an hour and 10 a day); the stream's load is what
//! one sample of the last `sample_secs` saw.

pub use heatsink_core::autopilot::*;

use crate::error::AwsError;
use crate::metrics::MetricDef;

#[cfg(feature = "streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
pub mod directory;
#[cfg(feature = "insights")]
#[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
pub mod measure;
pub mod store;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod stream;

/// 1 per period that ran to its end (dry run, hold or act): the heartbeat. The photo app's
/// stacks alarm when it is missing for three 5-minute periods (`autopilot-failing`).
pub const PERIOD_COMPLETED: MetricDef = MetricDef::count("AutopilotPeriodCompleted");
/// Operations a period started (0 or 1).
pub const STARTED: MetricDef = MetricDef::count("AutopilotOperationsStarted");
/// 1 while the kill switch is set, else 0 (`autopilot-paused` after 15 minutes).
pub const PAUSED: MetricDef = MetricDef::count("AutopilotPaused");
/// 1 while an operation in flight is not proven ended although the stream is ACTIVE (its
/// result is not in the shard map): an operator must look (`autopilot-unproven`).
pub const UNPROVEN: MetricDef = MetricDef::count("AutopilotUnproven");
/// Proposals waiting on the hour or day budget (`autopilot-out-of-budget`).
pub const OUT_OF_BUDGET: MetricDef = MetricDef::count("AutopilotOutOfBudget");
/// Proposals the load plan made this period (runnable, waiting or handed off).
pub const PROPOSALS: MetricDef = MetricDef::count("AutopilotProposals");

/// Why an autopilot period or a state change failed.
#[derive(Debug, thiserror::Error)]
pub enum AutopilotError {
    /// A DynamoDB or Kinesis call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The stored state does not read or cannot be written (the message names the remedy).
    #[error("{0}")]
    BadState(String),
    /// The governor refused its configuration.
    #[error(transparent)]
    Config(#[from] PilotError),
    /// Sampling, planning or listing the stream failed.
    #[cfg(feature = "kinesis")]
    #[error(transparent)]
    Reshard(#[from] crate::kinesis::reshard::ReshardError),
    /// The operation's call failed in a way that does not say whether Kinesis took it (a
    /// timeout, an unreachable endpoint, a 5xx): it stays in flight, and the loop holds until
    /// a listing proves its end or an operator says it ended.
    #[error(
        "autopilot {id} on {stream}: the call's outcome is unknown ({source}); the loop holds until the shard map shows it; if 'heatsink reshard plan --stream {stream}' shows it never ran, 'heatsink autopilot finish --stream {stream} --id {id}'"
    )]
    Unsure {
        /// The operation's id.
        id: String,
        /// The stream.
        stream: String,
        /// The call's failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A directory's loop could not read its directory or a move of its operation failed.
    /// The operation stays in flight; the next acting period continues it from its records.
    #[cfg(feature = "streams")]
    #[error(
        "autopilot on {table}{}: {source}; the next acting period continues from the move records{}",
        id.as_ref().map_or(String::new(), |id| format!(" (operation {id})")),
        id.as_ref().map_or(String::new(), |id| format!(", or once you have ended that move yourself, 'heatsink autopilot finish{} --id {id}'", directory::selector(table)))
    )]
    Move {
        /// The directory's table.
        table: String,
        /// The operation in flight, if the failure is one of its moves.
        id: Option<String>,
        /// The failure.
        #[source]
        source: Box<crate::slots::MoveError>,
    },
    /// Kinesis refused the operation's call (it answered with an error): it did not run, and
    /// the loop released it (the budget still counts it).
    #[error(
        "autopilot {id} on {stream}: Kinesis refused the call ({source}); nothing changed, the next period plans again"
    )]
    Refused {
        /// The operation's id.
        id: String,
        /// The stream.
        stream: String,
        /// The refusal.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A wait as words.
pub fn wait_text(w: &Wait) -> String {
    match w {
        Wait::Sustain { seen, need } => format!("proposed {seen} of {need} periods in a row"),
        Wait::Cooldown { until_ms } => format!("cooldown until {until_ms} (Unix ms)"),
        Wait::Budget { until_ms } => format!("budget spent until {until_ms} (Unix ms)"),
        Wait::Outranked => "a more urgent operation goes first".into(),
        Wait::Warming => "warming: above its drain target, nothing to run yet".into(),
        Wait::Held => "the loop holds".into(),
    }
}
