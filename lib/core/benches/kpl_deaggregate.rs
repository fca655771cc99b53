//! Deaggregation speed in ns per sub-record: heatsink_core::kpl vs the naive way vs a peer,
//! side by side in one run, at three user-record sizes.
//!
//! Each input is one KPL aggregate of at most 51,200 bytes (the KPL's default
//! `AggregationMaxSize`) filled with user records of 32, 256 or 1,024 bytes over 50 partition
//! keys. Contenders, in alternating order after criterion's warm-up (round 0 one way, round 1
//! the other):
//! - `heatsink ref`: [`deaggregate_ref`], user records borrowed from the input, no shard check;
//! - `heatsink ref + shard check`: [`Deaggregator::for_shard`], which also hashes each distinct
//!   partition key (MD5) to check the shard;
//! - `heatsink owned`: [`deaggregate`], the same decoding copied out into owned values;
//! - `naive owned`: the decoding heatsink did before (prost's derive into owned messages, an
//!   owned copy of every key and payload, an MD5 of the partition key per sub-record for the
//!   shard check), kept here only as the baseline;
//! - `md5 of the body`: the one MD5 every contender pays, to state the rest without it.
//!
//! The peer is the PyPI `aws-kinesis-agg` deaggregator (there is no maintained Rust crate for
//! the format); it runs in its own process on the same bytes when `HEATSINK_KPL_PYTHON` names
//! a python with it installed (or `.emu/venv-kpl` exists), and its ns per sub-record is
//! printed next to the criterion results.
//!
//! `cargo bench -p heatsink-core --bench kpl_deaggregate`

use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine;
use criterion::{Criterion, Throughput};
use heatsink_core::keys::kinesis_hash_key;
use heatsink_core::kpl::{Aggregator, Deaggregator, MAGIC, deaggregate, deaggregate_ref};
use md5::{Digest, Md5};
use prost::Message;

/// The KPL's messages, owned, as the naive decoder reads them.
mod naive {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AggregatedRecord {
        #[prost(string, repeated, tag = "1")]
        pub partition_key_table: Vec<String>,
        #[prost(string, repeated, tag = "2")]
        pub explicit_hash_key_table: Vec<String>,
        #[prost(message, repeated, tag = "3")]
        pub records: Vec<Record>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tag {
        #[prost(string, required, tag = "1")]
        pub key: String,
        #[prost(string, optional, tag = "2")]
        pub value: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Record {
        #[prost(uint64, required, tag = "1")]
        pub partition_key_index: u64,
        #[prost(uint64, optional, tag = "2")]
        pub explicit_hash_key_index: Option<u64>,
        #[prost(bytes = "vec", required, tag = "3")]
        pub data: Vec<u8>,
        #[prost(message, repeated, tag = "4")]
        pub tags: Vec<Tag>,
    }
    /// An owned user record.
    #[expect(
        dead_code,
        reason = "built and dropped, as a consumer that copies out would"
    )]
    pub struct Owned {
        pub partition_key: String,
        pub explicit_hash_key: Option<String>,
        pub data: Vec<u8>,
        pub sub_sequence: u64,
        pub outside: bool,
    }
}

/// The old owned decoding: MD5 check, prost into owned messages, index checks, an MD5 of the
/// partition key per sub-record, an owned copy of each key.
fn naive_owned(data: &[u8], shard_end: u128) -> Option<Vec<naive::Owned>> {
    let body = data.get(MAGIC.len()..data.len().checked_sub(16)?)?;
    let digest: [u8; 16] = Md5::digest(body).into();
    if digest[..] != data[data.len() - 16..] {
        return None;
    }
    let m = naive::AggregatedRecord::decode(body).ok()?;
    let mut out = Vec::with_capacity(m.records.len());
    for (i, r) in m.records.into_iter().enumerate() {
        let pk = m
            .partition_key_table
            .get(usize::try_from(r.partition_key_index).ok()?)?
            .clone();
        let ehk = match r.explicit_hash_key_index {
            Some(j) => Some(
                m.explicit_hash_key_table
                    .get(usize::try_from(j).ok()?)?
                    .clone(),
            ),
            None => None,
        };
        let hash = match &ehk {
            Some(e) => e.parse::<u128>().ok()?,
            None => kinesis_hash_key(&pk),
        };
        out.push(naive::Owned {
            partition_key: pk,
            explicit_hash_key: ehk,
            data: r.data,
            sub_sequence: i as u64,
            outside: hash > shard_end,
        });
    }
    Some(out)
}

