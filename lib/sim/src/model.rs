//! The simulator's pure model: what a request costs, which partition it hits, and whether that
//! partition has the capacity left. No I/O; the proxy feeds it parsed requests and a clock.

use std::collections::HashMap;
use std::time::Duration;

use md5::{Digest, Md5};
use serde::Serialize;
use serde_json::Value;

/// DynamoDB's per-partition write ceiling, in write capacity units per second.
pub const WRITE_CEILING: f64 = 1000.0;
/// DynamoDB's per-partition read ceiling, in read capacity units per second.
pub const READ_CEILING: f64 = 3000.0;

/// Reads or writes: each has its own bucket and ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Consumes RCUs.
    Read,
    /// Consumes WCUs.
    Write,
}

/// Which physical partition a request lands on: table, optional index, partition number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PartitionId {
    /// Table name.
    pub table: String,
    /// Index name for GSI reads and GSI write propagation.
    pub index: Option<String>,
    /// Partition number, `0..partitions`.
    pub partition: u32,
}

/// The partition of a partition-key value: MD5 of the value's bytes, first 8 bytes big-endian,
/// modulo the partition count (a stand-in for DynamoDB's internal hash, which is not public).
pub fn partition_of(key_bytes: &[u8], partitions: u32) -> u32 {
    let digest = Md5::digest(key_bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(partitions.max(1))) as u32
}

/// The bytes DynamoDB hashes for a key value in the JSON wire form (`{"S": "p9"}` → `p9`).
pub fn key_bytes(value: &Value) -> Option<Vec<u8>> {
    let obj = value.as_object()?;
    if let Some(s) = obj.get("S").and_then(Value::as_str) {
        return Some(s.as_bytes().to_vec());
    }
    if let Some(n) = obj.get("N").and_then(Value::as_str) {
        return Some(n.as_bytes().to_vec());
    }
    obj.get("B")
        .and_then(Value::as_str)
        .map(|b| b.as_bytes().to_vec())
}

/// An item's size in bytes by DynamoDB's rules: attribute name lengths plus value sizes.
pub fn item_size(item: &serde_json::Map<String, Value>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &Value) -> usize {
    let Some(obj) = v.as_object() else { return 0 };
    let Some((kind, inner)) = obj.iter().next() else {
        return 0;
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        // Numbers: roughly one byte per two significant digits, plus one.
        "N" => inner.as_str().map_or(1, |n| n.len().div_ceil(2) + 1),
        // Binary arrives base64-encoded: 3 bytes per 4 characters.
        "B" => inner.as_str().map_or(0, |b| b.len() * 3 / 4),
        "BOOL" | "NULL" => 1,
        "SS" | "NS" | "BS" => inner.as_array().map_or(0, |a| {
            a.iter().filter_map(Value::as_str).map(str::len).sum()
        }),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |a| a.iter().map(|x| 1 + value_size(x)).sum::<usize>())
        }
        "M" => {
            3 + inner.as_object().map_or(0, |m| {
                m.iter()
                    .map(|(k, x)| 1 + k.len() + value_size(x))
                    .sum::<usize>()
            })
        }
        _ => 0,
    }
}

/// Write capacity units for writing `bytes`: one per started KB, at least one.
pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

/// Read capacity units for reading `bytes`: one per started 4 KB (half when eventually consistent).
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// A token bucket holding capacity units: refills at `rate` per second up to `burst`.
///
/// The balance may go negative: a read's size is only known after DynamoDB answers, so its cost
/// is charged afterwards and the debt delays the next request, as DynamoDB's own accounting does.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Duration,
}

impl Bucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: f64, now: Duration) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Duration) {
        let dt = now.saturating_sub(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.at = self.at.max(now);
    }

    /// Takes `units` if the balance covers them; otherwise takes nothing and returns false.
    pub fn try_take(&mut self, units: f64, now: Duration) -> bool {
        self.refill(now);
        if self.tokens >= units.min(self.burst) {
            self.tokens -= units;
            true
        } else {
            false
        }
    }

    /// Charges `units` unconditionally (for costs known only after the fact).
    pub fn charge(&mut self, units: f64, now: Duration) {
        self.refill(now);
        self.tokens -= units;
    }
}

/// Settings of a simulated table's partitions.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Partitions per table and per index.
    pub partitions: u32,
    /// WCU/s per partition.
    pub write_ceiling: f64,
    /// RCU/s per partition.
    pub read_ceiling: f64,
    /// Burst, in seconds of ceiling a partition may bank while idle.
    pub burst_seconds: f64,
}

