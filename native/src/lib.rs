//! `streamingjob_native`: the native read path of the `kafka_checkpointed` source.
//!
//! `RangeReader` reads one Kafka partition's offset range `[start, end)` and hands out Arrow
//! record batches through the Arrow C data interface; Python imports them with
//! `pyarrow.RecordBatch._import_from_c` (spark_app/source/native_read.py). Two engines read:
//! `fetch` (Kafka's Fetch protocol decoded straight into Arrow, for the settings it
//! understands) and `librdkafka` (its consumer, for every setting). Python keeps the policy
//! (data loss, error texts); this crate only reads.

pub mod avro;
pub mod batch;
pub mod consumer;
pub mod fetch;

/// What a reader reads: one partition's `[start, end)`, in Arrow batches of up to
/// `max_records`, failing after `poll_timeout_ms` without progress.
pub struct Range {
    pub topic: String,
    pub partition: i32,
    pub start: i64,
    /// the leader epoch kept with `start` in the checkpoint (-1: none known): the position is
    /// validated against the leader's log before the first fetch (KIP-320)
    pub start_epoch: i32,
    pub end: i64,
    /// the leader epoch the plan's end came with (-1: none known): a record below `end` of
    /// a later leader was written after the plan (an unclean election truncated the log
    /// there), and the read ends before it
    pub end_epoch: i32,
    pub include_headers: bool,
    pub max_records: usize,
    pub poll_timeout_ms: u64,
}

/// How long a topic must stay out of every metadata answer before a reader calls it deleted:
/// a broker that just (re)started may not know every topic yet. The driver waits as long
/// (`METADATA_SETTLE_S` in spark_app/kafka/metadata.py).
pub const TOPIC_GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the topic a reader reads was deleted, from the metadata answers it gets.
#[derive(Default)]
pub struct TopicWatch {
    missing_since: Option<std::time::Instant>,
}

impl TopicWatch {
    /// Records one answer; true once the topic has been missing for `TOPIC_GONE_AFTER`.
    pub fn gone(&mut self, present: bool) -> bool {
        if present {
            self.missing_since = None;
            return false;
        }
        let since = *self
            .missing_since
            .get_or_insert_with(std::time::Instant::now);
        since.elapsed() >= TOPIC_GONE_AFTER
    }
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;

#[cfg(feature = "python")]
mod python;
