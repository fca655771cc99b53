//! The EMF writer: one invocation's (or one worker round's) metric values as CloudWatch
//! Embedded Metric Format documents.
//!
//! Metrics are open: a [`MetricDef`] is a name and a [`Unit`], so an application declares its
//! own catalogue (an enum with `impl From<MyMetric> for MetricDef`, or plain consts) and the
//! writer checks only what the EMF specification requires: finite numbers, at most 100 values
//! per metric and 100 metrics per document (more values are split over documents).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use serde_json::{Map, Value, json};

/// CloudWatch namespace of every heatsink EMF metric.
pub const NAMESPACE: &str = "heatsink";
/// The one dimension of every heatsink metric; its value is the emitter's short name.
pub const DIMENSION: &str = "Function";
/// Most metric definitions one EMF directive may hold (specification limit).
pub const MAX_METRICS_PER_DOCUMENT: usize = 100;
/// Most values one metric may carry in one EMF document (specification limit).
pub const MAX_VALUES_PER_METRIC: usize = 100;
/// Most dimension keys one EMF dimension set may hold (specification limit).
pub const MAX_DIMENSIONS_PER_SET: usize = 30;

/// A CloudWatch unit (the subset heatsink's metrics use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// A number of things.
    Count,
    /// A duration in seconds.
    Seconds,
}

impl Unit {
    /// The unit's name as CloudWatch spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
        }
    }
}

/// One metric: the name CloudWatch shows and its unit. Declare them as consts:
///
/// ```
/// use heatsink::metrics::{Emf, MetricDef};
/// const ORDERS_SHED: MetricDef = MetricDef::count("OrdersShed");
/// let mut emf = Emf::new("orders-api");
/// emf.count(ORDERS_SHED, 3);
/// assert_eq!(emf.documents(1_700_000_000_000)[0]["OrdersShed"], 3.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricDef {
    /// The metric name in CloudWatch.
    pub name: &'static str,
    /// Its unit.
    pub unit: Unit,
}

impl MetricDef {
    /// A metric counting things.
    pub const fn count(name: &'static str) -> Self {
        Self {
            name,
            unit: Unit::Count,
        }
    }

    /// A metric measuring seconds.
    pub const fn seconds(name: &'static str) -> Self {
        Self {
            name,
            unit: Unit::Seconds,
        }
    }
}

/// Why an EMF document could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EmfError {
    /// EMF values must be JSON numbers; NaN and infinities are not. Fix the computation.
    #[error("{metric}: {value} is not a finite number")]
    NotFinite {
        /// The metric.
        metric: &'static str,
        /// The value refused.
        value: f64,
    },
    /// Writing the line failed (stdout closed?); the metrics of this flush are lost.
    #[error("writing the EMF document: {0}")]
    Write(#[from] std::io::Error),
}

/// The metric values of one invocation (or worker round) of one emitter, written as EMF
/// documents.
#[derive(Debug, Clone)]
pub struct Emf {
    emitter: String,
    values: BTreeMap<&'static str, (Unit, Vec<f64>)>,
}

impl Emf {
    /// An empty set of values for `emitter`, the value of the [`DIMENSION`] dimension: a
    /// function's or process's short name (`orders-aggregator`, `stream-consumer`).
    pub fn new(emitter: impl Into<String>) -> Self {
        Self {
            emitter: emitter.into(),
            values: BTreeMap::new(),
        }
    }

    fn series(&mut self, metric: MetricDef) -> &mut Vec<f64> {
        &mut self
            .values
            .entry(metric.name)
            .or_insert_with(|| (metric.unit, vec![]))
            .1
    }

    /// Adds a value; EMF values must be numbers, so NaN and infinities are refused.
    pub fn put(&mut self, metric: impl Into<MetricDef>, value: f64) -> Result<&mut Self, EmfError> {
        let metric = metric.into();
        if !value.is_finite() {
            return Err(EmfError::NotFinite {
                metric: metric.name,
                value,
            });
        }
        self.series(metric).push(value);
        Ok(self)
    }

    /// Adds a count (always a valid value).
    pub fn count(&mut self, metric: impl Into<MetricDef>, n: u64) -> &mut Self {
        self.series(metric.into()).push(n as f64);
        self
    }

    /// Adds a duration in seconds (always a valid value).
    pub fn seconds(&mut self, metric: impl Into<MetricDef>, d: Duration) -> &mut Self {
        self.series(metric.into()).push(d.as_secs_f64());
        self
    }

