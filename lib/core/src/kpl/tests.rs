use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use md5::{Digest, Md5};
use proptest::prelude::*;

use super::*;

fn b64(s: &str) -> Vec<u8> {
    B64.decode(s.split_whitespace().collect::<String>())
        .expect("test vector is base64")
}

/// `MAGIC | body | MD5(body)`.
fn wrap(body: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(body);
    v.extend_from_slice(&Md5::digest(body));
    v
}

fn data_of(records: &[SubRecord]) -> Vec<&[u8]> {
    records.iter().map(|r| r.data.as_slice()).collect()
}

// ---------------------------------------------------------------- the format, by hand

/// Bytes written by hand from the format description (field numbers and wire types), so the
/// decoder is checked against the format, not against its own encoder.
#[test]
fn a_hand_written_aggregate_decodes_by_the_format_description() {
    let body = [
        0x0a, 0x01, b'a', // partition_key_table[0] = "a"        (field 1, length-delimited)
        0x0a, 0x01, b'b', // partition_key_table[1] = "b"
        0x12, 0x01, b'7', // explicit_hash_key_table[0] = "7"    (field 2)
        0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, b'x', // records[0]: pk 0, data "x" (field 3)
        0x1a, 0x07, 0x08, 0x01, 0x10, 0x00, 0x1a, 0x01, b'y', // records[1]: pk 1, ehk 0, "y"
        0x1a, 0x0c, 0x08, 0x00, 0x1a, 0x00, // records[2]: pk 0, empty data, then a tag:
        0x22, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v', //   tags[0] = {key "k", value "v"}
    ];
    let out = deaggregate(&wrap(&body), "outer").unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(
        (
            out[0].partition_key.as_str(),
            out[0].explicit_hash_key.as_deref()
        ),
        ("a", None)
    );
    assert_eq!(
        (
            out[1].partition_key.as_str(),
            out[1].explicit_hash_key.as_deref()
        ),
        ("b", Some("7"))
    );
    assert_eq!(out[1].hash_key(), Some(7));
    assert_eq!(data_of(&out), [&b"x"[..], b"y", b""]);
    assert_eq!(
        out.iter().map(|r| r.sub_sequence).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        out[2].tags,
        [Tag {
            key: "k".into(),
            value: Some("v".into())
        }]
    );
}

#[test]
fn a_plain_record_passes_through_as_one_user_record() {
    for data in [
        &b""[..],
        b"hello",
        &MAGIC[..3],
        &[0xF3, 0x89, 0x9A, 0xC3, 0, 0],
    ] {
        let d = Deaggregator::new().deaggregate(data, "pk-1").unwrap();
        assert!(!d.aggregated);
        assert_eq!(
            d.records,
            [SubRecord {
                partition_key: "pk-1".into(),
                explicit_hash_key: None,
                data: data.to_vec(),
                sub_sequence: 0,
                tags: vec![],
            }]
        );
        assert!(!is_aggregated(data));
    }
}

// ---------------------------------------------------------------- golden vectors

#[derive(serde::Deserialize)]
struct GoldenRecord {
    partition_key: String,
    explicit_hash_key: Option<String>,
    data_b64: String,
}

#[derive(serde::Deserialize)]
struct Golden {
    name: String,
    partition_key: String,
    explicit_hash_key: Option<String>,
    data_b64: String,
    records: Vec<GoldenRecord>,
}

