//! What the broker publishers share: the checks of their settings and the
//! plumbing around every publisher (its `Debug`, `with_envelope`,
//! `from_url`, `config`, the timeout on connecting, an error's causes).

pub(crate) mod publisher;
pub(crate) mod settings;
