//! A webhook receiver for tests: an HTTP/1.1 server on a free port of
//! `127.0.0.1`, started per test, that checks every request's Standard
//! Webhooks signature exactly as the specification says, records what it
//! accepted in order of arrival, and answers as it is told (500, 429 with
//! `Retry-After`, 400, slowly, or not at all while stopped).
//!
//! A request whose signature does not verify is answered `401` and
//! recorded in [`Receiver::refused`]; [`Receiver::assert_all_signed`]
//! fails the test if there is any.
//!
//! ```no_run
//! # async fn demo() {
//! use outbox_testkit::webhook::{Answer, Receiver};
//! let receiver = Receiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
//! receiver.script([Answer::Status(500)]); // the next request gets a 500
//! // … point a publisher at receiver.url("/hook") …
//! receiver.assert_all_signed();
//! # }
//! ```
//!
//! Longer than most files: the signature check is written out step by step
//! as the specification gives it, so a test failure points at one step.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha2::Sha256;
use tokio::net::TcpSocket;
use tokio::task::{JoinHandle, JoinSet};
use uuid::Uuid;

/// How far a `webhook-timestamp` may be from the receiver's clock: the
/// specification's suggested tolerance against replays.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The largest body the receiver takes; a larger one is answered
/// `413 Payload Too Large`, as a receiver with a body limit would.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How the receiver answers a request whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `200 OK`: the delivery is kept.
    Ok,
    /// This status, with a short body saying so; kept only if 2xx.
    Status(u16),
    /// This status with `Retry-After: value` (seconds or an HTTP date).
    RetryAfter(u16, String),
    /// Wait this long, then `200 OK` (kept if the client is still there).
    Slow(Duration),
}

/// One request the receiver verified and answered.
#[derive(Debug, Clone)]
pub struct Answered {
    /// The `webhook-id` header.
    pub webhook_id: String,
    /// When it arrived.
    pub at: Instant,
    /// The status it was answered with.
    pub status: u16,
}

/// One delivery the receiver accepted (answered 2xx), as it arrived.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request path and query, as sent (percent-encoded).
    pub path: String,
    /// The headers, names in lower case, values as UTF-8 text.
    pub headers: BTreeMap<String, String>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Delivery {
    /// The event id from the `outbox-event-id` header.
    pub fn event_id(&self) -> Option<Uuid> {
        self.headers
            .get("outbox-event-id")
            .and_then(|v| Uuid::parse_str(v).ok())
    }
}

#[derive(Default)]
struct State {
    key: Vec<u8>,
    script: VecDeque<Answer>,
    otherwise: Option<Answer>,
    deliveries: Vec<Delivery>,
    requests: Vec<Answered>,
    refused: Vec<String>,
}

/// The receiver. Dropping it stops the server.
pub struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(server) = self.server.lock().unwrap_or_else(|e| e.into_inner()).take() {
            server.abort();
        }
    }
}

/// The key of a `whsec_` secret, decoded as the specification says.
fn key_of(secret: &str) -> Vec<u8> {
    let base64 = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let encoded = secret
        .strip_prefix("whsec_")
        .unwrap_or_else(|| panic!("a Standard Webhooks secret starts with whsec_"));
    base64
        .decode(encoded)
        .unwrap_or_else(|e| panic!("the secret after whsec_ is not base64: {e}"))
}

/// The signature the specification asks for: `v1,` + base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}` keyed with the secret's bytes.
pub fn expected_signature(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&key_of(secret)).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// Checks a request's headers and body against `key`, as the
/// specification's verifier does: the three headers present, the
/// timestamp within [`TIMESTAMP_TOLERANCE`], and one of the
/// space-separated `v1,…` signatures equal (compared in constant time) to
/// the HMAC of `{id}.{timestamp}.{body}`.
fn verify(key: &[u8], headers: &hyper::HeaderMap, body: &[u8]) -> Result<String, String> {
    let get = |name: &str| {
        headers
            .get(name)
            .ok_or_else(|| format!("no {name} header"))
            .and_then(|v| {
                v.to_str()
                    .map_err(|_| format!("{name} is not ASCII"))
                    .map(str::to_owned)
            })
    };
    let (id, timestamp, signatures) = (
        get("webhook-id")?,
        get("webhook-timestamp")?,
        get("webhook-signature")?,
    );
    let sent: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp {timestamp:?} is not an integer"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if sent.abs_diff(now) > TIMESTAMP_TOLERANCE.as_secs() {
        return Err(format!(
            "webhook-timestamp {sent} is {} s from now",
            sent.abs_diff(now)
        ));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    for signature in signatures.split(' ') {
        let Some(("v1", encoded)) = signature.split_once(',') else {
            continue;
        };
        let Ok(bytes) = STANDARD.decode(encoded) else {
            continue;
        };
        if mac.clone().verify_slice(&bytes).is_ok() {
            return Ok(id);
        }
    }
    Err(format!(
        "no v1 signature in {signatures:?} matches the body for webhook-id {id}"
    ))
}

