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

pub mod conn;
pub mod records;
pub mod sasl;
pub mod settings;
pub mod versions;
pub mod wire;

use std::time::{Duration, Instant};

use arrow_array::StructArray;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

use crate::batch::BatchBuilder;
use crate::consumer::{describe, ReadError};
use crate::{Range, TopicWatch};
use conn::{Conn, ConnError, EARLIEST, LATEST, NO_EPOCH};
use records::{next_fetch_offset, Filled, ResponseRecords};
pub use settings::Settings;

const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
/// Errors after which the leader is looked up again (Kafka's retriable partition errors).
const RETRIABLE: &[i16] = &[
    // metadata not yet propagated; a deleted topic ends the read through `TopicWatch`
    UNKNOWN_TOPIC_OR_PARTITION,
    5, // LEADER_NOT_AVAILABLE
    NOT_LEADER_OR_FOLLOWER,
    7,  // REQUEST_TIMED_OUT
    13, // NETWORK_EXCEPTION
    19, // NOT_ENOUGH_REPLICAS
    20, // NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56, // KAFKA_STORAGE_ERROR
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
    78, // OFFSET_NOT_AVAILABLE
];
/// librdkafka's codes, so errors read the same from both engines (the runner keys on them).
const TRANSPORT: i32 = Err::RD_KAFKA_RESP_ERR__TRANSPORT as i32;
const BAD_MSG: i32 = Err::RD_KAFKA_RESP_ERR__BAD_MSG as i32;
const SSL: i32 = Err::RD_KAFKA_RESP_ERR__SSL as i32;
const AUTHENTICATION: i32 = Err::RD_KAFKA_RESP_ERR__AUTHENTICATION as i32;

/// A broker's error code as librdkafka reports it ("Broker: Topic authorization failed").
fn broker_error(code: i16) -> ReadError {
    let code = i32::from(code);
    ReadError::Kafka {
        code,
        reason: describe(code),
    }
}

/// A partition error: retried after a metadata refresh where Kafka says it may pass (a
/// leader moved, its epoch is newer or older than ours, too few replicas in sync), else the
/// read's end.
fn retry_or_fail(what: &str, code: i16) -> Step {
    if RETRIABLE.contains(&code) {
        Step::Retry(format!(
            "{what}: {} (Kafka error code {code})",
            describe(code.into())
        ))
    } else {
        Step::Fail(broker_error(code))
    }
}

enum Step {
    /// a failure the next attempt may not have (leader moved, connection lost)
    Retry(String),
    Fail(ReadError),
}

