//! Kafka's protocol primitives: big-endian integers, (nullable) strings and bytes with int16 or
//! int32 lengths (the non-flexible request and response versions), and the zig-zag varints of
//! record batches.

use std::fmt;

/// A response ended before a field it announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Short(pub &'static str);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "truncated Kafka response: no room for {}", self.0)
    }
}

/// Appends request fields to a buffer.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn string(&mut self, s: &str) -> &mut Self {
        self.i16(s.len() as i16);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.i32(b.len() as i32);
        self.0.extend_from_slice(b);
        self
    }
}

/// Reads response fields from a slice; every read checks the length first.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Short> {
        if self.remaining() < n {
            return Err(Short(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Short> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn i8(&mut self, what: &'static str) -> Result<i8, Short> {
        Ok(self.array::<1>(what)?[0] as i8)
    }
    pub fn i16(&mut self, what: &'static str) -> Result<i16, Short> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &'static str) -> Result<i32, Short> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &'static str) -> Result<i64, Short> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A string with an int16 length; -1 (null) reads as "".
    pub fn string(&mut self, what: &'static str) -> Result<&'a str, Short> {
        let n = self.i16(what)?;
        if n < 0 {
            return Ok("");
        }
        let s = self.take(n as usize, what)?;
        Ok(std::str::from_utf8(s).unwrap_or(""))
    }

    /// Bytes with an int32 length; -1 is null.
    pub fn nullable_bytes(&mut self, what: &'static str) -> Result<Option<&'a [u8]>, Short> {
        let n = self.i32(what)?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize, what)?))
    }

    /// An array's element count; -1 (null) reads as 0.
    pub fn count(&mut self, what: &'static str) -> Result<usize, Short> {
        Ok(self.i32(what)?.max(0) as usize)
    }

    /// An unsigned LEB128 varint (at most 10 bytes).
    #[inline]
    pub fn uvarint(&mut self, what: &'static str) -> Result<u64, Short> {
        let mut value = 0u64;
        let mut shift = 0;
        while shift < 64 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(Short(what));
            };
            self.pos += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
        Err(Short(what))
    }

    /// A zig-zag varint (Kafka's `varint` and `varlong`).
    #[inline]
    pub fn varint(&mut self, what: &'static str) -> Result<i64, Short> {
        let u = self.uvarint(what)?;
        Ok((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    /// Bytes with a zig-zag varint length; negative is null.
    #[inline]
    pub fn varint_bytes(&mut self, what: &'static str) -> Result<Option<&'a [u8]>, Short> {
        let n = self.varint(what)?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize, what)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_strings_round_trip() {
        let mut w = Writer::default();
        w.i8(-2)
            .i16(300)
            .i32(-70_000)
            .i64(1 << 40)
            .string("topic")
            .bytes(b"ab");
        let mut r = Reader::new(&w.0);
        assert_eq!(r.i8("a").unwrap(), -2);
        assert_eq!(r.i16("b").unwrap(), 300);
        assert_eq!(r.i32("c").unwrap(), -70_000);
        assert_eq!(r.i64("d").unwrap(), 1 << 40);
        assert_eq!(r.string("e").unwrap(), "topic");
        assert_eq!(r.nullable_bytes("f").unwrap(), Some(&b"ab"[..]));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.i8("past the end"), Err(Short("past the end")));
    }

    #[test]
    fn zigzag_varints_as_kafka_writes_them() {
        // 0 -> 0, -1 -> 1, 1 -> 2, 63 -> 126, -65 -> 129 (two bytes), 300 -> 600
        let mut r = Reader::new(&[0x00, 0x01, 0x02, 0x7e, 0x81, 0x01, 0xd8, 0x04]);
        let got: Vec<i64> = (0..6).map(|_| r.varint("v").unwrap()).collect();
        assert_eq!(got, vec![0, -1, 1, 63, -65, 300]);
        let mut r = Reader::new(&[0x01, 0x04, b'a', b'b']);
        assert_eq!(r.varint_bytes("null").unwrap(), None);
        assert_eq!(r.varint_bytes("ab").unwrap(), Some(&b"ab"[..]));
        assert_eq!(Reader::new(&[0x80]).varint("cut"), Err(Short("cut")));
    }
}
