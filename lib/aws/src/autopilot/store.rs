//! The autopilot's state and its kill switch, one DynamoDB item per loop.
//!
//! A directory's loop keeps its item in the slot directory's table (`pk = "autopilot"`,
//! `sk = "state"`: [`PilotStore::new`]); a stream's loop in the `autopilot` table
//! ([`crate::schema::Table::Autopilot`]; `pk = "autopilot"`, `sk = "stream#<name>"`:
//! [`PilotStore::for_stream`]). The item holds what the governor
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
//! use heatsink::autopilot::store::PilotStore;
//! # async fn f(ddb: aws_sdk_dynamodb::Client) -> Result<(), heatsink::autopilot::AutopilotError> {
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

use super::AutopilotError;
use crate::ddb::{Condition, OnlyIf, Update, Updating, Written, get_n, get_s, n, s};
use crate::error::AwsError;

/// The partition of the autopilot's items.
pub const PILOT_PK: &str = "autopilot";
/// A directory loop's sort key.
const STATE_SK: &str = "state";
/// The prefix of a stream loop's sort key (`stream#<name>`).
const STREAM_SK: &str = "stream#";
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

/// One loop's item (see the module docs).
#[derive(Debug, Clone)]
pub struct PilotStore {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    sk: String,
}

impl PilotStore {
    /// A slot directory's loop, in `table` (the directory's).
    pub fn new(ddb: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            ddb,
            table: table.into(),
            sk: STATE_SK.to_owned(),
        }
    }

    /// The loop of Kinesis stream `stream`, in `table` (the `autopilot` table).
    pub fn for_stream(
        ddb: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        stream: &str,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            sk: format!("{STREAM_SK}{stream}"),
        }
    }

    /// The command-line arguments naming this loop after `heatsink autopilot <command>`
    /// (empty for a directory's, ` --stream <name>` for a stream's).
    pub fn selector(&self) -> String {
        self.sk
            .strip_prefix(STREAM_SK)
            .map_or(String::new(), |stream| format!(" --stream {stream}"))
    }

    /// The table the item is in.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("pk".to_owned(), s(PILOT_PK)),
            ("sk".to_owned(), s(&self.sk)),
        ])
    }

    /// Reads the state and the kill switch (one strongly consistent GetItem); the default
    /// state at revision 0 when nothing was ever written.
    pub async fn load(&self) -> Result<Stored, AutopilotError> {
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
                AutopilotError::BadState(format!(
                    "autopilot state in {} is not readable ({e}); run 'heatsink autopilot reset{}' to start from an empty state",
                    self.table,
                    self.selector()
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
    pub async fn save(&self, state: &PilotState, rev: u64) -> Result<bool, AutopilotError> {
        let mut body = state.clone();
        body.paused = None;
        let json =
            serde_json::to_string(&body).map_err(|e| AutopilotError::BadState(e.to_string()))?;
        let next = rev
            .checked_add(1)
            .ok_or_else(|| AutopilotError::BadState("autopilot revision overflow".into()))?;
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
    async fn update(&self, update: &Update) -> Result<(), AutopilotError> {
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
    pub async fn pause(&self, reason: &str) -> Result<(), AutopilotError> {
        self.update(&Update::new().set(PAUSED_ATTR, s(reason)))
            .await
    }

    /// Forgets the state (in flight, history, streaks), keeping the kill switch: for a state
    /// that no longer reads, or after an operator finished the operation in flight by hand.
    /// The next [`PilotStore::save`] names revision 0.
    pub async fn reset(&self) -> Result<(), AutopilotError> {
        self.update(&Update::new().remove(STATE_ATTR).remove(REV_ATTR))
            .await
    }

    /// Clears the kill switch: the loop counts its streaks afresh from its next period.
    pub async fn resume(&self) -> Result<(), AutopilotError> {
        self.update(&Update::new().remove(PAUSED_ATTR)).await
    }
}
