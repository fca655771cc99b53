//! The mitigation controller: from signals to epoch-conditional directory changes.
//!
//! Three triggers reach the deployed controller (all EventBridge-shaped JSON, parsed by
//! [`Trigger::parse`]):
//! - **alarm state change** (`detail-type: CloudWatch Alarm State Change`): a hot-key or
//!   throttle alarm fired or cleared; the controller reads Contributor Insights now;
//! - **schedule** (`detail-type: Scheduled Event`, every minute): the same read, so calm keys
//!   cool down even when no alarm changes state;
//! - **sampler report** (`source: heatsink.sampler`): a router's client sampler names keys
//!   within seconds, before Contributor Insights' one-minute datapoints.
//!
//! In-process callers (a router's own loop, the reshard executor's "salt it" hand-off) skip the
//! event and call [`Controller::run`] with signals. Either way the decision is
//! [`heatsink_core::hot::decide`] (hysteresis, planner-sized S, epochs), and every change is
//! conditional on the epoch it was decided from: a change that loses its race is decided again
//! on a fresh read, up to [`MAX_ROUNDS`] times, and reported if still contended.
//!
//! # Bounds and trust
//! Every key a signal names is checked before anything is decided ([`check_key`]); a bad key is
//! reported in [`Handled::rejected`] and the rest of the run goes on. The directory holds at
//! most [`ControllerConfig::max_entries`] live entries (default 1,000) and S at most
//! [`ControllerConfig::max_salts`] (default 64); a change beyond either, or one DynamoDB refuses,
//! is refused alone. A key is let go only by a source that covers it ([`RunBounds::covers`]): a
//! sampler report never calms a key it does not name, and a Contributor Insights run calms only
//! entries whose reason names one of the tables it read. Expired cache and limit entries are
//! removed by any run.

use std::collections::HashMap;
#[cfg(feature = "insights")]
use std::time::{Duration, SystemTime};

use heatsink_core::hot::{Change, Entry, Signal, Snapshot, decide};
use serde::Serialize;
#[cfg(feature = "insights")]
use serde_json::Value;

use super::control::ControllerConfig;
#[cfg(feature = "insights")]
use super::control::{ControlError, Trigger, check_key, insights_signals, sampler_signals};
use super::directory::{Directory, DirectoryError};
#[cfg(feature = "insights")]
use crate::insights::{Insights, ReportQuery};

/// Rounds of re-read and re-decide when a change loses its epoch race.
pub const MAX_ROUNDS: usize = 3;

/// What one controller run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlReport {
    /// Changes written, in the order applied.
    pub applied: Vec<Change>,
    /// Keys whose change kept losing the epoch race after [`MAX_ROUNDS`] rounds.
    pub conflicts: Vec<String>,
    /// Keys whose change was refused, with why: a bound of [`RunBounds`] or an entry DynamoDB
    /// or the directory rules reject. The other keys' changes are applied all the same.
    pub refused: Vec<(String, String)>,
    /// Live entries after the run.
    pub entries: usize,
}

/// What one run may change beyond the decision itself.
pub struct RunBounds<'a> {
    /// Whether this run's signals cover an entry: only then may the run calm (or let go) an
    /// entry its signals do not name. A router's sampler report names what it saw hot, not what
    /// is calm everywhere, so absence from it proves nothing.
    pub covers: &'a (dyn Fn(&Entry) -> bool + Send + Sync),
    /// Most live entries the directory may hold; a new key beyond it is refused.
    pub max_entries: usize,
    /// Largest S a salt entry may take; a change above it is refused.
    pub max_salts: u16,
}

impl std::fmt::Debug for RunBounds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBounds")
            .field("max_entries", &self.max_entries)
            .field("max_salts", &self.max_salts)
            .finish_non_exhaustive()
    }
}

impl RunBounds<'_> {
    /// No bound: every entry is covered, any size, any S.
    pub const UNBOUNDED: RunBounds<'static> = RunBounds {
        covers: &|_| true,
        max_entries: usize::MAX,
        max_salts: u16::MAX,
    };
}

/// The mitigation controller: gathers signals, decides with hysteresis, writes the directory
/// epoch-conditionally, and retries lost races. One type serves every caller: a router or the
/// reshard executor hands it signals ([`Controller::run`]); the `hotkey-controller` function
/// hands it the triggering event (`Controller::handle`, feature `insights`), and it reads
/// Contributor Insights for the tables of its [`ControllerConfig`] itself.
#[derive(Debug, Clone)]
pub struct Controller {
    directory: Directory,
    config: ControllerConfig,
    #[cfg(feature = "insights")]
    insights: Option<Insights>,
}

impl Controller {
    /// A controller over `directory` with `config`'s tables, ceilings, thresholds and bounds.
    pub fn new(directory: Directory, config: ControllerConfig) -> Self {
        Self {
            directory,
            config,
            #[cfg(feature = "insights")]
            insights: None,
        }
    }

