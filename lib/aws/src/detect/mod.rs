//! Finding the hot key: the client sampler (a 1-in-N sample into a bounded Space-Saving top-K
//! per partition, re-exported from `heatsink_core::detect`) and the path that carries its
//! reports to the controller ([`publish`]: EventBridge). Contributor Insights, the other signal,
//! is [`crate::insights`] (feature `insights`).
//!
//! A router samples its own requests and names a key within seconds; Contributor Insights names
//! it a minute or two later from every caller's traffic. Both become [`crate::hot::Signal`]s
//! for the controller.
//!
//! ```
//! use std::time::Duration;
//! use heatsink::detect::{Access, Ceilings, Detector, DetectorConfig, Kind};
//!
//! let mut detector = Detector::new(DetectorConfig::default())?;
//! for i in 0..127u64 {
//!     let key = if i < 118 { "p9" } else { "p1" };
//!     detector.record(Access::write("S2", key), Duration::from_millis(i * 39))?;
//! }
//! let report = detector.report(Duration::from_secs(5), &Ceilings::dynamodb());
//! assert_eq!((report.hot[0].key.as_str(), report.hot[0].kind), ("p9", Kind::Write));
//! # Ok::<(), heatsink::detect::DetectError>(())
//! ```
//!
//! Limits are the sampler's (see `heatsink_core::detect`): memory bounded by partitions ×
//! sub-windows × counters whatever the key cardinality; a report entry at most 256 KiB on the
//! bus ([`publish::MAX_ENTRY_BYTES`]).

pub use heatsink_core::detect::*;

pub mod publish;
pub mod throttle;

#[cfg(feature = "publish")]
pub use publish::EventBridgeSink;
pub use publish::{
    Cadence, Encoded, PublishError, Published, Publisher, ReportSink, SAMPLER_DETAIL_TYPE,
    SAMPLER_SOURCE, encode,
};
pub use throttle::{ThrottleTally, ThrottleWatch};
