//! The pure plan: per-shard samples in, per-shard decisions and ordered operations out.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::record_load;

/// One sampled record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Its hash key (MD5 of the partition key, or the explicit hash key).
    pub hash_key: u128,
    /// Data plus partition key, in bytes.
    pub bytes: u64,
    /// Arrival time, milliseconds since the epoch (for the peak per second).
    pub at_ms: u64,
    /// The partition key (what salting acts on when one key is too hot).
    pub partition_key: String,
}

/// What was sampled from one open shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardSample {
    /// The shard id.
    pub shard_id: String,
    /// First hash key of its range.
    pub start: u128,
    /// Last hash key of its range (inclusive).
    pub end: u128,
    /// Length of the sampling window in seconds (> 0).
    pub seconds: f64,
    /// The records read in that window.
    pub samples: Vec<Sample>,
    /// When the shard was created (seconds since the epoch), if known: for the cooldown.
    pub created_at: Option<u64>,
    /// Splits between the stream's original shards and this one: for the depth cap.
    pub depth: u32,
}

impl ShardSample {
    /// A sample of `shard_id` (`start..=end`) over `seconds`, of unknown age and depth 0.
    pub fn new(
        shard_id: impl Into<String>,
        start: u128,
        end: u128,
        seconds: f64,
        samples: Vec<Sample>,
    ) -> Self {
        Self {
            shard_id: shard_id.into(),
            start,
            end,
            seconds,
            samples,
            created_at: None,
            depth: 0,
        }
    }
}

/// Thresholds of the plan; the defaults are the ones the module docs state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanConfig {
    /// Split at or above this load (0.8 = 80 % of either limit).
    pub split_at: f64,
    /// Each child of a split carries at most this share of the parent (0.55).
    pub child_max_share: f64,
    /// One key at or above this share of a shard's load: refuse and salt it (0.5).
    pub hot_key_share: f64,
    /// Merge two adjacent shards whose combined peak stays below this (0.4)...
    pub merge_below: f64,
    /// ...for this long (default 1,800 s).
    pub hold_secs: u64,
    /// A shard younger than this is neither split nor merged (default 900 s).
    pub cooldown_secs: u64,
    /// A shard this many splits deep is not split again (default 8).
    pub max_depth: u32,
    /// Split levels one plan may apply to one shard (default 3: up to 8 children).
    pub max_splits_per_shard: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            split_at: 0.8,
            child_max_share: 0.55,
            hot_key_share: 0.5,
            merge_below: 0.4,
            hold_secs: 1_800,
            cooldown_secs: 900,
            max_depth: 8,
            max_splits_per_shard: 3,
        }
    }
}

/// What the plan carries across runs (persist it): since when each adjacent pair has been
/// cold enough to merge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshardState {
    /// `"left-id right-id"` → first time (seconds) the pair was seen below the merge threshold.
    pub cold_since: BTreeMap<String, u64>,
}

/// One resharding call, naming shards by their hash range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// SplitShard the open shard with exactly this range; the right child starts at `at`.
    Split {
        /// Start of the shard to split.
        start: u128,
        /// End of the shard to split.
        end: u128,
        /// `NewStartingHashKey` (start < at ≤ end).
        at: u128,
    },
    /// MergeShards the two adjacent open shards with these ranges.
    Merge {
        /// The left shard's range.
        left: (u128, u128),
        /// The right shard's range (starts right after the left one).
        right: (u128, u128),
    },
}

impl Op {
    /// Whether the shard map already shows this operation's result: the open shards' hash
    /// ranges (`open`) include both children of a split, or the merged range. This is the
    /// proof an executor waits for before it counts the operation ended; a call that returned
    /// is not.
    pub fn is_done(&self, open: &[(u128, u128)]) -> bool {
        match *self {
            Op::Split { start, end, at } => {
                at > start && open.contains(&(start, at - 1)) && open.contains(&(at, end))
            }
            Op::Merge { left, right } => open.contains(&(left.0, right.1)),
        }
    }
}

/// Why a shard is not split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Refusal {
    /// One key holds too much of the load: salt it.
    HotKey {
        /// The key.
        partition_key: String,
        /// Its share of the shard's load.
        share: f64,
    },
    /// No boundary leaves both children within the child limit.
    NoBalancedSplit {
        /// The larger child's share at the best boundary.
        best_share: f64,
    },
    /// The shard is too young.
    Cooldown {
        /// When it may change (seconds).
        until: u64,
    },
    /// The shard is already `depth` splits deep.
    DepthCap {
        /// Its depth.
        depth: u32,
    },
}

