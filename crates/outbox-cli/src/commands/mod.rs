//! One module per subcommand, and [`targets`]: what `--source` selects.

#[cfg(feature = "bench")]
pub mod bench;
pub mod cleanup;
pub mod config;
pub mod console;
pub mod dead_letters;
pub mod demo;
pub mod healthcheck;
pub mod migrate;
pub mod relay;
pub mod status;
pub mod targets;
