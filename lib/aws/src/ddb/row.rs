//! Typed rows: a fixed-shape item is a `serde` struct, written and read with `serde_dynamo`
//! (`u64` as `N`, `String` as `S`, `Vec<String>` as `L`, `Option` skipped when `None` with
//! `#[serde(skip_serializing_if = "Option::is_none")]`), never attribute by attribute.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec::CodecError;
use super::value::Item;

/// `row` as an item.
pub(crate) fn to_item<T: Serialize>(row: &T) -> Result<Item, CodecError> {
    serde_dynamo::to_item(row).map_err(|e| CodecError::Row(e.to_string()))
}

/// The row `item` holds; [`CodecError::Row`] names the first field that does not fit.
pub(crate) fn from_item<T: DeserializeOwned>(item: Item) -> Result<T, CodecError> {
    serde_dynamo::from_item(item).map_err(|e| CodecError::Row(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::ddb::value::{n, s};
    use aws_sdk_dynamodb::types::AttributeValue;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        id: String,
        counter: u64,
        #[serde(default)]
        parents: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    }

    #[test]
    fn a_row_is_written_and_read_with_its_attribute_types() {
        let row = Row {
            id: "a".into(),
            counter: u64::MAX,
            parents: vec!["p".into()],
            owner: None,
        };
        let item = to_item(&row).expect("row");
        assert_eq!(
            item,
            Item::from([
                ("id".to_owned(), s("a")),
                ("counter".to_owned(), n(u64::MAX)),
                ("parents".to_owned(), AttributeValue::L(vec![s("p")])),
            ])
        );
        assert_eq!(from_item::<Row>(item.clone()), Ok(row));
        let mut bad = item;
        bad.insert("counter".into(), s("seven"));
        assert!(matches!(from_item::<Row>(bad), Err(CodecError::Row(_))));
    }
}
