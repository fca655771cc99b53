//! The `UpdateShardCount` budget: 10 calls per stream per rolling 24 hours, each scaling to at
//! most double or at least half the current open shard count (the API reference's limits).

use serde::{Deserialize, Serialize};

/// Calls allowed per rolling window.
pub const MAX_UPDATE_SHARD_COUNT_CALLS: usize = 10;
/// The rolling window, 24 hours.
pub const ROLLING_WINDOW_SECS: u64 = 86_400;

/// Why a call is not allowed now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// Ten calls in the last 24 h; the next is allowed at `next_at`.
    #[error("UpdateShardCount budget spent (10 per rolling 24 h); next call allowed at {next_at}")]
    Spent {
        /// When the oldest call leaves the window (seconds since the epoch).
        next_at: u64,
    },
    /// The target is more than double or less than half the current count.
    #[error("UpdateShardCount from {from} to {to} shards is outside ×½..×2 ({min}..={max})")]
    OutOfRange {
        /// Open shards now.
        from: u32,
        /// Asked for.
        to: u32,
        /// Half, rounded up.
        min: u32,
        /// Double.
        max: u32,
    },
}

/// The times of past `UpdateShardCount` calls on one stream (persist it with the plan state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    calls: Vec<u64>,
}

impl Ledger {
    /// Calls still allowed in the window ending at `now`.
    pub fn remaining(&self, now: u64) -> usize {
        MAX_UPDATE_SHARD_COUNT_CALLS.saturating_sub(self.in_window(now).count())
    }

    fn in_window(&self, now: u64) -> impl Iterator<Item = &u64> {
        self.calls
            .iter()
            .filter(move |&&t| t <= now && now - t < ROLLING_WINDOW_SECS)
    }

    /// Whether scaling `from` → `to` shards is allowed at `now`.
    pub fn check(&self, now: u64, from: u32, to: u32) -> Result<(), LedgerError> {
        let (min, max) = (from.div_ceil(2), from.saturating_mul(2));
        if to < min || to > max || to == 0 {
            return Err(LedgerError::OutOfRange { from, to, min, max });
        }
        if self.remaining(now) == 0 {
            let oldest = self.in_window(now).min().copied().unwrap_or(now);
            return Err(LedgerError::Spent {
                next_at: oldest + ROLLING_WINDOW_SECS,
            });
        }
        Ok(())
    }

    /// Check, then record a call at `now`.
    pub fn spend(&mut self, now: u64, from: u32, to: u32) -> Result<(), LedgerError> {
        self.check(now, from, to)?;
        self.calls
            .retain(|&t| t <= now && now - t < ROLLING_WINDOW_SECS);
        self.calls.push(now);
        Ok(())
    }
}
