//! No flip and no delete without proof that every stream shard was read past the fence: a
//! drain that cannot see the fence stops and says so; a rollback whose target stream has a
//! shard lagging waits for it (several shards: the stream-shape simulator); a retried move
//! counts only its own attempt's fence records; a copy that outlives a shard iterator keeps its
//! position.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use heatsink::slots::mover::{BatchFault, Limits, TailFaults};
use heatsink::slots::{MoveError, Phase, slot_of};
use heatsink_sim::front::StreamShaper;
use heatsink_sim::shape::{ShapeConfig, ShapedStream, SourceKind};
use heatsink_testkit::fixture;

use super::{SERIAL, Scene, limits, quarter, start_load};

/// Loses every batch while armed: a tail that never gets past the fence records.
#[derive(Default)]
struct Blind(AtomicBool);

impl TailFaults for Blind {
    fn batch(&self, _shard: &str, _n: u64) -> BatchFault {
        if self.0.load(Ordering::Relaxed) {
            BatchFault::Lose
        } else {
            BatchFault::Deliver
        }
    }
}

/// Items of the moved slot on `table` (not the toolkit's own).
async fn slot_items(ddb: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    let mut n = 0;
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        n += page
            .items()
            .iter()
            .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()))
            .filter(|pk| !pk.starts_with("#heatsink/") && quarter().contains(slot_of(pk)))
            .count();
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return n;
        }
    }
}

/// The drain never sees the fence records (every batch lost once the fence is up): the mover
/// stops at the drain's deadline with the phase, the shards that owe proof and the commands
/// (resume, or abort to give the slots back), having flipped nothing and deleted nothing. A new
/// controller resumes once the tail reads again, and nothing acknowledged is lost.
#[tokio::test]
async fn a_drain_that_never_sees_the_fence_records_flips_and_deletes_nothing_and_says_what_next() {
    let fx = fixture!(
        "a_drain_that_never_sees_the_fence_records_flips_and_deletes_nothing_and_says_what_next"
    );
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let blind = Arc::new(Blind::default());
    // A 5 s drain deadline (the product's is 30 s): the test waits it out once.
    let mut m = s
        .start(false)
        .await
        .with_faults(blind.clone())
        .with_limits(Limits {
            drain_deadline: Duration::from_secs(5),
            ..limits()
        });
    let id = m.record().id.clone();
    while m.record().phase != Phase::Fenced {
        m.step().await.expect("step");
    }
    blind.0.store(true, Ordering::Relaxed);
    let err = m.step().await.expect_err("no proof, no flip");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, MoveError::Unproven(_)), "{text}");
    assert!(
        text.contains(&format!("heatsink move resume {id}"))
            && text.contains(&format!("heatsink move abort {id}"))
            && !text.contains('\n'),
        "{text}"
    );
    assert_eq!(m.record().phase, Phase::Fenced);
    assert!(!m.record().forward.unproven.is_empty());
    let map = s.dir.load().await.expect("map");
    assert_eq!(map.entry_of(quarter().first).owner, s.a, "not flipped");
    let on_source = slot_items(&s.ddb, &s.a).await;
    assert!(on_source > 0, "the source's copy is all there");
    // The operator's next command, from another controller once the first is gone.
    drop(m);
    blind.0.store(false, Ordering::Relaxed);
    let mut again = s.open(&id).await;
    held!(again.run().await).expect("resumed drain");
    assert!(again.record().forward.proven.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}

/// Loses the batches of the shards whose id ends in `suffix` while armed, and counts them: one
/// shard of the stream lagging behind the others.
struct Lag {
    suffix: String,
    armed: AtomicBool,
    held: AtomicU64,
}

impl TailFaults for Lag {
    fn batch(&self, shard: &str, _n: u64) -> BatchFault {
        if self.armed.load(Ordering::Relaxed) && shard.ends_with(&self.suffix) {
            self.held.fetch_add(1, Ordering::Relaxed);
            BatchFault::Lose
        } else {
            BatchFault::Deliver
        }
    }
}

