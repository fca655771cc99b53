//! Contributor reports: the hottest keys of a rule, gaps in coverage, and merging with the
//! client sampler.

use super::*;

/// One value of a contributor: its count in the datapoint starting at `epoch_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Datapoint {
    /// Start of the datapoint, seconds since the Unix epoch.
    pub epoch_secs: i64,
    /// Accesses (or throttled accesses) in the datapoint.
    pub value: f64,
}

/// A key named by a Contributor Insights report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contributor {
    /// The table or GSI.
    #[serde(flatten)]
    pub target: Target,
    /// The rule that named it.
    pub rule: String,
    /// What the rule counts.
    #[serde(rename = "rule_kind")]
    pub kind: RuleKind,
    /// The key values: `[partition]` for `PKC`/`PKT`, `[partition, sort]` for `SKC`/`SKT`.
    pub keys: Vec<String>,
    /// Its count over the whole window (CloudWatch's `ApproximateAggregateValue`).
    pub approximate_aggregate_value: f64,
    /// Its largest count in one datapoint (0 when the report carried no datapoints).
    pub max_value: f64,
    /// Seconds per datapoint.
    pub period_secs: i32,
    /// Its count per datapoint.
    pub datapoints: Vec<Datapoint>,
}

impl Contributor {
    /// Converts one contributor of `rule`'s report (`period_secs` per datapoint).
    pub fn from_report(rule: &InsightRule, c: &InsightRuleContributor, period_secs: i32) -> Self {
        let datapoints: Vec<Datapoint> = c
            .datapoints()
            .iter()
            .filter_map(|d| {
                Some(Datapoint {
                    epoch_secs: d.timestamp()?.secs(),
                    value: d.approximate_value()?,
                })
            })
            .collect();
        Self {
            target: rule.target.clone(),
            rule: rule.name.clone(),
            kind: rule.kind,
            keys: c.keys().to_vec(),
            approximate_aggregate_value: c.approximate_aggregate_value().unwrap_or(0.0),
            max_value: datapoints.iter().map(|d| d.value).fold(0.0, f64::max),
            period_secs,
            datapoints,
        }
    }

    /// The partition key value (the first key of every DynamoDB rule).
    pub fn partition_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
    }

    /// The busiest datapoint as a rate: `max_value / period_secs`, accesses per second.
    pub fn peak_per_second(&self) -> f64 {
        self.max_value / f64::from(self.period_secs.max(1))
    }
}

/// Sorts contributors hottest first: busiest datapoint, then window total, then key.
pub fn sort_hottest_first(contributors: &mut [Contributor]) {
    contributors.sort_by(|a, b| {
        b.max_value
            .total_cmp(&a.max_value)
            .then(
                b.approximate_aggregate_value
                    .total_cmp(&a.approximate_aggregate_value),
            )
            .then_with(|| a.keys.cmp(&b.keys))
            .then_with(|| a.target.cmp(&b.target))
    });
}

/// Which window and rules a report reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportQuery {
    /// End of the window.
    pub end: SystemTime,
    /// Length of the window, minutes (one datapoint each).
    pub minutes: u32,
    /// Contributors per rule, 1 to [`MAX_CONTRIBUTORS`].
    pub limit: i32,
    /// Rules to read on every enabled target (a GSI's `PKC` is read regardless).
    pub kinds: Vec<RuleKind>,
}

impl ReportQuery {
    /// The last `minutes` before `end`, 10 keys per rule, `PKC` and `PKT`.
    pub fn last(minutes: u32, end: SystemTime) -> Self {
        Self {
            end,
            minutes,
            limit: 10,
            kinds: vec![RuleKind::Pkc, RuleKind::Pkt],
        }
    }

    pub(crate) fn start(&self) -> Result<SystemTime, InsightsError> {
        if !(1..=MAX_CONTRIBUTORS).contains(&self.limit) {
            return Err(InsightsError::Invalid {
                field: "limit",
                reason: "must be 1 to 100 contributors per rule",
            });
        }
        let window = Duration::from_secs(u64::from(self.minutes) * 60);
        match self.end.checked_sub(window) {
            Some(start) if self.minutes > 0 => Ok(start),
            _ => Err(InsightsError::Invalid {
                field: "minutes",
                reason: "must be at least 1 and end after the Unix epoch",
            }),
        }
    }
}

