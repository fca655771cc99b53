//! One attribute codec between the three shapes heatsink meets: the DynamoDB SDK's
//! `AttributeValue`, the DynamoDB Streams SDK's (identical, but another type) and
//! [`serde_dynamo::AttributeValue`], the shape of Lambda's stream events
//! (`aws_lambda_events::dynamodb`) and of DynamoDB JSON.
//!
//! `serde_dynamo`'s value is the hub: its serde form *is* DynamoDB JSON, binary as base64
//! (`{"B": "AP8="}`), so every text rendering goes through it ([`super::json`]). Into either
//! SDK the crate's own `From` conversions are used; out of them, ours: the SDKs mark their
//! value `#[non_exhaustive]` with an `Unknown` variant (a type a newer service sends), which
//! `serde_dynamo` answers with a panic and which we refuse with [`CodecError::UnknownType`],
//! never a silent `NULL`.

use aws_sdk_dynamodb::types::AttributeValue;
pub(crate) use serde_dynamo::AttributeValue as Portable;

use super::value::Item;

/// An item in the portable (Lambda event, DynamoDB JSON) shape.
pub(crate) type PortableItem = serde_dynamo::Item;

/// Why a value, key text or row could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CodecError {
    /// The SDK read a value type it does not model (`Unknown`): refused, never guessed at.
    #[error("attribute {attr:?} has a type this SDK does not know")]
    UnknownType {
        /// The top-level attribute holding it.
        attr: String,
    },
    /// A text that should hold a key ([`super::key_text`]) does not.
    #[error("not a key text: {0}")]
    KeyText(String),
    /// A text that should hold DynamoDB JSON ([`super::json`]) does not.
    #[error("not DynamoDB JSON: {0}")]
    Json(String),
    /// An item does not have its row's shape ([`super::row`]), or a row cannot be written.
    #[error("{0}")]
    Row(String),
}

/// One SDK value type to the portable shape: the same body for the DynamoDB and the DynamoDB
/// Streams SDK (their values have the same variants; `Blob` is `aws_smithy_types::Blob`).
macro_rules! to_portable {
    ($name:ident, $av:ty) => {
        /// The value in the portable shape; `attr` names it in the error.
        pub(crate) fn $name(value: &$av, attr: &str) -> Result<Portable, CodecError> {
            type A = $av;
            Ok(match value {
                A::S(s) => Portable::S(s.clone()),
                A::N(n) => Portable::N(n.clone()),
                A::B(b) => Portable::B(b.as_ref().to_vec()),
                A::Bool(b) => Portable::Bool(*b),
                A::Null(b) => Portable::Null(*b),
                A::Ss(v) => Portable::Ss(v.clone()),
                A::Ns(v) => Portable::Ns(v.clone()),
                A::Bs(v) => Portable::Bs(v.iter().map(|b| b.as_ref().to_vec()).collect()),
                A::L(v) => Portable::L(v.iter().map(|v| $name(v, attr)).collect::<Result<_, _>>()?),
                A::M(m) => Portable::M(
                    m.iter()
                        .map(|(k, v)| Ok((k.clone(), $name(v, attr)?)))
                        .collect::<Result<_, CodecError>>()?,
                ),
                _ => {
                    return Err(CodecError::UnknownType {
                        attr: attr.to_owned(),
                    });
                }
            })
        }
    };
}

to_portable!(from_sdk, AttributeValue);

/// A DynamoDB SDK item in the portable shape.
pub(crate) fn item_from_sdk(item: &Item) -> Result<PortableItem, CodecError> {
    item.iter()
        .map(|(k, v)| Ok((k.clone(), from_sdk(v, k)?)))
        .collect::<Result<std::collections::HashMap<_, _>, CodecError>>()
        .map(PortableItem::from)
}

/// A portable value as the DynamoDB SDK's (total: every portable type exists there).
pub(crate) fn to_sdk(value: Portable) -> AttributeValue {
    value.into()
}

/// A portable item as the DynamoDB SDK's.
pub(crate) fn item_to_sdk(item: PortableItem) -> Item {
    item.into()
}

/// A key attribute as the core's merge key ([`heatsink_core::merge::KeyValue`], the content of
/// scatter's continuation tokens); `None` for a type that cannot be a key.
pub(crate) fn core_key_value(value: &AttributeValue) -> Option<heatsink_core::merge::KeyValue> {
    use heatsink_core::merge::KeyValue;
    match value {
        AttributeValue::S(s) => Some(KeyValue::S(s.clone())),
        AttributeValue::N(n) => Some(KeyValue::N(n.clone())),
        AttributeValue::B(b) => Some(KeyValue::B(b.as_ref().to_vec())),
        _ => None,
    }
}

/// A core merge key as a DynamoDB key (an `ExclusiveStartKey`).
pub(crate) fn key_item(key: &heatsink_core::merge::KeyMap) -> Item {
    use heatsink_core::merge::KeyValue;
    key.iter()
        .map(|(name, value)| {
            let value = match value {
                KeyValue::S(s) => to_sdk(Portable::S(s.clone())),
                KeyValue::N(n) => to_sdk(Portable::N(n.clone())),
                KeyValue::B(b) => to_sdk(Portable::B(b.clone())),
            };
            (name.clone(), value)
        })
        .collect()
}

#[cfg(any(feature = "streams", feature = "lambda"))]
pub(crate) use streams::*;

#[cfg(any(feature = "streams", feature = "lambda"))]
mod streams {
    use std::collections::HashMap;

    use aws_sdk_dynamodbstreams::types::AttributeValue as StreamValue;

