//! Start-up balancing of `heatsink::stream` against kinesis-mock and moto: workers started
//! together announce themselves in the lease table and split the shards in their first round,
//! so no lease is stolen and no record is read twice; a long-dead worker's announcement neither
//! counts nor stays.

use heatsink_integration::PhotoFixture;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::counter::Seq;
use heatsink::stream::{
    KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, ShardSource, StreamError,
    WORKER_ROW_PREFIX, Worker, WorkerStats,
};
use heatsink_photo_app::schema::Table;
use heatsink_testkit::{eventually, fixture};

use super::stream::{fast_config, put_round};

/// Every delivery: (shard, sequence number) → how many times, and by which workers.
type Deliveries = Arc<Mutex<BTreeMap<(String, Seq), Vec<String>>>>;

struct Log {
    worker: String,
    seen: Deliveries,
}

impl RecordProcessor for Log {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut seen = self.seen.lock().unwrap();
        for r in &batch.records {
            seen.entry((batch.shard_id.clone(), r.seq.clone()))
                .or_default()
                .push(self.worker.clone());
        }
        Ok(())
    }
}

struct Started {
    name: String,
    stats: WorkerStats,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), StreamError>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_started_together_split_four_shards_without_a_steal() {
    let fx = fixture!("three_workers_started_together_split_four_shards_without_a_steal");
    fleet_splits_four_shards(&fx, Duration::ZERO, None).await;
}

/// Started 300 ms apart: the first worker's first read would miss the last one's announcement
/// but for the start-up wait (800 ms here, to stay clear of the shared emulators' latency).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_started_apart_within_the_start_up_wait_split_four_shards_without_a_steal() {
    let fx = fixture!(
        "workers_started_apart_within_the_start_up_wait_split_four_shards_without_a_steal"
    );
    fleet_splits_four_shards(
        &fx,
        Duration::from_millis(300),
        Some(Duration::from_millis(800)),
    )
    .await;
}

/// Starts three workers of a fresh application on a 4-shard stream, `stagger` apart (each with
/// `startup_wait` if given), and checks: no lease stolen or lost, each worker holds 1 or 2
/// shards, every record delivered exactly once, the announcements listed apart from the leases
/// while running and withdrawn after a graceful stop.
async fn fleet_splits_four_shards(
    fx: &heatsink_testkit::Fixture,
    stagger: Duration,
    startup_wait: Option<Duration>,
) {
    const KEYS: usize = 32;
    const ROUNDS: u64 = 20;
    let stream = fx.stream("start", 4).await;
    let spec = fx.photo_table(Table::Leases).await;
    let k = &fx.stack.kinesis;
    for round in 0..ROUNDS {
        put_round(k, &stream.name, round, KEYS).await;
    }
    let seen: Deliveries = Arc::default();
    let steals = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    let table = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "start-app");
    // A worker that crashed long ago left its announcement: it must not count, and is deleted.
    let identity = KinesisSource::new(k.clone(), &stream.name)
        .identity()
        .await
        .expect("stream identity");
    fx.stack
        .ddb
        .put_item()
        .table_name(&spec.name)
        .item("app", AttributeValue::S("start-app".into()))
        .item(
            "shard_id",
            AttributeValue::S(format!("{WORKER_ROW_PREFIX}{identity}#ghost")),
        )
        .item("worker_id", AttributeValue::S("ghost".into()))
        .item("heartbeat_ms", AttributeValue::N("1".into()))
        .item("stream", AttributeValue::S(identity.clone()))
        .send()
        .await
        .expect("a dead worker's announcement");
    assert_eq!(
        table()
            .for_stream(&identity)
            .scan()
            .await
            .expect("scan")
            .workers
            .len(),
        1
    );
    // All three built first, then spawned `stagger` apart.
    let workers: Vec<(String, Worker<KinesisSource, Log>)> = (0..3)
        .map(|i| {
            let name = format!("w{i}");
            let (steals, lost) = (Arc::clone(&steals), Arc::clone(&lost));
            let worker = Worker::new(
                KinesisSource::new(k.clone(), &stream.name),
                table(),
                Log {
                    worker: name.clone(),
                    seen: Arc::clone(&seen),
                },
                {
                    let mut c = fast_config(&name);
                    if let Some(wait) = startup_wait {
                        c.startup_wait = wait;
                    }
                    c
                },
            )
            .on_round(move |report| {
                steals.fetch_add(report.stolen, Ordering::SeqCst);
                lost.fetch_add(report.lost, Ordering::SeqCst);
            });
            (name, worker)
        })
        .collect();
    let t0 = Instant::now();
    let mut started: Vec<Started> = Vec::new();
    for (name, worker) in workers {
        if !started.is_empty() && !stagger.is_zero() {
            tokio::time::sleep(stagger).await;
        }
        let stats = worker.stats();
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async move {
            let _ = rx.await;
        }));
        started.push(Started {
            name,
            stats,
            stop,
            task,
        });
    }
    // While running, every worker's announcement is in the table, apart from the leases, and
    // the dead worker's is gone (deleted by the first round that reads it; the lease rows are
    // created before that, inside the start-up wait).
    let announced = eventually("three announcements", Duration::from_secs(10), || async {
        let scan = table().for_stream(&identity).scan().await.ok()?;
        let live = scan.workers.iter().all(|a| a.worker_id != "ghost");
        (scan.workers.len() == 3 && scan.leases.len() == 4 && live).then_some(scan)
    })
    .await;
    assert!(
        announced.malformed.is_empty(),
        "the announcements are not lease rows"
    );
    let mut names: Vec<&str> = announced
        .workers
        .iter()
        .map(|a| a.worker_id.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["w0", "w1", "w2"], "the dead worker's row is gone");
    let total = usize::try_from(ROUNDS).unwrap() * KEYS;
    eventually(
        "every record delivered",
        Duration::from_secs(40),
        || async { (seen.lock().unwrap().len() == total).then_some(()) },
    )
    .await;
    // Keep running past two lease durations and several rounds, with more records arriving:
    // a lopsided first round would show as a steal by now.
    let mut round = ROUNDS;
    while t0.elapsed() < Duration::from_secs(8) {
        put_round(k, &stream.name, round, KEYS).await;
        round += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let total = usize::try_from(round).unwrap() * KEYS;
    eventually(
        "the late records delivered",
        Duration::from_secs(30),
        || async { (seen.lock().unwrap().len() == total).then_some(()) },
    )
    .await;
    let held: Vec<(String, usize)> = started
        .iter()
        .map(|w| (w.name.clone(), w.stats.held_shards().len()))
        .collect();
    assert_eq!(
        steals.load(Ordering::SeqCst),
        0,
        "no lease stolen: {held:?}"
    );
    assert_eq!(lost.load(Ordering::SeqCst), 0, "no lease lost: {held:?}");
    assert!(
        held.iter().all(|(_, n)| (1..=2).contains(n)),
        "each worker holds 1 or 2 of the 4 shards: {held:?}"
    );
    assert_eq!(held.iter().map(|(_, n)| n).sum::<usize>(), 4, "{held:?}");
    {
        let seen = seen.lock().unwrap();
        let twice: Vec<_> = seen.iter().filter(|(_, by)| by.len() > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "records delivered more than once: {twice:?}"
        );
        assert_eq!(seen.len(), total, "every record delivered");
    }
    for w in started {
        let _ = w.stop.send(());
        w.task.await.expect("worker task").expect("worker ran");
    }
    // A graceful stop withdraws the announcements.
    let scan = table().scan().await.expect("scan");
    assert!(scan.workers.is_empty(), "{:?}", scan.workers);
}
