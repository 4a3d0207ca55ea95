//! The console's own metrics, served at its `/metrics`: every action
//! counted by what it was and how it ended, so an alert can say that
//! someone discarded dead letters (the log says who, what and how many).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What was done: `retry`, `discard`, `pause`, `resume`, `sign_in`,
/// `sign_out`; `dead_letters` or `other` for a refused post that named
/// none of them.
pub type ActionName = &'static str;

/// How it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It changed something (rows retried or discarded, a pause added or
    /// removed, a session opened or closed).
    Changed,
    /// It was carried out and found nothing to change.
    Unchanged,
    /// The database failed it.
    Failed,
    /// Refused before anything ran: no session, a missing or foreign CSRF
    /// token, another site's Origin, read-only, a wrong password, a bad
    /// form.
    Refused,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Changed => "changed",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    action: &'static str,
    outcome: &'static str,
}

/// The registry and its one family.
#[derive(Debug)]
pub struct ConsoleMetrics {
    registry: Registry,
    actions: Family<Labels, Counter>,
}

impl Default for ConsoleMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let actions = Family::<Labels, Counter>::default();
        registry.register(
            "outbox_console_actions",
            "Console actions by what they were and how they ended",
            actions.clone(),
        );
        ConsoleMetrics { registry, actions }
    }
}

impl ConsoleMetrics {
    /// Counts one `action` that ended with `outcome`.
    pub fn action(&self, action: ActionName, outcome: Outcome) {
        self.actions
            .get_or_create(&Labels {
                action,
                outcome: outcome.label(),
            })
            .inc();
    }

    /// The exposition, OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The action a POST to `path` with form field `action` asks for, to label
/// it even when it is refused before it is read any further.
pub fn action_of(path: &str, form_action: Option<&str>) -> ActionName {
    match (path, form_action) {
        ("/pause", _) => "pause",
        ("/resume", _) => "resume",
        ("/login", _) => "sign_in",
        ("/logout", _) => "sign_out",
        ("/dead-letters/apply" | "/dead-letters/confirm", Some("retry")) => "retry",
        ("/dead-letters/apply" | "/dead-letters/confirm", Some("discard")) => "discard",
        ("/dead-letters/apply" | "/dead-letters/confirm", _) => "dead_letters",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_and_outcome_is_its_own_series() {
        let m = ConsoleMetrics::default();
        m.action("retry", Outcome::Changed);
        m.action("retry", Outcome::Changed);
        m.action("discard", Outcome::Refused);
        let text = m.encode();
        assert!(
            text.contains(r#"outbox_console_actions_total{action="retry",outcome="changed"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"outbox_console_actions_total{action="discard",outcome="refused"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn a_post_is_named_by_its_path_and_form() {
        assert_eq!(action_of("/dead-letters/apply", Some("discard")), "discard");
        assert_eq!(action_of("/dead-letters/confirm", Some("retry")), "retry");
        assert_eq!(
            action_of("/dead-letters/apply", Some("drop")),
            "dead_letters"
        );
        assert_eq!(action_of("/pause", None), "pause");
        assert_eq!(action_of("/nowhere", None), "other");
    }
}
