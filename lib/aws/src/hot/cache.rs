//! Micro-cache: answer repeated reads of a hot key from memory for about a second.
//!
//! The celebrity post of docs/hot-keys.md is read 66,667 times a second, 22× what one DynamoDB
//! partition serves (3,000 RCU/s), and no amount of capacity splits one key. A router that keeps
//! the answer for a 1 s TTL sends the store about one fetch per key per second whatever the read
//! rate: 9,000 reads/s through six routers become about 6 fetches/s. The price is staleness,
//! bounded and stated below, and a local write drops the entry so a router reads its own writes.
//!
//! An entry's age is counted from the moment its load began. It moves through three states:
//!
//! ```text
//!   load ──▶ FRESH ──(age > ttl)──▶ STALE ──(age > stale_until)──▶ EXPIRED
//!   ▲          served as is          served as is, and the first      a read waits for a load
//!   │                                reader starts ONE refresh        (single-flight)
//!   └── invalidate(key): the entry is gone for every read that starts afterwards
//! ```
//!
//! # Guarantees (defaults: ttl 1 s, stale_until 3 s)
//! - **Staleness**: no read returns a value whose load began more than `stale_until` (3 s) ago;
//!   reads up to `ttl` (1 s) old are served fresh, older ones stale while one refresh runs.
//! - **Store fetches**: at most one load in flight per key (and write epoch) on this cache:
//!   N concurrent misses call the loader once; 100 readers of a stale entry start one refresh.
//!   Under steady reads a key costs about one fetch per `ttl` per cache.
//! - **Local writes**: once [`MicroCache::invalidate`] returns, no read on this cache returns a
//!   value whose load began before it: the next read loads (and does not join an older load).
//! - **Must-not-be-stale reads**: [`MicroCache::read_fresh`] never answers from memory; it shares
//!   a store read only while that read is in flight and began after the key's last invalidation
//!   (request coalescing), else it starts its own.
//! - **Failures**: a loader error or panic reaches every caller waiting on that load as a
//!   [`CacheError`], nothing is cached, and the next read loads again; a cancelled (dropped)
//!   caller never strands its waiters, one of them loads instead.
//! - **Memory**: at most `max_entries` values (least valuable evicted first, TinyLFU), the same
//!   bound again for in-flight bookkeeping, plus 8 bytes per epoch slot (1,024 by default).
//!
//! # Built on moka
//! [`moka::future::Cache`] is the storage: it bounds memory, and its `try_get_with` is the
//! single-flight, already proven against cancelled and panicking initialisers. What moka lacks
//! is added here, and only that: stale-while-revalidate with exactly one background refresh (a
//! flag per entry), write epochs so a read after a local write never joins or returns an older
//! load (the epoch is part of the moka key), coalescing of in-flight reads only (a completed
//! load is dropped from the single-flight map before a new read may join), and time from
//! [`tokio::time::Instant`], so tests run in paused, virtual time. moka's own expiry (real
//! clock, `stale_until`) only frees memory; freshness is decided on the tokio clock.
//!
//! # Example
//! ```
//! use std::time::Duration;
//! use heatsink::hot::cache::{MicroCache, Source};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cache = MicroCache::<String, i64>::builder()
//!     .ttl(Duration::from_secs(1))
//!     .stale_until(Duration::from_secs(3))
//!     .max_entries(10_000)
//!     .build();
//! // The loader gets the key and reads the store (here: a constant).
//! let read = |n: i64| move |_post: String| async move { Ok::<_, std::io::Error>(n) };
//!
//! let first = cache.get_or_load("p9", read(42)).await?;
//! assert_eq!((first.value, first.source), (42, Source::Loaded));
//! let again = cache.get_or_load("p9", read(43)).await?;
//! assert_eq!((again.value, again.source), (42, Source::Fresh));
//!
//! cache.invalidate("p9").await; // a like was written through this router
//! let after = cache.get_or_load("p9", read(44)).await?;
//! assert_eq!((after.value, after.source), (44, Source::Loaded));
//! assert_eq!(cache.stats().snapshot().loads, 2);
//! # Ok(())
//! # }
//! ```

use std::any::Any;
use std::borrow::Borrow;
use std::future::Future;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use moka::Equivalent;
use moka::ops::compute::Op;
use tokio::time::Instant;

