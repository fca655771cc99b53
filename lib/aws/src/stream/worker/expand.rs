//! Deaggregation under the byte budget: the KPL aggregates of a GetRecords answer become user
//! records one processor batch at a time, each batch counted against the shard's budget before
//! it is built.
//!
//! A source returns Kinesis records as the stream holds them ([`super::super::ShardSource`]); a
//! 1 MiB aggregate can hold 174,762 user records ([`kpl::MIN_SUB_RECORD_BYTES`] each), and
//! every user record costs a [`StreamRecord`] ([`RECORD_BYTES`]), so expanding a 10 MiB answer
//! at once could take 190 MB. Here a batch holds at most `max_records` user records, is built
//! only while the shard holds less than its budget, and is charged what it holds: its records'
//! structs, the shared keys it first uses, and each Kinesis record's bytes with the batch that
//! holds its last user record. The payloads and keys of an aggregate's user records are slices
//! and shared copies, never one copy per user record.
//!
//! A record that carries the KPL magic but is refused by [`Deaggregator::open`] (corrupt, or
//! over a bound: a key table entry over 256 characters, a table longer than its records, a
//! missing field) is delivered whole with its reason in [`StreamRecord::undecodable`].

use std::sync::Arc;

use heatsink_core::counter::Seq;
use heatsink_core::kpl::{self, Deaggregator};
use tokio::sync::{mpsc, watch};

use super::fetcher::{ByteBudget, Fetched};
use crate::stream::{RecordBatch, StreamRecord};

/// Bytes one user record costs beyond what it shares: its [`StreamRecord`].
pub(super) const RECORD_BYTES: usize = std::mem::size_of::<StreamRecord>();

/// Heap bytes of one sequence number (its shared digits and counts).
const SEQ_BYTES: usize = Seq::WIDTH + 2 * std::mem::size_of::<usize>();

/// Heap bytes of one shared key of `len` bytes.
fn key_bytes(len: usize) -> usize {
    len + 2 * std::mem::size_of::<usize>()
}

/// What a record that is passed on whole holds: its struct, sequence number, key and data.
fn whole_bytes(r: &StreamRecord) -> usize {
    RECORD_BYTES + SEQ_BYTES + key_bytes(r.partition_key.len()) + r.data.len()
}

/// Where the batches go: the shard task's queue, under the budget.
pub(super) struct Outlet<'a> {
    pub tx: &'a mpsc::Sender<(Fetched, usize)>,
    pub budget: &'a ByteBudget,
    /// The budget: a batch is built only while the shard holds less.
    pub limit: usize,
    pub stop: &'a mut watch::Receiver<bool>,
    /// User records per batch, at most.
    pub max_records: usize,
}

/// The shard task is gone or the worker is stopping: the fetcher ends.
#[derive(Debug)]
pub(super) struct Closed;

/// The batch being built.
#[derive(Default)]
struct Pending {
    records: Vec<StreamRecord>,
    bytes: usize,
}

impl Pending {
    /// Adds `r`, charged `bytes`; sends the batch first if it is full, and waits for room in
    /// the budget before starting a new one.
    async fn push(
        &mut self,
        r: StreamRecord,
        bytes: usize,
        out: &mut Outlet<'_>,
    ) -> Result<(), Closed> {
        if self.records.len() >= out.max_records.max(1) {
            self.send_part(out).await?;
        }
        if self.records.is_empty() && out.budget.below(out.limit, out.stop).await {
            return Err(Closed);
        }
        self.records.push(r);
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(())
    }

    /// Sends what is built as a part of an answer (more of it follows).
    async fn send_part(&mut self, out: &Outlet<'_>) -> Result<(), Closed> {
        let part = RecordBatch {
            records: std::mem::take(&mut self.records),
            ..RecordBatch::default()
        };
        let bytes = std::mem::take(&mut self.bytes);
        out.budget.take(bytes);
        out.tx
            .send((Fetched::Part(part), bytes))
            .await
            .map_err(|_| Closed)
    }
}

