//! Throttle reasons: why DynamoDB refused a request, and which fix that calls for.
//!
//! Since August 2025 every DynamoDB throttle (`ThrottlingException` on on-demand tables,
//! `ProvisionedThroughputExceededException` on provisioned ones, `RequestLimitExceeded`) carries
//! `ThrottlingReasons`: each a `reason` of the form *resource × operation × limit* and the ARN of
//! the table or index it hit. The sixteen reasons fall in two groups that need opposite fixes:
//!
//! | limit (`…` = `Table`/`Index` × `Read`/`Write`) | what is over | remedy |
//! |---|---|---|
//! | `…KeyRangeThroughputExceeded` | one partition (1,000 WCU/s, 3,000 RCU/s): a key is hot | [`Remedy::Spread`]: salt (write) or cache (read) the key |
//! | `…ProvisionedThroughputExceeded` | the table's or GSI's provisioned capacity | [`Remedy::AddCapacity`] |
//! | `…AccountLimitExceeded` | the per-table account quota (on-demand) | [`Remedy::AddCapacity`] (raise the quota) |
//! | `…MaxOnDemandThroughputExceeded` | the configured on-demand maximum | [`Remedy::AddCapacity`] (raise the maximum) |
//!
//! Salting a key because the *table* is short of capacity would spread the same load over more
//! keys of the same starved table and fix nothing, so only a key-range reason ever names a hot
//! key. A reason this module does not know ([`Class::Unknown`]) and a throttle without reasons
//! (emulators, older endpoints) authorize nothing.
//!
//! [`KeyThrottles`] turns key-range throttles observed on every attempt into controller
//! [`Signal`]s: a key throttled at least [`ThrottleConfig::min_throttles`] times in the last
//! [`ThrottleConfig::window_ms`] is at its partition's ceiling. Salted sub-keys (`p9#2`) count as
//! their logical key (`p9`), so a salted key that still throttles asks for more S, once, not
//! once per sub-key.
//!
//! ```
//! use heatsink_core::detect::Kind;
//! use heatsink_core::throttle::{Class, KeyThrottles, Remedy, ThrottleConfig, classify};
//!
//! let arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/hs-counters";
//! let hot = classify("TableWriteKeyRangeThroughputExceeded", Some(arn));
//! assert_eq!(hot.remedy(), Some(Remedy::Spread));
//! let short = classify("TableWriteProvisionedThroughputExceeded", Some(arn));
//! assert_eq!(short.remedy(), Some(Remedy::AddCapacity));
//! assert!(matches!(classify("SomethingNew", None), Class::Unknown { .. }));
//!
//! // Ten writes of p9 in 100 ms, six of them refused for the key range: p9 is hot.
//! let mut seen = KeyThrottles::new(ThrottleConfig::default());
//! for i in 0..10u64 {
//!     let throttled = if i % 5 < 3 { Some(&hot) } else { None };
//!     seen.attempt("hs-counters", None, "p9", Kind::Write, throttled, true, i * 10);
//! }
//! let signals = seen.signals(100, |_| 1_000.0);
//! assert_eq!(signals[0].key, "p9");
//! // 10 requests in 100 ms is 100/s, but 60 % refused says the partition is offered at least
//! // 1,000 WCU/s ÷ (1 − 0.6) = 2,500.
//! assert_eq!(signals[0].rate, 2_500.0);
//! ```
//!
//! # Guarantees and limits
//! - Classification is by the reason text alone, never by the exception's name: the same hot
//!   partition answers `ThrottlingException` on an on-demand table and
//!   `ProvisionedThroughputExceededException` on a provisioned one.
//! - A signal's rate is the larger of two lower bounds on the logical key's load: the first
//!   attempts (retries excluded) per second this writer sent over the window, one unit each
//!   (exact for 1-WCU counter writes, low for larger items), and `ceiling ÷ (1 − refused
//!   share)` over every attempt, bounded to [`ThrottleConfig::max_share`] × the ceiling (default
//!   4 ×). The first is what one writer knows of its own load; the second holds however many
//!   writers share the key (each sees the partition refuse the same share).
//! - A writer sees only its own attempts: a key-range throttle names the partition, and the key
//!   the request carried is the best local guess for the hot key on it. With several keys on one
//!   hot partition, each throttled key is named; [`ThrottleConfig::min_throttles`] (default 3)
//!   keeps a key touched once on a hot partition from being salted for it.
//! - Memory is bounded: at most [`ThrottleConfig::max_keys`] keys (default 1,024) of at most
//!   [`ThrottleConfig::max_key_bytes`] bytes, each with at most `window_ms / bucket_ms + 1`
//!   buckets. Attempts on keys never throttled cost nothing; a new key beyond the bound is counted
//!   in [`KeyThrottles::dropped`], never silently merged.
//! - Time is an argument (milliseconds since any fixed origin): the same calls give the same
//!   signals.

