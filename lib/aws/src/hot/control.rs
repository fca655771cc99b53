//! What reaches the controller and how it is configured: the triggers of the
//! `hotkey-controller` function ([`Trigger`]), the key check ([`check_key`]), the signals of a
//! sampler report and of Contributor Insights contributors, and [`ControllerConfig`].
//!
//! Contributor Insights counts accesses, reads and writes together, so which fix a table's hot
//! key needs is configuration ([`ControllerConfig::tables`]: a counters table is typically
//! read-hot, a table of durable events write-hot). A throttled-keys (`PKT`) contributor is at
//! least at its partition's ceiling whatever its throttled count, so it is taken at the ceiling.
//! Trigger parsing and the signals of a sampler report are always on; reading Contributor
//! Insights needs the `insights` feature, which brings the CloudWatch SDK.

use heatsink_core::detect::{Ceilings, Kind, Report};
use heatsink_core::hot::{Signal, Thresholds};
use serde_json::Value;

use crate::detect::publish::SAMPLER_SOURCE;
use crate::hot::directory::DirectoryError;
#[cfg(feature = "insights")]
use crate::insights::{Contributor, InsightsError, RuleKind};
use crate::metrics::MetricDef;

/// Longest key a signal may name, in bytes (DynamoDB allows 2,048 for a partition key; heatsink
/// keys are ids, and a salted sub-key adds `#<n>`).
pub const MAX_KEY_BYTES: usize = 1_024;

/// Checks a key a signal names: 1 to [`MAX_KEY_BYTES`] bytes, printable ASCII without spaces.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key of {} bytes: keys are 1 to {MAX_KEY_BYTES} bytes",
            key.len()
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("key has a byte outside printable ASCII (or a space)".into());
    }
    Ok(())
}

/// Keys marked hot in the hot-key directory after a controller run (a gauge).
pub const HOT_KEYS: MetricDef = MetricDef::count("HotKeys");

/// Errors of the controller function.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The event is none of the three triggers (or a sampler report that does not parse).
    #[error("unsupported event: {0}")]
    BadEvent(String),
    /// The configuration (`HEATSINK_CONTROLLER_TABLES`) is malformed.
    #[error("bad controller configuration: {0}")]
    Config(String),
    /// Contributor Insights could not be read.
    #[cfg(feature = "insights")]
    #[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
    #[error(transparent)]
    Insights(#[from] InsightsError),
    /// The directory could not be read or written.
    #[error(transparent)]
    Directory(#[from] DirectoryError),
}

/// What woke the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// A CloudWatch alarm changed state.
    Alarm {
        /// The alarm's name.
        name: String,
        /// Its new state (`ALARM`, `OK`, `INSUFFICIENT_DATA`).
        state: String,
    },
    /// The periodic tick.
    Schedule,
    /// A client sampler's report.
    Sampler(Report),
}

impl Trigger {
    /// Recognises an EventBridge event (or a direct invocation with the same shape).
    pub fn parse(event: &Value) -> Result<Self, ControlError> {
        let field = |name: &str| event.get(name).and_then(Value::as_str);
        if field("source") == Some(SAMPLER_SOURCE) {
            let detail = event.get("detail").cloned().unwrap_or(Value::Null);
            return serde_json::from_value(detail)
                .map(Trigger::Sampler)
                .map_err(|e| ControlError::BadEvent(format!("sampler report: {e}")));
        }
        match field("detail-type") {
            Some("CloudWatch Alarm State Change") => {
                let detail = event.get("detail");
                let text = |p: &str| detail.and_then(|d| d.pointer(p)).and_then(Value::as_str);
                match (text("/alarmName"), text("/state/value")) {
                    (Some(name), Some(state)) => Ok(Trigger::Alarm {
                        name: name.to_owned(),
                        state: state.to_owned(),
                    }),
                    _ => Err(ControlError::BadEvent(
                        "alarm state change without detail.alarmName and detail.state.value".into(),
                    )),
                }
            }
            Some("Scheduled Event") => Ok(Trigger::Schedule),
            other => Err(ControlError::BadEvent(format!(
                "detail-type {other:?}, source {:?} (expected an alarm state change, a schedule or source {SAMPLER_SOURCE})",
                field("source")
            ))),
        }
    }
}

/// Which tables the controller watches and what their hot keys need.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Table → the kind its hot keys are (reads → cache, writes → salt).
    pub tables: Vec<(String, Kind)>,
    /// Minutes of Contributor Insights history to read.
    pub minutes: u32,
    /// Partition ceilings the rates are compared with.
    pub ceilings: Ceilings,
    /// Thresholds and timers of the decision.
    pub thresholds: Thresholds,
    /// Most live directory entries; a new key beyond it is refused. Default 1,000.
    pub max_entries: usize,
    /// Largest S of a salt entry; a change above it is refused. Default 64.
    pub max_salts: u16,
}

impl ControllerConfig {
    /// Parses `table:read,table:write` (the `HEATSINK_CONTROLLER_TABLES` variable).
    pub fn parse_tables(spec: &str) -> Result<Vec<(String, Kind)>, ControlError> {
        spec.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| match item.rsplit_once(':') {
                Some((table, "read")) if !table.is_empty() => Ok((table.to_owned(), Kind::Read)),
                Some((table, "write")) if !table.is_empty() => Ok((table.to_owned(), Kind::Write)),
                _ => Err(ControlError::Config(format!(
                    "{item:?} is not <table>:read or <table>:write"
                ))),
            })
            .collect()
    }

    /// Watches `tables` with a 5-minute window, DynamoDB's ceilings and the default thresholds.
    pub fn new(tables: Vec<(String, Kind)>) -> Self {
        Self {
            tables,
            minutes: 5,
            ceilings: Ceilings::dynamodb(),
            thresholds: Thresholds::default(),
            max_entries: 1_000,
            max_salts: 64,
        }
    }

    pub(crate) fn ceiling(&self, kind: Kind) -> f64 {
        self.ceilings.ceiling(kind).unwrap_or(match kind {
            Kind::Read => Ceilings::DYNAMODB_READ,
            Kind::Write => Ceilings::DYNAMODB_WRITE,
        })
    }
}

