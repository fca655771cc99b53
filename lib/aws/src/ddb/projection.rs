//! `Projection`: the attributes a Scan or Query returns, rendered with their names (every
//! attribute a placeholder, so reserved words such as `count` or `owner` are safe).

use super::placeholders::{Clause, Placeholders, Rendered};

/// The attributes a read returns (the others are not sent back, which a Scan of a whole table
/// pays for in bytes, not in read units).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub(crate) struct Projection {
    attrs: Vec<String>,
}

impl Projection {
    /// Only `attrs` (at least one; DynamoDB refuses an empty projection).
    pub(crate) fn of<S: AsRef<str>>(attrs: &[S]) -> Self {
        Self {
            attrs: attrs.iter().map(|a| a.as_ref().to_owned()).collect(),
        }
    }

    /// The expression with exactly the names it uses (no values).
    pub(crate) fn render(&self) -> Rendered {
        let mut p = Placeholders::new(Clause::Projection);
        let names: Vec<String> = self.attrs.iter().map(|a| p.name(a)).collect();
        p.finish(names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_is_a_placeholder_and_a_repeated_one_is_named_once() {
        let r = Projection::of(&["pk", "count", "pk"]).render();
        assert_eq!(r.expression, "#p0, #p1, #p0");
        assert_eq!(
            r.names,
            [
                ("#p0".to_owned(), "pk".to_owned()),
                ("#p1".to_owned(), "count".to_owned())
            ]
        );
        assert!(r.values.is_empty());
    }
}
