//! One connection to a broker: TCP, TLS, ApiVersions (`versions`) and SASL as configured,
//! request framing (header v1, non-flexible versions) and the requests a range read needs, in
//! the versions negotiated: Metadata (the partition's leader and its epoch), Fetch,
//! ListOffsets (the log's start and end, after an out-of-range fetch) and
//! OffsetsForLeaderEpoch (a position checked after a leader change).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

use openssl::ssl::SslStream;

use super::sasl::Exchange;
use super::settings::Settings;
use super::versions::{self, Versions};
use super::wire::{Reader, Short, Writer};

const SASL_HANDSHAKE: (i16, i16) = (17, 1);
const SASL_AUTHENTICATE: (i16, i16) = (36, 1);
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;
/// "no leader epoch known": the broker then checks nothing
pub const NO_EPOCH: i32 = -1;
/// A response larger than this is a protocol error, not an allocation to try.
const MAX_RESPONSE: usize = 1 << 30;

#[derive(Debug)]
pub enum ConnError {
    Io(io::Error),
    Protocol(String),
    /// the TLS handshake failed (an untrusted certificate, a wrong name)
    Tls(String),
    /// the broker refused the SASL credentials or mechanism
    Auth(String),
    /// the broker speaks none of the versions the engine implements of a request
    Unsupported(String),
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

impl From<Short> for ConnError {
    fn from(s: Short) -> Self {
        ConnError::Protocol(s.to_string())
    }
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Io(e) => e.fmt(f),
            ConnError::Protocol(e)
            | ConnError::Tls(e)
            | ConnError::Auth(e)
            | ConnError::Unsupported(e) => f.write_str(e),
        }
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub struct Conn {
    stream: Stream,
    client_id: String,
    correlation: i32,
    pub address: String,
    pub versions: Versions,
}

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

/// The first of `address`'s resolved addresses that accepts, with the socket's timeouts set.
fn connect_tcp(settings: &Settings, address: &str) -> Result<TcpStream, ConnError> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{address}: no address"));
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, settings.connect_timeout) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(settings.socket_timeout))?;
                stream.set_write_timeout(Some(settings.socket_timeout))?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(ConnError::Io(last))
}

