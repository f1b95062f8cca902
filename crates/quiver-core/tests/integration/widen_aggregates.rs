//! SUM and AVG of integers without GROUP BY run over the column itself, and `count(*)` over a
//! column already read (`WidenAggregates`). Their answers must equal stock DataFusion's — every integer type, NULLs,
//! FILTER, no rows, all-NULL groups, the small-key path, hash aggregation with and without its
//! partial phase, and many partial states to merge — and the output keeps its names and types.
//! AVG is the exact sum over the count, which DataFusion's float additions can miss.

use crate::support::{datafusion_text, quiver_text, run};

use datafusion::prelude::SessionContext;
use quiver_core::{Session, SessionOptions};

const SETUP: [&str; 3] = [
    "SET datafusion.execution.batch_size = 1000",
    "SET datafusion.execution.target_partitions = 4",
    "CREATE TABLE t AS
        SELECT value % 7 AS g,
               value % 2003 AS many,
               CAST(value % 50 AS TINYINT) AS k8,
               CASE WHEN value % 5 = 0 THEN NULL ELSE CAST(value % 200 - 100 AS TINYINT) END AS i8,
               CASE WHEN value % 6 = 0 THEN NULL ELSE CAST(value % 30000 - 15000 AS SMALLINT) END AS i16,
               CAST(value * 7919 % 2147483647 - 1073741823 AS INT) AS i32,
               CASE WHEN value % 7 = 3 THEN NULL ELSE value * 1000003 % 1000000007 END AS i64,
               CAST(value % 256 AS TINYINT UNSIGNED) AS u8,
               CAST(value % 65536 AS SMALLINT UNSIGNED) AS u16,
               CASE WHEN value % 4 = 1 THEN NULL ELSE CAST(value * 2654435 % 4294967295 AS INT UNSIGNED) END AS u32,
               CAST(value * 2654435761 % 100000000007 AS BIGINT UNSIGNED) AS u64,
               CASE WHEN value % 3 = 0 THEN NULL ELSE value * 1.5 END AS x
        FROM generate_series(1, 30000)",
];

async fn sessions() -> (Session, SessionContext) {
    sessions_with(SessionOptions::default()).await
}