impl Default for Limits {
    /// DynamoDB's documented ceilings, 4 partitions, and 1 s of burst.
    fn default() -> Self {
        Self {
            partitions: 4,
            write_ceiling: WRITE_CEILING,
            read_ceiling: READ_CEILING,
            burst_seconds: 1.0,
        }
    }
}

/// Consumed capacity and throttles of one partition, plus a per-second history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PartitionStats {
    /// WCUs consumed.
    pub consumed_wcu: f64,
    /// RCUs consumed.
    pub consumed_rcu: f64,
    /// Requests that consumed write capacity.
    pub writes: u64,
    /// Requests that consumed read capacity.
    pub reads: u64,
    /// Write requests refused.
    pub throttled_writes: u64,
    /// Read requests refused.
    pub throttled_reads: u64,
    /// WCUs consumed in each second since the simulator started (index = second).
    pub wcu_per_second: Vec<f64>,
    /// RCUs consumed in each second since the simulator started.
    pub rcu_per_second: Vec<f64>,
}

impl PartitionStats {
    fn add(&mut self, access: Access, units: f64, second: usize) {
        let series = match access {
            Access::Write => {
                self.consumed_wcu += units;
                &mut self.wcu_per_second
            }
            Access::Read => {
                self.consumed_rcu += units;
                &mut self.rcu_per_second
            }
        };
        if series.len() <= second {
            series.resize(second + 1, 0.0);
        }
        series[second] += units;
    }
}

/// A table's on-demand maximum (`OnDemandThroughput`), request units per second per kind
/// (`None`: no maximum). DynamoDB refuses what goes over it with
/// `…MaxOnDemandThroughputExceeded`, however cool every partition is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TableMax {
    /// `MaxReadRequestUnits`.
    pub read: Option<f64>,
    /// `MaxWriteRequestUnits`.
    pub write: Option<f64>,
}

impl TableMax {
    fn of(&self, access: Access) -> Option<f64> {
        match access {
            Access::Read => self.read,
            Access::Write => self.write,
        }
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Limit {
    /// One partition's ceiling (a hot key range).
    KeyRange,
    /// The table's on-demand maximum.
    MaxOnDemand,
}

/// A refused request: the charge that did not fit and the limit it hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// The partition's share that was over (for [`Limit::MaxOnDemand`], the first charge on
    /// the table that was over).
    pub charge: Charge,
    /// What it was over.
    pub limit: Limit,
}

/// Every partition's buckets and statistics.
#[derive(Debug)]
pub struct Partitions {
    limits: Limits,
    buckets: HashMap<(PartitionId, Access), Bucket>,
    stats: HashMap<PartitionId, PartitionStats>,
    maxima: HashMap<String, TableMax>,
    table_buckets: HashMap<(String, Access), Bucket>,
}

/// One partition's share of a request: where, read or write, and how many units.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    /// The partition.
    pub partition: PartitionId,
    /// Read or write.
    pub access: Access,
    /// Capacity units.
    pub units: f64,
}

