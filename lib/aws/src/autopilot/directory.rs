//! One period of a slot directory's autopilot: settle the operation in flight from the move
//! records, or measure, plan, decide and — acting — record the operation before its first move,
//! then run its moves through the mover.
//!
//! A period, in order:
//!
//! 1. reads the loop's state and kill switch ([`PilotStore::load`], in the directory's table)
//!    and the directory's map;
//! 2. if an operation is in flight, proves how far it got from the directory's move records
//!    ([`progress`]): every piece's move `done` (or one `aborted` or `rolled_back`) ends it;
//!    otherwise the loop holds, and — acting, not paused — **continues it**: resumes the move
//!    that has not ended ([`Mover::open_with`] then [`Mover::run`]: the mover's own proof of
//!    every phase, its lease refusing a second controller) and starts the next piece's move.
//!    No timer ends an operation, and a period that died anywhere in it leaves nothing the next
//!    cannot continue;
//! 3. otherwise reads the load ([`Load`]: per-slot samples, or each owner's consumed write
//!    capacity from CloudWatch) and decides ([`directory_period`]: proposals planned around
//!    the spans still cooling, the governor's sustain, cooldown, budgets, kill switch, dry run);
//! 4. saves the state conditionally on the revision read — with the operation (every piece and
//!    its target) in flight when it acts — and only then starts the first move. A period that
//!    lost the save starts nothing.
//!
//! ```no_run
//! use heatsink::autopilot::directory::{DirectoryLoop, Load};
//! use heatsink::slots::SlotDirectory;
//! # async fn f(ddb: aws_sdk_dynamodb::Client, streams: aws_sdk_dynamodbstreams::Client)
//! #     -> Result<(), heatsink::autopilot::AutopilotError> {
//! let dir = SlotDirectory::new(ddb.clone(), "places-slots");
//! let pilot = DirectoryLoop::new(ddb, streams, dir); // a dry run
//! let load = Load::Slots([(0u16, 900.0), (9_000, 100.0)].into());
//! let period = pilot.run(heatsink::clock::now_ms(), load).await?;
//! for line in period.lines() {
//!     tracing::info!("{line}");
//! }
//! # Ok(()) }
//! ```
//!
//! Limits: one operation in flight per directory, its moves run one after another (each is a
//! whole live move: a copy of the slots, a fenced cut-over proven per stream shard, a soak and
//! a cleanup); a period runs moves until its caller cuts it (the Lambda function stops before
//! its deadline, and the next period continues from the records); the load is what the samples
//! or the last `minutes` of CloudWatch say.

use std::collections::BTreeMap;

use serde::Serialize;

use super::progress::{MoveSeen, Progress, progress};
use super::propose::{DirectoryPeriod, Relative, directory_period};
use super::store::PilotStore;
use super::{AutopilotError, Decision, HoldReason, PilotConfig, Started, Wait};
use crate::metrics::{Emf, MetricDef};
use crate::slots::mover::{Budget, Limits, MoveProgress, MoveSpec, Mover};
use crate::slots::{MoveError, MoveMode, SlotDirectory, SlotMap};

/// Where a period's per-slot load comes from.
#[derive(Debug, Clone)]
pub enum Load {
    /// Per-slot load (a samples file's, a sampler's report).
    Slots(BTreeMap<u16, f64>),
    /// Each owner table's consumed write capacity over the last `minutes`
    /// ([`super::measure::owner_wcu`]), spread over its slots, with `sampled` (per-slot load
    /// of the hot keys, possibly empty) naming the slots within an owner that carry it
    /// ([`super::propose::estimate_slot_load`]).
    #[cfg(feature = "insights")]
    #[cfg_attr(docsrs, doc(cfg(feature = "insights")))]
    CloudWatch {
        /// The CloudWatch client.
        client: aws_sdk_cloudwatch::Client,
        /// Minutes measured (1–1,440).
        minutes: u32,
        /// Per-slot load of sampled hot keys.
        sampled: BTreeMap<u16, f64>,
    },
}

/// One directory's control loop (see the module docs).
#[derive(Clone)]
pub struct DirectoryLoop {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    dir: SlotDirectory,
    store: PilotStore,
    /// The governor's rules (default: sustained 2 periods, 30 min cooldown, 4 an hour, 10 a
    /// day, one owner an operation, dry run).
    pub pilot: PilotConfig,
    /// Tables that own no slots yet and may take some.
    pub spare: Vec<String>,
    /// The balance line relative to the mean owner load.
    pub relative: Relative,
    /// Each move's rates and soak.
    pub budget: Budget,
    /// How this controller runs moves (lease, backoff, drain deadline, call timeouts).
    pub limits: Limits,
    /// Where the moves' progress lines go.
    pub progress: Option<MoveProgress>,
    /// How long a period may run moves before it stops them where they are (each move's
    /// record holds its last phase; the next acting period continues from it, once the cut
    /// move's lease has run out): a Lambda function's time left less a margin. `None`: until
    /// the operation ends.
    pub move_time: Option<std::time::Duration>,
}

