//! Choosing salts (or explicit hash keys) so a hot key's sub-keys land on distinct Kinesis
//! shards, spread evenly, instead of trusting MD5 to avoid collisions.

use super::error::KeyError;
use super::kinesis::{ShardRange, kinesis_hash_key, shard_for, validate_shards};
use super::salt::{check_logical_key, check_salts, decimal_digits, sub_key_name};
use super::{MAX_KINESIS_PARTITION_KEY_CHARS, MAX_SALTS, PLACEMENT_SEARCH_FACTOR};

/// One placed sub-key: its salt, the partition key to send, and where Kinesis will put it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlacedSubKey {
    /// The salt: any number below `64·S`, not necessarily below S.
    pub salt: u32,
    /// The partition key to put records under: `key#salt` (the plain key when S = 1).
    pub partition_key: String,
    /// MD5 of `partition_key` as Kinesis computes it.
    pub hash_key: u128,
    /// Index (into the shard slice given) of the shard that takes this sub-key.
    pub shard: usize,
}

/// The sub-keys chosen for one hot key, and how many landed on each shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The S chosen sub-keys, in salt order.
    pub sub_keys: Vec<PlacedSubKey>,
    /// Sub-keys per shard, indexed like the shard slice.
    pub per_shard: Vec<u32>,
    /// Whether the requested spread was reached within the bounded search.
    pub on_target: bool,
}

/// An `ExplicitHashKey` for one sub-key: a hash key chosen inside a chosen shard's range.
///
/// `PutRecord` still needs a partition key; send `k#salt` (as [`SaltedKey::sub_key`] names it)
/// so consumers can tell the sub-keys apart, with this value as `ExplicitHashKey`.
///
/// [`SaltedKey::sub_key`]: crate::keys::SaltedKey::sub_key
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExplicitHashKey {
    /// The sub-key's salt, `0..S`.
    pub salt: u16,
    /// Index (into the shard slice given) of the shard this hash key falls in.
    pub shard: usize,
    /// The hash key.
    pub hash_key: u128,
}

impl ExplicitHashKey {
    /// The hash key as the decimal string `PutRecord`'s `ExplicitHashKey` takes.
    pub fn as_decimal(&self) -> String {
        self.hash_key.to_string()
    }
}

/// The even spread of `salts` sub-keys over `shards` shards: each gets ⌊S/n⌋ or ⌈S/n⌉.
///
/// The ⌈S/n⌉ shards are spaced out across the list (positions ⌊(2i+1)·n/2r⌋ for the r = S mod
/// n extras), so with S < n the chosen shards are not all at the front.
pub fn even_counts(salts: u16, shards: usize) -> Vec<u32> {
    if shards == 0 {
        return Vec::new();
    }
    let s = usize::from(salts);
    let (q, r) = (s / shards, s % shards);
    // q ≤ S ≤ 65,535, so it fits.
    let mut counts = vec![u32::try_from(q).unwrap_or(u32::MAX); shards];
    for i in 0..r {
        // In u128 so no shard count can overflow; the index is below `shards`.
        let at = (2 * i as u128 + 1) * shards as u128 / (2 * r as u128);
        if let Some(c) = counts.get_mut(at as usize) {
            *c += 1;
        }
    }
    counts
}

/// Choose `salts` salts for `key` whose partition keys land on distinct shards where possible,
/// spread evenly (each shard ⌊S/n⌋ or ⌈S/n⌉ sub-keys).
///
/// Salts 0, 1, 2, … are tried in order, up to `64·S` of them; a candidate is kept if its shard
/// still has room in the even spread. If the search runs out (a shard with a tiny range), the
/// rest are the tried salts that land on the least-loaded shards and `on_target` is false.
/// With S = 1 the one sub-key is the plain key, wherever it lands.
pub fn place_salts(key: &str, salts: u16, shards: &[ShardRange]) -> Result<Placement, KeyError> {
    check_salts(u32::from(salts))?;
    validate_shards(shards)?;
    // More than 2^32 shards behaves like 2^32: either way S < n, so q = 0 and r = S.
    let n = u32::try_from(shards.len()).unwrap_or(u32::MAX);
    let s = u32::from(salts);
    let (q, r) = (s / n, s % n);
    let mut extras = 0u32;
    search(key, salts, shards, |counts, shard| {
        let c = counts[shard];
        if c < q {
            true
        } else if c == q && extras < r {
            extras += 1;
            true
        } else {
            false
        }
    })
    .map(|mut p| {
        p.on_target = p.per_shard.iter().all(|&c| c == q || (c == q + 1 && r > 0));
        p
    })
}

