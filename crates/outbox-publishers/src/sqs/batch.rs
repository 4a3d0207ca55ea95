//! Batching: a destination's messages split into calls of up to 10
//! entries (and `max_message_bytes` together), each call's answer read
//! entry by entry, and a call refused for its input sent again one entry
//! at a time.

use outbox::Outcome;

use super::classify::{classify_call, classify_entry, CallFailure};
use super::client::{Service, Target};
use super::config::MAX_BATCH_ENTRIES;
use super::message::{sns_entries, sqs_entries, BuildError, Message};

/// The entries of one call: (index in the batch, message).
pub(super) type Chunk = Vec<(usize, Message)>;

/// Splits `entries` into calls of up to 10 entries and
/// `max_message_bytes` together.
pub(super) fn chunks(entries: Vec<(usize, Message)>, max_message_bytes: usize) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        let full = out.last().is_none_or(|c| {
            c.len() >= MAX_BATCH_ENTRIES || bytes + entry.1.size > max_message_bytes
        });
        if full {
            out.push(Vec::with_capacity(MAX_BATCH_ENTRIES));
            bytes = 0;
        }
        bytes += entry.1.size;
        out.last_mut().expect("pushed above").push(entry);
    }
    out
}

/// One batch call: each entry's outcome, or what the call as a whole
/// came to.
async fn call(
    service: &Service,
    target: &Target,
    chunk: &[(usize, Message)],
) -> Result<Vec<(usize, Outcome)>, CallFailure> {
    let built = |e: BuildError| CallFailure::Invalid(format!("{}: {e}", target.shown));
    let mut answers: Vec<Option<Outcome>> = vec![None; chunk.len()];
    // The answer for the entry the service calls `id`.
    let mut answer = |id: &str, outcome: Outcome| {
        if let Some(a) = id.parse::<usize>().ok().and_then(|n| answers.get_mut(n)) {
            *a = Some(outcome);
        }
    };
    match service {
        Service::Sqs(client) => {
            let entries = sqs_entries(chunk).map_err(built)?;
            let out = client
                .send_message_batch()
                .queue_url(&target.address)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| classify_call(&e, &target.shown))?;
            for s in out.successful() {
                answer(s.id(), Outcome::Delivered);
            }
            for f in out.failed() {
                answer(f.id(), classify_entry(f.code(), f.message(), &target.shown));
            }
        }
        Service::Sns(client) => {
            let entries = sns_entries(chunk).map_err(built)?;
            let out = client
                .publish_batch()
                .topic_arn(&target.address)
                .set_publish_batch_request_entries(Some(entries))
                .send()
                .await
                .map_err(|e| classify_call(&e, &target.shown))?;
            for s in out.successful() {
                answer(s.id().unwrap_or_default(), Outcome::Delivered);
            }
            for f in out.failed() {
                answer(f.id(), classify_entry(f.code(), f.message(), &target.shown));
            }
        }
    }
    Ok(chunk
        .iter()
        .zip(answers)
        .map(|((i, _), a)| {
            let a = a.unwrap_or_else(|| {
                Outcome::Retry(format!(
                    "{}: the answer did not list this entry",
                    target.shown
                ))
            });
            (*i, a)
        })
        .collect())
}

/// Every entry of `chunk` with what `failure` means for each of them.
fn all(chunk: &[(usize, Message)], failure: CallFailure) -> Vec<(usize, Outcome)> {
    let outcome = failure.outcome_of_each(chunk.len());
    chunk.iter().map(|(i, _)| (*i, outcome.clone())).collect()
}

/// One call; a call refused for its input is sent again entry by entry,
/// so that only the invalid entries are rejected.
pub(super) async fn send(
    service: &Service,
    target: &Target,
    chunk: Chunk,
) -> Vec<(usize, Outcome)> {
    match call(service, target, &chunk).await {
        Ok(outcomes) => outcomes,
        Err(CallFailure::Invalid(_)) if chunk.len() > 1 => {
            let mut out = Vec::with_capacity(chunk.len());
            for entry in chunk {
                let one = std::slice::from_ref(&entry);
                match call(service, target, one).await {
                    Ok(o) => out.extend(o),
                    Err(failure) => out.extend(all(one, failure)),
                }
            }
            out
        }
        Err(failure) => all(&chunk, failure),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqs::SqsConfig;

    fn msg(size: usize) -> Message {
        Message {
            body: "{}".into(),
            attributes: Vec::new(),
            group_id: None,
            dedup_id: None,
            size,
        }
    }

    #[test]
    fn calls_hold_ten_entries_and_the_size_limit() {
        let max = SqsConfig::from_spec("sqs://q")
            .unwrap()
            .common()
            .max_message_bytes;
        let sizes: Vec<usize> = chunks((0..25).map(|i| (i, msg(100))).collect(), max)
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [10, 10, 5]);
        let big = max / 2;
        let sizes: Vec<usize> = chunks((0..5).map(|i| (i, msg(big))).collect(), max)
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
    }
}
