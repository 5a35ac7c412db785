//! The client settings the native fetcher understands, from librdkafka's configuration
//! properties (the same `kafka.*` options the librdkafka engine takes).
//!
//! A property it does not know means the read should go through librdkafka instead, so
//! parsing returns why; nothing is silently ignored except settings that only concern
//! librdkafka's consumer machinery (groups, commits, its local queue).

use std::time::Duration;

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use openssl::x509::X509;

use super::sasl::{Credentials, MECHANISMS};

pub struct Settings {
    pub bootstrap: Vec<String>,
    pub client_id: String,
    pub read_committed: bool,
    pub fetch_wait_max_ms: i32,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub partition_fetch_bytes: i32,
    pub socket_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry_backoff: Duration,
    /// TLS (security.protocol ssl or sasl_ssl), and whether to check the broker's name
    pub tls: Option<SslConnector>,
    pub verify_hostname: bool,
    pub sasl: Option<Credentials>,
}

/// The TLS properties, gathered before the connector is built.
#[derive(Default)]
struct Tls {
    ca_location: Option<String>,
    ca_pem: Option<String>,
    certificate_location: Option<String>,
    certificate_pem: Option<String>,
    key_location: Option<String>,
    key_pem: Option<String>,
    key_password: Option<String>,
    verify: bool,
}

impl Tls {
    fn connector(&self) -> Result<SslConnector, String> {
        fn e(what: &'static str) -> impl Fn(openssl::error::ErrorStack) -> String {
            move |err| format!("{what}: {err}")
        }
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(e("TLS"))?;
        if let Some(path) = self.ca_location.as_ref().filter(|p| *p != "probe") {
            if std::path::Path::new(path).is_dir() {
                b.cert_store_mut()
                    .add_lookup(openssl::x509::store::X509Lookup::hash_dir())
                    .and_then(|l| l.add_dir(path, SslFiletype::PEM))
                    .map_err(e("ssl.ca.location"))?;
            } else {
                b.set_ca_file(path).map_err(e("ssl.ca.location"))?;
            }
        }
        if let Some(pem) = &self.ca_pem {
            let certs = X509::stack_from_pem(pem.as_bytes()).map_err(e("ssl.ca.pem"))?;
            if certs.is_empty() {
                return Err("ssl.ca.pem: no PEM certificate in it".into());
            }
            for cert in certs {
                b.cert_store_mut().add_cert(cert).map_err(e("ssl.ca.pem"))?;
            }
        }
        if let Some(path) = &self.certificate_location {
            b.set_certificate_chain_file(path)
                .map_err(e("ssl.certificate.location"))?;
        }
        if let Some(pem) = &self.certificate_pem {
            let cert = X509::from_pem(pem.as_bytes()).map_err(e("ssl.certificate.pem"))?;
            b.set_certificate(&cert).map_err(e("ssl.certificate.pem"))?;
        }
        let key_pem = match (&self.key_location, &self.key_pem) {
            (Some(path), _) => {
                Some(std::fs::read(path).map_err(|err| format!("ssl.key.location: {err}"))?)
            }
            (None, Some(pem)) => Some(pem.clone().into_bytes()),
            _ => None,
        };
        if let Some(pem) = key_pem {
            let key = match &self.key_password {
                Some(p) => openssl::pkey::PKey::private_key_from_pem_passphrase(&pem, p.as_bytes()),
                None => openssl::pkey::PKey::private_key_from_pem(&pem),
            }
            .map_err(e("ssl.key"))?;
            b.set_private_key(&key).map_err(e("ssl.key"))?;
        }
        if !self.verify {
            b.set_verify(SslVerifyMode::NONE);
        }
        Ok(b.build())
    }
}

/// Properties without meaning for a fetch of a fixed offset range.
const CONSUMER_ONLY: &[&str] = &[
    "group.id",
    "group.instance.id",
    "enable.partition.eof",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.commit.interval.ms",
    "auto.offset.reset", // the range read always stops on an out-of-range offset
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.queue.backoff.ms",
    "fetch.error.backoff.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "check.crcs",
    "topic.metadata.refresh.interval.ms",
    "statistics.interval.ms",
    "log_level",
    "debug",
];

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{key}={value:?} is not a number"))
}