/// Something a report could not see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gap", rename_all = "snake_case")]
pub enum Gap {
    /// Contributor Insights is not enabled on this table or GSI: its keys are not named.
    NotEnabled {
        /// The table or GSI.
        target: Target,
        /// Its status.
        status: String,
    },
    /// A GSI without a `PKC` rule (`THROTTLED_KEYS` mode): its index write throttling is unseen.
    IndexWritesUnseen {
        /// The GSI.
        target: Target,
    },
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotEnabled { target, status } => {
                write!(
                    f,
                    "{target}: Contributor Insights is {status}; its keys are not named"
                )
            }
            Self::IndexWritesUnseen { target } => write!(
                f,
                "{target}: THROTTLED_KEYS mode has no most-accessed rule, and index write throttling \
                 is not in the throttled graph; enable ACCESSED_AND_THROTTLED_KEYS or rely on the \
                 client sampler"
            ),
        }
    }
}

/// The rules a report reads and what it cannot see.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReportPlan {
    /// Rules to read, table first.
    pub rules: Vec<InsightRule>,
    /// Targets or signals left out.
    pub gaps: Vec<Gap>,
}

/// Decides which rules to read: `kinds` on every enabled target plus each GSI's `PKC` (the GSI
/// blind spot); fails with [`InsightsError::Disabled`] when no target is enabled.
pub fn plan_report(
    statuses: &[InsightsStatus],
    kinds: &[RuleKind],
) -> Result<ReportPlan, InsightsError> {
    if let Some(first) = statuses.first()
        && !statuses.iter().any(InsightsStatus::is_enabled)
    {
        return Err(InsightsError::Disabled {
            target: first.target.clone(),
            status: first.status_str().to_owned(),
        });
    }
    let mut plan = ReportPlan::default();
    for s in statuses {
        if !s.is_enabled() {
            plan.gaps.push(Gap::NotEnabled {
                target: s.target.clone(),
                status: s.status_str().to_owned(),
            });
            continue;
        }
        let is_index = s.target.index.is_some();
        if is_index && s.rule(RuleKind::Pkc).is_none() {
            plan.gaps.push(Gap::IndexWritesUnseen {
                target: s.target.clone(),
            });
        }
        let wanted = |k: RuleKind| kinds.contains(&k) || (is_index && k == RuleKind::Pkc);
        plan.rules
            .extend(s.rules.iter().filter(|r| wanted(r.kind)).cloned());
    }
    Ok(plan)
}

/// The hottest keys of a table and its GSIs.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct HotKeys {
    /// Contributors of every rule read, hottest first.
    pub contributors: Vec<Contributor>,
    /// What could not be seen.
    pub gaps: Vec<Gap>,
}

/// Where a named key came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A Contributor Insights rule of a table or GSI (rates are accesses, reads + writes).
    Insights {
        /// The table or GSI.
        target: Target,
        /// The rule that named it.
        kind: RuleKind,
    },
    /// The client sampler (rates are capacity units of one kind).
    Sampler {
        /// The partition (or shard) id the sampler counted it under.
        partition: String,
        /// Read or write.
        kind: Kind,
        /// Whether even its lower bound is over the threshold.
        certain: bool,
    },
}

/// A hot key with its rate and where it was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedKey {
    /// The partition key value.
    pub key: String,
    /// Its rate per second (the busiest minute for Contributor Insights).
    pub per_second: f64,
    /// Who named it.
    pub source: Source,
}

/// Joins Contributor Insights contributors and a client sampler [`Report`] into one list, hottest
/// first. A GSI's `PKC` keys and the sampler's write keys together cover the GSI blind spot.
pub fn merge(contributors: &[Contributor], sampled: &Report) -> Vec<NamedKey> {
    let insights = contributors.iter().filter_map(|c| {
        Some(NamedKey {
            key: c.partition_key()?.to_owned(),
            per_second: c.peak_per_second(),
            source: Source::Insights {
                target: c.target.clone(),
                kind: c.kind,
            },
        })
    });
    let samples = sampled.hot.iter().map(|h| NamedKey {
        key: h.key.clone(),
        per_second: h.estimate,
        source: Source::Sampler {
            partition: h.partition.clone(),
            kind: h.kind,
            certain: h.certain,
        },
    });
    let mut named: Vec<NamedKey> = insights.chain(samples).collect();
    named.sort_by(|a, b| {
        b.per_second
            .total_cmp(&a.per_second)
            .then_with(|| a.key.cmp(&b.key))
    });
    named
}