impl std::fmt::Debug for DirectoryLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryLoop")
            .field("table", &self.dir.table())
            .field("pilot", &self.pilot)
            .field("spare", &self.spare)
            .finish()
    }
}

/// What one period saw and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DirectoryReport {
    /// The directory's table.
    pub table: String,
    /// The kill switch, if set.
    pub paused: Option<String>,
    /// The operation that was in flight, and how far its move records proved it got.
    pub settled: Option<(String, Progress)>,
    /// The plan and the governor's decision (none while an operation is in flight).
    pub decided: Option<DirectoryPeriod>,
    /// The operation this period recorded (before its first move started).
    pub started: Option<Started>,
    /// The moves this period ran to their end, in order.
    pub moved: Vec<String>,
    /// The operation that ended in this period, and what its records proved.
    pub ended: Option<(String, Progress)>,
    /// False when another period saved the state first (this one started nothing), or when
    /// nothing was to be saved.
    pub saved: bool,
    /// The period stopped its moves at [`DirectoryLoop::move_time`]: the operation stays in
    /// flight, and the next acting period continues it.
    pub cut: bool,
}

impl DirectoryLoop {
    /// The loop of `dir` (its state in the directory's table) with the default rules: a dry
    /// run.
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        dir: SlotDirectory,
    ) -> Self {
        Self {
            store: PilotStore::new(dir.client().clone(), dir.table()),
            ddb,
            streams,
            dir,
            pilot: PilotConfig::default(),
            spare: vec![],
            relative: Relative::default(),
            budget: Budget::default(),
            limits: Limits::default(),
            progress: None,
            move_time: None,
        }
    }

    /// This period's decision from `load`, as [`DirectoryLoop::run`] would make it; saves,
    /// starts and continues nothing.
    pub async fn plan(&self, now_ms: u64, load: Load) -> Result<DirectoryReport, AutopilotError> {
        self.period(now_ms, load, false).await
    }

    /// One period (see the module docs).
    pub async fn run(&self, now_ms: u64, load: Load) -> Result<DirectoryReport, AutopilotError> {
        self.period(now_ms, load, true).await
    }

    async fn period(
        &self,
        now_ms: u64,
        load: Load,
        record: bool,
    ) -> Result<DirectoryReport, AutopilotError> {
        let stored = self.store.load().await?;
        let mut state = stored.state.clone();
        let mut out = DirectoryReport {
            table: self.dir.table().to_owned(),
            paused: state.paused.clone(),
            ..DirectoryReport::default()
        };
        let acting = record && self.pilot.act;
        if let Some(op) = state.in_flight.clone() {
            let got = self.progress_of(&op).await?;
            out.settled = Some((op.id.clone(), got.clone()));
            if got.ended() {
                state.finished(&op.id);
                out.ended = Some((op.id.clone(), got));
            } else {
                if acting && state.paused.is_none() && got != Progress::Unknown {
                    self.carry(&op, got, &mut out).await?;
                }
                return Ok(out);
            }
        }
        let map = self.dir.load().await.map_err(|e| self.failed(None, e))?;
        let load = self.slot_load(load, &map, now_ms).await?;
        let cfg = PilotConfig {
            act: acting,
            ..self.pilot
        };
        let d = directory_period(
            &map,
            &self.spare,
            &load,
            &self.relative,
            &cfg,
            &state,
            now_ms,
        )?;
        if !record {
            out.decided = Some(d);
            return Ok(out);
        }
        state.streaks = d.period.streaks.clone();
        if let Some(op) = &d.operation {
            // Recorded before the first move starts: a period that dies from here on leaves it
            // in flight, and the next period proves from the move records how far it got.
            state.record(op.clone());
        }
        out.saved = self.store.save(&state, stored.rev).await?;
        let op = d.operation.clone();
        out.decided = Some(d);
        if let (Some(op), true) = (op, out.saved) {
            out.started = Some(op.clone());
            // Nothing of it has started: its first piece is next.
            self.carry(&op, Progress::Next { index: 0 }, &mut out)
                .await?;
        }
        Ok(out)
    }

    /// How far `op` got, from the directory's move records.
    async fn progress_of(&self, op: &Started) -> Result<Progress, AutopilotError> {
        let list = self.dir.moves().await.map_err(|e| self.failed(None, e))?;
        let seen: Vec<MoveSeen> = list
            .records
            .iter()
            .map(|r| MoveSeen {
                id: r.id.clone(),
                slots: r.slots,
                to: r.to.clone(),
                marked_ms: r.marked_ms,
                phase: r.phase,
            })
            .collect();
        Ok(progress(op, &seen))
    }

    /// Runs `op`'s moves from `got` (how far its records say it is) until it ends (then saves
    /// it ended), until a move stops with an error (the operation stays in flight), or until
    /// [`DirectoryLoop::move_time`] is up: the move running then is dropped where it is (its
    /// record holds its last phase; the next period continues it) and `out.cut` is set.
    async fn carry(
        &self,
        op: &Started,
        mut got: Progress,
        out: &mut DirectoryReport,
    ) -> Result<(), AutopilotError> {
        let deadline = self.move_time.map(|t| tokio::time::Instant::now() + t);
        loop {
            let mut mover = match &got {
                Progress::Ended { .. } | Progress::Stopped { .. } => {
                    let after = self.store.load().await?;
                    let mut state = after.state;
                    state.finished(&op.id);
                    out.saved = self.store.save(&state, after.rev).await?;
                    out.ended = Some((op.id.clone(), got));
                    return Ok(());
                }
                Progress::Unknown => return Ok(()),
                // Time is up before the next move: it starts (or resumes) next period.
                _ if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) => {
                    out.cut = true;
                    return Ok(());
                }
                Progress::Running { id, .. } => Mover::open_with(
                    self.ddb.clone(),
                    self.streams.clone(),
                    self.dir.clone(),
                    id,
                    self.limits.clone(),
                )
                .await
                .map_err(|e| self.failed(Some(op), e))?,
                Progress::Next { index } => {
                    let (Some(piece), Some(to)) = (op.pieces.get(*index), op.to.get(*index)) else {
                        return Ok(());
                    };
                    let slots = crate::slots::SlotRange::new(
                        u16::try_from(piece.lo()).unwrap_or(u16::MAX),
                        u16::try_from(piece.hi()).unwrap_or(u16::MAX),
                    )
                    .map_err(|e| self.failed(Some(op), MoveError::from(e)))?;
                    let spec = MoveSpec {
                        slots,
                        to: to.clone(),
                        mode: MoveMode::Copy,
                        strict: false,
                        budget: self.budget,
                    };
                    Mover::start_with(
                        self.ddb.clone(),
                        self.streams.clone(),
                        self.dir.clone(),
                        spec,
                        self.limits.clone(),
                    )
                    .await
                    .map_err(|e| self.failed(Some(op), e))?
                }
            };
            if let Some(p) = &self.progress {
                mover = mover.with_progress(p.clone());
            }
            let id = mover.record().id.clone();
            let ran = match deadline {
                Some(at) => match tokio::time::timeout_at(at, mover.run()).await {
                    Ok(ran) => ran.map(|_| ()),
                    Err(_) => {
                        out.cut = true;
                        return Ok(());
                    }
                },
                None => mover.run().await.map(|_| ()),
            };
            ran.map_err(|e| self.failed(Some(op), e))?;
            out.moved.push(id);
            got = self.progress_of(op).await?;
        }
    }

    #[cfg_attr(not(feature = "insights"), allow(unused_variables))]
    async fn slot_load(
        &self,
        load: Load,
        map: &SlotMap,
        now_ms: u64,
    ) -> Result<BTreeMap<u16, f64>, AutopilotError> {
        match load {
            Load::Slots(slots) => Ok(slots),
            #[cfg(feature = "insights")]
            Load::CloudWatch {
                client,
                minutes,
                sampled,
            } => {
                let mut tables: Vec<String> = map.ranges.iter().map(|r| r.owner.clone()).collect();
                tables.extend(self.spare.iter().cloned());
                tables.sort();
                tables.dedup();
                let wcu = super::measure::owner_wcu(&client, &tables, minutes, now_ms).await?;
                Ok(super::propose::estimate_slot_load(map, &wcu, &sampled))
            }
        }
    }

    /// A mover's or the directory's failure, with the operation in flight (if any) named.
    fn failed(&self, op: Option<&Started>, source: MoveError) -> AutopilotError {
        AutopilotError::Move {
            table: self.dir.table().to_owned(),
            id: op.map(|o| o.id.clone()),
            source: Box::new(source),
        }
    }
}

