//! The fetcher: beside each shard task, keeps GetRecords answers queued ahead of the processor,
//! in order, paced ([`ReadPace`], [`ReadSize`]) and within the shard's byte budget, and
//! recovers from read errors (an expired iterator, trimmed records, a gone shard, throttling)
//! as core's [`Recovery`] rules say.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use heatsink_core::stream::{
    Backoff, Lease, Pauses, Progress, ReadAnswer, ReadFailure, ReadPace, ReadSize, Recovery,
};
use tokio::sync::{Notify, mpsc, watch};

use super::early::EarlyRead;
use super::shared::{HeldLease, Shared, sleep_or_stop, stopped};
use super::{GET_RECORDS_PER_SECOND, MIN_GET_RECORDS_INTERVAL, RecordProcessor, expand};
use crate::stream::{RecordBatch, ShardSource, StartAt, StreamError};

/// What the fetcher hands the shard task.
pub(super) enum Fetched {
    /// A GetRecords answer, or the last part of one (its next iterator and child shards).
    Batch(RecordBatch),
    /// A part of an answer whose user records did not fit one batch (`expand.rs`); more follows.
    Part(RecordBatch),
    Gone,
}

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// A fresh page-size state for one shard's reader: pages of `page_records`, at most
    /// `max_records`.
    pub(super) fn read_size(&self) -> ReadSize {
        // `max_records` is at least 1 (`run`); a page below 1 is 1, as `max_records` is.
        let cap = usize::try_from(self.max_records).unwrap_or(1);
        let page = usize::try_from(self.config.page_records.max(1)).unwrap_or(1);
        ReadSize::new(page, cap)
    }

    pub(super) fn start_of(lease: &Lease) -> StartAt {
        match &lease.checkpoint {
            Progress::InProgress(p) if p.sub_seq.is_some() => StartAt::AtSeq(p.seq.clone()),
            Progress::InProgress(p) => StartAt::AfterSeq(p.seq.clone()),
            Progress::Latest => StartAt::Latest,
            Progress::AtTimestamp(ms) => StartAt::AtTimestamp(*ms),
            Progress::NotStarted | Progress::Finished => StartAt::TrimHorizon,
        }
    }

    /// An iterator at `start`, retrying transient failures. `Ok(None)` when told to stop or the
    /// lease lapsed; `Err(())` when the shard is gone.
    pub(super) async fn iterator(
        &self,
        shard: &str,
        start: &StartAt,
        held: &HeldLease,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<String>, ()> {
        let mut backoff = self.backoff();
        let mut start = start.clone();
        loop {
            if *stop.borrow() || !self.is_valid(held) {
                return Ok(None);
            }
            let error = match self.source.get_iterator(shard, &start).await {
                Ok(it) => return Ok(Some(it)),
                Err(e) => e,
            };
            match read_failure(&error).after_get_iterator(start == StartAt::TrimHorizon) {
                Recovery::Gone => return Err(()),
                Recovery::TrimHorizon => {
                    self.trimmed(shard, &start);
                    start = StartAt::TrimHorizon;
                }
                Recovery::Reopen | Recovery::BackOff => {
                    tracing::warn!(shard = %shard, error = %error, "GetShardIterator failed; backing off");
                    if sleep_or_stop(backoff.pause(), stop).await {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// The back-off between failed calls ([`WorkerConfig::retry_backoff`] doubling up to
    /// [`WorkerConfig::max_backoff`]).
    ///
    /// [`WorkerConfig::retry_backoff`]: super::WorkerConfig::retry_backoff
    /// [`WorkerConfig::max_backoff`]: super::WorkerConfig::max_backoff
    pub(super) fn backoff(&self) -> Pauses {
        Backoff::new(self.config.retry_backoff, self.config.max_backoff).pauses()
    }

    pub(super) fn trimmed(&self, shard: &str, from: &StartAt) {
        tracing::warn!(shard = %shard, from = ?from,
            "records past the checkpoint were trimmed past retention before they were read: \
             they are lost; reading resumes at TRIM_HORIZON");
        self.stats.0.trimmed.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps up to `prefetch_batches` GetRecords answers, and below `prefetch_bytes` of
    /// records, queued for the shard task, in order. An early read from `start`, if given, is
    /// the first answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fetch(
        self: Arc<Self>,
        shard: String,
        start: StartAt,
        held: Arc<HeldLease>,
        tx: mpsc::Sender<(Fetched, usize)>,
        budget: Arc<ByteBudget>,
        mut stop: watch::Receiver<bool>,
        early: Option<EarlyRead>,
    ) {
        let mut first = match early {
            Some(mut e) => tokio::select! {
                answer = &mut e.task.0 => answer.ok().flatten(),
                () = stopped(&mut stop) => return,
            },
            None => None,
        };
        let read = Reading {
            shard: &shard,
            held: &held,
            tx: &tx,
        };
        let mut iterator = if let Some(answer) = &first {
            answer.iterator.clone()
        } else {
            match self.open(&read, &start, &mut stop).await {
                AfterError::Reopened(it) => it,
                AfterError::Stop | AfterError::Retry => return,
            }
        };
        let limit = self.config.prefetch_bytes.max(1);
        let mut last: Option<StartAt> = None;
        let mut backoff = self.backoff();
        let mut pacing = Pacing {
            pace: ReadPace::new(GET_RECORDS_PER_SECOND, 1_000),
            size: self.read_size(),
            from: first
                .as_ref()
                .map_or_else(tokio::time::Instant::now, |a| a.sent),
        };
        let idle = self.config.idle_poll.max(MIN_GET_RECORDS_INTERVAL);
        loop {
            if *stop.borrow() || !self.is_valid(&held) {
                return;
            }
            let (result, asked, took) = if let Some(answer) = first.take() {
                pacing.pace.record(0);
                (answer.result, answer.limit, answer.took)
            } else {
                if budget.below(limit, &mut stop).await {
                    return;
                }
                match self.read_paced(&iterator, &mut pacing, &mut stop).await {
                    Some(read) => read,
                    None => return,
                }
            };
            let caught_up = result.as_ref().is_ok_and(|b| is_caught_up(b, asked));
            pacing.size.answered(
                u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                match &result {
                    Ok(_) if caught_up => ReadAnswer::Tip,
                    Ok(_) => ReadAnswer::Behind,
                    Err(_) => ReadAnswer::Failed,
                },
            );
            let batch = match result {
                Ok(batch) => batch,
                Err(e) => {
                    // Where reading stands: after the last record read, or where it began.
                    let at = last.clone().unwrap_or_else(|| start.clone());
                    match self.recover(&read, at, &e, &mut backoff, &mut stop).await {
                        AfterError::Stop => return,
                        AfterError::Retry => {}
                        AfterError::Reopened(it) => iterator = it,
                    }
                    continue;
                }
            };
            backoff.reset();
            if let Some(r) = batch.records.last() {
                last = Some(StartAt::AfterSeq(r.seq.clone()));
            }
            let next = batch.next_iterator.clone();
            self.stats.set_held(&shard, Some(caught_up));
            let mut out = expand::Outlet {
                tx: &tx,
                budget: &budget,
                limit,
                stop: &mut stop,
                max_records: usize::try_from(self.max_records).unwrap_or(1),
            };
            if self.hand_over(&shard, batch, &mut out).await.is_err() {
                return;
            }
            match next {
                None => return, // SHARD_END, sent last
                Some(n) => iterator = n,
            }
            if caught_up && sleep_or_stop(idle, &mut stop).await {
                return;
            }
        }
    }

    /// One GetRecords call on `iterator` once the shard's read pace allows it, asking for the
    /// page the read size says; `None` when told to stop while waiting.
    async fn read_paced(
        &self,
        iterator: &str,
        pacing: &mut Pacing,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<(Result<RecordBatch, StreamError>, i32, Duration)> {
        let now = pacing.since(tokio::time::Instant::now());
        let at = pacing.pace.earliest(now);
        if at > now {
            pacing.size.paced();
            if sleep_or_stop(Duration::from_millis(at - now), stop).await {
                return None;
            }
        }
        let start = pacing.since(tokio::time::Instant::now()).max(at);
        let asked =
            i32::try_from(pacing.size.limit(&pacing.pace, start)).unwrap_or(self.max_records);
        pacing.pace.record(start);
        let sent = tokio::time::Instant::now();
        let result = self.source.get_records(iterator, asked).await;
        Some((result, asked, sent.elapsed()))
    }

    /// Hands one answer to the shard task. KPL aggregates are deaggregated here, a batch at a
    /// time, each counted against the budget before it is built (expand.rs); a record that does
    /// not decode within the bounds is delivered whole with its reason.
    async fn hand_over(
        &self,
        shard: &str,
        batch: RecordBatch,
        out: &mut expand::Outlet<'_>,
    ) -> Result<(), expand::Closed> {
        expand::send(batch, out, |r| {
            self.stats.0.undecodable.fetch_add(1, Ordering::Relaxed);
            tracing::error!(shard = %shard, seq = %r.seq.to_decimal(),
                error = ?r.undecodable,
                "record carries the KPL magic but does not decode within the \
                 bounds: delivered whole");
        })
        .await
    }

    /// After a failed GetRecords, as core's [`Recovery`] rules say: reopen where reading stands
    /// (`at`), from `TRIM_HORIZON` when the records there were trimmed, back off on throttling,
    /// or report the shard gone.
    async fn recover(
        &self,
        read: &Reading<'_>,
        at: StartAt,
        e: &StreamError,
        backoff: &mut Pauses,
        stop: &mut watch::Receiver<bool>,
    ) -> AfterError {
        let again = match read_failure(e).after_get_records() {
            Recovery::Reopen => at,
            Recovery::TrimHorizon => {
                self.trimmed(read.shard, &at);
                StartAt::TrimHorizon
            }
            Recovery::Gone => {
                let _ = read.tx.send((Fetched::Gone, 0)).await;
                return AfterError::Stop;
            }
            Recovery::BackOff => {
                tracing::debug!(shard = %read.shard, error = %e, "GetRecords failed; backing off");
                if sleep_or_stop(backoff.pause(), stop).await {
                    return AfterError::Stop;
                }
                return AfterError::Retry;
            }
        };
        self.open(read, &again, stop).await
    }

    /// An iterator at `at` (transient failures retried); `Stop` when told to stop or the lease
    /// lapsed, and when the shard is gone, after telling the shard task.
    async fn open(
        &self,
        read: &Reading<'_>,
        at: &StartAt,
        stop: &mut watch::Receiver<bool>,
    ) -> AfterError {
        match self.iterator(read.shard, at, read.held, stop).await {
            Ok(Some(it)) => AfterError::Reopened(it),
            Ok(None) => AfterError::Stop,
            Err(()) => {
                let _ = read.tx.send((Fetched::Gone, 0)).await;
                AfterError::Stop
            }
        }
    }
}

/// One shard's read pace and page size, on a clock that starts at its first call.
struct Pacing {
    pace: ReadPace,
    size: ReadSize,
    from: tokio::time::Instant,
}

impl Pacing {
    /// Ms from the first call to `at`.
    fn since(&self, at: tokio::time::Instant) -> u64 {
        u64::try_from(at.duration_since(self.from).as_millis()).unwrap_or(u64::MAX)
    }
}

/// The shard a fetcher reads, its lease and where its answers go.
struct Reading<'a> {
    shard: &'a str,
    held: &'a HeldLease,
    tx: &'a mpsc::Sender<(Fetched, usize)>,
}

/// What the fetcher does after a failed read.
enum AfterError {
    /// End: told to stop, the lease lapsed, or the shard is gone (reported).
    Stop,
    /// Read again with the same iterator (after backing off).
    Retry,
    /// Read on with this new iterator.
    Reopened(String),
}

/// How a read call failed, for core's [`Recovery`] rules.
fn read_failure(e: &StreamError) -> ReadFailure {
    match e {
        StreamError::ExpiredIterator(_) => ReadFailure::ExpiredIterator,
        StreamError::Trimmed(_) => ReadFailure::Trimmed,
        StreamError::NotFound { .. } => ReadFailure::NotFound,
        _ => ReadFailure::Other,
    }
}

/// Record bytes a shard holds fetched but not yet processed, shared by its fetcher and task.
#[derive(Debug, Default)]
pub(super) struct ByteBudget {
    pub(super) held: AtomicUsize,
    pub(super) freed: Notify,
}

impl ByteBudget {
    pub(super) fn take(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::SeqCst);
    }

    pub(super) fn give_back(&self, bytes: usize) {
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                Some(h.saturating_sub(bytes))
            });
        self.freed.notify_waiters();
    }

    /// Waits until fewer than `limit` bytes are held; true if `stop` came first.
    pub(super) async fn below(&self, limit: usize, stop: &mut watch::Receiver<bool>) -> bool {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.held.load(Ordering::SeqCst) < limit {
                return false;
            }
            tokio::select! {
                () = freed => {}
                () = stopped(stop) => return true,
            }
        }
    }
}

/// Gives a batch's bytes back to the budget when dropped (processed, or the task ended).
pub(super) struct HeldBytes<'a>(pub(super) &'a ByteBudget, pub(super) usize);

