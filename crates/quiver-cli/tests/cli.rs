//! Runs the real `quiver` binary: every output format, the ways to pass SQL, errors and exit
//! codes, `--time`, `-o`, and persistent databases across processes (locking, crash safety).

// A test binary: failing loudly on a broken environment is the point.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[path = "../../quiver-postgres/tests/common/mod.rs"]
mod common;

fn quiver() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quiver"));
    command.env_remove("COLUMNS").arg("--no-progress");
    command
}

fn run(args: &[&str]) -> Output {
    quiver().args(args).output().expect("quiver runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "quiver {args:?} failed: {}",
        stderr(&output)
    );
    stdout(&output)
}

const QUERY: &str =
    "SELECT * FROM (VALUES (1, 'a,b', 2.5), (2, NULL, -1.0)) AS t(id, name, score) ORDER BY id";

/// This crate's folder, as cargo says at run time: a test binary built by another checkout of
/// the same workspace into a shared target directory is reused as fresh, with that checkout's
/// path baked into `env!("CARGO_MANIFEST_DIR")`.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn data(name: &str) -> String {
    let root = manifest_dir().join("../quiver-sqllogictest/data");
    root.join(name).to_string_lossy().into_owned()
}

#[test]
fn csv_and_tsv_formats() {
    assert_eq!(ok(&["-f", "CSV", "-q", QUERY]), "1,\"a,b\",2.5\n2,,-1.0\n");
    assert_eq!(
        ok(&["-f", "CSVWithNames", "-q", QUERY]),
        "id,name,score\n1,\"a,b\",2.5\n2,,-1.0\n"
    );
    assert_eq!(
        ok(&["-f", "TSV", "-q", QUERY]),
        "1\ta,b\t2.5\n2\t\\N\t-1.0\n"
    );
    assert_eq!(
        ok(&["-f", "TSVWithNames", "-q", QUERY]),
        "id\tname\tscore\n1\ta,b\t2.5\n2\t\\N\t-1.0\n"
    );
}

#[test]
fn tsv_is_the_default_when_not_on_a_terminal() {
    assert_eq!(ok(&["-q", "SELECT 1 AS x, 'y' AS y"]), "1\ty\n");
}

#[test]
fn json_formats() {
    let rows = ok(&["-f", "JSONEachRow", "-q", QUERY]);
    assert_eq!(
        rows,
        "{\"id\":1,\"name\":\"a,b\",\"score\":2.5}\n{\"id\":2,\"name\":null,\"score\":-1.0}\n"
    );
    let document = ok(&["-f", "JSON", "-q", QUERY]);
    assert!(document.contains("\"meta\""), "{document}");
    assert!(
        document.contains("\"rows\": 2") || document.contains("\"rows\":2"),
        "{document}"
    );
    assert!(document.contains("\"statistics\""), "{document}");
    let compact = ok(&["-f", "JSONCompact", "-q", QUERY]);
    assert!(
        compact.contains("[1, \"a,b\", 2.5]") || compact.contains("[1,\"a,b\",2.5]"),
        "{compact}"
    );
}

#[test]
fn human_formats() {
    let pretty = ok(&["-f", "Pretty", "-q", QUERY]);
    assert_eq!(
        pretty,
        "┌───────┬──────┬─────────┐\n\
         │  id   │ name │  score  │\n\
         │ Int64 │ Utf8 │ Float64 │\n\
         ├───────┼──────┼─────────┤\n\
         │     1 │ a,b  │     2.5 │\n\
         │     2 │ NULL │    -1.0 │\n\
         └───────┴──────┴─────────┘\n\
         2 rows\n"
    );
    let markdown = ok(&["-f", "Markdown", "-q", QUERY]);
    assert_eq!(
        markdown,
        "| id | name | score |\n|--:|:--|--:|\n| 1 | a,b | 2.5 |\n| 2 |  | -1.0 |\n"
    );
    let vertical = ok(&["-f", "Vertical", "-q", QUERY]);
    assert!(
        vertical.starts_with("Row 1:\n──────\nid:    1\nname:  a,b\nscore: 2.5\n\nRow 2:\n"),
        "{vertical}"
    );
    assert_eq!(ok(&["-f", "Null", "-q", QUERY]), "");
}

