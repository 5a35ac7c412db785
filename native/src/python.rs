//! The Python module `streamingjob_native` (pyo3): `RangeReader` over either engine (with
//! `auto`'s fall back from the fetcher to librdkafka), `AvroValues`, and the errors Python
//! maps to the source's own; batches cross as the Arrow C data interface.

use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::Array;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::consumer::{RangeReader as Librdkafka, ReadError};
use crate::fetch::{RangeReader as Fetcher, Settings};

create_exception!(streamingjob_native, ConfigError, PyException);
create_exception!(streamingjob_native, KafkaError, PyException);
create_exception!(streamingjob_native, OffsetsLost, PyException);
create_exception!(streamingjob_native, NoProgress, PyException);
create_exception!(streamingjob_native, LogTruncated, PyException);
create_exception!(streamingjob_native, UnsupportedBroker, PyException);
create_exception!(streamingjob_native, TopicDeleted, PyException);
create_exception!(streamingjob_native, AvroUnsupported, PyException);
create_exception!(streamingjob_native, UnknownSchemaId, PyException);
create_exception!(streamingjob_native, AvroFallback, PyException);

fn to_py(err: ReadError) -> PyErr {
    match err {
        ReadError::Config(msg) => ConfigError::new_err(msg),
        ReadError::Kafka { code, reason } => KafkaError::new_err((code, reason)),
        ReadError::Lost { position, low } => OffsetsLost::new_err((position, low)),
        ReadError::NoProgress { position } => NoProgress::new_err(position),
        ReadError::Truncated {
            position,
            divergence,
        } => LogTruncated::new_err((position, divergence)),
        ReadError::Unsupported(why) => UnsupportedBroker::new_err(why),
        ReadError::TopicGone { position } => TopicDeleted::new_err(position),
    }
}

/// One exported batch: Python imports the two structs (which moves them), then drops this.
#[pyclass(unsendable)]
struct Exported {
    array: Box<FFI_ArrowArray>,
    schema: Box<FFI_ArrowSchema>,
}

#[pymethods]
impl Exported {
    #[getter]
    fn array_address(&self) -> usize {
        &*self.array as *const FFI_ArrowArray as usize
    }

    #[getter]
    fn schema_address(&self) -> usize {
        &*self.schema as *const FFI_ArrowSchema as usize
    }
}

enum Inner {
    Fetch(Box<Fetcher>),
    Librdkafka(Box<Librdkafka>),
}

impl Inner {
    fn next_batch(&mut self) -> Result<Option<arrow_array::StructArray>, ReadError> {
        match self {
            Inner::Fetch(r) => r.next_batch(),
            Inner::Librdkafka(r) => r.next_batch(),
        }
    }

    fn assign(&mut self, offset: i64) -> Result<(), ReadError> {
        match self {
            Inner::Fetch(r) => r.assign(offset),
            Inner::Librdkafka(r) => r.assign(offset),
        }
    }

    fn cut(&self) -> Option<(i64, i32)> {
        match self {
            Inner::Fetch(r) => r.cut(),
            Inner::Librdkafka(r) => r.cut,
        }
    }
}

#[pyclass]
struct RangeReader {
    inner: Option<Inner>,
    #[pyo3(get)]
    engine: &'static str,
    /// why `engine="auto"` did not pick the fetcher ("" when it did)
    #[pyo3(get)]
    fallback_reason: String,
    /// with `engine="auto"` and the fetcher reading: what librdkafka needs to read on
    /// should a broker speak none of the fetcher's versions
    fallback: Option<(Vec<(String, String)>, crate::Range)>,
}

impl RangeReader {
    /// `auto`: the fetcher met a broker it cannot speak to; librdkafka reads on from the
    /// fetcher's position.
    fn fall_back(&mut self, py: Python<'_>, why: String) -> PyResult<()> {
        let (Some((config, range)), Some(Inner::Fetch(fetcher))) =
            (self.fallback.take(), self.inner.as_ref())
        else {
            return Err(to_py(ReadError::Unsupported(why)));
        };
        let range = crate::Range {
            start: fetcher.position(),
            start_epoch: fetcher.position_epoch(),
            end: fetcher.end(),
            ..range
        };
        let reader = py
            .detach(|| Librdkafka::open(&config, &range))
            .map_err(to_py)?;
        self.inner = Some(Inner::Librdkafka(Box::new(reader)));
        self.engine = "librdkafka";
        self.fallback_reason = why;
        Ok(())
    }

