//! The test kit's databases: one fresh database per test on a shared
//! throwaway cluster, usable from any runtime. (The cluster itself is tested
//! in `outbox-embedded-pg`.)

use outbox_testkit::postgres::test_db;

#[tokio::test]
async fn test_dbs_are_distinct_and_independent() {
    let a = test_db().await;
    let b = test_db().await;
    assert_ne!(a.name, b.name);
    assert_ne!(a.url, b.url);
    assert!(a.url.ends_with(&a.name), "{}", a.url);

    let mut conn_a = a.connect().await;
    let mut conn_b = b.connect().await;
    let name_a: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut conn_a)
        .await
        .expect("current_database");
    assert_eq!(name_a, a.name);

    sqlx::query("CREATE TABLE only_in_a (x int)")
        .execute(&mut conn_a)
        .await
        .expect("create table in a");
    let in_b: Option<String> = sqlx::query_scalar("SELECT to_regclass('only_in_a')::text")
        .fetch_one(&mut conn_b)
        .await
        .expect("look up table in b");
    assert_eq!(
        in_b, None,
        "a table created in one test db shows up in another"
    );

    let pool = b.pool().await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&pool)
        .await
        .expect("SELECT 1 through the pool");
    assert_eq!(one, 1);
    pool.close().await;
}

#[test]
fn test_db_works_from_many_runtimes_at_once() {
    let names: Vec<String> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async {
                    let db = test_db().await;
                    let mut conn = db.connect().await;
                    let one: i32 = sqlx::query_scalar("SELECT 1")
                        .fetch_one(&mut conn)
                        .await
                        .expect("SELECT 1");
                    assert_eq!(one, 1);
                    db.name
                })
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|thread| thread.join().expect("thread"))
        .collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}
