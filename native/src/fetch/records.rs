//! Kafka record batches (message format v2) of one Fetch response, decoded straight into the
//! Arrow columns: no allocation per record, one copy of each key and value.
//!
//! The decoding can stop when the Arrow batch is full and go on later from the same record.
//! Under `read_committed` it drops aborted transactions' batches as Kafka's Java consumer does
//! (the response's aborted-transaction list, then each producer's ABORT marker) and always
//! skips control batches. Records before the range's position (a fetch returns whole batches)
//! and from `end` on are left out.

use std::collections::HashSet;
use std::io::Read;

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
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

#[derive(Debug)]
pub enum DecodeError {
    Short(Short),
    /// A magic byte other than 2: a log written in message format v0/v1.
    OldFormat(i8),
    Codec(String),
}

impl From<Short> for DecodeError {
    fn from(s: Short) -> Self {
        DecodeError::Short(s)
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short(s) => s.fmt(f),
            DecodeError::OldFormat(m) => write!(
                f,
                "record batch in message format v{m}: the fetch engine decodes only v2 (Kafka 0.11+); read this topic with the option nativeEngine=librdkafka"
            ),
            DecodeError::Codec(e) => write!(f, "cannot decompress a record batch: {e}"),
        }
    }
}

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
    /// record and batch consumed, kept or not.
    pub fn fill(
        &mut self,
        out: &mut BatchBuilder,
        position: &mut i64,
        end: i64,
        max_records: usize,
    ) -> Result<Filled, DecodeError> {
        loop {
            if *position >= end {
                return Ok(Filled::End);
            }
            if self.current.is_none() && out.len() >= max_records {
                return Ok(Filled::Full); // full between record batches: no wait for the next
            }
            if self.current.is_none() && !self.open_batch(position)? {
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
                if add_record(out, cur, body, position, end)? {
                    cur.left = 0;
                    break;
                }
            }
            self.current = None;
        }
    }

    /// Reads the next complete batch's header: sets `current`, or skips the batch (advancing
    /// `position` past it). False when no complete batch is left.
    fn open_batch(&mut self, position: &mut i64) -> Result<bool, DecodeError> {
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
        self.pos = batch_end;
        self.last_epoch = epoch;

        let control = attributes & ATTR_CONTROL != 0;
        let mut skip = last_offset < *position;
        if self.read_committed && producer_id >= 0 && !skip {
            skip = self.is_aborted(producer_id, attributes, last_offset, records_at..batch_end);
        }
        if skip || control || count == 0 {
            *position = (*position).max(last_offset + 1);
            return Ok(true);
        }
        let compression = attributes & ATTR_COMPRESSION;
        let payload = &self.buf[records_at..batch_end];
        let (compressed, end) = if compression == 0 {
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
            end,
            left: count,
        });
        Ok(true)
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

fn inflate(codec: i16, data: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let err = |e: std::io::Error| DecodeError::Codec(e.to_string());
    match codec {
        1 => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(out)
                .map_err(err)?;
        }
        2 => snappy(data, out)?,
        3 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .read_to_end(out)
                .map_err(err)?;
        }
        4 => {
            zstd::stream::read::Decoder::new(data)
                .map_err(err)?
                .read_to_end(out)
                .map_err(err)?;
        }
        other => {
            return Err(DecodeError::Codec(format!(
                "unknown compression codec {other}"
            )))
        }
    }
    Ok(())
}

