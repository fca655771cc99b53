//! Continuation tokens of a merged (scatter-gather) query: random text, valid tokens damaged
//! (a byte changed, cut short, lengthened), tokens of another query, over 1 to 64 shards.

use heatsink::scatter::merge::{Cursor, Token, TokenError, max_token_len};
use proptest::prelude::*;

use crate::{fuzz, meter};

/// What `Token::decode` may hold for a text of `n` bytes (docs/bounds.md): the decoded bytes,
/// the parsed cursors and their re-encoding for the checksum, at most 16 × the text.
fn token_bound(n: usize) -> usize {
    16 * n + 4_096
}

fn cursor() -> impl Strategy<Value = Cursor> {
    prop_oneof![Just(Cursor::Start), Just(Cursor::Done),]
}

/// A text to decode for a query over `shards` shards: a damaged valid token, or noise.
fn text() -> impl Strategy<Value = (String, usize, bool)> {
    (1usize..64).prop_flat_map(|shards| {
        (
            proptest::collection::vec(cursor(), shards),
            prop_oneof![
                3 => Just(0u8), // intact
                2 => Just(1),   // a byte changed
                1 => Just(2),   // cut short
                1 => Just(3),   // another query
                1 => Just(4),   // noise
                1 => Just(5),   // over the length limit
            ],
            any::<prop::sample::Index>(),
            "\\PC{0,64}",
        )
            .prop_map(move |(cursors, damage, at, noise)| {
                let token = Token { cursors }.encode("q1");
                let mut bytes = token.into_bytes();
                let i = at.index(bytes.len());
                let text = match damage {
                    0 => String::from_utf8(bytes).unwrap_or_default(),
                    1 => {
                        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
                        String::from_utf8(bytes).unwrap_or_default()
                    }
                    2 => {
                        bytes.truncate(i);
                        String::from_utf8(bytes).unwrap_or_default()
                    }
                    3 => Token::start(shards)
                        .map(|t| t.encode("q2"))
                        .unwrap_or_default(),
                    4 => noise,
                    _ => "A".repeat(max_token_len(shards) + 1),
                };
                (text, shards, damage == 0)
            })
    })
}

#[test]
fn a_continuation_token_decodes_only_intact_and_for_its_query_and_never_past_its_bound() {
    let tally = fuzz(
        "continuation tokens",
        text(),
        |(text, shards, intact), t| {
            let (decoded, peak) = meter::measure(|| Token::decode(&text, "q1", shards));
            t.allocated(peak, text.len(), token_bound(text.len()))?;
            match decoded {
                Ok(token) => {
                    t.accept();
                    prop_assert_eq!(token.cursors.len(), shards);
                }
                Err(e) => {
                    prop_assert!(!intact, "an intact token was refused: {e}");
                    prop_assert!(matches!(
                        e,
                        TokenError::Malformed(_) | TokenError::OtherQuery
                    ));
                    t.refuse(&e);
                }
            }
            Ok(())
        },
    );
    assert!(tally.accepted > 0 && tally.refused.len() >= 2, "{tally:?}");
}
