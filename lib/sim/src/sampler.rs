//! The simulator as a sampling router: every keyed request is offered to a 1-in-N
//! [`Detector`], and `GET /_sim/hot` serves the report that names the hot keys.
//!
//! In production the sampler lives in the client (the likes API, a router); locally the proxy
//! sees every request, so it stands in for a fleet of routers and lets the controller's sampler
//! path run end to end. Each item operation counts one unit against its table partition
//! (`<table>/p<n>`, the simulator's own partition of the key): for the ≤ 1 KB items of the
//! scenarios that is one WCU or one strongly consistent RCU. Queries and Scans are not sampled
//! (their partition key hides in an expression); Contributor Insights covers them on AWS.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use heatsink_core::detect::{Access, Ceilings, Detector, DetectorConfig, Kind, Report};
use serde_json::{Map, Value};

use super::SimError;
use super::model::{key_bytes, partition_of};
use super::request::TableKeys;

/// A sampling detector fed by the proxy.
#[derive(Debug)]
pub struct Sampler {
    detector: Detector,
    ceilings: Ceilings,
    draws: u64,
}

/// One item access found in a request: table, partition-key value, read or write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAccess {
    /// Table name.
    pub table: String,
    /// The partition-key value as text (numbers in their decimal form).
    pub key: String,
    /// Read or write.
    pub kind: Kind,
}

impl Sampler {
    /// A sampler with `config` reporting keys over `ceilings`' threshold.
    pub fn new(
        config: DetectorConfig,
        ceilings: Ceilings,
    ) -> Result<Self, heatsink_core::detect::DetectError> {
        Ok(Self {
            detector: Detector::new(config)?,
            ceilings,
            draws: 0,
        })
    }

    /// Offers every item access of one request (1 in N of them are recorded).
    pub fn observe(&mut self, accesses: &[KeyAccess], partitions: u32, now: Duration) {
        for a in accesses {
            self.draws += 1;
            let partition = format!(
                "{}/p{}",
                a.table,
                partition_of(a.key.as_bytes(), partitions)
            );
            let access = match a.kind {
                Kind::Read => Access::read(&partition, &a.key),
                Kind::Write => Access::write(&partition, &a.key),
            };
            // A key too long or too many partitions is left out of the sample, never fatal to
            // the request being proxied.
            let _ = self.detector.offer(access, self.draws, now);
        }
    }

    /// The hot keys over the window ending at `now`.
    pub fn report(&self, now: Duration) -> Report {
        self.detector.report(now, &self.ceilings)
    }

    /// Forgets everything sampled.
    pub fn reset(&mut self) {
        if let Ok(fresh) = Detector::new(self.detector.config().clone()) {
            self.detector = fresh;
        }
    }
}

