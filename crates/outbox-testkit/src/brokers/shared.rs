//! [`Broker`]: a broker for the tests of one publisher, either shared by
//! every test of a test binary or one test's own, stopped and started from
//! async code.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::server::{Launch, Server};

/// A broker that several tests may hold at once: one [`Server`] behind a
/// lock, started and stopped on a blocking thread so async tests never
/// block their runtime on it.
#[derive(Debug)]
pub struct Broker<L: Launch>(Arc<Mutex<Server<L>>>);

impl<L: Launch> Clone for Broker<L> {
    fn clone(&self) -> Self {
        Broker(self.0.clone())
    }
}

/// How clients reach a broker: the URL its tests connect with.
pub trait Address: Launch + Sized {
    /// The URL of `server`, as its clients take it.
    fn url(server: &Server<Self>) -> String;
}

/// Where a test binary keeps its shared broker: `None` once the broker was
/// skipped ([`super::SKIP_ENV`]).
pub type SharedCell<L> = OnceLock<Option<Broker<L>>>;

impl<L: Launch + Default + Send + 'static> Broker<L> {
    /// The broker in `cell`, started by the first test that asks (the others
    /// wait for it); `None` if skipped.
    ///
    /// # Panics
    ///
    /// If the broker cannot be started (the message says what is missing).
    pub async fn shared(cell: &'static SharedCell<L>) -> Option<Broker<L>> {
        tokio::task::spawn_blocking(|| {
            cell.get_or_init(|| Server::<L>::start_or_skip().map(Broker::from))
                .clone()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// A broker of the calling test's own, for cases that stop, freeze or
    /// reconfigure it; `None` if skipped.
    ///
    /// # Panics
    ///
    /// As [`Broker::shared`].
    pub async fn private() -> Option<Broker<L>> {
        tokio::task::spawn_blocking(Server::<L>::start_or_skip)
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
            .map(Broker::from)
    }
}

impl<L: Launch + Send + 'static> Broker<L> {
    /// The server, locked for a synchronous look or change (its URL, a
    /// freeze). Do not hold it across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, Server<L>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills the broker (`SIGKILL`), keeping its data.
    pub async fn stop(&self) {
        let server = self.0.clone();
        tokio::task::spawn_blocking(move || {
            server.lock().unwrap_or_else(|e| e.into_inner()).stop()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    }

    /// Starts the broker again with the same port and data; returns how
    /// long it took to be ready.
    ///
    /// # Panics
    ///
    /// If it does not start (the message holds the end of its log).
    pub async fn start_again(&self) -> Duration {
        let server = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = server.lock().unwrap_or_else(|e| e.into_inner());
            s.start_again().unwrap_or_else(|e| panic!("{e}"));
            s.last_start_duration()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// [`Broker::start_again`], saying on stderr how long it took: what a
    /// harness's `start_broker` does.
    pub async fn restart(&self) {
        let took = self.start_again().await;
        eprintln!("{} restarted in {took:.2?}", L::NAME);
    }
}

impl<L: Address + Send + 'static> Broker<L> {
    /// The URL clients connect with ([`Address::url`]); it stays the same
    /// across [`Broker::restart`].
    pub fn url(&self) -> String {
        L::url(&self.lock())
    }
}

impl<L: Address> Server<L> {
    /// The URL clients connect with ([`Address::url`]).
    pub fn url(&self) -> String {
        L::url(self)
    }
}

impl<L: Launch> From<Server<L>> for Broker<L> {
    fn from(server: Server<L>) -> Self {
        eprintln!("{} ready in {:.2?}", L::NAME, server.last_start_duration());
        Broker(Arc::new(Mutex::new(server)))
    }
}
