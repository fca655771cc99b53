//! The repair's sweep: after its bucket checks, a run checks up to [`RepairOptions::sweep`]
//! quiet counters *whole* ([`judge_whole`] at [`sweep_horizon`]), visiting the counters table
//! in slices from a persisted cursor, so every counter is checked once per cycle whether or not
//! anything touched it. A like lost where no bucket check looks (a parked batch on a cold post
//! that was never redriven, a carried check older than the kept buckets) is made up within
//! `sweep_quiet` plus one cycle.
//!
//! [`RepairOptions::sweep`]: super::RepairOptions::sweep

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::counter::{CounterKey, WholeVerdict, is_quiet, judge_whole, sweep_horizon};

use super::{BucketRecount, Repair, RepairReport, millis, skip};
use crate::counter::rebuild::{RebuildError, unrepairable};
use crate::ddb::{Projecting, Projection};
use crate::error::AwsError;

/// Counters table items one sweep Scan page reads at most.
const PAGE_ITEMS: i32 = 200;

/// Where the sweep resumes: the key of the last item it read, and the cycles it finished.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SweepCursor {
    /// `(pk, sk)` of the last item read (`None`: the start of a cycle).
    after: Option<(String, String)>,
    /// Cycles finished so far.
    cycles: u64,
}

impl<R: BucketRecount> Repair<'_, R> {
    /// The sweep of one run (see the module docs): counters checked whole until
    /// [`RepairOptions::sweep`](super::RepairOptions::sweep) of them or the run's budget,
    /// the cursor saved after every page.
    pub(super) async fn sweep(
        &self,
        proven: u64,
        started: Instant,
        report: &mut RepairReport,
    ) -> Result<(), RebuildError> {
        let mut cursor = self.load_sweep().await?;
        let prefix = format!("{}#", self.name);
        let mut last_pk: Option<String> = None;
        loop {
            let start: Option<HashMap<String, AttributeValue>> =
                cursor.after.as_ref().map(|(pk, sk)| {
                    HashMap::from([
                        ("pk".to_owned(), AttributeValue::S(pk.clone())),
                        ("sk".to_owned(), AttributeValue::S(sk.clone())),
                    ])
                });
            // paged by hand: the sweep persists its cursor between runs (the next run resumes
            // at the last item this one read, which may be inside a page).
            let page = self
                .ddb()
                .scan()
                .table_name(self.table())
                .projecting(&Projection::of(&["pk", "sk"]))
                .limit(PAGE_ITEMS)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| AwsError::dynamodb("Scan", self.table(), e))?;
            for item in page.items() {
                let (Some(pk), Some(sk)) = (
                    item.get("pk").and_then(|v| v.as_s().ok()),
                    item.get("sk").and_then(|v| v.as_s().ok()),
                ) else {
                    continue;
                };
                let visited = report.swept.saturating_add(report.sweep_warm);
                if visited >= self.options.sweep as u64 || started.elapsed() > self.options.budget {
                    return self.save_sweep(&cursor).await;
                }
                cursor.after = Some((pk.clone(), sk.clone()));
                let Some(id) = pk.strip_prefix(&prefix) else {
                    continue;
                };
                if last_pk.as_deref() == Some(pk.as_str()) {
                    continue;
                }
                last_pk = Some(pk.clone());
                self.check_whole(id, proven, report).await?;
            }
            if page.last_evaluated_key().is_none() {
                cursor = SweepCursor {
                    after: None,
                    cycles: cursor.cycles.saturating_add(1),
                };
                report.sweep_cycles_done += 1;
                tracing::info!(cycles = cursor.cycles, "sweep cycle finished");
                return self.save_sweep(&cursor).await;
            }
            self.save_sweep(&cursor).await?;
        }
    }

    /// One whole-count check of counter `id`: read, recount below the cutoff, read again,
    /// judge, and write the whole fix the verdict allows (conditional on the fix unchanged).
    async fn check_whole(
        &self,
        id: &str,
        proven: u64,
        report: &mut RepairReport,
    ) -> Result<(), RebuildError> {
        let spec = self.options.buckets;
        if !self.recount.accepts(id) {
            return Ok(());
        }
        let Ok(key) = CounterKey::new(&self.name, id) else {
            return Ok(());
        };
        let before = match self.counters.read_partition(&key).await {
            Ok(p) => p,
            Err(e) => {
                skip(report, id, unrepairable(e)?);
                return Ok(());
            }
        };
        let read = before.whole_read();
        let now = crate::clock::now_ms();
        if !is_quiet(read.newest, spec, now, millis(self.options.sweep_quiet)) {
            report.sweep_warm += 1;
            return Ok(());
        }
        report.swept += 1;
        let settle = millis(self.options.settle);
        let cutoff = sweep_horizon(proven, settle, spec);
        let recount = self
            .recount
            .recount(id, 0, cutoff)
            .await
            .map_err(RebuildError::Recount)?;
        let after = match self.counters.read_partition(&key).await {
            Ok(p) => p,
            Err(e) => {
                skip(report, id, unrepairable(e)?);
                return Ok(());
            }
        };
        if after.fix != before.fix {
            return Ok(()); // another rebuild wrote the fix in between: next cycle
        }
        let verdict = judge_whole(
            read,
            recount,
            after.whole_read(),
            cutoff,
            Some(proven),
            settle,
            before.fix.total,
        )
        .map_err(crate::counter::CounterStoreError::from)?;
        match verdict {
            WholeVerdict::Correct(c) if c.change != 0 => {
                if self
                    .counters
                    .set_whole_fix(&key, &after.fix, cutoff, c.fix)
                    .await?
                {
                    *report.corrected.entry(id.to_owned()).or_default() += c.change;
                    tracing::warn!(
                        id,
                        cutoff,
                        change = c.change,
                        "counter corrected whole by the sweep"
                    );
                }
            }
            WholeVerdict::Correct(_) => {}
            WholeVerdict::Moved | WholeVerdict::Busy | WholeVerdict::Lagging => {
                report.sweep_warm += 1;
            }
        }
        Ok(())
    }

    async fn load_sweep(&self) -> Result<SweepCursor, RebuildError> {
        let out = self
            .ddb()
            .get_item()
            .table_name(self.table())
            .key(
                "pk",
                AttributeValue::S(super::store::rebuild_pk(&self.name)),
            )
            .key("sk", AttributeValue::S("sweep".into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::dynamodb("GetItem", self.table(), e))?;
        let Some(item) = out.item else {
            return Ok(SweepCursor::default());
        };
        let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let cycles = item
            .get("cycles")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Ok(SweepCursor {
            after: text("after_pk").zip(text("after_sk")),
            cycles,
        })
    }

    async fn save_sweep(&self, c: &SweepCursor) -> Result<(), RebuildError> {
        let mut req = self
            .ddb()
            .put_item()
            .table_name(self.table())
            .item(
                "pk",
                AttributeValue::S(super::store::rebuild_pk(&self.name)),
            )
            .item("sk", AttributeValue::S("sweep".into()))
            .item("cycles", AttributeValue::N(c.cycles.to_string()));
        if let Some((pk, sk)) = &c.after {
            req = req
                .item("after_pk", AttributeValue::S(pk.clone()))
                .item("after_sk", AttributeValue::S(sk.clone()));
        }
        req.send()
            .await
            .map_err(|e| AwsError::dynamodb("PutItem", self.table(), e))?;
        Ok(())
    }
}