    fn next(&mut self, py: Python<'_>) -> PyResult<Option<arrow_array::StructArray>> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                return Ok(None);
            };
            match py.detach(|| inner.next_batch()) {
                Err(ReadError::Unsupported(why)) => self.fall_back(py, why)?,
                other => return other.map_err(to_py),
            }
        }
    }
}

#[pymethods]
impl RangeReader {
    /// `engine`: "fetch", "librdkafka", or "auto" (the fetcher when it understands every
    /// setting, librdkafka otherwise). "fetch" with a setting it lacks is a ConfigError.
    /// `start_epoch`: the leader epoch kept with `start` (-1: none), validated first;
    /// `end_epoch`: the one the plan's `end` came with (-1: none), a later leader's records
    /// below `end` end the read (`cut`).
    #[new]
    #[pyo3(signature = (
        config, topic, partition, start, end, include_headers, max_records,
        poll_timeout_ms, engine, start_epoch = -1, end_epoch = -1
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: Vec<(String, String)>,
        topic: String,
        partition: i32,
        start: i64,
        end: i64,
        include_headers: bool,
        max_records: usize,
        poll_timeout_ms: u64,
        engine: &str,
        start_epoch: i32,
        end_epoch: i32,
    ) -> PyResult<Self> {
        let range = crate::Range {
            topic,
            partition,
            start,
            start_epoch: start_epoch.max(-1),
            end,
            end_epoch: end_epoch.max(-1),
            include_headers,
            max_records: max_records.max(1),
            poll_timeout_ms,
        };
        // why the fetcher does not read this range ("" when librdkafka was asked for)
        let fallback_reason = match engine {
            "librdkafka" => String::new(),
            "fetch" | "auto" => match Settings::parse(&config) {
                Ok(settings) => {
                    let reader = Fetcher::open(settings, &range);
                    return Ok(RangeReader {
                        inner: Some(Inner::Fetch(Box::new(reader))),
                        engine: "fetch",
                        fallback_reason: String::new(),
                        fallback: (engine == "auto").then_some((config, range)),
                    });
                }
                Err(why) if engine == "fetch" => return Err(ConfigError::new_err(why)),
                Err(why) => why,
            },
            other => return Err(ConfigError::new_err(format!("unknown engine {other:?}"))),
        };
        let reader = py
            .detach(|| Librdkafka::open(&config, &range))
            .map_err(to_py)?;
        Ok(RangeReader {
            inner: Some(Inner::Librdkafka(Box::new(reader))),
            engine: "librdkafka",
            fallback_reason,
            fallback: None,
        })
    }

    /// The next batch as an `Exported`, or None once `[start, end)` is read.
    fn next_batch(&mut self, py: Python<'_>) -> PyResult<Option<Exported>> {
        let Some(batch) = self.next(py)? else {
            return Ok(None);
        };
        let (array, schema) = to_ffi(&batch.to_data())
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        Ok(Some(Exported {
            array: Box::new(array),
            schema: Box::new(schema),
        }))
    }

    /// Where a later leader's record ended the range before its planned end, and its
    /// leader epoch (None: it was not).
    #[getter]
    fn cut(&self) -> Option<(i64, i32)> {
        self.inner.as_ref().and_then(Inner::cut)
    }

    /// Continues at `offset` after `OffsetsLost` (failOnDataLoss=false).
    fn skip_to(&mut self, py: Python<'_>, offset: i64) -> PyResult<()> {
        match self.inner.as_mut() {
            Some(inner) => py.detach(|| inner.assign(offset)).map_err(to_py),
            None => Ok(()),
        }
    }

    /// Closes the consumer (leaves the group, stops fetching); idempotent.
    fn close(&mut self, py: Python<'_>) {
        if let Some(inner) = self.inner.take() {
            py.detach(move || drop(inner));
        }
    }
}

/// Avro values of the Confluent wire format, of one reader schema, decoded into the
/// column Python's decoder gives (src/avro.rs). Arrow crosses the C data interface both
/// ways: Python's `_export_to_c` fills structs this side allocates.
#[pyclass(unsendable)]
struct AvroValues {
    inner: crate::avro::WireAvro,
}

#[pymethods]
impl AvroValues {
    /// `export_type`: the column type's `_export_to_c`. AvroUnsupported when the column
    /// cannot be given exactly (Python decodes that reader schema's values).
    #[new]
    fn new(reader: &str, export_type: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut schema = FFI_ArrowSchema::empty();
        export_type.call1((&mut schema as *mut FFI_ArrowSchema as usize,))?;
        let target = arrow_schema::DataType::try_from(&schema)
            .map_err(|e| AvroUnsupported::new_err(e.to_string()))?;
        let inner = crate::avro::WireAvro::new(reader, target).map_err(AvroUnsupported::new_err)?;
        Ok(AvroValues { inner })
    }

