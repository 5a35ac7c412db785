//! One connection to a broker: TCP, TLS, ApiVersions (`versions`) and SASL as configured, and
//! request framing (header v1, non-flexible versions). The requests a range read sends on it
//! are in `requests`.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};

use openssl::ssl::SslStream;

use super::sasl::Exchange;
use super::settings::Settings;
use super::versions::{self, Versions};
use super::wire::{Reader, Short, Writer};

const SASL_HANDSHAKE: (i16, i16) = (17, 1);
const SASL_AUTHENTICATE: (i16, i16) = (36, 1);
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

    pub(super) fn send(
        &mut self,
        (key, version): (i16, i16),
        body: &[u8],
    ) -> Result<i32, ConnError> {
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
    pub(super) fn receive(&mut self, correlation: i32, buf: &mut Vec<u8>) -> Result<(), ConnError> {
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

    pub(super) fn request(&mut self, api: (i16, i16), body: &[u8]) -> Result<Vec<u8>, ConnError> {
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
}
