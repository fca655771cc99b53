//! A borrowing walk over the KPL protobuf messages: the tables and user records of an
//! aggregate as slices of its bytes, with no per-record allocation.
//!
//! It accepts exactly what `prost`'s derive for the messages in `proto.rs` accepts (the
//! differential property test in `tests.rs` checks this on arbitrary bytes), using `prost`'s
//! own varint, key, wire-type and skip routines, so every structural refusal is a
//! [`prost::DecodeError`]. Two differences, both documented on [`KplError`]:
//! - invalid UTF-8 in a string field is [`KplError::NotUtf8`] (prost would give a
//!   `DecodeError`), naming the field;
//! - unknown groups are skipped with prost's recursion limit counted from each message, not
//!   from the top (prost refuses ≥ 99 nested unknown groups inside a user record; this walk
//!   ≥ 100), which only accepts more.
//!
//! Semantics kept from prost: fields in any order, unknown fields skipped, the last value of a
//! repeated scalar field wins. Whether a `required` field was present is recorded
//! ([`RawRecord::partition_key_index`] and [`RawRecord::data`] are `Option`s); the bounds in
//! `decode.rs` enforce it.
//!
//! Three walks, so nothing is allocated before it is bounded: [`count`] reads only the
//! top-level keys and lengths (no allocation), [`walk`] reads the tables into `Vec`s of exactly
//! the counted length and hands each user record to a callback, and [`records`] walks the user
//! records again, lazily, for delivery.
//!
//! [`KplError`]: super::KplError
//! [`KplError::NotUtf8`]: super::KplError::NotUtf8

use prost::DecodeError;
use prost::encoding::{
    DecodeContext, WireType, check_wire_type, decode_key, decode_varint, merge_loop, skip_field,
};

use super::error::KplError;

/// One user record as read: indices not yet resolved against the tables. The two `required`
/// fields are `None` when absent.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawRecord<'a> {
    pub partition_key_index: Option<u64>,
    pub explicit_hash_key_index: Option<u64>,
    pub data: Option<&'a [u8]>,
    /// The record's whole message, walked again by [`tags`] when asked for.
    pub message: &'a [u8],
    pub tag_count: u32,
}

/// How many of each top-level field a body holds, read by [`count`] before anything is
/// allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub keys: usize,
    pub hash_keys: usize,
    pub records: usize,
}

/// The two key tables of one aggregate body.
#[derive(Debug, Default)]
pub(crate) struct Tables<'a> {
    pub keys: Vec<&'a str>,
    pub hash_keys: Vec<&'a str>,
}

/// The tables and user records of one aggregate body, collected (tests only: delivery walks
/// the records lazily with [`records`]).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct RawAggregate<'a> {
    pub keys: Vec<&'a str>,
    pub hash_keys: Vec<&'a str>,
    pub records: Vec<RawRecord<'a>>,
}

/// Why the walk refused a body.
pub(crate) enum WalkError {
    Proto(DecodeError),
    Utf8(&'static str, std::str::Utf8Error),
}

impl From<DecodeError> for WalkError {
    fn from(e: DecodeError) -> Self {
        Self::Proto(e)
    }
}

impl From<WalkError> for KplError {
    fn from(e: WalkError) -> Self {
        match e {
            WalkError::Proto(e) => KplError::Malformed(e),
            WalkError::Utf8(field, source) => KplError::NotUtf8 { field, source },
        }
    }
}

/// Counts the top-level fields of an `AggregatedRecord` body (the bytes between magic and
/// MD5) by their keys and lengths alone: no allocation, nothing nested is read. A body this
/// accepts may still be refused by [`walk`], which reads everything.
pub(crate) fn count(body: &[u8]) -> Result<Counts, WalkError> {
    let mut buf = body;
    let ctx = DecodeContext::default();
    let mut counts = Counts::default();
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        match tag {
            1 => counts.keys += 1,
            2 => counts.hash_keys += 1,
            3 => counts.records += 1,
            _ => {}
        }
        skip_field(wire_type, tag, &mut buf, ctx.clone())?;
    }
    Ok(counts)
}

/// Walks an `AggregatedRecord` body: the tables into `Vec`s of the lengths `counts` gives (so
/// call [`count`] first and bound its answer), each user record, in order, to `on_record`.
/// Stops at the first refusal, the walk's or the callback's.
pub(crate) fn walk<'a, E: From<WalkError>>(
    body: &'a [u8],
    counts: Counts,
    mut on_record: impl FnMut(RawRecord<'a>) -> Result<(), E>,
) -> Result<Tables<'a>, E> {
    let mut buf = body;
    let ctx = DecodeContext::default();
    let mut out = Tables {
        keys: Vec::with_capacity(counts.keys),
        hash_keys: Vec::with_capacity(counts.hash_keys),
    };
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf).map_err(WalkError::from)?;
        match tag {
            1 => out
                .keys
                .push(string("partition_key_table", wire_type, &mut buf, &ctx)?),
            2 => out.hash_keys.push(string(
                "explicit_hash_key_table",
                wire_type,
                &mut buf,
                &ctx,
            )?),
            3 => on_record(record(wire_type, &mut buf, &ctx)?)?,
            _ => skip_field(wire_type, tag, &mut buf, ctx.clone()).map_err(WalkError::from)?,
        }
    }
    Ok(out)
}

