//! Schema discovery on a real PostgreSQL: a pattern matches the migrated
//! schemas it names, and nothing else.

use outbox::discover::schemas_matching;
use outbox::Schema;
use outbox_testkit::postgres::test_db;
use sqlx::Executor;

fn names(schemas: &[Schema]) -> Vec<&str> {
    schemas.iter().map(Schema::name).collect()
}

#[tokio::test]
async fn a_pattern_matches_only_migrated_schemas_and_its_underscore_only_an_underscore() {
    let db = test_db().await;
    let mut conn = db.connect().await;
    for name in ["tenant_1x", "tenant_2", "tenantx1", "other"] {
        outbox::migrate(&mut conn, &Schema::new(name).unwrap(), &Default::default())
            .await
            .unwrap();
    }
    // A tenant created but not migrated yet, and one whose name the outbox
    // cannot use unquoted although it holds a table of that name.
    conn.execute("CREATE SCHEMA tenant_3").await.unwrap();
    conn.execute(r#"CREATE SCHEMA "tenant_Up"; CREATE TABLE "tenant_Up".outbox_events (id int)"#)
        .await
        .unwrap();

    let found = schemas_matching(&mut conn, "tenant_*").await.unwrap();
    assert_eq!(names(&found), ["tenant_1x", "tenant_2"]);
    let found = schemas_matching(&mut conn, "tenant?1").await.unwrap();
    assert_eq!(names(&found), ["tenantx1"]);
    let found = schemas_matching(&mut conn, "tenant_?x").await.unwrap();
    assert_eq!(names(&found), ["tenant_1x"]);
    let found = schemas_matching(&mut conn, "*").await.unwrap();
    assert_eq!(
        names(&found),
        ["other", "tenant_1x", "tenant_2", "tenantx1"],
        "every migrated schema, sorted; public was never migrated here"
    );
    assert!(schemas_matching(&mut conn, "nobody_*")
        .await
        .unwrap()
        .is_empty());

    // Migrating the waiting tenant makes it match.
    outbox::migrate(
        &mut conn,
        &Schema::new("tenant_3").unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let found = schemas_matching(&mut conn, "tenant_*").await.unwrap();
    assert_eq!(names(&found), ["tenant_1x", "tenant_2", "tenant_3"]);
}

#[tokio::test]
async fn a_bad_pattern_is_refused_before_any_statement() {
    let db = test_db().await;
    let mut conn = db.connect().await;
    let e = schemas_matching(&mut conn, "x'; DROP SCHEMA public; --")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, outbox::Error::Invalid { field, .. } if field == "schemas"),
        "{e}"
    );
}
