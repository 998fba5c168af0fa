//! The JavaScript primitives the reference's rules rely on, emulated exactly: `String.prototype.trim`
//! and the ECMAScript whitespace set, UTF-16 lengths, and `Number(string)`.

/// JS `String.prototype.trim`: strips TAB, LF, VT, FF, CR, SPACE,
/// U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 and U+FEFF from both
/// ends. Rust's `str::trim` differs (it keeps U+FEFF and strips U+0085), which would change
/// which values are accepted.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// Length of `s` in UTF-16 code units, the unit of every length limit of the reference
///.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

pub(super) fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// JS `Number(string)` (ECMAScript StringToNumber): JS-trimmed; empty → 0; `0x`/`0o`/`0b`
/// integers (unsigned); otherwise an optionally signed decimal literal or `Infinity`; anything
/// else → NaN. Non-decimal literals are accumulated in `f64`, which can round differently from
/// JS above 2^53; only the 0…255 range matters to the caller.
pub fn js_number(s: &str) -> f64 {
    let text = js_trim(s);
    if text.is_empty() {
        return 0.0;
    }
    let radix = match text.get(..2) {
        Some("0x" | "0X") => 16,
        Some("0o" | "0O") => 8,
        Some("0b" | "0B") => 2,
        _ => 10,
    };
    if radix != 10 {
        let digits = &text[2..];
        if digits.is_empty() {
            return f64::NAN;
        }
        let mut value = 0.0;
        for c in digits.chars() {
            let Some(digit) = c.to_digit(radix) else {
                return f64::NAN;
            };
            value = value * f64::from(radix) + f64::from(digit);
        }
        return value;
    }
    let (sign, unsigned) = match text.as_bytes()[0] {
        b'+' => (1.0, &text[1..]),
        b'-' => (-1.0, &text[1..]),
        _ => (1.0, text),
    };
    if unsigned == "Infinity" {
        return sign * f64::INFINITY;
    }
    if !is_unsigned_decimal_literal(unsigned) {
        return f64::NAN;
    }
    // The grammar check above keeps Rust-only spellings ("inf", "nan") away from `parse`.
    unsigned
        .parse::<f64>()
        .map_or(f64::NAN, |value| sign * value)
}

/// StrUnsignedDecimalLiteral without `Infinity`: `digits [. digits] [exp]` or `. digits [exp]`
/// (at least one mantissa digit), `exp` = `e|E [+|-] digits`.
pub(super) fn is_unsigned_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let digits_from = |mut i: usize| {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i, i - start)
    };
    let (mut i, integer_digits) = digits_from(0);
    let mut fraction_digits = 0;
    if b.get(i) == Some(&b'.') {
        (i, fraction_digits) = digits_from(i + 1);
    }
    if integer_digits + fraction_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exponent_digits;
        (i, exponent_digits) = digits_from(i);
        if exponent_digits == 0 {
            return false;
        }
    }
    i == b.len()
}