impl Settings {
    /// The settings, or why this configuration needs librdkafka.
    pub fn parse(config: &[(String, String)]) -> Result<Settings, String> {
        let mut s = Settings::defaults();
        let mut security = Security::default();
        for (key, value) in config {
            if !security.take(key, value) {
                s.take(key, value)?;
            }
        }
        security.apply(&mut s)?;
        if s.bootstrap.is_empty() {
            return Err("bootstrap.servers is not set".into());
        }
        // the broker must answer a fetch before the socket gives up on it
        let wait = Duration::from_millis(s.fetch_wait_max_ms.max(0) as u64);
        s.socket_timeout = s.socket_timeout.max(wait + Duration::from_secs(5));
        Ok(s)
    }

    /// librdkafka's defaults for the properties the fetcher reads.
    fn defaults() -> Settings {
        Settings {
            bootstrap: Vec::new(),
            client_id: "rdkafka".into(),
            read_committed: true, // librdkafka's default
            fetch_wait_max_ms: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            partition_fetch_bytes: 1_048_576,
            socket_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            tls: None,
            verify_hostname: true,
            sasl: None,
        }
    }

    /// Takes a connection or fetch property; any other one needs librdkafka (named by its
    /// key alone, never its value: it may be a credential).
    fn take(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "bootstrap.servers" | "metadata.broker.list" => {
                self.bootstrap = value
                    .split(',')
                    .map(|a| a.trim())
                    .filter(|a| !a.is_empty())
                    .map(|a| a.rsplit("://").next().unwrap_or(a).to_owned())
                    .collect();
            }
            "ssl.endpoint.identification.algorithm" => {
                self.verify_hostname = match value.to_ascii_lowercase().as_str() {
                    "https" => true,
                    "none" => false,
                    other => return Err(format!("{key}={other:?} is unknown")),
                }
            }
            "client.id" => self.client_id = value.to_owned(),
            "isolation.level" => {
                self.read_committed = match value {
                    "read_committed" => true,
                    "read_uncommitted" => false,
                    other => return Err(format!("isolation.level={other:?} is unknown")),
                }
            }
            "fetch.wait.max.ms" => self.fetch_wait_max_ms = number(key, value)?,
            "fetch.min.bytes" => self.fetch_min_bytes = number(key, value)?,
            "fetch.max.bytes" => self.fetch_max_bytes = number(key, value)?,
            "max.partition.fetch.bytes" | "fetch.message.max.bytes" => {
                self.partition_fetch_bytes = number(key, value)?
            }
            "socket.timeout.ms" => self.socket_timeout = millis(key, value)?,
            "socket.connection.setup.timeout.ms" => self.connect_timeout = millis(key, value)?,
            "retry.backoff.ms" => self.retry_backoff = millis(key, value)?,
            k if CONSUMER_ONLY.contains(&k) => {}
            other => return Err(format!("{other} is not handled by the native fetcher")),
        }
        Ok(())
    }
}

/// The security properties, gathered before the protocol decides which of them count.
struct Security {
    protocol: String,
    tls: Tls,
    mechanism: String,
    username: Option<String>,
    password: Option<String>,
}

impl Default for Security {
    fn default() -> Self {
        Security {
            protocol: "plaintext".to_owned(),
            tls: Tls {
                verify: true,
                ..Tls::default()
            },
            mechanism: "GSSAPI".to_owned(),
            username: None,
            password: None,
        }
    }
}

