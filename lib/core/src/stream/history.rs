//! A pure simulator of a Kinesis stream's resharding history, for tests of lineage readers.

use std::collections::BTreeMap;

use super::{ShardGraph, ShardInfo, StreamError};
use crate::counter::Seq;

/// One resharding call, with its choices as plain numbers so property tests can shrink them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReshardOp {
    /// SplitShard: the `pick`-th open shard (modulo) splits at a point chosen by `at` (modulo
    /// its range) into two children whose parent is it.
    Split {
        /// Which open shard, by hash order, modulo the number open.
        pick: usize,
        /// Where to split, reduced into the shard's range.
        at: u128,
    },
    /// MergeShards: the `pick`-th open shard (modulo) merges with its right neighbour into a
    /// child with parent and adjacent parent.
    Merge {
        /// Which open shard, by hash order, modulo (number open − 1).
        pick: usize,
    },
    /// UpdateShardCount with uniform scaling to `target` shards (clamped to half..double of
    /// the open count, as AWS allows), done the way AWS does it: splits and merges, through
    /// intermediate shards that close at once.
    UpdateShardCount {
        /// The wanted number of open shards.
        target: usize,
    },
}

/// One record put on the simulated stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimRecord {
    /// The record's 128-bit hash key (MD5 of its partition key in Kinesis).
    pub hash: u128,
    /// Its sequence number; increasing across the whole stream, so it is also creation order.
    pub seq: Seq,
}

/// A stream's shards through a series of splits, merges and rescalings, with the records put.
///
/// Every shard ever created is kept (closed ones with their ending seq), so
/// [`ReshardSim::graph`] is what ListShards would show before any trimming.
#[derive(Clone, Debug)]
pub struct ReshardSim {
    shards: Vec<ShardInfo>,
    /// Index into `shards` of each open shard, by hash-range start.
    open: Vec<usize>,
    records: BTreeMap<String, Vec<SimRecord>>,
    /// Operation number at which each closed shard closed.
    closed_at: BTreeMap<String, usize>,
    ops: usize,
    clock: u64,
}

impl ReshardSim {
    /// A new stream of `initial` (at least 1) shards with equal ranges covering 0..=2^128−1.
    pub fn new(initial: usize) -> Self {
        let mut sim = Self {
            shards: Vec::new(),
            open: Vec::new(),
            records: BTreeMap::new(),
            closed_at: BTreeMap::new(),
            ops: 0,
            clock: 0,
        };
        for (start, end) in uniform_ranges(initial.max(1)) {
            let shard = sim.create(None, None, (start, end));
            sim.open.push(shard);
        }
        sim
    }

    /// A random history: `steps` operations and puts drawn from a seeded generator (splitmix64),
    /// so the same seed always gives the same history.
    pub fn random(seed: u64, initial: usize, steps: usize) -> Self {
        let mut rng = SplitMix64(seed);
        let mut sim = Self::new(initial);
        for _ in 0..steps {
            let roll = rng.next() % 10;
            let pick = usize::try_from(rng.next() % 1024).unwrap_or(0);
            match roll {
                0..=5 => {
                    sim.put((u128::from(rng.next()) << 64) | u128::from(rng.next()));
                }
                6 => sim.apply(&ReshardOp::Split {
                    pick,
                    at: (u128::from(rng.next()) << 64) | u128::from(rng.next()),
                }),
                7 => sim.apply(&ReshardOp::Merge { pick }),
                _ => sim.apply(&ReshardOp::UpdateShardCount {
                    target: 1 + pick % 8,
                }),
            }
        }
        sim
    }