/// A rollback after the flip, under load, on a target stream of 4 shards (the stream-shape
/// simulator) one of which lags: its batches are held back for 2 s from the start of the
/// rollback, and it is a shard the fence record does not land on (the fence record alone
/// would end an unproven drain early). Writes the target acknowledged before its fence sit on
/// that shard; the rollback's drain waits for the lagging shard's proof before it flips back,
/// so every one of them is on the source when the target's copy is deleted.
#[tokio::test]
async fn sim_rollback_after_the_flip_under_load_with_one_target_stream_shard_lagging_loses_nothing()
{
    let fx = fixture!(
        "sim_rollback_after_the_flip_under_load_with_one_target_stream_shard_lagging_loses_nothing"
    );
    let _serial = SERIAL.lock().await;
    let mut s = Scene::new(&fx, false).await;
    let upstream = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .expect("the stack's endpoint");
    let shape = ShapeConfig::new(SourceKind::DynamoDbStreams, 4);
    // Which of the 4 shards each key's changes land on (the simulator hashes the record's Keys).
    let model = ShapedStream::new(shape.clone());
    let shard_of =
        |pk: &str| model.slot_of(&serde_json::json!({"dynamodb": {"Keys": {"pk": {"S": pk}}}}));
    let fence_shard = shard_of(&format!("#heatsink/slot/{}", quarter().first));
    let moved_keys: Vec<String> = (0..16)
        .filter(|i| i % 4 == 0)
        .map(|i| format!("{{t0}}key-{i}"))
        .collect();
    let lagging = moved_keys
        .iter()
        .map(|k| shard_of(k))
        .find(|p| *p != fence_shard)
        .expect("a moved key off the fence record's shard");
    let lag = Arc::new(Lag {
        suffix: format!("-{lagging:08x}"),
        armed: AtomicBool::new(false),
        held: AtomicU64::new(0),
    });
    let shaper = StreamShaper::start(&upstream, shape).await.expect("shaper");
    s.streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&fx.stack.config)
            .endpoint_url(shaper.endpoint())
            .build(),
    );
    for table in [&s.a, &s.b] {
        let arn = fx
            .stack
            .ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .expect("describe")
            .table
            .and_then(|t| t.latest_stream_arn)
            .expect("a stream");
        shaper.watch(&arn).await.expect("watch");
    }
    let load = start_load(s.router.clone(), "key-", 16, 20.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut m = s.start(false).await.with_faults(lag.clone());
    let id = m.record().id.clone();
    while m.record().phase != Phase::Flipped {
        m.step().await.expect("step");
    }
    // The target takes the slot's writes for a while, then the rollback starts with one of
    // its stream shards lagging for 2 s.
    tokio::time::sleep(Duration::from_millis(800)).await;
    lag.armed.store(true, Ordering::Relaxed);
    let release = {
        let lag = lag.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            lag.armed.store(false, Ordering::Relaxed);
        })
    };
    // The rollback's drain waits for the lagging shard's proof within the 30 s drain deadline.
    // On a loaded lane it can stop first, with nothing flipped or deleted
    // (`Unproven`, naming the shard and `heatsink move rollback <id>`): the operator's next step,
    // taken here as the error says, at most three times.
    let mut unproven = 0;
    loop {
        match m.rollback().await {
            Ok(()) => break,
            Err(MoveError::Unproven(u)) if unproven < 3 => {
                unproven += 1;
                eprintln!("{id}: rollback stopped unproven ({u:?}); running it again as it says");
            }
            Err(e) => panic!("rollback: {e:?}"),
        }
    }
    release.await.expect("release");
    assert!(
        lag.held.load(Ordering::Relaxed) > 0,
        "the lagging shard held batches back"
    );
    let rollback = m.record().rollback.clone().expect("rollback times");
    eprintln!(
        "{id}: rollback pause {:?} ms ({:?}), the lagging shard held {} batches",
        rollback.pause_ms,
        rollback.pause_parts_ms,
        lag.held.load(Ordering::Relaxed)
    );
    assert_eq!(m.record().phase, Phase::RolledBack);
    assert!(
        m.record()
            .reverse
            .as_ref()
            .is_some_and(|t| t.proven.is_some())
    );
    let map = s.dir.load().await.expect("map");
    assert_eq!(
        (
            map.entry_of(quarter().first).owner.as_str(),
            map.entry_of(quarter().first).epoch
        ),
        (s.a.as_str(), 3)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, acks) = load.finish(&s.router).await;
    let on_target: BTreeSet<&str> = acks
        .iter()
        .filter(|a| a.owner == s.b)
        .map(|a| a.key.as_str())
        .collect();
    assert!(
        on_target.iter().any(|k| shard_of(k) == lagging),
        "the target acknowledged writes on the lagging shard: {on_target:?}"
    );
    shaper.stop();
}

