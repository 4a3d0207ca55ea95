//! The names one case publishes under.

/// The names one case publishes under, unique per case and run: its events
/// have aggregate type [`Scope::aggregate_type`] and event type
/// [`Scope::event_type`], and some have the topic override
/// [`Scope::override_destination`]. A harness reads back by scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    name: String,
}

impl Scope {
    /// A fresh scope for `case` (letters, digits and `_` only).
    pub fn new(case: &str) -> Scope {
        Scope {
            name: format!("c{:08x}_{case}", rand::random::<u32>()),
        }
    }

    /// The scope's name: `c<random>_<case>`, a valid Kafka topic name and
    /// AMQP routing-key word.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The aggregate type of the scope's events.
    pub fn aggregate_type(&self) -> &str {
        &self.name
    }

    /// The event type of the scope's events: `<name>.happened`.
    pub fn event_type(&self) -> String {
        format!("{}.happened", self.name)
    }

    /// The topic override some events carry: `<name>.override`.
    pub fn override_destination(&self) -> String {
        format!("{}.override", self.name)
    }
}
