//! `outbox migrate`.

use std::process::ExitCode;

use anyhow::Result;
use outbox::MigrateOptions;

use crate::cli::MigrateArgs;
use crate::commands::Ctx;
use crate::db;

pub async fn run(ctx: &Ctx, args: MigrateArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    let report = outbox::migrate(
        &mut conn,
        schema,
        &MigrateOptions {
            partitions: args.partitions,
            notify_trigger: args.notify_trigger,
            wakeup: args.wakeup_trigger,
        },
    )
    .await?;
    if report.applied.is_empty() {
        println!("schema {} is up to date", schema.name());
    } else {
        println!(
            "applied {} to schema {}",
            report.applied.join(", "),
            schema.name()
        );
    }
    println!(
        "partitions: {}, wake-up trigger: {}",
        report.partitions,
        report.wakeup.name()
    );
    Ok(ExitCode::SUCCESS)
}