    fn knows(&self, schema_id: u32) -> bool {
        self.inner.knows(schema_id)
    }

    /// False when the writer schema does not resolve here (its records: Python).
    fn add_writer(&mut self, schema_id: u32, schema: &str) -> bool {
        self.inner.add_writer(schema_id, schema)
    }

    /// No writer schema for `schema_id` (Python names its records' poison).
    fn refuse(&mut self, schema_id: u32) {
        self.inner.refuse(schema_id)
    }

    /// `export_values`: the binary value column's `_export_to_c`. UnknownSchemaId(id)
    /// asks for a writer schema; AvroFallback: Python decodes this batch.
    fn decode(&mut self, py: Python<'_>, export_values: &Bound<'_, PyAny>) -> PyResult<Exported> {
        let mut array = FFI_ArrowArray::empty();
        let mut schema = FFI_ArrowSchema::empty();
        export_values.call1((
            &mut array as *mut FFI_ArrowArray as usize,
            &mut schema as *mut FFI_ArrowSchema as usize,
        ))?;
        // SAFETY: pyarrow filled both structs with a valid array and its type.
        let data = unsafe { arrow_array::ffi::from_ffi(array, &schema) }
            .map_err(|e| AvroFallback::new_err(e.to_string()))?;
        if data.data_type() != &arrow_schema::DataType::Binary {
            return Err(AvroFallback::new_err(format!(
                "values are {}",
                data.data_type()
            )));
        }
        let values = arrow_array::BinaryArray::from(data);
        let inner = &mut self.inner;
        let column = py.detach(|| inner.decode(&values)).map_err(|e| match e {
            crate::avro::DecodeError::UnknownId(id) => UnknownSchemaId::new_err(id),
            crate::avro::DecodeError::Fallback(why) => AvroFallback::new_err(why),
        })?;
        let (array, schema) = to_ffi(&column.to_data())
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        Ok(Exported {
            array: Box::new(array),
            schema: Box::new(schema),
        })
    }
}

/// The version of each request the fetch engine speaks with the broker at `address`
/// (negotiated through ApiVersions), or UnsupportedBroker naming the broker's ranges.
#[pyfunction]
fn negotiated_versions(
    py: Python<'_>,
    config: Vec<(String, String)>,
    address: String,
) -> PyResult<Vec<(&'static str, i16)>> {
    let settings = Settings::parse(&config).map_err(ConfigError::new_err)?;
    let conn = py.detach(|| crate::fetch::conn::Conn::open(&settings, &address));
    let v = match conn {
        Ok(conn) => conn.versions,
        Err(crate::fetch::conn::ConnError::Unsupported(why)) => {
            return Err(UnsupportedBroker::new_err(why))
        }
        Err(e) => return Err(KafkaError::new_err((-195, e.to_string()))), // _TRANSPORT
    };
    Ok(vec![
        ("Metadata", v.metadata),
        ("Fetch", v.fetch),
        ("ListOffsets", v.list_offsets),
        ("OffsetsForLeaderEpoch", v.offsets_for_leader_epoch),
    ])
}

/// librdkafka's version string, e.g. "2.12.1".
#[pyfunction]
fn librdkafka_version() -> String {
    let v = unsafe { std::ffi::CStr::from_ptr(rdkafka_sys::rd_kafka_version_str()) };
    v.to_string_lossy().into_owned()
}

#[pymodule]
fn streamingjob_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<RangeReader>()?;
    m.add_class::<Exported>()?;
    m.add_class::<AvroValues>()?;
    m.add_function(wrap_pyfunction!(librdkafka_version, m)?)?;
    m.add_function(wrap_pyfunction!(negotiated_versions, m)?)?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("KafkaError", py.get_type::<KafkaError>())?;
    m.add("OffsetsLost", py.get_type::<OffsetsLost>())?;
    m.add("NoProgress", py.get_type::<NoProgress>())?;
    m.add("LogTruncated", py.get_type::<LogTruncated>())?;
    m.add("UnsupportedBroker", py.get_type::<UnsupportedBroker>())?;
    m.add("TopicDeleted", py.get_type::<TopicDeleted>())?;
    m.add("AvroUnsupported", py.get_type::<AvroUnsupported>())?;
    m.add("UnknownSchemaId", py.get_type::<UnknownSchemaId>())?;
    m.add("AvroFallback", py.get_type::<AvroFallback>())?;
    Ok(())
}