/// Default time an entry is served as fresh: 1 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(1);
/// Default age up to which an entry is served stale while it is refreshed: 3 s.
pub const DEFAULT_STALE_UNTIL: Duration = Duration::from_secs(3);
/// Default bound on cached values: 10,000.
pub const DEFAULT_MAX_ENTRIES: u64 = 10_000;
/// Default number of write-epoch slots keys hash into: 1,024 (8 KiB).
pub const DEFAULT_EPOCH_SLOTS: usize = 1024;

/// Errors of a cached read: the loader's, shared by every caller that waited on it.
#[derive(Debug, thiserror::Error)]
pub enum CacheError<E> {
    /// The loader returned an error; nothing was cached and the next read loads again.
    #[error("loader failed: {0}")]
    Load(#[source] Arc<E>),
    /// The loader panicked; nothing was cached and the next read loads again.
    #[error("loader panicked: {0}")]
    LoaderPanicked(String),
}

impl<E> Clone for CacheError<E> {
    fn clone(&self) -> Self {
        match self {
            Self::Load(e) => Self::Load(Arc::clone(e)),
            Self::LoaderPanicked(m) => Self::LoaderPanicked(m.clone()),
        }
    }
}

/// Where a read's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// From memory, at most `ttl` old.
    Fresh,
    /// From memory, older than `ttl` and at most `stale_until`; a refresh is running.
    Stale,
    /// From the store: this call ran the loader.
    Loaded,
    /// From the store: this call waited on a load another call ran (coalesced).
    Joined,
}

impl Source {
    /// The value of the `x-heatsink-cache` response header: `hit`, `stale` or `miss`.
    pub fn as_header(self) -> &'static str {
        match self {
            Self::Fresh => "hit",
            Self::Stale => "stale",
            Self::Loaded | Self::Joined => "miss",
        }
    }

    /// Whether the value was served from memory without waiting on the store.
    pub fn from_memory(self) -> bool {
        matches!(self, Self::Fresh | Self::Stale)
    }
}

/// A read's value with where it came from and how old it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup<V> {
    /// The value.
    pub value: V,
    /// Where it came from.
    pub source: Source,
    /// Time since the load that produced it began.
    pub age: Duration,
}

/// Counters for metrics and benchmarks (relaxed atomics; read them with [`CacheStats::snapshot`]).
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Reads served fresh from memory.
    pub hits: AtomicU64,
    /// Reads served stale from memory.
    pub stale_hits: AtomicU64,
    /// [`MicroCache::get_or_load`] calls that found no servable entry and waited on a load.
    pub misses: AtomicU64,
    /// [`MicroCache::read_fresh`] calls.
    pub fresh_reads: AtomicU64,
    /// Loader calls: store fetches, background refreshes included.
    pub loads: AtomicU64,
    /// Calls that waited on a load another call ran instead of running their own.
    pub joins: AtomicU64,
    /// Background refreshes started.
    pub refreshes: AtomicU64,
    /// Loads that failed or panicked.
    pub load_errors: AtomicU64,
    /// [`MicroCache::invalidate`] calls.
    pub invalidations: AtomicU64,
}

/// A copy of [`CacheStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Reads served fresh from memory.
    pub hits: u64,
    /// Reads served stale from memory.
    pub stale_hits: u64,
    /// `get_or_load` calls that waited on a load.
    pub misses: u64,
    /// `read_fresh` calls.
    pub fresh_reads: u64,
    /// Loader calls (store fetches).
    pub loads: u64,
    /// Calls that shared another call's load.
    pub joins: u64,
    /// Background refreshes started.
    pub refreshes: u64,
    /// Loads that failed or panicked.
    pub load_errors: u64,
    /// Invalidations.
    pub invalidations: u64,
}

impl CacheStats {
    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            hits: get(&self.hits),
            stale_hits: get(&self.stale_hits),
            misses: get(&self.misses),
            fresh_reads: get(&self.fresh_reads),
            loads: get(&self.loads),
            joins: get(&self.joins),
            refreshes: get(&self.refreshes),
            load_errors: get(&self.load_errors),
            invalidations: get(&self.invalidations),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Builder of a [`MicroCache`]; every default is the one the likes API runs with.
#[derive(Debug, Clone)]
pub struct MicroCacheBuilder<K, V> {
    ttl: Duration,
    stale_until: Duration,
    max_entries: u64,
    epoch_slots: usize,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> MicroCacheBuilder<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// How long an entry is served as fresh, from the start of its load (default 1 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Age (from the start of the load) up to which an entry is still served, stale, while one
    /// refresh runs: the staleness bound (default 3 s; raised to `ttl` if below it).
    pub fn stale_until(mut self, age: Duration) -> Self {
        self.stale_until = age;
        self
    }