impl Partitions {
    /// Empty state with `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            buckets: HashMap::new(),
            stats: HashMap::new(),
            maxima: HashMap::new(),
            table_buckets: HashMap::new(),
        }
    }

    /// Sets `table`'s on-demand maximum (its indexes' writes count toward the table's, as on
    /// DynamoDB only the table's requests do: index propagation is not charged here).
    pub fn set_max(&mut self, table: &str, max: TableMax) {
        self.maxima.insert(table.to_owned(), max);
        self.table_buckets.retain(|(t, _), _| t != table);
    }

    /// `table`'s on-demand maximum, if one is set.
    pub fn max_of(&self, table: &str) -> Option<TableMax> {
        self.maxima.get(table).copied()
    }

    /// The table bucket of `c` when its table has a maximum for its kind (request units of the
    /// table itself: index shares are not table requests).
    fn table_bucket(&mut self, c: &Charge, now: Duration) -> Option<&mut Bucket> {
        if c.partition.index.is_some() {
            return None;
        }
        let rate = self.maxima.get(&c.partition.table)?.of(c.access)?;
        let burst = rate * self.limits.burst_seconds.max(0.001);
        Some(
            self.table_buckets
                .entry((c.partition.table.clone(), c.access))
                .or_insert_with(|| Bucket::new(rate, burst, now)),
        )
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn bucket(&mut self, id: &PartitionId, access: Access, now: Duration) -> &mut Bucket {
        let rate = match access {
            Access::Read => self.limits.read_ceiling,
            Access::Write => self.limits.write_ceiling,
        };
        let burst = rate * self.limits.burst_seconds.max(0.001);
        self.buckets
            .entry((id.clone(), access))
            .or_insert_with(|| Bucket::new(rate, burst, now))
    }

    /// Admits the request if its table is under its on-demand maximum and every partition it
    /// touches has capacity (all or nothing), charging each; otherwise charges nothing, counts a
    /// throttle on the first charge over a limit and returns it with the limit (the table's
    /// maximum is checked first: DynamoDB refuses at the table before the partition).
    pub fn admit(&mut self, charges: &[Charge], now: Duration) -> Result<(), Refused> {
        let mut over = None;
        let mut table_units: HashMap<(String, Access), f64> = HashMap::new();
        for c in charges.iter().filter(|c| c.partition.index.is_none()) {
            *table_units
                .entry((c.partition.table.clone(), c.access))
                .or_default() += c.units;
        }
        for c in charges {
            let units = table_units
                .remove(&(c.partition.table.clone(), c.access))
                .unwrap_or(0.0);
            if units > 0.0
                && let Some(b) = self.table_bucket(c, now)
                && !b.clone().try_take(units, now)
            {
                over = Some(Refused {
                    charge: c.clone(),
                    limit: Limit::MaxOnDemand,
                });
                break;
            }
        }
        if over.is_none() {
            for c in charges {
                let mut probe = self.bucket(&c.partition, c.access, now).clone();
                if !probe.try_take(c.units, now) {
                    over = Some(Refused {
                        charge: c.clone(),
                        limit: Limit::KeyRange,
                    });
                    break;
                }
            }
        }
        if let Some(r) = over {
            let s = self.stats.entry(r.charge.partition.clone()).or_default();
            match r.charge.access {
                Access::Read => s.throttled_reads += 1,
                Access::Write => s.throttled_writes += 1,
            }
            return Err(r);
        }
        for c in charges {
            self.record(c, now);
        }
        Ok(())
    }

    /// Charges a cost known only after the request was served (a read's size).
    pub fn record(&mut self, c: &Charge, now: Duration) {
        self.bucket(&c.partition, c.access, now)
            .charge(c.units, now);
        if let Some(b) = self.table_bucket(c, now) {
            b.charge(c.units, now);
        }
        let second = now.as_secs() as usize;
        let s = self.stats.entry(c.partition.clone()).or_default();
        match c.access {
            Access::Read => s.reads += 1,
            Access::Write => s.writes += 1,
        }
        s.add(c.access, c.units, second);
    }

    /// A snapshot of every partition's statistics, sorted by partition.
    pub fn snapshot(&self) -> Vec<(PartitionId, PartitionStats)> {
        let mut v: Vec<_> = self
            .stats
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Forgets all statistics and refills every bucket.
    pub fn reset(&mut self) {
        self.buckets.clear();
        self.stats.clear();
        self.table_buckets.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pid(p: u32) -> PartitionId {
        PartitionId {
            table: "t".into(),
            index: None,
            partition: p,
        }
    }

    #[test]
    fn capacity_units_follow_dynamodbs_size_rules() {
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(4096, true), 1.0);
        assert_eq!(read_units(4097, true), 2.0);
        assert_eq!(read_units(100, false), 0.5);
    }

    #[test]
    fn item_size_counts_names_and_values() {
        let item: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"pk":{"S":"likes#p9"},"total":{"N":"12345"},"ok":{"BOOL":true}}"#,
        )
        .expect("json");
        // pk(2)+8, total(5)+ceil(5/2)+1=4, ok(2)+1
        assert_eq!(item_size(&item), 2 + 8 + 5 + 4 + 2 + 1);
    }

    #[test]
    fn a_partition_admits_its_ceiling_per_second_and_throttles_beyond() {
        let mut parts = Partitions::new(Limits::default());
        let write = Charge {
            partition: pid(0),
            access: Access::Write,
            units: 1.0,
        };
        let mut admitted = 0;
        let mut throttled = 0;
        // 2,400 one-WCU writes spread evenly over one second.
        for i in 0..2400u64 {
            let now = Duration::from_micros(i * 1_000_000 / 2400);
            match parts.admit(std::slice::from_ref(&write), now) {
                Ok(()) => admitted += 1,
                Err(_) => throttled += 1,
            }
        }
        // 1 s of burst (1,000) plus 1 s of refill (1,000), minus rounding at the edges.
        assert!((1990..=2000).contains(&admitted), "{admitted}");
        assert_eq!(admitted + throttled, 2400);
        let stats = &parts.snapshot()[0].1;
        assert_eq!(stats.throttled_writes, throttled);
    }

    #[test]
    fn a_rejected_multi_partition_request_charges_nothing() {
        let mut parts = Partitions::new(Limits {
            burst_seconds: 0.001,
            ..Limits::default()
        });
        let now = Duration::ZERO;
        let write = |p| Charge {
            partition: pid(p),
            access: Access::Write,
            units: 1.0,
        };
        // Partition 1's one-unit burst is spent; a request touching 0 and 1 must fail whole.
        assert!(parts.admit(&[write(1)], now).is_ok());
        assert!(parts.admit(&[write(0), write(1)], now).is_err());
        let consumed_on_0: f64 = parts
            .snapshot()
            .iter()
            .filter(|(id, _)| id.partition == 0)
            .map(|(_, s)| s.consumed_wcu)
            .sum();
        assert_eq!(consumed_on_0, 0.0);
        assert!(parts.admit(&[write(0)], now).is_ok());
    }

    proptest! {
        #[test]
        fn no_partition_ever_serves_more_than_burst_plus_ceiling_times_elapsed(
            gaps in prop::collection::vec(0u64..5_000, 1..400),
            units in prop::collection::vec(1u32..4, 1..400),
        ) {
            let limits = Limits { write_ceiling: 100.0, burst_seconds: 0.5, ..Limits::default() };
            let mut parts = Partitions::new(limits);
            let mut now = Duration::ZERO;
            let mut served = 0.0;
            for (g, u) in gaps.iter().zip(units.iter().cycle()) {
                now += Duration::from_micros(*g * 100);
                let c = Charge { partition: pid(0), access: Access::Write, units: f64::from(*u) };
                if parts.admit(&[c], now).is_ok() { served += f64::from(*u); }
            }
            let bound = 100.0 * 0.5 + 100.0 * now.as_secs_f64();
            prop_assert!(served <= bound + 1e-6, "served {} > {}", served, bound);
        }

        #[test]
        fn partitions_are_stable_and_in_range(key in ".{1,40}", n in 1u32..64) {
            let p = partition_of(key.as_bytes(), n);
            prop_assert!(p < n);
            prop_assert_eq!(p, partition_of(key.as_bytes(), n));
        }
    }

    #[test]
    fn a_table_maximum_refuses_before_any_partition_is_over_and_spares_other_tables() {
        let mut parts = Partitions::new(Limits {
            partitions: 4,
            write_ceiling: 1_000.0,
            read_ceiling: 3_000.0,
            burst_seconds: 1.0,
        });
        parts.set_max(
            "t",
            TableMax {
                read: None,
                write: Some(100.0),
            },
        );
        assert_eq!(parts.max_of("t").and_then(|m| m.write), Some(100.0));
        let write = |table: &str, p: u32| Charge {
            partition: PartitionId {
                table: table.into(),
                index: None,
                partition: p,
            },
            access: Access::Write,
            units: 1.0,
        };
        let now = Duration::ZERO;
        // 100 units banked (1 s of the maximum), spread over 4 partitions far under 1,000.
        for i in 0..100 {
            assert!(parts.admit(&[write("t", i % 4)], now).is_ok(), "write {i}");
        }
        let refused = parts
            .admit(&[write("t", 2)], now)
            .expect_err("over the maximum");
        assert_eq!(refused.limit, Limit::MaxOnDemand);
        assert!(
            parts.admit(&[write("other", 2)], now).is_ok(),
            "no maximum there"
        );
        // Index shares are not table requests: a GSI write propagation is not refused by it.
        let mut index = write("t", 0);
        index.partition.index = Some("by-post".into());
        assert!(parts.admit(&[index], now).is_ok());
        // A second later the bucket has refilled.
        assert!(
            parts
                .admit(&[write("t", 0)], Duration::from_secs(1))
                .is_ok()
        );
        // A hot partition under the maximum is still a key-range refusal.
        let mut hot = Partitions::new(Limits {
            partitions: 4,
            write_ceiling: 10.0,
            read_ceiling: 30.0,
            burst_seconds: 1.0,
        });
        hot.set_max(
            "t",
            TableMax {
                read: None,
                write: Some(1_000.0),
            },
        );
        for _ in 0..10 {
            assert!(hot.admit(&[write("t", 1)], now).is_ok());
        }
        let refused = hot
            .admit(&[write("t", 1)], now)
            .expect_err("partition over");
        assert_eq!(refused.limit, Limit::KeyRange);
    }
}
