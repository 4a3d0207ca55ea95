//! Ages as commands and the console take and show them (`--older-than
//! 7d`, `--retention 1h30m`, "deleted rows older than 7d"): [`parse_age`]
//! and [`format_age`], one the other's inverse for whole seconds.

use std::time::Duration;

/// The oldest age a command takes: 100 years. PostgreSQL cannot go back
/// much further from today (timestamps start in 4713 BC), and would say so
/// only after the query started, in words that name no flag.
const MAX_AGE_DAYS: u64 = 36_500;

/// Parses an age such as `30s`, `15m`, `2h`, `7d`, `1w` or `1h30m`, at most
/// [`MAX_AGE_DAYS`] days.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let hint = "use a number and a unit: s, m, h, d or w (e.g. 30s, 15m, 2h, 7d, 1h30m)";
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("empty age: {hint}"));
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?} is not an age: {hint}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?} is too large: {hint}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            "w" => 604_800,
            "" => return Err(format!("{text:?} has no unit: {hint}")),
            unit => return Err(format!("unknown unit {unit:?} in {text:?}: {hint}")),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(secs)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too large: {hint}"))?;
    }
    if total > MAX_AGE_DAYS * 86_400 {
        return Err(format!(
            "{text:?} is out of range: use 0s to {MAX_AGE_DAYS}d (100 years); {hint}"
        ));
    }
    Ok(Duration::from_secs(total))
}

/// A short human form of an age: `90s`, `15m`, `2h`, `7d`, or a mix such as
/// `1d2h`.
pub fn format_age(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= len {
            out.push_str(&format!("{}{unit}", secs / len));
            secs %= len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_shown_parses_back_to_itself() {
        for secs in [1, 59, 60, 90, 3_600, 5_400, 86_400, 93_784, 36_500 * 86_400] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse_age(&format_age(d)), Ok(d), "{secs}");
        }
    }

    #[test]
    fn ages_parse_and_bad_ones_say_how_to_write_them() {
        let secs = |s: &str| parse_age(s).unwrap().as_secs();
        assert_eq!(secs("30s"), 30);
        assert_eq!(secs("15m"), 900);
        assert_eq!(secs("2h"), 7_200);
        assert_eq!(secs("7d"), 604_800);
        assert_eq!(secs("1h30m"), 5_400);
        assert_eq!(secs("1w"), 604_800);
        assert_eq!(secs("36500d"), 36_500 * 86_400);
        let err = parse_age("36501d").unwrap_err();
        assert!(err.contains("0s to 36500d"), "{err}");
        for bad in [
            "",
            "7",
            "d",
            "7x",
            "7 d",
            "-1d",
            "100000000d",
            "99999999999999999999d",
        ] {
            let err = parse_age(bad).unwrap_err();
            assert!(err.contains("e.g. 30s"), "{bad:?}: {err}");
        }
    }
}
