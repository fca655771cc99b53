//! The whole counter under failure: stream writers, long-lived writers, salted writes, rebuild.
//!
//! A model counters table applies writes the way DynamoDB would (conditional put, `ADD`, put);
//! writers follow the adapter rules in the module doc; failures are injected per key write:
//! not applied (crash before the write), or applied with the response lost (crash after it).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const KEYS: usize = 3;

fn key(i: usize) -> CounterKey {
    CounterKey::new("likes", format!("p{i}")).unwrap()
}

/// A Kinesis-sized (56-digit) sequence number for record `i` of a shard.
fn record_seq(i: usize) -> Seq {
    Seq::parse(&format!("4959033827149025660855969253{i:028}")).unwrap()
}

/// What happens to one key's write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// The writer crashed (or timed out) before the write reached the table.
    NotApplied,
    /// The write landed but the writer never learned it (crash or timeout after the write).
    ResponseLost,
}

fn outcome(key: usize, fails: u8, lost: u8) -> Outcome {
    if fails & (1 << key) != 0 {
        Outcome::NotApplied
    } else if lost & (1 << key) != 0 {
        Outcome::ResponseLost
    } else {
        Outcome::Applied
    }
}

fn key_index(key: &CounterKey) -> usize {
    key.key()[1..].parse().unwrap()
}

#[derive(Clone, Debug)]
enum Item {
    Writer(Stored),
    Value(i64),
}

/// The counters table, keyed by (pk, sk).
#[derive(Default)]
struct Table {
    items: BTreeMap<(String, String), Item>,
}

impl Table {
    fn read_writer(&self, key: &CounterKey, writer: &WriterId) -> Option<Stored> {
        let sk = SubKey::Writer(writer.clone()).sort_key();
        match self.items.get(&(key.pk(), sk)) {
            Some(Item::Writer(stored)) => Some(stored.clone()),
            _ => None,
        }
    }

    /// Put conditional on the stored seq being `expected` (absent item for `None`).
    fn conditional_put(&mut self, write: &FlushWrite) -> bool {
        let slot = (write.pk.clone(), write.sk.clone());
        let current = match self.items.get(&slot) {
            Some(Item::Writer(stored)) => Some(stored.seq.clone()),
            _ => None,
        };
        if current != write.expected {
            return false;
        }
        self.items.insert(slot, Item::Writer(write.stored()));
        true
    }

    fn add(&mut self, pk: String, sk: String, delta: i64) {
        let value = match self.items.get(&(pk.clone(), sk.clone())) {
            Some(Item::Value(v)) => *v,
            _ => 0,
        };
        self.items.insert((pk, sk), Item::Value(value + delta));
    }

    fn query(&self, pk: &str) -> Vec<(String, i64)> {
        self.items
            .iter()
            .filter(|((p, _), _)| p == pk)
            .map(|((_, sk), item)| match item {
                Item::Writer(stored) => (sk.clone(), stored.total),
                Item::Value(v) => (sk.clone(), *v),
            })
            .collect()
    }

    fn read(&self, key: &CounterKey) -> CounterSum {
        sum_counter(self.query(&key.pk())).unwrap()
    }
}

/// One stream shard: its records and Lambda's position in them.
struct Shard {
    writer: WriterId,
    records: Vec<(usize, i64)>,
    /// Every record before this index was delivered and flushed successfully at least once.
    frontier: usize,
}

impl Shard {
    /// One aggregator invocation over records `[a, b)`: read, plan, write each key.
    /// Returns whether every write was acknowledged (else Lambda redelivers).
    fn deliver(&mut self, table: &mut Table, a: usize, b: usize, fails: u8, lost: u8) -> bool {
        let mut batch = Deltas::new();
        for i in a..b {
            let (k, delta) = self.records[i];
            batch.add_record(key(k), record_seq(i), delta).unwrap();
        }
        let stored: BTreeMap<_, _> = batch
            .iter()
            .filter_map(|(k, _)| table.read_writer(k, &self.writer).map(|s| (k.clone(), s)))
            .collect();
        let plan = FlushPlan::new(&self.writer, &batch, &stored).unwrap();
        let mut ok = true;
        for write in &plan.writes {
            match outcome(key_index(&write.key), fails, lost) {
                Outcome::Applied => {
                    // One batch in flight per shard: the condition never fails here.
                    assert!(table.conditional_put(write), "{write:?}");
                }
                Outcome::NotApplied => ok = false,
                Outcome::ResponseLost => {
                    table.conditional_put(write);
                    ok = false;
                }
            }
        }
        if ok {
            self.frontier = self.frontier.max(b);
        }
        ok
    }

