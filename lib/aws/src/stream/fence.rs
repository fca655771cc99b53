//! `Fence`: a record processor's own DynamoDB writes, made conditional on its fencing token.
//!
//! A worker that lost its lease (paused by GC, partitioned, or just slow) may still be in the
//! middle of a batch. The lease table refuses its checkpoint, but the processor's *own* writes
//! would land. [`Fence`] adds `fence = :token` to a Put or Update and the condition
//! `attribute_not_exists(fence) OR fence <= :token`, so once a newer holder (higher token) has
//! written an item, the zombie's write of it is refused with [`StreamError::Fenced`].

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use super::StreamError;

const NAME: &str = "#hs_fence";
const VALUE: &str = ":hs_fence";

/// The lease counter handed to a record processor, applied to its DynamoDB writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence {
    token: u64,
}

impl Fence {
    /// The item attribute holding the token of the last write.
    pub const ATTRIBUTE: &'static str = "fence";

    /// A fence for writes made under lease counter `token`.
    pub fn new(token: u64) -> Self {
        Self { token }
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    fn condition(existing: Option<&String>) -> String {
        let fence = format!("(attribute_not_exists({NAME}) OR {NAME} <= {VALUE})");
        match existing {
            Some(c) if !c.trim().is_empty() => format!("({c}) AND {fence}"),
            _ => fence,
        }
    }

    /// Adds `fence = token` to the item and the fence to the Put's condition (ANDed with any).
    pub fn put(&self, put: PutItemFluentBuilder) -> PutItemFluentBuilder {
        let condition = Self::condition(put.get_condition_expression().as_ref());
        put.item(Self::ATTRIBUTE, AttributeValue::N(self.token.to_string()))
            .condition_expression(condition)
            .expression_attribute_names(NAME, Self::ATTRIBUTE)
            .expression_attribute_values(VALUE, AttributeValue::N(self.token.to_string()))
    }

    /// Adds `SET fence = token` to the Update's expression and the fence to its condition.
    pub fn update(&self, update: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        let expression = add_set(
            update.get_update_expression().as_deref().unwrap_or(""),
            &format!("{NAME} = {VALUE}"),
        );
        let condition = Self::condition(update.get_condition_expression().as_ref());
        update
            .update_expression(expression)
            .condition_expression(condition)
            .expression_attribute_names(NAME, Self::ATTRIBUTE)
            .expression_attribute_values(VALUE, AttributeValue::N(self.token.to_string()))
    }

    /// Maps a fenced write's error: a failed condition becomes [`StreamError::Fenced`].
    ///
    /// A failed condition of the caller's own part of the expression is reported the same way;
    /// keep the caller's condition out of writes whose refusal means something else.
    pub fn check<T, E, R>(
        &self,
        table: &str,
        result: Result<T, SdkError<E, R>>,
    ) -> Result<T, StreamError>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        result.map_err(|e| {
            if e.code() == Some("ConditionalCheckFailedException") {
                StreamError::Fenced { token: self.token }
            } else {
                StreamError::from_sdk("DynamoDB", "UpdateItem", table, e)
            }
        })
    }
}

/// Inserts `assignment` into the SET clause of an update expression, adding one if there is none.
fn add_set(expression: &str, assignment: &str) -> String {
    let bytes = expression.as_bytes();
    let mut i = 0;
    while i + 3 <= bytes.len() {
        let word = &expression[i..i + 3];
        let before_ok = i == 0 || bytes[i - 1].is_ascii_whitespace();
        let after_ok = bytes.get(i + 3).is_none_or(|b| b.is_ascii_whitespace());
        if before_ok && after_ok && word.eq_ignore_ascii_case("SET") {
            return format!(
                "{}SET {assignment},{}",
                &expression[..i],
                &expression[i + 3..]
            );
        }
        i += 1;
    }
    if expression.trim().is_empty() {
        format!("SET {assignment}")
    } else {
        format!("{expression} SET {assignment}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_joins_an_existing_set_clause_or_adds_one() {
        assert_eq!(add_set("", "#f = :f"), "SET #f = :f");
        assert_eq!(add_set("SET a = :a", "#f = :f"), "SET #f = :f, a = :a");
        assert_eq!(
            add_set("REMOVE b set a = :a", "#f = :f"),
            "REMOVE b SET #f = :f, a = :a"
        );
        assert_eq!(
            add_set("ADD settle :one", "#f = :f"),
            "ADD settle :one SET #f = :f"
        );
    }

    #[test]
    fn a_batch_hands_out_the_fence_of_its_lease_counter() {
        let batch = crate::stream::ProcessBatch {
            shard_id: "shardId-000000000000".into(),
            token: 42,
            records: Vec::new(),
        };
        assert_eq!(batch.fence(), Fence::new(42));
        assert_eq!(batch.fence().token(), 42);
    }

    #[test]
    fn the_fence_is_anded_with_the_callers_condition() {
        assert_eq!(
            Fence::condition(Some(&"attribute_exists(pk)".to_owned())),
            "(attribute_exists(pk)) AND (attribute_not_exists(#hs_fence) OR #hs_fence <= :hs_fence)"
        );
    }
}
