//! heatsink-core: the pure core of heatsink.
//!
//! Every decision heatsink makes (which sub-key a write goes to, which shard is eligible, what a
//! flush writes) lives here as a pure function over plain data, so it can be tested exhaustively
//! and property-tested. Nothing in this crate performs I/O or names an AWS type; the `heatsink`
//! crate wraps these decisions in thin async adapters for DynamoDB, Kinesis and CloudWatch.
//!
//! | module | decides | adapter in `heatsink` |
//! |---|---|---|
//! | [`keys`] | sub-keys of a hot key, where writes and reads go, GSI shards, Kinesis placement, the S planner | `heatsink::keys` |
//! | [`merge`] | merged pagination across N shards behind one opaque token | `heatsink::scatter` |
//! | [`counter`] | absolute per-writer flushes, dedupe of stream duplicates, repair passes, the mapping's model | `heatsink::counter` |
//! | [`detect`] | the 1-in-N sampler, Space-Saving top-K per partition, reports | `heatsink::detect` |
//! | [`throttle`] | DynamoDB's throttling reasons: hot key (spread it) or short capacity (never salt), and key-range throttles as signals | `heatsink::detect::throttle` |
//! | [`hot`] | the hot-key directory's entries and the controller's decisions, with hysteresis | `heatsink::hot` |
//! | [`guard`] | admission: token buckets per key and per tenant | `heatsink::hot::guard` |
//! | [`stream`] | lineage eligibility, leases, assignment, read pacing and page sizes | `heatsink::stream` |
//! | [`kpl`] | the KPL aggregated-record format, both ways, bounded | `heatsink::kinesis::kpl` |
//! | [`reshard`] | where to split a hot Kinesis shard, when to merge cold ones | `heatsink::kinesis::reshard` |
//! | [`slots`] | slots, the slot directory's ranges, move phases and load-driven move plans | `heatsink::slots` |
//! | [`warm`] | the warm throughput a predicted spike needs, and the on-demand maximum that would throttle it anyway | `heatsink::schema::warm` |
//! | [`autopilot`] | which proposed split, merge or move runs this period: kill switch, one in flight, sustained load, cooldowns, budgets, dry run | (the executor is to come) |
//! | [`backoff`] | the one backoff rule: capped doubling, jittered within a deadline (the mover) or as successive pauses (the consumer) | `heatsink::slots`, `heatsink::stream` |

pub mod autopilot;
pub mod backoff;
pub mod counter;
pub mod detect;
pub mod guard;
pub mod hot;
pub mod keys;
pub mod kpl;
pub mod merge;
pub mod reshard;
pub mod slots;
pub mod stream;
pub mod throttle;
pub mod warm;
