//! Kafka record batches (message format v2) of one Fetch response, decoded straight into the
//! Arrow columns: no allocation per record, one copy of each key and value.
//!
//! The decoding can stop when the Arrow batch is full and go on later from the same record.
//! Under `read_committed` it drops aborted transactions' batches as Kafka's Java consumer does
//! (the response's aborted-transaction list, then each producer's ABORT marker) and always
//! skips control batches. Records before the range's position (a fetch returns whole batches)
//! and from `end` on are left out.

use std::collections::HashSet;

use super::compression::inflate;
use super::errors::DecodeError;
use super::wire::{Reader, Short};
use crate::batch::{BatchBuilder, Record};

/// Bytes before a batch's records: baseOffset .. recordCount.
const BATCH_HEADER: usize = 61;
const MAGIC_V2: i8 = 2;
const ATTR_COMPRESSION: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
/// librdkafka's timestamp types, which `BatchBuilder` maps to Spark's.
const TS_CREATE_TIME: i32 = 1;
const TS_LOG_APPEND_TIME: i32 = 2;

/// The offset after the last complete batch in `records` (a response may end in a partial
/// batch), or None when none is complete. Reads headers only, so the next fetch can be sent
/// before this one is decoded.
pub fn next_fetch_offset(records: &[u8]) -> Option<i64> {
    let mut pos = 0;
    let mut next = None;
    while records.len() - pos >= BATCH_HEADER {
        let h = &records[pos..];
        let base = i64::from_be_bytes(h[0..8].try_into().ok()?);
        let length = i32::from_be_bytes(h[8..12].try_into().ok()?);
        if length < 0 || records.len() - pos - 12 < length as usize {
            break;
        }
        let last_delta = i32::from_be_bytes(h[23..27].try_into().ok()?);
        next = Some(base + i64::from(last_delta) + 1);
        pos += 12 + length as usize;
    }
    next
}

/// Where the decoding of a batch stands: which records are left, and what all share.
struct Current {
    base_offset: i64,
    base_timestamp: i64,
    max_timestamp: i64,
    log_append_time: bool,
    /// the records, in `ResponseRecords::buf` or (compressed batches) in `inflated`
    compressed: bool,
    at: usize,
    end: usize,
    left: usize,
}

/// One partition's records of a Fetch response, being decoded.
pub struct ResponseRecords {
    buf: Vec<u8>,
    /// the partition's record bytes inside `buf`
    pos: usize,
    limit: usize,
    current: Option<Current>,
    inflated: Vec<u8>,
    read_committed: bool,
    /// (first offset, producer id) of aborted transactions, ascending; `aborted_next` is the
    /// first not yet reached
    aborted: Vec<(i64, i64)>,
    aborted_next: usize,
    aborting: HashSet<i64>,
    /// the partition leader epoch of the last batch reached (KIP-320: the epoch a position
    /// is validated against after a leader change), -1 before any
    pub last_epoch: i32,
    /// the leader epoch the plan's end came with (-1: unknown): a batch of a later leader
    /// below the end was written after the plan, where an unclean election truncated the
    /// log, and the range ends before it (semantics rule 16)
    pub end_epoch: i32,
    /// where the range was cut that way, and the later leader's epoch
    pub cut: Option<(i64, i32)>,
}

/// What `fill` stopped at.
#[derive(Debug, PartialEq, Eq)]
pub enum Filled {
    /// every complete batch of the response is decoded
    Exhausted,
    /// the Arrow batch holds `max_records`
    Full,
    /// the range's end is reached
    End,
}

impl ResponseRecords {
    pub fn new(read_committed: bool) -> Self {
        ResponseRecords {
            buf: Vec::new(),
            pos: 0,
            limit: 0,
            current: None,
            inflated: Vec::new(),
            read_committed,
            aborted: Vec::new(),
            aborted_next: 0,
            aborting: HashSet::new(),
            last_epoch: -1,
            end_epoch: -1,
            cut: None,
        }
    }