impl Refusal {
    /// The reason as the CLI prints it.
    pub fn reason(&self) -> String {
        match self {
            Self::HotKey {
                partition_key,
                share,
            } => format!(
                "salt it: key {partition_key:?} carries {:.0}% of the shard's load; no split point helps",
                share * 100.0
            ),
            Self::NoBalancedSplit { best_share } => format!(
                "no split point leaves both children at most 55% (best: {:.0}%)",
                best_share * 100.0
            ),
            Self::Cooldown { until } => {
                format!(
                    "cooldown: the shard was created less than the cooldown ago; plan again at or after {until} (Unix seconds)"
                )
            }
            Self::DepthCap { depth } => format!("depth cap: already {depth} splits deep"),
        }
    }
}

/// The decision for one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Split (possibly several levels).
    Split,
    /// Merge with a neighbour.
    Merge,
    /// Nothing to do.
    None,
    /// Hot, but not split (see the refusal).
    Refuse,
}

/// One shard's line of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardPlan {
    /// The shard id.
    pub shard_id: String,
    /// Its load (share of one shard's capacity, 1.0 = full): every record read from it,
    /// wherever its hash key lies.
    pub load: f64,
    /// The part of `load` whose placement the sample cannot see: records whose hash key (the
    /// MD5 of their partition key) lies outside the shard's range, so they were put with an
    /// `ExplicitHashKey` that `GetRecords` does not return. They count in the load; they cannot
    /// choose a split point.
    #[serde(default)]
    pub unplaced: f64,
    /// Its busiest second's load.
    pub peak: f64,
    /// The decision.
    pub action: Action,
    /// The first split's `NewStartingHashKey`, for a split.
    pub split_hash_key: Option<u128>,
    /// Every split key of this shard, in the order applied.
    pub split_hash_keys: Vec<u128>,
    /// The neighbour to merge with, for a merge.
    pub merge_with: Option<String>,
    /// Why not split, for a refusal (or a hot shard left alone).
    pub refusal: Option<Refusal>,
}

/// A key the hot-key controller should salt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotKeyReport {
    /// The shard it melts.
    pub shard_id: String,
    /// The key.
    pub partition_key: String,
    /// Its load (share of one shard).
    pub load: f64,
    /// Its share of the shard's load.
    pub share: f64,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// One line per sampled shard, in hash order.
    pub shards: Vec<ShardPlan>,
    /// The calls to make, in order, one at a time.
    pub ops: Vec<Op>,
    /// Keys to salt instead of splitting.
    pub hot_keys: Vec<HotKeyReport>,
    /// max/mean load over the open shards after the plan, by the sample.
    pub predicted_max_over_mean: f64,
    /// The same with every split at its range's midpoint instead (same number of shards).
    pub midpoint_max_over_mean: f64,
    /// The same with UpdateShardCount to the same number of uniform shards.
    pub uniform_max_over_mean: f64,
    /// State for the next run.
    pub state: ReshardState,
}

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// No shards were given.
    #[error("no shards sampled")]
    NoShards,
    /// A sample is unusable.
    #[error("shard {shard_id}: {reason}")]
    BadSample {
        /// The shard.
        shard_id: String,
        /// What is wrong.
        reason: String,
    },
}

/// Records of one range with their loads, sorted by hash key.
struct Weighted {
    /// `(hash key, load)` sorted by hash.
    points: Vec<(u128, f64)>,
}

impl Weighted {
    fn load_in(&self, start: u128, end: u128) -> f64 {
        let lo = self.points.partition_point(|p| p.0 < start);
        let hi = self.points.partition_point(|p| p.0 <= end);
        // `+ 0.0`: an empty float sum is -0.0.
        self.points[lo..hi].iter().map(|p| p.1).sum::<f64>() + 0.0
    }

    /// The boundary in `start..=end` minimising the larger child: `(at, larger child's load)`.
    fn best_split(&self, start: u128, end: u128) -> Option<(u128, f64)> {
        let lo = self.points.partition_point(|p| p.0 < start);
        let hi = self.points.partition_point(|p| p.0 <= end);
        let pts = &self.points[lo..hi];
        let total: f64 = pts.iter().map(|p| p.1).sum();
        let mut left = 0.0;
        let mut best: Option<(u128, f64)> = None;
        let mut i = 0;
        while i < pts.len() {
            // All records of one hash key stay on one side.
            let h = pts[i].0;
            while i < pts.len() && pts[i].0 == h {
                left += pts[i].1;
                i += 1;
            }
            let Some(&(next, _)) = pts.get(i) else { break };
            // The right child starts midway between the two sampled keys.
            let at = h + 1 + (next - h - 1) / 2;
            let larger = left.max(total - left);
            if best.is_none_or(|b| larger < b.1) {
                best = Some((at, larger));
            }
        }
        best
    }
}

