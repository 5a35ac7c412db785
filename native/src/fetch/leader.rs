//! The fetcher's way to its partition's leader: looked up through the bootstrap servers and
//! connected to, and the read position checked on the leader's log, with
//! OffsetsForLeaderEpoch after each (re)connection (KIP-320) and with ListOffsets after an
//! out-of-range fetch.

use super::conn::{Conn, ConnError};
use super::errors::{retry_or_fail, Step, UNKNOWN_TOPIC_OR_PARTITION};
use super::requests::{EARLIEST, LATEST};
use super::RangeReader;
use crate::consumer::ReadError;

impl RangeReader {
    /// Connects to the partition's leader, looked up through the bootstrap servers, unless
    /// connected; once records were read (or from a start with its epoch), checks that the
    /// leader's log still holds them.
    pub(super) fn connect(&mut self) -> Result<(), Step> {
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
    pub(super) fn out_of_range(&mut self) -> Step {
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
}
