//! Carrying out a load-aware reshard: sample every open shard, plan with
//! [`heatsink_core::reshard::plan`], and apply the plan one call at a time.
//!
//! - **Sampling** reads the last `secs` seconds of each open shard with an `AT_TIMESTAMP`
//!   iterator, so it works with any producer. A record's hash key is MD5 of its partition key
//!   (GetRecords does not return explicit hash keys); a KPL aggregate counts as one record at
//!   the hash key of its first user record, which is where heatsink's producer routes it.
//!   Reading stops at the end of the window, when the shard is caught up, or after
//!   [`MAX_PAGES_PER_SHARD`] pages, so sampling cannot hang on a busy shard.
//! - **Cooldown from the shard listing**: `ListShards` gives no creation time, but a shard
//!   missing from `ListShards` with `ShardFilter { AT_TIMESTAMP, t }` was created after t.
//!   [`sample_and_plan`] lists the shards at the start of the cooldown window and halves the
//!   interval of the young ones ([`created_within`], [`CreationProbe`]: one call when no shard
//!   is young, about seven when a reshard's children are), and gives each young shard the latest
//!   time it can have been created as `created_at`, so the plan's cooldown refuses to split or
//!   merge it ("cooldown: … plan again at or after T") and never ends early. [`sample`] alone
//!   leaves `created_at` unset.
//! - **Applying** makes one `SplitShard`/`MergeShards` call at a time and waits for the stream
//!   to be `ACTIVE` again before the next (one operation in flight per stream). A call refused
//!   for its rate (`LimitExceededException` "Rate exceeded …") or because the stream is busy
//!   (`ResourceInUseException`) is retried after a capped, jittered backoff; every wait has a
//!   deadline ([`ApplyConfig::deadline`]) after which the executor stops with
//!   [`ReshardError::Deadline`] instead of hanging. A `LimitExceededException` that names the
//!   account's shard quota ("would exceed the shard limit …") is not a rate: no wait lifts it,
//!   so the executor stops at once with [`ReshardError::Quota`] naming the quota and the next
//!   step.
//! - **A stale journal never wins over a fresh plan**: a journal with work left that is older
//!   than [`ApplyConfig::plan_window`] (1 h) was planned for a load that has passed; `apply` with
//!   a fresh plan refuses it ([`ReshardError::StaleJournal`]) unless
//!   [`ApplyConfig::resume_stale`] says to finish it.
//! - **`UpdateShardCount`** goes through [`update_shard_count`] only, which consults the
//!   journal's [`Ledger`] (10 calls per rolling 24 h, each ×½..×2) before the call and records
//!   the call in it; the plan itself only splits and merges.
//! - **Persistence**: before and after each call the progress is written to a JSON state file
//!   ([`Journal`]); `apply` with an existing journal resumes where it stopped. An operation
//!   whose result is already visible in the shard map (a crash after the call, before the
//!   journal write) counts as done, so a resume never splits twice.
//! - **Hot keys**: a shard the plan refuses to split because one key holds ≥ 50 % of its load
//!   ("salt it") cannot be relieved by any split. [`hand_off_hot_keys`] gives those keys to the
//!   hot-key controller ([`Controller`], the decision the `hotkey-controller` function runs),
//!   which writes salt entries into the hot-key directory; a [`Producer`] with
//!   [`Salting::Directory`] then spreads the key over sub-keys on distinct shards within its
//!   cache's `max_age`. The signal's ceiling is the load one key may carry before the plan
//!   refuses (`hot_key_share × split_at` of a shard, 40 % by default), so the controller
//!   always acts on a refused key and sizes S to keep each sub-key at ≤ 80 % of that.
//!
//! [`Producer`]: crate::kinesis::Producer
//! [`Salting::Directory`]: crate::kinesis::Salting::Directory

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::{ShardFilter, ShardFilterType, ShardIteratorType, StreamStatus};
use heatsink_core::detect::Kind;
use heatsink_core::hot::Signal;
use heatsink_core::keys::kinesis_hash_key;
use heatsink_core::kpl;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::error::AwsError;
use crate::hot::controller::{ControlReport, Controller, RunBounds};
use crate::hot::directory::DirectoryError;
use crate::kinesis::{KinesisError, open_shard_ranges};
use crate::timeouts::Timeouts;

pub use heatsink_core::reshard::*;

/// At most this many GetRecords pages are read per shard when sampling.
pub const MAX_PAGES_PER_SHARD: usize = 200;

