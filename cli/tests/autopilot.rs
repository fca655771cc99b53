//! `heatsink autopilot` as an operator runs it against the local stack's DynamoDB: periods in
//! dry run count a hot owner's streak and report the move they would make, the kill switch
//! holds the next period, and the state shows it all; then, acting, a period records the move
//! before starting it, runs it to its end and records its end.

use std::process::{Command, Output};

/// Whether the local stack's DynamoDB is configured (the test is skipped otherwise, unless
/// `HEATSINK_REQUIRE_STACK=1` asks for it).
fn stack() -> bool {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some() {
        return true;
    }
    assert!(
        std::env::var("HEATSINK_REQUIRE_STACK").as_deref() != Ok("1"),
        "HEATSINK_REQUIRE_STACK=1 but no AWS_ENDPOINT_URL_DYNAMODB: run `eval \"$(localstack/stack env)\"`"
    );
    eprintln!("skip: no local stack (eval \"$(localstack/stack env)\")");
    false
}

fn heatsink(prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_heatsink"))
        .args(args)
        .env("HEATSINK_PREFIX", prefix)
        .output()
        .expect("the heatsink binary runs")
}

/// Runs and expects exit 0; stdout.
fn ok(prefix: &str, args: &[&str]) -> String {
    let out = heatsink(prefix, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn dry_run_periods_build_a_streak_and_report_the_move_and_a_pause_holds_the_next() {
    if !stack() {
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("ap{}-", nanos % 1_000_000_000);
    ok(&prefix, &["slots", "init", "--owner", "t-a"]);
    // Every sample on t-a's slots; t-b is a spare that owns nothing yet.
    let samples =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}samples.jsonl"));
    let lines: Vec<String> = (0..64u32)
        .map(|i| format!("{{\"slot\": {}, \"rate\": 10}}", i * 256))
        .collect();
    std::fs::write(&samples, lines.join("\n")).expect("samples");
    let samples = samples.to_str().expect("utf-8 path");
    let period = |verb: &str| {
        ok(
            &prefix,
            &["autopilot", verb, "--samples", samples, "--spare", "t-b"],
        )
    };
    // A plan changes nothing: twice in a row it is still the first period of the streak.
    assert!(period("plan").contains("proposed 1 of 2 periods"), "plan");
    assert!(
        period("plan").contains("proposed 1 of 2 periods"),
        "plan again"
    );
    let first = period("run");
    assert!(first.contains("proposed 1 of 2 periods"), "{first}");
    let second = period("run");
    assert!(
        second.contains("dry run: would move off t-a") && second.contains("-> t-b"),
        "{second}"
    );
    // A dry run starts nothing.
    let status = ok(&prefix, &["autopilot", "status", "--json"]);
    let state: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert!(state["in_flight"].is_null(), "{state}");
    assert_eq!(
        state["history"].as_array().map(Vec::len),
        Some(0),
        "{state}"
    );

    ok(
        &prefix,
        &["autopilot", "pause", "--reason", "test: hands off"],
    );
    let held = period("run");
    assert!(held.contains("hold: paused (test: hands off)"), "{held}");
    let status = ok(&prefix, &["autopilot", "status"]);
    assert!(status.contains("paused: test: hands off"), "{status}");
    ok(&prefix, &["autopilot", "resume"]);
    // Resumed, the streak counts afresh (a pause forgets it).
    assert!(period("run").contains("proposed 1 of 2 periods"));
    // Nothing is in flight, so there is nothing to finish: one line naming the state.
    let out = heatsink(&prefix, &["autopilot", "finish", "--id", "autopilot-1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not in flight") && err.lines().count() == 1,
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acting_period_records_its_moves_before_they_start_runs_them_and_records_its_end() {
    use heatsink::schema::{KeyAttr, StreamView, TableSpec, ensure_table};
    if !stack() {
        return;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("aq{}-", nanos % 1_000_000_000);
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let ddb = aws_sdk_dynamodb::Client::new(&config);
    let (a, b, c) = (
        format!("{prefix}a"),
        format!("{prefix}b"),
        format!("{prefix}c"),
    );
    for name in [&a, &b, &c] {
        let spec =
            TableSpec::new(name.clone(), KeyAttr::s("pk")).stream(StreamView::NewAndOldImages);
        ensure_table(&ddb, &spec).await.expect("owner table");
    }
    ok(&prefix, &["slots", "init", "--owner", &a]);
    // Four hot slots and one at each end of the key space: a's load is three times the mean
    // and no one spare can take enough of it, so one operation carries two pieces, one to
    // each spare (slots 102–103 and slot 0). The end slots keep the plan off pieces as wide
    // as the key space: each move fences at most 2 slot items (moto takes seconds per hundred
    // writes to a table with a stream and keeps the stream's history per iterator; a move of
    // the key space fences 16,284 items and ran moto to 24 GB here).
    let samples =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}samples.jsonl"));
    let lines = [
        r#"{"slot": 0, "rate": 300}"#,
        r#"{"slot": 100, "rate": 250}"#,
        r#"{"slot": 101, "rate": 250}"#,
        r#"{"slot": 102, "rate": 250}"#,
        r#"{"slot": 103, "rate": 250}"#,
        r#"{"slot": 16383, "rate": 300}"#,
    ];
    std::fs::write(&samples, lines.join("\n")).expect("samples");
    let samples = samples.to_str().expect("utf-8 path").to_owned();
    let run = || {
        ok(
            &prefix,
            &[
                "autopilot",
                "run",
                "--act",
                "--samples",
                &samples,
                "--spare",
                &b,
                "--spare",
                &c,
            ],
        )
    };
    let first = tokio::task::block_in_place(run);
    assert!(first.contains("proposed 1 of 2 periods"), "{first}");
    let second = tokio::task::block_in_place(run);
    assert!(
        second.contains("run: move off")
            && second.contains(&format!("-> {b}"))
            && second.contains(&format!("-> {c}")),
        "{second}"
    );
    let status = ok(&prefix, &["autopilot", "status", "--json"]);
    let state: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert!(
        state["in_flight"].is_null(),
        "the moves ended and were recorded: {state}"
    );
    // One operation, its two pieces recorded for the cooldown.
    assert_eq!(
        state["history"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    assert_eq!(
        state["history"][0]["pieces"].as_array().map(Vec::len),
        Some(2),
        "{state}"
    );
    // The directory now gives part of the key space to b and to c.
    let slots = ok(&prefix, &["slots", "status", "--json"]);
    assert!(slots.contains(&b) && slots.contains(&c), "{slots}");
    // What is left is cooling or too hot for any destination: the next period moves nothing.
    let third = tokio::task::block_in_place(run);
    assert!(!third.contains("run: move"), "{third}");

    // A state that no longer reads stops every period, but not the kill switch nor the reset
    // its failure names.
    ddb.update_item()
        .table_name(format!("{prefix}slots"))
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("autopilot".into()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("state".into()),
        )
        .update_expression("SET #s = :bad")
        .expression_attribute_names("#s", "state")
        .expression_attribute_values(
            ":bad",
            aws_sdk_dynamodb::types::AttributeValue::S("{not json".into()),
        )
        .send()
        .await
        .expect("corrupt the state");
    let out = heatsink(&prefix, &["autopilot", "status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("heatsink autopilot reset"), "{err}");
    ok(
        &prefix,
        &["autopilot", "pause", "--reason", "test: corrupt state"],
    );
    ok(&prefix, &["autopilot", "reset"]);
    let status = ok(&prefix, &["autopilot", "status"]);
    assert!(status.contains("paused: test: corrupt state"), "{status}");
}