/// Snappy as Kafka's clients write it: Java's xerial framing (a header, then length-prefixed
/// blocks) or one raw block.
fn snappy(data: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let err = |e: snap::Error| DecodeError::Codec(e.to_string());
    let mut decoder = snap::raw::Decoder::new();
    if !data.starts_with(XERIAL_MAGIC) {
        out.extend_from_slice(&decoder.decompress_vec(data).map_err(err)?);
        return Ok(());
    }
    let mut r = Reader::new(&data[16..]);
    while r.remaining() > 0 {
        let block = r.nullable_bytes("snappy block")?.unwrap_or_default();
        out.extend_from_slice(&decoder.decompress_vec(block).map_err(err)?);
    }
    Ok(())
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::fetch::wire::Writer;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    fn zigzag(w: &mut Vec<u8>, v: i64) {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                w.push(b);
                return;
            }
            w.push(b | 0x80);
        }
    }

    fn field(w: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            None => zigzag(w, -1),
            Some(b) => {
                zigzag(w, b.len() as i64);
                w.extend_from_slice(b);
            }
        }
    }

    pub struct Spec<'a> {
        pub base: i64,
        pub deltas: &'a [i64],
        pub attributes: i16,
        pub producer: i64,
        pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    }

    /// A v2 batch as a broker stores it (crc left 0: not checked).
    pub fn batch(s: &Spec) -> Vec<u8> {
        let mut records = Vec::new();
        for &d in s.deltas {
            let mut r = vec![0u8];
            zigzag(&mut r, d * 10); // timestamp delta
            zigzag(&mut r, d);
            if s.attributes & ATTR_CONTROL != 0 {
                let mut k = Writer::default();
                k.i16(0).i16(if s.producer < 0 { 1 } else { 0 });
                field(&mut r, Some(&k.0));
                field(&mut r, None);
            } else {
                let key = format!("k{}", s.base + d);
                field(
                    &mut r,
                    if d % 2 == 0 {
                        None
                    } else {
                        Some(key.as_bytes())
                    },
                );
                field(&mut r, Some(format!("v{}", s.base + d).as_bytes()));
            }
            zigzag(&mut r, s.headers.len() as i64);
            for (k, v) in s.headers {
                field(&mut r, Some(k.as_bytes()));
                field(&mut r, *v);
            }
            zigzag(&mut records, r.len() as i64);
            records.extend_from_slice(&r);
        }
        let mut w = Writer::default();
        let last = *s.deltas.last().unwrap_or(&0) as i32;
        w.i64(s.base)
            .i32((BATCH_HEADER - 12 + records.len()) as i32)
            .i32(0)
            .i8(2)
            .i32(0);
        w.i16(s.attributes).i32(last).i64(1_000).i64(2_000);
        w.i64(s.producer.abs())
            .i16(0)
            .i32(0)
            .i32(s.deltas.len() as i32);
        w.0.extend_from_slice(&records);
        w.0
    }

    fn offsets(b: &mut BatchBuilder) -> Vec<i64> {
        let a = b.finish();
        a.column(4).as_primitive::<Int64Type>().values().to_vec()
    }

    #[test]
    fn a_range_is_cut_at_its_ends_and_resumes_where_the_arrow_batch_filled() {
        let mut buf = batch(&Spec {
            base: 0,
            deltas: &[0, 1, 2, 3],
            attributes: 0,
            producer: -1,
            headers: &[],
        });
        buf.extend(batch(&Spec {
            base: 4,
            deltas: &[0, 2],
            attributes: 0,
            producer: -1,
            headers: &[],
        }));
        let whole = buf.len();
        buf.extend_from_within(..30); // a partial batch at the end
        assert_eq!(next_fetch_offset(&buf), Some(7));
        let mut rr = ResponseRecords::new(false);
        rr.reset(buf, 0..whole + 30, vec![]);
        let mut out = BatchBuilder::new("t", 0, false, 8);
        let mut position = 1;
        assert_eq!(
            rr.fill(&mut out, &mut position, 100, 2).unwrap(),
            Filled::Full
        );
        assert_eq!(offsets(&mut out), vec![1, 2]);
        assert_eq!(
            rr.fill(&mut out, &mut position, 100, 2).unwrap(),
            Filled::Full
        );
        assert_eq!(offsets(&mut out), vec![3, 4]);
        assert_eq!(
            rr.fill(&mut out, &mut position, 100, 2).unwrap(),
            Filled::Exhausted
        );
        assert_eq!((offsets(&mut out), position), (vec![6], 7));

        let mut rr = ResponseRecords::new(false);
        let buf = batch(&Spec {
            base: 0,
            deltas: &[0, 1, 2, 3],
            attributes: 0,
            producer: -1,
            headers: &[],
        });
        let n = buf.len();
        rr.reset(buf, 0..n, vec![]);
        let mut position = 0;
        assert_eq!(
            rr.fill(&mut out, &mut position, 2, 10).unwrap(),
            Filled::End
        );
        assert_eq!((offsets(&mut out), position), (vec![0, 1], 2));
    }

    #[test]
    fn aborted_transactions_and_markers_are_skipped_under_read_committed() {
        let tx = ATTR_TRANSACTIONAL;
        let mut buf = batch(&Spec {
            base: 0,
            deltas: &[0, 1],
            attributes: tx,
            producer: 7,
            headers: &[],
        });
        buf.extend(batch(&Spec {
            base: 2,
            deltas: &[0],
            attributes: tx | ATTR_CONTROL,
            producer: 7,
            headers: &[],
        }));
        buf.extend(batch(&Spec {
            base: 3,
            deltas: &[0, 1],
            attributes: tx,
            producer: 7,
            headers: &[],
        }));
        // a commit marker: the "producer" sign picks COMMIT in the test builder
        buf.extend(batch(&Spec {
            base: 5,
            deltas: &[0],
            attributes: tx | ATTR_CONTROL,
            producer: -7,
            headers: &[],
        }));
        let n = buf.len();
        for (committed, expected) in [(true, vec![3, 4]), (false, vec![0, 1, 3, 4])] {
            let mut rr = ResponseRecords::new(committed);
            rr.reset(buf.clone(), 0..n, vec![(0, 7)]);
            let mut out = BatchBuilder::new("t", 0, false, 8);
            let mut position = 0;
            assert_eq!(
                rr.fill(&mut out, &mut position, 100, 100).unwrap(),
                Filled::Exhausted
            );
            assert_eq!((offsets(&mut out), position), (expected, 6));
        }
    }

    #[test]
    fn fields_timestamps_and_headers_decode_as_librdkafka_gives_them() {
        let hv: &[u8] = b"1";
        let buf = batch(&Spec {
            base: 10,
            deltas: &[0, 1],
            attributes: 0,
            producer: -1,
            headers: &[("h", Some(hv)), ("n", None)],
        });
        let n = buf.len();
        let mut rr = ResponseRecords::new(false);
        rr.reset(buf.clone(), 0..n, vec![]);
        let mut out = BatchBuilder::new("t", 0, true, 8);
        let mut position = 10;
        rr.fill(&mut out, &mut position, 100, 100).unwrap();
        let a = out.finish();
        let keys = a.column(0).as_binary::<i32>();
        assert!(keys.is_null(0));
        assert_eq!(keys.value(1), b"k11");
        assert_eq!(a.column(1).as_binary::<i32>().value(1), b"v11");
        let stamps = a
            .column(5)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(stamps.value(1), (1_000 + 10) * 1000);
        let headers = a.column(7).as_list::<i32>();
        assert_eq!(headers.value_offsets(), &[0, 2, 4]);
        assert!(headers.values().as_struct().column(1).is_null(1));

        let mut appended = buf;
        appended[21..23].copy_from_slice(&ATTR_LOG_APPEND_TIME.to_be_bytes());
        rr.reset(appended, 0..n, vec![]);
        let mut position = 10;
        rr.fill(&mut out, &mut position, 100, 100).unwrap();
        let a = out.finish();
        let stamps = a
            .column(5)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!((stamps.value(0), stamps.value(1)), (2_000_000, 2_000_000));
        assert_eq!(
            a.column(6)
                .as_primitive::<arrow_array::types::Int32Type>()
                .value(0),
            1
        );
    }
}
