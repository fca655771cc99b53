//! Salted keys: one logical key `k` split into S sub-keys `k#0..k#S-1`, and the writer's choice
//! of which sub-key takes a write.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::KeyError;
use super::hash::stable_hash64;
use super::{MAX_PARTITION_KEY_BYTES, MAX_SALTS, SEPARATOR};

/// A logical key split into S sub-keys; S = 1 is the plain key, unchanged.
///
/// Sub-key `i` of key `k` is `k#i` (decimal `i`, no padding) when S ≥ 2, and `k` itself when
/// S = 1, so a key that never gets hot is stored exactly as it would be without heatsink.
/// Construction checks every sub-key against DynamoDB's 2,048-byte partition-key limit, so any
/// sub-key a valid `SaltedKey` hands out can be written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SaltedKey {
    key: String,
    salts: u16,
}

/// How a writer picks the salt for one write; every variant is a pure function of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaltChoice<'a> {
    /// Salt = the caller's random number mod S (bias below 2^-56 for S ≤ 256).
    Random(u64),
    /// Salt = the caller's counter mod S; consecutive counters visit every sub-key in turn.
    RoundRobin(u64),
    /// Salt = [`stable_hash64`] of the writer id mod S: one writer always writes one sub-key.
    PerWriter(&'a str),
}

/// A shared round-robin counter for [`SaltChoice::RoundRobin`], safe to use from many threads.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicU64,
}

impl RoundRobin {
    /// A counter whose first choice is salt 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A counter whose first choice is `start` mod S (spread writers by starting them apart).
    pub fn starting_at(start: u64) -> Self {
        Self {
            next: AtomicU64::new(start),
        }
    }

