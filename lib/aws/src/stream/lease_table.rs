//! `LeaseTable`: one application's leases in the schema's `leases` table, written conditionally.
//!
//! A row is `app` (pk), `shard_id` (sk), `state` (the core's state name), `owner` (absent when
//! unowned), `counter` (the fencing token), `expires_at_ms`, `heartbeat_ms`, `checkpoint`
//! (`TRIM_HORIZON`, a padded sequence number or `SHARD_END`) and `parents` (a list of ids).
//! Every change is computed by [`Lease::apply`] and written with `UpdateItem`, setting only the
//! attributes the event changes, conditional on the stored counter (and owner for a holder's
//! events): a failed condition is [`StreamError::LeaseConflict`] — re-read, never retry blindly.
//!
//! Rows also carry `stream`, the identity of the stream they belong to (its ARN and creation
//! time, [`ShardSource::identity`](super::ShardSource::identity)): shard ids repeat across
//! streams, so a table bound to a stream ([`LeaseTable::for_stream`]) refuses any row of another
//! stream ([`StreamError::ForeignLease`]) or of none ([`StreamError::UnnamedLease`]) instead of
//! resuming from its checkpoint. A release writes no checkpoint: only the holder's own
//! checkpoints (which never move back, [`Lease::apply`]) and SHARD_END change it.
//!
//! Beside the leases, each running worker keeps one announcement row in the same partition
//! ([`LeaseTable::announce`]): sort key `#worker#<stream>#<worker id>` (no Kinesis or DynamoDB
//! Streams shard id contains `#`, so it never collides with a lease row, and the stream identity
//! keeps workers of two streams apart), with `worker_id`, `heartbeat_ms` (the clock leases are
//! stamped with) and `stream`. [`LeaseTable::scan`] returns them apart from the leases
//! ([`LeaseScan::workers`]), dropping other streams' rows instead of refusing them: they decide
//! no lease, only how many peers share the leases ([`heatsink_core::stream::live_workers`]).
//! A graceful stop deletes its row ([`LeaseTable::withdraw`]); a crashed worker's row is deleted
//! by a peer once silent for [`DEAD_WORKER_LEASES`](super::DEAD_WORKER_LEASES) lease durations
//! ([`LeaseTable::delete_announcement`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::stream::{Announcement, Lease, LeaseEvent, LeaseState, MalformedRow, Progress};
use serde::{Deserialize, Serialize};

use super::StreamError;
use crate::clock::now_ms;
use crate::ddb::{
    Condition, KeyCondition, OnlyIf, QueryKey, Update, Updating, Written, get_n, get_s, n, s,
};
use crate::schema::{Schema, Table};

const SERVICE: &str = "DynamoDB";

/// Sort-key prefix of announcement rows: `#` is in no shard id, so no lease row starts with it.
pub const WORKER_ROW_PREFIX: &str = "#worker#";

/// Rows of one application a scan reads at most (leases and announcements): a stream's shards
/// within retention, many times over; past it the scan is refused, not cut short.
const MAX_ROWS: usize = 1_000_000;

/// A lease row as stored (see the module doc).
#[derive(Debug, Serialize, Deserialize)]
struct LeaseRow {
    #[serde(default)]
    app: String,
    shard_id: String,
    state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    counter: u64,
    #[serde(default)]
    expires_at_ms: u64,
    #[serde(default)]
    heartbeat_ms: u64,
    checkpoint: String,
    #[serde(default)]
    parents: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
}

/// A worker's announcement row as stored (see the module doc).
#[derive(Debug, Serialize, Deserialize)]
struct AnnouncementRow {
    #[serde(default)]
    app: String,
    #[serde(default)]
    shard_id: String,
    worker_id: String,
    heartbeat_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
}

/// A row that could not be read back as a lease, kept raw enough to replace it conditionally.
#[derive(Clone, Debug, PartialEq)]
pub struct MalformedLease {
    /// The shard (sort key).
    pub shard_id: String,
    /// The stored counter if it was a number, so a recreated row can stay above it.
    pub counter: Option<u64>,
    /// The stored `counter` attribute as found (any type), for the replacement's condition.
    pub raw_counter: Option<AttributeValue>,
    /// What is wrong with it.
    pub reason: String,
}

