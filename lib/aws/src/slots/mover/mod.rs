//! The live move: a persisted, resumable state machine that copies a slot range to another
//! table while it takes writes, then fences, proves, flips, and keeps rollback possible until
//! cleanup begins.
//!
//! Each call of [`Mover::step`] does the work of one [`Phase`] and persists the move record
//! (pk `move`, sk = id in the directory table). The rules are pure and live in
//! `heatsink_core::slots` (the phases and when a tail may run or a delete may happen, the
//! drain's proof, the tail's writes, the lease, the backoff); this module carries them out, one
//! file per job: [`lease`](self) (the record and the lease), `copy`, `tail`, `apply`, `diff`,
//! `cutover` (mark wait, fence, drain, flip, both ways) and `cleanup` (soak, purge, abort).
//!
//! | phase reached | work done by the step | safe to repeat because |
//! |---|---|---|
//! | `planned` | range isolated and marked moving with the record and the lease, one transaction | conditional on version and signatures |
//! | `recorded` | a LATEST iterator per source stream shard | older positions only replay more |
//! | `copied` | parallel Scan within the RCU budget, rows written under the apply rule; the forward tail read every minute so its iterators stay fresh | the apply rule; per-segment checkpoints |
//! | `caught_up` | tail until a poll round is empty and recent | the apply rule |
//! | `diffed` | both sides compared, differences re-read after catching up | read-only |
//! | `fenced` | `max_age` after the mark, the source's fence items, conditional on the range still marked by this move and on the lease | the same items; a new attempt's token |
//! | `flipped` | drain until every source stream shard is **proven** read past the fence, then the flip to epoch + 1 with the record | the proof is per attempt; the flip is conditional |
//! | `cleaning` | soak (reverse tail; `max_age` at least), markers removed | read-only for the data |
//! | `cleaned` | the source's copy deleted (transactions carrying the lease check), the target's tombstones | only in `cleaning`, with the proof recorded |
//!
//! `abort` (before the flip) persists `aborting` before it deletes the target's copy and this
//! move's fence items, and unmarks the range in one transaction with `aborted`. `rollback`
//! (after the flip, before cleanup) is the cut-over in reverse: `rolling_back` (mark, its wait
//! saved with it), `rollback_fenced`, `rollback_flipped` (drain proven, flip to epoch + 2),
//! `rollback_cleaning` (after the reverse soak, before the target's copy is deleted).
//!
//! **No timer decides a delete or a flip.** A drain that has not proven every shard within
//! [`Limits::drain_deadline`] stops with [`MoveError::Unproven`] (nothing flipped, nothing
//! deleted; the next command named). A call that keeps failing transiently is retried with
//! capped, jittered backoff ([`Limits::backoff`]) and stops with [`MoveError::Stalled`] once its
//! deadline passes. One controller runs a move at a time: [`Mover::run`], [`Mover::step`],
//! [`Mover::abort`] and [`Mover::rollback`] take the move's lease first, and a second controller
//! is refused with [`MoveError::Held`].
//!
//! Limits: one reader per stream shard (DynamoDB Streams allows 2 per shard: keep at most one
//! other, e.g. the aggregator); a position older than 24 h is [`MoveError::PositionExpired`];
//! the copy scans the whole source table (slots are hashes, so no key range selects them); the
//! diff holds the moved slots' keys in memory; items of the moved slots must carry a numeric
//! version `v` that rises with each change ([`MoveError::Unversioned`] otherwise). Listings stay
//! under the service's 10 `DescribeStream` calls per second: a tail lists at most once a second
//! (4 times a second in the drain) unless a known shard closed. The emulators give a table's
//! stream one shard; the `sim_` integration tests run moves through the stream-shape simulator
//! (several shards, rollovers).

mod apply;
mod calls;
mod cleanup;
mod copy;
mod cutover;
mod diff;
mod lease;
mod tail;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use heatsink_core::slots::backoff::Backoff;
use heatsink_core::slots::{
    MoveMode, Path, Phase, RangeState, SlotMap, SlotRange, check_abort, check_resume,
    check_rollback,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::calls::{CallTimeouts, bounded_ddb, bounded_streams};
use super::fence::TableInfo;
pub use super::record::{Budget, DiffReport, MoveRecord, RollbackTimes, ShardPos, Tail};
use super::{MoveError, SlotDirectory};
use crate::clock::now_ms;

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

/// How one controller runs a move (not persisted: another controller may use others).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// How long the lease lasts without renewal (renewed every third of it). A controller
    /// killed outright blocks others for at most this long.
    pub lease_ttl: Duration,
    /// Retries of one failing call (throttling, timeouts, dispatch failures).
    pub backoff: Backoff,
    /// How long a drain (the slots are fenced: writes to them are refused) may run without
    /// proving every stream shard read past the fence before the mover stops and says so.
    pub drain_deadline: Duration,
    /// Timeouts of every SDK call.
    pub timeouts: CallTimeouts,
    /// This controller's name in the lease (`host:pid:random` by default).
    pub holder: String,
}

