//! [`EventText`]: an event's canonical line, held as a range of a shared text, so that the
//! events of a shard and the shard's bytes keep each line once.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// An event's canonical line (no newline), read as a `&str` (it derefs to one): a range of a
/// shared, immutable text. An event read or validated on its own owns its text; [`share_lines`]
/// points the events of a shard at the lines of the shard's bytes, so that a batch holds its
/// lines once and not twice. Cloning is a reference count.
/// Equality, ordering and hashing are those of the text.
#[derive(Clone)]
pub struct EventText {
    text: Arc<str>,
    range: Range<usize>,
}

impl EventText {
    /// The range `range` of `text`.
    ///
    /// # Panics
    /// When `range` is out of bounds or not on character boundaries.
    pub fn within(text: &Arc<str>, range: Range<usize>) -> EventText {
        assert!(
            text.get(range.clone()).is_some(),
            "an event's line is a range of whole characters of its text"
        );
        EventText {
            text: Arc::clone(text),
            range,
        }
    }

    /// The line as a `&str`.
    pub fn as_str(&self) -> &str {
        &self.text[self.range.clone()]
    }

    /// Whether this line is a range of `text` (the same allocation, not only equal bytes).
    pub fn is_within(&self, text: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.text, text)
    }
}

/// Points each event line of `lines` at the line of `content` it equals, walking both in
/// order: `content` is a shard's bytes (lines each ending in `\n`) and `lines` its events in
/// file order. Stops at the first line that differs (an event kept its own text then, which is
/// correct, only not shared); returns how many were shared.
pub fn share_lines<'a>(
    content: &Arc<str>,
    lines: impl IntoIterator<Item = &'a mut EventText>,
) -> usize {
    let mut at = 0;
    let mut shared = 0;
    for line in lines {
        let end = at + line.len();
        if line.is_within(content) && line.range == (at..end) {
            at = end + 1;
            shared += 1;
            continue;
        }
        if content.get(at..end) != Some(line.as_str())
            || content.as_bytes().get(end) != Some(&b'\n')
        {
            break;
        }
        *line = EventText::within(content, at..end);
        at = end + 1;
        shared += 1;
    }
    shared
}

impl Deref for EventText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for EventText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for EventText {
    fn as_ref(&self) -> &[u8] {
        self.as_str().as_bytes()
    }
}

impl From<String> for EventText {
    fn from(text: String) -> EventText {
        let range = 0..text.len();
        EventText {
            text: Arc::from(text),
            range,
        }
    }
}

impl From<&str> for EventText {
    fn from(text: &str) -> EventText {
        EventText {
            text: Arc::from(text),
            range: 0..text.len(),
        }
    }
}

impl From<EventText> for String {
    fn from(text: EventText) -> String {
        text.as_str().to_owned()
    }
}

impl fmt::Debug for EventText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for EventText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for EventText {
    fn eq(&self, other: &EventText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EventText {}

impl PartialEq<str> for EventText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for EventText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for EventText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<EventText> for String {
    fn eq(&self, other: &EventText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<EventText> for &str {
    fn eq(&self, other: &EventText) -> bool {
        *self == other.as_str()
    }
}

impl PartialOrd for EventText {
    fn partial_cmp(&self, other: &EventText) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EventText {
    fn cmp(&self, other: &EventText) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for EventText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_lines_point_into_the_content_and_compare_as_text() {
        let content: Arc<str> = Arc::from("{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        let mut lines: Vec<EventText> = ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
            .into_iter()
            .map(EventText::from)
            .collect();
        let before = lines.clone();
        assert_eq!(share_lines(&content, &mut lines), 3);
        assert!(lines.iter().all(|l| l.is_within(&content)));
        assert_eq!(lines, before);
        assert_eq!(lines[1], "{\"b\":2}");
        assert_eq!(format!("{:?}", lines[2]), format!("{:?}", "{\"c\":3}"));
    }

    #[test]
    fn sharing_stops_at_the_first_line_that_differs_and_keeps_the_rest_owned() {
        let content: Arc<str> = Arc::from("{\"a\":1}\n{\"x\":2}\n{\"c\":3}\n");
        let mut lines: Vec<EventText> = ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
            .into_iter()
            .map(EventText::from)
            .collect();
        assert_eq!(share_lines(&content, &mut lines), 1);
        assert!(lines[0].is_within(&content));
        assert!(!lines[1].is_within(&content) && !lines[2].is_within(&content));
        assert_eq!(lines[1], "{\"b\":2}");
        // A prefix of a line, or a line without its newline, is not that line.
        let cut: Arc<str> = Arc::from("{\"a\":1}x\n");
        let mut one = vec![EventText::from("{\"a\":1}")];
        assert_eq!(share_lines(&cut, &mut one), 0);
        let open: Arc<str> = Arc::from("{\"a\":1}");
        assert_eq!(share_lines(&open, &mut one), 0);
    }

    #[test]
    #[should_panic(expected = "whole characters")]
    fn a_range_inside_a_character_is_refused() {
        let text: Arc<str> = Arc::from("é");
        let _ = EventText::within(&text, 0..1);
    }
}
