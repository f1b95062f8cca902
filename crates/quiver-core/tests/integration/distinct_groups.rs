//! A DISTINCT aggregate of a string beside COUNT or AVG runs as two GROUP BYs
//! (`MixedDistinctToGroupBy`); COUNT(DISTINCT) of an integer under a GROUP BY runs as one table
//! of (group, value) pairs (`DistinctCountSets`).
//! Its answers must equal stock DataFusion's, which keeps a set of values per group, for every
//! aggregate it rewrites, NULLs in keys, arguments and distinct values, computed keys, no keys,
//! no rows and HAVING; and it must leave alone what it cannot rewrite.

use crate::support::{datafusion_text, quiver_text, run};

use datafusion::prelude::SessionContext;
use quiver_core::Session;

const TABLE: &str = "CREATE TABLE t AS
    SELECT value % 7 AS g,
           CASE WHEN value % 5 = 0 THEN NULL ELSE value % 23 END AS u,
           CASE WHEN value % 3 = 0 THEN NULL ELSE value * 1.5 END AS x,
           CASE WHEN value % 11 = 0 THEN NULL ELSE value % 13 END AS n,
           CASE WHEN value % 17 = 0 THEN NULL ELSE 'k' || (value % 4) END AS s,
           CASE WHEN value % 19 = 0 THEN NULL ELSE 'a long string value ' || (value % 29) END AS w
    FROM generate_series(1, 20000)";

