//! `Condition`: a condition expression built as a tree of comparisons and rendered with its
//! names and values together ([`Condition::render`]).
//!
//! ```ignore
//! // "attribute_not_exists(#c0) OR #c0 < :c0", #c0 = "at", :c0 = 42
//! let newer = Condition::not_exists("at").or(Condition::lt("at", n(42)));
//! ```

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;

use super::placeholders::{Clause, Placeholders, Rendered};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "<>",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// A condition on an item's attributes (top-level attribute names).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub(crate) enum Condition {
    /// `attr <op> value`.
    Compare(String, Op, AttributeValue),
    /// `attribute_exists(attr)`.
    Exists(String),
    /// `attribute_not_exists(attr)`.
    NotExists(String),
    /// `attr BETWEEN low AND high`.
    Between(String, AttributeValue, AttributeValue),
    /// `begins_with(attr, prefix)`.
    BeginsWith(String, AttributeValue),
    /// Every one holds.
    All(Vec<Condition>),
    /// At least one holds.
    Any(Vec<Condition>),
    /// It does not hold.
    Not(Box<Condition>),
}

impl Condition {
    /// `attr = value`.
    pub(crate) fn eq(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Eq, value)
    }

    /// `attr <> value`.
    pub(crate) fn ne(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Ne, value)
    }

    /// `attr < value`.
    pub(crate) fn lt(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Lt, value)
    }

    /// `attr <= value`.
    pub(crate) fn le(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Le, value)
    }

    /// `attr > value`.
    pub(crate) fn gt(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Gt, value)
    }

    /// `attr >= value`.
    pub(crate) fn ge(attr: impl Into<String>, value: AttributeValue) -> Self {
        Self::Compare(attr.into(), Op::Ge, value)
    }

    /// The item has `attr`.
    pub(crate) fn exists(attr: impl Into<String>) -> Self {
        Self::Exists(attr.into())
    }

    /// The item has no `attr` (or there is no item: the condition of a create).
    pub(crate) fn not_exists(attr: impl Into<String>) -> Self {
        Self::NotExists(attr.into())
    }

    /// `low <= attr <= high`.
    pub(crate) fn between(
        attr: impl Into<String>,
        low: AttributeValue,
        high: AttributeValue,
    ) -> Self {
        Self::Between(attr.into(), low, high)
    }

    /// `attr` starts with `prefix` (a string or binary).
    pub(crate) fn begins_with(attr: impl Into<String>, prefix: AttributeValue) -> Self {
        Self::BeginsWith(attr.into(), prefix)
    }

    /// This and `other`.
    pub(crate) fn and(self, other: Condition) -> Self {
        match self {
            Self::All(mut all) => {
                all.push(other);
                Self::All(all)
            }
            this => Self::All(vec![this, other]),
        }
    }

    /// This or `other`.
    pub(crate) fn or(self, other: Condition) -> Self {
        match self {
            Self::Any(mut any) => {
                any.push(other);
                Self::Any(any)
            }
            this => Self::Any(vec![this, other]),
        }
    }

    /// Not this.
    pub(crate) fn negate(self) -> Self {
        Self::Not(Box::new(self))
    }

    /// The expression with exactly the names and values it uses.
    pub(crate) fn render(&self) -> Rendered {
        self.render_avoiding(&BTreeSet::new())
    }

    /// [`Self::render`] on a request that already uses the placeholders `taken` (a caller's
    /// own expression, [`super::foreign`]): none of them is handed out again.
    pub(crate) fn render_avoiding(&self, taken: &BTreeSet<String>) -> Rendered {
        let mut p = Placeholders::avoiding(Clause::Condition, taken);
        let expression = self.write(&mut p);
        p.finish(expression)
    }

    fn write(&self, p: &mut Placeholders) -> String {
        match self {
            Self::Compare(attr, op, value) => {
                format!("{} {} {}", p.name(attr), op.symbol(), p.value(value))
            }
            Self::Exists(attr) => format!("attribute_exists({})", p.name(attr)),
            Self::NotExists(attr) => format!("attribute_not_exists({})", p.name(attr)),
            Self::Between(attr, low, high) => format!(
                "{} BETWEEN {} AND {}",
                p.name(attr),
                p.value(low),
                p.value(high)
            ),
            Self::BeginsWith(attr, prefix) => {
                format!("begins_with({}, {})", p.name(attr), p.value(prefix))
            }
            Self::All(parts) => Self::join(parts, " AND ", p),
            Self::Any(parts) => Self::join(parts, " OR ", p),
            Self::Not(inner) => format!("NOT ({})", inner.write(p)),
        }
    }

    /// Joins `parts`, a compound part in parentheses (precedence never decides).
    fn join(parts: &[Condition], sep: &str, p: &mut Placeholders) -> String {
        parts
            .iter()
            .map(|c| match c {
                Self::All(v) | Self::Any(v) if v.len() > 1 => format!("({})", c.write(p)),
                _ => c.write(p),
            })
            .collect::<Vec<_>>()
            .join(sep)
    }
}