impl Security {
    /// Takes a security property; false: the key is not one.
    fn take(&mut self, key: &str, value: &str) -> bool {
        let given = Some(value.to_owned());
        let tls = &mut self.tls;
        match key {
            "security.protocol" => self.protocol = value.to_ascii_lowercase(),
            "sasl.mechanism" | "sasl.mechanisms" => self.mechanism = value.to_ascii_uppercase(),
            "sasl.username" => self.username = given,
            "sasl.password" => self.password = given,
            "ssl.ca.location" => tls.ca_location = given,
            "ssl.ca.pem" => tls.ca_pem = given,
            "ssl.certificate.location" => tls.certificate_location = given,
            "ssl.certificate.pem" => tls.certificate_pem = given,
            "ssl.key.location" => tls.key_location = given,
            "ssl.key.pem" => tls.key_pem = given,
            "ssl.key.password" => tls.key_password = given,
            "enable.ssl.certificate.verification" => tls.verify = value == "true",
            _ => return false,
        }
        true
    }

    /// The protocol's TLS connector and SASL credentials, where it uses them.
    fn apply(self, s: &mut Settings) -> Result<(), String> {
        let (uses_tls, uses_sasl) = match self.protocol.as_str() {
            "plaintext" => (false, false),
            "ssl" => (true, false),
            "sasl_plaintext" => (false, true),
            "sasl_ssl" => (true, true),
            other => return Err(format!("security.protocol={other:?} is unknown")),
        };
        if uses_tls {
            s.tls = Some(self.tls.connector()?);
            s.verify_hostname &= self.tls.verify;
        }
        if !uses_sasl {
            return Ok(());
        }
        let mechanism = self.mechanism;
        if !MECHANISMS.contains(&mechanism.as_str()) {
            return Err(format!(
                "sasl.mechanism={mechanism} is not handled by the native fetcher"
            ));
        }
        let (Some(username), Some(password)) = (self.username, self.password) else {
            return Err("sasl.username and sasl.password are needed for SASL".into());
        };
        s.sasl = Some(Credentials {
            mechanism,
            username,
            password,
        });
        Ok(())
    }
}

fn millis(key: &str, value: &str) -> Result<Duration, String> {
    Ok(Duration::from_millis(number(key, value)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::parse(&v)
    }

    #[test]
    fn librdkafka_defaults_and_overrides() {
        let s = parse(&[
            ("bootstrap.servers", "PLAINTEXT://a:9092, b:9093"),
            ("group.id", "g"),
        ])
        .unwrap();
        assert_eq!(s.bootstrap, vec!["a:9092", "b:9093"]);
        assert!(s.read_committed);
        let s = parse(&[
            ("bootstrap.servers", "a:1"),
            ("isolation.level", "read_uncommitted"),
            ("max.partition.fetch.bytes", "4194304"),
        ])
        .unwrap();
        assert!(!s.read_committed);
        assert_eq!(s.partition_fetch_bytes, 4 << 20);
    }

    #[test]
    fn what_it_does_not_handle_is_named() {
        let why = parse(&[
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_SSL"),
        ])
        .err()
        .unwrap();
        assert!(why.contains("sasl.mechanism=GSSAPI"), "{why}");
        let oauth = [
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ];
        assert!(parse(&oauth).is_err());
        let scram = [
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ];
        assert_eq!(
            parse(&scram).ok().unwrap().sasl.unwrap().mechanism,
            "SCRAM-SHA-512"
        );
        let why = parse(&[
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SSL"),
            ("ssl.ca.pem", "junk"),
        ])
        .err()
        .unwrap();
        assert!(why.starts_with("ssl.ca.pem"), "{why}");
        let why = parse(&[("bootstrap.servers", "a:1"), ("fetch.min.bytes", "x")])
            .err()
            .unwrap();
        assert!(why.contains("fetch.min.bytes"), "{why}");
        assert!(parse(&[("group.id", "g")]).is_err());
        let secret = [
            ("bootstrap.servers", "a:1"),
            ("sasl.oauthbearer.client.secret", "s3cret"),
        ];
        let why = parse(&secret).err().unwrap();
        assert!(
            why.contains("sasl.oauthbearer.client.secret") && !why.contains("s3cret"),
            "{why}"
        );
    }
}
