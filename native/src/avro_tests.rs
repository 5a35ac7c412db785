//! Tests of the Avro decoder (avro.rs): its columns against the reader schema's Spark type.

use super::*;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_schema::{Field, Fields};

const READER: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
  {"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"tags","type":{"type":"array","items":"string"}}]}"#;

/// The reader's first three fields only, `id` an int: an older writer.
const OLDER: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"int"},
  {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
  {"name":"placed","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"tags","type":{"type":"array","items":"string"}}]}"#;

fn target() -> DataType {
    let element = Arc::new(Field::new("element", DataType::Utf8, false));
    DataType::Struct(Fields::from(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("status", DataType::Utf8, false),
        Field::new(
            "placed",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("note", DataType::Utf8, true),
        Field::new("tags", DataType::List(element), false),
    ]))
}

fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

fn header(id: u32) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out
}

/// A value of READER (`note` null when None), framed with `id`.
fn order(id: u32, n: i64, note: Option<&str>) -> Vec<u8> {
    let mut out = header(id);
    long(&mut out, n);
    long(&mut out, n % 2);
    long(&mut out, 1_700_000_000_000 + n);
    match note {
        None => long(&mut out, 0),
        Some(s) => {
            long(&mut out, 1);
            string(&mut out, s);
        }
    }
    long(&mut out, 1);
    string(&mut out, "t");
    long(&mut out, 0);
    out
}

/// A value of OLDER (no note), framed with `id`.
fn older(id: u32, n: i64) -> Vec<u8> {
    let mut out = header(id);
    long(&mut out, n);
    long(&mut out, 1);
    long(&mut out, 5);
    long(&mut out, 0);
    out
}

fn decoder() -> WireAvro {
    let mut d = WireAvro::new(READER, target()).unwrap();
    assert!(d.add_writer(7, READER));
    d
}

fn binary(values: Vec<Option<Vec<u8>>>) -> BinaryArray {
    BinaryArray::from_iter(values)
}

#[test]
fn values_become_sparks_column_with_null_rows_for_null_values() {
    let mut d = decoder();
    let values = binary(vec![
        Some(order(7, 1, Some("door"))),
        None,
        Some(order(7, 2, None)),
    ]);
    let column = d.decode(&values).unwrap();
    assert_eq!(column.data_type(), &target());
    let s = column.as_struct();
    assert!(s.is_null(1));
    assert_eq!(s.column(0).as_primitive::<Int64Type>().value(2), 2);
    assert_eq!(s.column(1).as_string::<i32>().value(0), "PAID");
    let placed = s.column(2).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(placed.value(0), 1_700_000_000_001_000);
    assert_eq!(s.column(3).as_string::<i32>().value(0), "door");
    assert!(s.column(3).is_null(2));
}

#[test]
fn an_older_writer_resolves_with_defaults_and_promotions_amid_reader_records() {
    let mut d = decoder();
    assert_eq!(
        d.decode(&binary(vec![Some(older(3, 9))])).unwrap_err(),
        DecodeError::UnknownId(3)
    );
    assert!(d.add_writer(3, OLDER));
    let values = binary(vec![
        Some(order(7, 1, Some("a"))),
        Some(older(3, 9)),
        Some(order(7, 2, None)),
    ]);
    let column = d.decode(&values).unwrap();
    let s = column.as_struct();
    assert_eq!(s.len(), 3);
    assert_eq!(s.column(0).as_primitive::<Int64Type>().values(), &[1, 9, 2]);
    assert!(s.column(3).is_null(1)); // the default
    assert_eq!(s.column(1).as_string::<i32>().value(1), "PAID");
}

#[test]
fn bad_values_fail_the_batch_and_the_decoder_reads_on() {
    let mut d = decoder();
    let mut trailing = order(7, 1, None);
    trailing.push(0);
    let mut truncated = order(7, 1, None);
    truncated.truncate(truncated.len() - 2);
    let mut magic = order(7, 1, None);
    magic[0] = 1;
    for bad in [trailing, truncated, magic, vec![0, 0, 0]] {
        let values = binary(vec![Some(order(7, 1, None)), Some(bad)]);
        assert!(matches!(d.decode(&values), Err(DecodeError::Fallback(_))));
    }
    let good = d.decode(&binary(vec![Some(order(7, 4, None))])).unwrap();
    assert_eq!(good.len(), 1);
}

#[test]
fn a_column_it_cannot_give_exactly_is_refused() {
    let uuid = r#"{"type":"record","name":"U","fields":[
      {"name":"u","type":{"type":"string","logicalType":"uuid"}}]}"#;
    let target = DataType::Struct(Fields::from(vec![Field::new("u", DataType::Utf8, false)]));
    assert!(WireAvro::new(uuid, target).is_err());
}

#[test]
fn a_writer_that_does_not_resolve_is_refused_and_its_records_fall_back() {
    let mut d = decoder();
    let other = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}"#;
    assert!(!d.add_writer(4, other));
    assert!(d.knows(4));
    let values = binary(vec![Some(header(4))]);
    assert!(matches!(d.decode(&values), Err(DecodeError::Fallback(_))));
}