/// Errors of the reshard executor.
#[derive(Debug, thiserror::Error)]
pub enum ReshardError {
    /// Reading the shard map failed.
    #[error(transparent)]
    SlotMap(#[from] KinesisError),
    /// A Kinesis call failed and retrying cannot help.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The samples could not be planned.
    #[error(transparent)]
    Plan(#[from] heatsink_core::reshard::PlanError),
    /// A wait ran past its deadline.
    #[error("{what} on {stream} did not finish within {secs} s; re-run apply to resume")]
    Deadline {
        /// What was waited for.
        what: String,
        /// Stream name.
        stream: String,
        /// The deadline.
        secs: u64,
    },
    /// The journal file could not be read or written.
    #[error("reshard journal {path}: {reason}")]
    Journal {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The account's shard quota refused the operation: no retry can help.
    #[error(
        "{operation} on {stream} refused by the account's shard quota ({message}); the step was not done: raise the Kinesis shard quota (Service Quotas, 'Shards per Region') or free shards, then re-run apply to resume"
    )]
    Quota {
        /// `SplitShard`, `MergeShards` or `UpdateShardCount`.
        operation: &'static str,
        /// Stream name.
        stream: String,
        /// The service's message.
        message: String,
    },
    /// An unfinished journal older than the plan window, with a fresh plan at hand.
    #[error(
        "reshard journal {path} has work left but is {age_secs} s old, older than the plan window ({window_secs} s): remove it to apply the fresh plan, or pass --resume-stale to finish the old one"
    )]
    StaleJournal {
        /// The file.
        path: PathBuf,
        /// Its age.
        age_secs: u64,
        /// [`ApplyConfig::plan_window`].
        window_secs: u64,
    },
    /// The stream places records itself (on-demand, `RecordDistributionStrategy` `AUTO`):
    /// partition keys and hash keys do not say where a record goes, so no split point can be
    /// chosen from them.
    #[error(
        "{stream} distributes records itself (RecordDistributionStrategy AUTO): a split point chosen from keys would mean nothing; Kinesis scales an on-demand stream on its own, so raise its warm throughput (UpdateStreamWarmThroughput) ahead of a known spike instead"
    )]
    Keyless {
        /// Stream name.
        stream: String,
    },
    /// The `UpdateShardCount` ledger refused the call before it was made.
    #[error("UpdateShardCount on {stream} not called: {source}; wait, or split and merge instead")]
    Ledger {
        /// Stream name.
        stream: String,
        /// Why.
        #[source]
        source: LedgerError,
    },
    /// The journal belongs to another stream.
    #[error(
        "reshard journal {path} is for stream {found}, not {stream}; remove it or pass another --state"
    )]
    OtherStream {
        /// The file.
        path: PathBuf,
        /// Its stream.
        found: String,
        /// The stream asked for.
        stream: String,
    },
    /// An operation names a shard by a hash range no open shard has: the shard map changed
    /// since the plan was made.
    #[error(
        "no open shard of {stream} spans {start}..={end}: the shard map changed since the plan; plan again"
    )]
    NotOpen {
        /// The stream.
        stream: String,
        /// The range's start.
        start: u128,
        /// The range's end.
        end: u128,
    },
}

/// Sample the open shards of `stream` over the last `secs` seconds, at time `now_ms`.
pub async fn sample(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    secs: u64,
    now_ms: u64,
) -> Result<Vec<ShardSample>, ReshardError> {
    // No call waits forever: a client without a bound of its own gets the policy's.
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    let open = open_shard_ranges(kinesis, stream).await?;
    let depths = depths(kinesis, stream).await?;
    let from_ms = now_ms.saturating_sub(secs.saturating_mul(1_000));
    let mut out = Vec::with_capacity(open.len());
    for shard in open {
        let it = kinesis
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(&shard.shard_id)
            .shard_iterator_type(ShardIteratorType::AtTimestamp)
            .timestamp(DateTime::from_millis(
                i64::try_from(from_ms).unwrap_or(i64::MAX),
            ))
            .send()
            .await
            .map_err(|e| AwsError::new("Kinesis", "GetShardIterator", &shard.shard_id, e))?;
        let mut iterator = it.shard_iterator;
        let mut samples = Vec::new();
        for _ in 0..MAX_PAGES_PER_SHARD {
            let Some(i) = iterator.take() else { break };
            let page = kinesis
                .get_records()
                .shard_iterator(i)
                .limit(10_000)
                .send()
                .await
                .map_err(|e| AwsError::new("Kinesis", "GetRecords", &shard.shard_id, e))?;
            let mut past_window = false;
            for r in page.records() {
                let at_ms = r
                    .approximate_arrival_timestamp()
                    .and_then(|t| t.to_millis().ok())
                    .and_then(|t| u64::try_from(t).ok())
                    .unwrap_or(now_ms);
                if at_ms > now_ms {
                    past_window = true;
                    continue;
                }
                let data = r.data().as_ref();
                let pk = r.partition_key().unwrap_or_default();
                // An aggregate routes by its first user record's key (see the module docs).
                let (key, hash_key) = match kpl::deaggregate_ref(data, pk) {
                    Ok(subs) if kpl::is_aggregated(data) => subs
                        .first()
                        .map(|s| (s.partition_key.to_owned(), s.hash_key().unwrap_or_default()))
                        .unwrap_or_else(|| (pk.to_owned(), kinesis_hash_key(pk))),
                    _ => (pk.to_owned(), kinesis_hash_key(pk)),
                };
                samples.push(Sample {
                    hash_key,
                    bytes: (data.len() + pk.len()) as u64,
                    at_ms,
                    partition_key: key,
                });
            }
            let caught_up = page.millis_behind_latest() == Some(0) || page.records().is_empty();
            iterator = page.next_shard_iterator;
            if past_window || caught_up {
                break;
            }
        }
        out.push(ShardSample {
            depth: depths.get(&shard.shard_id).copied().unwrap_or(0),
            ..ShardSample::new(
                shard.shard_id.clone(),
                shard.start,
                shard.end,
                secs.max(1) as f64,
                samples,
            )
        });
    }
    Ok(out)
}

/// How many splits deep each shard is (ancestors through `ParentShardId` that were splits).
async fn depths(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<std::collections::HashMap<String, u32>, ReshardError> {
    let mut parents = std::collections::HashMap::new();
    let mut next: Option<String> = None;
    loop {
        let req = match &next {
            Some(t) => kinesis.list_shards().next_token(t),
            None => kinesis.list_shards().stream_name(stream),
        };
        let out = req
            .send()
            .await
            .map_err(|e| AwsError::new("Kinesis", "ListShards", stream, e))?;
        for s in out.shards() {
            // A merge child (two parents) starts a new depth; a split child is one deeper.
            let parent = s
                .parent_shard_id()
                .filter(|_| s.adjacent_parent_shard_id().is_none());
            parents.insert(s.shard_id().to_owned(), parent.map(str::to_owned));
        }
        next = out.next_token;
        if next.is_none() {
            break;
        }
    }
    let mut depths = std::collections::HashMap::new();
    for id in parents.keys() {
        let mut d = 0u32;
        let mut at = id.as_str();
        while let Some(Some(p)) = parents.get(at) {
            d += 1;
            at = p;
            if d > 64 {
                break;
            }
        }
        depths.insert(id.clone(), d);
    }
    Ok(depths)
}

/// The persisted progress of one `apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// Stream name.
    pub stream: String,
    /// The operations of the plan, in order.
    pub ops: Vec<Op>,
    /// How many are done.
    pub done: usize,
    /// The plan state (merge holds) for the next plan.
    pub state: ReshardState,
    /// When its plan was made (Unix ms; 0 in a journal written before it was kept, which is
    /// therefore stale).
    #[serde(default)]
    pub created_ms: u64,
    /// The stream's `UpdateShardCount` calls ([`update_shard_count`]).
    #[serde(default)]
    pub ledger: Ledger,
}

