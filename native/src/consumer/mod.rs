//! A librdkafka consumer that is only ever assigned one partition, and the read of one
//! offset range `[start, end)` from it into Arrow batches.
//!
//! It does what confluent-kafka's `Consumer` does for the pure-Python path (`rd_kafka_new`,
//! `rd_kafka_poll_set_consumer`, `rd_kafka_consume_batch_queue` on the consumer queue), but
//! copies each message's fields straight into Arrow buffers: no object per record.
//! The range ends when the consumer's position reaches `end` (transaction markers,
//! aborted records and compaction leave gaps in offsets); records fetched past `end` are
//! dropped.

mod errors;
mod handle;
mod log_checks;

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use arrow_array::StructArray;
use rdkafka_sys as rd;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

use crate::batch::{BatchBuilder, Record};
use crate::{Range, TopicWatch, TOPIC_GONE_AFTER};
use errors::check;
use handle::{new_consumer, Handle};
use log_checks::truncated_at;

pub use errors::{describe, ReadError};

const CONSUME_WAIT_MS: i32 = 200;
/// How often a stalled read asks whether its topic still exists.
const TOPIC_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Messages of one `consume` call, destroyed when dropped.
struct Messages(Vec<*mut rd::rd_kafka_message_t>);

impl Messages {
    /// Destroys the messages and hands back the emptied buffer for the next call.
    fn recycle(mut self) -> Vec<*mut rd::rd_kafka_message_t> {
        for &m in &self.0 {
            unsafe { rd::rd_kafka_message_destroy(m) };
        }
        self.0.clear();
        std::mem::take(&mut self.0)
    }
}

impl Drop for Messages {
    fn drop(&mut self) {
        for &m in &self.0 {
            unsafe { rd::rd_kafka_message_destroy(m) };
        }
        self.0.clear();
    }
}

pub struct RangeReader {
    handle: Handle,
    topic: CString,
    partition: i32,
    pub start: i64,
    pub end: i64,
    /// the leader epoch the plan's end came with (-1: unknown; `crate::Range::end_epoch`)
    end_epoch: i32,
    /// where a later leader's record ended the range before its planned end, and its epoch
    pub cut: Option<(i64, i32)>,
    position: i64,
    /// Offset of the last end-of-partition event, until a record follows it.
    eof_at: Option<i64>,
    max_records: usize,
    poll_timeout: Duration,
    batch: BatchBuilder,
    buffer: Vec<*mut rd::rd_kafka_message_t>,
    topic_watch: TopicWatch,
}

// Its librdkafka handles are thread-safe, and Python's wrapper hands out `&mut` access only
// (one call at a time), so moving it between threads or sharing a reference is sound.
unsafe impl Send for RangeReader {}
unsafe impl Sync for RangeReader {}

impl RangeReader {
    pub fn open(config: &[(String, String)], range: &Range) -> Result<Self, ReadError> {
        let handle = unsafe { new_consumer(config)? };
        let topic_c =
            CString::new(range.topic.as_str()).map_err(|e| ReadError::Config(e.to_string()))?;
        let mut reader = RangeReader {
            handle,
            topic: topic_c,
            partition: range.partition,
            start: range.start,
            end: range.end,
            end_epoch: range.end_epoch,
            cut: None,
            position: range.start,
            eof_at: None,
            max_records: range.max_records,
            poll_timeout: Duration::from_millis(range.poll_timeout_ms),
            batch: BatchBuilder::new(
                &range.topic,
                range.partition,
                range.include_headers,
                range.max_records,
            ),
            buffer: Vec::with_capacity(range.max_records),
            topic_watch: TopicWatch::default(),
        };
        reader.assign(range.start)?;
        if range.start_epoch >= 0 && range.start < range.end {
            pause_for_tests("STREAMJOB_TEST_VALIDATE_AFTER_MS");
            reader.validate_start(range.start, range.start_epoch)?;
        }
        Ok(reader)
    }