#[test]
fn binary_formats_round_trip_through_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (format, name) in [("Parquet", "out.parquet"), ("Arrow", "out.arrows")] {
        let path = dir.path().join(name);
        let path = path.to_string_lossy();
        ok(&["-f", format, "-o", &path, "-q", QUERY]);
        let back = ok(&[
            "-f",
            "CSV",
            "-q",
            &format!("SELECT id, name FROM '{path}' ORDER BY id"),
        ]);
        assert_eq!(back, "1,\"a,b\"\n2,\n", "{format}");
    }
}

#[test]
fn format_clause_overrides_the_flag() {
    assert_eq!(
        ok(&["-f", "CSV", "-q", "SELECT 1 AS a FORMAT JSONEachRow"]),
        "{\"a\":1}\n"
    );
}

#[test]
fn positional_query_and_stdin_scripts() {
    assert_eq!(ok(&["SELECT 40 + 2"]), "42\n");
    let mut child = quiver()
        .args(["-f", "CSV"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"CREATE TABLE t AS SELECT 1 AS x;\nINSERT INTO t VALUES (2);\nSELECT sum(x) FROM t;\nSELECT 'done';\n")
        .expect("write");
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "3\ndone\n");
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let output = run(&["-q", "SELECT 1;\nSELEC 2"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("Parser Error"), "{message}");
    assert!(message.contains("line 2, column 1"), "{message}");
    assert!(message.contains("  SELEC 2\n  ^"), "{message}");

    let output = run(&["-q", "SELECT * FROM no_such_table"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no_such_table"),
        "{}",
        stderr(&output)
    );

    let output = run(&[
        "-q",
        &format!("SELECT * FROM '{}'", data("truncated.parquet")),
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("truncated.parquet"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn unknown_format_lists_the_valid_ones() {
    let output = run(&["-f", "Excel", "-q", "SELECT 1"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("Excel"), "{message}");
    assert!(
        message.contains("JSONEachRow") && message.contains("Parquet"),
        "{message}"
    );
}

#[test]
fn time_reports_elapsed_rows_and_bytes() {
    let output = run(&[
        "--time",
        "-q",
        // A filter makes it a scan: a bare count(*) is answered from the footer (0 rows read).
        &format!(
            "SELECT count(*) FROM '{}' WHERE id > 0",
            data("people.parquet")
        ),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "5\n");
    let message = stderr(&output);
    assert!(message.contains("Elapsed:"), "{message}");
    assert!(message.contains("Read 5 rows"), "{message}");
}

#[test]
fn output_file_receives_the_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("result.csv");
    let printed = ok(&[
        "-f",
        "CSVWithNames",
        "-o",
        &path.to_string_lossy(),
        "-q",
        "SELECT 7 AS seven",
    ]);
    assert_eq!(printed, "");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "seven\n7\n");
}

fn database(dir: &Path) -> String {
    dir.join("db").to_string_lossy().into_owned()
}

#[test]
fn database_survives_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database(dir.path());
    ok(&[
        "--database",
        &db,
        "-q",
        "CREATE TABLE kept AS SELECT * FROM generate_series(1, 1000) AS t(n)",
    ]);
    ok(&["--database", &db, "-q", "INSERT INTO kept VALUES (5000)"]);
    assert_eq!(
        ok(&["--database", &db, "-q", "SELECT count(*), max(n) FROM kept"]),
        "1001\t5000\n"
    );
    // Parquet files and a catalog: an open format other tools can read.
    assert!(Path::new(&db).join("catalog.json").exists());
}

#[test]
fn a_second_writer_gets_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database(dir.path());
    ok(&["--database", &db, "-q", "CREATE TABLE t AS SELECT 1 AS x"]);
    // The first process holds the database while it waits for SQL on stdin.
    let mut holder = quiver()
        .args(["--database", &db])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(500));
    let output = run(&["--database", &db, "-q", "SELECT * FROM t"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("in use"), "{}", stderr(&output));
    if let Some(mut stdin) = holder.stdin.take() {
        let _ = stdin.write_all(b"SELECT 1;\n");
    }
    let _ = holder.wait_with_output();
    assert_eq!(ok(&["--database", &db, "-q", "SELECT x FROM t"]), "1\n");
}

#[test]
fn a_killed_write_leaves_the_previous_state_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database(dir.path());
    ok(&[
        "--database",
        &db,
        "-q",
        "CREATE TABLE base AS SELECT * FROM generate_series(1, 100) AS t(n)",
    ]);
    for delay in [50u64, 200, 600] {
        let mut child = quiver()
            .args([
                "--database",
                &db,
                "-q",
                "CREATE TABLE huge AS SELECT n, n * 2 AS m, 'row ' || n AS s FROM generate_series(1, 20000000) AS t(n); \
                 INSERT INTO base SELECT n FROM generate_series(1, 5000000) AS t(n)",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let count = ok(&["--database", &db, "-q", "SELECT count(*) FROM base"]);
        assert!(count == "100\n" || count == "5000100\n", "base has {count}");
        // `huge` is either complete or absent, never partial.
        let output = run(&["--database", &db, "-q", "SELECT count(*) FROM huge"]);
        if output.status.success() {
            assert_eq!(stdout(&output), "20000000\n");
            ok(&["--database", &db, "-q", "DROP TABLE huge"]);
        }
    }
    let stray: Vec<PathBuf> = walk(Path::new(&db))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "temporary files left behind: {stray:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn ctrl_c_stops_a_query_that_keeps_every_worker_busy_and_progress_keeps_ticking() {
    // Minutes of work on every thread: the runtime's workers never stop to turn its drivers.
    let mut child = quiver()
        .args([
            "--progress",
            "--threads",
            "2",
            "-q",
            "SELECT CAST(sum(number % 7) AS BIGINT) FROM numbers_mt(100000000000)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(2500));
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let sent = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the query still runs 30 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    let err = stderr(&output);
    assert_eq!(status.code(), Some(130), "stderr: {err}");
    assert!(err.contains("cancelled"), "stderr: {err}");
    // Shown from the first second on, refreshed every 0.1 s: a dozen or so lines by 2.5 s.
    let lines = err.matches("Progress:").count();
    assert!(lines >= 3, "{lines} progress lines before Ctrl-C: {err}");
}

/// A client should end its Postgres sessions before it exits: the server otherwise logs each
/// as lost ("unexpected EOF on client connection", "with an open transaction" when the
/// query's rollback had not run) and counts it in `sessions_abandoned`.
#[test]
fn exiting_ends_the_postgres_sessions_it_opened() {
    let Some(pg) = common::cluster() else { return };
    pg.psql("postgres", "DROP DATABASE IF EXISTS cli_exit");
    pg.psql("postgres", "CREATE DATABASE cli_exit TEMPLATE shop");
    let abandoned = || {
        pg.psql(
            "postgres",
            "SELECT sessions_abandoned FROM pg_stat_database WHERE datname = 'cli_exit'",
        )
    };
    let before = abandoned();
    let dsn = format!("{} application_name=quiver_cli_exit", pg.dsn("cli_exit"));
    // An attached database (a snapshot's exporter and readers) and a scan function's target.
    let sql = format!(
        "ATTACH '{dsn}' AS db (TYPE postgres, READ_ONLY); \
         SELECT count(*) FROM db.orders o JOIN db.customer_totals c ON c.customer = o.customer; \
         SELECT count(*) FROM postgres_scan('{dsn}', 'public', 'orders');"
    );
    let output = ok(&["-f", "CSV", &sql]);
    assert_eq!(output.lines().count(), 2, "{output}");
    // The backends are gone once the process is, and none of them was abandoned.
    let mut left = String::new();
    for _ in 0..100 {
        left = pg.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'quiver_cli_exit'",
        );
        if left == "0" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left, "0", "backends left after the process exited");
    assert_eq!(
        abandoned(),
        before,
        "the server lost sessions instead of ending them"
    );
    pg.psql("postgres", "DROP DATABASE cli_exit");
}
