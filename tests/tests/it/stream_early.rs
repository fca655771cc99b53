//! Early first reads of `heatsink::stream` (`WorkerConfig::early_read`) against kinesis-mock and
//! the lane's DynamoDB: a shard's first GetRecords starts during the start-up wait, and its
//! records reach the processor only if the first round takes the lease at the checkpoint the
//! read started from. A lease row deleted inside the wait is recreated at TRIM_HORIZON: the
//! shard's early read (after the old checkpoint) must be dropped, or the shard would be skipped.

use heatsink_integration::PhotoFixture;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use heatsink::counter::Seq;
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, ShardSource, StreamError, Worker,
    WorkerStats,
};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{eventually, fixture, kinesis_shard_records};

use super::stream::{fast_config, put_round};
use super::tap::Tap;

/// Every delivery: (shard, sequence number) → how many times.
type Deliveries = Arc<Mutex<BTreeMap<(String, Seq), usize>>>;

struct Log(Deliveries);

impl RecordProcessor for Log {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut seen = self.0.lock().unwrap();
        for r in &batch.records {
            *seen
                .entry((batch.shard_id.clone(), r.seq.clone()))
                .or_default() += 1;
        }
        Ok(())
    }
}

/// The sequence numbers kinesis-mock holds on `shard`, in order.
async fn shard_seqs(k: &aws_sdk_kinesis::Client, stream: &str, shard: &str) -> Vec<Seq> {
    kinesis_shard_records(k, stream, shard)
        .await
        .iter()
        .map(|r| Seq::parse(r.sequence_number()).expect("a sequence number"))
        .collect()
}

/// Starts one worker of `early-app` with a 4 s start-up wait on `source`; returns its stats,
/// stop handle and task.
fn run_worker(
    fx: &heatsink_testkit::Fixture,
    source: Tap,
    leases: &str,
    name: &str,
    seen: &Deliveries,
) -> (
    WorkerStats,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), StreamError>>,
) {
    let mut config = fast_config(name);
    // A long wait, so the test's deletion fits between the early reads (sent once the rows
    // exist, early in the wait) and the first round on the slowest lane.
    config.startup_wait = Duration::from_secs(4);
    config.max_records = None;
    let worker = Worker::new(
        source,
        LeaseTable::new(fx.stack.ddb.clone(), leases, "early-app"),
        Log(Arc::clone(seen)),
        config,
    );
    let stats = worker.stats();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = rx.await;
    }));
    (stats, stop, task)
}

/// The early read of a shard starts after its checkpoint; inside the start-up wait the lease
/// row is deleted (by hand, or by anything that makes the round recreate it at TRIM_HORIZON).
/// The first round takes the recreated lease at TRIM_HORIZON, so the early answer, which starts
/// after the old checkpoint, must be dropped and the shard read again from its start: using it
/// would skip every record of the shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_read_is_used_only_when_the_take_lands_at_the_checkpoint_it_read_from() {
    let fx =
        fixture!("an_early_read_is_used_only_when_the_take_lands_at_the_checkpoint_it_read_from");
    let k = &fx.stack.kinesis;
    let stream = fx.stream("early", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    for round in 0..5 {
        put_round(k, &stream.name, round, 16).await;
    }
    let source = || Tap::new(KinesisSource::new(k.clone(), &stream.name));
    let identity = source().identity().await.expect("stream identity");
    let table =
        LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "early-app").for_stream(&identity);
    let mut shards: Vec<(String, Vec<Seq>)> = Vec::new();
    for info in source().list_shards().await.expect("shards") {
        let seqs = shard_seqs(k, &stream.name, &info.shard_id).await;
        shards.push((info.shard_id, seqs));
    }
    shards.sort_by_key(|(_, seqs)| std::cmp::Reverse(seqs.len()));
    let (reset, reset_seqs) = shards[0].clone();
    assert!(!reset_seqs.is_empty(), "the busier shard holds records");
    let total: usize = shards.iter().map(|(_, s)| s.len()).sum();

    // A first run reads everything and checkpoints at each shard's last record (its early
    // reads, from TRIM_HORIZON on rows it created, are both used).
    let first: Deliveries = Arc::default();
    let (stats, stop, task) = run_worker(&fx, source(), &spec.name, "w0", &first);
    eventually(
        "the first run reads everything",
        Duration::from_secs(30),
        || async { (first.lock().unwrap().len() >= total).then_some(()) },
    )
    .await;
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");
    assert_eq!(stats.early_reads(), (2, 0), "both early reads used");
    for (shard, seqs) in &shards {
        let row = table.get(shard).await.expect("lease read").expect("a row");
        assert_eq!(
            row.checkpoint.position().map(|p| p.seq.clone()),
            seqs.last().cloned(),
            "{shard} checkpointed at its last record"
        );
    }

    // The second run's early reads start after those checkpoints; then the busier shard's row
    // is deleted, inside the wait.
    let second: Deliveries = Arc::default();
    let observed = source();
    let reads = observed.reads();
    let (stats, stop, task) = run_worker(&fx, observed, &spec.name, "w1", &second);
    eventually("both early reads sent", Duration::from_secs(20), || async {
        let reads = reads.lock().unwrap();
        let shards: BTreeSet<_> = reads.iter().filter_map(|r| r.shard.as_ref()).collect();
        (shards.len() >= 2).then_some(())
    })
    .await;
    assert_eq!(
        stats.rounds(),
        0,
        "the early reads ran inside the start-up wait"
    );
    let row = table.get(&reset).await.expect("lease read").expect("a row");
    assert!(table.delete_row(&row).await.expect("delete"), "row deleted");
    assert_eq!(
        stats.rounds(),
        0,
        "the row was deleted inside the start-up wait"
    );

    eventually(
        "the reset shard read again from its start",
        Duration::from_secs(30),
        || async { (second.lock().unwrap().len() >= reset_seqs.len()).then_some(()) },
    )
    .await;
    // A little longer: anything else delivered would show up by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");

    let second = second.lock().unwrap();
    let want: BTreeMap<(String, Seq), usize> = reset_seqs
        .iter()
        .map(|seq| ((reset.clone(), seq.clone()), 1))
        .collect();
    assert_eq!(
        *second, want,
        "exactly the reset shard's records, each once; nothing of the other shard"
    );
    assert_eq!(
        stats.early_reads(),
        (1, 1),
        "the untouched shard's early read used, the reset one's dropped"
    );
}
