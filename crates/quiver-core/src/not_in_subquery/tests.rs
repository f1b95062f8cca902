//! Tests of the NOT IN rewrites, answers and plans. Expected answers are DuckDB's and
//! PostgreSQL's (SQL's three-valued NOT IN); the shapes are those of DataFusion's upstream
//! issues and of an 18-shape matrix of NOT IN positions, left sides and correlations.

use super::*;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::execution::SessionStateBuilder;
use datafusion::optimizer::{Optimizer, OptimizerContext};
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion::prelude::SessionContext;

const TABLES: &[&str] = &[
    // apache/datafusion#25336 and #25480.
    "CREATE TABLE t1(id INT, z INT) AS VALUES (1, 10), (2, 20), (NULL, 30), (4, 40)",
    "CREATE TABLE t2(id INT, z INT) AS VALUES (1, 5), (NULL, 50)",
    "CREATE TABLE t3(id INT, z INT) AS VALUES (1, 5), (NULL, 50), (5, 10)",
    // The 18-shape matrix.
    "CREATE TABLE t_out(id INT, g INT) AS VALUES (1, 1), (2, 2), (NULL, 1)",
    "CREATE TABLE t_in(id INT, g INT) AS VALUES (1, 1), (NULL, 2), (4, 3)",
    // #25473, #25474 and #25340.
    "CREATE TABLE o(x INT NOT NULL) AS VALUES (1), (2)",
    "CREATE TABLE i(id INT NOT NULL) AS VALUES (1), (3)",
    "CREATE TABLE ie(id INT NOT NULL) AS SELECT * FROM (VALUES (1)) v(id) WHERE false",
    "CREATE TABLE u1(id INT) AS VALUES (1), (2)",
    "CREATE TABLE u2(id INT) AS VALUES (1), (NULL)",
    // #25347 with a NULL correlation key.
    "CREATE TABLE ko(id INT, g INT, z INT) AS VALUES (1, 1, 10), (2, NULL, 10), (3, 2, 10)",
    "CREATE TABLE ki(id INT, g INT, z INT) AS VALUES (1, 1, 5), (5, 2, 5), (NULL, 3, 5)",
    // Aggregates without GROUP BY.
    "CREATE TABLE st(x INT, g INT) AS VALUES (1, 1), (2, 2), (3, 3), (NULL, 1), (5, 2), (0, 3)",
    "CREATE TABLE ss(b INT, g INT) AS VALUES (1, 1), (5, 2)",
    // Grouped, DISTINCT and ordered subqueries.
    "CREATE TABLE gt(x INT, g INT) AS VALUES (1, 1), (2, 2), (3, 3), (NULL, 1), (5, 2)",
    "CREATE TABLE gs(b INT, g INT, k INT) AS VALUES (1, 1, 1), (5, 2, 1), (NULL, 2, 2), (7, 1, 2)",
    // A condition on outer columns only.
    "CREATE TABLE jt1(t1_id INT, t1_int INT) AS VALUES (11, 1), (22, 2), (33, 0)",
    "CREATE TABLE jt2(t2_id INT) AS VALUES (23), (NULL)",
    // NOT NULL on both sides.
    "CREATE TABLE nn_o(id INT NOT NULL, g INT NOT NULL) AS VALUES (1, 1), (2, 2), (3, 3)",
    "CREATE TABLE nn_i(id INT NOT NULL, g INT NOT NULL) AS VALUES (1, 1), (5, 2), (3, 2)",
    // An outer join inside the subquery.
    "CREATE TABLE oj_t(x INT, k INT) AS VALUES (1, 1), (2, 2), (7, 3)",
    "CREATE TABLE oj_a(v INT) AS VALUES (1), (2)",
    "CREATE TABLE oj_b(v INT, k INT) AS VALUES (1, 1), (2, 9)",
];

