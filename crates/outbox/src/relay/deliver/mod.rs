//! The delivery core, one for both sources of events (DESIGN.md, "Two
//! delivery modes, one engine"): the table worker claims its batches and
//! acknowledges rows, the WAL reader streams its batches and confirms the
//! slot, and between "a batch in order" and "what became of each event"
//! both go through here.
//!
//! | concept | file |
//! |---------|------|
//! | a batch in lanes: no event overtakes its aggregate's earlier one, none waits for another aggregate's; the next batch joining while this one's last calls are in flight | here ([`Core::deliver_joined`]), [`lanes`] |
//! | one publish call: the publish timeout, the spans | here ([`Core::send`]) |
//! | outcomes into deliveries, retries, dead letters, an outage | [`outcomes`] |
//! | the pauses, as a source that does not claim rows reads them | [`pauses`] |

pub(crate) mod lanes;
pub(crate) mod outcomes;
pub(crate) mod pauses;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::event::Event;
use crate::publisher::{Outcome, Publisher};
use crate::relay::config::RelayConfig;
use lanes::Lanes;
use outcomes::{RetryPolicy, Settlement};

/// The most batches published as one (the first and those that joined
/// it while its calls were in flight): in the table mode this many
/// claims, in the WAL mode this many full batches' worth of events (its
/// batches end where the stream pauses, not only at `batch_size`). Past
/// this, the batch ends with its slowest call, and its acknowledgement
/// (rows acked, slot confirmed) goes out before the next batch.
pub(crate) const JOINED_MAX: usize = 4;

/// What one turn of [`Core::deliver_joined`] came to.
enum Step<A, J> {
    /// A call was answered.
    Answered(A),
    /// The later batch arrived.
    Joined(J),
}

/// What publishes a batch and judges its outcomes.
#[derive(Clone)]
pub(crate) struct Core {
    publisher: Arc<dyn Publisher>,
    /// The most events in one call of a publisher that takes one call at a
    /// time (`batch_size`): batches joined in flight never make one larger.
    call_max: usize,
    timeout: Duration,
    policy: RetryPolicy,
    #[cfg(feature = "opentelemetry")]
    tracer: Option<Arc<crate::trace::PublishTracer>>,
}

impl Core {
    pub(crate) fn new(
        publisher: Arc<dyn Publisher>,
        config: &RelayConfig,
        #[cfg(feature = "opentelemetry")] tracer: Option<Arc<crate::trace::PublishTracer>>,
    ) -> Self {
        Core {
            publisher,
            call_max: config.batch_size.max(1),
            timeout: Duration::from_millis(config.publish_timeout_ms),
            policy: config.retry_policy(),
            #[cfg(feature = "opentelemetry")]
            tracer,
        }
    }

    /// Publishes `batch` (in `seq` order) in lanes ([`lanes`]): up to the
    /// publisher's [`Publisher::concurrent_calls`] calls in flight, an
    /// aggregate's next event sent as soon as its previous one is
    /// delivered, every outcome recorded in `s`, until the batch is done or
    /// the transport is down. `prepare` sees each group before it is sent
    /// and returns what may go; what it keeps back (recorded in `s` by it)
    /// stops its lane.
    ///
    /// Later batches may join: `next` (the claim of the batch after this
    /// one, the stream read ahead) is awaited while calls are in flight,
    /// and if it ends before this batch is done and without an outage,
    /// `join` turns its output into events that join the lanes behind
    /// their aggregates' earlier ones (so a slow call holds only its
    /// aggregate, not the next batch), and may give the `next` after it.
    ///
    /// Returns the events never sent, in `seq` order (those behind an
    /// event that was not delivered, and, after an outage, the rest), and
    /// the `next` that had not ended when this batch was done.
    pub(crate) async fn deliver_joined<F, N, J>(
        &self,
        s: &mut Settlement,
        batch: Vec<Event>,
        mut next: Option<N>,
        mut join: J,
        mut prepare: F,
    ) -> (Vec<Event>, Option<N>)
    where
        F: FnMut(&mut Settlement, Vec<Event>) -> Vec<Event>,
        N: Future + Unpin,
        J: FnMut(N::Output) -> (Vec<Event>, Option<N>),
    {
        let calls = self.publisher.concurrent_calls().max(1);
        let per_call = self.publisher.events_per_call().clamp(1, self.call_max);
        let mut lanes = Lanes::new(batch);
        let mut in_flight = FuturesUnordered::new();
        loop {
            while in_flight.len() < calls && s.outage.is_none() && lanes.any_ready() {
                let group = prepare(s, lanes.take(per_call));
                if group.is_empty() {
                    continue;
                }
                in_flight.push(async move {
                    let result = self.send(&group).await;
                    (group, result)
                });
            }
            if in_flight.is_empty() {
                break;
            }
            let joining = next.is_some() && s.outage.is_none();
            let step = {
                let next_ends = async {
                    match next.as_mut() {
                        Some(n) if joining => n.await,
                        _ => std::future::pending().await,
                    }
                };
                tokio::select! {
                    Some(answered) = in_flight.next() => Step::Answered(answered),
                    out = next_ends => Step::Joined(out),
                }
            };
            match step {
                Step::Joined(out) => {
                    let (events, after) = join(out);
                    next = after;
                    lanes.extend(events);
                }
                Step::Answered((group, Err(message))) => self.not_sent(s, group, message),
                Step::Answered((group, Ok(outcomes))) => {
                    for (e, o) in group.iter().zip(&outcomes) {
                        if matches!(o, Outcome::Delivered) {
                            lanes.delivered(e);
                        }
                    }
                    self.settle(s, group, outcomes);
                }
            }
        }
        (lanes.left_over(), next)
    }