impl Drop for HeldBytes<'_> {
    fn drop(&mut self) {
        self.0.give_back(self.1);
    }
}

/// Whether an answer reached the shard's tip, so the next read waits the idle pause: it is
/// empty, or it says 0 ms behind and is not full. A full answer (`limit` records or more, as a
/// KPL aggregate can make) at "0 behind" is read on at once: `MillisBehindLatest` is measured
/// from the batch's last record, and emulators report 0 with records still behind it
/// (kinesis-mock: 1,000 records at 0 behind, then 62 more), so only a short answer proves the tip.
pub(super) fn is_caught_up(batch: &RecordBatch, limit: i32) -> bool {
    let full = usize::try_from(limit).is_ok_and(|limit| batch.records.len() >= limit.max(1));
    batch.records.is_empty() || (batch.millis_behind == Some(0) && !full)
}

#[cfg(test)]
mod tests {
    use heatsink_core::stream::{LeaseState, Position, Progress};

    use super::*;
    use crate::stream::{ProcessBatch, StreamRecord};

    #[test]
    fn only_an_empty_or_short_answer_at_zero_behind_is_the_tip() {
        let answer = |n: usize, behind: Option<i64>| RecordBatch {
            records: (0..n)
                .map(|i| StreamRecord {
                    seq: heatsink_core::counter::Seq::from(i as u64 + 1),
                    sub_seq: None,
                    partition_key: "k".into(),
                    data: bytes::Bytes::new(),
                    undecodable: None,
                })
                .collect(),
            next_iterator: Some("it".into()),
            child_shards: vec![],
            millis_behind: behind,
        };
        assert!(
            is_caught_up(&answer(0, Some(500)), 3),
            "empty: nothing more yet"
        );
        assert!(is_caught_up(&answer(0, None), 3));
        assert!(
            is_caught_up(&answer(2, Some(0)), 3),
            "short at 0 behind: the tip"
        );
        assert!(
            !is_caught_up(&answer(3, Some(0)), 3),
            "full at 0 behind: read on"
        );
        assert!(
            !is_caught_up(&answer(4, Some(0)), 3),
            "over the limit (KPL): read on"
        );
        assert!(!is_caught_up(&answer(2, Some(40)), 3), "behind: read on");
        assert!(
            !is_caught_up(&answer(2, None), 3),
            "no lag reported: only empty is the tip"
        );
    }

