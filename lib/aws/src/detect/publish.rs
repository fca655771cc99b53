//! Publishing a client sampler's report to EventBridge: the sampler path of hot-key detection
//! in production.
//!
//! A long-lived router (an ECS service, an EC2 fleet, the `heatsink sim` proxy) samples its own
//! requests into a [`Detector`](heatsink_core::detect::Detector). While the report names hot
//! keys, [`Publisher`] puts it on an event bus every few seconds as `source: heatsink.sampler`,
//! `detail-type: heatsink hot-key report`; the stack's rule routes it to the hotkey-controller,
//! which salts, caches or limits the named keys. That takes seconds where Contributor Insights
//! takes minutes (1-minute datapoints). One Lambda instance sees too small a share of a key's
//! traffic to cross a partition threshold alone; there the capacity log lines and Contributor
//! Insights aggregate across instances instead.
//!
//! The pure part ([`encode`], [`Cadence`]) fits a report into one EventBridge entry and decides
//! when to publish; `EventBridgeSink` (feature `publish`) is the thin adapter behind
//! [`ReportSink`].

use std::future::Future;
use std::time::Duration;

#[cfg(feature = "publish")]
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use heatsink_core::detect::Report;

use crate::error::AwsError;

/// The `source` of sampler-report events.
pub const SAMPLER_SOURCE: &str = "heatsink.sampler";

/// The `detail-type` of sampler-report events (the stacks' rule matches source and type).
pub const SAMPLER_DETAIL_TYPE: &str = "heatsink hot-key report";

/// EventBridge's limit on one PutEvents entry, bytes (time + source + detail-type + detail).
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;

/// What EventBridge counts for an entry's `Time` field, bytes (its documented size formula).
const TIME_BYTES: usize = 14;

/// Why a report was not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The PutEvents call failed (network, credentials, throttling after the SDK's retries).
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// EventBridge accepted the call but refused the entry.
    #[error("EventBridge refused the report: {code}: {message}")]
    Rejected {
        /// The entry's `ErrorCode`.
        code: String,
        /// The entry's `ErrorMessage`.
        message: String,
    },
    /// The report cannot be encoded, or not even one hot key fits in an entry.
    #[error("sampler report cannot be encoded: {0}")]
    Encode(String),
}

impl PublishError {
    /// The failed PutEvents call behind this error, if it is one.
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws(e) => Some(e),
            _ => None,
        }
    }
}

/// A report encoded as one entry's `Detail`, and what was left out to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// The JSON detail.
    pub detail: String,
    /// Hot keys in the detail (hottest first; the coldest are dropped first).
    pub keys: usize,
    /// Hot keys left out to fit the entry limit.
    pub dropped_keys: usize,
    /// Whether the per-partition loads were left out (the controller reads only the hot keys).
    pub dropped_partitions: bool,
}

/// Encodes `report` as the detail of one entry of at most `max_entry_bytes` bytes in all.
///
/// Keeps the report whole when it fits; otherwise drops the per-partition loads (context, not
/// input to the controller), then the coldest hot keys. A report whose hottest key alone does
/// not fit is an error rather than an entry EventBridge would refuse.
pub fn encode(report: &Report, max_entry_bytes: usize) -> Result<Encoded, PublishError> {
    let budget = max_entry_bytes
        .saturating_sub(TIME_BYTES + SAMPLER_SOURCE.len() + SAMPLER_DETAIL_TYPE.len());
    let json =
        |r: &Report| serde_json::to_string(r).map_err(|e| PublishError::Encode(e.to_string()));
    let whole = json(report)?;
    if whole.len() <= budget {
        return Ok(Encoded {
            detail: whole,
            keys: report.hot.len(),
            dropped_keys: 0,
            dropped_partitions: false,
        });
    }
    let with = |n: usize| Report {
        partitions: Vec::new(),
        hot: report.hot[..n].to_vec(),
    };
    // The largest prefix of hot keys that fits: encoded size grows with the prefix, so bisect.
    let (mut fits, mut too_big) = (0, report.hot.len() + 1);
    let mut best = json(&with(0))?;
    if best.len() > budget {
        return Err(PublishError::Encode(format!(
            "an empty report is {} bytes, over the {budget}-byte budget",
            best.len()
        )));
    }
    while too_big - fits > 1 {
        let mid = fits + (too_big - fits) / 2;
        let candidate = json(&with(mid))?;
        if candidate.len() <= budget {
            fits = mid;
            best = candidate;
        } else {
            too_big = mid;
        }
    }
    if fits == 0 && !report.hot.is_empty() {
        return Err(PublishError::Encode(format!(
            "the hottest key alone is over the {budget}-byte budget"
        )));
    }
    Ok(Encoded {
        detail: best,
        keys: fits,
        dropped_keys: report.hot.len() - fits,
        dropped_partitions: !report.partitions.is_empty(),
    })
}

