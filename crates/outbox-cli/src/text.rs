//! Text as messages show it: user values quoted and cut ([`cut`]), a
//! parser's message folded onto one line ([`one_line`]) with its long words
//! cut ([`cut_words`]), and an error's causes without repeats
//! ([`error_chain`]).

/// Longest value a message shows whole.
const SHOWN_WHOLE: usize = 80;

/// Characters kept of a value too long to show whole.
const SHOWN_HEAD: usize = 60;

/// `value` quoted for a message; a long value is cut to its first 60
/// characters, followed by its length, so that a mistaken megabyte is not
/// echoed back whole.
pub fn cut(value: &str) -> String {
    if value.chars().count() <= SHOWN_WHOLE {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(SHOWN_HEAD).collect();
    format!("{head:?}… ({} bytes)", value.len())
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

/// `error` and its causes on one line (`a: b: c`), a cause left out when
/// the line already ends with its text: the driver's database errors
/// repeat their message as their own cause ("timestamp out of range:
/// timestamp out of range").
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
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

    #[test]
    fn a_cause_that_repeats_the_message_is_said_once() {
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("timestamp out of range")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error returned from database: timestamp out of range")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Outer(Inner)).context("database error during cleanup");
        assert_eq!(
            error_chain(&e),
            "database error during cleanup: error returned from database: timestamp out of range"
        );
    }
}
