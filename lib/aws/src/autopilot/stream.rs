//! One period of a Kinesis stream's autopilot: sample, plan, decide, and — acting — record the
//! split or merge before making its one call.
//!
//! A period, in order:
//!
//! 1. reads the loop's state and kill switch ([`PilotStore::load`]);
//! 2. settles the operation in flight from a listing of the stream ([`settle`]): it ends only
//!    when the shard map shows its result with the stream ACTIVE. While the stream is
//!    UPDATING it holds; ACTIVE without the result ([`Settle::Unproven`]) also holds, and the
//!    [`UNPROVEN`](super::UNPROVEN) metric asks an operator to look (`heatsink autopilot
//!    finish --stream S --id ID` releases it once they know);
//! 3. unless paused, holding or the stream is being resharded by someone else, samples the
//!    open shards' load over the last [`StreamLoop::sample_secs`] and plans
//!    ([`sample_and_plan`]: split at 80 % of a shard's limits at the load median, merge cold
//!    neighbours after 30 minutes, refuse a hot key and hand it to the hot-key controller);
//! 4. lets the governor pick ([`decide`]: sustained 2 periods, cooldown, budgets, dry run);
//! 5. saves the state conditionally on the revision read — with the chosen operation in
//!    flight when it acts — and only then makes the operation's one call ([`start_op`]). A
//!    period that lost the save to another starts nothing. A call Kinesis refused releases the
//!    operation ([`AutopilotError::Refused`]); a call whose outcome is unknown keeps it in
//!    flight ([`AutopilotError::Unsure`]).
//!
//! ```no_run
//! use heatsink::autopilot::store::PilotStore;
//! use heatsink::autopilot::stream::StreamLoop;
//! # async fn f(ddb: aws_sdk_dynamodb::Client, kinesis: aws_sdk_kinesis::Client)
//! #     -> Result<(), heatsink::autopilot::AutopilotError> {
//! let store = PilotStore::for_stream(ddb, "heatsink-autopilot", "heatsink-like-events");
//! let pilot = StreamLoop::new(kinesis, store, "heatsink-like-events"); // a dry run
//! let period = pilot.run(heatsink::clock::now_ms()).await?;
//! for line in period.lines() {
//!     tracing::info!("{line}");
//! }
//! # Ok(()) }
//! ```
//!
//! Limits: one SplitShard or MergeShards per period; the sample reads up to
//! [`MAX_PAGES_PER_SHARD`](crate::kinesis::reshard::MAX_PAGES_PER_SHARD) GetRecords pages per
//! shard (sharing each shard's 5 reads/s with its consumers); a stream in on-demand mode or
//! one whose records carry no partition key is refused by the plan.

use std::collections::BTreeMap;

use serde::Serialize;

use super::store::PilotStore;
pub use super::wait_text;
use super::{
    AutopilotError, Decision, HoldReason, Kind, PilotConfig, Proposal, Settle, Started, Wait,
    decide, propose, settle,
};
use crate::error::Failure;
use crate::kinesis::open_shard_ranges;
use crate::kinesis::reshard::{
    Op, Plan, PlanConfig, ReshardError, is_updating, sample_and_plan, start_op,
};
use crate::metrics::{Emf, MetricDef};

/// One stream's control loop (see the module docs).
#[derive(Debug, Clone)]
pub struct StreamLoop {
    kinesis: aws_sdk_kinesis::Client,
    store: PilotStore,
    stream: String,
    /// The governor's rules (default: sustained 2 periods, 30 min cooldown, 4 an hour, 10 a
    /// day, dry run).
    pub pilot: PilotConfig,
    /// The reshard plan's thresholds.
    pub plan: PlanConfig,
    /// Seconds of records each period samples (default 60).
    pub sample_secs: u64,
}

/// What one period saw and did.
#[derive(Debug, Clone, Serialize)]
pub struct StreamPeriod {
    /// The stream.
    pub stream: String,
    /// The governor's decision.
    pub decision: Decision,
    /// Proposals that wait, and why.
    pub waiting: Vec<(Proposal, Wait)>,
    /// Hot keys no split helps, named for salting (logged; the loop does not write the
    /// hot-key directory: `heatsink reshard apply` or the hot-key controller does).
    pub handoffs: Vec<Proposal>,
    /// Proposals the plan made.
    pub proposals: usize,
    /// The operation that was in flight, and what this period's listing proved about it.
    pub settled: Option<(String, Settle)>,
    /// Someone else is resharding the stream (it is not ACTIVE and nothing of ours is in
    /// flight): nothing was sampled or started.
    pub busy: bool,
    /// The operation this period started (its call was made and returned).
    pub started: Option<Started>,
    /// False when another period saved the state first: this one started nothing.
    pub saved: bool,
}

