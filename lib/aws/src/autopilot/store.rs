//! The autopilot's state and its kill switch, kept in the slot directory's table.
//!
//! One item, `pk = "autopilot"`, `sk = "state"`, holds what the governor
//! ([`heatsink_core::autopilot::decide`]) needs from one period to the next — the operation in
//! flight, the last day's history, the streaks — as JSON with a revision (`rev`). The loop
//! writes it with [`PilotStore::save`], conditional on the revision it read, so two loops that
//! run at once (a slow period overlapping the next scheduled one) cannot both record a start:
//! the second gets `Ok(false)` and starts nothing.
//!
//! The kill switch is a separate attribute of the same item, `paused` (who, why), written by
//! [`PilotStore::pause`] with no condition and never by [`PilotStore::save`]: a pause always
//! lands, whatever the loop is writing, and the loop reads it at the start of every period,
//! so it holds within one period. [`PilotStore::resume`] removes it.
//!
//! ```no_run
//! use heatsink::slots::pilot::PilotStore;
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::slots::MoveError> {
//! let store = PilotStore::new(ddb, "heatsink-slots");
//! store.pause("ops (alice): game night, hands off").await?;
//! let stored = store.load().await?;
//! assert!(stored.state.paused.is_some());
//! store.resume().await?;
//! # Ok(()) }
//! ```
//!
//! Limits: the state is bounded by the governor's own bounds (one day of history at the day
//! budget, one streak per proposed subject); a state item over DynamoDB's 400 KB is refused by
//! DynamoDB, not truncated.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::autopilot::PilotState;

use super::MoveError;
use crate::ddb::{Condition, OnlyIf, Update, Updating, Written, get_n, get_s, n, s};
use crate::error::AwsError;

/// The partition of the autopilot's item in the slot directory's table.
pub const PILOT_PK: &str = "autopilot";
const STATE_SK: &str = "state";
const STATE_ATTR: &str = "state";
const REV_ATTR: &str = "rev";
const PAUSED_ATTR: &str = "paused";

/// The state as read, with the revision a [`PilotStore::save`] must name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    /// The governor's state; `paused` is the kill switch's attribute.
    pub state: PilotState,
    /// The revision read (0: never saved).
    pub rev: u64,
}

/// The autopilot's item in the slot directory's table (see the module docs).
#[derive(Debug, Clone)]
pub struct PilotStore {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
}

impl PilotStore {
    /// The store in `table` (the slot directory's).
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            ddb,
            table: table.into(),
        }
    }

    fn key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("pk".to_owned(), s(PILOT_PK)),
            ("sk".to_owned(), s(STATE_SK)),
        ])
    }

    /// Reads the state and the kill switch (one strongly consistent GetItem); the default
    /// state at revision 0 when nothing was ever written.
    pub async fn load(&self) -> Result<Stored, MoveError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", &self.table, e))?;
        let Some(item) = out.item else {
            return Ok(Stored::default());
        };
        let mut state = match get_s(&item, STATE_ATTR) {
            Some(json) => serde_json::from_str::<PilotState>(json).map_err(|e| {
                MoveError::BadItem(format!(
                    "autopilot state in {} is not readable ({e}); run 'heatsink autopilot reset' to start from an empty state",
                    self.table
                ))
            })?,
            None => PilotState::default(),
        };
        state.paused = get_s(&item, PAUSED_ATTR).map(str::to_owned);
        let rev = get_n(&item, REV_ATTR).unwrap_or(0);
        Ok(Stored { state, rev })
    }

    /// Writes `state` if the item is still at `rev` (the revision [`PilotStore::load`]
    /// returned); `Ok(false)` when another writer got there first (read again, decide again).
    /// The kill switch is not written: `state.paused` is ignored.
    pub async fn save(&self, state: &PilotState, rev: u64) -> Result<bool, MoveError> {
        let mut body = state.clone();
        body.paused = None;
        let json = serde_json::to_string(&body).map_err(|e| MoveError::BadItem(e.to_string()))?;
        let next = rev
            .checked_add(1)
            .ok_or_else(|| MoveError::BadItem("autopilot revision overflow".into()))?;
        let only_if = if rev == 0 {
            Condition::not_exists(REV_ATTR)
        } else {
            Condition::eq(REV_ATTR, n(rev))
        };
        let res = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key()))
            .only_if(&only_if)
            .updating(
                &Update::new()
                    .set(STATE_ATTR, s(json))
                    .set(REV_ATTR, n(next)),
            )
            .send()
            .await;
        Ok(res.written("UpdateItem", &self.table)?)
    }

    /// One unconditional UpdateItem of the item (the kill switch and the reset never wait on
    /// the loop).
    async fn update(&self, update: &Update) -> Result<(), MoveError> {
        self.ddb
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key()))
            .updating(update)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("UpdateItem", &self.table, e))?;
        Ok(())
    }

    /// Sets the kill switch with `reason` (who and why): the loop holds from its next period.
    /// Unconditional, so it lands whatever the loop is writing.
    pub async fn pause(&self, reason: &str) -> Result<(), MoveError> {
        self.update(&Update::new().set(PAUSED_ATTR, s(reason)))
            .await
    }

    /// Forgets the state (in flight, history, streaks), keeping the kill switch: for a state
    /// that no longer reads, or after an operator finished the operation in flight by hand.
    /// The next [`PilotStore::save`] names revision 0.
    pub async fn reset(&self) -> Result<(), MoveError> {
        self.update(&Update::new().remove(STATE_ATTR).remove(REV_ATTR))
            .await
    }

    /// Clears the kill switch: the loop counts its streaks afresh from its next period.
    pub async fn resume(&self) -> Result<(), MoveError> {
        self.update(&Update::new().remove(PAUSED_ATTR)).await
    }
}