fn respond(status: u16, retry_after: Option<&str>, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(v) = retry_after {
        if let Ok(v) = hyper::header::HeaderValue::from_str(v) {
            r.headers_mut().insert(hyper::header::RETRY_AFTER, v);
        }
    }
    r
}

async fn handle(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    let path = req
        .uri()
        .path_and_query()
        .map_or("/".to_owned(), |p| p.as_str().to_owned());
    if req.method() == hyper::Method::HEAD {
        return Ok(respond(200, None, ""));
    }
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => return Ok(respond(400, None, "body broke off")),
    };
    if body.len() > MAX_BODY_BYTES {
        let text = format!("payload of {} bytes is above {MAX_BODY_BYTES}", body.len());
        return Ok(respond(413, None, &text));
    }
    let key = state.lock().unwrap().key.clone();
    let webhook_id = match verify(&key, &parts.headers, &body) {
        Ok(id) => id,
        Err(why) => {
            state.lock().unwrap().refused.push(why.clone());
            return Ok(respond(401, None, &format!("signature refused: {why}")));
        }
    };
    let answer = {
        let mut s = state.lock().unwrap();
        s.script
            .pop_front()
            .or_else(|| s.otherwise.clone())
            .unwrap_or(Answer::Ok)
    };
    let (status, retry_after) = match &answer {
        Answer::Ok => (200, None),
        Answer::Status(code) => (*code, None),
        Answer::RetryAfter(code, value) => (*code, Some(value.as_str())),
        Answer::Slow(wait) => {
            tokio::time::sleep(*wait).await;
            (200, None)
        }
    };
    let mut s = state.lock().unwrap();
    s.requests.push(Answered {
        webhook_id,
        at,
        status,
    });
    if (200..300).contains(&status) {
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .fold(BTreeMap::new(), |mut m, (k, v)| {
                m.entry(k).or_insert(v);
                m
            });
        s.deliveries.push(Delivery {
            path,
            headers,
            body,
            at,
        });
    }
    Ok(respond(status, retry_after, &format!("answered {status}")))
}

async fn serve(listener: tokio::net::TcpListener, state: Arc<Mutex<State>>) {
    // Dropped with this task: stopping the server cuts every connection.
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| handle(state.clone(), req));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