/// A move aborted after its fence, then the same slots moved again with its tail reading from
/// the stream's trim horizon (its iterators expired): the earlier attempt's fence records are
/// in the stream the new move reads, and must not count as the new move's.
#[tokio::test]
async fn a_retried_move_after_an_aborted_one_counts_only_its_own_fence_records() {
    let fx = fixture!("a_retried_move_after_an_aborted_one_counts_only_its_own_fence_records");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let load = start_load(s.router.clone(), "key-", 16, 10.0);
    let mut first = s.start(false).await;
    while first.record().phase != Phase::Fenced {
        first.step().await.expect("step");
    }
    first.abort().await.expect("abort");
    let mut m = s.start(false).await;
    m.step().await.expect("record");
    // The positions look older than an iterator's 15 minutes, and nothing was read on them:
    // the tail reads the stream from its trim horizon, first attempt's fence records included.
    m.age_stream_positions(Duration::from_secs(3_600));
    while m.record().phase != Phase::Diffed {
        m.step().await.expect("step");
    }
    assert!(
        !m.record().forward.fence_seen && m.record().forward.proven.is_none(),
        "the aborted move's fence records counted before this move fenced: {:?}",
        m.record().forward
    );
    m.run().await.expect("move");
    assert!(m.record().forward.proven.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(&s.router).await;
}

/// A copy that outlives the 15 minutes of a stream iterator (the recorded iterator times
/// faked to 2 s short of the 14 minutes the mover reuses one for, and the copy slowed to
/// several seconds): the copy reads the tail as it goes, so the catch-up continues from where
/// it was instead of reading the stream again from its trim horizon.
#[tokio::test]
async fn a_copy_that_outlives_a_stream_iterator_keeps_the_tail_position() {
    let fx = fixture!("a_copy_that_outlives_a_stream_iterator_keeps_the_tail_position");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    // History before the move: 120 changes of the moved slot the tail must never read again.
    for v in 1..=30u64 {
        for k in 0..4 {
            s.router
                .put_versioned(&format!("{{t0}}old-{k}"), v, Default::default())
                .await
                .expect("put");
        }
    }
    s.preload(150).await;
    let mut spec = s.spec(false);
    spec.budget.wcu_per_sec = 40.0;
    let mut m = s.start_spec(spec).await;
    m.step().await.expect("record");
    m.age_stream_positions(Duration::from_secs(14 * 60 - 2));
    let t = std::time::Instant::now();
    m.step().await.expect("copy");
    assert!(
        t.elapsed() > Duration::from_secs(2),
        "the copy outlived the iterators"
    );
    m.run().await.expect("move");
    let read = m.record().forward.read;
    eprintln!("the forward tail read {read} records");
    assert!(
        read < 120,
        "the tail read {read} records: it started again from the trim horizon"
    );
}
