//! The stable hash behind calculated suffixes and per-writer salts, fixed forever.
//!
//! `stable_hash64(bytes)` = the first 8 bytes of MD5(bytes), read as a big-endian `u64`. In
//! Python: `int.from_bytes(hashlib.md5(b).digest()[:8], "big")`. Stored items depend on it
//! (a reader recomputes a writer's suffix), so it must never change between releases,
//! platforms or languages; that rules out `std`'s `DefaultHasher`, whose algorithm is
//! unspecified. MD5 is already needed for Kinesis placement, mixes all input bits into every
//! output bit (FNV-1a's low bits, which `mod S` keeps, mix poorly on sequential ids), and has a
//! reference implementation in every language. It is not used for security.

use md5::{Digest, Md5};

use super::error::KeyError;
use super::salt::{SaltedKey, check_salts};

/// The first 8 bytes of MD5(`bytes`), big-endian: heatsink's stable hash, fixed forever.
pub fn stable_hash64(bytes: &[u8]) -> u64 {
    let digest = Md5::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A suffix computed from an item's attribute, so a reader of one item knows its one sub-key.
///
/// suffix = [`stable_hash64`]`(attribute) mod S` (the DynamoDB guide's "calculated suffixes"). It
/// assumes S is fixed: changing S moves items whose `hash mod S` changes, which needs a
/// backfill, not just the fan-out transition of [`SaltState`](crate::keys::SaltState).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalculatedSuffix {
    salts: u16,
}

impl CalculatedSuffix {
    /// A calculated suffix over `salts` sub-keys (`1..=MAX_SALTS`).
    pub fn new(salts: u16) -> Result<Self, KeyError> {
        check_salts(u32::from(salts))?;
        Ok(Self { salts })
    }

    /// The salt count S.
    pub fn salts(&self) -> u16 {
        self.salts
    }

    /// The suffix of an item: `stable_hash64(attribute) mod S`, always below S.
    pub fn suffix(&self, attribute: &[u8]) -> u16 {
        let s = stable_hash64(attribute) % u64::from(self.salts);
        // `s < salts ≤ MAX_SALTS` fits; the fallback is unreachable but keeps this total.
        u16::try_from(s).unwrap_or(0)
    }

    /// The sub-key of `key` that holds the item with `attribute` (validates `key`).
    pub fn sub_key(&self, key: &str, attribute: &[u8]) -> Result<String, KeyError> {
        SaltedKey::new(key, self.salts)?.sub_key(self.suffix(attribute))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::MAX_SALTS;
    use proptest::prelude::*;

    // Expected values computed independently with Python 3:
    //   int.from_bytes(hashlib.md5(b).digest()[:8], "big")
    #[test]
    fn the_stable_hash_matches_pinned_md5_vectors() {
        assert_eq!(stable_hash64(b""), 0xd41d_8cd9_8f00_b204);
        assert_eq!(stable_hash64(b"a"), 0x0cc1_75b9_c0f1_b6a8);
        assert_eq!(stable_hash64(b"user-0"), 12_689_470_447_221_312_008);
        assert_eq!(stable_hash64(b"user-42"), 8_516_795_111_299_649_485);
        assert_eq!(stable_hash64("café".as_bytes()), 509_328_852_815_435_076);
    }

    #[test]
    fn calculated_suffixes_match_pinned_vectors() {
        let s16 = CalculatedSuffix::new(16).unwrap();
        let s100 = CalculatedSuffix::new(100).unwrap();
        let s7 = CalculatedSuffix::new(7).unwrap();
        // (input, mod 16, mod 100, mod 7), from Python as above.
        let vectors: [(&[u8], u16, u16, u16); 6] = [
            (b"", 4, 88, 0),
            (b"a", 8, 0, 6),
            (b"user-0", 8, 8, 5),
            (b"user-1", 6, 6, 6),
            (b"user-42", 13, 85, 3),
            (b"nova-post-1", 0, 48, 2),
        ];
        for (input, m16, m100, m7) in vectors {
            assert_eq!(s16.suffix(input), m16, "{input:?} mod 16");
            assert_eq!(s100.suffix(input), m100, "{input:?} mod 100");
            assert_eq!(s7.suffix(input), m7, "{input:?} mod 7");
        }
        assert_eq!(
            CalculatedSuffix::new(8)
                .unwrap()
                .sub_key("likes:p9", b"user-42"),
            Ok("likes:p9#5".to_owned())
        );
    }

    /// Pearson's chi-square statistic of `counts` against a uniform expectation.
    fn chi_square(counts: &[u64], total: u64) -> f64 {
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    #[test]
    fn suffixes_of_a_million_sequential_ids_are_uniform() {
        // 99.9% critical values of chi-square: 15 degrees of freedom 37.697, 99 → 148.230.
        // MD5 costs ~3 µs in an unoptimised build, so the ids are hashed on every core.
        const N: u64 = 1_000_000;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let chunk = N.div_ceil(threads);
        let (by16, by100) = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        let mut by16 = [0u64; 16];
                        let mut by100 = [0u64; 100];
                        for i in t * chunk..((t + 1) * chunk).min(N) {
                            let h = stable_hash64(format!("user-{i}").as_bytes());
                            by16[(h % 16) as usize] += 1;
                            by100[(h % 100) as usize] += 1;
                        }
                        (by16, by100)
                    })
                })
                .collect();
            let mut by16 = [0u64; 16];
            let mut by100 = [0u64; 100];
            for w in workers {
                let (a, b) = w.join().unwrap();
                by16.iter_mut().zip(a).for_each(|(t, x)| *t += x);
                by100.iter_mut().zip(b).for_each(|(t, x)| *t += x);
            }
            (by16, by100)
        });
        assert_eq!(by16.iter().sum::<u64>(), N);
        let c16 = chi_square(&by16, N);
        let c100 = chi_square(&by100, N);
        assert!(c16 < 37.697, "S=16: chi-square {c16}");
        assert!(c100 < 148.230, "S=100: chi-square {c100}");
    }

    proptest! {
        #[test]
        fn a_calculated_suffix_is_below_s_and_depends_only_on_the_attribute(
            attribute in proptest::collection::vec(any::<u8>(), 0..64),
            salts in 1u16..=MAX_SALTS,
        ) {
            let c = CalculatedSuffix::new(salts).unwrap();
            let s = c.suffix(&attribute);
            prop_assert!(s < salts);
            prop_assert_eq!(s, c.suffix(&attribute.clone()));
            prop_assert_eq!(u64::from(s), stable_hash64(&attribute) % u64::from(salts));
        }
    }
}
