//! Producer behaviour against a fake stream behind aws-smithy-mocks (no emulator implements
//! partial PutRecords failures or throttling bursts on demand): partial failures, throttled
//! calls, pacing, a split mid-run, salting, and a fatal error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::error::ErrorMetadata;
use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
use aws_sdk_kinesis::operation::put_records::{PutRecordsError, PutRecordsOutput};
use aws_sdk_kinesis::types::error::{
    ProvisionedThroughputExceededException, ResourceNotFoundException,
};
use aws_sdk_kinesis::types::{HashKeyRange, PutRecordsResultEntry, SequenceNumberRange, Shard};
use aws_smithy_mocks::{MockResponse, mock};
use heatsink_core::hot::{Entry as HotEntry, Snapshot};
use heatsink_core::keys::{ShardRange, shard_for};
use heatsink_core::kpl::{Deaggregator, effective_hash_key};
use tokio::time::Instant;

use super::*;
use crate::testing::mocked;

/// Decides an entry's fate: `(call number, entry index) -> error code or None`.
type FailFn = Box<dyn Fn(usize, usize) -> Option<&'static str> + Send>;

/// One written Kinesis record, as the fake stream stored it.
#[derive(Debug, Clone)]
struct Written {
    partition_key: String,
    data: Vec<u8>,
    shard: usize,
    at: Instant,
    after_refresh: bool,
}

struct Fake {
    shards: Vec<ShardRange>,
    /// The map ListShards returns from its second call on (a split happened), if any.
    split_to: Option<Vec<ShardRange>>,
    list_calls: usize,
    put_calls: usize,
    written: Vec<Written>,
    violations: Vec<String>,
    fail: FailFn,
    /// Whole calls that fail: `call number -> error`.
    fail_call: Box<dyn Fn(usize) -> Option<&'static str> + Send>,
}