async fn sessions_with(options: SessionOptions) -> (Session, SessionContext) {
    let session = Session::open(options).await.unwrap();
    // A rule that fails is otherwise skipped without a word.
    run(
        &session,
        "SET datafusion.optimizer.skip_failed_rules = false",
    )
    .await;
    let ctx = SessionContext::new();
    for sql in SETUP {
        run(&session, sql).await;
        datafusion_text(&ctx, sql).await;
    }
    (session, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widened_sums_averages_and_counts_equal_datafusion_s_answers() {
    let (session, ctx) = sessions().await;
    let columns = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "k8"];
    let mut queries = Vec::new();
    for c in columns {
        // Every column's sum stays below 2^53, so DataFusion's float sums are exact too (see
        // the last test for where they are not); rounding hides the last digit of the quotient.
        let avg = format!("round(avg({c}), 6)");
        let avg_where = |filter: &str| format!("round(avg({c}) FILTER (WHERE {filter}), 6)");
        let sum = if c == "u64" || c == "i64" {
            // Already 64-bit: DataFusion's own sum, here for the AVG beside it.
            format!("count({c})")
        } else {
            format!("sum({c})")
        };
        queries.extend([
            format!("SELECT {sum}, {avg}, count(*) FROM t"),
            format!("SELECT {sum}, {avg}, count(*) FROM t WHERE g = 100"),
            format!("SELECT g, {sum}, {avg}, count(*) AS c FROM t GROUP BY g ORDER BY g"),
            format!(
                "SELECT many, {sum} AS s, {avg} AS a, count(*) AS c FROM t GROUP BY many
                 ORDER BY many LIMIT 20 OFFSET 1000"
            ),
            format!(
                "SELECT k8, {sum} FILTER (WHERE g > 2), {}, count(*) FILTER (WHERE g <> 1)
                 FROM t GROUP BY k8 ORDER BY k8",
                avg_where("g < 5")
            ),
            format!(
                "SELECT {sum} FILTER (WHERE g > 2), {}, count(*) FILTER (WHERE g <> 1) FROM t",
                avg_where("many > 100")
            ),
            format!(
                "SELECT g, {avg}, CASE WHEN g = 3 THEN NULL ELSE g END AS n FROM t
                 GROUP BY g HAVING count(*) > 10 AND {sum} IS NOT NULL ORDER BY g"
            ),
        ]);
    }
    queries.extend([
        // A group whose argument is all NULL gives NULL; no rows give NULL and 0.
        "SELECT g, sum(CASE WHEN g = 3 THEN NULL ELSE i16 END) AS s,
                avg(CASE WHEN g = 3 THEN NULL ELSE i8 END) AS a, count(*)
         FROM t GROUP BY g ORDER BY g"
            .to_string(),
        "SELECT sum(i16), avg(i8), count(*) FROM t WHERE g > 10".to_string(),
        "SELECT g, sum(i16), avg(i8), count(*) FROM t WHERE g > 10 GROUP BY g".to_string(),
        // Expressions as arguments, and the column names and types of the result.
        "SELECT sum(i16 + 1), avg(length(CAST(i32 AS VARCHAR))), count(*) FROM t".to_string(),
        "SELECT arrow_typeof(sum(i16)), arrow_typeof(sum(u32)), arrow_typeof(avg(i32)),
                arrow_typeof(count(*)) FROM t"
            .to_string(),
        // Left alone: DISTINCT, floats, 64-bit sums, count of a column.
        "SELECT sum(DISTINCT i8), avg(DISTINCT i8), round(avg(x), 6), sum(i64), count(i16) FROM t"
            .to_string(),
    ]);
    for sql in &queries {
        assert_eq!(
            quiver_text(&session, sql).await,
            datafusion_text(&ctx, sql).await,
            "{sql}"
        );
    }

    // Without a partial phase for many groups (each row becomes its own partial state): that is
    // DataFusion's hash aggregation, which quiver keeps under a memory limit (the radix one,
    // holding many groups' rows, cannot spill).
    let (session, ctx) = sessions_with(SessionOptions {
        memory_limit: Some(1 << 32),
        ..SessionOptions::default()
    })
    .await;
    for sql in [
        "SET datafusion.execution.skip_partial_aggregation_probe_rows_threshold = 10",
        "SET datafusion.execution.skip_partial_aggregation_probe_ratio_threshold = 0.0",
    ] {
        run(&session, sql).await;
        datafusion_text(&ctx, sql).await;
    }
    for sql in [
        "SELECT many, sum(i16) AS s, round(avg(u32), 6) AS a, count(*) AS c,
                sum(u8) FILTER (WHERE g > 2) AS f, count(*) FILTER (WHERE g <> 1) AS cf
         FROM t GROUP BY many ORDER BY many",
    ] {
        let plan = quiver_text(&session, &format!("EXPLAIN ANALYZE {sql}")).await;
        assert!(plan.contains("skipped_aggregation_rows"), "{plan}");
        assert!(!plan.contains("RadixAggregateExec"), "{plan}");
        assert_eq!(
            quiver_text(&session, sql).await,
            datafusion_text(&ctx, sql).await,
            "{sql}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_show_the_widening_aggregates_under_the_original_names() {
    let (session, _) = sessions().await;
    let sql = "SELECT sum(i16), count(*), avg(i8) FROM t";
    let plan = quiver_text(&session, &format!("EXPLAIN {sql}")).await;
    for expected in [
        "widening_sum(t.i16) AS sum(t.i16)",
        // The first column read; the projection above names it count(*).
        "count_rows(t.i16) AS count(Int64(1))",
        "widening_avg(t.i8) AS avg(t.i8)",
    ] {
        assert!(plan.contains(expected), "{expected} in\n{plan}");
    }
    assert!(!plan.contains("CAST"), "{plan}");
    let batches = run(&session, sql).await;
    let names: Vec<_> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["sum(t.i16)", "count(*)", "avg(t.i8)"]);

    // Under a GROUP BY only count(*) changes.
    let plan = quiver_text(
        &session,
        "EXPLAIN SELECT g, sum(i16), avg(i8), count(*) FROM t GROUP BY g",
    )
    .await;
    assert!(
        !plan.contains("widening") && plan.contains("count_rows(t."),
        "{plan}"
    );

    // count(*) beside nothing that reads a column stays (a column would have to survive the
    // filter), and so does a cast the user wrote to another type.
    for sql in [
        "SELECT count(*) FROM t",
        "SELECT count(*) FROM t WHERE i16 > 0",
        "SELECT sum(CAST(i16 AS DOUBLE)), avg(CAST(i8 AS DECIMAL(10, 2))) FROM t",
    ] {
        let plan = quiver_text(&session, &format!("EXPLAIN {sql}")).await;
        assert!(
            !plan.contains("widening") && !plan.contains("count_rows"),
            "{sql}:\n{plan}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn averages_of_64_bit_integers_are_exact() {
    let (session, _) = sessions().await;
    // 2^53 + 1 is not a float: DataFusion's float sum gives 4503599627370496.
    let text = quiver_text(
        &session,
        "SELECT CAST(avg(v) AS DECIMAL(20, 0)) AS a FROM (VALUES (9007199254740993), (1)) AS u(v)",
    )
    .await;
    assert!(text.contains("4503599627370497"), "{text}");
    // The largest values do not overflow the sum.
    let text = quiver_text(
        &session,
        "SELECT avg(v) = 9223372036854775807.0 AS a, avg(w) = -9223372036854775808.0 AS b
         FROM (VALUES (9223372036854775807, -9223372036854775807 - 1),
                      (9223372036854775807, -9223372036854775807 - 1)) AS u(v, w)",
    )
    .await;
    assert!(text.contains("| true | true |"), "{text}");
}

/// Many groups: every partition passes the radix GROUP BY's switch point, so the widened
/// accumulators both take raw rows and merge partial states in one table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_groups_through_the_radix_path_equal_datafusion_s_answers() {
    let session = Session::in_memory().unwrap();
    let ctx = SessionContext::new();
    for sql in [
        "SET datafusion.execution.target_partitions = 4",
        "CREATE TABLE big AS
            SELECT value * 7919 % 100003 AS k,
                   CAST(value % 30000 - 15000 AS SMALLINT) AS i16,
                   CASE WHEN value % 5 = 0 THEN NULL ELSE CAST(value % 200 - 100 AS TINYINT) END AS i8,
                   value % 7 AS g
            FROM generate_series(1, 400000)",
    ] {
        run(&session, sql).await;
        datafusion_text(&ctx, sql).await;
    }
    let sql = "SELECT k, sum(i16) AS s, round(avg(i8), 6) AS a, count(*) AS c,
                      count(*) FILTER (WHERE g <> 1) AS cf, sum(i8) FILTER (WHERE g > 2) AS sf
               FROM big GROUP BY k ORDER BY k";
    let plan = quiver_text(&session, &format!("EXPLAIN {sql}")).await;
    assert!(plan.contains("RadixAggregateExec"), "{plan}");
    assert_eq!(
        quiver_text(&session, sql).await,
        datafusion_text(&ctx, sql).await
    );
}
