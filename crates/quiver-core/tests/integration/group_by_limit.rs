//! `GROUP BY … LIMIT n` with no ORDER BY runs through the key freeze (`FrozenKeysExec`): once
//! some thread has seen `n` keys, rows of other keys are skipped. Any `n` groups are a correct
//! answer, but each one must carry its complete aggregates: every returned row is checked
//! against the same GROUP BY without the LIMIT, over several files, threads and batches.

use crate::support::run;

use std::collections::HashMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::arrow::util::pretty::pretty_format_batches;
use quiver_core::{Session, SessionOptions};

/// Every row of every batch, each value as text.
fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            out.push(
                batch
                    .columns()
                    .iter()
                    .map(|column| array_value_to_string(column, row).unwrap())
                    .collect(),
            );
        }
    }
    out
}

async fn plan(session: &Session, sql: &str) -> String {
    pretty_format_batches(&run(session, &format!("EXPLAIN {sql}")).await)
        .unwrap()
        .to_string()
}

/// `id`, a string key with NULLs and about 20K values, an integer key with NULLs, a value.
fn data(from: u32, to: u32) -> String {
    format!(
        "SELECT value AS id,
                CASE WHEN value % 29 = 0 THEN NULL ELSE 's' || ((value * 7919) % 20011) END AS s,
                CASE WHEN value % 31 = 0 THEN NULL ELSE (value * 13) % 5 END AS k,
                (value * 17) % 1000 AS v
         FROM generate_series({from}, {to})"
    )
}

async fn session_over_files(threads: usize) -> (Session, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let session = Session::open(SessionOptions {
        threads: Some(threads),
        ..SessionOptions::default()
    })
    .await
    .unwrap();
    for (i, (from, to)) in [(1, 70_000), (70_001, 130_000), (130_001, 150_000)]
        .into_iter()
        .enumerate()
    {
        run(
            &session,
            &format!("COPY ({}) TO '{path}/part{i}.parquet'", data(from, to)),
        )
        .await;
    }
    run(
        &session,
        &format!("CREATE VIEW t AS SELECT * FROM '{path}/*.parquet'"),
    )
    .await;
    (session, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_a_limit_returns_is_complete() {
    for threads in [1, 2, 4] {
        let (session, _dir) = session_over_files(threads).await;
        let shapes = [
            // (keys, aggregates)
            ("s", "count(*), sum(v), min(id), max(k)"),
            ("k, s", "count(*), sum(v), avg(v)"),
            ("s, k", "count(DISTINCT v), count(k)"),
            ("lower(s) || 'x'", "count(*), sum(id)"),
            // Few groups (NULL and 0..4): fewer than most limits, nothing is frozen.
            ("k", "count(*), sum(v)"),
        ];
        for (keys, aggregates) in shapes {
            let full = format!("SELECT {keys}, {aggregates} FROM t GROUP BY {keys}");
            let key_count = keys.split(", ").count();
            let expected: HashMap<Vec<String>, Vec<String>> = rows(&run(&session, &full).await)
                .into_iter()
                .map(|row| (row[..key_count].to_vec(), row[key_count..].to_vec()))
                .collect();
            for (limit, offset) in [(1, 0), (10, 0), (700, 0), (10, 5)] {
                let sql = format!("{full} LIMIT {limit} OFFSET {offset}");
                let shown = plan(&session, &sql).await;
                assert!(
                    shown.contains("FrozenKeysExec: gate")
                        && shown.contains("FrozenKeysExec: emit"),
                    "{sql}: no key freeze in\n{shown}"
                );
                for _ in 0..3 {
                    let got = rows(&run(&session, &sql).await);
                    let want = limit.min(expected.len().saturating_sub(offset));
                    assert_eq!(got.len(), want, "{sql} ({threads} threads)");
                    let mut distinct = std::collections::HashSet::new();
                    for row in got {
                        let (key, values) = row.split_at(key_count);
                        assert!(distinct.insert(key.to_vec()), "{sql}: {key:?} twice");
                        assert_eq!(
                            expected.get(key).map(Vec::as_slice),
                            Some(values),
                            "{sql} ({threads} threads): group {key:?}"
                        );
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_freeze_needs_a_limit_directly_over_the_groups() {
    let (session, _dir) = session_over_files(2).await;
    for sql in [
        // HAVING can drop frozen groups; ORDER BY needs every group.
        "SELECT s, count(*) FROM t GROUP BY s HAVING count(*) > 7 LIMIT 10",
        "SELECT s, count(*) FROM t GROUP BY s ORDER BY count(*) DESC LIMIT 10",
        "SELECT s, count(*) FROM t GROUP BY s",
        "SELECT s, count(*) FROM t GROUP BY ROLLUP (s) LIMIT 10",
        // Too many keys to freeze.
        "SELECT s, count(*) FROM t GROUP BY s LIMIT 100000",
        // A volatile key: the gate would see other values than the aggregation.
        "SELECT count(*) FROM t GROUP BY CAST(random() * 1000000 AS BIGINT) LIMIT 1",
    ] {
        let shown = plan(&session, sql).await;
        assert!(
            !shown.contains("FrozenKeysExec"),
            "{sql}: unexpected key freeze in\n{shown}"
        );
    }
    // HAVING still answers correctly: every returned group passes it.
    let sql = "SELECT s, count(*) AS c FROM t GROUP BY s HAVING count(*) > 7 LIMIT 10";
    let got = rows(&run(&session, sql).await);
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|row| row[1].parse::<i64>().unwrap() > 7));
}