use std::collections::{BTreeMap, VecDeque};

use crate::detect::Kind;
use crate::hot::Signal;
use crate::keys::parse_sub_key;

/// What was throttled: the base table or one of its indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The base table.
    Table,
    /// A global secondary index.
    Index,
}

/// Which limit a request went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Limit {
    /// One partition's ceiling (`KeyRangeThroughputExceeded`): a hot key.
    KeyRange,
    /// The provisioned capacity of a provisioned-mode table or GSI.
    Provisioned,
    /// The per-table account quota of an on-demand table or GSI.
    AccountLimit,
    /// The configured on-demand maximum (`OnDemandThroughput`).
    MaxOnDemand,
}

impl Limit {
    /// Every limit, in the order DynamoDB's documentation lists them.
    pub const ALL: [Limit; 4] = [
        Limit::KeyRange,
        Limit::Provisioned,
        Limit::AccountLimit,
        Limit::MaxOnDemand,
    ];

    /// The limit part of a reason code (`KeyRangeThroughputExceeded`, …).
    pub fn code(self) -> &'static str {
        match self {
            Limit::KeyRange => "KeyRangeThroughputExceeded",
            Limit::Provisioned => "ProvisionedThroughputExceeded",
            Limit::AccountLimit => "AccountLimitExceeded",
            Limit::MaxOnDemand => "MaxOnDemandThroughputExceeded",
        }
    }

    /// The fix this limit calls for.
    pub fn remedy(self) -> Remedy {
        match self {
            Limit::KeyRange => Remedy::Spread,
            Limit::Provisioned | Limit::AccountLimit | Limit::MaxOnDemand => Remedy::AddCapacity,
        }
    }
}

/// What to do about a throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Remedy {
    /// A key is hot: spread it (salt its writes, cache its reads). Never add capacity for it:
    /// the per-partition ceiling does not move with the table's capacity.
    Spread,
    /// The table or index is short of capacity or over a quota: add capacity or raise the
    /// limit. Never salt for it.
    AddCapacity,
}

impl Remedy {
    /// A short name for logs and metrics: `spread` or `add-capacity`.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::Spread => "spread",
            Remedy::AddCapacity => "add-capacity",
        }
    }
}

/// One of the sixteen throttling reasons: resource × operation × limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reason {
    /// Table or index.
    pub scope: Scope,
    /// Read or write.
    pub kind: Kind,
    /// Which limit.
    pub limit: Limit,
}

impl Reason {
    /// Every reason DynamoDB documents (16).
    pub fn all() -> impl Iterator<Item = Reason> {
        [Scope::Table, Scope::Index].into_iter().flat_map(|scope| {
            [Kind::Read, Kind::Write].into_iter().flat_map(move |kind| {
                Limit::ALL
                    .into_iter()
                    .map(move |limit| Reason { scope, kind, limit })
            })
        })
    }

