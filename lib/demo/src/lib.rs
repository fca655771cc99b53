//! The heatsink demos as a library: the scenes `heatsink-demo` runs, reusable by the
//! integration tests (which run the move scene end to end).
//!
//! - [`likes`]: the celebrity post p9 under three write strategies (naive, salted,
//!   pre-aggregated from the stream) through the partition simulator, with chaos.
//! - [`moves`]: p9's slot moved live to a table of its own while writers write.
//! - [`detect`]: a key turns hot and is salted from DynamoDB's throttle reasons alone (sampler
//!   off), then from the sampler: onset to salting per signal.

mod chart;
pub mod detect;
pub mod likes;
pub mod moves;
