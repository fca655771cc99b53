//! The live move: a persisted, resumable state machine that copies a slot range to another
//! table while it takes writes, then fences, flips and keeps rollback possible.
//!
//! Each call of [`Mover::step`] does the work of one [`Phase`] and persists the move record
//! (pk `move`, sk = id in the directory table, written under a revision condition so two movers
//! of one move cannot both proceed). Every step is idempotent: the copy and the tail write
//! with the apply rule ([`apply::wins`](heatsink_core::slots::apply::wins), as condition expressions), fences and cleanup are
//! plain re-doable writes, and the directory changes are conditional on the version and epochs
//! they were decided from. A mover killed anywhere is resumed with [`Mover::open`] + [`Mover::run`].
//!
//! | phase reached | work done by the step | idempotent because |
//! |---|---|---|
//! | `planned` | range isolated (split) and marked moving with the record, one transaction | conditional on version/epoch |
//! | `recorded` | a LATEST iterator per source stream shard | re-recorded on retry; older positions only replay more |
//! | `copied` | parallel Scan within the RCU budget, snapshot rows written `attribute_not_exists(v) OR v < :v` | the apply rule; per-segment checkpoints |
//! | `caught_up` | tail from the recorded positions until a poll round is empty | the apply rule; checkpoint after each batch |
//! | `diffed` | both sides scanned and compared, differences re-read after catching up | read-only |
//! | `fenced` | wait out `max_age` since the mark, then the source's fence items | plain puts |
//! | `flipped` | drain through the fence records, record the target's stream, flip to epoch + 1 | conditional on version/epoch |
//! | `cleaned` | soak (forward and reverse tails), then delete the source copy at the WCU budget | deletes |
//!
//! Limits: one reader per stream shard (DynamoDB Streams allows 2 per shard: keep at most one
//! other, e.g. the aggregator); a position older than 24 h is [`MoveError::PositionExpired`];
//! the copy scans the whole source table (slots are hashes, so no key range selects them); the
//! diff holds the moved slots' keys in memory; items must carry a numeric version `v` that
//! rises with each change (items without one count as version 0 and are copied once).
//! Several stream shards and rollovers: the shard list is read in full (every
//! `DescribeStream` page), shards that open later are read from their start, and the drain asks
//! `DescribeStream` again the round after a known shard closes (a rollover in the pause can
//! put a fence record on a child the tail has not seen yet). Listings stay under the service's
//! 10 `DescribeStream` calls per second: a tail lists at most once a second (4 times a second
//! in the drain) unless a known shard closed, and once more before the source copy is deleted. A drain through the fence
//! records covers the shards that hold them, one more round covers the others, and the forward
//! tail keeps running through the soak so a record that surfaces late on another shard is still
//! applied (the apply rule keeps the newest), never lost. The emulators give a table's stream
//! one shard; the integration test `sim_move_on_four_rolling_stream_shards_…` runs a move
//! through the stream-shape simulator (4 shards, each rolling over every 150 ms, 100+ shards
//! listed).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnConsumedCapacity, TransactWriteItem};
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, ShardIteratorType,
};
use futures::StreamExt;
use futures::future::try_join_all;
use heatsink_core::slots::apply::Version;
use heatsink_core::slots::{
    MoveMode, Phase, RangeState, SlotRange, check_abort, check_resume, check_rollback, slot_of,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::fence::{
    FenceItem, KeySchema, TOMBSTONE_ATTR, TableInfo, VERSION_ATTR, delete_fences, is_internal,
    write_fences,
};
pub use super::record::{Budget, DiffReport, MoveRecord, ShardPos, Tail};
use super::{MOVE_PK, MoveError, SlotDirectory};
use crate::clock::now_ms;
use crate::error::AwsError;

const STREAMS: &str = "DynamoDB Streams";
/// Shard iterators expire after 15 minutes; one persisted longer than this is not reused.
const ITERATOR_TTL_MS: u64 = 14 * 60 * 1_000;

/// A move request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveSpec {
    /// The slots to move (split out of their directory range if needed).
    pub slots: SlotRange,
    /// The target table (string `pk`, the source's sort key, NEW_AND_OLD_IMAGES stream).
    pub to: String,
    /// Copy or attrition.
    pub mode: MoveMode,
    /// Refuse to start unless the directory is strict.
    pub strict: bool,
    /// Rates.
    pub budget: Budget,
}

/// Records of the moved slots a poll round may still find for the tail to count as at the
/// head just before the fence (what is left then is read inside the pause).
const PRE_FENCE_RECORDS: u64 = 20;

/// Most poll rounds of the drain (each at least 2 ms apart) before the flip goes ahead
/// without every fence record seen.
const DRAIN_ROUNDS: u32 = 5_000;

/// Least time between two shard listings of one tail (`DescribeStream`, every page) while no
/// known shard has closed. DynamoDB Streams allows 10 `DescribeStream` calls per second; the
/// soak polls both tails every 50 ms, which listing every round would put at 40 per second.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// The same inside the pause's drain, which polls only the forward tail (every 2 ms): a fence
/// record on a shard nobody has listed yet waits at most this long to be found.
const DRAIN_LIST_INTERVAL: Duration = Duration::from_millis(250);

/// Test hook: what happens to one GetRecords batch of the tail (duplicated or lost replies).
pub trait TailFaults: Send + Sync {
    /// Called for each non-empty batch; the default delivers it once.
    fn batch(&self, _shard: &str, _n: u64) -> BatchFault {
        BatchFault::Deliver
    }
}

/// What a [`TailFaults`] does with one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFault {
    /// Apply once and advance.
    Deliver,
    /// Apply twice (a redelivery) and advance.
    Duplicate,
    /// Drop the reply: nothing applied, the checkpoint stays, the batch is read again.
    Lose,
}

/// Lines of progress, one per event worth telling an operator.
pub type MoveProgress = Arc<dyn Fn(&str) + Send + Sync>;

/// A live move (see the module docs).
pub struct Mover {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    dir: SlotDirectory,
    record: MoveRecord,
    src: TableInfo,
    dst: TableInfo,
    faults: Option<Arc<dyn TailFaults>>,
    progress: Option<MoveProgress>,
    batches: u64,
    /// The map read just before the fence, so the flip does not read it inside the pause (a
    /// change since then makes the flip's transaction fail, and the flip reads it again).
    map_at_fence: Option<heatsink_core::slots::SlotMap>,
    /// Per tail (forward, reverse): when its shards were last listed and how many of them were
    /// closed then (a shard closing since makes the next poll list again, whatever the time).
    listed: [Option<(Instant, usize)>; 2],
}

impl std::fmt::Debug for Mover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mover")
            .field("record", &self.record)
            .finish()
    }
}