    fn row() -> Lease {
        Lease {
            shard_id: "shardId-000000000001".into(),
            state: LeaseState::Discovered,
            owner: None,
            counter: 7,
            expires_at_ms: 0,
            checkpoint: Progress::NotStarted,
            parents: vec![],
        }
    }

    #[test]
    fn a_checkpoint_resumes_after_the_record_or_inside_its_aggregate() {
        use heatsink_core::counter::Seq;
        let mut lease = row();
        type W = Shared<crate::stream::KinesisSource, Nop>;
        assert_eq!(W::start_of(&lease), StartAt::TrimHorizon);
        lease.checkpoint = Progress::Latest;
        assert_eq!(W::start_of(&lease), StartAt::Latest);
        lease.checkpoint = Progress::AtTimestamp(5);
        assert_eq!(W::start_of(&lease), StartAt::AtTimestamp(5));
        lease.checkpoint = Progress::InProgress(Seq::from(9).into());
        assert_eq!(W::start_of(&lease), StartAt::AfterSeq(Seq::from(9)));
        lease.checkpoint = Progress::InProgress(Position::sub_record(Seq::from(9), 2));
        assert_eq!(W::start_of(&lease), StartAt::AtSeq(Seq::from(9)));
    }

    struct Nop;
    impl RecordProcessor for Nop {
        async fn process(&self, _: &ProcessBatch) -> Result<(), StreamError> {
            Ok(())
        }
    }
}
