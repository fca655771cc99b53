//! The lineage graph of a stream's shards: who is whose parent, as ListShards reports it.

use std::collections::{BTreeMap, BTreeSet};

use super::StreamError;

/// One shard as a stream lists it (Kinesis `Shard`, DynamoDB Streams `Shard`); filled by adapters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard's id (`shardId-000000000007`).
    pub shard_id: String,
    /// `ParentShardId`: the shard this one was split or merged from.
    pub parent: Option<String>,
    /// `AdjacentParentShardId`: the second parent of a merge.
    pub adjacent_parent: Option<String>,
    /// Inclusive hash-key range (Kinesis; `None` for DynamoDB Streams).
    pub hash_range: Option<(u128, u128)>,
    /// First sequence number (`None` when known only from `ChildShards`, which omits it).
    pub starting_seq: Option<String>,
    /// Last sequence number; `Some` once the shard is closed and takes no new records.
    pub ending_seq: Option<String>,
}

impl ShardInfo {
    /// An open root shard with nothing else known: the starting point for builders and tests.
    pub fn new(shard_id: impl Into<String>) -> Self {
        Self {
            shard_id: shard_id.into(),
            parent: None,
            adjacent_parent: None,
            hash_range: None,
            starting_seq: None,
            ending_seq: None,
        }
    }

    /// A child announced by GetRecords' `ChildShards` (one parent for a split, two for a merge).
    pub fn from_child_shard(
        shard_id: impl Into<String>,
        parents: &[String],
        hash_range: Option<(u128, u128)>,
    ) -> Result<Self, StreamError> {
        let shard_id = shard_id.into();
        let (parent, adjacent_parent) = match parents {
            [] => (None, None),
            [p] => (Some(p.clone()), None),
            [p, a] => (Some(p.clone()), Some(a.clone())),
            _ => {
                return Err(StreamError::InvalidShard {
                    shard_id,
                    reason: "more than two parent shards",
                });
            }
        };
        Ok(Self {
            parent,
            adjacent_parent,
            hash_range,
            ..Self::new(shard_id)
        })
    }

    /// True once the shard has an ending sequence number: it takes no new records.
    pub fn is_closed(&self) -> bool {
        self.ending_seq.is_some()
    }

    /// The parent and the adjacent parent, whichever are set.
    pub fn parents(&self) -> impl Iterator<Item = &str> {
        self.parent
            .iter()
            .chain(self.adjacent_parent.iter())
            .map(String::as_str)
    }

