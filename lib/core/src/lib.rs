//! heatsink-core: the pure core of heatsink.
//!
//! Every decision heatsink makes (which sub-key a write goes to, which shard is eligible, what a
//! flush writes) lives here as a pure function over plain data, so it can be tested exhaustively
//! and property-tested. Nothing in this crate performs I/O or names an AWS type; the `heatsink`
//! crate wraps these decisions in thin async adapters for DynamoDB, Kinesis and CloudWatch.

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
