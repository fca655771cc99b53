//! Transient failures weathered: every call of the mover goes through [`Ctx::retry`], which
//! retries throttling, timeouts, dispatch failures and cancelled-by-conflict transactions with
//! capped, jittered backoff ([`heatsink_core::slots::backoff::Backoff`]) and stops with
//! [`MoveError::Stalled`] (phase, cause, the command that continues) once the call's deadline
//! has passed. Nothing else is retried: a refusal is an answer.

use std::future::Future;

use heatsink_core::slots::backoff::Backoff;
use tokio::time::Instant;

use super::super::MoveError;
use super::{Mover, ms};

/// What a retried call needs to know to report where the move stopped.
#[derive(Debug, Clone)]
pub(super) struct Ctx {
    id: String,
    phase: &'static str,
    command: String,
    backoff: Backoff,
}

impl Ctx {
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
}
