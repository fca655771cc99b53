//! One module per subcommand.

pub mod autopilot;
pub mod completions;
pub mod exit;
pub mod fail;
pub mod hot;
pub mod keys;
pub mod lineage;
pub mod local;
pub mod r#move;
pub mod output;
pub mod plan;
pub mod produce;
pub mod progress;
pub mod rebuild;
pub mod redrive;
pub mod reshard;
pub mod schema;
pub mod sim;
pub mod slots;
pub mod table;
pub mod tail;
pub mod top;

/// Any command's failure, shown to the operator as one line.
pub type CmdResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Loads the AWS configuration from the environment (region, `AWS_ENDPOINT_URL_*`, credentials).
pub async fn sdk_config() -> aws_config::SdkConfig {
    // No call waits forever: 5 s an attempt, 15 s a call (heatsink::timeouts); commands that
    // run under a lease (tail) tighten their stream clients to it. Retries pinned
    // (heatsink::retries): a change of the SDK's defaults does not change the commands'.
    heatsink::retries::Retries::PINNED.apply(
        &heatsink::timeouts::Timeouts::CALL
            .apply(&aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await),
    )
}

/// The environment variable that makes the slots and move commands send one DynamoDB call at a
/// time: set it to `1` for an endpoint whose transactions are not isolated (moto, LocalStack's
/// host-mode DynamoDB: a cancelled transaction reverts concurrent writes, see `heatsink_sim::http`).
/// `localstack/stack env` exports it on those lanes; against DynamoDB leave it unset.
pub const SERIAL_DYNAMODB_ENV: &str = "HEATSINK_SERIAL_DYNAMODB";

/// [`sdk_config`] for the slots and move commands: one call at a time when
/// [`SERIAL_DYNAMODB_ENV`] is `1`, full concurrency otherwise.
///
/// Serialized, a call waits for the one connection inside its own attempt, behind every other
/// call of the process (a move's parallel copy, a load's writes): so it gets timeouts that
/// include that wait (20 s an attempt, 60 s a call, instead of the mover's and router's 1 s /
/// 2.5 s), and no stalled-stream cut (its upload is idle while it queues).
pub async fn slots_sdk_config() -> aws_config::SdkConfig {
    let config = sdk_config().await;
    if std::env::var(SERIAL_DYNAMODB_ENV).as_deref() == Ok("1") {
        heatsink_sim::http::bounded(&config, 1)
            .to_builder()
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(std::time::Duration::from_secs(20))
                    .operation_timeout(std::time::Duration::from_secs(60))
                    .build(),
            )
            .stalled_stream_protection(
                aws_config::stalled_stream_protection::StalledStreamProtectionConfig::disabled(),
            )
            .build()
    } else {
        config
    }
}

/// Parses `250ms`, `30s`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "s"), |i| text.split_at(i));
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 30s or 2m"))?;
    let secs = match unit {
        "ms" => n / 1_000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3_600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    if !(0.0..=MAX_DURATION_SECS).contains(&secs) {
        return Err(format!(
            "{text:?} is outside 0s..=7 days (the longest a command waits)"
        ));
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// The longest duration any flag accepts: a week.
pub const MAX_DURATION_SECS: f64 = 7.0 * 86_400.0;

/// The largest rate, ceiling or background any flag accepts, per second (far above any single
/// key, shard or partition: Kinesis takes 1,000 records/s per shard, DynamoDB 1,000 WCU/s).
pub const MAX_RATE: f64 = 1e9;

/// A finite number in `lo..=hi` (`lo` excluded when `open_low`), for clap's `value_parser`.
fn bounded(text: &str, lo: f64, hi: f64, open_low: bool) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    let low_ok = if open_low { v > lo } else { v >= lo };
    if v.is_finite() && low_ok && v <= hi {
        Ok(v)
    } else {
        let low = if open_low { "(" } else { "[" };
        Err(format!("{text} is outside {low}{lo}, {hi}]"))
    }
}

/// A rate or ceiling per second: finite, above 0, at most [`MAX_RATE`].
pub fn positive_rate(text: &str) -> Result<f64, String> {
    bounded(text, 0.0, MAX_RATE, true)
}

/// Background traffic per second: finite, 0 to [`MAX_RATE`].
pub fn non_negative_rate(text: &str) -> Result<f64, String> {
    bounded(text, 0.0, MAX_RATE, false)
}

/// A fraction of a ceiling: above 0, at most 1.
pub fn fraction(text: &str) -> Result<f64, String> {
    bounded(text, 0.0, 1.0, true)
}

/// A number of seconds of burst: 0 to one hour.
pub fn burst_seconds(text: &str) -> Result<f64, String> {
    bounded(text, 0.0, 3_600.0, false)
}

/// The demo's `--scale`: 0.01 to 1.
pub fn scale(text: &str) -> Result<f64, String> {
    bounded(text, 0.01, 1.0, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_numbers_refuse_nan_infinity_and_out_of_range() {
        assert_eq!(positive_rate("2400"), Ok(2400.0));
        for bad in ["0", "-1", "NaN", "inf", "1e10", "x"] {
            assert!(positive_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative_rate("0"), Ok(0.0));
        assert!(fraction("0").is_err() && fraction("1.5").is_err());
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(scale("0.001").is_err() && scale("1").is_ok());
        assert!(burst_seconds("-1").is_err());
    }

    #[test]
    fn durations_are_bounded_to_a_week() {
        assert!(parse_duration("7d").is_err(), "no day unit");
        assert!(parse_duration("168h").is_ok());
        assert!(parse_duration("169h").is_err());
        assert!(parse_duration("1e300").is_err());
    }
}
