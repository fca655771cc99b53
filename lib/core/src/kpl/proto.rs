//! The KPL's protobuf messages (proto2), declared by hand for `prost`'s derive so the build
//! needs no `protoc`. Field numbers and types are those of the KPL's `messages.proto`:
//!
//! ```text
//! message AggregatedRecord {
//!   repeated string partition_key_table     = 1;
//!   repeated string explicit_hash_key_table = 2;
//!   repeated Record records                 = 3;
//! }
//! message Tag    { required string key = 1; optional string value = 2; }
//! message Record {
//!   required uint64 partition_key_index     = 1;
//!   optional uint64 explicit_hash_key_index = 2;
//!   required bytes  data                    = 3;
//!   repeated Tag    tags                    = 4;
//! }
//! ```
//!
//! `prost` does not enforce `required`: a missing index decodes as 0 and missing data as empty,
//! where the Java protobuf runtime (and so the KCL) would refuse the message. Producers always
//! write both fields, so this only widens what is accepted.

/// The whole aggregate: two key tables and the user records that index into them.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AggregatedRecord {
    /// Distinct partition keys, in first-use order.
    #[prost(string, repeated, tag = "1")]
    pub partition_key_table: Vec<String>,
    /// Distinct explicit hash keys (decimal strings), in first-use order.
    #[prost(string, repeated, tag = "2")]
    pub explicit_hash_key_table: Vec<String>,
    /// The user records, in the order they were added.
    #[prost(message, repeated, tag = "3")]
    pub records: Vec<Record>,
}

/// A tag on a user record (the KPL writes none; kept so nothing read is lost).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub(crate) struct Tag {
    /// Tag name.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Tag value, if any.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// One user record inside the aggregate.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Record {
    /// Index into `partition_key_table`.
    #[prost(uint64, required, tag = "1")]
    pub partition_key_index: u64,
    /// Index into `explicit_hash_key_table`, when the record has an explicit hash key.
    #[prost(uint64, optional, tag = "2")]
    pub explicit_hash_key_index: Option<u64>,
    /// The user's payload.
    #[prost(bytes = "vec", required, tag = "3")]
    pub data: Vec<u8>,
    /// Tags.
    #[prost(message, repeated, tag = "4")]
    pub tags: Vec<Tag>,
}
