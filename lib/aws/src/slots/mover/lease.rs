//! The move record and the move's lease: one controller at a time.
//!
//! The record item (`pk = move`, `sk` = id) holds the record as JSON, its phase and revision,
//! and the lease (`holder`, `until`, `token`). A controller takes the lease with a conditional
//! write on the token it read ([`heatsink_core::slots::lease::take`] decides), renews it in the
//! background every third of its TTL (the renewer stops when the mover is dropped, so a killed
//! controller's lease simply ends), and releases it when a command returns. Every save is
//! conditional on the revision and the token; every destructive transaction carries a check
//! of the token ([`SlotDirectory::lease_check`](crate::slots::SlotDirectory)).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use heatsink_core::slots::lease::{self, Lease};

use super::super::directory::{
    HOLDER_ATTR, PHASE_ATTR, RECORD_ATTR, REV_ATTR, TOKEN_ATTR, UNTIL_ATTR,
};
use super::super::{MOVE_PK, MoveError, SlotDirectory};
use super::{Mover, ms};
use crate::clock::now_ms;
use crate::ddb::{Condition, OnlyIf, n, s};
use crate::error::AwsError;

/// A held lease and its renewer (aborted on drop).
pub(super) struct Keeper {
    lease: Arc<Mutex<Lease>>,
    lost: Arc<Mutex<bool>>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

impl Keeper {
    fn start(dir: SlotDirectory, id: String, lease: Lease, ttl: Duration) -> Keeper {
        let shared = Arc::new(Mutex::new(lease));
        let lost = Arc::new(Mutex::new(false));
        let (l, gone) = (shared.clone(), lost.clone());
        let ttl_ms = ms(ttl);
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis((ttl_ms / 3).max(1))).await;
                let token = match l.lock() {
                    Ok(g) => g.token,
                    Err(_) => return,
                };
                let until = now_ms().saturating_add(ttl_ms);
                match dir.extend_lease(&id, token, until).await {
                    Ok(true) => {
                        if let Ok(mut g) = l.lock() {
                            g.until_ms = until;
                        }
                    }
                    Ok(false) => {
                        tracing::warn!(move_id = %id, token, "the move's lease was taken over");
                        if let Ok(mut g) = gone.lock() {
                            *g = true;
                        }
                        return;
                    }
                    // A failed renewal is retried at the next tick; two may fail before the
                    // lease lapses.
                    Err(e) => tracing::warn!(move_id = %id, error = %e, "renewing the lease"),
                }
            }
        });
        Keeper {
            lease: shared,
            lost,
            renewer,
        }
    }

    fn lease(&self) -> Lease {
        self.lease
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn lost(&self) -> bool {
        self.lost.lock().map(|g| *g).unwrap_or(true)
    }
}

impl Mover {
    /// The lease a new move starts with (token 1), written with its record.
    pub(super) fn first_lease(&self) -> Lease {
        Lease {
            holder: self.limits.holder.clone(),
            until_ms: now_ms().saturating_add(ms(self.limits.lease_ttl)),
            token: 1,
        }
    }

    /// Starts renewing `lease`, which this mover now holds.
    pub(super) fn keep(&mut self, lease: Lease) {
        self.lease = Some(Keeper::start(
            self.dir.clone(),
            self.record.id.clone(),
            lease,
            self.limits.lease_ttl,
        ));
    }

    /// The token of the lease this mover holds (0 when it holds none).
    pub(super) fn token(&self) -> u64 {
        self.lease.as_ref().map_or(0, |k| k.lease().token)
    }

    /// Takes the move's lease unless this mover holds it; refused with [`MoveError::Held`]
    /// while another controller's lease runs. Reloads the record the lease was taken on.
    pub(super) async fn hold(&mut self) -> Result<(), MoveError> {
        if let Some(k) = &self.lease {
            if k.lost() {
                return Err(MoveError::LeaseLost {
                    id: self.record.id.clone(),
                    token: k.lease().token,
                });
            }
            return Ok(());
        }
        let id = self.record.id.clone();
        let ttl = ms(self.limits.lease_ttl);
        for _ in 0..5 {
            let (record, current) = self.dir.move_entry(&id).await?;
            let lease = lease::take(&id, current.as_ref(), &self.limits.holder, now_ms(), ttl)?;
            if self.dir.swap_lease(&id, current.as_ref(), &lease).await? {
                self.record = record;
                self.keep(lease);
                return Ok(());
            }
        }
        // Lost the race to take it five times: report whoever holds it now.
        let (_, current) = self.dir.move_entry(&id).await?;
        lease::take(&id, current.as_ref(), "", now_ms(), ttl)?;
        Err(MoveError::BadMove(format!(
            "move {id}: the lease changed hands while being taken; run the command again"
        )))
    }

    /// Releases the lease (the next controller need not wait for it to end). Best effort: a
    /// failed release only means the next controller waits out the TTL.
    pub(super) async fn release(&mut self) {
        if let Some(k) = self.lease.take() {
            let token = k.lease().token;
            drop(k);
            if let Err(e) = self.dir.extend_lease(&self.record.id, token, 0).await {
                tracing::warn!(move_id = %self.record.id, error = %e, "releasing the lease");
            }
        }
    }

