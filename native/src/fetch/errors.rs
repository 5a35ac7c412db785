//! What a failed request means for the fetcher's read: a broker's error code retried after a
//! metadata refresh where Kafka says it may pass, or the read's end; a connection's failure
//! retried, or (TLS, SASL, a broker it cannot speak to) the end. Errors carry librdkafka's
//! codes and words, so both engines report alike. A batch it cannot decode is a
//! `DecodeError`.

use rdkafka_sys::rd_kafka_resp_err_t as Err;

use super::conn::ConnError;
use super::wire::Short;
use crate::consumer::{describe, ReadError};

pub(super) const OFFSET_OUT_OF_RANGE: i16 = 1;
pub(super) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
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
pub(super) const TRANSPORT: i32 = Err::RD_KAFKA_RESP_ERR__TRANSPORT as i32;
pub(super) const BAD_MSG: i32 = Err::RD_KAFKA_RESP_ERR__BAD_MSG as i32;
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
pub(super) fn retry_or_fail(what: &str, code: i16) -> Step {
    if RETRIABLE.contains(&code) {
        Step::Retry(format!(
            "{what}: {} (Kafka error code {code})",
            describe(code.into())
        ))
    } else {
        Step::Fail(broker_error(code))
    }
}

pub(super) enum Step {
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

/// A record batch the fetcher cannot decode (records.rs, compression.rs).
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