/// DataFusion's rules with this one first, as quiver registers it, and the tables above.
async fn context() -> SessionContext {
    let mut rules = Optimizer::new().rules;
    rules.insert(0, Arc::new(QuiverNotInSubquery));
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_optimizer_rules(rules)
        .build();
    let ctx = SessionContext::new_with_state(state);
    for sql in TABLES {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    ctx
}

/// The first column of `sql`'s result as integers, in the order returned.
async fn ints(ctx: &SessionContext, sql: &str) -> Vec<Option<i64>> {
    let batches = match ctx.sql(sql).await {
        Ok(frame) => frame.collect().await,
        Err(error) => Err(error),
    }
    .unwrap_or_else(|error| panic!("{sql}: {error}"));
    let mut values = Vec::new();
    for batch in batches {
        let column = cast(batch.column(0), &DataType::Int64).unwrap();
        values.extend(column.as_primitive::<Int64Type>().iter());
    }
    values
}

/// The error `sql` fails with.
async fn error(ctx: &SessionContext, sql: &str) -> String {
    let result = match ctx.sql(sql).await {
        Ok(frame) => frame.collect().await.map(|_| ()),
        Err(error) => Err(error),
    };
    match result {
        Ok(()) => panic!("{sql} ran; it should have been refused"),
        Err(error) => error.to_string(),
    }
}

async fn physical_plan(ctx: &SessionContext, sql: &str) -> String {
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    indented(&plan)
}

fn indented(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

async fn check(ctx: &SessionContext, cases: &[(&str, &[Option<i64>])]) {
    for (sql, expected) in cases {
        assert_eq!(ints(ctx, sql).await, expected.to_vec(), "{sql}");
    }
}

const N: Option<i64> = None;

#[tokio::test]
async fn the_eighteen_shapes_give_duckdbs_answers() {
    let ctx = context().await;
    // (shape, x, correlation, answer). A: a conjunct; B: under OR; C: under IS NULL.
    let cases: [(&str, &str, &str, &[Option<i64>]); 18] = [
        ("A", "t_out.id", "", &[]),
        ("A", "t_out.id", " WHERE t_in.g = t_out.g", &[]),
        ("A", "t_out.id", " WHERE t_in.g > t_out.g", &[Some(2)]),
        ("A", "3", "", &[]),
        ("A", "3", " WHERE t_in.g = t_out.g", &[Some(1), N]),
        ("A", "3", " WHERE t_in.g > t_out.g", &[Some(2)]),
        ("B", "t_out.id", "", &[]),
        ("B", "t_out.id", " WHERE t_in.g = t_out.g", &[]),
        ("B", "t_out.id", " WHERE t_in.g > t_out.g", &[Some(2)]),
        ("B", "3", "", &[]),
        ("B", "3", " WHERE t_in.g = t_out.g", &[Some(1), N]),
        ("B", "3", " WHERE t_in.g > t_out.g", &[Some(2)]),
        ("C", "t_out.id", "", &[Some(2), N]),
        ("C", "t_out.id", " WHERE t_in.g = t_out.g", &[Some(2), N]),
        ("C", "t_out.id", " WHERE t_in.g > t_out.g", &[Some(1), N]),
        ("C", "3", "", &[Some(1), Some(2), N]),
        ("C", "3", " WHERE t_in.g = t_out.g", &[Some(2)]),
        ("C", "3", " WHERE t_in.g > t_out.g", &[Some(1), N]),
    ];
    for (shape, x, correlation, expected) in cases {
        let not_in = format!("{x} NOT IN (SELECT t_in.id FROM t_in{correlation})");
        let filter = match shape {
            "A" => not_in,
            "B" => format!("{not_in} OR t_out.g = 99"),
            _ => format!("({not_in}) IS NULL"),
        };
        let sql = format!("SELECT id FROM t_out WHERE {filter} ORDER BY id");
        assert_eq!(ints(&ctx, &sql).await, expected.to_vec(), "{sql}");
    }
}

#[tokio::test]
async fn a_null_value_is_unknown_against_a_non_empty_not_null_column() {
    // #25473, #25474 and #25340: DataFusion 55.2 returns every row for the first five.
    let ctx = context().await;
    check(
        &ctx,
        &[
            (
                "SELECT x FROM o WHERE NULL NOT IN (SELECT id FROM i) ORDER BY x",
                &[],
            ),
            (
                "SELECT x FROM o WHERE CAST(NULL AS INT) NOT IN (SELECT id FROM i) ORDER BY x",
                &[],
            ),
            (
                "SELECT x FROM o WHERE NULLIF(1, 1) NOT IN (SELECT id FROM i) ORDER BY x",
                &[],
            ),
            (
                "SELECT x FROM o WHERE NULLIF(x, x) NOT IN (SELECT id FROM i) ORDER BY x",
                &[],
            ),
            (
                "SELECT id FROM u1 WHERE 3 NOT IN (SELECT id FROM u2) ORDER BY id",
                &[],
            ),
            // Anything NOT IN an empty set is TRUE, NULL included.
            (
                "SELECT x FROM o WHERE CAST(NULL AS INT) NOT IN (SELECT id FROM ie) ORDER BY x",
                &[Some(1), Some(2)],
            ),
            // A NOT NULL expression: a plain anti join.
            (
                "SELECT x FROM o WHERE x + 2 NOT IN (SELECT id FROM i) ORDER BY x",
                &[Some(2)],
            ),
            // N1, unchanged.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT id FROM t2) ORDER BY id",
                &[],
            ),
            (
                "SELECT id FROM u1 WHERE id NOT IN (SELECT id FROM i) ORDER BY id",
                &[Some(2)],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn correlated_not_in_compares_with_each_rows_own_set() {
    let ctx = context().await;
    check(
        &ctx,
        &[
            // #25336: S = {1} for every row; DataFusion 55.2 returns no rows.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT t2.id FROM t2 WHERE t2.z < t1.z) \
                 ORDER BY id",
                &[Some(2), Some(4)],
            ),
            (
                "SELECT id FROM t1 WHERE NOT (id IN (SELECT t2.id FROM t2 WHERE t2.z < t1.z)) \
                 OR id = 4 ORDER BY id",
                &[Some(2), Some(4)],
            ),
            // S = {NULL} for every row.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT t2.id FROM t2 WHERE t2.z > t1.z) \
                 ORDER BY id",
                &[],
            ),
            // S is empty for every row: TRUE even for the NULL id.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT t2.id FROM t2 WHERE t2.z = t1.z) \
                 ORDER BY id",
                &[Some(1), Some(2), Some(4), N],
            ),
            // #25347: a NULL correlation key gives an empty set, so TRUE.
            (
                "SELECT id FROM ko WHERE 1 NOT IN (SELECT ki.id FROM ki WHERE ki.g = ko.g) \
                 ORDER BY id",
                &[Some(2), Some(3)],
            ),
            // #25480: the correlation is the IN comparison itself.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT t3.id FROM t3 WHERE t3.id = t1.id) \
                 ORDER BY id",
                &[Some(2), Some(4), N],
            ),
            // Only outer columns in the subquery's condition.
            (
                "SELECT t1_id FROM jt1 WHERE jt1.t1_id + 12 NOT IN \
                 (SELECT jt2.t2_id + 1 FROM jt2 WHERE jt1.t1_int > 0) ORDER BY t1_id",
                &[Some(33)],
            ),
            // NOT NULL on both sides.
            (
                "SELECT id FROM nn_o WHERE id NOT IN (SELECT id FROM nn_i WHERE nn_i.g = nn_o.g) \
                 ORDER BY id",
                &[Some(2), Some(3)],
            ),
            // Inside an EXISTS, correlated with the EXISTS' table.
            (
                "SELECT id FROM t1 WHERE EXISTS (SELECT 1 FROM t3 WHERE t3.z < t1.z AND \
                 t3.id NOT IN (SELECT t2.id FROM t2 WHERE t2.z = t3.z)) ORDER BY id",
                &[Some(2), Some(4), N],
            ),
            // An N1 conjunct beside an N3 one, and HAVING.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT id FROM u2 WHERE id IS NOT NULL) \
                 AND z NOT IN (SELECT z FROM t2 WHERE t2.z < t1.z) ORDER BY id",
                &[Some(2), Some(4)],
            ),
            (
                "SELECT id FROM t1 GROUP BY id HAVING id NOT IN \
                 (SELECT t2.id FROM t2 WHERE t2.id IS NOT NULL) ORDER BY id",
                &[Some(2), Some(4)],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn grouped_distinct_and_ordered_subqueries_decorrelate() {
    let ctx = context().await;
    check(
        &ctx,
        &[
            (
                "SELECT x FROM gt WHERE x NOT IN \
                 (SELECT max(b) FROM gs WHERE gs.g = gt.g GROUP BY gs.k) ORDER BY x",
                &[Some(3)],
            ),
            (
                "SELECT x FROM gt WHERE x NOT IN (SELECT DISTINCT b FROM gs WHERE gs.g = gt.g) \
                 ORDER BY x",
                &[Some(3)],
            ),
            (
                "SELECT x FROM gt WHERE x NOT IN \
                 (SELECT b FROM gs WHERE gs.g = gt.g AND gs.k = 1) ORDER BY x",
                &[Some(2), Some(3)],
            ),
            // The ORDER BY cannot change the set; DataFusion 55.2 cannot decorrelate it.
            (
                "SELECT x FROM gt WHERE x NOT IN \
                 (SELECT b FROM gs WHERE gs.g = gt.g ORDER BY b) ORDER BY x",
                &[Some(3)],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_aggregate_without_group_by_is_one_value() {
    // N4; st.g = 3 has no ss rows, so count is 0 and max is NULL there.
    let ctx = context().await;
    check(
        &ctx,
        &[
            (
                "SELECT x FROM st WHERE x NOT IN (SELECT max(b) FROM ss WHERE ss.g = st.g) \
                 ORDER BY x",
                &[Some(2)],
            ),
            (
                "SELECT x FROM st WHERE x NOT IN (SELECT count(b) FROM ss WHERE ss.g = st.g) \
                 ORDER BY x",
                &[Some(2), Some(3), Some(5)],
            ),
            (
                "SELECT x FROM st WHERE x NOT IN (SELECT count(b) FROM ss WHERE ss.g = st.g) \
                 OR x = 0 ORDER BY x",
                &[Some(0), Some(2), Some(3), Some(5)],
            ),
            (
                "SELECT x FROM st WHERE (x NOT IN \
                 (SELECT count(b) FROM ss WHERE ss.g = st.g)) IS NULL ORDER BY x",
                &[N],
            ),
            // IN has the count bug in DataFusion 55.2 too (it returns only 1).
            (
                "SELECT x FROM st WHERE x IN (SELECT count(b) FROM ss WHERE ss.g = st.g) \
                 ORDER BY x",
                &[Some(0), Some(1)],
            ),
            (
                "SELECT x FROM st WHERE NOT (x NOT IN \
                 (SELECT count(b) FROM ss WHERE ss.g = st.g)) ORDER BY x",
                &[Some(0), Some(1)],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_value_computed_once_per_row_is_projected_before_the_rewrite() {
    // A scalar subquery (max = 2) and a volatile expression (always 0) against S = {1}:
    // TRUE for every row, the NULL id included.
    let ctx = context().await;
    let every_row: &[Option<i64>] = &[Some(1), Some(2), Some(4), N];
    check(
        &ctx,
        &[
            (
                "SELECT id FROM t1 WHERE (SELECT max(id) FROM u1) NOT IN \
                 (SELECT t2.id FROM t2 WHERE t2.z < t1.z) ORDER BY id",
                every_row,
            ),
            (
                "SELECT id FROM t1 WHERE (SELECT max(id) FROM u1) NOT IN \
                 (SELECT id FROM t2 WHERE id IS NOT NULL) ORDER BY id",
                every_row,
            ),
            (
                "SELECT id FROM t1 WHERE floor(random()) NOT IN \
                 (SELECT t2.id FROM t2 WHERE t2.z < t1.z) ORDER BY id",
                every_row,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn unknown_stays_unknown_outside_and_and_or() {
    // N5 (and IN's `= ANY`): DataFusion 55.2's mark joins answer FALSE for UNKNOWN.
    let ctx = context().await;
    check(
        &ctx,
        &[
            (
                "SELECT id FROM t1 WHERE (id NOT IN (SELECT t2.id FROM t2 WHERE t2.z < t1.z)) \
                 IS NULL ORDER BY id",
                &[N],
            ),
            (
                "SELECT id FROM t1 WHERE NOT (id NOT IN \
                 (SELECT t2.id FROM t2 WHERE t2.z < t1.z)) ORDER BY id",
                &[Some(1)],
            ),
            (
                "SELECT id FROM t1 WHERE (id NOT IN (SELECT id FROM u2)) IS NULL ORDER BY id",
                &[Some(2), Some(4), N],
            ),
            (
                "SELECT id FROM t1 WHERE (id IN (SELECT id FROM u2)) IS NULL ORDER BY id",
                &[Some(2), Some(4), N],
            ),
            (
                "SELECT id FROM t1 WHERE CASE WHEN id NOT IN \
                 (SELECT t2.id FROM t2 WHERE t2.z < t1.z) THEN 'keep' ELSE 'drop' END = 'keep' \
                 ORDER BY id",
                &[Some(2), Some(4)],
            ),
            // Positive positions: N3 under OR and IS TRUE.
            (
                "SELECT id FROM t1 WHERE id NOT IN (SELECT id FROM u2) OR z = 40 ORDER BY id",
                &[Some(4)],
            ),
            (
                "SELECT id FROM t1 WHERE (id NOT IN (SELECT id FROM u2)) IS TRUE OR z = 40 \
                 ORDER BY id",
                &[Some(4)],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn shapes_that_cannot_be_rewritten_are_refused_with_a_suggestion() {
    let ctx = context().await;
    let cases = [
        (
            "SELECT x FROM gt WHERE x NOT IN (SELECT b FROM gs WHERE gs.g = gt.g LIMIT 1)",
            "LIMIT",
        ),
        (
            "SELECT x FROM gt WHERE x NOT IN \
             (SELECT b FROM gs WHERE gs.g < gt.g UNION ALL SELECT NULL)",
            "UNION",
        ),
        (
            "SELECT x FROM st WHERE x NOT IN \
             (SELECT max(b) FROM ss WHERE ss.g = st.g HAVING max(b) > 1)",
            "without GROUP BY",
        ),
        (
            "SELECT x FROM oj_t WHERE x NOT IN (SELECT oj_a.v FROM oj_a LEFT JOIN \
             (SELECT * FROM oj_b WHERE oj_b.k = oj_t.k) b ON oj_a.v = b.v)",
            "optional side",
        ),
        (
            "SELECT id FROM t1 WHERE EXISTS \
             (SELECT 1 FROM t3 WHERE t1.id NOT IN (SELECT t2.id FROM t2))",
            "enclosing query",
        ),
    ];
    for (sql, reason) in cases {
        let message = error(&ctx, sql).await;
        assert!(message.contains(reason), "{sql}: {message}");
        assert!(message.contains("NOT EXISTS"), "{sql}: {message}");
    }
}

#[tokio::test]
async fn uncorrelated_column_not_in_keeps_the_null_aware_hash_anti_join() {
    let ctx = context().await;
    let plan = physical_plan(
        &ctx,
        "SELECT id FROM t1 WHERE id NOT IN (SELECT id FROM t2)",
    )
    .await;
    assert!(
        plan.lines().any(|line| line.contains("HashJoinExec")
            && line.contains("join_type=LeftAnti")
            && line.contains("null_aware")),
        "{plan}"
    );
    // So does a constant, through its helper column (N2).
    let plan = physical_plan(&ctx, "SELECT id FROM u1 WHERE 3 NOT IN (SELECT id FROM u2)").await;
    assert!(
        plan.lines()
            .any(|line| line.contains("HashJoinExec") && line.contains("null_aware")),
        "{plan}"
    );
}

#[tokio::test]
async fn not_null_columns_make_a_plain_hash_anti_join() {
    // N3 without IS NULL tests: both comparisons are join keys.
    let ctx = context().await;
    let plan = physical_plan(
        &ctx,
        "SELECT id FROM nn_o WHERE id NOT IN (SELECT id FROM nn_i WHERE nn_i.g = nn_o.g)",
    )
    .await;
    assert!(
        plan.lines()
            .any(|line| line.contains("HashJoinExec") && line.contains("Anti")),
        "{plan}"
    );
    assert!(!plan.contains("null_aware"), "{plan}");
    assert!(!plan.contains("NestedLoopJoinExec"), "{plan}");
}

#[tokio::test]
async fn a_second_pass_changes_nothing() {
    let ctx = context().await;
    let state = ctx.state();
    let config = OptimizerContext::new();
    let queries = [
        "SELECT id FROM t1 WHERE 1 = 1",
        "SELECT id FROM t1 WHERE id NOT IN (SELECT id FROM t2)",
        "SELECT id FROM u1 WHERE 3 NOT IN (SELECT id FROM u2)",
        "SELECT id FROM t1 WHERE id NOT IN (SELECT t2.id FROM t2 WHERE t2.z < t1.z)",
        "SELECT x FROM st WHERE x NOT IN (SELECT count(b) FROM ss WHERE ss.g = st.g)",
        "SELECT id FROM t1 WHERE (id NOT IN (SELECT id FROM u2)) IS NULL",
    ];
    for (at, sql) in queries.iter().enumerate() {
        let plan = state.create_logical_plan(sql).await.unwrap();
        let plan = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .unwrap();
        let once = QuiverNotInSubquery.rewrite(plan, &config).unwrap();
        // The first two need no rewrite.
        assert_eq!(once.transformed, at >= 2, "{sql}");
        let twice = QuiverNotInSubquery
            .rewrite(once.data.clone(), &config)
            .unwrap();
        assert!(!twice.transformed, "{sql}");
        assert_eq!(twice.data, once.data, "{sql}");
    }
}