#[cfg(test)]
pub(crate) mod strategy {
    //! Arbitrary conditions over a small set of attribute names (reserved words included).
    use proptest::prelude::*;

    use super::Condition;
    use crate::ddb::codec::{strategy::key_value, to_sdk};

    /// Attribute names a test draws from: reserved words, a dotted name, a placeholder look-alike.
    pub(crate) const NAMES: &[&str] = &["counter", "owner", "state", "a.b", "#c0", ":c0", "key"];

    fn name() -> impl Strategy<Value = String> {
        proptest::sample::select(NAMES).prop_map(str::to_owned)
    }

    fn leaf() -> impl Strategy<Value = Condition> {
        prop_oneof![
            (name(), key_value()).prop_map(|(a, v)| Condition::eq(a, to_sdk(v))),
            (name(), key_value()).prop_map(|(a, v)| Condition::lt(a, to_sdk(v))),
            (name(), key_value()).prop_map(|(a, v)| Condition::ge(a, to_sdk(v))),
            name().prop_map(Condition::exists),
            name().prop_map(Condition::not_exists),
            (name(), key_value(), key_value()).prop_map(|(a, l, h)| Condition::between(
                a,
                to_sdk(l),
                to_sdk(h)
            )),
            (name(), key_value()).prop_map(|(a, v)| Condition::begins_with(a, to_sdk(v))),
        ]
    }

    /// Any condition, up to three levels of AND, OR and NOT.
    pub(crate) fn condition() -> impl Strategy<Value = Condition> {
        leaf().prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
                inner.prop_map(Condition::negate),
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::placeholders::tests_support::check_rendered;
    use crate::ddb::value::{n, s};

    #[test]
    fn conditions_render_with_their_names_and_values() {
        let r = Condition::not_exists("at")
            .or(Condition::lt("at", n(42u64)))
            .render();
        assert_eq!(r.expression, "attribute_not_exists(#c0) OR #c0 < :c0");
        assert_eq!(r.names, [("#c0".to_owned(), "at".to_owned())]);
        assert_eq!(r.values, [(":c0".to_owned(), n(42u64))]);

        let r = Condition::eq("counter", n(7u64))
            .and(Condition::eq("owner", s("w1")))
            .and(Condition::not_exists("expires").or(Condition::eq("expires", n(9u64))))
            .render();
        assert_eq!(
            r.expression,
            "#c0 = :c0 AND #c1 = :c1 AND (attribute_not_exists(#c2) OR #c2 = :c2)"
        );
        assert_eq!(
            Condition::between("t", n(1u8), n(2u8))
                .negate()
                .render()
                .expression,
            "NOT (#c0 BETWEEN :c0 AND :c1)"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every placeholder the expression holds is defined, every one defined is used, no two
        /// collide, and no attribute name appears in the text itself.
        #[test]
        fn any_condition_renders_placeholders_that_are_defined_used_and_distinct(
            c in strategy::condition()
        ) {
            check_rendered(&c.render(), 'c')?;
        }
    }
}