    /// Parses a reason code (`TableWriteKeyRangeThroughputExceeded`); `None` for any other text.
    pub fn parse(code: &str) -> Option<Reason> {
        let (scope, rest) = if let Some(r) = code.strip_prefix("Table") {
            (Scope::Table, r)
        } else {
            (Scope::Index, code.strip_prefix("Index")?)
        };
        let (kind, rest) = if let Some(r) = rest.strip_prefix("Read") {
            (Kind::Read, r)
        } else {
            (Kind::Write, rest.strip_prefix("Write")?)
        };
        let limit = Limit::ALL.into_iter().find(|l| l.code() == rest)?;
        Some(Reason { scope, kind, limit })
    }

    /// The reason code DynamoDB sends.
    pub fn code(&self) -> String {
        let scope = match self.scope {
            Scope::Table => "Table",
            Scope::Index => "Index",
        };
        let kind = match self.kind {
            Kind::Read => "Read",
            Kind::Write => "Write",
        };
        format!("{scope}{kind}{}", self.limit.code())
    }
}

/// The table (and index) a throttle's `resource` ARN names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    /// Table name.
    pub table: String,
    /// Index name, for an index ARN.
    pub index: Option<String>,
}

impl Resource {
    /// Parses `arn:<partition>:dynamodb:<region>:<account>:table/<name>[/index/<index>]`;
    /// `None` for anything else (a stream ARN, another service, a malformed name).
    pub fn parse_arn(arn: &str) -> Option<Resource> {
        let mut parts = arn.splitn(6, ':');
        let (prefix, _partition, service) = (parts.next()?, parts.next()?, parts.next()?);
        let (_region, _account, resource) = (parts.next()?, parts.next()?, parts.next()?);
        if prefix != "arn" || service != "dynamodb" {
            return None;
        }
        let path: Vec<&str> = resource.split('/').collect();
        let ok = |s: &str| !s.is_empty();
        match path.as_slice() {
            ["table", table] if ok(table) => Some(Resource {
                table: (*table).to_owned(),
                index: None,
            }),
            ["table", table, "index", index] if ok(table) && ok(index) => Some(Resource {
                table: (*table).to_owned(),
                index: Some((*index).to_owned()),
            }),
            _ => None,
        }
    }
}

/// A classified throttling reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Class {
    /// A key-range reason: the key the request carried is hot ([`Remedy::Spread`]).
    HotKey {
        /// The reason (its limit is [`Limit::KeyRange`]).
        reason: Reason,
        /// The table or index named, when the ARN parsed.
        resource: Option<Resource>,
    },
    /// A capacity or quota reason ([`Remedy::AddCapacity`]).
    Capacity {
        /// The reason (any limit but [`Limit::KeyRange`]).
        reason: Reason,
        /// The table or index named, when the ARN parsed.
        resource: Option<Resource>,
    },
    /// A reason this version does not know: logged, never acted on.
    Unknown {
        /// The reason text as received.
        code: String,
    },
}

impl Class {
    /// The fix, if the reason is known.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Class::HotKey { .. } => Some(Remedy::Spread),
            Class::Capacity { .. } => Some(Remedy::AddCapacity),
            Class::Unknown { .. } => None,
        }
    }

    /// The parsed reason, if known.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Class::HotKey { reason, .. } | Class::Capacity { reason, .. } => Some(*reason),
            Class::Unknown { .. } => None,
        }
    }

    /// The reason code (as received for an unknown one).
    pub fn code(&self) -> String {
        match self {
            Class::HotKey { reason, .. } | Class::Capacity { reason, .. } => reason.code(),
            Class::Unknown { code } => code.clone(),
        }
    }

    /// The table or index named, if the ARN parsed.
    pub fn resource(&self) -> Option<&Resource> {
        match self {
            Class::HotKey { resource, .. } | Class::Capacity { resource, .. } => resource.as_ref(),
            Class::Unknown { .. } => None,
        }
    }
}