/// Like [`place_salts`], but with an exact sub-key count per shard (e.g. from a [`Plan`]);
/// S is the sum of `counts`.
///
/// [`Plan`]: crate::keys::Plan
pub fn place_salts_with_counts(
    key: &str,
    counts: &[u32],
    shards: &[ShardRange],
) -> Result<Placement, KeyError> {
    let salts = checked_total(counts, shards)?;
    search(key, salts, shards, |placed, shard| {
        placed[shard] < counts[shard]
    })
    .map(|mut p| {
        p.on_target = p.per_shard == counts;
        p
    })
}

/// `ExplicitHashKey`s for `salts` sub-keys spread evenly over `shards`: distinct shards when
/// S ≤ n, otherwise ⌊S/n⌋ or ⌈S/n⌉ per shard, at the midpoints of equal slices of each range.
pub fn explicit_hash_keys(
    shards: &[ShardRange],
    salts: u16,
) -> Result<Vec<ExplicitHashKey>, KeyError> {
    check_salts(u32::from(salts))?;
    validate_shards(shards)?;
    explicit_hash_keys_with_counts(shards, &even_counts(salts, shards.len()))
}

/// `ExplicitHashKey`s with an exact count per shard: shard `j`'s `m` sub-keys sit at the
/// midpoints of `m` equal slices of its range; salts are numbered in shard order.
pub fn explicit_hash_keys_with_counts(
    shards: &[ShardRange],
    counts: &[u32],
) -> Result<Vec<ExplicitHashKey>, KeyError> {
    checked_total(counts, shards)?;
    let mut out = Vec::new();
    let mut salt = 0u16;
    for (shard, (range, &m)) in shards.iter().zip(counts).enumerate() {
        for j in 0..m {
            out.push(ExplicitHashKey {
                salt,
                shard,
                hash_key: range.start + midpoint_offset(range.end - range.start, j, m),
            });
            salt = salt.saturating_add(1);
        }
    }
    Ok(out)
}

/// ⌊(2j+1)·(w+1) / 2m⌋ for a range of `w + 1` hash keys, without overflow; always ≤ w.
fn midpoint_offset(w: u128, j: u32, m: u32) -> u128 {
    let two_m = 2 * u128::from(m);
    let odd = 2 * u128::from(j) + 1;
    // w + 1 = two_m·q + (r + 1), so (2j+1)(w+1)/2m = (2j+1)·q + (2j+1)(r+1)/2m.
    let (q, r) = (w / two_m, w % two_m);
    odd * q + odd * (r + 1) / two_m
}

/// Validate a per-shard count list against the map and return S = its sum.
fn checked_total(counts: &[u32], shards: &[ShardRange]) -> Result<u16, KeyError> {
    validate_shards(shards)?;
    if counts.len() != shards.len() {
        return Err(KeyError::CountsMismatch {
            counts: counts.len(),
            shards: shards.len(),
        });
    }
    let total = counts.iter().fold(0u32, |acc, &c| acc.saturating_add(c));
    check_salts(total)?;
    // check_salts bounds total by MAX_SALTS, which fits u16.
    Ok(u16::try_from(total).unwrap_or(MAX_SALTS))
}

/// The bounded salt search shared by both placements; `accept(counts, shard)` decides whether a
/// candidate landing on `shard` is kept given the counts so far.
fn search(
    key: &str,
    salts: u16,
    shards: &[ShardRange],
    mut accept: impl FnMut(&[u32], usize) -> bool,
) -> Result<Placement, KeyError> {
    check_logical_key(key)?;
    let limit = u32::from(salts) * PLACEMENT_SEARCH_FACTOR;
    check_kinesis_length(key, limit - 1, salts)?;
    let n = shards.len();
    let mut per_shard = vec![0u32; n];

    let place = |salt: u32| -> Option<PlacedSubKey> {
        let partition_key = sub_key_name(key, salt, salts);
        let hash_key = kinesis_hash_key(&partition_key);
        let shard = shard_for(hash_key, shards)?;
        Some(PlacedSubKey {
            salt,
            partition_key,
            hash_key,
            shard,
        })
    };

    if salts == 1 {
        // The plain key cannot be steered: it lands where MD5 puts it.
        let only = place(0).ok_or(KeyError::NoShards)?;
        per_shard[only.shard] += 1;
        return Ok(Placement {
            sub_keys: vec![only],
            per_shard,
            on_target: true,
        });
    }

    let mut chosen: Vec<PlacedSubKey> = Vec::with_capacity(usize::from(salts));
    let mut rejected: Vec<PlacedSubKey> = Vec::new();
    for salt in 0..limit {
        if chosen.len() == usize::from(salts) {
            break;
        }
        let Some(candidate) = place(salt) else {
            continue;
        };
        if accept(&per_shard, candidate.shard) {
            per_shard[candidate.shard] += 1;
            chosen.push(candidate);
        } else {
            rejected.push(candidate);
        }
    }
    // Search exhausted: fill from the rejected candidates on the emptiest shards.
    while chosen.len() < usize::from(salts) && !rejected.is_empty() {
        let best = (0..rejected.len())
            .min_by_key(|&i| (per_shard[rejected[i].shard], rejected[i].salt))
            .unwrap_or(0);
        let candidate = rejected.swap_remove(best);
        per_shard[candidate.shard] += 1;
        chosen.push(candidate);
    }
    chosen.sort_by_key(|p| p.salt);
    Ok(Placement {
        sub_keys: chosen,
        per_shard,
        on_target: false,
    })
}