    /// Applies one resharding call; a call AWS would refuse (merge with one shard open, split
    /// of a one-hash shard) does nothing.
    pub fn apply(&mut self, op: &ReshardOp) {
        self.ops += 1;
        match *op {
            ReshardOp::Split { pick, at } => {
                let Some(&shard) = self.open.get(pick % self.open.len()) else {
                    return;
                };
                let (start, end) = self.range(shard);
                if start < end {
                    // A point in (start, end]: the right child starts there.
                    let point = start + 1 + at % (end - start);
                    self.split(shard, point);
                }
            }
            ReshardOp::Merge { pick } => {
                if self.open.len() >= 2 {
                    let i = pick % (self.open.len() - 1);
                    self.merge(i);
                }
            }
            ReshardOp::UpdateShardCount { target } => {
                let n = self.open.len();
                self.update_shard_count(target.clamp(n.div_ceil(2), n * 2));
            }
        }
    }

    /// Puts a record with this hash key on the open shard whose range holds it; returns that
    /// shard's id.
    pub fn put(&mut self, hash: u128) -> &str {
        let pos = self
            .open
            .partition_point(|&s| self.range(s).0 <= hash)
            .saturating_sub(1);
        let shard = self.open[pos];
        let seq = self.tick();
        let id = self.shards[shard].shard_id.clone();
        let records = self.records.entry(id).or_default();
        records.push(SimRecord { hash, seq });
        &self.shards[shard].shard_id
    }

    /// Every shard ever created, in creation order.
    pub fn shards(&self) -> &[ShardInfo] {
        &self.shards
    }

    /// The shards open now, by hash-range start; their ranges tile 0..=2^128−1.
    pub fn open_shards(&self) -> Vec<&ShardInfo> {
        self.open.iter().map(|&i| &self.shards[i]).collect()
    }

    /// The records put on a shard, in order.
    pub fn records(&self, shard_id: &str) -> &[SimRecord] {
        self.records.get(shard_id).map_or(&[], Vec::as_slice)
    }