impl Journal {
    /// Read the journal at `path`, if there is one.
    pub fn load(path: &Path) -> Result<Option<Self>, ReshardError> {
        let err = |reason: String| ReshardError::Journal {
            path: path.to_owned(),
            reason,
        };
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| err(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// Write it atomically (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<(), ReshardError> {
        let err = |reason: String| ReshardError::Journal {
            path: path.to_owned(),
            reason,
        };
        let tmp = path.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(|e| err(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))
    }
}

/// Timing of `apply`.
#[derive(Debug, Clone)]
pub struct ApplyConfig {
    /// The longest any one step (a call with its retries, or the wait for ACTIVE) may take.
    pub deadline: Duration,
    /// Backoff before the first retry of a refused call; doubles, capped at `backoff_cap`.
    pub backoff_base: Duration,
    /// Backoff cap.
    pub backoff_cap: Duration,
    /// Poll interval while waiting for ACTIVE.
    pub poll: Duration,
    /// How old an unfinished journal may be and still win over a fresh plan (default 1 h).
    pub plan_window: Duration,
    /// Finish an unfinished journal older than `plan_window` instead of refusing it.
    pub resume_stale: bool,
}

impl Default for ApplyConfig {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(600),
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(30),
            poll: Duration::from_millis(500),
            plan_window: Duration::from_secs(3_600),
            resume_stale: false,
        }
    }
}

/// One step of `apply`, for progress output.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Operation `index` of `total` is starting.
    Starting {
        /// 0-based index.
        index: usize,
        /// Number of operations.
        total: usize,
        /// The operation.
        op: Op,
    },
    /// The call was refused for now; retrying after `wait`.
    Backoff {
        /// The error code.
        code: String,
        /// The wait.
        wait: Duration,
    },
    /// Operation `index` is done (the stream is ACTIVE again).
    Done {
        /// 0-based index.
        index: usize,
    },
    /// Operation `index` was already done (found in the shard map on resume).
    AlreadyDone {
        /// 0-based index.
        index: usize,
    },
}

/// Plan from fresh samples and write a new journal (unless one with work left exists, which
/// is resumed instead), then carry it out. Returns the journal as finished.
pub async fn apply(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    journal_path: &Path,
    plan: Option<&Plan>,
    config: &ApplyConfig,
    mut progress: impl FnMut(Step),
) -> Result<Journal, ReshardError> {
    // No call waits forever: a client without a bound of its own gets the policy's.
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    let mut journal = match Journal::load(journal_path)? {
        Some(j) if j.stream != stream => {
            return Err(ReshardError::OtherStream {
                path: journal_path.to_owned(),
                found: j.stream,
                stream: stream.to_owned(),
            });
        }
        Some(j) if j.done < j.ops.len() => {
            let age_secs = crate::clock::now_ms().saturating_sub(j.created_ms) / 1_000;
            let window_secs = config.plan_window.as_secs();
            if plan.is_some() && !config.resume_stale && age_secs > window_secs {
                return Err(ReshardError::StaleJournal {
                    path: journal_path.to_owned(),
                    age_secs,
                    window_secs,
                });
            }
            j
        }
        previous => {
            // A finished journal's ledger carries over: the budget is the stream's.
            let ledger = previous.map(|j| j.ledger).unwrap_or_default();
            let Some(plan) = plan else {
                return Ok(Journal {
                    stream: stream.to_owned(),
                    ops: vec![],
                    done: 0,
                    state: ReshardState::default(),
                    created_ms: crate::clock::now_ms(),
                    ledger,
                });
            };
            Journal {
                stream: stream.to_owned(),
                ops: plan.ops.clone(),
                done: 0,
                state: plan.state.clone(),
                created_ms: crate::clock::now_ms(),
                ledger,
            }
        }
    };
    journal.save(journal_path)?;
    let total = journal.ops.len();
    while journal.done < total {
        let index = journal.done;
        let op = journal.ops[index].clone();
        progress(Step::Starting {
            index,
            total,
            op: op.clone(),
        });
        let open: Vec<(u128, u128)> = open_shard_ranges(kinesis, stream)
            .await?
            .iter()
            .map(|r| (r.start, r.end))
            .collect();
        if op.is_done(&open) {
            progress(Step::AlreadyDone { index });
        } else {
            let ids = open_shard_ranges(kinesis, stream).await?;
            let id_of = |range: (u128, u128)| {
                ids.iter()
                    .find(|r| (r.start, r.end) == range)
                    .map(|r| r.shard_id.clone())
            };
            call(kinesis, stream, &op, &id_of, config, &mut progress).await?;
            wait_active(kinesis, stream, config).await?;
            progress(Step::Done { index });
        }
        journal.done += 1;
        journal.save(journal_path)?;
    }
    Ok(journal)
}

