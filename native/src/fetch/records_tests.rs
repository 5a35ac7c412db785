//! Tests of the record batch decoding (records.rs): the range's ends, aborted transactions
//! under read_committed, and fields, timestamps and headers as librdkafka gives them.

use super::*;
use crate::fetch::wire::Writer;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;

fn zigzag(w: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (u & 0x7f) as u8;
        u >>= 7;
        if u == 0 {
            w.push(b);
            return;
        }
        w.push(b | 0x80);
    }
}

fn field(w: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => zigzag(w, -1),
        Some(b) => {
            zigzag(w, b.len() as i64);
            w.extend_from_slice(b);
        }
    }
}

pub struct Spec<'a> {
    pub base: i64,
    pub deltas: &'a [i64],
    pub attributes: i16,
    pub producer: i64,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// A v2 batch as a broker stores it (crc left 0: not checked).
pub fn batch(s: &Spec) -> Vec<u8> {
    let mut records = Vec::new();
    for &d in s.deltas {
        let mut r = vec![0u8];
        zigzag(&mut r, d * 10); // timestamp delta
        zigzag(&mut r, d);
        if s.attributes & ATTR_CONTROL != 0 {
            let mut k = Writer::default();
            k.i16(0).i16(if s.producer < 0 { 1 } else { 0 });
            field(&mut r, Some(&k.0));
            field(&mut r, None);
        } else {
            let key = format!("k{}", s.base + d);
            field(
                &mut r,
                if d % 2 == 0 {
                    None
                } else {
                    Some(key.as_bytes())
                },
            );
            field(&mut r, Some(format!("v{}", s.base + d).as_bytes()));
        }
        zigzag(&mut r, s.headers.len() as i64);
        for (k, v) in s.headers {
            field(&mut r, Some(k.as_bytes()));
            field(&mut r, *v);
        }
        zigzag(&mut records, r.len() as i64);
        records.extend_from_slice(&r);
    }
    let mut w = Writer::default();
    let last = *s.deltas.last().unwrap_or(&0) as i32;
    w.i64(s.base)
        .i32((BATCH_HEADER - 12 + records.len()) as i32)
        .i32(0)
        .i8(2)
        .i32(0);
    w.i16(s.attributes).i32(last).i64(1_000).i64(2_000);
    w.i64(s.producer.abs())
        .i16(0)
        .i32(0)
        .i32(s.deltas.len() as i32);
    w.0.extend_from_slice(&records);
    w.0
}

fn offsets(b: &mut BatchBuilder) -> Vec<i64> {
    let a = b.finish();
    a.column(4).as_primitive::<Int64Type>().values().to_vec()
}

#[test]
fn a_range_is_cut_at_its_ends_and_resumes_where_the_arrow_batch_filled() {
    let mut buf = batch(&Spec {
        base: 0,
        deltas: &[0, 1, 2, 3],
        attributes: 0,
        producer: -1,
        headers: &[],
    });
    buf.extend(batch(&Spec {
        base: 4,
        deltas: &[0, 2],
        attributes: 0,
        producer: -1,
        headers: &[],
    }));
    let whole = buf.len();
    buf.extend_from_within(..30); // a partial batch at the end
    assert_eq!(next_fetch_offset(&buf), Some(7));
    let mut rr = ResponseRecords::new(false);
    rr.reset(buf, 0..whole + 30, vec![]);
    let mut out = BatchBuilder::new("t", 0, false, 8);
    let mut position = 1;
    assert_eq!(
        rr.fill(&mut out, &mut position, &mut 100, 2).unwrap(),
        Filled::Full
    );
    assert_eq!(offsets(&mut out), vec![1, 2]);
    assert_eq!(
        rr.fill(&mut out, &mut position, &mut 100, 2).unwrap(),
        Filled::Full
    );
    assert_eq!(offsets(&mut out), vec![3, 4]);
    assert_eq!(
        rr.fill(&mut out, &mut position, &mut 100, 2).unwrap(),
        Filled::Exhausted
    );
    assert_eq!((offsets(&mut out), position), (vec![6], 7));

    let mut rr = ResponseRecords::new(false);
    let buf = batch(&Spec {
        base: 0,
        deltas: &[0, 1, 2, 3],
        attributes: 0,
        producer: -1,
        headers: &[],
    });
    let n = buf.len();
    rr.reset(buf, 0..n, vec![]);
    let mut position = 0;
    assert_eq!(
        rr.fill(&mut out, &mut position, &mut 2, 10).unwrap(),
        Filled::End
    );
    assert_eq!((offsets(&mut out), position), (vec![0, 1], 2));
}

