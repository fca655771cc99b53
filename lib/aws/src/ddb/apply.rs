//! Puts a rendered expression on the SDK's request builders: its text, and its names and
//! values added to the request's maps (which other clauses may share: placeholders of two
//! clauses never collide, [`super::placeholders`]).
//!
//! `only_if` sets the condition of a PutItem, UpdateItem or DeleteItem and of a Put, Update,
//! Delete or ConditionCheck inside `TransactWriteItems`; `updating` sets an update; `query_key`
//! sets a Query's key condition; `projecting` sets the attributes a Query or Scan returns. Each
//! is called at most once per request.
//!
//! `also_only_if` and `also_updating` extend a request the caller built (a foreign expression,
//! [`super::foreign`]): the condition is ANDed with the caller's, the update's actions join the
//! caller's clauses, and the layer's placeholders avoid every one the request already uses.

use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::builders::{
    ConditionCheckBuilder, DeleteBuilder, PutBuilder, UpdateBuilder,
};

use super::condition::Condition;
use super::foreign::Foreign;
use super::key_condition::KeyCondition;
use super::placeholders::Rendered;
use super::projection::Projection;
use super::update::Update;

/// A request (or transaction item) that takes a condition expression.
pub(crate) trait OnlyIf: Sized {
    /// The request, written only if `condition` holds on the stored item.
    fn only_if(self, condition: &Condition) -> Self;
}

/// A request (or transaction item) that takes an update expression.
pub(crate) trait Updating: Sized {
    /// The request, applying `update`.
    fn updating(self, update: &Update) -> Self;
}

/// A read that takes a projection.
pub(crate) trait Projecting: Sized {
    /// The request, returning only the attributes `projection` names.
    fn projecting(self, projection: &Projection) -> Self;
}

/// A request that takes a key condition.
pub(crate) trait QueryKey: Sized {
    /// The request, reading the items `key` selects.
    fn query_key(self, key: &KeyCondition) -> Self;
}

/// A request the caller may have given its own condition (and names and values).
pub(crate) trait AlsoOnlyIf: Sized {
    /// The request, written only if the caller's condition (if any) and `condition` hold.
    fn also_only_if(self, condition: &Condition) -> Self;
}

/// An UpdateItem the caller may have given its own update (and names and values).
pub(crate) trait AlsoUpdating: Sized {
    /// The request, applying the caller's update (if any) and `update`.
    fn also_updating(self, update: &Update) -> Self;
}

/// Adds a rendered clause's names and values to `builder` and sets its text with `$set`.
macro_rules! put_rendered {
    ($builder:expr, $rendered:expr, $set:ident) => {{
        let Rendered {
            expression,
            names,
            values,
        } = $rendered;
        let mut builder = $builder.$set(expression);
        for (placeholder, attr) in names {
            builder = builder.expression_attribute_names(placeholder, attr);
        }
        for (placeholder, value) in values {
            builder = builder.expression_attribute_values(placeholder, value);
        }
        builder
    }};
}

macro_rules! only_if {
    ($($builder:ty),*) => {$(
        impl OnlyIf for $builder {
            fn only_if(self, condition: &Condition) -> Self {
                put_rendered!(self, condition.render(), condition_expression)
            }
        }
    )*};
}

only_if!(
    PutItemFluentBuilder,
    UpdateItemFluentBuilder,
    DeleteItemFluentBuilder,
    PutBuilder,
    UpdateBuilder,
    DeleteBuilder,
    ConditionCheckBuilder
);

macro_rules! updating {
    ($($builder:ty),*) => {$(
        impl Updating for $builder {
            fn updating(self, update: &Update) -> Self {
                put_rendered!(self, update.render(), update_expression)
            }
        }
    )*};
}

updating!(UpdateItemFluentBuilder, UpdateBuilder);