    /// The next round-robin choice; the counter wraps at 2^64.
    pub fn next_choice(&self) -> SaltChoice<'static> {
        SaltChoice::RoundRobin(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

impl SaltedKey {
    /// Split `key` into `salts` sub-keys; refuses empty, ambiguous or over-long keys and S
    /// outside `1..=MAX_SALTS`.
    pub fn new(key: impl Into<String>, salts: u16) -> Result<Self, KeyError> {
        let key = key.into();
        check_salts(u32::from(salts))?;
        check_logical_key(&key)?;
        check_dynamodb_length(&key, salts)?;
        Ok(Self { key, salts })
    }

    /// The plain key with S = 1 (its only sub-key is the key itself).
    pub fn unsalted(key: impl Into<String>) -> Result<Self, KeyError> {
        Self::new(key, 1)
    }

    /// The logical key `k`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The salt count S.
    pub fn salts(&self) -> u16 {
        self.salts
    }

    /// Whether the key is split (S ≥ 2).
    pub fn is_salted(&self) -> bool {
        self.salts > 1
    }

    /// The sub-key for `salt` (`k#salt`, or `k` when S = 1); `salt` must be below S.
    pub fn sub_key(&self, salt: u16) -> Result<String, KeyError> {
        if salt >= self.salts {
            return Err(KeyError::SaltOutOfRange {
                salt,
                salts: self.salts,
            });
        }
        Ok(sub_key_name(&self.key, u32::from(salt), self.salts))
    }

    /// All S sub-keys in salt order: what a reader fans out to and merges.
    pub fn sub_keys(&self) -> Vec<String> {
        (0..self.salts)
            .map(|salt| sub_key_name(&self.key, u32::from(salt), self.salts))
            .collect()
    }

    /// The salt a write goes to under `choice`; always below S.
    pub fn salt_for(&self, choice: SaltChoice<'_>) -> u16 {
        let s = u64::from(self.salts);
        let pick = match choice {
            SaltChoice::Random(r) => r % s,
            SaltChoice::RoundRobin(n) => n % s,
            SaltChoice::PerWriter(writer) => stable_hash64(writer.as_bytes()) % s,
        };
        // `pick < s ≤ MAX_SALTS`, so it fits; the fallback is unreachable but keeps this total.
        u16::try_from(pick).unwrap_or(0)
    }

    /// The sub-key a write goes to under `choice`.
    pub fn write_key(&self, choice: SaltChoice<'_>) -> String {
        sub_key_name(&self.key, u32::from(self.salt_for(choice)), self.salts)
    }
}

/// Split a sub-key back into its logical key and salt (`None` for a plain, unsalted key).
///
/// Inverse of [`SaltedKey::sub_key`]: `"likes:p9#3"` → `("likes:p9", Some(3))`, `"likes:p9"` →
/// `("likes:p9", None)`. Refuses text no valid `SaltedKey` produces: empty text, a salt with a
/// leading zero or above `u32::MAX`, or a logical part that itself ends in `#<digits>`.
pub fn parse_sub_key(sub_key: &str) -> Result<(&str, Option<u32>), KeyError> {
    match split_trailing_number(sub_key) {
        None => {
            if sub_key.is_empty() {
                Err(KeyError::EmptyKey)
            } else {
                Ok((sub_key, None))
            }
        }
        Some((head, digits)) => {
            let canonical = digits == "0" || !digits.starts_with('0');
            match digits.parse::<u32>() {
                Ok(salt) if canonical => {
                    check_logical_key(head)?;
                    Ok((head, Some(salt)))
                }
                _ => Err(ambiguous(sub_key)),
            }
        }
    }
}

/// `k#salt` when S ≥ 2, `k` when S = 1 (the one naming rule every strategy shares).
pub(crate) fn sub_key_name(key: &str, salt: u32, salts: u16) -> String {
    if salts <= 1 {
        key.to_owned()
    } else {
        format!("{key}{SEPARATOR}{salt}")
    }
}

/// Refuse S = 0 and S above [`MAX_SALTS`].
pub(crate) fn check_salts(salts: u32) -> Result<(), KeyError> {
    if salts == 0 {
        Err(KeyError::ZeroSalts)
    } else if salts > u32::from(MAX_SALTS) {
        Err(KeyError::TooManySalts {
            salts,
            max: MAX_SALTS,
        })
    } else {
        Ok(())
    }
}

/// Refuse the empty key and keys ending in `#<digits>` (they would read as sub-keys).
pub(crate) fn check_logical_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::EmptyKey);
    }
    if split_trailing_number(key).is_some() {
        return Err(ambiguous(key));
    }
    Ok(())
}

/// Bytes of the longest sub-key of `key` with `salts` salts named `0..=max_salt`.
pub(crate) fn longest_sub_key_len(key_len: usize, max_salt: u32, salts: u16) -> usize {
    if salts <= 1 {
        key_len
    } else {
        key_len + SEPARATOR.len_utf8() + decimal_digits(max_salt)
    }
}

/// Refuse keys whose longest sub-key is over DynamoDB's 2,048-byte partition-key limit.
pub(crate) fn check_dynamodb_length(key: &str, salts: u16) -> Result<(), KeyError> {
    let bytes = longest_sub_key_len(key.len(), u32::from(salts.saturating_sub(1)), salts);
    if bytes > MAX_PARTITION_KEY_BYTES {
        return Err(KeyError::KeyTooLong {
            sub_key_prefix: key.chars().take(32).collect(),
            bytes,
            max: MAX_PARTITION_KEY_BYTES,
        });
    }
    Ok(())
}

/// Number of decimal digits of `n` (1 for 0).
pub(crate) fn decimal_digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `Some((head, digits))` when `s` is `head#digits` with at least one ASCII digit.
fn split_trailing_number(s: &str) -> Option<(&str, &str)> {
    let (head, tail) = s.rsplit_once(SEPARATOR)?;
    if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
        Some((head, tail))
    } else {
        None
    }
}