async fn call(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    op: &Op,
    id_of: &impl Fn((u128, u128)) -> Option<String>,
    config: &ApplyConfig,
    progress: &mut impl FnMut(Step),
) -> Result<(), ReshardError> {
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        let result = match *op {
            Op::Split { start, end, at } => {
                let id = id_of((start, end)).unwrap_or_default();
                kinesis
                    .split_shard()
                    .stream_name(stream)
                    .shard_to_split(&id)
                    .new_starting_hash_key(at.to_string())
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| AwsError::new("Kinesis", "SplitShard", stream, e))
            }
            Op::Merge { left, right } => kinesis
                .merge_shards()
                .stream_name(stream)
                .shard_to_merge(id_of(left).unwrap_or_default())
                .adjacent_shard_to_merge(id_of(right).unwrap_or_default())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| AwsError::new("Kinesis", "MergeShards", stream, e)),
        };
        let e = match result {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let code = e.code().unwrap_or_default().to_owned();
        if is_quota(&e) {
            return Err(ReshardError::Quota {
                operation: e.operation(),
                stream: stream.to_owned(),
                message: e.to_string(),
            });
        }
        let retry = matches!(
            code.as_str(),
            "LimitExceededException" | "ResourceInUseException"
        ) || e.is_transient();
        if !retry {
            return Err(e.into());
        }
        attempt += 1;
        let wait = config
            .backoff_base
            .saturating_mul(1u32 << attempt.min(16))
            .min(config.backoff_cap)
            .mul_f64(rand::rng().random_range(0.5..=1.0));
        if started.elapsed() + wait > config.deadline {
            return Err(ReshardError::Deadline {
                what: format!("retrying {code}"),
                stream: stream.to_owned(),
                secs: config.deadline.as_secs(),
            });
        }
        progress(Step::Backoff { code, wait });
        tokio::time::sleep(wait).await;
    }
}

/// Makes `op`'s one Kinesis call on `stream` (SplitShard or MergeShards) once: no retry and no
/// wait for ACTIVE. For a control loop that records the operation before the call and counts
/// it ended only when a later listing shows its result ([`Op::is_done`]), never because the
/// call returned. A refused call is an [`AwsError`] with the service's code; a call that timed
/// out may still have reached Kinesis.
pub async fn start_op(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    op: &Op,
) -> Result<(), ReshardError> {
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    let open = open_shard_ranges(kinesis, stream).await?;
    let id_of = |(start, end): (u128, u128)| {
        open.iter()
            .find(|r| (r.start, r.end) == (start, end))
            .map(|r| r.shard_id.clone())
            .ok_or_else(|| ReshardError::NotOpen {
                stream: stream.to_owned(),
                start,
                end,
            })
    };
    match *op {
        Op::Split { start, end, at } => {
            kinesis
                .split_shard()
                .stream_name(stream)
                .shard_to_split(id_of((start, end))?)
                .new_starting_hash_key(at.to_string())
                .send()
                .await
                .map_err(|e| AwsError::new("Kinesis", "SplitShard", stream, e))?;
        }
        Op::Merge { left, right } => {
            kinesis
                .merge_shards()
                .stream_name(stream)
                .shard_to_merge(id_of(left)?)
                .adjacent_shard_to_merge(id_of(right)?)
                .send()
                .await
                .map_err(|e| AwsError::new("Kinesis", "MergeShards", stream, e))?;
        }
    }
    Ok(())
}