/// One default-size aggregate of `size`-byte user records; (bytes, partition key, count).
fn aggregate_of(size: usize) -> Option<(Vec<u8>, String, u64)> {
    let mut agg = Aggregator::new();
    let payload = vec![b'x'; size];
    for i in 0.. {
        if !agg
            .try_add(&format!("user-{}", i % 50), None, &payload)
            .ok()?
        {
            break;
        }
    }
    let a = agg.finish()?;
    Some((a.data, a.partition_key, a.user_records as u64))
}

fn peer_python() -> Option<PathBuf> {
    std::env::var_os("HEATSINK_KPL_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let p =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.emu/venv-kpl/bin/python");
            p.exists().then_some(p)
        })
}

/// The peer's ns per sub-record on `data`, or why not.
fn time_peer(python: &PathBuf, data: &[u8], partition_key: &str) -> Result<f64, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/kpl/peer.py");
    let spec = serde_json::json!({
        "partition_key": partition_key,
        "data_b64": base64::engine::general_purpose::STANDARD.encode(data),
        "seconds": 2.0,
    });
    let mut child = Command::new(python)
        .arg(script)
        .arg("time")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(spec.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    v["ns_per_sub_record"]
        .as_f64()
        .ok_or_else(|| format!("peer printed {v}"))
}

const CONTENDERS: [&str; 4] = [
    "heatsink ref",
    "heatsink ref + shard check",
    "heatsink owned",
    "naive owned",
];

fn benches(c: &mut Criterion) {
    let python = peer_python();
    if python.is_none() {
        println!(
            "peer: skipped, no aws-kinesis-agg python (set HEATSINK_KPL_PYTHON or run localstack/stack up)"
        );
    }
    for size in [32usize, 256, 1_024] {
        let Some((data, pk, n)) = aggregate_of(size) else {
            return;
        };
        let shard = Deaggregator::for_shard(0, u128::MAX);
        let mut g = c.benchmark_group(format!(
            "deaggregate {size} B user records ({n} per aggregate)"
        ));
        g.throughput(Throughput::Elements(n));
        for round in 0..2 {
            let mut order = CONTENDERS;
            if round == 1 {
                order.reverse();
            }
            for who in order {
                g.bench_function(format!("{who} (round {round})"), |b| match who {
                    "heatsink ref" => {
                        b.iter(|| deaggregate_ref(black_box(&data), &pk).map(|r| r.len()))
                    }
                    "heatsink ref + shard check" => b.iter(|| {
                        shard
                            .deaggregate_ref(black_box(&data), &pk)
                            .map(|d| d.records.len())
                    }),
                    "heatsink owned" => {
                        b.iter(|| deaggregate(black_box(&data), &pk).map(|r| r.len()))
                    }
                    _ => b.iter(|| naive_owned(black_box(&data), u128::MAX).map(|r| r.len())),
                });
            }
        }
        g.bench_function("md5 of the body", |b| {
            b.iter(|| Md5::digest(black_box(&data[MAGIC.len()..data.len() - 16])))
        });
        g.finish();
        if let Some(python) = &python {
            match time_peer(python, &data, &pk) {
                Ok(ns) => println!(
                    "peer aws-kinesis-agg (python), {size} B user records: {ns:.0} ns per sub-record"
                ),
                Err(e) => println!("peer aws-kinesis-agg (python), {size} B: failed: {e}"),
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
