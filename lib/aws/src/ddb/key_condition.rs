//! `KeyCondition`: a Query's key condition (one partition, optionally a sort-key range),
//! rendered with its names and values together ([`KeyCondition::render`]).

use aws_sdk_dynamodb::types::AttributeValue;

use super::placeholders::{Clause, Placeholders, Rendered};

/// Which items of the partition a Query reads, by sort key.
#[derive(Debug, Clone, PartialEq)]
enum SortRange {
    /// `sk = v`.
    Eq(AttributeValue),
    /// `sk BETWEEN low AND high`.
    Between(AttributeValue, AttributeValue),
    /// `begins_with(sk, prefix)`.
    BeginsWith(AttributeValue),
}

/// One partition of a table or index, optionally narrowed by its sort key.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub(crate) struct KeyCondition {
    partition: (String, AttributeValue),
    sort: Option<(String, SortRange)>,
}

impl KeyCondition {
    /// Every item whose partition key `attr` is `value`.
    pub(crate) fn partition(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self {
            partition: (attr.into(), value),
            sort: None,
        }
    }

    /// Only the item whose sort key `attr` is `value`.
    pub(crate) fn sort_eq(mut self, attr: impl Into<String>, value: AttributeValue) -> Self {
        self.sort = Some((attr.into(), SortRange::Eq(value)));
        self
    }

    /// Only items whose sort key `attr` is within `low..=high`.
    pub(crate) fn sort_between(
        mut self,
        attr: impl Into<String>,
        low: AttributeValue,
        high: AttributeValue,
    ) -> Self {
        self.sort = Some((attr.into(), SortRange::Between(low, high)));
        self
    }

    /// Only items whose sort key `attr` starts with `prefix`.
    pub(crate) fn sort_begins_with(
        mut self,
        attr: impl Into<String>,
        prefix: AttributeValue,
    ) -> Self {
        self.sort = Some((attr.into(), SortRange::BeginsWith(prefix)));
        self
    }

    /// The expression with exactly the names and values it uses.
    pub(crate) fn render(&self) -> Rendered {
        let mut p = Placeholders::new(Clause::Key);
        let (attr, value) = &self.partition;
        let mut expression = format!("{} = {}", p.name(attr), p.value(value));
        if let Some((attr, range)) = &self.sort {
            let name = p.name(attr);
            let sort = match range {
                SortRange::Eq(v) => format!("{name} = {}", p.value(v)),
                SortRange::Between(low, high) => {
                    format!("{name} BETWEEN {} AND {}", p.value(low), p.value(high))
                }
                SortRange::BeginsWith(prefix) => {
                    format!("begins_with({name}, {})", p.value(prefix))
                }
            };
            expression.push_str(" AND ");
            expression.push_str(&sort);
        }
        p.finish(expression)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::codec::{strategy::key_value, to_sdk};
    use crate::ddb::condition::strategy::NAMES;
    use crate::ddb::placeholders::tests_support::check_rendered;
    use crate::ddb::value::{n, s};

    #[test]
    fn a_partition_and_a_sort_range_render_together() {
        let r = KeyCondition::partition("shard", s("c#1"))
            .sort_between("time", n(10u8), n(20u8))
            .render();
        assert_eq!(r.expression, "#k0 = :k0 AND #k1 BETWEEN :k1 AND :k2");
        assert_eq!(
            r.names,
            [
                ("#k0".to_owned(), "shard".to_owned()),
                ("#k1".to_owned(), "time".to_owned())
            ]
        );
        assert_eq!(
            KeyCondition::partition("app", s("a")).render().expression,
            "#k0 = :k0"
        );
    }

    fn name() -> impl Strategy<Value = String> {
        proptest::sample::select(NAMES).prop_map(str::to_owned)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn any_key_condition_renders_placeholders_that_are_defined_used_and_distinct(
            pk in name(), sk in name(), v in key_value(), w in key_value(), kind in 0..4u8
        ) {
            let k = KeyCondition::partition(pk, to_sdk(v.clone()));
            let k = match kind {
                0 => k,
                1 => k.sort_eq(sk, to_sdk(w)),
                2 => k.sort_between(sk, to_sdk(v), to_sdk(w)),
                _ => k.sort_begins_with(sk, to_sdk(w)),
            };
            check_rendered(&k.render(), 'k')?;
        }
    }
}