/// Fetches a running sampler's report (`GET <endpoint>/_sim/hot`), e.g. for `heatsink top`.
pub async fn fetch_report(endpoint: &str) -> Result<Report, SimError> {
    let fetch = |reason: String| SimError::Fetch {
        url: format!("{}/_sim/hot", endpoint.trim_end_matches('/')),
        reason,
    };
    let uri: hyper::Uri = format!("{}/_sim/hot", endpoint.trim_end_matches('/'))
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| fetch(e.to_string()))?;
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let resp = client.get(uri).await.map_err(|e| fetch(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(fetch(format!("HTTP {}", resp.status())));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| fetch(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| fetch(format!("not a sampler report: {e}")))
}

/// The item accesses of a data-plane request (Put/Update/Delete/Get and their batch forms).
pub fn accessed_keys(op: &str, body: &Value, keys: &HashMap<String, TableKeys>) -> Vec<KeyAccess> {
    let mut out = Vec::new();
    let mut push = |table: &str, item: Option<&Value>, kind: Kind| {
        let Some(pk) = keys.get(table).map(|k| &k.pk) else {
            return;
        };
        if let Some(bytes) = item.and_then(|i| i.get(pk)).and_then(key_bytes) {
            out.push(KeyAccess {
                table: table.to_owned(),
                key: String::from_utf8_lossy(&bytes).into_owned(),
                kind,
            });
        }
    };
    let table = body.get("TableName").and_then(Value::as_str).unwrap_or("");
    match op {
        "PutItem" => push(table, body.get("Item"), Kind::Write),
        "UpdateItem" | "DeleteItem" => push(table, body.get("Key"), Kind::Write),
        "GetItem" => push(table, body.get("Key"), Kind::Read),
        "BatchWriteItem" => {
            for (table, requests) in request_items(body) {
                for r in requests.as_array().into_iter().flatten() {
                    let item = r
                        .pointer("/PutRequest/Item")
                        .or_else(|| r.pointer("/DeleteRequest/Key"));
                    push(table, item, Kind::Write);
                }
            }
        }
        "BatchGetItem" => {
            for (table, request) in request_items(body) {
                for key in request
                    .get("Keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    push(table, Some(key), Kind::Read);
                }
            }
        }
        _ => {}
    }
    out
}

fn request_items(body: &Value) -> impl Iterator<Item = (&String, &Value)> {
    body.get("RequestItems")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(Map::iter)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keys() -> HashMap<String, TableKeys> {
        HashMap::from([(
            "counters".to_owned(),
            TableKeys {
                pk: "pk".into(),
                indexes: HashMap::new(),
                provisioned: false,
            },
        )])
    }

    #[test]
    fn finds_the_partition_key_of_every_item_operation() {
        let k = keys();
        let update = json!({"TableName": "counters", "Key": {"pk": {"S": "p9"}, "sk": {"S": "x"}}});
        assert_eq!(
            accessed_keys("UpdateItem", &update, &k),
            [KeyAccess {
                table: "counters".into(),
                key: "p9".into(),
                kind: Kind::Write
            }]
        );
        let get = json!({"TableName": "counters", "Key": {"pk": {"N": "42"}}});
        assert_eq!(accessed_keys("GetItem", &get, &k)[0].key, "42");
        let batch = json!({"RequestItems": {"counters": [
            {"PutRequest": {"Item": {"pk": {"S": "a"}}}},
            {"DeleteRequest": {"Key": {"pk": {"S": "b"}}}}
        ], "unknown": [{"PutRequest": {"Item": {"pk": {"S": "c"}}}}]}});
        let found: Vec<_> = accessed_keys("BatchWriteItem", &batch, &k)
            .into_iter()
            .map(|a| a.key)
            .collect();
        assert_eq!(
            found,
            ["a", "b"],
            "tables with no known key schema are skipped"
        );
        let bget = json!({"RequestItems": {"counters": {"Keys": [{"pk": {"S": "r"}}]}}});
        assert_eq!(accessed_keys("BatchGetItem", &bget, &k)[0].kind, Kind::Read);
        assert!(accessed_keys("Query", &json!({"TableName": "counters"}), &k).is_empty());
        assert!(accessed_keys("PutItem", &json!({"TableName": "counters"}), &k).is_empty());
    }

    #[test]
    fn a_hot_key_is_named_in_the_report() {
        let config = DetectorConfig {
            sample_one_in: 10,
            window: Duration::from_secs(2),
            sub_windows: 4,
            ..DetectorConfig::default()
        };
        let mut sampler = Sampler::new(config, Ceilings::dynamodb()).unwrap();
        let hot = KeyAccess {
            table: "t".into(),
            key: "p9".into(),
            kind: Kind::Write,
        };
        let cold = KeyAccess {
            key: "p1".into(),
            ..hot.clone()
        };
        // 2,450 writes/s on p9 and 50/s on p1 for one second.
        for i in 0..2_500u64 {
            let a = if i % 50 == 0 { &cold } else { &hot };
            sampler.observe(std::slice::from_ref(a), 4, Duration::from_micros(i * 400));
        }
        let report = sampler.report(Duration::from_secs(1));
        assert_eq!(report.hot[0].key, "p9");
        assert!(report.hot[0].estimate > 2_000.0, "{:?}", report.hot[0]);
        assert!(
            report.hot.iter().all(|h| h.key != "p1"),
            "50/s is under 10% of 1,000"
        );
        sampler.reset();
        assert!(sampler.report(Duration::from_secs(1)).hot.is_empty());
    }
}
