//! ApiVersions: which version of each request a broker and this engine both speak.
//!
//! Every connection asks the broker first (ApiVersions v2, answered before SASL) and then
//! uses, per request, the highest version within both ranges. The engine's floors are the
//! versions that carry leader epochs (KIP-320, Kafka 2.1+): Metadata v7 gives the leader's
//! epoch, Fetch v9 and ListOffsets v4 send it, OffsetsForLeaderEpoch v2 validates a position
//! after a leader change. Its ceilings are the last non-flexible versions (flexible ones
//! change the encoding, not the meaning). Kafka 4.0 dropped old versions (KIP-896: Fetch
//! below v4, ListOffsets v0, OffsetsForLeaderEpoch below v2); every range here is above them.

use super::wire::{Reader, Short};

pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const OFFSETS_FOR_LEADER_EPOCH: i16 = 23;
pub const API_VERSIONS: i16 = 18;
/// The ApiVersions version asked first; a broker without it answers in v0 with its range.
pub const API_VERSIONS_ASKED: i16 = 2;
pub const UNSUPPORTED_VERSION: i16 = 35;

/// (api key, name, lowest, highest) this engine implements.
pub const IMPLEMENTED: &[(i16, &str, i16, i16)] = &[
    (METADATA, "Metadata", 7, 8),
    (FETCH, "Fetch", 9, 11),
    (LIST_OFFSETS, "ListOffsets", 4, 5),
    (OFFSETS_FOR_LEADER_EPOCH, "OffsetsForLeaderEpoch", 2, 3),
];

/// The versions a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub metadata: i16,
    pub fetch: i16,
    pub list_offsets: i16,
    pub offsets_for_leader_epoch: i16,
}

/// An ApiVersions response: its error code and the broker's (api key, min, max) ranges.
#[derive(Debug, PartialEq, Eq)]
pub struct BrokerRanges {
    pub error: i16,
    pub ranges: Vec<(i16, i16, i16)>,
}

/// Parses an ApiVersions response body (v0..v2: error, ranges, then throttle from v1).
pub fn parse(body: &[u8]) -> Result<BrokerRanges, Short> {
    let mut r = Reader::new(body);
    let error = r.i16("error")?;
    let mut ranges = Vec::new();
    for _ in 0..r.count("api keys")? {
        ranges.push((
            r.i16("api key")?,
            r.i16("min version")?,
            r.i16("max version")?,
        ));
    }
    Ok(BrokerRanges { error, ranges })
}

impl BrokerRanges {
    fn range(&self, key: i16) -> Option<(i16, i16)> {
        self.ranges
            .iter()
            .find(|r| r.0 == key)
            .map(|&(_, min, max)| (min, max))
    }

    /// The ApiVersions version to ask again with, after an UNSUPPORTED_VERSION answer.
    pub fn api_versions_retry(&self) -> Option<i16> {
        let (min, max) = self.range(API_VERSIONS)?;
        let v = max.min(API_VERSIONS_ASKED);
        (v >= min && v < API_VERSIONS_ASKED).then_some(v)
    }