    use super::{CodecError, Item, Portable, PortableItem, to_sdk};

    to_portable!(from_stream, StreamValue);

    /// A DynamoDB Streams image (keys, new or old image) in the portable shape.
    pub(crate) fn item_from_stream(
        item: &HashMap<String, StreamValue>,
    ) -> Result<PortableItem, CodecError> {
        item.iter()
            .map(|(k, v)| Ok((k.clone(), from_stream(v, k)?)))
            .collect::<Result<HashMap<_, _>, CodecError>>()
            .map(PortableItem::from)
    }

    /// A DynamoDB Streams image as a DynamoDB item (to write it back, as the mover does).
    pub(crate) fn stream_item_to_sdk(
        item: &HashMap<String, StreamValue>,
    ) -> Result<Item, CodecError> {
        item.iter()
            .map(|(k, v)| Ok((k.clone(), to_sdk(from_stream(v, k)?))))
            .collect()
    }

    /// A portable value as the DynamoDB Streams SDK's.
    #[cfg(test)]
    pub(crate) fn to_stream(value: Portable) -> StreamValue {
        value.into()
    }
}

#[cfg(test)]
pub(crate) mod strategy {
    //! Arbitrary values of every attribute type, nested, binary included.
    use proptest::prelude::*;

    use super::Portable;

    fn scalar() -> impl Strategy<Value = Portable> {
        prop_oneof![
            ".{0,12}".prop_map(Portable::S),
            "-?[0-9]{1,20}(\\.[0-9]{1,6})?".prop_map(Portable::N),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(Portable::B),
            any::<bool>().prop_map(Portable::Bool),
            Just(Portable::Null(true)),
            proptest::collection::vec(".{0,6}", 1..4).prop_map(Portable::Ss),
            proptest::collection::vec("[0-9]{1,6}", 1..4).prop_map(Portable::Ns),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 1..4)
                .prop_map(Portable::Bs),
        ]
    }

    /// Any value, up to three levels of lists and maps.
    pub(crate) fn value() -> impl Strategy<Value = Portable> {
        scalar().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Portable::L),
                proptest::collection::hash_map("[a-z#. ]{1,5}", inner, 0..4).prop_map(Portable::M),
            ]
        })
    }

    /// Any key value (`S`, `N` or `B`).
    pub(crate) fn key_value() -> impl Strategy<Value = Portable> {
        prop_oneof![
            ".{0,12}".prop_map(Portable::S),
            "-?[0-9]{1,20}".prop_map(Portable::N),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(Portable::B),
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_type_round_trips_through_the_dynamodb_sdk(v in strategy::value()) {
            let sdk = to_sdk(v.clone());
            prop_assert_eq!(from_sdk(&sdk, "a"), Ok(v));
        }

        #[test]
        fn every_key_round_trips_through_the_core_merge_key(
            key in proptest::collection::btree_map(".{1,6}", strategy::key_value(), 1..3)
        ) {
            let item: Item = key.into_iter().map(|(k, v)| (k, to_sdk(v))).collect();
            let core: heatsink_core::merge::KeyMap = item
                .iter()
                .map(|(k, v)| (k.clone(), core_key_value(v).expect("a key type")))
                .collect();
            prop_assert_eq!(key_item(&core), item);
        }

        #[cfg(any(feature = "streams", feature = "lambda"))]
        #[test]
        fn every_type_round_trips_through_the_streams_sdk_and_lands_equal_in_dynamodb(
            v in strategy::value()
        ) {
            let stream = to_stream(v.clone());
            prop_assert_eq!(from_stream(&stream, "a"), Ok(v.clone()));
            let image = std::collections::HashMap::from([("a".to_owned(), stream)]);
            let item = stream_item_to_sdk(&image).expect("known types");
            prop_assert_eq!(item.get("a"), Some(&to_sdk(v)));
        }
    }

    /// A type the SDK does not model (as a newer service could send) reaches us as `Unknown`:
    /// the answer is parsed by the SDK itself from a raw GetItem response.
    #[tokio::test]
    async fn smithy_mock_an_unknown_type_is_refused_not_read_as_null() {
        use aws_sdk_dynamodb::config::http::HttpResponse;
        use aws_smithy_mocks::mock;
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_http_response(|| {
            HttpResponse::new(
                200.try_into().expect("status"),
                aws_smithy_types::body::SdkBody::from(
                    r#"{"Item":{"k":{"L":[{"S":"a"},{"VECTOR":[1,2]}]}}}"#,
                ),
            )
        });
        let ddb = crate::mocked!(aws_sdk_dynamodb, get);
        let out = ddb
            .get_item()
            .table_name("t")
            .key("pk", AttributeValue::S("a".into()))
            .send()
            .await
            .expect("the SDK reads an unknown member as Unknown");
        let item = out.item.expect("item");
        assert_eq!(
            item_from_sdk(&item),
            Err(CodecError::UnknownType { attr: "k".into() })
        );
    }

    #[test]
    fn binary_stays_bytes_in_every_shape() {
        let bytes = vec![0u8, 1, 254, 255];
        let sdk = AttributeValue::B(bytes.clone().into());
        assert_eq!(from_sdk(&sdk, "b"), Ok(Portable::B(bytes.clone())));
        #[cfg(any(feature = "streams", feature = "lambda"))]
        {
            let stream = aws_sdk_dynamodbstreams::types::AttributeValue::B(bytes.clone().into());
            assert_eq!(from_stream(&stream, "b"), Ok(Portable::B(bytes)));
        }
    }
}
