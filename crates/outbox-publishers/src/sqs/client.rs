//! The services' clients: the SDK's configuration from our settings, and
//! where a destination (a queue name or URL, a topic ARN) is.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

use super::classify::{classify_call, CallFailure};
use super::config::{queue_url_name, topic_arn_parts, valid_queue_name, Common};

/// The service's client.
#[derive(Debug, Clone)]
pub(super) enum Service {
    Sqs(aws_sdk_sqs::Client),
    Sns(aws_sdk_sns::Client),
}

/// Which service a core talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Sqs,
    Sns,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Sqs => "sqs",
            Kind::Sns => "sns",
        }
    }
}

/// Where a call goes: a queue URL or a topic ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) address: String,
    /// How errors name it: `sqs queue NAME`, `sns topic ARN`.
    pub(super) shown: String,
    pub(super) fifo: bool,
}

impl Service {
    /// The client of `kind`'s service, with the SDK's configuration.
    pub(super) async fn new(kind: Kind, common: &Common) -> Result<Service, String> {
        let config = sdk_config(kind, common).await?;
        Ok(match kind {
            Kind::Sqs => Service::Sqs(aws_sdk_sqs::Client::new(&config)),
            Kind::Sns => Service::Sns(aws_sdk_sns::Client::new(&config)),
        })
    }
}

/// Queue names already resolved with `GetQueueUrl`, and their URLs.
pub(super) type QueueUrls = Mutex<HashMap<String, String>>;

/// The SDK's configuration: region, credentials and endpoint from the
/// standard chain, our settings winning; rustls (ring) for TLS; no retries
/// inside the SDK (the relay owns backoff).
async fn sdk_config(kind: Kind, common: &Common) -> Result<SdkConfig, String> {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = TimeoutConfig::builder()
        .operation_timeout(Duration::from_millis(common.timeout_ms))
        .connect_timeout(Duration::from_millis(common.connect_timeout_ms))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts)
        .retry_config(RetryConfig::disabled());
    if let Some(region) = &common.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &common.endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    if config.region().is_some() {
        return Ok(config);
    }
    match &common.fallback_region {
        Some(region) => Ok(config
            .into_builder()
            .region(Region::new(region.clone()))
            .build()),
        None => Err(format!(
            "{}: no AWS region: set AWS_REGION (or a profile's region, or region in [publisher.{}])",
            kind.name(),
            kind.name()
        )),
    }
}

/// Where `destination` (a queue name or URL, or a topic ARN) is,
/// resolving a queue name once with `GetQueueUrl`.
pub(super) async fn locate(
    service: &Service,
    destination: &str,
    urls: &QueueUrls,
) -> Result<Target, CallFailure> {
    match service {
        Service::Sqs(client) => {
            let name = if destination.contains("://") {
                let Some(name) = queue_url_name(destination) else {
                    return Err(CallFailure::Invalid(format!(
                        "{destination:?} is not a queue URL or name"
                    )));
                };
                return Ok(Target {
                    address: destination.to_owned(),
                    shown: format!("sqs queue {name}"),
                    fifo: name.ends_with(".fifo"),
                });
            } else {
                destination
            };
            if !valid_queue_name(name) {
                return Err(CallFailure::Invalid(format!(
                    "{:?} is not a queue name (letters, digits, - and _, up to 80 characters, .fifo at the end for FIFO)",
                    outbox::redact::shorten(name, 100)
                )));
            }
            let shown = format!("sqs queue {name}");
            let known = urls.lock().unwrap().get(name).cloned();
            let address = match known {
                Some(url) => url,
                None => {
                    let answer = client
                        .get_queue_url()
                        .queue_name(name)
                        .send()
                        .await
                        .map_err(|e| classify_call(&e, &format!("{shown} (GetQueueUrl)")))?;
                    let url = answer.queue_url().unwrap_or_default().to_owned();
                    if url.is_empty() {
                        return Err(CallFailure::Retry(format!(
                            "{shown}: GetQueueUrl answered no URL"
                        )));
                    }
                    urls.lock().unwrap().insert(name.to_owned(), url.clone());
                    url
                }
            };
            Ok(Target {
                address,
                shown,
                fifo: name.ends_with(".fifo"),
            })
        }
        Service::Sns(_) => match topic_arn_parts(destination) {
            Some(_) => Ok(Target {
                address: destination.to_owned(),
                shown: format!("sns topic {destination}"),
                fifo: destination.ends_with(".fifo"),
            }),
            None => Err(CallFailure::Invalid(format!(
                "{:?} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)",
                outbox::redact::shorten(destination, 100)
            ))),
        },
    }
}
