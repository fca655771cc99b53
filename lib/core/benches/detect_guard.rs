//! Side-by-side benchmark of `detect` and `guard` against `heavykeeper` and `governor`.
//!
//! Sampler: a Zipf(1.1) stream of 10,000,000 requests over 1,000,000 distinct keys, sampled 1 in
//! 100, into our Space-Saving and into `heavykeeper::TopK`, each given at most 64 KiB. Printed:
//! recall@10 and precision@10 of each reported top 10 against the true top 10 of the full stream,
//! the mean relative error of their counts (×100) on the true top 10, and, timed by criterion,
//! the cost of one `observe`/`add` over the sampled stream.
//!
//! Limiter: criterion times one `check` of ours and of `governor`'s `RateLimiter::keyed`
//! (DashMap store, quanta clock) over a working set of 10,000 keys; then each sees 10,000,000
//! distinct keys once, outside the timing loop, and the resident-set growth (VmRSS) is printed
//! for both, measured the same way, with our footprint method and governor's `len()`.
//!
//! `cargo bench -p heatsink-core --bench detect_guard` runs the full sizes; without `--bench`
//! (e.g. `cargo test --benches`) the sizes shrink 50× so a debug build finishes quickly.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use governor::{Quota, RateLimiter};
use heatsink_core::detect::{Access, Detector, DetectorConfig, SpaceSaving};
use heatsink_core::guard::{Admission, AdmissionConfig, Limit};
use heavykeeper::TopK;

/// Memory budget of each top-K sketch.
const BUDGET_BYTES: usize = 64 * 1024;
/// Every key is `post#` and 7 digits.
const KEY_BYTES: usize = 12;
/// Sampling: 1 request in 100.
const SAMPLE_ONE_IN: u32 = 100;
/// Top list compared.
const TOP: usize = 10;
/// Zipf exponent.
const ZIPF_S: f64 = 1.1;

/// SplitMix64: a small deterministic PRNG (no `rand` needed).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The sampler workload: key names, exact counts of the full stream, and the sampled stream.
struct Workload {
    keys: Vec<String>,
    events: usize,
    true_counts: Vec<u64>,
    sampled: Vec<u32>,
}

