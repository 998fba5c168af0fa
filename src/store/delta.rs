//! Git's binary delta: the instructions that rebuild an object from a base object
//! (`gitformat-pack(5)`, "Deltified representation"), written by [`encode`].
//!
//! ```text
//! delta: base size (varint) | result size (varint) | instructions…
//! varint: 7 bits a byte, least significant first, MSB set on every byte but the last
//! copy:   1oooosss | offset bytes for each set o bit (LE) | size bytes for each set s bit (LE)
//!         (size 0 means 0x10000)
//! insert: 0nnnnnnn (n = 1..=127) | n literal bytes
//! ```
//!
//! The encoder is a plain block matcher, in the manner of git's `diff-delta.c` but simpler:
//! the base is indexed by a hash of every aligned 16-byte block, the result is scanned one byte
//! at a time, and a block that matches is grown backwards over the pending literals and forwards
//! as far as both agree. A match shorter than 32 bytes gives way to one that starts within the
//! next 16 bytes and reaches further (lazy matching, as zlib does). Every match of 31 bytes or more holds an aligned block and is found;
//! shorter ones may be missed, which costs only a few literal bytes. One copy covers at most
//! 0x10000 bytes (as git writes them, so that every reader takes them).

/// Bytes of one indexed block: matches shorter than this are not looked for.
const BLOCK: usize = 16;
/// Bytes that one copy instruction covers at most.
const MAX_COPY: usize = 0x10000;
/// Matches shorter than this are compared with those of the next 16 positions.
const LAZY: usize = 32;
/// Bytes that one insert instruction carries at most.
const MAX_INSERT: usize = 127;

/// The encoder's reusable memory: the hash table over the base's blocks.
#[derive(Debug, Default)]
pub(super) struct Encoder {
    /// Block start + 1 for each hash slot (0: empty).
    table: Vec<u32>,
}