    /// Number of resharding calls applied so far.
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// Shards closed by a call numbered below `op` (1-based): what retention trims first. The
    /// set is closed under ancestry: a trimmed shard's parents are trimmed too.
    pub fn closed_before(&self, op: usize) -> Vec<&str> {
        self.closed_at
            .iter()
            .filter(|(_, at)| **at < op)
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// The lineage graph of every shard ever created.
    pub fn graph(&self) -> Result<ShardGraph, StreamError> {
        ShardGraph::new(self.shards.clone())
    }

    fn range(&self, shard: usize) -> (u128, u128) {
        self.shards[shard].hash_range.unwrap_or((0, u128::MAX))
    }

    fn tick(&mut self) -> Seq {
        self.clock += 1;
        Seq::from(self.clock)
    }

    fn create(
        &mut self,
        parent: Option<usize>,
        adjacent: Option<usize>,
        range: (u128, u128),
    ) -> usize {
        let id = format!("shardId-{:012}", self.shards.len());
        let seq = self.tick();
        let name = |i: Option<usize>| i.map(|i| self.shards[i].shard_id.clone());
        let info = ShardInfo {
            parent: name(parent),
            adjacent_parent: name(adjacent),
            hash_range: Some(range),
            starting_seq: Some(seq.to_string()),
            ..ShardInfo::new(id)
        };
        self.shards.push(info);
        self.shards.len() - 1
    }

    fn close(&mut self, shard: usize) {
        let seq = self.tick();
        self.shards[shard].ending_seq = Some(seq.to_string());
        self.closed_at
            .insert(self.shards[shard].shard_id.clone(), self.ops);
        self.open.retain(|&s| s != shard);
    }

    /// Splits an open shard so the right child starts at `point` (start < point ≤ end).
    fn split(&mut self, shard: usize, point: u128) -> (usize, usize) {
        let (start, end) = self.range(shard);
        self.close(shard);
        let left = self.create(Some(shard), None, (start, point - 1));
        let right = self.create(Some(shard), None, (point, end));
        self.insert_open(left);
        self.insert_open(right);
        (left, right)
    }

    /// Merges the `i`-th open shard with the next one.
    fn merge(&mut self, i: usize) -> usize {
        let (a, b) = (self.open[i], self.open[i + 1]);
        let range = (self.range(a).0, self.range(b).1);
        self.close(a);
        self.close(b);
        let child = self.create(Some(a), Some(b), range);
        self.insert_open(child);
        child
    }

    fn insert_open(&mut self, shard: usize) {
        let start = self.range(shard).0;
        let pos = self.open.partition_point(|&s| self.range(s).0 < start);
        self.open.insert(pos, shard);
    }

    /// Uniform scaling to `target` shards: split every open shard at each new boundary inside
    /// it, then merge the pieces that fall in one new range.
    fn update_shard_count(&mut self, target: usize) {
        let ranges = uniform_ranges(target);
        let boundaries: Vec<u128> = ranges.iter().skip(1).map(|(start, _)| *start).collect();
        for shard in self.open.clone() {
            let mut current = shard;
            for &b in &boundaries {
                let (start, end) = self.range(current);
                if start < b && b <= end {
                    current = self.split(current, b).1;
                }
            }
        }
        for (start, end) in ranges {
            loop {
                let inside: Vec<usize> = (0..self.open.len())
                    .filter(|&i| {
                        let (s, e) = self.range(self.open[i]);
                        start <= s && e <= end
                    })
                    .collect();
                match inside.as_slice() {
                    [first, _, ..] => {
                        self.merge(*first);
                    }
                    _ => break,
                }
            }
        }
    }
}

/// `n` equal inclusive ranges covering 0..=2^128−1: range i starts at floor(i · 2^128 / n).
fn uniform_ranges(n: usize) -> Vec<(u128, u128)> {
    let n128 = n as u128;
    let (q, r) = (u128::MAX / n128, u128::MAX % n128);
    let start = |i: u128| i * q + i * (r + 1) / n128;
    (0..n128)
        .map(|i| {
            let end = if i + 1 == n128 {
                u128::MAX
            } else {
                start(i + 1) - 1
            };
            (start(i), end)
        })
        .collect()
}

/// A tiny deterministic generator (splitmix64), so histories need no random-number crate.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_ranges_tile_the_hash_space() {
        for n in 1..20 {
            let ranges = uniform_ranges(n);
            assert_eq!(ranges.len(), n);
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges[n - 1].1, u128::MAX);
            for w in ranges.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0);
            }
        }
        // Two shards split at 2^127, as Kinesis does.
        assert_eq!(uniform_ranges(2)[1].0, 1u128 << 127);
    }

    #[test]
    fn update_shard_count_doubles_through_splits_with_lineage() {
        let mut sim = ReshardSim::new(4);
        sim.apply(&ReshardOp::UpdateShardCount { target: 8 });
        let open = sim.open_shards();
        assert_eq!(open.len(), 8);
        let expected = uniform_ranges(8);
        for (shard, range) in open.iter().zip(expected) {
            assert_eq!(shard.hash_range, Some(range));
            assert!(shard.parent.is_some());
        }
        assert_eq!(sim.closed_before(2).len(), 4);
    }

    #[test]
    fn update_shard_count_from_three_to_two_uses_intermediate_shards() {
        let mut sim = ReshardSim::new(3);
        sim.apply(&ReshardOp::UpdateShardCount { target: 2 });
        let open = sim.open_shards();
        assert_eq!(open.len(), 2);
        assert_eq!(open[0].hash_range, Some(uniform_ranges(2)[0]));
        // The middle shard was split at 2^127, then each half merged with an outer shard.
        assert!(open.iter().all(|s| s.adjacent_parent.is_some()));
        assert!(sim.graph().is_ok());
    }

    #[test]
    fn a_seed_always_gives_the_same_history() {
        let a = ReshardSim::random(7, 2, 200);
        let b = ReshardSim::random(7, 2, 200);
        assert_eq!(a.shards(), b.shards());
        assert!(a.shards().len() > 2);
    }
}