    /// Most values held (default 10,000); beyond it the least valuable are evicted.
    pub fn max_entries(mut self, n: u64) -> Self {
        self.max_entries = n.max(1);
        self
    }

    /// Write-epoch slots keys hash into (default 1,024, rounded up to a power of two): a write
    /// also drops entries of keys sharing its slot, costing them one extra load, never a stale read.
    pub fn epoch_slots(mut self, n: usize) -> Self {
        self.epoch_slots = n.max(1);
        self
    }

    /// The cache.
    pub fn build(self) -> MicroCache<K, V> {
        let stale_until = self.stale_until.max(self.ttl);
        let slots = self.epoch_slots.next_power_of_two();
        // moka's expiry runs on the real clock and only frees memory: an entry moka still holds
        // past `stale_until` is refused by the age check on the tokio clock.
        let store = |name: &str| {
            moka::future::Cache::builder()
                .name(name)
                .max_capacity(self.max_entries)
                .time_to_live(stale_until)
                .build()
        };
        MicroCache {
            inner: Arc::new(Inner {
                ttl: self.ttl,
                stale_until,
                entries: store("heatsink-micro-cache"),
                flights: store("heatsink-micro-cache-flights"),
                epochs: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                hasher: RandomState::new(),
                completed: AtomicU64::new(0),
                stats: CacheStats::default(),
            }),
        }
    }
}

/// A bounded async cache of hot keys: TTL, stale-while-revalidate, single-flight, write epochs.
///
/// Cloning is cheap and shares the cache. See the [module docs](self) for the guarantees.
pub struct MicroCache<K, V> {
    inner: Arc<Inner<K, V>>,
}

impl<K, V> Clone for MicroCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, V> std::fmt::Debug for MicroCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicroCache")
            .field("ttl", &self.inner.ttl)
            .field("stale_until", &self.inner.stale_until)
            .field("stats", &self.inner.stats.snapshot())
            .finish_non_exhaustive()
    }
}

struct Inner<K, V> {
    ttl: Duration,
    stale_until: Duration,
    /// Servable values, keyed by (key, write epoch at the start of their load).
    entries: moka::future::Cache<EpochKey<K>, Arc<Entry<V>>>,
    /// Single-flight of loads; a completed load is history and is dropped before a new read
    /// would join it (see `MicroCache::load`).
    flights: moka::future::Cache<EpochKey<K>, Arc<Entry<V>>>,
    /// Write epochs, one per slot; a key's epoch is its slot's.
    epochs: Box<[AtomicU64]>,
    hasher: RandomState,
    /// Loads completed so far; an entry's `done` is its place in that order.
    completed: AtomicU64,
    stats: CacheStats,
}

struct Entry<V> {
    value: V,
    /// When the load that produced the value began.
    loaded_at: Instant,
    /// 1 + the number of loads completed before this one.
    done: u64,
    /// A background refresh of this entry is running (or has replaced it).
    refreshing: AtomicBool,
}

/// The moka key: a key and the write epoch its load began in.
#[derive(Clone, PartialEq, Eq)]
struct EpochKey<K> {
    key: K,
    epoch: u64,
}

impl<K: Hash> Hash for EpochKey<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
        state.write_u64(self.epoch);
    }
}

/// A borrowed [`EpochKey`], so a hit allocates nothing; hashes exactly like it.
struct EpochKeyRef<'a, Q: ?Sized> {
    key: &'a Q,
    epoch: u64,
}

impl<Q: Hash + ?Sized> Hash for EpochKeyRef<'_, Q> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
        state.write_u64(self.epoch);
    }
}

impl<K, Q> Equivalent<EpochKey<K>> for EpochKeyRef<'_, Q>
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    fn equivalent(&self, other: &EpochKey<K>) -> bool {
        self.epoch == other.epoch && self.key == other.key.borrow()
    }
}

impl<K, V> Inner<K, V> {
    fn slot<Q: Hash + ?Sized>(&self, key: &Q) -> &AtomicU64 {
        // `epochs.len()` is a power of two ≥ 1; Borrow's contract makes &str and String agree.
        let i = self.hasher.hash_one(key) as usize & (self.epochs.len() - 1);
        &self.epochs[i]
    }
}