/// Sends `answer` to the shard task as batches of at most `out.max_records` user records, KPL
/// aggregates deaggregated (see the module doc); the last batch carries the answer's next
/// iterator and child shards. `undecodable` sees each record delivered whole with its reason.
pub(super) async fn send(
    answer: RecordBatch,
    out: &mut Outlet<'_>,
    mut undecodable: impl FnMut(&StreamRecord),
) -> Result<(), Closed> {
    let RecordBatch {
        records,
        next_iterator,
        child_shards,
        millis_behind,
    } = answer;
    let mut pending = Pending::default();
    for record in records {
        if record.sub_seq.is_some() || !kpl::is_aggregated(&record.data) {
            let bytes = whole_bytes(&record);
            pending.push(record, bytes, out).await?;
            continue;
        }
        let opened = match Deaggregator::new().open(&record.data, &record.partition_key) {
            Ok(opened) => opened,
            Err(e) => {
                let whole = StreamRecord {
                    undecodable: Some(e),
                    ..record
                };
                undecodable(&whole);
                let bytes = whole_bytes(&whole);
                pending.push(whole, bytes, out).await?;
                continue;
            }
        };
        // One shared copy per distinct key, made when a user record first needs it.
        let table = opened.partition_keys();
        let mut keys: Vec<Option<Arc<str>>> = vec![None; table.len()];
        let mut subs = opened.iter().peekable();
        while let Some(sub) = subs.next() {
            let mut bytes = RECORD_BYTES;
            let at = sub.partition_key_index();
            let key = match keys.get_mut(at) {
                Some(Some(key)) => Arc::clone(key),
                Some(slot) => {
                    let key: Arc<str> = Arc::from(sub.partition_key);
                    bytes += key_bytes(key.len());
                    *slot = Some(Arc::clone(&key));
                    key
                }
                None => Arc::from(sub.partition_key),
            };
            if subs.peek().is_none() {
                // The aggregate's own bytes live until its last user record is processed.
                bytes += whole_bytes(&record);
            }
            let user = StreamRecord {
                seq: record.seq.clone(),
                sub_seq: Some(sub.sub_sequence),
                partition_key: key,
                data: record.data.slice_ref(sub.data),
                undecodable: None,
            };
            pending.push(user, bytes, out).await?;
        }
    }
    let last = RecordBatch {
        records: pending.records,
        next_iterator,
        child_shards,
        millis_behind,
    };
    out.budget.take(pending.bytes);
    out.tx
        .send((Fetched::Batch(last), pending.bytes))
        .await
        .map_err(|_| Closed)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use heatsink_core::kpl::{Aggregator, KplError, MAGIC};
    use md5::{Digest, Md5};

    use super::*;

    fn record(seq: u64, key: &str, data: Vec<u8>) -> StreamRecord {
        StreamRecord {
            seq: Seq::from(seq),
            sub_seq: None,
            partition_key: key.into(),
            data: Bytes::from(data),
            undecodable: None,
        }
    }

    /// One aggregate of `n` user records over keys `k0`…`k{keys-1}`.
    fn aggregate(n: usize, keys: usize) -> Vec<u8> {
        let mut agg = Aggregator::with_max_bytes(kpl::MAX_RECORD_BYTES).unwrap();
        for i in 0..n {
            assert!(agg.try_add(&format!("k{}", i % keys), None, b"x").unwrap());
        }
        agg.finish().unwrap().data
    }

    /// An aggregate with a valid MD5 whose one key is `key_bytes` long, and `n` empty records.
    fn long_key_aggregate(key_bytes: usize, n: usize) -> Vec<u8> {
        let mut body = Vec::new();
        prost::encoding::string::encode(1, &"k".repeat(key_bytes), &mut body);
        body.extend([0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00].repeat(n));
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&body);
        data.extend_from_slice(&Md5::digest(&body));
        data
    }

    /// Runs `send` with a budget of `limit` bytes and batches of `max_records`; what the shard
    /// task would receive (part or last, the records, the bytes charged) and the records
    /// reported undecodable.
    async fn expand(
        answer: RecordBatch,
        limit: usize,
        max_records: usize,
    ) -> (Vec<(bool, RecordBatch, usize)>, Vec<StreamRecord>, usize) {
        let (tx, mut rx) = mpsc::channel(1_000);
        let budget = ByteBudget::default();
        let (_stop_tx, mut stop) = watch::channel(false);
        let mut bad = Vec::new();
        let mut out = Outlet {
            tx: &tx,
            budget: &budget,
            limit,
            stop: &mut stop,
            max_records,
        };
        send(answer, &mut out, |r| bad.push(r.clone()))
            .await
            .unwrap();
        drop(tx);
        let mut got = Vec::new();
        while let Some((fetched, bytes)) = rx.recv().await {
            match fetched {
                Fetched::Part(b) => got.push((false, b, bytes)),
                Fetched::Batch(b) => got.push((true, b, bytes)),
                Fetched::Gone => panic!("not sent by send"),
            }
        }
        let held = budget.held.load(std::sync::atomic::Ordering::SeqCst);
        (got, bad, held)
    }

    #[tokio::test]
    async fn an_aggregate_becomes_batches_of_at_most_max_records_sharing_its_keys_and_bytes() {
        let blob = aggregate(25_000, 3);
        let answer = RecordBatch {
            records: vec![
                record(7, "outer", blob.clone()),
                record(8, "plain", b"after".to_vec()),
            ],
            next_iterator: Some("next".into()),
            child_shards: vec![],
            millis_behind: Some(0),
        };
        let (got, bad, held) = expand(answer, usize::MAX, 10_000).await;
        assert!(bad.is_empty());
        let sizes: Vec<_> = got
            .iter()
            .map(|(last, b, _)| (*last, b.records.len()))
            .collect();
        assert_eq!(sizes, [(false, 10_000), (false, 10_000), (true, 5_001)]);
        assert_eq!(got[2].1.next_iterator.as_deref(), Some("next"));
        assert!(got[..2].iter().all(|(_, b, _)| b.next_iterator.is_none()));
        let records: Vec<&StreamRecord> = got.iter().flat_map(|(_, b, _)| &b.records).collect();
        for (i, r) in records[..25_000].iter().enumerate() {
            assert_eq!((r.seq.to_u64(), r.sub_seq), (Some(7), Some(i as u64)));
            assert_eq!(&*r.partition_key, format!("k{}", i % 3));
            assert_eq!(&r.data[..], b"x");
        }
        // One copy of each key, one buffer for every payload.
        assert!(Arc::ptr_eq(
            &records[0].partition_key,
            &records[3].partition_key
        ));
        assert!(Arc::ptr_eq(
            &records[0].partition_key,
            &records[24_999].partition_key
        ));
        let buffer = blob.len();
        assert!(records[..25_000].iter().all(|r| {
            let at = r.data.as_ptr() as usize - records[0].data.as_ptr() as usize;
            at < buffer
        }));
        assert_eq!(records[25_000].sub_seq, None);
        // Charged: a struct per record, each key once, the aggregate and the plain record whole.
        let charged: usize = got.iter().map(|(_, _, b)| b).sum();
        let whole = |key: usize, data: usize| RECORD_BYTES + SEQ_BYTES + key_bytes(key) + data;
        let want = 25_000 * RECORD_BYTES
            + 3 * key_bytes(2)
            + whole("outer".len(), buffer)
            + whole("plain".len(), 5);
        assert_eq!(charged, want);
        assert_eq!(held, want, "the shard task has given nothing back yet");
        // The aggregate's bytes go with its last user record, each key with its first.
        assert_eq!(got[0].2, 10_000 * RECORD_BYTES + 3 * key_bytes(2));
        assert_eq!(got[1].2, 10_000 * RECORD_BYTES);
        assert_eq!(
            got[2].2,
            5_000 * RECORD_BYTES + whole("outer".len(), buffer) + whole("plain".len(), 5)
        );
    }

    #[tokio::test]
    async fn an_aggregate_over_a_bound_is_delivered_whole_with_its_reason_and_the_next_one_read() {
        let hostile = long_key_aggregate(2_000, 50);
        let answer = RecordBatch {
            records: vec![
                record(1, "outer", hostile.clone()),
                record(2, "plain", b"after".to_vec()),
            ],
            next_iterator: Some("next".into()),
            ..RecordBatch::default()
        };
        let (got, bad, _) = expand(answer, usize::MAX, 10_000).await;
        assert_eq!(got.len(), 1);
        let records = &got[0].1.records;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].data.len(), hostile.len());
        assert_eq!(records[0].sub_seq, None);
        assert_eq!(
            records[0].undecodable,
            Some(KplError::KeyTooLong {
                field: "partition_key_table",
                index: 0,
                bytes: 2_000,
                max_chars: 256
            })
        );
        assert_eq!(&records[1].data[..], b"after");
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].seq, Seq::from(1));
    }

    #[tokio::test]
    async fn no_batch_is_built_while_the_shard_holds_its_budget() {
        let (tx, mut rx) = mpsc::channel(1_000);
        let budget = Arc::new(ByteBudget::default());
        let (_stop_tx, stop) = watch::channel(false);
        let answer = RecordBatch {
            records: vec![record(1, "outer", aggregate(30, 1))],
            next_iterator: Some("next".into()),
            ..RecordBatch::default()
        };
        let fetcher = {
            let budget = Arc::clone(&budget);
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let mut out = Outlet {
                    tx: &tx,
                    budget: &budget,
                    limit: 1,
                    stop: &mut stop,
                    max_records: 10,
                };
                send(answer, &mut out, |_| {}).await.is_ok()
            })
        };
        // The first batch is built (nothing held), then the fetcher waits for it to be processed.
        let (first, bytes) = rx.recv().await.unwrap();
        assert!(matches!(first, Fetched::Part(ref b) if b.records.len() == 10));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            rx.try_recv().is_err(),
            "a second batch while the first is held"
        );
        budget.give_back(bytes);
        let (second, bytes) = rx.recv().await.unwrap();
        assert!(matches!(second, Fetched::Part(ref b) if b.records[0].sub_seq == Some(10)));
        budget.give_back(bytes);
        let (last, _) = rx.recv().await.unwrap();
        assert!(matches!(last, Fetched::Batch(ref b) if b.records.len() == 10));
        assert!(fetcher.await.unwrap());
    }
}