/// Every lease row of one application, parsed, with the malformed ones set apart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaseScan {
    /// The rows that parsed, by shard id.
    pub leases: Vec<Lease>,
    /// The rows that did not.
    pub malformed: Vec<MalformedLease>,
    /// The workers' announcement rows of this table's stream, live or not
    /// ([`LeaseTable::announce`]); rows that do not parse are left out.
    pub workers: Vec<Announcement>,
}

impl MalformedLease {
    /// What round planning needs of the row ([`heatsink_core::stream::plan_round`]).
    pub fn row(&self) -> MalformedRow {
        MalformedRow {
            shard_id: self.shard_id.clone(),
            counter: self.counter,
        }
    }
}

impl LeaseScan {
    /// The malformed rows as core types, for [`heatsink_core::stream::RoundInput`].
    pub fn malformed_rows(&self) -> Vec<MalformedRow> {
        self.malformed.iter().map(MalformedLease::row).collect()
    }

    /// The malformed row of `shard_id`, if it is one.
    pub fn malformed_row(&self, shard_id: &str) -> Option<&MalformedLease> {
        self.malformed.iter().find(|m| m.shard_id == shard_id)
    }
}

/// One application's leases in a lease table (`app` / `shard_id`).
#[derive(Clone, Debug)]
pub struct LeaseTable {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    app: String,
    stream: Option<String>,
}

/// True for an announcement row (its sort key starts with [`WORKER_ROW_PREFIX`]).
fn is_worker_row(item: &HashMap<String, AttributeValue>) -> bool {
    get_s(item, "shard_id").is_some_and(|k| k.starts_with(WORKER_ROW_PREFIX))
}

fn parse_state(name: &str) -> Option<LeaseState> {
    Some(match name {
        "DISCOVERED" => LeaseState::Discovered,
        "LEASED" => LeaseState::Leased,
        "PROCESSING" => LeaseState::Processing,
        "SHARD_END" => LeaseState::ShardEnd,
        "CHILDREN_CREATED" => LeaseState::ChildrenCreated,
        "DELETED" => LeaseState::Deleted,
        _ => return None,
    })
}

/// A row that did not parse, as the error `get` returns.
fn malformed(bad: MalformedLease) -> StreamError {
    StreamError::MalformedLease {
        shard_id: bad.shard_id,
        reason: bad.reason,
    }
}

/// Reads an announcement row; `None` if a field is missing.
fn parse_announcement(item: &HashMap<String, AttributeValue>) -> Option<Announcement> {
    let row: AnnouncementRow = crate::ddb::row::from_item(item.clone()).ok()?;
    Some(Announcement {
        worker_id: row.worker_id,
        heartbeat_ms: row.heartbeat_ms,
    })
}

/// Reads one row; `Err` carries what is needed to replace it.
fn parse_row(item: &HashMap<String, AttributeValue>) -> Result<Lease, MalformedLease> {
    let raw_counter = item.get("counter").cloned();
    let bad = |reason: &str| MalformedLease {
        shard_id: get_s(item, "shard_id").unwrap_or_default().to_owned(),
        counter: get_n(item, "counter"),
        raw_counter: raw_counter.clone(),
        reason: reason.to_owned(),
    };
    let row: LeaseRow =
        crate::ddb::row::from_item(item.clone()).map_err(|e| bad(&e.to_string()))?;
    let state = parse_state(&row.state).ok_or_else(|| bad("state unknown"))?;
    let checkpoint = Progress::from_checkpoint(&row.checkpoint).map_err(|e| bad(&e.to_string()))?;
    if row.owner.as_deref() == Some("") {
        return Err(bad("owner is not a non-empty string"));
    }
    if row.shard_id.is_empty() {
        return Err(bad("shard_id missing"));
    }
    if row.owner.is_some() != matches!(state, LeaseState::Leased | LeaseState::Processing) {
        return Err(bad("owner does not match state"));
    }
    Ok(Lease {
        shard_id: row.shard_id,
        state,
        owner: row.owner,
        counter: row.counter,
        expires_at_ms: row.expires_at_ms,
        checkpoint,
        parents: row.parents,
    })
}

