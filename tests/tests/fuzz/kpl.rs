//! KPL aggregates: structure-aware generators (valid MD5, hostile key tables, missing fields,
//! out-of-range indices, tens of thousands of empty user records), the issue-32 aggregate as a
//! regression, and unstructured bytes behind a valid magic and MD5.

use heatsink::kinesis::kpl::{
    Deaggregator, KplError, MAGIC, MAX_PARTITION_KEY_CHARS, MIN_SUB_RECORD_BYTES, OutOfRange,
    deaggregate_ref,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::hostile::{field, issue_32_aggregate, varint, wrap};
use crate::{fuzz, meter};

/// What `Deaggregator::open` may hold for a record of `n` bytes (docs/bounds.md): 10 × n, plus
/// the small fixed part of an empty table.
fn open_bound(n: usize) -> usize {
    10 * n + 256
}

/// One user record as written: each field may be missing.
#[derive(Debug, Clone)]
struct Rec {
    pk: Option<u64>,
    ehk: Option<u64>,
    data: Option<Vec<u8>>,
    tags: u8,
}

impl Rec {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut r = Vec::new();
        if let Some(pk) = self.pk {
            varint(1 << 3, &mut r);
            varint(pk, &mut r);
        }
        if let Some(ehk) = self.ehk {
            varint(2 << 3, &mut r);
            varint(ehk, &mut r);
        }
        if let Some(data) = &self.data {
            field(3, data, &mut r);
        }
        for t in 0..self.tags {
            let mut tag = Vec::new();
            field(1, format!("t{t}").as_bytes(), &mut tag);
            field(4, &tag, &mut r);
        }
        field(3, &r, out);
    }
}

/// An aggregate's parts, in the order they are written.
#[derive(Debug, Clone)]
struct Shape {
    keys: Vec<String>,
    hash_keys: Vec<String>,
    records: Vec<Rec>,
    /// Empty user records of key 0 after `records` (the issue's shape at scale).
    empty: usize,
    /// 0: tables first (as the KPL writes), 1: records first, 2: interleaved.
    order: u8,
    /// Flip one body byte after the MD5 is computed.
    corrupt: bool,
}

impl Shape {
    fn encode(&self) -> Vec<u8> {
        let mut tables = Vec::new();
        for k in &self.keys {
            field(1, k.as_bytes(), &mut tables);
        }
        for h in &self.hash_keys {
            field(2, h.as_bytes(), &mut tables);
        }
        let mut first = Vec::new();
        let mut second = Vec::new();
        for (i, r) in self.records.iter().enumerate() {
            r.encode(if i < self.records.len() / 2 {
                &mut first
            } else {
                &mut second
            });
        }
        second.extend([0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00].repeat(self.empty));
        let body = match self.order {
            0 => [tables, first, second].concat(),
            1 => [first, second, tables].concat(),
            _ => [first, tables, second].concat(),
        };
        let mut data = wrap(&body);
        if self.corrupt && data.len() > 21 {
            data[MAGIC.len()] ^= 0x40;
        }
        data
    }
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => "[a-z0-9#]{1,16}",
        3 => "\\PC{1,64}",
        1 => (250usize..=262).prop_map(|n| "k".repeat(n)),
        1 => (250usize..=262).prop_map(|n| "é".repeat(n)),
        1 => (1_025usize..40_000).prop_map(|n| "x".repeat(n)),
        1 => Just(String::new()),
    ]
}

fn hash_key() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => any::<u128>().prop_map(|h| h.to_string()),
        1 => "[a-z0-9]{1,4}",
        1 => (250usize..300).prop_map(|n| "9".repeat(n)),
    ]
}

/// A user record over tables of `keys` and `hash_keys` entries: indices mostly in range.
fn rec(keys: usize, hash_keys: usize) -> impl Strategy<Value = Rec> {
    let keys = keys as u64;
    let hash_keys = hash_keys as u64;
    // Faults are rare per record (1 in 600), so that about a third of aggregates of up to 60
    // records have none and decode.
    let ehk = if hash_keys == 0 {
        prop_oneof![600 => Just(None), 1 => (0u64..4).prop_map(Some)].boxed()
    } else {
        prop_oneof![
            400 => Just(None),
            200 => (0..hash_keys).prop_map(Some),
            1 => (hash_keys..1 << 40).prop_map(Some),
        ]
        .boxed()
    };
    (
        prop_oneof![600 => (0..keys).prop_map(Some), 1 => Just(None), 1 => (keys..1 << 40).prop_map(Some)],
        ehk,
        prop_oneof![600 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some), 1 => Just(None)],
        prop_oneof![100 => Just(0u8), 1 => 1u8..3],
    )
        .prop_map(|(pk, ehk, data, tags)| Rec { pk, ehk, data, tags })
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        proptest::collection::vec(key(), 1..6),
        prop_oneof![2 => Just(Vec::new()), 1 => proptest::collection::vec(hash_key(), 1..4)],
    )
        .prop_flat_map(|(keys, hash_keys)| {
            let records = proptest::collection::vec(rec(keys.len(), hash_keys.len()), 0..60);
            (
                Just(keys),
                Just(hash_keys),
                records,
                prop_oneof![12 => Just(0usize), 1 => 1_000usize..30_000],
                0u8..3,
                proptest::bool::weighted(0.05),
            )
        })
        .prop_map(|(keys, hash_keys, records, empty, order, corrupt)| Shape {
            keys,
            hash_keys,
            records,
            empty,
            order,
            corrupt,
        })
}

