//! What the broker publishers share: the checks of their settings and the
//! plumbing around every publisher (its `Debug`, `with_envelope`,
//! `from_url`, `config`, the timeout on connecting, an error's causes),
//! and the shape of one message's answer before its call is settled.

#[cfg(any(feature = "nats", feature = "redis"))]
pub(crate) mod answer;
pub(crate) mod publisher;
pub(crate) mod settings;
