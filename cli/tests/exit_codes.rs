//! The `heatsink` binary as a shell sees it: `--version`, the exit codes its `--help` lists, one
//! line on stderr for a failure, completions on stdout. No AWS: failures come from bad input, a
//! missing file and a closed port.

use std::process::{Command, Output};

fn heatsink(args: &[&str]) -> Output {
    // No profile (an empty config file), no real endpoint: a closed local port, one attempt.
    let empty = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-aws-config");
    std::fs::write(&empty, "").expect("an empty config file");
    Command::new(env!("CARGO_BIN_EXE_heatsink"))
        .args(args)
        .env("AWS_CONFIG_FILE", &empty)
        .env("AWS_SHARED_CREDENTIALS_FILE", &empty)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_MAX_ATTEMPTS", "1")
        .env_remove("AWS_ENDPOINT_URL_KINESIS")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("the heatsink binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A failure: exit 1, nothing on stdout, exactly one line on stderr.
fn one_line_failure(args: &[&str]) -> String {
    let out = heatsink(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn version_prints_the_crate_version_and_exits_0() {
    let out = heatsink(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("heatsink {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_lists_the_exit_codes_and_a_usage_error_exits_2() {
    let help = heatsink(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    for code in ["  0  done", "  1  failed", "  2  usage error"] {
        assert!(help.contains(code), "{code:?} not in --help");
    }
    let usage = heatsink(&["plan", "--rate", "fast", "--shards", "4"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage.stderr));
    assert!(usage.stdout.is_empty());
}

#[test]
fn failures_exit_1_with_what_where_and_the_next_step_on_one_line() {
    let line = one_line_failure(&["plan", "--rate", "5000", "--shards", "1"]);
    assert!(
        line.contains("no salt count fits --rate 5000 on 1 shards"),
        "{line}"
    );
    let line = one_line_failure(&["slots", "verify", "--ack-log", "/nonexistent/acks.jsonl"]);
    assert!(
        line.contains("/nonexistent/acks.jsonl") && line.contains("check --ack-log"),
        "{line}"
    );
    let line = one_line_failure(&["keys", "where", "p9", "--stream", "like-events"]);
    assert!(
        line.contains("Kinesis at http://127.0.0.1:1")
            && line.contains("like-events")
            && line.contains("localstack/stack up"),
        "{line}"
    );
}

#[test]
fn json_goes_to_stdout_and_parses() {
    let out = heatsink(&["plan", "--rate", "2400", "--shards", "4", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["per_shard"].as_array().map(Vec::len), Some(4));
    let human = heatsink(&["plan", "--rate", "2400", "--shards", "4"]);
    let human = text(&human.stdout);
    assert!(
        human.starts_with(&format!("S = {} sub-keys", v["salts"])),
        "{human}"
    );
}

#[test]
fn completions_print_a_script_for_each_shell() {
    for (shell, marker, nested) in [
        (
            "bash",
            "complete -F _heatsink",
            "cmd=\"heatsink__subcmd__slots__subcmd__verify\"",
        ),
        ("zsh", "#compdef heatsink", "'verify:"),
        ("fish", "complete -c heatsink", "-f -a \"verify\""),
    ] {
        let out = heatsink(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}");
        assert!(script.contains(nested), "{shell}: slots verify");
        assert!(
            script.contains("ack-log"),
            "{shell}: a nested command's flag"
        );
    }
}

#[test]
fn a_redrive_of_a_record_that_is_not_an_on_failure_record_keeps_it_and_exits_1() {
    let bad = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-a-parked-batch.json");
    std::fs::write(&bad, r#"{"version": "1.0", "Other": {}}"#).expect("a record file");
    let path = bad.display().to_string();
    let out = heatsink(&["redrive", "--record", &path]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("1 of 1 parked batches were not redriven")
            && stderr.contains(&path)
            && stderr.contains("not an on-failure record"),
        "{stderr}"
    );
    // The report still lists it, with the next step.
    assert!(
        text(&out.stdout).contains("unreadable"),
        "{}",
        text(&out.stdout)
    );
    let line = one_line_failure(&["redrive", "--record", "/nonexistent/parked.json"]);
    assert!(line.contains("/nonexistent/parked.json"), "{line}");
}