fn policy() -> impl Strategy<Value = Option<(u128, OutOfRange)>> {
    prop_oneof![
        2 => Just(None),
        1 => (any::<u128>(), prop_oneof![Just(OutOfRange::Deliver), Just(OutOfRange::DropSubRecord), Just(OutOfRange::DropAggregate)])
            .prop_map(Some),
    ]
}

/// The invariant on one record: refused with a one-line typed error, or opened within every
/// bound, holding at most [`open_bound`], and walked lazily as it collects.
fn check(data: &[u8], d: &Deaggregator, t: &mut crate::Tally) -> Result<(), TestCaseError> {
    let (opened, peak) = meter::measure(|| d.open(data, "outer"));
    t.allocated(peak, data.len(), open_bound(data.len()))?;
    match opened {
        Err(e) => {
            prop_assert!(!e.to_string().contains('\n'), "{e}");
            t.refuse(&e);
        }
        Ok(opened) => {
            t.accept();
            let body = data.len().saturating_sub(MAGIC.len() + 16);
            if opened.is_aggregated() {
                prop_assert!(opened.total() <= body / MIN_SUB_RECORD_BYTES);
            }
            prop_assert!(opened.partition_keys().len() <= opened.total());
            prop_assert!(
                opened.partition_keys().iter().all(
                    |k| !opened.is_aggregated() || k.chars().count() <= MAX_PARTITION_KEY_CHARS
                )
            );
            let lazy: Vec<_> = opened.iter().collect();
            prop_assert_eq!(lazy.len(), opened.len());
            let collected = d
                .deaggregate_ref(data, "outer")
                .expect("opened, so it collects");
            prop_assert_eq!(&lazy, &collected.records);
        }
    }
    Ok(())
}

#[test]
fn structure_aware_aggregates_are_decoded_within_their_bounds_or_refused_with_a_typed_error() {
    let tally = fuzz(
        "kpl aggregates",
        (shape(), policy()),
        |(shape, policy), t| {
            let data = shape.encode();
            let d = match policy {
                None => Deaggregator::new(),
                Some((start, p)) => {
                    Deaggregator::for_shard(start, start.saturating_add(u128::MAX / 2))
                        .out_of_range(p)
                }
            };
            check(&data, &d, t)
        },
    );
    // Not a vacuous property: many cases decode, and every bound is hit.
    assert!(tally.accepted * 5 >= tally.cases, "{tally:?}");
    for kind in [
        "KeyTooLong",
        "MissingField",
        "PartitionKeyIndexOutOfRange",
        "BadDigest",
    ] {
        assert!(
            tally.refused.contains_key(kind),
            "no case hit {kind}: {tally:?}"
        );
    }
}

#[test]
fn any_bytes_behind_a_valid_magic_and_md5_are_decoded_within_bounds_or_refused() {
    let bytes = proptest::collection::vec(any::<u8>(), 0..2_000);
    fuzz("kpl unstructured bodies", bytes, |body, t| {
        check(&wrap(&body), &Deaggregator::new(), t)?;
        // The same bytes without the magic: a plain record, passed through.
        let plain = Deaggregator::new().open(&body, "outer");
        prop_assert!(body.starts_with(&MAGIC) || plain.is_ok_and(|p| !p.is_aggregated()));
        Ok(())
    });
}

#[test]
fn the_issue_32_aggregate_is_refused_for_its_key_holding_under_a_kilobyte() {
    let data = issue_32_aggregate();
    assert_eq!(data.len(), 1_020_024);
    let (refused, peak) = meter::measure(|| Deaggregator::new().open(&data, "k").map(|o| o.len()));
    assert_eq!(
        refused,
        Err(KplError::KeyTooLong {
            field: "partition_key_table",
            index: 0,
            bytes: 300_000,
            max_chars: 256
        })
    );
    assert!(peak < 1_024, "held {peak} bytes deciding");
    let (collected, peak) = meter::measure(|| deaggregate_ref(&data, "k").map(|r| r.len()));
    assert!(collected.is_err());
    assert!(peak < 1_024, "held {peak} bytes deciding");
}