    fn validate(&self) -> Result<(), StreamError> {
        let invalid = |reason| StreamError::InvalidShard {
            shard_id: self.shard_id.clone(),
            reason,
        };
        if self.shard_id.is_empty() {
            return Err(invalid("empty shard id"));
        }
        if self.parents().any(|p| p == self.shard_id) {
            return Err(StreamError::SelfParent(self.shard_id.clone()));
        }
        if self.adjacent_parent.is_some() && self.parent.is_none() {
            return Err(invalid("an adjacent parent without a parent"));
        }
        if self.parent.is_some() && self.parent == self.adjacent_parent {
            return Err(invalid(
                "the parent and the adjacent parent are the same shard",
            ));
        }
        if self.hash_range.is_some_and(|(start, end)| start > end) {
            return Err(invalid("hash range starts after it ends"));
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct Node {
    info: ShardInfo,
    children: BTreeSet<String>,
    depth: usize,
}

/// The shards of one stream and their lineage, validated: unique ids, no self-parent, no cycle.
///
/// A parent id that is not in the graph is a shard trimmed past retention: it no longer blocks
/// its children.
#[derive(Clone, Debug, Default)]
pub struct ShardGraph {
    nodes: BTreeMap<String, Node>,
    /// Every id by (depth, id): parents before children.
    order: Vec<String>,
}

impl ShardGraph {
    /// Builds the graph from a full listing (ListShards / DescribeStream pages concatenated).
    pub fn new(shards: Vec<ShardInfo>) -> Result<Self, StreamError> {
        let mut nodes = BTreeMap::new();
        for info in shards {
            info.validate()?;
            let id = info.shard_id.clone();
            let node = Node {
                info,
                children: BTreeSet::new(),
                depth: 0,
            };
            if nodes.insert(id.clone(), node).is_some() {
                return Err(StreamError::DuplicateShard(id));
            }
        }
        // Children and in-degrees over parents present in the graph.
        let mut edges: Vec<(String, String)> = Vec::new();
        for (id, node) in &nodes {
            for parent in node.info.parents() {
                if nodes.contains_key(parent) {
                    edges.push((parent.to_owned(), id.clone()));
                }
            }
        }
        let mut pending: BTreeMap<String, usize> = nodes.keys().map(|id| (id.clone(), 0)).collect();
        for (parent, child) in edges {
            if let Some(n) = pending.get_mut(&child) {
                *n += 1;
            }
            if let Some(node) = nodes.get_mut(&parent) {
                node.children.insert(child);
            }
        }
        // Kahn's algorithm: depth = longest path from a root; leftovers sit on a cycle.
        let mut ready: Vec<String> = pending
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(id, _)| id.clone())
            .collect();
        let mut done = 0;
        while let Some(id) = ready.pop() {
            done += 1;
            let (depth, children) = match nodes.get(&id) {
                Some(node) => (node.depth, node.children.clone()),
                None => continue,
            };
            for child in children {
                if let Some(node) = nodes.get_mut(&child) {
                    node.depth = node.depth.max(depth + 1);
                }
                if let Some(n) = pending.get_mut(&child) {
                    *n -= 1;
                    if *n == 0 {
                        ready.push(child);
                    }
                }
            }
        }
        if done < nodes.len() {
            let on_cycle = pending
                .into_iter()
                .find(|(_, n)| *n > 0)
                .map(|(id, _)| id)
                .unwrap_or_default();
            return Err(StreamError::Cycle(on_cycle));
        }
        let mut order: Vec<(usize, String)> = nodes
            .iter()
            .map(|(id, node)| (node.depth, id.clone()))
            .collect();
        order.sort_unstable();
        Ok(Self {
            nodes,
            order: order.into_iter().map(|(_, id)| id).collect(),
        })
    }

    /// Merges shards discovered later (a new ListShards page, or GetRecords' `ChildShards`).
    ///
    /// A known shard may gain fields it lacked (its ending seq once closed, its starting seq once
    /// listed) but not change them, nor change its parents. Returns the ids that were new, sorted.
    /// On error the graph is unchanged.
    pub fn merge(&mut self, discovered: Vec<ShardInfo>) -> Result<Vec<String>, StreamError> {
        let mut all: BTreeMap<String, ShardInfo> = self
            .nodes
            .iter()
            .map(|(id, node)| (id.clone(), node.info.clone()))
            .collect();
        let mut added = BTreeSet::new();
        for info in discovered {
            match all.get_mut(&info.shard_id) {
                None => {
                    added.insert(info.shard_id.clone());
                    all.insert(info.shard_id.clone(), info);
                }
                Some(known) => reconcile(known, info)?,
            }
        }
        *self = Self::new(all.into_values().collect())?;
        Ok(added.into_iter().collect())
    }

    /// Removes a shard trimmed past retention; its children then treat it as absent.
    pub fn remove(&mut self, shard_id: &str) -> Option<ShardInfo> {
        let node = self.nodes.remove(shard_id)?;
        let rest: Vec<ShardInfo> = self.nodes.values().map(|n| n.info.clone()).collect();
        // Removing a node cannot create a duplicate or a cycle, so rebuilding cannot fail.
        if let Ok(graph) = Self::new(rest) {
            *self = graph;
        }
        Some(node.info)
    }

    /// The shard with this id, if listed.
    pub fn get(&self, shard_id: &str) -> Option<&ShardInfo> {
        self.nodes.get(shard_id).map(|n| &n.info)
    }

    /// True if the shard is listed (not trimmed, not unknown).
    pub fn contains(&self, shard_id: &str) -> bool {
        self.nodes.contains_key(shard_id)
    }

    /// Number of shards listed.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no shard is listed.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All shards, by id.
    pub fn shards(&self) -> impl Iterator<Item = &ShardInfo> {
        self.nodes.values().map(|n| &n.info)
    }

    /// The shards whose parent or adjacent parent is this one, by id.
    pub fn children_of(&self, shard_id: &str) -> Vec<&str> {
        self.nodes
            .get(shard_id)
            .map(|n| n.children.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// This shard's parents that are still in the graph (trimmed ones are left out).
    pub fn parents_in_graph(&self, shard_id: &str) -> Vec<&str> {
        self.listed_parents(shard_id).collect()
    }

    /// Like [`ShardGraph::parents_in_graph`], without allocating.
    pub(crate) fn listed_parents<'a>(&'a self, shard_id: &str) -> impl Iterator<Item = &'a str> {
        self.get(shard_id)
            .into_iter()
            .flat_map(ShardInfo::parents)
            .filter(|p| self.contains(p))
    }

    /// Lineage depth: 0 for a shard with no parent in the graph, else 1 + its deepest parent's.
    pub fn depth(&self, shard_id: &str) -> Option<usize> {
        self.nodes.get(shard_id).map(|n| n.depth)
    }

    /// Every shard id, parents before children: by lineage depth, then by id.
    pub fn lineage_order(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }
}

/// Folds a re-listed shard into what was known, filling gaps and rejecting contradictions.
fn reconcile(known: &mut ShardInfo, new: ShardInfo) -> Result<(), StreamError> {
    let conflict = |field| StreamError::ConflictingShard {
        shard_id: new.shard_id.clone(),
        field,
    };
    let parents =
        |info: &ShardInfo| -> BTreeSet<String> { info.parents().map(str::to_owned).collect() };
    if parents(known) != parents(&new) {
        return Err(conflict("parents"));
    }
    fill(&mut known.hash_range, new.hash_range).map_err(|()| conflict("hash_range"))?;
    fill(&mut known.starting_seq, new.starting_seq).map_err(|()| conflict("starting_seq"))?;
    fill(&mut known.ending_seq, new.ending_seq).map_err(|()| conflict("ending_seq"))?;
    Ok(())
}

/// Sets a field that was unknown; a different known value is a contradiction.
fn fill<T: PartialEq>(slot: &mut Option<T>, new: Option<T>) -> Result<(), ()> {
    match (slot.as_ref(), new) {
        (_, None) => Ok(()),
        (None, Some(v)) => {
            *slot = Some(v);
            Ok(())
        }
        (Some(old), Some(v)) if *old == v => Ok(()),
        (Some(_), Some(_)) => Err(()),
    }
}
