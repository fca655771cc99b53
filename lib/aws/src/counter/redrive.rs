//! Redrive: a parked batch's changes back to the repair, so a lost like on a cold post is
//! corrected too.
//!
//! When the aggregator's event-source mapping gives up on a batch (every retry failed, or the
//! batch outlived its maximum age), Lambda sends an on-failure record naming the shard and the
//! sequence range it skipped ([`ParkedBatch`]) and moves on. Those changes were never counted,
//! and nothing else points the incremental repair at them: it judges only counters a *counted*
//! change touched, so a post liked a few times a day would stay short for good.
//!
//! A redrive reads the range back from the stream while it is within retention
//! ([`Redrive::read`]: `GetShardIterator` at the batch's first sequence number, then
//! `GetRecords` until the batch's last record or the shard's end), maps each change with the
//! aggregator's own [`ChangeMapper`] to the (counter id, time bucket) it moves, and hands those
//! checks to the repair ([`Repair::request`](super::repair::Repair::request)), which recounts
//! each bucket from the durable records and corrects it once the aggregator's watermarks prove
//! the bucket settled. The recount is the truth, so whatever the parked batch flushed before
//! it failed is never counted twice.
//!
//! **Proof, not a timer.** A read is complete only when it reached the batch's last record or
//! the shard's end ([`RangeRead`]); a read that did not (the tip answered empty, the page bound
//! or the deadline passed) or that found the start already trimmed is reported as such and
//! requests nothing; the caller keeps the on-failure record and says the next command.
//! [`Redrive::redrive`] does one record end to end, [`Redrive::drain`] a queue of them, deleting
//! a message only after its checks are saved (what `heatsink redrive` runs).
//!
//! Bounds: at most [`MAX_PAGES`] `GetRecords` calls and [`Redrive::deadline`] per batch (10 s by
//! default), records of at most [`MAX_CHANGE_BYTES`](crate::lambda::MAX_CHANGE_BYTES) decoded,
//! at most [`MAX_PARKED_BATCH`] checks per batch.
//!
//! ```no_run
//! # async fn f(config: aws_types::SdkConfig, record: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
//! use heatsink::counter::aggregate::CountBy;
//! use heatsink::counter::redrive::Redrive;
//! use heatsink::counter::{BucketSpec, ParkedBatch};
//! let mapper = CountBy::new("orders", "product").with_time("ordered_at");
//! let redrive = Redrive::new(&mapper, "orders", BucketSpec::default())
//!     .with_kinesis(aws_sdk_kinesis::Client::new(&config));
//! let read = redrive.read(&ParkedBatch::parse(record)?).await?;
//! println!("{} records, {} checks, {}", read.records, read.checks.len(), read.outcome);
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use heatsink_core::counter::{
    BucketSpec, Check, MAX_PARKED_BATCH, ParkedBatch, ParkedSource, RangeOutcome, RangeRead, Seq,
};
use serde::Serialize;
use serde_json::Value;

use super::aggregate::ChangeMapper;
use super::rebuild::RebuildError;
use super::repair::{BucketRecount, Repair, Requested};
use crate::ddb::stream_reader::{self, Position};
use crate::error::AwsError;

/// Most `GetRecords` calls one batch's read makes (a batch holds at most 10,000 records; a
/// page up to 10,000, and empty pages are possible inside a shard).
pub const MAX_PAGES: u32 = 1_000;

/// Records asked for per `GetRecords` call.
const PAGE: i32 = 1_000;

/// Consecutive empty pages of an open shard taken as its tip (DynamoDB Streams answers empty
/// pages inside a shard too; the read then reports `unfinished`, never `complete`).
const TIP_PAGES: u32 = 5;

/// Errors of a redrive.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// A stream call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// Saving the checks in the repair's cursor failed.
    #[error(transparent)]
    Repair(#[from] RebuildError),
    /// The batch's stream has no client here (a Kinesis batch and no Kinesis client, or the
    /// other way round), or its ARN is not a stream's.
    #[error("{arn}: {reason}")]
    Stream {
        /// The batch's stream ARN.
        arn: String,
        /// What is missing.
        reason: String,
    },
}

