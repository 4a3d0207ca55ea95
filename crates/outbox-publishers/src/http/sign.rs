//! Standard Webhooks signatures: the `whsec_` secret and the `v1` scheme.

use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a Standard Webhooks secret: `whsec_` + base64 key.
pub const SECRET_PREFIX: &str = "whsec_";

/// Standard base64 that accepts the key with or without its `=` padding.
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The shortest and longest key the specification allows, in bytes.
pub(crate) const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// The key behind a `whsec_` secret: the bytes the base64 after the prefix
/// decodes to. Never printed: `Debug` shows `SigningKey(***)`.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

impl SigningKey {
    /// Decodes `whsec_` + base64 (24 to 64 bytes). The error says what is
    /// wrong without quoting the secret.
    pub fn parse(secret: &str) -> Result<SigningKey, String> {
        let Some(encoded) = secret.trim().strip_prefix(SECRET_PREFIX) else {
            return Err(format!(
                "must be {SECRET_PREFIX} followed by a base64 key (the Standard Webhooks form), e.g. {SECRET_PREFIX}$(openssl rand -base64 32)"
            ));
        };
        let key = KEY_BASE64.decode(encoded).map_err(|_| {
            format!(
                "the part after {SECRET_PREFIX} is not standard base64 (A-Z a-z 0-9 + /, = padding); generate one with: echo {SECRET_PREFIX}$(openssl rand -base64 32)"
            )
        })?;
        if !KEY_BYTES.contains(&key.len()) {
            return Err(format!(
                "the key is {} bytes; the Standard Webhooks specification asks for {} to {} random bytes, e.g. {SECRET_PREFIX}$(openssl rand -base64 32)",
                key.len(),
                KEY_BYTES.start(),
                KEY_BYTES.end()
            ));
        }
        Ok(SigningKey(key))
    }

    /// The key's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The `webhook-signature` value for one request: `v1,` followed by the
/// base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under `key`.
pub fn sign(key: &SigningKey, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(key.bytes()).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector published with the Standard Webhooks reference
    /// libraries: reproducing it says a receiver's library accepts ours.
    #[test]
    fn signs_the_published_test_vector() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    /// The same recipe computed independently, straight from the `hmac`
    /// crate, over an odd body.
    #[test]
    fn agrees_with_a_plain_hmac_of_id_timestamp_and_body() {
        let raw = [7u8; 32];
        let key = SigningKey::parse(&format!("whsec_{}", STANDARD.encode(raw))).unwrap();
        let body = "{\"s\": \"é 😀 \\u0000\", \"n\": 1e400}".as_bytes();
        let mut mac = Hmac::<Sha256>::new_from_slice(&raw).unwrap();
        mac.update(b"0190a1b2-0000-7000-8000-000000000001.1700000000.");
        mac.update(body);
        let want = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
        assert_eq!(
            sign(
                &key,
                "0190a1b2-0000-7000-8000-000000000001",
                1_700_000_000,
                body
            ),
            want
        );
    }

    #[test]
    fn secrets_must_be_whsec_base64_of_24_to_64_bytes() {
        assert!(SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        let unpadded = STANDARD.encode([1u8; 25]).trim_end_matches('=').to_owned();
        assert!(SigningKey::parse(&format!("whsec_{unpadded}")).is_ok());
        for (bad, why) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"),
            ("whsec_not base64!", "base64"),
            ("whsec_c2hvcnQ=", "5 bytes"),
            ("", "whsec_"),
        ] {
            let e = SigningKey::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(bad.len() < 7 || !e.contains(&bad[6..]), "{e}");
        }
        let long = format!("whsec_{}", STANDARD.encode([0u8; 65]));
        assert!(SigningKey::parse(&long).unwrap_err().contains("65 bytes"));
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(format!("{key:?}"), "SigningKey(***)");
    }
}
