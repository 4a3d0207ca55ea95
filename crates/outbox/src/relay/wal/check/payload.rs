//! Whether a message's payload is JSON that `jsonb` stores, in one pass
//! over its bytes, without building anything.
//!
//! `outbox_emit` takes its payload as `jsonb`, so what it writes always
//! passes; the check is for a message written without it. The grammar is
//! RFC 8259's (serde_json's, which the tests hold it to); on top of it, what
//! PostgreSQL 15's `jsonb` input refuses in valid JSON (`json_lex_string`
//! and `numeric_in`): a `\u0000` escape, a lone UTF-16 surrogate escape, and
//! a number beyond `numeric`. Nesting has no limit here: `jsonb`'s is the
//! server's stack, which already held what was written. Nothing is
//! allocated below 64 levels.

use super::Refusal;

/// The largest decimal weight of a `numeric`'s first significant digit
/// (PostgreSQL's `NUMERIC_WEIGHT_MAX`, 32767 base-10000 digits).
const NUMERIC_MAX_DECIMAL_WEIGHT: i64 = 131_071;
/// The most digits after the point a `numeric` keeps (`NUMERIC_DSCALE_MAX`).
const NUMERIC_MAX_DSCALE: i64 = 16_383;
/// The exponent `numeric` input refuses from on (`INT_MAX / 2`).
const NUMERIC_EXPONENT_LIMIT: i64 = 1_073_741_823;

/// `Ok` when `text` is one JSON value that `jsonb` accepts; otherwise
/// [`Refusal::PayloadNotJson`] (with where) or
/// [`Refusal::PayloadNotJsonb`] (with what).
pub(super) fn payload(text: &str) -> Result<(), Refusal> {
    let mut w = Walk {
        json: text.as_bytes(),
        i: 0,
        open: Open::default(),
    };
    w.document()
}