    /// (Re)assigns the partition at `offset` (a seek is refused after an offset reset). At or
    /// past the range's end there is nothing left to read and no new assignment is made:
    /// closing a consumer right after a re-assignment trips librdkafka's assertion
    /// `rktp->rktp_started` (rd_kafka_assignment_partition_stopped) and aborts the process.
    pub fn assign(&mut self, offset: i64) -> Result<(), ReadError> {
        if offset >= self.end {
            self.position = offset;
            return Ok(());
        }
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp =
                rd::rd_kafka_topic_partition_list_add(list, self.topic.as_ptr(), self.partition);
            (*tp).offset = offset;
            let err = rd::rd_kafka_assign(self.handle.0, list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            check(err)?;
        }
        self.position = offset; // on past deleted offsets, or back to a truncated log's divergence
        self.eof_at = None;
        Ok(())
    }

    fn consumer_position(&self) -> Result<i64, ReadError> {
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp =
                rd::rd_kafka_topic_partition_list_add(list, self.topic.as_ptr(), self.partition);
            let err = rd::rd_kafka_position(self.handle.0, list);
            let offset = (*tp).offset;
            rd::rd_kafka_topic_partition_list_destroy(list);
            check(err)?;
            Ok(offset)
        }
    }

    /// The next batch of up to `max_records` records, or `None` once the range is read.
    pub fn next_batch(&mut self) -> Result<Option<StructArray>, ReadError> {
        let mut progressed = Instant::now();
        let mut last_look = Instant::now(); // at the topic's metadata, while the read stalls
        while self.position < self.end {
            let wanted = (self.max_records - self.batch.len())
                .min((self.end - self.position) as usize)
                .max(1);
            let messages = self.consume(wanted);
            let got_any = !messages.0.is_empty();
            if got_any {
                progressed = Instant::now();
            }
            self.take(&messages)?;
            self.buffer = messages.recycle();
            if self.position < self.end {
                self.skip_to_consumer_position()?;
            }
            let full = self.batch.len() >= self.max_records;
            if !self.batch.is_empty() && (full || self.position >= self.end) {
                return Ok(Some(self.batch.finish()));
            }
            if !got_any {
                if let Err(stalled) = self.check_stalled(progressed, &mut last_look) {
                    if self.batch.is_empty() {
                        return Err(stalled);
                    }
                    return Ok(Some(self.batch.finish())); // what came first; the next call fails
                }
            }
        }
        if !self.batch.is_empty() {
            return Ok(Some(self.batch.finish()));
        }
        Ok(None)
    }

    /// Takes what one consume call returned: the range's records into the batch; past the
    /// range's end, nothing more.
    fn take(&mut self, messages: &Messages) -> Result<(), ReadError> {
        for &m in &messages.0 {
            let m = unsafe { &*m };
            if m.err != Err::RD_KAFKA_RESP_ERR_NO_ERROR {
                self.take_event(m)?;
            } else if m.offset >= self.end {
                // prefetched past the range: offsets ascend, so the rest goes too
                self.position = self.end;
                break;
            } else if let Some(epoch) = self.later_leader(m) {
                // written after the plan where the log was truncated: the range ends here
                self.end = m.offset.max(self.position);
                self.cut = Some((self.end, epoch));
                self.position = self.end;
                break;
            } else {
                self.add(m);
                self.position = self.position.max(m.offset + 1);
                self.eof_at = None;
            }
        }
        Ok(())
    }

    /// The leader epoch of a record of a leader elected after the plan (`end_epoch`), if it
    /// is one: records' epochs ascend with their offsets, so the range's own end there.
    fn later_leader(&self, m: &rd::rd_kafka_message_t) -> Option<i32> {
        if self.end_epoch < 0 {
            return None;
        }
        let epoch = unsafe { rd::rd_kafka_message_leader_epoch(m) };
        (epoch > self.end_epoch).then_some(epoch)
    }

    /// An event in place of a record: the partition's end is noted; an offset reset (a
    /// truncated or deleted log) or any other error ends the read.
    fn take_event(&mut self, m: &rd::rd_kafka_message_t) -> Result<(), ReadError> {
        let detail = || {
            let text = unsafe { CStr::from_ptr(rd::rd_kafka_message_errstr(m)) };
            text.to_string_lossy().into_owned()
        };
        match m.err {
            Err::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                self.position = self.position.max(m.offset);
                self.eof_at = Some(m.offset);
                Ok(())
            }
            Err::RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET
            | Err::RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE => {
                let detail = detail();
                Err(self.out_of_range(truncated_at(&detail), detail))
            }
            err => Err(ReadError::Kafka {
                code: err as i32,
                reason: detail(),
            }),
        }
    }

    /// Control records and compaction gaps advance the position without messages.
    /// librdkafka before 2.13 counts an end-of-partition event as a message and reports its
    /// offset + 1 (librdkafka#4844): the event's own offset is exact.
    fn skip_to_consumer_position(&mut self) -> Result<(), ReadError> {
        let mut at = self.consumer_position()?;
        if let Some(eof) = self.eof_at {
            at = at.min(eof);
        }
        self.position = self.position.max(at);
        Ok(())
    }

    /// Nothing came: a read without progress for `poll_timeout` fails, and so does one whose
    /// topic was deleted (librdkafka tells an assigned consumer nothing of it: it just waits).
    fn check_stalled(
        &mut self,
        progressed: Instant,
        last_look: &mut Instant,
    ) -> Result<(), ReadError> {
        if self.position < self.end && progressed.elapsed() > self.poll_timeout {
            return Err(ReadError::NoProgress {
                position: self.position,
            });
        }
        if last_look.elapsed() >= TOPIC_CHECK_EVERY {
            *last_look = Instant::now();
            let stalled = progressed.elapsed() >= TOPIC_GONE_AFTER;
            if stalled && self.topic_watch.gone(self.topic_exists()) {
                return Err(ReadError::TopicGone {
                    position: self.position,
                });
            }
        }
        Ok(())
    }

    fn consume(&mut self, wanted: usize) -> Messages {
        self.buffer.clear();
        self.buffer.reserve(wanted);
        let n = unsafe {
            rd::rd_kafka_consume_batch_queue(
                self.handle.1,
                CONSUME_WAIT_MS,
                self.buffer.as_mut_ptr(),
                wanted,
            )
        };
        let n = n.max(0) as usize;
        unsafe { self.buffer.set_len(n) };
        Messages(std::mem::take(&mut self.buffer))
    }

    fn add(&mut self, m: &rd::rd_kafka_message_t) {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        let millis = unsafe { rd::rd_kafka_message_timestamp(m, &mut kind) };
        let record = Record {
            offset: m.offset,
            key: unsafe { bytes(m.key, m.key_len) },
            value: unsafe { bytes(m.payload, m.len) },
            timestamp_type: kind as i32,
            timestamp_ms: millis,
        };
        self.batch.add(&record);
        if self.batch.include_headers() {
            self.add_headers(m);
        }
    }

    fn add_headers(&mut self, m: &rd::rd_kafka_message_t) {
        let mut headers: *mut rd::rd_kafka_headers_t = ptr::null_mut();
        let err = unsafe { rd::rd_kafka_message_headers(m, &mut headers) };
        if err != Err::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
            return; // none: an empty list
        }
        let mut idx = 0;
        loop {
            let mut name: *const c_char = ptr::null();
            let mut value: *const c_void = ptr::null();
            let mut size: usize = 0;
            let err = unsafe {
                rd::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size)
            };
            if err != Err::RD_KAFKA_RESP_ERR_NO_ERROR {
                break;
            }
            let key = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            self.batch.add_header(&key, unsafe { bytes(value, size) });
            idx += 1;
        }
    }
}

/// A message field as a slice; null pointers (null keys and values) are `None`.
unsafe fn bytes<'a>(data: *const c_void, len: usize) -> Option<&'a [u8]> {
    if data.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(data as *const u8, len))
    }
}

/// Fault injection for the tests only: a pause of the milliseconds the variable names (none
/// when unset), which lets a race that a loaded machine runs into happen every time.
fn pause_for_tests(variable: &str) {
    if let Some(ms) = std::env::var(variable).ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}