    /// Per request the highest version both sides speak, or why there is none: the
    /// requests whose ranges do not meet, with the broker's range and the engine's.
    pub fn choose(&self) -> Result<Versions, String> {
        let mut chosen = [0i16; 4];
        let mut missing = Vec::new();
        for (slot, &(key, name, lo, hi)) in chosen.iter_mut().zip(IMPLEMENTED) {
            match self.range(key) {
                Some((min, max)) if max >= lo && min <= hi => *slot = max.min(hi),
                Some((min, max)) => missing.push(format!(
                    "{name} v{min}..v{max} (the engine needs v{lo}..v{hi})"
                )),
                None => missing.push(format!("no {name} (the engine needs v{lo}..v{hi})")),
            }
        }
        if !missing.is_empty() {
            return Err(format!(
                "the broker speaks {}: the fetch engine needs Kafka 2.1 or newer (leader epochs, KIP-320); read this source with the option nativeEngine=librdkafka",
                missing.join(", ")
            ));
        }
        Ok(Versions {
            metadata: chosen[0],
            fetch: chosen[1],
            list_offsets: chosen[2],
            offsets_for_leader_epoch: chosen[3],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::wire::Writer;

    fn response(error: i16, ranges: &[(i16, i16, i16)], throttle: bool) -> Vec<u8> {
        let mut w = Writer::default();
        w.i16(error).i32(ranges.len() as i32);
        for &(key, min, max) in ranges {
            w.i16(key).i16(min).i16(max);
        }
        if throttle {
            w.i32(0);
        }
        w.0
    }

    /// The ranges of the requests the engine uses, as Kafka 3.5 and 4.1 answer (4.0 dropped
    /// Fetch v0..v3, ListOffsets v0, OffsetsForLeaderEpoch v0..v1: KIP-896).
    const KAFKA_3_5: &[(i16, i16, i16)] =
        &[(1, 0, 15), (2, 0, 8), (3, 0, 12), (18, 0, 3), (23, 0, 4)];
    const KAFKA_4_1: &[(i16, i16, i16)] =
        &[(1, 4, 17), (2, 1, 10), (3, 0, 13), (18, 0, 4), (23, 2, 4)];

    #[test]
    fn parses_ranges_of_v0_and_v2_responses() {
        let v2 = parse(&response(0, KAFKA_3_5, true)).unwrap();
        assert_eq!(v2.error, 0);
        assert_eq!(v2.ranges, KAFKA_3_5.to_vec());
        let v0 = parse(&response(UNSUPPORTED_VERSION, &[(18, 0, 1)], false)).unwrap();
        assert_eq!(v0.api_versions_retry(), Some(1));
        assert!(parse(&[0, 0, 0, 0, 0, 1, 0, 1]).is_err()); // one range announced, cut short
    }

    #[test]
    fn picks_the_highest_common_version_of_each_request() {
        let want = Versions {
            metadata: 8,
            fetch: 11,
            list_offsets: 5,
            offsets_for_leader_epoch: 3,
        };
        for broker in [KAFKA_3_5, KAFKA_4_1] {
            let ranges = parse(&response(0, broker, true)).unwrap();
            assert_eq!(ranges.choose(), Ok(want));
        }
        // a Kafka 2.1 broker: each request's top version is the engine's floor
        let kafka_2_1 = parse(&response(
            0,
            &[(1, 0, 10), (2, 0, 4), (3, 0, 7), (23, 0, 2)],
            true,
        ));
        let got = kafka_2_1.unwrap().choose().unwrap();
        assert_eq!((got.metadata, got.fetch, got.list_offsets), (7, 10, 4));
        assert_eq!(got.offsets_for_leader_epoch, 2);
    }

    #[test]
    fn a_broker_without_leader_epochs_is_refused_naming_its_ranges_and_the_other_engine() {
        // Kafka 2.0: Fetch up to v8, Metadata up to v6, ListOffsets up to v3, no epochs
        let kafka_2_0 = parse(&response(
            0,
            &[(1, 0, 8), (2, 0, 3), (3, 0, 6), (23, 0, 1)],
            true,
        ));
        let why = kafka_2_0.unwrap().choose().unwrap_err();
        assert!(
            why.contains("Fetch v0..v8 (the engine needs v9..v11)"),
            "{why}"
        );
        assert!(why.contains("Metadata v0..v6"), "{why}");
        assert!(why.contains("OffsetsForLeaderEpoch v0..v1"), "{why}");
        assert!(why.contains("nativeEngine=librdkafka"), "{why}");
        let none = BrokerRanges {
            error: 0,
            ranges: vec![(1, 0, 11), (2, 0, 5), (3, 0, 8)],
        };
        assert!(none
            .choose()
            .unwrap_err()
            .contains("no OffsetsForLeaderEpoch"));
    }
}
