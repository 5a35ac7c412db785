//! Avro values of the Confluent wire format (magic byte 0, 4-byte big-endian schema id, Avro
//! binary) decoded into the Arrow column the Python decoder gives (spark_app/formats/avro_values.py):
//! arrow-avro reads and resolves each writer schema to the reader schema, then `conform` gives
//! the column Spark's type mapping asks for (the `target` type Python hands over).
//!
//! This decoder never names poison: any value it cannot decode fails the whole batch
//! (`DecodeError::Fallback`), and Python decodes that batch itself and names the reasons.
//! An id without a writer schema yet is `DecodeError::UnknownId`: Python fetches it from the
//! registry (`add_writer`) and asks again. A reader schema whose column it cannot give
//! exactly is refused at construction (`WireAvro::new`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::UInt32Builder;
use arrow_array::cast::AsArray;
use arrow_array::{
    make_array, new_empty_array, Array, ArrayRef, BinaryArray, ListArray, MapArray, StructArray,
};
use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use arrow_schema::{DataType, FieldRef, Fields, TimeUnit};

const MAGIC_BYTE: u8 = 0;
const HEADER_SIZE: usize = 5;
const DECODER_BATCH: usize = 8192;

/// Why a batch was not decoded here.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    /// A value names a schema id this decoder has no writer schema for yet.
    UnknownId(u32),
    /// Some value does not decode here: Python decodes the batch and names the poison.
    Fallback(String),
}

/// The decoder of one reader schema, with the writer schemas (by id) met so far.
pub struct WireAvro {
    reader: String,
    target: DataType,
    writers: HashMap<u32, String>,
    /// ids whose writer schema arrow-avro cannot resolve to the reader schema
    refused: HashSet<u32>,
    decoder: Option<Decoder>,
}

impl WireAvro {
    /// `reader`: the reader schema's JSON; `target`: the column's Arrow type (Spark's
    /// mapping, as Python builds it). Err when the column cannot be given exactly.
    pub fn new(reader: &str, target: DataType) -> Result<Self, String> {
        let mut this = WireAvro {
            reader: reader.to_owned(),
            target,
            writers: HashMap::new(),
            refused: HashSet::new(),
            decoder: None,
        };
        // The reader as its own writer: what arrow-avro makes of the reader schema.
        this.writers.insert(0, reader.to_owned());
        let decoder = this.build().map_err(|e| format!("arrow-avro: {e}"))?;
        let empty = new_empty_array(&DataType::Struct(decoder.schema().fields().clone()));
        conform(&empty, &this.target)?;
        this.writers.clear();
        Ok(this)
    }

    pub fn knows(&self, id: u32) -> bool {
        self.writers.contains_key(&id) || self.refused.contains(&id)
    }

    /// The writer schema of `id`; false when it does not resolve to the reader schema here
    /// (its records then fall back to Python).
    pub fn add_writer(&mut self, id: u32, schema: &str) -> bool {
        self.writers.insert(id, schema.to_owned());
        self.decoder = None;
        if self.build().is_ok() {
            return true;
        }
        self.writers.remove(&id);
        self.refused.insert(id);
        false
    }

    /// `id` has no writer schema here (Python's registry answer was poison): its records
    /// fall back to Python, which names them.
    pub fn refuse(&mut self, id: u32) {
        self.refused.insert(id);
    }

    fn build(&self) -> Result<Decoder, String> {
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
        for (id, schema) in &self.writers {
            store
                .set(Fingerprint::Id(*id), AvroSchema::new(schema.clone()))
                .map_err(|e| e.to_string())?;
        }
        ReaderBuilder::new()
            .with_reader_schema(AvroSchema::new(self.reader.clone()))
            .with_writer_schema_store(store)
            .with_batch_size(DECODER_BATCH)
            .build_decoder()
            .map_err(|e| e.to_string())
    }

    /// `values` (wire-format values, null for a tombstone) as the column: a null row for a
    /// null value.
    pub fn decode(&mut self, values: &BinaryArray) -> Result<ArrayRef, DecodeError> {
        for value in values.iter().flatten() {
            self.check_header(value)?;
        }
        let result = self.decode_checked(values);
        if result.is_err() {
            self.decoder = None; // its state is mid-record: start afresh
        }
        result
    }

    fn check_header(&self, value: &[u8]) -> Result<(), DecodeError> {
        if value.len() < HEADER_SIZE || value[0] != MAGIC_BYTE {
            return Err(DecodeError::Fallback("not a wire-format header".into()));
        }
        let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
        if self.refused.contains(&id) {
            return Err(DecodeError::Fallback(format!(
                "schema id {id} resolves in Python only"
            )));
        }
        if !self.writers.contains_key(&id) {
            return Err(DecodeError::UnknownId(id));
        }
        Ok(())
    }

