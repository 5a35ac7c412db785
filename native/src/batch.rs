//! Arrow columns of one record batch, with exactly the schema Spark checks
//! (`to_arrow_schema` of the source's Spark schema, timezone UTC): every field nullable,
//! `timestamp[us, tz=UTC]`, `int32` partition and timestamp type, and headers as
//! `list<element: struct<key: string, value: binary>>`.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, TimeUnit};

/// Kafka's timestamp types as librdkafka numbers them.
pub const TS_NOT_AVAILABLE: i32 = 0;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_list_field() -> Arc<Field> {
    Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        true,
    ))
}

/// The fields of a batch, in Spark's column order.
pub fn fields(include_headers: bool) -> Fields {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if include_headers {
        fields.push(Field::new(
            "headers",
            DataType::List(header_list_field()),
            true,
        ));
    }
    Fields::from(fields)
}

/// One record as the reader sees it; slices borrow librdkafka's message.
pub struct Record<'a> {
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// librdkafka's timestamp type: 0 not available, 1 CreateTime, 2 LogAppendTime.
    pub timestamp_type: i32,
    pub timestamp_ms: i64,
}

/// Columns of the next batch. Constant columns (topic, partition) are built at the end.
pub struct BatchBuilder {
    topic: String,
    partition: i32,
    include_headers: bool,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    offsets: Vec<i64>,
    micros: Vec<i64>,
    micros_valid: NullBufferBuilder,
    types: Vec<i32>,
    header_offsets: Vec<i32>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
}

impl BatchBuilder {
    pub fn new(topic: &str, partition: i32, include_headers: bool, capacity: usize) -> Self {
        BatchBuilder {
            topic: topic.to_owned(),
            partition,
            include_headers,
            keys: BinaryBuilder::with_capacity(capacity, 0),
            values: BinaryBuilder::with_capacity(capacity, capacity * 64),
            offsets: Vec::with_capacity(capacity),
            micros: Vec::with_capacity(capacity),
            micros_valid: NullBufferBuilder::new(capacity),
            types: Vec::with_capacity(capacity),
            header_offsets: vec![0],
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Adds a record; its headers follow through `add_header` before the next record.
    pub fn add(&mut self, record: &Record) {
        self.keys.append_option(record.key);
        self.values.append_option(record.value);
        self.offsets.push(record.offset);
        if record.timestamp_type == TS_NOT_AVAILABLE {
            self.micros.push(0);
            self.micros_valid.append_null();
        } else {
            self.micros.push(record.timestamp_ms.saturating_mul(1000));
            self.micros_valid.append_non_null();
        }
        // librdkafka 0, 1, 2 -> Spark -1 (n/a), 0 (CreateTime), 1 (LogAppendTime)
        self.types.push(record.timestamp_type - 1);
        if self.include_headers {
            let last = *self.header_offsets.last().unwrap_or(&0);
            self.header_offsets.push(last);
        }
    }

    /// A header of the record added last (only when headers are included).
    pub fn add_header(&mut self, key: &str, value: Option<&[u8]>) {
        self.header_keys.append_value(key);
        self.header_values.append_option(value);
        if let Some(last) = self.header_offsets.last_mut() {
            *last += 1;
        }
    }

    pub fn include_headers(&self) -> bool {
        self.include_headers
    }

    /// The batch as one struct array (a record batch on the C data interface); starts anew.
    pub fn finish(&mut self) -> StructArray {
        let n = self.offsets.len();
        let topic = StringArray::from_iter_values(std::iter::repeat_n(self.topic.as_str(), n));
        let stamps = TimestampMicrosecondArray::new(
            ScalarBuffer::from(std::mem::take(&mut self.micros)),
            self.micros_valid.finish(),
        )
        .with_timezone("UTC");
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(topic),
            Arc::new(Int32Array::from_value(self.partition, n)),
            Arc::new(Int64Array::from(std::mem::take(&mut self.offsets))),
            Arc::new(stamps),
            Arc::new(Int32Array::from(std::mem::take(&mut self.types))),
        ];
        if self.include_headers {
            let entries = StructArray::new(
                header_fields(),
                vec![
                    Arc::new(self.header_keys.finish()) as ArrayRef,
                    Arc::new(self.header_values.finish()) as ArrayRef,
                ],
                None,
            );
            let offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
            let list = ListArray::new(
                header_list_field(),
                OffsetBuffer::new(ScalarBuffer::from(offsets)),
                Arc::new(entries),
                None,
            );
            columns.push(Arc::new(list));
        }
        let capacity = n.max(1024);
        self.offsets.reserve(capacity);
        self.micros.reserve(capacity);
        self.types.reserve(capacity);
        StructArray::new(fields(self.include_headers), columns, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::{Array, BinaryArray};

    fn record(offset: i64, key: Option<&'static [u8]>, kind: i32) -> Record<'static> {
        Record {
            offset,
            key,
            value: Some(b"v"),
            timestamp_type: kind,
            timestamp_ms: 1_700_000_000_000 + offset,
        }
    }

    #[test]
    fn columns_follow_sparks_schema_and_mapping() {
        let mut b = BatchBuilder::new("orders", 3, false, 4);
        b.add(&record(10, Some(b"k"), 1));
        b.add(&record(12, None, 2));
        b.add(&record(13, Some(b""), 0));
        let batch = b.finish();
        assert_eq!(batch.fields(), &fields(false));
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        assert_eq!(keys.value(0), b"k");
        assert!(keys.is_null(1));
        assert_eq!(keys.value(2), b"");
        assert_eq!(batch.column(2).as_string::<i32>().value(2), "orders");
        assert_eq!(
            batch.column(3).as_primitive::<Int32Type>().values(),
            &[3, 3, 3]
        );
        assert_eq!(
            batch.column(4).as_primitive::<Int64Type>().values(),
            &[10, 12, 13]
        );
        let stamps = batch.column(5).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(stamps.value(0), 1_700_000_000_010_000);
        assert!(stamps.is_null(2));
        assert_eq!(
            batch.column(6).as_primitive::<Int32Type>().values(),
            &[0, 1, -1]
        );
    }

    #[test]
    fn headers_are_lists_with_null_values_and_empty_lists_for_none() {
        let mut b = BatchBuilder::new("t", 0, true, 2);
        b.add(&record(0, None, 1));
        b.add_header("h", Some(b"1"));
        b.add_header("n", None);
        b.add(&record(1, None, 1));
        let batch = b.finish();
        assert_eq!(batch.fields(), &fields(true));
        let lists = batch.column(7).as_list::<i32>();
        assert_eq!(lists.value_offsets(), &[0, 2, 2]);
        assert!(!lists.is_null(1));
        let entries = lists.values().as_struct();
        assert_eq!(entries.column(0).as_string::<i32>().value(1), "n");
        assert!(entries.column(1).is_null(1));
    }

    #[test]
    fn finish_starts_a_new_batch() {
        let mut b = BatchBuilder::new("t", 0, true, 2);
        b.add(&record(0, None, 1));
        b.add_header("h", None);
        assert_eq!(b.finish().len(), 1);
        assert!(b.is_empty());
        b.add(&record(1, None, 1));
        let second = b.finish();
        assert_eq!(second.len(), 1);
        assert_eq!(second.column(7).as_list::<i32>().value_offsets(), &[0, 0]);
        assert_eq!(second.column(4).as_primitive::<Int64Type>().values(), &[1]);
    }
}
