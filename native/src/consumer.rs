//! A librdkafka consumer that is only ever assigned one partition, and the read of one
//! offset range `[start, end)` from it into Arrow batches.
//!
//! It does what confluent-kafka's `Consumer` does for the pure-Python path (`rd_kafka_new`,
//! `rd_kafka_poll_set_consumer`, `rd_kafka_consume_batch_queue` on the consumer queue), but
//! copies each message's fields straight into Arrow buffers: no object per record.
//! The range ends when the consumer's position reaches `end` (transaction markers,
//! aborted records and compaction leave gaps in offsets); records fetched past `end` are
//! dropped.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use arrow_array::StructArray;
use rdkafka_sys as rd;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

use crate::batch::{BatchBuilder, Record};
use crate::{Range, TopicWatch, TOPIC_GONE_AFTER};

const CONSUME_WAIT_MS: i32 = 200;
/// How often a stalled read asks whether its topic still exists.
const TOPIC_CHECK_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum ReadError {
    /// The client configuration was rejected (unknown property, unsupported by this build).
    Config(String),
    /// A Kafka error other than the events the range read handles itself.
    Kafka { code: i32, reason: String },
    /// Offsets from `position` were deleted: the log now starts at `low`.
    Lost { position: i64, low: i64 },
    /// The log was truncated below `position` (an unclean leader election, lost replicas):
    /// it now diverges from what was read at `divergence`.
    Truncated { position: i64, divergence: i64 },
    /// The broker speaks no version the fetch engine implements of a request it needs.
    Unsupported(String),
    /// No progress for the poll timeout, stuck at `position`.
    NoProgress { position: i64 },
    /// The topic was deleted while the range was read, stuck at `position`.
    TopicGone { position: i64 },
}

/// Where librdkafka found a truncated log to diverge: its offset-reset text says "Partition
/// log truncation detected at …: broker end offset is N (…)" (rdkafka_offset.c), and the
/// error carries no offset of its own.
pub fn truncated_at(text: &str) -> Option<i64> {
    let (_, rest) = text.split_once("log truncation detected")?;
    let (_, rest) = rest.split_once("broker end offset is ")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn err_str(err: Err) -> String {
    unsafe { CStr::from_ptr(rd::rd_kafka_err2str(err)) }
        .to_string_lossy()
        .into_owned()
}

/// librdkafka's text for an error code, also for a broker's code it has no variant of in
/// `Err` (its table is read by number, so no enum value is made from an unknown code).
pub fn describe(code: i32) -> String {
    let (mut table, mut n): (*const rd::rd_kafka_err_desc, usize) = (ptr::null(), 0);
    unsafe { rd::rd_kafka_get_err_descs(&mut table, &mut n) };
    let found = (0..n).find_map(|i| unsafe {
        let entry = table.add(i);
        let entry_code = *(std::ptr::addr_of!((*entry).code) as *const i32);
        let desc = (*entry).desc;
        (entry_code == code && !desc.is_null()).then(|| CStr::from_ptr(desc))
    });
    match found {
        Some(desc) => desc.to_string_lossy().into_owned(),
        None => format!("Kafka error code {code}"),
    }
}

struct Handle(*mut rd::rd_kafka_t, *mut rd::rd_kafka_queue_t);

// librdkafka's handles are thread-safe; the reader uses them from one thread at a time.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe {
            rd::rd_kafka_queue_destroy(self.1);
            rd::rd_kafka_consumer_close(self.0);
            rd::rd_kafka_destroy(self.0);
        }
    }
}

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

    /// Has librdkafka validate a start that comes with its leader epoch (a checkpointed
    /// position) before it fetches from there: an assignment is taken as it is, a seek to a
    /// position with an epoch is checked with OffsetsForLeaderEpoch (KIP-320). A log
    /// truncated below it then arrives as the offset reset `out_of_range` maps. The seek is
    /// answered once the partition takes it; records fetched before it are dropped.
    ///
    /// The assignment's first fetch may beat the seek: a start below the log start has then
    /// already been reset, which (`auto.offset.reset=error`) queues its error and stops the
    /// partition, and the seek is refused with `__STATE`. `next_batch` meets that queued
    /// error, the answer the seek would have led to (CI run 56: the read failed instead).
    fn validate_start(&mut self, offset: i64, epoch: i32) -> Result<(), ReadError> {
        let timeout = i32::try_from(self.poll_timeout.as_millis()).unwrap_or(i32::MAX);
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp =
                rd::rd_kafka_topic_partition_list_add(list, self.topic.as_ptr(), self.partition);
            (*tp).offset = offset;
            rd::rd_kafka_topic_partition_set_leader_epoch(tp, epoch);
            let error = rd::rd_kafka_seek_partitions(self.handle.0, list, timeout);
            let err = if error.is_null() {
                (*tp).err
            } else {
                let code = rd::rd_kafka_error_code(error);
                rd::rd_kafka_error_destroy(error);
                code
            };
            rd::rd_kafka_topic_partition_list_destroy(list);
            match err {
                Err::RD_KAFKA_RESP_ERR__STATE => Ok(()),
                err => check(err),
            }
        }
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

    /// What librdkafka's offset reset (`auto.offset.reset=error`) means: offsets deleted
    /// below the log start (`Lost`), or a log truncated below the position (`Truncated`): its
    /// KIP-320 validation found where the new leader's log ends (`divergence`, from its
    /// text: the reset itself carries no offset), or the log now ends below the position.
    fn out_of_range(&self, divergence: Option<i64>, detail: String) -> ReadError {
        let (low, high) = match self.watermarks() {
            Ok(w) => w,
            Err(e) => return e,
        };
        let position = self.position;
        match divergence.filter(|&d| d < position) {
            _ if position < low => ReadError::Lost { position, low },
            Some(divergence) => ReadError::Truncated {
                position,
                divergence,
            },
            None if high < position => ReadError::Truncated {
                position,
                divergence: high,
            },
            None => ReadError::Kafka {
                code: Err::RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET as i32,
                reason: detail,
            },
        }
    }

    /// Whether the cluster's metadata holds the topic (an unanswered request counts as yes:
    /// an unreachable broker is the poll timeout's matter, not a deletion).
    fn topic_exists(&self) -> bool {
        unsafe {
            let rkt = rd::rd_kafka_topic_new(self.handle.0, self.topic.as_ptr(), ptr::null_mut());
            if rkt.is_null() {
                return true;
            }
            let mut md: *const rd::rd_kafka_metadata = ptr::null();
            let err = rd::rd_kafka_metadata(self.handle.0, 0, rkt, &mut md, 5_000);
            let exists = err != Err::RD_KAFKA_RESP_ERR_NO_ERROR
                || (*md).topic_cnt < 1
                || (*(*md).topics).err != Err::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
            if !md.is_null() {
                rd::rd_kafka_metadata_destroy(md);
            }
            rd::rd_kafka_topic_destroy(rkt);
            exists
        }
    }

    fn watermarks(&self) -> Result<(i64, i64), ReadError> {
        let (mut low, mut high) = (0i64, 0i64);
        let err = unsafe {
            rd::rd_kafka_query_watermark_offsets(
                self.handle.0,
                self.topic.as_ptr(),
                self.partition,
                &mut low,
                &mut high,
                30_000,
            )
        };
        check(err)?;
        Ok((low, high))
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
                self.check_stalled(progressed, &mut last_look)?;
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
            } else {
                self.add(m);
                self.position = self.position.max(m.offset + 1);
                self.eof_at = None;
            }
        }
        Ok(())
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

