//! Test support: DynamoDB's reading of a condition expression, for mocked tables.
//!
//! [`holds`] evaluates an expression as sent (text, names, values) against a stored item, the
//! way DynamoDB does for the forms the layer writes (comparisons, `BETWEEN`, `begins_with`,
//! `attribute_exists`, `attribute_not_exists`, `AND`, `OR`, `NOT`, parentheses, with `NOT`
//! binding tighter than `AND` and `AND` than `OR`). A mocked PutItem answers
//! `ConditionalCheckFailed` exactly when DynamoDB would, so a test sees what a wrong condition
//! lets through; a form it does not know panics (the test fails) rather than guessing.
//! [`semantics`] evaluates a [`Condition`] directly, so a property test can prove that every
//! rendering means what the tree says.

use std::cmp::Ordering;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::condition::{Condition, Op};
use super::value::Item;

/// DynamoDB's order of two values of one type (`N` as numbers, `S` and `B` as bytes); `None`
/// when they are not comparable (another type), which makes a comparison false.
fn compare(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    match (a, b) {
        (AttributeValue::N(a), AttributeValue::N(b)) => {
            let (a, b) = (a.parse::<f64>().ok()?, b.parse::<f64>().ok()?);
            a.partial_cmp(&b)
        }
        (AttributeValue::S(a), AttributeValue::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (AttributeValue::B(a), AttributeValue::B(b)) => Some(a.as_ref().cmp(b.as_ref())),
        _ => None,
    }
}

fn op_holds(op: Op, stored: Option<&AttributeValue>, value: &AttributeValue) -> bool {
    let Some(stored) = stored else {
        // A missing attribute compares false, except `<>` (DynamoDB: absent is not equal).
        return op == Op::Ne;
    };
    match op {
        Op::Eq => stored == value,
        Op::Ne => stored != value,
        Op::Lt => compare(stored, value) == Some(Ordering::Less),
        Op::Le => matches!(
            compare(stored, value),
            Some(Ordering::Less | Ordering::Equal)
        ),
        Op::Gt => compare(stored, value) == Some(Ordering::Greater),
        Op::Ge => matches!(
            compare(stored, value),
            Some(Ordering::Greater | Ordering::Equal)
        ),
    }
}

fn begins_with(stored: Option<&AttributeValue>, prefix: &AttributeValue) -> bool {
    match (stored, prefix) {
        (Some(AttributeValue::S(s)), AttributeValue::S(p)) => s.starts_with(p.as_str()),
        (Some(AttributeValue::B(s)), AttributeValue::B(p)) => s.as_ref().starts_with(p.as_ref()),
        _ => false,
    }
}

/// What `condition` means on `item` (absent when `item` is `None`: no stored item).
pub(crate) fn semantics(condition: &Condition, item: Option<&Item>) -> bool {
    let get = |attr: &str| item.and_then(|i| i.get(attr));
    match condition {
        Condition::Compare(attr, op, value) => op_holds(*op, get(attr), value),
        Condition::Exists(attr) => get(attr).is_some(),
        Condition::NotExists(attr) => get(attr).is_none(),
        Condition::Between(attr, low, high) => {
            op_holds(Op::Ge, get(attr), low) && op_holds(Op::Le, get(attr), high)
        }
        Condition::BeginsWith(attr, prefix) => begins_with(get(attr), prefix),
        Condition::All(parts) => parts.iter().all(|c| semantics(c, item)),
        Condition::Any(parts) => parts.iter().any(|c| semantics(c, item)),
        Condition::Not(inner) => !semantics(inner, item),
    }
}

/// Reads an expression token by token.
struct Parser<'a> {
    tokens: Vec<String>,
    at: usize,
    names: &'a HashMap<String, String>,
    values: &'a HashMap<String, AttributeValue>,
    item: Option<&'a Item>,
}

fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if "(),".contains(c) {
            tokens.push(c.to_string());
            i += 1;
        } else if "<>=".contains(c) {
            let mut op = c.to_string();
            if i + 1 < chars.len() && "<>=".contains(chars[i + 1]) {
                op.push(chars[i + 1]);
                i += 1;
            }
            tokens.push(op);
            i += 1;
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !"(),<>=".contains(chars[i]) {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        }
    }
    tokens
}

