//! Text as messages show it: user values quoted and cut ([`cut`]), a
//! parser's message folded onto one line ([`one_line`]) with its long words
//! cut ([`cut_words`]), an error's causes without repeats ([`error_chain`]),
//! and control characters escaped ([`EscapeControls`]).

use std::fmt::{self, Write};

/// The console's rule, so that a page and an error line say one error
/// alike.
pub use outbox_console::error_chain;

/// Longest word a parser's message shows whole, and how much of a longer
/// one it keeps (as [`cut`] does for a value).
const SHOWN_WHOLE: usize = 80;
const SHOWN_HEAD: usize = 60;

/// `value` quoted for a message and cut when long: the one rule for every
/// output ([`outbox::redact::quoted`]).
pub fn cut(value: &str) -> String {
    outbox::redact::quoted(value)
}

/// `text` (a parser's message) with every word longer than 80 characters
/// cut like [`cut`] does: such messages may quote a whole value.
pub fn cut_words(text: &str) -> String {
    if text.len() <= SHOWN_WHOLE {
        return text.to_owned();
    }
    text.split(' ')
        .map(|word| {
            if word.chars().count() <= SHOWN_WHOLE {
                word.to_owned()
            } else {
                let head: String = word.chars().take(SHOWN_HEAD).collect();
                format!("{head}… ({} bytes)", word.len())
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` with its line breaks and runs of spaces folded.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first control character of `text` (a line break, an escape, …),
/// if any: ids and names holding one could forge or colour log lines.
pub fn control_char(text: &str) -> Option<char> {
    text.chars().find(|c| c.is_control())
}

/// A writer that passes text on with every control character escaped
/// (`\n`, `\r`, `\t`, `\u{1b}`, …), so that no value written through it can
/// end a log line or send a terminal an escape sequence.
pub struct EscapeControls<W>(pub W);

impl<W: Write> Write for EscapeControls<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(|c: char| c.is_control()) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            write!(self.0, "{}", c.escape_default())?;
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_and_short_ones_kept() {
        assert_eq!(cut("abc"), "\"abc\"");
        let long = "y".repeat(10 << 20);
        let shown = cut(&long);
        assert!(
            shown.len() < 100 && shown.ends_with("(10485760 bytes)"),
            "{shown}"
        );
        let text = format!("invalid type: string \"{long}\", expected a whole number");
        let folded = cut_words(&text);
        assert!(
            folded.len() < 200 && folded.ends_with("expected a whole number"),
            "{folded}"
        );
        assert_eq!(cut_words("a short message"), "a short message");
    }

    #[test]
    fn messages_fold_onto_one_line() {
        assert_eq!(one_line("a\n  b\r\n\tc "), "a b c");
    }

    fn escape_controls(text: &str) -> String {
        let mut out = String::new();
        EscapeControls(&mut out).write_str(text).unwrap();
        out
    }

    #[test]
    fn control_characters_are_found_and_escaped_and_nothing_else_changes() {
        assert_eq!(control_char("pod-7"), None);
        assert_eq!(control_char("x\ny"), Some('\n'));
        assert_eq!(control_char("a\u{1b}[31m"), Some('\u{1b}'));
        assert_eq!(control_char("a\u{85}b"), Some('\u{85}'));
        assert_eq!(
            escape_controls("x\ny\r\u{1b}[31mz\u{7f}"),
            "x\\ny\\r\\u{1b}[31mz\\u{7f}"
        );
        assert_eq!(escape_controls("plain, ünïcode ✓"), "plain, ünïcode ✓");
    }
}