impl Receiver {
    /// Starts a receiver for `secret` (`whsec_` + base64) on a free port of
    /// `127.0.0.1`.
    pub async fn start(secret: &str) -> Receiver {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0))).expect("binding 127.0.0.1:0");
        let addr = listener.local_addr().expect("the receiver's address");
        let state = Arc::new(Mutex::new(State {
            key: key_of(secret),
            ..State::default()
        }));
        let server = tokio::spawn(serve(listener, state.clone()));
        Receiver {
            addr,
            state,
            server: Mutex::new(Some(server)),
        }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Answers the next requests with `answers`, one each, in order; then
    /// as [`Receiver::answer_all`] says (`200 OK` by default).
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.lock().unwrap().script.extend(answers);
    }

    /// Answers every request without a scripted answer with `answer`.
    pub fn answer_all(&self, answer: Answer) {
        self.state.lock().unwrap().otherwise = Some(answer);
    }

    /// Stops accepting connections and cuts the open ones: requests are
    /// refused until [`Receiver::start_again`]. What was accepted stays
    /// recorded.
    pub fn stop(&self) {
        if let Some(server) = self.server.lock().unwrap().take() {
            server.abort();
        }
    }

    /// Listens again on the same port after [`Receiver::stop`].
    pub async fn start_again(&self) {
        let mut server = self.server.lock().unwrap();
        if server.is_some() {
            return;
        }
        let started = Instant::now();
        let listener = loop {
            match listen(self.addr) {
                Ok(l) => break l,
                Err(e) if started.elapsed() < Duration::from_secs(10) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("listening on {} again: {e}", self.addr),
            }
        };
        *server = Some(tokio::spawn(serve(listener, self.state.clone())));
    }

    /// Every delivery accepted so far, in order of arrival.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().deliveries.clone()
    }

    /// Every request whose signature verified, with its answer, in order of
    /// arrival.
    pub fn requests(&self) -> Vec<Answered> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Why each refused request was refused (a signature that did not
    /// verify), in order.
    pub fn refused(&self) -> Vec<String> {
        self.state.lock().unwrap().refused.clone()
    }

    /// Fails the test if any request was refused for its signature.
    pub fn assert_all_signed(&self) {
        let refused = self.refused();
        assert!(
            refused.is_empty(),
            "{} request(s) to the webhook receiver had no valid Standard Webhooks signature; first: {}",
            refused.len(),
            refused[0]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    /// Sends one POST with `headers` and `body`; returns the status.
    async fn post(r: &Receiver, headers: &[(&str, String)], body: &str) -> u16 {
        let mut stream = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        let mut req = format!(
            "POST /hook HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
            r.addr,
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer[9..12].parse().unwrap()
    }

    fn now() -> String {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .to_string()
    }

    #[test]
    fn the_published_test_vector_verifies() {
        assert_eq!(
            expected_signature(
                SECRET,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                "1614265330",
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[tokio::test]
    async fn signed_requests_are_kept_and_bad_signatures_refused() {
        let r = Receiver::start(SECRET).await;
        let body = r#"{"n": 1}"#;
        let ts = now();
        let good = expected_signature(SECRET, "evt-1", &ts, body.as_bytes());
        let signed = |sig: String, ts: String| {
            vec![
                ("webhook-id", "evt-1".to_owned()),
                ("webhook-timestamp", ts),
                ("webhook-signature", sig),
            ]
        };
        // one good signature among others verifies, as the spec allows
        let several = format!("v1,bm9wZQ== {good} v2,xyz");
        assert_eq!(post(&r, &signed(several, ts.clone()), body).await, 200);
        assert_eq!(r.deliveries().len(), 1);
        assert_eq!(r.deliveries()[0].body, body.as_bytes());
        r.assert_all_signed();

        // a tampered body, a wrong key, a stale timestamp, a missing header
        assert_eq!(
            post(&r, &signed(good.clone(), ts.clone()), r#"{"n": 2}"#).await,
            401
        );
        let other = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let wrong = expected_signature(other, "evt-1", &ts, body.as_bytes());
        assert_eq!(post(&r, &signed(wrong, ts.clone()), body).await, 401);
        let old = (now().parse::<i64>().unwrap() - 3_600).to_string();
        let stale = expected_signature(SECRET, "evt-1", &old, body.as_bytes());
        assert_eq!(post(&r, &signed(stale, old), body).await, 401);
        assert_eq!(post(&r, &[("webhook-id", "evt-1".into())], body).await, 401);
        assert_eq!(r.refused().len(), 4, "{:?}", r.refused());
        assert_eq!(r.deliveries().len(), 1, "refused requests are not kept");
        let failed = std::panic::catch_unwind(|| r.assert_all_signed());
        assert!(failed.is_err(), "a bad signature must fail the test");
    }

    #[tokio::test]
    async fn answers_as_told_and_stops_and_starts() {
        let r = Receiver::start(SECRET).await;
        let body = "{}";
        let request = |id: &str| {
            let ts = now();
            vec![
                ("webhook-id", id.to_owned()),
                (
                    "webhook-signature",
                    expected_signature(SECRET, id, &ts, body.as_bytes()),
                ),
                ("webhook-timestamp", ts),
            ]
        };
        r.script([
            Answer::Status(500),
            Answer::RetryAfter(429, "2".into()),
            Answer::Status(400),
        ]);
        assert_eq!(post(&r, &request("a"), body).await, 500);
        assert_eq!(post(&r, &request("a"), body).await, 429);
        assert_eq!(post(&r, &request("a"), body).await, 400);
        assert_eq!(post(&r, &request("a"), body).await, 200);
        let statuses: Vec<u16> = r.requests().iter().map(|q| q.status).collect();
        assert_eq!(statuses, vec![500, 429, 400, 200]);
        assert_eq!(r.deliveries().len(), 1);

        r.stop();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(tokio::net::TcpStream::connect(r.addr).await.is_err());
        r.start_again().await;
        assert_eq!(post(&r, &request("b"), body).await, 200);
        assert_eq!(r.deliveries().len(), 2, "deliveries survive a restart");
    }
}