/// What reading one parked batch back found.
#[derive(Debug, Clone, Serialize)]
pub struct RedriveRead {
    /// The batch's shard.
    pub shard_id: String,
    /// `complete`, `gap` (the stream no longer holds the batch's start) or `unfinished`.
    pub outcome: &'static str,
    /// Records of the batch read.
    pub records: u32,
    /// (counter id, bucket) checks for this counter, one per pair, in order.
    pub checks: Vec<Check>,
    /// Ids of this counter whose change carries no event time: no bucket repair can correct
    /// them, only a whole-count rebuild.
    pub unbucketed: Vec<String>,
    /// Records that are not a change of this counter (another counter, a KPL aggregate).
    pub other: u32,
    /// Records the mapper could not read (reported, never fatal: each is also logged).
    pub unusable: u32,
    /// For a read that is not complete: what happened and what to do.
    pub detail: Option<String>,
}

impl RedriveRead {
    /// Whether the read proved it saw every record of the batch the stream holds.
    pub fn is_complete(&self) -> bool {
        self.outcome == "complete"
    }
}

/// Reads parked batches back from their stream into the repair's checks (see the module docs).
pub struct Redrive<'a, M: ?Sized> {
    mapper: &'a M,
    counter: String,
    buckets: BucketSpec,
    kinesis: Option<aws_sdk_kinesis::Client>,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    deadline: Duration,
    drain_budget: Duration,
}

impl<M: ?Sized> std::fmt::Debug for Redrive<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redrive")
            .field("counter", &self.counter)
            .field("buckets", &self.buckets)
            .field("deadline", &self.deadline)
            .field("drain_budget", &self.drain_budget)
            .finish_non_exhaustive()
    }
}

impl<'a, M: ChangeMapper + ?Sized> Redrive<'a, M> {
    /// A redrive of counter `counter` (the name in `CounterKey`), mapping changes with the
    /// aggregator's `mapper` into the aggregator's `buckets`.
    pub fn new(mapper: &'a M, counter: impl Into<String>, buckets: BucketSpec) -> Self {
        Self {
            mapper,
            counter: counter.into(),
            buckets,
            kinesis: None,
            streams: None,
            deadline: Duration::from_secs(10),
            drain_budget: Duration::from_secs(60),
        }
    }

    /// Reads Kinesis batches (`KinesisBatchInfo`) with `client`.
    pub fn with_kinesis(mut self, client: aws_sdk_kinesis::Client) -> Self {
        self.kinesis = Some(client);
        self
    }

    /// Reads DynamoDB Streams batches (`DDBStreamBatchInfo`) with `client`.
    pub fn with_streams(mut self, client: aws_sdk_dynamodbstreams::Client) -> Self {
        self.streams = Some(client);
        self
    }

    /// The longest one batch's read takes (default 10 s); past it the read is `unfinished`.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long a [`Redrive::drain`] starts new batches (default 60 s). The drain checks it
    /// between batches and never cancels one under way: a batch's read is bounded by
    /// [`Redrive::deadline`] and its request holds the repair's lease only while it saves, so a
    /// drain ends at most one batch after its budget, with no lease left behind. (Cancelling it
    /// from outside, as a `tokio::time::timeout` would, can leave the lease held for its full
    /// term: the next repair runs then find it busy.)
    pub fn drain_budget(mut self, budget: Duration) -> Self {
        self.drain_budget = budget;
        self
    }

    /// Reads `batch`'s range back from its shard and maps it to this counter's checks. A read
    /// that is not complete is returned with its outcome and the next step, its checks as far
    /// as it got (never to be requested: see [`RedriveRead::is_complete`]).
    pub async fn read(&self, batch: &ParkedBatch) -> Result<RedriveRead, RedriveError> {
        let mut range = RangeRead::new(batch);
        let mut acc = Mapped::default();
        match batch.source {
            ParkedSource::Kinesis => self.read_kinesis(batch, &mut range, &mut acc).await?,
            ParkedSource::DynamoDbStreams => self.read_streams(batch, &mut range, &mut acc).await?,
        }
        let (outcome, detail) = match range.outcome() {
            RangeOutcome::Complete => ("complete", None),
            RangeOutcome::Gap { first_read } => (
                "gap",
                Some(format!(
                    "shard {} no longer holds record {} (first held: {}): the batch is past the stream's retention; run `heatsink rebuild` to recount every counter",
                    batch.shard_id,
                    batch.start_seq.to_decimal(),
                    first_read.as_ref().map_or("none", |s| s.to_decimal()),
                )),
            ),
            RangeOutcome::Unfinished => (
                "unfinished",
                Some(format!(
                    "read {} records of shard {} without reaching record {} or the shard's end (page bound, deadline or the tip); run the same redrive again",
                    range.taken(),
                    batch.shard_id,
                    batch.end_seq.to_decimal(),
                )),
            ),
        };
        Ok(RedriveRead {
            shard_id: batch.shard_id.clone(),
            outcome,
            records: range.taken(),
            checks: acc.checks.into_iter().collect(),
            unbucketed: acc.unbucketed.into_iter().collect(),
            other: acc.other,
            unusable: acc.unusable,
            detail,
        })
    }