impl Default for ControllerConfig {
    /// No tables (signals come from sampler reports or callers), otherwise as [`ControllerConfig::new`].
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// The signals of a sampler report: every hot key, at its estimate, against its kind's ceiling.
pub fn sampler_signals(report: &Report, config: &ControllerConfig) -> Vec<Signal> {
    report
        .hot
        .iter()
        .map(|h| Signal::from_hot_key(h, config.ceiling(h.kind)))
        .collect()
}

/// The signals of Contributor Insights contributors of a table whose hot keys are `kind`.
#[cfg(feature = "insights")]
#[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
pub fn insights_signals(contributors: &[Contributor], kind: Kind, ceiling: f64) -> Vec<Signal> {
    contributors
        .iter()
        .filter_map(|c| {
            let key = c.partition_key()?;
            let rate = match c.kind {
                RuleKind::Pkt | RuleKind::Skt => c.peak_per_second().max(ceiling),
                RuleKind::Pkc | RuleKind::Skc => c.peak_per_second(),
            };
            let source = format!("{} {}", c.target, c.kind.code());
            Some(Signal::new(key, kind, rate, ceiling, &source))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::detect::publish::SAMPLER_DETAIL_TYPE;
    #[cfg(feature = "insights")]
    use crate::insights::{Datapoint, Target};

    #[test]
    fn the_three_triggers_are_recognised_and_others_are_typed_errors() {
        let alarm = json!({"detail-type": "CloudWatch Alarm State Change", "source": "aws.cloudwatch",
            "detail": {"alarmName": "heatsink-counters-pkc-hot", "state": {"value": "ALARM"}}});
        assert_eq!(
            Trigger::parse(&alarm).unwrap(),
            Trigger::Alarm {
                name: "heatsink-counters-pkc-hot".into(),
                state: "ALARM".into()
            }
        );
        let tick = json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}});
        assert_eq!(Trigger::parse(&tick).unwrap(), Trigger::Schedule);
        let report = json!({"source": SAMPLER_SOURCE, "detail-type": SAMPLER_DETAIL_TYPE,
            "detail": {"partitions": [], "hot": []}});
        assert_eq!(
            Trigger::parse(&report).unwrap(),
            Trigger::Sampler(Report::default())
        );
        for bad in [
            json!({"detail-type": "CloudWatch Alarm State Change", "detail": {}}),
            json!({"source": SAMPLER_SOURCE, "detail": {"hot": 5}}),
            json!({"Records": []}),
        ] {
            assert!(
                matches!(Trigger::parse(&bad), Err(ControlError::BadEvent(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_stacks_route_exactly_the_source_and_detail_type_publishers_send() {
        // The EventBridge rule in both stacks matches these strings: a drift would silently
        // stop routing sampler reports to the controller.
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |rel: &str| std::fs::read_to_string(repo.join(rel)).unwrap();
        let cdk = read("infra/cdk/lib/blocks/hot-key-guard.ts");
        assert!(cdk.contains(&format!("SAMPLER_SOURCE = '{SAMPLER_SOURCE}';")));
        assert!(cdk.contains(&format!("SAMPLER_DETAIL_TYPE = '{SAMPLER_DETAIL_TYPE}';")));
        let tf = read("infra/terraform/modules/hot-key-guard/main.tf");
        assert!(tf.contains(&format!("sampler_source      = \"{SAMPLER_SOURCE}\"")));
        assert!(tf.contains(&format!("sampler_detail_type = \"{SAMPLER_DETAIL_TYPE}\"")));
    }

    #[test]
    fn keys_are_bounded_and_printable() {
        assert!(check_key("likes#p9").is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
        for bad in ["", "a b", "tab\there", "nul\0", "é"] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[cfg(feature = "insights")]
    #[test]
    fn table_kinds_parse_and_bad_specs_are_refused() {
        assert_eq!(
            ControllerConfig::parse_tables("hs-counters:read, hs-events:write,").unwrap(),
            [
                ("hs-counters".into(), Kind::Read),
                ("hs-events".into(), Kind::Write)
            ]
        );
        for bad in ["hs-counters", "hs-counters:cache", ":read"] {
            assert!(ControllerConfig::parse_tables(bad).is_err(), "{bad}");
        }
    }

    #[cfg(feature = "insights")]
    #[test]
    fn throttled_contributors_count_at_least_the_ceiling() {
        let c = |kind, max_value| Contributor {
            target: Target::table("t"),
            rule: "r".into(),
            kind,
            keys: vec!["p9".into()],
            approximate_aggregate_value: max_value,
            max_value,
            period_secs: 60,
            datapoints: vec![Datapoint {
                epoch_secs: 0,
                value: max_value,
            }],
        };
        let signals = insights_signals(
            &[c(RuleKind::Pkc, 144_000.0), c(RuleKind::Pkt, 600.0)],
            Kind::Write,
            1_000.0,
        );
        assert_eq!(signals[0].rate, 2_400.0, "144,000 accesses in a minute");
        assert_eq!(
            signals[1].rate, 1_000.0,
            "10 throttles/s means the partition is full"
        );
        assert!(signals[1].source.contains("PKT"));
    }
}
