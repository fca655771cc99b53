//! The load generator and the verifier behind `heatsink slots load` and `heatsink slots verify`.
//!
//! [`run_load`] writes versioned items `{pk: <key>, v: <n>}` through a [`Router`] at a fixed
//! rate and reports each acknowledged write as an [`AckLine`] (what `--ack-log` appends);
//! [`verify`] reads every acknowledged key back through a freshly loaded map and checks it is
//! at or above the acknowledged version, and that no slot has two tables accepting writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(feature = "streams")]
use heatsink_core::slots::Phase;
use heatsink_core::slots::slot_of;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use super::fence::{TableInfo, read_fence};
use super::{MoveError, Router};
use crate::clock::now_ms;

/// One acknowledged write, as `slots load --ack-log` writes it (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckLine {
    /// The key.
    pub key: String,
    /// The version acknowledged.
    pub version: u64,
    /// The table that acknowledged it.
    pub owner: String,
    /// The epoch it was owned at.
    pub epoch: u64,
}

/// One write's timing (for the pause percentiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was issued (ms since the epoch).
    pub issued_ms: u64,
    /// Issue → acknowledgement, in microseconds.
    pub latency_us: u64,
    /// MOVED answers on the way.
    pub moved: u32,
    /// The key's slot (so a pause can be measured on the moved slots alone).
    #[serde(default)]
    pub slot: u16,
}

/// What a load run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Writes acknowledged.
    pub acked: u64,
    /// Writes not acknowledged (the router gave up or failed); never counted as acknowledged.
    pub failed: u64,
    /// MOVED answers in all (stale maps bounced).
    pub moved: u64,
    /// Per-write timings.
    pub samples: Vec<Sample>,
}

/// The `q`-quantile (0..=1) of the latencies of `samples` issued in `[from_ms, to_ms]`, in ms.
pub fn latency_quantile(samples: &[Sample], from_ms: u64, to_ms: u64, q: f64) -> Option<f64> {
    let mut l: Vec<u64> = samples
        .iter()
        .filter(|s| s.issued_ms >= from_ms && s.issued_ms <= to_ms)
        .map(|s| s.latency_us)
        .collect();
    if l.is_empty() {
        return None;
    }
    l.sort_unstable();
    let i = ((l.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(l[i] as f64 / 1_000.0)
}

/// Load parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// Keys `<prefix>0` … `<prefix>N-1` (optionally tagged by tenant).
    pub keys: u64,
    /// Key prefix.
    pub prefix: String,
    /// With `Some(t)`, key `i` carries the hash tag `{t<i mod t>}` (`{t3}key-7`): the keys of
    /// `t` tenants, each tenant in one slot.
    pub tenants: Option<u64>,
    /// Writes per second.
    pub rate: f64,
    /// How long.
    pub duration: Duration,
    /// Writes in flight at most.
    pub max_in_flight: usize,
}

/// Writes at `spec.rate` for `spec.duration` (or until `stop` is set), calling `on_ack` for
/// every acknowledged write. Versions rise per key from 1; a key's next write is issued only
/// after its previous one settled, so versions are acknowledged in order.
pub async fn run_load<F>(
    router: Router,
    spec: LoadSpec,
    stop: Arc<std::sync::atomic::AtomicBool>,
    on_ack: F,
) -> LoadReport
where
    F: Fn(&AckLine) + Send + Sync + 'static,
{
    let on_ack = Arc::new(on_ack);
    let report = Arc::new(Mutex::new(LoadReport::default()));
    let versions: Arc<Vec<AtomicU64>> =
        Arc::new((0..spec.keys).map(|_| AtomicU64::new(0)).collect());
    let busy: Arc<Vec<Mutex<()>>> = Arc::new((0..spec.keys).map(|_| Mutex::new(())).collect());
    let gate = Arc::new(Semaphore::new(spec.max_in_flight.max(1)));
    let period = Duration::from_secs_f64(1.0 / spec.rate.max(0.001));
    let start = Instant::now();
    let mut tasks = vec![];
    let mut n: u64 = 0;
    while start.elapsed() < spec.duration && !stop.load(Ordering::Relaxed) {
        let i = (n % spec.keys.max(1)) as usize;
        n += 1;
        let Ok(permit) = gate.clone().acquire_owned().await else {
            break;
        };
        let (router, report, versions, busy, on_ack) = (
            router.clone(),
            report.clone(),
            versions.clone(),
            busy.clone(),
            on_ack.clone(),
        );
        let key = match spec.tenants {
            Some(t) if t > 0 => format!("{{t{}}}{}{i}", i as u64 % t, spec.prefix),
            _ => format!("{}{i}", spec.prefix),
        };
        tasks.push(tokio::spawn(async move {
            let _p = permit;
            let _k = busy[i].lock().await;
            let version = versions[i].fetch_add(1, Ordering::Relaxed) + 1;
            let issued_ms = now_ms();
            let t = Instant::now();
            let res = router.put_versioned(&key, version, HashMap::new()).await;
            let latency_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            let mut r = report.lock().await;
            match res {
                Ok(ack) => {
                    r.acked += 1;
                    r.moved += u64::from(ack.moved);
                    r.samples.push(Sample {
                        issued_ms,
                        latency_us,
                        moved: ack.moved,
                        slot: slot_of(&key),
                    });
                    on_ack(&AckLine {
                        key,
                        version,
                        owner: ack.owner,
                        epoch: ack.epoch,
                    });
                }
                Err(_) => r.failed += 1,
            }
        }));
        tokio::time::sleep_until(start + period.mul_f64(n as f64)).await;
    }
    for t in tasks {
        let _ = t.await;
    }
    report.lock().await.clone()
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Keys checked.
    pub keys: u64,
    /// Acknowledged writes in the log.
    pub acked: u64,
    /// Keys read back below their acknowledged version (lost writes), with samples.
    pub lost: u64,
    /// Up to 10 lost keys: `key acked=N found=M`.
    pub lost_samples: Vec<String>,
    /// Slots where two tables would accept writes.
    pub double_owned: Vec<u16>,
}

impl VerifyReport {
    /// Nothing lost and no slot with two owners.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.double_owned.is_empty()
    }
}