impl StreamLoop {
    /// The loop of `stream`, its state in `store`, with the default rules (a dry run).
    pub fn new(kinesis: aws_sdk_kinesis::Client, store: PilotStore, stream: &str) -> Self {
        Self {
            kinesis,
            store,
            stream: stream.to_owned(),
            pilot: PilotConfig::default(),
            plan: PlanConfig::default(),
            sample_secs: 60,
        }
    }

    /// This period's decision, as [`StreamLoop::run`] would make it; saves and starts nothing.
    pub async fn plan(&self, now_ms: u64) -> Result<StreamPeriod, AutopilotError> {
        self.period(now_ms, false).await
    }

    /// One period: settle, sample, decide, save, and (acting) start the chosen operation.
    pub async fn run(&self, now_ms: u64) -> Result<StreamPeriod, AutopilotError> {
        self.period(now_ms, true).await
    }

    async fn period(&self, now_ms: u64, record: bool) -> Result<StreamPeriod, AutopilotError> {
        let (kinesis, stream) = (&self.kinesis, self.stream.as_str());
        let stored = self.store.load().await?;
        let mut state = stored.state.clone();
        let updating = is_updating(kinesis, stream).await?;
        let open = open_shard_ranges(kinesis, stream)
            .await
            .map_err(ReshardError::from)?;
        let spans: Vec<(u128, u128)> = open.iter().map(|r| (r.start, r.end)).collect();
        let mut settled = None;
        if let Some(f) = state.in_flight.clone() {
            let s = settle(&f, &spans, updating);
            if s == Settle::Ended {
                state.finished(&f.id);
            }
            settled = Some((f.id, s));
        }
        let busy = updating && settled.is_none();
        let plan = if state.paused.is_some() || state.in_flight.is_some() || busy {
            None
        } else {
            Some(
                sample_and_plan(
                    kinesis,
                    stream,
                    self.sample_secs,
                    now_ms,
                    &state.reshard,
                    &self.plan,
                )
                .await?,
            )
        };
        let ranges: BTreeMap<String, (u128, u128)> = open
            .iter()
            .map(|r| (r.shard_id.clone(), (r.start, r.end)))
            .collect();
        let proposals = plan
            .as_ref()
            .map(|p| propose::reshard(p, &ranges))
            .unwrap_or_default();
        // Kinesis runs one reshard of a stream at a time: one proposal an operation.
        let pilot = PilotConfig {
            act: record && self.pilot.act,
            per_operation: 1,
            ..self.pilot
        };
        let p = decide(&pilot, &state, &proposals, now_ms)?;
        let mut out = StreamPeriod {
            stream: stream.to_owned(),
            decision: p.decision.clone(),
            waiting: p.waiting.clone(),
            handoffs: p.handoffs.clone(),
            proposals: proposals.len(),
            settled,
            busy,
            started: None,
            saved: false,
        };
        if !record {
            return Ok(out);
        }
        state.streaks = p.streaks;
        if let Some(plan) = &plan {
            state.reshard = plan.state.clone();
        }
        let run = match (&p.decision, &plan) {
            (Decision::Run(r), Some(plan)) => op_for(plan, r).map(|op| (r.clone(), op)),
            _ => None,
        };
        let id = run
            .as_ref()
            .map(|(r, _)| format!("{}-{}-{now_ms}", kind_name(r.kind), r.subject));
        if let (Some((r, op)), Some(id)) = (&run, &id) {
            // Recorded before the call: a period that dies after this line leaves it in
            // flight, and the loop holds until a listing proves its end or an operator says.
            state.started_op(id, r, Some(op.clone()), now_ms);
        }
        out.saved = self.store.save(&state, stored.rev).await?;
        let (Some((_, op)), Some(id), true) = (run, id, out.saved) else {
            return Ok(out);
        };
        match start_op(kinesis, stream, &op).await {
            Ok(()) => {
                out.started = state.in_flight.clone();
                Ok(out)
            }
            Err(e) if refused(&e) => {
                // Kinesis answered no (or the call was never made): nothing changed.
                state.finished(&id);
                let next = stored.rev.saturating_add(1);
                self.store.save(&state, next).await?;
                Err(AutopilotError::Refused {
                    id,
                    stream: stream.to_owned(),
                    source: Box::new(e),
                })
            }
            Err(e) => Err(AutopilotError::Unsure {
                id,
                stream: stream.to_owned(),
                source: Box::new(e),
            }),
        }
    }
}

