//! What a reader asks librdkafka about its partition's log besides records: a checkpointed
//! start validated with its leader epoch (KIP-320), what an offset reset means (offsets
//! deleted, or the log truncated), the log's watermarks, and whether the topic still exists.

use std::ptr;

use rdkafka_sys as rd;
use rdkafka_sys::rd_kafka_resp_err_t as Err;

use super::errors::{check, ReadError};
use super::RangeReader;

/// Where librdkafka found a truncated log to diverge: its offset-reset text says "Partition
/// log truncation detected at …: broker end offset is N (…)" (rdkafka_offset.c), and the
/// error carries no offset of its own.
pub fn truncated_at(text: &str) -> Option<i64> {
    let (_, rest) = text.split_once("log truncation detected")?;
    let (_, rest) = rest.split_once("broker end offset is ")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

impl RangeReader {
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
    pub(super) fn validate_start(&mut self, offset: i64, epoch: i32) -> Result<(), ReadError> {
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

    /// What librdkafka's offset reset (`auto.offset.reset=error`) means: offsets deleted
    /// below the log start (`Lost`), or a log truncated below the position (`Truncated`): its
    /// KIP-320 validation found where the new leader's log ends (`divergence`, from its
    /// text: the reset itself carries no offset), or the log now ends below the position.
    pub(super) fn out_of_range(&self, divergence: Option<i64>, detail: String) -> ReadError {
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
    pub(super) fn topic_exists(&self) -> bool {
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
}
