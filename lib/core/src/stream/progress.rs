//! How far each shard has been read, and which shards may be read now.

use std::collections::BTreeMap;

use super::{ShardGraph, StreamError};
use crate::counter::Seq;

/// Checkpoint value of a shard that has not been read yet.
pub const TRIM_HORIZON: &str = "TRIM_HORIZON";
/// Checkpoint value of a shard read to its end (the KCL's sentinel).
pub const SHARD_END: &str = "SHARD_END";
/// Checkpoint value of an open shard that starts at its tip (the application's first start with
/// initial position LATEST).
pub const LATEST: &str = "LATEST";
/// Prefix of the checkpoint value of a shard that starts at a time (`AT_TIMESTAMP:<ms>`).
pub const AT_TIMESTAMP: &str = "AT_TIMESTAMP:";

/// A place inside a shard: a record's sequence number and, inside a KPL-aggregated record, the
/// index of the sub-record (its sub-sequence number).
///
/// Order is the reading order: by `seq`, then, within one aggregated record, `Some(0) <
/// Some(1) < … < None`, where `None` means the whole record (every sub-record) is done. A
/// checkpoint at `(seq, Some(k))` resumes at sub-record `k + 1` of the same record, so a restart
/// neither skips nor repeats the rest of an aggregate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The record's sequence number.
    pub seq: Seq,
    /// The last processed sub-record of an aggregated record; `None` for the whole record.
    pub sub_seq: Option<u64>,
}

impl Position {
    /// The whole record `seq` (not aggregated, or every sub-record done).
    pub fn record(seq: Seq) -> Self {
        Self { seq, sub_seq: None }
    }

    /// Sub-record `sub_seq` of the aggregated record `seq`.
    pub fn sub_record(seq: Seq, sub_seq: u64) -> Self {
        Self {
            seq,
            sub_seq: Some(sub_seq),
        }
    }

    /// The stored form: the padded seq, then `/<sub_seq>` inside an aggregate.
    pub fn to_checkpoint(&self) -> String {
        match self.sub_seq {
            None => self.seq.as_padded().to_owned(),
            Some(sub) => format!("{}/{sub}", self.seq.as_padded()),
        }
    }

    /// Reads [`Position::to_checkpoint`]'s form back.
    pub fn from_checkpoint(checkpoint: &str) -> Result<Self, StreamError> {
        let bad = || StreamError::InvalidCheckpoint(checkpoint.to_owned());
        let (seq, sub_seq) = match checkpoint.split_once('/') {
            None => (checkpoint, None),
            Some((seq, sub)) => (seq, Some(sub.parse::<u64>().map_err(|_| bad())?)),
        };
        let seq = Seq::parse(seq).map_err(|_| bad())?;
        Ok(Self { seq, sub_seq })
    }
}

impl From<Seq> for Position {
    fn from(seq: Seq) -> Self {
        Self::record(seq)
    }
}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // `None` (the whole record) sorts after every sub-record of it.
        let sub = |p: &Self| p.sub_seq.map_or((1, 0), |s| (0, s));
        self.seq
            .cmp(&other.seq)
            .then_with(|| sub(self).cmp(&sub(other)))
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sub_seq {
            None => write!(f, "{}", self.seq),
            Some(sub) => write!(f, "{}/{sub}", self.seq),
        }
    }
}

/// How far one shard has been read, as its lease's checkpoint records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// Nothing read; reading starts at the shard's first record.
    #[default]
    NotStarted,
    /// Nothing read; reading starts at the shard's tip. Only the open shards of an application's
    /// first start with initial position LATEST get it ([`super::first_start`]).
    Latest,
    /// Nothing read; reading starts at the first record at or after this time (ms since the
    /// epoch): an application's first start with initial position AT_TIMESTAMP.
    AtTimestamp(u64),
    /// Read up to and including this position.
    InProgress(Position),
    /// Read to SHARD_END: closed and every record processed; its children may start.
    Finished,
}

impl Progress {
    /// True at SHARD_END.
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Finished)
    }

    /// True before the first checkpoint of the shard (whatever position it starts at).
    pub fn is_unstarted(&self) -> bool {
        matches!(self, Self::NotStarted | Self::Latest | Self::AtTimestamp(_))
    }

    /// The last processed position, if any.
    pub fn position(&self) -> Option<&Position> {
        match self {
            Self::InProgress(p) => Some(p),
            _ => None,
        }
    }

    /// The checkpoint as stored in the lease table: `TRIM_HORIZON`, `LATEST`,
    /// `AT_TIMESTAMP:<ms>`, a padded seq (`/<sub_seq>` inside an aggregate), `SHARD_END`.
    pub fn to_checkpoint(&self) -> String {
        match self {
            Self::NotStarted => TRIM_HORIZON.to_owned(),
            Self::Latest => LATEST.to_owned(),
            Self::AtTimestamp(ms) => format!("{AT_TIMESTAMP}{ms}"),
            Self::InProgress(position) => position.to_checkpoint(),
            Self::Finished => SHARD_END.to_owned(),
        }
    }

    /// Reads a stored checkpoint back; anything else is [`StreamError::InvalidCheckpoint`].
    pub fn from_checkpoint(checkpoint: &str) -> Result<Self, StreamError> {
        match checkpoint {
            TRIM_HORIZON => Ok(Self::NotStarted),
            SHARD_END => Ok(Self::Finished),
            LATEST => Ok(Self::Latest),
            at if at.starts_with(AT_TIMESTAMP) => at[AT_TIMESTAMP.len()..]
                .parse::<u64>()
                .map(Self::AtTimestamp)
                .map_err(|_| StreamError::InvalidCheckpoint(at.to_owned())),
            position => Position::from_checkpoint(position).map(Self::InProgress),
        }
    }
}

/// Progress of every shard of one application (the lease table's checkpoint column).
///
/// A shard with no entry has not started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoints {
    shards: BTreeMap<String, Progress>,
}

impl Checkpoints {
    /// No shard started.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a shard's progress.
    pub fn set(&mut self, shard_id: impl Into<String>, progress: Progress) {
        self.shards.insert(shard_id.into(), progress);
    }

    /// A shard's progress (`NotStarted` if unknown).
    pub fn get(&self, shard_id: &str) -> &Progress {
        const NOT_STARTED: Progress = Progress::NotStarted;
        self.shards.get(shard_id).unwrap_or(&NOT_STARTED)
    }

    /// True if the shard was read to SHARD_END.
    pub fn is_finished(&self, shard_id: &str) -> bool {
        self.get(shard_id).is_finished()
    }

    /// Every recorded shard and its progress, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Progress)> {
        self.shards.iter().map(|(id, p)| (id.as_str(), p))
    }
}

impl FromIterator<(String, Progress)> for Checkpoints {
    fn from_iter<I: IntoIterator<Item = (String, Progress)>>(iter: I) -> Self {
        Self {
            shards: iter.into_iter().collect(),
        }
    }
}

/// The shards that may be read now, parents first (by lineage depth, then id).
///
/// A shard is eligible iff it is not finished and each of its parents — the parent *and* the
/// adjacent parent of a merge — is finished or absent from the graph (trimmed past retention).
/// Waiting for both parents of a merge is what keeps a key's records in order across it.
pub fn eligible(graph: &ShardGraph, checkpoints: &Checkpoints) -> Vec<String> {
    graph
        .lineage_order()
        .filter(|id| !checkpoints.is_finished(id))
        .filter(|id| {
            graph
                .listed_parents(id)
                .all(|parent| checkpoints.is_finished(parent))
        })
        .map(str::to_owned)
        .collect()
}