impl Conn {
    /// TCP to `address` ("host:port"), then TLS and SASL as `settings` say.
    pub fn open(settings: &Settings, address: &str) -> Result<Conn, ConnError> {
        let tcp = connect_tcp(settings, address)?;
        let stream = match &settings.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let config = tls
                    .configure()
                    .map_err(|e| ConnError::Tls(e.to_string()))?
                    .verify_hostname(settings.verify_hostname);
                let tls = config.connect(host, tcp).map_err(|e| {
                    ConnError::Tls(format!("SSL handshake failed with {address}: {e}"))
                })?;
                Stream::Tls(Box::new(tls))
            }
        };
        let mut conn = Conn {
            stream,
            client_id: settings.client_id.clone(),
            correlation: 0,
            address: address.to_owned(),
            versions: Versions {
                metadata: 0,
                fetch: 0,
                list_offsets: 0,
                offsets_for_leader_epoch: 0,
            },
        };
        conn.versions = conn.negotiate()?;
        if let Some(credentials) = &settings.sasl {
            conn.authenticate(credentials)?;
        }
        Ok(conn)
    }

    fn send(&mut self, (key, version): (i16, i16), body: &[u8]) -> Result<i32, ConnError> {
        self.correlation = self.correlation.wrapping_add(1);
        let mut w = Writer(Vec::with_capacity(body.len() + 64));
        w.i32(0)
            .i16(key)
            .i16(version)
            .i32(self.correlation)
            .string(&self.client_id);
        w.0.extend_from_slice(body);
        let size = (w.0.len() - 4) as i32;
        w.0[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&w.0)?;
        Ok(self.correlation)
    }

    /// Reads the response to request `correlation` into `buf` (its body, after the header).
    fn receive(&mut self, correlation: i32, buf: &mut Vec<u8>) -> Result<(), ConnError> {
        let mut header = [0u8; 8]; // size, correlation id
        self.stream.read_exact(&mut header)?;
        let size = i32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        if size < 4 || size as usize > MAX_RESPONSE {
            return Err(ConnError::Protocol(format!("response of {size} bytes")));
        }
        let got = i32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        if got != correlation {
            return Err(ConnError::Protocol(format!(
                "response to request {got}, expected {correlation}"
            )));
        }
        buf.clear();
        buf.resize(size as usize - 4, 0);
        self.stream.read_exact(buf)?;
        Ok(())
    }

    fn request(&mut self, api: (i16, i16), body: &[u8]) -> Result<Vec<u8>, ConnError> {
        let correlation = self.send(api, body)?;
        let mut buf = Vec::new();
        self.receive(correlation, &mut buf)?;
        Ok(buf)
    }

    /// Asks the broker which versions it speaks (ApiVersions, allowed before SASL) and picks
    /// the engine's per request.
    fn negotiate(&mut self) -> Result<Versions, ConnError> {
        let ask = |conn: &mut Conn, version| -> Result<versions::BrokerRanges, ConnError> {
            let buf = conn.request((versions::API_VERSIONS, version), &[])?;
            Ok(versions::parse(&buf)?)
        };
        let mut ranges = ask(self, versions::API_VERSIONS_ASKED)?;
        if ranges.error == versions::UNSUPPORTED_VERSION {
            if let Some(v) = ranges.api_versions_retry() {
                ranges = ask(self, v)?;
            }
        }
        if ranges.error != 0 {
            return Err(ConnError::Protocol(format!(
                "{}: ApiVersions failed with Kafka error code {}",
                self.address, ranges.error
            )));
        }
        ranges
            .choose()
            .map_err(|why| ConnError::Unsupported(format!("{}: {why}", self.address)))
    }

    fn authenticate(&mut self, c: &super::sasl::Credentials) -> Result<(), ConnError> {
        let refused = |e: String| {
            ConnError::Auth(format!("SASL authentication error ({}): {e}", c.mechanism))
        };
        let mut w = Writer::default();
        w.string(&c.mechanism);
        let buf = self.request(SASL_HANDSHAKE, &w.0)?;
        let mut r = Reader::new(&buf);
        if r.i16("error")? != 0 {
            let mut offered = Vec::new();
            for _ in 0..r.count("mechanisms")? {
                offered.push(r.string("mechanism")?.to_owned());
            }
            return Err(refused(format!(
                "the broker offers only {}",
                offered.join(", ")
            )));
        }
        let (mut exchange, mut message) = Exchange::start(c).map_err(refused)?;
        loop {
            let mut w = Writer::default();
            w.bytes(&message);
            let buf = self.request(SASL_AUTHENTICATE, &w.0)?;
            let mut r = Reader::new(&buf);
            let error = r.i16("error")?;
            let text = r.string("error message")?.to_owned();
            if error != 0 {
                return Err(refused(if text.is_empty() {
                    format!("Kafka error code {error}")
                } else {
                    text
                }));
            }
            let challenge = r.nullable_bytes("auth bytes")?.unwrap_or_default().to_vec();
            match exchange.step(c, &challenge).map_err(refused)? {
                Some(next) => message = next,
                None => return Ok(()),
            }
        }
    }

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
mod tests {
    use super::*;

    #[test]
    fn offsets_for_leader_epoch_as_kafka_encodes_it() {
        let v2 = epoch_end_request(2, "t", 3, 7, 5);
        let want_v2 = [
            &[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1][..],
            &[0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0, 5],
        ]
        .concat();
        assert_eq!(v2, want_v2);
        let v3 = epoch_end_request(3, "t", 3, 7, 5);
        assert_eq!(v3[..4], (-1i32).to_be_bytes());
        assert_eq!(v3[4..], want_v2[..]);

        let mut w = Writer::default();
        w.i32(0).i32(1).string("t").i32(1);
        w.i16(0).i32(3).i32(4).i64(1234);
        let got = parse_epoch_end(&w.0).unwrap();
        assert_eq!(
            got,
            EpochEnd {
                error: 0,
                epoch: 4,
                end_offset: 1234
            }
        );
        assert!(parse_epoch_end(&w.0[..w.0.len() - 1]).is_err());
    }
}
