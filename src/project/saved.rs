//! The saved form of a view: what `project --save` writes and `project --from` reads.
//!
//! A saved view is the [`Document`](super::Document) (schema, revision, filter, limits, counts,
//! view) in a compact binary encoding, so that bringing it up to date costs little beside the
//! new events: the JSON document of a large view is mostly member names and indentation, and
//! reading it back is mostly parsing them.
//!
//! # Layout (saved form v2)
//!
//! ```text
//! action-ledger.project.saved.v2\n   the version line (ASCII)
//! <body>                             the document, encoded as below
//! <crc32>                            CRC-32 (IEEE) of the body, 4 bytes little-endian
//! ```
//!
//! The body follows the document's Rust types in declaration order (the serde data model, with
//! no member names): an unsigned integer is a LEB128 varint, a signed one a zigzag varint, a
//! boolean one byte (0 or 1), a string its length (varint) then its UTF-8 bytes, an option a
//! tag byte (0 none, 1 some) then the value, a sequence or map its length (varint) then its
//! items (a map's in key order), a struct its members in order without names. The first
//! member is the `schema` string, so a file of another view is named before the rest is read.
//!
//! Saved form v1 is the JSON document itself (`project --json`, as `--save` wrote it before
//! v2); `--from` still reads it. A file whose version line names another version, whose
//! checksum does not match, or whose body does not decode is refused with
//! [`Error::Saved`](super::Error::Saved) naming the file, the field and the rule, and nothing
//! is written: fold the view again without `--from`. As members carry no names, any change to
//! the encoding or to the types it follows (a member added, removed, moved or retyped, even one
//! the JSON schema allows within its version) raises the version line.

use std::fmt;
use std::io::Write;

use serde::de::{self, DeserializeSeed, IntoDeserializer as _, Visitor};
use serde::ser::{self, Serialize};

/// What every version line starts with.
pub const PREFIX: &[u8] = b"action-ledger.project.saved.";

/// The version line of the form this module writes.
pub const VERSION_LINE: &[u8] = b"action-ledger.project.saved.v2\n";

/// Why a saved file was refused: the field (a member path in the document, or a part of the
/// file) and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Where: `version line`, `checksum`, or the document's member path (`view.lanes`).
    pub field: String,
    /// The rule broken.
    pub rule: String,
}

impl Refusal {
    fn new(field: &str, rule: impl Into<String>) -> Self {
        Refusal {
            field: field.to_owned(),
            rule: rule.into(),
        }
    }
}

/// Writes `value` in the saved form to `out`.
///
/// # Errors
/// The writer's.
pub fn write<T: Serialize>(value: &T, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(VERSION_LINE)?;
    let mut enc = Encoder {
        buf: Vec::with_capacity(BUF),
        crc: crc32fast::Hasher::new(),
        out,
    };
    value.serialize(&mut enc).map_err(|e| match e {
        EncodeError::Io(e) => e,
        EncodeError::Unsupported(what) => std::io::Error::other(format!(
            "the saved form cannot encode {what} (a view type the form does not follow)"
        )),
    })?;
    enc.flush()?;
    let crc = enc.crc.finalize();
    out.write_all(&crc.to_le_bytes())
}

/// Whether `bytes` start as a saved form of this module's kind (any version).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.starts_with(PREFIX)
}

/// Reads the body of a saved file (after checking its version line and checksum) as a `T`.
/// `T` may be a prefix of the document's members (its `schema` alone, say).
///
/// # Errors
/// A [`Refusal`] naming the field and the rule.
pub fn read<T: de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
    let body = body(bytes)?;
    let mut dec = Decoder {
        input: body,
        path: Vec::new(),
    };
    T::deserialize(&mut dec).map_err(|e| Refusal::new(&dec.field(), e.0))
}

/// Reads a whole document: as [`read`], and every byte of the body must be read.
///
/// # Errors
/// As [`read`]; a body with bytes after the document.
pub fn read_all<T: de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
    let body = body(bytes)?;
    let mut dec = Decoder {
        input: body,
        path: Vec::new(),
    };
    let value = T::deserialize(&mut dec).map_err(|e| Refusal::new(&dec.field(), e.0))?;
    if !dec.input.is_empty() {
        return Err(Refusal::new(
            "body",
            format!("{} byte(s) after the document", dec.input.len()),
        ));
    }
    Ok(value)
}

