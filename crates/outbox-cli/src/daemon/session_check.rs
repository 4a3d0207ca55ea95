//! Does the relay get sessions of its own? Behind PgBouncer in transaction
//! (or statement) pooling mode it does not: its connections share server
//! processes between transactions, so `LISTEN`, session locks and prepared
//! statements break, the last with an error that tells an operator nothing
//! (`prepared statement "sqlx_s_1" already exists`). Checked once at start:
//! two connections held open at once each ask for their server process id,
//! a few times, over the simple query protocol (no prepared statement to
//! collide). On sessions of their own, each keeps one process and the two
//! differ; anything else is pooling by transaction.

use anyhow::{bail, Context, Result};
use sqlx::{PgPool, Row};

/// Rounds of the check: one is enough unless other clients of the pooler
/// happen to take the process in between.
const ROUNDS: usize = 3;

/// Asks for the server process id on the simple query protocol.
const BACKEND_PID: &str = "SELECT pg_backend_pid()";

/// Fails, saying what is wrong and what to do, when two connections of
/// `pool` do not each keep a server process of their own.
pub async fn require_sessions(pool: &PgPool) -> Result<()> {
    let mut a = pool
        .acquire()
        .await
        .context("checking for session pooling")?;
    let mut b = pool
        .acquire()
        .await
        .context("checking for session pooling")?;
    let mut seen = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let pid_a: i32 = sqlx::raw_sql(BACKEND_PID).fetch_one(&mut *a).await?.get(0);
        let pid_b: i32 = sqlx::raw_sql(BACKEND_PID).fetch_one(&mut *b).await?.get(0);
        seen.push((pid_a, pid_b));
    }
    if let Some(problem) = shared_server(&seen) {
        bail!(
            "the database connections are not sessions of their own: {problem}. \
             This is what PgBouncer does with pool_mode = transaction or statement. \
             The relay needs a session per connection (it LISTENs for wake-ups and keeps \
             prepared statements on its connections): point its DATABASE_URL at PostgreSQL \
             directly, or at a PgBouncer database entry with pool_mode = session \
             (docs/operations.md, \"Behind PgBouncer\"); producers may keep the \
             transaction pool"
        );
    }
    Ok(())
}

/// What shows that two connections, each asked for its server process
/// (`(a, b)` per round), are not sessions of their own; `None` when they
/// are.
pub fn shared_server(seen: &[(i32, i32)]) -> Option<String> {
    let (first_a, first_b) = *seen.first()?;
    if let Some((a, _)) = seen.iter().find(|(a, b)| a == b) {
        return Some(format!(
            "two connections held open at once ran on the same server process (pid {a})"
        ));
    }
    if let Some((a, b)) = seen.iter().find(|(a, b)| *a != first_a || *b != first_b) {
        let (was, now) = if *a != first_a {
            (first_a, a)
        } else {
            (first_b, b)
        };
        return Some(format!(
            "one connection moved from server process {was} to {now} between statements"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_keep_one_process_each() {
        assert_eq!(shared_server(&[(10, 11), (10, 11), (10, 11)]), None);
    }

    #[test]
    fn two_connections_on_one_process_are_pooled_by_transaction() {
        let problem = shared_server(&[(10, 11), (12, 12)]).unwrap();
        assert!(
            problem.contains("same server process (pid 12)"),
            "{problem}"
        );
    }

    #[test]
    fn a_connection_that_changes_process_is_pooled_by_transaction() {
        let problem = shared_server(&[(10, 11), (13, 11)]).unwrap();
        assert!(
            problem.contains("moved from server process 10 to 13"),
            "{problem}"
        );
        let problem = shared_server(&[(10, 11), (10, 14)]).unwrap();
        assert!(
            problem.contains("moved from server process 11 to 14"),
            "{problem}"
        );
    }
}
