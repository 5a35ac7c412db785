//! Decompression of a record batch's records, Kafka's four codecs: gzip, Snappy (Java's xerial
//! framing or one raw block), LZ4 frames and zstd.

use std::io::Read;

use super::errors::DecodeError;
use super::wire::Reader;

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

pub fn inflate(codec: i16, data: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let err = |e: std::io::Error| DecodeError::Codec(e.to_string());
    match codec {
        1 => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(out)
                .map_err(err)?;
        }
        2 => snappy(data, out)?,
        3 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .read_to_end(out)
                .map_err(err)?;
        }
        4 => {
            zstd::stream::read::Decoder::new(data)
                .map_err(err)?
                .read_to_end(out)
                .map_err(err)?;
        }
        other => {
            return Err(DecodeError::Codec(format!(
                "unknown compression codec {other}"
            )))
        }
    }
    Ok(())
}

/// Snappy as Kafka's clients write it: Java's xerial framing (a header, then length-prefixed
/// blocks) or one raw block.
fn snappy(data: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let err = |e: snap::Error| DecodeError::Codec(e.to_string());
    let mut decoder = snap::raw::Decoder::new();
    if !data.starts_with(XERIAL_MAGIC) {
        out.extend_from_slice(&decoder.decompress_vec(data).map_err(err)?);
        return Ok(());
    }
    let mut r = Reader::new(&data[16..]);
    while r.remaining() > 0 {
        let block = r.nullable_bytes("snappy block")?.unwrap_or_default();
        out.extend_from_slice(&decoder.decompress_vec(block).map_err(err)?);
    }
    Ok(())
}