/// When to publish: while the report names hot keys, at most once per `every`.
///
/// A calm report is not published: the controller's schedule tick cools keys down, and a quiet
/// router costs nothing. A failed publish is retried at the next tick (the cadence only advances
/// on success), so one lost call delays mitigation by one tick, never forever.
#[derive(Debug, Clone, PartialEq)]
pub struct Cadence {
    /// The shortest time between two published reports.
    pub every: Duration,
    last: Option<Duration>,
}

impl Cadence {
    /// At most one report per `every`.
    pub fn new(every: Duration) -> Self {
        Self { every, last: None }
    }

    /// Whether a report naming `hot_keys` keys should be published at `now` (a monotonic time).
    pub fn due(&self, hot_keys: usize, now: Duration) -> bool {
        hot_keys > 0
            && self
                .last
                .is_none_or(|last| now.saturating_sub(last) >= self.every)
    }

    /// Records a successful publish at `now`.
    pub fn published(&mut self, now: Duration) {
        self.last = Some(now);
    }
}

/// Where encoded reports go: EventBridge in production, anything in tests.
pub trait ReportSink {
    /// Puts one entry with `detail` (already within the entry limit).
    fn put(&self, detail: String) -> impl Future<Output = Result<(), PublishError>> + Send;
}

/// PutEvents on one named event bus.
///
/// The bus is required: the stacks route sampler reports only from their own control bus
/// (`<prefix>control`, whose policy admits only the sampler-publisher role), so a report put on
/// the account's default bus would be accepted by EventBridge and reach no controller.
#[cfg(feature = "publish")]
#[cfg_attr(docsrs, doc(cfg(feature = "publish")))]
#[derive(Debug, Clone)]
pub struct EventBridgeSink {
    client: aws_sdk_eventbridge::Client,
    bus: String,
}

#[cfg(feature = "publish")]
impl EventBridgeSink {
    /// Publishes on `bus`: the stack's control bus, by name or ARN.
    pub fn new(client: aws_sdk_eventbridge::Client, bus: impl Into<String>) -> Self {
        Self {
            // No call waits forever: a client without a bound of its own gets the policy's.
            client: crate::timeouts::bounded!(
                aws_sdk_eventbridge,
                client,
                crate::timeouts::Timeouts::CALL
            ),
            bus: bus.into(),
        }
    }
}

#[cfg(feature = "publish")]
impl ReportSink for EventBridgeSink {
    async fn put(&self, detail: String) -> Result<(), PublishError> {
        let entry = PutEventsRequestEntry::builder()
            .source(SAMPLER_SOURCE)
            .detail_type(SAMPLER_DETAIL_TYPE)
            .detail(detail)
            .event_bus_name(&self.bus)
            .build();
        let out = self
            .client
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|e| AwsError::new("EventBridge", "PutEvents", &self.bus, e))?;
        if out.failed_entry_count() == 0 {
            return Ok(());
        }
        let first = out.entries().first();
        Err(PublishError::Rejected {
            code: first
                .and_then(|e| e.error_code())
                .unwrap_or("unknown")
                .to_owned(),
            message: first
                .and_then(|e| e.error_message())
                .unwrap_or("no message")
                .to_owned(),
        })
    }
}

/// What one publish put on the bus.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Hot keys published.
    pub keys: usize,
    /// Hot keys left out to fit one entry.
    pub dropped_keys: usize,
}

/// A sink with a cadence: call [`Publisher::tick`] with the current report as often as you like.
#[derive(Debug, Clone)]
pub struct Publisher<S> {
    sink: S,
    cadence: Cadence,
    max_entry_bytes: usize,
}

impl<S: ReportSink> Publisher<S> {
    /// Publishes to `sink` at most once per `every`, while there are hot keys.
    pub fn new(sink: S, every: Duration) -> Self {
        Self {
            sink,
            cadence: Cadence::new(every),
            max_entry_bytes: MAX_ENTRY_BYTES,
        }
    }