/// The command-line arguments naming directory `table`'s loop after `heatsink autopilot
/// <command>`: its prefix (the directory is `<prefix>slots`).
pub fn selector(table: &str) -> String {
    match table.strip_suffix("slots") {
        Some(prefix) => format!(" --prefix {prefix}"),
        None => format!(" (HEATSINK_PREFIX naming directory {table})"),
    }
}

impl DirectoryReport {
    /// Writes the period's metrics to `emf`, each every period, 0s included (see
    /// [`crate::autopilot`]).
    pub fn metrics(&self, emf: &mut Emf) {
        for (metric, n) in self.values() {
            emf.count(metric, n);
        }
    }

    /// The period's metric values. An operation whose records prove nothing
    /// ([`Progress::Unknown`]) counts as unproven.
    pub fn values(&self) -> [(MetricDef, u64); 6] {
        let flag = |b: bool| u64::from(b);
        let period = self.decided.as_ref().map(|d| &d.period);
        let budget = period.map_or(0, |p| {
            p.waiting
                .iter()
                .filter(|(_, w)| matches!(w, Wait::Budget { .. }))
                .count()
        });
        [
            (super::PERIOD_COMPLETED, 1),
            (super::STARTED, flag(self.started.is_some())),
            (super::PAUSED, flag(self.paused.is_some())),
            (
                super::UNPROVEN,
                flag(matches!(self.settled, Some((_, Progress::Unknown)))),
            ),
            (super::OUT_OF_BUDGET, budget as u64),
            (
                super::PROPOSALS,
                self.decided.as_ref().map_or(0, |d| d.planned.len()) as u64,
            ),
        ]
    }

