//! Tests of librdkafka's error codes in words (consumer/errors.rs).

use super::describe;

#[test]
fn error_codes_read_as_librdkafka_words_them() {
    assert_eq!(describe(29), "Broker: Topic authorization failed");
    assert_eq!(describe(-195), "Local: Broker transport failure");
    assert_eq!(describe(99_999), "Kafka error code 99999");
}