/// Whether `e` proves the operation's call did not run: Kinesis answered with a client error
/// (a 4xx: in use, rate exceeded, invalid argument), or the call was never made (the listing
/// before it failed, or the shard was no longer open). A timeout, an unreachable endpoint, an
/// unreadable answer or a 5xx proves nothing.
fn refused(e: &ReshardError) -> bool {
    match e {
        ReshardError::NotOpen { .. } | ReshardError::SlotMap(_) => true,
        ReshardError::Aws(a) => {
            a.failure() == Failure::Service
                && !a.code().is_some_and(|c| {
                    matches!(
                        c,
                        "InternalFailure" | "InternalServerError" | "ServiceUnavailable"
                    )
                })
        }
        _ => false,
    }
}

/// The plan's operation that `run` proposes: the first split of its shard's range, or the
/// merge of its span.
fn op_for(plan: &Plan, run: &Proposal) -> Option<Op> {
    let (lo, hi) = (run.span.lo(), run.span.hi());
    plan.ops
        .iter()
        .find(|op| match (op, run.kind) {
            (Op::Split { start, end, .. }, Kind::Split) => (*start, *end) == (lo, hi),
            (Op::Merge { left, right }, Kind::Merge) => (left.0, right.1) == (lo, hi),
            _ => false,
        })
        .cloned()
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Split => "split",
        Kind::Merge => "merge",
        Kind::Move => "move",
        Kind::Salt => "salt",
    }
}

impl StreamPeriod {
    /// Writes the period's metrics to `emf`, each every period, 0s included (see
    /// [`crate::autopilot`]).
    pub fn metrics(&self, emf: &mut Emf) {
        for (metric, n) in self.values() {
            emf.count(metric, n);
        }
    }

    /// The period's metric values.
    pub fn values(&self) -> [(MetricDef, u64); 6] {
        let flag = |b: bool| u64::from(b);
        let budget = self
            .waiting
            .iter()
            .filter(|(_, w)| matches!(w, Wait::Budget { .. }))
            .count();
        [
            (super::PERIOD_COMPLETED, 1),
            (super::STARTED, flag(self.started.is_some())),
            (
                super::PAUSED,
                flag(matches!(
                    self.decision,
                    Decision::Hold(HoldReason::Paused(_))
                )),
            ),
            (
                super::UNPROVEN,
                flag(matches!(self.settled, Some((_, Settle::Unproven)))),
            ),
            (super::OUT_OF_BUDGET, budget as u64),
            (super::PROPOSALS, self.proposals as u64),
        ]
    }

