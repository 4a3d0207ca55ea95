//! OpenTelemetry export for `outbox relay`: with `tracing.otlp_endpoint`
//! (or `OTEL_EXPORTER_OTLP_ENDPOINT`) set, the relay's publish spans are
//! batched and sent over OTLP HTTP/protobuf. Unset: no exporter, no span,
//! and the relay forwards every stored `traceparent` as it is.

use anyhow::Result;

use crate::config::TracingConfig;

/// The `service.name` when none is configured.
#[cfg(feature = "opentelemetry")]
const DEFAULT_SERVICE_NAME: &str = "outbox";

/// The OTLP/HTTP traces URL under a collector's base URL.
#[cfg(feature = "opentelemetry")]
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// The running exporter; [`Export::shutdown`] sends what is still batched.
#[cfg(feature = "opentelemetry")]
pub struct Export {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

#[cfg(feature = "opentelemetry")]
impl Export {
    /// Starts the exporter if an endpoint is configured.
    pub fn start(c: &TracingConfig) -> Result<Option<Export>> {
        use anyhow::Context as _;
        use opentelemetry_otlp::{Protocol, WithExportConfig as _};
        let Some(base) = &c.otlp_endpoint else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url(base))
            .build()
            .context("tracing.otlp_endpoint: cannot build the OTLP exporter")?;
        let service = c.service_name.as_deref().unwrap_or(DEFAULT_SERVICE_NAME);
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder_empty()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        tracing::info!(endpoint = %traces_url(base), service, "exporting publish spans over OTLP");
        Ok(Some(Export { provider }))
    }

    /// The tracer the relay opens its publish spans with.
    pub fn tracer(&self) -> opentelemetry_sdk::trace::SdkTracer {
        use opentelemetry::trace::TracerProvider as _;
        self.provider.tracer("outbox")
    }

    /// Sends the spans still batched and stops (off the async threads: the
    /// exporter's client blocks).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "could not send the last publish spans");
        }
    }
}

/// Without the `opentelemetry` feature: a configured endpoint is an error.
#[cfg(not(feature = "opentelemetry"))]
pub struct Export;

#[cfg(not(feature = "opentelemetry"))]
impl Export {
    pub fn start(c: &TracingConfig) -> Result<Option<Export>> {
        match &c.otlp_endpoint {
            Some(_) => anyhow::bail!(
                "tracing.otlp_endpoint is set, but this outbox was built without the opentelemetry feature"
            ),
            None => Ok(None),
        }
    }

    pub async fn shutdown(self) {}
}

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    #[test]
    fn spans_go_to_v1_traces_under_the_base_url() {
        for base in ["http://collector:4318", "http://collector:4318/"] {
            assert_eq!(super::traces_url(base), "http://collector:4318/v1/traces");
        }
    }
}
