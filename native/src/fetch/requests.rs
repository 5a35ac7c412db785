//! The requests a range read needs, on a broker connection (`Conn`) in the versions it
//! negotiated: Metadata (the partition's leader and its epoch), Fetch, ListOffsets (the log's
//! start and end, after an out-of-range fetch) and OffsetsForLeaderEpoch (a position checked
//! after a leader change).

use super::conn::{Conn, ConnError};
use super::settings::Settings;
use super::versions;
use super::wire::{Reader, Short, Writer};

pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;
/// "no leader epoch known": the broker then checks nothing
pub const NO_EPOCH: i32 = -1;

/// A partition's leader per Metadata: its error code (0 when it has a leader), address
/// ("host:port") and epoch.
pub struct Leader {
    pub error: i16,
    pub address: Option<String>,
    pub epoch: i32,
}

/// An OffsetsForLeaderEpoch answer: the largest epoch at most the one asked for, and the
/// offset where it ends on the leader's log (-1 for both when the leader cannot tell).
#[derive(Debug, PartialEq, Eq)]
pub struct EpochEnd {
    pub error: i16,
    pub epoch: i32,
    pub end_offset: i64,
}

/// A partition's entry of a Fetch response; `records` is the byte range in the buffer.
pub struct FetchedPartition {
    pub error: i16,
    pub aborted: Vec<(i64, i64)>,
    pub records: std::ops::Range<usize>,
}

impl Conn {
    /// The partition's leader, per Metadata.
    pub fn leader(&mut self, topic: &str, partition: i32) -> Result<Leader, ConnError> {
        let v = self.versions.metadata;
        let mut w = Writer::default();
        w.i32(1).string(topic).i8(0);
        if v >= 8 {
            w.i8(0).i8(0); // no authorized operations
        }
        let buf = self.request((versions::METADATA, v), &w.0)?;
        let mut r = Reader::new(&buf);
        r.i32("throttle")?;
        let brokers = read_brokers(&mut r)?;
        r.string("cluster id")?;
        r.i32("controller")?;
        for _ in 0..r.count("topics")? {
            let topic_error = r.i16("topic error")?;
            let name = r.string("topic")?.to_owned();
            r.i8("internal")?;
            let wanted = (name == topic).then_some(partition);
            if let Some(found) = read_partitions(&mut r, &brokers, wanted)? {
                return Ok(found);
            }
            if v >= 8 {
                r.i32("topic authorized operations")?;
            }
            if name == topic && topic_error != 0 {
                return Ok(Leader {
                    error: topic_error,
                    address: None,
                    epoch: NO_EPOCH,
                });
            }
        }
        Ok(Leader {
            error: 3, // UNKNOWN_TOPIC_OR_PARTITION
            address: None,
            epoch: NO_EPOCH,
        })
    }

