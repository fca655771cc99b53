//! Placeholders for expressions: every attribute name becomes `#<clause><i>` and every value
//! `:<clause><i>`, so no attribute name can clash with one of DynamoDB's 573 reserved words
//! (`counter`, `owner`, `state`, `key`, `size` …) or contain a character an expression cannot
//! hold, and two clauses of one request (its condition and its update) never share one.
//!
//! A request the caller built (a foreign expression, [`super::foreign`]) may already use any
//! placeholder, ours included: [`Placeholders::avoiding`] hands out only those it does not.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;

/// Which clause of a request an expression is: its placeholders carry the clause's letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clause {
    /// `ConditionExpression` (`#c0`, `:c0`).
    Condition,
    /// `UpdateExpression` (`#u0`, `:u0`).
    Update,
    /// `KeyConditionExpression` (`#k0`, `:k0`).
    Key,
    /// `ProjectionExpression` (`#p0`; it takes no values).
    Projection,
}

impl Clause {
    fn letter(self) -> char {
        match self {
            Clause::Condition => 'c',
            Clause::Update => 'u',
            Clause::Key => 'k',
            Clause::Projection => 'p',
        }
    }
}

/// An expression with the names and values its placeholders stand for: exactly those it uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendered {
    /// The expression text.
    pub expression: String,
    /// Placeholder → attribute name.
    pub names: Vec<(String, String)>,
    /// Placeholder → value.
    pub values: Vec<(String, AttributeValue)>,
}

/// Hands out the placeholders of one clause while its expression is written.
#[derive(Debug)]
pub(crate) struct Placeholders {
    letter: char,
    names: Vec<(String, String)>,
    values: Vec<(String, AttributeValue)>,
    /// Placeholders the request already uses (a caller's own expression): never handed out.
    taken: BTreeSet<String>,
    next_name: usize,
    next_value: usize,
}

impl Placeholders {
    /// Placeholders for `clause`.
    pub(crate) fn new(clause: Clause) -> Self {
        Self::avoiding(clause, &BTreeSet::new())
    }

    /// Placeholders for `clause` on a request that already uses `taken` (`#…` and `:…`): the
    /// ones handed out skip them (`#c0` taken: `#c1`, …), so neither side's meaning changes.
    pub(crate) fn avoiding(clause: Clause, taken: &BTreeSet<String>) -> Self {
        Self {
            letter: clause.letter(),
            names: Vec::new(),
            values: Vec::new(),
            taken: taken.clone(),
            next_name: 0,
            next_value: 0,
        }
    }

    /// The next placeholder `<sigil><letter><i>` not taken.
    fn fresh(&self, sigil: char, next: &mut usize) -> String {
        loop {
            let placeholder = format!("{sigil}{}{}", self.letter, *next);
            *next += 1;
            if !self.taken.contains(&placeholder) {
                return placeholder;
            }
        }
    }

    /// The placeholder of attribute `attr` (one per attribute within the clause).
    pub(crate) fn name(&mut self, attr: &str) -> String {
        if let Some((placeholder, _)) = self.names.iter().find(|(_, a)| a == attr) {
            return placeholder.clone();
        }
        let mut next = self.next_name;
        let placeholder = self.fresh('#', &mut next);
        self.next_name = next;
        self.names.push((placeholder.clone(), attr.to_owned()));
        placeholder
    }

    /// A fresh placeholder for `value`.
    pub(crate) fn value(&mut self, value: &AttributeValue) -> String {
        let mut next = self.next_value;
        let placeholder = self.fresh(':', &mut next);
        self.next_value = next;
        self.values.push((placeholder.clone(), value.clone()));
        placeholder
    }

    /// The expression with the names and values handed out for it.
    pub(crate) fn finish(self, expression: String) -> Rendered {
        Rendered {
            expression,
            names: self.names,
            values: self.values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_attribute_has_one_name_and_every_value_its_own_placeholder() {
        let mut p = Placeholders::new(Clause::Condition);
        let v = AttributeValue::N("1".into());
        assert_eq!(p.name("counter"), "#c0");
        assert_eq!(p.name("owner"), "#c1");
        assert_eq!(p.name("counter"), "#c0");
        assert_eq!(p.value(&v), ":c0");
        assert_eq!(p.value(&v), ":c1");
        let mut u = Placeholders::new(Clause::Update);
        assert_eq!(u.name("counter"), "#u0", "another clause, another letter");
    }

    #[test]
    fn placeholders_a_request_already_uses_are_skipped() {
        let taken = BTreeSet::from(["#c0".to_owned(), "#c2".to_owned(), ":c0".to_owned()]);
        let mut p = Placeholders::avoiding(Clause::Condition, &taken);
        let v = AttributeValue::N("1".into());
        assert_eq!(p.name("a"), "#c1");
        assert_eq!(p.name("b"), "#c3");
        assert_eq!(p.name("a"), "#c1");
        assert_eq!(p.value(&v), ":c1");
        assert_eq!(
            p.value(&v),
            ":c2",
            "a name's placeholder does not take a value's"
        );
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    //! The check every rendered expression passes in the property tests.
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::Rendered;

    /// Words an expression may hold besides placeholders.
    const KEYWORDS: &[&str] = &[
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "attribute_exists",
        "attribute_not_exists",
        "begins_with",
        "SET",
        "ADD",
        "REMOVE",
    ];

    /// Every placeholder in the text is defined, every one defined is used, none is defined
    /// twice, each carries the clause's `letter`, and every other word is a keyword: no
    /// attribute name reaches the text.
    pub(crate) fn check_rendered(r: &Rendered, letter: char) -> Result<(), TestCaseError> {
        let text = &r.expression;
        let mut used = BTreeSet::new();
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
            if c == '#' || c == ':' || word_char(c) {
                let start = i;
                i += 1;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                let token: String = chars[start..i].iter().collect();
                if c == '#' || c == ':' {
                    prop_assert!(
                        token[1..].starts_with(letter),
                        "{token} lacks the clause letter in {text}"
                    );
                    used.insert(token);
                } else {
                    prop_assert!(
                        KEYWORDS.contains(&token.as_str()),
                        "{token:?} is no keyword in {text}"
                    );
                }
            } else {
                prop_assert!(" ,()=<>".contains(c), "{c:?} in {text}");
                i += 1;
            }
        }
        let defined: Vec<&String> = r
            .names
            .iter()
            .map(|(p, _)| p)
            .chain(r.values.iter().map(|(p, _)| p))
            .collect();
        let distinct: BTreeSet<&String> = defined.iter().copied().collect();
        prop_assert_eq!(distinct.len(), defined.len(), "a placeholder defined twice");
        let defined: BTreeSet<String> = distinct.into_iter().cloned().collect();
        prop_assert_eq!(used, defined);
        let attrs: BTreeSet<&String> = r.names.iter().map(|(_, a)| a).collect();
        prop_assert_eq!(attrs.len(), r.names.len(), "one attribute, two names");
        Ok(())
    }
}
