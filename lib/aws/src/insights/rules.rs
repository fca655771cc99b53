//! Which Contributor Insights rules exist on a table and its GSIs, and what each counts.

use super::*;

/// A table or one of its global secondary indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Target {
    /// Table name.
    pub table: String,
    /// GSI name; `None` for the table itself.
    pub index: Option<String>,
}

impl Target {
    /// The table itself.
    pub fn table(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            index: None,
        }
    }

    /// One of the table's GSIs.
    pub fn index(table: impl Into<String>, index: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            index: Some(index.into()),
        }
    }

    /// `table` or `table-index`: the resource part of rule and alarm names.
    pub fn slug(&self) -> String {
        match &self.index {
            Some(i) => format!("{}-{i}", self.table),
            None => self.table.clone(),
        }
    }

    pub(crate) fn dimensions(&self) -> Vec<Dimension> {
        let dim = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
        let mut dims = vec![dim("TableName", &self.table)];
        dims.extend(
            self.index
                .iter()
                .map(|i| dim("GlobalSecondaryIndexName", i)),
        );
        dims
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.index {
            Some(i) => write!(f, "{}/{i}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

/// Which of DynamoDB's four managed rules: accessed or throttled, partition key or full key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum RuleKind {
    /// `PKC`: most accessed partition keys (reads and writes, successful or throttled).
    #[serde(rename = "PKC")]
    Pkc,
    /// `PKT`: most throttled partition keys (reads and writes).
    #[serde(rename = "PKT")]
    Pkt,
    /// `SKC`: most accessed partition + sort keys (tables and GSIs with a sort key).
    #[serde(rename = "SKC")]
    Skc,
    /// `SKT`: most throttled partition + sort keys (tables and GSIs with a sort key).
    #[serde(rename = "SKT")]
    Skt,
}

impl RuleKind {
    /// Every kind, in the order DynamoDB lists them.
    pub const ALL: [RuleKind; 4] = [Self::Pkc, Self::Pkt, Self::Skc, Self::Skt];

    /// The code in the rule name (`PKC`, `PKT`, `SKC`, `SKT`).
    pub fn code(self) -> &'static str {
        match self {
            Self::Pkc => "PKC",
            Self::Pkt => "PKT",
            Self::Skc => "SKC",
            Self::Skt => "SKT",
        }
    }

    /// The kind of a DynamoDB managed rule name, or `None` for any other rule.
    pub fn from_rule_name(name: &str) -> Option<Self> {
        let code = name.strip_prefix(RULE_PREFIX)?.split('-').next()?;
        Self::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether the rule counts throttled accesses only (`PKT`, `SKT`).
    pub fn is_throttled(self) -> bool {
        matches!(self, Self::Pkt | Self::Skt)
    }

    /// What the rule ranks, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Pkc => "most accessed partition keys (reads + writes)",
            Self::Pkt => "most throttled partition keys (reads + writes)",
            Self::Skc => "most accessed keys (partition + sort)",
            Self::Skt => "most throttled keys (partition + sort)",
        }
    }
}

/// One managed Contributor Insights rule of a table or GSI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InsightRule {
    /// The table or GSI it watches.
    pub target: Target,
    /// Its CloudWatch name, from `ContributorInsightsRuleList`.
    pub name: String,
    /// What it counts.
    pub kind: RuleKind,
}

impl InsightRule {
    /// The rule `name` of `target`, or `None` if it is not a DynamoDB managed rule name.
    pub fn new(target: Target, name: impl Into<String>) -> Option<Self> {
        let name = name.into();
        let kind = RuleKind::from_rule_name(&name)?;
        Some(Self { target, name, kind })
    }
}

/// Contributor Insights on one table or GSI: status, mode and rules.
#[derive(Debug, Clone, PartialEq)]
pub struct InsightsStatus {
    /// The table or GSI.
    pub target: Target,
    /// `ENABLED`, `ENABLING`, `DISABLED`, … (`None` if DynamoDB did not say).
    pub status: Option<ContributorInsightsStatus>,
    /// `ACCESSED_AND_THROTTLED_KEYS` or `THROTTLED_KEYS`, when reported.
    pub mode: Option<ContributorInsightsMode>,
    /// The managed rules (empty from Update and List calls, which do not name them).
    pub rules: Vec<InsightRule>,
    /// The last failure, for a `FAILED` status.
    pub failure: Option<String>,
}

impl InsightsStatus {
    /// Whether Contributor Insights is `ENABLED`.
    pub fn is_enabled(&self) -> bool {
        self.status == Some(ContributorInsightsStatus::Enabled)
    }

    /// The status as DynamoDB spells it (`UNKNOWN` if absent).
    pub fn status_str(&self) -> &str {
        self.status.as_ref().map_or("UNKNOWN", |s| s.as_str())
    }

    /// The rule of `kind`, if the target has one.
    pub fn rule(&self, kind: RuleKind) -> Option<&InsightRule> {
        self.rules.iter().find(|r| r.kind == kind)
    }
}

/// The mode to enable on `target` when `requested` is asked for: GSIs always get
/// `ACCESSED_AND_THROTTLED_KEYS`, because index write throttling shows only in their `PKC` rule.
pub fn mode_for(target: &Target, requested: ContributorInsightsMode) -> ContributorInsightsMode {
    match target.index {
        Some(_) => ContributorInsightsMode::AccessedAndThrottledKeys,
        None => requested,
    }
}
