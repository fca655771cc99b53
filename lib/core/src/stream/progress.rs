//! How far each shard has been read, and which shards may be read now.

use std::collections::BTreeMap;

use super::{ShardGraph, StreamError};
use crate::counter::Seq;

/// Checkpoint value of a shard that has not been read yet.
pub const TRIM_HORIZON: &str = "TRIM_HORIZON";
/// Checkpoint value of a shard read to its end (the KCL's sentinel).
pub const SHARD_END: &str = "SHARD_END";

/// How far one shard has been read, as its lease's checkpoint records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// Nothing read; reading starts at the shard's first record.
    #[default]
    NotStarted,
    /// Read up to and including this sequence number.
    InProgress(Seq),
    /// Read to SHARD_END: closed and every record processed; its children may start.
    Finished,
}

impl Progress {
    /// True at SHARD_END.
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Finished)
    }

    /// The checkpoint as stored in the lease table: `TRIM_HORIZON`, a padded seq, `SHARD_END`.
    pub fn to_checkpoint(&self) -> String {
        match self {
            Self::NotStarted => TRIM_HORIZON.to_owned(),
            Self::InProgress(seq) => seq.as_padded().to_owned(),
            Self::Finished => SHARD_END.to_owned(),
        }
    }

    /// Reads a stored checkpoint back; anything else is [`StreamError::InvalidCheckpoint`].
    pub fn from_checkpoint(checkpoint: &str) -> Result<Self, StreamError> {
        match checkpoint {
            TRIM_HORIZON => Ok(Self::NotStarted),
            SHARD_END => Ok(Self::Finished),
            seq => Seq::parse(seq)
                .map(Self::InProgress)
                .map_err(|_| StreamError::InvalidCheckpoint(seq.to_owned())),
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
