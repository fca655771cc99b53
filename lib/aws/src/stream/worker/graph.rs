//! The shard graph as the worker sees it: the listing made the graph, `ChildShards` merged in
//! as they arrive, a gone shard removed.

use std::collections::BTreeSet;
use std::sync::Arc;

use heatsink_core::stream::{ShardGraph, ShardInfo};

use super::RecordProcessor;
use super::shared::Shared;
use crate::stream::{ShardSource, StreamError};

impl<S: ShardSource, P: RecordProcessor> Shared<S, P> {
    /// Lists every shard and makes the listing the graph: shards no longer listed (trimmed past
    /// retention) drop out, except children announced by `ChildShards` whose parent is listed
    /// (the listing may not show them yet).
    pub(super) async fn sync_shards(&self) -> Result<(), StreamError> {
        let listed = self.source.list_shards().await?;
        let ids: BTreeSet<String> = listed.iter().map(|s| s.shard_id.clone()).collect();
        let old = self.graph();
        let mut all = listed;
        for info in old.shards() {
            if !ids.contains(&info.shard_id) && info.parents().any(|p| ids.contains(p)) {
                all.push(info.clone());
            }
        }
        let fresh = ShardGraph::new(all)?;
        for info in old.shards() {
            if !fresh.contains(&info.shard_id) {
                tracing::info!(shard = %info.shard_id,
                    "shard no longer listed (trimmed past retention): dropped from the graph");
            }
        }
        self.set_graph(fresh);
        Ok(())
    }

    pub(super) fn set_graph(&self, graph: ShardGraph) {
        if let Ok(mut g) = self.graph.lock() {
            *g = Arc::new(graph);
        }
    }

    pub(super) fn merge_shards(&self, shards: Vec<ShardInfo>) -> Result<(), StreamError> {
        let mut graph = (*self.graph()).clone();
        graph.merge(shards)?;
        self.set_graph(graph);
        Ok(())
    }

    pub(super) fn graph(&self) -> Arc<ShardGraph> {
        self.graph
            .lock()
            .map(|g| Arc::clone(&g))
            .unwrap_or_default()
    }

    pub(super) fn children(&self, shard: &str) -> Vec<ShardInfo> {
        let graph = self.graph();
        graph
            .children_of(shard)
            .into_iter()
            .filter_map(|id| graph.get(id).cloned())
            .collect()
    }
}
