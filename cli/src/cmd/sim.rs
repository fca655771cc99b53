//! `heatsink sim`: run the partition simulator in front of a DynamoDB endpoint.

use std::net::SocketAddr;

use clap::Args;
use heatsink::sim::{Limits, SimConfig, Simulator};

use super::CmdResult;

/// Arguments of `heatsink sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// The DynamoDB endpoint to forward to.
    #[arg(long, env = "AWS_ENDPOINT_URL_DYNAMODB")]
    upstream: String,
    /// Where to listen (loopback only; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8100")]
    listen: SocketAddr,
    /// Partitions per table and per index.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Write ceiling per partition, WCU/s.
    #[arg(long, default_value_t = 1000.0)]
    write_ceiling: f64,
    /// Read ceiling per partition, RCU/s.
    #[arg(long, default_value_t = 3000.0)]
    read_ceiling: f64,
    /// Burst a partition may bank while idle, in seconds of its ceiling.
    #[arg(long, default_value_t = 1.0)]
    burst_seconds: f64,
    /// The hot-key sampler at /_sim/hot records 1 item request in N.
    #[arg(long, default_value_t = 10)]
    sample_one_in: u32,
}

/// Serves until Ctrl-C, then prints the final statistics.
pub async fn run(args: SimArgs) -> CmdResult {
    if !args.listen.ip().is_loopback() {
        return Err(format!("--listen {} is not a loopback address", args.listen).into());
    }
    if args.partitions == 0 {
        return Err("--partitions must be at least 1".into());
    }
    let mut config = SimConfig {
        upstream: args.upstream.clone(),
        listen: args.listen,
        limits: Limits {
            partitions: args.partitions,
            write_ceiling: args.write_ceiling,
            read_ceiling: args.read_ceiling,
            burst_seconds: args.burst_seconds,
        },
        ..SimConfig::new(&args.upstream)
    };
    config.sampler.sample_one_in = args.sample_one_in;
    let sim = Simulator::start(config).await?;
    eprintln!(
        "heatsink sim: {} -> {} ({} partitions/table, {} WCU/s and {} RCU/s each); stats at {0}/_sim/stats, hot keys at {0}/_sim/hot; Ctrl-C stops",
        sim.endpoint(),
        args.upstream,
        args.partitions,
        args.write_ceiling,
        args.read_ceiling,
    );
    tokio::signal::ctrl_c().await?;
    let stats = sim.stats();
    eprintln!(
        "heatsink sim: {} requests, {} throttled",
        stats.requests,
        stats.throttled()
    );
    sim.stop();
    Ok(())
}
