//! Balance of a reshard plan and deaggregation speed, side by side in one run.
//!
//! Balance (printed, not timed): a 4-shard stream, 3,000 records/s (3× one shard) in the
//! lowest 1/64 of the hash space of shard 0, the other shards at 70 %. max/mean per-shard load
//! after heatsink's plan vs the same splits at range midpoints vs UpdateShardCount to the same
//! number of uniform shards. Timed: the plan itself, and deaggregating a 500-record aggregate
//! with heatsink_core::kpl vs a naive decoder (a hand-rolled varint walk, no checks), in
//! alternating order after warm-up.
//!
//! `cargo bench -p heatsink-core --bench reshard_kpl`

use std::hint::black_box;

use criterion::Criterion;
use heatsink_core::keys::ShardRange;
use heatsink_core::kpl::{Aggregator, MAGIC, deaggregate};
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

/// The protobuf walk a naive decoder does: no MD5, no index or UTF-8 checks.
fn naive(data: &[u8]) -> usize {
    fn varint(b: &[u8], i: &mut usize) -> u64 {
        let (mut v, mut s) = (0u64, 0);
        while *i < b.len() {
            let x = b[*i];
            *i += 1;
            v |= u64::from(x & 0x7f) << s;
            if x & 0x80 == 0 {
                break;
            }
            s += 7;
        }
        v
    }
    let body = &data[MAGIC.len()..data.len() - 16];
    let (mut i, mut records) = (0, 0);
    while i < body.len() {
        let tag = varint(body, &mut i);
        let len = varint(body, &mut i) as usize;
        if tag >> 3 == 3 {
            records += 1;
            black_box(&body[i..i + len]);
        }
        i += len;
    }
    records
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

    let mut agg = Aggregator::with_max_bytes(1_000_000).unwrap_or_default();
    for i in 0..500 {
        let _ = agg.try_add(
            &format!("user-{}", i % 50),
            None,
            format!("{{\"like\":{i},\"post\":\"p9\"}}").as_bytes(),
        );
    }
    let Some(record) = agg.finish() else { return };
    let mut g = c.benchmark_group("deaggregate 500 sub-records");
    for round in 0..2 {
        let order: [&str; 2] = if round == 0 {
            ["heatsink", "naive"]
        } else {
            ["naive", "heatsink"]
        };
        for who in order {
            g.bench_function(format!("{who} (round {round})"), |b| match who {
                "heatsink" => b.iter(|| deaggregate(black_box(&record.data), "p")),
                _ => b.iter(|| naive(black_box(&record.data))),
            });
        }
    }
    g.bench_function("md5 of the body only", |b| {
        b.iter(|| {
            use md5::Digest;
            md5::Md5::digest(black_box(&record.data[4..record.data.len() - 16]))
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