fn shard_out(s: &ShardRange) -> Shard {
    Shard::builder()
        .shard_id(&s.shard_id)
        .hash_key_range(
            HashKeyRange::builder()
                .starting_hash_key(s.start.to_string())
                .ending_hash_key(s.end.to_string())
                .build()
                .unwrap(),
        )
        .sequence_number_range(
            SequenceNumberRange::builder()
                .starting_sequence_number("1")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

fn fake_client(fake: Arc<Mutex<Fake>>) -> aws_sdk_kinesis::Client {
    fake_client_with(fake, None)
}

/// DescribeStreamSummary as the API reference shapes it, with `MaxRecordSizeInKiB` when given.
fn summary(max_kib: Option<i32>) -> aws_smithy_mocks::Rule {
    summary_of(max_kib, None)
}

/// [`summary`] of an on-demand stream with `RecordDistributionStrategy` `strategy`.
fn summary_of(
    max_kib: Option<i32>,
    strategy: Option<aws_sdk_kinesis::types::RecordDistributionStrategy>,
) -> aws_smithy_mocks::Rule {
    use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput;
    use aws_sdk_kinesis::types::StreamStatus;
    mock!(aws_sdk_kinesis::Client::describe_stream_summary).then_output(move || {
        DescribeStreamSummaryOutput::builder()
            .stream_description_summary(
                crate::testing::stream_summary(StreamStatus::Active)
                    .set_max_record_size_in_kib(max_kib)
                    .set_record_distribution_strategy(strategy.clone())
                    .build()
                    .unwrap(),
            )
            .build()
    })
}

fn fake_client_with(fake: Arc<Mutex<Fake>>, max_kib: Option<i32>) -> aws_sdk_kinesis::Client {
    fake_client_shaped(fake, summary(max_kib))
}

fn fake_client_shaped(
    fake: Arc<Mutex<Fake>>,
    summary: aws_smithy_mocks::Rule,
) -> aws_sdk_kinesis::Client {
    let f1 = fake.clone();
    let list = mock!(aws_sdk_kinesis::Client::list_shards).then_compute_output(move |_| {
        let mut f = f1.lock().unwrap();
        f.list_calls += 1;
        if f.list_calls >= 2
            && let Some(to) = f.split_to.take()
        {
            f.shards = to;
        }
        ListShardsOutput::builder()
            .set_shards(Some(f.shards.iter().map(shard_out).collect()))
            .build()
    });
    let put = mock!(aws_sdk_kinesis::Client::put_records).then_compute_response(move |req| {
        let mut f = fake.lock().unwrap();
        f.put_calls += 1;
        let call = f.put_calls;
        let entries = req.records();
        let bytes: usize = entries
            .iter()
            .map(|e| e.data().as_ref().len() + e.partition_key().unwrap_or_default().len())
            .sum();
        // Over 5 MiB only as one large record (a stream with MaxRecordSizeInKiB > 1024).
        let too_big =
            bytes > MAX_BYTES_PER_REQUEST && (entries.len() > 1 || bytes > MAX_LARGE_RECORD_BYTES);
        if entries.len() > MAX_RECORDS_PER_REQUEST || too_big {
            f.violations.push(format!(
                "call {call}: {} entries, {bytes} bytes",
                entries.len()
            ));
        }
        if let Some(code) = (f.fail_call)(call) {
            let meta = ErrorMetadata::builder()
                .code(code)
                .message("mocked")
                .build();
            return MockResponse::Error(match code {
                "ResourceNotFoundException" => PutRecordsError::ResourceNotFoundException(
                    ResourceNotFoundException::builder().meta(meta).build(),
                ),
                _ => PutRecordsError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .meta(meta)
                        .build(),
                ),
            });
        }
        let mut results = vec![];
        let mut failed = 0;
        let after_refresh = f.list_calls >= 2;
        for (i, e) in entries.iter().enumerate() {
            if let Some(code) = (f.fail)(call, i) {
                failed += 1;
                results.push(
                    PutRecordsResultEntry::builder()
                        .error_code(code)
                        .error_message("mocked")
                        .build(),
                );
                continue;
            }
            let hash =
                effective_hash_key(e.partition_key().unwrap_or_default(), e.explicit_hash_key())
                    .unwrap();
            let shard = shard_for(hash, &f.shards).unwrap();
            let id = f.shards[shard].shard_id.clone();
            f.written.push(Written {
                partition_key: e.partition_key().unwrap_or_default().to_owned(),
                data: e.data().as_ref().to_vec(),
                shard,
                at: Instant::now(),
                after_refresh,
            });
            results.push(
                PutRecordsResultEntry::builder()
                    .shard_id(id)
                    .sequence_number(format!("{call}-{i}"))
                    .build(),
            );
        }
        MockResponse::Output(
            PutRecordsOutput::builder()
                .failed_record_count(failed)
                .set_records(Some(results))
                .build()
                .unwrap(),
        )
    });
    // The SDK's own retries are off so every retry seen here is the producer's.
    mocked!(aws_sdk_kinesis with |c| c.retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled()); list, put, summary)
}

fn fake(shards: usize, fail: FailFn) -> Arc<Mutex<Fake>> {
    Arc::new(Mutex::new(Fake {
        shards: ShardRange::even_split(shards).unwrap(),
        split_to: None,
        list_calls: 0,
        put_calls: 0,
        written: vec![],
        violations: vec![],
        fail,
        fail_call: Box::new(|_| None),
    }))
}

fn fast(aggregate: bool) -> ProducerConfig {
    ProducerConfig {
        aggregate,
        linger: Duration::from_millis(1),
        backoff_base: Duration::from_millis(1),
        backoff_cap: Duration::from_millis(4),
        limits: ShardLimits {
            records_per_second: 1e9,
            bytes_per_second: 1e12,
        },
        ..ProducerConfig::default()
    }
}

/// The user records the fake stream holds (deaggregated), each with the shard it was
/// written to and whether its hash key belongs to that shard.
fn user_records(f: &Fake, map: &[ShardRange]) -> Vec<(String, Vec<u8>, bool, bool)> {
    let mut out = vec![];
    for w in &f.written {
        let s = &map[w.shard];
        let d = Deaggregator::for_shard(s.start, s.end)
            .deaggregate(&w.data, &w.partition_key)
            .unwrap();
        for r in d.records {
            let inside = r.hash_key().is_some_and(|h| s.contains(h));
            out.push((r.partition_key, r.data, inside, w.after_refresh));
        }
    }
    out
}