fn weighted(s: &ShardSample) -> Weighted {
    let mut points: Vec<(u128, f64)> = s
        .samples
        .iter()
        .filter(|r| s.start <= r.hash_key && r.hash_key <= s.end)
        .map(|r| (r.hash_key, record_load(r.bytes) / s.seconds))
        .collect();
    points.sort_by_key(|p| p.0);
    Weighted { points }
}

fn peak(s: &ShardSample) -> f64 {
    let mut per_second: HashMap<u64, f64> = HashMap::new();
    for r in &s.samples {
        *per_second.entry(r.at_ms / 1_000).or_default() += record_load(r.bytes);
    }
    let busiest = per_second.values().copied().fold(0.0, f64::max);
    // Never below the mean (a window shorter than a second, or no timestamps).
    let mean: f64 = s.samples.iter().map(|r| record_load(r.bytes)).sum::<f64>() / s.seconds;
    busiest.max(mean)
}

/// The heaviest partition key of a shard: `(key, load)`.
fn heaviest_key(s: &ShardSample) -> Option<(String, f64)> {
    let mut per_key: HashMap<&str, f64> = HashMap::new();
    for r in &s.samples {
        *per_key.entry(r.partition_key.as_str()).or_default() += record_load(r.bytes) / s.seconds;
    }
    per_key
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(k, l)| (k.to_owned(), l))
}

/// The load of the records whose hash key lies outside the shard's range (0 when none).
fn unplaced_load(s: &ShardSample) -> f64 {
    s.samples
        .iter()
        .filter(|r| !(s.start..=s.end).contains(&r.hash_key))
        .map(|r| record_load(r.bytes) / s.seconds)
        .sum::<f64>()
        + 0.0
}

/// One split of a hot shard part of whose load has no known placement (`unplaced`): at the
/// placed records' best boundary when it stays within the child limit even if every unplaced
/// record is on the larger side, else at the midpoint of the range (placement unknown: the
/// even split `UpdateShardCount` would make). One level only: the children's loads are not
/// known until they are sampled again.
fn split_unplaced(
    w: &Weighted,
    s: &ShardSample,
    load: f64,
    unplaced: f64,
    c: &PlanConfig,
    ops: &mut Vec<Op>,
) -> Result<(), Refusal> {
    if s.start == s.end {
        return Err(Refusal::NoBalancedSplit { best_share: 1.0 });
    }
    let at = match w.best_split(s.start, s.end) {
        Some((at, larger)) if (larger + unplaced) / load <= c.child_max_share => at,
        _ => s.start + (s.end - s.start) / 2 + 1,
    };
    ops.push(Op::Split {
        start: s.start,
        end: s.end,
        at,
    });
    Ok(())
}

/// Split `start..=end` recursively while it is hot; returns the ops (parents first).
fn split_range(
    w: &Weighted,
    start: u128,
    end: u128,
    levels: u32,
    c: &PlanConfig,
    ops: &mut Vec<Op>,
) -> Result<(), Refusal> {
    let load = w.load_in(start, end);
    if levels == 0 || load < c.split_at || start == end {
        return Ok(());
    }
    let Some((at, larger)) = w.best_split(start, end) else {
        return Err(Refusal::NoBalancedSplit { best_share: 1.0 });
    };
    let share = if load > 0.0 { larger / load } else { 0.0 };
    if share > c.child_max_share {
        return Err(Refusal::NoBalancedSplit { best_share: share });
    }
    ops.push(Op::Split { start, end, at });
    // A child that cannot be split further is simply left as it is.
    let _ = split_range(w, start, at - 1, levels - 1, c, ops);
    let _ = split_range(w, at, end, levels - 1, c, ops);
    Ok(())
}

fn validate(shards: &[ShardSample]) -> Result<Vec<&ShardSample>, PlanError> {
    if shards.is_empty() {
        return Err(PlanError::NoShards);
    }
    for s in shards {
        let bad = |reason: &str| PlanError::BadSample {
            shard_id: s.shard_id.clone(),
            reason: reason.to_owned(),
        };
        if !(s.seconds.is_finite() && s.seconds > 0.0) {
            return Err(bad(
                "the sampling window must be a positive number of seconds",
            ));
        }
        if s.start > s.end {
            return Err(bad("the hash range is inverted"));
        }
    }
    let mut sorted: Vec<&ShardSample> = shards.iter().collect();
    sorted.sort_by_key(|s| s.start);
    for w in sorted.windows(2) {
        if w[1].start <= w[0].end {
            return Err(PlanError::BadSample {
                shard_id: w[1].shard_id.clone(),
                reason: format!("its range overlaps {}", w[0].shard_id),
            });
        }
    }
    Ok(sorted)
}