/// Aggregates made by the Python `aws-kinesis-agg` 1.2.3 (testdata/kpl/make_golden.py).
#[test]
fn aggregates_made_by_aws_kinesis_agg_decode_and_reencode_byte_for_byte() {
    let golden: Vec<Golden> =
        serde_json::from_str(include_str!("../../testdata/kpl/golden.json")).unwrap();
    assert_eq!(golden.len(), 3);
    for g in &golden {
        let bytes = b64(&g.data_b64);
        let d = Deaggregator::new()
            .deaggregate(&bytes, &g.partition_key)
            .unwrap();
        assert!(d.aggregated, "{}", g.name);
        assert_eq!(d.records.len(), g.records.len(), "{}", g.name);
        for (i, (got, want)) in d.records.iter().zip(&g.records).enumerate() {
            assert_eq!(got.partition_key, want.partition_key, "{} #{i}", g.name);
            assert_eq!(
                got.explicit_hash_key, want.explicit_hash_key,
                "{} #{i}",
                g.name
            );
            assert_eq!(got.data, b64(&want.data_b64), "{} #{i}", g.name);
            assert_eq!(got.sub_sequence, i as u64);
        }
        let mut agg = Aggregator::with_max_bytes(MAX_RECORD_BYTES).unwrap();
        for r in &g.records {
            let data = b64(&r.data_b64);
            assert!(
                agg.try_add(&r.partition_key, r.explicit_hash_key.as_deref(), &data)
                    .unwrap()
            );
        }
        let ours = agg.finish().unwrap();
        assert_eq!(ours.partition_key, g.partition_key, "{}", g.name);
        assert_eq!(ours.explicit_hash_key, g.explicit_hash_key, "{}", g.name);
        if g.records.len() == 1 {
            // The KPL (and so heatsink) sends a lone record unaggregated; aws-kinesis-agg wraps it.
            assert_eq!(ours.data, b64(&g.records[0].data_b64));
        } else {
            assert_eq!(
                ours.data, bytes,
                "{}: our bytes differ from aws-kinesis-agg's",
                g.name
            );
        }
    }
}

/// From the Ruby `kinesis-aggregation` gem's aggregator spec ("can aggregate user records with
/// EHK"): four records, four partition keys, four explicit hash keys.
const RUBY_WITH_EHK: &str = "
    84mawgokZmMwM2RkODgtM2U3OS00NDhhLWIwMWEtN2NmMWJkNDdiNzg0CiRjYWU0MWIxYy1lYTYxLTQz
    ZjItOTBiZS1iODc1NWViZjg4ZTIKJGQ0OTA2OTBjLWU3NGQtNGRiMi1hM2M4LWQ4ZjJmMTg0ZmQyMwokYzkyNGJjMDktYjg1ZS00N2
    YxLWIzMmUtMzM2NTIyZWU1M2M4EiYzODQ4NjQ5NTg2NzUwODM5OTA3ODE1OTcyMzg0NjA1MTgwNzAyMBInMTkzNzg3NjAwMDM3Njgx
    NzA2OTUyMTQzMzU3MDcxOTE2MzUyNjA0EicyNjY4ODA0MzY5NjQ5MzI0MjQyNjU0NjY5MTY3MzQwNjg2ODQ0MzkSJzMzOTYwNjYwMD
    k0Mjk2NzM5MTg1NDYwMzU1MjQwMjAyMTg0NzI5MhomCAAQABogUkVDT1JEIDIyIHBlZW9iaGN6YnpkbXNrYm91cGd5cQoaJggBEAEa
    IFJFQ09SRCAyMyB1c3dreGZ0eHJvZXVzc2N4c2pobm8KGiYIAhACGiBSRUNPUkQgMjQgY2FzZWhkZ2l2ZmF4ZXVzdGx5c3p5ChomCA
    MQAxogUkVDT1JEIDI1IG52ZmZ2cG11b2dkb3BqaGFtZXZyawpRwVPQ3go0yp4Y6kvM0q3V";

#[test]
fn the_ruby_gems_aggregate_with_explicit_hash_keys_round_trips_byte_for_byte() {
    let input = [
        (
            "fc03dd88-3e79-448a-b01a-7cf1bd47b784",
            "38486495867508399078159723846051807020",
            "RECORD 22 peeobhczbzdmskboupgyq\n",
        ),
        (
            "cae41b1c-ea61-43f2-90be-b8755ebf88e2",
            "193787600037681706952143357071916352604",
            "RECORD 23 uswkxftxroeusscxsjhno\n",
        ),
        (
            "d490690c-e74d-4db2-a3c8-d8f2f184fd23",
            "266880436964932424265466916734068684439",
            "RECORD 24 casehdgivfaxeustlyszy\n",
        ),
        (
            "c924bc09-b85e-47f1-b32e-336522ee53c8",
            "339606600942967391854603552402021847292",
            "RECORD 25 nvffvpmuogdopjhamevrk\n",
        ),
    ];
    let bytes = b64(RUBY_WITH_EHK);
    let out = deaggregate(&bytes, "unused").unwrap();
    assert_eq!(out.len(), 4);
    for (got, (pk, ehk, data)) in out.iter().zip(input) {
        assert_eq!(got.partition_key, pk);
        assert_eq!(got.explicit_hash_key.as_deref(), Some(ehk));
        assert_eq!(got.data, data.as_bytes());
    }
    let mut agg = Aggregator::new();
    for (pk, ehk, data) in input {
        assert!(agg.try_add(pk, Some(ehk), data.as_bytes()).unwrap());
    }
    let ours = agg.finish().unwrap();
    assert_eq!(ours.partition_key, input[0].0);
    assert_eq!(ours.explicit_hash_key.as_deref(), Some(input[0].1));
    assert_eq!(ours.data, bytes);
}