    /// One change of the batch, mapped into `acc`.
    fn map(&self, seq: &str, change: Result<Option<Value>, String>, acc: &mut Mapped) {
        let change = match change {
            Ok(Some(c)) => c,
            Ok(None) => {
                acc.other += 1;
                return;
            }
            Err(reason) => {
                tracing::warn!(record = %seq, %reason, "a parked record that does not decode");
                acc.unusable += 1;
                return;
            }
        };
        match self.mapper.map(&change) {
            Ok(Some((key, _))) if key.name() == self.counter => {
                match self.mapper.event_ms(&change) {
                    Some(ms) if acc.checks.len() < MAX_PARKED_BATCH as usize => {
                        acc.checks
                            .insert(Check::new(key.key(), self.buckets.start_of(ms)));
                    }
                    Some(_) => acc.unusable += 1,
                    None => {
                        acc.unbucketed.insert(key.key().to_owned());
                    }
                }
            }
            Ok(_) => acc.other += 1,
            Err(reason) => {
                tracing::warn!(record = %seq, %reason, "a parked change the mapper refuses");
                acc.unusable += 1;
            }
        }
    }

    async fn read_kinesis(
        &self,
        batch: &ParkedBatch,
        range: &mut RangeRead,
        acc: &mut Mapped,
    ) -> Result<(), RedriveError> {
        let client = self.kinesis.as_ref().ok_or_else(|| RedriveError::Stream {
            arn: batch.stream_arn.clone(),
            reason: "a Kinesis batch, and this redrive has no Kinesis client".into(),
        })?;
        let name = kinesis_name(&batch.stream_arn)?;
        let out = client
            .get_shard_iterator()
            .stream_name(name)
            .shard_id(&batch.shard_id)
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AtSequenceNumber)
            .starting_sequence_number(batch.start_seq.to_decimal())
            .send()
            .await;
        let first = match out {
            Ok(o) => o.shard_iterator,
            Err(e) => {
                let e = AwsError::new("Kinesis", "GetShardIterator", &batch.shard_id, e);
                // The shard is gone (past retention after a reshard): nothing to read.
                if e.is_not_found() {
                    range.shard_ended();
                    return Ok(());
                }
                return Err(e.into());
            }
        };
        self.read_pages(&batch.stream_arn, first, range, acc, |it| async move {
            let page = client
                .get_records()
                .shard_iterator(it)
                .limit(PAGE)
                .send()
                .await
                .map_err(|e| AwsError::new("Kinesis", "GetRecords", &batch.shard_id, e))?;
            // At the tip of an open shard: the batch's last record is not there (yet).
            let at_tip = page.records().is_empty() && page.millis_behind_latest() == Some(0);
            let next = page.next_shard_iterator.clone();
            let records = page
                .records
                .into_iter()
                .map(|r| (r.sequence_number, Raw::Kinesis(r.data.into_inner())))
                .collect();
            Ok(Page {
                records,
                next,
                at_tip,
            })
        })
        .await
    }

    async fn read_streams(
        &self,
        batch: &ParkedBatch,
        range: &mut RangeRead,
        acc: &mut Mapped,
    ) -> Result<(), RedriveError> {
        let client = self.streams.as_ref().ok_or_else(|| RedriveError::Stream {
            arn: batch.stream_arn.clone(),
            reason: "a DynamoDB Streams batch, and this redrive has no DynamoDB Streams client"
                .into(),
        })?;
        let start = Position::At(batch.start_seq.to_decimal());
        let out = stream_reader::iterator(client, &batch.stream_arn, &batch.shard_id, start).await;
        let first = match out {
            Ok(it) => it,
            Err(e) => {
                // Past the 24 h retention the start is trimmed, or the shard is gone.
                if e.is_not_found() || e.code() == Some("TrimmedDataAccessException") {
                    range.shard_ended();
                    return Ok(());
                }
                return Err(e.into());
            }
        };
        self.read_pages(&batch.stream_arn, first, range, acc, |it| async move {
            let page = stream_reader::page(client, &it, PAGE, &batch.shard_id).await?;
            // Kept as the SDK gives them: only the batch's records become JSON (a page holds
            // up to 1,000 records around a parked batch of a few).
            let records = page
                .records
                .unwrap_or_default()
                .into_iter()
                .map(|r| {
                    let seq = r
                        .dynamodb()
                        .and_then(|c| c.sequence_number())
                        .unwrap_or_default()
                        .to_owned();
                    (seq, Raw::Change(Box::new(r)))
                })
                .collect();
            Ok(Page {
                records,
                next: page.next_shard_iterator,
                at_tip: false,
            })
        })
        .await
    }

    /// Reads pages from `first` on with `get` until the range is done, the shard ends, the tip
    /// answers or a bound is reached, mapping the batch's records into `acc`.
    async fn read_pages<F, Fut>(
        &self,
        arn: &str,
        first: Option<String>,
        range: &mut RangeRead,
        acc: &mut Mapped,
        mut get: F,
    ) -> Result<(), RedriveError>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<Page, RedriveError>>,
    {
        let started = Instant::now();
        let (mut pages, mut empty) = (0u32, 0u32);
        let mut iterator = first;
        while let Some(it) = iterator.take() {
            if pages >= MAX_PAGES || started.elapsed() > self.deadline {
                return Ok(());
            }
            pages += 1;
            let page = get(it).await?;
            empty = if page.records.is_empty() {
                empty + 1
            } else {
                0
            };
            for (raw_seq, raw) in page.records {
                let Ok(seq) = Seq::parse(&raw_seq) else {
                    acc.unusable += 1;
                    continue;
                };
                if range.take(&seq) {
                    let change = match raw {
                        Raw::Kinesis(data) => crate::lambda::kinesis_change(&data),
                        Raw::Change(r) => Ok(Some(crate::lambda::stream_record_json(arn, &r))),
                    };
                    self.map(&raw_seq, change, acc);
                }
                if range.done() {
                    return Ok(());
                }
            }
            if page.next.is_none() {
                range.shard_ended();
                return Ok(());
            }
            if page.at_tip || empty >= TIP_PAGES {
                return Ok(());
            }
            iterator = page.next;
        }
        Ok(())
    }
}

