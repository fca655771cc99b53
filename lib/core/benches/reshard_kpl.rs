//! Balance of a reshard plan, side by side in one run.
//!
//! Balance (printed, not timed): a 4-shard stream, 3,000 records/s (3× one shard) in the
//! lowest 1/64 of the hash space of shard 0, the other shards at 70 %. max/mean per-shard load
//! after heatsink's plan vs the same splits at range midpoints vs UpdateShardCount to the same
//! number of uniform shards. Timed: the plan itself. (Deaggregation speed is
//! `benches/kpl_deaggregate.rs`.)
//!
//! `cargo bench -p heatsink-core --bench reshard_kpl`

use std::hint::black_box;

use criterion::Criterion;
use heatsink_core::keys::ShardRange;
use heatsink_core::reshard::{PlanConfig, ReshardState, Sample, ShardSample, plan};

fn narrow_stream() -> Vec<ShardSample> {
    let shards = ShardRange::even_split(4).unwrap_or_default();
    shards
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (n, width) = if i == 0 {
                (3_000u128, u128::MAX / 64)
            } else {
                (700, r.end - r.start)
            };
            let samples = (0..n)
                .map(|j| Sample {
                    hash_key: r.start + j * (width / n),
                    bytes: 200,
                    at_ms: (j as u64) % 1_000,
                    partition_key: format!("k{i}-{j}"),
                })
                .collect();
            ShardSample::new(r.shard_id.clone(), r.start, r.end, 1.0, samples)
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let stream = narrow_stream();
    let p = plan(&stream, &ReshardState::default(), &PlanConfig::default(), 0);
    if let Ok(p) = &p {
        println!(
            "balance (max/mean after): heatsink {:.3}, midpoint split {:.3}, uniform UpdateShardCount {:.3} ({} splits)",
            p.predicted_max_over_mean,
            p.midpoint_max_over_mean,
            p.uniform_max_over_mean,
            p.ops.len()
        );
    }
    c.bench_function("reshard/plan 4 shards, 5,100 samples", |b| {
        b.iter(|| {
            plan(
                black_box(&stream),
                &ReshardState::default(),
                &PlanConfig::default(),
                0,
            )
        })
    });
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
