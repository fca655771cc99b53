//! GetRecords page sizes of `heatsink::stream` (`WorkerConfig::page_records`) against
//! kinesis-mock and the lane's DynamoDB: the fetcher and the early read ask for pages below the
//! source's cap, every record arrives once and in order, and a full page is read on at once even
//! when the emulator reports it at "0 ms behind". When a call asks for the cap or a doubled page
//! depends on call latencies; that rule is property-tested in `heatsink_core::stream::ReadSize`.

use heatsink_integration::PhotoFixture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use heatsink::counter::Seq;
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, ShardSource, StreamError, Worker,
};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{eventually, fixture, kinesis_shard_records};

use super::stream::fast_config;
use super::tap::Tap;

/// Every delivered sequence number, in delivery order, and when the last one arrived.
#[derive(Clone, Default)]
struct Ordered(Arc<Mutex<(Vec<Seq>, Option<Instant>)>>);

impl RecordProcessor for Ordered {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut seen = self.0.lock().unwrap();
        seen.0.extend(batch.records.iter().map(|r| r.seq.clone()));
        seen.1 = Some(Instant::now());
        Ok(())
    }
}

/// A one-shard backlog of 500 records, put in one call, read with 50-record pages under the
/// source's cap of 10,000: the first four calls (the early read among them) ask for the page,
/// since a window of 5 calls cannot be full before its fifth; every call asks for the page, a
/// doubling of it, or the cap (which ones, past the fourth, depends on the emulator's latency);
/// each record arrives once, in the shard's order. The idle pause
/// after a caught-up answer is 3 s, and the whole backlog must arrive in under 3 s once the
/// first page did: kinesis-mock measures `MillisBehindLatest` from the arrival of the shard's
/// newest record, so every page of one PutRecords is answered at "0 ms behind", and a worker
/// that took a full page of 50 (under the cap) for the tip would pause after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_read_in_pages_arrives_once_in_order_and_a_full_page_is_not_the_tip() {
    let fx =
        fixture!("a_backlog_read_in_pages_arrives_once_in_order_and_a_full_page_is_not_the_tip");
    let k = &fx.stack.kinesis;
    let stream = fx.stream("pages", 1).await;
    let spec = fx.photo_table(Table::Leases).await;
    const RECORDS: usize = 500; // one PutRecords
    const PAGE: i32 = 50;
    let entries: Vec<PutRecordsRequestEntry> = (0..RECORDS)
        .map(|i| {
            PutRecordsRequestEntry::builder()
                .partition_key(format!("k{}", i % 16))
                .data(Blob::new(format!("r{i}")))
                .build()
                .unwrap()
        })
        .collect();
    let out = k
        .put_records()
        .stream_name(&stream.name)
        .set_records(Some(entries))
        .send()
        .await
        .expect("put records");
    assert_eq!(out.failed_record_count(), Some(0), "no record refused");
    let source = KinesisSource::new(k.clone(), &stream.name);
    let shard = source.list_shards().await.expect("shards")[0]
        .shard_id
        .clone();
    let want: Vec<Seq> = kinesis_shard_records(k, &stream.name, &shard)
        .await
        .iter()
        .map(|r| Seq::parse(r.sequence_number()).expect("a sequence number"))
        .collect();
    assert_eq!(want.len(), RECORDS);

    let mut config = fast_config("pager");
    config.max_records = None; // the source's cap: 10,000
    config.page_records = PAGE;
    config.idle_poll = Duration::from_secs(3);
    let seen = Ordered::default();
    let tap = Tap::new(source);
    let calls = tap.reads();
    let worker = Worker::new(
        tap,
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "pages-app"),
        seen.clone(),
        config,
    );
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = rx.await;
    }));
    let first_page = eventually("the first page", Duration::from_secs(30), || async {
        seen.0.lock().unwrap().1
    })
    .await;
    eventually("the whole backlog", Duration::from_secs(30), || async {
        (seen.0.lock().unwrap().0.len() >= RECORDS).then_some(())
    })
    .await;
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");

    let (got, last) = seen.0.lock().unwrap().clone();
    assert_eq!(got, want, "every record once, in the shard's order");
    let drained = last.expect("a delivery").duration_since(first_page);
    assert!(
        drained < Duration::from_secs(3),
        "the backlog took {drained:?} after its first page: a full page was taken for the tip"
    );
    let calls = calls.lock().unwrap().clone();
    let reading: Vec<_> = calls
        .iter()
        .filter(|c| c.got.is_some_and(|n| n > 0))
        .collect();
    assert!(reading.len() >= 5, "pages of {PAGE}: {calls:?}");
    assert!(
        reading[..4]
            .iter()
            .all(|c| c.asked == PAGE && c.got == Some(PAGE as usize)),
        "the first four calls ask for the page: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.shard.as_deref() == Some(shard.as_str())),
        "every call reads the stream's one shard along its iterators: {calls:?}"
    );
    let doublings: Vec<i32> = (0..9).map(|d| PAGE << d).collect();
    assert!(
        calls
            .iter()
            .all(|c| c.asked == 10_000 || doublings.contains(&c.asked)),
        "every call asks for the page, a doubling of it or the cap: {calls:?}"
    );
}