/// The user records of a body [`walk`] accepted, in order, read lazily (nothing allocated).
/// On a body `walk` refused it stops at the refusal.
pub(crate) fn records(body: &[u8]) -> impl Iterator<Item = RawRecord<'_>> + '_ {
    let mut buf = body;
    let ctx = DecodeContext::default();
    std::iter::from_fn(move || {
        while !buf.is_empty() {
            let (tag, wire_type) = decode_key(&mut buf).ok()?;
            if tag == 3 {
                return record(wire_type, &mut buf, &ctx).ok();
            }
            skip_field(wire_type, tag, &mut buf, ctx.clone()).ok()?;
        }
        None
    })
}

/// Walks a whole body into one value (tests: the differential check against prost).
#[cfg(test)]
pub(crate) fn parse(body: &[u8]) -> Result<RawAggregate<'_>, WalkError> {
    let counts = count(body)?;
    let mut records = Vec::with_capacity(counts.records);
    let tables = walk(body, counts, |r| {
        records.push(r);
        Ok::<(), WalkError>(())
    })?;
    Ok(RawAggregate {
        keys: tables.keys,
        hash_keys: tables.hash_keys,
        records,
    })
}

/// The payload of a length-delimited field, borrowed; prost's own underflow check.
fn delimited<'a>(
    wire_type: WireType,
    buf: &mut &'a [u8],
    ctx: &DecodeContext,
) -> Result<&'a [u8], DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let start = *buf;
    skip_field(WireType::LengthDelimited, 1, buf, ctx.clone())?;
    let mut field = &start[..start.len() - buf.len()];
    decode_varint(&mut field)?; // the length prefix, already read once by skip_field
    Ok(field)
}

fn string<'a>(
    name: &'static str,
    wire_type: WireType,
    buf: &mut &'a [u8],
    ctx: &DecodeContext,
) -> Result<&'a str, WalkError> {
    let bytes = delimited(wire_type, buf, ctx)?;
    std::str::from_utf8(bytes).map_err(|e| WalkError::Utf8(name, e))
}

fn record<'a>(
    wire_type: WireType,
    buf: &mut &'a [u8],
    ctx: &DecodeContext,
) -> Result<RawRecord<'a>, WalkError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let start = *buf;
    let mut r = RawRecord::default();
    let mut bad_utf8 = None;
    merge_loop(&mut r, buf, ctx.clone(), |r, buf, ctx| {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            1 => {
                check_wire_type(WireType::Varint, wire_type)?;
                r.partition_key_index = Some(decode_varint(buf)?);
            }
            2 => {
                check_wire_type(WireType::Varint, wire_type)?;
                r.explicit_hash_key_index = Some(decode_varint(buf)?);
            }
            3 => r.data = Some(delimited(wire_type, buf, &ctx)?),
            4 => {
                match tag_message(wire_type, buf, &ctx) {
                    Ok(_) => {}
                    Err(WalkError::Proto(e)) => return Err(e),
                    Err(utf8) => {
                        bad_utf8.get_or_insert(utf8);
                    }
                }
                r.tag_count = r.tag_count.saturating_add(1);
            }
            _ => skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    })?;
    // A structural error anywhere in the record wins over bad UTF-8, as in prost (which
    // would stop at the first of either; both refuse the record).
    if let Some(e) = bad_utf8 {
        return Err(e);
    }
    let mut message = &start[..start.len() - buf.len()];
    decode_varint(&mut message)?;
    r.message = message;
    Ok(r)
}

/// A tag: `(key, value)`.
type TagFields<'a> = (&'a str, Option<&'a str>);

fn tag_message<'a>(
    wire_type: WireType,
    buf: &mut &'a [u8],
    ctx: &DecodeContext,
) -> Result<TagFields<'a>, WalkError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let mut t: TagFields<'a> = ("", None);
    let mut bad_utf8 = None;
    merge_loop(&mut t, buf, ctx.clone(), |t, buf, ctx| {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            1 | 2 => {
                let bytes = delimited(wire_type, buf, &ctx)?;
                match std::str::from_utf8(bytes) {
                    Ok(s) if tag == 1 => t.0 = s,
                    Ok(s) => t.1 = Some(s),
                    Err(e) => {
                        bad_utf8.get_or_insert(WalkError::Utf8("tags", e));
                    }
                }
            }
            _ => skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    })?;
    match bad_utf8 {
        Some(e) => Err(e),
        None => Ok(t),
    }
}

/// The tags of a record whose message [`parse`] accepted, in order.
pub(crate) fn tags<'a>(message: &'a [u8]) -> impl Iterator<Item = TagFields<'a>> + 'a {
    let mut buf = message;
    let ctx = DecodeContext::default();
    std::iter::from_fn(move || {
        while !buf.is_empty() {
            let (tag, wire_type) = decode_key(&mut buf).ok()?;
            if tag == 4 {
                return tag_message(wire_type, &mut buf, &ctx).ok();
            }
            skip_field(wire_type, tag, &mut buf, ctx.clone()).ok()?;
        }
        None
    })
}
