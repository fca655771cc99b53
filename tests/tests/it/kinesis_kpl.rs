//! KPL interop: heatsink's aggregates deaggregate with another implementation (the PyPI
//! `aws-kinesis-agg`, installed by `localstack/stack up` into `.emu/venv-kpl`), and that
//! implementation's aggregates deaggregate with heatsink. The committed golden vectors in
//! `heatsink_core::kpl` cover fixed cases; these run the peer on fresh, varied records.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use heatsink::kinesis::kpl::{Aggregate, Aggregator, deaggregate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// The peer's python, or `None` (after a `skip:` line) when it is not installed.
pub(crate) fn peer_python(test: &str) -> Option<PathBuf> {
    let installed = std::env::var_os("HEATSINK_KPL_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.emu/venv-kpl/bin/python");
            p.exists().then_some(p)
        });
    if installed.is_none() {
        if std::env::var("HEATSINK_REQUIRE_STACK").as_deref() == Ok("1") {
            panic!(
                "{test}: HEATSINK_REQUIRE_STACK=1 but the KPL peer is not installed (localstack/stack up installs it)"
            );
        }
        eprintln!("skip: {test}: no KPL peer (run `localstack/stack up`)");
    }
    installed
}

/// Run `peer.py MODE` with `input` as JSON on stdin.
pub(crate) fn run_peer(python: &PathBuf, mode: &str, input: &Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lib/core/testdata/kpl/peer.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the KPL peer");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write to the peer");
    let out = child.wait_with_output().expect("the peer finishes");
    assert!(
        out.status.success(),
        "peer {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the peer prints JSON")
}

/// Varied user records: short and unicode keys, repeats, explicit hash keys, binary and empty data.
fn user_records(seed: u64, n: usize) -> Vec<(String, Option<String>, Vec<u8>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let pk = match rng.random_range(0..4) {
                0 => "p9".to_owned(),
                1 => format!("p9#{}", rng.random_range(0..8)),
                2 => format!("clé-{}-☃", rng.random_range(0..100)),
                _ => format!("user-{i}"),
            };
            let ehk = rng
                .random_bool(0.3)
                .then(|| rng.random::<u128>().to_string());
            let len = rng.random_range(0..600);
            let data = (0..len).map(|_| rng.random::<u8>()).collect();
            (pk, ehk, data)
        })
        .collect()
}

#[test]
fn heatsinks_aggregates_deaggregate_with_aws_kinesis_agg() {
    let Some(python) = peer_python("heatsinks_aggregates_deaggregate_with_aws_kinesis_agg") else {
        return;
    };
    let records = user_records(16, 300);
    let mut agg = Aggregator::with_max_bytes(8_192).expect("a valid limit");
    let mut out: Vec<Aggregate> = vec![];
    for (pk, ehk, data) in &records {
        if !agg.try_add(pk, ehk.as_deref(), data).expect("valid record") {
            out.extend(agg.finish());
            assert!(agg.try_add(pk, ehk.as_deref(), data).expect("valid record"));
        }
    }
    out.extend(agg.finish());
    assert!(out.len() > 5, "several aggregates, not one");
    let input: Vec<Value> = out
        .iter()
        .map(|a| json!({"partition_key": a.partition_key, "data_b64": B64.encode(&a.data)}))
        .collect();
    let peer = run_peer(&python, "deaggregate", &Value::from(input));
    let peer = peer.as_array().expect("a list");
    assert_eq!(
        peer.len(),
        records.len(),
        "every user record comes out once"
    );
    let mut next_sub = 0;
    let mut last_seq = String::new();
    for (i, (got, (pk, ehk, data))) in peer.iter().zip(&records).enumerate() {
        assert_eq!(got["partition_key"], json!(pk), "record {i}");
        assert_eq!(
            B64.decode(got["data_b64"].as_str().expect("data"))
                .expect("base64"),
            *data,
            "record {i}"
        );
        // The peer reports the explicit-hash-key table's first entry for a record without one
        // whenever the table is non-empty; compare where heatsink wrote one.
        if let Some(ehk) = ehk {
            assert_eq!(got["explicit_hash_key"], json!(ehk), "record {i}");
        }
        let seq = got["sequence"].as_str().expect("sequence").to_owned();
        if seq != last_seq {
            next_sub = 0;
            last_seq = seq;
        }
        if got["aggregated"] == json!(true) {
            assert_eq!(got["sub_sequence"], json!(next_sub), "record {i}");
        }
        next_sub += 1;
    }
}

#[test]
fn aws_kinesis_agg_aggregates_deaggregate_with_heatsink() {
    let Some(python) = peer_python("aws_kinesis_agg_aggregates_deaggregate_with_heatsink") else {
        return;
    };
    for seed in [1, 2, 3] {
        let records = user_records(seed, 60);
        let input: Vec<Value> = records
            .iter()
            .map(|(pk, ehk, data)| {
                json!({"partition_key": pk, "explicit_hash_key": ehk, "data_b64": B64.encode(data)})
            })
            .collect();
        let peer = run_peer(&python, "aggregate", &Value::from(input));
        let bytes = B64
            .decode(peer["data_b64"].as_str().expect("data"))
            .expect("base64");
        let ours = deaggregate(&bytes, peer["partition_key"].as_str().expect("key"))
            .expect("heatsink reads the peer's aggregate");
        let got: Vec<_> = ours
            .into_iter()
            .map(|r| (r.partition_key, r.explicit_hash_key, r.data))
            .collect();
        assert_eq!(got, records, "seed {seed}");
    }
}