fn ambiguous(key: &str) -> KeyError {
    let key_hint = match key.rsplit_once(SEPARATOR) {
        Some((head, tail)) => format!("{head}-{tail}"),
        None => key.to_owned(),
    };
    KeyError::AmbiguousKey {
        key: key.to_owned(),
        key_hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_unsalted_key_is_the_plain_key() {
        let k = SaltedKey::unsalted("likes:p9").unwrap();
        assert_eq!(k.sub_keys(), vec!["likes:p9"]);
        assert_eq!(k.write_key(SaltChoice::Random(12345)), "likes:p9");
        assert!(!k.is_salted());
    }

    #[test]
    fn a_salted_key_has_s_numbered_sub_keys() {
        let k = SaltedKey::new("likes:{p9}", 8).unwrap();
        assert_eq!(
            k.sub_keys(),
            (0..8)
                .map(|i| format!("likes:{{p9}}#{i}"))
                .collect::<Vec<_>>()
        );
        assert_eq!(k.sub_key(7).unwrap(), "likes:{p9}#7");
        assert_eq!(
            k.sub_key(8),
            Err(KeyError::SaltOutOfRange { salt: 8, salts: 8 })
        );
    }

    #[test]
    fn zero_and_too_many_salts_are_refused() {
        assert_eq!(SaltedKey::new("k", 0), Err(KeyError::ZeroSalts));
        assert_eq!(
            SaltedKey::new("k", MAX_SALTS + 1),
            Err(KeyError::TooManySalts {
                salts: u32::from(MAX_SALTS) + 1,
                max: MAX_SALTS
            })
        );
        assert!(SaltedKey::new("k", MAX_SALTS).is_ok());
    }

    #[test]
    fn the_empty_key_is_refused() {
        assert_eq!(SaltedKey::new("", 4), Err(KeyError::EmptyKey));
    }

    #[test]
    fn the_length_limit_counts_the_suffix() {
        let at_limit = "x".repeat(MAX_PARTITION_KEY_BYTES);
        assert!(SaltedKey::unsalted(at_limit.clone()).is_ok());
        // With S = 10 the longest sub-key adds "#9": two bytes.
        assert!(matches!(
            SaltedKey::new(at_limit, 10),
            Err(KeyError::KeyTooLong { bytes: 2050, .. })
        ));
        let room_for_hash_9 = "x".repeat(MAX_PARTITION_KEY_BYTES - 2);
        assert!(SaltedKey::new(room_for_hash_9.clone(), 10).is_ok());
        // S = 11 needs "#10": three bytes.
        assert!(matches!(
            SaltedKey::new(room_for_hash_9, 11),
            Err(KeyError::KeyTooLong { bytes: 2049, .. })
        ));
        // The limit is in UTF-8 bytes, not characters.
        assert!(SaltedKey::unsalted("é".repeat(1025)).is_err());
    }

    #[test]
    fn a_key_ending_in_hash_digits_is_ambiguous() {
        // "a#1" unsalted and sub-key 1 of "a" would be the same item.
        assert!(matches!(
            SaltedKey::unsalted("a#1"),
            Err(KeyError::AmbiguousKey { .. })
        ));
        // Single-table design keys with '#' elsewhere are fine.
        assert!(SaltedKey::new("USER#u42#LIKES", 4).is_ok());
        assert!(SaltedKey::new("a#", 4).is_ok());
        assert!(SaltedKey::new("a#1x", 4).is_ok());
    }

    #[test]
    fn round_robin_visits_every_salt_in_turn() {
        let k = SaltedKey::new("k", 5).unwrap();
        let rr = RoundRobin::new();
        let salts: Vec<u16> = (0..10).map(|_| k.salt_for(rr.next_choice())).collect();
        assert_eq!(salts, vec![0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_writer_always_writes_the_same_sub_key() {
        // md5("router-3")[..8] as big-endian u64, mod 8: pinned so the mapping never drifts.
        let k = SaltedKey::new("likes:p9", 8).unwrap();
        let expected = stable_hash64(b"router-3") % 8;
        assert_eq!(
            u64::from(k.salt_for(SaltChoice::PerWriter("router-3"))),
            expected
        );
        assert_eq!(
            k.write_key(SaltChoice::PerWriter("router-3")),
            k.write_key(SaltChoice::PerWriter("router-3"))
        );
    }

    #[test]
    fn parse_sub_key_refuses_what_no_salted_key_produces() {
        assert_eq!(parse_sub_key("p9#3"), Ok(("p9", Some(3))));
        assert_eq!(parse_sub_key("USER#u1"), Ok(("USER#u1", None)));
        assert_eq!(parse_sub_key(""), Err(KeyError::EmptyKey));
        assert!(parse_sub_key("p9#03").is_err());
        assert!(parse_sub_key("p9#1#2").is_err());
        assert!(parse_sub_key("#3").is_err());
        assert!(parse_sub_key("p9#99999999999").is_err());
    }

    fn any_key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z:{}#]{0,12}",
            "[A-Z]{1,4}#[0-9]{1,3}(#[a-z]{1,3})?",
            any::<String>(),
        ]
    }

    fn any_choice() -> impl Strategy<Value = (u8, u64, String)> {
        (0u8..3, any::<u64>(), "[a-z0-9-]{0,10}")
    }

    fn as_choice(c: &(u8, u64, String)) -> SaltChoice<'_> {
        match c.0 {
            0 => SaltChoice::Random(c.1),
            1 => SaltChoice::RoundRobin(c.1),
            _ => SaltChoice::PerWriter(&c.2),
        }
    }

    proptest! {
        #[test]
        fn every_write_lands_on_one_of_the_s_sub_keys(
            key in any_key(), salts in 1u16..=MAX_SALTS, choice in any_choice()
        ) {
            if let Ok(k) = SaltedKey::new(key, salts) {
                let salt = k.salt_for(as_choice(&choice));
                prop_assert!(salt < salts);
                let written = k.write_key(as_choice(&choice));
                prop_assert!(k.sub_keys().contains(&written));
                prop_assert_eq!(written, k.sub_key(salt).unwrap());
            }
        }

        #[test]
        fn a_sub_key_names_exactly_one_key_and_salt(
            key in any_key(), salts in 1u16..=MAX_SALTS, salt in any::<u16>()
        ) {
            if let Ok(k) = SaltedKey::new(key, salts) {
                let salt = salt % salts;
                let sub = k.sub_key(salt).unwrap();
                let expected = if salts == 1 { None } else { Some(u32::from(salt)) };
                prop_assert_eq!(parse_sub_key(&sub), Ok((k.key(), expected)));
            }
        }

        #[test]
        fn validation_refuses_exactly_the_bad_inputs(key in any_key(), salts in any::<u16>()) {
            let result = SaltedKey::new(key.clone(), salts);
            let ends_in_number = key
                .rsplit_once('#')
                .is_some_and(|(_, t)| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
            let ok = (1..=MAX_SALTS).contains(&salts)
                && !key.is_empty()
                && !ends_in_number
                && k_len_ok(&key, salts);
            prop_assert_eq!(result.is_ok(), ok, "{:?}", result);
        }

        #[test]
        fn s_consecutive_round_robin_writes_cover_every_sub_key(
            salts in 1u16..=MAX_SALTS, start in any::<u64>()
        ) {
            let k = SaltedKey::new("k", salts).unwrap();
            let rr = RoundRobin::starting_at(start);
            let mut seen = vec![false; usize::from(salts)];
            for _ in 0..salts {
                seen[usize::from(k.salt_for(rr.next_choice()))] = true;
            }
            prop_assert!(seen.iter().all(|s| *s));
        }
    }

    fn k_len_ok(key: &str, salts: u16) -> bool {
        let suffix = if salts > 1 {
            format!("#{}", salts - 1).len()
        } else {
            0
        };
        key.len() + suffix <= MAX_PARTITION_KEY_BYTES
    }
}