    /// The record's item with `lease`.
    fn record_item(&self, lease: &Lease) -> Result<crate::ddb::Item, MoveError> {
        let json =
            serde_json::to_string(&self.record).map_err(|e| MoveError::BadItem(e.to_string()))?;
        Ok(crate::ddb::Item::from([
            ("pk".to_owned(), s(MOVE_PK)),
            ("sk".to_owned(), s(&self.record.id)),
            (RECORD_ATTR.to_owned(), s(json)),
            (PHASE_ATTR.to_owned(), s(self.record.phase.name())),
            (REV_ATTR.to_owned(), n(self.record.rev)),
            (HOLDER_ATTR.to_owned(), s(&lease.holder)),
            (UNTIL_ATTR.to_owned(), n(lease.until_ms)),
            (TOKEN_ATTR.to_owned(), n(lease.token)),
        ]))
    }

    /// Only if the record's revision is still `prev` and `lease` is current (`prev` 0: only if
    /// the record does not exist yet).
    fn record_condition(prev: u64, lease: &Lease) -> Condition {
        if prev == 0 {
            Condition::not_exists("pk")
        } else {
            Condition::eq(REV_ATTR, n(prev)).and(Condition::eq(TOKEN_ATTR, n(lease.token)))
        }
    }

    /// The record's item as a transaction item, written only if its revision is still `prev`
    /// and `lease` is current (`prev` 0: only if it does not exist yet).
    pub(super) fn record_put(
        &self,
        prev: u64,
        lease: &Lease,
    ) -> Result<TransactWriteItem, MoveError> {
        let put = Put::builder()
            .table_name(self.dir.table())
            .set_item(Some(self.record_item(lease)?))
            .only_if(&Self::record_condition(prev, lease))
            .build()
            .map_err(|e| MoveError::BadItem(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The record's next revision as a transaction item (to commit with a directory change);
    /// on failure the caller puts `rev` back with [`Mover::unbump`].
    pub(super) fn bump(&mut self) -> Result<(u64, TransactWriteItem), MoveError> {
        let lease = self.held_lease()?;
        let prev = self.record.rev;
        self.record.rev += 1;
        match self.record_put(prev, &lease) {
            Ok(put) => Ok((prev, put)),
            Err(e) => {
                self.record.rev = prev;
                Err(e)
            }
        }
    }

    /// Puts the revision back after a refused commit of [`Mover::bump`]'s item.
    pub(super) fn unbump(&mut self, prev: u64) {
        self.record.rev = prev;
    }

    fn held_lease(&self) -> Result<Lease, MoveError> {
        match &self.lease {
            Some(k) if !k.lost() => Ok(k.lease()),
            Some(k) => Err(MoveError::LeaseLost {
                id: self.record.id.clone(),
                token: k.lease().token,
            }),
            None => Err(MoveError::BadMove(format!(
                "move {}: this controller does not hold the lease",
                self.record.id
            ))),
        }
    }

    /// What a refused record write means: another controller took the lease, another writer
    /// changed the record, or (`None`) our own write landed after all (its reply was lost and
    /// the retry was refused by it).
    pub(super) async fn refused(&self) -> Option<MoveError> {
        let token = self.token();
        match self.dir.move_entry(&self.record.id).await {
            Ok((stored, Some(l))) if l.token == token && stored.rev == self.record.rev => None,
            Ok((_, Some(l))) if l.token != token => Some(MoveError::LeaseLost {
                id: self.record.id.clone(),
                token,
            }),
            _ => Some(MoveError::BadMove(format!(
                "move {} was changed by another mover (revision {} is stale); run `heatsink move status {}`",
                self.record.id, self.record.rev, self.record.id
            ))),
        }
    }

    /// Persists the record (conditional on revision and lease), retrying transient failures.
    pub(super) async fn save(&mut self) -> Result<(), MoveError> {
        let lease = self.held_lease()?;
        let prev = self.record.rev;
        self.record.rev += 1;
        let item = match self.record_item(&lease) {
            Ok(i) => i,
            Err(e) => {
                self.record.rev = prev;
                return Err(e);
            }
        };
        let cond = Self::record_condition(prev, &lease);
        let table = self.dir.table().to_owned();
        let res = self
            .ctx()
            .retry(|| {
                let req = self
                    .ddb
                    .put_item()
                    .table_name(&table)
                    .set_item(Some(item.clone()))
                    .only_if(&cond);
                let table = table.clone();
                async move {
                    req.send()
                        .await
                        .map_err(|e| MoveError::from(AwsError::dynamodb("PutItem", &table, e)))
                }
            })
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(MoveError::Aws(e)) if e.is_conditional_check_failed() => match self.refused().await
            {
                None => Ok(()),
                Some(err) => {
                    self.record.rev = prev;
                    Err(err)
                }
            },
            Err(e) => {
                self.record.rev = prev;
                Err(e)
            }
        }
    }
}