    /// Takes a response buffer, whose `records` range is this partition's record set.
    pub fn reset(
        &mut self,
        buf: Vec<u8>,
        records: std::ops::Range<usize>,
        aborted: Vec<(i64, i64)>,
    ) {
        self.buf = buf;
        self.pos = records.start;
        self.limit = records.end;
        self.current = None;
        self.aborted = aborted;
        self.aborted.sort_unstable();
        self.aborted_next = 0;
        self.aborting.clear();
    }

    /// Whether a response is being decoded (between `reset` and `take_buffer`).
    pub fn holds_response(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Hands the buffer back for the next response.
    pub fn take_buffer(&mut self) -> Vec<u8> {
        self.pos = 0;
        self.limit = 0;
        self.current = None;
        std::mem::take(&mut self.buf)
    }

    /// Decodes records into `out` until it holds `max_records`, the range ends at `end`, or
    /// the response is used up. `position` (the next offset to read) advances past every
    /// record and batch consumed, kept or not; `end` moves back to a later leader's first
    /// batch below it (`end_epoch`).
    pub fn fill(
        &mut self,
        out: &mut BatchBuilder,
        position: &mut i64,
        end: &mut i64,
        max_records: usize,
    ) -> Result<Filled, DecodeError> {
        loop {
            if *position >= *end {
                return Ok(Filled::End);
            }
            if self.current.is_none() && out.len() >= max_records {
                return Ok(Filled::Full); // full between record batches: no wait for the next
            }
            if self.current.is_none() && !self.open_batch(position, end)? {
                return Ok(Filled::Exhausted);
            }
            let Some(cur) = self.current.as_mut() else {
                continue; // a batch skipped whole
            };
            let data = if cur.compressed {
                &self.inflated[..cur.end]
            } else {
                &self.buf[..cur.end]
            };
            let mut r = Reader::new(data);
            r.take(cur.at, "record")?;
            while cur.left > 0 {
                if out.len() >= max_records {
                    cur.at = data.len() - r.remaining();
                    return Ok(Filled::Full);
                }
                let length = r.varint("record length")?;
                let body = r.take(length.max(0) as usize, "record")?;
                cur.left -= 1;
                if add_record(out, cur, body, position, *end)? {
                    cur.left = 0;
                    break;
                }
            }
            self.current = None;
        }
    }

    /// Reads the next complete batch's header: sets `current`, or skips the batch (advancing
    /// `position` past it), or ends the range before it (a later leader's). False when no
    /// complete batch is left.
    fn open_batch(&mut self, position: &mut i64, end: &mut i64) -> Result<bool, DecodeError> {
        if self.limit - self.pos < BATCH_HEADER {
            return Ok(false);
        }
        let mut h = Reader::new(&self.buf[self.pos..self.limit]);
        let base_offset = h.i64("base offset")?;
        let length = h.i32("batch length")?;
        if length < 0 || h.remaining() < length as usize {
            return Ok(false); // a partial batch at the end of the response
        }
        let batch_end = self.pos + 12 + length as usize;
        let epoch = h.i32("leader epoch")?;
        let magic = h.i8("magic")?;
        if magic != MAGIC_V2 {
            return Err(DecodeError::OldFormat(magic));
        }
        h.i32("crc")?; // TCP and the broker's own check cover it; librdkafka skips it too
        let attributes = h.i16("attributes")?;
        let last_offset = base_offset + i64::from(h.i32("last offset delta")?);
        let base_timestamp = h.i64("base timestamp")?;
        let max_timestamp = h.i64("max timestamp")?;
        let producer_id = h.i64("producer id")?;
        h.i16("producer epoch")?;
        h.i32("base sequence")?;
        let count = h.i32("record count")?.max(0) as usize;
        let records_at = self.pos + BATCH_HEADER;
        if self.ends_before(epoch, base_offset, *position, end) {
            return Ok(true); // `fill` ends at the new end, the batch left unread
        }
        self.pos = batch_end;
        self.last_epoch = epoch;
        let control = attributes & ATTR_CONTROL != 0;
        let skip = last_offset < *position
            || (self.read_committed && producer_id >= 0)
                && self.is_aborted(producer_id, attributes, last_offset, records_at..batch_end);
        if skip || control || count == 0 {
            *position = (*position).max(last_offset + 1);
            return Ok(true);
        }
        let compression = attributes & ATTR_COMPRESSION;
        let payload = &self.buf[records_at..batch_end];
        let (compressed, records_end) = if compression == 0 {
            (false, batch_end)
        } else {
            self.inflated.clear();
            inflate(compression, payload, &mut self.inflated)?;
            (true, self.inflated.len())
        };
        self.current = Some(Current {
            base_offset,
            base_timestamp,
            max_timestamp,
            log_append_time: attributes & ATTR_LOG_APPEND_TIME != 0,
            compressed,
            at: if compressed { 0 } else { records_at },
            end: records_end,
            left: count,
        });
        Ok(true)
    }

    /// Whether a batch of `epoch` from `base_offset` below the range's end was written after
    /// the plan (`end_epoch`); if so the range ends before it: `end` moves back, `cut` says
    /// where.
    fn ends_before(&mut self, epoch: i32, base_offset: i64, position: i64, end: &mut i64) -> bool {
        if self.end_epoch < 0 || epoch <= self.end_epoch || base_offset >= *end {
            return false;
        }
        *end = base_offset.max(position);
        self.cut = Some((*end, epoch));
        true
    }

    /// Under read_committed, whether a transactional batch belongs to an aborted
    /// transaction: the response lists where each one began, its ABORT marker ends it.
    fn is_aborted(
        &mut self,
        producer_id: i64,
        attributes: i16,
        last_offset: i64,
        records: std::ops::Range<usize>,
    ) -> bool {
        while let Some(&(first, producer)) = self.aborted.get(self.aborted_next) {
            if first > last_offset {
                break;
            }
            self.aborting.insert(producer);
            self.aborted_next += 1;
        }
        if attributes & ATTR_CONTROL != 0 {
            if is_abort_marker(&self.buf[records]) {
                self.aborting.remove(&producer_id);
            }
            return false;
        }
        attributes & ATTR_TRANSACTIONAL != 0 && self.aborting.contains(&producer_id)
    }
}

/// One record of the current batch into `out`, or none (before the fetch offset, in the same
/// batch); true once the range's end is reached. `position` moves past the record kept.
#[inline]
fn add_record(
    out: &mut BatchBuilder,
    cur: &Current,
    body: &[u8],
    position: &mut i64,
    end: i64,
) -> Result<bool, DecodeError> {
    let mut rec = Reader::new(body);
    rec.i8("record attributes")?;
    let timestamp_delta = rec.varint("timestamp delta")?;
    let offset = cur.base_offset + rec.varint("offset delta")?;
    if offset < *position {
        return Ok(false);
    }
    if offset >= end {
        *position = end;
        return Ok(true);
    }
    let key = rec.varint_bytes("key")?;
    let value = rec.varint_bytes("value")?;
    let (timestamp_type, timestamp_ms) = if cur.log_append_time {
        (TS_LOG_APPEND_TIME, cur.max_timestamp)
    } else {
        (TS_CREATE_TIME, cur.base_timestamp + timestamp_delta)
    };
    out.add(&Record {
        offset,
        key,
        value,
        timestamp_type,
        timestamp_ms,
    });
    if out.include_headers() {
        let n = rec.varint("header count")?;
        for _ in 0..n.max(0) {
            let name = rec.varint_bytes("header key")?.unwrap_or_default();
            let value = rec.varint_bytes("header value")?;
            out.add_header(&String::from_utf8_lossy(name), value);
        }
    }
    *position = offset + 1;
    Ok(false)
}

/// A control batch's first record's key is (version int16, type int16): type 0 is ABORT.
fn is_abort_marker(records: &[u8]) -> bool {
    let parse = || -> Result<bool, Short> {
        let mut r = Reader::new(records);
        r.varint("record length")?;
        r.i8("attributes")?;
        r.varint("timestamp delta")?;
        r.varint("offset delta")?;
        let key = r.varint_bytes("control key")?.unwrap_or_default();
        let mut k = Reader::new(key);
        k.i16("control version")?;
        Ok(k.i16("control type")? == 0)
    };
    parse().unwrap_or(false)
}

#[cfg(test)]
#[path = "records_tests.rs"]
pub mod tests;
