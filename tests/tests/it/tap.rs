//! A Kinesis source for the consumer tests that forwards every call to kinesis-mock and logs
//! each GetRecords: which shard it read, what it asked for and how many records came back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use heatsink::stream::{
    KinesisSource, RecordBatch, ShardInfo, ShardSource, StartAt, StreamError, Timeouts,
};

/// One GetRecords, logged when it is sent.
#[derive(Clone, Debug)]
pub(crate) struct Read {
    /// The shard its iterator came from (`None` for an iterator this source did not hand out).
    pub shard: Option<String>,
    /// The limit it asked for.
    pub asked: i32,
    /// Records in the answer; `None` while in flight or if it failed.
    pub got: Option<usize>,
}

/// kinesis-mock through a source that logs its GetRecords calls ([`Read`]).
pub(crate) struct Tap {
    inner: KinesisSource,
    /// Iterator → shard, from GetShardIterator and each answer's next iterator.
    iterators: Arc<Mutex<BTreeMap<String, String>>>,
    reads: Arc<Mutex<Vec<Read>>>,
}

impl Tap {
    pub(crate) fn new(inner: KinesisSource) -> Self {
        Self {
            inner,
            iterators: Arc::default(),
            reads: Arc::default(),
        }
    }

    /// The log, in the order the calls were sent.
    pub(crate) fn reads(&self) -> Arc<Mutex<Vec<Read>>> {
        Arc::clone(&self.reads)
    }
}

impl ShardSource for Tap {
    fn stream(&self) -> &str {
        self.inner.stream()
    }
    async fn identity(&self) -> Result<String, StreamError> {
        self.inner.identity().await
    }
    fn max_records(&self) -> i32 {
        self.inner.max_records()
    }
    fn discardable_reads(&self) -> bool {
        self.inner.discardable_reads()
    }
    fn with_timeouts(self, t: Timeouts) -> Self {
        Self {
            inner: self.inner.with_timeouts(t),
            ..self
        }
    }
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, StreamError> {
        self.inner.list_shards().await
    }
    async fn get_iterator(&self, shard_id: &str, start: &StartAt) -> Result<String, StreamError> {
        let it = self.inner.get_iterator(shard_id, start).await?;
        self.iterators
            .lock()
            .unwrap()
            .insert(it.clone(), shard_id.to_owned());
        Ok(it)
    }
    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordBatch, StreamError> {
        let shard = self.iterators.lock().unwrap().get(iterator).cloned();
        let at = {
            let mut reads = self.reads.lock().unwrap();
            reads.push(Read {
                shard,
                asked: limit,
                got: None,
            });
            reads.len() - 1
        };
        let out = self.inner.get_records(iterator, limit).await;
        if let Ok(batch) = &out {
            let mut reads = self.reads.lock().unwrap();
            if let Some(read) = reads.get_mut(at) {
                read.got = Some(batch.records.len());
                if let (Some(next), Some(shard)) = (&batch.next_iterator, &read.shard) {
                    self.iterators
                        .lock()
                        .unwrap()
                        .insert(next.clone(), shard.clone());
                }
            }
        }
        out
    }
}
