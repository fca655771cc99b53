//! `Update`: an update expression built as a list of actions (`SET`, `ADD`, `REMOVE`) and
//! rendered with its names and values together ([`Update::render`]).

use aws_sdk_dynamodb::types::AttributeValue;

use super::placeholders::{Clause, Placeholders, Rendered};

/// What an `UpdateItem` does to an item's (top-level) attributes, in the order given.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub(crate) struct Update {
    set: Vec<(String, AttributeValue)>,
    add: Vec<(String, AttributeValue)>,
    remove: Vec<String>,
}

impl Update {
    /// No action yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// `SET attr = value`.
    pub(crate) fn set(mut self, attr: impl Into<String>, value: AttributeValue) -> Self {
        self.set.push((attr.into(), value));
        self
    }

    /// `ADD attr value`: adds to a number (0 when absent) or a set.
    pub(crate) fn add(mut self, attr: impl Into<String>, value: AttributeValue) -> Self {
        self.add.push((attr.into(), value));
        self
    }

    /// `REMOVE attr`.
    pub(crate) fn remove(mut self, attr: impl Into<String>) -> Self {
        self.remove.push(attr.into());
        self
    }

    /// The expression with exactly the names and values it uses.
    pub(crate) fn render(&self) -> Rendered {
        let mut p = Placeholders::new(Clause::Update);
        let clauses: Vec<String> = self
            .clauses(&mut p)
            .into_iter()
            .map(|(keyword, actions)| format!("{keyword} {actions}"))
            .collect();
        p.finish(clauses.join(" "))
    }

    /// The clauses this update writes, in order (`SET`, `ADD`, `REMOVE`), each as its keyword
    /// and its comma-separated actions; placeholders come from `p`. An empty clause is left out.
    pub(crate) fn clauses(&self, p: &mut Placeholders) -> Vec<(&'static str, String)> {
        let mut clauses = Vec::new();
        if !self.set.is_empty() {
            let actions: Vec<String> = self
                .set
                .iter()
                .map(|(attr, v)| format!("{} = {}", p.name(attr), p.value(v)))
                .collect();
            clauses.push(("SET", actions.join(", ")));
        }
        if !self.add.is_empty() {
            let actions: Vec<String> = self
                .add
                .iter()
                .map(|(attr, v)| format!("{} {}", p.name(attr), p.value(v)))
                .collect();
            clauses.push(("ADD", actions.join(", ")));
        }
        if !self.remove.is_empty() {
            let actions: Vec<String> = self.remove.iter().map(|attr| p.name(attr)).collect();
            clauses.push(("REMOVE", actions.join(", ")));
        }
        clauses
    }

    /// Whether the update does nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
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
    fn actions_render_by_clause_with_their_names_and_values() {
        let r = Update::new()
            .set("owner", s("w1"))
            .set("counter", n(3u8))
            .remove("expires")
            .add("total", n(-2i64))
            .render();
        assert_eq!(
            r.expression,
            "SET #u0 = :u0, #u1 = :u1 ADD #u2 :u2 REMOVE #u3"
        );
        assert_eq!(r.names.len(), 4);
        assert_eq!(r.values[2], (":u2".to_owned(), n(-2i64)));
    }

    fn name() -> impl Strategy<Value = String> {
        proptest::sample::select(NAMES).prop_map(str::to_owned)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_update_renders_placeholders_that_are_defined_used_and_distinct(
            set in proptest::collection::vec((name(), key_value()), 0..4),
            add in proptest::collection::vec((name(), key_value()), 0..3),
            remove in proptest::collection::vec(name(), 0..3),
        ) {
            let mut u = Update::new();
            for (a, v) in set {
                u = u.set(a, to_sdk(v));
            }
            for (a, v) in add {
                u = u.add(a, to_sdk(v));
            }
            for a in remove {
                u = u.remove(a);
            }
            check_rendered(&u.render(), 'u')?;
        }
    }
}
