//! The hostile KPL record of issue 32, shared (by `#[path]`) by the fuzz harness, the stream and
//! aggregator tests and the CLI's `tail` test: one 1,020,024-byte Kinesis record, a
//! well-formed KPL aggregate with a valid MD5, one 300 KB partition key and 120,000 empty user
//! records. A consumer that gave each user record its own copy of the key needed 36 GB.
// Each including binary uses some of these.
#![allow(dead_code)]

use md5::{Digest, Md5};

/// The KPL magic.
const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];

/// A protobuf varint.
pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `MAGIC | body | MD5(body)`.
pub fn wrap(body: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(body);
    v.extend_from_slice(&Md5::digest(body));
    v
}

/// A length-delimited protobuf field `tag` holding `payload`.
pub fn field(tag: u64, payload: &[u8], out: &mut Vec<u8>) {
    varint(tag << 3 | 2, out);
    varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// An aggregate of one `key_bytes`-byte partition key and `records` empty user records.
pub fn long_key_aggregate(key_bytes: usize, records: usize) -> Vec<u8> {
    let mut body = Vec::new();
    field(1, "k".repeat(key_bytes).as_bytes(), &mut body);
    body.extend([0x1a, 0x04, 0x08, 0x00, 0x1a, 0x00].repeat(records));
    wrap(&body)
}

/// The record of issue 32 (1,020,024 bytes).
pub fn issue_32_aggregate() -> Vec<u8> {
    long_key_aggregate(300_000, 120_000)
}
