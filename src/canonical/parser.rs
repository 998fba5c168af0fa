//! The strict parser's entry points: JSON text to a [`Value`] (read by `serde_json` with the
//! ledger's rules added, see the `de` module), refusing what the reference's reader refuses.

use super::writer::to_canonical;
use super::{Error, MAX_BYTES, MAX_DEPTH, MAX_NODES, Value};

/// Parse JSON text strictly: duplicate keys, depth and node limits, grammar.
pub fn parse(text: &str) -> Result<Value, Error> {
    parse_within(text, MAX_DEPTH, MAX_NODES)
}

/// Deepest value [`parse_input`] reads: twice the event limit.
pub const MAX_INPUT_DEPTH: usize = 2 * MAX_DEPTH;
/// Most values [`parse_input`] reads: ten times the event limit.
pub const MAX_INPUT_NODES: usize = 10 * MAX_NODES;

/// [`parse`] for a writer's input document, which is not itself an event: it holds several
/// values that are each hashed or stored under the limits (identities one level below its root,
/// the event fields), so the limits are applied to those values, where the error names the
/// rule and the path, and the document itself is only bounded to keep the parser's stack and
/// memory small ([`MAX_INPUT_DEPTH`], [`MAX_INPUT_NODES`]).
///
/// # Errors
/// As [`parse`]; [`Error::InputLimit`] past the input bounds.
pub fn parse_input(text: &str) -> Result<Value, Error> {
    parse_within(text, MAX_INPUT_DEPTH, MAX_INPUT_NODES).map_err(|e| match e {
        Error::ComplexityLimit => Error::InputLimit,
        other => other,
    })
}

/// [`parse`] without the depth and value limits, for test documents that hold many values
/// (the conformance vectors): keys keep the order they were written in.
#[cfg(test)]
pub(crate) fn parse_document(text: &str) -> Result<Value, Error> {
    parse_within(text, usize::MAX, usize::MAX)
}

fn parse_within(text: &str, max_depth: usize, max_nodes: usize) -> Result<Value, Error> {
    super::de::read(text, max_depth, max_nodes)
}

/// Whether the value [`parse`] read from canonical text of `len` bytes is certain to pass the
/// limits of [`to_canonical`]: parse enforces the same depth and value-count limits, and the
/// size estimate exceeds the text's length by at most 24 bytes a value (a number counts 24).
pub fn within_limits_by_length(len: usize) -> bool {
    len + 24 * MAX_NODES <= MAX_BYTES
}

/// Parse `text` and require it to be exactly the canonical encoding of what it holds.
pub fn parse_canonical(text: &str) -> Result<Value, Error> {
    let v = parse(text)?;
    if to_canonical(&v)? != text {
        return Err(Error::NotCanonical);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_refuses_duplicates_grammar_and_surrogates() {
        assert!(matches!(
            parse(r#"{"a":1,"\u0061":2}"#),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(parse("[1,]").is_err());
        assert!(parse("01").is_err());
        assert!(parse("1.").is_err());
        assert!(parse("\"\u{1}\"").is_err());
        assert!(parse(r#""\ud800""#).is_err());
        assert!(parse(r#""\udc00x""#).is_err());
        assert_eq!(parse(r#""\ud83d\ude00""#).unwrap(), Value::str("😀"));
        assert!(parse("{} x").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn parser_limits_depth_and_nodes() {
        let deep_ok = format!("{}1{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(&deep_ok).is_ok());
        let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(parse(&deep), Err(Error::ComplexityLimit));
        let many = format!("[{}]", vec!["0"; 10_000].join(","));
        assert_eq!(parse(&many), Err(Error::ComplexityLimit));
    }

    /// A writer's input holds several limited values (each hashed or stored under the limits),
    /// so its parse is bounded more loosely: a value at the limits one level below the root
    /// reads, and the bounds named in the message are the constants.
    #[test]
    fn input_parse_bounds() {
        let nested = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
        let below_root = format!(r#"{{"identity":{}}}"#, nested(MAX_DEPTH));
        assert_eq!(parse(&below_root), Err(Error::ComplexityLimit));
        assert!(parse_input(&below_root).is_ok());
        let values = |n: usize| format!("[{}]", vec!["0"; n - 1].join(","));
        assert!(parse(&values(MAX_NODES + 1)).is_err());
        assert!(parse_input(&values(MAX_NODES + 1)).is_ok());
        assert!(parse_input(&nested(MAX_INPUT_DEPTH)).is_ok());
        assert!(parse_input(&values(MAX_INPUT_NODES)).is_ok());
        assert_eq!(
            parse_input(&nested(MAX_INPUT_DEPTH + 1)),
            Err(Error::InputLimit)
        );
        assert_eq!(
            parse_input(&values(MAX_INPUT_NODES + 1)),
            Err(Error::InputLimit)
        );
        assert_eq!(
            Error::InputLimit.to_string(),
            format!(
                "JSON input exceeds its parse bounds (depth {MAX_INPUT_DEPTH}, {MAX_INPUT_NODES} values)"
            )
        );
        // Duplicate keys and grammar stay refused.
        assert!(matches!(
            parse_input(r#"{"a":1,"a":2}"#),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(parse_input("[1,]").is_err());
    }

    #[test]
    fn canonical_parse_requires_exact_bytes() {
        assert!(parse_canonical(r#"{"a":1}"#).is_ok());
        for bad in [
            r#"{ "a":1}"#,
            r#"{"b":1,"a":2}"#,
            "1.0",
            "1e2",
            r#""\u0041""#,
            "-0",
        ] {
            assert!(parse_canonical(bad).is_err(), "{bad}");
        }
    }
}