fn check(err: Err) -> Result<(), ReadError> {
    if err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(ReadError::Kafka {
            code: err as i32,
            reason: err_str(err),
        })
    }
}

unsafe fn new_consumer(config: &[(String, String)]) -> Result<Handle, ReadError> {
    let mut errstr = [0 as c_char; 512];
    let conf = rd::rd_kafka_conf_new();
    for (key, value) in config {
        let (k, v) = match (CString::new(key.as_str()), CString::new(value.as_str())) {
            (Ok(k), Ok(v)) => (k, v),
            _ => {
                rd::rd_kafka_conf_destroy(conf);
                return Err(ReadError::Config(format!("{key}: contains a NUL byte")));
            }
        };
        let res = rd::rd_kafka_conf_set(
            conf,
            k.as_ptr(),
            v.as_ptr(),
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        if res != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
            rd::rd_kafka_conf_destroy(conf);
            return Err(ReadError::Config(text(&errstr)));
        }
    }
    // rd_kafka_new takes conf over only when it succeeds
    let rk = rd::rd_kafka_new(
        rd::rd_kafka_type_t::RD_KAFKA_CONSUMER,
        conf,
        errstr.as_mut_ptr(),
        errstr.len(),
    );
    if rk.is_null() {
        rd::rd_kafka_conf_destroy(conf);
        return Err(ReadError::Config(text(&errstr)));
    }
    rd::rd_kafka_poll_set_consumer(rk);
    let queue = rd::rd_kafka_queue_get_consumer(rk);
    Ok(Handle(rk, queue))
}

fn text(buf: &[c_char]) -> String {
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn error_codes_read_as_librdkafka_words_them() {
        assert_eq!(describe(29), "Broker: Topic authorization failed");
        assert_eq!(describe(-195), "Local: Broker transport failure");
        assert_eq!(describe(99_999), "Kafka error code 99999");
    }
}
