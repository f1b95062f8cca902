//! Ending every Postgres session at process exit while a scan is still streaming
//! ([`quiver_postgres::connection::close_all`]). A test binary of its own: `close_all` closes
//! every connection of the process, which would break the scans of tests running beside it.
// Helpers outside `#[test]` functions (and the shared harness) fail loudly, as tests do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod streams;

use std::time::Duration;

use datafusion::prelude::{SessionConfig, SessionContext};
use quiver_postgres::connection::close_all;
use quiver_postgres::register_postgres_functions;

/// A Python reader left half-read when the interpreter exits holds a running scan: its reads
/// (blocked on a full channel, nobody polling), its snapshot's exporter and its idle
/// connections. Closing at exit ends all of them, each session with its Terminate, and the
/// scan, if polled again, reports an error instead of ending short.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closing_at_exit_ends_a_scan_nobody_finished() {
    let Some(pg) = common::cluster() else { return };
    let app = "quiver_exit_test";
    let sessions =
        format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'");
    let abandoned = || {
        pg.psql(
            "postgres",
            "SELECT sessions_abandoned FROM pg_stat_database WHERE datname = 'shop'",
        )
    };
    let before = abandoned();
    // Small batches on two partitions: what the reads can hand on before they block (a few
    // batches a partition) stays far below the table's rows, on any machine.
    let config = SessionConfig::new()
        .with_target_partitions(2)
        .with_batch_size(1024);
    let ctx = SessionContext::new_with_config(config);
    register_postgres_functions(&ctx);
    // `wide` is ~8,300 pages: nine tasks on two connections, besides the exporter's.
    let sql = format!(
        "SELECT * FROM postgres_scan('{} application_name={app}', 'public', 'wide', \
         named_struct('connections', 2))",
        pg.dsn("shop")
    );
    let (mut stream, first) = streams::first_batch(&ctx, &sql).await;
    assert_ne!(pg.psql("shop", &sessions), "0", "the scan holds no session");

    // The consumer has stopped polling; the process exits.
    let limit = Duration::from_secs(60);
    let ended = tokio::task::spawn_blocking(move || close_all(limit))
        .await
        .unwrap();
    assert!(ended, "connection threads still running after {limit:?}");
    let mut left = String::new();
    for _ in 0..100 {
        left = pg.psql("shop", &sessions);
        if left == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, "0", "backends left after closing");
    assert_eq!(
        abandoned(),
        before,
        "the server lost sessions instead of ending them"
    );

    // Batches already decoded may still come; then the error, never a quiet end.
    let (more, error) = streams::read_to_error(&mut stream).await;
    let rows = first.num_rows() + more;
    assert!(rows < 100_000, "every row arrived before the close");
    assert!(error.contains("connections were closed"), "{error}");
}
