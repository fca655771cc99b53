//! Proven progress from the stream's lineage: which writers must prove they processed a change
//! before a bucket may be judged ([`progress`]), when a parent writer is retired
//! ([`retire_due`]), and when the repair must not judge at all ([`Progress::gate`]).
//!
//! **Expected writers come from the stream, not from who happened to write.** Every shard the
//! stream lists could hold a change of a bucket being judged (a child shard can receive changes
//! created before the reshard, Kinesis' replication can deliver minutes-old changes): each is a
//! writer that must prove progress past the bucket, unless it is *retired* (closed and read to
//! its end). A listed writer without a watermark proves nothing, so it **blocks**: nothing is
//! proven, and it is reported by shard id. A watermark of a writer the listing does not show is
//! counted as long as the listing may be older than the watermarks (a new shard the cached
//! listing does not know yet); once a listing taken after the watermarks were read still does
//! not show it, the shard was trimmed past the stream's retention and holds nothing.
//!
//! **Retirement by the lineage.** A parent shard is retired only when every one of its children
//! in the listing has a watermark ([`retire_due`]): a child delivers only after its parents were
//! read to their end (Lambda's order for Kinesis and DynamoDB Streams alike), so a child's first
//! watermark proves its parents finished; waiting for *every* child keeps the parent's (final)
//! watermark in the minimum until the listing proves no child of it is still silent, whatever a
//! cache missed. The aggregator retires, after it records a child's watermark; nobody retires
//! by hand.
//!
//! **The replication gate.** With Kinesis Data Streams for DynamoDB a table partition's changes
//! can reach the stream late (replication lag); a watermark computed from the changes that did
//! arrive would run ahead of them. The aggregator records, with each watermark, the largest
//! delay from a change's creation to its arrival in the stream that its batch saw; while any
//! expected writer's delay exceeds the settle time, [`Progress::gate`] closes: no bucket is judged.
//!
//! ```
//! use heatsink_core::counter::{Gate, Watermark, WriterId, progress, retire_due};
//! use heatsink_core::stream::ShardInfo;
//!
//! let shard = |id: &str, parent: Option<&str>, closed: bool| ShardInfo {
//!     parent: parent.map(str::to_owned),
//!     ending_seq: closed.then(|| "99".to_owned()),
//!     ..ShardInfo::new(id)
//! };
//! // shardId-0 split into shardId-1 and shardId-2; only shardId-1 has delivered yet.
//! let listing = [shard("shardId-0", None, true), shard("shardId-1", Some("shardId-0"), false),
//!     shard("shardId-2", Some("shardId-0"), false)];
//! let mark = |id: &str, at: u64| Watermark { writer: WriterId::new(id).unwrap(), flushed_ms: at,
//!     retired: false, lag_ms: None };
//! let marks = [mark("shardId-0", 1_000), mark("shardId-1", 5_000)];
//! let p = progress(&listing, &marks, true);
//! assert_eq!(p.proven, None);
//! assert_eq!(p.silent, vec!["shardId-2".to_owned()]);
//! assert!(matches!(p.gate(60_000), Gate::Silent(_)));
//! // The parent is not retired while a child is silent.
//! assert!(retire_due(&listing, &marks).is_empty());
//! let marks = [mark("shardId-0", 1_000), mark("shardId-1", 5_000), mark("shardId-2", 4_000)];
//! assert_eq!(retire_due(&listing, &marks), vec![WriterId::new("shardId-0")?]);
//! # Ok::<(), heatsink_core::counter::CounterError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::{Watermark, WriterId};
use crate::stream::ShardInfo;

/// What the watermarks prove, given the stream's listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// The smallest watermark of the expected writers: every change of the stream created at
    /// or before it was processed. `None` when a writer is silent or none is expected.
    pub proven: Option<u64>,
    /// Expected writers (shard ids) without a watermark: each blocks every judgement.
    pub silent: Vec<String>,
    /// The expected writer whose watermark is the smallest, with it (what holds progress
    /// back; with silent writers, the smallest of the others).
    pub slowest: Option<(WriterId, u64)>,
    /// The largest replication delay an expected writer last saw (Kinesis only), with it.
    pub replication_lag: Option<(WriterId, u64)>,
    /// Watermarks of writers the listing does not show, not retired: counted in the minimum
    /// unless the listing is known to be newer than them (then ignored as trimmed).
    pub unlisted: Vec<WriterId>,
    /// Writers retired (closed and read to their end): what compaction may fold.
    pub retired: BTreeSet<WriterId>,
}

/// Whether the repair may judge buckets now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Judge buckets up to this proven progress.
    Open(u64),
    /// Nothing is expected or nothing has a watermark: nothing is proven.
    NothingProven,
    /// These expected writers (shard ids) have no watermark.
    Silent(Vec<String>),
    /// This writer's last batch arrived this many ms after its changes were created: more
    /// than the settle time.
    ReplicationLag {
        /// The lagging writer.
        writer: WriterId,
        /// Its delay, ms.
        lag_ms: u64,
    },
}