/// From the Node.js `aws-kinesis-agg` tests and a Python project's deaggregation test.
#[test]
fn aggregates_from_node_and_python_test_suites_decode() {
    let node = deaggregate(
        &b64("84mawgoFa2V5LTAaJQgAGiFUZXN0aW5nIEtQTCBBZ2dyZWdhdGVkIFJlY29yZCAxLTBlW2Hfd6iL1WkMbznr8jc2"),
        "shardId-00000000005",
    )
    .unwrap();
    assert_eq!(node.len(), 1);
    assert_eq!(node[0].partition_key, "key-0");
    assert_eq!(node[0].data, b"Testing KPL Aggregated Record 1-0");

    let py = deaggregate(
        &b64(
            "84mawgoEcGstMAoEcGstMQoEcGstMhoTCAAaD3sibXNnIjoibGluZTAifRoTCAEaD3sibXNnIjoi
              bGluZTEifRoTCAIaD3sibXNnIjoibGluZTIifZ8hyadI+v2KZPZrUGim6cQ=",
        ),
        "x",
    )
    .unwrap();
    let keys: Vec<&str> = py.iter().map(|r| r.partition_key.as_str()).collect();
    assert_eq!(keys, ["pk-0", "pk-1", "pk-2"]);
    assert_eq!(py[2].data, br#"{"msg":"line2"}"#);
}

// ---------------------------------------------------------------- bad input

#[test]
fn a_truncated_aggregate_is_refused_with_its_length() {
    let good = wrap(&[0x0a, 0x01, b'a', 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00]);
    for len in [4, 5, 19] {
        assert_eq!(
            deaggregate(&good[..len], "k"),
            Err(KplError::Truncated { len, min: 20 })
        );
    }
    // Cut inside the body: the trailer no longer matches.
    assert!(matches!(
        deaggregate(&good[..good.len() - 1], "k"),
        Err(KplError::BadDigest { .. })
    ));
}

#[test]
fn a_corrupted_byte_anywhere_fails_the_md5_check() {
    let good = wrap(&[0x0a, 0x01, b'a', 0x1a, 0x05, 0x08, 0x00, 0x1a, 0x01, b'x']);
    assert!(deaggregate(&good, "k").is_ok());
    for i in MAGIC.len()..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        assert!(
            matches!(deaggregate(&bad, "k"), Err(KplError::BadDigest { .. })),
            "flipped byte {i}"
        );
    }
}

