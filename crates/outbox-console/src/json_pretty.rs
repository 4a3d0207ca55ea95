//! Pretty-printing JSON text without parsing its values: the text is
//! re-indented token by token, and every string and number is copied as it
//! is, so `1e400`, `0.10000000000000000001` or a 40-digit integer stay what
//! PostgreSQL stored (a float-parsing JSON library would change them).
//! No database, no I/O.

/// Spaces per nesting level.
const INDENT: usize = 2;

/// `text` (JSON as PostgreSQL prints a `jsonb`) with one member or element
/// per line, indented by depth. Whitespace outside strings is dropped and
/// replaced; nothing else changes. Text that is not JSON is returned
/// re-spaced the same way, never refused.
pub fn pretty(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                let mut escaped = false;
                for s in chars.by_ref() {
                    out.push(s);
                    if escaped {
                        escaped = false;
                    } else if s == '\\' {
                        escaped = true;
                    } else if s == '"' {
                        break;
                    }
                }
            }
            '{' | '[' => {
                out.push(c);
                skip_space(&mut chars);
                let close = if c == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

fn skip_space(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', depth * INDENT));
}

#[cfg(test)]
mod tests {
    use super::pretty;

    #[test]
    fn numbers_beyond_f64_are_kept_byte_for_byte() {
        let stored = r#"{"big": 1e400, "exact": 0.10000000000000000001, "n": [123456789012345678901234567890, -0.0]}"#;
        let shown = pretty(stored);
        for kept in [
            "1e400",
            "0.10000000000000000001",
            "123456789012345678901234567890",
            "-0.0",
        ] {
            assert!(shown.contains(kept), "{kept} lost in {shown}");
        }
        assert_eq!(
            shown,
            "{\n  \"big\": 1e400,\n  \"exact\": 0.10000000000000000001,\n  \"n\": [\n    123456789012345678901234567890,\n    -0.0\n  ]\n}"
        );
    }

    #[test]
    fn strings_are_copied_whole_with_their_escapes_and_punctuation() {
        let stored = r#"{"a, b": "x: {y} [z], \"q\" \\", "e": {}, "l": []}"#;
        assert_eq!(
            pretty(stored),
            "{\n  \"a, b\": \"x: {y} [z], \\\"q\\\" \\\\\",\n  \"e\": {},\n  \"l\": []\n}"
        );
    }

    #[test]
    fn scalars_and_removing_the_layout_gives_back_the_stored_text() {
        assert_eq!(pretty("1e400"), "1e400");
        assert_eq!(pretty(r#""<script>""#), r#""<script>""#);
        let stored = r#"{"a": [1, {"b": null}], "c": "d e"}"#;
        let squeezed: String = pretty(stored).lines().map(str::trim).collect();
        assert_eq!(squeezed, stored.replace(", ", ","));
    }

    #[test]
    fn text_that_is_not_json_is_shown_not_refused() {
        assert_eq!(pretty("}}]"), "\n}\n}\n]");
        assert_eq!(pretty(r#""unterminated"#), r#""unterminated"#);
    }
}