    fn true_total(&self, k: usize) -> i64 {
        self.records
            .iter()
            .filter(|(rk, _)| *rk == k)
            .map(|(_, d)| d)
            .sum()
    }
}

/// A long-lived writer (a router): buffers, seals with a flush number, flushes.
struct Router {
    writer: WriterId,
    counter: FlushCounter,
    deltas: Deltas,
    /// What it believes its sub-keys hold (`None`: known absent); missing: unknown.
    known: BTreeMap<CounterKey, Option<Stored>>,
}

impl Router {
    fn start(id: usize) -> Self {
        Self {
            writer: WriterId::new(format!("router-{id}")).unwrap(),
            counter: FlushCounter::new(),
            deltas: Deltas::new(),
            known: BTreeMap::new(),
        }
    }

    fn flush(&mut self, table: &mut Table, fails: u8, lost: u8) {
        if self.deltas.is_empty() {
            return;
        }
        let keys: Vec<CounterKey> = self.deltas.iter().map(|(k, _)| k.clone()).collect();
        for k in &keys {
            if !self.known.contains_key(k) {
                let stored = table.read_writer(k, &self.writer);
                if let Some(s) = &stored {
                    self.counter.observe(&s.seq).unwrap();
                }
                self.known.insert(k.clone(), stored);
            }
        }
        let seq = self.counter.next_seq().unwrap();
        self.deltas.seal(&seq).unwrap();
        let stored: BTreeMap<_, _> = self
            .known
            .iter()
            .filter_map(|(k, s)| s.clone().map(|s| (k.clone(), s)))
            .collect();
        let plan = FlushPlan::new(&self.writer, &self.deltas, &stored).unwrap();
        for k in &plan.already_applied {
            self.deltas.remove(k);
        }
        for write in &plan.writes {
            match outcome(key_index(&write.key), fails, lost) {
                Outcome::Applied => {
                    if table.conditional_put(write) {
                        self.known.insert(write.key.clone(), Some(write.stored()));
                        self.deltas.remove(&write.key);
                    } else {
                        // Our belief was stale (an earlier response was lost): re-read next time.
                        self.known.remove(&write.key);
                    }
                }
                Outcome::NotApplied => {}
                Outcome::ResponseLost => {
                    table.conditional_put(write);
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Action {
    /// Lambda delivers records `[frontier - back, frontier - back + len)` of a shard.
    Deliver {
        shard: usize,
        back: usize,
        len: usize,
        fails: u8,
        lost: u8,
    },
    RouterEvent {
        router: usize,
        key: usize,
        delta: i64,
    },
    RouterFlush {
        router: usize,
        fails: u8,
        lost: u8,
    },
    /// The router process dies: its buffer and its beliefs are gone; a new one starts.
    RouterCrash {
        router: usize,
    },
    /// A naive additive write to a salted sub-key.
    Salted {
        key: usize,
        salt: u32,
        delta: i64,
        fails: u8,
        lost: u8,
    },
}

fn mask() -> impl Strategy<Value = u8> {
    prop_oneof![2 => Just(0u8), 1 => any::<u8>()]
}

fn stream_action(shards: usize) -> impl Strategy<Value = Action> {
    (0..shards, 0usize..12, 0usize..12, mask(), mask()).prop_map(
        |(shard, back, len, fails, lost)| Action::Deliver {
            shard,
            back,
            len,
            fails,
            lost,
        },
    )
}

fn any_action(shards: usize, routers: usize) -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => stream_action(shards),
        4 => (0..routers, 0..KEYS, -1i64..=3)
            .prop_map(|(router, key, delta)| Action::RouterEvent { router, key, delta }),
        2 => (0..routers, mask(), mask())
            .prop_map(|(router, fails, lost)| Action::RouterFlush { router, fails, lost }),
        1 => (0..routers).prop_map(|router| Action::RouterCrash { router }),
        1 => (0..KEYS, 0u32..4, -1i64..=3, mask(), mask())
            .prop_map(|(key, salt, delta, fails, lost)| Action::Salted { key, salt, delta, fails, lost }),
    ]
}

fn logs() -> impl Strategy<Value = Vec<Vec<(usize, i64)>>> {
    prop::collection::vec(prop::collection::vec((0..KEYS, -1i64..=3), 0..30), 1..=3)
}

/// Points generated actions at the shards and routers that exist.
fn fit(actions: Vec<Action>, shards: usize, routers: usize) -> Vec<Action> {
    actions
        .into_iter()
        .map(|a| match a {
            Action::Deliver {
                shard,
                back,
                len,
                fails,
                lost,
            } => Action::Deliver {
                shard: shard % shards,
                back,
                len,
                fails,
                lost,
            },
            Action::RouterEvent { router, key, delta } => Action::RouterEvent {
                router: router % routers,
                key,
                delta,
            },
            Action::RouterFlush {
                router,
                fails,
                lost,
            } => Action::RouterFlush {
                router: router % routers,
                fails,
                lost,
            },
            Action::RouterCrash { router } => Action::RouterCrash {
                router: router % routers,
            },
            other => other,
        })
        .collect()
}

/// Runs the actions, then lets every shard and router finish; returns the table, the truth per
/// key, and the shards for per-writer checks.
fn run(logs: Vec<Vec<(usize, i64)>>, routers: usize, actions: &[Action]) -> World {
    let mut world = World::new(logs, routers);
    for action in actions {
        world.apply(action);
    }
    world.drain();
    world
}

struct World {
    table: Table,
    shards: Vec<Shard>,
    routers: Vec<Router>,
    truth: [i64; KEYS],
    /// Some event may be missing from the sub-keys (a crash lost a buffer, a salted write failed
    /// or was doubled): only the rebuild makes the count exact.
    lossy: bool,
}

impl World {
    fn new(logs: Vec<Vec<(usize, i64)>>, routers: usize) -> Self {
        let mut truth = [0; KEYS];
        for (k, delta) in logs.iter().flatten() {
            truth[*k] += delta;
        }
        let shards = logs
            .into_iter()
            .enumerate()
            .map(|(i, records)| Shard {
                writer: WriterId::new(format!("shardId-{i:012}")).unwrap(),
                records,
                frontier: 0,
            })
            .collect();
        Self {
            table: Table::default(),
            shards,
            routers: (0..routers).map(Router::start).collect(),
            truth,
            lossy: false,
        }
    }

    fn apply(&mut self, action: &Action) {
        match *action {
            Action::Deliver {
                shard,
                back,
                len,
                fails,
                lost,
            } => {
                let shard = &mut self.shards[shard];
                let a = shard.frontier - back.min(shard.frontier);
                let b = (a + len).min(shard.records.len());
                if a < b {
                    shard.deliver(&mut self.table, a, b, fails, lost);
                }
            }
            Action::RouterEvent {
                router,
                key: k,
                delta,
            } => {
                self.routers[router].deltas.add(key(k), delta).unwrap();
                self.truth[k] += delta;
            }
            Action::RouterFlush {
                router,
                fails,
                lost,
            } => self.routers[router].flush(&mut self.table, fails, lost),
            Action::RouterCrash { router } => {
                self.lossy |= !self.routers[router].deltas.is_empty();
                self.routers[router] = Router::start(router);
            }
            Action::Salted {
                key: k,
                salt,
                delta,
                fails,
                lost,
            } => {
                self.truth[k] += delta;
                let sk = SubKey::Salt(salt).sort_key();
                match outcome(0, fails, lost) {
                    Outcome::Applied => self.table.add(key(k).pk(), sk, delta),
                    Outcome::NotApplied => self.lossy = true,
                    Outcome::ResponseLost => {
                        // The client retries an additive write: it lands twice.
                        self.table.add(key(k).pk(), sk.clone(), delta);
                        self.table.add(key(k).pk(), sk, delta);
                        self.lossy = true;
                    }
                }
            }
        }
    }

    /// Eventually every batch is delivered and every router flushes successfully.
    fn drain(&mut self) {
        for shard in &mut self.shards {
            let end = shard.records.len();
            if shard.frontier < end {
                assert!(shard.deliver(&mut self.table, shard.frontier, end, 0, 0));
            }
        }
        for router in &mut self.routers {
            // A stale belief costs one failed condition, then a re-read.
            for _ in 0..2 {
                router.flush(&mut self.table, 0, 0);
            }
            assert!(router.deltas.is_empty());
        }
    }

    /// Whether some event of key `k` is durable but not yet flushed: a stream record at or past
    /// its shard's frontier, or a delta in a live router's buffer.
    fn in_flight(&self, k: usize) -> bool {
        self.shards
            .iter()
            .any(|s| s.records[s.frontier..].iter().any(|(rk, _)| *rk == k))
            || self
                .routers
                .iter()
                .any(|r| r.deltas.iter().any(|(ck, _)| key_index(ck) == k))
    }

    /// The rebuild job as `heatsink::likes::rebuild` runs it: only keys with nothing in flight
    /// (in production: no like within the quiet period) are corrected; `None` for the others.
    fn rebuild_settled(&mut self) -> [Option<i64>; KEYS] {
        let settled: Vec<bool> = (0..KEYS).map(|k| !self.in_flight(k)).collect();
        self.rebuild_where(|k| settled[k])
    }

    /// Recounts (the truth) and writes the absolute fix for the keys `pick` selects.
    fn rebuild_where(&mut self, pick: impl Fn(usize) -> bool) -> [Option<i64>; KEYS] {
        let mut changes = [None; KEYS];
        for (k, change) in changes.iter_mut().enumerate().filter(|(k, _)| pick(*k)) {
            let sum = self.table.read(&key(k));
            let c = correction(self.truth[k], sum.without_fix(), sum.fix()).unwrap();
            self.table
                .items
                .insert((key(k).pk(), SubKey::Fix.sort_key()), Item::Value(c.fix));
            *change = Some(c.change);
        }
        changes
    }

    /// The rebuild job: recount (the truth) and write the absolute fix for every key.
    fn rebuild(&mut self) -> [i64; KEYS] {
        self.rebuild_where(|_| true).map(|c| c.unwrap_or(0))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_stream_writer_counts_every_record_exactly_once_under_any_redelivery(
        logs in logs(),
        actions in prop::collection::vec(stream_action(3), 0..40),
    ) {
        let actions: Vec<Action> = actions.into_iter().map(|a| match a {
            Action::Deliver { shard, back, len, fails, lost } =>
                Action::Deliver { shard: shard % logs.len(), back, len, fails, lost },
            other => other,
        }).collect();
        let world = run(logs, 0, &actions);
        for shard in &world.shards {
            for k in 0..KEYS {
                let stored = world.table.read_writer(&key(k), &shard.writer).map_or(0, |s| s.total);
                prop_assert_eq!(stored, shard.true_total(k), "{} {}", shard.writer, k);
            }
        }
        for k in 0..KEYS {
            prop_assert_eq!(world.table.read(&key(k)).total(), world.truth[k]);
        }
    }

    #[test]
    fn counts_are_exact_after_any_failures_and_one_rebuild(
        logs in logs(),
        routers in 1usize..=2,
        actions in prop::collection::vec(any_action(3, 2), 0..60),
    ) {
        let actions = fit(actions, logs.len(), routers);
        let mut world = run(logs, routers, &actions);
        // Stream writers are exact on their own, before any rebuild.
        for shard in &world.shards {
            for k in 0..KEYS {
                let stored = world.table.read_writer(&key(k), &shard.writer).map_or(0, |s| s.total);
                prop_assert_eq!(stored, shard.true_total(k));
            }
        }
        let changes = world.rebuild();
        if !world.lossy {
            prop_assert_eq!(changes, [0; KEYS], "nothing was lost, so nothing needed fixing");
        }
        for k in 0..KEYS {
            prop_assert_eq!(world.table.read(&key(k)).total(), world.truth[k]);
        }
        // A second rebuild changes nothing: the fix is absolute.
        prop_assert_eq!(world.rebuild(), [0; KEYS]);
    }

    /// A rebuild that runs while events are still in flight never counts them twice: once
    /// everything is delivered the count is exact without another rebuild (unless something was
    /// lost, which the next settled rebuild repairs).
    #[test]
    fn a_settled_rebuild_mid_flight_never_double_counts(
        logs in logs(),
        routers in 1usize..=2,
        actions in prop::collection::vec(any_action(3, 2), 0..60),
    ) {
        let actions = fit(actions, logs.len(), routers);
        let mut world = World::new(logs, routers);
        for a in &actions {
            world.apply(a);
        }
        let mid = world.rebuild_settled();
        for (k, change) in mid.iter().enumerate() {
            prop_assert_eq!(change.is_none(), world.in_flight(k));
        }
        world.drain();
        if !world.lossy {
            for k in 0..KEYS {
                prop_assert_eq!(world.table.read(&key(k)).total(), world.truth[k], "key {}", k);
            }
        }
        // Drained, every key is settled, and one rebuild makes every count exact.
        let after = world.rebuild_settled();
        prop_assert!(after.iter().all(Option::is_some));
        for k in 0..KEYS {
            prop_assert_eq!(world.table.read(&key(k)).total(), world.truth[k]);
        }
    }
}

#[test]
fn an_unsettled_rebuild_mid_flight_counts_in_flight_records_twice() {
    // Why the rebuilder waits for quiet: 3 durable likes of p0 are still in the stream.
    let records = vec![(0, 1); 3];
    let mut naive = World::new(vec![records.clone()], 0);
    assert_eq!(
        naive.rebuild()[0],
        3,
        "the fix counts the in-flight records"
    );
    naive.drain();
    assert_eq!(
        naive.table.read(&key(0)).total(),
        6,
        "and their flush counts them again"
    );

    let mut settled = World::new(vec![records], 0);
    assert_eq!(settled.rebuild_settled()[0], None, "in flight: left alone");
    settled.drain();
    assert_eq!(settled.table.read(&key(0)).total(), 3);
}

#[test]
fn a_retried_flush_never_counts_twice() {
    let mut world = World::new(vec![vec![]], 1);
    for _ in 0..5 {
        world.apply(&Action::RouterEvent {
            router: 0,
            key: 0,
            delta: 1,
        });
    }
    // The first flush lands but its response is lost; the router retries.
    world.apply(&Action::RouterFlush {
        router: 0,
        fails: 0,
        lost: 1,
    });
    for _ in 0..3 {
        world.apply(&Action::RouterFlush {
            router: 0,
            fails: 0,
            lost: 0,
        });
    }
    assert!(world.routers[0].deltas.is_empty());
    assert_eq!(world.table.read(&key(0)).total(), 5);
}

#[test]
fn a_restarted_router_continues_above_its_stored_seq() {
    let mut world = World::new(vec![vec![]], 1);
    let event = Action::RouterEvent {
        router: 0,
        key: 0,
        delta: 1,
    };
    let flush = Action::RouterFlush {
        router: 0,
        fails: 0,
        lost: 0,
    };
    for _ in 0..3 {
        world.apply(&event);
        world.apply(&flush);
    }
    world.apply(&Action::RouterCrash { router: 0 });
    world.apply(&event);
    world.apply(&flush);
    // Without observing the stored seq 3, the new life's flush 1 would be taken as applied.
    assert_eq!(world.table.read(&key(0)).total(), 4);
    assert_eq!(
        world
            .table
            .read_writer(&key(0), &world.routers[0].writer)
            .map(|s| s.seq),
        Some(Seq::from(4))
    );
}

#[test]
fn a_crashed_routers_buffer_is_missing_until_a_rebuild() {
    let mut world = World::new(vec![vec![]], 1);
    for _ in 0..211 {
        world.apply(&Action::RouterEvent {
            router: 0,
            key: 0,
            delta: 1,
        });
    }
    world.apply(&Action::RouterCrash { router: 0 });
    world.drain();
    assert_eq!(world.table.read(&key(0)).total(), 0);
    assert_eq!(world.rebuild()[0], 211);
    assert_eq!(world.table.read(&key(0)).total(), 211);
}

#[test]
fn a_batch_that_skips_ahead_of_unapplied_records_hides_them_until_a_rebuild() {
    // The limit of guarantee 1: records 0..2 never flushed, then 2..4 delivered (out of order,
    // as with ParallelizationFactor > 1 and a counter key spread over partition keys).
    let mut world = World::new(vec![vec![(0, 1); 4]], 0);
    let shard = &mut world.shards[0];
    assert!(shard.deliver(&mut world.table, 2, 4, 0, 0));
    assert!(shard.deliver(&mut world.table, 0, 2, 0, 0));
    assert_eq!(world.table.read(&key(0)).total(), 2);
    assert_eq!(world.rebuild()[0], 2);
    assert_eq!(world.table.read(&key(0)).total(), 4);
}