impl LeaseTable {
    /// Leases of application `app` in table `table`.
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        app: impl Into<String>,
    ) -> Self {
        Self {
            ddb,
            table: table.into(),
            app: app.into(),
            stream: None,
        }
        .with_timeouts(super::Timeouts::default())
    }

    /// The same table bound to one stream: rows it writes name `stream` (a
    /// [`ShardSource::identity`](super::ShardSource::identity)), and reads refuse rows naming
    /// another stream or none. The worker binds its table at start.
    pub fn for_stream(self, stream: impl Into<String>) -> Self {
        Self {
            stream: Some(stream.into()),
            ..self
        }
    }

    /// The stream identity this table is bound to, if any.
    pub fn stream(&self) -> Option<&str> {
        self.stream.as_deref()
    }

    /// The same table with `timeouts` on its DynamoDB client.
    pub fn with_timeouts(self, timeouts: super::Timeouts) -> Self {
        let conf = self
            .ddb
            .config()
            .to_builder()
            .timeout_config(timeouts.config())
            .build();
        Self {
            ddb: aws_sdk_dynamodb::Client::from_conf(conf),
            ..self
        }
    }

    /// Refuses a row of another stream, or of none, when the table is bound to a stream. A row
    /// that does not parse and names no stream is left to repair (its checkpoint is lost anyway).
    fn check_stream(&self, item: &HashMap<String, AttributeValue>) -> Result<(), StreamError> {
        if !item.contains_key("stream") && parse_row(item).is_err() {
            return Ok(());
        }
        let Some(expected) = &self.stream else {
            return Ok(());
        };
        let shard_id = get_s(item, "shard_id").unwrap_or_default().to_owned();
        match get_s(item, "stream") {
            Some(found) if found == expected => Ok(()),
            Some(found) => Err(StreamError::ForeignLease {
                app: self.app.clone(),
                shard_id,
                found: found.to_owned(),
                expected: expected.clone(),
            }),
            None => Err(StreamError::UnnamedLease {
                app: self.app.clone(),
                shard_id,
            }),
        }
    }

    /// Leases of `app` in the `leases` table of `schema`.
    pub fn from_schema(
        ddb: aws_sdk_dynamodb::Client,
        schema: &Schema,
        app: impl Into<String>,
    ) -> Self {
        Self::new(ddb, schema.table_name(Table::Leases), app)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The application name (partition key value).
    pub fn app(&self) -> &str {
        &self.app
    }

    fn err<E, R>(
        &self,
        operation: &'static str,
        e: aws_sdk_dynamodb::error::SdkError<E, R>,
    ) -> StreamError
    where
        E: std::error::Error
            + aws_sdk_dynamodb::error::ProvideErrorMetadata
            + Send
            + Sync
            + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        StreamError::from_sdk(SERVICE, operation, &self.table, e)
    }

    /// Every lease row of the application (strongly consistent, all pages), and apart from
    /// them the workers' announcements of this table's stream ([`LeaseScan::workers`]; those
    /// of another stream are dropped, not refused).
    pub async fn scan(&self) -> Result<LeaseScan, StreamError> {
        let pages = self
            .ddb
            .query()
            .table_name(&self.table)
            .query_key(&KeyCondition::partition("app", s(&self.app)))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let items = crate::ddb::read_all(pages, MAX_ROWS).await.map_err(|e| {
            e.into_error(
                |e| self.err("Query", e),
                |_| StreamError::Unsupported {
                    source_kind: "the lease table",
                    what: "more than 1,000,000 rows in one application",
                },
            )
        })?;
        let mut out = LeaseScan::default();
        for item in &items {
            if is_worker_row(item) {
                if self.is_own_stream(item)
                    && let Some(announcement) = parse_announcement(item)
                {
                    out.workers.push(announcement);
                }
                continue;
            }
            self.check_stream(item)?;
            match parse_row(item) {
                Ok(lease) => out.leases.push(lease),
                Err(bad) => out.malformed.push(bad),
            }
        }
        out.leases.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(out)
    }

    /// True if `item` names this table's stream, or the table is bound to none.
    fn is_own_stream(&self, item: &HashMap<String, AttributeValue>) -> bool {
        match &self.stream {
            None => true,
            Some(expected) => get_s(item, "stream") == Some(expected.as_str()),
        }
    }

    /// The sort key of `worker_id`'s announcement row for this table's stream.
    fn worker_key(&self, worker_id: &str) -> String {
        let stream = self.stream.as_deref().unwrap_or_default();
        format!("{WORKER_ROW_PREFIX}{stream}#{worker_id}")
    }

    /// Writes (or refreshes) `worker_id`'s announcement with a heartbeat of now: peers count
    /// it as live for one lease duration ([`Announcement::is_live`]). Unconditional (a row
    /// only this worker writes); one PutItem.
    pub async fn announce(&self, worker_id: &str) -> Result<(), StreamError> {
        let item = row_item(&AnnouncementRow {
            app: self.app.clone(),
            shard_id: self.worker_key(worker_id),
            worker_id: worker_id.to_owned(),
            heartbeat_ms: now_ms(),
            stream: self.stream.clone(),
        })?;
        self.ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| self.err("PutItem", e))?;
        Ok(())
    }

    /// Deletes a dead worker's announcement, only if its heartbeat is still as read (the worker
    /// did not come back meanwhile); `false` if it moved or was gone.
    pub async fn delete_announcement(&self, found: &Announcement) -> Result<bool, StreamError> {
        let key = self.worker_key(&found.worker_id);
        self.delete_if(&key, "heartbeat_ms", found.heartbeat_ms)
            .await
    }

    /// Deletes the row (app, `sort_key`) only if its numeric `attr` is still `expected`;
    /// `false` if it changed or was gone.
    async fn delete_if(
        &self,
        sort_key: &str,
        attr: &str,
        expected: u64,
    ) -> Result<bool, StreamError> {
        let out = self
            .ddb
            .delete_item()
            .table_name(&self.table)
            .key("app", s(&self.app))
            .key("shard_id", s(sort_key))
            .only_if(&Condition::eq(attr, n(expected)))
            .send()
            .await;
        Ok(out.written("DeleteItem", &self.table)?)
    }

    /// Deletes `worker_id`'s announcement (graceful shutdown), so peers stop counting it at
    /// once instead of after one lease duration. Deleting an absent row succeeds.
    pub async fn withdraw(&self, worker_id: &str) -> Result<(), StreamError> {
        self.ddb
            .delete_item()
            .table_name(&self.table)
            .key("app", s(&self.app))
            .key("shard_id", s(self.worker_key(worker_id)))
            .send()
            .await
            .map_err(|e| self.err("DeleteItem", e))?;
        Ok(())
    }

    /// One lease row, or `None` if it does not exist.
    pub async fn get(&self, shard_id: &str) -> Result<Option<Lease>, StreamError> {
        let out = self
            .ddb
            .get_item()
            .table_name(&self.table)
            .key("app", s(&self.app))
            .key("shard_id", s(shard_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("GetItem", e))?;
        match out.item() {
            None => Ok(None),
            Some(item) => self
                .check_stream(item)
                .and_then(|()| parse_row(item).map_err(malformed))
                .map(Some),
        }
    }

    /// The rows of `shard_ids` (strongly consistent BatchGetItem, 100 keys a call), by shard id;
    /// absent and malformed rows are left out. One round trip reads back a round's takes.
    pub async fn get_many(&self, shard_ids: &[String]) -> Result<Vec<Lease>, StreamError> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let mut out = Vec::new();
        for chunk in shard_ids.chunks(100) {
            let mut keys: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|id| {
                    HashMap::from([
                        ("app".to_owned(), s(&self.app)),
                        ("shard_id".to_owned(), s(id)),
                    ])
                })
                .collect();
            while !keys.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| StreamError::Processor(Box::new(e)))?;
                let page = self
                    .ddb
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| self.err("BatchGetItem", e))?;
                for item in page
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .into_iter()
                    .flatten()
                {
                    self.check_stream(item)?;
                    if let Ok(lease) = parse_row(item) {
                        out.push(lease);
                    }
                }
                if let Some(left) = page.unprocessed_keys().and_then(|u| u.get(&self.table)) {
                    keys = left.keys().to_vec();
                }
            }
        }
        Ok(out)
    }

    /// Deletes a row whose shard the stream no longer lists (trimmed past retention), only if
    /// its counter is still as read; `false` if it moved or was gone.
    pub async fn delete_row(&self, current: &Lease) -> Result<bool, StreamError> {
        self.delete_if(&current.shard_id, "counter", current.counter)
            .await
    }

    fn full_item(&self, lease: &Lease) -> Result<HashMap<String, AttributeValue>, StreamError> {
        row_item(&LeaseRow {
            app: self.app.clone(),
            shard_id: lease.shard_id.clone(),
            state: lease.state.to_string(),
            owner: lease.owner.clone(),
            counter: lease.counter,
            expires_at_ms: lease.expires_at_ms,
            heartbeat_ms: now_ms(),
            checkpoint: lease.checkpoint.to_checkpoint(),
            parents: lease.parents.clone(),
            stream: self.stream.clone(),
        })
    }

    /// Creates a lease row if none exists (`attribute_not_exists`); `false` if one already did.
    pub async fn create(&self, lease: &Lease) -> Result<bool, StreamError> {
        let out = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.full_item(lease)?))
            .only_if(&Condition::not_exists("shard_id"))
            .send()
            .await;
        Ok(out.written("PutItem", &self.table)?)
    }

    /// Replaces a malformed row with `lease`, only if its `counter` is still as found.
    pub async fn recreate(
        &self,
        found: &MalformedLease,
        lease: &Lease,
    ) -> Result<bool, StreamError> {
        let unchanged = match &found.raw_counter {
            Some(raw) => Condition::eq("counter", raw.clone()),
            None => Condition::not_exists("counter"),
        };
        let put = self
            .ddb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.full_item(lease)?))
            .only_if(&unchanged);
        Ok(put.send().await.written("PutItem", &self.table)?)
    }

    /// Applies `event` to `current` (as last read) and writes the result conditionally.
    pub async fn apply(&self, current: &Lease, event: &LeaseEvent) -> Result<Lease, StreamError> {
        self.apply_lifted(current, event, 0).await
    }

    /// Like [`LeaseTable::apply`]; a take or steal also lifts the counter to at least `floor`.
    ///
    /// The worker passes 1 + the highest counter of the shard's finished parents, so fencing
    /// tokens only grow along a key's lineage and a child's writes pass its parent's fence.
    pub async fn apply_lifted(
        &self,
        current: &Lease,
        event: &LeaseEvent,
        floor: u64,
    ) -> Result<Lease, StreamError> {
        let mut next = current.apply(event)?;
        let now = now_ms();
        // Conditions on the row as `current` saw it.
        let unchanged = Condition::eq("counter", n(current.counter));
        let held = || {
            unchanged.clone().and(Condition::eq(
                "owner",
                s(current.owner.clone().unwrap_or_default()),
            ))
        };
        let state = s(next.state.to_string());
        let (condition, update) = match event {
            LeaseEvent::Take { .. } | LeaseEvent::Steal { .. } => {
                next.counter = next.counter.max(floor);
                let condition = if matches!(event, LeaseEvent::Take { .. }) {
                    // A renewal between our read and this write keeps the holder's lease.
                    unchanged.clone().and(
                        Condition::not_exists("expires_at_ms")
                            .or(Condition::eq("expires_at_ms", n(current.expires_at_ms))),
                    )
                } else {
                    unchanged.clone()
                };
                let update = Update::new()
                    .set("owner", s(next.owner.clone().unwrap_or_default()))
                    .set("counter", n(next.counter))
                    .set("expires_at_ms", n(next.expires_at_ms))
                    .set("heartbeat_ms", n(now))
                    .set("state", state);
                (condition, update)
            }
            LeaseEvent::Renew { .. } => (
                held(),
                Update::new()
                    .set("expires_at_ms", n(next.expires_at_ms))
                    .set("heartbeat_ms", n(now)),
            ),
            LeaseEvent::Checkpoint { .. } => (
                held(),
                Update::new()
                    .set("checkpoint", s(next.checkpoint.to_checkpoint()))
                    .set("state", state),
            ),
            LeaseEvent::Release { .. } | LeaseEvent::ReachShardEnd { .. } => {
                let mut update = Update::new()
                    .set("counter", n(next.counter))
                    .set("expires_at_ms", n(0u64));
                if matches!(event, LeaseEvent::ReachShardEnd { .. }) {
                    // A release never writes a checkpoint: the copy it was computed from may be
                    // older than the stored one, and writing it would move the checkpoint back.
                    update = update.set("checkpoint", s(next.checkpoint.to_checkpoint()));
                }
                (held(), update.set("state", state).remove("owner"))
            }
            LeaseEvent::CreateChildren | LeaseEvent::Trim => {
                let update = Update::new().set("state", state);
                let update = match event {
                    LeaseEvent::Trim => update.remove("owner"),
                    _ => update,
                };
                (unchanged.clone(), update)
            }
            LeaseEvent::Delete => {
                let out = self
                    .ddb
                    .delete_item()
                    .table_name(&self.table)
                    .key("app", s(&self.app))
                    .key("shard_id", s(&current.shard_id))
                    .only_if(&unchanged)
                    .send()
                    .await;
                return match out.written("DeleteItem", &self.table)? {
                    true => Ok(next),
                    false => Err(self.conflict(current)),
                };
            }
        };
        let out = self
            .ddb
            .update_item()
            .table_name(&self.table)
            .key("app", s(&self.app))
            .key("shard_id", s(&current.shard_id))
            .only_if(&condition)
            .updating(&update)
            .send()
            .await;
        match out.written("UpdateItem", &self.table)? {
            true => Ok(next),
            false => Err(self.conflict(current)),
        }
    }

    fn conflict(&self, current: &Lease) -> StreamError {
        StreamError::LeaseConflict {
            shard_id: current.shard_id.clone(),
        }
    }

    /// Takes an unowned or expired lease for `worker` (a takeover).
    pub async fn take(
        &self,
        current: &Lease,
        worker: &str,
        duration_ms: u64,
        floor: u64,
    ) -> Result<Lease, StreamError> {
        let event = LeaseEvent::Take {
            worker: worker.to_owned(),
            now_ms: now_ms(),
            duration_ms,
        };
        self.apply_lifted(current, &event, floor).await
    }

    /// Steals a live lease for `worker` (rebalancing).
    pub async fn steal(
        &self,
        current: &Lease,
        worker: &str,
        duration_ms: u64,
        floor: u64,
    ) -> Result<Lease, StreamError> {
        let event = LeaseEvent::Steal {
            worker: worker.to_owned(),
            now_ms: now_ms(),
            duration_ms,
        };
        self.apply_lifted(current, &event, floor).await
    }

    /// Extends a held lease by `duration_ms` from now.
    pub async fn renew(&self, current: &Lease, duration_ms: u64) -> Result<Lease, StreamError> {
        let event = LeaseEvent::Renew {
            worker: current.owner.clone().unwrap_or_default(),
            counter: current.counter,
            now_ms: now_ms(),
            duration_ms,
        };
        self.apply(current, &event).await
    }

    /// Records that every record up to `position` (a [`heatsink_core::counter::Seq`] or a
    /// [`heatsink_core::stream::Position`] inside an aggregate) is processed.
    pub async fn checkpoint(
        &self,
        current: &Lease,
        position: impl Into<heatsink_core::stream::Position>,
    ) -> Result<Lease, StreamError> {
        let event = LeaseEvent::Checkpoint {
            worker: current.owner.clone().unwrap_or_default(),
            counter: current.counter,
            position: position.into(),
        };
        self.apply(current, &event).await
    }

    /// Gives a held lease up; the stored checkpoint stays as it is (a release writes none).
    pub async fn release(&self, current: &Lease) -> Result<Lease, StreamError> {
        let event = LeaseEvent::Release {
            worker: current.owner.clone().unwrap_or_default(),
            counter: current.counter,
        };
        self.apply(current, &event).await
    }
}

