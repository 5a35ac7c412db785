//! The native fetcher: one partition's offset range read with Kafka's Fetch protocol and
//! decoded from the wire into Arrow columns, without librdkafka's consumer.
//!
//! librdkafka turns every fetched record into an operation and a message (an allocation, a
//! queue lock, a free): on 100-byte records that is most of a reader's CPU. This reader asks
//! the partition's leader directly and decodes record batches straight into the Arrow batch;
//! the next fetch is in flight while one response is decoded. It reads exactly like the
//! librdkafka engine (same end by position, same errors, `read_committed` filtering) and is
//! used only for the settings it understands (`Settings::parse`); any other goes to
//! librdkafka.

mod compression;
pub mod conn;
mod errors;
mod leader;
pub mod records;
pub mod requests;
pub mod sasl;
pub mod settings;
pub mod versions;
pub mod wire;

use std::time::{Duration, Instant};

use arrow_array::StructArray;

use crate::batch::BatchBuilder;
use crate::consumer::ReadError;
use crate::{Range, TopicWatch};
use conn::Conn;
use errors::{retry_or_fail, Step, BAD_MSG, OFFSET_OUT_OF_RANGE, TRANSPORT};
use records::{next_fetch_offset, Filled, ResponseRecords};
use requests::NO_EPOCH;
pub use settings::Settings;

pub struct RangeReader {
    settings: Settings,
    topic: String,
    partition: i32,
    end: i64,
    position: i64,
    max_records: usize,
    poll_timeout: Duration,
    conn: Option<Conn>,
    /// the leader epoch of the connected leader, per Metadata
    leader_epoch: i32,
    /// the offset and correlation id of the Fetch sent ahead
    in_flight: Option<(i64, i32)>,
    records: ResponseRecords,
    spare: Vec<u8>,
    batch: BatchBuilder,
    topic_watch: TopicWatch,
}

impl RangeReader {
    /// A reader of `range`; it connects at its first batch. A start that comes with its
    /// leader epoch (a checkpointed position) is validated at that connection as a position
    /// is after a leader change: the read may start long after the records before it were
    /// read, on a log truncated since (semantics rule 16).
    pub fn open(settings: Settings, range: &Range) -> RangeReader {
        let mut records = ResponseRecords::new(settings.read_committed);
        records.last_epoch = range.start_epoch;
        records.end_epoch = range.end_epoch;
        RangeReader {
            records,
            settings,
            topic: range.topic.clone(),
            partition: range.partition,
            end: range.end,
            position: range.start,
            max_records: range.max_records,
            poll_timeout: Duration::from_millis(range.poll_timeout_ms),
            conn: None,
            leader_epoch: NO_EPOCH,
            in_flight: None,
            spare: Vec::new(),
            topic_watch: TopicWatch::default(),
            batch: BatchBuilder::new(
                &range.topic,
                range.partition,
                range.include_headers,
                range.max_records,
            ),
        }
    }

    /// Goes on from `offset`: past deleted offsets (after `Lost`), or back to where a
    /// truncated log diverges (after `Truncated`), with failOnDataLoss=false.
    pub fn assign(&mut self, offset: i64) -> Result<(), ReadError> {
        self.position = offset;
        self.in_flight = None;
        self.conn = None; // a fetch sent ahead is answered on a connection no longer used
        if self.records.holds_response() {
            self.spare = self.records.take_buffer();
        }
        Ok(())
    }

    /// The next offset to read.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// The offset the range ended at instead of its planned end, and the leader epoch of
    /// the records there: written after the plan by a leader an unclean election made.
    pub fn cut(&self) -> Option<(i64, i32)> {
        self.records.cut
    }

    /// The range's end: the planned one, or where `cut` ended it.
    pub fn end(&self) -> i64 {
        self.end
    }

    /// The leader epoch of the records before `position` (-1: unknown), for validating it.
    pub fn position_epoch(&self) -> i32 {
        self.records.last_epoch
    }

