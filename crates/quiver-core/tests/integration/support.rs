//! Helpers shared by quiver-core's integration tests.

use datafusion::arrow::array::RecordBatch;
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