/// The aggregate operators of the physical plan, one per line.
async fn aggregates(session: &Session, sql: &str) -> String {
    let plan = quiver_text(session, &format!("EXPLAIN {sql}")).await;
    let lines = plan.lines().filter(|line| line.contains("Aggregate"));
    let lines = lines.collect::<Vec<_>>().join("\n");
    assert!(!lines.is_empty(), "{sql}: no aggregate in\n{plan}");
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_distinct_aggregates_equal_datafusion_s_answers() {
    let session = Session::in_memory().unwrap();
    // A rule that fails is otherwise skipped without a word.
    run(
        &session,
        "SET datafusion.optimizer.skip_failed_rules = false",
    )
    .await;
    run(&session, TABLE).await;
    let ctx = SessionContext::new();
    datafusion_text(&ctx, TABLE).await;

    let rewritten = [
        "SELECT g, count(*) AS c, count(DISTINCT w) AS dw, sum(x) AS sx, round(avg(x), 6) AS ax,
                min(x) AS mn, max(u) AS mx, count(n) AS cn
         FROM t GROUP BY g ORDER BY g",
        // ClickBench's Q9, with a string distinct argument.
        "SELECT g, sum(u), count(*) AS c, round(avg(n), 6), count(DISTINCT w)
         FROM t GROUP BY g ORDER BY c DESC, g LIMIT 3",
        "SELECT g, count(*), count(DISTINCT w), avg(x) FROM t WHERE g > 100 GROUP BY g",
        // A computed key, a string key with NULLs, a nullable integer key, many groups.
        "SELECT g % 3 + 1 AS k, count(x), count(DISTINCT s) FROM t GROUP BY g % 3 + 1 ORDER BY k",
        "SELECT s, count(*), count(DISTINCT w) FROM t GROUP BY s ORDER BY s",
        "SELECT u, count(*), count(DISTINCT s) FROM t GROUP BY u ORDER BY u NULLS FIRST",
        "SELECT x, count(*), count(DISTINCT w), avg(u) FROM t GROUP BY x
         ORDER BY x NULLS FIRST LIMIT 50",
        // Other distinct aggregates of the same argument, and a binary argument.
        "SELECT g, min(DISTINCT w), max(DISTINCT w), count(DISTINCT w), count(*)
         FROM t GROUP BY g ORDER BY g",
        "SELECT g, count(*), count(DISTINCT CAST(w AS BYTEA)) FROM t GROUP BY g ORDER BY g",
        // AVG of an integer column (averaged as Float64), and a group whose AVG input is all NULL.
        "SELECT s, round(avg(u), 6) AS au, count(DISTINCT w), avg(CASE WHEN g = 3 THEN NULL ELSE 1.0 END)
         FROM t GROUP BY s, g = 3 ORDER BY s, au",
        "SELECT g, count(*) FROM t GROUP BY g HAVING count(DISTINCT w) > 20 ORDER BY g",
    ];
    let left_alone = [
        // No keys: one set.
        "SELECT count(*), count(DISTINCT w), round(avg(x), 6), count(x) FROM t",
        "SELECT count(*), count(DISTINCT w), avg(x), count(x), sum(n) FROM t WHERE g > 100",
        // Two distinct arguments.
        "SELECT g, count(DISTINCT w), count(DISTINCT s), count(*) FROM t GROUP BY g ORDER BY g",
        // AVG of a decimal keeps its decimal type only in one aggregate.
        "SELECT g, count(DISTINCT w), avg(CAST(x AS DECIMAL(12, 2))) FROM t GROUP BY g ORDER BY g",
        // A FILTER clause.
        "SELECT g, count(*) FILTER (WHERE n > 3), count(DISTINCT w) FROM t GROUP BY g ORDER BY g",
    ];
    let cases = rewritten.iter().map(|sql| (sql, true));
    for (sql, rewrite) in cases.chain(left_alone.iter().map(|sql| (sql, false))) {
        let plan = aggregates(&session, sql).await;
        if rewrite {
            assert!(
                plan.contains("__quiver_distinct") && !plan.contains("DISTINCT"),
                "{sql}: expected two GROUP BYs, got\n{plan}"
            );
        } else {
            assert!(
                !plan.contains("__quiver_distinct"),
                "{sql}: rewritten\n{plan}"
            );
        }
        assert_eq!(
            quiver_text(&session, sql).await,
            datafusion_text(&ctx, sql).await,
            "{sql}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_distinct_counts_equal_datafusion_s_answers() {
    let session = Session::in_memory().unwrap();
    run(
        &session,
        "SET datafusion.optimizer.skip_failed_rules = false",
    )
    .await;
    // Small batches and four partitions: many partial states to merge. 300,000 rows of up to
    // 150,000 distinct values spread past the accumulator's small table.
    let setup = [
        "SET datafusion.execution.batch_size = 1000",
        "SET datafusion.execution.target_partitions = 4",
        "CREATE TABLE t AS
            SELECT value % 7 AS g,
                   CAST(value % 301 AS SMALLINT) AS h,
                   CASE WHEN value % 5 = 0 THEN NULL ELSE value % 150000 END AS v,
                   CAST(value % 200 - 100 AS TINYINT) AS i8,
                   CAST(value * 2654435761 AS BIGINT UNSIGNED) AS u64,
                   CAST(value % 40000 AS INT UNSIGNED) AS u32,
                   'k' || (value % 3) AS s
            FROM generate_series(1, 300000)",
    ];
    let ctx = SessionContext::new();
    for sql in setup {
        run(&session, sql).await;
        datafusion_text(&ctx, sql).await;
    }
    let counted = [
        // ClickBench's Q8 and Q9.
        "SELECT g, count(DISTINCT v) AS u FROM t GROUP BY g ORDER BY u DESC, g LIMIT 10",
        "SELECT g, sum(h), count(*) AS c, round(avg(i8), 6), count(DISTINCT v)
         FROM t GROUP BY g ORDER BY c DESC, g LIMIT 3",
        // Every integer width and signedness, NULL arguments, two distinct arguments.
        "SELECT g, count(DISTINCT i8), count(DISTINCT h), count(DISTINCT u32), count(DISTINCT u64),
                count(DISTINCT v) FROM t GROUP BY g ORDER BY g",
        // Many groups (300), a string key, two keys, a computed key.
        "SELECT h, count(DISTINCT v) AS u, count(*) FROM t GROUP BY h ORDER BY u DESC, h LIMIT 20",
        "SELECT s, count(DISTINCT u32) FROM t GROUP BY s ORDER BY s",
        "SELECT g, s, count(DISTINCT v) FROM t GROUP BY g, s ORDER BY g, s",
        "SELECT v % 3 AS k, count(DISTINCT h) FROM t GROUP BY v % 3 ORDER BY k NULLS FIRST",
        // A group whose arguments are all NULL counts 0; FILTER; HAVING; beside a string one.
        "SELECT v IS NULL AS n, count(DISTINCT v), count(*) FROM t GROUP BY v IS NULL ORDER BY n",
        "SELECT g, count(DISTINCT v) FILTER (WHERE h > 150), count(DISTINCT h) FILTER (WHERE g = 2)
         FROM t GROUP BY g ORDER BY g",
        "SELECT g FROM t GROUP BY g HAVING count(DISTINCT v) > 30000 ORDER BY g",
        "SELECT g, count(DISTINCT v), count(DISTINCT s), count(*) FROM t GROUP BY g ORDER BY g",
        "SELECT g, count(DISTINCT v) FROM t WHERE g > 100 GROUP BY g",
        // Many groups whose partial aggregation DataFusion may skip (rows become states).
        "SELECT v, count(DISTINCT g) AS c FROM t GROUP BY v ORDER BY c DESC, v NULLS FIRST LIMIT 5",
    ];
    let left_alone = [
        // No keys: DataFusion's one set.
        "SELECT count(DISTINCT v), count(*) FROM t",
        // Not a count, or not an integer.
        "SELECT g, sum(DISTINCT h) FROM t GROUP BY g ORDER BY g",
        "SELECT g, count(DISTINCT CAST(v AS DOUBLE)) FROM t GROUP BY g ORDER BY g",
    ];
    let cases = counted.iter().map(|sql| (sql, true));
    for (sql, rewrite) in cases.chain(left_alone.iter().map(|sql| (sql, false))) {
        let plan = aggregates(&session, sql).await;
        assert_eq!(plan.contains("distinct_count("), rewrite, "{sql}:\n{plan}");
        assert_eq!(
            quiver_text(&session, sql).await,
            datafusion_text(&ctx, sql).await,
            "{sql}"
        );
    }
}