impl Progress {
    /// The repair's gate: closed while a writer is silent, while nothing is proven, or while an
    /// expected writer's replication delay exceeds `settle_ms`.
    pub fn gate(&self, settle_ms: u64) -> Gate {
        if !self.silent.is_empty() {
            return Gate::Silent(self.silent.clone());
        }
        if let Some((writer, lag_ms)) = &self.replication_lag
            && *lag_ms > settle_ms
        {
            return Gate::ReplicationLag {
                writer: writer.clone(),
                lag_ms: *lag_ms,
            };
        }
        match self.proven {
            Some(p) => Gate::Open(p),
            None => Gate::NothingProven,
        }
    }
}

/// The proven progress of the writers `listing` expects, from their watermarks `marks`
/// (see the module docs). `listing_is_newer`: the listing was taken after `marks` were read,
/// so a watermark of a shard it does not show belongs to a shard trimmed past retention.
pub fn progress(listing: &[ShardInfo], marks: &[Watermark], listing_is_newer: bool) -> Progress {
    let by_writer: BTreeMap<&str, &Watermark> =
        marks.iter().map(|m| (m.writer.as_str(), m)).collect();
    let listed: BTreeSet<&str> = listing.iter().map(|s| s.shard_id.as_str()).collect();
    let mut out = Progress {
        retired: marks
            .iter()
            .filter(|m| m.retired)
            .map(|m| m.writer.clone())
            .collect(),
        ..Progress::default()
    };
    let mut counted: Vec<&Watermark> = vec![];
    for shard in listing {
        match by_writer.get(shard.shard_id.as_str()) {
            Some(m) if m.retired => {}
            Some(m) => counted.push(m),
            None => out.silent.push(shard.shard_id.clone()),
        }
    }
    for m in marks
        .iter()
        .filter(|m| !m.retired && !listed.contains(m.writer.as_str()))
    {
        out.unlisted.push(m.writer.clone());
        if !listing_is_newer {
            counted.push(m);
        }
    }
    out.slowest = counted
        .iter()
        .min_by_key(|m| m.flushed_ms)
        .map(|m| (m.writer.clone(), m.flushed_ms));
    out.replication_lag = counted
        .iter()
        .filter_map(|m| m.lag_ms.map(|l| (m.writer.clone(), l)))
        .max_by_key(|(_, l)| *l);
    if out.silent.is_empty() {
        out.proven = out.slowest.as_ref().map(|(_, at)| *at);
    }
    out
}

