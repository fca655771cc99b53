//! The stream consumer's metrics: one EMF document per worker round ([`super::Worker::emit_emf`]).

use super::RoundReport;
use crate::metrics::{Emf, MetricDef};

/// The emitter (the `Function` dimension's value) of a worker's round metrics. A worker is
/// not a Lambda function; its lines reach CloudWatch through a log shipper.
pub const CONSUMER: &str = "stream-consumer";

/// Shard leases one worker holds at the end of a round, a gauge: graph the Maximum per
/// worker, or the Sum over a period divided by the rounds in it.
pub const LEASES_HELD: MetricDef = MetricDef::count("LeasesHeld");

/// Leases a worker took over in a round because they had expired: their holder stopped
/// renewing without releasing (a crash, a hang, a partition). Each expiry is counted once, by
/// the worker that won the lease; graph the Sum. Releases and rebalancing steals are not expiries.
pub const LEASES_EXPIRED: MetricDef = MetricDef::count("LeasesExpired");

/// Shards of one worker whose current batch failed `max_attempts` times and is still being
/// retried (nothing is checkpointed past it), a gauge: alarm on the Maximum above 0 for a few
/// minutes ([`super::WorkerStats::stalled_shards`]).
pub const SHARDS_STALLED: MetricDef = MetricDef::count("ShardsStalled");

/// Batches handed to the dead-letter sink and skipped since the last round (opt-in skipping).
pub const BATCHES_DEAD_LETTERED: MetricDef = MetricDef::count("BatchesDeadLettered");

/// Reads since the last round that found records trimmed past retention before they were read
/// (lost records), plus lease rows of unfinished shards pruned after retention.
pub const TRIMMED_READS: MetricDef = MetricDef::count("TrimmedReads");

impl RoundReport {
    /// Adds the round's metrics to `emf`: [`LEASES_HELD`] and [`LEASES_EXPIRED`], both always (a
    /// 0 is a data point: "held none", "none expired").
    pub fn metrics(&self, emf: &mut Emf) {
        emf.count(LEASES_HELD, self.held as u64)
            .count(LEASES_EXPIRED, self.expired as u64);
    }
}