    /// The partition's first offset (`EARLIEST`) or its end (`LATEST`: the last stable offset
    /// under read_committed), asked of the leader of `epoch`: the error code and the offset.
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        epoch: i32,
        which: i64,
        read_committed: bool,
    ) -> Result<(i16, i64), ConnError> {
        let mut w = Writer::default();
        w.i32(-1)
            .i8(read_committed as i8)
            .i32(1)
            .string(topic)
            .i32(1);
        w.i32(partition).i32(epoch).i64(which); // current leader epoch: v4+
        let buf = self.request((versions::LIST_OFFSETS, self.versions.list_offsets), &w.0)?;
        let mut r = Reader::new(&buf);
        r.i32("throttle")?;
        r.count("topics")?;
        r.string("topic")?;
        r.count("partitions")?;
        r.i32("partition")?;
        let error = r.i16("error")?;
        r.i64("timestamp")?;
        Ok((error, r.i64("offset")?))
    }

    /// Where `leader_epoch` (the epoch of the last record read) ends on the log of the leader
    /// of `current_epoch` (KIP-320: below the read position means the log was truncated).
    pub fn epoch_end(
        &mut self,
        topic: &str,
        partition: i32,
        current_epoch: i32,
        leader_epoch: i32,
    ) -> Result<EpochEnd, ConnError> {
        let v = self.versions.offsets_for_leader_epoch;
        let buf = self.request(
            (versions::OFFSETS_FOR_LEADER_EPOCH, v),
            &epoch_end_request(v, topic, partition, current_epoch, leader_epoch),
        )?;
        Ok(parse_epoch_end(&buf)?)
    }

    /// Sends a Fetch of one partition from `offset` (full fetches, no sessions).
    pub fn send_fetch(
        &mut self,
        s: &Settings,
        (topic, partition, epoch): (&str, i32, i32),
        offset: i64,
    ) -> Result<i32, ConnError> {
        let mut w = Writer::default();
        w.i32(-1)
            .i32(s.fetch_wait_max_ms)
            .i32(s.fetch_min_bytes)
            .i32(s.fetch_max_bytes);
        w.i8(s.read_committed as i8).i32(0).i32(-1);
        w.i32(1).string(topic).i32(1);
        w.i32(partition)
            .i32(epoch) // current leader epoch: v9+
            .i64(offset)
            .i64(-1)
            .i32(s.partition_fetch_bytes);
        w.i32(0);
        if self.versions.fetch >= 11 {
            w.string(""); // rack id
        }
        self.send((versions::FETCH, self.versions.fetch), &w.0)
    }

    /// Receives a Fetch response into `buf` and finds the partition's entry in it.
    pub fn receive_fetch(
        &mut self,
        correlation: i32,
        buf: &mut Vec<u8>,
    ) -> Result<FetchedPartition, ConnError> {
        self.receive(correlation, buf)?;
        let mut r = Reader::new(buf);
        r.i32("throttle")?;
        let error = r.i16("error")?;
        r.i32("session id")?;
        if error != 0 {
            return Ok(FetchedPartition {
                error,
                aborted: vec![],
                records: 0..0,
            });
        }
        if r.count("topics")? != 1 {
            return Err(ConnError::Protocol(
                "a fetch response without the topic".into(),
            ));
        }
        r.string("topic")?;
        if r.count("partitions")? != 1 {
            return Err(ConnError::Protocol(
                "a fetch response without the partition".into(),
            ));
        }
        r.i32("partition")?;
        let error = r.i16("error")?;
        r.i64("high watermark")?;
        r.i64("last stable offset")?;
        r.i64("log start offset")?;
        let n = r.i32("aborted transactions")?;
        let mut aborted = Vec::with_capacity(n.max(0) as usize);
        for _ in 0..n.max(0) {
            let producer = r.i64("producer id")?;
            aborted.push((r.i64("first offset")?, producer));
        }
        if self.versions.fetch >= 11 {
            r.i32("preferred read replica")?;
        }
        let len = r.i32("records")?.max(0) as usize;
        let start = buf.len() - r.remaining();
        if len > r.remaining() {
            return Err(ConnError::Protocol(
                "records past the response's end".into(),
            ));
        }
        Ok(FetchedPartition {
            error,
            aborted,
            records: start..start + len,
        })
    }
}

/// An OffsetsForLeaderEpoch request of one partition (v2: current epoch; v3: replica id).
fn epoch_end_request(
    version: i16,
    topic: &str,
    partition: i32,
    current_epoch: i32,
    leader_epoch: i32,
) -> Vec<u8> {
    let mut w = Writer::default();
    if version >= 3 {
        w.i32(-1); // a consumer, not a replica
    }
    w.i32(1).string(topic).i32(1);
    w.i32(partition).i32(current_epoch).i32(leader_epoch);
    w.0
}

/// The brokers of a Metadata response: (node id, "host:port").
fn read_brokers(r: &mut Reader) -> Result<Vec<(i32, String)>, Short> {
    let mut brokers = Vec::new();
    for _ in 0..r.count("brokers")? {
        let node = r.i32("node id")?;
        let host = r.string("host")?;
        let port = r.i32("port")?;
        r.string("rack")?;
        brokers.push((node, format!("{host}:{port}")));
    }
    Ok(brokers)
}

/// One topic's partitions in a Metadata response, read through: the leader of the
/// `wanted` partition where the topic is the one asked about and lists it.
fn read_partitions(
    r: &mut Reader,
    brokers: &[(i32, String)],
    wanted: Option<i32>,
) -> Result<Option<Leader>, Short> {
    for _ in 0..r.count("partitions")? {
        let error = r.i16("partition error")?;
        let index = r.i32("partition")?;
        let leader = r.i32("leader")?;
        let epoch = r.i32("leader epoch")?; // v7+
        for _ in 0..3 {
            let n = r.count("replicas")?; // replicas, in-sync, offline (v5+)
            r.take(4 * n, "replicas")?;
        }
        if wanted == Some(index) {
            let address = brokers.iter().find(|b| b.0 == leader).map(|b| b.1.clone());
            let error = if error == 0 && address.is_none() {
                5 // LEADER_NOT_AVAILABLE
            } else {
                error
            };
            return Ok(Some(Leader {
                error,
                address,
                epoch,
            }));
        }
    }
    Ok(None)
}

fn parse_epoch_end(buf: &[u8]) -> Result<EpochEnd, Short> {
    let mut r = Reader::new(buf);
    r.i32("throttle")?;
    r.count("topics")?;
    r.string("topic")?;
    r.count("partitions")?;
    let error = r.i16("error")?;
    r.i32("partition")?;
    Ok(EpochEnd {
        error,
        epoch: r.i32("leader epoch")?,
        end_offset: r.i64("end offset")?,
    })
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