/// Where, from `i` on, the first byte that ends a run of a string's plain
/// bytes is: a quote, a backslash, or a control character JSON refuses
/// unescaped. Eight bytes at a time (strings in payloads are short, too
/// short for a vectorised search's setup), then one at a time.
fn next_string_stop(json: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A high bit in each byte of `v` that is zero; wrong only in bytes
    // above the first such one, so the lowest is exact.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    while let Some(chunk) = json.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        let stops = zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
        if stops != 0 {
            return Some(i + stops.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    json[i..]
        .iter()
        .position(|b| matches!(b, b'"' | b'\\' | 0..=0x1f))
        .map(|at| i + at)
}

/// The walk's position and the containers open at it.
struct Walk<'j> {
    json: &'j [u8],
    i: usize,
    open: Open,
}

/// What the walk expects after a value, by the container it is in.
#[derive(Clone, Copy, PartialEq)]
enum In {
    Array,
    Object,
}

impl<'j> Walk<'j> {
    fn document(&mut self) -> Result<(), Refusal> {
        'value: loop {
            self.space();
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    self.space();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        self.open.push(In::Object);
                        self.key()?;
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    self.space();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        self.open.push(In::Array);
                        continue 'value;
                    }
                }
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                _ => return Err(self.not_json("expected a value")),
            }
            // After a value: the next one in its container, the
            // container's end, or the end of the text.
            loop {
                self.space();
                match (self.open.top(), self.peek()) {
                    (None, None) => return Ok(()),
                    (None, Some(_)) => return Err(self.not_json("text after the value")),
                    (Some(_), Some(b',')) => {
                        self.i += 1;
                        if self.open.top() == Some(In::Object) {
                            self.space();
                            self.key()?;
                        }
                        continue 'value;
                    }
                    (Some(In::Array), Some(b']')) | (Some(In::Object), Some(b'}')) => {
                        self.i += 1;
                        self.open.pop();
                    }
                    (Some(In::Array), _) => return Err(self.not_json("expected ',' or ']'")),
                    (Some(In::Object), _) => return Err(self.not_json("expected ',' or '}'")),
                }
            }
        }
    }

    /// A member's key and its colon.
    fn key(&mut self) -> Result<(), Refusal> {
        if self.peek() != Some(b'"') {
            return Err(self.not_json("expected a key"));
        }
        self.string()?;
        self.space();
        if self.peek() != Some(b':') {
            return Err(self.not_json("expected ':'"));
        }
        self.i += 1;
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.json.get(self.i).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Refusal> {
        if self.json[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.not_json("expected a value"))
        }
    }

    /// A string, at its opening quote: runs of plain bytes, each ended by
    /// the closing quote, an escape, or a control character (refused).
    fn string(&mut self) -> Result<(), Refusal> {
        self.i += 1;
        loop {
            let Some(stop) = next_string_stop(self.json, self.i) else {
                self.i = self.json.len();
                return Err(self.not_json("a string without its closing quote"));
            };
            self.i = stop;
            match self.json[self.i] {
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                b'\\' => self.i += 1,
                _ => return Err(self.not_json("a control character in a string")),
            }
            match self.peek() {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                Some(b'u') => self.unicode_escape()?,
                _ => return Err(self.not_json("an invalid escape")),
            }
        }
    }

    /// `uXXXX` after a backslash, and its low half when it is a
    /// surrogate's high one.
    fn unicode_escape(&mut self) -> Result<(), Refusal> {
        let Some(unit) = self.hex4(self.i + 1) else {
            return Err(self.not_json("an invalid \\u escape"));
        };
        self.i += 5;
        match unit {
            0 => Err(Refusal::PayloadNotJsonb(
                "\\u0000 (jsonb cannot store a NUL character)",
            )),
            0xD800..=0xDBFF => {
                let low = if self.json.get(self.i..self.i + 2) == Some(b"\\u") {
                    self.hex4(self.i + 2)
                } else {
                    None
                };
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return Err(Refusal::PayloadNotJsonb(
                        "a \\u escape of a lone UTF-16 surrogate",
                    ));
                }
                self.i += 6;
                Ok(())
            }
            0xDC00..=0xDFFF => Err(Refusal::PayloadNotJsonb(
                "a \\u escape of a lone UTF-16 surrogate",
            )),
            _ => Ok(()),
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.json.get(at..at + 4)?;
        digits.iter().try_fold(0u32, |n, d| {
            let v = (*d as char).to_digit(16)?;
            Some(n * 16 + v)
        })
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|d| d.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }

    /// A number, then whether `numeric` holds it.
    fn number(&mut self) -> Result<(), Refusal> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let int_start = self.i;
        let int_len = self.digits();
        if int_len == 0 {
            return Err(self.not_json("a number without digits"));
        }
        if int_len > 1 && self.json[int_start] == b'0' {
            self.i = int_start;
            return Err(self.not_json("a number with a leading zero"));
        }
        let mut frac: &[u8] = &[];
        if self.peek() == Some(b'.') {
            self.i += 1;
            let start = self.i;
            if self.digits() == 0 {
                return Err(self.not_json("a number without digits after its point"));
            }
            frac = &self.json[start..self.i];
        }
        let mut exponent: i64 = 0;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            let negative = self.peek() == Some(b'-');
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            let start = self.i;
            if self.digits() == 0 {
                return Err(self.not_json("a number without digits in its exponent"));
            }
            for d in &self.json[start..self.i] {
                exponent = (exponent * 10 + i64::from(d - b'0')).min(NUMERIC_EXPONENT_LIMIT);
            }
            if negative {
                exponent = -exponent;
            }
        }
        if exponent.abs() >= NUMERIC_EXPONENT_LIMIT {
            return Err(Refusal::PayloadNotJsonb(
                "a number's exponent beyond numeric's range",
            ));
        }
        if frac.len() as i64 - exponent > NUMERIC_MAX_DSCALE {
            return Err(Refusal::PayloadNotJsonb(
                "a number with more than 16383 digits after the point",
            ));
        }
        // The decimal weight of the first significant digit: JSON writes
        // no leading zero but a lone "0" before the point.
        let first = if self.json[int_start] != b'0' {
            Some(int_len as i64 - 1)
        } else {
            frac.iter().position(|d| *d != b'0').map(|j| -1 - j as i64)
        };
        if first.is_some_and(|w| w + exponent > NUMERIC_MAX_DECIMAL_WEIGHT) {
            return Err(Refusal::PayloadNotJsonb(
                "a number with more than 131072 digits before the point",
            ));
        }
        Ok(())
    }

    fn not_json(&self, what: &str) -> Refusal {
        Refusal::PayloadNotJson(format!("{what} at byte {}", self.i))
    }
}