    /// Publishes `report` if it names hot keys and the cadence allows it at `now` (monotonic).
    ///
    /// `Ok(None)`: nothing was due. An error leaves the cadence where it was, so the next tick
    /// tries again.
    pub async fn tick(
        &mut self,
        report: &Report,
        now: Duration,
    ) -> Result<Option<Published>, PublishError> {
        if !self.cadence.due(report.hot.len(), now) {
            return Ok(None);
        }
        let encoded = encode(report, self.max_entry_bytes)?;
        self.sink.put(encoded.detail).await?;
        self.cadence.published(now);
        Ok(Some(Published {
            keys: encoded.keys,
            dropped_keys: encoded.dropped_keys,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use heatsink_core::detect::{HotKey, Kind, PartitionLoad};
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::hot::control::Trigger;

    /// The EventBridge adapter, against mocked answers.
    #[cfg(feature = "publish")]
    mod sink {
        use aws_sdk_eventbridge::config::http::HttpResponse;
        use aws_sdk_eventbridge::error::{ErrorMetadata, ProvideErrorMetadata, SdkError};
        use aws_sdk_eventbridge::operation::put_events::PutEventsError;
        use aws_smithy_mocks::{Rule, mock};

        use super::*;
        use crate::testing::{in_chain, mocked};

        /// A EventBridge client answering from `rule`.
        fn eventbridge(rule: Rule) -> aws_sdk_eventbridge::Client {
            mocked!(aws_sdk_eventbridge, rule)
        }

        #[tokio::test]
        async fn a_throttled_put_events_keeps_the_sdk_error_as_the_source() {
            let put = mock!(aws_sdk_eventbridge::Client::put_events).then_error(|| {
                PutEventsError::generic(
                    ErrorMetadata::builder()
                        .code("ThrottlingException")
                        .message("Rate exceeded")
                        .build(),
                )
            });
            let sink = EventBridgeSink::new(eventbridge(put), "heatsink-bus");
            let err = sink.put("{}".into()).await.expect_err("mocked to fail");
            let aws = err.aws().expect("an AWS failure");
            assert!(aws.is_throttling());
            assert!(!aws.is_conditional_check_failed());
            assert_eq!(
                (aws.service(), aws.operation(), aws.resource()),
                ("EventBridge", "PutEvents", "heatsink-bus")
            );
            assert_eq!(
                err.to_string(),
                "EventBridge PutEvents on heatsink-bus failed: ThrottlingException: Rate exceeded"
            );
            let sdk = in_chain::<SdkError<PutEventsError, HttpResponse>>(&err)
                .expect("the SDK error is in the source chain");
            assert_eq!(sdk.code(), Some("ThrottlingException"));
        }
    }

    /// A write-hot key named `key` at `estimate` writes/s (the shape the sampler reports).
    fn hot_key(key: &str, estimate: f64) -> HotKey {
        serde_json::from_value(serde_json::json!({
            "partition": "t/p1", "key": key, "kind": "write", "estimate": estimate,
            "lower_bound": estimate, "error_bound": 0.0, "share_of_ceiling": estimate / 1_000.0,
            "share_of_partition": 1.0, "certain": true, "sampled": {"count": 1, "error": 0}
        }))
        .unwrap()
    }

    /// A report with `n` write-hot keys of `key_len`-byte names, hottest first, and a partition.
    fn report(n: usize, key_len: usize) -> Report {
        let hot = (0..n)
            .map(|i| hot_key(&format!("{i:0>key_len$}"), 10_000.0 - i as f64))
            .collect();
        let partitions = vec![PartitionLoad {
            partition: "t/p1".into(),
            kind: Kind::Write,
            rate: 9_000.0,
            share_of_ceiling: 9.0,
            floor_rate: 9_000.0,
            sampled: 900,
            span: Duration::from_secs(5),
        }];
        Report { partitions, hot }
    }

    /// The entry EventBridge would get, as the controller receives it after routing.
    fn delivered(detail: &str) -> Value {
        serde_json::json!({
            "source": SAMPLER_SOURCE,
            "detail-type": SAMPLER_DETAIL_TYPE,
            "detail": serde_json::from_str::<Value>(detail).unwrap(),
        })
    }

    #[test]
    fn a_report_that_fits_is_published_whole_and_parses_back_as_a_sampler_trigger() {
        let r = report(3, 4);
        let e = encode(&r, MAX_ENTRY_BYTES).unwrap();
        assert_eq!(
            (e.keys, e.dropped_keys, e.dropped_partitions),
            (3, 0, false)
        );
        assert_eq!(
            Trigger::parse(&delivered(&e.detail)).unwrap(),
            Trigger::Sampler(r)
        );
    }

    #[test]
    fn an_oversized_report_drops_partitions_then_the_coldest_keys() {
        let r = report(40, 600);
        let whole = serde_json::to_string(&r).unwrap().len();
        let limit = whole / 2;
        let e = encode(&r, limit).unwrap();
        assert!(e.dropped_partitions);
        assert!(e.keys > 0 && e.dropped_keys > 0, "{e:?}");
        assert_eq!(e.keys + e.dropped_keys, 40);
        let Trigger::Sampler(sent) = Trigger::parse(&delivered(&e.detail)).unwrap() else {
            panic!("not a sampler trigger");
        };
        assert_eq!(sent.hot[..], r.hot[..e.keys], "the hottest keys, in order");
        assert!(sent.partitions.is_empty());
        let size = TIME_BYTES + SAMPLER_SOURCE.len() + SAMPLER_DETAIL_TYPE.len() + e.detail.len();
        assert!(size <= limit, "{size} > {limit}");
        // One more key would not have fitted.
        let one_more = Report {
            partitions: vec![],
            hot: r.hot[..=e.keys].to_vec(),
        };
        let bigger = TIME_BYTES
            + SAMPLER_SOURCE.len()
            + SAMPLER_DETAIL_TYPE.len()
            + serde_json::to_string(&one_more).unwrap().len();
        assert!(bigger > limit);
    }

    #[test]
    fn a_key_too_big_for_any_entry_is_an_error_not_a_refused_entry() {
        let r = report(1, 2_000);
        assert!(matches!(encode(&r, 1_000), Err(PublishError::Encode(_))));
    }

    #[test]
    fn a_calm_report_is_never_due_and_a_hot_one_is_due_once_per_period() {
        let mut c = Cadence::new(Duration::from_secs(5));
        assert!(!c.due(0, Duration::ZERO));
        assert!(c.due(1, Duration::ZERO));
        c.published(Duration::from_secs(1));
        assert!(!c.due(1, Duration::from_secs(5)));
        assert!(c.due(1, Duration::from_secs(6)));
        assert!(!c.due(0, Duration::from_secs(60)));
    }

    /// A sink recording entries, failing the first `fail` puts.
    #[derive(Clone, Default)]
    struct Recorder {
        sent: Arc<Mutex<Vec<String>>>,
        fail: Arc<Mutex<u32>>,
    }

    impl ReportSink for Recorder {
        async fn put(&self, detail: String) -> Result<(), PublishError> {
            let mut fail = self.fail.lock().unwrap();
            if *fail > 0 {
                *fail -= 1;
                return Err(PublishError::from(AwsError::new(
                    "EventBridge",
                    "PutEvents",
                    "default",
                    aws_sdk_eventbridge::error::SdkError::<
                        aws_sdk_eventbridge::operation::put_events::PutEventsError,
                        aws_sdk_eventbridge::config::http::HttpResponse,
                    >::construction_failure("throttled"),
                )));
            }
            self.sent.lock().unwrap().push(detail);
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failed_publish_is_retried_at_the_next_tick_not_after_a_full_period() {
        let sink = Recorder::default();
        *sink.fail.lock().unwrap() = 1;
        let mut p = Publisher::new(sink.clone(), Duration::from_secs(5));
        let hot = report(2, 3);
        let s = Duration::from_secs;
        assert!(p.tick(&hot, s(0)).await.is_err());
        assert_eq!(
            p.tick(&hot, s(1)).await.unwrap(),
            Some(Published {
                keys: 2,
                dropped_keys: 0
            })
        );
        assert_eq!(p.tick(&hot, s(2)).await.unwrap(), None, "within the period");
        assert_eq!(
            p.tick(&Report::default(), s(9)).await.unwrap(),
            None,
            "calm"
        );
        assert!(p.tick(&hot, s(9)).await.unwrap().is_some());
        assert_eq!(sink.sent.lock().unwrap().len(), 2);
    }

    proptest! {
        /// Whatever the report, an encoded entry fits the limit, keeps the hottest keys in
        /// order, and accounts for every key.
        #[test]
        fn an_encoded_entry_fits_and_keeps_a_prefix_of_the_hottest_keys(
            keys in proptest::collection::vec((1usize..300, 1u32..1_000_000), 0..60),
            limit in 2_000usize..40_000,
        ) {
            let mut hot: Vec<HotKey> = keys
                .iter()
                .enumerate()
                .map(|(i, (len, est))| hot_key(&format!("{i}{}", "x".repeat(*len)), f64::from(*est)))
                .collect();
            hot.sort_by(|a, b| b.estimate.total_cmp(&a.estimate));
            let r = Report { partitions: vec![], hot };
            match encode(&r, limit) {
                Ok(e) => {
                    let size = TIME_BYTES + SAMPLER_SOURCE.len() + SAMPLER_DETAIL_TYPE.len() + e.detail.len();
                    prop_assert!(size <= limit);
                    prop_assert_eq!(e.keys + e.dropped_keys, r.hot.len());
                    let sent: Report = serde_json::from_str(&e.detail).unwrap();
                    prop_assert_eq!(&sent.hot[..], &r.hot[..e.keys]);
                }
                Err(_) => {
                    let one = Report { partitions: vec![], hot: r.hot[..1].to_vec() };
                    prop_assert!(serde_json::to_string(&one).unwrap().len() + TIME_BYTES
                        + SAMPLER_SOURCE.len() + SAMPLER_DETAIL_TYPE.len() > limit);
                }
            }
        }
    }
}
