//! The diff: both sides of the moved slots compared before the fence; differences are read
//! again after catching the tail up (live writes make a one-pass diff of a moving table noisy),
//! up to 5 rounds; from the second round on, the tail's iterators are issued again where they
//! stand and the stream gets 200 ms more per round. The source side is the source and the
//! tables it carries (the newest version of each key across them, a tombstone counting as
//! one); tombstones never count as items.

use std::collections::BTreeMap;

use heatsink_core::slots::Way;
use heatsink_core::slots::apply::Version;

use super::super::MoveError;
use super::super::fence::{TOMBSTONE_ATTR, is_internal};
use super::super::record::DiffReport;
use super::Mover;
use super::copy::{Pace, snapshot_version};
use crate::ddb::key_text::{key_from_text, key_text};
use crate::ddb::{Item, get_s};
use crate::error::AwsError;

/// The newer of two stored versions of one item (by the apply rule's rank).
fn newer(a: Option<Item>, b: Option<Item>) -> Option<Item> {
    let rank = |i: &Item| snapshot_version(i).map(Version::rank);
    match (a, b) {
        (Some(a), Some(b)) => Some(if rank(&b) > rank(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn live(item: Option<Item>) -> Option<Item> {
    item.filter(|i| !i.contains_key(TOMBSTONE_ATTR))
}

fn version(item: &Item) -> u64 {
    snapshot_version(item).map_or(0, |v| v.rank().0)
}

impl Mover {
    /// Every item of the moved slots on `table`, tombstones included, by key text.
    async fn scan_slots(&self, table: &str) -> Result<BTreeMap<String, Item>, MoveError> {
        let keys = &self.src.keys;
        let mut out = BTreeMap::new();
        let mut pace = Pace::new(self.record.budget.rcu_per_sec);
        let mut start: Option<Item> = None;
        loop {
            let page = self.scan_page(table, start.clone()).await?;
            pace.take(page.items().len().max(1) as f64 * 0.5).await;
            for item in page.items() {
                let Some(pk) = get_s(item, "pk") else {
                    continue;
                };
                if is_internal(pk) || !self.record.slots.contains(self.record.keying.slot_of(pk)) {
                    continue;
                }
                let key = key_text(&keys.key_of(item))
                    .map_err(|e| MoveError::BadItem(format!("a key of {table}: {e}")))?;
                out.insert(key, item.clone());
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(out);
            }
        }
    }

    /// The source side: the source and every carried table, newest version per key.
    async fn scan_source(&self) -> Result<BTreeMap<String, Item>, MoveError> {
        let mut out = self.scan_slots(&self.src.table).await?;
        for table in &self.record.carried {
            for (k, item) in self.scan_slots(table).await? {
                let merged = newer(out.remove(&k), Some(item));
                if let Some(m) = merged {
                    out.insert(k, m);
                }
            }
        }
        Ok(out)
    }

    async fn read(&self, table: &str, key: &str) -> Result<Option<Item>, MoveError> {
        let Ok(k) = key_from_text(key) else {
            return Ok(None);
        };
        let out = self
            .ctx()
            .retry(|| {
                let req = self
                    .ddb
                    .get_item()
                    .table_name(table)
                    .set_key(Some(k.clone()))
                    .consistent_read(true);
                let table = table.to_owned();
                async move {
                    req.send()
                        .await
                        .map_err(|e| MoveError::from(AwsError::dynamodb("GetItem", table, e)))
                }
            })
            .await?;
        Ok(out.item)
    }

    /// The source side of one key (tombstones read as absent).
    async fn read_source(&self, key: &str) -> Result<Option<Item>, MoveError> {
        let mut item = self.read(&self.src.table, key).await?;
        for table in &self.record.carried {
            item = newer(item, self.read(table, key).await?);
        }
        Ok(live(item))
    }

    /// Compares both sides; differences are re-read after catching up again, up to 5 rounds.
    pub(super) async fn diff(&mut self) -> Result<(), MoveError> {
        let source: BTreeMap<String, Item> = self
            .scan_source()
            .await?
            .into_iter()
            .filter(|(_, i)| !i.contains_key(TOMBSTONE_ATTR))
            .collect();
        let target: BTreeMap<String, Item> = self
            .scan_slots(&self.dst.table.clone())
            .await?
            .into_iter()
            .filter(|(_, i)| !i.contains_key(TOMBSTONE_ATTR))
            .collect();
        let mut report = DiffReport {
            source_items: source.len() as u64,
            target_items: target.len() as u64,
            ..DiffReport::default()
        };
        // Under live writes the target may already be newer than the source's scan row.
        let behind = |a: &Item, b: Option<&Item>| match b {
            None => true,
            Some(b) => version(b) < version(a) || (version(b) == version(a) && a != b),
        };
        let mut differing: Vec<String> = source
            .iter()
            .filter(|(k, v)| behind(v, target.get(*k)))
            .map(|(k, _)| k.clone())
            .chain(target.keys().filter(|k| !source.contains_key(*k)).cloned())
            .collect();
        for round in 1..=5 {
            report.rounds = round;
            if differing.is_empty() {
                break;
            }
            // Read the source, then tail past that read, then read the target: the target
            // must hold at least what the source held.
            if round > 1 {
                // Still different after a poll: the stream may not show the writes yet, or an
                // iterator may have gone blind. Issue the iterators again where they stand and
                // give the stream 200 ms more each round (2.8 s at most in all).
                let shards: Vec<String> = self.record.forward.shards.keys().cloned().collect();
                self.reissue(Way::Forward, shards.iter().map(String::as_str));
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(round))).await;
            }
            let mut before = vec![];
            for k in &differing {
                before.push((k.clone(), self.read_source(k).await?));
            }
            self.poll(Way::Forward, None).await?;
            let mut still = vec![];
            for (k, a) in before {
                let b = live(self.read(&self.dst.table, &k).await?);
                let differs = match (&a, &b) {
                    (Some(a), b) => behind(a, b.as_ref()),
                    (None, Some(_)) => self.read_source(&k).await?.is_none(),
                    (None, None) => false,
                };
                if differs {
                    still.push((k, a, b));
                }
            }
            if round == 5 || still.is_empty() {
                for (k, a, b) in &still {
                    match (a, b) {
                        (Some(_), None) => report.missing += 1,
                        (None, Some(_)) => report.extra += 1,
                        _ => report.mismatched += 1,
                    }
                    if report.samples.len() < 5 {
                        report.samples.push(k.clone());
                    }
                }
            }
            differing = still.into_iter().map(|(k, _, _)| k).collect();
        }
        self.say(&format!(
            "{}: diff {} source / {} target items: {} missing, {} extra, {} mismatched",
            self.record.id,
            report.source_items,
            report.target_items,
            report.missing,
            report.extra,
            report.mismatched
        ));
        let clean = report.clean();
        self.record.diff = Some(report.clone());
        if !clean {
            self.save().await?;
            return Err(MoveError::DiffFailed {
                id: self.record.id.clone(),
                missing: report.missing,
                extra: report.extra,
                mismatched: report.mismatched,
                samples: report.samples,
            });
        }
        Ok(())
    }
}