impl From<ConnError> for Step {
    fn from(e: ConnError) -> Self {
        match e {
            ConnError::Tls(reason) => Step::Fail(ReadError::Kafka { code: SSL, reason }),
            ConnError::Auth(reason) => Step::Fail(ReadError::Kafka {
                code: AUTHENTICATION,
                reason,
            }),
            ConnError::Unsupported(why) => Step::Fail(ReadError::Unsupported(why)),
            other => Step::Retry(other.to_string()),
        }
    }
}

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
                self.end,
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

    /// Connects to the partition's leader, looked up through the bootstrap servers, unless
    /// connected; once records were read (or from a start with its epoch), checks that the
    /// leader's log still holds them.
    fn connect(&mut self) -> Result<(), Step> {
        if self.conn.is_none() {
            let (conn, epoch) = self.find_leader()?;
            self.conn = Some(conn);
            self.leader_epoch = epoch;
            self.validate_position()?;
        }
        Ok(())
    }

    /// A connection to the partition's leader, and the leader's epoch. A topic missing from
    /// the metadata for `TOPIC_GONE_AFTER` was deleted: the read ends (`TopicGone`).
    fn find_leader(&mut self) -> Result<(Conn, i32), Step> {
        let mut failure = String::from("no bootstrap server");
        for address in &self.settings.bootstrap {
            match Conn::open(&self.settings, address)
                .and_then(|mut c| c.leader(&self.topic, self.partition).map(|l| (c, l)))
            {
                Ok((c, leader)) => {
                    let missing = leader.error == UNKNOWN_TOPIC_OR_PARTITION;
                    if self.topic_watch.gone(!missing) {
                        return Err(Step::Fail(ReadError::TopicGone {
                            position: self.position,
                        }));
                    }
                    let Some(at) = leader.address.filter(|_| leader.error == 0) else {
                        return Err(Step::Retry(format!(
                            "metadata: Kafka error code {}",
                            leader.error
                        )));
                    };
                    let c = if c.address == at {
                        c
                    } else {
                        Conn::open(&self.settings, &at)?
                    };
                    return Ok((c, leader.epoch));
                }
                Err(e @ (ConnError::Tls(_) | ConnError::Auth(_) | ConnError::Unsupported(_))) => {
                    return Err(e.into())
                }
                Err(e) => failure = format!("{address}: {e}"),
            }
        }
        Err(Step::Retry(failure))
    }

    /// KIP-320: where the epoch of the last record batch read (before any, the epoch kept
    /// with the start) ends on the (new) leader's log. Below the position, the log was
    /// truncated under it (an unclean election): what was read up to there is no longer in
    /// the log.
    fn validate_position(&mut self) -> Result<(), Step> {
        let read_epoch = self.records.last_epoch;
        if read_epoch < 0 {
            return Ok(()); // no epoch known: an out-of-range fetch tells a short log
        }
        let conn = self.conn.as_mut().expect("connected");
        let end = conn.epoch_end(&self.topic, self.partition, self.leader_epoch, read_epoch)?;
        match end.error {
            0 if end.end_offset >= 0 && end.end_offset < self.position => {
                Err(Step::Fail(ReadError::Truncated {
                    position: self.position,
                    divergence: end.end_offset,
                }))
            }
            0 => Ok(()),
            e => Err(retry_or_fail("offsets for leader epoch", e)),
        }
    }

    /// After OFFSET_OUT_OF_RANGE: offsets below the log start were deleted (`Lost`); a log
    /// that ends below the position was truncated (`Truncated`); else the leader's view was
    /// stale, and the fetch is tried again.
    fn out_of_range(&mut self) -> Step {
        let (topic, partition, epoch) = (self.topic.as_str(), self.partition, self.leader_epoch);
        let committed = self.settings.read_committed;
        let position = self.position;
        let conn = self.conn.as_mut().expect("connected");
        let (error, low) = match conn.list_offset(topic, partition, epoch, EARLIEST, committed) {
            Ok(answer) => answer,
            Err(e) => return e.into(),
        };
        if error != 0 {
            return retry_or_fail("list offsets", error);
        }
        if position < low {
            return Step::Fail(ReadError::Lost { position, low });
        }
        let (error, high) = match conn.list_offset(topic, partition, epoch, LATEST, false) {
            Ok(answer) => answer,
            Err(e) => return e.into(),
        };
        match error {
            0 if high < position => Step::Fail(ReadError::Truncated {
                position,
                divergence: high,
            }),
            0 => Step::Retry(format!("fetch: offset {position} out of range")),
            e => retry_or_fail("list offsets", e),
        }
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
mod tests {
    use super::*;

    fn reader(start_epoch: i32) -> RangeReader {
        let config = [("bootstrap.servers".to_string(), "127.0.0.1:1".to_string())];
        let range = Range {
            topic: "t".into(),
            partition: 0,
            start: 1550,
            start_epoch,
            end: 1600,
            include_headers: false,
            max_records: 100,
            poll_timeout_ms: 1000,
        };
        RangeReader::open(Settings::parse(&config).unwrap(), &range)
    }

    #[test]
    fn a_start_kept_with_its_epoch_is_validated_before_the_first_fetch() {
        // the epoch `validate_position` asks the leader about at the first connection, as
        // after a leader change; -1 (a checkpoint of an older version) asks nothing
        assert_eq!(reader(7).position_epoch(), 7);
        assert_eq!(reader(-1).position_epoch(), -1);
    }
}