    /// The same controller reading Contributor Insights for its configured tables when an alarm
    /// or the schedule triggers it (without it, only sampler reports carry signals).
    #[cfg(feature = "insights")]
    #[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
    pub fn with_insights(mut self, insights: Insights) -> Self {
        self.insights = Some(insights);
        self
    }

    /// The directory it edits.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Its configuration.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// Reads the directory, decides for `signals` at `now` (Unix seconds) and applies the
    /// changes. A change that loses its epoch race is decided again on a fresh read, up to
    /// [`MAX_ROUNDS`] times; keys still contended are reported, not forced.
    pub async fn run(&self, signals: &[Signal], now: u64) -> Result<ControlReport, DirectoryError> {
        self.run_bounded(signals, now, &RunBounds::UNBOUNDED).await
    }

    /// [`Controller::run`] within `bounds`: changes to entries the signals do not name are
    /// applied only if `bounds.covers` them (expired entries are always removed), a new key is
    /// refused once the directory holds `max_entries` live entries, a salt change above
    /// `max_salts` is refused, and a change DynamoDB or the directory rules reject is refused
    /// alone (reported in [`ControlReport::refused`]) instead of failing the run.
    pub async fn run_bounded(
        &self,
        signals: &[Signal],
        now: u64,
        bounds: &RunBounds<'_>,
    ) -> Result<ControlReport, DirectoryError> {
        let named: std::collections::HashSet<String> = heatsink_core::hot::by_logical_key(signals)
            .into_iter()
            .map(|s| s.key)
            .collect();
        let mut report = ControlReport::default();
        let mut only: Option<Vec<String>> = None;
        for _ in 0..MAX_ROUNDS {
            let entries = self.directory.list().await?;
            let by_key: HashMap<&str, &Entry> =
                entries.iter().map(|e| (e.key.as_str(), e)).collect();
            let mut live = Snapshot::new(entries.clone(), now).len();
            report.entries = live;
            let mut conflicts = Vec::new();
            for change in decide(signals, &entries, now, &self.config.thresholds) {
                if only
                    .as_ref()
                    .is_some_and(|keys| !keys.iter().any(|k| k == change.key()))
                {
                    continue;
                }
                let current = by_key.get(change.key()).copied();
                let unnamed_live =
                    !named.contains(change.key()) && current.is_some_and(|e| e.is_live(now));
                if unnamed_live && !current.is_some_and(|e| (bounds.covers)(e)) {
                    continue;
                }
                if let Change::Put {
                    entry,
                    expected_epoch,
                } = &change
                {
                    if expected_epoch.is_none() && live >= bounds.max_entries {
                        let why = format!(
                            "the directory is full ({} live entries)",
                            bounds.max_entries
                        );
                        report.refused.push((entry.key.clone(), why));
                        continue;
                    }
                    if entry.salts.current() > bounds.max_salts {
                        let why = format!(
                            "S = {} is above the limit of {}",
                            entry.salts.current(),
                            bounds.max_salts
                        );
                        report.refused.push((entry.key.clone(), why));
                        continue;
                    }
                }
                match self.directory.apply(&change).await {
                    Ok(()) => {
                        if matches!(
                            change,
                            Change::Put {
                                expected_epoch: None,
                                ..
                            }
                        ) {
                            live += 1;
                        }
                        report.applied.push(change);
                    }
                    Err(DirectoryError::Conflict { key, .. }) => conflicts.push(key),
                    // One entry the rules or DynamoDB refuse (an oversize key, a bad S) must not
                    // stop the others; throttling and outages still fail the run.
                    Err(e @ (DirectoryError::Hot(_) | DirectoryError::Malformed { .. })) => {
                        report
                            .refused
                            .push((change.key().to_owned(), e.to_string()));
                    }
                    Err(DirectoryError::Aws(e)) if e.code() == Some("ValidationException") => {
                        report
                            .refused
                            .push((change.key().to_owned(), e.to_string()));
                    }
                    Err(e) => return Err(e),
                }
            }
            if conflicts.is_empty() {
                report.entries = self.directory.snapshot(now).await?.len();
                return Ok(report);
            }
            only = Some(conflicts);
        }
        report.conflicts = only.unwrap_or_default();
        Ok(report)
    }
}

