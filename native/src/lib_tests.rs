//! Tests of `TopicWatch` (lib.rs): when a topic missing from the metadata counts as deleted.

use super::TopicWatch;

#[test]
fn a_topic_present_again_is_not_gone() {
    let mut watch = TopicWatch::default();
    assert!(!watch.gone(false)); // just missing: a broker may not know it yet
    assert!(!watch.gone(true));
    assert!(watch.missing_since.is_none());
}

#[test]
fn a_topic_missing_long_enough_is_gone() {
    let mut watch = TopicWatch {
        missing_since: std::time::Instant::now().checked_sub(super::TOPIC_GONE_AFTER),
    };
    assert!(watch.gone(false));
}
