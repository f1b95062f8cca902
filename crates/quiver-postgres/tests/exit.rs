//! Ending every Postgres session at process exit while a scan is still streaming or a write
//! still running ([`quiver_postgres::connection::close_all`]). A test binary of its own:
//! `close_all` closes every connection of the process, which would break the scans of tests
//! running beside it; its own tests take turns ([`SERIAL`]) for the same reason.
// Helpers outside `#[test]` functions (and the shared harness) fail loudly, as tests do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use quiver_postgres::connection::close_all;
use quiver_postgres::copy_in::PostgresSink;
use quiver_postgres::types::{PgColumn, PgType};
use quiver_postgres::{register_postgres_functions, ConnectTarget};

/// One test at a time: each closes every connection of the process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Closes every connection as the process's exit does, and checks that it ended every session
/// of the application `app` properly: in time, none left on the server, none counted as lost
/// (the client gone without its Terminate) or ended by a fatal error (the protocol broken off
/// mid-message).
async fn close_all_and_check(pg: &common::PgCluster, app: &str) {
    let abandoned = || {
        pg.psql(
            "postgres",
            "SELECT sessions_abandoned + sessions_fatal FROM pg_stat_database \
             WHERE datname = 'shop'",
        )
    };
    let sessions =
        format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'");
    assert_ne!(pg.psql("shop", &sessions), "0", "no session to close");
    let before = abandoned();

    let limit = Duration::from_secs(60);
    let ended = tokio::task::spawn_blocking(move || close_all(limit))
        .await
        .unwrap();
    assert!(ended, "connection threads still running after {limit:?}");
    streams::wait_until(5, || pg.psql("shop", &sessions) == "0").await;
    assert_eq!(
        pg.psql("shop", &sessions),
        "0",
        "backends left after closing"
    );
    assert_eq!(
        abandoned(),
        before,
        "the server lost sessions instead of ending them"
    );
}

/// A Python reader left half-read when the interpreter exits holds a running scan: its reads
/// (blocked on a full channel, nobody polling), its snapshot's exporter and its idle
/// connections. Closing at exit ends all of them, each session with its Terminate, and the
/// scan, if polled again, reports an error instead of ending short.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closing_at_exit_ends_a_scan_nobody_finished() {
    let _serial = SERIAL.lock().await;
    let Some(pg) = common::cluster() else { return };
    let app = "quiver_exit_test";
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

    // The consumer has stopped polling; the process exits.
    close_all_and_check(pg, app).await;

    // Batches already decoded may still come; then the error, never a quiet end.
    let (more, error) = streams::read_to_error(&mut stream).await;
    let rows = first.num_rows() + more;
    assert!(rows < 100_000, "every row arrived before the close");
    assert!(error.contains("connections were closed"), "{error}");
}

/// An INSERT still writing when the process exits (its input waits on a producer, say a
/// Python thread): closing ends its session at once, and the transaction with it — nothing
/// written — instead of waiting out its limit for a write that will not finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closing_at_exit_rolls_back_a_write_still_running() {
    let _serial = SERIAL.lock().await;
    let Some(pg) = common::cluster() else { return };
    let app = "quiver_exit_write_test";
    pg.psql(
        "shop",
        "DROP TABLE IF EXISTS exit_write; CREATE TABLE exit_write (id int8, note text)",
    );
    let target =
        ConnectTarget::parse(&format!("{} application_name={app}", pg.dsn("shop"))).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("note", DataType::Utf8, true),
    ]));
    let columns = vec![
        PgColumn {
            name: "id".into(),
            pg_type: PgType::Int8,
        },
        PgColumn {
            name: "note".into(),
            pg_type: PgType::Text,
        },
    ];
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from_iter_values(0..1000)),
            Arc::new(StringArray::from_iter_values(
                (0..1000).map(|i| format!("row {i}")),
            )),
        ],
    )
    .unwrap();
    // One batch, then nothing more for as long as anyone waits.
    let input = futures::stream::iter([Ok(batch)]).chain(futures::stream::pending());
    let data = Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&schema), input));
    let sink = PostgresSink::new(target, "\"public\".\"exit_write\"".into(), columns, schema);
    let write = tokio::spawn(async move {
        sink.write_all(data, &Arc::new(TaskContext::default()))
            .await
    });
    // The server has taken the first batch's rows: the COPY is under way.
    let progress = "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy";
    streams::wait_until(5, || pg.psql("shop", progress) == "1000").await;
    assert_eq!(pg.psql("shop", progress), "1000", "the COPY never started");

    close_all_and_check(pg, app).await;

    let error = write
        .await
        .unwrap()
        .expect_err("a write cut short must fail");
    assert!(
        error.to_string().contains("connections were closed"),
        "{error}"
    );
    assert_eq!(
        pg.psql("shop", "SELECT count(*) FROM exit_write"),
        "0",
        "rows of a write that never finished were committed"
    );
}
