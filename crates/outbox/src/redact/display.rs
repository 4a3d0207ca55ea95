//! The display helpers every crate uses on what it prints: a long value
//! cut to a length ([`shorten`]), a user's value quoted for a message and
//! cut when long ([`quoted`]), a text fitted to a table column ([`fit`]),
//! and a known secret replaced by [`REDACTED`] ([`hide`]).

use super::REDACTED;

/// `text` cut to its first `max_chars` characters (never inside one)
/// followed by `…(N bytes)`, N being the length of the whole text in
/// bytes; a text of at most `max_chars` characters is returned as it is.
///
/// ```
/// use outbox::redact::shorten;
/// assert_eq!(shorten("orders.created", 6), "orders…(14 bytes)");
/// assert_eq!(shorten("orders", 6), "orders");
/// ```
pub fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…({} bytes)", &text[..end], text.len()),
        None => text.to_owned(),
    }
}

/// `text` on one line (every control character a space) and at most
/// `width` characters wide: a longer text keeps its first `width - 1`
/// characters and ends in `…`, so a table column stays aligned.
///
/// ```
/// use outbox::redact::fit;
/// assert_eq!(fit("a\nb", 10), "a b");
/// assert_eq!(fit("abcdef", 4), "abc…");
/// ```
pub fn fit(text: &str, width: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().count() <= width {
        return line;
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Longest value [`quoted`] shows whole.
const QUOTED_WHOLE: usize = 80;

/// Characters [`quoted`] keeps of a longer value.
const QUOTED_HEAD: usize = 60;

/// `value` quoted (and escaped) for a message naming what was wrong with
/// it; a value longer than 80 characters is cut to its first 60, followed
/// by its whole length, so that a mistaken megabyte is not echoed back.
///
/// ```
/// use outbox::redact::quoted;
/// assert_eq!(quoted("order\n"), "\"order\\n\"");
/// assert_eq!(quoted(&"x".repeat(100)), format!("{:?}… (100 bytes)", "x".repeat(60)));
/// ```
pub fn quoted(value: &str) -> String {
    if value.chars().count() <= QUOTED_WHOLE {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(QUOTED_HEAD).collect();
    format!("{head:?}… ({} bytes)", value.len())
}

/// `text` (a client's error, which may quote a password it was given) with
/// every occurrence of `secret` replaced by [`REDACTED`], except inside
/// occurrences of `keep`: the already redacted form of what held the
/// secret (such as [`redact_url`](super::redact_url) of the URL), whose
/// visible parts may contain the secret's letters
/// (`amqp://guest:***@guest-host`). An empty `secret` hides nothing; an
/// empty `keep` keeps nothing.
///
/// ```
/// use outbox::redact::hide;
/// let shown = "amqp://guest:***@rabbit/%2f";
/// assert_eq!(
///     hide("rabbit at amqp://guest:***@rabbit/%2f refused rabbit", "rabbit", shown),
///     "*** at amqp://guest:***@rabbit/%2f refused ***"
/// );
/// assert_eq!(hide("no secret here", "", ""), "no secret here");
/// ```
pub fn hide(text: &str, secret: &str, keep: &str) -> String {
    if secret.is_empty() {
        return text.to_owned();
    }
    if keep.is_empty() {
        return text.replace(secret, REDACTED);
    }
    text.split(keep)
        .map(|part| part.replace(secret, REDACTED))
        .collect::<Vec<_>>()
        .join(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_cuts_at_a_character_and_says_the_whole_length() {
        assert_eq!(shorten("ééé", 2), "éé…(6 bytes)");
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "abc…(4 bytes)");
        assert_eq!(shorten("", 0), "");
    }

    #[test]
    fn hide_replaces_every_occurrence_of_the_secret() {
        assert_eq!(
            hide("auth hunter2 failed: hunter2", "hunter2", ""),
            "auth *** failed: ***"
        );
        assert_eq!(hide("nothing to hide", "hunter2", ""), "nothing to hide");
    }

    #[test]
    fn hide_leaves_the_redacted_form_alone_and_hides_around_it() {
        let shown = "redis://app:***@app-cache:6379";
        let text = format!("cannot connect to {shown} as app: bad password app");
        assert_eq!(
            hide(&text, "app", shown),
            format!("cannot connect to {shown} as ***: bad password ***")
        );
        assert_eq!(
            hide(&format!("{shown}{shown}"), "app", shown),
            format!("{shown}{shown}")
        );
    }

    #[test]
    fn an_empty_secret_hides_nothing() {
        assert_eq!(hide("text", "", "x"), "text");
        assert_eq!(hide("text", "", ""), "text");
    }
}