async fn send_all(p: &Producer, n: usize, keys: usize) {
    for i in 0..n {
        p.send(
            format!("user-{}", i % keys),
            format!("record {i}").into_bytes(),
        )
        .await
        .unwrap();
    }
}

fn assert_exactly_once(got: &[(String, Vec<u8>, bool, bool)], n: usize) {
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for (_, data, _, _) in got {
        *seen.entry(data.as_slice()).or_default() += 1;
    }
    assert_eq!(seen.len(), n, "every record written");
    assert!(seen.values().all(|&c| c == 1), "no record written twice");
}

#[tokio::test]
async fn smithy_mock_partial_failures_and_throttled_calls_lose_and_duplicate_nothing() {
    for aggregate in [false, true] {
        let f = fake(
            2,
            Box::new(|call, i| match (call + i) % 3 {
                0 if call % 2 == 1 => Some("ProvisionedThroughputExceededException"),
                0 => Some("InternalFailure"),
                _ => None,
            }),
        );
        f.lock().unwrap().fail_call = Box::new(|call| {
            (2..=4)
                .contains(&call)
                .then_some("ProvisionedThroughputExceededException")
        });
        // The fault pattern is deterministic per (call, position), so how often one entry is
        // refused in a row depends on how batches happen to form: unbounded attempts here, as
        // this test is about loss and duplication; giving up is tested with max_attempts 1.
        let config = ProducerConfig {
            max_attempts: u32::MAX,
            ..fast(aggregate)
        };
        let p = Producer::start(fake_client(f.clone()), "s", config)
            .await
            .unwrap();
        send_all(&p, 3_000, 40).await;
        let report = p.shutdown().await.unwrap();
        let f = f.lock().unwrap();
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(
            (report.records, report.failed),
            (3_000, 0),
            "aggregate={aggregate}"
        );
        assert!(
            report.retried_entries > 0 && report.throttles > 0,
            "{report:?}"
        );
        let got = user_records(&f, &f.shards);
        assert_exactly_once(&got, 3_000);
        assert!(
            got.iter().all(|g| g.2),
            "every user record is on its own shard"
        );
        if aggregate {
            assert!(report.aggregated_records > 0);
            assert!(
                (report.requests as usize) < f.put_calls + 1 && f.written.len() < 3_000 / 5,
                "aggregation packs: {} Kinesis records for 3,000",
                f.written.len()
            );
        } else {
            assert_eq!(report.aggregated_records, 0);
            assert!(report.requests >= 3_000 / 500);
        }
    }
}

#[tokio::test]
async fn smithy_mock_entries_that_keep_failing_are_reported_not_dropped() {
    let f = fake(
        1,
        Box::new(|_, i| (i % 2 == 0).then_some("InternalFailure")),
    );
    let config = ProducerConfig {
        max_attempts: 1,
        ..fast(false)
    };
    let p = Producer::start(fake_client(f.clone()), "s", config)
        .await
        .unwrap();
    send_all(&p, 100, 100).await;
    let report = p.shutdown().await.unwrap();
    assert_eq!(report.records + report.failed, 100);
    assert!(report.failed > 0);
    assert_eq!(report.failed_records.len() as u64, report.failed);
    let written = user_records(&f.lock().unwrap(), &ShardRange::even_split(1).unwrap());
    for r in &report.failed_records {
        assert!(
            !written.iter().any(|w| w.1 == r.data),
            "a failed record was not written"
        );
    }
}