impl Default for Limits {
    /// A 20 s lease, the default backoff (2 minutes per call), a 30 s drain.
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(20),
            backoff: Backoff::default(),
            drain_deadline: Duration::from_secs(30),
            timeouts: CallTimeouts::default(),
            holder: format!(
                "{}:{}:{:08x}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into()),
                std::process::id(),
                rand::random::<u32>()
            ),
        }
    }
}

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
    /// Drop the reply: nothing applied, the checkpoint stays, the batch is read again (returned
    /// for one shard again and again, a shard that lags behind the others).
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
    limits: Limits,
    /// The lease while this mover holds it (renewed in the background; dropped with the mover).
    lease: Option<lease::Keeper>,
    /// The map read just before the fence, so the flip does not read it inside the pause (a
    /// change since then makes the flip's transaction fail, and the flip reads it again).
    map_at_fence: Option<SlotMap>,
    /// The token of the fence this mover wrote (a resumed mover fences again with its own).
    fenced: Option<u64>,
    /// Per tail (forward, reverse): when its shards were last listed and how many of them were
    /// closed then (a shard closing since makes the next poll list again, whatever the time).
    listed: [Option<(Instant, usize)>; 2],
    /// The shard listing of each stream the tails read, by stream ARN.
    listings: std::sync::Mutex<BTreeMap<String, crate::ddb::stream_listing::StreamListing>>,
}

impl std::fmt::Debug for Mover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mover")
            .field("record", &self.record)
            .finish()
    }
}

