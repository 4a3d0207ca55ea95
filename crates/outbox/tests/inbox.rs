//! The consumer inbox: duplicates skipped, a rolled-back consumer
//! transaction forgets the event.

mod common;

use outbox::Inbox;
use uuid::Uuid;

#[tokio::test]
async fn duplicates_are_skipped_per_consumer() {
    let ctx = common::setup().await;
    let inbox = Inbox::new();
    let id = Uuid::new_v4();
    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(inbox.process_once(&mut tx, "billing", id).await.unwrap());
    assert!(!inbox.process_once(&mut tx, "billing", id).await.unwrap());
    // another consumer has its own record
    assert!(inbox.process_once(&mut tx, "shipping", id).await.unwrap());
    tx.commit().await.unwrap();
    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(!inbox.process_once(&mut tx, "billing", id).await.unwrap());
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn a_rolled_back_consumer_transaction_leaves_the_event_to_process_again() {
    let ctx = common::setup().await;
    common::execute(
        &ctx.pool,
        "CREATE TABLE balances (customer TEXT PRIMARY KEY, cents BIGINT NOT NULL)",
    )
    .await;
    let inbox = Inbox::new();
    let id = Uuid::new_v4();

    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(inbox.process_once(&mut tx, "billing", id).await.unwrap());
    common::execute(&mut *tx, "INSERT INTO balances VALUES ('c1', 100)").await;
    tx.rollback().await.unwrap(); // the handler failed after marking

    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(
        inbox.process_once(&mut tx, "billing", id).await.unwrap(),
        "must be processed again"
    );
    common::execute(&mut *tx, "INSERT INTO balances VALUES ('c1', 100)").await;
    tx.commit().await.unwrap();
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM processed_events").await,
        1
    );
}

#[tokio::test]
async fn concurrent_consumers_of_one_event_apply_it_once() {
    let ctx = common::setup().await;
    common::execute(&ctx.pool, "CREATE TABLE effects (event_id UUID)").await;
    let id = Uuid::new_v4();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = ctx.pool.clone();
        tasks.push(tokio::spawn(async move {
            let inbox = Inbox::new();
            let mut tx = pool.begin().await.unwrap();
            let first = inbox.process_once(&mut tx, "billing", id).await.unwrap();
            if first {
                sqlx::query("INSERT INTO effects VALUES ($1)")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            tx.commit().await.unwrap();
            first
        }));
    }
    let mut firsts = 0;
    for t in tasks {
        firsts += t.await.unwrap() as i32;
    }
    assert_eq!(firsts, 1);
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM effects").await,
        1
    );
}