struct Pace {
    rate: f64,
    start: Instant,
    used: f64,
}

impl Pace {
    fn new(rate: f64) -> Self {
        Self {
            rate: rate.max(1.0),
            start: Instant::now(),
            used: 0.0,
        }
    }

    async fn take(&mut self, units: f64) {
        self.used += units;
        let due = self.start + Duration::from_secs_f64(self.used / self.rate);
        tokio::time::sleep_until(due).await;
    }
}

fn conv(v: &StreamValue) -> AttributeValue {
    match v {
        StreamValue::S(s) => AttributeValue::S(s.clone()),
        StreamValue::N(n) => AttributeValue::N(n.clone()),
        StreamValue::B(b) => AttributeValue::B(b.clone().into_inner().into()),
        StreamValue::Bool(b) => AttributeValue::Bool(*b),
        StreamValue::Null(b) => AttributeValue::Null(*b),
        StreamValue::Ss(v) => AttributeValue::Ss(v.clone()),
        StreamValue::Ns(v) => AttributeValue::Ns(v.clone()),
        StreamValue::Bs(v) => {
            AttributeValue::Bs(v.iter().map(|b| b.clone().into_inner().into()).collect())
        }
        StreamValue::L(v) => AttributeValue::L(v.iter().map(conv).collect()),
        StreamValue::M(m) => {
            AttributeValue::M(m.iter().map(|(k, v)| (k.clone(), conv(v))).collect())
        }
        _ => AttributeValue::Null(true),
    }
}

fn conv_map(m: &HashMap<String, StreamValue>) -> HashMap<String, AttributeValue> {
    m.iter().map(|(k, v)| (k.clone(), conv(v))).collect()
}

fn version(item: &HashMap<String, AttributeValue>) -> u64 {
    item.get(VERSION_ATTR)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn pk_of(item: &HashMap<String, AttributeValue>) -> Option<&str> {
    item.get("pk")
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// A key as text: its attributes as sorted `name=value` pairs (sample keys in reports).
fn key_text(key: &HashMap<String, AttributeValue>) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(k, v)| {
            let val = match v {
                AttributeValue::S(s) => s.clone(),
                AttributeValue::N(n) => n.clone(),
                other => format!("{other:?}"),
            };
            format!("{k}={val}")
        })
        .collect();
    parts.sort();
    parts.join(",")
}

fn encode_key(key: &HashMap<String, AttributeValue>) -> String {
    let m: serde_json::Map<String, serde_json::Value> = key
        .iter()
        .map(|(k, v)| {
            let j = match v {
                AttributeValue::S(s) => serde_json::json!({"S": s}),
                AttributeValue::N(n) => serde_json::json!({"N": n}),
                AttributeValue::B(b) => serde_json::json!({"B": b.as_ref().to_vec()}),
                _ => serde_json::Value::Null,
            };
            (k.clone(), j)
        })
        .collect();
    serde_json::Value::Object(m).to_string()
}

fn decode_key(text: &str) -> Option<HashMap<String, AttributeValue>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut out = HashMap::new();
    for (k, j) in v.as_object()? {
        let av = if let Some(s) = j.get("S").and_then(|s| s.as_str()) {
            AttributeValue::S(s.to_owned())
        } else if let Some(n) = j.get("N").and_then(|s| s.as_str()) {
            AttributeValue::N(n.to_owned())
        } else {
            let bytes: Vec<u8> = serde_json::from_value(j.get("B")?.clone()).ok()?;
            AttributeValue::B(bytes.into())
        };
        out.insert(k.clone(), av);
    }
    Some(out)
}

fn new_id() -> String {
    format!("mv-{}-{:04x}", now_ms(), rand::random::<u16>())
}

/// Writes `item` at `version` under the apply rule; `Ok(false)` when the stored one ranks
/// at or above it.
async fn apply_to(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &KeySchema,
    item: &HashMap<String, AttributeValue>,
    version: Version,
) -> Result<bool, MoveError> {
    let (body, cond) = match version {
        Version::Live(_) => (item.clone(), "attribute_not_exists(#v) OR #v < :v"),
        Version::Tombstone(v) => {
            let mut t = keys.key_of(item);
            t.insert(VERSION_ATTR.into(), AttributeValue::N(v.to_string()));
            t.insert(TOMBSTONE_ATTR.into(), AttributeValue::Bool(true));
            (
                t,
                "attribute_not_exists(#v) OR #v < :v OR (#v = :v AND attribute_not_exists(#t))",
            )
        }
    };
    let v = match version {
        Version::Live(v) | Version::Tombstone(v) => v,
    };
    for attempt in 0..8u32 {
        let mut req = ddb
            .put_item()
            .table_name(table)
            .set_item(Some(body.clone()))
            .condition_expression(cond)
            .expression_attribute_names("#v", VERSION_ATTR)
            .expression_attribute_values(":v", AttributeValue::N(v.to_string()));
        if matches!(version, Version::Tombstone(_)) {
            req = req.expression_attribute_names("#t", TOMBSTONE_ATTR);
        }
        match req.send().await {
            Ok(_) => return Ok(true),
            Err(e) => {
                let err = AwsError::dynamodb("PutItem", table, e);
                if err.is_conditional_check_failed() {
                    return Ok(false);
                }
                if !err.is_transient() || attempt == 7 {
                    return Err(err.into());
                }
                tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
            }
        }
    }
    Ok(false)
}

/// Deletes `key` on `table` when its version is at most `v` (reverse replication of a delete).
async fn delete_upto(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    key: HashMap<String, AttributeValue>,
    v: u64,
) -> Result<bool, MoveError> {
    match ddb
        .delete_item()
        .table_name(table)
        .set_key(Some(key))
        .condition_expression("attribute_not_exists(#v) OR #v <= :v")
        .expression_attribute_names("#v", VERSION_ATTR)
        .expression_attribute_values(":v", AttributeValue::N(v.to_string()))
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e) => {
            let err = AwsError::dynamodb("DeleteItem", table, e);
            if err.is_conditional_check_failed() {
                Ok(false)
            } else {
                Err(err.into())
            }
        }
    }
}

/// Stream records applied at once (the apply rule makes their order irrelevant).
const APPLY_CONCURRENCY: usize = 16;

/// One write of the tail.
enum Op {
    /// A row or tombstone under the apply rule.
    Apply(HashMap<String, AttributeValue>, Version),
    /// A version-bounded delete (reverse replication).
    Delete(HashMap<String, AttributeValue>, u64),
}

/// Which way a tail carries changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Source → target, deletes as tombstones (a snapshot may still be landing).
    Forward,
    /// Target → source, deletes as version-bounded deletes.
    Reverse,
}

