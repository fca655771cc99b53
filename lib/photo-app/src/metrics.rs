//! The photo app's metric catalogue: which function emits which metric, the names its alarms
//! and dashboards read.
//!
//! The names here are the contract with the alarms and the dashboard (`infra/cdk/lib/
//! observability.ts` and `infra/terraform/dashboard.tf`): namespace [`NAMESPACE`], one dimension
//! [`DIMENSION`] whose value is the emitter's short name ([`Function`]), metric names
//! [`Metric::name`], log field names in [`log_field`]. A unit test reads `observability.ts` and
//! fails if either side drifts; another fails if the Terraform dashboard reads a metric or an
//! emitter not listed here.
//!
//! ```
//! use heatsink::metrics::Emf;
//! use heatsink_photo_app::metrics::{Function, Metric};
//! use std::time::Duration;
//!
//! let mut emf = Emf::new(Function::LikesAggregator);
//! emf.count(Metric::CounterLagEvents, 0)
//!     .seconds(Metric::CounterFlushDelaySeconds, Duration::from_millis(1_250));
//! let doc = &emf.documents(1_700_000_000_000)[0];
//! assert_eq!(doc["Function"], "likes-aggregator");
//! assert_eq!(doc["CounterFlushDelaySeconds"], 1.25);
//! ```

use heatsink::autopilot::{self, stream::StreamPeriod};
use heatsink::counter::aggregate::{self, AggregateReport};
use heatsink::counter::rebuild::{self, RebuildReport};
use heatsink::counter::repair::{self, RepairReport};
use heatsink::metrics::{Emf, MetricDef, Unit};
use heatsink::stream::RoundReport;
use heatsink::stream::metrics as stream_metrics;

pub use heatsink::metrics::{DIMENSION, NAMESPACE, log_field};

/// What a metric comes from, a Lambda function or a long-running process: the value of the
/// [`DIMENSION`] dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Function {
    /// `likes-api`: POST a like, GET a count.
    LikesApi,
    /// `likes-aggregator`: change records → conditional counter flushes.
    LikesAggregator,
    /// `count-rebuilder`: recounts from `liked`, writes `fix`.
    CountRebuilder,
    /// `hotkey-controller`: Contributor Insights and alarms → hot-key directory.
    HotkeyController,
    /// `autopilot`: `like-events`' control loop (split or merge a shard as load moves).
    Autopilot,
    /// `stream-consumer`: not a Lambda function; a long-running [`heatsink::stream::Worker`]
    /// (`heatsink tail --emf`, or a service embedding one with `Worker::emit_emf`).
    StreamConsumer,
}

impl Function {
    /// The Lambda functions, in the order of `FUNCTION_NAMES` in `infra/cdk/lib/schema.ts`.
    pub const LAMBDAS: [Function; 5] = [
        Function::LikesApi,
        Function::LikesAggregator,
        Function::CountRebuilder,
        Function::HotkeyController,
        Function::Autopilot,
    ];

    /// Every emitter: the Lambda functions, then the processes of `EMF_PROCESSES` in
    /// `infra/cdk/lib/observability.ts`.
    pub const ALL: [Function; 6] = [
        Function::LikesApi,
        Function::LikesAggregator,
        Function::CountRebuilder,
        Function::HotkeyController,
        Function::Autopilot,
        Function::StreamConsumer,
    ];

    /// The short name: the dimension value and, for a Lambda function, its crate and binary (no
    /// stack prefix).
    pub const fn name(self) -> &'static str {
        match self {
            Function::LikesApi => "likes-api",
            Function::LikesAggregator => "likes-aggregator",
            Function::CountRebuilder => "count-rebuilder",
            Function::HotkeyController => "hotkey-controller",
            Function::Autopilot => "autopilot",
            Function::StreamConsumer => heatsink::stream::metrics::CONSUMER,
        }
    }
}