impl Workload {
    fn new(events: usize, distinct: usize) -> Self {
        let started = Instant::now();
        let keys: Vec<String> = (0..distinct).map(|r| format!("post#{r:07}")).collect();
        // Inverse-CDF table of Zipf(s) over ranks 1..=distinct.
        let mut cdf = Vec::with_capacity(distinct);
        let mut sum = 0.0;
        for rank in 1..=distinct {
            sum += (rank as f64).powf(-ZIPF_S);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        let detector = Detector::new(DetectorConfig {
            sample_one_in: SAMPLE_ONE_IN,
            ..DetectorConfig::default()
        })
        .expect("valid config");
        let mut rng = SplitMix(0x5EED);
        let mut true_counts = vec![0u64; distinct];
        let mut sampled = Vec::with_capacity(events / SAMPLE_ONE_IN as usize + 1024);
        for _ in 0..events {
            let u = rng.unit();
            let key = cdf.partition_point(|&c| c < u).min(distinct - 1);
            true_counts[key] += 1;
            if detector.samples(rng.next()) {
                sampled.push(key as u32);
            }
        }
        println!(
            "workload: {events} requests over {distinct} keys, Zipf({ZIPF_S}), {} sampled (1 in {SAMPLE_ONE_IN}), built in {:.1} s",
            sampled.len(),
            started.elapsed().as_secs_f64()
        );
        Self {
            keys,
            events,
            true_counts,
            sampled,
        }
    }

    fn true_top(&self) -> Vec<usize> {
        let mut ranked: Vec<usize> = (0..self.true_counts.len()).collect();
        ranked.sort_by(|&a, &b| {
            self.true_counts[b]
                .cmp(&self.true_counts[a])
                .then(a.cmp(&b))
        });
        ranked.truncate(TOP);
        ranked
    }

    fn key_id(key: &str) -> usize {
        key[5..].parse().expect("bench key")
    }
}

/// The largest Space-Saving capacity whose worst-case footprint fits the budget.
fn space_saving_capacity() -> usize {
    let mut m = 1;
    while SpaceSaving::max_footprint_bytes(m + 1, KEY_BYTES) <= BUDGET_BYTES {
        m += 1;
    }
    m
}

/// The widest `TopK` of depth 2 and k = 10 whose own `mem_bytes` fits the budget once filled.
fn heavykeeper_width(w: &Workload) -> usize {
    let filled = |width: usize| {
        let mut hk: TopK<String> = TopK::with_seed(TOP, width, 2, 0.9, 7);
        for &key in w.sampled.iter().take(20_000) {
            hk.add(w.keys[key as usize].as_str(), 1);
        }
        hk.mem_bytes(|s| s.capacity())
    };
    let (mut lo, mut hi) = (1usize, 8192usize);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if filled(mid) <= BUDGET_BYTES {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

struct Accuracy {
    recall: f64,
    precision: f64,
    are: f64,
}

fn accuracy(w: &Workload, reported: &[usize], estimate_x_n: impl Fn(usize) -> f64) -> Accuracy {
    let truth = w.true_top();
    let hits = reported.iter().filter(|k| truth.contains(k)).count() as f64;
    let are = truth
        .iter()
        .map(|&k| (estimate_x_n(k) - w.true_counts[k] as f64).abs() / w.true_counts[k] as f64)
        .sum::<f64>()
        / truth.len() as f64;
    Accuracy {
        recall: hits / truth.len() as f64,
        precision: if reported.is_empty() {
            0.0
        } else {
            hits / reported.len() as f64
        },
        are,
    }
}

fn print_sampler_accuracy(w: &Workload, m: usize, width: usize) {
    let n = f64::from(SAMPLE_ONE_IN);
    let mut ours = SpaceSaving::new(m, KEY_BYTES).expect("valid capacity");
    let mut hk: TopK<String> = TopK::with_seed(TOP, width, 2, 0.9, 7);
    for &key in &w.sampled {
        let name = w.keys[key as usize].as_str();
        ours.observe(name, 1).expect("short key");
        hk.add(name, 1);
    }
    let our_top: Vec<usize> = ours
        .top(TOP)
        .iter()
        .map(|c| Workload::key_id(c.key))
        .collect();
    let hk_top: Vec<usize> = hk
        .list()
        .iter()
        .take(TOP)
        .map(|node| Workload::key_id(&node.item))
        .collect();
    let a = accuracy(w, &our_top, |k| ours.estimate(&w.keys[k]).count as f64 * n);
    let b = accuracy(w, &hk_top, |k| hk.count(w.keys[k].as_str()) as f64 * n);
    // Our deterministic bracket, checked against the sampled truth of the true top 10.
    let mut sampled_truth = vec![0u64; w.keys.len()];
    for &key in &w.sampled {
        sampled_truth[key as usize] += 1;
    }
    let bracketed = w.true_top().iter().all(|&k| {
        let e = ours.estimate(&w.keys[k]);
        e.lower_bound() <= sampled_truth[k] && sampled_truth[k] <= e.count
    });
    let max_error = ours.counters().map(|c| c.estimate.error).max().unwrap_or(0);
    println!(
        "sampler  heatsink SpaceSaving m={m:<5}        footprint {:>6} B (bound {:>6} B): recall@10 {:.2}  precision@10 {:.2}  mean rel. error top-10 {:.4}  max error {} ≤ N/m = {}  bracket holds: {bracketed}",
        ours.footprint_bytes(),
        SpaceSaving::max_footprint_bytes(m, KEY_BYTES),
        a.recall,
        a.precision,
        a.are,
        max_error,
        ours.total() / m as u64,
    );
    println!(
        "sampler  heavykeeper TopK k=10 width={width} depth=2 mem_bytes {:>6} B                : recall@10 {:.2}  precision@10 {:.2}  mean rel. error top-10 {:.4}",
        hk.mem_bytes(|s| s.capacity()),
        b.recall,
        b.precision,
        b.are,
    );
    println!(
        "sampler  (both lists have 10 entries, so precision@10 = recall@10; counts ×{SAMPLE_ONE_IN} vs the full stream of {})",
        w.events
    );
}

fn bench_observe(c: &mut Criterion, w: &Workload, m: usize, width: usize) {
    let names: Vec<&str> = w
        .sampled
        .iter()
        .map(|&k| w.keys[k as usize].as_str())
        .collect();
    let mut group = c.benchmark_group("observe");
    group.throughput(Throughput::Elements(names.len() as u64));
    group.bench_function("heatsink SpaceSaving::observe", |b| {
        let mut sketch = SpaceSaving::new(m, KEY_BYTES).expect("valid capacity");
        b.iter(|| {
            for name in &names {
                sketch.observe(black_box(name), 1).expect("short key");
            }
        });
    });
    group.bench_function("heavykeeper TopK::add", |b| {
        let mut hk: TopK<String> = TopK::with_seed(TOP, width, 2, 0.9, 7);
        b.iter(|| {
            for name in &names {
                hk.add(black_box(*name), 1);
            }
        });
    });
    group.bench_function("heatsink Detector::record (window, partition)", |b| {
        let mut detector = Detector::new(DetectorConfig {
            sample_one_in: SAMPLE_ONE_IN,
            capacity: m,
            ..DetectorConfig::default()
        })
        .expect("valid config");
        let mut now = Duration::ZERO;
        b.iter(|| {
            for name in &names {
                now += Duration::from_micros(50);
                detector
                    .record(Access::write("shard-0", black_box(name)), now)
                    .expect("short key");
            }
        });
    });
    group.finish();
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(100).expect("non-zero"))
        .allow_burst(NonZeroU32::new(10).expect("non-zero"))
}

fn limit() -> Limit {
    Limit::per_second(100, 10).expect("valid limit")
}

fn bench_check(c: &mut Criterion) {
    let keys: Vec<String> = (0..10_000).map(|i| format!("user#{i:07}")).collect();
    let mut group = c.benchmark_group("check");
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function("heatsink Admission::check (now passed in)", |b| {
        let mut admission =
            Admission::new(AdmissionConfig::default().key_limit(limit())).expect("valid config");
        let mut now = Duration::ZERO;
        b.iter(|| {
            for key in &keys {
                now += Duration::from_micros(1);
                black_box(admission.check(black_box(key), "", now).expect("short id"));
            }
        });
    });
    group.bench_function("heatsink Admission::check (+ Instant::now)", |b| {
        let mut admission =
            Admission::new(AdmissionConfig::default().key_limit(limit())).expect("valid config");
        let start = Instant::now();
        b.iter(|| {
            for key in &keys {
                let now = start.elapsed();
                black_box(admission.check(black_box(key), "", now).expect("short id"));
            }
        });
    });
    group.bench_function("governor RateLimiter::keyed check_key", |b| {
        let limiter = RateLimiter::keyed(quota());
        b.iter(|| {
            for key in &keys {
                let _ = black_box(limiter.check_key(black_box(key)));
            }
        });
    });
    group.finish();
}

/// Resident set size of this process, bytes (VmRSS of /proc/self/status).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn print_limiter_memory(distinct: u64) {
    // Ours first: its memory is capped, so the pages it frees barely move governor's baseline.
    let before = rss_bytes();
    let started = Instant::now();
    let mut admission =
        Admission::new(AdmissionConfig::default().key_limit(limit())).expect("valid config");
    let mut key = String::with_capacity(16);
    for i in 0..distinct {
        use std::fmt::Write;
        key.clear();
        write!(key, "user#{i:08}").expect("write to String");
        black_box(
            admission
                .check(&key, "", Duration::from_micros(i))
                .expect("short id"),
        );
    }
    let ours_rss = rss_bytes().saturating_sub(before);
    println!(
        "limiter  heatsink Admission after {distinct} distinct keys: {} buckets, footprint {:.1} MiB (bound {:.1} MiB), RSS +{:.1} MiB, idle evictions {}, busy evictions {}, {:.1} s",
        admission.len(),
        mib(admission.footprint_bytes() as u64),
        mib(admission.max_footprint_bytes() as u64),
        mib(ours_rss),
        admission.stats().idle_evictions,
        admission.stats().busy_evictions,
        started.elapsed().as_secs_f64(),
    );
    drop(admission);

    let before = rss_bytes();
    let started = Instant::now();
    let limiter = RateLimiter::keyed(quota());
    for i in 0..distinct {
        let key = format!("user#{i:08}");
        let _ = black_box(limiter.check_key(&key));
    }
    let governor_rss = rss_bytes().saturating_sub(before);
    let len = limiter.len();
    // DashMap entry: String (24) + InMemoryState (8), plus the key's 13-byte heap allocation (32).
    let estimate = len as u64 * (24 + 8 + 32);
    let elapsed = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(200)); // every bucket refills (10 at 100/s = 100 ms)
    limiter.retain_recent();
    println!(
        "limiter  governor keyed after {distinct} distinct keys: len() {len}, ≈ {:.1} MiB of entries (len × 64 B), RSS +{:.1} MiB, {elapsed:.1} s; after retain_recent(): len() {}",
        mib(estimate),
        mib(governor_rss),
        limiter.len(),
    );
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let (events, distinct, limiter_keys) = if full {
        (10_000_000, 1_000_000, 10_000_000)
    } else {
        (200_000, 20_000, 200_000)
    };
    // Memory first, on a fresh heap, so neither RSS delta reuses pages freed by the sampler part.
    print_limiter_memory(limiter_keys);
    let workload = Workload::new(events, distinct);
    let m = space_saving_capacity();
    let width = heavykeeper_width(&workload);
    print_sampler_accuracy(&workload, m, width);

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    bench_observe(&mut criterion, &workload, m, width);
    bench_check(&mut criterion);
    criterion.final_summary();
}
