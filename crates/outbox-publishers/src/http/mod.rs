//! `http://…` and `https://…`: one signed POST per event to a webhook
//! endpoint, per the Standard Webhooks specification. Behind the `http`
//! feature.
//!
//! Each request carries the event's payload JSON as its body, exactly as
//! stored, and the headers `webhook-id` (the event id),
//! `webhook-timestamp` (Unix seconds) and `webhook-signature`
//! (`v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`, keyed with the
//! bytes of the `whsec_` secret), so any Standard Webhooks library verifies
//! it. See `docs/publishers.md` for the headers, what "delivered" means and
//! how each answer is classified.

mod classify;
mod config;
mod message;
mod publisher;
mod sign;

pub use config::{HttpConfig, DEFAULT_MAX_CONCURRENCY, DEFAULT_TIMEOUT_MS, SECRET_ENV};
pub use publisher::HttpPublisher;
pub use sign::{sign, SigningKey, SECRET_PREFIX};