#[test]
fn every_structural_fault_gets_its_own_error() {
    assert!(matches!(
        deaggregate(&wrap(&[0x1a, 0x05, 0x08]), "k"),
        Err(KplError::Malformed(_))
    ));
    // Invalid UTF-8 in a partition key, an explicit hash key, a tag.
    assert!(matches!(
        deaggregate(
            &wrap(&[0x0a, 0x01, 0xff, 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00]),
            "k"
        ),
        Err(KplError::NotUtf8 {
            field: "partition_key_table",
            ..
        })
    ));
    assert!(matches!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x12, 0x01, 0xff, 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00
            ]),
            "k"
        ),
        Err(KplError::NotUtf8 {
            field: "explicit_hash_key_table",
            ..
        })
    ));
    assert!(matches!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x1a, 0x07, 0x08, 0x00, 0x22, 0x03, 0x0a, 0x01, 0xff
            ]),
            "k"
        ),
        Err(KplError::NotUtf8 { field: "tags", .. })
    ));
    // A wrong wire type, a field that runs past its record, an unknown field (skipped).
    assert!(matches!(
        deaggregate(&wrap(&[0x0a, 0x01, b'a', 0x18, 0x00]), "k"),
        Err(KplError::Malformed(_))
    ));
    assert!(matches!(
        deaggregate(
            &wrap(&[0x0a, 0x01, b'a', 0x1a, 0x03, 0x08, 0x00, 0x1a, 0x01, b'x']),
            "k"
        ),
        Err(KplError::Malformed(_))
    ));
    assert_eq!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x78, 0x05, 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00
            ]),
            "k"
        )
        .map(|r| r.len()),
        Ok(1)
    );
    assert_eq!(deaggregate(&wrap(&[]), "k"), Err(KplError::NoRecords));
    assert_eq!(
        deaggregate(&wrap(&[0x0a, 0x01, b'a']), "k"),
        Err(KplError::NoRecords)
    );
    assert_eq!(
        deaggregate(&wrap(&[0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00]), "k"),
        Err(KplError::EmptyPartitionKeyTable { records: 1 })
    );
    assert_eq!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00, 0x1a, 0x04, 0x08, 0x01, 0x1a,
                0x00
            ]),
            "k"
        ),
        Err(KplError::PartitionKeyIndexOutOfRange {
            sub_sequence: 1,
            index: 1,
            table_len: 1
        })
    );
    assert_eq!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x1a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x00
            ]),
            "k"
        ),
        Err(KplError::ExplicitHashKeyIndexOutOfRange {
            sub_sequence: 0,
            index: 0,
            table_len: 0
        })
    );
    assert!(matches!(
        deaggregate(
            &wrap(&[
                0x0a, 0x01, b'a', 0x12, 0x01, b'z', 0x1a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x00
            ]),
            "k"
        ),
        Err(KplError::BadExplicitHashKey { .. })
    ));
    let mut huge = MAGIC.to_vec();
    huge.resize(MAX_RECORD_BYTES + 1, 0);
    assert_eq!(
        deaggregate(&huge, "k"),
        Err(KplError::Oversized {
            len: MAX_RECORD_BYTES + 1,
            max: MAX_RECORD_BYTES
        })
    );
}

#[test]
fn the_aggregator_refuses_bad_keys_and_records_that_can_never_fit() {
    let mut agg = Aggregator::new();
    assert!(matches!(
        agg.try_add("", None, b"x"),
        Err(KplError::BadPartitionKey { chars: 0, .. })
    ));
    let long = "k".repeat(257);
    assert!(matches!(
        agg.try_add(&long, None, b"x"),
        Err(KplError::BadPartitionKey { chars: 257, .. })
    ));
    assert!(agg.try_add(&"é".repeat(256), None, b"x").unwrap());
    for ehk in [
        "",
        "01",
        "-1",
        "340282366920938463463374607431768211456",
        "1e3",
    ] {
        assert!(
            matches!(
                agg.try_add("k", Some(ehk), b"x"),
                Err(KplError::BadExplicitHashKey { .. })
            ),
            "{ehk}"
        );
    }
    assert!(matches!(
        agg.try_add("k", None, &vec![0; DEFAULT_MAX_AGGREGATE_BYTES]),
        Err(KplError::Oversized {
            max: DEFAULT_MAX_AGGREGATE_BYTES,
            ..
        })
    ));
    assert_eq!(agg.len(), 1, "refused records are not added");
    assert!(Aggregator::with_max_bytes(MAX_RECORD_BYTES + 1).is_err());
    assert!(Aggregator::with_max_bytes(10).is_err());
}

// ---------------------------------------------------------------- bounds

/// `n` user records of empty data, all with partition key #0: 6 bytes each, the fewest a
/// record with both required fields takes.
fn empty_records(n: usize) -> Vec<u8> {
    [0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00].repeat(n)
}

/// A table entry (field 1 or 2) holding `text`.
fn entry(field: u32, text: &str) -> Vec<u8> {
    encode_field(field, 2, text.as_bytes())
}

/// The hostile record of issue 32: one 1,020,024-byte aggregate with a valid MD5, one
/// 300,000-byte partition key and 120,000 empty user records. A consumer that gave each user
/// record its own copy of the key would need 36 GB.
pub(super) fn hostile_aggregate() -> Vec<u8> {
    let mut body = entry(1, &"k".repeat(300_000));
    body.extend(empty_records(120_000));
    wrap(&body)
}