/// Classifies one `ThrottlingReason` (`reason`, `resource` ARN) by its reason text.
pub fn classify(reason: &str, resource: Option<&str>) -> Class {
    let Some(parsed) = Reason::parse(reason) else {
        return Class::Unknown {
            code: reason.chars().take(MAX_CODE_CHARS).collect(),
        };
    };
    let resource = resource.and_then(Resource::parse_arn);
    match parsed.limit.remedy() {
        Remedy::Spread => Class::HotKey {
            reason: parsed,
            resource,
        },
        Remedy::AddCapacity => Class::Capacity {
            reason: parsed,
            resource,
        },
    }
}

/// Longest unknown reason text kept (outside bytes are bounded before they are stored).
pub const MAX_CODE_CHARS: usize = 128;

/// Settings of [`KeyThrottles`].
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleConfig {
    /// How far back throttles count, milliseconds. Default 1,000.
    pub window_ms: u64,
    /// Width of one counting bucket, milliseconds (≥ 1). Default 100.
    pub bucket_ms: u64,
    /// Key-range throttles of one key within the window before it is named. Default 3.
    pub min_throttles: u32,
    /// Most a signal's rate may be, as a multiple of the ceiling (≥ 1). Default 4.
    pub max_share: f64,
    /// Most keys tracked at once. Default 1,024.
    pub max_keys: usize,
    /// Longest key tracked, bytes (the sampler's bound). Default 256.
    pub max_key_bytes: usize,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self {
            window_ms: 1_000,
            bucket_ms: 100,
            min_throttles: 3,
            max_share: 4.0,
            max_keys: 1_024,
            max_key_bytes: 256,
        }
    }
}

/// Where a tracked key lives: table, index (for an index throttle), logical key, read or write.
type KeyId = (String, Option<String>, String, Kind);

/// One bucket's counts.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    at: u64,
    attempts: u32,
    first_attempts: u32,
    throttles: u32,
}

/// Attempts and key-range throttles of one logical key, per bucket (oldest first).
#[derive(Debug, Default)]
struct Counts {
    buckets: VecDeque<Bucket>,
}

impl Counts {
    fn add(&mut self, at: u64, throttled: bool, first: bool) {
        // Concurrent callers may report a little out of order: a late attempt joins the newest
        // bucket rather than reopening an older one.
        if self.buckets.back().is_none_or(|b| b.at < at) {
            self.buckets.push_back(Bucket {
                at,
                ..Bucket::default()
            });
        }
        if let Some(b) = self.buckets.back_mut() {
            b.attempts = b.attempts.saturating_add(1);
            b.first_attempts = b.first_attempts.saturating_add(u32::from(first));
            b.throttles = b.throttles.saturating_add(u32::from(throttled));
        }
    }

    /// Drops buckets that ended before `since`.
    fn expire(&mut self, since_bucket: u64) {
        while self.buckets.front().is_some_and(|b| b.at < since_bucket) {
            self.buckets.pop_front();
        }
    }

    /// Throttles in buckets from `since_bucket` on.
    fn throttles_since(&self, since_bucket: u64) -> u64 {
        self.buckets
            .iter()
            .filter(|b| b.at >= since_bucket)
            .map(|b| u64::from(b.throttles))
            .sum()
    }

    /// (attempts, first attempts, throttles) in the window.
    fn totals(&self) -> (u64, u64, u64) {
        self.buckets.iter().fold((0, 0, 0), |(a, f, t), b| {
            (
                a + u64::from(b.attempts),
                f + u64::from(b.first_attempts),
                t + u64::from(b.throttles),
            )
        })
    }
}

/// Key-range throttles seen on every attempt, per key, over a sliding window: the hot-key
/// signal a writer derives from DynamoDB's own answers (see the module docs for the bounds).
#[derive(Debug)]
pub struct KeyThrottles {
    config: ThrottleConfig,
    keys: BTreeMap<KeyId, Counts>,
    dropped: u64,
}

impl KeyThrottles {
    /// An empty tally; a `bucket_ms` of 0 is taken as 1 and a `max_share` under 1 as 1.
    pub fn new(mut config: ThrottleConfig) -> Self {
        config.bucket_ms = config.bucket_ms.max(1);
        if config.max_share.is_nan() || config.max_share < 1.0 {
            config.max_share = 1.0;
        }
        Self {
            config,
            keys: BTreeMap::new(),
            dropped: 0,
        }
    }