#[test]
fn aborted_transactions_and_markers_are_skipped_under_read_committed() {
    let tx = ATTR_TRANSACTIONAL;
    let mut buf = batch(&Spec {
        base: 0,
        deltas: &[0, 1],
        attributes: tx,
        producer: 7,
        headers: &[],
    });
    buf.extend(batch(&Spec {
        base: 2,
        deltas: &[0],
        attributes: tx | ATTR_CONTROL,
        producer: 7,
        headers: &[],
    }));
    buf.extend(batch(&Spec {
        base: 3,
        deltas: &[0, 1],
        attributes: tx,
        producer: 7,
        headers: &[],
    }));
    // a commit marker: the "producer" sign picks COMMIT in the test builder
    buf.extend(batch(&Spec {
        base: 5,
        deltas: &[0],
        attributes: tx | ATTR_CONTROL,
        producer: -7,
        headers: &[],
    }));
    let n = buf.len();
    for (committed, expected) in [(true, vec![3, 4]), (false, vec![0, 1, 3, 4])] {
        let mut rr = ResponseRecords::new(committed);
        rr.reset(buf.clone(), 0..n, vec![(0, 7)]);
        let mut out = BatchBuilder::new("t", 0, false, 8);
        let mut position = 0;
        assert_eq!(
            rr.fill(&mut out, &mut position, &mut 100, 100).unwrap(),
            Filled::Exhausted
        );
        assert_eq!((offsets(&mut out), position), (expected, 6));
    }
}

#[test]
fn fields_timestamps_and_headers_decode_as_librdkafka_gives_them() {
    let hv: &[u8] = b"1";
    let buf = batch(&Spec {
        base: 10,
        deltas: &[0, 1],
        attributes: 0,
        producer: -1,
        headers: &[("h", Some(hv)), ("n", None)],
    });
    let n = buf.len();
    let mut rr = ResponseRecords::new(false);
    rr.reset(buf.clone(), 0..n, vec![]);
    let mut out = BatchBuilder::new("t", 0, true, 8);
    let mut position = 10;
    rr.fill(&mut out, &mut position, &mut 100, 100).unwrap();
    let a = out.finish();
    let keys = a.column(0).as_binary::<i32>();
    assert!(keys.is_null(0));
    assert_eq!(keys.value(1), b"k11");
    assert_eq!(a.column(1).as_binary::<i32>().value(1), b"v11");
    let stamps = a
        .column(5)
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    assert_eq!(stamps.value(1), (1_000 + 10) * 1000);
    let headers = a.column(7).as_list::<i32>();
    assert_eq!(headers.value_offsets(), &[0, 2, 4]);
    assert!(headers.values().as_struct().column(1).is_null(1));

    let mut appended = buf;
    appended[21..23].copy_from_slice(&ATTR_LOG_APPEND_TIME.to_be_bytes());
    rr.reset(appended, 0..n, vec![]);
    let mut position = 10;
    rr.fill(&mut out, &mut position, &mut 100, 100).unwrap();
    let a = out.finish();
    let stamps = a
        .column(5)
        .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
    assert_eq!((stamps.value(0), stamps.value(1)), (2_000_000, 2_000_000));
    assert_eq!(
        a.column(6)
            .as_primitive::<arrow_array::types::Int32Type>()
            .value(0),
        1
    );
}

/// `b` as written by the leader of `epoch` (the batch header's partitionLeaderEpoch).
fn of_epoch(mut b: Vec<u8>, epoch: i32) -> Vec<u8> {
    b[12..16].copy_from_slice(&epoch.to_be_bytes());
    b
}

fn plain(base: i64, deltas: &[i64]) -> Vec<u8> {
    batch(&Spec {
        base,
        deltas,
        attributes: 0,
        producer: -1,
        headers: &[],
    })
}

/// Offsets 0..3 of leader 4, then 4..6 of leader 6, read as [1, `end`) planned in epoch
/// `end_epoch`: where the read ends, and the cut it reports.
fn read_planned_in(end: i64, end_epoch: i32) -> (Vec<i64>, i64, i64, Option<(i64, i32)>) {
    let mut buf = of_epoch(plain(0, &[0, 1, 2, 3]), 4);
    buf.extend(of_epoch(plain(4, &[0, 1, 2]), 6));
    let n = buf.len();
    let mut rr = ResponseRecords::new(false);
    rr.end_epoch = end_epoch;
    rr.reset(buf, 0..n, vec![]);
    let mut out = BatchBuilder::new("t", 0, false, 100);
    let (mut position, mut end) = (1, end);
    let filled = rr.fill(&mut out, &mut position, &mut end, 100).unwrap();
    assert_eq!(filled, Filled::End);
    (offsets(&mut out), position, end, rr.cut)
}

#[test]
fn a_later_leaders_batch_below_the_planned_end_ends_the_range_before_it() {
    // planned in epoch 4 up to 7: offsets 4.. were written after the plan (an unclean
    // election truncated the log at 4), so the read ends there and says so
    assert_eq!(read_planned_in(7, 4), (vec![1, 2, 3], 4, 4, Some((4, 6))));
    // planned in epoch 6 (the leader whose log it is), or with no epoch known: read whole
    assert_eq!(read_planned_in(7, 6), (vec![1, 2, 3, 4, 5, 6], 7, 7, None));
    assert_eq!(read_planned_in(7, -1), (vec![1, 2, 3, 4, 5, 6], 7, 7, None));
    // a later leader's records from the planned end on are the next batch's: no cut
    assert_eq!(read_planned_in(4, 4), (vec![1, 2, 3], 4, 4, None));
}