/// Whether `stream` is being resharded now (its status is not ACTIVE: UPDATING, CREATING…).
pub async fn is_updating(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<bool, ReshardError> {
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    let out = summary(kinesis, stream).await?;
    Ok(out
        .stream_description_summary()
        .is_none_or(|d| d.stream_status() != &aws_sdk_kinesis::types::StreamStatus::Active))
}

/// Whether `e` is the account's shard quota rather than a rate limit: Kinesis answers both with
/// `LimitExceededException`; the quota's message names the shard limit ("This request would
/// exceed the shard limit for the account … Current limit of shards is 500 …"), a rate's does
/// not ("Rate exceeded for stream …").
fn is_quota(e: &AwsError) -> bool {
    if e.code() != Some("LimitExceededException") {
        return false;
    }
    let text = e.to_string().to_ascii_lowercase();
    ["shard limit", "limit of shards", "shard quota"]
        .iter()
        .any(|w| text.contains(w))
}

/// `UpdateShardCount` of `stream` from `from` to `to` open shards (uniform scaling), through the
/// ledger of the journal at `journal_path`: refused before the call when the 24 h budget is spent
/// or `to` is outside ×½..×2 ([`ReshardError::Ledger`]); the call is recorded in the journal
/// before it is made (a crash after it still counts it), and the executor waits for ACTIVE.
pub async fn update_shard_count(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    journal_path: &Path,
    from: u32,
    to: u32,
    config: &ApplyConfig,
) -> Result<Journal, ReshardError> {
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    let mut journal = match Journal::load(journal_path)? {
        Some(j) if j.stream != stream => {
            return Err(ReshardError::OtherStream {
                path: journal_path.to_owned(),
                found: j.stream,
                stream: stream.to_owned(),
            });
        }
        Some(j) => j,
        None => Journal {
            stream: stream.to_owned(),
            ops: vec![],
            done: 0,
            state: ReshardState::default(),
            created_ms: crate::clock::now_ms(),
            ledger: Ledger::default(),
        },
    };
    let now_secs = crate::clock::now_ms() / 1_000;
    journal
        .ledger
        .spend(now_secs, from, to)
        .map_err(|source| ReshardError::Ledger {
            stream: stream.to_owned(),
            source,
        })?;
    journal.save(journal_path)?;
    let out = kinesis
        .update_shard_count()
        .stream_name(stream)
        .target_shard_count(i32::try_from(to).unwrap_or(i32::MAX))
        .scaling_type(aws_sdk_kinesis::types::ScalingType::UniformScaling)
        .send()
        .await
        .map_err(|e| AwsError::new("Kinesis", "UpdateShardCount", stream, e));
    if let Err(e) = out {
        if is_quota(&e) {
            return Err(ReshardError::Quota {
                operation: "UpdateShardCount",
                stream: stream.to_owned(),
                message: e.to_string(),
            });
        }
        return Err(e.into());
    }
    wait_active(kinesis, stream, config).await?;
    Ok(journal)
}

/// The stream's `DescribeStreamSummary`.
async fn summary(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<
    aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput,
    AwsError,
> {
    kinesis
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .map_err(|e| AwsError::new("Kinesis", "DescribeStreamSummary", stream, e))
}

/// [`ReshardError::Keyless`] for a stream that places records itself: its summary says
/// `RecordDistributionStrategy` `AUTO` (only on-demand streams say anything).
async fn refuse_keyless(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<(), ReshardError> {
    let out = summary(kinesis, stream).await?;
    let auto = out.stream_description_summary().is_some_and(|d| {
        d.record_distribution_strategy()
            == Some(&aws_sdk_kinesis::types::RecordDistributionStrategy::Auto)
    });
    if auto {
        return Err(ReshardError::Keyless {
            stream: stream.to_owned(),
        });
    }
    Ok(())
}

async fn wait_active(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    config: &ApplyConfig,
) -> Result<(), ReshardError> {
    let started = Instant::now();
    loop {
        let out = summary(kinesis, stream).await?;
        let active = out
            .stream_description_summary()
            .is_some_and(|d| d.stream_status() == &StreamStatus::Active);
        if active {
            return Ok(());
        }
        if started.elapsed() >= config.deadline {
            return Err(ReshardError::Deadline {
                what: "waiting for ACTIVE".into(),
                stream: stream.to_owned(),
                secs: config.deadline.as_secs(),
            });
        }
        tokio::time::sleep(config.poll).await;
    }
}

/// The hot-key controller's signals for the keys `plan` refused to split for ("salt it"):
/// each key's load in writes per second against the load one key may carry before the plan
/// refuses (`hot_key_share × split_at` of a shard), so every refused key is at or over its
/// ceiling. One signal per key (a key refused on two shards gets its loads summed by the
/// controller).
pub fn hot_key_signals(plan: &Plan, config: &PlanConfig) -> Vec<Signal> {
    let ceiling = config.hot_key_share * config.split_at * SHARD_RECORDS_PER_SECOND;
    plan.hot_keys
        .iter()
        .map(|h| {
            Signal::new(
                &h.partition_key,
                Kind::Write,
                h.load * SHARD_RECORDS_PER_SECOND,
                ceiling,
                &format!("reshard {}", h.shard_id),
            )
        })
        .collect()
}

/// Hand the keys `plan` refused to split for to the hot-key controller, which salts them in
/// its directory (see the module docs). Only those keys are touched: entries the plan does not
/// name are neither calmed nor removed by this run. `now` is Unix seconds.
pub async fn hand_off_hot_keys(
    controller: &Controller,
    plan: &Plan,
    config: &PlanConfig,
    now: u64,
) -> Result<ControlReport, DirectoryError> {
    let signals = hot_key_signals(plan, config);
    if signals.is_empty() {
        return Ok(ControlReport::default());
    }
    let bounds = RunBounds {
        covers: &|_| false,
        ..RunBounds::UNBOUNDED
    };
    controller.run_bounded(&signals, now, &bounds).await
}

/// The shards of `stream` listed by `ListShards` with `ShardFilter { AT_TIMESTAMP, at_secs }`:
/// those created at or before `at_secs` and open then (every page).
async fn listed_at(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    at_secs: u64,
) -> Result<Vec<String>, ReshardError> {
    let filter = ShardFilter::builder()
        .r#type(ShardFilterType::AtTimestamp)
        .timestamp(DateTime::from_secs(
            i64::try_from(at_secs).unwrap_or(i64::MAX),
        ))
        .build()
        .map_err(|source| KinesisError::Request {
            stream: stream.to_owned(),
            source,
        })?;
    let mut ids = Vec::new();
    let mut next: Option<String> = None;
    loop {
        // A NextToken carries the filter; the two may not be sent together.
        let req = match &next {
            Some(t) => kinesis.list_shards().next_token(t),
            None => kinesis
                .list_shards()
                .stream_name(stream)
                .shard_filter(filter.clone()),
        };
        let out = req
            .send()
            .await
            .map_err(|e| AwsError::new("Kinesis", "ListShards", stream, e))?;
        ids.extend(out.shards().iter().map(|s| s.shard_id().to_owned()));
        next = out.next_token;
        if next.is_none() {
            return Ok(ids);
        }
    }
}

/// The open shards in `open` created less than `window_secs` before `now_secs`, each with the
/// latest time it can have been created (Unix seconds), from `ListShards` with an
/// `AT_TIMESTAMP` filter ([`CreationProbe`]: one call, and about six more when a shard is that
/// young). A listing that ignores the filter (an emulator) makes every shard old.
pub async fn created_within(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    open: &[String],
    now_secs: u64,
    window_secs: u64,
) -> Result<std::collections::BTreeMap<String, u64>, ReshardError> {
    let mut probe = CreationProbe::new(open.iter().cloned(), now_secs, window_secs);
    while let Some(t) = probe.next_probe() {
        let listed = listed_at(kinesis, stream, t).await?;
        probe.observe(t, listed);
    }
    Ok(probe.created_at())
}

/// Sample and plan in one go (what `heatsink reshard plan` prints). Each young shard's
/// `created_at` comes from the shard listing ([`created_within`]), so the plan's cooldown
/// ([`PlanConfig::cooldown_secs`]) refuses to split or merge a shard a reshard just made.
pub async fn sample_and_plan(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    secs: u64,
    now_ms: u64,
    state: &ReshardState,
    config: &PlanConfig,
) -> Result<Plan, ReshardError> {
    let kinesis = &crate::timeouts::bounded!(aws_sdk_kinesis, kinesis.clone(), Timeouts::CALL);
    refuse_keyless(kinesis, stream).await?;
    let mut samples = sample(kinesis, stream, secs, now_ms).await?;
    let open: Vec<String> = samples.iter().map(|s| s.shard_id.clone()).collect();
    let young =
        created_within(kinesis, stream, &open, now_ms / 1_000, config.cooldown_secs).await?;
    for s in &mut samples {
        s.created_at = young.get(&s.shard_id).copied();
    }
    Ok(heatsink_core::reshard::plan(
        &samples,
        state,
        config,
        now_ms / 1_000,
    )?)
}

#[cfg(test)]
mod tests {
    use aws_sdk_kinesis::config::retry::RetryConfig;
    use aws_sdk_kinesis::error::ErrorMetadata;
    use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput;
    use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
    use aws_sdk_kinesis::operation::split_shard::{SplitShardError, SplitShardOutput};
    use aws_sdk_kinesis::types::error::{LimitExceededException, ResourceInUseException};
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange, Shard};
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::testing::mocked;

    fn one_shard() -> Rule {
        mock!(aws_sdk_kinesis::Client::list_shards).then_output(|| {
            crate::testing::one_shard("shardId-000000000000", "1").expect("listing")
        })
    }

    fn active() -> Rule {
        mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(|| {
            DescribeStreamSummaryOutput::builder()
                .stream_description_summary(
                    crate::testing::stream_summary(StreamStatus::Active)
                        .build()
                        .unwrap(),
                )
                .build()
        })
    }

    /// An on-demand stream with `RecordDistributionStrategy` `AUTO` (DescribeStreamSummary as
    /// the API reference shapes it) is refused before anything is sampled, with the reason and
    /// what to do instead; one placed by partition key is sampled and planned.
    #[tokio::test]
    async fn smithy_mock_an_auto_distribution_stream_is_not_planned_from_keys() {
        use aws_sdk_kinesis::types::{RecordDistributionStrategy, StreamMode, StreamModeDetails};
        let summary = |strategy: RecordDistributionStrategy| {
            mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(move || {
                DescribeStreamSummaryOutput::builder()
                    .stream_description_summary(
                        crate::testing::stream_summary(StreamStatus::Active)
                            .stream_mode_details(
                                StreamModeDetails::builder()
                                    .stream_mode(StreamMode::OnDemand)
                                    .build()
                                    .unwrap(),
                            )
                            .record_distribution_strategy(strategy.clone())
                            .build()
                            .unwrap(),
                    )
                    .build()
            })
        };
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); summary(RecordDistributionStrategy::Auto));
        let err = sample_and_plan(
            &k,
            "s",
            10,
            0,
            &ReshardState::default(),
            &PlanConfig::default(),
        )
        .await
        .expect_err("no plan from keys on an AUTO stream");
        let text = err.to_string();
        assert!(matches!(err, ReshardError::Keyless { .. }), "{text}");
        assert!(
            text.contains("warm throughput") && !text.contains('\n'),
            "{text}"
        );
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled());
            summary(RecordDistributionStrategy::UserPartitionKey));
        refuse_keyless(&k, "s")
            .await
            .expect("a stream placed by partition key is planned from its keys");
    }

    fn limit_exceeded() -> SplitShardError {
        SplitShardError::LimitExceededException(
            LimitExceededException::builder()
                .message("Rate exceeded for stream s")
                .meta(
                    ErrorMetadata::builder()
                        .code("LimitExceededException")
                        .message("Rate exceeded for stream s")
                        .build(),
                )
                .build(),
        )
    }

    /// What SplitShard answers while another operation (a split, a merge, an UpdateShardCount
    /// from another tool) still has the stream UPDATING.
    fn resource_in_use() -> SplitShardError {
        let msg = "Stream s under account 123456789012 not ACTIVE, instead in state UPDATING";
        SplitShardError::ResourceInUseException(
            ResourceInUseException::builder()
                .message(msg)
                .meta(
                    ErrorMetadata::builder()
                        .code("ResourceInUseException")
                        .message(msg)
                        .build(),
                )
                .build(),
        )
    }

    fn split_plan() -> Plan {
        let shard = ShardSample::new("shardId-000000000000", 0, u128::MAX, 1.0, vec![]);
        let mut p = heatsink_core::reshard::plan(
            &[shard],
            &ReshardState::default(),
            &PlanConfig::default(),
            0,
        )
        .unwrap();
        p.ops = vec![Op::Split {
            start: 0,
            end: u128::MAX,
            at: 1u128 << 127,
        }];
        p
    }

    fn journal_path(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "heatsink-reshard-test-{name}-{}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// Runs one planned split against a SplitShard that answers `error` `times` times, then
    /// succeeds: the executor must back off once per refusal (reported as a `Step::Backoff` with
    /// the error's `code`), go through, and leave the step journaled as done.
    async fn refused_then_split(error: fn() -> SplitShardError, code: &str, times: usize) {
        let split = mock!(aws_sdk_kinesis::Client::split_shard)
            .sequence()
            .error(error)
            .times(times)
            .output(|| SplitShardOutput::builder().build())
            .build();
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), split, active());
        let path = journal_path(code);
        let mut steps = vec![];
        let j = apply(
            &k,
            "s",
            &path,
            Some(&split_plan()),
            &ApplyConfig::default(),
            |s| steps.push(s),
        )
        .await
        .unwrap();
        assert_eq!(j.done, 1, "the split went through once {code} lifted");
        let backoffs = steps
            .iter()
            .filter(|s| matches!(s, Step::Backoff { code: c, .. } if c == code))
            .count();
        assert_eq!(backoffs, times, "{steps:?}");
        assert_eq!(Journal::load(&path).unwrap().unwrap().done, 1);
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_limit_exceeded_is_backed_off_and_the_split_goes_through() {
        refused_then_split(limit_exceeded, "LimitExceededException", 2).await;
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_a_limit_that_never_lifts_ends_at_the_deadline_and_keeps_the_journal() {
        let split = mock!(aws_sdk_kinesis::Client::split_shard).then_error(limit_exceeded);
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), split, active());
        let path = journal_path("deadline");
        let config = ApplyConfig {
            deadline: Duration::from_secs(60),
            ..ApplyConfig::default()
        };
        let err = apply(&k, "s", &path, Some(&split_plan()), &config, |_| {})
            .await
            .unwrap_err();
        assert!(matches!(err, ReshardError::Deadline { .. }), "{err}");
        let j = Journal::load(&path).unwrap().unwrap();
        assert_eq!(
            (j.done, j.ops.len()),
            (0, 1),
            "the journal still has the step to resume"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_resource_in_use_is_backed_off_and_the_split_goes_through() {
        refused_then_split(resource_in_use, "ResourceInUseException", 3).await;
    }

    /// What SplitShard answers when the split would take the account over its shard quota (the
    /// API reference's LimitExceededException, with the quota's message).
    fn shard_quota() -> SplitShardError {
        let msg = "This request would exceed the shard limit for the account 123456789012 in \
                   us-east-1. Current limit of shards is 500, and in use is 500.";
        SplitShardError::LimitExceededException(
            LimitExceededException::builder()
                .message(msg)
                .meta(
                    ErrorMetadata::builder()
                        .code("LimitExceededException")
                        .message(msg)
                        .build(),
                )
                .build(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_an_account_shard_quota_stops_at_once_with_the_quota_and_the_next_step() {
        let split = mock!(aws_sdk_kinesis::Client::split_shard).then_error(shard_quota);
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), split, active());
        let path = journal_path("quota");
        let mut steps = vec![];
        let err = apply(
            &k,
            "s",
            &path,
            Some(&split_plan()),
            &ApplyConfig::default(),
            |s| steps.push(s),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ReshardError::Quota { .. }), "{err}");
        assert_eq!(split.num_calls(), 1, "called once, never retried as a rate");
        assert!(
            !steps.iter().any(|s| matches!(s, Step::Backoff { .. })),
            "{steps:?}"
        );
        let line = err.to_string();
        assert!(
            line.contains("shard quota") && line.contains("re-run apply") && !line.contains('\n'),
            "{line}"
        );
        assert_eq!(
            Journal::load(&path).unwrap().unwrap().done,
            0,
            "kept to resume"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_a_stale_journal_does_not_win_over_a_fresh_plan_unless_told() {
        let split = mock!(aws_sdk_kinesis::Client::split_shard)
            .then_output(|| SplitShardOutput::builder().build());
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); one_shard(), split, active());
        let path = journal_path("stale");
        let old = Journal {
            stream: "s".into(),
            ops: split_plan().ops,
            done: 0,
            state: ReshardState::default(),
            created_ms: crate::clock::now_ms() - 2 * 3_600_000,
            ledger: Ledger::default(),
        };
        old.save(&path).unwrap();
        let err = apply(
            &k,
            "s",
            &path,
            Some(&split_plan()),
            &ApplyConfig::default(),
            |_| {},
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ReshardError::StaleJournal { age_secs, .. } if age_secs >= 7_200),
            "{err}"
        );
        assert_eq!(
            split.num_calls(),
            0,
            "nothing of the stale plan was carried out"
        );
        // A journal within the window is resumed as before.
        Journal {
            created_ms: crate::clock::now_ms() - 60_000,
            ..old.clone()
        }
        .save(&path)
        .unwrap();
        let j = apply(
            &k,
            "s",
            &path,
            Some(&split_plan()),
            &ApplyConfig::default(),
            |_| {},
        )
        .await
        .unwrap();
        assert_eq!((j.done, split.num_calls()), (1, 1));
        // Told to finish it: the stale one is carried out.
        old.save(&path).unwrap();
        let told = ApplyConfig {
            resume_stale: true,
            ..ApplyConfig::default()
        };
        let j = apply(&k, "s", &path, Some(&split_plan()), &told, |_| {})
            .await
            .unwrap();
        assert_eq!((j.done, split.num_calls()), (1, 2));
        let _ = std::fs::remove_file(&path);
    }

    /// A stream split 100 s ago, as ListShards shapes it (API reference: `Shard` with
    /// `ParentShardId`, a closed shard's `EndingSequenceNumber`; `ShardFilter` `AT_LATEST` lists
    /// the open shards, `AT_TIMESTAMP t` the shards started by t and open at t), and a hot left
    /// child (1,000 records in its hash range, no key over 50 %).
    fn split_stream(split_at_secs: u64) -> (Rule, Rule, Rule) {
        use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;
        use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorOutput;
        use aws_sdk_kinesis::primitives::Blob;
        use aws_sdk_kinesis::types::{Record, ShardFilterType};
        const HALF: u128 = 1u128 << 127;
        /// (id, parent, start, end, created, closed)
        type Model = (
            &'static str,
            Option<&'static str>,
            u128,
            u128,
            u64,
            Option<u64>,
        );
        let shards: Vec<Model> = vec![
            (
                "shardId-000000000000",
                None,
                0,
                u128::MAX,
                0,
                Some(split_at_secs),
            ),
            (
                "shardId-000000000001",
                Some("shardId-000000000000"),
                0,
                HALF - 1,
                split_at_secs,
                None,
            ),
            (
                "shardId-000000000002",
                Some("shardId-000000000000"),
                HALF,
                u128::MAX,
                split_at_secs,
                None,
            ),
        ];
        let shape = |&(id, parent, start, end, _, closed): &Model| {
            let mut seq = SequenceNumberRange::builder().starting_sequence_number("1");
            if closed.is_some() {
                seq = seq.ending_sequence_number("99");
            }
            Shard::builder()
                .shard_id(id)
                .set_parent_shard_id(parent.map(str::to_owned))
                .hash_key_range(
                    HashKeyRange::builder()
                        .starting_hash_key(start.to_string())
                        .ending_hash_key(end.to_string())
                        .build()
                        .unwrap(),
                )
                .sequence_number_range(seq.build().unwrap())
                .build()
                .unwrap()
        };
        let list = mock!(aws_sdk_kinesis::Client::list_shards).then_compute_output(move |req| {
            let filter = req.shard_filter();
            let listed = shards.iter().filter(|s| match filter.map(|f| f.r#type()) {
                None => true,
                Some(ShardFilterType::AtLatest) => s.5.is_none(),
                Some(ShardFilterType::AtTimestamp) => {
                    let t = filter
                        .and_then(|f| f.timestamp())
                        .map_or(0, |t| u64::try_from(t.secs()).unwrap_or(0));
                    s.4 <= t && s.5.is_none_or(|c| c >= t)
                }
                Some(other) => panic!("unexpected filter {other:?}"),
            });
            ListShardsOutput::builder()
                .set_shards(Some(listed.map(shape).collect()))
                .build()
        });
        let iterator =
            mock!(aws_sdk_kinesis::Client::get_shard_iterator).then_compute_output(|req| {
                GetShardIteratorOutput::builder()
                    .shard_iterator(format!("it-{}", req.shard_id().unwrap_or_default()))
                    .build()
            });
        let records = mock!(aws_sdk_kinesis::Client::get_records).then_compute_output(move |req| {
            let hot = req.shard_iterator() == Some("it-shardId-000000000001");
            let at = DateTime::from_secs(i64::try_from(split_at_secs).unwrap_or(0) + 99);
            let recs: Vec<Record> = (0u32..)
                .map(|i| format!("user-{i}"))
                .filter(|k| kinesis_hash_key(k) < HALF)
                .take(if hot { 1_000 } else { 0 })
                .enumerate()
                .map(|(i, k)| {
                    Record::builder()
                        .sequence_number(i.to_string())
                        .approximate_arrival_timestamp(at)
                        .data(Blob::new(vec![0u8; 100]))
                        .partition_key(k)
                        .build()
                        .unwrap()
                })
                .collect();
            GetRecordsOutput::builder()
                .set_records(Some(recs))
                .millis_behind_latest(0)
                .build()
                .unwrap()
        });
        (list, iterator, records)
    }

    /// The cooldown acts on the shard listing: a hot child of a split made 100 s ago is refused
    /// ("cooldown", with when to plan again) and apply makes no call; 900 s later the same
    /// listing and load plan the split.
    #[tokio::test(start_paused = true)]
    async fn smithy_mock_a_second_reshard_inside_the_cooldown_is_refused_with_the_next_step() {
        let now = 1_700_000_000u64;
        let (list, iterator, records) = split_stream(now - 100);
        let split = mock!(aws_sdk_kinesis::Client::split_shard)
            .then_output(|| SplitShardOutput::builder().build());
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); list, iterator, records, split, active());
        let config = PlanConfig::default();
        let young = created_within(
            &k,
            "s",
            &["shardId-000000000001".into(), "shardId-000000000002".into()],
            now,
            config.cooldown_secs,
        )
        .await
        .unwrap();
        for (id, at) in &young {
            assert!(
                (now - 100..=now - 100 + 30).contains(at),
                "{id}: created at {at}, the split was at {}",
                now - 100
            );
        }
        assert_eq!(young.len(), 2, "{young:?}");
        let calls = list.num_calls();
        assert!(calls <= 17, "one window probe and a few halvings: {calls}");

        let plan = sample_and_plan(&k, "s", 1, now * 1_000, &ReshardState::default(), &config)
            .await
            .unwrap();
        let hot = &plan.shards[0];
        assert_eq!(hot.shard_id, "shardId-000000000001");
        assert!(hot.load >= config.split_at, "{hot:?}");
        assert_eq!(hot.action, Action::Refuse, "{hot:?}");
        let Some(Refusal::Cooldown { until }) = hot.refusal else {
            panic!("refused for its cooldown: {hot:?}");
        };
        assert!(
            (now - 100 + 900..=now - 100 + 930).contains(&until),
            "{until}"
        );
        let reason = hot
            .refusal
            .as_ref()
            .map(Refusal::reason)
            .unwrap_or_default();
        assert!(
            reason.contains("cooldown")
                && reason.contains(&format!("plan again at or after {until}")),
            "{reason}"
        );
        assert!(plan.ops.is_empty(), "{:?}", plan.ops);
        let path = journal_path("cooldown");
        let j = apply(&k, "s", &path, Some(&plan), &ApplyConfig::default(), |_| {})
            .await
            .unwrap();
        assert_eq!(
            (j.ops.len(), split.num_calls()),
            (0, 0),
            "no call inside the cooldown"
        );
        let _ = std::fs::remove_file(&path);

        // Once the cooldown has passed, the same load is split.
        let later = until + 1;
        let plan = sample_and_plan(&k, "s", 1, later * 1_000, &ReshardState::default(), &config)
            .await
            .unwrap();
        assert_eq!(plan.shards[0].action, Action::Split, "{:?}", plan.shards[0]);
        assert_eq!(plan.shards[0].refusal, None);
    }

    #[tokio::test(start_paused = true)]
    async fn smithy_mock_update_shard_count_goes_through_the_ledger_before_each_call() {
        use aws_sdk_kinesis::operation::update_shard_count::UpdateShardCountOutput;
        let update = mock!(aws_sdk_kinesis::Client::update_shard_count)
            .then_output(|| UpdateShardCountOutput::builder().build());
        let k = mocked!(aws_sdk_kinesis with |c| c.retry_config(RetryConfig::disabled()); update, active());
        let path = journal_path("ledger");
        let config = ApplyConfig::default();
        let err = update_shard_count(&k, "s", &path, 4, 9, &config)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ReshardError::Ledger {
                    source: LedgerError::OutOfRange { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(update.num_calls(), 0, "refused before the call");
        for i in 0..10u32 {
            let (from, to) = if i % 2 == 0 { (4, 8) } else { (8, 4) };
            update_shard_count(&k, "s", &path, from, to, &config)
                .await
                .unwrap();
        }
        assert_eq!(update.num_calls(), 10);
        let err = update_shard_count(&k, "s", &path, 4, 8, &config)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ReshardError::Ledger {
                    source: LedgerError::Spent { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            update.num_calls(),
            10,
            "the eleventh call in 24 h is never made"
        );
        assert_eq!(
            Journal::load(&path)
                .unwrap()
                .unwrap()
                .ledger
                .remaining(crate::clock::now_ms() / 1_000),
            0
        );
        let _ = std::fs::remove_file(&path);
    }
}
