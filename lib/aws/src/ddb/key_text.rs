//! A key map ↔ one line of text: scan checkpoints, continuation tokens, and the partition key
//! of a DynamoDB Streams record.
//!
//! The text is the key's DynamoDB JSON with its attribute names sorted
//! (`{"pk":{"S":"a"},"sk":{"B":"AP8="}}`), so one key always has one text. Only key types
//! (`S`, `N`, `B`) are written. Reading is bounded ([`MAX_KEY_TEXT`] bytes) and also accepts
//! binary written as a list of byte values (`{"B":[0,255]}`), the form scan checkpoints of
//! moves used to be saved in.

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::codec::{CodecError, Portable, PortableItem, from_sdk};
use super::json::item_json;
use super::value::Item;

/// The longest key text read back, in bytes: DynamoDB keys hold at most 2,048 + 1,024 bytes of
/// values and 2 × 255 of names, which base64 (or the old byte lists, 4 characters a byte) and
/// JSON keep well under this.
pub(crate) const MAX_KEY_TEXT: usize = 16 * 1024;

/// The text of a portable key; refuses an attribute that is not of a key type.
pub(crate) fn portable_key_text(key: &PortableItem) -> Result<String, CodecError> {
    if let Some((name, _)) = key
        .iter()
        .find(|(_, v)| !matches!(v, Portable::S(_) | Portable::N(_) | Portable::B(_)))
    {
        return Err(CodecError::KeyText(format!(
            "attribute {name:?} is not of a key type (S, N or B)"
        )));
    }
    Ok(item_json(key).to_string())
}

/// The text of a DynamoDB SDK key.
pub(crate) fn key_text(key: &Item) -> Result<String, CodecError> {
    let portable: std::collections::HashMap<String, Portable> = key
        .iter()
        .map(|(k, v)| Ok((k.clone(), from_sdk(v, k)?)))
        .collect::<Result<_, CodecError>>()?;
    portable_key_text(&PortableItem::from(portable))
}

/// The key a text holds.
pub(crate) fn key_from_text(text: &str) -> Result<Item, CodecError> {
    let bad = |reason: &str| CodecError::KeyText(reason.to_owned());
    if text.len() > MAX_KEY_TEXT {
        return Err(bad(&format!(
            "{} bytes, more than the {MAX_KEY_TEXT} a key takes",
            text.len()
        )));
    }
    let json: Value = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
    let Value::Object(attrs) = json else {
        return Err(bad("not a JSON object"));
    };
    attrs
        .into_iter()
        .map(|(name, typed)| {
            let value = match typed {
                Value::Object(t) if t.len() == 1 => t.into_iter().next(),
                _ => None,
            };
            let value = match value {
                Some((tag, Value::String(s))) if tag == "S" => AttributeValue::S(s),
                Some((tag, Value::String(n))) if tag == "N" => AttributeValue::N(n),
                Some((tag, Value::String(b))) if tag == "B" => AttributeValue::B(
                    STANDARD
                        .decode(b)
                        .map_err(|e| bad(&format!("{name}: {e}")))?
                        .into(),
                ),
                Some((tag, Value::Array(bytes))) if tag == "B" => AttributeValue::B(
                    bytes
                        .iter()
                        .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                        .collect::<Option<Vec<u8>>>()
                        .ok_or_else(|| bad(&format!("{name}: not a list of bytes")))?
                        .into(),
                ),
                _ => return Err(bad(&format!("{name}: not an S, N or B value"))),
            };
            Ok((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::codec::{strategy, to_sdk};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_key_round_trips_through_its_text(
            key in proptest::collection::hash_map(".{1,8}", strategy::key_value(), 1..3)
        ) {
            let key: Item = key.into_iter().map(|(k, v)| (k, to_sdk(v))).collect();
            let text = key_text(&key).expect("key types");
            prop_assert!(text.len() <= MAX_KEY_TEXT);
            prop_assert_eq!(key_from_text(&text), Ok(key));
        }

        #[test]
        fn one_key_has_one_text_whatever_order_its_map_holds(
            pairs in proptest::collection::btree_map("[a-z]{1,4}", strategy::key_value(), 1..4)
        ) {
            let forward: Item = pairs.clone().into_iter().map(|(k, v)| (k, to_sdk(v))).collect();
            let mut backward = Item::with_capacity(1);
            for (k, v) in pairs.into_iter().rev() {
                backward.insert(k, to_sdk(v));
            }
            prop_assert_eq!(key_text(&forward), key_text(&backward));
        }

        #[test]
        fn no_text_makes_the_reader_panic(text in ".{0,64}") {
            let _ = key_from_text(&text);
        }
    }

    #[test]
    fn binary_is_base64_and_the_old_byte_list_form_still_reads() {
        let key = Item::from([
            ("pk".to_owned(), AttributeValue::S("a{b}".into())),
            ("sk".to_owned(), AttributeValue::B(vec![0u8, 7].into())),
        ]);
        let text = key_text(&key).expect("key");
        assert_eq!(text, r#"{"pk":{"S":"a{b}"},"sk":{"B":"AAc="}}"#);
        assert_eq!(
            key_from_text(r#"{"pk":{"S":"a{b}"},"sk":{"B":[0,7]}}"#),
            Ok(key)
        );
    }

    #[test]
    fn a_non_key_type_or_an_oversized_text_is_refused() {
        let item = Item::from([("l".to_owned(), AttributeValue::Bool(true))]);
        assert!(matches!(key_text(&item), Err(CodecError::KeyText(_))));
        let long = format!(r#"{{"pk":{{"S":"{}"}}}}"#, "x".repeat(MAX_KEY_TEXT));
        assert!(matches!(key_from_text(&long), Err(CodecError::KeyText(_))));
        assert!(key_from_text(r#"{"pk":{"B":[256]}}"#).is_err());
        assert!(key_from_text("not json").is_err());
    }
}
