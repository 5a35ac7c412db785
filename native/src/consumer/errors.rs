//! The errors a range read ends with (`ReadError`, of both engines) and librdkafka's error
//! codes in them: a call's code checked (`check`), any code in librdkafka's words (`describe`).

use std::ffi::CStr;
use std::ptr;

use rdkafka_sys as rd;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

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

pub(super) fn check(err: Err) -> Result<(), ReadError> {
    if err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(ReadError::Kafka {
            code: err as i32,
            reason: err_str(err),
        })
    }
}

#[cfg(test)]
#[path = "errors_tests.rs"]
mod tests;
