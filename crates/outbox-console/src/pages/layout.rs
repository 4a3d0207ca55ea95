//! The frame around every page, the sign-in page, and small pieces the
//! pages share (links with query strings, times, error boxes).

use maud::{html, Markup, DOCTYPE};

use crate::forms::FieldError;

/// What every page needs to know about the request.
#[derive(Debug, Clone)]
pub struct View {
    /// The session's CSRF token, put in every form.
    pub csrf: String,
    /// No actions: buttons left out (and POSTs refused by the server).
    pub read_only: bool,
    /// A password is configured (a sign-out button is shown).
    pub password: bool,
    /// The schema shown in the header.
    pub schema: String,
    /// The path the console is served under (`""`, or e.g. `/outbox`).
    pub base: String,
}

impl View {
    /// The console's own `path` (`/events`) as the browser reaches it.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

const NAV: [(&str, &str); 4] = [
    ("/", "Overview"),
    ("/stuck", "Stuck aggregates"),
    ("/events", "Events"),
    ("/dead-letters", "Dead letters"),
];

/// A whole page: `title`, the active navigation entry `active`, `body`.
pub fn page(view: &View, title: &str, active: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(view.csrf);
                title { (title) " · outbox console" }
                link rel="stylesheet" href=(view.at("/assets/console.css"));
                script src=(view.at("/assets/console.js")) defer {}
            }
            body {
                header {
                    span.brand { "outbox" }
                    span.schema { "schema " code { (view.schema) } }
                    nav {
                        @for (href, label) in NAV {
                            a href=(view.at(href)) class=[(href == active).then_some("active")] { (label) }
                        }
                    }
                    @if view.read_only { span.badge { "read-only" } }
                    @if view.password {
                        form.signout method="post" action=(view.at("/logout")) {
                            (csrf(view))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden CSRF field of a form.
pub fn csrf(view: &View) -> Markup {
    html! { input type="hidden" name="csrf" value=(view.csrf); }
}

/// The sign-in page of the console under `base`, with why the last try
/// failed if it did.
pub fn login(base: &str, failed: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Sign in · outbox console" }
                link rel="stylesheet" href=(format!("{base}/assets/console.css"));
            }
            body {
                main.login {
                    h1 { "outbox console" }
                    @if let Some(why) = failed { p.error role="alert" { (why) } }
                    form method="post" action=(format!("{base}/login")) {
                        label { "Password " input type="password" name="password" autofocus required; }
                        button type="submit" { "Sign in" }
                    }
                }
            }
        }
    }
}

/// A box saying which field is wrong.
pub fn field_error(e: &FieldError) -> Markup {
    html! { p.error role="alert" { "Cannot read " code { (e.field) } ": " (e.message) } }
}

/// The page of a request refused for a field of `path`'s form: the box
/// naming the field, and the way back to the page the form is on.
pub fn refused(view: &View, e: &FieldError, path: &str) -> Markup {
    let (back, name) = NAV
        .iter()
        .rev()
        .find(|(p, _)| *p != "/" && path.starts_with(p))
        .copied()
        .unwrap_or(NAV[0]);
    page(
        view,
        "Cannot do that",
        back,
        html! {
            (field_error(e))
            p { a href=(view.at(back)) { "Back to " (name) } }
        },
    )
}

/// A notice after an action: HTML the action composed (its stored values
/// escaped and isolated in `<bdi>`).
pub fn notice(html: Option<&str>) -> Markup {
    html! { @if let Some(t) = html { p.notice role="status" { (maud::PreEscaped(t)) } } }
}

/// `path?k=v&…`, with the pairs URL-encoded and blank ones left out.
pub fn link(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            q.append_pair(k, v);
        }
    }
    let q = q.finish();
    if q.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{q}")
    }
}

/// A stored time, or `-`.
pub fn time(t: &Option<String>) -> &str {
    t.as_deref().unwrap_or("-")
}

/// A duration in seconds, readably: `42 s`, `3 min 5 s`, `2 h 10 min`.
pub fn age(seconds: Option<f64>) -> String {
    let Some(s) = seconds else { return "-".into() };
    let s = s.max(0.0);
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{} min {} s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{} h {} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_encode_their_values_and_drop_blank_ones() {
        assert_eq!(
            link(
                "/events",
                &[
                    ("aggregate_id", Some("a&b=<c>")),
                    ("x", None),
                    ("y", Some(""))
                ]
            ),
            "/events?aggregate_id=a%26b%3D%3Cc%3E"
        );
        assert_eq!(link("/events", &[]), "/events");
    }

    #[test]
    fn ages_read_in_the_largest_sensible_unit() {
        assert_eq!(age(None), "-");
        assert_eq!(age(Some(4.24)), "4.2 s");
        assert_eq!(age(Some(185.0)), "3 min 5 s");
        assert_eq!(age(Some(7800.0)), "2 h 10 min");
    }
}
