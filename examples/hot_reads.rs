//! hot_reads: an HTTP-ish handler that serves a hot key's reads from the micro-cache and
//! refuses excess writes with 429 + Retry-After through the admission gate.
//!
//! `GET /posts/{id}/likes` reads through a [`MicroCache`] when the hot-key directory says the
//! key is `cache`d (one store load per key per TTL, however many readers; `x-heatsink-cache:
//! hit|stale|miss`). `POST /posts/{id}/likes` asks the [`Gate`] first (per-post and per-user
//! token buckets) and drops the cached entry after a write, so a router reads its own writes.
//! The store is an in-memory map with a 20 ms delay, so this runs anywhere; exits non-zero if
//! the cache or the gate misbehaves.
//!
//! ```sh
//! cargo run -p heatsink-examples --example hot_reads     # no AWS, no environment needed
//! ```
//!
//! In a service, the store is DynamoDB (e.g. `CounterStore::read`) and the gate gets the
//! directory (`Gate::new(config, Some(Arc::new(cached_directory)))`) so `limit` entries apply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use heatsink::clock::now_secs;
use heatsink::hot::Gate;
use heatsink::hot::cache::MicroCache;
use heatsink::hot::guard::{AdmissionConfig, Limit};
use heatsink::hot::{Entry, Snapshot};
use heatsink_examples::BoxError;

/// A request, as a router would hand it over.
struct Request {
    method: &'static str,
    post: String,
    user: String,
}

/// A response: status, headers, body.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

/// The likes API: a store (here a map and a load counter), the cache, the gate, the directory.
struct Api {
    store: Arc<Mutex<HashMap<String, i64>>>,
    loads: Arc<AtomicU64>,
    cache: MicroCache<String, i64>,
    gate: Gate,
    directory: Snapshot,
}

impl Api {
    async fn handle(&self, req: Request) -> Result<Response, BoxError> {
        let respond = |status, headers, body: String| {
            Ok(Response {
                status,
                headers,
                body,
            })
        };
        if req.method == "POST" {
            let decision = self.gate.check(&req.post, &req.user).await?;
            if let Some(secs) = decision.retry_after_secs() {
                return respond(
                    429,
                    vec![("retry-after", secs.to_string())],
                    "slow down".into(),
                );
            }
            *self
                .store
                .lock()
                .map_err(|_| "store poisoned")?
                .entry(req.post.clone())
                .or_default() += 1;
            self.cache.invalidate(&req.post).await;
            return respond(201, vec![], "liked".into());
        }
        let (store, loads) = (Arc::clone(&self.store), Arc::clone(&self.loads));
        let load = move |post: String| async move {
            loads.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await; // a DynamoDB round trip
            let count = store
                .lock()
                .map_err(|_| std::io::Error::other("store poisoned"))?
                .get(&post)
                .copied();
            Ok::<_, std::io::Error>(count.unwrap_or(0))
        };
        if !self.directory.is_cached(&req.post) {
            return respond(200, vec![], load(req.post).await?.to_string());
        }
        let hit = self.cache.get_or_load(&req.post, load).await?;
        let headers = vec![("x-heatsink-cache", hit.source.as_header().to_owned())];
        respond(200, headers, hit.value.to_string())
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let now = now_secs();
    let api = Arc::new(Api {
        store: Arc::default(),
        loads: Arc::default(),
        cache: MicroCache::builder().ttl(Duration::from_secs(1)).build(),
        // 100 likes/s per post, 3/s (bursts of 3) per user.
        gate: Gate::new(
            AdmissionConfig::default()
                .key_limit(Limit::per_second(100, 100)?)
                .tenant_limit(Limit::per_second(3, 3)?),
            None,
        )?,
        directory: Snapshot::new([Entry::cache("p9", "read-hot", now, now + 600)], now),
    });
    let req = |method, user: &str| Request {
        method,
        post: "p9".into(),
        user: user.into(),
    };

    // One user likes p9 five times in a row: three pass, then 429 with Retry-After.
    for _ in 0..5 {
        let r = api.handle(req("POST", "u1")).await?;
        println!("POST p9 by u1 -> {} {:?} {}", r.status, r.headers, r.body);
    }
    // 200 concurrent reads of p9 (one store load: the others join it), then 20 more (memory).
    let mut sources: HashMap<String, usize> = HashMap::new();
    for wave in [200, 20] {
        let reads: Vec<_> = (0..wave)
            .map(|_| {
                let api = Arc::clone(&api);
                tokio::spawn(async move { api.handle(req("GET", "reader")).await })
            })
            .collect();
        for read in reads {
            let r = read.await??;
            if r.body != "3" {
                return Err(format!("read {} likes, expected 3", r.body).into());
            }
            let source = r.headers.first().map_or("uncached", |(_, v)| v.as_str());
            *sources.entry(source.to_owned()).or_default() += 1;
        }
    }
    let loads = api.loads.load(Ordering::Relaxed);
    println!("220 GETs of p9 -> x-heatsink-cache {sources:?}; store loads: {loads}");
    if loads != 1 {
        return Err(format!("{loads} store loads for one hot key, expected 1").into());
    }
    Ok(())
}