impl Mover {
    /// Checks the request, isolates and marks the range, and writes the move record
    /// (phase `planned`). Nothing is copied yet: call [`Mover::run`] or [`Mover::step`].
    pub async fn start(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        spec: MoveSpec,
    ) -> Result<Mover, MoveError> {
        let map = dir.load().await?;
        if spec.strict && !map.strict {
            return Err(MoveError::BadMove(format!(
                "--strict asks for a strict directory, and {} is not; run `heatsink slots init --owner {} --strict` first",
                dir.table(),
                map.entry_of(spec.slots.first).owner
            )));
        }
        let entry = map.entry_of(spec.slots.first).clone();
        if !entry.range.covers(&spec.slots) {
            return Err(MoveError::BadMove(format!(
                "slots {} span more than one directory range (owners differ or a move holds part); move each range separately (see `heatsink slots status`)",
                spec.slots
            )));
        }
        if let RangeState::Moving { move_id } = &entry.state {
            return Err(MoveError::BadMove(format!(
                "slots {} are held by move {move_id}; one move per slot at a time (see `heatsink move status {move_id}`)",
                spec.slots
            )));
        }
        if entry.owner == spec.to {
            return Err(MoveError::BadMove(format!(
                "{} already owns slots {}: nothing to move",
                spec.to, spec.slots
            )));
        }
        let src = TableInfo::describe(&ddb, &entry.owner).await?;
        let dst = TableInfo::describe(&ddb, &spec.to).await?;
        if src.keys != dst.keys {
            return Err(MoveError::BadTable {
                table: spec.to.clone(),
                reason: format!(
                    "its key schema ({:?}) differs from {}'s ({:?})",
                    dst.keys.sort_key, src.table, src.keys.sort_key
                ),
            });
        }
        let src_arn = src.require_stream()?.to_owned();
        dst.require_stream()?;
        let id = new_id();
        let segments = spec.budget.segments.clamp(1, 64) as usize;
        let record = MoveRecord {
            id: id.clone(),
            slots: spec.slots,
            from: entry.owner.clone(),
            to: spec.to.clone(),
            mode: spec.mode,
            strict: map.strict,
            phase: Phase::Planned,
            epoch: entry.epoch,
            marked_ms: now_ms(),
            max_age_ms: map.max_age_ms,
            budget: spec.budget,
            forward: Tail {
                stream_arn: src_arn,
                ..Tail::default()
            },
            reverse: None,
            scan: vec![None; segments],
            scan_done: vec![false; segments],
            copied: 0,
            applied: 0,
            skipped: 0,
            rcu: 0.0,
            wcu: 0.0,
            diff: None,
            phase_ms: BTreeMap::new(),
            fenced_ms: None,
            pause_ms: None,
            pause_parts_ms: BTreeMap::new(),
            cleaned: 0,
            lag_ms: None,
            rev: 0,
            created_ms: now_ms(),
        };
        if let Some(c) = map.isolate(spec.slots)? {
            dir.commit(&c).await?;
        }
        let map = dir.load().await?;
        let mark = map.mark_moving(spec.slots, &id)?;
        let mut mover = Mover::with_parts(ddb, streams, dir, record, src, dst);
        mover.record.rev = 1;
        let put = mover.record_put(0)?;
        mover.dir.commit_with(&mark, vec![put]).await?;
        Ok(mover)
    }

    /// A mover over `record` with no test faults, no progress sink and no batches read yet.
    fn with_parts(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        record: MoveRecord,
        src: TableInfo,
        dst: TableInfo,
    ) -> Mover {
        Mover {
            ddb,
            streams,
            dir,
            record,
            src,
            dst,
            faults: None,
            progress: None,
            batches: 0,
            map_at_fence: None,
            listed: [None, None],
        }
    }

    /// Opens a persisted move (to resume, abort or roll it back).
    pub async fn open(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        id: &str,
    ) -> Result<Mover, MoveError> {
        let record = dir.move_record(id).await?;
        let src = TableInfo::describe(&ddb, &record.from).await?;
        let dst = TableInfo::describe(&ddb, &record.to).await?;
        Ok(Mover::with_parts(ddb, streams, dir, record, src, dst))
    }

    /// Every move of the directory, oldest first.
    pub async fn list(dir: &SlotDirectory) -> Result<Vec<MoveRecord>, MoveError> {
        Ok(dir.moves().await?.records)
    }

    /// Injects tail faults (tests).
    pub fn with_faults(mut self, faults: Arc<dyn TailFaults>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Reports progress lines to `progress`.
    pub fn with_progress(mut self, progress: MoveProgress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The move's persisted state.
    pub fn record(&self) -> &MoveRecord {
        &self.record
    }

    fn say(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
    }

    fn record_put(&self, prev: u64) -> Result<TransactWriteItem, MoveError> {
        let json =
            serde_json::to_string(&self.record).map_err(|e| MoveError::BadItem(e.to_string()))?;
        let mut put = Put::builder()
            .table_name(self.dir.table())
            .item("pk", AttributeValue::S(MOVE_PK.into()))
            .item("sk", AttributeValue::S(self.record.id.clone()))
            .item("record", AttributeValue::S(json))
            .item("phase", AttributeValue::S(self.record.phase.name().into()))
            .item("rev", AttributeValue::N(self.record.rev.to_string()));
        put = if prev == 0 {
            put.condition_expression("attribute_not_exists(pk)")
        } else {
            put.condition_expression("rev = :r")
                .expression_attribute_values(":r", AttributeValue::N(prev.to_string()))
        };
        Ok(TransactWriteItem::builder()
            .put(put.build().map_err(|e| MoveError::BadItem(e.to_string()))?)
            .build())
    }

    /// Persists the record (revision-conditional: a second mover of this move loses).
    async fn save(&mut self) -> Result<(), MoveError> {
        let prev = self.record.rev;
        self.record.rev += 1;
        let Some(put) = self.record_put(prev)?.put else {
            return Ok(());
        };
        let res = self
            .ddb
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_values(put.expression_attribute_values().cloned())
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = AwsError::dynamodb("PutItem", self.dir.table(), e);
                if err.is_conditional_check_failed() {
                    Err(MoveError::BadMove(format!(
                        "move {} was changed by another mover (revision {prev} is stale); run `heatsink move status {}`",
                        self.record.id, self.record.id
                    )))
                } else {
                    Err(err.into())
                }
            }
        }
    }

    async fn enter(&mut self, phase: Phase, started: Instant) -> Result<(), MoveError> {
        self.record.phase = phase;
        self.record.phase_ms.insert(
            phase.name().to_owned(),
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        );
        self.save().await?;
        self.say(&format!("{}: {}", self.record.id, phase.name()));
        Ok(())
    }