    /// Sends one group within the publish timeout; `Err` says why the
    /// transport is down for all of it. With a tracer, each traced event
    /// is sent inside its publish span, which ends with its outcome.
    pub(crate) async fn send(&self, group: &[Event]) -> Result<Vec<Outcome>, String> {
        #[cfg(feature = "opentelemetry")]
        if let Some(tracer) = &self.tracer {
            let publisher = &self.publisher;
            let (traced, spans) =
                tracer.start(publisher.name(), |e| publisher.destination(e), group);
            let result = self.send_as_is(&traced).await;
            match &result {
                Ok(outcomes) => spans.end(outcomes),
                Err(message) => spans.end_unavailable(message),
            }
            return result;
        }
        self.send_as_is(group).await
    }

    async fn send_as_is(&self, group: &[Event]) -> Result<Vec<Outcome>, String> {
        match tokio::time::timeout(self.timeout, self.publisher.publish(group)).await {
            Err(_) => Err(format!(
                "publish timed out after {} ms",
                self.timeout.as_millis()
            )),
            Ok(Err(e)) => Err(e.message),
            Ok(Ok(outcomes)) => Ok(outcomes),
        }
    }

    /// Records the outcome of each event of `group` in `s`, in order (a
    /// missing outcome counts as a retry, and is logged).
    pub(crate) fn settle(&self, s: &mut Settlement, group: Vec<Event>, outcomes: Vec<Outcome>) {
        if outcomes.len() != group.len() {
            tracing::error!(
                publisher = self.publisher.name(),
                events = group.len(),
                outcomes = outcomes.len(),
                "publisher returned the wrong number of outcomes; missing ones are retried"
            );
        }
        s.settle(group, outcomes, &self.policy);
    }

    /// The transport is down for `group`: an outage, and the group not
    /// sent (no attempt counted).
    fn not_sent(&self, s: &mut Settlement, group: Vec<Event>, message: String) {
        s.transport_down(message);
        for e in &group {
            s.blocked.insert(e.aggregate_id.clone());
        }
        s.unsent.extend(group);
    }

    /// One dead-letter line per event dead-lettered in `s`.
    pub(crate) fn log_dead_letters(s: &Settlement) {
        for (e, error) in &s.dead {
            tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;
    use crate::publisher::Unavailable;
    use std::sync::Mutex;

    /// Four calls at once; aggregate `slow`'s events take 300 ms; every
    /// event's delivery is recorded in order.
    #[derive(Default)]
    struct SlowOne {
        delivered: Mutex<Vec<i64>>,
        /// Calls of many events each (a pipelining client), not one.
        batches: bool,
    }

    #[async_trait::async_trait]
    impl Publisher for SlowOne {
        fn name(&self) -> &str {
            "slow-one"
        }

        async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
            for e in batch {
                if e.aggregate_id == "slow" {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                self.delivered.lock().unwrap().push(e.seq);
            }
            Ok(vec![Outcome::Delivered; batch.len()])
        }

        fn concurrent_calls(&self) -> usize {
            4
        }

        fn events_per_call(&self) -> usize {
            if self.batches {
                usize::MAX
            } else {
                1
            }
        }
    }

    fn core(p: Arc<SlowOne>) -> Core {
        Core::new(
            p,
            &RelayConfig::default(),
            #[cfg(feature = "opentelemetry")]
            None,
        )
    }

    #[tokio::test]
    async fn a_later_batch_is_sent_while_a_slow_call_of_the_earlier_one_is_in_flight() {
        let p = Arc::new(SlowOne::default());
        let mut s = Settlement::default();
        let next = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            vec![ev(3, "b"), ev(4, "slow"), ev(5, "c")]
        });
        let (left, next) = core(p.clone())
            .deliver_joined(
                &mut s,
                vec![ev(1, "slow"), ev(2, "b")],
                Some(next),
                |joined| (joined, None),
                |_, group| group,
            )
            .await;
        assert!(left.is_empty() && next.is_none(), "the later batch joined");
        assert_eq!(s.delivered.len(), 5);
        let order = p.delivered.lock().unwrap().clone();
        assert_eq!(
            order,
            [2, 3, 5, 1, 4],
            "b and c go while slow's first is in flight; slow's second waits for it"
        );
    }

    #[tokio::test]
    async fn a_later_batch_that_arrives_after_this_one_is_done_is_handed_back() {
        let p = Arc::new(SlowOne::default());
        let mut s = Settlement::default();
        let next = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            vec![ev(3, "c")]
        });
        let (left, next) = core(p.clone())
            .deliver_joined(
                &mut s,
                vec![ev(1, "a"), ev(2, "b")],
                Some(next),
                |j| (j, None),
                |_, g| g,
            )
            .await;
        assert!(left.is_empty());
        let later = next.expect("handed back, not joined").await;
        assert_eq!(later.iter().map(|e| e.seq).collect::<Vec<_>>(), [3]);
        assert_eq!(*p.delivered.lock().unwrap(), [1, 2]);
    }

    #[tokio::test]
    async fn a_pipelining_publisher_gets_a_joined_batch_in_a_call_of_its_own_while_the_first_waits()
    {
        let p = Arc::new(SlowOne {
            batches: true,
            ..SlowOne::default()
        });
        let mut s = Settlement::default();
        let next = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            vec![ev(3, "c"), ev(4, "d")]
        });
        let (left, _) = core(p.clone())
            .deliver_joined(
                &mut s,
                vec![ev(1, "slow"), ev(2, "b")],
                Some(next),
                |j| (j, None),
                |_, g| g,
            )
            .await;
        assert!(left.is_empty());
        assert_eq!(
            *p.delivered.lock().unwrap(),
            [3, 4, 1, 2],
            "the joined events went in a second call while the first waited on slow"
        );
    }
}