/// The parents the aggregator may retire now: shards of `listing` with at least one child, every
/// child of which has a watermark, and that are not retired yet.
pub fn retire_due(listing: &[ShardInfo], marks: &[Watermark]) -> Vec<WriterId> {
    let marked: BTreeSet<&str> = marks.iter().map(|m| m.writer.as_str()).collect();
    let retired: BTreeSet<&str> = marks
        .iter()
        .filter(|m| m.retired)
        .map(|m| m.writer.as_str())
        .collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in listing {
        for p in s.parents() {
            children.entry(p).or_default().push(s.shard_id.as_str());
        }
    }
    children
        .into_iter()
        .filter(|(parent, kids)| {
            !retired.contains(parent) && kids.iter().all(|k| marked.contains(k))
        })
        .filter_map(|(parent, _)| WriterId::new(parent).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::stream::ReshardSim;

    fn mark(id: &str, at: u64) -> Watermark {
        Watermark {
            writer: WriterId::new(id).expect("id"),
            flushed_ms: at,
            retired: false,
            lag_ms: None,
        }
    }

    fn open(id: &str) -> ShardInfo {
        ShardInfo::new(id)
    }

    #[test]
    fn a_listed_writer_without_a_watermark_blocks_and_is_named() {
        let listing = [open("shardId-0"), open("shardId-1")];
        let p = progress(&listing, &[mark("shardId-0", 50)], true);
        assert_eq!(p.proven, None);
        assert_eq!(p.silent, vec!["shardId-1".to_owned()]);
        assert_eq!(
            p.slowest,
            Some((WriterId::new("shardId-0").expect("id"), 50))
        );
        let both = progress(
            &listing,
            &[mark("shardId-0", 50), mark("shardId-1", 40)],
            true,
        );
        assert_eq!(both.proven, Some(40));
        assert_eq!(both.gate(1_000), Gate::Open(40));
        assert_eq!(progress(&[], &[], true).gate(1_000), Gate::NothingProven);
    }

    #[test]
    fn an_unlisted_watermark_counts_until_a_newer_listing_shows_its_shard_is_gone() {
        let listing = [open("shardId-1")];
        let marks = [mark("shardId-1", 90), mark("shardId-0", 10)];
        // The listing may predate shardId-0: it holds progress back.
        assert_eq!(progress(&listing, &marks, false).proven, Some(10));
        // A listing taken after the watermarks were read: shardId-0 was trimmed.
        let p = progress(&listing, &marks, true);
        assert_eq!(p.proven, Some(90));
        assert_eq!(p.unlisted, vec![WriterId::new("shardId-0").expect("id")]);
    }

    #[test]
    fn a_writer_whose_changes_arrive_later_than_the_settle_time_closes_the_gate() {
        let mut lagging = mark("shardId-1", 90);
        lagging.lag_ms = Some(70_000);
        let listing = [open("shardId-0"), open("shardId-1")];
        let p = progress(&listing, &[mark("shardId-0", 95), lagging], true);
        assert_eq!(
            p.gate(60_000),
            Gate::ReplicationLag {
                writer: WriterId::new("shardId-1").expect("id"),
                lag_ms: 70_000
            }
        );
        assert_eq!(p.gate(90_000), Gate::Open(90));
    }

    #[test]
    fn a_merged_childs_watermark_retires_both_parents() {
        let child = ShardInfo {
            parent: Some("shardId-0".into()),
            adjacent_parent: Some("shardId-1".into()),
            ..ShardInfo::new("shardId-2")
        };
        let listing = [open("shardId-0"), open("shardId-1"), child];
        assert!(retire_due(&listing, &[mark("shardId-0", 1)]).is_empty());
        assert_eq!(
            retire_due(&listing, &[mark("shardId-2", 5)]),
            vec![
                WriterId::new("shardId-0").expect("id"),
                WriterId::new("shardId-1").expect("id")
            ]
        );
    }

    #[test]
    fn a_parent_stays_unretired_while_a_child_is_silent_so_a_stale_listing_cannot_skip_it() {
        let child = |id: &str| ShardInfo {
            parent: Some("shardId-0".into()),
            ..ShardInfo::new(id)
        };
        let full = [open("shardId-0"), child("shardId-1"), child("shardId-2")];
        let mut marks = vec![mark("shardId-0", 100), mark("shardId-1", 900)];
        for w in retire_due(&full, &marks) {
            if let Some(m) = marks.iter_mut().find(|m| m.writer == w) {
                m.retired = true;
            }
        }
        // The repair's listing is a cached one taken before shardId-2 existed: the parent's
        // frozen watermark still holds progress where shardId-2's changes may be.
        let stale = [open("shardId-0"), child("shardId-1")];
        assert_eq!(progress(&stale, &marks, false).proven, Some(100));
    }

    proptest! {
        /// Over any resharding history (splits, merges, UpdateShardCount) with changes put on
        /// the shards and each shard processing a prefix of its changes (children only once
        /// their parents are done, as Lambda reads them), with parents retired by
        /// [`retire_due`] as children report: whatever [`progress`] proves, every change
        /// created at or before it was processed.
        #[test]
        fn proven_progress_never_passes_an_unprocessed_change(
            seed in any::<u64>(),
            steps in 1usize..40,
            done in proptest::collection::vec(0usize..12, 64),
            retire in any::<bool>(),
        ) {
            let sim = ReshardSim::random(seed, 2, steps);
            let graph = sim.graph().expect("graph");
            // Shards in lineage order: a shard is read only once its parents are read to the end.
            let mut finished: BTreeSet<String> = BTreeSet::new();
            let mut marks: Vec<Watermark> = vec![];
            let mut unprocessed: Vec<u64> = vec![];
            for (i, id) in graph.lineage_order().map(str::to_owned).collect::<Vec<_>>().into_iter().enumerate() {
                let info = graph.get(&id).expect("listed").clone();
                let records = sim.records(&id);
                let parents_done = info.parents().all(|p| finished.contains(p) || !graph.contains(p));
                let times: Vec<u64> = records.iter().map(|r| r.seq.to_decimal().parse::<u64>().unwrap_or(0)).collect();
                let read = if parents_done { done[i % done.len()].min(times.len()) } else { 0 };
                unprocessed.extend(times[read..].iter().copied());
                if parents_done && read > 0 {
                    // Records are in creation order per shard: the watermark is the last read.
                    marks.push(Watermark { writer: WriterId::new(&id).expect("id"),
                        flushed_ms: times[read - 1], retired: false, lag_ms: None });
                }
                if parents_done && read == times.len() && info.is_closed() {
                    finished.insert(id);
                }
            }
            if retire {
                let listing: Vec<ShardInfo> = graph.shards().cloned().collect();
                for w in retire_due(&listing, &marks) {
                    if let Some(m) = marks.iter_mut().find(|m| m.writer == w) {
                        m.retired = true;
                    } else {
                        marks.push(Watermark { writer: w, flushed_ms: 0, retired: true, lag_ms: None });
                    }
                }
            }
            let listing: Vec<ShardInfo> = graph.shards().cloned().collect();
            let p = progress(&listing, &marks, true);
            if let Some(proven) = p.proven {
                prop_assert!(unprocessed.iter().all(|t| *t > proven),
                    "proven {} but unprocessed {:?}", proven, unprocessed);
            }
        }
    }
}
