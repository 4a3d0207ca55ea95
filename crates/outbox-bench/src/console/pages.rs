//! `bench console`'s pages: which it requests on the fill, and each one's
//! server and client times.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::json;
use sqlx::PgPool;

use super::super::stats::{ms, quantile};

/// A page the benchmark requests: its name in the report and its path.
pub struct Page {
    pub name: &'static str,
    pub path: String,
}

/// Server and client times of one page's requests, sorted.
struct Timed {
    server: Vec<Duration>,
    client: Vec<Duration>,
}

/// The pages requested, with paths naming rows of the fill.
pub async fn pages(pool: &PgPool, schema: &outbox::Schema) -> Result<Vec<Page>> {
    let s = schema.name();
    let dead_id: Option<uuid::Uuid> = sqlx::query_scalar(&format!(
        "SELECT id FROM {s}.outbox_events WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL
         ORDER BY seq LIMIT 1"
    ))
    .fetch_optional(pool)
    .await?;
    // A keyset position half-way through the dead letters.
    let dead_middle: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT seq FROM {s}.outbox_events WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL
         ORDER BY seq OFFSET (SELECT count(*) / 2 FROM {s}.outbox_events
                              WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL) LIMIT 1"
    ))
    .fetch_optional(pool)
    .await?;
    let hour_ago = (chrono::Utc::now() - chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M");
    let mut pages = vec![
        ("overview", "/".to_owned()),
        ("overview.json (refresh)", "/overview.json".to_owned()),
        ("stuck aggregates", "/stuck".to_owned()),
        ("events: pending", "/events?state=pending".to_owned()),
        ("events: retrying", "/events?state=retrying".to_owned()),
        ("events: dead", "/events?state=dead".to_owned()),
        ("events: processed", "/events?state=processed".to_owned()),
        (
            "events: an aggregate",
            "/events?aggregate_type=order&aggregate_id=agg-3".to_owned(),
        ),
        (
            "events: type, last hour",
            format!("/events?event_type=order.paid&from={hour_ago}"),
        ),
        ("dead letters", "/dead-letters".to_owned()),
        (
            "dead letters: one type",
            "/dead-letters?aggregate_type=payment".to_owned(),
        ),
        (
            "dead letters: error text",
            "/dead-letters?error=unprocessable".to_owned(),
        ),
    ];
    if let Some(seq) = dead_middle {
        pages.push((
            "dead letters: middle page",
            format!("/dead-letters?after={seq}"),
        ));
    }
    if let Some(id) = dead_id {
        pages.push(("event detail", format!("/events/{id}")));
    }
    Ok(pages
        .into_iter()
        .map(|(name, path)| Page { name, path })
        .collect())
}

/// Requests `page` `n` times after one untimed request (so every page
/// starts from a warm cache), prints and returns its percentiles.
pub async fn time_page(
    client: &reqwest::Client,
    base: &str,
    page: &Page,
    n: u32,
) -> Result<serde_json::Value> {
    get(client, base, &page.path).await?;
    let mut t = Timed {
        server: Vec::new(),
        client: Vec::new(),
    };
    for _ in 0..n {
        let (server_time, client_time) = get(client, base, &page.path).await?;
        t.server.push(server_time);
        t.client.push(client_time);
    }
    t.server.sort();
    t.client.sort();
    let (p50, p99) = (quantile(&t.server, 0.5), quantile(&t.server, 0.99));
    let (c50, c99) = (quantile(&t.client, 0.5), quantile(&t.client, 0.99));
    println!(
        "  {:<28} server p50 {:>7.1} ms  p99 {:>7.1} ms   client p50 {:>7.1} ms  p99 {:>7.1} ms",
        page.name,
        ms(p50),
        ms(p99),
        ms(c50),
        ms(c99)
    );
    Ok(json!({
        "page": page.name, "path": page.path,
        "server_p50_ms": ms(p50), "server_p99_ms": ms(p99),
        "client_p50_ms": ms(c50), "client_p99_ms": ms(c99),
    }))
}

/// One GET: the handler's time (its `Server-Timing`) and the client's.
async fn get(client: &reqwest::Client, base: &str, path: &str) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    let r = client.get(format!("{base}{path}")).send().await?;
    let status = r.status();
    let timing = r
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("handler;dur="))
        .and_then(|v| v.parse::<f64>().ok());
    let body = r.bytes().await?;
    let client_time = started.elapsed();
    ensure!(
        status.is_success(),
        "GET {path} answered {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    let server_time = timing.context("the console sent no Server-Timing")?;
    Ok((Duration::from_secs_f64(server_time / 1000.0), client_time))
}