/// A row as an item (a row of fixed shape always converts; a failure would be a bug here).
fn row_item<T: Serialize>(row: &T) -> Result<HashMap<String, AttributeValue>, StreamError> {
    crate::ddb::row::to_item(row).map_err(|e| StreamError::Processor(Box::new(e)))
}

/// A new lease row for a shard, its counter starting at the creation time in ms (see module doc
/// of [`super`]): tokens of a row recreated after deletion stay above the old row's.
pub(crate) fn new_lease(info: &heatsink_core::stream::ShardInfo, counter_floor: u64) -> Lease {
    let mut lease = Lease::discovered(info);
    lease.counter = now_ms().max(counter_floor);
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(stream: Option<&str>) -> LeaseTable {
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        let t = LeaseTable::new(aws_sdk_dynamodb::Client::from_conf(conf), "leases", "app");
        match stream {
            Some(id) => t.for_stream(id),
            None => t,
        }
    }

    fn row(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    /// A lease table of one row behind a mocked UpdateItem that applies a write only if its
    /// condition holds on the stored row, as DynamoDB decides ([`crate::ddb::eval`]).
    fn one_row_table(
        row: HashMap<String, AttributeValue>,
    ) -> (
        LeaseTable,
        std::sync::Arc<std::sync::Mutex<HashMap<String, AttributeValue>>>,
    ) {
        use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
        use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
        use aws_smithy_mocks::{MockResponse, mock};
        let stored = std::sync::Arc::new(std::sync::Mutex::new(row));
        let update = {
            let stored = stored.clone();
            mock!(aws_sdk_dynamodb::Client::update_item).then_compute_response(move |r| {
                let stored = stored.lock().expect("lock");
                let holds = crate::ddb::eval::holds(
                    r.condition_expression().unwrap_or_default(),
                    &r.expression_attribute_names().cloned().unwrap_or_default(),
                    &r.expression_attribute_values().cloned().unwrap_or_default(),
                    Some(&stored),
                );
                if holds {
                    MockResponse::Output(UpdateItemOutput::builder().build())
                } else {
                    MockResponse::Error(UpdateItemError::ConditionalCheckFailedException(
                        ConditionalCheckFailedException::builder()
                            .meta(crate::testing::error_meta(
                                "ConditionalCheckFailedException",
                            ))
                            .build(),
                    ))
                }
            })
        };
        let ddb = crate::mocked!(aws_sdk_dynamodb with |c| c.retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::disabled()); update);
        (LeaseTable::new(ddb, "leases", "app"), stored)
    }

    /// A takeover decided on a lapsed lease loses to the holder's renewal that landed between
    /// the read and the write: same counter, a later expiry, so only the expiry condition
    /// tells them apart.
    #[tokio::test]
    async fn smithy_mock_a_takeover_loses_to_a_renewal_that_landed_after_its_read() {
        let lapsed = Lease {
            shard_id: "shardId-1".into(),
            state: LeaseState::Processing,
            owner: Some("w2".into()),
            counter: 7,
            expires_at_ms: 1,
            checkpoint: Progress::NotStarted,
            parents: Vec::new(),
        };
        let renewed = row(&[
            ("app", s("app")),
            ("shard_id", s("shardId-1")),
            ("state", s("PROCESSING")),
            ("owner", s("w2")),
            ("counter", n(7)),
            ("expires_at_ms", n(u64::MAX / 2)),
            ("checkpoint", s("TRIM_HORIZON")),
        ]);
        let (table, _) = one_row_table(renewed.clone());
        let err = table
            .take(&lapsed, "w1", 10_000, 0)
            .await
            .expect_err("the renewal wins");
        assert!(matches!(err, StreamError::LeaseConflict { .. }), "{err:?}");
        // Had nobody renewed, the same takeover lands.
        let mut still_lapsed = renewed;
        still_lapsed.insert("expires_at_ms".into(), n(1));
        let (table, _) = one_row_table(still_lapsed);
        let taken = table.take(&lapsed, "w1", 10_000, 0).await.expect("taken");
        assert_eq!(taken.owner.as_deref(), Some("w1"));
    }

    #[test]
    fn an_announcement_row_is_told_apart_from_lease_rows_and_other_streams() {
        let t = table(Some("arn:s1@7"));
        let key = t.worker_key("w1");
        assert_eq!(key, "#worker#arn:s1@7#w1");
        let item = row(&[
            ("shard_id", s(&key)),
            ("worker_id", s("w1")),
            ("heartbeat_ms", n(42)),
            ("stream", s("arn:s1@7")),
        ]);
        assert!(is_worker_row(&item));
        assert!(!is_worker_row(&row(&[(
            "shard_id",
            s("shardId-000000000000")
        )])));
        assert!(t.is_own_stream(&item));
        assert!(!table(Some("arn:s2@7")).is_own_stream(&item));
        assert!(table(None).is_own_stream(&item));
        assert_eq!(
            parse_announcement(&item),
            Some(Announcement {
                worker_id: "w1".into(),
                heartbeat_ms: 42
            })
        );
        let broken = row(&[("shard_id", s(&key)), ("worker_id", s("w1"))]);
        assert_eq!(parse_announcement(&broken), None);
    }
}