/// The plan for the sampled open shards at time `now` (seconds), given the state of the last
/// run; see the module docs for the rules.
pub fn plan(
    shards: &[ShardSample],
    state: &ReshardState,
    c: &PlanConfig,
    now: u64,
) -> Result<Plan, PlanError> {
    let sorted = validate(shards)?;
    let mut lines = Vec::with_capacity(sorted.len());
    let mut ops = Vec::new();
    let mut hot_keys = Vec::new();
    let mut splits_of: Vec<usize> = Vec::with_capacity(sorted.len());
    for s in &sorted {
        let w = weighted(s);
        // Load is what the shard took, read from it; placement only from keys known in range.
        let unplaced = unplaced_load(s);
        let load = w.load_in(s.start, s.end) + unplaced;
        let peak = peak(s);
        let mut line = ShardPlan {
            shard_id: s.shard_id.clone(),
            load,
            unplaced,
            peak,
            action: Action::None,
            split_hash_key: None,
            split_hash_keys: Vec::new(),
            merge_with: None,
            refusal: None,
        };
        let young = s
            .created_at
            .map(|t| t.saturating_add(c.cooldown_secs))
            .filter(|&until| now < until);
        let mut n_splits = 0;
        if load >= c.split_at {
            let hot = heaviest_key(s).filter(|(_, l)| load > 0.0 && l / load >= c.hot_key_share);
            let refusal = if let Some((key, key_load)) = hot {
                hot_keys.push(HotKeyReport {
                    shard_id: s.shard_id.clone(),
                    partition_key: key.clone(),
                    load: key_load,
                    share: key_load / load,
                });
                Some(Refusal::HotKey {
                    partition_key: key,
                    share: key_load / load,
                })
            } else if let Some(until) = young {
                Some(Refusal::Cooldown { until })
            } else if s.depth >= c.max_depth {
                Some(Refusal::DepthCap { depth: s.depth })
            } else {
                let levels = c.max_splits_per_shard.min(c.max_depth - s.depth);
                let mut mine = Vec::new();
                let split = if unplaced > 0.0 {
                    split_unplaced(&w, s, load, unplaced, c, &mut mine)
                } else {
                    split_range(&w, s.start, s.end, levels, c, &mut mine)
                };
                match split {
                    Ok(()) => {
                        line.split_hash_keys = mine
                            .iter()
                            .filter_map(|op| match op {
                                Op::Split { at, .. } => Some(*at),
                                Op::Merge { .. } => None,
                            })
                            .collect();
                        line.split_hash_key = line.split_hash_keys.first().copied();
                        n_splits = mine.len();
                        ops.extend(mine);
                        None
                    }
                    Err(r) => Some(r),
                }
            };
            line.action = if refusal.is_some() {
                Action::Refuse
            } else {
                Action::Split
            };
            line.refusal = refusal;
        }
        splits_of.push(n_splits);
        lines.push((line, young.is_some()));
    }

    // Merges: adjacent, both idle of splits and out of cooldown, combined peak under the
    // threshold for the hold period; greedily left to right, each shard in one merge at most.
    let mut new_state = ReshardState::default();
    let mut i = 0;
    while i + 1 < lines.len() {
        let (a, b) = (&lines[i], &lines[i + 1]);
        let (sa, sb) = (sorted[i], sorted[i + 1]);
        let adjacent = sa.end.checked_add(1) == Some(sb.start);
        let calm = a.0.action == Action::None && b.0.action == Action::None;
        let pair = format!("{} {}", sa.shard_id, sb.shard_id);
        if adjacent && calm && a.0.peak + b.0.peak < c.merge_below {
            let since = state.cold_since.get(&pair).copied().unwrap_or(now).min(now);
            new_state.cold_since.insert(pair, since);
            if now - since >= c.hold_secs && !a.1 && !b.1 {
                ops.push(Op::Merge {
                    left: (sa.start, sa.end),
                    right: (sb.start, sb.end),
                });
                let (left_id, right_id) = (sa.shard_id.clone(), sb.shard_id.clone());
                lines[i].0.action = Action::Merge;
                lines[i].0.merge_with = Some(right_id);
                lines[i + 1].0.action = Action::Merge;
                lines[i + 1].0.merge_with = Some(left_id);
                i += 2;
                continue;
            }
        }
        i += 1;
    }

    let all = Weighted {
        points: {
            let mut p: Vec<(u128, f64)> = sorted.iter().flat_map(|s| weighted(s).points).collect();
            p.sort_by_key(|x| x.0);
            p
        },
    };
    let ranges = ranges_after(&sorted, &ops);
    let predicted = max_over_mean(ranges.iter().map(|&(s, e)| all.load_in(s, e)));
    let midpoint = midpoint_ranges(&sorted, &splits_of, &all);
    let midpoint_ratio = max_over_mean(midpoint.iter().map(|&(s, e)| all.load_in(s, e)));
    let uniform = uniform_max_over_mean(&sorted_points(&all), ranges.len());
    Ok(Plan {
        shards: lines.into_iter().map(|l| l.0).collect(),
        ops,
        hot_keys,
        predicted_max_over_mean: predicted,
        midpoint_max_over_mean: midpoint_ratio,
        uniform_max_over_mean: uniform,
        state: new_state,
    })
}