    /// Runs the steps until the move is done.
    pub async fn run(&mut self) -> Result<&MoveRecord, MoveError> {
        check_resume(&self.record.id, self.record.phase)?;
        while !self.record.phase.is_final() {
            self.step().await?;
        }
        Ok(&self.record)
    }

    /// Does the work of the next phase and persists it; returns the phase reached.
    pub async fn step(&mut self) -> Result<Phase, MoveError> {
        check_resume(&self.record.id, self.record.phase)?;
        let Some(next) = self.record.phase.next(self.record.mode) else {
            return Ok(self.record.phase);
        };
        let started = Instant::now();
        match next {
            Phase::Recorded => self.record_positions().await?,
            Phase::Copied => self.copy().await?,
            Phase::CaughtUp => self.catch_up(Way::Forward).await?,
            Phase::Diffed => self.diff().await?,
            Phase::Fenced => self.fence().await?,
            Phase::Flipped => self.flip().await?,
            Phase::Cleaning => self.soak().await?,
            Phase::Cleaned => self.clean().await?,
            Phase::Done => self.finish().await?,
            _ => {}
        }
        let t = Instant::now();
        self.enter(next, started).await?;
        if next == Phase::Fenced {
            self.pause_part("save", t);
        }
        Ok(next)
    }

    /// Every shard id of the stream, from all `DescribeStream` pages (a table's stream lists
    /// every shard of the last 24 h: more than one page of 100 on a large or old table).
    async fn list_shards(&self, arn: &str) -> Result<Vec<String>, MoveError> {
        let mut out = vec![];
        let mut start: Option<String> = None;
        loop {
            let desc = self
                .streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| AwsError::new(STREAMS, "DescribeStream", arn, e))?;
            let Some(d) = desc.stream_description() else {
                break;
            };
            out.extend(
                d.shards()
                    .iter()
                    .filter_map(|s| s.shard_id().map(str::to_owned)),
            );
            match d.last_evaluated_shard_id() {
                Some(l) if !l.is_empty() => start = Some(l.to_owned()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// A LATEST iterator for every listed shard. Every shard gets one, closed or not: dynoxide
    /// lists its open shard with an `EndingSequenceNumber`, so that field cannot tell a closed
    /// shard here; a closed shard's first GetRecords ends it.
    async fn latest_positions(&self, arn: &str) -> Result<BTreeMap<String, ShardPos>, MoveError> {
        let mut out = BTreeMap::new();
        for id in self.list_shards(arn).await? {
            let it = self
                .streams
                .get_shard_iterator()
                .stream_arn(arn)
                .shard_id(&id)
                .shard_iterator_type(ShardIteratorType::Latest)
                .send()
                .await
                .map_err(|e| AwsError::new(STREAMS, "GetShardIterator", arn, e))?;
            out.insert(
                id,
                ShardPos {
                    iterator: it.shard_iterator().map(str::to_owned),
                    iterator_ms: now_ms(),
                    ..ShardPos::default()
                },
            );
        }
        Ok(out)
    }

    async fn record_positions(&mut self) -> Result<(), MoveError> {
        let arn = self.record.forward.stream_arn.clone();
        self.record.forward.shards = self.latest_positions(&arn).await?;
        Ok(())
    }

    /// The parallel Scan: every item of the slots, written to the target as a snapshot row.
    async fn copy(&mut self) -> Result<(), MoveError> {
        let segments = self.record.scan.len();
        let state = Arc::new(Mutex::new(self.record.clone()));
        let rcu = Arc::new(Mutex::new(Pace::new(self.record.budget.rcu_per_sec)));
        let wcu = Arc::new(Mutex::new(Pace::new(self.record.budget.wcu_per_sec)));
        let work = (0..segments).map(|seg| {
            let state = state.clone();
            let (rcu, wcu) = (rcu.clone(), wcu.clone());
            let ddb = self.ddb.clone();
            let src = self.src.table.clone();
            let dst = self.dst.table.clone();
            let keys = self.dst.keys.clone();
            let slots = self.record.slots;
            async move {
                let (mut start, done) = {
                    let s = state.lock().await;
                    (
                        s.scan[seg].as_deref().and_then(decode_key),
                        s.scan_done[seg],
                    )
                };
                if done {
                    return Ok::<(), MoveError>(());
                }
                loop {
                    let out = ddb
                        .scan()
                        .table_name(&src)
                        .segment(seg as i32)
                        .total_segments(segments as i32)
                        .limit(100)
                        .consistent_read(true)
                        .return_consumed_capacity(ReturnConsumedCapacity::Total)
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(|e| AwsError::dynamodb("Scan", &src, e))?;
                    let used = out
                        .consumed_capacity()
                        .and_then(|c| c.capacity_units())
                        .unwrap_or(out.items().len().max(1) as f64 * 0.5);
                    rcu.lock().await.take(used).await;
                    let (mut copied, mut skipped) = (0u64, 0u64);
                    for item in out.items() {
                        let Some(pk) = pk_of(item) else { continue };
                        if is_internal(pk) || !slots.contains(slot_of(pk)) {
                            continue;
                        }
                        let v = if item.contains_key(TOMBSTONE_ATTR) {
                            Version::Tombstone(version(item))
                        } else {
                            Version::Live(version(item))
                        };
                        wcu.lock().await.take(1.0).await;
                        if apply_to(&ddb, &dst, &keys, item, v).await? {
                            copied += 1;
                        } else {
                            skipped += 1;
                        }
                    }
                    let next = out.last_evaluated_key().cloned();
                    let mut s = state.lock().await;
                    s.copied += copied;
                    s.skipped += skipped;
                    s.rcu += used;
                    s.wcu += (copied + skipped) as f64;
                    match &next {
                        Some(k) => s.scan[seg] = Some(encode_key(k)),
                        None => s.scan_done[seg] = true,
                    }
                    drop(s);
                    match next {
                        Some(k) => start = Some(k),
                        None => return Ok(()),
                    }
                }
            }
        });
        let res = try_join_all(work).await;
        let s = state.lock().await.clone();
        self.record.scan = s.scan;
        self.record.scan_done = s.scan_done;
        self.record.copied = s.copied;
        self.record.skipped = s.skipped;
        self.record.rcu = s.rcu;
        self.record.wcu = s.wcu;
        if let Err(e) = res {
            // Keep the finished pages: a resume continues from them.
            let _ = self.save().await;
            return Err(e);
        }
        self.say(&format!(
            "{}: copied {} items ({} skipped as older)",
            self.record.id, self.record.copied, self.record.skipped
        ));
        Ok(())
    }

    /// One poll of every shard of a tail; applies what it reads; returns records seen and
    /// whether the fence records (if `fence_to` is given) were among them.
    ///
    /// It lists the stream's shards when [`Self::listing_due`] says so, and otherwise reads
    /// the shards it knows.
    async fn poll(&mut self, way: Way) -> Result<(u64, Option<u64>, bool), MoveError> {
        let due = self.listing_due(way);
        self.poll_with(way, due).await
    }

    /// Whether a poll of `way` lists the stream's shards: the first time, after a known shard
    /// closed (its children are new shards), or [`LIST_INTERVAL`] after the last listing (a
    /// table whose partitions split opens shards without a known one closing first only when
    /// the tail started after the split).
    fn listing_due(&self, way: Way) -> bool {
        let tail = match way {
            Way::Forward => Some(&self.record.forward),
            Way::Reverse => self.record.reverse.as_ref(),
        };
        let Some(tail) = tail.filter(|t| !t.shards.is_empty()) else {
            return true;
        };
        match self.listed[way as usize] {
            None => true,
            Some((at, closed)) => tail.closed_shards() > closed || at.elapsed() >= LIST_INTERVAL,
        }
    }

    /// [`Self::poll`]; with `discover = false` it reads the shards the tail already knows
    /// without asking DescribeStream for new ones (the drain: one call fewer per round inside
    /// the pause; shards that appear later are read by the soak's polls).
    async fn poll_with(
        &mut self,
        way: Way,
        discover: bool,
    ) -> Result<(u64, Option<u64>, bool), MoveError> {
        let mut tail = match way {
            Way::Forward => self.record.forward.clone(),
            Way::Reverse => self.record.reverse.clone().unwrap_or_default(),
        };
        let (target, keys, fence_to) = match way {
            Way::Forward => (
                self.dst.table.clone(),
                self.dst.keys.clone(),
                self.dst.table.clone(),
            ),
            Way::Reverse => (
                self.src.table.clone(),
                self.src.keys.clone(),
                self.src.table.clone(),
            ),
        };
        // Shards that appeared since the positions were recorded are read from the start.
        let shard_ids: Vec<String> = if !discover && !tail.shards.is_empty() {
            tail.shards.keys().cloned().collect()
        } else {
            let ids = self.list_shards(&tail.stream_arn).await?;
            self.listed[way as usize] = Some((Instant::now(), tail.closed_shards()));
            ids
        };
        let mut seen = 0u64;
        let mut newest_age: Option<u64> = None;
        let mut full = false;
        for shard in shard_ids {
            let pos = tail.shards.entry(shard.clone()).or_default().clone();
            if pos.closed {
                continue;
            }
            let iterator = match (&pos.iterator, &pos.after_seq) {
                (Some(it), _) if now_ms().saturating_sub(pos.iterator_ms) < ITERATOR_TTL_MS => {
                    it.clone()
                }
                (_, seq) => {
                    let req = self
                        .streams
                        .get_shard_iterator()
                        .stream_arn(&tail.stream_arn)
                        .shard_id(&shard);
                    let req = match seq {
                        Some(s) => req
                            .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                            .sequence_number(s),
                        None => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
                    };
                    match req.send().await {
                        Ok(o) => match o.shard_iterator() {
                            Some(i) => i.to_owned(),
                            None => continue,
                        },
                        Err(e) => {
                            let err = AwsError::new(STREAMS, "GetShardIterator", &shard, e);
                            if err.code() == Some("TrimmedDataAccessException") {
                                return Err(MoveError::PositionExpired {
                                    id: self.record.id.clone(),
                                    shard,
                                });
                            }
                            return Err(err.into());
                        }
                    }
                }
            };
            tracing::debug!(%shard, "GetRecords");
            let out = match self
                .streams
                .get_records()
                .shard_iterator(&iterator)
                .limit(1_000)
                .send()
                .await
            {
                Ok(o) => o,
                Err(e) => {
                    let err = AwsError::new(STREAMS, "GetRecords", &shard, e);
                    if err.code() == Some("ExpiredIteratorException") {
                        // Re-issue from the last applied sequence number next poll.
                        tail.shards.insert(
                            shard.clone(),
                            ShardPos {
                                iterator: None,
                                ..pos
                            },
                        );
                        continue;
                    }
                    if err.code() == Some("TrimmedDataAccessException") {
                        return Err(MoveError::PositionExpired {
                            id: self.record.id.clone(),
                            shard,
                        });
                    }
                    return Err(err.into());
                }
            };
            let records = out.records().to_vec();
            tracing::debug!(n = records.len(), "GetRecords done");
            full |= records.len() >= 1_000;
            let fault = if records.is_empty() {
                BatchFault::Deliver
            } else {
                self.batches += 1;
                self.faults
                    .as_ref()
                    .map_or(BatchFault::Deliver, |f| f.batch(&shard, self.batches))
            };
            if fault == BatchFault::Lose {
                continue;
            }
            let times = if fault == BatchFault::Duplicate { 2 } else { 1 };
            let mut last_seq = pos.after_seq.clone();
            let mut ops = vec![];
            for _ in 0..times {
                for r in &records {
                    let Some(change) = r.dynamodb() else { continue };
                    last_seq = change.sequence_number().map(str::to_owned).or(last_seq);
                    if let Some(t) = change.approximate_creation_date_time() {
                        let age = now_ms()
                            .saturating_sub(u64::try_from(t.to_millis().unwrap_or(0)).unwrap_or(0));
                        newest_age = Some(newest_age.map_or(age, |a| a.min(age)));
                    }
                    let keys_img = change.keys().map(conv_map).unwrap_or_default();
                    let Some(pk) = pk_of(&keys_img).map(str::to_owned) else {
                        continue;
                    };
                    if is_internal(&pk) {
                        let new = change.new_image().map(conv_map).unwrap_or_default();
                        let to = new.get("to").and_then(|v| v.as_s().ok());
                        let fenced = pk
                            .strip_prefix(super::fence::INTERNAL_PREFIX)
                            .and_then(|p| p.strip_prefix("slot/"))
                            .and_then(|n| n.parse::<u16>().ok())
                            .filter(|n| self.record.slots.contains(*n));
                        if let (Some(n), true) = (fenced, to == Some(&fence_to)) {
                            tail.fence_slots.insert(n);
                            tail.fence_seen = u32::try_from(tail.fence_slots.len())
                                .unwrap_or(u32::MAX)
                                >= self.record.slots.len();
                        }
                        continue;
                    }
                    if !self.record.slots.contains(slot_of(&pk)) {
                        continue;
                    }
                    seen += 1;
                    let op = match (r.event_name(), way) {
                        (Some(OperationType::Remove), Way::Forward) => {
                            let old = change.old_image().map(conv_map).unwrap_or(keys_img.clone());
                            let v = version(&old);
                            Op::Apply(old, Version::Tombstone(v))
                        }
                        (Some(OperationType::Remove), Way::Reverse) => {
                            let old = change.old_image().map(conv_map).unwrap_or(keys_img.clone());
                            Op::Delete(keys_img.clone(), version(&old))
                        }
                        (_, Way::Reverse)
                            if change
                                .new_image()
                                .is_some_and(|n| n.contains_key(TOMBSTONE_ATTR)) =>
                        {
                            let new = change.new_image().map(conv_map).unwrap_or_default();
                            Op::Delete(keys_img.clone(), version(&new))
                        }
                        _ => {
                            let Some(new) = change.new_image().map(conv_map) else {
                                continue;
                            };
                            let v = if new.contains_key(TOMBSTONE_ATTR) {
                                Version::Tombstone(version(&new))
                            } else {
                                Version::Live(version(&new))
                            };
                            Op::Apply(new, v)
                        }
                    };
                    ops.push((encode_key(&keys_img), op));
                }
            }
            // Within one shard an item's changes arrive in the order they were made, so only
            // the last change of each key in this batch can win the apply rule: a hot key's
            // earlier changes would be refused or overwritten. Applying only the last one per
            // key keeps the result and cuts the writes by the key's repeats in the batch.
            let batch_len = ops.len();
            let mut last: HashMap<String, Op> = HashMap::with_capacity(batch_len);
            for (key, op) in ops {
                last.insert(key, op);
            }
            let superseded = batch_len - last.len();
            self.record.skipped += superseded as u64;
            let ops: Vec<Op> = last.into_values().collect();
            // The apply rule makes the order of applies irrelevant: run them concurrently.
            let results: Vec<Result<bool, MoveError>> =
                futures::stream::iter(ops.into_iter().map(|op| {
                    let (ddb, target, keys) = (self.ddb.clone(), target.clone(), keys.clone());
                    async move {
                        match op {
                            Op::Apply(item, v) => apply_to(&ddb, &target, &keys, &item, v).await,
                            Op::Delete(key, v) => delete_upto(&ddb, &target, key, v).await,
                        }
                    }
                }))
                .buffer_unordered(APPLY_CONCURRENCY)
                .collect()
                .await;
            for r in results {
                if r? {
                    self.record.applied += 1;
                    self.record.wcu += 1.0;
                } else {
                    self.record.skipped += 1;
                }
            }
            let next = out.next_shard_iterator().map(str::to_owned);
            tail.shards.insert(
                shard,
                ShardPos {
                    closed: next.is_none(),
                    iterator: next,
                    iterator_ms: now_ms(),
                    after_seq: last_seq,
                },
            );
        }
        match way {
            Way::Forward => self.record.forward = tail,
            Way::Reverse => self.record.reverse = Some(tail),
        }
        Ok((seen, newest_age, full))
    }

    /// Polls until a round reaches the head of every shard (no shard returned a full batch)
    /// with the newest record at most `lag_target` old, persisting the checkpoint each round.
    async fn catch_up(&mut self, way: Way) -> Result<(), MoveError> {
        let target = u64::try_from(self.record.budget.lag_target.as_millis()).unwrap_or(u64::MAX);
        for _ in 0..10_000 {
            let (seen, age, full) = self.poll(way).await?;
            tracing::debug!(seen, ?age, full, "catch-up round");
            if let Some(a) = age {
                self.record.lag_ms = Some(a);
            }
            self.save().await?;
            tracing::debug!("saved");
            if !full && age.is_none_or(|a| a <= target) {
                break;
            }
        }
        Ok(())
    }

    async fn scan_slots(
        &self,
        table: &str,
    ) -> Result<BTreeMap<String, HashMap<String, AttributeValue>>, MoveError> {
        let keys = &self.src.keys;
        let mut out = BTreeMap::new();
        let mut pace = Pace::new(self.record.budget.rcu_per_sec);
        let mut start = None;
        loop {
            let page = self
                .ddb
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("Scan", table, e))?;
            pace.take(page.items().len().max(1) as f64 * 0.5).await;
            for item in page.items() {
                let Some(pk) = pk_of(item) else { continue };
                if is_internal(pk)
                    || !self.record.slots.contains(slot_of(pk))
                    || item.contains_key(TOMBSTONE_ATTR)
                {
                    continue;
                }
                out.insert(encode_key(&keys.key_of(item)), item.clone());
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    async fn read(
        &self,
        table: &str,
        key: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, MoveError> {
        let Some(k) = decode_key(key) else {
            return Ok(None);
        };
        let out = self
            .ddb
            .get_item()
            .table_name(table)
            .set_key(Some(k))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", table, e))?;
        Ok(out.item.filter(|i| !i.contains_key(TOMBSTONE_ATTR)))
    }

    /// Compares both sides; differences are re-read after catching up again (live writes
    /// make a one-pass diff of a moving table noisy), up to 5 rounds.
    async fn diff(&mut self) -> Result<(), MoveError> {
        let source = self.scan_slots(&self.src.table.clone()).await?;
        let target = self.scan_slots(&self.dst.table.clone()).await?;
        let mut report = DiffReport {
            source_items: source.len() as u64,
            target_items: target.len() as u64,
            ..DiffReport::default()
        };
        // Under live writes the target may already be newer than the source's scan row.
        let behind = |a: &HashMap<String, AttributeValue>,
                      b: Option<&HashMap<String, AttributeValue>>| match b {
            None => true,
            Some(b) => version(b) < version(a) || (version(b) == version(a) && a != b),
        };
        let mut differing: Vec<String> = source
            .iter()
            .filter(|(k, v)| behind(v, target.get(*k)))
            .map(|(k, _)| k.clone())
            .chain(target.keys().filter(|k| !source.contains_key(*k)).cloned())
            .collect();
        for round in 1..=5 {
            report.rounds = round;
            if differing.is_empty() {
                break;
            }
            // Read the source, then tail past that read, then read the target: the target
            // must hold at least what the source held.
            let mut before = vec![];
            for k in &differing {
                before.push((k.clone(), self.read(&self.src.table, k).await?));
            }
            self.poll(Way::Forward).await?;
            let mut still = vec![];
            for (k, a) in before {
                let b = self.read(&self.dst.table, &k).await?;
                let differs = match (&a, &b) {
                    (Some(a), b) => behind(a, b.as_ref()),
                    (None, Some(_)) => self.read(&self.src.table, &k).await?.is_none(),
                    (None, None) => false,
                };
                if differs {
                    still.push((k, a, b));
                }
            }
            if round == 5 || still.is_empty() {
                for (k, a, b) in &still {
                    match (a, b) {
                        (Some(_), None) => report.missing += 1,
                        (None, Some(_)) => report.extra += 1,
                        _ => report.mismatched += 1,
                    }
                    if report.samples.len() < 5 {
                        report
                            .samples
                            .push(decode_key(k).map(|m| key_text(&m)).unwrap_or_default());
                    }
                }
            }
            differing = still.into_iter().map(|(k, _, _)| k).collect();
        }
        self.say(&format!(
            "{}: diff {} source / {} target items: {} missing, {} extra, {} mismatched",
            self.record.id,
            report.source_items,
            report.target_items,
            report.missing,
            report.extra,
            report.mismatched
        ));
        let clean = report.clean();
        self.record.diff = Some(report.clone());
        if !clean {
            self.save().await?;
            return Err(MoveError::DiffFailed {
                id: self.record.id.clone(),
                missing: report.missing,
                extra: report.extra,
                mismatched: report.mismatched,
                samples: report.samples,
            });
        }
        Ok(())
    }

    /// Waits out `max_age` since the mark (every router that honours it writes the range
    /// fenced), then writes the source's fence items: the pause starts.
    async fn fence(&mut self) -> Result<(), MoveError> {
        let ready = self
            .record
            .marked_ms
            .saturating_add(self.record.max_age_ms)
            .saturating_add(50);
        let now = now_ms();
        if now < ready {
            tokio::time::sleep(Duration::from_millis(ready - now)).await;
        }
        if self.record.mode == MoveMode::Copy {
            // Catch up to the head again (the diff took a while under live writes) so the
            // pause drains only the last few records: poll until a round reads no full batch
            // and at most PRE_FENCE_RECORDS records of the slots, at most 50 rounds.
            for _ in 0..50 {
                let (seen, _, full) = self.poll(Way::Forward).await?;
                if !full && seen <= PRE_FENCE_RECORDS {
                    break;
                }
            }
        }
        // Everything the flip needs that does not depend on the fence is read before it, out
        // of the pause: the target's stream position for reverse replication (nobody routes
        // the slots to the target before the flip, so an earlier position only replays the
        // mover's own applies, which the apply rule skips) and the map the flip is decided from.
        self.record_reverse().await?;
        self.map_at_fence = Some(self.dir.load().await?);
        let epoch = self
            .record
            .epoch
            .checked_add(1)
            .ok_or(heatsink_core::slots::SlotError::EpochOverflow)?;
        self.record.fenced_ms = Some(now_ms());
        let t = Instant::now();
        write_fences(
            &self.ddb,
            &self.src.table,
            &self.src.keys,
            self.record.slots,
            &FenceItem {
                to: self.dst.table.clone(),
                epoch,
            },
        )
        .await?;
        self.pause_part("fence", t);
        Ok(())
    }

    fn pause_part(&mut self, part: &str, since: Instant) {
        self.record.pause_parts_ms.insert(
            part.to_owned(),
            u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
        );
    }

    /// Records the target's stream position for reverse replication, once.
    async fn record_reverse(&mut self) -> Result<(), MoveError> {
        if self.record.reverse.is_none() {
            let arn = self.dst.require_stream()?.to_owned();
            let shards = self.latest_positions(&arn).await?;
            self.record.reverse = Some(Tail {
                stream_arn: arn,
                shards,
                ..Tail::default()
            });
        }
        Ok(())
    }

    /// Drains the source stream through the fence records, records the target's stream for
    /// reverse replication, and flips the directory in one transaction with the record.
    async fn flip(&mut self) -> Result<(), MoveError> {
        let t = Instant::now();
        if self.record.mode == MoveMode::Copy {
            // Poll tightly (the stream shards are known: no DescribeStream in the pause) until
            // the fence record of every slot of the range has been read: on a shard, every
            // write the source acknowledged for a slot precedes that slot's fence record.
            // A shard that closes in the pause (a DynamoDB Streams rollover) continues in a
            // child the tail does not know yet, and a fence record may land there: the round
            // after a known shard closes asks DescribeStream again, as does the first round
            // DRAIN_LIST_INTERVAL after the last listing.
            let mut rounds = 0u32;
            let mut discover = false;
            let mut listed = Instant::now();
            while !self.record.forward.fence_seen && rounds < DRAIN_ROUNDS {
                let closed = self.record.forward.closed_shards();
                self.poll_with(Way::Forward, discover).await?;
                if discover {
                    listed = Instant::now();
                }
                rounds += 1;
                discover = self.record.forward.closed_shards() > closed
                    || listed.elapsed() >= DRAIN_LIST_INTERVAL;
                if !self.record.forward.fence_seen {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            if !self.record.forward.fence_seen {
                // Flip anyway rather than keep the slots unwritable: the soak's forward tail
                // still applies whatever the drain did not reach (the apply rule keeps the
                // newest), but reads of the target can be behind until it does.
                tracing::warn!(
                    id = %self.record.id,
                    rounds,
                    "fence records not all seen in the drain; the soak's tail covers the rest"
                );
            }
            // With several shards, one more round over all of them (records of the slots on
            // a shard without fence records); the soak's forward tail covers the rest.
            if self.record.forward.shards.len() > 1 {
                self.poll_with(Way::Forward, false).await?;
            }
        }
        self.pause_part("drain", t);
        if self.record.reverse.is_none() {
            // A record fenced by an older mover: record it now, inside the pause.
            self.record_reverse().await?;
            self.save().await?;
        }
        let t = Instant::now();
        let mut cached = self.map_at_fence.take();
        let mut fresh = cached.is_none();
        loop {
            let map = match cached.take() {
                Some(m) => m,
                None => self.dir.load().await?,
            };
            let entry = map.entry_of(self.record.slots.first);
            if entry.owner == self.dst.table && entry.epoch == self.record.epoch + 1 {
                return Ok(()); // flipped before a crash; the record catches up below
            }
            let change = map.flip(self.record.slots, &self.record.id, &self.dst.table)?;
            let prev = self.record.rev;
            self.record.rev += 1;
            self.record.phase = Phase::Flipped;
            self.record.pause_ms = self.record.fenced_ms.map(|f| now_ms().saturating_sub(f));
            let put = self.record_put(prev)?;
            match self.dir.commit_with(&change, vec![put]).await {
                Ok(()) => break,
                // The map read before the fence went stale: decide again from a fresh read.
                Err(MoveError::Conflict { .. }) if !fresh => {
                    self.record.rev = prev;
                    self.record.phase = Phase::Fenced;
                    fresh = true;
                }
                Err(e) => return Err(e),
            }
        }
        self.pause_part("flip", t);
        self.say(&format!(
            "{}: flipped to {} at epoch {} (writes paused {} ms)",
            self.record.id,
            self.dst.table,
            self.record.epoch + 1,
            self.record.pause_ms.unwrap_or(0)
        ));
        Ok(())
    }

    /// Deletes every item of the slots on `table` (not fence items) at the WCU budget;
    /// `only_tombstones` keeps live items.
    async fn purge(
        &mut self,
        table: &str,
        keys: &KeySchema,
        only_tombstones: bool,
    ) -> Result<(), MoveError> {
        let mut pace = Pace::new(self.record.budget.wcu_per_sec);
        let mut start = None;
        loop {
            let page = self
                .ddb
                .scan()
                .table_name(table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("Scan", table, e))?;
            for item in page.items() {
                let Some(pk) = pk_of(item) else { continue };
                if is_internal(pk) || !self.record.slots.contains(slot_of(pk)) {
                    continue;
                }
                if only_tombstones && !item.contains_key(TOMBSTONE_ATTR) {
                    continue;
                }
                pace.take(1.0).await;
                let mut req = self
                    .ddb
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(keys.key_of(item)));
                if only_tombstones {
                    req = req
                        .condition_expression("attribute_exists(#t)")
                        .expression_attribute_names("#t", TOMBSTONE_ATTR);
                }
                match req.send().await {
                    Ok(_) => {
                        self.record.cleaned += 1;
                        self.record.wcu += 1.0;
                    }
                    Err(e) => {
                        let err = AwsError::dynamodb("DeleteItem", table, e);
                        if !err.is_conditional_check_failed() {
                            return Err(err.into());
                        }
                    }
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(());
            }
        }
    }

    /// Soak: both tails run (late source records forward, target writes back to the source
    /// so a rollback loses nothing). The `cleaning` phase is persisted after it, before the
    /// first delete.
    async fn soak(&mut self) -> Result<(), MoveError> {
        let until = Instant::now() + self.record.budget.soak;
        while Instant::now() < until {
            self.poll(Way::Forward).await?;
            self.poll(Way::Reverse).await?;
            self.save().await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // One last round over every listed shard before the source copy goes: a shard that
        // opened since the last listing may hold the slots' last writes.
        self.poll_with(Way::Forward, true).await?;
        self.poll_with(Way::Reverse, true).await?;
        Ok(())
    }

    /// Deletes the source's copy of the slots at the WCU budget, then the target's
    /// tombstones. Runs only from the persisted `cleaning` phase, with no tail running (a
    /// forward tail would read the purge's own deletes as changes), so an interrupted purge
    /// resumes as the same purge.
    async fn clean(&mut self) -> Result<(), MoveError> {
        let (src, keys) = (self.src.table.clone(), self.src.keys.clone());
        self.purge(&src, &keys, false).await?;
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, true).await
    }

    async fn finish(&mut self) -> Result<(), MoveError> {
        if self.record.mode == MoveMode::Attrition {
            let map = self.dir.load().await?;
            let entry = map.entry_of(self.record.slots.first);
            if entry.owner != self.dst.table {
                let change = map.flip(self.record.slots, &self.record.id, &self.dst.table)?;
                self.dir.commit(&change).await?;
            }
        }
        Ok(())
    }

    /// Abandons the move before the flip: removes the fence, unmarks the range and deletes
    /// what was copied to the target. Refused after the flip (use [`Mover::rollback`]).
    pub async fn abort(&mut self) -> Result<(), MoveError> {
        check_abort(&self.record.id, self.record.phase)?;
        let map = self.dir.load().await?;
        if map.entry_of(self.record.slots.first).owner == self.dst.table {
            // The flip committed but the record did not say so (a crash between the two).
            return Err(check_abort(&self.record.id, Phase::Flipped)
                .err()
                .map_or(MoveError::BadMove("flipped".into()), MoveError::Refused));
        }
        delete_fences(
            &self.ddb,
            &self.src.table,
            &self.src.keys,
            self.record.slots,
        )
        .await?;
        if let Some(c) = map.unmark(self.record.slots, &self.record.id)? {
            self.dir.commit(&c).await?;
        }
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, false).await?;
        self.record.phase = Phase::Aborted;
        self.save().await?;
        self.say(&format!(
            "{}: aborted; {} keeps slots {}",
            self.record.id, self.src.table, self.record.slots
        ));
        Ok(())
    }

    /// Returns the slots to the source after the flip: the same move in reverse (mark, wait
    /// `max_age`, catch up the reverse tail, fence the target, drain, flip to epoch + 2),
    /// then deletes the target's copy. Refused before the flip and after cleanup.
    pub async fn rollback(&mut self) -> Result<(), MoveError> {
        check_rollback(&self.record.id, self.record.phase)?;
        let back = self
            .record
            .epoch
            .checked_add(2)
            .ok_or(heatsink_core::slots::SlotError::EpochOverflow)?;
        let map = self.dir.load().await?;
        let entry = map.entry_of(self.record.slots.first).clone();
        if entry.owner == self.dst.table {
            if entry.state == RangeState::Stable {
                let c = map.mark_moving(self.record.slots, &self.record.id)?;
                self.dir.commit(&c).await?;
                self.record.marked_ms = now_ms();
                self.save().await?;
            }
            self.catch_up(Way::Reverse).await?;
            let ready = self
                .record
                .marked_ms
                .saturating_add(self.record.max_age_ms)
                .saturating_add(50);
            let now = now_ms();
            if now < ready {
                tokio::time::sleep(Duration::from_millis(ready - now)).await;
            }
            write_fences(
                &self.ddb,
                &self.dst.table,
                &self.dst.keys,
                self.record.slots,
                &FenceItem {
                    to: self.src.table.clone(),
                    epoch: back,
                },
            )
            .await?;
            let mut rounds = 0;
            while !self.record.reverse.as_ref().is_some_and(|t| t.fence_seen) && rounds < 2_000 {
                self.poll(Way::Reverse).await?;
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.poll(Way::Reverse).await?;
            // Flip back to the source at epoch + 2.
            let map = self.dir.load().await?;
            let mut change = map.flip(self.record.slots, &self.record.id, &self.src.table)?;
            if let Some(e) = change.edits.first_mut().and_then(|e| e.after.as_mut()) {
                e.epoch = back;
            }
            self.dir.commit(&change).await?;
        }
        delete_fences(
            &self.ddb,
            &self.src.table,
            &self.src.keys,
            self.record.slots,
        )
        .await?;
        let (dst, keys) = (self.dst.table.clone(), self.dst.keys.clone());
        self.purge(&dst, &keys, false).await?;
        self.record.phase = Phase::RolledBack;
        self.save().await?;
        self.say(&format!(
            "{}: rolled back; {} owns slots {} at epoch {back}",
            self.record.id, self.src.table, self.record.slots
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_checkpoints_round_trip_every_key_type() {
        let key = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("a{b}".into())),
            ("sk".to_owned(), AttributeValue::N("12".into())),
            ("b".to_owned(), AttributeValue::B(vec![0u8, 7].into())),
        ]);
        assert_eq!(decode_key(&encode_key(&key)), Some(key));
        assert_eq!(decode_key("not json"), None);
    }
}
