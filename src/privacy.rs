//! TEMPORARY placeholder: replaced by the full privacy module (helper build in progress).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("{label} is required")]
    Required { label: String },
    #[error("{label} contains control characters")]
    ControlCharacters { label: String },
    #[error("{label} exceeds {max} characters")]
    TooLong { label: String, max: usize },
    #[error("{label} contains a confidential identifier")]
    Confidential { label: String },
    #[error("{label} must be machine-readable text")]
    NotMachineText { label: String },
}
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(|c: char| {
        matches!(
            c,
            '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
                ..='\u{200a}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202f}'
                    | '\u{205f}'
                    | '\u{3000}'
                    | '\u{feff}'
        )
    })
}
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}
pub fn contains_confidential_identifier(_v: &str) -> bool {
    false
}
pub fn machine_text(value: &str, label: &str, max_len: usize) -> Result<String, Error> {
    let v = js_trim(value);
    if v.is_empty() {
        return Err(Error::Required {
            label: label.into(),
        });
    }
    if v.chars().any(|c| (c as u32) < 32 || c as u32 == 127) {
        return Err(Error::ControlCharacters {
            label: label.into(),
        });
    }
    if utf16_len(v) > max_len {
        return Err(Error::TooLong {
            label: label.into(),
            max: max_len,
        });
    }
    let ok = v.as_bytes()[0].is_ascii_alphanumeric()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:/@+-".contains(&b));
    if !ok {
        return Err(Error::NotMachineText {
            label: label.into(),
        });
    }
    Ok(v.to_string())
}
pub fn relative_data_path(value: &str, label: &str) -> Result<String, Error> {
    machine_text(value, label, 512)
}
pub fn public_run_url(value: &str, _label: &str) -> Result<String, Error> {
    Ok(value.to_string())
}
