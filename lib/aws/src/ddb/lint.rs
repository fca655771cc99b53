//! The check that keeps expressions in this layer: outside `src/ddb/`, no production source of
//! the crate sets an expression or its names and values on a request by hand.
//!
//! It counts, per file and outside `#[cfg(test)]` modules, the calls that set an expression
//! (`.condition_expression(…)`, `.update_expression(…)`, `.key_condition_expression(…)`,
//! `.filter_expression(…)`, `.projection_expression(…)`, their `set_` forms, and
//! `.expression_attribute_names(…)` / `.expression_attribute_values(…)`); reading one back
//! (`.condition_expression()`) is not counted. The limit is none (a caller's own expression, as
//! `stream::Fence` extends one, goes through `ddb::foreign`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Setters whose call with an argument means an expression was written by hand.
const SETTERS: &[&str] = &[
    "condition_expression(",
    "update_expression(",
    "key_condition_expression(",
    "filter_expression(",
    "projection_expression(",
    "expression_attribute_names(",
    "expression_attribute_values(",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The production part of a source: everything before its `#[cfg(test)]` module.
fn production(text: &str) -> &str {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == "#[cfg(test)]" {
            let rest = &text[offset + line.len()..];
            if rest.trim_start().starts_with("mod ") {
                return &text[..offset];
            }
        }
        offset += line.len();
    }
    text
}

/// Calls of a setter with an argument (not a getter `name()`, not a `get_name(`).
pub(crate) fn hand_written(text: &str) -> usize {
    SETTERS
        .iter()
        .map(|setter| {
            text.match_indices(setter)
                .filter(|(i, _)| {
                    let before = &text[..*i];
                    let called = before.ends_with('.') || before.ends_with(".set_");
                    let with_argument = !text[i + setter.len()..].starts_with(')');
                    called && with_argument
                })
                .count()
        })
        .sum()
}

#[test]
fn no_expression_is_written_by_hand_outside_the_ddb_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for path in files {
        let rel = path
            .strip_prefix(&root)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("ddb/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        let count = hand_written(production(&text));
        if count > 0 {
            found.insert(rel, count);
        }
    }
    let total: usize = found.values().sum();
    assert!(
        found.is_empty(),
        "{total} hand-written expression calls outside src/ddb, where none is allowed; per \
         file: {found:?}. Build expressions \
         with crate::ddb (Condition, Update, KeyCondition, OnlyIf, Updating, QueryKey; \
         AlsoOnlyIf, AlsoUpdating to extend a caller's own)"
    );
}

#[test]
fn getters_and_test_modules_are_not_counted() {
    assert_eq!(
        hand_written(r#"r.condition_expression(); b.condition_expression("a = :a")"#),
        1
    );
    assert_eq!(hand_written(r#"b.set_update_expression(Some(x))"#), 1);
    assert_eq!(hand_written("r.get_condition_expression()"), 0);
    assert_eq!(
        hand_written(r##"q.key_condition_expression("#a = :a")"##),
        1
    );
    let text = "x.update_expression(e)\n#[cfg(test)]\nmod tests {\n y.update_expression(e)\n}\n";
    assert_eq!(hand_written(production(text)), 1);
}
