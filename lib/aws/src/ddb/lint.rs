//! The check that keeps expressions in this layer: outside `src/ddb/`, no production source of
//! the crate sets an expression or its names and values on a request by hand.
//!
//! It counts, per file and outside `#[cfg(test)]` modules, the calls that set an expression
//! (`.condition_expression(…)`, `.update_expression(…)`, `.key_condition_expression(…)`,
//! `.filter_expression(…)`, `.projection_expression(…)`, their `set_` forms, and
//! `.expression_attribute_names(…)` / `.expression_attribute_values(…)`); reading one back
//! (`.condition_expression()`) is not counted. The limit is none (a caller's own expression, as
//! `stream::Fence` extends one, goes through `ddb::foreign`).
//!
//! It also counts the hand-written pagination of DynamoDB and DynamoDB Streams reads outside the
//! layer: a call that sets a page cursor (`.exclusive_start_key(…)`,
//! `.exclusive_start_shard_id(…)`, their `set_` forms). Reads page through the SDK's
//! paginators, [`super::pages::read_all`] or [`super::stream_listing`]; a read that must hold
//! its cursor between pages (one page per call of a resumable read, a checkpoint persisted
//! between pages, each page retried within a deadline) says why in a `// paged by hand: …`
//! comment at most [`JUSTIFIED_WITHIN`] lines above the call, and only then passes.

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

/// Setters whose call with an argument means a read pages by hand.
const CURSORS: &[&str] = &["exclusive_start_key(", "exclusive_start_shard_id("];

/// How many lines above a cursor call its `// paged by hand:` justification may stand.
const JUSTIFIED_WITHIN: usize = 12;

/// The marker that justifies a hand-paged read.
const PAGED_BY_HAND: &str = "// paged by hand:";

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

/// Where `setters` are called with an argument in `text` (not a getter `name()`, not a
/// `get_name(`): byte offsets.
fn calls(text: &str, setters: &[&str]) -> Vec<usize> {
    setters
        .iter()
        .flat_map(|setter| {
            text.match_indices(setter)
                .filter(|(i, _)| {
                    let before = &text[..*i];
                    let called = before.ends_with('.') || before.ends_with(".set_");
                    let with_argument = !text[i + setter.len()..].starts_with(')');
                    called && with_argument
                })
                .map(|(i, _)| i)
        })
        .collect()
}

/// Calls of a setter with an argument (not a getter `name()`, not a `get_name(`).
pub(crate) fn hand_written(text: &str) -> usize {
    calls(text, SETTERS).len()
}

/// Page cursors set by hand in `text`: (line, justified by a `// paged by hand:` comment at most
/// [`JUSTIFIED_WITHIN`] lines above).
pub(crate) fn hand_paged(text: &str) -> Vec<(usize, bool)> {
    let lines: Vec<&str> = text.lines().collect();
    calls(text, CURSORS)
        .into_iter()
        .map(|i| {
            let line = text[..i].matches('\n').count();
            let from = line.saturating_sub(JUSTIFIED_WITHIN);
            let justified = lines[from..=line.min(lines.len().saturating_sub(1))]
                .iter()
                .any(|l| l.trim_start().starts_with(PAGED_BY_HAND));
            (line + 1, justified)
        })
        .collect()
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
fn no_read_pages_by_hand_outside_the_ddb_layer_without_saying_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut unjustified = Vec::new();
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
        for (line, justified) in hand_paged(production(&text)) {
            if !justified {
                unjustified.push(format!("{rel}:{line}"));
            }
        }
    }
    assert!(
        unjustified.is_empty(),
        "page cursors set by hand outside src/ddb: {unjustified:?}. Page with the SDK's \
         paginators, ddb::read_all or ddb::stream_listing, or say why the read holds its cursor \
         between pages in a `{PAGED_BY_HAND} …` comment at most {JUSTIFIED_WITHIN} lines above"
    );
}

#[test]
fn a_cursor_passes_only_with_its_reason_above_it() {
    let bare = "let q = ddb.scan()\n    .set_exclusive_start_key(start);\n";
    assert_eq!(hand_paged(bare), [(2, false)]);
    let why = format!("{PAGED_BY_HAND} one page per call\n{bare}");
    assert_eq!(hand_paged(&why), [(3, true)]);
    let far = format!(
        "{PAGED_BY_HAND} too far\n{}{bare}",
        "\n".repeat(JUSTIFIED_WITHIN)
    );
    assert!(
        !hand_paged(&far)[0].1,
        "a reason too far above does not count"
    );
    assert!(
        hand_paged("r.exclusive_start_key()").is_empty(),
        "a getter pages nothing"
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