#[test]
fn the_issues_hostile_aggregate_is_refused_for_its_key_before_any_user_record_is_read() {
    let data = hostile_aggregate();
    assert_eq!(data.len(), 1_020_024);
    let refused = KplError::KeyTooLong {
        field: "partition_key_table",
        index: 0,
        bytes: 300_000,
        max_chars: MAX_PARTITION_KEY_CHARS,
    };
    assert_eq!(
        Deaggregator::new().open(&data, "outer").map(|r| r.len()),
        Err(refused.clone())
    );
    assert_eq!(deaggregate_ref(&data, "outer"), Err(refused.clone()));
    assert_eq!(
        refused.to_string(),
        "aggregated record's partition_key_table entry #0 is 300000 bytes, over Kinesis's \
         256-character limit"
    );
    // The same shape with a key Kinesis takes decodes: 120,000 user records sharing one key.
    let mut body = entry(1, &"k".repeat(256));
    body.extend(empty_records(120_000));
    let fine = wrap(&body);
    let opened = Deaggregator::new().open(&fine, "outer").unwrap();
    assert_eq!((opened.len(), opened.partition_keys().len()), (120_000, 1));
    assert!(
        opened
            .iter()
            .all(|r| r.partition_key_index() == 0 && r.data.is_empty())
    );
    assert!(
        opened.heap_bytes() < 1_024,
        "{} heap bytes",
        opened.heap_bytes()
    );
}

#[test]
fn table_entries_are_held_to_kinesiss_256_characters_not_bytes() {
    let one_record = empty_records(1);
    for (key, ok) in [
        ("k".repeat(256), true),
        ("é".repeat(256), true),         // 512 bytes
        ("\u{1d11e}".repeat(256), true), // 1,024 bytes: the most 256 characters take
        ("k".repeat(257), false),
        ("é".repeat(257), false),
        ("k".repeat(1_025), false),
    ] {
        let body = [entry(1, &key), one_record.clone()].concat();
        let got = deaggregate(&wrap(&body), "outer");
        assert_eq!(got.is_ok(), ok, "{} bytes: {got:?}", key.len());
        if !ok {
            assert_eq!(
                got,
                Err(KplError::KeyTooLong {
                    field: "partition_key_table",
                    index: 0,
                    bytes: key.len(),
                    max_chars: 256
                })
            );
        }
    }
    // An explicit-hash-key entry too, used or not.
    let body = [
        entry(1, "a"),
        entry(2, "7"),
        entry(2, &"9".repeat(300)),
        [0x1a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x1a, 0x00].repeat(2),
    ]
    .concat();
    assert_eq!(
        deaggregate(&wrap(&body), "outer"),
        Err(KplError::KeyTooLong {
            field: "explicit_hash_key_table",
            index: 1,
            bytes: 300,
            max_chars: 256
        })
    );
}

#[test]
fn a_key_table_longer_than_the_records_is_refused_before_it_is_allocated() {
    let body = [entry(1, "a"), entry(1, "b"), empty_records(1)].concat();
    assert_eq!(
        deaggregate(&wrap(&body), "outer"),
        Err(KplError::TableTooLong {
            field: "partition_key_table",
            entries: 2,
            records: 1
        })
    );
    let body = [
        entry(1, "a"),
        entry(2, "1"),
        entry(2, "2"),
        empty_records(1),
    ]
    .concat();
    assert_eq!(
        deaggregate(&wrap(&body), "outer"),
        Err(KplError::TableTooLong {
            field: "explicit_hash_key_table",
            entries: 2,
            records: 1
        })
    );
    // 500,000 two-byte entries and one record: refused from the count, no table built.
    let body = [[0x0a, 0x00].repeat(500_000), empty_records(1)].concat();
    assert!(matches!(
        deaggregate(&wrap(&body), "outer"),
        Err(KplError::TableTooLong {
            entries: 500_000,
            ..
        })
    ));
}