    /// The next batch of up to `max_records` records, or `None` once the range is read.
    /// A broker the engine cannot speak to leaves the position at the batch's first record,
    /// so another engine can read on from there.
    pub fn next_batch(&mut self) -> Result<Option<StructArray>, ReadError> {
        let first = self.position;
        let got = self.fill_batch();
        if let Err(ReadError::Unsupported(_)) = got {
            self.batch.finish(); // dropped: read again by the other engine
            self.position = first;
        }
        got
    }

    fn fill_batch(&mut self) -> Result<Option<StructArray>, ReadError> {
        let mut deadline = Instant::now() + self.poll_timeout;
        let mut backoff = self.settings.retry_backoff;
        let mut last_failure = None;
        while self.position < self.end {
            let before = self.position;
            if self.records.holds_response() {
                match self.fill_from_response()? {
                    Filled::Full => return Ok(Some(self.batch.finish())),
                    Filled::End => break,
                    Filled::Exhausted => self.spare = self.records.take_buffer(),
                }
            } else {
                match self.fetch() {
                    Ok(()) => backoff = self.settings.retry_backoff,
                    Err(Step::Fail(e)) => return Err(e),
                    Err(Step::Retry(why)) => {
                        self.conn = None;
                        self.in_flight = None;
                        last_failure = Some(why);
                        if Instant::now() > deadline {
                            break;
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
            }
            if self.position > before {
                deadline = Instant::now() + self.poll_timeout;
            } else if !self.records.holds_response() && Instant::now() > deadline {
                break;
            }
        }
        self.end_of_fill(last_failure)
    }

    /// The records of the response in hand, into the batch.
    fn fill_from_response(&mut self) -> Result<Filled, ReadError> {
        self.records
            .fill(
                &mut self.batch,
                &mut self.position,
                &mut self.end,
                self.max_records,
            )
            .map_err(|e| ReadError::Kafka {
                code: BAD_MSG,
                reason: e.to_string(),
            })
    }

    /// The batch read so far; with nothing read short of the range's end, why: the
    /// transport's last failure, or no progress within the poll timeout.
    fn end_of_fill(
        &mut self,
        last_failure: Option<String>,
    ) -> Result<Option<StructArray>, ReadError> {
        if !self.batch.is_empty() {
            return Ok(Some(self.batch.finish()));
        }
        if self.position >= self.end {
            return Ok(None);
        }
        Err(match last_failure {
            Some(reason) if self.conn.is_none() => ReadError::Kafka {
                code: TRANSPORT,
                reason: format!("{}: {reason}", self.settings.bootstrap.join(",")),
            },
            _ => ReadError::NoProgress {
                position: self.position,
            },
        })
    }

    /// Receives the Fetch from `position` (sending it first unless it is in flight), sends
    /// the next one, and starts decoding the response.
    fn fetch(&mut self) -> Result<(), Step> {
        self.connect()?;
        let (position, end, partition) = (self.position, self.end, self.partition);
        let (settings, topic, epoch) = (&self.settings, self.topic.as_str(), self.leader_epoch);
        let conn = self.conn.as_mut().expect("connected above");
        let correlation = match self.in_flight.take() {
            Some((offset, correlation)) if offset == position => correlation,
            stale => {
                if let Some((_, correlation)) = stale {
                    conn.receive_fetch(correlation, &mut self.spare)?; // a fetch from elsewhere
                }
                conn.send_fetch(settings, (topic, partition, epoch), position)?
            }
        };
        let mut buf = std::mem::take(&mut self.spare);
        let fetched = conn.receive_fetch(correlation, &mut buf)?;
        match fetched.error {
            0 => {}
            OFFSET_OUT_OF_RANGE => {
                self.spare = buf;
                return Err(self.out_of_range());
            }
            e => return Err(retry_or_fail("fetch", e)),
        }
        if let Some(next) = next_fetch_offset(&buf[fetched.records.clone()]) {
            if next < end {
                let correlation = conn.send_fetch(settings, (topic, partition, epoch), next)?;
                self.in_flight = Some((next, correlation));
            }
        }
        self.records.reset(buf, fetched.records, fetched.aborted);
        Ok(())
    }
}

#[cfg(test)]
#[path = "fetch_tests.rs"]
mod tests;