    /// True when no value was added since the last flush.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The EMF documents for the values so far, stamped `timestamp_ms` (ms since the epoch):
    /// one document per 100 values of the busiest metric; none when there are no values.
    pub fn documents(&self, timestamp_ms: u64) -> Vec<Value> {
        let rounds = self
            .values
            .values()
            .map(|(_, v)| v.len().div_ceil(MAX_VALUES_PER_METRIC))
            .max()
            .unwrap_or(0);
        (0..rounds)
            .map(|round| {
                let mut doc = Map::new();
                let mut definitions = vec![];
                for (name, (unit, values)) in &self.values {
                    let chunk = values
                        .chunks(MAX_VALUES_PER_METRIC)
                        .nth(round)
                        .unwrap_or(&[]);
                    let value = match chunk {
                        [] => continue,
                        [one] => json!(one),
                        many => json!(many),
                    };
                    definitions.push(json!({"Name": name, "Unit": unit.name()}));
                    doc.insert((*name).to_owned(), value);
                }
                doc.insert(DIMENSION.to_owned(), json!(self.emitter));
                doc.insert(
                    "_aws".to_owned(),
                    json!({
                        "Timestamp": timestamp_ms,
                        "CloudWatchMetrics": [{
                            "Namespace": NAMESPACE,
                            "Dimensions": [[DIMENSION]],
                            "Metrics": definitions,
                        }],
                    }),
                );
                Value::Object(doc)
            })
            .collect()
    }

    /// Writes the documents to `out`, one JSON line each; returns how many were written.
    pub fn write_to(&self, out: &mut impl Write, timestamp_ms: u64) -> Result<usize, EmfError> {
        let docs = self.documents(timestamp_ms);
        for doc in &docs {
            let mut line = serde_json::to_vec(doc).map_err(std::io::Error::from)?;
            line.push(b'\n');
            out.write_all(&line)?;
        }
        out.flush()?;
        Ok(docs.len())
    }

    /// Prints the values to stdout as EMF (stamped now) and clears them: call once per
    /// invocation. A write failure is logged, never returned: metrics must not fail a request.
    pub fn flush(&mut self) {
        if self.is_empty() {
            return;
        }
        let written = self.write_to(&mut std::io::stdout().lock(), crate::clock::now_ms());
        if let Err(e) = written {
            tracing::warn!(error = %e, emitter = %self.emitter, "EMF metrics lost");
        }
        self.values.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MetricDef = MetricDef::count("A");
    const B: MetricDef = MetricDef::count("B");
    const T: MetricDef = MetricDef::seconds("T");

    fn parse_lines(out: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
            .collect()
    }

    #[test]
    fn a_document_declares_each_metric_with_its_unit_under_one_dimension() {
        let mut emf = Emf::new("orders-api");
        emf.count(A, 3).seconds(T, Duration::from_millis(2_500));
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_123).expect("write"), 1);
        let doc = &parse_lines(&out)[0];
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_123_u64);
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(directive["Dimensions"], json!([[DIMENSION]]));
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "A", "Unit": "Count"}, {"Name": "T", "Unit": "Seconds"}])
        );
        assert_eq!(doc[DIMENSION], "orders-api");
        assert_eq!(doc["A"], 3.0);
        assert_eq!(doc["T"], 2.5);
    }

    #[test]
    fn more_than_100_values_of_one_metric_are_split_over_documents_in_order() {
        let mut emf = Emf::new("x");
        for i in 0..250 {
            emf.count(A, i);
        }
        emf.count(B, 7);
        let docs = emf.documents(1);
        assert_eq!(docs.len(), 3);
        let all: Vec<f64> = docs
            .iter()
            .flat_map(|d| match &d["A"] {
                Value::Array(a) => a.iter().filter_map(Value::as_f64).collect(),
                v => v.as_f64().into_iter().collect::<Vec<_>>(),
            })
            .collect();
        assert_eq!(all, (0..250).map(|i| i as f64).collect::<Vec<_>>());
        assert_eq!(docs[0]["B"], 7.0);
        assert!(
            docs[1].get("B").is_none(),
            "declared only where it has a value"
        );
    }

    #[test]
    fn non_numbers_are_refused_and_an_empty_set_writes_nothing() {
        let mut emf = Emf::new("x");
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(emf.put(A, bad), Err(EmfError::NotFinite { .. })));
        }
        assert!(emf.is_empty());
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1).expect("write"), 0);
        assert!(out.is_empty());
        emf.put(A, 1.5).expect("finite");
        assert_eq!(emf.documents(1).len(), 1);
    }
}
