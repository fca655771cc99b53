//! Merged pagination across N shards of one logical query.
//!
//! A write-sharded index (`creator#0..creator#15`) spreads one logical partition over N physical
//! ones; a reader queries all N and merges them in sort-key order. Paging through that merge must
//! feel exactly like paging one Query: no duplicates, no gaps, a stable order and a page size
//! that is honoured. Two pieces make that work and both are pure:
//!
//! - [`merge_page`]: a k-way merge over per-shard buffers that stops when the page is full, when
//!   every shard is exhausted, or when a shard that still has rows runs out of buffered ones
//!   (the caller then refills exactly those shards and calls again: the merge never guesses).
//! - [`Token`]: one opaque continuation token holding every shard's [`Cursor`] (not started,
//!   after this key, done) plus a fingerprint of the query, so a token that was tampered with
//!   or that belongs to another query is refused with a [`TokenError`] instead of serving a
//!   silently wrong page.
//!
//! Order: rows are compared by their sort key, ties broken by shard index, and within a shard
//! the shard's own order is kept. Because that comparison is deterministic, the concatenation of
//! all pages equals one global merge, whatever the page sizes.
//!
//! ```
//! use heatsink_core::merge::{merge_page, PageEnd, ShardBuffer};
//! let mut shards = vec![
//!     ShardBuffer::new(vec![1, 4, 7], false),
//!     ShardBuffer::new(vec![2, 3, 9], false),
//! ];
//! let mut page = vec![];
//! let end = merge_page(&mut shards, 4, |x: &i32| *x, &mut page);
//! assert_eq!(end, PageEnd::Full);
//! assert_eq!(page, vec![(0, 1), (1, 2), (1, 3), (0, 4)]);
//! ```
//!
//! Limits: a token grows with the shard count and key size (about 60 bytes per shard for short
//! string keys); [`MAX_SHARDS`] bounds it. The fingerprint detects accidental corruption and
//! cross-query reuse; it is not a signature (anyone can forge a token for a query they could
//! run anyway, and the adapter still checks each cursor's partition value).

use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

/// Most shards one merged query may span (bounds token size and fan-out).
pub const MAX_SHARDS: usize = 1024;

/// Longest encoded token accepted for a query over `shards` shards, in bytes: a cursor holds at
/// most one DynamoDB key (2,048 + 1,024 bytes, JSON-escaped under 4 KiB) per shard, plus the
/// envelope, base64url-encoded. A longer text is refused before it is decoded, so a caller
/// cannot make a request decode megabytes.
pub fn max_token_len(shards: usize) -> usize {
    shards
        .saturating_mul(4 * 1024)
        .saturating_add(256)
        .saturating_mul(4)
        / 3
        + 4
}

/// A key attribute value, the three scalar types a DynamoDB key may have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum KeyValue {
    /// String.
    S(String),
    /// Number, as its decimal string.
    N(String),
    /// Binary.
    B(Vec<u8>),
}

impl KeyValue {
    /// Orders two values the way DynamoDB orders sort keys: strings and binaries bytewise,
    /// numbers numerically (compared as decimals, so 38-digit values keep their order).
    pub fn sort_cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (KeyValue::N(a), KeyValue::N(b)) => decimal_cmp(a, b),
            (KeyValue::S(a), KeyValue::S(b)) => a.as_bytes().cmp(b.as_bytes()),
            (KeyValue::B(a), KeyValue::B(b)) => a.cmp(b),
            _ => self.cmp(other),
        }
    }
}

/// Compares two decimal number strings (`-12.50`, `3e2` is not a DynamoDB wire form) numerically.
///
/// Written by hand because DynamoDB numbers carry 38 significant digits, beyond `f64`, and no
/// small crate compares decimal strings without parsing them into a big-number type.
fn decimal_cmp(a: &str, b: &str) -> Ordering {
    let (na, ia, fa) = split_decimal(a);
    let (nb, ib, fb) = split_decimal(b);
    let zero_a = ia.is_empty() && fa.is_empty();
    let zero_b = ib.is_empty() && fb.is_empty();
    let neg_a = na && !zero_a;
    let neg_b = nb && !zero_b;
    let magnitude = || {
        ia.len()
            .cmp(&ib.len())
            .then_with(|| ia.cmp(ib))
            .then_with(|| fa.cmp(fb))
    };
    match (neg_a, neg_b) {
        (false, false) => magnitude(),
        (true, true) => magnitude().reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

/// Splits into (negative, integer digits without leading zeros, fraction without trailing zeros).
fn split_decimal(s: &str) -> (bool, &str, &str) {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    (neg, int.trim_start_matches('0'), frac.trim_end_matches('0'))
}

/// A row's primary key as attribute name → value (what DynamoDB calls `LastEvaluatedKey`).
pub type KeyMap = BTreeMap<String, KeyValue>;

/// Where one shard of a merged query resumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cursor {
    /// Nothing read from this shard yet.
    Start,
    /// Resume after this key (used as `ExclusiveStartKey`).
    After(KeyMap),
    /// Every row of this shard has been returned.
    Done,
}

/// Rows buffered from one shard, and whether the shard has rows beyond them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardBuffer<T> {
    rows: VecDeque<T>,
    more: bool,
}