#[test]
fn a_user_record_without_its_required_fields_is_refused() {
    let no_index = [
        entry(1, "a"),
        empty_records(1),
        vec![0x1a, 0x02, 0x1a, 0x00],
    ]
    .concat();
    assert_eq!(
        deaggregate(&wrap(&no_index), "outer"),
        Err(KplError::MissingField {
            sub_sequence: 1,
            field: "partition_key_index"
        })
    );
    let no_data = [entry(1, "a"), vec![0x1a, 0x02, 0x08, 0x00]].concat();
    assert_eq!(
        deaggregate(&wrap(&no_data), "outer"),
        Err(KplError::MissingField {
            sub_sequence: 0,
            field: "data"
        })
    );
    // 2-byte records with no fields at all: 524,280 of them would fit in 1 MiB.
    let bare = [entry(1, "a"), [0x1a, 0x00].repeat(1_000)].concat();
    assert!(matches!(
        deaggregate(&wrap(&bare), "outer"),
        Err(KplError::MissingField {
            sub_sequence: 0,
            ..
        })
    ));
}

// ---------------------------------------------------------------- shard check

fn two_shard_aggregate() -> (Vec<u8>, u128) {
    let mut agg = Aggregator::new();
    let half = 1u128 << 127;
    agg.try_add("a", Some("5"), b"low 1").unwrap();
    agg.try_add("b", Some(&half.to_string()), b"high").unwrap();
    agg.try_add("c", Some("6"), b"low 2").unwrap();
    (agg.finish().unwrap().data, half - 1)
}

#[test]
fn out_of_shard_sub_records_are_delivered_and_counted_by_default() {
    let (bytes, end) = two_shard_aggregate();
    let d = Deaggregator::for_shard(0, end)
        .deaggregate(&bytes, "a")
        .unwrap();
    assert_eq!(data_of(&d.records), [&b"low 1"[..], b"high", b"low 2"]);
    assert_eq!((d.out_of_range, d.dropped), (1, 0));
}

#[test]
fn the_drop_policies_drop_a_sub_record_or_as_the_kcl_does_the_whole_aggregate() {
    let (bytes, end) = two_shard_aggregate();
    let one = Deaggregator::for_shard(0, end)
        .out_of_range(OutOfRange::DropSubRecord)
        .deaggregate(&bytes, "a")
        .unwrap();
    assert_eq!(data_of(&one.records), [&b"low 1"[..], b"low 2"]);
    assert_eq!(
        one.records
            .iter()
            .map(|r| r.sub_sequence)
            .collect::<Vec<_>>(),
        [0, 2],
        "sub-sequence numbers stay positions in the aggregate"
    );
    assert_eq!((one.out_of_range, one.dropped), (1, 1));

    let all = Deaggregator::for_shard(0, end)
        .out_of_range(OutOfRange::DropAggregate)
        .deaggregate(&bytes, "a")
        .unwrap();
    assert!(all.records.is_empty());
    assert_eq!((all.out_of_range, all.dropped), (1, 3));

    let inside = Deaggregator::for_shard(0, u128::MAX)
        .out_of_range(OutOfRange::DropAggregate)
        .deaggregate(&bytes, "a")
        .unwrap();
    assert_eq!(
        (inside.records.len(), inside.out_of_range, inside.dropped),
        (3, 0, 0)
    );
}

// ---------------------------------------------------------------- properties