    /// One line per fact: the settled operation, the decision (with the next command where
    /// one is needed), each waiting proposal and each hand-off.
    pub fn lines(&self) -> Vec<String> {
        let s = &self.stream;
        let what = |p: &Proposal| {
            format!(
                "{} {} (load {:.2})",
                kind_name(p.kind),
                p.subject,
                p.urgency
            )
        };
        let mut lines = vec![];
        match &self.settled {
            Some((id, Settle::Ended)) => lines.push(format!("{id} ended: the shard map shows it")),
            Some((id, Settle::Running)) => {
                lines.push(format!("{id} in flight: {s} is being resharded"));
            }
            Some((id, Settle::Unproven)) => lines.push(format!(
                "{id} unproven: {s} is ACTIVE and its result is not in the shard map; once you know it ended or never ran, 'heatsink autopilot finish --stream {s} --id {id}'"
            )),
            None => {}
        }
        if self.busy {
            lines.push(format!("hold: {s} is being resharded by someone else"));
        }
        lines.push(match &self.decision {
            Decision::Run(r) if self.started.is_some() => format!("run: {}", what(r)),
            Decision::Run(r) if !self.saved => format!(
                "lost: another period saved first; {} not started",
                what(r)
            ),
            Decision::Run(r) => format!("run: {} (its call did not complete)", what(r)),
            Decision::DryRun(r) => format!(
                "dry run: would {}; set HEATSINK_AUTOPILOT_ACT=true (or 'heatsink autopilot run --stream {s} --act') to act",
                what(r)
            ),
            Decision::Hold(HoldReason::Paused(why)) => format!(
                "hold: paused ({why}); 'heatsink autopilot resume --stream {s}' lifts it"
            ),
            Decision::Hold(HoldReason::InFlight(id)) => format!("hold: {id} in flight"),
            Decision::Idle if self.proposals == 0 => format!("idle: no shard of {s} needs a split or merge"),
            Decision::Idle => "idle: no proposal may run yet".into(),
        });
        for (p, w) in &self.waiting {
            lines.push(format!("  waits: {} — {}", what(p), wait_text(w)));
        }
        for h in &self.handoffs {
            lines.push(format!(
                "  salt: key {} carries {:.2} of its shard; no split helps (the hot-key controller's job)",
                h.subject, h.urgency
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_kinesis::config::retry::RetryConfig;
    use aws_sdk_kinesis::operation::split_shard::SplitShardError;
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::mocked;
    use crate::testing::{self, error_meta};

    fn one_shard() -> aws_smithy_mocks::Rule {
        mock!(aws_sdk_kinesis::Client::list_shards)
            .then_output(|| testing::one_shard("shardId-000000000000", "1").expect("listing"))
    }

    async fn split_failing_with(code: &'static str) -> ReshardError {
        let split = mock!(aws_sdk_kinesis::Client::split_shard)
            .then_error(move || SplitShardError::generic(error_meta(code)));
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), split);
        let op = Op::Split {
            start: 0,
            end: u128::MAX,
            at: 1 << 127,
        };
        start_op(&k, "s", &op).await.expect_err("the call fails")
    }

    /// Only an answer that says no releases the operation: a client error, or no call made.
    /// A 5xx proves nothing about whether Kinesis took the split (shapes from the Kinesis API
    /// reference, answered by aws-smithy-mocks).
    #[tokio::test]
    async fn smithy_mock_a_refused_call_releases_the_operation_and_a_server_fault_does_not() {
        for code in [
            "ResourceInUseException",
            "LimitExceededException",
            "InvalidArgumentException",
        ] {
            let e = split_failing_with(code).await;
            assert!(refused(&e), "{code}: {e}");
        }
        for code in ["InternalFailure", "ServiceUnavailable"] {
            let e = split_failing_with(code).await;
            assert!(!refused(&e), "{code}: {e}");
        }
        // The shard map changed since the plan: nothing was called.
        let k = mocked!(aws_sdk_kinesis, one_shard());
        let gone = Op::Split {
            start: 0,
            end: 1 << 127,
            at: 1 << 126,
        };
        let e = start_op(&k, "s", &gone).await.expect_err("not open");
        assert!(matches!(e, ReshardError::NotOpen { .. }), "{e}");
        assert!(refused(&e));
    }

    /// A stream someone else is resharding (UPDATING, nothing of ours in flight): the period
    /// samples nothing and starts nothing (a sample would need GetShardIterator, which no
    /// rule answers), and says why.
    #[tokio::test]
    async fn smithy_mock_a_stream_resharded_by_someone_else_holds_without_sampling() {
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput;
        use aws_sdk_kinesis::types::StreamStatus;

        let updating = mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(|| {
            DescribeStreamSummaryOutput::builder()
                .stream_description_summary(
                    testing::stream_summary(StreamStatus::Updating)
                        .build()
                        .expect("summary"),
                )
                .build()
        });
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), updating);
        let empty = mock!(aws_sdk_dynamodb::Client::get_item)
            .then_output(|| GetItemOutput::builder().build());
        let ddb = mocked!(aws_sdk_dynamodb, empty);
        let mut pilot = StreamLoop::new(k, PilotStore::for_stream(ddb, "t-autopilot", "s"), "s");
        pilot.pilot.act = true;
        let p = pilot.plan(60_000).await.expect("period");
        assert!(p.busy);
        assert_eq!(p.proposals, 0);
        assert_eq!(p.decision, Decision::Idle);
        assert!(
            p.lines()[0].contains("being resharded by someone else"),
            "{:?}",
            p.lines()
        );
    }
}