    fn decode_checked(&mut self, values: &BinaryArray) -> Result<ArrayRef, DecodeError> {
        if self.decoder.is_none() {
            self.decoder = Some(self.build().map_err(DecodeError::Fallback)?);
        }
        let decoder = self.decoder.as_mut().expect("built above");
        let bad = |e: &dyn std::fmt::Display| DecodeError::Fallback(e.to_string());
        let mut parts: Vec<ArrayRef> = Vec::new();
        let mut rows = 0usize;
        for value in values.iter().flatten() {
            let mut rest = value;
            while !rest.is_empty() {
                let used = decoder.decode(rest).map_err(|e| bad(&e))?;
                rest = &rest[used..];
                if decoder.batch_is_full() {
                    if let Some(batch) = decoder.flush().map_err(|e| bad(&e))? {
                        parts.push(Arc::new(StructArray::from(batch)));
                    }
                } else if used == 0 {
                    return Err(DecodeError::Fallback("a value ends inside a record".into()));
                }
            }
            rows += 1;
        }
        if let Some(batch) = decoder.flush().map_err(|e| bad(&e))? {
            parts.push(Arc::new(StructArray::from(batch)));
        }
        let mut conformed = Vec::with_capacity(parts.len());
        for part in &parts {
            conformed.push(conform(part, &self.target).map_err(DecodeError::Fallback)?);
        }
        let column = match conformed.len() {
            0 => new_empty_array(&self.target),
            1 => conformed.pop().expect("one part"),
            _ => {
                let refs: Vec<&dyn Array> = conformed.iter().map(|a| a.as_ref()).collect();
                arrow_select::concat::concat(&refs).map_err(|e| bad(&e))?
            }
        };
        // A value with bytes after its record reads as more records (or fails): the count
        // tells, and Python names it.
        if column.len() != rows {
            return Err(DecodeError::Fallback(format!(
                "{} records from {rows} values",
                column.len()
            )));
        }
        with_nulls(column, values)
    }
}

/// `column` (one row per non-null value) spread over `values`' rows, null where they are.
fn with_nulls(column: ArrayRef, values: &BinaryArray) -> Result<ArrayRef, DecodeError> {
    if values.null_count() == 0 {
        return Ok(column);
    }
    let mut indices = UInt32Builder::with_capacity(values.len());
    let mut next = 0u32;
    for i in 0..values.len() {
        if values.is_null(i) {
            indices.append_null();
        } else {
            indices.append_value(next);
            next += 1;
        }
    }
    arrow_select::take::take(column.as_ref(), &indices.finish(), None)
        .map_err(|e| DecodeError::Fallback(e.to_string()))
}

/// `array` (arrow-avro's shape) as `target` (Spark's), where they differ only in the names,
/// nullability and metadata of nested fields, or in ways with one exact answer: enums as
/// strings, timestamps in microseconds, times of day as their int/long, fixed as binary.
/// Anything else is an error: no guessing at a shape.
pub fn conform(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, String> {
    let from = array.data_type();
    if from == target {
        return Ok(array.clone());
    }
    let no = || format!("no exact Arrow mapping from {from} to {target}");
    match (from, target) {
        (DataType::Struct(_), DataType::Struct(to)) => conform_struct(array, to),
        (DataType::List(_), DataType::List(to)) => conform_list(array, to),
        (DataType::Map(_, _), DataType::Map(to, sorted)) => conform_map(array, to, *sorted),
        (DataType::Dictionary(_, value), DataType::Utf8) if **value == DataType::Utf8 => {
            cast(array, target)
        }
        (DataType::Timestamp(_, a), DataType::Timestamp(TimeUnit::Microsecond, b))
            if a.is_some() == b.is_some() =>
        {
            cast(array, target)
        }
        (DataType::Time32(TimeUnit::Millisecond), DataType::Int32)
        | (DataType::Time64(TimeUnit::Microsecond), DataType::Int64) => {
            let data = array.to_data().into_builder().data_type(target.clone());
            Ok(make_array(data.build().map_err(|e| e.to_string())?))
        }
        (DataType::FixedSizeBinary(_), DataType::Binary) => cast(array, target),
        _ => Err(no()),
    }
}

/// A struct conformed field by field: the same number of fields, of the same names.
fn conform_struct(array: &ArrayRef, to: &Fields) -> Result<ArrayRef, String> {
    let s = array.as_struct();
    let names = s.column_names();
    if names.len() != to.len() || names.iter().zip(to.iter()).any(|(n, f)| *n != f.name()) {
        let target = DataType::Struct(to.clone());
        return Err(format!(
            "no exact Arrow mapping from {} to {target}",
            array.data_type()
        ));
    }
    let children = s
        .columns()
        .iter()
        .zip(to.iter())
        .map(|(child, field)| conform(child, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    let out = StructArray::try_new(to.clone(), children, s.nulls().cloned())
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(out))
}

fn conform_list(array: &ArrayRef, to: &FieldRef) -> Result<ArrayRef, String> {
    let list = array.as_list::<i32>();
    let values = conform(list.values(), to.data_type())?;
    let offsets = list.offsets().clone();
    let out = ListArray::try_new(to.clone(), offsets, values, list.nulls().cloned())
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(out))
}

fn conform_map(array: &ArrayRef, to: &FieldRef, sorted: bool) -> Result<ArrayRef, String> {
    let map = array.as_map();
    let entries: ArrayRef = Arc::new(map.entries().clone());
    let entries = conform(&entries, to.data_type())?;
    let out = MapArray::try_new(
        to.clone(),
        map.offsets().clone(),
        entries.as_struct().clone(),
        map.nulls().cloned(),
        sorted,
    )
    .map_err(|e| e.to_string())?;
    Ok(Arc::new(out))
}

fn cast(array: &ArrayRef, target: &DataType) -> Result<ArrayRef, String> {
    // Not safe mode: a value that does not fit fails the batch (Python then decides).
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow_cast::cast_with_options(array, target, &options).map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