/// The hash of the 16 bytes at the start of `bytes` (which holds at least 16).
#[inline]
fn block_hash(bytes: &[u8], bits: u32) -> usize {
    let a = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let b = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    ((a ^ b.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

fn push_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn push_inserts(out: &mut Vec<u8>, literal: &[u8]) {
    for chunk in literal.chunks(MAX_INSERT) {
        out.push(chunk.len() as u8);
        out.extend_from_slice(chunk);
    }
}

fn push_copy(out: &mut Vec<u8>, mut offset: usize, mut len: usize) {
    while len > 0 {
        let n = len.min(MAX_COPY);
        let at = out.len();
        out.push(0x80);
        let mut op = 0x80u8;
        for i in 0..4 {
            let byte = (offset >> (8 * i)) as u8;
            if byte != 0 {
                op |= 1 << i;
                out.push(byte);
            }
        }
        // 0x10000 is written as no size bytes at all.
        let size = if n == MAX_COPY { 0 } else { n };
        for i in 0..3 {
            let byte = (size >> (8 * i)) as u8;
            if byte != 0 {
                op |= 0x10 << i;
                out.push(byte);
            }
        }
        out[at] = op;
        offset += n;
        len -= n;
    }
}

impl Encoder {
    /// Writes into `out` (cleared first) the delta that rebuilds `target` from `base`, and
    /// returns `true`; or returns `false`, with `out` in no defined state, when the delta would
    /// be longer than `max_len` bytes or either object is too small (under 16 bytes) or too
    /// large (4 GiB and more) to delta. Cost: one pass over each object; memory: a table of
    /// about one slot per 8 bytes of the base.
    pub(super) fn encode(
        &mut self,
        base: &[u8],
        target: &[u8],
        max_len: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        out.clear();
        if base.len() < BLOCK || target.len() < BLOCK || base.len() >= u32::MAX as usize {
            return false;
        }
        push_varint(out, base.len());
        push_varint(out, target.len());
        let blocks = base.len() / BLOCK;
        let bits = (blocks * 2).next_power_of_two().trailing_zeros().max(4);
        self.table.clear();
        self.table.resize(1 << bits, 0);
        // Later blocks overwrite earlier ones with the same hash: either serves.
        for start in (0..blocks * BLOCK).step_by(BLOCK) {
            self.table[block_hash(&base[start..], bits)] = start as u32 + 1;
        }
        let table = &self.table;
        // The match of the block at `at` that its hash slot points to, as (base offset,
        // length forward from `at`).
        let probe = |at: usize| -> Option<(usize, usize)> {
            let slot = table[block_hash(&target[at..], bits)];
            let from = (slot as usize).checked_sub(1)?;
            (base[from..from + BLOCK] == target[at..at + BLOCK]).then(|| {
                let more = target[at + BLOCK..]
                    .iter()
                    .zip(&base[from + BLOCK..])
                    .take_while(|(a, b)| a == b)
                    .count();
                (from, BLOCK + more)
            })
        };
        let (mut at, mut literal) = (0, 0);
        while at + BLOCK <= target.len() {
            let Some((mut from, mut len)) = probe(at) else {
                at += 1;
                continue;
            };
            // A short match is often text that every line repeats (a JSON key), found in the
            // wrong line: a block starting within the next 16 bytes that reaches further wins.
            if len < LAZY {
                let mut best_end = at + len;
                for next in at + 1..=(at + BLOCK).min(target.len() - BLOCK) {
                    if let Some((f, l)) = probe(next)
                        && next + l > best_end
                    {
                        (at, from, len, best_end) = (next, f, l, next + l);
                    }
                }
            }
            let (mut start, mut base_start) = (at, from);
            while start > literal && base_start > 0 && target[start - 1] == base[base_start - 1] {
                start -= 1;
                base_start -= 1;
            }
            push_inserts(out, &target[literal..start]);
            push_copy(out, base_start, at + len - start);
            if out.len() > max_len {
                return false;
            }
            (at, literal) = (at + len, at + len);
        }
        push_inserts(out, &target[literal..]);
        out.len() <= max_len
    }
}

/// Rebuilds an object from `base` and a `delta`, checking every instruction: the reading side
/// of the format. The store's readers are git and gix; the roll-up uses this to rebuild a tree
/// it copies as a delta from its base's bytes, which it still holds. `None` for a malformed
/// delta or one written against another base (its base size differs).
pub(super) fn apply(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    fn varint(bytes: &[u8], at: &mut usize) -> Option<usize> {
        let (mut n, mut shift) = (0usize, 0u32);
        loop {
            let b = *bytes.get(*at)?;
            *at += 1;
            n |= ((b & 0x7f) as usize).checked_shl(shift)?;
            shift += 7;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
    }
    let mut at = 0;
    if varint(delta, &mut at)? != base.len() {
        return None;
    }
    let size = varint(delta, &mut at)?;
    // A delta cannot ask for more than its copies can give: 16 MiB reserved at most up front.
    let mut out = Vec::with_capacity(size.min(1 << 24));
    while at < delta.len() {
        let op = delta[at];
        at += 1;
        if op & 0x80 != 0 {
            let (mut offset, mut len) = (0usize, 0usize);
            for i in 0..4 {
                if op & (1 << i) != 0 {
                    offset |= (*delta.get(at)? as usize) << (8 * i);
                    at += 1;
                }
            }
            for i in 0..3 {
                if op & (0x10 << i) != 0 {
                    len |= (*delta.get(at)? as usize) << (8 * i);
                    at += 1;
                }
            }
            if len == 0 {
                len = MAX_COPY;
            }
            out.extend_from_slice(base.get(offset..offset.checked_add(len)?)?);
        } else if op != 0 {
            out.extend_from_slice(delta.get(at..at + op as usize)?);
            at += op as usize;
        } else {
            return None;
        }
        if out.len() > size {
            return None;
        }
    }
    (out.len() == size).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(base: &[u8], target: &[u8]) -> Option<usize> {
        let mut out = Vec::new();
        if !Encoder::default().encode(base, target, usize::MAX, &mut out) {
            return None;
        }
        assert_eq!(apply(base, &out).as_deref(), Some(target), "{out:?}");
        Some(out.len())
    }

    #[test]
    fn similar_objects_give_short_deltas() {
        let base: Vec<u8> = (0..2000)
            .map(|i| format!("{{\"n\":{i},\"kind\":\"event\"}}\n"))
            .collect::<String>()
            .into_bytes();
        // A changed middle, a new end, a removed start.
        let mut target = base[500..].to_vec();
        target[3000..3010].copy_from_slice(b"0123456789");
        target.extend_from_slice(b"{\"n\":-1,\"kind\":\"late\"}\n");
        let len = roundtrip(&base, &target).unwrap();
        assert!(len < 100, "{len}");
        // Identical objects: copies only, 0x10000 at most each.
        let big: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
        assert!(roundtrip(&big, &big).unwrap() < 200);
    }

    #[test]
    fn objects_too_small_or_deltas_too_long_are_refused() {
        let mut out = Vec::new();
        let mut e = Encoder::default();
        assert!(!e.encode(b"short", b"0123456789abcdefgh", usize::MAX, &mut out));
        assert!(!e.encode(b"0123456789abcdefgh", b"short", usize::MAX, &mut out));
        let base = vec![7u8; 4096];
        let unrelated: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
        assert!(!e.encode(&base, &unrelated, 2048, &mut out));
        assert!(e.encode(&base, &unrelated, usize::MAX, &mut out));
        assert_eq!(apply(&base, &out).unwrap(), unrelated);
    }

    /// Copies of every length class and offset width (1 to 4 offset bytes, 1 to 3 size bytes,
    /// and the 0x10000 that has none) are read back as they were meant.
    /// The reader refuses what a delta against this base cannot mean.
    #[test]
    fn malformed_deltas_are_refused() {
        let base = b"0123456789abcdefghijklmnopqrstuvwxyz".to_vec();
        let target = b"0123456789abcdefghijklmnopqrstuvwxyz and more".to_vec();
        let mut delta = Vec::new();
        assert!(Encoder::default().encode(&base, &target, usize::MAX, &mut delta));
        assert_eq!(apply(&base, &delta), Some(target.clone()));
        assert_eq!(apply(&base[1..], &delta), None, "another base's size");
        for cut in 1..delta.len() {
            assert_eq!(apply(&base, &delta[..cut]), None, "cut at {cut}");
        }
        let header = |size: usize| {
            let mut d = Vec::new();
            push_varint(&mut d, base.len());
            push_varint(&mut d, size);
            d
        };
        let mut zero_op = header(1);
        zero_op.push(0);
        assert_eq!(apply(&base, &zero_op), None, "instruction 0 is reserved");
        let mut past_base = header(8);
        push_copy(&mut past_base, base.len() - 4, 8);
        assert_eq!(apply(&base, &past_base), None, "a copy past the base");
        let mut too_long = header(4);
        push_copy(&mut too_long, 0, 8);
        assert_eq!(apply(&base, &too_long), None, "more than the size it names");
        let mut endless = vec![0xff; 12];
        endless.push(0);
        assert_eq!(apply(&base, &endless), None, "a size past 64 bits");
    }

    #[test]
    fn copies_of_every_width() {
        let base: Vec<u8> = (0..(17u32 << 20) / 4)
            .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
            .collect();
        for (from, len) in [
            (0, 16),
            (255, 300),
            (65_536, 0x10000),
            (70_000, 0x10001),
            (16 << 20, 100_000),
        ] {
            let target = &base[from..from + len];
            let mut out = Vec::new();
            assert!(Encoder::default().encode(&base, target, usize::MAX, &mut out));
            assert_eq!(apply(&base, &out).as_deref(), Some(target));
            assert!(
                out.len() < 40 + len / 0x10000 * 8,
                "{from} {len}: {}",
                out.len()
            );
        }
    }

    proptest! {
        #![proptest_config(crate::tests::prop_support::config(256))]

        /// Any base and any target, related by edits or not: the delta rebuilds the target.
        #[test]
        fn every_delta_rebuilds_its_target(
            base in proptest::collection::vec(0u8..4, 0..3000),
            edits in proptest::collection::vec((0usize..3000, 0usize..40, proptest::collection::vec(any::<u8>(), 0..40)), 0..12),
        ) {
            let mut target = base.clone();
            for (at, remove, insert) in edits {
                let at = at.min(target.len());
                let end = (at + remove).min(target.len());
                target.splice(at..end, insert);
            }
            let mut out = Vec::new();
            if Encoder::default().encode(&base, &target, usize::MAX, &mut out) {
                prop_assert_eq!(apply(&base, &out), Some(target));
            } else {
                prop_assert!(base.len() < BLOCK || target.len() < BLOCK);
            }
        }
    }
}