/// The body of a saved file, its version line and checksum checked.
fn body(bytes: &[u8]) -> Result<&[u8], Refusal> {
    let line_end = bytes
        .iter()
        .take(64)
        .position(|&b| b == b'\n')
        .ok_or_else(|| Refusal::new("version line", "no version line ending in a newline"))?;
    let line = &bytes[..=line_end];
    if line != VERSION_LINE {
        let shown = String::from_utf8_lossy(&line[PREFIX.len().min(line.len())..line_end]);
        return Err(Refusal::new(
            "version line",
            format!(
                "saved form {shown:?} is not one this version reads (v2, or the JSON document)"
            ),
        ));
    }
    let rest = &bytes[line.len()..];
    let Some(at) = rest.len().checked_sub(4) else {
        return Err(Refusal::new("checksum", "the file is cut short"));
    };
    let (body, crc) = rest.split_at(at);
    let want = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    if crc32fast::hash(body) != want {
        return Err(Refusal::new(
            "checksum",
            "the CRC-32 of the body does not match: the file is damaged or cut short",
        ));
    }
    Ok(body)
}

const BUF: usize = 1 << 16;

/// Encodes into a buffer, flushed to `out` (and into the checksum) when full.
struct Encoder<'w> {
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    out: &'w mut dyn Write,
}

impl Encoder<'_> {
    fn flush(&mut self) -> std::io::Result<()> {
        self.crc.update(&self.buf);
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    fn bytes(&mut self, b: &[u8]) -> Result<(), EncodeError> {
        if self.buf.len() + b.len() > BUF {
            self.flush().map_err(EncodeError::Io)?;
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }

    fn varint(&mut self, mut n: u64) -> Result<(), EncodeError> {
        let mut tmp = [0u8; 10];
        let mut i = 0;
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                tmp[i] = low;
                i += 1;
                break;
            }
            tmp[i] = low | 0x80;
            i += 1;
        }
        self.bytes(&tmp[..i])
    }

    fn signed(&mut self, n: i64) -> Result<(), EncodeError> {
        self.varint(((n << 1) ^ (n >> 63)) as u64)
    }

    fn len(&mut self, len: Option<usize>) -> Result<(), EncodeError> {
        let len = len.ok_or(EncodeError::Unsupported("a sequence of unknown length"))?;
        self.varint(len as u64)
    }
}

#[derive(Debug)]
enum EncodeError {
    Io(std::io::Error),
    Unsupported(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::Io(e) => e.fmt(f),
            EncodeError::Unsupported(what) => write!(f, "cannot encode {what}"),
        }
    }
}

impl std::error::Error for EncodeError {}

impl ser::Error for EncodeError {
    fn custom<T: fmt::Display>(_msg: T) -> Self {
        EncodeError::Unsupported("a value its type refused to serialize")
    }
}

