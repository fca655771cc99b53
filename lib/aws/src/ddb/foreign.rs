//! A foreign expression: a request the caller built with the SDK (its own condition, update,
//! names and values), which the layer extends without changing what the caller wrote.
//!
//! The public `stream::Fence` takes the caller's PutItem or UpdateItem and adds its own
//! condition and `SET`. The caller may use any placeholder, the layer's own (`#c0`, `:u1`)
//! included, so the layer's part is rendered [`Placeholders::avoiding`](super::placeholders)
//! every placeholder the request already uses (defined in its names or values, or written in one
//! of its expressions) and then joined to the caller's text:
//!
//! - a condition is ANDed: `(caller's) AND (ours)`, or ours alone when the caller has none;
//! - an update's actions join the caller's clause of the same keyword (an update expression
//!   holds each of `SET`, `REMOVE`, `ADD`, `DELETE` at most once), or are appended as a clause.
//!
//! Only the layer's own names and values are returned: the caller's stay on the request as they
//! are. A keyword is found as a whole word (`settle` is no `SET`); DynamoDB's keywords are
//! reserved words, so an attribute spelled like one is always behind a placeholder.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use super::condition::Condition;
use super::placeholders::{Clause, Placeholders, Rendered};
use super::update::Update;

/// What a caller's request already holds (each part as the SDK's builder returns it).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Foreign<'a> {
    /// Its `ConditionExpression`.
    pub condition: Option<&'a str>,
    /// Its `UpdateExpression` (UpdateItem only).
    pub update: Option<&'a str>,
    /// Its `ExpressionAttributeNames`.
    pub names: Option<&'a HashMap<String, String>>,
    /// Its `ExpressionAttributeValues`.
    pub values: Option<&'a HashMap<String, AttributeValue>>,
}

/// A character of a placeholder or attribute word (a keyword's boundary is any other).
fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_#:.[]".contains(c)
}

/// The placeholders (`#name`, `:value`) written in `text`.
pub(crate) fn placeholders_in(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find(['#', ':'])?;
        let len = rest[start + 1..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - start - 1);
        let (placeholder, after) = rest[start..].split_at(len + 1);
        rest = after;
        Some(placeholder)
    })
    .filter(|p| p.len() > 1)
}

impl Foreign<'_> {
    /// Every placeholder the request uses: defined in its names or values, or written in its
    /// condition or update.
    pub(crate) fn taken(&self) -> BTreeSet<String> {
        let mut taken: BTreeSet<String> = self
            .names
            .into_iter()
            .flat_map(|m| m.keys().cloned())
            .chain(self.values.into_iter().flat_map(|m| m.keys().cloned()))
            .collect();
        for text in [self.condition, self.update].into_iter().flatten() {
            taken.extend(placeholders_in(text).map(str::to_owned));
        }
        taken
    }

    /// The condition "the caller's and `ours`", with `ours`' names and values (placeholders the
    /// request does not use yet).
    pub(crate) fn and_condition(&self, ours: &Condition) -> Rendered {
        let mut rendered = ours.render_avoiding(&self.taken());
        if let Some(theirs) = self.condition.filter(|c| !c.trim().is_empty()) {
            rendered.expression = format!("({theirs}) AND ({})", rendered.expression);
        }
        rendered
    }

    /// The caller's update with `ours`' actions joined to its clauses, with `ours`' names and
    /// values (placeholders the request does not use yet).
    pub(crate) fn with_update(&self, ours: &Update) -> Rendered {
        let mut p = Placeholders::avoiding(Clause::Update, &self.taken());
        let mut expression = self.update.unwrap_or("").to_owned();
        for (keyword, actions) in ours.clauses(&mut p) {
            expression = add_actions(&expression, keyword, &actions);
        }
        p.finish(expression)
    }
}

/// Where `keyword` stands in `expression` as a whole word (any case), if it does.
fn find_keyword(expression: &str, keyword: &str) -> Option<usize> {
    expression.char_indices().find_map(|(i, _)| {
        let word = expression.get(i..i + keyword.len())?;
        let before_ok = expression[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !word_char(c));
        let after_ok = expression[i + keyword.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word_char(c));
        (before_ok && after_ok && word.eq_ignore_ascii_case(keyword)).then_some(i)
    })
}