impl<T> ShardBuffer<T> {
    /// A buffer holding `rows` (in the shard's order); `more` if the shard has further rows.
    pub fn new(rows: Vec<T>, more: bool) -> Self {
        Self {
            rows: rows.into(),
            more,
        }
    }

    /// A buffer for a shard known to be exhausted.
    pub fn done() -> Self {
        Self::new(vec![], false)
    }

    /// Appends a refill page; `more` says whether the shard still has rows after it.
    pub fn refill(&mut self, rows: Vec<T>, more: bool) {
        self.rows.extend(rows);
        self.more = more;
    }

    /// True when nothing is buffered but the shard has more rows: it must be refilled.
    pub fn needs_refill(&self) -> bool {
        self.rows.is_empty() && self.more
    }

    /// True when nothing is buffered and the shard has nothing more.
    pub fn is_exhausted(&self) -> bool {
        self.rows.is_empty() && !self.more
    }
}

/// Why [`merge_page`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageEnd {
    /// The page holds `limit` rows.
    Full,
    /// Every shard is exhausted: this is the last page.
    Exhausted,
    /// These shards have rows beyond their buffers and must be refilled before merging on.
    Refill(Vec<usize>),
}

/// Moves rows from `shards` into `page` (as `(shard index, row)`) in merged order until the page
/// holds `limit` rows, every shard is exhausted, or a shard must be refilled.
pub fn merge_page<T, K: Ord>(
    shards: &mut [ShardBuffer<T>],
    limit: usize,
    key: impl Fn(&T) -> K,
    page: &mut Vec<(usize, T)>,
) -> PageEnd {
    loop {
        if page.len() >= limit {
            return PageEnd::Full;
        }
        // A shard that may still hold a smaller row must be refilled first; otherwise the merge
        // would emit a row out of order. The caller refills all such shards at once.
        let refill: Vec<usize> = (0..shards.len())
            .filter(|&i| shards[i].needs_refill())
            .collect();
        if !refill.is_empty() {
            return PageEnd::Refill(refill);
        }
        let next = shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.rows.front().map(|r| (key(r), i)))
            .min();
        let Some((_, i)) = next else {
            return PageEnd::Exhausted;
        };
        if let Some(row) = shards[i].rows.pop_front() {
            page.push((i, row));
        }
    }
}

/// Why a continuation token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token this library wrote (bad encoding, bad checksum, or edited by hand).
    #[error("continuation token is malformed or was modified: {0}")]
    Malformed(String),
    /// A valid token, but for a different query (other table, index, shards or order).
    #[error("continuation token belongs to another query")]
    OtherQuery,
    /// Too many shards for one merged query.
    #[error("a merged query spans at most {MAX_SHARDS} shards, got {0}")]
    TooManyShards(usize),
}

/// The continuation state of a merged query: one cursor per shard, bound to the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// One cursor per shard, in the query's shard order.
    pub cursors: Vec<Cursor>,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: u8,
    q: String,
    c: Vec<Cursor>,
    x: String,
}

/// A stable fingerprint of a query's identity (table, index, shard keys, order …), as hex.
///
/// MD5 is used as a fixed, platform-independent digest, not for security.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut h = Md5::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    hex(&h.finalize()[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn checksum(query: &str, cursors: &str) -> String {
    fingerprint(&["heatsink-token-v1", query, cursors])
}

impl Token {
    /// A token at the start of every shard.
    pub fn start(shards: usize) -> Result<Self, TokenError> {
        if shards > MAX_SHARDS {
            return Err(TokenError::TooManyShards(shards));
        }
        Ok(Self {
            cursors: vec![Cursor::Start; shards],
        })
    }

    /// True when every shard is done: there is no next page.
    pub fn is_finished(&self) -> bool {
        self.cursors.iter().all(|c| *c == Cursor::Done)
    }

