//! The stream-shape simulator's pure model: one table's change stream re-cut into production's
//! shapes. No I/O; [`front`](crate::front) feeds it the emulator's records and a clock.
//!
//! moto and dynoxide give a table's stream one shard that never closes and deliver each change
//! once. Production does neither:
//! - **DynamoDB Streams** ([`SourceKind::DynamoDbStreams`]): one open shard per table partition,
//!   each rolling over every few hours (it closes with an `EndingSequenceNumber` and a child
//!   shard naming it as parent opens). Sequence numbers grow across the whole stream, so the
//!   ranges of open shards overlap: a sequence number alone does not name its shard.
//! - **Kinesis Data Streams for DynamoDB** ([`SourceKind::Kinesis`]): a fixed set of shards, but
//!   "the same item change can appear more than once" (under a new sequence number) and records
//!   may appear out of order.
//!
//! [`ShapedStream`] reproduces both. Each change goes to shard `MD5(Keys) mod shards`, so all
//! changes of one item stay in one shard lineage (as on AWS). With a rollover period `p`, shard
//! slot `i` first rolls at `p·(i+1)/shards` and then every `p`, so rollovers are staggered. In the
//! Kinesis shape each change is also delivered a second time with probability `duplicates`, and
//! up to `reorder` changes per shard are held and released in random order (bounded reordering:
//! a change is overtaken by at most `reorder` later ones of its shard, and every held change is
//! released at the next [`ShapedStream::tick`]). A duplicate keeps the change's `Keys`, images
//! and `ApproximateCreationDateTime`, and gets a new sequence number and a new `eventID` (AWS
//! documents neither as stable across duplicates).
//!
//! ```
//! use std::time::Duration;
//! use heatsink_sim::shape::{ShapeConfig, ShapedStream, SourceKind};
//! let mut cfg = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
//! cfg.rollover = Some(Duration::from_secs(20));
//! let mut stream = ShapedStream::new(cfg);
//! let like = |u: &str| serde_json::json!({"eventName": "INSERT", "eventID": u,
//!     "dynamodb": {"Keys": {"user": {"S": u}}, "NewImage": {"user": {"S": u}}}});
//! for u in ["u1", "u2", "u3", "u4", "u5"] {
//!     stream.push(like(u), Duration::ZERO);
//! }
//! stream.tick(Duration::from_secs(21)); // slots roll at 5, 10, 15 and 20 s: each once
//! let shards = stream.describe();
//! assert_eq!(shards.len(), 8);
//! assert_eq!(shards.iter().filter(|s| s.end_seq.is_none()).count(), 4);
//! ```
//!
//! **Resharding** ([`ShapedStream::split`], or [`ShapeConfig::split_at`] at a set time): every
//! open shard closes and two children open naming it as parent, in both shapes (a Kinesis
//! `SplitShard` of every shard; in DynamoDB Streams, a table partition split). The shard count
//! doubles and a change then goes to `MD5(Keys) mod 2n`, which is either `s` or `s + n` for an
//! item of parent slot `s`: a child takes exactly its parent's items by hash, so all changes of
//! one item stay in one lineage. Sequence numbers keep growing across the split (the children
//! start after the parents' last record), and records the Kinesis shape held back for
//! reordering are released into the parent before it closes. A consumer reads a child only after
//! its parent ends ([`esm::run`](crate::esm::run) does).
//!
//! Limits: one upstream stream in, records taken in the upstream's order; shards split only when
//! told (a set time or a call, never by load), always all at once into two, and never merge; a
//! duplicate follows its original within the same shard, within one tick.

use std::collections::HashMap;
use std::time::Duration;

use md5::{Digest, Md5};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The shape of the stream a consumer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// DynamoDB Streams: overlapping open shards, rollovers, each change once.
    DynamoDbStreams,
    /// Kinesis Data Streams for DynamoDB: fixed shards, duplicates, bounded reordering.
    Kinesis,
}

impl std::str::FromStr for SourceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dynamodb-streams" => Ok(Self::DynamoDbStreams),
            "kinesis" => Ok(Self::Kinesis),
            other => Err(format!(
                "source `{other}` is neither `kinesis` nor `dynamodb-streams`"
            )),
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DynamoDbStreams => "dynamodb-streams",
            Self::Kinesis => "kinesis",
        })
    }
}