    /// One line per fact: the operation in flight and how far it got, the decision (with the
    /// next command where one is needed), each waiting proposal, the moves run and the
    /// operation's end.
    pub fn lines(&self) -> Vec<String> {
        let sel = selector(&self.table);
        let mut lines = vec![];
        if let Some((id, got)) = &self.settled {
            lines.push(match got {
                Progress::Ended { moved } => {
                    format!("{id} ended: the move records show its {moved} moves done")
                }
                Progress::Stopped { index, id: mv, phase } => format!(
                    "{id} ended: its move {mv} (piece {}) is {phase:?}; the pieces after it were not started",
                    index + 1
                ),
                Progress::Running { index, id: mv, phase } => format!(
                    "{id} in flight: move {mv} (piece {}) is at {phase:?}; an acting period continues it (or 'heatsink move resume {mv}')",
                    index + 1
                ),
                Progress::Next { index } => format!(
                    "{id} in flight: piece {} not started yet; an acting period starts it",
                    index + 1
                ),
                Progress::Unknown => format!(
                    "{id} unproven: it keeps no targets for its pieces, so its move records prove nothing; once its moves have ended, 'heatsink autopilot finish{sel} --id {id}'"
                ),
            });
        }
        if let Some(why) = &self.paused {
            lines.push(format!(
                "paused ({why}): the loop starts and continues nothing; 'heatsink autopilot resume{sel}' lifts it"
            ));
        }
        if let Some(d) = &self.decided {
            lines.extend(decision_lines(d, &sel));
        }
        for id in &self.moved {
            lines.push(format!("move {id} done"));
        }
        if self.cut {
            lines.push(
                "moves stopped at the period's time limit: the operation stays in flight and the next acting period continues it from the move records".into(),
            );
        }
        if let Some((id, got)) = &self.ended
            && self.settled.as_ref().map(|(s, _)| s) != Some(id)
        {
            lines.push(format!("{id} ended: {got:?}"));
        }
        lines
    }
}

/// One line per decision and per waiting proposal of `d`.
fn decision_lines(d: &DirectoryPeriod, sel: &str) -> Vec<String> {
    let (p, planned) = (&d.period, &d.planned);
    let piece = |subject: &str| {
        planned
            .iter()
            .find(|m| m.proposal.subject == subject)
            .map_or(String::new(), |m| {
                if m.pieces.is_empty() {
                    return format!("{subject} (warming, utilisation {:.2})", m.proposal.urgency);
                }
                let each: Vec<String> = m
                    .pieces
                    .iter()
                    .map(|p| format!("{} -> {} ({:.1})", p.slots, p.to, p.load))
                    .collect();
                format!(
                    "move off {subject} {} (load {:.1})",
                    each.join(", "),
                    m.load()
                )
            })
    };
    let joined: String = p
        .joined
        .iter()
        .map(|j| format!("; and {}", piece(&j.subject)))
        .collect();
    let mut lines = vec![match &p.decision {
        Decision::Run(r) => format!("run: {}{joined}", piece(&r.subject)),
        Decision::DryRun(r) => format!(
            "dry run: would {}{joined}; 'heatsink autopilot run --act{sel}' runs it",
            piece(&r.subject)
        ),
        Decision::Hold(HoldReason::Paused(why)) => {
            format!("hold: paused ({why}); 'heatsink autopilot resume{sel}' lifts it")
        }
        Decision::Hold(HoldReason::InFlight(id)) => format!(
            "hold: {id} in flight; once its moves have ended, 'heatsink autopilot finish{sel} --id {id}'"
        ),
        Decision::Idle if planned.is_empty() => {
            "idle: every owner within 1.2 × the mean load".into()
        }
        Decision::Idle => "idle: no proposal may run yet".into(),
    }];
    for (w, why) in &p.waiting {
        lines.push(format!(
            "  waits: {} — {}",
            piece(&w.subject),
            super::wait_text(why)
        ));
    }
    lines
}