    /// Encodes the token as URL-safe text bound to the query fingerprint `query`.
    pub fn encode(&self, query: &str) -> String {
        let cursors = serde_json::to_string(&self.cursors).unwrap_or_default();
        let wire = Wire {
            v: 1,
            q: query.to_owned(),
            x: checksum(query, &cursors),
            c: self.cursors.clone(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default())
    }

    /// Decodes a token written by [`Token::encode`] for the query `query` over `shards` shards.
    pub fn decode(text: &str, query: &str, shards: usize) -> Result<Self, TokenError> {
        let limit = max_token_len(shards.min(MAX_SHARDS));
        if text.len() > limit {
            return Err(TokenError::Malformed(format!(
                "{} bytes is over the {limit}-byte limit for {shards} shards",
                text.len()
            )));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim())
            .map_err(|e| TokenError::Malformed(format!("not base64url: {e}")))?;
        let wire: Wire = serde_json::from_slice(&bytes)
            .map_err(|e| TokenError::Malformed(format!("not a token: {e}")))?;
        if wire.v != 1 {
            return Err(TokenError::Malformed(format!("unknown version {}", wire.v)));
        }
        let cursors = serde_json::to_string(&wire.c).unwrap_or_default();
        if wire.x != checksum(&wire.q, &cursors) {
            return Err(TokenError::Malformed("checksum mismatch".into()));
        }
        if wire.q != query {
            return Err(TokenError::OtherQuery);
        }
        if wire.c.len() != shards {
            return Err(TokenError::Malformed(format!(
                "{} cursors for {shards} shards",
                wire.c.len()
            )));
        }
        Ok(Self { cursors: wire.c })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Pages through `shards` (each sorted) with the given page sizes, refilling each shard in
    /// chunks of `chunk` rows like a DynamoDB Query with `Limit`, and returns every page.
    fn page_through(shards: &[Vec<u32>], limits: &[usize], chunk: usize) -> Vec<Vec<(usize, u32)>> {
        let mut offsets = vec![0usize; shards.len()];
        let mut pages = vec![];
        let mut limit_iter = limits.iter().cycle();
        // Each page starts from fresh buffers, as a new request decoding a token would.
        loop {
            let limit = *limit_iter.next().unwrap_or(&1);
            let mut bufs: Vec<ShardBuffer<u32>> = shards
                .iter()
                .zip(&offsets)
                .map(|(s, &o)| ShardBuffer::new(vec![], o < s.len()))
                .collect();
            let mut fetched = offsets.clone();
            let mut page = vec![];
            while let PageEnd::Refill(idx) = merge_page(&mut bufs, limit, |x| *x, &mut page) {
                for i in idx {
                    let end = (fetched[i] + chunk).min(shards[i].len());
                    bufs[i].refill(shards[i][fetched[i]..end].to_vec(), end < shards[i].len());
                    fetched[i] = end;
                }
            }
            for (i, _) in &page {
                offsets[*i] += 1;
            }
            let last = page.is_empty() || offsets.iter().zip(shards).all(|(o, s)| *o == s.len());
            if !page.is_empty() {
                pages.push(page);
            }
            if last {
                return pages;
            }
        }
    }

    fn global_merge(shards: &[Vec<u32>]) -> Vec<(usize, u32)> {
        let mut all: Vec<(u32, usize, usize)> = shards
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().enumerate().map(move |(pos, v)| (*v, i, pos)))
            .collect();
        all.sort();
        all.into_iter().map(|(v, i, _)| (i, v)).collect()
    }

    proptest! {
        #[test]
        fn pages_concatenate_to_the_global_merge_with_no_duplicates_or_gaps(
            mut shards in prop::collection::vec(prop::collection::vec(0u32..50, 0..40), 1..17),
            limits in prop::collection::vec(1usize..25, 1..6),
            chunk in 1usize..30,
        ) {
            for s in &mut shards { s.sort(); }
            let pages = page_through(&shards, &limits, chunk);
            let flat: Vec<(usize, u32)> = pages.iter().flatten().cloned().collect();
            prop_assert_eq!(flat, global_merge(&shards));
            let mut limit_iter = limits.iter().cycle();
            let n = pages.len();
            for (k, p) in pages.iter().enumerate() {
                let limit = *limit_iter.next().unwrap_or(&1);
                prop_assert!(p.len() <= limit);
                if k + 1 < n { prop_assert_eq!(p.len(), limit, "only the last page may be short"); }
            }
        }

        #[test]
        fn a_token_round_trips_and_any_edit_is_refused(
            n in 1usize..20,
            keys in prop::collection::vec("[a-z0-9#]{1,12}", 1..20),
            flip in any::<prop::sample::Index>(),
        ) {
            let cursors: Vec<Cursor> = (0..n).map(|i| match i % 3 {
                0 => Cursor::Start,
                1 => Cursor::Done,
                _ => Cursor::After(BTreeMap::from([("sk".to_owned(), KeyValue::S(keys[i % keys.len()].clone()))])),
            }).collect();
            let q = fingerprint(&["t", "idx", "creator#0"]);
            let token = Token { cursors };
            let text = token.encode(&q);
            prop_assert_eq!(Token::decode(&text, &q, n), Ok(token.clone()));
            // Change one character of the encoded text: it must never decode to a different token.
            let mut bytes = text.into_bytes();
            let i = flip.index(bytes.len());
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(bytes).unwrap_or_default();
            match Token::decode(&edited, &q, n) {
                Ok(t) => prop_assert_eq!(t, token, "an edit decoded to another token"),
                Err(e) => prop_assert!(matches!(e, TokenError::Malformed(_)), "{:?}", e),
            }
        }
    }

    proptest! {
        #[test]
        fn numbers_order_numerically(a in -1_000_000i64..1_000_000, b in -1_000_000i64..1_000_000, fa in 0u32..1000, fb in 0u32..1000) {
            let x = a as f64 + f64::from(fa) / 1000.0 * a.signum() as f64;
            let y = b as f64 + f64::from(fb) / 1000.0 * b.signum() as f64;
            let fmt = |i: i64, f: u32| if i < 0 { format!("-{}.{f:03}", -i) } else { format!("{i}.{f:03}") };
            let (sa, sb) = (fmt(a, if a == 0 { 0 } else { fa }), fmt(b, if b == 0 { 0 } else { fb }));
            let want = if a == 0 { 0.0 } else { x }.partial_cmp(&if b == 0 { 0.0 } else { y });
            prop_assert_eq!(Some(KeyValue::N(sa).sort_cmp(&KeyValue::N(sb))), want);
        }
    }

    #[test]
    fn numbers_beyond_f64_precision_keep_their_order() {
        let a = KeyValue::N("12345678901234567890123456789012345678".into());
        let b = KeyValue::N("12345678901234567890123456789012345679".into());
        assert_eq!(a.sort_cmp(&b), Ordering::Less);
        assert_eq!(
            KeyValue::N("-0".into()).sort_cmp(&KeyValue::N("0.00".into())),
            Ordering::Equal
        );
        assert_eq!(
            KeyValue::N("-2".into()).sort_cmp(&KeyValue::N("-10".into())),
            Ordering::Greater
        );
    }

    #[test]
    fn an_oversize_token_is_refused_before_decoding() {
        let q = fingerprint(&["t", "by-creator", "nova"]);
        let limit = max_token_len(4);
        let huge = "A".repeat(limit + 1);
        match Token::decode(&huge, &q, 4) {
            Err(TokenError::Malformed(why)) => assert!(why.contains("limit"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A real token for 4 shards is far below the limit.
        assert!(Token::start(4).expect("4").encode(&q).len() < limit / 10);
    }

    #[test]
    fn a_token_from_another_query_is_refused() {
        let token = Token::start(4).expect("4 shards");
        let text = token.encode(&fingerprint(&["t", "by-creator", "nova"]));
        let other = fingerprint(&["t", "by-creator", "vega"]);
        assert_eq!(Token::decode(&text, &other, 4), Err(TokenError::OtherQuery));
    }

    #[test]
    fn a_token_for_another_shard_count_is_refused() {
        let q = fingerprint(&["t"]);
        let text = Token::start(4).expect("4 shards").encode(&q);
        assert!(matches!(
            Token::decode(&text, &q, 8),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_a_malformed_token_not_a_panic() {
        for junk in ["", "!!!", "eyJ2Ijo", "bm90IGpzb24"] {
            assert!(
                matches!(Token::decode(junk, "q", 1), Err(TokenError::Malformed(_))),
                "{junk}"
            );
        }
    }

    #[test]
    fn too_many_shards_is_a_typed_error() {
        assert_eq!(
            Token::start(MAX_SHARDS + 1),
            Err(TokenError::TooManyShards(MAX_SHARDS + 1))
        );
    }

    #[test]
    fn a_shard_with_more_rows_is_refilled_before_anything_larger_is_emitted() {
        let mut shards = vec![
            ShardBuffer::new(vec![5], false),
            ShardBuffer::new(vec![1], true),
        ];
        let mut page = vec![];
        assert_eq!(
            merge_page(&mut shards, 10, |x: &i32| *x, &mut page),
            PageEnd::Refill(vec![1])
        );
        assert_eq!(page, vec![(1, 1)]);
    }
}