/// What became of one parked batch: read, saved for the repair, or kept with the next step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redriven {
    /// Where the record came from (a queue message id, a file).
    pub source: String,
    /// `saved`, `unreadable` (not an on-failure record), `gap`, `unfinished`, `busy` or `full`.
    pub result: &'static str,
    /// The batch's shard, when the record could be read.
    pub shard: Option<String>,
    /// Records of the batch read back.
    pub records: u32,
    /// Checks saved (or that would have been).
    pub checks: usize,
    /// Ids without an event time: only a whole-count rebuild corrects them.
    pub unbucketed: Vec<String>,
    /// For anything but a plain `saved`: what happened and the next step.
    pub detail: Option<String>,
}

impl Redriven {
    /// Whether the batch's checks are saved (its on-failure record may go).
    pub fn saved(&self) -> bool {
        self.result == "saved"
    }
}

impl<M: ChangeMapper + ?Sized> Redrive<'_, M> {
    /// One on-failure record (`bytes`, from `source`): read back and, when the read is
    /// complete, its checks saved with `repair` ([`Repair::request`]). Only a stream or
    /// DynamoDB failure is an `Err`; everything else is a [`Redriven`] saying what to do.
    pub async fn redrive<R: BucketRecount>(
        &self,
        source: String,
        bytes: &[u8],
        repair: &Repair<'_, R>,
    ) -> Result<Redriven, RedriveError> {
        let batch = match ParkedBatch::parse(bytes) {
            Ok(b) => b,
            Err(e) => {
                return Ok(Redriven {
                    source,
                    result: "unreadable",
                    shard: None,
                    records: 0,
                    checks: 0,
                    unbucketed: vec![],
                    detail: Some(format!(
                        "not an on-failure record ({e}); look at it, then delete it by hand"
                    )),
                });
            }
        };
        let read = self.read(&batch).await?;
        let row = |result, detail| Redriven {
            source: source.clone(),
            result,
            shard: Some(read.shard_id.clone()),
            records: read.records,
            checks: read.checks.len(),
            unbucketed: read.unbucketed.clone(),
            detail,
        };
        if !read.is_complete() {
            return Ok(row(read.outcome, read.detail.clone()));
        }
        Ok(match repair.request(&read.checks).await? {
            Requested::Saved { .. } => row(
                "saved",
                (!read.unbucketed.is_empty()).then(|| {
                    format!(
                        "{} counters without an event time: run `heatsink rebuild` for them",
                        read.unbucketed.len()
                    )
                }),
            ),
            Requested::Busy => row(
                "busy",
                Some(
                    "a repair run holds the lease: redrive again once it ends (the record is kept)"
                        .into(),
                ),
            ),
            Requested::Full {
                carried,
                adding,
                max,
            } => row(
                "full",
                Some(format!(
                    "the repair carries {carried} checks and these {adding} would pass its {max}: let the repair run, then redrive again (the record is kept)"
                )),
            ),
        })
    }

    /// Drains up to `max` messages of the on-failure queue `url` (SQS): each is redriven
    /// ([`Redrive::redrive`]) and deleted only once its checks are saved; any other message
    /// stays (invisible for 2 minutes, then back for the next drain). Stops at the first
    /// stream, DynamoDB or SQS failure, messages already saved deleted, and starts no batch
    /// once its [`Redrive::drain_budget`] is spent (a message received but not started is back
    /// in the queue within 2 minutes). A drain killed between a save and its delete leaves the
    /// message: the next drain saves the same checks again (nothing added) and deletes it.
    pub async fn drain<R: BucketRecount>(
        &self,
        sqs: &aws_sdk_sqs::Client,
        url: &str,
        max: u32,
        repair: &Repair<'_, R>,
    ) -> Result<Vec<Redriven>, RedriveError> {
        let started = std::time::Instant::now();
        let spent = || started.elapsed() >= self.drain_budget;
        let mut rows = vec![];
        let mut taken = 0u32;
        while taken < max && !spent() {
            let out = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(i32::try_from((max - taken).min(10)).unwrap_or(10))
                .visibility_timeout(120)
                .send()
                .await
                .map_err(|e| AwsError::new("SQS", "ReceiveMessage", url, e))?;
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                if spent() {
                    break;
                }
                taken += 1;
                let id = m.message_id.clone().unwrap_or_default();
                let body = m.body.unwrap_or_default();
                let row = self.redrive(id, body.as_bytes(), repair).await?;
                if row.saved()
                    && let Some(handle) = &m.receipt_handle
                {
                    sqs.delete_message()
                        .queue_url(url)
                        .receipt_handle(handle)
                        .send()
                        .await
                        .map_err(|e| AwsError::new("SQS", "DeleteMessage", url, e))?;
                }
                rows.push(row);
            }
        }
        Ok(rows)
    }
}