/// Puts `actions` first in the `keyword` clause of an update expression, adding the clause
/// when there is none.
pub(crate) fn add_actions(expression: &str, keyword: &str, actions: &str) -> String {
    if let Some(i) = find_keyword(expression, keyword) {
        return format!(
            "{}{keyword} {actions},{}",
            &expression[..i],
            &expression[i + keyword.len()..]
        );
    }
    if expression.trim().is_empty() {
        format!("{keyword} {actions}")
    } else {
        format!("{expression} {keyword} {actions}")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::codec::{strategy::key_value, to_sdk};
    use crate::ddb::condition::strategy::{NAMES, condition};
    use crate::ddb::eval::{holds, semantics};
    use crate::ddb::value::{Item, n, s};

    #[test]
    fn the_fence_joins_an_existing_set_clause_or_adds_one() {
        assert_eq!(add_actions("", "SET", "#f = :f"), "SET #f = :f");
        assert_eq!(
            add_actions("SET a = :a", "SET", "#f = :f"),
            "SET #f = :f, a = :a"
        );
        assert_eq!(
            add_actions("REMOVE b set a = :a", "SET", "#f = :f"),
            "REMOVE b SET #f = :f, a = :a"
        );
        assert_eq!(
            add_actions("ADD settle :one", "SET", "#f = :f"),
            "ADD settle :one SET #f = :f"
        );
        assert_eq!(
            add_actions("SET #set = :set", "SET", "#f = :f"),
            "SET #f = :f, #set = :set",
            "a placeholder spelled like a keyword is no keyword"
        );
    }

    #[test]
    fn placeholders_are_read_from_the_text() {
        let found: Vec<&str> =
            placeholders_in("(#a = :a_1 AND begins_with(#b0,:x)) OR #c.#d[0] = :").collect();
        assert_eq!(found, ["#a", ":a_1", "#b0", ":x", "#c", "#d"]);
    }

    /// The caller's placeholders are exactly the layer's own: ours move aside, theirs keep
    /// their meaning.
    #[test]
    fn a_callers_condition_on_the_layers_own_placeholders_is_anded_without_a_collision() {
        let names = HashMap::from([("#c0".to_owned(), "pk".to_owned())]);
        let values = HashMap::from([(":c0".to_owned(), s("a"))]);
        let foreign = Foreign {
            condition: Some("#c0 = :c0"),
            update: Some("SET #u0 = :c1"),
            names: Some(&names),
            values: Some(&values),
        };
        let r = foreign
            .and_condition(&Condition::not_exists("fence").or(Condition::le("fence", n(7u8))));
        assert_eq!(
            r.expression,
            "(#c0 = :c0) AND (attribute_not_exists(#c1) OR #c1 <= :c2)"
        );
        assert_eq!(r.names, [("#c1".to_owned(), "fence".to_owned())]);
        assert_eq!(r.values, [(":c2".to_owned(), n(7u8))]);
        let u = foreign.with_update(&Update::new().set("fence", n(7u8)));
        assert_eq!(u.expression, "SET #u1 = :u0, #u0 = :c1");
        assert_eq!(
            Foreign::default()
                .and_condition(&Condition::exists("pk"))
                .expression,
            "attribute_exists(#c0)",
            "no condition of the caller's: ours alone"
        );
    }

    fn item() -> impl Strategy<Value = Option<Item>> {
        proptest::option::of(
            proptest::collection::hash_map(proptest::sample::select(NAMES), key_value(), 0..5)
                .prop_map(|m| {
                    m.into_iter()
                        .map(|(k, v)| (k.to_owned(), to_sdk(v)))
                        .collect()
                }),
        )
    }

    fn update() -> impl Strategy<Value = Update> {
        let name = || proptest::sample::select(NAMES).prop_map(str::to_owned);
        (
            proptest::collection::vec((name(), key_value()), 0..3),
            proptest::collection::vec((name(), key_value()), 0..2),
            proptest::collection::vec(name(), 0..2),
        )
            .prop_map(|(set, add, remove)| {
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
                u
            })
    }

    /// Merges two placeholder maps; a placeholder defined on both sides fails the test.
    fn merged<V: Clone + std::fmt::Debug>(
        theirs: &[(String, V)],
        ours: &[(String, V)],
    ) -> Result<HashMap<String, V>, TestCaseError> {
        let mut all: HashMap<String, V> = theirs.iter().cloned().collect();
        for (p, v) in ours {
            prop_assert!(
                all.insert(p.clone(), v.clone()).is_none(),
                "{p} is defined by the caller and by the layer"
            );
        }
        Ok(all)
    }

    /// An update expression read back as (keyword, action) pairs with every placeholder
    /// replaced by what it stands for; a keyword written twice fails the test.
    fn actions(
        text: &str,
        names: &HashMap<String, String>,
        values: &HashMap<String, AttributeValue>,
    ) -> Result<Vec<(String, String)>, TestCaseError> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut keyword = String::new();
        let mut action = String::new();
        let flush = |keyword: &str, action: &mut String, out: &mut Vec<(String, String)>| {
            if !action.trim().is_empty() {
                out.push((keyword.to_owned(), action.trim().to_owned()));
            }
            action.clear();
        };
        for token in text.split_whitespace() {
            let upper = token.to_ascii_uppercase();
            if ["SET", "ADD", "REMOVE", "DELETE"].contains(&upper.as_str()) {
                flush(&keyword, &mut action, &mut out);
                prop_assert!(seen.insert(upper.clone()), "{upper} twice in {text}");
                keyword = upper;
                continue;
            }
            for (i, part) in token.split(',').enumerate() {
                if i > 0 {
                    flush(&keyword, &mut action, &mut out);
                }
                if part.is_empty() {
                    continue;
                }
                let resolved = if let Some(name) = names.get(part) {
                    format!("name {name}")
                } else if let Some(value) = values.get(part) {
                    format!("value {value:?}")
                } else {
                    prop_assert!(!part.starts_with(['#', ':']), "{part} undefined in {text}");
                    part.to_owned()
                };
                action.push_str(&resolved);
                action.push(' ');
            }
        }
        flush(&keyword, &mut action, &mut out);
        out.sort();
        Ok(out)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// A caller's condition rendered on the layer's own placeholders (every one a
        /// collision) ANDed with ours holds exactly when both hold, on any stored item, and no
        /// placeholder is defined twice.
        #[test]
        fn the_joined_condition_holds_exactly_when_the_callers_and_ours_both_hold(
            theirs in condition(),
            ours in condition(),
            item in item(),
        ) {
            let t = theirs.render();
            let names: HashMap<String, String> = t.names.iter().cloned().collect();
            let values: HashMap<String, AttributeValue> = t.values.iter().cloned().collect();
            let foreign = Foreign {
                condition: Some(&t.expression),
                update: None,
                names: Some(&names),
                values: Some(&values),
            };
            let joined = foreign.and_condition(&ours);
            let all_names = merged(&t.names, &joined.names)?;
            let all_values = merged(&t.values, &joined.values)?;
            prop_assert_eq!(
                holds(&joined.expression, &all_names, &all_values, item.as_ref()),
                semantics(&theirs, item.as_ref()) && semantics(&ours, item.as_ref()),
                "{}", joined.expression
            );
        }

        /// A caller's update on the layer's own placeholders, keywords in any case, joined with
        /// ours does every action of both, holds each keyword once, and defines no placeholder
        /// twice.
        #[test]
        fn the_joined_update_does_every_action_of_the_callers_and_ours(
            theirs in update(),
            ours in update(),
            lower in any::<bool>(),
        ) {
            let t = theirs.render();
            let text = if lower { t.expression.to_lowercase() } else { t.expression.clone() };
            let names: HashMap<String, String> = t.names.iter().cloned().collect();
            let values: HashMap<String, AttributeValue> = t.values.iter().cloned().collect();
            let foreign = Foreign {
                condition: None,
                update: Some(&text),
                names: Some(&names),
                values: Some(&values),
            };
            let joined = foreign.with_update(&ours);
            let all_names = merged(&t.names, &joined.names)?;
            let all_values = merged(&t.values, &joined.values)?;
            let o = ours.render();
            let mut expected = actions(&t.expression, &names, &values)?;
            expected.extend(actions(
                &o.expression,
                &o.names.iter().cloned().collect(),
                &o.values.iter().cloned().collect(),
            )?);
            expected.sort();
            prop_assert_eq!(
                actions(&joined.expression, &all_names, &all_values)?,
                expected,
                "{}", joined.expression
            );
        }
    }
}