    /// Its settings.
    pub fn config(&self) -> &ThrottleConfig {
        &self.config
    }

    /// Records one attempt on `key` of `table` (and `index`, for a query or an index key) at
    /// `now_ms`, refused with `throttled` if it was; `first` for a call's first attempt (not a
    /// retry). A salted sub-key counts as its logical key. Only a [`Class::HotKey`] starts
    /// tracking a key; other attempts count only for keys already tracked (to measure the
    /// refused share and the offered rate).
    ///
    /// Returns whether this attempt brought its logical key to the signal threshold
    /// ([`ThrottleConfig::min_throttles`] within the window): from now on
    /// [`KeyThrottles::signals`] names it, so a controller waiting for its next poll can run now.
    #[allow(clippy::too_many_arguments)]
    pub fn attempt(
        &mut self,
        table: &str,
        index: Option<&str>,
        key: &str,
        kind: Kind,
        throttled: Option<&Class>,
        first: bool,
        now_ms: u64,
    ) -> bool {
        let hot = matches!(throttled, Some(Class::HotKey { .. }));
        if key.is_empty() || key.len() > self.config.max_key_bytes {
            return false;
        }
        let logical = match parse_sub_key(key) {
            Ok((base, Some(_))) => base,
            _ => key,
        };
        let bucket = now_ms / self.config.bucket_ms;
        let id: KeyId = (
            table.to_owned(),
            index.map(str::to_owned),
            logical.to_owned(),
            kind,
        );
        let since = self.window_start(now_ms);
        let threshold = u64::from(self.config.min_throttles).max(1);
        if let Some(counts) = self.keys.get_mut(&id) {
            counts.add(bucket, hot, first);
            return hot && counts.throttles_since(since) == threshold;
        }
        if !hot {
            return false;
        }
        if self.keys.len() >= self.config.max_keys {
            self.expire(now_ms);
            if self.keys.len() >= self.config.max_keys {
                self.dropped = self.dropped.saturating_add(1);
                return false;
            }
        }
        let mut counts = Counts::default();
        counts.add(bucket, true, first);
        self.keys.insert(id, counts);
        threshold == 1
    }

    /// The first bucket still inside the window at `now_ms`.
    fn window_start(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.config.window_ms) / self.config.bucket_ms
    }

    /// Forgets buckets that left the window at `now_ms`, and keys left with none.
    pub fn expire(&mut self, now_ms: u64) {
        let since = self.window_start(now_ms);
        self.keys.retain(|_, c| {
            c.expire(since);
            !c.buckets.is_empty()
        });
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Throttled keys not tracked because [`ThrottleConfig::max_keys`] were.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The hot keys at `now_ms`: one [`Signal`] per logical key with at least `min_throttles`
    /// key-range throttles in the window, against `ceiling(kind)`, source `throttle`, at the
    /// larger of its first attempts per second and `ceiling ÷ (1 − refused share)` (the latter
    /// bounded by `max_share`). Keys in key order; expired buckets dropped.
    pub fn signals(&mut self, now_ms: u64, ceiling: impl Fn(Kind) -> f64) -> Vec<Signal> {
        self.expire(now_ms);
        let cfg = &self.config;
        let mut out = Vec::new();
        for ((_, _, key, kind), counts) in &self.keys {
            let (attempts, first, throttles) = counts.totals();
            if throttles < u64::from(cfg.min_throttles) || attempts == 0 {
                continue;
            }
            let ceiling = ceiling(*kind);
            let admitted: f64 = (attempts - throttles) as f64 / attempts as f64;
            let share = if admitted <= 0.0 {
                cfg.max_share
            } else {
                (1.0 / admitted).clamp(1.0, cfg.max_share)
            };
            // The time the window's buckets cover: from the oldest one's start to now, at least
            // one bucket and at most the window.
            let oldest = counts.buckets.front().map_or(0, |b| b.at * cfg.bucket_ms);
            let span_ms = now_ms
                .saturating_sub(oldest)
                .clamp(cfg.bucket_ms, cfg.window_ms.max(cfg.bucket_ms));
            let offered = first as f64 * 1_000.0 / span_ms as f64;
            let rate = offered.max(ceiling * share);
            out.push(Signal::new(key, *kind, rate, ceiling, SOURCE));
        }
        out
    }
}