fn any_user_record() -> impl Strategy<Value = (String, Option<String>, Vec<u8>)> {
    (
        prop_oneof!["[a-z]{1,3}", "\\PC{1,20}", "k#[0-9]{1,2}"],
        proptest::option::of(any::<u128>().prop_map(|h| h.to_string())),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #[test]
    fn any_bytes_are_decoded_or_refused_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = deaggregate(&bytes, "k");
        let mut magic = MAGIC.to_vec();
        magic.extend_from_slice(&bytes);
        prop_assert!(deaggregate(&magic, "k").is_err() || bytes.len() >= DIGEST_LEN);
    }

    #[test]
    fn any_body_with_a_valid_md5_is_decoded_or_refused_never_a_panic(
        body in proptest::collection::vec(any::<u8>(), 0..400),
        start in any::<u128>(), len in any::<u128>(), policy in 0u8..3,
    ) {
        let policy = [OutOfRange::Deliver, OutOfRange::DropSubRecord, OutOfRange::DropAggregate][usize::from(policy)];
        let d = Deaggregator::for_shard(start, start.saturating_add(len)).out_of_range(policy);
        if let Ok(out) = d.deaggregate(&wrap(&body), "k") {
            prop_assert!(out.aggregated);
            prop_assert!(out.dropped <= out.out_of_range.max(out.records.len() as u64 + out.dropped));
        }
    }

    #[test]
    fn aggregation_round_trips_every_user_record_in_order(
        records in proptest::collection::vec(any_user_record(), 1..40),
        max in 200usize..20_000,
    ) {
        let mut agg = Aggregator::with_max_bytes(max).unwrap();
        let mut out: Vec<Aggregate> = Vec::new();
        let mut sent = Vec::new();
        for (pk, ehk, data) in &records {
            match agg.try_add(pk, ehk.as_deref(), data) {
                Ok(true) => {}
                Ok(false) => {
                    out.extend(agg.finish());
                    prop_assert!(agg.try_add(pk, ehk.as_deref(), data).unwrap());
                }
                Err(KplError::Oversized { .. }) => continue,
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
            sent.push((pk.clone(), ehk.clone(), data.clone()));
        }
        out.extend(agg.finish());
        let mut got = Vec::new();
        for a in &out {
            prop_assert!(a.billed_bytes() <= max, "{} > {max}", a.billed_bytes());
            let d = Deaggregator::new().deaggregate(&a.data, &a.partition_key).unwrap();
            prop_assert_eq!(d.records.len(), a.user_records);
            prop_assert_eq!(d.aggregated, a.user_records > 1);
            got.extend(d.records.into_iter().map(|r| {
                // A lone record goes out plain: its explicit hash key travels outside the data.
                let ehk = if d.aggregated { r.explicit_hash_key } else { a.explicit_hash_key.clone() };
                (r.partition_key, ehk, r.data)
            }));
        }
        prop_assert_eq!(got, sent);
    }

    #[test]
    fn the_size_estimate_is_exactly_what_is_encoded(
        records in proptest::collection::vec(any_user_record(), 2..30),
    ) {
        let mut agg = Aggregator::with_max_bytes(MAX_RECORD_BYTES).unwrap();
        for (pk, ehk, data) in &records {
            prop_assert!(agg.try_add(pk, ehk.as_deref(), data).unwrap());
        }
        let estimate = agg.size_bytes();
        let a = agg.finish().unwrap();
        prop_assert_eq!(estimate, a.billed_bytes());
        prop_assert!(agg.is_empty() && agg.size_bytes() == 0);
    }
}

// ------------------------------------------- the borrowing walk against prost's derive

/// One protobuf field with the given tag and wire type: a varint, fixed 32/64, a
/// length-delimited payload, or a bare group start/end key.
fn encode_field(tag: u32, wire_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint(u64::from(tag << 3 | u32::from(wire_type)), &mut out);
    match wire_type {
        0 => {
            let mut v = [0u8; 8];
            let n = payload.len().min(8);
            v[..n].copy_from_slice(&payload[..n]);
            prost::encoding::encode_varint(u64::from_le_bytes(v) % 1_000, &mut out);
        }
        1 => out.extend((0..8).map(|i| payload.get(i).copied().unwrap_or(0))),
        2 => {
            prost::encoding::encode_varint(payload.len() as u64, &mut out);
            out.extend_from_slice(payload);
        }
        5 => out.extend((0..4).map(|i| payload.get(i).copied().unwrap_or(0))),
        _ => {}
    }
    out
}

/// Protobuf-shaped bytes: fields of the KPL's tags (and unknown ones) with random wire
/// types, payloads that are text, random bytes or nested fields, so both accepted and refused
/// bodies are common.
fn field_soup(depth: u32) -> BoxedStrategy<Vec<u8>> {
    let payload = prop_oneof![
        "[a-z0-9]{0,6}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..6),
    ];
    let wire_type = prop_oneof![4 => Just(2u8), 2 => Just(0u8), 1 => 0u8..6];
    let leaf = (1u32..7, wire_type, payload)
        .prop_map(|(tag, wt, p)| encode_field(tag, wt, &p))
        .boxed();
    if depth == 0 {
        return leaf;
    }
    prop_oneof![
        2 => leaf,
        3 => (1u32..7, proptest::collection::vec(field_soup(depth - 1), 0..5))
            .prop_map(|(tag, fields)| encode_field(tag, 2, &fields.concat())),
    ]
    .boxed()
}

/// Mostly well-typed KPL fields (tables, records of indices, data, tags and unknown fields, in
/// any order and repeated), so accepted bodies with repeated and unknown fields are common.
fn typed_field() -> BoxedStrategy<Vec<u8>> {
    let text = || "[a-z0-9]{0,4}".prop_map(String::into_bytes);
    let tag = proptest::collection::vec(
        prop_oneof![
            (1u32..3, text()).prop_map(|(t, p)| encode_field(t, 2, &p)),
            field_soup(0),
        ],
        0..3,
    )
    .prop_map(|f| encode_field(4, 2, &f.concat()));
    let record_field = prop_oneof![
        (1u32..3, proptest::collection::vec(any::<u8>(), 1..2))
            .prop_map(|(t, p)| encode_field(t, 0, &p)),
        text().prop_map(|p| encode_field(3, 2, &p)),
        tag,
        field_soup(0),
    ];
    prop_oneof![
        1 => (1u32..3, text()).prop_map(|(t, p)| encode_field(t, 2, &p)),
        3 => proptest::collection::vec(record_field, 0..6)
            .prop_map(|f| encode_field(3, 2, &f.concat())),
        1 => field_soup(1),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The borrowing walk accepts exactly the bodies prost's derive accepts, and reads the
    /// same tables, indices, payloads and tags from them.
    #[test]
    fn the_borrowing_walk_reads_what_prost_reads(
        fields in proptest::collection::vec(prop_oneof![1 => field_soup(2), 2 => typed_field()], 0..8),
        cut in any::<prop::sample::Index>(), truncate in any::<bool>(),
    ) {
        use prost::Message;
        let mut body = fields.concat();
        if truncate && !body.is_empty() {
            body.truncate(cut.index(body.len()));
        }
        let ours = wire::parse(&body);
        let theirs = proto::AggregatedRecord::decode(&body[..]);
        prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "body {:02x?}", body);
        if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
            prop_assert_eq!(&ours.keys, &theirs.partition_key_table);
            prop_assert_eq!(&ours.hash_keys, &theirs.explicit_hash_key_table);
            prop_assert_eq!(ours.records.len(), theirs.records.len());
            for (a, b) in ours.records.iter().zip(&theirs.records) {
                prop_assert_eq!(a.partition_key_index.unwrap_or_default(), b.partition_key_index);
                prop_assert_eq!(a.explicit_hash_key_index, b.explicit_hash_key_index);
                prop_assert_eq!(a.data.unwrap_or_default(), &b.data[..]);
                let tags: Vec<_> = wire::tags(a.message).collect();
                let want: Vec<_> = b.tags.iter().map(|t| (t.key.as_str(), t.value.as_deref())).collect();
                prop_assert_eq!(tags, want);
                prop_assert_eq!(a.tag_count as usize, b.tags.len());
            }
        }
    }

    /// Borrowed and owned deaggregation agree on every aggregate the aggregator makes.
    #[test]
    fn borrowed_and_owned_deaggregation_agree(
        records in proptest::collection::vec(any_user_record(), 1..20),
        start in any::<u128>(), policy in 0u8..3,
    ) {
        let mut agg = Aggregator::with_max_bytes(MAX_RECORD_BYTES).unwrap();
        for (pk, ehk, data) in &records {
            prop_assert!(agg.try_add(pk, ehk.as_deref(), data).unwrap());
        }
        let a = agg.finish().unwrap();
        let policy = [OutOfRange::Deliver, OutOfRange::DropSubRecord, OutOfRange::DropAggregate][usize::from(policy)];
        let d = Deaggregator::for_shard(start, u128::MAX).out_of_range(policy);
        let borrowed = d.deaggregate_ref(&a.data, &a.partition_key).unwrap();
        let owned = d.deaggregate(&a.data, &a.partition_key).unwrap();
        prop_assert_eq!(borrowed.to_owned_records(), owned.clone());
        for (b, o) in borrowed.records.iter().zip(&owned.records) {
            prop_assert_eq!(b.hash_key(), o.hash_key());
        }
    }
}