/// How to re-cut a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapeConfig {
    /// Which production shape.
    pub kind: SourceKind,
    /// Open shards at any time (at least 1).
    pub shards: u32,
    /// DynamoDB Streams shape: each shard closes and a child opens after this long (None: never).
    pub rollover: Option<Duration>,
    /// Kinesis shape: probability that a change is delivered a second time (0..=1).
    pub duplicates: f64,
    /// Kinesis shape: changes per shard held back and released in random order.
    pub reorder: usize,
    /// Seed of the duplicate and reorder choices.
    pub seed: u64,
    /// Split every open shard in two once the clock reaches this (None: never); see
    /// [`ShapedStream::split`].
    pub split_at: Option<Duration>,
}

impl ShapeConfig {
    /// `shards` shards of `kind`, no rollover, no duplicates, no reordering.
    pub fn new(kind: SourceKind, shards: u32) -> Self {
        Self {
            kind,
            shards: shards.max(1),
            rollover: None,
            duplicates: 0.0,
            reorder: 0,
            seed: 0,
            split_at: None,
        }
    }
}

/// One shard as `DescribeStream` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardView {
    /// Shard id (`shardId-…`).
    pub shard_id: String,
    /// The shard this one continues (rollover lineage).
    pub parent: Option<String>,
    /// First sequence number the shard can hold.
    pub first_seq: String,
    /// Last sequence number, once the shard is closed.
    pub end_seq: Option<String>,
}

/// What the model did, for tests and the demo.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShapeStats {
    /// Changes taken from the upstream stream.
    pub changes: u64,
    /// Records delivered into shards (changes plus duplicates).
    pub delivered: u64,
    /// Extra deliveries of a change.
    pub duplicates: u64,
    /// Records released out of their arrival order.
    pub reordered: u64,
    /// Shards closed by rollover.
    pub rollovers: u64,
    /// Reshards: times every open shard was split in two.
    pub splits: u64,
    /// Shards closed by a split (each with two children).
    pub split_shards: u64,
}

/// Why a read was refused, as the front answers it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// No such shard in this stream.
    #[error("shard {0} does not exist in this stream")]
    NoShard(String),
    /// The sequence number is not one of this shard's records.
    #[error("sequence number {seq} is not in shard {shard}")]
    NotInShard {
        /// The shard asked.
        shard: String,
        /// The sequence number.
        seq: String,
    },
}

#[derive(Debug, Clone)]
struct Shard {
    id: String,
    parent: Option<String>,
    records: Vec<Value>,
    /// Sequence number of each record, parallel to `records`.
    seqs: Vec<u128>,
    start: u128,
    end: Option<u128>,
    /// When this shard rolls over (None: never).
    due: Option<Duration>,
}

/// Most open shards a split leaves (Kinesis' default quota per stream is in the hundreds).
const MAX_OPEN: usize = 1_024;