/// One page read back: each record's sequence number and body, the next iterator, and whether
/// the page says the shard's tip was reached.
struct Page {
    records: Vec<(String, Raw)>,
    next: Option<String>,
    at_tip: bool,
}

/// A record's body as its stream gives it.
enum Raw {
    /// Kinesis data (a change record as JSON, decoded only when the record is the batch's).
    Kinesis(Vec<u8>),
    /// A DynamoDB Streams record (made the JSON Lambda delivers only when it is the batch's).
    Change(Box<aws_sdk_dynamodbstreams::types::Record>),
}

/// What the records of one batch mapped to.
#[derive(Default)]
struct Mapped {
    checks: BTreeSet<Check>,
    unbucketed: BTreeSet<String>,
    other: u32,
    unusable: u32,
}

/// The stream name of a Kinesis stream ARN (`arn:aws:kinesis:…:stream/<name>`).
fn kinesis_name(arn: &str) -> Result<&str, RedriveError> {
    super::lineage::kinesis_stream_name(arn).ok_or_else(|| RedriveError::Stream {
        arn: arn.to_owned(),
        reason: "not a Kinesis stream ARN (…:stream/<name>)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kinesis_stream_arns_name_a_stream() {
        assert_eq!(
            kinesis_name("arn:aws:kinesis:us-east-1:1:stream/p-like-events").ok(),
            Some("p-like-events")
        );
        for bad in [
            "arn:aws:kinesis:us-east-1:1:stream/",
            "arn:aws:kinesis:us-east-1:1:stream/a/b",
            "arn:aws:dynamodb:us-east-1:1:table/t/stream/2026",
            "like-events",
        ] {
            assert!(kinesis_name(bad).is_err(), "{bad}");
        }
    }
}
