//! No CLI call waits forever: `heatsink` against an endpoint that takes the connection and
//! never answers (the test kit's network cut, cut before the first byte) gives up within its
//! stated bound (5 s an attempt, 15 s a call: `heatsink::timeouts::Timeouts::CALL`) and prints
//! one line saying what timed out, where, and the next step. No local stack is needed: the cut
//! holds every connection silent, so nothing is ever forwarded.
//!
//! Before the timeout policy, the SDK set only a connect timeout: the same command hung until
//! it was killed.

use std::process::Stdio;
use std::time::{Duration, Instant};

use heatsink_testkit::cut::Cut;

/// The bound the CLI states, plus slack for process start-up and a loaded machine.
const BOUND: Duration = Duration::from_secs(15);
const SLACK: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_cli_call_to_a_hung_endpoint_gives_up_within_its_timeout_with_one_line() {
    // Upstream is never dialled while cut; any address will do.
    let cut = Cut::start("http://127.0.0.1:9").await.expect("proxy");
    cut.cut();
    let started = Instant::now();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_heatsink"))
        .args(["keys", "where", "p9", "--stream", "hung-stream"])
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_PROFILE")
        .env("AWS_ENDPOINT_URL_KINESIS", cut.endpoint())
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run heatsink");
    let out = tokio::time::timeout(BOUND + SLACK, child.wait_with_output())
        .await
        .expect("heatsink keys where must give up within its bound, not hang")
        .expect("its output");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a timed-out call fails: {stderr}");
    assert!(
        took >= Duration::from_secs(4),
        "it waited for at least one attempt's timeout, not a refusal ({took:?}): {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line: {stderr}");
    let line = lines[0];
    for part in [
        "Kinesis",
        "hung-stream",
        &cut.endpoint(),
        "timed out",
        "AWS_ENDPOINT_URL_KINESIS",
        "run it again",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    assert!(
        !line.contains("raw:") && !line.contains("TimeoutError("),
        "{line}"
    );
}