/// The `source` of signals derived from throttle reasons (kept in directory entries' reasons).
pub const SOURCE: &str = "throttle";

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_sixteen_documented_reasons_parse_and_only_key_range_spreads() {
        let codes = [
            "TableReadKeyRangeThroughputExceeded",
            "TableWriteKeyRangeThroughputExceeded",
            "IndexReadKeyRangeThroughputExceeded",
            "IndexWriteKeyRangeThroughputExceeded",
            "TableReadProvisionedThroughputExceeded",
            "TableWriteProvisionedThroughputExceeded",
            "IndexReadProvisionedThroughputExceeded",
            "IndexWriteProvisionedThroughputExceeded",
            "TableReadAccountLimitExceeded",
            "TableWriteAccountLimitExceeded",
            "IndexReadAccountLimitExceeded",
            "IndexWriteAccountLimitExceeded",
            "TableReadMaxOnDemandThroughputExceeded",
            "TableWriteMaxOnDemandThroughputExceeded",
            "IndexReadMaxOnDemandThroughputExceeded",
            "IndexWriteMaxOnDemandThroughputExceeded",
        ];
        assert_eq!(Reason::all().count(), 16);
        for code in codes {
            let class = classify(code, None);
            let spreads = code.contains("KeyRange");
            assert_eq!(
                class.remedy(),
                Some(if spreads {
                    Remedy::Spread
                } else {
                    Remedy::AddCapacity
                }),
                "{code}"
            );
            assert_eq!(class.code(), code);
            let r = class.reason().unwrap();
            assert_eq!(r.scope == Scope::Index, code.starts_with("Index"), "{code}");
            assert_eq!(r.kind == Kind::Read, code.contains("Read"), "{code}");
        }
    }

    #[test]
    fn table_and_index_arns_name_their_table_and_index() {
        let t = Resource::parse_arn("arn:aws:dynamodb:eu-west-1:123456789012:table/hs-counters");
        assert_eq!(
            t,
            Some(Resource {
                table: "hs-counters".into(),
                index: None
            })
        );
        let i = Resource::parse_arn(
            "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/hs-photos/index/by-creator",
        );
        assert_eq!(i.unwrap().index.as_deref(), Some("by-creator"));
        for bad in [
            "",
            "table/x",
            "arn:aws:kinesis:eu-west-1:1:stream/x",
            "arn:aws:dynamodb:eu-west-1:1:table/",
            "arn:aws:dynamodb:eu-west-1:1:table/x/stream/2025-01-01T00:00:00.000",
            "arn:aws:dynamodb:eu-west-1:1:table/x/index/",
        ] {
            assert_eq!(Resource::parse_arn(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_unknown_reason_is_kept_bounded_and_authorizes_nothing() {
        let long = "X".repeat(10_000);
        let c = classify(&long, Some("arn:aws:dynamodb:r:1:table/t"));
        assert_eq!(c.remedy(), None);
        assert_eq!(c.code().len(), MAX_CODE_CHARS);
        assert_eq!(classify("TableWriteKeyRange", None).remedy(), None);
        assert_eq!(
            classify("tablewritekeyrangethroughputexceeded", None).remedy(),
            None
        );
    }

    fn key_range() -> Class {
        classify(
            "TableWriteKeyRangeThroughputExceeded",
            Some("arn:aws:dynamodb:r:1:table/t"),
        )
    }

    fn capacity() -> Class {
        classify(
            "TableWriteProvisionedThroughputExceeded",
            Some("arn:aws:dynamodb:r:1:table/t"),
        )
    }

    #[test]
    fn capacity_throttles_never_name_a_key() {
        let mut k = KeyThrottles::new(ThrottleConfig::default());
        for i in 0..100 {
            k.attempt("t", None, "p9", Kind::Write, Some(&capacity()), true, i);
        }
        assert!(k.signals(100, |_| 1_000.0).is_empty());
        assert!(
            k.is_empty(),
            "a capacity throttle does not even start tracking"
        );
    }

    #[test]
    fn a_key_needs_min_throttles_within_the_window() {
        let mut k = KeyThrottles::new(ThrottleConfig::default());
        k.attempt("t", None, "p9", Kind::Write, Some(&key_range()), true, 0);
        k.attempt("t", None, "p9", Kind::Write, Some(&key_range()), true, 10);
        assert!(k.signals(20, |_| 1_000.0).is_empty(), "2 < 3 throttles");
        k.attempt("t", None, "p9", Kind::Write, Some(&key_range()), true, 20);
        assert_eq!(k.signals(30, |_| 1_000.0).len(), 1);
        assert!(
            k.signals(1_200, |_| 1_000.0).is_empty(),
            "the window has passed"
        );
        assert!(k.is_empty(), "and the key is forgotten");
    }

    #[test]
    fn the_rate_is_the_ceiling_over_the_admitted_share_within_bounds() {
        let mut k = KeyThrottles::new(ThrottleConfig::default());
        // 3 refused, 1 admitted: 4 × the ceiling, the default bound.
        for (i, t) in [true, true, true, false].into_iter().enumerate() {
            let c = key_range();
            k.attempt("t", None, "p9", Kind::Read, t.then_some(&c), true, i as u64);
        }
        let s = k.signals(10, |kind| match kind {
            Kind::Read => 3_000.0,
            Kind::Write => 1_000.0,
        });
        assert_eq!(
            (s[0].rate, s[0].ceiling, s[0].kind),
            (12_000.0, 3_000.0, Kind::Read)
        );
        assert_eq!(s[0].source, SOURCE);
    }

    #[test]
    fn salted_sub_keys_count_as_their_logical_key_at_the_rate_sent() {
        let mut k = KeyThrottles::new(ThrottleConfig::default());
        // 300 first attempts over 1 s on p9's three sub-keys, 6 refused, plus 300 retries.
        for i in 0..300u64 {
            let sub = format!("p9#{}", i % 3);
            let c = key_range();
            let refused = (i % 50 == 0).then_some(&c);
            k.attempt("t", None, &sub, Kind::Write, refused, true, 5 + i * 3);
            k.attempt("t", None, &sub, Kind::Write, None, false, 5 + i * 3);
        }
        let s = k.signals(1_000, |_| 50.0);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].key, "p9");
        // 300 first attempts over the 1 s the buckets cover; retries are not load.
        assert!((s[0].rate - 300.0).abs() < 1.0, "{s:?}");
    }

    #[test]
    fn tracked_keys_are_bounded_and_overflow_is_counted() {
        let mut k = KeyThrottles::new(ThrottleConfig {
            max_keys: 2,
            ..ThrottleConfig::default()
        });
        for key in ["a", "b", "c"] {
            k.attempt("t", None, key, Kind::Write, Some(&key_range()), true, 0);
        }
        assert_eq!((k.len(), k.dropped()), (2, 1));
        k.attempt(
            "t",
            None,
            &"k".repeat(257),
            Kind::Write,
            Some(&key_range()),
            true,
            0,
        );
        assert_eq!(k.len(), 2, "a key over max_key_bytes is not tracked");
        // Once the old keys leave the window, a new one is tracked again.
        k.attempt("t", None, "c", Kind::Write, Some(&key_range()), true, 5_000);
        assert_eq!((k.len(), k.dropped()), (1, 1));
    }

    fn any_class() -> impl Strategy<Value = Option<Class>> {
        prop_oneof![
            Just(None),
            Just(Some(key_range())),
            Just(Some(capacity())),
            Just(Some(classify("Nope", None))),
        ]
    }

    proptest! {
        #[test]
        fn every_reason_code_round_trips(i in 0usize..16) {
            let r = Reason::all().nth(i).unwrap();
            prop_assert_eq!(Reason::parse(&r.code()), Some(r));
            prop_assert_eq!(r.limit == Limit::KeyRange, r.limit.remedy() == Remedy::Spread);
        }

        #[test]
        fn arbitrary_text_never_classifies_as_a_hot_key_unless_it_is_a_key_range_code(
            s in "\\PC{0,64}"
        ) {
            let c = classify(&s, Some(&s));
            if c.remedy() == Some(Remedy::Spread) {
                prop_assert!(s.ends_with("KeyRangeThroughputExceeded"));
                prop_assert_eq!(Reason::parse(&s).map(|r| r.code()), Some(s.clone()));
            }
        }

        #[test]
        fn signals_name_only_keys_with_enough_key_range_throttles_at_a_bounded_rate(
            events in proptest::collection::vec((0usize..4, any_class(), 0u64..3_000), 0..200),
            now in 0u64..4_000,
        ) {
            let cfg = ThrottleConfig::default();
            let mut k = KeyThrottles::new(cfg.clone());
            let mut sorted = events.clone();
            sorted.sort_by_key(|e| e.2);
            for (key, class, at) in &sorted {
                k.attempt("t", None, &format!("k{key}"), Kind::Write, class.as_ref(), true, *at);
            }
            let now = now.max(sorted.last().map_or(0, |e| e.2));
            let signals = k.signals(now, |_| 1_000.0);
            let since = now.saturating_sub(cfg.window_ms) / cfg.bucket_ms;
            for s in &signals {
                // The oracle: key-range throttles of this key in the window's buckets.
                let hot = sorted.iter().filter(|(key, class, at)| {
                    format!("k{key}") == s.key
                        && at / cfg.bucket_ms >= since
                        && matches!(class, Some(Class::HotKey { .. }))
                }).count();
                prop_assert!(hot >= cfg.min_throttles as usize, "{} named with {hot}", s.key);
                // At least the ceiling; above the refused-share bound only by what was sent.
                let sent = sorted.iter().filter(|(key, _, at)| {
                    format!("k{key}") == s.key && at / cfg.bucket_ms >= since
                }).count() as f64;
                prop_assert!(s.rate >= s.ceiling, "{s:?}");
                prop_assert!(
                    s.rate <= (s.ceiling * cfg.max_share).max(sent * 1_000.0 / cfg.bucket_ms as f64),
                    "{s:?}"
                );
            }
            // And no key with enough key-range throttles in the window is missed.
            for key in 0..4 {
                let name = format!("k{key}");
                let hot = sorted.iter().filter(|(k2, class, at)| {
                    *k2 == key && at / cfg.bucket_ms >= since
                        && matches!(class, Some(Class::HotKey { .. }))
                }).count();
                if hot >= cfg.min_throttles as usize {
                    prop_assert!(signals.iter().any(|s| s.key == name), "{name} missed with {hot}");
                }
            }
        }

        #[test]
        fn an_attempt_says_crossed_exactly_when_it_makes_signals_name_its_key(
            events in proptest::collection::vec((0usize..3, any_class(), 0u64..400), 0..200),
        ) {
            let mut k = KeyThrottles::new(ThrottleConfig::default());
            let mut at = 0;
            for (key, class, dt) in &events {
                at += dt;
                let name = format!("k{key}");
                let named = |k: &mut KeyThrottles| {
                    k.signals(at, |_| 1_000.0).iter().any(|s| s.key == name)
                };
                let before = named(&mut k);
                let crossed = k.attempt("t", None, &name, Kind::Write, class.as_ref(), true, at);
                let after = named(&mut k);
                prop_assert_eq!(crossed, !before && after, "{} at {}", name, at);
            }
        }
    }
}
