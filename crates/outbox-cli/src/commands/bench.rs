//! `outbox bench`: the benchmarks of crate `outbox-bench`, handed this
//! program's database URL and its console (which `bench console` serves
//! in this process).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;

use anyhow::Result;
use outbox_bench::BenchArgs;

use crate::ctx::Ctx;

pub async fn run(ctx: &Ctx, args: BenchArgs) -> Result<ExitCode> {
    let bench = outbox_bench::Ctx {
        database_url: ctx.database_url().clone(),
        serve_console,
    };
    outbox_bench::run(&bench, args).await
}

/// The console of `schema` over `pool` on loopback, for `bench console`.
fn serve_console(
    pool: sqlx::PgPool,
    schema: outbox::Schema,
) -> Pin<Box<dyn Future<Output = Result<SocketAddr>> + Send>> {
    Box::pin(
        async move { crate::commands::console::spawn_loopback(pool, &schema, "127.0.0.1:0").await },
    )
}