/// Resets an entry's refresh flag unless the refresh succeeded, so a failed, panicked or
/// cancelled refresh lets the next stale read try again.
struct RefreshGuard<V> {
    entry: Arc<Entry<V>>,
    armed: bool,
}

impl<V> Drop for RefreshGuard<V> {
    fn drop(&mut self) {
        if self.armed {
            self.entry.refreshing.store(false, Ordering::Release);
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

impl<K, V> MicroCache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A builder with the defaults: ttl 1 s, stale until 3 s, 10,000 entries, 1,024 epoch slots.
    pub fn builder() -> MicroCacheBuilder<K, V> {
        MicroCacheBuilder {
            ttl: DEFAULT_TTL,
            stale_until: DEFAULT_STALE_UNTIL,
            max_entries: DEFAULT_MAX_ENTRIES,
            epoch_slots: DEFAULT_EPOCH_SLOTS,
            _types: PhantomData,
        }
    }

    /// How long an entry is served as fresh.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The staleness bound: the oldest value (from the start of its load) ever returned.
    pub fn stale_until(&self) -> Duration {
        self.inner.stale_until
    }

    /// The counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    /// Values held now (approximate: moka applies evictions in batches).
    pub fn entry_count(&self) -> u64 {
        self.inner.entries.entry_count()
    }

    /// The value of `key`: from memory when at most `stale_until` old (starting one background
    /// refresh once it is older than `ttl`), else from `loader`, called once for all concurrent
    /// callers. `loader` gets the owned key; it must be `'static` because a refresh outlives
    /// the call that starts it (on the current Tokio runtime, via `tokio::spawn`).
    pub async fn get_or_load<Q, F, Fut, E>(
        &self,
        key: &Q,
        loader: F,
    ) -> Result<Lookup<V>, CacheError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce(K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let inner = &*self.inner;
        let epoch = inner.slot(key).load(Ordering::Acquire);
        if let Some(entry) = inner.entries.get(&EpochKeyRef { key, epoch }).await {
            let age = entry.loaded_at.elapsed();
            if age <= inner.ttl {
                bump(&inner.stats.hits);
                return Ok(Lookup {
                    value: entry.value.clone(),
                    source: Source::Fresh,
                    age,
                });
            }
            if age <= inner.stale_until {
                bump(&inner.stats.stale_hits);
                if entry
                    .refreshing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    bump(&inner.stats.refreshes);
                    self.spawn_refresh(key.to_owned(), epoch, Arc::clone(&entry), loader);
                }
                return Ok(Lookup {
                    value: entry.value.clone(),
                    source: Source::Stale,
                    age,
                });
            }
        }
        bump(&inner.stats.misses);
        // Boxed: moka's single-flight futures would make every hit's future ~3.8 KB to move.
        Box::pin(self.load(key.to_owned(), epoch, loader)).await
    }

    /// The value of `key` from the store, never from memory: joins a load of `key` only while
    /// it is in flight and began after the key's last [`invalidate`](Self::invalidate), else
    /// calls `loader`. The value also refreshes the cached entry.
    pub async fn read_fresh<Q, F, Fut, E>(
        &self,
        key: &Q,
        loader: F,
    ) -> Result<Lookup<V>, CacheError<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Send + Sync + 'static,
    {
        bump(&self.inner.stats.fresh_reads);
        let epoch = self.inner.slot(key).load(Ordering::Acquire);
        self.load(key.to_owned(), epoch, loader).await
    }

    /// Drops `key` after a local write: every read that starts after this returns loads anew
    /// and joins no load that began before. Call it once the write is acknowledged.
    pub async fn invalidate<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let inner = &*self.inner;
        bump(&inner.stats.invalidations);
        let old = inner.slot(key).fetch_add(1, Ordering::AcqRel);
        // The epoch bump is what guarantees freshness; this only frees the memory now.
        inner
            .entries
            .invalidate(&EpochKeyRef { key, epoch: old })
            .await;
    }

    fn spawn_refresh<F, Fut, E>(&self, key: K, epoch: u64, stale: Arc<Entry<V>>, loader: F)
    where
        F: FnOnce(K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let cache = self.clone();
        tokio::spawn(async move {
            let mut guard = RefreshGuard {
                entry: stale,
                armed: true,
            };
            match cache.load(key, epoch, loader).await {
                Ok(_) => guard.armed = false,
                // The error itself reaches no caller: log that it happened (E need not be Display).
                Err(CacheError::Load(_)) => {
                    tracing::warn!("micro-cache refresh: the loader failed; serving stale");
                }
                Err(CacheError::LoaderPanicked(m)) => {
                    tracing::warn!(panic = %m, "micro-cache refresh: the loader panicked; serving stale");
                }
            }
        });
    }

