//! DynamoDB JSON (`{"S": "x"}`, `{"N": "1"}`, `{"B": "<base64>"}`, …): the text form of values
//! and items, as Lambda delivers stream images and as heatsink hands them to processors.
//!
//! Attribute names are sorted at every level, so one item always renders to one text (the
//! SDKs hold items in `HashMap`s, and `serde_json` keeps insertion order in this workspace:
//! without the sort two copies of one item could render differently).

use serde_json::Value;

use super::codec::{CodecError, Portable, PortableItem};

/// A portable value as DynamoDB JSON, names sorted.
pub(crate) fn value_json(value: &Portable) -> Value {
    // Serializing a value the codec built cannot fail: every key is a string.
    let mut json = serde_json::to_value(value).unwrap_or(Value::Null);
    sort_keys(&mut json);
    json
}

/// A portable item as a DynamoDB JSON object, names sorted.
pub(crate) fn item_json(item: &PortableItem) -> Value {
    Value::Object(
        sorted(item.iter())
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

/// Reads a DynamoDB JSON object back into an item.
pub(crate) fn item_from_json(json: &Value) -> Result<PortableItem, CodecError> {
    serde_json::from_value(json.clone()).map_err(|e| CodecError::Json(e.to_string()))
}

fn sorted<'a, V: 'a>(
    entries: impl Iterator<Item = (&'a String, &'a V)>,
) -> impl Iterator<Item = (&'a String, &'a V)> {
    let mut entries: Vec<_> = entries.collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.into_iter()
}

fn sort_keys(json: &mut Value) {
    match json {
        Value::Object(map) => {
            map.sort_keys();
            map.values_mut().for_each(sort_keys);
        }
        Value::Array(list) => list.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

/// A DynamoDB Streams image as DynamoDB JSON; `None` renders as `null`. An attribute of a type
/// the SDK does not know renders as `{"UNKNOWN": null}`: a stream record is delivered, never
/// refused, so a new type cannot stall its shard, and it is never mistaken for `NULL`.
#[cfg(any(feature = "streams", feature = "lambda"))]
pub(crate) fn stream_image_json(
    image: Option<
        &std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
    >,
) -> Value {
    let Some(image) = image else {
        return Value::Null;
    };
    Value::Object(
        sorted(image.iter())
            .map(|(k, v)| {
                let json = match super::codec::from_stream(v, k) {
                    Ok(v) => value_json(&v),
                    Err(_) => serde_json::json!({ "UNKNOWN": null }),
                };
                (k.clone(), json)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::codec::strategy;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_item_round_trips_through_dynamodb_json(
            item in proptest::collection::hash_map("[a-z#. ]{1,6}", strategy::value(), 0..5)
        ) {
            let item = PortableItem::from(item);
            prop_assert_eq!(item_from_json(&item_json(&item)), Ok(item));
        }
    }

    #[test]
    fn binary_renders_as_base64_and_names_sort_at_every_level() {
        let item = PortableItem::from(std::collections::HashMap::from([
            ("z".to_owned(), Portable::B(vec![0, 255])),
            (
                "a".to_owned(),
                Portable::M(std::collections::HashMap::from([
                    ("y".to_owned(), Portable::N("1".into())),
                    ("b".to_owned(), Portable::S("x".into())),
                ])),
            ),
        ]));
        assert_eq!(
            item_json(&item).to_string(),
            r#"{"a":{"M":{"b":{"S":"x"},"y":{"N":"1"}}},"z":{"B":"AP8="}}"#
        );
    }
}
