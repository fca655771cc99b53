//! Enhanced fan-out (`heatsink::stream::FanOutSource`) on kinesis-mock, which serves
//! RegisterStreamConsumer and SubscribeToShard's event stream: the same worker, pushed records,
//! and a restart from the checkpoint. After UpdateShardCount, kinesis-mock 0.6 never ends the
//! parents' subscriptions with a ChildShards event, so a split is tested through the fan-out
//! split shape of the simulator (`heatsink_sim::fanout`, the `sim_` test), with the leases on
//! the lane's DynamoDB emulator.

use heatsink_integration::PhotoFixture;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use heatsink::stream::{
    FanOutSource, LeaseTable, ProcessBatch, RecordProcessor, StreamError, Worker,
};
use heatsink_photo_app::schema::Table;
use heatsink_sim::fanout::{FanOutSplit, PARENT};
use heatsink_testkit::{eventually, fixture};

use crate::stream::{fast_config, put_round};

/// Every delivery as (shard, key, value), in processing order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(String, String, u64)>>>);

impl RecordProcessor for Log {
    async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
        let mut log = self.0.lock().unwrap();
        for r in &batch.records {
            let text = String::from_utf8_lossy(&r.data);
            let value = text
                .rsplit(':')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap();
            log.push((batch.shard_id.clone(), r.partition_key.to_string(), value));
        }
        Ok(())
    }
}

impl Log {
    fn distinct(&self) -> BTreeSet<(String, u64)> {
        let log = self.0.lock().unwrap();
        log.iter().map(|(_, k, v)| (k.clone(), *v)).collect()
    }
}

async fn run_until<F: Fn() -> bool>(
    source: FanOutSource,
    leases: LeaseTable,
    log: &Log,
    worker: &str,
    what: &str,
    done: F,
) {
    let w = Worker::new(source, leases, log.clone(), fast_config(worker));
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(w.run(async move {
        let _ = rx.await;
    }));
    eventually(what, Duration::from_secs(40), || async {
        done().then_some(())
    })
    .await;
    // A moment more: nothing beyond the expected records may arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop.send(());
    task.await.expect("worker task").expect("worker ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_reads_every_record_once_and_a_restart_resumes_from_its_checkpoint() {
    if std::env::var("HEATSINK_LANE").as_deref() == Ok("localstack") {
        // Enhanced fan-out has been tried on kinesis-mock only (the moto and dynoxide lanes).
        eprintln!("skip: fan-out on LocalStack's Kinesis is not tried yet");
        return;
    }
    let fx = fixture!("fan_out_reads_every_record_once_and_a_restart_resumes_from_its_checkpoint");
    let stream = fx.stream("efo", 2).await;
    let spec = fx.photo_table(Table::Leases).await;
    let leases = || LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "efo-app");
    let k = &fx.stack.kinesis;
    let source = FanOutSource::register(k.clone(), &stream.name, "efo-app")
        .await
        .expect("register the consumer");
    // Registering again finds the same consumer.
    let again = FanOutSource::register(k.clone(), &stream.name, "efo-app")
        .await
        .expect("find the consumer");
    assert_eq!(again.consumer_arn(), source.consumer_arn());

    // Round 0 and 1 before the first worker: all 40 pushed to it.
    put_round(k, &stream.name, 0, 20).await;
    put_round(k, &stream.name, 1, 20).await;
    let log = Log::default();
    run_until(source.clone(), leases(), &log, "w0", "rounds 0-1", || {
        log.distinct().len() >= 40
    })
    .await;
    assert_eq!(log.0.lock().unwrap().len(), 40, "each record once");

    // A restart resumes from the checkpoint: only round 2 arrives.
    put_round(k, &stream.name, 2, 20).await;
    let second = Log::default();
    run_until(source.clone(), leases(), &second, "w1", "round 2", || {
        second.distinct().len() >= 20
    })
    .await;
    let rounds: BTreeSet<u64> = second.distinct().iter().map(|(_, v)| *v).collect();
    assert_eq!(
        rounds,
        BTreeSet::from([2]),
        "nothing before the checkpoint again"
    );

    let _ = source.deregister().await;
}

/// AWS ends a split parent's subscription with an event carrying `ChildShards` and no
/// continuation: the worker must finish the parent there (its lease at SHARD_END) and read the
/// children from their start, each record once, every parent record before any child record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_fan_out_ends_a_split_parent_at_its_child_shards_event_and_reads_the_children_after() {
    let fx = fixture!(
        "sim_fan_out_ends_a_split_parent_at_its_child_shards_event_and_reads_the_children_after"
    );
    let sizes = [5, 3, 4];
    let records: Vec<Vec<Vec<u8>>> = sizes
        .iter()
        .enumerate()
        .map(|(s, n)| {
            (0..*n)
                .map(|i| format!("r:{}", s * 100 + i).into_bytes())
                .collect()
        })
        .collect();
    let split = FanOutSplit::start("efo-split", records)
        .await
        .expect("fan-out split shape");
    let k = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&fx.stack.config)
            .endpoint_url(split.endpoint())
            .build(),
    );
    let spec = fx.photo_table(Table::Leases).await;
    let leases = LeaseTable::new(fx.stack.ddb.clone(), &spec.name, "efo-split-app");
    let source = FanOutSource::new(k, "efo-split", split.consumer_arn());
    let log = Log::default();
    let total: usize = sizes.iter().sum();
    run_until(
        source,
        leases,
        &log,
        "w0",
        "the parent and both children",
        || log.distinct().len() >= total,
    )
    .await;
    let delivered = log.0.lock().unwrap().clone();
    assert_eq!(delivered.len(), total, "each record once: {delivered:?}");
    let last_parent = delivered.iter().rposition(|(s, _, _)| s == PARENT);
    let first_child = delivered.iter().position(|(s, _, _)| s != PARENT);
    assert!(
        matches!((last_parent, first_child), (Some(p), Some(c)) if p < c),
        "the parent's records before its children's: {delivered:?}"
    );
    for (s, n) in sizes.iter().enumerate() {
        let values: Vec<u64> = delivered
            .iter()
            .filter(|(_, key, _)| key.starts_with(&format!("{s}-")))
            .map(|(_, _, v)| *v)
            .collect();
        let expected: Vec<u64> = (0..*n).map(|i| (s * 100 + i) as u64).collect();
        assert_eq!(values, expected, "shard {s} in order");
    }
    // The children were subscribed to only after the parent's subscription (which ended at
    // its ChildShards event), from their start.
    let subs = split.subscriptions();
    let first_child_sub = subs
        .iter()
        .position(|s| s.shard != PARENT)
        .expect("a child was subscribed to");
    assert!(
        subs[..first_child_sub]
            .iter()
            .any(|s| s.shard == PARENT && s.records == sizes[0]),
        "the parent was read before any child: {subs:?}"
    );
    for s in subs[first_child_sub..].iter().filter(|s| s.shard == PARENT) {
        assert_eq!(s.records, 0, "nothing of the parent again: {subs:?}");
    }
    for child in ["shardId-000000000001", "shardId-000000000002"] {
        let first = subs.iter().find(|s| s.shard == child).expect("child read");
        assert_eq!(
            first.position, "TRIM_HORIZON",
            "{child} from its start: {subs:?}"
        );
    }
}
