//! `heatsink::hot::cache::MicroCache` side by side with `moka` and a `Mutex<HashMap>`, in one run:
//!
//! 1. Store fetches per second reaching the store under 9,000 reads/s on one key through six
//!    routers (six independent caches) for 10 s, real time, store latency 5 ms: no cache, the
//!    micro-cache (TTL 1 s, stale until 3 s), moka with only a 1 s TTL read with `get_with`
//!    (single-flight) and with `get` + `insert` (the hand-rolled pattern that stampedes).
//! 2. The cost of a fresh hit: micro-cache vs `moka::future::Cache::get` vs `Mutex<HashMap>`,
//!    as a plain loop (printed in the table) and as criterion timings.
//!
//! `cargo bench -p heatsink --bench cache` (no local stack needed; `BENCH_SECONDS=3` shortens
//! part 1).

use std::collections::HashMap;
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use heatsink::hot::cache::MicroCache;

const ROUTERS: usize = 6;
const READS_PER_SEC: u64 = 9_000;
const STORE_LATENCY: Duration = Duration::from_millis(5);
const KEY: &str = "p9";

/// The store: counts fetches, answers after `STORE_LATENCY`.
#[derive(Default)]
struct Store {
    fetches: AtomicU64,
}

impl Store {
    async fn fetch(&self) -> u64 {
        let n = self.fetches.fetch_add(1, Ordering::Relaxed) + 1;
        tokio::time::sleep(STORE_LATENCY).await;
        n
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    NoCache,
    Micro,
    MokaGetWith,
    MokaGetInsert,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::NoCache => "no cache",
            Self::Micro => "heatsink MicroCache (1 s TTL, stale until 3 s)",
            Self::MokaGetWith => "moka TTL 1 s, get_with (single-flight)",
            Self::MokaGetInsert => "moka TTL 1 s, get + insert on miss",
        }
    }
}

enum Router {
    None,
    Micro(MicroCache<String, u64>),
    Moka(moka::future::Cache<String, u64>),
}

#[derive(Default)]
struct Outcome {
    reads: u64,
    fetches: u64,
    waited: u64,
    max_latency: Duration,
    micro: Option<heatsink::hot::cache::StatsSnapshot>,
}

async fn read_once(router: &Router, variant: Variant, store: &Arc<Store>) -> u64 {
    match (router, variant) {
        (Router::Micro(c), _) => {
            let store = Arc::clone(store);
            c.get_or_load(KEY, move |_key| async move {
                Ok::<_, Infallible>(store.fetch().await)
            })
            .await
            .map(|l| l.value)
            .unwrap_or_default() // only a panicking loader fails; this one cannot
        }
        (Router::Moka(c), Variant::MokaGetWith) => c.get_with(KEY.to_owned(), store.fetch()).await,
        (Router::Moka(c), _) => match c.get(KEY).await {
            Some(v) => v,
            None => {
                let v = store.fetch().await;
                c.insert(KEY.to_owned(), v).await;
                v
            }
        },
        (Router::None, _) => store.fetch().await,
    }
}

