//! Transient failures weathered: every call of the mover goes through [`Ctx::retry`], which
//! retries throttling, timeouts, dispatch failures and cancelled-by-conflict transactions with
//! capped, jittered backoff ([`heatsink_core::slots::backoff::Backoff`]) and stops with
//! [`MoveError::Stalled`] (phase, cause, the command that continues) once the call's deadline
//! has passed. Nothing else is retried: a refusal is an answer.

use std::future::Future;

use aws_sdk_dynamodb::operation::scan::ScanOutput;
use heatsink_core::slots::backoff::Backoff;
use tokio::time::Instant;

use super::super::MoveError;
use super::{Mover, ms};
use crate::ddb::Item;
use crate::error::AwsError;

/// What a retried call needs to know to report where the move stopped.
#[derive(Debug, Clone)]
pub(super) struct Ctx {
    id: String,
    phase: &'static str,
    command: String,
    backoff: Backoff,
}

impl Ctx {
    /// The retry context of `move start` before it records anything: a stall there leaves
    /// nothing behind, so the next step is the same command again.
    pub(super) fn before_record(backoff: Backoff) -> Ctx {
        Ctx {
            id: "(not recorded yet)".into(),
            phase: "planning",
            command: "run the same `heatsink move start` again (nothing was recorded)".into(),
            backoff,
        }
    }

    /// Runs `call` until it succeeds, fails for good, or its transient failures outlast the
    /// deadline.
    pub(super) async fn retry<T, F, Fut>(&self, mut call: F) -> Result<T, MoveError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, MoveError>>,
    {
        let started = Instant::now();
        let mut n = 0u32;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() => {
                    n = n.saturating_add(1);
                    match self
                        .backoff
                        .wait(n, started.elapsed(), rand::random::<f64>())
                    {
                        Some(wait) => {
                            tracing::debug!(move_id = %self.id, attempt = n, error = %e, ?wait, "retrying");
                            tokio::time::sleep(wait).await;
                        }
                        None => {
                            return Err(MoveError::Stalled {
                                id: self.id.clone(),
                                phase: self.phase,
                                cause: e.to_string(),
                                waited_ms: ms(started.elapsed()),
                                command: self.command.clone(),
                            });
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Mover {
    /// The directory's map, as a future that owns what it reads with (to retry it).
    pub(super) fn load_map(
        &self,
    ) -> impl Future<Output = Result<heatsink_core::slots::SlotMap, MoveError>> + Send + 'static
    {
        let dir = self.dir.clone();
        async move { dir.load().await }
    }

    /// The retry context of the move as it is now.
    pub(super) fn ctx(&self) -> Ctx {
        Ctx {
            id: self.record.id.clone(),
            phase: self.record.phase.name(),
            command: self.next_command(),
            backoff: self.limits.backoff,
        }
    }

    /// One page of a consistent `Scan` of `table` from `start`, retried as every call is: the
    /// purge and the diff read their pages through it, each pacing and using a page as it comes.
    pub(super) async fn scan_page(
        &self,
        table: &str,
        start: Option<Item>,
    ) -> Result<ScanOutput, MoveError> {
        // paged by hand: one page per call, each retried within the move's deadline, and the
        // purge and the diff pace and use a page before asking for the next.
        self.ctx()
            .retry(|| {
                let req = self
                    .ddb
                    .scan()
                    .table_name(table)
                    .consistent_read(true)
                    .set_exclusive_start_key(start.clone());
                let table = table.to_owned();
                async move {
                    req.send()
                        .await
                        .map_err(|e| MoveError::from(AwsError::dynamodb("Scan", table, e)))
                }
            })
            .await
    }

    /// After transient failure `n` of a step that retries as a whole (the flips, whose
    /// transaction is read again each time): waits its backoff, or gives the step up as
    /// [`MoveError::Stalled`] once the deadline counted from `started` has passed.
    pub(super) async fn back_off(
        &self,
        n: &mut u32,
        started: Instant,
        e: MoveError,
    ) -> Result<(), MoveError> {
        *n = n.saturating_add(1);
        match self
            .limits
            .backoff
            .wait(*n, started.elapsed(), rand::random())
        {
            Some(w) => {
                tokio::time::sleep(w).await;
                Ok(())
            }
            None => Err(self.stalled(e.to_string(), started.elapsed())),
        }
    }
}