#[tokio::test]
async fn smithy_mock_a_fatal_put_error_returns_every_unwritten_record() {
    let f = fake(2, Box::new(|_, _| None));
    f.lock().unwrap().fail_call =
        Box::new(|call| (call >= 2).then_some("ResourceNotFoundException"));
    let config = ProducerConfig {
        max_in_flight: 1,
        ..fast(false)
    };
    let p = Producer::start(fake_client(f.clone()), "s", config)
        .await
        .unwrap();
    for i in 0..2_000 {
        if p.send("k", format!("r{i}").into_bytes()).await.is_err() {
            break;
        }
    }
    let Err(ProducerError::Put { source, report }) = p.shutdown().await else {
        panic!("the stream is gone: the producer stops with the error");
    };
    assert!(source.is_not_found());
    let written = f.lock().unwrap().written.len() as u64;
    assert_eq!(report.records, written);
    assert!(report.failed > 0);
    assert_eq!(report.failed_records.len() as u64, report.failed);
}

#[tokio::test(start_paused = true)]
async fn smithy_mock_pacing_keeps_a_hot_shard_within_its_write_limits() {
    let f = fake(2, Box::new(|_, _| None));
    let config = ProducerConfig {
        limits: ShardLimits::KINESIS,
        ..fast(false)
    };
    let p = Producer::start(fake_client(f.clone()), "s", config)
        .await
        .unwrap();
    let t0 = Instant::now();
    // 3,500 records of one key (one shard) and 500 of others.
    for i in 0..4_000 {
        let key = if i % 8 == 7 {
            format!("cold-{i}")
        } else {
            "hot".into()
        };
        p.send(key, vec![b'x'; 100]).await.unwrap();
    }
    let report = p.shutdown().await.unwrap();
    assert_eq!(report.records, 4_000);
    let f = f.lock().unwrap();
    let hot_shard = f
        .written
        .iter()
        .find(|w| w.partition_key == "hot")
        .unwrap()
        .shard;
    let mut hot: Vec<Instant> = f
        .written
        .iter()
        .filter(|w| w.shard == hot_shard)
        .map(|w| w.at)
        .collect();
    hot.sort();
    for (n, at) in hot.iter().enumerate() {
        let t = at.duration_since(t0).as_secs_f64();
        assert!(
            (n + 1) as f64 <= 1_000.0 * (1.0 + t) + 1.0,
            "record {n} of the hot shard at {t:.3} s: over 1,000 records/s"
        );
    }
    assert_eq!(report.throttles, 0);
    assert!(
        report.requests < 600,
        "paced requests still batch: {}",
        report.requests
    );
}

#[tokio::test]
async fn smithy_mock_a_split_mid_run_repacks_aggregates_for_the_children() {
    let f = fake(1, Box::new(|_, _| None));
    // After the first ListShards the shard splits in two; Kinesis then routes by the new map.
    let children = vec![
        ShardRange::new("shardId-000000000001", 0, (1u128 << 127) - 1),
        ShardRange::new("shardId-000000000002", 1u128 << 127, u128::MAX),
    ];
    {
        let mut g = f.lock().unwrap();
        g.split_to = Some(children.clone());
        // The split shows on the first put: route by the children from there on.
        g.shards = ShardRange::even_split(1).unwrap();
    }
    let f2 = f.clone();
    let config = ProducerConfig {
        max_in_flight: 1,
        ..fast(true)
    };
    let client = fake_client(f.clone());
    let p = Producer::start(client, "s", config).await.unwrap();
    // Kinesis has split already: the producer's map (one shard) is stale from here on.
    f2.lock().unwrap().shards = children.clone();
    send_all(&p, 2_000, 200).await;
    let report = p.shutdown().await.unwrap();
    assert_eq!(report.records, 2_000);
    assert!(report.map_refreshes >= 1, "{report:?}");
    let g = f.lock().unwrap();
    let got = user_records(&g, &children);
    assert_exactly_once(&got, 2_000);
    let after: Vec<_> = got.iter().filter(|r| r.3).collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|r| r.2),
        "after the refresh every aggregate holds only its own shard's records"
    );
}

