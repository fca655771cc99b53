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

use super::StreamError;
use crate::ddb::{AlsoOnlyIf, AlsoUpdating, Condition, Update, n};

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

    /// No newer holder has written the item: `attribute_not_exists(fence) OR fence <= token`.
    fn condition(&self) -> Condition {
        Condition::not_exists(Self::ATTRIBUTE).or(Condition::le(Self::ATTRIBUTE, n(self.token)))
    }

    /// Adds `fence = token` to the item and the fence to the Put's condition (ANDed with any).
    ///
    /// The caller's expression, names and values are kept as written; the fence's placeholders
    /// are ones the request does not use yet.
    pub fn put(&self, put: PutItemFluentBuilder) -> PutItemFluentBuilder {
        put.item(Self::ATTRIBUTE, n(self.token))
            .also_only_if(&self.condition())
    }

    /// Adds `SET fence = token` to the Update's expression and the fence to its condition.
    pub fn update(&self, update: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        update
            .also_updating(&Update::new().set(Self::ATTRIBUTE, n(self.token)))
            .also_only_if(&self.condition())
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let ddb = crate::mocked!(aws_sdk_dynamodb);
        let put = Fence::new(7).put(
            ddb.put_item()
                .table_name("t")
                .condition_expression("attribute_exists(pk)"),
        );
        assert_eq!(
            put.get_condition_expression().as_deref(),
            Some("(attribute_exists(pk)) AND (attribute_not_exists(#c0) OR #c0 <= :c0)")
        );
    }

    /// The caller wrote its update and condition on the layer's own placeholders (`#c0`,
    /// `:c0`, `#u0`, `:u0`): the fence takes others, so both keep their meaning, and a stored
    /// item a newer holder wrote refuses the write (DynamoDB's reading, `ddb::eval`).
    #[tokio::test]
    async fn smithy_mock_a_zombie_write_over_the_callers_own_placeholders_is_refused() {
        use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
        use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
        use aws_smithy_mocks::{MockResponse, mock};

        use crate::ddb::{Item, s};

        let stored = |fence: u64| -> Item {
            Item::from([
                ("pk".to_owned(), s("k")),
                ("v".to_owned(), n(1u8)),
                (Fence::ATTRIBUTE.to_owned(), n(fence)),
            ])
        };
        let rule = |stored: Item| {
            mock!(aws_sdk_dynamodb::Client::update_item).then_compute_response(move |r| {
                let names = r.expression_attribute_names().cloned().unwrap_or_default();
                let values = r.expression_attribute_values().cloned().unwrap_or_default();
                assert_eq!(names.get("#c0").map(String::as_str), Some("pk"));
                assert_eq!(names.get("#u0").map(String::as_str), Some("v"));
                assert_eq!(values.get(":u0"), Some(&n(2u8)));
                assert_eq!(r.update_expression(), Some("SET #u1 = :u1, #u0 = :u0"));
                assert_eq!(
                    r.condition_expression(),
                    Some("(#c0 <> :c0) AND (attribute_not_exists(#c1) OR #c1 <= :c1)")
                );
                let holds = crate::ddb::eval::holds(
                    r.condition_expression().unwrap_or_default(),
                    &names,
                    &values,
                    Some(&stored),
                );
                if holds {
                    MockResponse::Output(UpdateItemOutput::builder().build())
                } else {
                    MockResponse::Error(UpdateItemError::ConditionalCheckFailedException(
                        ConditionalCheckFailedException::builder()
                            .meta(crate::testing::error_meta(
                                "ConditionalCheckFailedException",
                            ))
                            .build(),
                    ))
                }
            })
        };
        let write = |ddb: aws_sdk_dynamodb::Client, token: u64| async move {
            let fence = Fence::new(token);
            let update = ddb
                .update_item()
                .table_name("t")
                .key("pk", s("k"))
                .update_expression("SET #u0 = :u0")
                .condition_expression("#c0 <> :c0")
                .expression_attribute_names("#c0", "pk")
                .expression_attribute_names("#u0", "v")
                .expression_attribute_values(":u0", n(2u8))
                .expression_attribute_values(":c0", s("another"));
            fence.check("t", fence.update(update).send().await)
        };
        let newer = rule(stored(5));
        let ddb = crate::mocked!(aws_sdk_dynamodb, newer);
        let refused = write(ddb, 4).await;
        assert!(
            matches!(refused, Err(StreamError::Fenced { token: 4 })),
            "{refused:?}"
        );
        let older = rule(stored(3));
        let ddb = crate::mocked!(aws_sdk_dynamodb, older);
        write(ddb, 4).await.expect("a newer holder writes");
        let same = rule(stored(4));
        let ddb = crate::mocked!(aws_sdk_dynamodb, same);
        write(ddb, 4).await.expect("the holder writes again");
    }
}