#[cfg(feature = "insights")]
impl Controller {
    /// Handles one event of the `hotkey-controller` function at `now`: parses the trigger,
    /// gathers its signals (the sampler report's keys, or Contributor Insights for the
    /// configured tables), checks every key, and runs within the configured bounds.
    #[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
    pub async fn handle(&self, event: &Value, now: SystemTime) -> Result<Handled, ControlError> {
        let trigger = Trigger::parse(event)?;
        let (name, signals) = match &trigger {
            Trigger::Sampler(report) => ("sampler", sampler_signals(report, &self.config)),
            Trigger::Alarm { .. } => ("alarm", self.insights_signals(now).await?),
            Trigger::Schedule => ("schedule", self.insights_signals(now).await?),
        };
        let mut rejected = Vec::new();
        let signals: Vec<Signal> = signals
            .into_iter()
            .filter(|s| match check_key(&s.key) {
                Ok(()) => true,
                Err(why) => {
                    rejected.push(format!("{}: {why}", truncated(&s.key)));
                    false
                }
            })
            .collect();
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let tables: Vec<&str> = self.config.tables.iter().map(|(t, _)| t.as_str()).collect();
        let sampler = matches!(trigger, Trigger::Sampler(_));
        let covers = move |e: &Entry| !sampler && insights_made(e, &tables);
        let bounds = RunBounds {
            covers: &covers,
            max_entries: self.config.max_entries,
            max_salts: self.config.max_salts,
        };
        let report = self.run_bounded(&signals, unix, &bounds).await?;
        let mut out = outcome(name, signals.len(), report);
        rejected.append(&mut out.rejected);
        out.rejected = rejected;
        Ok(out)
    }

    async fn insights_signals(&self, now: SystemTime) -> Result<Vec<Signal>, ControlError> {
        let Some(insights) = &self.insights else {
            return Ok(Vec::new());
        };
        let query = ReportQuery::last(self.config.minutes, now);
        let mut signals = Vec::new();
        for (table, kind) in &self.config.tables {
            let hot = insights.hot_keys(table, &query).await?;
            let ceiling = self.config.ceiling(*kind);
            signals.extend(insights_signals(&hot.contributors, *kind, ceiling));
        }
        Ok(signals)
    }
}

/// What one invocation did (the function's response and log line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Handled {
    /// `alarm`, `schedule` or `sampler`.
    pub trigger: &'static str,
    /// Hot keys the signals named.
    pub signals: usize,
    /// Directory changes written, as `key: mode S=n epoch e` or `key: removed`.
    pub changes: Vec<String>,
    /// Keys whose change kept losing its epoch race (retried next time).
    pub conflicts: Vec<String>,
    /// Keys refused, with why: a bad key, a full directory, S above the limit, or an entry
    /// DynamoDB rejected. Nothing else of the run is held back by them.
    pub rejected: Vec<String>,
    /// Live directory entries after the run (the `HotKeys` metric).
    pub hot_keys: usize,
}

/// Whether `entry` was made by a Contributor Insights signal of one of `tables`: its reason ends
/// with `(<table> PKC)` or `(<table>/<index> PKT)` (the signal's source).
#[cfg(feature = "insights")]
fn insights_made(entry: &Entry, tables: &[&str]) -> bool {
    let Some(source) = entry
        .reason
        .rsplit_once('(')
        .and_then(|(_, s)| s.strip_suffix(')'))
    else {
        return false;
    };
    tables.iter().any(|t| {
        source
            .strip_prefix(t)
            .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('/'))
    })
}

/// At most 64 bytes of a key, for a log line (a refused key may be huge).
#[cfg(feature = "insights")]
fn truncated(key: &str) -> String {
    let mut end = key.len().min(64);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    if end < key.len() {
        format!("{}… ({} bytes)", &key[..end], key.len())
    } else {
        key.to_owned()
    }
}

#[cfg(feature = "insights")]
fn outcome(trigger: &'static str, signals: usize, report: ControlReport) -> Handled {
    use heatsink_core::hot::Change;
    Handled {
        trigger,
        signals,
        changes: report
            .applied
            .iter()
            .map(|c| match c {
                Change::Put { entry, .. } => format!(
                    "{}: {} S={} epoch {}",
                    entry.key,
                    entry.mode,
                    entry.salts.current(),
                    entry.epoch
                ),
                Change::Remove { key, .. } => format!("{key}: removed"),
            })
            .collect(),
        conflicts: report.conflicts,
        rejected: report
            .refused
            .into_iter()
            .map(|(key, why)| format!("{}: {why}", truncated(&key)))
            .collect(),
        hot_keys: report.entries,
    }
}

#[cfg(all(test, feature = "insights"))]
mod tests {
    use super::*;

    #[test]
    fn only_entries_made_from_a_watched_table_are_covered_by_insights() {
        let e = |reason: &str| Entry::cache("k", reason, 0, 10);
        let tables = ["hs-counters"];
        assert!(insights_made(
            &e("read-hot: 9000/s = 300% of 3000/s (hs-counters PKC)"),
            &tables
        ));
        assert!(insights_made(
            &e("read-hot: 1/s (hs-counters/by-x PKT)"),
            &tables
        ));
        assert!(!insights_made(
            &e("read-hot: 1/s (hs-counters-old PKC)"),
            &tables
        ));
        assert!(!insights_made(&e("write-hot: 2400/s (sampler)"), &tables));
        assert!(!insights_made(&e("operator"), &tables));
    }
}