/// The first 8 bytes of MD5 of a change's `dynamodb.Keys` JSON: where its item goes.
fn item_hash(change: &Value) -> [u8; 8] {
    let keys = change
        .pointer("/dynamodb/Keys")
        .map(Value::to_string)
        .unwrap_or_default();
    let digest = Md5::digest(keys.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    first
}

/// The slot of an item hash among `open` shards.
fn slot_for(hash: &[u8; 8], open: usize) -> u32 {
    (u64::from_be_bytes(*hash) % (open.max(1) as u64)) as u32
}

/// First sequence number handed out: 21 digits, like DynamoDB Streams'.
const SEQ_BASE: u128 = 100_000_000_000_000_000_000;
/// Gap between consecutive sequence numbers (they are increasing, not contiguous, on AWS too).
const SEQ_STEP: u128 = 7;

/// One stream re-cut into shards; see the module docs.
#[derive(Debug)]
pub struct ShapedStream {
    config: ShapeConfig,
    shards: Vec<Shard>,
    /// Index into `shards` of each slot's open shard (as many slots as open shards).
    open: Vec<usize>,
    /// Per slot, records held back for reordering.
    held: Vec<Vec<Value>>,
    by_id: HashMap<String, usize>,
    next_seq: u128,
    generation: u64,
    /// Whether [`ShapeConfig::split_at`] was acted on.
    split_done: bool,
    rng: StdRng,
    stats: ShapeStats,
}

impl ShapedStream {
    /// A stream with `config.shards` open, empty shards.
    pub fn new(config: ShapeConfig) -> Self {
        let slots = config.shards.max(1);
        let mut s = Self {
            rng: StdRng::seed_from_u64(config.seed),
            config,
            shards: vec![],
            open: vec![],
            held: vec![vec![]; slots as usize],
            by_id: HashMap::new(),
            next_seq: SEQ_BASE,
            generation: 0,
            split_done: false,
            stats: ShapeStats::default(),
        };
        for slot in 0..slots {
            // Staggered: slot i first rolls at period·(i+1)/slots.
            let due = s
                .rollover_period()
                .map(|p| p.mul_f64(f64::from(slot + 1) / f64::from(slots)));
            let idx = s.open_shard(slot, None, due);
            s.open.push(idx);
        }
        s
    }

    /// The configuration.
    pub fn config(&self) -> &ShapeConfig {
        &self.config
    }

    /// Counters of what was done.
    pub fn stats(&self) -> ShapeStats {
        self.stats
    }

    /// The rollover period, when this shape rolls over at all.
    fn rollover_period(&self) -> Option<Duration> {
        self.config
            .rollover
            .filter(|p| !p.is_zero() && self.config.kind == SourceKind::DynamoDbStreams)
    }

    fn open_shard(&mut self, slot: u32, parent: Option<String>, due: Option<Duration>) -> usize {
        let id = match self.config.kind {
            // Kinesis numbers shards in creation order (a split's children take the next ids).
            SourceKind::Kinesis => format!("shardId-{:012}", self.shards.len()),
            SourceKind::DynamoDbStreams => {
                self.generation += 1;
                format!("shardId-{:020}-{slot:08x}", self.generation)
            }
        };
        let idx = self.shards.len();
        self.by_id.insert(id.clone(), idx);
        self.shards.push(Shard {
            id,
            parent,
            records: vec![],
            seqs: vec![],
            start: self.next_seq,
            end: None,
            due,
        });
        idx
    }

    /// Which slot a change goes to: MD5 of its `dynamodb.Keys` JSON, mod the open shard count.
    pub fn slot_of(&self, change: &Value) -> u32 {
        slot_for(&item_hash(change), self.open.len())
    }

    /// Open shards now (the configured count, doubled by each split).
    pub fn open_shards(&self) -> usize {
        self.open.len()
    }

    /// Takes one change from the upstream stream at time `now` (since the stream started).
    pub fn push(&mut self, change: Value, now: Duration) {
        self.roll_due(now);
        self.split_due(now);
        self.stats.changes += 1;
        let slot = self.slot_of(&change);
        if self.config.kind == SourceKind::Kinesis {
            let dup = self.config.duplicates > 0.0
                && self.rng.random_bool(self.config.duplicates.clamp(0.0, 1.0));
            let copy = dup.then(|| change.clone());
            self.hold(slot, change);
            if let Some(mut c) = copy {
                self.stats.duplicates += 1;
                let fresh: u128 = self.rng.random();
                if let Some(obj) = c.as_object_mut() {
                    obj.insert("eventID".into(), Value::String(format!("{fresh:032x}")));
                }
                self.hold(slot, c);
            }
        } else {
            self.append(slot, change);
        }
    }

    fn hold(&mut self, slot: u32, change: Value) {
        let reorder = self.config.reorder;
        let held = &mut self.held[slot as usize];
        held.push(change);
        if held.len() > reorder {
            let at = self.rng.random_range(0..held.len());
            if at + 1 != held.len() {
                self.stats.reordered += 1;
            }
            let next = held.remove(at);
            self.append(slot, next);
        }
    }

    fn append(&mut self, slot: u32, mut change: Value) {
        let seq = self.next_seq;
        self.next_seq += SEQ_STEP;
        if let Some(d) = change.get_mut("dynamodb").and_then(Value::as_object_mut) {
            d.insert("SequenceNumber".into(), Value::String(seq.to_string()));
        }
        let idx = self.open[slot as usize];
        let shard = &mut self.shards[idx];
        shard.records.push(change);
        shard.seqs.push(seq);
        self.stats.delivered += 1;
    }

    /// Advances the clock: rolls over due shards and releases every held record (in random
    /// order). Call it regularly (the front does every 50 ms).
    pub fn tick(&mut self, now: Duration) {
        self.roll_due(now);
        self.split_due(now);
        self.release_held();
    }

    /// Appends every held record to its slot's open shard, in random order.
    fn release_held(&mut self) {
        for slot in 0..self.held.len() {
            let mut held = std::mem::take(&mut self.held[slot]);
            while !held.is_empty() {
                let at = self.rng.random_range(0..held.len());
                if at != 0 {
                    self.stats.reordered += 1;
                }
                let next = held.remove(at);
                self.append(slot as u32, next);
            }
        }
    }

    fn split_due(&mut self, now: Duration) {
        if let Some(at) = self.config.split_at
            && !self.split_done
            && now >= at
        {
            self.split_done = true;
            self.split(now);
        }
    }

    /// Reshards at `now`: every open shard closes (after the records held for reordering are
    /// released into it) and two children open, both naming it as parent. Slot `s` of `n`
    /// becomes slots `s` and `s + n` of `2n`: an item's hash mod `2n` is one of the two, so a
    /// child takes exactly its parent's items. A child keeps its parent's rollover time. At most
    /// 1,024 open shards: a split past that does nothing.
    pub fn split(&mut self, now: Duration) {
        let n = self.open.len();
        if n == 0 || n > MAX_OPEN / 2 {
            return;
        }
        self.roll_due(now);
        self.release_held();
        let parents: Vec<usize> = self.open.clone();
        let mut children = vec![0usize; 2 * n];
        for (slot, idx) in parents.into_iter().enumerate() {
            let last = self.shards[idx].seqs.last().copied();
            self.shards[idx].end = Some(last.unwrap_or(self.shards[idx].start));
            let (parent, due) = (Some(self.shards[idx].id.clone()), self.shards[idx].due);
            self.stats.split_shards += 1;
            for child_slot in [slot, slot + n] {
                children[child_slot] = self.open_shard(child_slot as u32, parent.clone(), due);
            }
        }
        self.open = children;
        self.held = vec![vec![]; 2 * n];
        self.stats.splits += 1;
    }

    fn roll_due(&mut self, now: Duration) {
        let Some(period) = self.rollover_period() else {
            return;
        };
        for slot in 0..self.open.len() {
            loop {
                let idx = self.open[slot];
                let Some(due) = self.shards[idx].due else {
                    break;
                };
                if now < due {
                    break;
                }
                let last = self.shards[idx].seqs.last().copied();
                let start = self.shards[idx].start;
                self.shards[idx].end = Some(last.unwrap_or(start));
                self.stats.rollovers += 1;
                let parent = Some(self.shards[idx].id.clone());
                let child = self.open_shard(slot as u32, parent, Some(due + period));
                self.open[slot] = child;
            }
        }
    }

    /// Every shard, in creation order (parents before children), as `DescribeStream` lists them.
    pub fn describe(&self) -> Vec<ShardView> {
        self.shards
            .iter()
            .map(|s| ShardView {
                shard_id: s.id.clone(),
                parent: s.parent.clone(),
                first_seq: s.start.to_string(),
                end_seq: s.end.map(|e| e.to_string()),
            })
            .collect()
    }

    fn shard(&self, id: &str) -> Result<&Shard, ShapeError> {
        self.by_id
            .get(id)
            .map(|i| &self.shards[*i])
            .ok_or_else(|| ShapeError::NoShard(id.to_owned()))
    }

    /// The position of `seq` in `shard` (AT_SEQUENCE_NUMBER); `after` gives the next position
    /// (AFTER_SEQUENCE_NUMBER). A sequence number of another shard is refused.
    pub fn position_of(&self, shard: &str, seq: &str, after: bool) -> Result<usize, ShapeError> {
        let s = self.shard(shard)?;
        let not_in = || ShapeError::NotInShard {
            shard: shard.to_owned(),
            seq: seq.to_owned(),
        };
        let n: u128 = seq.trim_start_matches('0').parse().map_err(|_| not_in())?;
        let at = s.seqs.binary_search(&n).map_err(|_| not_in())?;
        Ok(if after { at + 1 } else { at })
    }

    /// The position after the last record (LATEST).
    pub fn latest(&self, shard: &str) -> Result<usize, ShapeError> {
        Ok(self.shard(shard)?.records.len())
    }

    /// Up to `limit` records of `shard` from `position`, and the next position (`None` once the
    /// shard is closed and every record was read: the end of the shard).
    pub fn read(
        &self,
        shard: &str,
        position: usize,
        limit: usize,
    ) -> Result<(Vec<Value>, Option<usize>), ShapeError> {
        let s = self.shard(shard)?;
        let from = position.min(s.records.len());
        let to = from.saturating_add(limit.max(1)).min(s.records.len());
        let records = s.records[from..to].to_vec();
        let next = if to == s.records.len() && s.end.is_some() {
            None
        } else {
            Some(to)
        };
        Ok((records, next))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn change(user: u32, at: u32) -> Value {
        json!({"eventName": "INSERT", "eventID": format!("e{user}-{at}"),
            "dynamodb": {"Keys": {"user": {"S": format!("u{user}")}},
                "NewImage": {"user": {"S": format!("u{user}")}, "at": {"N": at.to_string()}},
                "ApproximateCreationDateTime": at}})
    }

    fn all_records(s: &ShapedStream) -> Vec<(String, Value)> {
        s.describe()
            .iter()
            .flat_map(|v| {
                let (records, _) = s.read(&v.shard_id, 0, usize::MAX).expect("shard");
                records.into_iter().map(|r| (v.shard_id.clone(), r))
            })
            .collect()
    }

    #[test]
    fn two_open_shards_have_overlapping_ranges_so_a_seq_alone_names_no_shard() {
        let mut s = ShapedStream::new(ShapeConfig::new(SourceKind::DynamoDbStreams, 2));
        for u in 0..20 {
            s.push(change(u, 0), Duration::ZERO);
        }
        let shards = s.describe();
        assert_eq!(shards.len(), 2);
        assert!(shards.iter().all(|v| v.end_seq.is_none()));
        let (records, _) = s.read(&shards[1].shard_id, 0, 100).expect("read");
        let seq: u128 = records[0]["dynamodb"]["SequenceNumber"]
            .as_str()
            .and_then(|x| x.parse().ok())
            .expect("seq");
        let holding = shards
            .iter()
            .filter(|v| v.first_seq.parse::<u128>().is_ok_and(|f| f <= seq))
            .count();
        assert_eq!(
            holding, 2,
            "both open ranges hold the second shard's records"
        );
    }

    #[test]
    fn rollover_closes_each_slot_and_opens_a_child_naming_it() {
        let mut cfg = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
        cfg.rollover = Some(Duration::from_secs(20));
        let mut s = ShapedStream::new(cfg);
        for t in 0..45 {
            s.push(change(t, t), Duration::from_secs(u64::from(t)));
        }
        s.tick(Duration::from_secs(45));
        let shards = s.describe();
        // Slot i rolls at 5(i+1) s and every 20 s after: by 45 s slots 0..3 rolled 3,2,2,2 times.
        assert_eq!(s.stats().rollovers, 9);
        assert_eq!(shards.iter().filter(|v| v.end_seq.is_none()).count(), 4);
        for v in shards.iter().filter(|v| v.parent.is_some()) {
            let parent = shards
                .iter()
                .find(|p| Some(&p.shard_id) == v.parent.as_ref())
                .expect("parent listed");
            assert!(parent.end_seq.is_some(), "a parent is closed");
        }
        // A closed shard's reader reaches its end.
        let closed = shards.iter().find(|v| v.end_seq.is_some()).expect("closed");
        let (_, next) = s.read(&closed.shard_id, 0, 1000).expect("read");
        assert_eq!(next, None);
    }

    #[test]
    fn a_seq_of_another_shard_is_refused_and_its_own_is_found() {
        let mut s = ShapedStream::new(ShapeConfig::new(SourceKind::DynamoDbStreams, 2));
        for u in 0..10 {
            s.push(change(u, 0), Duration::ZERO);
        }
        let shards = s.describe();
        let (records, _) = s.read(&shards[0].shard_id, 0, 100).expect("read");
        let seq = records[0]["dynamodb"]["SequenceNumber"]
            .as_str()
            .expect("seq")
            .to_owned();
        assert_eq!(s.position_of(&shards[0].shard_id, &seq, false), Ok(0));
        assert_eq!(s.position_of(&shards[0].shard_id, &seq, true), Ok(1));
        assert!(matches!(
            s.position_of(&shards[1].shard_id, &seq, false),
            Err(ShapeError::NotInShard { .. })
        ));
    }

    /// The lineage of `shard` (itself, its parent, …) as `describe` lists it.
    fn ancestors(views: &[ShardView], shard: &str) -> Vec<String> {
        let mut out = vec![shard.to_owned()];
        while let Some(p) = views
            .iter()
            .find(|v| Some(&v.shard_id) == out.last())
            .and_then(|v| v.parent.clone())
        {
            out.push(p);
        }
        out
    }

    #[test]
    fn a_split_closes_every_open_shard_into_two_children_naming_it() {
        for kind in [SourceKind::Kinesis, SourceKind::DynamoDbStreams] {
            let mut s = ShapedStream::new(ShapeConfig::new(kind, 3));
            for u in 0..30 {
                s.push(change(u, u), Duration::ZERO);
            }
            s.split(Duration::from_secs(1));
            let views = s.describe();
            assert_eq!(views.len(), 9, "{kind}: 3 parents and 6 children");
            assert_eq!(s.open_shards(), 6);
            assert_eq!((s.stats().splits, s.stats().split_shards), (1, 3));
            for parent in &views[..3] {
                assert!(parent.end_seq.is_some(), "{kind}: a split parent is closed");
                let kids: Vec<_> = views
                    .iter()
                    .filter(|v| v.parent.as_ref() == Some(&parent.shard_id))
                    .collect();
                assert_eq!(kids.len(), 2, "{kind}: two children each");
                for kid in kids {
                    assert!(kid.end_seq.is_none());
                    let end: u128 = parent
                        .end_seq
                        .as_deref()
                        .and_then(|e| e.parse().ok())
                        .expect("end");
                    let first: u128 = kid.first_seq.parse().expect("first");
                    assert!(
                        first > end,
                        "{kind}: a child's sequence numbers follow its parent's"
                    );
                }
            }
            if kind == SourceKind::Kinesis {
                // Kinesis numbers the children after the parents.
                assert_eq!(views[8].shard_id, "shardId-000000000008");
            }
        }
    }

    #[test]
    fn a_configured_split_happens_once_at_its_time() {
        let mut cfg = ShapeConfig::new(SourceKind::Kinesis, 2);
        cfg.split_at = Some(Duration::from_secs(5));
        let mut s = ShapedStream::new(cfg);
        s.push(change(1, 1), Duration::from_secs(4));
        assert_eq!(s.open_shards(), 2);
        s.push(change(2, 2), Duration::from_secs(5));
        assert_eq!(s.open_shards(), 4);
        s.tick(Duration::from_secs(50));
        assert_eq!((s.open_shards(), s.stats().splits), (4, 1));
    }

    proptest! {
        /// Split at any point of any load, in either shape, with rollovers, duplicates and
        /// reordering: every change arrives; all changes of one item stay in one lineage, each
        /// later one in the same shard or a descendant of the earlier one's; sequence numbers
        /// grow within a shard and from a parent to its children; a parent is closed.
        #[test]
        fn after_a_split_each_item_stays_in_one_lineage(
            users in proptest::collection::vec(0u32..40, 1..200),
            kinesis in any::<bool>(),
            shards in 1u32..5,
            split_after in 0usize..200,
            splits in 1usize..3,
            dup in 0.0f64..0.3,
            reorder in 0usize..5,
            seed in any::<u64>(),
        ) {
            let kind = if kinesis { SourceKind::Kinesis } else { SourceKind::DynamoDbStreams };
            let mut cfg = ShapeConfig::new(kind, shards);
            cfg.rollover = Some(Duration::from_secs(11));
            cfg.duplicates = dup;
            cfg.reorder = reorder;
            cfg.seed = seed;
            let mut s = ShapedStream::new(cfg);
            for (i, u) in users.iter().enumerate() {
                if i >= split_after && s.stats().splits < splits as u64 {
                    s.split(Duration::from_secs(i as u64));
                }
                s.push(change(*u, i as u32), Duration::from_secs(i as u64));
                if i % 7 == 6 { s.tick(Duration::from_secs(i as u64)); }
            }
            s.tick(Duration::from_secs(users.len() as u64 + 1));
            let views = s.describe();
            let records = all_records(&s);
            prop_assert_eq!(records.len() as u64, users.len() as u64 + s.stats().duplicates);
            prop_assert_eq!(s.open_shards(), views.iter().filter(|v| v.end_seq.is_none()).count());
            let seq_of = |r: &Value| -> u128 {
                r["dynamodb"]["SequenceNumber"].as_str().and_then(|x| x.parse().ok()).unwrap_or(0)
            };
            // Per item, its records in sequence order: each one's shard descends from the last.
            let mut by_user: BTreeMap<String, Vec<(u128, String)>> = BTreeMap::new();
            for (shard, r) in &records {
                let user = r["dynamodb"]["Keys"]["user"]["S"].as_str().unwrap_or("").to_owned();
                by_user.entry(user).or_default().push((seq_of(r), shard.clone()));
            }
            for (user, mut rs) in by_user {
                rs.sort();
                for w in rs.windows(2) {
                    prop_assert!(
                        ancestors(&views, &w[1].1).contains(&w[0].1),
                        "{} moved from {} to {}, outside its lineage", user, w[0].1, w[1].1
                    );
                }
            }
            for v in &views {
                let (rs, _) = s.read(&v.shard_id, 0, usize::MAX).expect("read");
                let seqs: Vec<u128> = rs.iter().map(seq_of).collect();
                prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]));
                if let Some(p) = views.iter().find(|p| Some(&p.shard_id) == v.parent.as_ref()) {
                    prop_assert!(p.end_seq.is_some(), "a parent is closed");
                    let (prs, _) = s.read(&p.shard_id, 0, usize::MAX).expect("read");
                    let parent_max = prs.iter().map(seq_of).max().unwrap_or(0);
                    prop_assert!(seqs.iter().all(|q| *q > parent_max));
                }
            }
        }

        /// Every change is delivered exactly once (DynamoDB Streams) or at least once with its
        /// duplicates counted (Kinesis), always into its item's one lineage, with increasing
        /// sequence numbers per shard and reordering bounded by `reorder`.
        #[test]
        fn every_change_arrives_in_its_items_lineage(
            users in proptest::collection::vec(0u32..30, 1..200),
            kinesis in any::<bool>(),
            dup in 0.0f64..0.5,
            reorder in 0usize..6,
            seed in any::<u64>(),
        ) {
            let kind = if kinesis { SourceKind::Kinesis } else { SourceKind::DynamoDbStreams };
            let mut cfg = ShapeConfig::new(kind, 3);
            cfg.rollover = Some(Duration::from_secs(7));
            cfg.duplicates = dup;
            cfg.reorder = reorder;
            cfg.seed = seed;
            let mut s = ShapedStream::new(cfg);
            for (i, u) in users.iter().enumerate() {
                s.push(change(*u, i as u32), Duration::from_secs(i as u64));
                if i % 10 == 9 { s.tick(Duration::from_secs(i as u64)); }
            }
            s.tick(Duration::from_secs(users.len() as u64 + 1));
            let records = all_records(&s);
            let stats = s.stats();
            prop_assert_eq!(records.len() as u64, users.len() as u64 + stats.duplicates);
            if !kinesis { prop_assert_eq!(stats.duplicates, 0); }
            // One slot per item.
            let mut slot_of_user: BTreeMap<String, u32> = BTreeMap::new();
            for (shard, r) in &records {
                let user = r["dynamodb"]["Keys"]["user"]["S"].as_str().unwrap_or("").to_owned();
                let slot = u32::from_str_radix(shard.rsplit('-').next().unwrap_or("0"), if kinesis { 10 } else { 16 }).unwrap_or(0);
                let prev = *slot_of_user.entry(user).or_insert(slot);
                prop_assert_eq!(prev, slot);
            }
            // Each change (by its at) appears once, plus its duplicates.
            let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
            for (_, r) in &records {
                *seen.entry(r["dynamodb"]["ApproximateCreationDateTime"].as_u64().unwrap_or(0)).or_default() += 1;
            }
            prop_assert_eq!(seen.len(), users.len());
            prop_assert!(seen.values().all(|n| *n == 1 || (kinesis && *n == 2)));
            for v in s.describe() {
                let (rs, _) = s.read(&v.shard_id, 0, usize::MAX).expect("read");
                let seqs: Vec<u128> = rs.iter().filter_map(|r| r["dynamodb"]["SequenceNumber"].as_str()?.parse().ok()).collect();
                prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(seqs.iter().all(|q| *q >= v.first_seq.parse::<u128>().unwrap_or(0)));
            }
        }
    }
}
