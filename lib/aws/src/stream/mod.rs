//! Lineage-ordered stream consumption: a Rust KCL over Kinesis and DynamoDB Streams.
//!
//! A stream is a set of shards, and resharding never moves old records: after SplitShard,
//! MergeShards or UpdateShardCount the parents close and keep what they hold, and a key's new
//! records go to a child. A reader that starts the child before finishing every parent sees that
//! key's newer records before its older ones. The pure rules — the shard graph, which shard is
//! [`eligible`], the lease state machine and the even
//! [`assign`]ment — live in [`heatsink_core::stream`], whose module
//! doc draws the lease diagram (DISCOVERED → LEASED → PROCESSING → SHARD_END → CHILDREN_CREATED
//! → DELETED). This module is the I/O around them:
//!
//! - [`ShardSource`] (`source.rs`): list shards, get an iterator, get records, with typed errors;
//!   implemented by [`KinesisSource`] (`kinesis.rs`), [`FanOutSource`] (`fanout.rs`: enhanced
//!   fan-out, SubscribeToShard) and [`DynamoDbStreamsSource`] (`dynamodb.rs`).
//! - [`LeaseTable`] (`lease_table.rs`): the schema's `leases` table (`app` / `shard_id`); every
//!   change is computed with [`Lease::apply`](heatsink_core::stream::Lease::apply) and written
//!   conditionally on the stored counter (and owner). Each running worker also keeps an
//!   announcement row there ([`LeaseTable::announce`], sort key [`WORKER_ROW_PREFIX`]…), so
//!   peers that hold nothing yet count towards the fair share.
//! - [`Fence`] (`fence.rs`): makes a record processor's own DynamoDB writes conditional on its
//!   lease counter, so a worker that lost its lease cannot overwrite a newer holder's work.
//! - [`Worker`] (`worker.rs`, over the `worker/` folder): the consumer loop — shard sync, lease taking and rebalancing,
//!   GetRecords polling, the [`RecordProcessor`], checkpoints, graceful shutdown; per round,
//!   optionally, the lease metrics as EMF ([`Worker::emit_emf`]). Each lease round is decided
//!   by the pure [`plan_round`] from one read of the lease
//!   table; the worker only executes the [`RoundPlan`]'s
//!   writes.
//!
//! ```no_run
//! use heatsink::stream::{KinesisSource, LeaseTable, ProcessBatch, RecordProcessor, StreamError,
//!     Worker, WorkerConfig};
//!
//! struct Print;
//! impl RecordProcessor for Print {
//!     async fn process(&self, batch: &ProcessBatch) -> Result<(), StreamError> {
//!         for r in &batch.records {
//!             println!("{} {} {}", batch.shard_id, r.seq, r.partition_key);
//!         }
//!         Ok(()) // checkpoint after the last record
//!     }
//! }
//!
//! # async fn run(config: aws_config::SdkConfig) -> Result<(), StreamError> {
//! let source = KinesisSource::new(aws_sdk_kinesis::Client::new(&config), "like-events");
//! let leases = LeaseTable::new(aws_sdk_dynamodb::Client::new(&config), "heatsink-leases", "app");
//! let worker = Worker::new(source, leases, Print, WorkerConfig::new("worker-1"));
//! worker.run(async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! Guarantees and limits:
//! 1. At-least-once: a record is checkpointed only after the processor returned `Ok` for it,
//!    and checkpoints only move forward (a release writes none). After a crash, steal or expiry
//!    the next holder restarts after the last durable checkpoint, so at most
//!    [`WorkerConfig::checkpoint_every_records`] + the `GetRecords` limit records per shard are
//!    delivered again: 20,000 on Kinesis, 11,000 on DynamoDB Streams with the defaults.
//! 2. Per-key order across reshards: a shard is read only when every parent (parent *and*
//!    adjacent parent) is at SHARD_END, in sequence order within the shard; children always start
//!    at TRIM_HORIZON.
//! 3. Fencing: each change of holder bumps the lease counter; a taken lease's counter is also
//!    lifted above its finished parents' counters, and a created row starts at the creation time
//!    in ms, so tokens increase along a key's lineage and survive a row deleted by hand.
//! 4. A failing batch is never skipped by default: it is retried with capped back-off
//!    (200 ms doubling to 5 s) until it succeeds or the lease is lost; after
//!    [`WorkerConfig::max_attempts`] (3) the shard is reported stalled while the other shards
//!    go on. Skipping is opt-in through a [`DeadLetter`] sink, which gets the batch before the
//!    checkpoint moves.
//! 5. Takeover after a crash within one lease duration plus one main-loop round (10 s + 3 s
//!    with the defaults); a worker that cannot reach its lease table stops processing at 0.9 ×
//!    the lease after its last renewal, before anyone else may take the lease. Clock skew
//!    between workers must stay well below a tenth of the lease duration (expiry is judged by
//!    the taker).
//! 6. Start-up balance: a worker announces itself, waits [`WorkerConfig::startup_wait`]
//!    (200 ms) and then reads the leases; with W workers announced and L leases none holds more
//!    than ceil(L / W) after its first round and the takes add up to an even split (4 shards
//!    over 3 workers: 2 + 1 + 1), so workers started together need no steal and redeliver
//!    nothing. An announcement counts for one lease duration after its last refresh. The
//!    planned shards' first reads start inside the wait, once the lease rows exist
//!    ([`WorkerConfig::early_read`]); an early answer reaches the processor only if the first
//!    round takes its lease at the checkpoint it read from.
//! 7. Memory: a shard holds at most [`WorkerConfig::prefetch_bytes`] (16 MiB) of fetched,
//!    unprocessed records, plus the `GetRecords` answer being read (at most 10 MiB on
//!    Kinesis), plus one processor batch of user records (at most `max_records`, 10,000, at
//!    128 bytes each: 1.2 MiB), plus the key tables of the one KPL aggregate being deaggregated
//!    (16 to 49 bytes per entry: 0.3 × its size for the KPL's aggregates, 10 × at worst),
//!    whatever the records' size and however they are aggregated. Aggregates are deaggregated
//!    by the worker a batch at a time, each batch counted before it is built; the user records
//!    of one aggregate share its bytes and one copy of each key. So at most 38 MiB per shard,
//!    and 28 MiB for aggregates the KPL makes. An aggregate that does not decode within the
//!    bounds of [`heatsink_core::kpl::Deaggregator::open`] (a key over 256 characters, say) is
//!    delivered whole with its reason ([`StreamRecord::undecodable`]), counted, and the shard
//!    moves on.

mod dead_letter;
mod dynamodb;
mod error;
mod fanout;
mod fence;
mod kinesis;
mod lease_table;
pub mod metrics;
mod source;
mod worker;

pub use dead_letter::{DeadLetter, DeadLetterFuture, SqsDeadLetter};
pub use dynamodb::DynamoDbStreamsSource;
pub use error::StreamError;
pub use fanout::FanOutSource;
pub use fence::Fence;
pub use heatsink_core::stream::*;
pub use kinesis::KinesisSource;
pub use lease_table::{LeaseScan, LeaseTable, MalformedLease, WORKER_ROW_PREFIX};
pub use source::{RecordBatch, ShardSource, StartAt, StreamRecord, Timeouts};
pub use worker::{
    DEAD_WORKER_LEASES, DEFAULT_PAGE_RECORDS, GET_RECORDS_PER_SECOND, MIN_GET_RECORDS_INTERVAL,
    ProcessBatch, RecordProcessor, RoundReport, Worker, WorkerConfig, WorkerStats,
};
