//! One module per subcommand.

pub mod demo;
pub mod hot;
pub mod keys;
pub mod lineage;
pub mod local;
pub mod plan;
pub mod rebuild;
pub mod schema;
pub mod sim;
pub mod tail;
pub mod top;

/// Any command's failure, shown to the operator as one line.
pub type CmdResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Loads the AWS configuration from the environment (region, `AWS_ENDPOINT_URL_*`, credentials).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
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
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}
