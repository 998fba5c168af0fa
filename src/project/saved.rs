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
//! The body is the document in the [postcard](https://postcard.jamesmunns.com/wire-format)
//! wire format (version 1): the document's Rust types in declaration order, with no member
//! names; an unsigned integer wider than a byte is a LEB128 varint, a signed one a zigzag
//! varint, a boolean one byte (0 or 1), a string its length (varint) then its UTF-8 bytes, an
//! option a tag byte (0 none, 1 some) then the value, a sequence or map its length (varint)
//! then its items (a map's in key order), a struct its members in order. The first member is
//! the `schema` string, so a file of another view is named before the rest is read. The
//! member path of a value that does not decode is found by `serde_path_to_error`, by position
//! (the body names no members).
//!
//! Saved form v1 is the JSON document itself (`project --json`, as `--save` wrote it before
//! v2); `--from` still reads it. A file whose version line names another version, whose
//! checksum does not match, or whose body does not decode is refused with
//! [`Error::Saved`](super::Error::Saved) naming the file, the field and the rule, and nothing
//! is written: fold the view again without `--from`. As members carry no names, any change to
//! the encoding or to the types it follows (a member added, removed, moved or retyped, even one
//! the JSON schema allows within its version) raises the version line.

use std::io::{BufWriter, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What every version line starts with.
pub const PREFIX: &[u8] = b"action-ledger.project.saved.";

/// The version line of the form this module writes.
pub const VERSION_LINE: &[u8] = b"action-ledger.project.saved.v2\n";

/// Why a saved file was refused: the field (a member path in the document, or a part of the
/// file) and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Where: `version line`, `checksum`, `body`, or the member path of the value that does
    /// not decode, by position (`member [3][0]`: the document's fourth member, its first).
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

/// A writer that also takes the CRC-32 of what passes through it.
struct Checksummed<W> {
    crc: crc32fast::Hasher,
    out: W,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Writes `value` in the saved form to `out`.
///
/// # Errors
/// The writer's, or an [`std::io::ErrorKind::Other`] error when `value`'s type is outside
/// what the form encodes (a sequence of unknown length, say).
pub fn write<T: Serialize, W: Write + ?Sized>(value: &T, out: &mut W) -> std::io::Result<()> {
    out.write_all(VERSION_LINE)?;
    // postcard writes value by value: the buffer keeps those small writes off `out`.
    let crc = {
        let body = Checksummed {
            crc: crc32fast::Hasher::new(),
            out: BufWriter::with_capacity(1 << 16, &mut *out),
        };
        let body = postcard::to_io(value, body).map_err(|e| {
            std::io::Error::other(format!("the saved form cannot encode the view: {e}"))
        })?;
        let Checksummed { crc, out: buffered } = body;
        buffered
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        crc
    };
    out.write_all(&crc.finalize().to_le_bytes())
}

/// Whether `bytes` start as a saved form of this module's kind (any version).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.starts_with(PREFIX)
}

/// Decodes a `T` from the start of a [`body`] (a prefix of the document's members).
///
/// # Errors
/// A [`Refusal`] naming the member and the rule.
pub fn decode_prefix<T: DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    decode(body).map(|(value, _)| value)
}

/// Decodes a whole document from a [`body`]: every byte must be read.
///
/// # Errors
/// As [`decode_prefix`]; a body with bytes after the document.
pub fn decode_all<T: DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    let (value, left) = decode(body)?;
    if left > 0 {
        return Err(Refusal::new(
            "body",
            format!("{left} byte(s) after the document"),
        ));
    }
    Ok(value)
}

/// Decodes a `T` from the start of `body`: the value and how many bytes are left after it.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<(T, usize), Refusal> {
    let mut de = postcard::Deserializer::from_bytes(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        // postcard reads a struct as a tuple: the path names members by position.
        let path = e.path().to_string();
        let field = if path == "." {
            "body".to_owned()
        } else {
            format!("member {path}")
        };
        Refusal::new(&field, e.into_inner().to_string())
    })?;
    let left = de
        .finalize()
        .map_err(|e| Refusal::new("body", e.to_string()))?
        .len();
    Ok((value, left))
}

/// The body of a saved file, its version line and checksum checked (once: then
/// [`decode_prefix`] and [`decode_all`] read it).
///
/// # Errors
/// A [`Refusal`] of the version line or the checksum.
pub fn body(bytes: &[u8]) -> Result<&[u8], Refusal> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A saved file's prefix of members, as `Document::read_saved` reads its head.
    fn read<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
        decode_prefix(body(bytes)?)
    }

    /// A whole saved document, as `Document::read_saved` reads it.
    fn read_all<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
        decode_all(body(bytes)?)
    }

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
        assert_eq!(r.field, "member [3]");
        assert!(r.rule.contains("bool"), "{r:?}");

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
