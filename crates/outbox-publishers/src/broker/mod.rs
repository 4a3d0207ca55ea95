//! What the broker publishers share: the checks of their settings.

pub(crate) mod settings;