/// Every metric the photo app's functions and consumers emit, each read by the alarms or the
/// dashboard (`EMF_METRICS` in `infra/cdk/lib/observability.ts`). The emitter is the
/// [`DIMENSION`] value named on each. The toolkit defines most of them; this catalogue says
/// who emits each in this deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// `likes-aggregator`: like events applied to the in-memory aggregate but not flushed to
    /// `counters` when the invocation ended (the flush failed; Lambda retries them). 0 after a
    /// good flush.
    CounterLagEvents,
    /// `likes-aggregator`: seconds from the oldest like of a flush (its
    /// `ApproximateCreationDateTime`) to the end of that flush into `counters`.
    CounterFlushDelaySeconds,
    /// `stream-consumer`: shard leases one worker holds at the end of a main-loop round
    /// ([`heatsink::stream::RoundReport::held`]), a gauge: graph the Maximum per worker, or the Sum over a period
    /// divided by the rounds in it. Summed over the live workers it is the shards being read.
    LeasesHeld,
    /// `stream-consumer`: leases a worker took over in a round because they had expired
    /// ([`heatsink::stream::RoundReport::expired`]): their holder stopped renewing without releasing (a crash, a
    /// hang, a partition). Each expiry is counted once, by the worker that won the lease; graph
    /// the Sum. Releases at graceful shutdown and rebalancing steals are not expiries.
    LeasesExpired,
    /// `hotkey-controller`: keys currently marked hot in the hot-key directory.
    HotKeys,
    /// `likes-api`: requests refused with 429 by the admission guard.
    AdmissionRejected,
    /// `count-rebuilder`: likes the counters were off by, summed over the posts one run corrected
    /// ([`heatsink::counter::rebuild::RebuildReport::corrected`], each change counted by its absolute value: a lost like and a
    /// duplicated one both count 1). 0 after a run that found every counter exact; graph and
    /// alarm on the Sum. Anything above 0 means likes were lost or applied twice upstream of
    /// `counters` (counts are eventually exact, and the gap is observable; see docs/counters.md).
    CounterCorrectionLikes,
    /// `count-rebuilder`: posts whose counter one run corrected (`RebuildReport::corrected`).
    CountersCorrected,
    /// `count-rebuilder`: posts one run left for a later one ([`heatsink::counter::rebuild::RebuildReport::unsettled`]):
    /// liked within the quiet period, or their counter moved while the run counted. Steadily
    /// high means posts are never quiet long enough to be checked.
    CountersUnsettled,
    /// `count-rebuilder`: 1 when a run finished its pass, 0 when it stopped on its budget
    /// (cursor persisted) or another run held the lease
    /// ([`heatsink::counter::repair::RepairReport::completed`]). A run that timed out or failed
    /// emits nothing, so the heartbeat alarm watches this metric and breaches on missing data.
    CounterRebuildCompleted,
    /// `count-rebuilder`: bucket checks one run left for a later one because the aggregator had
    /// not proven its progress past them ([`heatsink::counter::repair::RepairReport::lagging`]),
    /// 0s included. Steadily above 0: proven progress trails the buckets; look at
    /// [`Metric::CounterRepairLag`] and the aggregator's iterator age.
    CounterRebuildLagging,
    /// `count-rebuilder`: 1 when a run judged nothing because proven progress is blocked (a
    /// listed shard without a watermark, replication lag past the settle time, nothing proven;
    /// [`heatsink::counter::repair::RepairReport::blocked`] names the shard), else 0. A blocked
    /// run still emits [`Metric::CounterRebuildCompleted`], so the heartbeat does not see it: the
    /// `count-rebuilder-blocked` alarm does (Maximum ≥ 1 for three 5-minute periods in a row).
    /// What to do: read the run's `blocked` (reason, shard, next step), check the aggregator's
    /// errors and `stream-failures`, `heatsink redrive`.
    CounterRepairBlocked,
    /// `count-rebuilder`: seconds from the aggregator's proven progress to the run's clock
    /// ([`heatsink::counter::repair::RepairReport::lag_ms`]); not emitted while nothing is proven
    /// (then [`Metric::CounterRepairBlocked`] is 1). Buckets are repaired only once it is past
    /// them, so it bounds how late a correction comes; the `count-rebuilder-repair-lag` alarm
    /// fires above 900 s for three 5-minute periods. An idle shard (no likes) holds it back
    /// without a fault.
    CounterRepairLag,
    /// `likes-aggregator`: change identities the dedupe window's size guard shed in one batch
    /// ([`heatsink::counter::FlushReport::shed`]), emitted only when above 0. A duplicate of a
    /// shed change is counted (reported in [`Metric::CounterLateChanges`]) until the bucket
    /// repair corrects it; the `likes-aggregator-dedupe-shed` alarm fires on any (missing data
    /// is not breaching: no datapoint is the normal case). What to do: find the post and shard
    /// in the aggregator's warning, watch `counter-corrections`.
    CounterDedupeShed,
    /// `likes-aggregator`: changes one batch counted although they were older than the dedupe
    /// window of their writer sub-key ([`heatsink::counter::FlushReport::late`]): each may be a
    /// duplicate that counts twice until the bucket repair corrects it. Emitted per batch, 0s
    /// included; the `likes-aggregator-late-changes` alarm fires on any in 5 minutes. What to do:
    /// check replication lag and the shed alarm; `counter-corrections` says whether the
    /// repair had to correct.
    CounterLateChanges,
    /// `likes-aggregator`: duplicate changes one batch dropped because their identity was in
    /// the dedupe window ([`heatsink::counter::FlushReport::duplicates`]): Kinesis Data Streams
    /// for DynamoDB's copies, counted once. Emitted per batch, 0s included; not a fault, so a
    /// graph and no alarm.
    CounterDuplicatesDropped,
    /// `likes-aggregator`: records one batch skipped because they are not a change of its table
    /// ([`heatsink::counter::aggregate::AggregateReport::foreign`]: another table or source on
    /// the stream), never counted. Emitted per batch, 0s included; the photo app's stream carries
    /// `liked` only, so above 0 means something else writes to `like-events`.
    CounterForeignRecords,
    /// `autopilot`: 1 per period that ran to its end, the loop's heartbeat
    /// ([`heatsink::autopilot::PERIOD_COMPLETED`]); the `autopilot-failing` alarm fires when
    /// the Sum is below 1 for three 5-minute periods (missing data breaching).
    AutopilotPeriodCompleted,
    /// `autopilot`: splits and merges a period started (0 or 1).
    AutopilotOperationsStarted,
    /// `autopilot`: 1 while the kill switch is set; `autopilot-paused` after 15 minutes.
    AutopilotPaused,
    /// `autopilot`: 1 while an operation in flight is not proven ended with the stream ACTIVE;
    /// `autopilot-unproven` after 15 minutes. What to do: the period's log line names the
    /// operation and the `heatsink autopilot finish` that releases it.
    AutopilotUnproven,
    /// `autopilot`: proposals waiting on the hour or day budget; `autopilot-out-of-budget`
    /// after 15 minutes.
    AutopilotOutOfBudget,
    /// `autopilot`: proposals the reshard plan made in a period (what a dry run would do).
    AutopilotProposals,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 23] = [
        Metric::CounterLagEvents,
        Metric::CounterFlushDelaySeconds,
        Metric::LeasesHeld,
        Metric::LeasesExpired,
        Metric::HotKeys,
        Metric::AdmissionRejected,
        Metric::CounterCorrectionLikes,
        Metric::CountersCorrected,
        Metric::CountersUnsettled,
        Metric::CounterRebuildCompleted,
        Metric::CounterRebuildLagging,
        Metric::CounterRepairBlocked,
        Metric::CounterRepairLag,
        Metric::CounterDedupeShed,
        Metric::CounterLateChanges,
        Metric::CounterDuplicatesDropped,
        Metric::CounterForeignRecords,
        Metric::AutopilotPeriodCompleted,
        Metric::AutopilotOperationsStarted,
        Metric::AutopilotPaused,
        Metric::AutopilotUnproven,
        Metric::AutopilotOutOfBudget,
        Metric::AutopilotProposals,
    ];

    /// The metric's definition: the toolkit's, where the toolkit emits it.
    pub const fn def(self) -> MetricDef {
        match self {
            Metric::CounterLagEvents => aggregate::LAG_EVENTS,
            Metric::CounterFlushDelaySeconds => aggregate::FLUSH_DELAY,
            Metric::LeasesHeld => stream_metrics::LEASES_HELD,
            Metric::LeasesExpired => stream_metrics::LEASES_EXPIRED,
            Metric::HotKeys => heatsink::hot::HOT_KEYS,
            Metric::AdmissionRejected => heatsink::hot::REJECTED,
            Metric::CounterCorrectionLikes => rebuild::CORRECTION_UNITS,
            Metric::CountersCorrected => rebuild::CORRECTED,
            Metric::CountersUnsettled => rebuild::UNSETTLED,
            Metric::CounterRebuildCompleted => repair::RUN_COMPLETED,
            Metric::CounterRebuildLagging => repair::LAGGING,
            Metric::CounterRepairBlocked => repair::BLOCKED,
            Metric::CounterRepairLag => repair::REPAIR_LAG,
            Metric::CounterDedupeShed => aggregate::DEDUPE_SHED,
            Metric::CounterLateChanges => aggregate::LATE_CHANGES,
            Metric::CounterDuplicatesDropped => aggregate::DUPLICATES_DROPPED,
            Metric::CounterForeignRecords => aggregate::FOREIGN_RECORDS,
            Metric::AutopilotPeriodCompleted => autopilot::PERIOD_COMPLETED,
            Metric::AutopilotOperationsStarted => autopilot::STARTED,
            Metric::AutopilotPaused => autopilot::PAUSED,
            Metric::AutopilotUnproven => autopilot::UNPROVEN,
            Metric::AutopilotOutOfBudget => autopilot::OUT_OF_BUDGET,
            Metric::AutopilotProposals => autopilot::PROPOSALS,
        }
    }

    /// The metric name in CloudWatch.
    pub const fn name(self) -> &'static str {
        self.def().name
    }

    /// Who emits the metric: its only [`DIMENSION`] value. The dashboards must graph it with
    /// this value, or they show a series nothing writes.
    pub const fn emitter(self) -> Function {
        match self {
            Metric::CounterLagEvents
            | Metric::CounterFlushDelaySeconds
            | Metric::CounterDedupeShed
            | Metric::CounterLateChanges
            | Metric::CounterDuplicatesDropped
            | Metric::CounterForeignRecords => Function::LikesAggregator,
            Metric::LeasesHeld | Metric::LeasesExpired => Function::StreamConsumer,
            Metric::HotKeys => Function::HotkeyController,
            Metric::AdmissionRejected => Function::LikesApi,
            Metric::CounterCorrectionLikes
            | Metric::CountersCorrected
            | Metric::CountersUnsettled
            | Metric::CounterRebuildCompleted
            | Metric::CounterRebuildLagging
            | Metric::CounterRepairBlocked
            | Metric::CounterRepairLag => Function::CountRebuilder,
            Metric::AutopilotPeriodCompleted
            | Metric::AutopilotOperationsStarted
            | Metric::AutopilotPaused
            | Metric::AutopilotUnproven
            | Metric::AutopilotOutOfBudget
            | Metric::AutopilotProposals => Function::Autopilot,
        }
    }

    /// The metric's unit.
    pub const fn unit(self) -> Unit {
        self.def().unit
    }
}