impl<'a, 'w> ser::Serializer for &'a mut Encoder<'w> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.bytes(&[u8::from(v)])
    }
    fn serialize_i8(self, v: i8) -> Result<(), EncodeError> {
        self.signed(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<(), EncodeError> {
        self.signed(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<(), EncodeError> {
        self.signed(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<(), EncodeError> {
        self.signed(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), EncodeError> {
        self.varint(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<(), EncodeError> {
        self.varint(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<(), EncodeError> {
        self.varint(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<(), EncodeError> {
        self.varint(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), EncodeError> {
        self.bytes(&v.to_le_bytes())
    }
    fn serialize_f64(self, v: f64) -> Result<(), EncodeError> {
        self.bytes(&v.to_le_bytes())
    }
    fn serialize_char(self, v: char) -> Result<(), EncodeError> {
        self.varint(u64::from(u32::from(v)))
    }
    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        self.varint(v.len() as u64)?;
        self.bytes(v.as_bytes())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), EncodeError> {
        self.varint(v.len() as u64)?;
        self.bytes(v)
    }
    fn serialize_none(self) -> Result<(), EncodeError> {
        self.bytes(&[0])
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), EncodeError> {
        self.bytes(&[1])?;
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), EncodeError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), EncodeError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
    ) -> Result<(), EncodeError> {
        self.varint(index.into())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.varint(index.into())?;
        value.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, EncodeError> {
        self.len(len)?;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, EncodeError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, EncodeError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, EncodeError> {
        self.varint(index.into())?;
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, EncodeError> {
        self.len(len)?;
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, EncodeError> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, EncodeError> {
        self.varint(index.into())?;
        Ok(self)
    }
}

macro_rules! compound {
    ($trait:ident, $method:ident $(, $key:ident)?) => {
        impl ser::$trait for &mut Encoder<'_> {
            type Ok = ();
            type Error = EncodeError;
            fn $method<T: ?Sized + Serialize>(
                &mut self,
                $($key: &'static str,)?
                value: &T,
            ) -> Result<(), EncodeError> {
                $(let _ = $key;)?
                value.serialize(&mut **self)
            }
            fn end(self) -> Result<(), EncodeError> {
                Ok(())
            }
        }
    };
}

compound!(SerializeSeq, serialize_element);
compound!(SerializeTuple, serialize_element);
compound!(SerializeTupleStruct, serialize_field);
compound!(SerializeTupleVariant, serialize_field);
compound!(SerializeStruct, serialize_field, key);
compound!(SerializeStructVariant, serialize_field, key);

impl ser::SerializeMap for &mut Encoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), EncodeError> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), EncodeError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), EncodeError> {
        Ok(())
    }
}

/// A decoding error: the rule broken (the field is the decoder's path when it happened).
#[derive(Debug)]
struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError(msg.to_string())
    }
}

/// Decodes from the body; `path` is the struct members entered, left as it was at an error.
struct Decoder<'b> {
    input: &'b [u8],
    path: Vec<&'static str>,
}

impl<'b> Decoder<'b> {
    fn field(&self) -> String {
        if self.path.is_empty() {
            "body".to_owned()
        } else {
            self.path.join(".")
        }
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8], DecodeError> {
        if n > self.input.len() {
            return Err(DecodeError("the body ends inside a value".into()));
        }
        let (head, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(head)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut n: u64 = 0;
        for i in 0..10 {
            let &[b] = self.take(1)? else {
                unreachable!("one byte")
            };
            let low = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(DecodeError("an integer over 64 bits".into()));
            }
            n |= low << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(DecodeError("an integer over 64 bits".into()))
    }

    fn signed(&mut self) -> Result<i64, DecodeError> {
        let n = self.varint()?;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        // Every item takes at least one byte: a longer length is a damaged file, not a reason
        // to reserve memory for it.
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.input.len())
            .ok_or_else(|| DecodeError(format!("a length of {n} past the end of the body")))
    }

    fn str(&mut self) -> Result<&'b str, DecodeError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?)
            .map_err(|e| DecodeError(format!("a string that is not UTF-8: {e}")))
    }

    fn tag(&mut self, what: &str) -> Result<bool, DecodeError> {
        match self.take(1)? {
            [0] => Ok(false),
            [1] => Ok(true),
            [b] => Err(DecodeError(format!("{what} is 0 or 1, not {b}"))),
            _ => unreachable!("one byte"),
        }
    }
}

fn narrow<T: TryFrom<i128>>(n: impl Into<i128>) -> Result<T, DecodeError> {
    let n = n.into();
    T::try_from(n).map_err(|_| DecodeError(format!("{n} is out of the member's range")))
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DecodeError> {
        Err(DecodeError(
            "a member of no fixed type (the saved form is not self-describing)".into(),
        ))
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_bool(self.tag("a boolean")?)
    }
    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_i8(narrow(self.signed()?)?)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_i16(narrow(self.signed()?)?)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_i32(narrow(self.signed()?)?)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_i64(self.signed()?)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_u8(narrow(self.varint()?)?)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_u16(narrow(self.varint()?)?)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_u32(narrow(self.varint()?)?)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_u64(self.varint()?)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let b = self.take(4)?;
        v.visit_f32(f32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let b = self.take(8)?;
        v.visit_f64(f64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let n: u32 = narrow(self.varint()?)?;
        v.visit_char(char::from_u32(n).ok_or_else(|| DecodeError(format!("{n} is not a char")))?)
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_borrowed_str(self.str()?)
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_borrowed_str(self.str()?)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let n = self.len()?;
        v.visit_borrowed_bytes(self.take(n)?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        self.deserialize_bytes(v)
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        if self.tag("an option's tag")? {
            v.visit_some(self)
        } else {
            v.visit_none()
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        v.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        v.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let len = self.len()?;
        v.visit_seq(Items {
            de: self,
            left: len,
            fields: None,
        })
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, DecodeError> {
        v.visit_seq(Items {
            de: self,
            left: len,
            fields: None,
        })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_tuple(len, v)
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        let len = self.len()?;
        v.visit_map(Items {
            de: self,
            left: len,
            fields: None,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DecodeError> {
        v.visit_seq(Items {
            de: self,
            left: fields.len(),
            fields: Some(fields),
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DecodeError> {
        v.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value, DecodeError> {
        Err(DecodeError(
            "an identifier (the saved form has none)".into(),
        ))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        self.deserialize_any(v)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The items of a sequence, map or struct (`fields`: a struct's member names, for the path).
struct Items<'a, 'de> {
    de: &'a mut Decoder<'de>,
    left: usize,
    fields: Option<&'static [&'static str]>,
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = DecodeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        if self.left == 0 {
            return Ok(None);
        }
        let member = self.fields.map(|f| f[f.len() - self.left]);
        self.left -= 1;
        if let Some(m) = member {
            self.de.path.push(m);
        }
        let value = seed.deserialize(&mut *self.de)?;
        if member.is_some() {
            self.de.path.pop();
        }
        Ok(Some(value))
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Items<'_, 'de> {
    type Error = DecodeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        seed.deserialize(&mut *self.de)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = DecodeError;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), DecodeError> {
        let index: u32 = narrow(self.varint()?)?;
        let value = seed.deserialize(index.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = DecodeError;
    fn unit_variant(self) -> Result<(), DecodeError> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, DecodeError> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_tuple(self, len, v)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DecodeError> {
        de::Deserializer::deserialize_struct(self, "", fields, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        name: String,
        n: u64,
        d: Option<i64>,
        flag: bool,
        items: Vec<String>,
        map: BTreeMap<String, Inner>,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Inner {
        at: String,
        seq: u32,
    }

    fn sample() -> Sample {
        Sample {
            name: "status".into(),
            n: u64::MAX,
            d: Some(-390_000),
            flag: true,
            items: vec!["a".into(), "é".into()],
            map: BTreeMap::from([(
                "k".into(),
                Inner {
                    at: "2026-03-10T10:00:00.000Z".into(),
                    seq: 7,
                },
            )]),
        }
    }

    fn encode(s: &Sample) -> Vec<u8> {
        let mut out = Vec::new();
        write(s, &mut out).unwrap();
        out
    }

    /// What is written reads back the same, and starts with the version line.
    #[test]
    fn round_trip() {
        let bytes = encode(&sample());
        assert!(bytes.starts_with(VERSION_LINE) && is_binary(&bytes));
        assert_eq!(read_all::<Sample>(&bytes).unwrap(), sample());
    }

    /// Another version, a damaged or cut body, and a body that decodes wrong are refused,
    /// each naming the field and the rule.
    #[test]
    fn refusals_name_the_field_and_the_rule() {
        let bytes = encode(&sample());
        let v3 = [b"action-ledger.project.saved.v3\n".as_slice(), &bytes[31..]].concat();
        let r = read_all::<Sample>(&v3).unwrap_err();
        assert_eq!(r.field, "version line");
        assert!(
            r.rule.contains("\"v3\" is not one this version reads"),
            "{r:?}"
        );

        let mut damaged = bytes.clone();
        damaged[40] ^= 1;
        let r = read_all::<Sample>(&damaged).unwrap_err();
        assert_eq!(r.field, "checksum");
        let r = read_all::<Sample>(&bytes[..bytes.len() - 9]).unwrap_err();
        assert_eq!(r.field, "checksum");
        let r = read_all::<Sample>(&bytes[..20]).unwrap_err();
        assert_eq!(r.field, "version line");

        // A body with a consistent checksum whose `flag` is 2: the member is named.
        let mut body = bytes[VERSION_LINE.len()..bytes.len() - 4].to_vec();
        let at = 1 + "status".len() + 10 + 1 + 3;
        assert_eq!(body[at], 1, "the flag's byte");
        body[at] = 2;
        let crc = crc32fast::hash(&body).to_le_bytes();
        let forged = [VERSION_LINE, &body, &crc].concat();
        let r = read_all::<Sample>(&forged).unwrap_err();
        assert_eq!(
            (r.field.as_str(), r.rule.as_str()),
            ("flag", "a boolean is 0 or 1, not 2")
        );

        // A prefix of the members reads alone; the whole document must use every byte.
        #[derive(serde::Deserialize)]
        struct Head {
            name: String,
        }
        assert_eq!(read::<Head>(&bytes).unwrap().name, "status");
        let mut extra = bytes[VERSION_LINE.len()..bytes.len() - 4].to_vec();
        extra.push(0);
        let crc = crc32fast::hash(&extra).to_le_bytes();
        let r = read_all::<Sample>(&[VERSION_LINE, &extra, &crc].concat()).unwrap_err();
        assert_eq!(r.field, "body");
    }
}
