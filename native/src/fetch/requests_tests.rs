//! Tests of the requests' encoding and decoding (requests.rs): OffsetsForLeaderEpoch as Kafka
//! encodes it.

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