/// Checks `acks` against the tables (through `router`, with a freshly loaded map).
pub async fn verify(router: &Router, acks: &[AckLine]) -> Result<VerifyReport, MoveError> {
    router.invalidate().await;
    let map = router.map().await?;
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by: HashMap<(&str, u64), &AckLine> = HashMap::new();
    for a in acks {
        let e = want.entry(a.key.as_str()).or_insert(0);
        *e = (*e).max(a.version);
        by.insert((a.key.as_str(), a.version), a);
    }
    let mut report = VerifyReport {
        keys: want.len() as u64,
        acked: acks.len() as u64,
        ..Default::default()
    };
    for (key, v) in &want {
        let (read_from, item) = router.get_key(key).await?;
        let found = item
            .as_ref()
            .and_then(|i| i.get("v"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if found.is_none_or(|f| f < *v) {
            report.lost += 1;
            if report.lost_samples.len() < 10 {
                let at = by
                    .get(&(*key, *v))
                    .map(|a| format!("{} epoch {}", a.owner, a.epoch));
                report.lost_samples.push(format!(
                    "{key} acked={v} by {} found={found:?} on {read_from}",
                    at.unwrap_or_default()
                ));
            }
        }
    }
    // Every table that gave a slot away must refuse it (its fence item), and its owner must not.
    #[cfg_attr(not(feature = "streams"), allow(unused_mut))]
    let mut gave_away: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    #[cfg(feature = "streams")]
    for m in router.directory().moves().await?.records {
        let loser = match m.phase {
            Phase::Flipped | Phase::Cleaned | Phase::Done => Some(m.from.clone()),
            Phase::RolledBack => Some(m.to.clone()),
            _ => None,
        };
        if let Some(t) = loser {
            for slot in want
                .keys()
                .map(|k| slot_of(k))
                .filter(|s| m.slots.contains(*s))
            {
                gave_away.entry(slot).or_default().insert(t.clone());
            }
        }
    }
    let mut infos: HashMap<String, TableInfo> = HashMap::new();
    let slots: BTreeSet<u16> = want.keys().map(|k| slot_of(k)).collect();
    for slot in slots {
        let owner = map.entry_of(slot).owner.clone();
        let mut tables: Vec<String> = gave_away
            .get(&slot)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        tables.push(owner.clone());
        for t in tables {
            if !infos.contains_key(&t) {
                infos.insert(
                    t.clone(),
                    TableInfo::describe(router_client(router), &t).await?,
                );
            }
            let keys = &infos[&t].keys;
            let fenced = read_fence(router_client(router), &t, keys, slot)
                .await?
                .is_some();
            let accepts = !fenced;
            if (t == owner) != accepts && !report.double_owned.contains(&slot) {
                report.double_owned.push(slot);
            }
        }
    }
    Ok(report)
}

fn router_client(router: &Router) -> &aws_sdk_dynamodb::Client {
    router.directory().client()
}