impl From<Metric> for MetricDef {
    fn from(m: Metric) -> Self {
        m.def()
    }
}

impl From<Function> for String {
    fn from(f: Function) -> Self {
        f.name().to_owned()
    }
}

/// The photo app's reports as metrics, on the toolkit's [`Emf`] (chainable like its methods).
pub trait AppEmf {
    /// One aggregator batch ([`AggregateReport::metrics`]).
    fn aggregate(&mut self, report: &AggregateReport) -> &mut Self;
    /// One stream-worker round ([`RoundReport::metrics`]).
    fn lease_round(&mut self, report: &RoundReport) -> &mut Self;
    /// One whole-table rebuild ([`RebuildReport::metrics`]).
    fn rebuild(&mut self, report: &RebuildReport) -> &mut Self;
    /// One count-rebuilder run: the incremental repair ([`RepairReport::metrics`]).
    fn repair(&mut self, report: &RepairReport) -> &mut Self;
    /// One autopilot period ([`StreamPeriod::metrics`]).
    fn autopilot(&mut self, period: &StreamPeriod) -> &mut Self;
}

impl AppEmf for Emf {
    fn aggregate(&mut self, report: &AggregateReport) -> &mut Self {
        report.metrics(self);
        self
    }

    fn lease_round(&mut self, report: &RoundReport) -> &mut Self {
        report.metrics(self);
        self
    }

    fn rebuild(&mut self, report: &RebuildReport) -> &mut Self {
        report.metrics(self);
        self
    }

    fn repair(&mut self, report: &RepairReport) -> &mut Self {
        report.metrics(self);
        self
    }

    fn autopilot(&mut self, period: &StreamPeriod) -> &mut Self {
        period.metrics(self);
        self
    }
}