impl Parser<'_> {
    fn next(&mut self) -> String {
        let t = self.tokens.get(self.at).cloned().unwrap_or_default();
        self.at += 1;
        t
    }

    fn peek(&self) -> &str {
        self.tokens.get(self.at).map_or("", String::as_str)
    }

    fn expect(&mut self, token: &str) {
        let t = self.next();
        assert_eq!(t, token, "expected {token:?} in {:?}", self.tokens);
    }

    fn attr(&mut self) -> Option<&AttributeValue> {
        let placeholder = self.next();
        let name = self
            .names
            .get(&placeholder)
            .unwrap_or_else(|| panic!("name {placeholder} not defined"));
        self.item.and_then(|i| i.get(name))
    }

    fn value(&mut self) -> AttributeValue {
        let placeholder = self.next();
        self.values
            .get(&placeholder)
            .unwrap_or_else(|| panic!("value {placeholder} not defined"))
            .clone()
    }

    fn or(&mut self) -> bool {
        let mut holds = self.and();
        while self.peek() == "OR" {
            self.next();
            holds |= self.and();
        }
        holds
    }

    fn and(&mut self) -> bool {
        let mut holds = self.not();
        while self.peek() == "AND" {
            self.next();
            holds &= self.not();
        }
        holds
    }

    fn not(&mut self) -> bool {
        if self.peek() == "NOT" {
            self.next();
            return !self.not();
        }
        self.primary()
    }

    fn primary(&mut self) -> bool {
        match self.peek() {
            "(" => {
                self.next();
                let holds = self.or();
                self.expect(")");
                holds
            }
            f @ ("attribute_exists" | "attribute_not_exists") => {
                let exists = f == "attribute_exists";
                self.next();
                self.expect("(");
                let present = self.attr().is_some();
                self.expect(")");
                present == exists
            }
            "begins_with" => {
                self.next();
                self.expect("(");
                let stored = self.attr().cloned();
                self.expect(",");
                let prefix = self.value();
                self.expect(")");
                begins_with(stored.as_ref(), &prefix)
            }
            _ => {
                let stored = self.attr().cloned();
                let op = self.next();
                let op = match op.as_str() {
                    "=" => Op::Eq,
                    "<>" => Op::Ne,
                    "<" => Op::Lt,
                    "<=" => Op::Le,
                    ">" => Op::Gt,
                    ">=" => Op::Ge,
                    "BETWEEN" => {
                        let low = self.value();
                        self.expect("AND");
                        let high = self.value();
                        return op_holds(Op::Ge, stored.as_ref(), &low)
                            && op_holds(Op::Le, stored.as_ref(), &high);
                    }
                    other => panic!("unknown operator {other:?} in {:?}", self.tokens),
                };
                let value = self.value();
                op_holds(op, stored.as_ref(), &value)
            }
        }
    }
}

/// Whether the condition expression `text` (with its `names` and `values`, as a request carries
/// them) holds on the stored `item` (`None`: no item).
pub(crate) fn holds(
    text: &str,
    names: &HashMap<String, String>,
    values: &HashMap<String, AttributeValue>,
    item: Option<&Item>,
) -> bool {
    let mut parser = Parser {
        tokens: tokenize(text),
        at: 0,
        names,
        values,
        item,
    };
    let holds = parser.or();
    assert_eq!(
        parser.at,
        parser.tokens.len(),
        "trailing tokens in {text:?}"
    );
    holds
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ddb::codec::{strategy::key_value, to_sdk};
    use crate::ddb::condition::strategy::{NAMES, condition};

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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The text a condition renders to means what its tree means, on any stored item:
        /// precedence and parentheses never change a condition.
        #[test]
        fn a_rendered_condition_means_what_its_tree_says(c in condition(), item in item()) {
            let r = c.render();
            let names = r.names.iter().cloned().collect();
            let values = r.values.iter().cloned().collect();
            prop_assert_eq!(
                holds(&r.expression, &names, &values, item.as_ref()),
                semantics(&c, item.as_ref()),
                "{}", r.expression
            );
        }
    }
}