fn sorted_points(w: &Weighted) -> Vec<(u128, f64)> {
    w.points.clone()
}

/// The open ranges after applying `ops` to the sampled shards.
fn ranges_after(sorted: &[&ShardSample], ops: &[Op]) -> Vec<(u128, u128)> {
    let mut ranges: Vec<(u128, u128)> = sorted.iter().map(|s| (s.start, s.end)).collect();
    for op in ops {
        match *op {
            Op::Split { start, end, at } => {
                if let Some(i) = ranges.iter().position(|&r| r == (start, end)) {
                    ranges[i] = (start, at - 1);
                    ranges.insert(i + 1, (at, end));
                }
            }
            Op::Merge { left, right } => {
                if let Some(i) = ranges.iter().position(|&r| r == left)
                    && ranges.get(i + 1) == Some(&right)
                {
                    ranges[i] = (left.0, right.1);
                    ranges.remove(i + 1);
                }
            }
        }
    }
    ranges
}

/// The midpoint baseline: each shard split as many times as the plan splits it, every time at
/// the midpoint of the currently most loaded of its pieces.
fn midpoint_ranges(sorted: &[&ShardSample], splits: &[usize], all: &Weighted) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    for (s, &n) in sorted.iter().zip(splits) {
        let mut pieces = vec![(s.start, s.end)];
        for _ in 0..n {
            let Some((i, &(a, b))) =
                pieces
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.0 < r.1)
                    .max_by(|x, y| {
                        all.load_in(x.1.0, x.1.1)
                            .total_cmp(&all.load_in(y.1.0, y.1.1))
                    })
            else {
                break;
            };
            let mid = a + (b - a) / 2 + 1;
            pieces[i] = (a, mid - 1);
            pieces.insert(i + 1, (mid, b));
        }
        out.extend(pieces);
    }
    out
}

/// max/mean of the loads of `n` uniform shards (UpdateShardCount to `n`) over these points.
pub fn uniform_max_over_mean(points: &[(u128, f64)], n: usize) -> f64 {
    let n = n.max(1);
    let mut loads = vec![0.0; n];
    for &(h, l) in points {
        // Shard i holds [i·2^128/n, (i+1)·2^128/n): index = floor(h·n / 2^128).
        let i = mul_shift_128(h, n as u128).min(n as u128 - 1) as usize;
        loads[i] += l;
    }
    max_over_mean(loads.into_iter())
}

/// ⌊h·n / 2^128⌋ without overflow (n < 2^64).
fn mul_shift_128(h: u128, n: u128) -> u128 {
    let (hi, lo) = (h >> 64, h & u128::from(u64::MAX));
    let a = hi * n; // < 2^128 for n < 2^64
    let b = lo * n;
    (a + (b >> 64)) >> 64
}

/// max/mean of the midpoint split (see [`Plan::midpoint_max_over_mean`]) for given ranges.
pub fn midpoint_max_over_mean(points: &[(u128, f64)], ranges: &[(u128, u128)]) -> f64 {
    let w = Weighted {
        points: points.to_vec(),
    };
    max_over_mean(ranges.iter().map(|&(s, e)| w.load_in(s, e)))
}

fn max_over_mean(loads: impl Iterator<Item = f64>) -> f64 {
    let (mut n, mut sum, mut max) = (0usize, 0.0, 0.0f64);
    for l in loads {
        n += 1;
        sum += l;
        max = max.max(l);
    }
    if n == 0 || sum <= 0.0 {
        return 1.0;
    }
    max / (sum / n as f64)
}