#[tokio::test]
async fn smithy_mock_a_salted_hot_key_spreads_over_distinct_shards() {
    let f = fake(4, Box::new(|_, _| None));
    let snapshot = Snapshot::new([HotEntry::salt("p9", 4, "test", 1).unwrap()], 1);
    let config = ProducerConfig {
        salting: Salting::Fixed(Arc::new(snapshot)),
        ..fast(false)
    };
    let p = Producer::start(fake_client(f.clone()), "s", config)
        .await
        .unwrap();
    for i in 0..400 {
        p.send("p9", format!("like {i}").into_bytes())
            .await
            .unwrap();
    }
    p.send("p10", b"cold".to_vec()).await.unwrap();
    let report = p.shutdown().await.unwrap();
    assert_eq!((report.records, report.salted), (401, 400));
    let g = f.lock().unwrap();
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    let mut shards = std::collections::BTreeSet::new();
    for w in g
        .written
        .iter()
        .filter(|w| w.partition_key.starts_with("p9#"))
    {
        *per_key.entry(w.partition_key.as_str()).or_default() += 1;
        shards.insert(w.shard);
    }
    assert_eq!(per_key.len(), 4, "{per_key:?}");
    assert_eq!(shards.len(), 4, "the 4 sub-keys are on 4 distinct shards");
    assert!(per_key.values().all(|&c| c == 100), "in turn: {per_key:?}");
    assert!(g.written.iter().any(|w| w.partition_key == "p10"));
}

/// An on-demand stream with `RecordDistributionStrategy` `AUTO` (aws-smithy-mocks,
/// DescribeStreamSummary as the API reference shapes it) places records itself and ignores
/// partition keys, and takes no KPL aggregates: a producer configured to aggregate and to salt a
/// hot key writes plain records under the keys they were sent with, and says why.
#[tokio::test]
async fn smithy_mock_an_auto_distribution_stream_gets_neither_aggregates_nor_salted_keys() {
    use aws_sdk_kinesis::types::RecordDistributionStrategy;
    /// 50 records of the hot key p9 through a producer configured to aggregate and to salt it,
    /// on a stream with `strategy`: whether it said keyless, its report, what was written.
    async fn produce(
        strategy: RecordDistributionStrategy,
    ) -> (bool, ProducerReport, Arc<Mutex<Fake>>) {
        let f = fake(4, Box::new(|_, _| None));
        let snapshot = Snapshot::new([HotEntry::salt("p9", 4, "test", 1).unwrap()], 1);
        let config = ProducerConfig {
            salting: Salting::Fixed(Arc::new(snapshot)),
            ..fast(true)
        };
        let client = fake_client_shaped(f.clone(), summary_of(None, Some(strategy)));
        let p = Producer::start(client, "s", config).await.unwrap();
        let keyless = p.keyless();
        for i in 0..50 {
            p.send("p9", format!("like {i}").into_bytes())
                .await
                .unwrap();
        }
        (keyless, p.shutdown().await.unwrap(), f)
    }
    let (keyless, report, f) = produce(RecordDistributionStrategy::Auto).await;
    assert!(keyless);
    assert_eq!(
        (report.records, report.salted, report.aggregated_records),
        (50, 0, 0),
        "{report:?}"
    );
    {
        let g = f.lock().unwrap();
        assert_eq!(g.written.len(), 50, "one entry per record, none aggregated");
        assert!(g.written.iter().all(|w| w.partition_key == "p9"));
        assert!(g.written.iter().all(|w| !kpl::is_aggregated(&w.data)));
    }
    // The same config on a stream placed by partition key aggregates and salts.
    let (keyless, report, _) = produce(RecordDistributionStrategy::UserPartitionKey).await;
    assert!(!keyless);
    assert_eq!(report.salted, 50, "{report:?}");
    assert!(report.aggregated_records > 0, "{report:?}");
}