/// Offers `READS_PER_SEC` reads of one key for `secs`, round-robin over six routers, each read
/// its own task (a read waiting on the store does not hold back the next).
async fn simulate(variant: Variant, secs: u64) -> Outcome {
    let store = Arc::new(Store::default());
    let routers: Arc<Vec<Router>> = Arc::new(
        (0..ROUTERS)
            .map(|_| match variant {
                Variant::NoCache => Router::None,
                Variant::Micro => Router::Micro(MicroCache::builder().build()),
                Variant::MokaGetWith | Variant::MokaGetInsert => Router::Moka(
                    moka::future::Cache::builder()
                        .max_capacity(10_000)
                        .time_to_live(Duration::from_secs(1))
                        .build(),
                ),
            })
            .collect(),
    );
    let waited = Arc::new(AtomicU64::new(0));
    let max_us = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1)); // Burst: catches up
    let per_tick = READS_PER_SEC / 1_000;
    let total = READS_PER_SEC * secs;
    let mut issued = 0u64;
    while issued < total {
        tick.tick().await;
        for _ in 0..per_tick {
            let router = issued as usize % ROUTERS;
            let (routers, store) = (Arc::clone(&routers), Arc::clone(&store));
            let (waited, max_us) = (Arc::clone(&waited), Arc::clone(&max_us));
            tasks.spawn(async move {
                let start = Instant::now();
                black_box(read_once(&routers[router], variant, &store).await);
                let took = start.elapsed();
                if took >= STORE_LATENCY * 4 / 5 {
                    waited.fetch_add(1, Ordering::Relaxed);
                }
                max_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
            });
            issued += 1;
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let micro = (variant == Variant::Micro).then(|| {
        let mut sum = heatsink::hot::cache::StatsSnapshot::default();
        for r in routers.iter() {
            if let Router::Micro(c) = r {
                let s = c.stats().snapshot();
                sum.hits += s.hits;
                sum.stale_hits += s.stale_hits;
                sum.misses += s.misses;
                sum.loads += s.loads;
                sum.joins += s.joins;
                sum.refreshes += s.refreshes;
            }
        }
        sum
    });
    Outcome {
        reads: issued,
        fetches: store.fetches.load(Ordering::Relaxed),
        waited: waited.load(Ordering::Relaxed),
        max_latency: Duration::from_micros(max_us.load(Ordering::Relaxed)),
        micro,
    }
}

fn store_fetches(rt: &tokio::runtime::Runtime, secs: u64) {
    println!(
        "\nstore fetches: {READS_PER_SEC} reads/s on one key through {ROUTERS} routers for {secs} s \
         (real time, store latency {} ms)",
        STORE_LATENCY.as_millis()
    );
    println!(
        "{:<48} {:>8} {:>8} {:>10} {:>13} {:>12} {:>10}",
        "variant", "reads", "fetches", "fetches/s", "per router/s", "reads waited", "max wait"
    );
    for variant in [
        Variant::NoCache,
        Variant::Micro,
        Variant::MokaGetWith,
        Variant::MokaGetInsert,
    ] {
        let o = rt.block_on(simulate(variant, secs));
        let per_s = o.fetches as f64 / secs as f64;
        println!(
            "{:<48} {:>8} {:>8} {:>10.1} {:>13.2} {:>12} {:>8.1}ms",
            variant.name(),
            o.reads,
            o.fetches,
            per_s,
            per_s / ROUTERS as f64,
            o.waited,
            o.max_latency.as_secs_f64() * 1e3
        );
        if let Some(s) = o.micro {
            println!(
                "  micro-cache stats (6 routers): hits {}, stale hits {}, misses {}, joins {}, \
                 loads {}, refreshes {}",
                s.hits, s.stale_hits, s.misses, s.joins, s.loads, s.refreshes
            );
        }
    }
}

/// The three caches under test for the hit cost, each holding `KEY`.
struct HitCaches {
    micro: MicroCache<String, u64>,
    moka: moka::future::Cache<String, u64>,
    map: Mutex<HashMap<String, u64>>,
}

fn hit_caches(rt: &tokio::runtime::Runtime) -> HitCaches {
    // A long TTL so every read is a fresh hit however long the measurement runs.
    let hour = Duration::from_secs(3_600);
    let micro = MicroCache::builder().ttl(hour).stale_until(hour).build();
    let moka = moka::future::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(hour)
        .build();
    rt.block_on(async {
        micro
            .get_or_load(KEY, |_key| async { Ok::<_, Infallible>(9) })
            .await
            .expect("load");
        moka.insert(KEY.to_owned(), 9).await;
    });
    let map = Mutex::new(HashMap::from([(KEY.to_owned(), 9u64)]));
    HitCaches { micro, moka, map }
}

async fn micro_hit(c: &MicroCache<String, u64>) -> u64 {
    c.get_or_load(KEY, |_key| async { Ok::<_, Infallible>(0) })
        .await
        .map(|l| l.value)
        .unwrap_or_default() // only a panicking loader fails; this one cannot
}

async fn moka_hit(c: &moka::future::Cache<String, u64>) -> u64 {
    c.get(KEY).await.unwrap_or_default()
}

async fn map_hit(m: &Mutex<HashMap<String, u64>>) -> u64 {
    m.lock()
        .map(|m| m.get(KEY).copied().unwrap_or_default())
        .unwrap_or_default()
}

/// ns per call of `hit` over `n` sequential calls on one task (generic, so nothing is boxed in
/// the timed loop).
fn ns_per_hit<F: Future<Output = u64>>(
    rt: &tokio::runtime::Runtime,
    n: u32,
    hit: impl Fn() -> F,
) -> f64 {
    rt.block_on(async {
        let t = Instant::now();
        for _ in 0..n {
            black_box(hit().await);
        }
        t.elapsed().as_nanos() as f64 / f64::from(n)
    })
}

/// ns per fresh hit over `n` sequential reads on one task.
fn plain_loop(rt: &tokio::runtime::Runtime, caches: &HitCaches, n: u32) {
    let micro = ns_per_hit(rt, n, || micro_hit(&caches.micro));
    let moka = ns_per_hit(rt, n, || moka_hit(&caches.moka));
    let map = ns_per_hit(rt, n, || map_hit(&caches.map));
    println!("\nfresh hit cost ({n} sequential reads of one key, one task)");
    println!("{:<40} {:>10} {:>10}", "cache", "ns/hit", "vs moka");
    for (name, ns) in [
        ("heatsink MicroCache::get_or_load", micro),
        ("moka::future::Cache::get", moka),
        ("Mutex<HashMap>::get", map),
    ] {
        println!("{name:<40} {ns:>10.1} {:>9.2}x", ns / moka);
    }
}

fn hit_cost(c: &mut Criterion, rt: &tokio::runtime::Runtime, caches: &HitCaches) {
    let mut g = c.benchmark_group("fresh_hit");
    g.bench_function("heatsink_micro_cache", |b| {
        b.to_async(rt).iter(|| micro_hit(&caches.micro))
    });
    g.bench_function("moka_future_get", |b| {
        b.to_async(rt).iter(|| moka_hit(&caches.moka))
    });
    g.bench_function("mutex_hashmap", |b| {
        b.to_async(rt).iter(|| map_hit(&caches.map))
    });
    g.finish();
}

fn main() {
    let secs = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cache bench: no runtime: {e}");
            return;
        }
    };
    store_fetches(&rt, secs);
    let caches = hit_caches(&rt);
    plain_loop(&rt, &caches, 2_000_000);
    let mut c = Criterion::default().configure_from_args();
    hit_cost(&mut c, &rt, &caches);
    c.final_summary();
}