// Every metric fits one directive, so one document never needs splitting by metric count.
const _: () = assert!(Metric::ALL.len() <= heatsink::metrics::MAX_METRICS_PER_DOCUMENT);

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use aws_lambda_events::kinesis::KinesisEvent;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ResourceNotFoundException,
    };
    use aws_smithy_mocks::mock;
    use base64::Engine;

    use std::collections::BTreeMap;
    use std::io::Write;
    use std::sync::Arc;
    use std::time::Duration;

    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_sdk_dynamodb::types::{
        AttributeValue, Capacity, ConsumedCapacity, ReturnConsumedCapacity,
    };
    use heatsink::counter::CounterStore;
    use heatsink::lambda::subscriber as lambda_subscriber;
    use heatsink::metrics::{
        CapacityLog, EmfError, MAX_DIMENSIONS_PER_SET, MAX_METRICS_PER_DOCUMENT,
        MAX_VALUES_PER_METRIC,
    };
    use heatsink::mocked;
    use serde_json::{Value, json};

    use super::*;
    use crate::aggregator::{Aggregator, aggregator};
    use crate::schema::{Schema, Table};

    fn repo_file(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The `key: 'value'` pairs of `export const NAME = { … }` in a TypeScript file.
    fn ts_object(ts: &str, name: &str) -> BTreeMap<String, String> {
        let start = ts
            .find(&format!("export const {name} = {{"))
            .unwrap_or_else(|| panic!("{name} not found"));
        let body = &ts[start..];
        let body = &body[..body.find("} as const").expect("object end")];
        body.lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("/*") && !l.starts_with('*') && !l.starts_with("//"))
            .filter_map(|l| {
                let (k, v) = l.split_once(": '")?;
                Some((k.to_owned(), v.split('\'').next()?.to_owned()))
            })
            .collect()
    }

    fn ts_string(ts: &str, name: &str) -> String {
        let start = ts
            .find(&format!("export const {name} = '"))
            .unwrap_or_else(|| panic!("{name} not found"));
        ts[start..].split('\'').nth(1).expect("string").to_owned()
    }

    #[test]
    fn names_match_the_cdk_contract_both_ways() {
        let ts = repo_file("infra/cdk/lib/observability.ts");
        assert_eq!(ts_string(&ts, "EMF_NAMESPACE"), NAMESPACE);

        let ts_metrics: BTreeSet<String> = ts_object(&ts, "EMF_METRICS").into_values().collect();
        let ours: BTreeSet<String> = Metric::ALL.iter().map(|m| m.name().to_owned()).collect();
        assert_eq!(ts_metrics, ours, "EMF_METRICS vs Metric::ALL");
        assert_eq!(ts_metrics.len(), 23, "parsed every metric");

        let ts_fields: BTreeSet<String> = ts_object(&ts, "LOG_FIELDS").into_values().collect();
        let ours: BTreeSet<String> = log_field::ALL
            .iter()
            .map(|f| format!("fields.{f}"))
            .collect();
        assert_eq!(ts_fields, ours, "LOG_FIELDS vs log_field::ALL");

        let schema_ts = repo_file("infra/cdk/lib/schema.ts");
        let line = schema_ts
            .lines()
            .find(|l| l.starts_with("export const FUNCTION_NAMES"))
            .expect("FUNCTION_NAMES");
        let names: Vec<&str> = line.split('\'').skip(1).step_by(2).collect();
        let ours: Vec<&str> = Function::LAMBDAS.iter().map(|f| f.name()).collect();
        assert_eq!(names, ours, "FUNCTION_NAMES vs Function::LAMBDAS");

        // Every emitter is a Lambda function or one of EMF_PROCESSES, and nothing else.
        let processes: Vec<String> = ts_object(&ts, "EMF_PROCESSES").into_values().collect();
        assert_eq!(processes, ["stream-consumer"], "parsed EMF_PROCESSES");
        let emitters: Vec<&str> = names
            .into_iter()
            .chain(processes.iter().map(String::as_str))
            .collect();
        let ours: Vec<&str> = Function::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            emitters, ours,
            "FUNCTION_NAMES + EMF_PROCESSES vs Function::ALL"
        );
    }

    /// The Terraform root module and the blocks it calls (`infra/terraform/*.tf` and
    /// `modules/*/*.tf`): where the dashboard's series are written. Not
    /// `modules/directory-autopilot`: a block over a team's slot directory, which no photo-app
    /// function emits for (its metrics are written by the `directory-autopilot` function, under
    /// that emitter; `infra/terraform/tests/test_directory_autopilot.py` checks its alarms).
    fn terraform_module_text() -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/terraform");
        let mut dirs = vec![root.clone()];
        let mut modules: Vec<_> = std::fs::read_dir(root.join("modules"))
            .expect("infra/terraform/modules")
            .map(|e| e.expect("module dir").path())
            .filter(|p| !p.ends_with("directory-autopilot"))
            .collect();
        modules.sort();
        dirs.extend(modules);
        let mut text = String::new();
        for dir in dirs {
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .expect("module dir")
                .map(|e| e.expect("file").path())
                .filter(|p| p.extension().is_some_and(|x| x == "tf"))
                .collect();
            files.sort();
            for f in files {
                text += &std::fs::read_to_string(&f).expect("a .tf file");
            }
        }
        text
    }

    #[test]
    fn the_terraform_dashboard_reads_only_metrics_we_emit() {
        let tf = terraform_module_text();
        let mut seen = 0;
        for line in tf
            .lines()
            .filter(|l| l.contains(&format!("[\"{NAMESPACE}\", \"")))
        {
            let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            assert_eq!(quoted[0], NAMESPACE);
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == quoted[1])
                .unwrap_or_else(|| panic!("not a metric we emit: {line}"));
            assert_eq!(quoted[2], DIMENSION, "{line}");
            assert_eq!(
                quoted[3],
                metric.emitter().name(),
                "graphed with an emitter that never writes it: {line}"
            );
            seen += 1;
        }
        assert_eq!(seen, Metric::ALL.len(), "one dashboard series per metric");
    }

    #[test]
    fn the_terraform_alarms_on_our_metrics_read_them_from_their_emitter() {
        // The blocks write each alarm as one map entry:
        // `"name" = { namespace = "heatsink", metric = "…", dims = { Function = "…" }, … }`.
        let tf = terraform_module_text();
        let mut seen = BTreeSet::new();
        for line in tf
            .lines()
            .filter(|l| l.contains(&format!("namespace = \"{NAMESPACE}\"")))
        {
            let field = |key: &str| {
                let rest = &line[line.find(&format!("{key} = ")).expect(key) + key.len() + 3..];
                rest.trim_start_matches("{ ")
                    .split('"')
                    .nth(1)
                    .expect("a quoted value")
                    .to_owned()
            };
            let name = field("metric");
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == name)
                .unwrap_or_else(|| panic!("alarm on a metric we do not emit: {name}"));
            assert!(
                line.contains(&format!(
                    "dims = {{ {DIMENSION} = \"{}\" }}",
                    metric.emitter().name()
                )),
                "{name}: alarmed with an emitter that never writes it: {line}"
            );
            seen.insert(metric.name());
        }
        assert_eq!(
            seen,
            BTreeSet::from([
                Metric::CounterCorrectionLikes.name(),
                Metric::HotKeys.name(),
                Metric::CounterRebuildCompleted.name(),
                Metric::CounterRepairBlocked.name(),
                Metric::CounterRepairLag.name(),
                Metric::CounterDedupeShed.name(),
                Metric::CounterLateChanges.name(),
                Metric::AutopilotPeriodCompleted.name(),
                Metric::AutopilotPaused.name(),
                Metric::AutopilotOutOfBudget.name(),
                Metric::AutopilotUnproven.name(),
            ]),
            "parsed the counter-corrections alarm, the two heartbeats, the blocked and lagging \
             repair and the aggregator's shed and late changes"
        );
    }

    /// Asserts `doc` is a valid EMF document per the specification; returns its metric values.
    fn check_emf(doc: &Value) -> BTreeMap<String, Vec<f64>> {
        let root = doc.as_object().expect("root is an object");
        let aws = root["_aws"].as_object().expect("_aws object");
        let ts = aws["Timestamp"]
            .as_u64()
            .expect("Timestamp: integer ms since the epoch");
        assert!(ts > 1_000_000_000_000, "Timestamp is in ms, not s");
        let directives = aws["CloudWatchMetrics"].as_array().expect("directives");
        assert_eq!(directives.len(), 1);
        let d = &directives[0];
        assert_eq!(d["Namespace"], NAMESPACE);
        let sets = d["Dimensions"].as_array().expect("dimension sets");
        for set in sets {
            let set = set.as_array().expect("a dimension set is an array");
            assert!(!set.is_empty() && set.len() <= MAX_DIMENSIONS_PER_SET);
            for key in set {
                let key = key.as_str().expect("dimension keys are strings");
                assert!(root[key].is_string(), "dimension {key} is a string member");
            }
        }
        assert_eq!(sets, &vec![json!([DIMENSION])]);
        let defs = d["Metrics"].as_array().expect("metric definitions");
        assert!(!defs.is_empty() && defs.len() <= MAX_METRICS_PER_DOCUMENT);
        let mut out = BTreeMap::new();
        for def in defs {
            let name = def["Name"].as_str().expect("Name");
            let metric = Metric::ALL
                .iter()
                .find(|m| m.name() == name)
                .expect("known");
            assert_eq!(def["Unit"], metric.unit().name());
            let values: Vec<f64> = match &root[name] {
                Value::Number(n) => vec![n.as_f64().expect("f64")],
                Value::Array(a) => {
                    assert!(a.len() <= MAX_VALUES_PER_METRIC);
                    a.iter()
                        .map(|v| v.as_f64().expect("values are numbers"))
                        .collect()
                }
                other => panic!("{name}: {other} is not a number"),
            };
            out.insert(name.to_owned(), values);
        }
        out
    }

    /// What `emf` writes, which must be exactly one line, parsed.
    fn only_line(emf: &Emf) -> Value {
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_000).expect("write"), 1);
        let mut docs = parse_lines(&out);
        assert_eq!(docs.len(), 1);
        docs.remove(0)
    }

    fn parse_lines(out: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
            .collect()
    }

    #[test]
    fn an_emf_document_follows_the_specification() {
        let mut emf = Emf::new(Function::LikesAggregator);
        for m in Metric::ALL {
            emf.count(m, 3);
        }
        emf.seconds(
            Metric::CounterFlushDelaySeconds,
            Duration::from_millis(2_500),
        );
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_123).expect("write"), 1);
        let docs = parse_lines(&out);
        assert_eq!(docs[0]["_aws"]["Timestamp"], 1_700_000_000_123_u64);
        assert_eq!(docs[0][DIMENSION], "likes-aggregator");
        let values = check_emf(&docs[0]);
        assert_eq!(values.len(), Metric::ALL.len());
        assert_eq!(values["CounterFlushDelaySeconds"], vec![3.0, 2.5]);
        assert_eq!(values["HotKeys"], vec![3.0]);
    }

    #[test]
    fn more_than_100_values_are_split_over_documents() {
        let mut emf = Emf::new(Function::HotkeyController);
        for i in 0..250 {
            emf.count(Metric::HotKeys, i);
        }
        emf.count(Metric::AdmissionRejected, 7);
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1_700_000_000_000).expect("write"), 3);
        let docs: Vec<_> = parse_lines(&out).iter().map(check_emf).collect();
        let hot: Vec<f64> = docs.iter().flat_map(|d| d["HotKeys"].clone()).collect();
        assert_eq!(
            hot,
            (0..250).map(|i| i as f64).collect::<Vec<_>>(),
            "every value, in order"
        );
        assert_eq!(docs[0]["AdmissionRejected"], vec![7.0]);
        assert!(
            !docs[1].contains_key("AdmissionRejected"),
            "declared only where it has a value"
        );
    }

    #[test]
    fn a_worker_round_is_one_document_from_the_stream_consumer() {
        let report = RoundReport {
            held: 3,
            taken: 2,
            expired: 1,
            stolen: 1,
            lost: 1,
        };
        let doc = only_line(Emf::new(Function::StreamConsumer).lease_round(&report));
        assert_eq!(doc[DIMENSION], "stream-consumer");
        let values = check_emf(&doc);
        assert_eq!(
            values,
            BTreeMap::from([
                ("LeasesExpired".to_owned(), vec![1.0]),
                ("LeasesHeld".to_owned(), vec![3.0]),
            ]),
            "held after the round and expiries taken over; takes, steals and losses are not metrics"
        );

        // An idle round still reports: holding nothing is a value the dashboard should show.
        let mut emf = Emf::new(Function::StreamConsumer);
        let idle = check_emf(
            &emf.lease_round(&RoundReport::default())
                .documents(1_700_000_000_000)[0],
        );
        assert_eq!(idle["LeasesHeld"], vec![0.0]);
        assert_eq!(idle["LeasesExpired"], vec![0.0]);
    }

    #[test]
    fn a_rebuild_run_is_one_document_from_the_count_rebuilder() {
        let report = RebuildReport {
            events_scanned: 1_000,
            counters_checked: 40,
            corrected: BTreeMap::from([
                ("p1".to_owned(), 3),
                ("p2".to_owned(), -2),
                ("p3".to_owned(), 1),
            ]),
            unsettled: vec!["p4".to_owned(), "p5".to_owned()],
            skipped: vec!["bad#id".to_owned()],
        };
        let doc = only_line(Emf::new(Function::CountRebuilder).rebuild(&report));
        assert_eq!(doc[DIMENSION], "count-rebuilder");
        assert_eq!(
            check_emf(&doc),
            BTreeMap::from([
                ("CounterCorrectionLikes".to_owned(), vec![6.0]),
                ("CountersCorrected".to_owned(), vec![3.0]),
                ("CountersUnsettled".to_owned(), vec![2.0]),
            ]),
            "likes off by |+3| + |-2| + |+1|, over three posts; two left for later; \
             scanned, checked and skipped are not metrics"
        );
        for m in [
            Metric::CounterCorrectionLikes,
            Metric::CountersCorrected,
            Metric::CountersUnsettled,
        ] {
            assert_eq!(m.emitter(), Function::CountRebuilder);
            assert_eq!(m.unit(), Unit::Count);
        }

        // A run that found every counter exact still reports, so the graph shows 0, not a gap.
        let mut emf = Emf::new(Function::CountRebuilder);
        let exact = check_emf(
            &emf.rebuild(&RebuildReport::default())
                .documents(1_700_000_000_000)[0],
        );
        assert_eq!(exact["CounterCorrectionLikes"], vec![0.0]);
        assert_eq!(exact["CountersCorrected"], vec![0.0]);
        assert_eq!(exact["CountersUnsettled"], vec![0.0]);

        // Changes too large to add up saturate instead of wrapping.
        let huge = RebuildReport {
            corrected: BTreeMap::from([("a".to_owned(), i64::MIN), ("b".to_owned(), i64::MAX)]),
            ..RebuildReport::default()
        };
        let mut emf = Emf::new(Function::CountRebuilder);
        let values = check_emf(&emf.rebuild(&huge).documents(1_700_000_000_000)[0]);
        assert_eq!(values["CounterCorrectionLikes"], vec![u64::MAX as f64]);
    }

    #[test]
    fn a_repair_run_is_one_document_from_the_count_rebuilder() {
        use heatsink::counter::repair::Blocked;

        // A run that judged: progress proven 90 s behind, one check left lagging.
        let judged = RepairReport {
            completed: true,
            lag_ms: Some(90_500),
            lagging: 1,
            corrected: BTreeMap::from([("p1".to_owned(), -2)]),
            moved: vec![("p2".to_owned(), 60_000)],
            ..RepairReport::default()
        };
        let doc = only_line(Emf::new(Function::CountRebuilder).repair(&judged));
        assert_eq!(doc[DIMENSION], "count-rebuilder");
        assert_eq!(
            check_emf(&doc),
            BTreeMap::from([
                ("CounterRebuildCompleted".to_owned(), vec![1.0]),
                ("CounterCorrectionLikes".to_owned(), vec![2.0]),
                ("CountersCorrected".to_owned(), vec![1.0]),
                ("CountersUnsettled".to_owned(), vec![1.0]),
                ("CounterRebuildLagging".to_owned(), vec![1.0]),
                ("CounterRepairBlocked".to_owned(), vec![0.0]),
                ("CounterRepairLag".to_owned(), vec![90.5]),
            ]),
        );

        // A blocked run: it still reports (so the heartbeat is fed), with Blocked = 1 and no lag
        // (nothing is proven): only the blocked alarm sees it.
        let blocked = RepairReport {
            blocked: Some(Blocked {
                reason: "silent-shard",
                shard: Some("shardId-000000000003".to_owned()),
                detail: "no watermark".to_owned(),
            }),
            ..RepairReport::default()
        };
        let values = check_emf(&only_line(
            Emf::new(Function::CountRebuilder).repair(&blocked),
        ));
        assert_eq!(values["CounterRepairBlocked"], vec![1.0]);
        assert_eq!(values["CounterRebuildCompleted"], vec![0.0]);
        assert!(!values.contains_key("CounterRepairLag"), "{values:?}");
        for m in [
            Metric::CounterRebuildLagging,
            Metric::CounterRepairBlocked,
            Metric::CounterRepairLag,
        ] {
            assert_eq!(m.emitter(), Function::CountRebuilder);
        }
        assert_eq!(Metric::CounterRepairLag.unit(), Unit::Seconds);
        assert_eq!(Metric::CounterRepairBlocked.unit(), Unit::Count);
    }

    #[test]
    fn non_numbers_are_refused_and_an_empty_set_writes_nothing() {
        let mut emf = Emf::new(Function::LikesApi);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(matches!(
                emf.put(Metric::AdmissionRejected, bad),
                Err(EmfError::NotFinite { .. })
            ));
        }
        assert!(emf.is_empty());
        let mut out = vec![];
        assert_eq!(emf.write_to(&mut out, 1).expect("write"), 0);
        assert!(out.is_empty());
        emf.put(Metric::AdmissionRejected, 1.5).expect("finite");
        assert_eq!(emf.documents(1).len(), 1);
    }

    /// Installs the capacity logger: `mocked!(aws_sdk_dynamodb with capacity_log; rules...)`.
    fn capacity_log(conf: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder {
        conf.interceptor(CapacityLog::new(&Schema::default().tables()))
    }

    fn consumed(table: &str, units: f64) -> ConsumedCapacity {
        ConsumedCapacity::builder()
            .table_name(table)
            .capacity_units(units)
            .table(Capacity::builder().capacity_units(units).build())
            .build()
    }

    /// Captures the JSON lines [`lambda_subscriber`] writes while the guard lives.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Tests that log through [`CapacityLog`] take turns: tracing caches each callsite's
    /// interest process-wide, so a test thread without a subscriber racing one with a
    /// thread-local subscriber can make the latter miss lines.
    static LOG_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    impl Captured {
        fn start(&self) -> tracing::subscriber::DefaultGuard {
            let me = self.clone();
            let filter = tracing_subscriber::EnvFilter::new("heatsink=info");
            tracing::subscriber::set_default(lambda_subscriber(filter, move || me.clone()))
        }
        fn capacity_lines(&self) -> Vec<Value> {
            parse_lines(&self.0.lock().expect("lock"))
                .into_iter()
                .filter(|l| l["fields"]["message"] == "dynamodb capacity")
                .collect()
        }
    }

    /// `$.a.b` of `line`, for a LOG_FIELDS path `a.b` read from observability.ts.
    fn at_path<'v>(line: &'v Value, path: &str) -> &'v Value {
        path.split('.').fold(line, |v, k| &v[k])
    }

    fn log_paths() -> BTreeMap<String, String> {
        ts_object(&repo_file("infra/cdk/lib/observability.ts"), "LOG_FIELDS")
    }

    const SHARD: &str = "shardId-000000000000";

    /// A Kinesis record carrying a DynamoDB change (Kinesis Data Streams for DynamoDB).
    fn kinesis_record(seq: u64, change: &str) -> Value {
        json!({
            "eventSource": "aws:kinesis",
            "eventID": format!("{SHARD}:{seq}"),
            "kinesis": {
                "data": base64::engine::general_purpose::STANDARD.encode(change),
                "sequenceNumber": seq.to_string(),
                "partitionKey": "ignored",
                "approximateArrivalTimestamp": 1.7e9,
            },
        })
    }

    fn like(post: &str, user: &str, created_ms: u64) -> String {
        json!({
            "eventName": "INSERT",
            "eventSource": "aws:dynamodb",
            "tableName": "heatsink-liked",
            "dynamodb": {
                "Keys": {"user": {"S": user}, "post": {"S": post}},
                "ApproximateCreationDateTime": created_ms,
                "ApproximateCreationDateTimePrecision": "MILLISECOND",
                "NewImage": {"post": {"S": post}, "user": {"S": user}},
            },
        })
        .to_string()
    }

    fn kinesis_event(records: Vec<Value>) -> KinesisEvent {
        serde_json::from_value(json!({ "Records": records })).expect("a Kinesis event")
    }

    fn likes_aggregator(ddb: aws_sdk_dynamodb::Client) -> Aggregator {
        let table = Schema::default().table_name(Table::Counters);
        aggregator(CounterStore::new(ddb, table), None)
    }

    #[tokio::test]
    async fn a_flushed_batch_has_no_lag_and_its_oldest_like_sets_the_flush_delay() {
        let counters = Schema::default().table_name(Table::Counters);
        let c = counters.clone();
        let get =
            mock!(aws_sdk_dynamodb::Client::batch_get_item).then_compute_output(move |input| {
                assert_eq!(
                    input.return_consumed_capacity,
                    Some(ReturnConsumedCapacity::Indexes)
                );
                BatchGetItemOutput::builder()
                    .consumed_capacity(consumed(&c, 1.0))
                    .build()
            });
        let c = counters.clone();
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_compute_output(move |input| {
            assert_eq!(
                input.return_consumed_capacity,
                Some(ReturnConsumedCapacity::Indexes)
            );
            PutItemOutput::builder()
                .consumed_capacity(consumed(&c, 1.0))
                .build()
        });
        // The writer's flushed watermark after the batch (what the rebuilder's repair waits on).
        let progress = mock!(aws_sdk_dynamodb::Client::update_item).then_output(|| {
            aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder().build()
        });
        let agg = likes_aggregator(mocked!(aws_sdk_dynamodb with capacity_log; get, put, progress));
        let now = heatsink::clock::now_ms();
        let event = kinesis_event(vec![
            kinesis_record(101, &like("p9", "u1", now - 5_000)),
            kinesis_record(102, &like("p9", "u2", now - 30_000)),
            kinesis_record(103, &like("p9", "u3", now - 10_000)),
            // The first change again under a new sequence number (Kinesis' duplicate): dropped.
            kinesis_record(104, &like("p9", "u1", now - 5_000)),
            // Not a DynamoDB change: skipped as foreign, never counted.
            kinesis_record(
                105,
                r#"{"eventSource":"aws:s3","eventName":"ObjectCreated:Put"}"#,
            ),
        ]);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        let (resp, report) = agg.handle_kinesis(event).await;
        drop((guard, turn));
        assert!(resp.batch_item_failures.is_empty());
        assert_eq!(report.flush.counted, 3);

        let mut emf = Emf::new(Function::LikesAggregator);
        let docs = emf.aggregate(&report).documents(now);
        let values = check_emf(&docs[0]);
        assert_eq!(
            values["CounterLagEvents"],
            vec![0.0],
            "everything applied was flushed"
        );
        // The silent paths of the batch are metrics too; nothing was shed (no value at all).
        assert_eq!(values["CounterDuplicatesDropped"], vec![1.0]);
        assert_eq!(values["CounterForeignRecords"], vec![1.0]);
        assert_eq!(
            values["CounterLateChanges"],
            vec![1.0],
            "the 30 s old like is 25 s older than the newest its writer sub-key counted, past the \
             10 s dedupe window: counted without a duplicate check"
        );
        assert!(!values.contains_key("CounterDedupeShed"), "{values:?}");
        let delay = values["CounterFlushDelaySeconds"][0];
        assert!(
            (30.0..40.0).contains(&delay),
            "the oldest like (30 s) sets the delay: {delay}"
        );

        // The flush's reads and writes are logged where the insight rules look.
        let paths = log_paths();
        let all = logs.capacity_lines();
        // Then the writer's watermark, logged like any other counters write.
        let (lines, progress): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|l| l["fields"]["partition_key"] != "#flushed#likes");
        assert_eq!(progress.len(), 1, "{progress:?}");
        assert_eq!(progress[0]["fields"]["op"], "UpdateItem");
        assert_eq!(lines.len(), 2, "{lines:?}");
        for line in &lines {
            assert_eq!(at_path(line, &paths["table"]), &json!(counters));
            assert_eq!(at_path(line, &paths["partitionKey"]), "likes#p9");
            assert!(
                at_path(line, &paths["index"]).is_null(),
                "a base-table call has no index"
            );
        }
        let get_line = lines
            .iter()
            .find(|l| l["fields"]["op"] == "BatchGetItem")
            .expect("read");
        assert_eq!(at_path(get_line, &paths["consumedRcu"]), 1.0);
        assert!(at_path(get_line, &paths["consumedWcu"]).is_null());
        let put_line = lines
            .iter()
            .find(|l| l["fields"]["op"] == "PutItem")
            .expect("write");
        assert_eq!(at_path(put_line, &paths["consumedWcu"]), 1.0);
    }

    #[tokio::test]
    async fn a_failed_flush_leaves_every_applied_like_as_lag() {
        let get = mock!(aws_sdk_dynamodb::Client::batch_get_item)
            .then_output(|| BatchGetItemOutput::builder().build());
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(|| {
            let meta = ErrorMetadata::builder()
                .code("ResourceNotFoundException")
                .build();
            PutItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder().meta(meta).build(),
            )
        });
        let agg = likes_aggregator(mocked!(aws_sdk_dynamodb with capacity_log; get, put));
        let now = heatsink::clock::now_ms();
        // Two likes, then a poison record: the two are applied, the rest waits for the retry.
        let event = kinesis_event(vec![
            kinesis_record(201, &like("p1", "u1", now)),
            kinesis_record(202, &like("p2", "u1", now)),
            kinesis_record(203, "not json"),
            kinesis_record(204, &like("p1", "u2", now)),
        ]);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        let (resp, report) = agg.handle_kinesis(event).await;
        drop((guard, turn));
        assert_eq!(resp.batch_item_failures.len(), 1);
        let refused: Vec<_> = logs
            .capacity_lines()
            .into_iter()
            .filter(|l| l["fields"]["op"] == "PutItem")
            .collect();
        assert_eq!(refused.len(), 2, "one line per post flushed: {refused:?}");
        assert!(
            refused
                .iter()
                .all(|l| l["fields"]["error"] == "ResourceNotFoundException")
        );

        let mut emf = Emf::new(Function::LikesAggregator);
        let values = check_emf(&emf.aggregate(&report).documents(now)[0]);
        assert_eq!(values["CounterLagEvents"], vec![2.0]);
        assert_eq!(values["CounterLateChanges"], vec![0.0], "nothing flushed");
        assert!(
            !values.contains_key("CounterFlushDelaySeconds"),
            "nothing was flushed"
        );
    }

    #[tokio::test]
    async fn index_reads_and_refused_writes_are_logged_with_their_keys() {
        let schema = Schema::default();
        let posts = schema.table(Table::Posts);
        let gsi = posts.gsis[0].clone();
        let table = posts.name.clone();
        let t = table.clone();
        let ix = gsi.name.clone();
        let query = mock!(aws_sdk_dynamodb::Client::query).then_output(move || {
            let cap = Capacity::builder().capacity_units(0.5).build();
            QueryOutput::builder()
                .consumed_capacity(
                    ConsumedCapacity::builder()
                        .table_name(&t)
                        .capacity_units(0.5)
                        .global_secondary_indexes(ix.clone(), cap)
                        .build(),
                )
                .build()
        });
        let put = mock!(aws_sdk_dynamodb::Client::put_item).then_error(|| {
            let meta = ErrorMetadata::builder()
                .code("ConditionalCheckFailedException")
                .build();
            PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(meta)
                    .build(),
            )
        });
        let ddb = mocked!(aws_sdk_dynamodb with capacity_log; query, put);
        let turn = LOG_TURN.lock().await;
        let logs = Captured::default();
        let guard = logs.start();
        ddb.query()
            .table_name(&table)
            .index_name(&gsi.name)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", &gsi.partition_key.name)
            .expression_attribute_values(":s", AttributeValue::S("alice#3".into()))
            .send()
            .await
            .expect("query");
        let liked = schema.table_name(Table::Liked);
        let refused = ddb
            .put_item()
            .table_name(&liked)
            .item("user", AttributeValue::S("u1".into()))
            .item("post", AttributeValue::S("p9".into()))
            .send()
            .await;
        drop((guard, turn));
        assert!(refused.is_err());

        let paths = log_paths();
        let lines = logs.capacity_lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(at_path(&lines[0], &paths["table"]), &json!(table));
        assert_eq!(at_path(&lines[0], &paths["index"]), gsi.name.as_str());
        assert_eq!(at_path(&lines[0], &paths["partitionKey"]), "alice#3");
        assert_eq!(at_path(&lines[0], &paths["consumedRcu"]), 0.5);
        assert_eq!(at_path(&lines[1], &paths["table"]), &json!(liked));
        assert_eq!(at_path(&lines[1], &paths["partitionKey"]), "u1");
        assert!(
            at_path(&lines[1], &paths["consumedWcu"]).is_null(),
            "no capacity on errors"
        );
        assert_eq!(
            lines[1]["fields"]["error"],
            "ConditionalCheckFailedException"
        );
    }
}