/// A stalled stream (aws-smithy-mocks: every entry refused with
/// `ProvisionedThroughputExceededException` until it recovers) with 1 MB records: `send` waits
/// once the byte budget is spent, long before the 10,000-record queue is full, so the producer
/// holds at most the budget; once the stream recovers every record is written and the budget is
/// whole again.
#[tokio::test]
async fn smithy_mock_a_stalled_stream_blocks_senders_at_the_byte_budget_not_the_record_count() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const RECORD: usize = 1_000_000;
    const BUDGET: usize = 8 << 20;
    let stalled = Arc::new(AtomicBool::new(true));
    let s2 = stalled.clone();
    let f = fake(
        2,
        Box::new(move |_, _| {
            s2.load(Ordering::SeqCst)
                .then_some("ProvisionedThroughputExceededException")
        }),
    );
    for aggregate in [false, true] {
        let config = ProducerConfig {
            max_buffered_bytes: BUDGET,
            max_attempts: u32::MAX,
            ..fast(aggregate)
        };
        stalled.store(true, Ordering::SeqCst);
        let p = Arc::new(
            Producer::start(fake_client(f.clone()), "s", config)
                .await
                .unwrap(),
        );
        let sent = Arc::new(AtomicUsize::new(0));
        let sender = {
            let (p, sent) = (p.clone(), sent.clone());
            tokio::spawn(async move {
                for i in 0..40 {
                    p.send(format!("k{i}"), vec![7u8; RECORD]).await.unwrap();
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = sent.load(Ordering::SeqCst);
        let most = BUDGET / (RECORD + KEY_ALLOWANCE);
        assert_eq!(
            held, most,
            "aggregate={aggregate}: a stalled stream holds the budget's worth of records ({most} of 1 MB in 8 MiB), not more"
        );
        stalled.store(false, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(20), sender)
            .await
            .expect("senders go on once the stream recovers")
            .unwrap();
        let report = Arc::into_inner(p).unwrap().shutdown().await.unwrap();
        assert_eq!(
            (report.records, report.failed),
            (40, 0),
            "aggregate={aggregate}"
        );
        assert!(report.throttles > 0);
    }
}

/// A stream whose `MaxRecordSizeInKiB` is 10,240 (aws-smithy-mocks, DescribeStreamSummary as
/// the API reference shapes it) takes records up to 10 MiB: an 8 MiB record is written alone in
/// its request, 1 MiB records around it are batched as before, and one byte over 10 MiB is
/// refused. A stream that does not say keeps the 1 MiB limit.
#[tokio::test]
async fn smithy_mock_records_over_1_mib_are_taken_up_to_the_streams_max_record_size() {
    let f = fake(1, Box::new(|_, _| None));
    let p = Producer::start(fake_client_with(f.clone(), Some(10_240)), "s", fast(false))
        .await
        .unwrap();
    assert_eq!(p.max_record_bytes(), 10 * 1_048_576);
    let big = vec![8u8; 8 * 1_048_576];
    p.send("k0", vec![1u8; 1_000_000]).await.unwrap();
    p.send("k1", big.clone()).await.unwrap();
    p.send("k2", vec![2u8; 1_000_000]).await.unwrap();
    let over = p.send("k3", vec![3u8; 10 * 1_048_576 - 1]).await;
    assert!(
        matches!(
            over,
            Err(ProducerError::Record(KplError::Oversized { max, .. })) if max == 10 * 1_048_576
        ),
        "{over:?}"
    );
    let report = tokio::time::timeout(Duration::from_secs(30), p.shutdown())
        .await
        .expect("the large record is sent, not held forever")
        .unwrap();
    assert_eq!((report.records, report.failed), (3, 0), "{report:?}");
    {
        let g = f.lock().unwrap();
        assert!(g.violations.is_empty(), "{:?}", g.violations);
        assert!(
            g.written.iter().any(|w| w.data == big),
            "the 8 MiB record was written"
        );
    }

    let f = fake(1, Box::new(|_, _| None));
    let p = Producer::start(fake_client_with(f, None), "s", fast(false))
        .await
        .unwrap();
    assert_eq!(p.max_record_bytes(), MAX_BYTES_PER_RECORD);
    let refused = p.send("k", vec![0u8; 2 * 1_048_576]).await;
    assert!(
        matches!(
            refused,
            Err(ProducerError::Record(KplError::Oversized { max, .. })) if max == MAX_BYTES_PER_RECORD
        ),
        "{refused:?}"
    );
    p.shutdown().await.unwrap();
}
