//! Helpers shared by quiver-core's integration tests.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use quiver_core::Session;

/// Runs `sql` to completion; any error fails the test, naming the statement.
pub async fn run(session: &Session, sql: &str) -> Vec<RecordBatch> {
    session
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `sql`'s result through quiver, as a table.
pub async fn quiver_text(session: &Session, sql: &str) -> String {
    pretty_format_batches(&run(session, sql).await)
        .unwrap()
        .to_string()
}

/// `sql`'s result through stock DataFusion, as a table.
pub async fn datafusion_text(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches).unwrap().to_string()
}