/// Refuse keys whose longest candidate partition key is over Kinesis's 256-character limit.
fn check_kinesis_length(key: &str, max_salt: u32, salts: u16) -> Result<(), KeyError> {
    let chars = key.chars().count()
        + if salts > 1 {
            1 + decimal_digits(max_salt)
        } else {
            0
        };
    if chars > MAX_KINESIS_PARTITION_KEY_CHARS {
        return Err(KeyError::PartitionKeyTooLong {
            key_prefix: key.chars().take(32).collect(),
            chars,
            max: MAX_KINESIS_PARTITION_KEY_CHARS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::kinesis::tests::{any_shard_map, cut_map};
    use proptest::prelude::*;

    #[test]
    fn p9s_four_sub_keys_land_one_per_shard() {
        // Python: md5("p9#0..3") on 4 even shards → shards 0, 1, 0, 3; so salt 2 is skipped and
        // the search goes on until shard 2 is hit.
        let shards = ShardRange::even_split(4).unwrap();
        let p = place_salts("p9", 4, &shards).unwrap();
        assert!(p.on_target);
        assert_eq!(p.per_shard, vec![1, 1, 1, 1]);
        let salts: Vec<u32> = p.sub_keys.iter().map(|s| s.salt).collect();
        assert_eq!(&salts[..3], &[0, 1, 3]);
        assert!(salts[3] > 3);
        for s in &p.sub_keys {
            assert_eq!(s.partition_key, format!("p9#{}", s.salt));
        }
    }

    #[test]
    fn a_single_sub_key_is_the_plain_key() {
        let shards = ShardRange::even_split(4).unwrap();
        let p = place_salts("p9", 1, &shards).unwrap();
        assert_eq!(p.sub_keys.len(), 1);
        assert_eq!(p.sub_keys[0].partition_key, "p9");
        // md5("p9") = 289324316144189039582144540429744379648, in the fourth quarter.
        assert_eq!(p.sub_keys[0].shard, 3);
    }

    #[test]
    fn a_shard_too_narrow_to_hit_is_reported_off_target() {
        // Shard 1 owns one hash key; no salt search will hit it.
        let shards = cut_map(&[1000u128, 1001].into_iter().collect());
        let p = place_salts("p9", 3, &shards).unwrap();
        assert_eq!(p.sub_keys.len(), 3);
        assert!(!p.on_target);
        assert_eq!(p.per_shard[1], 0);
    }

    #[test]
    fn explicit_hash_keys_sit_at_the_midpoints() {
        let shards = ShardRange::even_split(2).unwrap();
        let keys = explicit_hash_keys(&shards, 2).unwrap();
        // Midpoints of the two halves: 2^126 and 3·2^126.
        assert_eq!(keys[0].hash_key, 1u128 << 126);
        assert_eq!(keys[1].hash_key, 3u128 << 126);
        assert_eq!(
            keys[0].as_decimal(),
            "85070591730234615865843651857942052864"
        );
        let one = ShardRange::even_split(1).unwrap();
        assert_eq!(
            explicit_hash_keys(&one, 1).unwrap()[0].hash_key,
            1u128 << 127
        );
    }

    #[test]
    fn bad_placement_inputs_are_refused() {
        let shards = ShardRange::even_split(4).unwrap();
        assert_eq!(place_salts("", 4, &shards), Err(KeyError::EmptyKey));
        assert_eq!(place_salts("p9", 0, &shards), Err(KeyError::ZeroSalts));
        assert_eq!(place_salts("p9", 4, &[]), Err(KeyError::NoShards));
        assert!(matches!(
            place_salts(&"x".repeat(253), 4, &shards),
            Err(KeyError::PartitionKeyTooLong { .. })
        ));
        // 4 sub-keys search salts below 256: "#255" is 4 characters; 252 + 4 = 256 fits.
        assert!(place_salts(&"x".repeat(252), 4, &shards).is_ok());
        assert_eq!(
            place_salts_with_counts("p9", &[1, 1], &shards),
            Err(KeyError::CountsMismatch {
                counts: 2,
                shards: 4
            })
        );
        assert_eq!(
            place_salts_with_counts("p9", &[0, 0, 0, 0], &shards),
            Err(KeyError::ZeroSalts)
        );
        assert!(matches!(
            explicit_hash_keys(&shards, MAX_SALTS + 1),
            Err(KeyError::TooManySalts { .. })
        ));
    }

    #[test]
    fn even_counts_space_out_the_extra_sub_keys() {
        assert_eq!(even_counts(8, 4), vec![2, 2, 2, 2]);
        assert_eq!(even_counts(2, 4), vec![0, 1, 0, 1]);
        assert_eq!(even_counts(6, 4), vec![1, 2, 1, 2]);
        assert_eq!(even_counts(1, 3), vec![0, 1, 0]);
    }

    fn is_even(counts: &[u32], salts: u16) -> bool {
        let n = counts.len() as u32;
        let s = u32::from(salts);
        counts.iter().all(|&c| c == s / n || c == s.div_ceil(n)) && counts.iter().sum::<u32>() == s
    }

    proptest! {
        #[test]
        fn placed_salts_spread_evenly_over_even_shards(
            key in "[a-z]{1,8}(:[a-z0-9]{1,6})?",
            salts in 1u16..=64,
            n in 1usize..=16,
        ) {
            let shards = ShardRange::even_split(n).unwrap();
            let p = place_salts(&key, salts, &shards).unwrap();
            prop_assert!(p.on_target);
            if salts > 1 {
                prop_assert!(is_even(&p.per_shard, salts), "{:?}", p.per_shard);
            }
        }

        #[test]
        fn every_placed_sub_key_is_where_kinesis_puts_it(
            key in "[a-z]{1,8}", salts in 1u16..=40, shards in any_shard_map(),
        ) {
            let p = place_salts(&key, salts, &shards).unwrap();
            prop_assert_eq!(p.sub_keys.len(), usize::from(salts));
            let mut per_shard = vec![0u32; shards.len()];
            let mut seen = std::collections::BTreeSet::new();
            for s in &p.sub_keys {
                prop_assert!(seen.insert(s.salt), "salt {} chosen twice", s.salt);
                prop_assert!(s.salt < u32::from(salts) * PLACEMENT_SEARCH_FACTOR);
                prop_assert_eq!(kinesis_hash_key(&s.partition_key), s.hash_key);
                prop_assert_eq!(shard_for(s.hash_key, &shards), Some(s.shard));
                per_shard[s.shard] += 1;
            }
            prop_assert_eq!(&per_shard, &p.per_shard);
            if p.on_target && salts > 1 {
                prop_assert!(is_even(&p.per_shard, salts));
            }
        }

        #[test]
        fn placement_with_counts_meets_the_counts_on_even_shards(
            key in "[a-z]{1,8}", counts in proptest::collection::vec(0u32..=6, 1..=8),
        ) {
            prop_assume!(counts.iter().sum::<u32>() >= 2);
            let shards = ShardRange::even_split(counts.len()).unwrap();
            let p = place_salts_with_counts(&key, &counts, &shards).unwrap();
            prop_assert!(p.on_target);
            prop_assert_eq!(p.per_shard, counts);
        }

        #[test]
        fn explicit_hash_keys_land_on_distinct_shards_evenly(
            shards in any_shard_map(), salts in 1u16..=MAX_SALTS,
        ) {
            let keys = explicit_hash_keys(&shards, salts).unwrap();
            prop_assert_eq!(keys.len(), usize::from(salts));
            let mut per_shard = vec![0u32; shards.len()];
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(usize::from(k.salt), i);
                prop_assert_eq!(shard_for(k.hash_key, &shards), Some(k.shard));
                prop_assert_eq!(k.as_decimal().parse::<u128>(), Ok(k.hash_key));
                per_shard[k.shard] += 1;
            }
            prop_assert!(is_even(&per_shard, salts), "{:?}", per_shard);
        }
    }
}
