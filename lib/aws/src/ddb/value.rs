//! Attribute values built and read one way: `s`, `n`, `b` and `flag` make them, the `get_*`
//! functions read one attribute of an item without panicking on a missing or mistyped one.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// An item (or a key) as the DynamoDB SDK holds it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// A string attribute.
pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute from any integer up to 128 bits (the exact digits, no float on the way).
pub(crate) fn n(v: impl Into<i128>) -> AttributeValue {
    AttributeValue::N(v.into().to_string())
}

/// A binary attribute.
pub(crate) fn b(v: impl Into<Vec<u8>>) -> AttributeValue {
    AttributeValue::B(Blob::new(v.into()))
}

/// A boolean attribute.
pub(crate) fn flag(v: bool) -> AttributeValue {
    AttributeValue::Bool(v)
}

/// `attr` of `item` as a string; `None` when missing or of another type.
pub(crate) fn get_s<'a>(item: &'a Item, attr: &str) -> Option<&'a str> {
    item.get(attr)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// `attr` of `item` as a number parsed to `T`; `None` when missing, of another type, or not a
/// `T` (a fraction read as an integer, a negative read as unsigned, an overflow).
pub(crate) fn get_n<T: std::str::FromStr>(item: &Item, attr: &str) -> Option<T> {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// `attr` of `item` as a boolean; `None` when missing or of another type.
pub(crate) fn get_flag(item: &Item, attr: &str) -> Option<bool> {
    item.get(attr).and_then(|v| v.as_bool().ok()).copied()
}

/// A key attribute's value as one line of text: `S` as is, `N` as its digits, `B` as base64;
/// `None` for the types that cannot be key attributes.
pub(crate) fn scalar_text(v: &AttributeValue) -> Option<String> {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => Some(s.clone()),
        AttributeValue::B(b) => Some(STANDARD.encode(b.as_ref())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_exact_digits_and_reads_refuse_the_wrong_type() {
        assert_eq!(
            n(u64::MAX),
            AttributeValue::N("18446744073709551615".into())
        );
        assert_eq!(n(-5i64), AttributeValue::N("-5".into()));
        let item = Item::from([
            ("a".to_owned(), n(7u32)),
            ("neg".to_owned(), n(-1i64)),
            ("s".to_owned(), s("x")),
            ("f".to_owned(), flag(true)),
        ]);
        assert_eq!(get_n::<u64>(&item, "a"), Some(7));
        assert_eq!(get_n::<u64>(&item, "neg"), None, "a negative is no u64");
        assert_eq!(get_n::<i64>(&item, "neg"), Some(-1));
        assert_eq!(get_n::<u64>(&item, "s"), None);
        assert_eq!(get_s(&item, "a"), None);
        assert_eq!(get_s(&item, "s"), Some("x"));
        assert_eq!(get_flag(&item, "f"), Some(true));
        assert_eq!(get_flag(&item, "missing"), None);
    }

    #[test]
    fn key_values_read_as_text_and_binary_as_base64() {
        assert_eq!(scalar_text(&s("p9")).as_deref(), Some("p9"));
        assert_eq!(scalar_text(&n(12u8)).as_deref(), Some("12"));
        assert_eq!(scalar_text(&b(vec![0u8, 255])).as_deref(), Some("AP8="));
        assert_eq!(scalar_text(&flag(true)), None);
    }
}
