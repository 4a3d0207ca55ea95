//! The relay daemon's runtime, beside the commands: the HTTP server and its
//! accept loop (`/metrics`, `/healthz`, `/readyz`, the console mounted on
//! it), the metrics and the database probe that feeds them, span export,
//! and the checks a daemon makes of its sessions before it starts.
//! `outbox relay` and `outbox console` serve through it.

pub mod db_probe;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod session_check;
pub mod telemetry;