    /// One load of (`key`, `epoch`) through moka's single-flight.
    async fn load<F, Fut, E>(
        &self,
        key: K,
        epoch: u64,
        loader: F,
    ) -> Result<Lookup<V>, CacheError<E>>
    where
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: Send + Sync + 'static,
    {
        let inner = &*self.inner;
        let started = inner.completed.load(Ordering::Acquire);
        let fkey = EpochKey { key, epoch };
        // moka's single-flight hands a completed value to later callers too; a load that
        // completed before this call began is history, not a read in flight: drop it first.
        inner
            .flights
            .entry(fkey.clone())
            .and_compute_with(|current| {
                let op = match current {
                    Some(c) if c.value().done <= started => Op::Remove,
                    _ => Op::Nop,
                };
                std::future::ready(op)
            })
            .await;
        let led = AtomicBool::new(false);
        let store_key = fkey.clone();
        let load_key = fkey.key.clone();
        let init = async {
            led.store(true, Ordering::Relaxed);
            bump(&inner.stats.loads);
            let began = Instant::now();
            let loaded = AssertUnwindSafe(async move { loader(load_key).await })
                .catch_unwind()
                .await;
            match loaded {
                Ok(Ok(value)) => {
                    let done = inner.completed.fetch_add(1, Ordering::AcqRel) + 1;
                    let entry = Arc::new(Entry {
                        value,
                        loaded_at: began,
                        done,
                        refreshing: AtomicBool::new(false),
                    });
                    // A write since the load began made it unreachable: do not store it.
                    if inner.slot(&store_key.key).load(Ordering::Acquire) == store_key.epoch {
                        inner.entries.insert(store_key, Arc::clone(&entry)).await;
                    }
                    Ok(entry)
                }
                Ok(Err(e)) => {
                    bump(&inner.stats.load_errors);
                    Err(CacheError::Load(Arc::new(e)))
                }
                Err(panic) => {
                    bump(&inner.stats.load_errors);
                    Err(CacheError::LoaderPanicked(panic_message(&*panic)))
                }
            }
        };
        let result = inner.flights.try_get_with(fkey, init).await;
        let source = if led.load(Ordering::Relaxed) {
            Source::Loaded
        } else {
            bump(&inner.stats.joins);
            Source::Joined
        };
        match result {
            Ok(entry) => Ok(Lookup {
                value: entry.value.clone(),
                source,
                age: entry.loaded_at.elapsed(),
            }),
            Err(e) => Err((*e).clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::AtomicU64;

    use futures::future::join_all;
    use proptest::prelude::*;
    use tokio::time::sleep;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn cache() -> MicroCache<String, u64> {
        MicroCache::builder().build()
    }

    /// A loader returning `value` after `latency`, counting its calls in `calls`.
    fn loader(
        calls: &Arc<AtomicU64>,
        value: u64,
        latency: Duration,
    ) -> impl FnOnce(
        String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, Infallible>> + Send>>
    + Send
    + 'static {
        let calls = Arc::clone(calls);
        move |_key| {
            Box::pin(async move {
                calls.fetch_add(1, Ordering::SeqCst);
                sleep(latency).await;
                Ok(value)
            })
        }
    }

    fn calls() -> Arc<AtomicU64> {
        Arc::new(AtomicU64::new(0))
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_within_the_ttl_is_a_fresh_hit() {
        let (c, n) = (cache(), calls());
        let first = c
            .get_or_load("p9", loader(&n, 1, ms(5)))
            .await
            .expect("load");
        assert_eq!((first.value, first.source), (1, Source::Loaded));
        sleep(ms(900)).await;
        let hit = c
            .get_or_load("p9", loader(&n, 2, ms(5)))
            .await
            .expect("hit");
        assert_eq!((hit.value, hit.source), (1, Source::Fresh));
        assert!(hit.age <= DEFAULT_TTL);
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let s = c.stats().snapshot();
        assert_eq!((s.hits, s.misses, s.loads), (1, 1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn between_ttl_and_stale_until_100_readers_get_stale_and_start_one_refresh() {
        let (c, n) = (cache(), calls());
        c.get_or_load("p9", loader(&n, 1, ms(0)))
            .await
            .expect("load");
        sleep(ms(2_000)).await;
        let reads = (0..100).map(|_| c.get_or_load("p9", loader(&n, 2, ms(100))));
        for r in join_all(reads).await {
            let r = r.expect("stale read");
            assert_eq!((r.value, r.source), (1, Source::Stale));
        }
        sleep(ms(150)).await; // the refresh (100 ms) lands
        assert_eq!(
            n.load(Ordering::SeqCst),
            2,
            "one initial load and exactly one refresh"
        );
        assert_eq!(c.stats().snapshot().refreshes, 1);
        let after = c
            .get_or_load("p9", loader(&n, 3, ms(0)))
            .await
            .expect("hit");
        assert_eq!((after.value, after.source), (2, Source::Fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn after_stale_until_concurrent_misses_wait_on_one_load() {
        let (c, n) = (cache(), calls());
        c.get_or_load("p9", loader(&n, 1, ms(0)))
            .await
            .expect("load");
        sleep(ms(3_500)).await;
        let reads = (0..50).map(|_| c.get_or_load("p9", loader(&n, 2, ms(50))));
        let results: Vec<_> = join_all(reads)
            .await
            .into_iter()
            .map(|r| r.expect("read"))
            .collect();
        assert!(
            results.iter().all(|r| r.value == 2),
            "no expired value is served"
        );
        let led = results
            .iter()
            .filter(|r| r.source == Source::Loaded)
            .count();
        let joined = results
            .iter()
            .filter(|r| r.source == Source::Joined)
            .count();
        assert_eq!((led, joined), (1, 49));
        assert_eq!(
            n.load(Ordering::SeqCst),
            2,
            "single-flight: one loader call for 50 misses"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_loader_fails_every_waiter_and_the_next_read_loads_again() {
        let (c, n) = (cache(), calls());
        let panicking = |n: &Arc<AtomicU64>| {
            let n = Arc::clone(n);
            move |_key: String| async move {
                n.fetch_add(1, Ordering::SeqCst);
                sleep(ms(10)).await;
                if n.load(Ordering::SeqCst) > 0 {
                    panic!("store client bug");
                }
                Ok::<u64, Infallible>(0)
            }
        };
        let reads = (0..10).map(|_| c.get_or_load("p9", panicking(&n)));
        for r in join_all(reads).await {
            match r {
                Err(CacheError::LoaderPanicked(m)) => assert!(m.contains("store client bug")),
                other => panic!("expected the panic as an error, got {other:?}"),
            }
        }
        assert_eq!(
            n.load(Ordering::SeqCst),
            1,
            "waiters shared the one failed load"
        );
        let next = c
            .get_or_load("p9", loader(&n, 7, ms(1)))
            .await
            .expect("not wedged");
        assert_eq!((next.value, next.source), (7, Source::Loaded));
        assert_eq!(c.stats().snapshot().load_errors, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_loader_does_not_strand_its_waiters() {
        let (c, n) = (cache(), calls());
        let leader = tokio::spawn({
            let (c, l) = (c.clone(), loader(&n, 1, ms(1_000)));
            async move { c.get_or_load("p9", l).await }
        });
        sleep(ms(10)).await; // the leader's load is in flight
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (c, l) = (c.clone(), loader(&n, 2, ms(20)));
                tokio::spawn(async move { c.get_or_load("p9", l).await })
            })
            .collect();
        sleep(ms(10)).await;
        leader.abort();
        for w in waiters {
            let r = w.await.expect("task").expect("a waiter completes");
            assert_eq!(r.value, 2, "a waiter took over the load");
        }
        assert_eq!(
            n.load(Ordering::SeqCst),
            2,
            "the cancelled load and one takeover"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_invalidate_the_next_read_loads() {
        let (c, n) = (cache(), calls());
        c.get_or_load("p9", loader(&n, 1, ms(0)))
            .await
            .expect("load");
        c.invalidate("p9").await;
        let r = c
            .get_or_load("p9", loader(&n, 2, ms(0)))
            .await
            .expect("load");
        assert_eq!((r.value, r.source), (2, Source::Loaded));
        let other = c
            .get_or_load("p1", loader(&n, 3, ms(0)))
            .await
            .expect("load");
        assert_eq!(other.value, 3);
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    /// The store: a version per key, bumped by each write; a load reads it when it begins.
    fn versioned(
        store: &Arc<AtomicU64>,
        latency: Duration,
    ) -> impl FnOnce(
        String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, Infallible>> + Send>>
    + Send
    + 'static {
        let store = Arc::clone(store);
        move |_key| {
            Box::pin(async move {
                let v = store.load(Ordering::SeqCst);
                sleep(latency).await;
                Ok(v)
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_read_after_a_write_does_not_join_a_load_that_began_before_it() {
        let (c, store) = (cache(), Arc::new(AtomicU64::new(0)));
        let before = tokio::spawn({
            let (c, l) = (c.clone(), versioned(&store, ms(1_000)));
            async move { c.read_fresh("p9", l).await }
        });
        sleep(ms(100)).await;
        store.fetch_add(1, Ordering::SeqCst); // the like is durable...
        c.invalidate("p9").await; // ...and dropped from this router's cache
        let after = c
            .read_fresh("p9", versioned(&store, ms(10)))
            .await
            .expect("read");
        assert_eq!((after.value, after.source), (1, Source::Loaded));
        let before = before.await.expect("task").expect("read");
        assert_eq!(
            before.value, 0,
            "the older read saw the store before the write"
        );
        let cached = c
            .get_or_load("p9", versioned(&store, ms(0)))
            .await
            .expect("hit");
        assert_eq!((cached.value, cached.source), (1, Source::Fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_after_a_write_does_not_join_a_miss_that_began_before_it() {
        let (c, store) = (cache(), Arc::new(AtomicU64::new(0)));
        let before = tokio::spawn({
            let (c, l) = (c.clone(), versioned(&store, ms(1_000)));
            async move { c.get_or_load("p9", l).await }
        });
        sleep(ms(100)).await;
        store.fetch_add(1, Ordering::SeqCst);
        c.invalidate("p9").await;
        let after = c
            .get_or_load("p9", versioned(&store, ms(10)))
            .await
            .expect("read");
        assert_eq!((after.value, after.source), (1, Source::Loaded));
        assert_eq!(before.await.expect("task").expect("read").value, 0);
        // The older load landed after the write: it must not have replaced the newer value.
        let hit = c
            .get_or_load("p9", versioned(&store, ms(0)))
            .await
            .expect("hit");
        assert_eq!((hit.value, hit.source), (1, Source::Fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_reads_share_a_load_in_flight_but_never_a_completed_one() {
        let (c, n) = (cache(), calls());
        let reads = (0..5).map(|_| c.read_fresh("p9", loader(&n, 1, ms(50))));
        let results: Vec<_> = join_all(reads)
            .await
            .into_iter()
            .map(|r| r.expect("read"))
            .collect();
        assert_eq!(
            results
                .iter()
                .filter(|r| r.source == Source::Joined)
                .count(),
            4
        );
        assert_eq!(n.load(Ordering::SeqCst), 1, "coalesced into one store read");
        let again = c
            .read_fresh("p9", loader(&n, 2, ms(50)))
            .await
            .expect("read");
        assert_eq!(
            (again.value, again.source),
            (2, Source::Loaded),
            "never answered from memory"
        );
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_lets_a_later_stale_read_retry() {
        let (c, n) = (cache(), calls());
        c.get_or_load("p9", loader(&n, 1, ms(0)))
            .await
            .expect("load");
        sleep(ms(1_500)).await;
        let failing = |_key: String| async { Err::<u64, &'static str>("throttled") };
        let r = c.get_or_load("p9", failing).await.expect("stale");
        assert_eq!((r.value, r.source), (1, Source::Stale));
        sleep(ms(10)).await; // the refresh fails
        let r = c
            .get_or_load("p9", loader(&n, 2, ms(0)))
            .await
            .expect("stale");
        assert_eq!((r.value, r.source), (1, Source::Stale));
        sleep(ms(10)).await;
        let s = c.stats().snapshot();
        assert_eq!((s.refreshes, s.load_errors), (2, 1));
        let r = c
            .get_or_load("p9", loader(&n, 3, ms(0)))
            .await
            .expect("hit");
        assert_eq!((r.value, r.source), (2, Source::Fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn a_load_error_reaches_the_caller_and_is_not_cached() {
        let c = cache();
        let r = c
            .get_or_load("p9", |_key| async {
                Err::<u64, &'static str>("no such table")
            })
            .await;
        assert!(matches!(r, Err(CacheError::Load(e)) if *e == "no such table"));
        let r = c
            .get_or_load("p9", |_key| async { Ok::<_, Infallible>(5) })
            .await;
        assert_eq!(r.expect("load").source, Source::Loaded);
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded_by_max_entries() {
        let c = MicroCache::<u32, u32>::builder().max_entries(50).build();
        for k in 0..1_000u32 {
            c.get_or_load(&k, move |k| async move { Ok::<_, Infallible>(k) })
                .await
                .expect("load");
        }
        c.inner.entries.run_pending_tasks().await;
        c.inner.flights.run_pending_tasks().await;
        assert!(c.entry_count() <= 50, "{} entries", c.entry_count());
        assert!(c.inner.flights.entry_count() <= 50);
    }

    #[test]
    fn a_hit_costs_little_more_than_a_moka_get_to_move() {
        let c = cache();
        let hit = c.get_or_load("p9", |_key| async { Ok::<_, Infallible>(1) });
        let moka_get = c.inner.entries.get(&EpochKeyRef {
            key: "p9",
            epoch: 0,
        });
        let (ours, moka) = (
            std::mem::size_of_val(&hit),
            std::mem::size_of_val(&moka_get),
        );
        assert!(
            ours <= moka + 256,
            "get_or_load future {ours} B vs moka get {moka} B"
        );
    }

    #[derive(Debug, Clone)]
    enum Step {
        Read { key: u8, latency_ms: u64 },
        ReadFresh { key: u8, latency_ms: u64 },
        Write { key: u8 },
        Advance { ms: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..3u8, 0..400u64).prop_map(|(key, latency_ms)| Step::Read { key, latency_ms }),
            1 => (0..3u8, 0..400u64).prop_map(|(key, latency_ms)| Step::ReadFresh { key, latency_ms }),
            2 => (0..3u8).prop_map(|key| Step::Write { key }),
            3 => (0..1_500u64).prop_map(|ms| Step::Advance { ms }),
        ]
    }

    /// Runs `steps` against a cache and a versioned store; returns the first violation.
    async fn run_model(steps: Vec<Step>) -> Result<(), String> {
        type Read = (
            u8,
            u64,
            Result<Lookup<(u64, Instant)>, CacheError<Infallible>>,
            Instant,
        );
        // Two epoch slots for three keys: a write also drops its slot-mate, never wrongly keeps.
        let cache = MicroCache::<u8, (u64, Instant)>::builder()
            .epoch_slots(2)
            .build();
        let store: Arc<[AtomicU64; 3]> = Arc::new([0, 0, 0].map(AtomicU64::new));
        let mut written = [0u64; 3];
        let mut reads: Vec<tokio::task::JoinHandle<Read>> = vec![];
        for step in steps {
            match step {
                Step::Read { key, latency_ms } | Step::ReadFresh { key, latency_ms } => {
                    let fresh = matches!(step, Step::ReadFresh { .. });
                    let (cache, store, min) =
                        (cache.clone(), Arc::clone(&store), written[key as usize]);
                    let load = move |k: u8| async move {
                        let v = store[k as usize].load(Ordering::SeqCst);
                        let at = Instant::now();
                        sleep(ms(latency_ms)).await;
                        Ok::<_, Infallible>((v, at))
                    };
                    reads.push(tokio::spawn(async move {
                        let r = if fresh {
                            cache.read_fresh(&key, load).await
                        } else {
                            cache.get_or_load(&key, load).await
                        };
                        (key, min, r, Instant::now())
                    }));
                }
                Step::Write { key } => {
                    written[key as usize] = store[key as usize].fetch_add(1, Ordering::SeqCst) + 1;
                    cache.invalidate(&key).await;
                }
                Step::Advance { ms: n } => sleep(ms(n)).await,
            }
            tokio::task::yield_now().await;
        }
        sleep(ms(10_000)).await;
        for read in reads {
            let (key, min, r, returned) = read.await.map_err(|e| format!("read task: {e}"))?;
            let lookup = r.map_err(|e| format!("key {key}: {e}"))?;
            let (version, loaded_at) = lookup.value;
            if version < min {
                return Err(format!(
                    "key {key}: got version {version} after a local write of {min} ({:?})",
                    lookup.source
                ));
            }
            let age = returned - loaded_at;
            if age > cache.stale_until() {
                return Err(format!(
                    "key {key}: served a value {age:?} old ({:?})",
                    lookup.source
                ));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn no_read_is_older_than_the_bound_or_older_than_a_local_write(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            let verdict = rt.block_on(run_model(steps));
            prop_assert!(verdict.is_ok(), "{}", verdict.err().unwrap_or_default());
        }
    }
}