/// The containers open, innermost last: one bit each, 64 in a word, the
/// words beyond the first kept only for deeper nesting.
#[derive(Default)]
struct Open {
    depth: usize,
    bits: u64,
    outer: Vec<u64>,
}

impl Open {
    fn push(&mut self, kind: In) {
        if self.depth > 0 && self.depth % 64 == 0 {
            self.outer.push(self.bits);
            self.bits = 0;
        }
        let bit = 1u64 << (self.depth % 64);
        match kind {
            In::Object => self.bits |= bit,
            In::Array => self.bits &= !bit,
        }
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.depth -= 1;
        if self.depth > 0 && self.depth % 64 == 0 {
            self.bits = self.outer.pop().unwrap_or_default();
        }
    }

    fn top(&self) -> Option<In> {
        let d = self.depth.checked_sub(1)?;
        Some(if self.bits & (1u64 << (d % 64)) != 0 {
            In::Object
        } else {
            In::Array
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json (the reference grammar) says of `text`.
    fn serde_accepts(text: &str) -> bool {
        use serde::Deserialize;
        let mut de = serde_json::Deserializer::from_str(text);
        serde::de::IgnoredAny::deserialize(&mut de)
            .and_then(|_| de.end())
            .is_ok()
    }

    #[test]
    fn a_payload_that_is_not_json_is_refused_saying_where() {
        for (bad, at) in [
            ("", 0),
            ("not json", 0),
            ("{\"a\": 1", 7),
            ("{\"a\": 1} x", 9),
            ("01", 0),
            ("\"\u{1}\"", 1),
            ("[1,]", 3),
            ("{\"a\" 1}", 5),
            ("{1: 2}", 1),
            ("\"\\x\"", 2),
            ("\"\\u12g4\"", 2),
            ("1.", 2),
            ("1e", 2),
            ("-", 1),
            ("tru", 0),
            ("[1 2]", 3),
            ("{\"a\": 1,}", 8),
            ("\"open", 5),
        ] {
            match payload(bad) {
                Err(Refusal::PayloadNotJson(why)) => {
                    assert!(why.ends_with(&format!("at byte {at}")), "{bad:?}: {why}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            assert!(!serde_accepts(bad), "{bad:?}: the reference refuses it too");
        }
    }

    #[test]
    fn a_payload_jsonb_refuses_is_refused_and_one_it_accepts_passes() {
        // Each agrees with PostgreSQL 15's `::jsonb` (checked against a
        // server in tests/wal_relay.rs).
        let refused_ones = [
            r#""\u0000""#,
            r#"{"k\u0000": 1}"#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800x""#,
            r#""\ud800\u0041""#,
            "1e131072",
            "1e-16384",
            "12e-16384",
            "1.5e-16383",
            "0.00001e-16379",
            "0e1073741823",
            "-0e-1073741823",
            "-0e-1073741822",
        ];
        for bad in refused_ones {
            assert!(
                matches!(payload(bad), Err(Refusal::PayloadNotJsonb(_))),
                "{bad}"
            );
        }
        let accepted = [
            r#""\\u0000""#,
            r#""\\\\u0000""#,
            r#""\ud800\udc00""#,
            r#""\uD83D\uDE00""#,
            "1e1000",
            "1e131071",
            "1e-16383",
            "0.00001e-16378",
            "0.0e16383",
            "0e1073741822",
            "-0e99999",
            "123456789012345678901234567890",
            "[1e400, -1.5E+3, 0, -0.0]",
            "null",
            " \t\r\n{ \"a\" : [ true , false , null , { } , [ ] ] } \n",
            r#""\" \\ \/ \b \f \n \r \t é 😀""#,
        ];
        for good in accepted {
            assert_eq!(payload(good), Ok(()), "{good}");
        }
        // Long runs of digits: the first significant one decides.
        let before = format!("1{}", "0".repeat(131_071));
        assert_eq!(payload(&before), Ok(()));
        let too_many = format!("1{}", "0".repeat(131_072));
        assert!(payload(&too_many).is_err());
        let after = format!("0.{}", "0".repeat(16_383));
        assert_eq!(payload(&after), Ok(()));
        assert!(payload(&format!("{after}0")).is_err());
    }

    #[test]
    fn nesting_deeper_than_serde_jsons_limit_passes_as_jsonb_stores_it() {
        // `outbox_emit` stores 1,000 levels (jsonb's limit is the server's
        // stack); serde_json's default parser stops at 128.
        for depth in [63, 64, 65, 128, 129, 1_000] {
            let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(payload(&arrays), Ok(()), "{depth}");
            let objects = format!("{}1{}", "{\"k\": ".repeat(depth), "}".repeat(depth));
            assert_eq!(payload(&objects), Ok(()), "{depth}");
            let mixed = format!("{}1{}", "[{\"k\": ".repeat(depth), "}]".repeat(depth));
            assert_eq!(payload(&mixed), Ok(()), "{depth}");
            // A container closed by the other kind's bracket is refused,
            // at every depth.
            let crossed = format!(
                "{}{}}}{}",
                "[".repeat(depth),
                "{\"a\": [1]",
                "]".repeat(depth)
            );
            assert!(payload(&crossed).is_ok(), "{depth}");
            let wrong = format!(
                "{}{}]{}",
                "[".repeat(depth),
                "{\"a\": [1]",
                "]".repeat(depth)
            );
            assert!(
                matches!(payload(&wrong), Err(Refusal::PayloadNotJson(_))),
                "{depth}"
            );
        }
    }

    proptest::proptest! {
        /// The eight-at-a-time search finds what a byte at a time finds.
        #[test]
        fn the_string_stop_search_agrees_with_a_plain_one(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), from in 0usize..40) {
            let from = from.min(bytes.len());
            let plain = bytes[from..]
                .iter()
                .position(|b| *b == b'"' || *b == b'\\' || *b < 0x20)
                .map(|at| from + at);
            proptest::prop_assert_eq!(next_string_stop(&bytes, from), plain);
        }

        /// On text made of JSON's own characters, the walk accepts what
        /// serde_json accepts (jsonb's extra rules aside: no `\u`, no
        /// exponent of three digits or more) and never panics.
        #[test]
        fn the_walk_agrees_with_serde_json(text in "[\\[\\]{}\":, 0-9eE.+\\-\\\\ntrufalse\\u{1}é]{0,40}") {
            let jsonb_rules = text.contains("\\u") || long_exponent(&text);
            let ours = payload(&text);
            if !jsonb_rules {
                proptest::prop_assert_eq!(ours.is_ok(), serde_accepts(&text), "{:?}: {:?}", text, ours);
            }
        }

        /// Every value serde_json writes passes.
        #[test]
        fn what_serde_json_writes_passes(v in json_value()) {
            let compact = serde_json::to_string(&v).unwrap();
            proptest::prop_assert_eq!(payload(&compact), Ok(()), "{}", compact);
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            proptest::prop_assert_eq!(payload(&pretty), Ok(()), "{}", pretty);
        }
    }

    /// An exponent of five digits or more, which `numeric` may refuse.
    fn long_exponent(text: &str) -> bool {
        let b = text.as_bytes();
        (0..b.len()).any(|i| {
            let mut j = i + 1;
            if !matches!(b[i], b'e' | b'E') {
                return false;
            }
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            b[j.min(b.len())..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count()
                >= 5
        })
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            (-1e300f64..1e300).prop_map(serde_json::Value::from),
            "[^\u{0}]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[^\u{0}]{0,8}", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
