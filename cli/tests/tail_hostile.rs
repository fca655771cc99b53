//! `heatsink tail` against the hostile KPL record of issue 32, on the local stack's Kinesis
//! (kinesis-mock) and DynamoDB: the record is put on a one-shard stream with a plain record
//! after it, and `tail` runs under a 4 GiB address-space limit (`prlimit --as`). It must keep
//! running, print the hostile record once with its reason and at most 4 KiB of its data, print
//! the plain record after it, and exit 0 on `--idle-exit`.
//!
//! Before the decoder's bounds, the consumer died within 10 s with `memory allocation of 300000
//! bytes failed` and printed nothing: it copied the 300 KB key into each of 120,000 user
//! records.

#[path = "../../tests/tests/common/hostile.rs"]
mod hostile;

use std::process::Stdio;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use serde_json::Value;

/// The local stack's endpoints, or `None` (the test is skipped) when none is configured and
/// `HEATSINK_REQUIRE_STACK` does not ask for one.
fn stack() -> Option<()> {
    let set = std::env::var_os("AWS_ENDPOINT_URL_KINESIS").is_some()
        && std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some();
    if !set {
        assert!(
            std::env::var("HEATSINK_REQUIRE_STACK").as_deref() != Ok("1"),
            "HEATSINK_REQUIRE_STACK=1 but no AWS_ENDPOINT_URL_KINESIS/DYNAMODB: \
             run `eval \"$(localstack/stack env)\"`"
        );
        eprintln!("skip: no local stack (eval \"$(localstack/stack env)\")");
        return None;
    }
    Some(())
}

#[tokio::test]
async fn tail_under_a_4_gib_address_space_prints_the_issue_32_record_bounded_and_reads_on() {
    if stack().is_none() {
        return;
    }
    let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let k = aws_sdk_kinesis::Client::new(&config);
    let run = format!("tailhostile{}", std::process::id());
    k.create_stream()
        .stream_name(&run)
        .shard_count(1)
        .send()
        .await
        .expect("create the stream");
    for _ in 0..100 {
        let d = k.describe_stream_summary().stream_name(&run).send().await;
        if d.ok()
            .and_then(|d| d.stream_description_summary)
            .is_some_and(|s| s.stream_status == aws_sdk_kinesis::types::StreamStatus::Active)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hostile = hostile::issue_32_aggregate();
    assert_eq!(hostile.len(), 1_020_024);
    for (key, data) in [("hostile", hostile.clone()), ("k00", b"after".to_vec())] {
        k.put_record()
            .stream_name(&run)
            .partition_key(key)
            .data(Blob::new(data))
            .send()
            .await
            .expect("put");
    }
    let child = tokio::process::Command::new("prlimit")
        .arg("--as=4294967296")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_heatsink"))
        .args([
            "tail",
            "--stream",
            &run,
            "--app",
            &run,
            "--prefix",
            &format!("{run}-"),
        ])
        .args(["--idle-exit", "3s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("prlimit and heatsink");
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("tail exits on --idle-exit")
        .expect("tail ran");
    let _ = k.delete_stream().stream_name(&run).send().await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tail failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.len() < 16_384, "printed {} bytes", stdout.len());
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let reason = lines[0]["undecodable"].as_str().expect("the reason");
    assert!(
        reason.contains("300000 bytes, over Kinesis's 256-character limit"),
        "{reason}"
    );
    assert_eq!(lines[0]["data_truncated"], true);
    assert_eq!(lines[0]["data_len"], 1_020_024);
    assert_eq!(lines[0]["partition_key"], "hostile");
    assert!(lines[0].get("sub_seq").is_none());
    assert_eq!(lines[1]["data"], "after");
}
