//! quiver's GROUP BY operators keep the contracts of the aggregation they replace — output
//! partitioning, equivalences, ordering — wherever the plan above relies on them: joins to
//! grouped subqueries, UNION ALL under a GROUP BY, windows over aggregates after joins,
//! aggregates over aggregates (issue 59; TPC-H Q17, Q18 and Q20 at SF1 failed on these).
//!
//! Each query runs with quiver's layers on and with `quiver.optimizations = false` (stock
//! DataFusion's plan), and the rows must be equal, at 1, 2, 3 and 8 target partitions and with
//! small batches. The fact table has 250,000 keys: every partition of the radix aggregation
//! sees more than its switch (32,768 groups), so it partitions rows by hash, as at SF1.

use std::fmt::Write;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use quiver_core::{Session, SessionOptions};

use crate::support::{quiver_text, run};

/// `f`: 1M rows over 250,000 keys `k` (integer-valued doubles, so every sum is exact whatever
/// the order); `d`: one row per key, with a small `region`.
const TABLES: [&str; 2] = [
    "CREATE TABLE f AS SELECT CAST(number * 7919 % 250000 AS BIGINT) AS k,
            CAST(number % 3 AS BIGINT) AS g, CAST(number % 1000 AS DOUBLE) AS v,
            CASE WHEN number % 17 = 0 THEN NULL ELSE CAST(number % 5 AS BIGINT) END AS n
     FROM numbers(1000000)",
    "CREATE TABLE d AS SELECT CAST(number AS BIGINT) AS id, CAST(number % 7 AS BIGINT) AS region,
            'name ' || CAST(number % 13 AS VARCHAR) AS name
     FROM numbers(250000)",
];

/// Shapes where a parent relies on what the replaced aggregate declared.
const QUERIES: [&str; 10] = [
    // A partitioned join reads the grouped side's hash partitioning.
    "SELECT count(*), sum(a.v) FROM f a JOIN (SELECT k, avg(v) AS av FROM f GROUP BY k) b
     ON a.k = b.k WHERE a.v < b.av",
    // UNION ALL of aggregates under a GROUP BY: InterleaveExec pairs up their partitions.
    "SELECT k, sum(x) AS s FROM (
        SELECT k, sum(v) AS x FROM f WHERE g = 0 GROUP BY k
        UNION ALL SELECT k, sum(v) AS x FROM f WHERE g = 1 GROUP BY k
        UNION ALL SELECT k, sum(v) AS x FROM f WHERE g = 2 GROUP BY k) u
     GROUP BY k ORDER BY s DESC, k LIMIT 5",
    "SELECT count(*), sum(s), min(k), max(k) FROM (
        SELECT k, sum(x) AS s FROM (
            SELECT k, sum(v) AS x FROM f WHERE g = 0 GROUP BY k
            UNION ALL SELECT k, count(*) AS x FROM f WHERE g = 1 GROUP BY k) u
        GROUP BY k)",
    // Windows over aggregates after a join: the window's sort relies on `k = id`, an
    // equivalence the aggregate's output carries.
    "SELECT count(*), sum(a), sum(r), sum(sv) FROM (
        SELECT f.k, d.id, d.region, sum(f.v) AS sv,
               avg(sum(f.v)) OVER (PARTITION BY f.k, d.id) AS a,
               rank() OVER (PARTITION BY d.region, f.k ORDER BY d.id, sum(f.v)) AS r
        FROM f JOIN d ON f.k = d.id GROUP BY f.k, d.id, d.region)",
    // Both sides of a join grouped.
    "SELECT count(*), sum(a.s), sum(b.c) FROM (SELECT k, sum(v) AS s FROM f GROUP BY k) a
     JOIN (SELECT id, count(*) AS c FROM d GROUP BY id) b ON a.k = b.id",
    // TPC-H Q18's shape: IN over a grouped subquery with HAVING.
    "SELECT count(*), sum(v) FROM f WHERE k IN (SELECT k FROM f GROUP BY k HAVING sum(v) > 2200)",
    // An aggregate over an aggregate on fewer keys, and a small-key one under a join.
    "SELECT count(*), sum(c), max(c) FROM (SELECT k, count(*) AS c FROM (
        SELECT k, g, sum(v) AS s FROM f GROUP BY k, g) GROUP BY k)",
    "SELECT f.g, count(*), sum(x.c) FROM f JOIN (SELECT g, n, count(*) AS c FROM f GROUP BY g, n) x
     ON f.g = x.g AND f.n = x.n GROUP BY f.g ORDER BY f.g",
    // A window whose PARTITION BY column the filter fixes: its sort relies on the filter's
    // constant, which quiver's comparison kernels must not hide.
    "SELECT count(*), sum(w) FROM (SELECT sum(v) OVER (PARTITION BY g ORDER BY k, v) AS w
     FROM f WHERE g = 1 AND v > 3 AND k < 200000)",
    // TPC-H Q17's shape: a correlated average per key.
    "SELECT count(*), sum(v) FROM f a WHERE v < (SELECT 0.5 * avg(v) FROM f b WHERE b.k = a.k)",
];

/// The rows of `batches` as text lines, sorted (joins and aggregates return them in any order).
fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let mut line = String::new();
            for formatter in &formatters {
                write!(line, "{}|", formatter.value(row)).unwrap();
            }
            rows.push(line);
        }
    }
    rows.sort();
    rows
}

async fn session(threads: usize, batch_size: usize) -> Session {
    let session = Session::open(SessionOptions {
        threads: Some(threads),
        ..SessionOptions::default()
    })
    .await
    .unwrap();
    // A rule that fails would otherwise be skipped without a word.
    run(
        &session,
        "SET datafusion.optimizer.skip_failed_rules = false",
    )
    .await;
    run(
        &session,
        &format!("SET datafusion.execution.batch_size = {batch_size}"),
    )
    .await;
    for table in TABLES {
        run(&session, table).await;
    }
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_subqueries_unions_and_windows_answer_as_stock_datafusion() {
    for (threads, batch_size) in [(1, 8192), (2, 8192), (3, 8192), (8, 8192), (3, 1031)] {
        let session = session(threads, batch_size).await;
        for sql in QUERIES {
            run(&session, "SET quiver.optimizations = true").await;
            let ours = sorted_rows(&run(&session, sql).await);
            run(&session, "SET quiver.optimizations = false").await;
            let stock = sorted_rows(&run(&session, sql).await);
            assert_eq!(
                ours, stock,
                "{threads} partitions, batches of {batch_size}: {sql}"
            );
            assert!(!ours.is_empty(), "{sql}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_aggregate_under_a_partitioned_join_is_repartitioned_by_its_keys() {
    let session = session(2, 8192).await;
    let plan = quiver_text(&session, &format!("EXPLAIN {}", QUERIES[0])).await;
    // The radix aggregation runs, and the join still reads hash-partitioned groups.
    let at = plan
        .find("RadixAggregateExec")
        .unwrap_or_else(|| panic!("no radix aggregation in\n{plan}"));
    let above = plan[..at].lines().rev().nth(1).unwrap_or_default();
    assert!(
        above.contains("RepartitionExec: partitioning=Hash([k@0], 2)"),
        "{plan}"
    );
    // With the layers off, the plan is DataFusion's own.
    run(&session, "SET quiver.optimizations = false").await;
    let stock = quiver_text(&session, &format!("EXPLAIN {}", QUERIES[0])).await;
    assert!(!stock.contains("Radix"), "{stock}");
    assert!(
        stock.contains("AggregateExec: mode=FinalPartitioned"),
        "{stock}"
    );
}
