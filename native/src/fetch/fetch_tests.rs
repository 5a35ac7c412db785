//! Tests of the fetcher's range reader (fetch/mod.rs): a start kept with its leader epoch.

use super::*;

fn reader(start_epoch: i32) -> RangeReader {
    let config = [("bootstrap.servers".to_string(), "127.0.0.1:1".to_string())];
    let range = Range {
        topic: "t".into(),
        partition: 0,
        start: 1550,
        start_epoch,
        end: 1600,
        end_epoch: -1,
        include_headers: false,
        max_records: 100,
        poll_timeout_ms: 1000,
    };
    RangeReader::open(Settings::parse(&config).unwrap(), &range)
}

#[test]
fn a_start_kept_with_its_epoch_is_validated_before_the_first_fetch() {
    // the epoch `validate_position` asks the leader about at the first connection, as
    // after a leader change; -1 (a checkpoint of an older version) asks nothing
    assert_eq!(reader(7).position_epoch(), 7);
    assert_eq!(reader(-1).position_epoch(), -1);
}