fn new_id() -> String {
    format!("mv-{}-{:04x}", now_ms(), rand::random::<u16>())
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Before anything is recorded: refuses a copy the target's on-demand maximum would throttle
/// for its whole run, and with [`Budget::prewarm`] raises the target's warm throughput
/// ([`heatsink_core::warm::copy_plan`]; an attrition move has no copy rates, only the
/// source's warm throughput to match).
async fn prepare_target(
    ctx: &calls::Ctx,
    ddb: &aws_sdk_dynamodb::Client,
    spec: &MoveSpec,
    src: &TableInfo,
    dst: &TableInfo,
) -> Result<(), MoveError> {
    use crate::schema::warm::{self, Capacity, WarmError};
    // An attrition move copies nothing: only a copy has rates the target must take.
    let copy = match spec.mode {
        MoveMode::Copy => Capacity::per_second(spec.budget.rcu_per_sec, spec.budget.wcu_per_sec),
        MoveMode::Attrition => Capacity::default(),
    };
    let plan =
        heatsink_core::warm::copy_plan(copy, &src.capacity, &dst.capacity, spec.budget.prewarm);
    if let Some(r) = plan.refusals.first() {
        return Err(MoveError::BadTable {
            table: spec.to.clone(),
            reason: format!(
                "{r}; lower the copy's rate (--rcu/--wcu) or raise the target's maximum"
            ),
        });
    }
    ctx.retry(|| async {
        warm::raise(ddb, &spec.to, &plan)
            .await
            .map_err(|e| match e {
                WarmError::Aws(a) => MoveError::from(a),
                other => MoveError::BadTable {
                    table: spec.to.clone(),
                    reason: other.to_string(),
                },
            })
    })
    .await?;
    Ok(())
}

impl Mover {
    /// Checks the request, isolates the range, and marks it moving in one transaction with the
    /// move record and this controller's lease (phase `planned`). Nothing is copied yet: call
    /// [`Mover::run`] or [`Mover::step`].
    pub async fn start(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        spec: MoveSpec,
    ) -> Result<Mover, MoveError> {
        Self::start_with(ddb, streams, dir, spec, Limits::default()).await
    }

    /// [`Mover::start`] with this controller's [`Limits`].
    pub async fn start_with(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        spec: MoveSpec,
        limits: Limits,
    ) -> Result<Mover, MoveError> {
        let ddb = bounded_ddb(&ddb, limits.timeouts);
        let streams = bounded_streams(&streams, limits.timeouts);
        let dir = SlotDirectory::new(ddb.clone(), dir.table());
        // Its reads are retried as every call of a move is; nothing is written before the record.
        let ctx = calls::Ctx::before_record(limits.backoff);
        let map = ctx.retry(|| dir.load()).await?;
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
        let src = ctx
            .retry(|| TableInfo::describe(&ddb, &entry.owner))
            .await?;
        let dst = ctx.retry(|| TableInfo::describe(&ddb, &spec.to)).await?;
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
        prepare_target(&ctx, &ddb, &spec, &src, &dst).await?;
        // Slots still read on older tables by attrition moves: a copy carries those tables'
        // items along (an attrition move needs nothing: the router reads the chain).
        let carried = if spec.mode == MoveMode::Copy {
            let list = ctx.retry(|| dir.moves()).await?;
            super::record::attrition_chain(&list.records, spec.slots.first, &entry.owner)
        } else {
            vec![]
        };
        for table in &carried {
            let info = ctx.retry(|| TableInfo::describe(&ddb, table)).await?;
            if info.keys != src.keys {
                return Err(MoveError::BadTable {
                    table: table.clone(),
                    reason: format!(
                        "an attrition move left slots {} readable there, and its key schema differs from {}'s",
                        spec.slots, src.table
                    ),
                });
            }
        }
        let id = new_id();
        let segments = spec.budget.segments.clamp(1, 64) as usize;
        let marked_ms = now_ms();
        let record = MoveRecord {
            id: id.clone(),
            slots: spec.slots,
            from: entry.owner.clone(),
            to: spec.to.clone(),
            mode: spec.mode,
            strict: map.strict,
            keying: map.keying.clone(),
            phase: Phase::Planned,
            epoch: entry.epoch,
            marked_ms,
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
            created_ms: marked_ms,
            // Saved with the mark: the mark committed at the latest when its call timed out.
            ready_ms: marked_ms
                .saturating_add(ms(limits.timeouts.operation))
                .saturating_add(map.max_age_ms),
            rollback: None,
            fence_tokens: vec![],
            carried,
        };
        let mut map = map;
        for _ in 0..10 {
            match map.isolate(spec.slots)? {
                None => break,
                Some(c) => match dir.commit(&c).await {
                    Ok(()) => {}
                    Err(MoveError::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                },
            }
            map = dir.load().await?;
        }
        let mark = map.mark_moving(spec.slots, &id)?;
        let mut mover = Mover::with_parts(ddb, streams, dir, record, src, dst, limits);
        let lease = mover.first_lease();
        mover.record.rev = 1;
        let put = mover.record_put(0, &lease)?;
        mover.dir.commit_with(&mark, vec![put]).await?;
        // The mark committed before its call returned: routers that honour `max_age` write
        // the range fenced from `max_age` after now.
        mover.record.ready_ms = now_ms().saturating_add(mover.record.max_age_ms);
        mover.keep(lease);
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
        limits: Limits,
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
            limits,
            lease: None,
            map_at_fence: None,
            fenced: None,
            listed: [None, None],
            listings: std::sync::Mutex::default(),
        }
    }

    /// Opens a persisted move (to resume, abort or roll it back). Reads only: the lease is
    /// taken by the first step.
    pub async fn open(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        id: &str,
    ) -> Result<Mover, MoveError> {
        Self::open_with(ddb, streams, dir, id, Limits::default()).await
    }

    /// [`Mover::open`] with this controller's [`Limits`].
    pub async fn open_with(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
        id: &str,
        limits: Limits,
    ) -> Result<Mover, MoveError> {
        let ddb = bounded_ddb(&ddb, limits.timeouts);
        let streams = bounded_streams(&streams, limits.timeouts);
        let dir = SlotDirectory::new(ddb.clone(), dir.table());
        let record = dir.move_record(id).await?;
        let src = TableInfo::describe(&ddb, &record.from).await?;
        let dst = TableInfo::describe(&ddb, &record.to).await?;
        Ok(Mover::with_parts(
            ddb, streams, dir, record, src, dst, limits,
        ))
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

    /// Sets this controller's [`Limits`] (lease, backoff, drain deadline; the timeouts apply to
    /// movers opened or started with them).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The move's persisted state.
    pub fn record(&self) -> &MoveRecord {
        &self.record
    }

    /// Test hook: makes the recorded stream iterators look `by` older than they are (a copy
    /// that outlived an iterator's 15 minutes).
    #[doc(hidden)]
    pub fn age_stream_positions(&mut self, by: Duration) {
        let by = ms(by);
        for pos in self.record.forward.shards.values_mut() {
            pos.iterator_ms = pos.iterator_ms.saturating_sub(by);
        }
    }

    fn say(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
    }

    /// The command that continues the move from where it is.
    fn next_command(&self) -> String {
        match self.record.phase.path() {
            Path::Forward => format!("heatsink move resume {}", self.record.id),
            Path::Abort => format!("heatsink move abort {}", self.record.id),
            Path::Rollback => format!("heatsink move rollback {}", self.record.id),
        }
    }

    /// Runs the steps of the path the move is on (forward, or an abort or rollback that was
    /// interrupted) until it ends; releases the lease when it stops, however it stops.
    pub async fn run(&mut self) -> Result<&MoveRecord, MoveError> {
        let res = self.run_inner().await;
        self.release().await;
        res?;
        Ok(&self.record)
    }

    async fn run_inner(&mut self) -> Result<(), MoveError> {
        check_resume(&self.record.id, self.record.phase)?;
        self.hold().await?;
        while !self.record.phase.is_final() {
            let path = self.record.phase.path();
            self.advance(path).await?;
        }
        Ok(())
    }

    /// Does the work of the next phase on the path the move is on and persists it; returns the
    /// phase reached. Keeps the lease (a killed mover's lease ends after [`Limits::lease_ttl`]).
    pub async fn step(&mut self) -> Result<Phase, MoveError> {
        check_resume(&self.record.id, self.record.phase)?;
        self.hold().await?;
        let path = self.record.phase.path();
        self.advance(path).await
    }

    /// Does the work of the next phase on `path` and persists it: an abort or a rollback taken
    /// one step at a time ([`Mover::step`] follows the path the move is on).
    pub async fn step_on(&mut self, path: Path) -> Result<Phase, MoveError> {
        let id = self.record.id.clone();
        match path {
            Path::Abort => check_abort(&id, self.record.phase)?,
            Path::Rollback => check_rollback(&id, self.record.phase)?,
            Path::Forward => check_resume(&id, self.record.phase)?,
        }
        self.hold().await?;
        self.advance(path).await
    }

    /// Abandons the move before the flip: deletes the target's copy and this move's fence
    /// items, then unmarks the range (one transaction with the record). Refused after the flip
    /// (use [`Mover::rollback`]); finishes an interrupted abort.
    pub async fn abort(&mut self) -> Result<(), MoveError> {
        let res = self.walk(Path::Abort).await;
        self.release().await;
        res?;
        self.say(&format!(
            "{}: aborted; {} keeps slots {}",
            self.record.id, self.src.table, self.record.slots
        ));
        Ok(())
    }

    /// Returns the slots to the source after the flip: the cut-over in reverse (mark, wait
    /// `max_age`, catch the reverse tail up, fence the target, drain it with the same proof,
    /// flip to epoch + 2, soak), then deletes the target's copy. Refused before the flip and
    /// once cleanup has begun; finishes an interrupted rollback.
    pub async fn rollback(&mut self) -> Result<(), MoveError> {
        let res = self.walk(Path::Rollback).await;
        self.release().await;
        res?;
        self.say(&format!(
            "{}: rolled back; {} owns slots {} at epoch {}",
            self.record.id,
            self.src.table,
            self.record.slots,
            self.record.epoch.saturating_add(2)
        ));
        Ok(())
    }

    async fn walk(&mut self, path: Path) -> Result<(), MoveError> {
        let id = self.record.id.clone();
        match path {
            Path::Abort => check_abort(&id, self.record.phase)?,
            Path::Rollback => check_rollback(&id, self.record.phase)?,
            Path::Forward => check_resume(&id, self.record.phase)?,
        }
        self.hold().await?;
        // The record as the lease found it: check again (another controller may have moved on).
        match path {
            Path::Abort => check_abort(&id, self.record.phase)?,
            Path::Rollback => check_rollback(&id, self.record.phase)?,
            Path::Forward => check_resume(&id, self.record.phase)?,
        }
        while !self.record.phase.is_final() {
            self.advance(path).await?;
        }
        Ok(())
    }

    /// One step along `path`.
    async fn advance(&mut self, path: Path) -> Result<Phase, MoveError> {
        let phase = self.record.phase;
        let Some(next) = phase.next_on(path, self.record.mode) else {
            return Ok(phase);
        };
        let started = Instant::now();
        let res = self.work(phase, next, path).await;
        let res = match res {
            Err(e) if e.is_transient() => Err(self.stalled(e.to_string(), Duration::ZERO)),
            other => other,
        };
        res?;
        if self.record.phase != next {
            // Steps whose phase commits with a directory change have set it already.
            let t = Instant::now();
            self.enter(next, started).await?;
            if matches!(next, Phase::Fenced | Phase::RollbackFenced) {
                self.pause_part("save", t);
            }
        } else {
            self.note_phase(next, started);
            self.say(&format!("{}: {}", self.record.id, next.name()));
        }
        Ok(next)
    }

    async fn work(&mut self, phase: Phase, next: Phase, path: Path) -> Result<(), MoveError> {
        use Phase::*;
        match (phase, next, path) {
            (_, Recorded, _) => self.record_positions().await,
            (_, Copied, _) => self.copy().await,
            (_, CaughtUp, _) => self.catch_up(super::Way::Forward).await,
            (_, Diffed, _) => self.diff().await,
            (_, Fenced, _) => self.fence(super::Way::Forward).await,
            (_, Flipped, _) => self.drain_and_flip(super::Way::Forward).await,
            (Flipped, Cleaning, _) => self.soak_forward().await,
            (_, Cleaned, _) => self.clean().await,
            (_, Done, _) => Ok(()),
            (_, Aborting, _) => self.begin_abort().await,
            (_, Aborted, _) => self.finish_abort().await,
            (_, RollingBack, _) => self.mark_rollback().await,
            (_, RollbackFenced, _) => self.fence(super::Way::Reverse).await,
            (_, RollbackFlipped, _) => self.drain_and_flip(super::Way::Reverse).await,
            (_, RollbackCleaning, _) => self.soak_reverse().await,
            (_, RolledBack, _) => self.finish_rollback().await,
            (p, n, _) => Err(MoveError::BadMove(format!(
                "move {}: no step from {} to {}",
                self.record.id,
                p.name(),
                n.name()
            ))),
        }
    }

    /// The error that stops a move whose call kept failing.
    fn stalled(&self, cause: String, waited: Duration) -> MoveError {
        MoveError::Stalled {
            id: self.record.id.clone(),
            phase: self.record.phase.name(),
            cause,
            waited_ms: ms(waited),
            command: self.next_command(),
        }
    }

    fn note_phase(&mut self, phase: Phase, started: Instant) {
        self.record
            .phase_ms
            .insert(phase.name().to_owned(), ms(started.elapsed()));
    }

    /// Persists `phase`. When the save fails the move stays, in memory as in the table, in the
    /// phase it was in, and a stop names that phase.
    async fn enter(&mut self, phase: Phase, started: Instant) -> Result<(), MoveError> {
        let before = self.record.phase;
        self.record.phase = phase;
        self.note_phase(phase, started);
        if let Err(e) = self.save().await {
            self.record.phase = before;
            return Err(match e {
                MoveError::Stalled {
                    id,
                    cause,
                    waited_ms,
                    ..
                } => MoveError::Stalled {
                    id,
                    phase: before.name(),
                    cause,
                    waited_ms,
                    command: self.next_command(),
                },
                other => other,
            });
        }
        self.say(&format!("{}: {}", self.record.id, phase.name()));
        Ok(())
    }

    fn pause_part(&mut self, part: &str, since: Instant) {
        let parts = match self.record.phase.path() {
            Path::Rollback => match self.record.rollback.as_mut() {
                Some(r) => &mut r.pause_parts_ms,
                None => &mut self.record.pause_parts_ms,
            },
            _ => &mut self.record.pause_parts_ms,
        };
        parts.insert(part.to_owned(), ms(since.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: T) {}

    /// A mover can run on a spawned task: its commands' futures are `Send` (a closure whose
    /// future borrowed a captured slice made them not, for every lifetime).
    #[allow(dead_code, unused_must_use)]
    fn commands_can_run_on_a_spawned_task(m: &mut Mover) {
        is_send(m.run());
        is_send(m.step());
        is_send(m.abort());
        is_send(m.rollback());
    }
}