/// What the caller's request `$b` holds; `$update` is `get_update_expression` where there is one.
macro_rules! foreign {
    ($b:expr) => {
        Foreign {
            condition: $b.get_condition_expression().as_deref(),
            update: None,
            names: $b.get_expression_attribute_names().as_ref(),
            values: $b.get_expression_attribute_values().as_ref(),
        }
    };
    ($b:expr, $update:ident) => {
        Foreign {
            update: $b.$update().as_deref(),
            ..foreign!($b)
        }
    };
}

impl AlsoOnlyIf for PutItemFluentBuilder {
    fn also_only_if(self, condition: &Condition) -> Self {
        let rendered = foreign!(self).and_condition(condition);
        put_rendered!(self, rendered, condition_expression)
    }
}

impl AlsoOnlyIf for DeleteItemFluentBuilder {
    fn also_only_if(self, condition: &Condition) -> Self {
        let rendered = foreign!(self).and_condition(condition);
        put_rendered!(self, rendered, condition_expression)
    }
}

impl AlsoOnlyIf for UpdateItemFluentBuilder {
    fn also_only_if(self, condition: &Condition) -> Self {
        let rendered = foreign!(self, get_update_expression).and_condition(condition);
        put_rendered!(self, rendered, condition_expression)
    }
}

impl AlsoUpdating for UpdateItemFluentBuilder {
    fn also_updating(self, update: &Update) -> Self {
        let rendered = foreign!(self, get_update_expression).with_update(update);
        put_rendered!(self, rendered, update_expression)
    }
}

impl QueryKey for QueryFluentBuilder {
    fn query_key(self, key: &KeyCondition) -> Self {
        put_rendered!(self, key.render(), key_condition_expression)
    }
}

macro_rules! projecting {
    ($($builder:ty),*) => {$(
        impl Projecting for $builder {
            fn projecting(self, projection: &Projection) -> Self {
                put_rendered!(self, projection.render(), projection_expression)
            }
        }
    )*};
}

projecting!(QueryFluentBuilder, ScanFluentBuilder);

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
    use aws_smithy_mocks::mock;

    use super::*;
    use crate::ddb::value::{n, s};

    /// One UpdateItem carries the condition's and the update's names and values side by
    /// side, on one attribute both use (`counter`, a reserved word).
    #[tokio::test]
    async fn smithy_mock_a_condition_and_an_update_share_one_request_without_colliding() {
        let update = mock!(aws_sdk_dynamodb::Client::update_item)
            .match_requests(|r| {
                let names = r.expression_attribute_names().cloned().unwrap_or_default();
                let values = r.expression_attribute_values().cloned().unwrap_or_default();
                r.condition_expression() == Some("#c0 = :c0")
                    && r.update_expression() == Some("SET #u0 = :u0 REMOVE #u1")
                    && names.len() == 3
                    && names.get("#c0").map(String::as_str) == Some("counter")
                    && names.get("#u0").map(String::as_str) == Some("counter")
                    && names.get("#u1").map(String::as_str) == Some("owner")
                    && values.get(":c0") == Some(&n(1u8))
                    && values.get(":u0") == Some(&n(2u8))
            })
            .then_output(|| UpdateItemOutput::builder().build());
        let ddb = crate::mocked!(aws_sdk_dynamodb, update);
        ddb.update_item()
            .table_name("t")
            .key("pk", s("a"))
            .only_if(&Condition::eq("counter", n(1u8)))
            .updating(&Update::new().set("counter", n(2u8)).remove("owner"))
            .send()
            .await
            .expect("the mock matched the request");
        assert_eq!(update.num_calls(), 1);
    }

    #[test]
    fn a_transaction_put_carries_its_condition() {
        let put = Put::builder()
            .table_name("t")
            .item("pk", s("a"))
            .only_if(&Condition::not_exists("pk"))
            .build()
            .expect("put");
        assert_eq!(
            put.condition_expression(),
            Some("attribute_not_exists(#c0)")
        );
        let item = TransactWriteItem::builder().put(put).build();
        let names = item
            .put()
            .and_then(|p| p.expression_attribute_names())
            .cloned()
            .unwrap_or_default();
        assert_eq!(names.get("#c0").map(String::as_str), Some("pk"));
    }
}
