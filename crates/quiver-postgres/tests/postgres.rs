//! The scanner against a real PostgreSQL started by the test harness (`common/mod.rs`).
// Helpers outside `#[test]` functions (and the shared harness) fail loudly, as tests do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod streams;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, IntervalMonthDayNanoType, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};
use arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use quiver_postgres::register_postgres_functions;

fn context() -> SessionContext {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register_postgres_functions(&ctx);
    ctx
}

fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    collect(ctx.sql(sql).await, sql).await
}

async fn collect(frame: datafusion::error::Result<DataFrame>, sql: &str) -> Vec<RecordBatch> {
    frame
        .unwrap_or_else(|e| panic!("planning {sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("running {sql}: {e}"))
}

async fn query_err(ctx: &SessionContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Err(e) => e.to_string(),
        Ok(frame) => match frame.collect().await {
            Err(e) => e.to_string(),
            Ok(batches) => panic!("expected an error from {sql}, got {batches:?}"),
        },
    }
}

async fn explain(ctx: &SessionContext, sql: &str) -> String {
    pretty(&query(ctx, &format!("EXPLAIN {sql}")).await)
}

async fn explain_analyze(ctx: &SessionContext, sql: &str) -> String {
    pretty(&query(ctx, &format!("EXPLAIN ANALYZE {sql}")).await)
}

fn pretty(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).unwrap().to_string()
}

/// The first two columns of a one-row `count(*), sum(...)` result, as `count|sum` (the form
/// the `psql` helper returns for the same query on the server).
fn count_and_sum(batches: &[RecordBatch]) -> String {
    format!("{}|{}", single_i64(batches, 0), single_i64(batches, 1))
}

fn single_i64(batches: &[RecordBatch], column: usize) -> i64 {
    let array = batches[0].column(column);
    match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().value(0),
        DataType::Decimal128(_, _) => array.as_primitive::<Decimal128Type>().value(0) as i64,
        other => panic!("unexpected {other}"),
    }
}

macro_rules! require_cluster {
    () => {
        match common::cluster() {
            Some(cluster) => cluster,
            None => return,
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_type_is_read_value_by_value() {
    let pg = require_cluster!();
    let ctx = context();
    let sql = format!(
        "SELECT * FROM postgres_scan({}, 'public', 'all_types') ORDER BY id",
        lit(&pg.dsn("shop"))
    );
    let batches = query(&ctx, &sql).await;
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(batch.num_rows(), 3);
    let col = |name: &str| batch.column_by_name(name).unwrap().clone();

    assert!(col("b").as_boolean().value(0));
    assert_eq!(col("i2").as_primitive::<Int16Type>().value(1), 32767);
    assert_eq!(col("i4").as_primitive::<Int32Type>().value(1), i32::MIN);
    assert_eq!(
        col("i8").as_primitive::<Int64Type>().value(0),
        9_000_000_000
    );
    assert_eq!(col("f4").as_primitive::<Float32Type>().value(0), 1.5);
    assert!(col("f4").as_primitive::<Float32Type>().value(1).is_nan());
    assert_eq!(
        col("f8").as_primitive::<Float64Type>().value(1),
        f64::INFINITY
    );
    assert_eq!(col("dec").data_type(), &DataType::Decimal128(12, 3));
    assert_eq!(
        col("dec").as_primitive::<Decimal128Type>().value(0),
        123_456_789_125
    );
    assert_eq!(col("dec").as_primitive::<Decimal128Type>().value(1), -1);
    // Unconstrained numeric: the server's exact text, never a float.
    assert_eq!(col("num").data_type(), &DataType::Utf8);
    assert_eq!(
        col("num").as_string::<i32>().value(0),
        "3.14159265358979323846264338327950288419716939937510"
    );
    assert_eq!(col("num").as_string::<i32>().value(1), "NaN");
    assert_eq!(col("t").as_string::<i32>().value(0), "héllo");
    assert_eq!(col("t").as_string::<i32>().value(1), "");
    assert_eq!(col("vc").as_string::<i32>().value(0), "short");
    // char(n) without its blank padding, as `::text` reads it.
    assert_eq!(col("bp").as_string::<i32>().value(0), "ab");
    assert_eq!(col("nm").as_string::<i32>().value(0), "pg_name");
    assert_eq!(col("by").as_binary::<i32>().value(0), &[0x00, 0xff, 0x10]);
    assert_eq!(col("by").as_binary::<i32>().value(1), &[] as &[u8]);
    // 2024-02-29 is day 19782 after 1970-01-01; infinity is kept as the extreme value.
    assert_eq!(col("d").as_primitive::<Date32Type>().value(0), 19_782);
    assert_eq!(col("d").as_primitive::<Date32Type>().value(1), i32::MAX);
    assert_eq!(
        col("tm").as_primitive::<Time64MicrosecondType>().value(0),
        (13 * 3600 + 45 * 60 + 1) * 1_000_000 + 500_000
    );
    assert_eq!(col("ttz").as_string::<i32>().value(0), "10:00:00+02");
    assert_eq!(
        col("ts").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
    assert_eq!(
        col("ts")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_709_214_301_123_456
    );
    assert_eq!(
        col("ts")
            .as_primitive::<TimestampMicrosecondType>()
            .value(1),
        i64::MIN
    );
    assert_eq!(
        col("tstz").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert_eq!(
        col("tstz")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_709_210_701_000_000
    );
    assert_eq!(
        col("tstz")
            .as_primitive::<TimestampMicrosecondType>()
            .value(1),
        i64::MAX
    );
    let iv = col("iv")
        .as_primitive::<IntervalMonthDayNanoType>()
        .value(0);
    assert_eq!((iv.months, iv.days), (14, 3));
    assert_eq!(
        iv.nanoseconds,
        ((4 * 3600 + 5 * 60 + 6) * 1_000_000 + 789_000) * 1000
    );
    assert_eq!(
        col("u").as_string::<i32>().value(0),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    );
    assert_eq!(col("j").as_string::<i32>().value(0), "{\"a\": [1, 2]}");
    assert_eq!(col("jb").as_string::<i32>().value(0), "{\"b\": true}");
    let mood = col("m");
    assert!(matches!(mood.data_type(), DataType::Dictionary(_, _)));
    let mood = arrow::compute::cast(&mood, &DataType::Utf8).unwrap();
    assert_eq!(mood.as_string::<i32>().value(0), "happy");
    assert_eq!(col("dom").as_primitive::<Int32Type>().value(0), 7);
    let ia = col("ia");
    let ia = ia.as_list::<i32>();
    let first = ia.value(0);
    let first = first.as_primitive::<Int32Type>();
    assert_eq!(first.len(), 3);
    assert!(first.is_null(1));
    assert_eq!(first.value(2), 3);
    assert_eq!(ia.value(1).len(), 0);
    let ta = col("ta");
    let ta = ta.as_list::<i32>().value(0);
    assert_eq!(ta.as_string::<i32>().value(1), "y z");
    let na = col("na");
    let na = na.as_list::<i32>().value(0);
    assert_eq!(na.as_primitive::<Decimal128Type>().value(1), -225);
    assert_eq!(col("ip").as_string::<i32>().value(0), "192.168.0.1/24");
    assert_eq!(col("mac").as_string::<i32>().value(0), "08:00:2b:01:02:03");
    assert_eq!(col("pt").as_string::<i32>().value(0), "(1,2)");
    // The row of NULLs is NULL in every column.
    for (index, column) in batch.columns().iter().enumerate().skip(1) {
        assert!(
            column.is_null(2),
            "column {index} is not NULL in the NULL row"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ctid_ranges_read_every_row_once() {
    let pg = require_cluster!();
    let ctx = context();
    let expected = pg.psql("shop", "SELECT count(*), sum(id), sum(total) FROM orders");
    for (pages, connections) in [(7, 3), (1000, 4), (50, 1)] {
        let sql = format!(
            "SELECT count(*), sum(id), sum(total) FROM postgres_scan({}, 'public', 'orders', \
             named_struct('pages_per_task', {pages}), named_struct('connections', {connections}))",
            lit(&pg.dsn("shop"))
        );
        let batches = query(&ctx, &sql).await;
        let got = format!(
            "{}|{}|{}",
            single_i64(&batches, 0),
            single_i64(&batches, 1),
            {
                let total = batches[0]
                    .column(2)
                    .as_primitive::<Decimal128Type>()
                    .value(0);
                format!("{}.{:02}", total / 100, total % 100)
            }
        );
        assert_eq!(
            got, expected,
            "pages_per_task {pages}, connections {connections}"
        );
    }
    let plan = explain(
        &ctx,
        &format!(
            "SELECT count(*) FROM postgres_scan({}, 'public', 'orders', named_struct('pages_per_task', 7))",
            lit(&pg.dsn("shop"))
        ),
    )
    .await;
    assert!(plan.contains("ctid ranges of 7 pages"), "{plan}");
    assert!(!plan.contains("password"), "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hash_join_keys_filter_the_probe_side_copy() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let sql = format!(
        "SELECT count(*), sum(o.id) FROM (VALUES (3), (5)) AS c(customer) \
         JOIN postgres_scan_pushdown({dsn}, 'public', 'orders', named_struct('pages_per_task', 20)) o \
         ON o.customer = c.customer WHERE o.id <= 20000"
    );
    // Under a thousand rows, so EXPLAIN ANALYZE prints the count as is.
    let expected = pg.psql(
        "shop",
        "SELECT count(*) || '|' || sum(id) FROM orders WHERE customer IN (3, 5) AND id <= 20000",
    );
    let batches = query(&ctx, &sql).await;
    let got = count_and_sum(&batches);
    assert_eq!(got, expected);
    assert!(explain(&ctx, &sql).await.contains("runtime filters=1"));
    // The server sent only the joining rows: the scan's output is the join's.
    let analyzed = explain_analyze(&ctx, &sql).await;
    let count = expected.split('|').next().unwrap();
    let scan = analyzed
        .lines()
        .find(|line| line.contains("PostgresScanExec"))
        .unwrap();
    assert!(
        scan.contains(&format!("output_rows={count},"))
            || scan.contains(&format!("output_rows={count}]")),
        "{analyzed}"
    );
    // Without the runtime filter the same answer, reading every row.
    ctx.sql("SET datafusion.optimizer.enable_join_dynamic_filter_pushdown = false")
        .await
        .unwrap();
    let batches = query(&ctx, &sql).await;
    let got = count_and_sum(&batches);
    assert_eq!(got, expected);
    assert!(!explain(&ctx, &sql).await.contains("runtime filters"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_key_lists_reach_the_server_once_per_partition() {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::physical_plan::{collect, ExecutionPlan};
    use quiver_postgres::runtime_filter::key_list_config;
    use quiver_postgres::scan::PostgresScanExec;

    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    // 20,000 keys: about 120 KB of SQL, so each partition reads one merged ctid range.
    let sql = format!(
        "SELECT count(*), sum(o.id) FROM (SELECT value * 2 AS k FROM generate_series(1, 20000)) AS keys \
         JOIN postgres_scan_pushdown({dsn}, 'public', 'orders', named_struct('pages_per_task', 20)) o \
         ON o.id = keys.k"
    );
    let expected = pg.psql(
        "shop",
        "SELECT count(*) || '|' || sum(id) FROM orders WHERE id % 2 = 0 AND id <= 40000",
    );
    // The keys build the hash table, as written (the scan has statistics, the series not).
    ctx.sql("SET datafusion.optimizer.join_reordering = false")
        .await
        .unwrap();
    let frame = ctx.sql(&sql).await.unwrap();
    let task = frame.task_ctx();
    let plan = frame.create_physical_plan().await.unwrap();
    // As quiver runs any plan that reads Postgres: with room for the list.
    let config = key_list_config(&plan, task.session_config()).expect("the plan reads Postgres");
    let batches = collect(
        Arc::clone(&plan),
        Arc::new(task.with_session_config(config)),
    )
    .await
    .unwrap();
    let got = count_and_sum(&batches);
    assert_eq!(got, expected);
    // The server sent only the 20,000 joining rows of 50,000.
    let mut scanned = None;
    plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<PostgresScanExec>() {
            scanned = scan.metrics().and_then(|m| m.output_rows());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(true)
        .to_string();
    assert_eq!(scanned, Some(20_000), "{shown}");
    // A plan without Postgres keeps the session's settings.
    let local = ctx
        .sql("SELECT 1")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    assert!(key_list_config(&local, &ctx.copied_config()).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_scans_of_one_query_share_one_read() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let orders = format!(
        "postgres_scan_pushdown({dsn}, 'public', 'orders', named_struct('pages_per_task', 20))"
    );
    // The same rows twice, as TPC-H Q15 reads its view: both branches read one COPY per
    // partition, and each still sees every row.
    let sql = format!(
        "SELECT count(*), sum(x) FROM (SELECT id AS x FROM {orders} WHERE total > 50 \
         UNION ALL SELECT id FROM {orders} WHERE total > 50)"
    );
    let expected = pg.psql(
        "shop",
        "SELECT 2 * count(*) || '|' || 2 * sum(id) FROM orders WHERE total > 50",
    );
    for _ in 0..3 {
        let batches = query(&ctx, &sql).await;
        let got = count_and_sum(&batches);
        assert_eq!(got, expected);
    }
    let analyzed = explain_analyze(&ctx, &sql).await;
    let half: i64 = expected.split('|').next().unwrap().parse::<i64>().unwrap() / 2;
    let scans: Vec<&str> = analyzed
        .lines()
        .filter(|line| line.contains("PostgresScanExec"))
        .collect();
    assert_eq!(scans.len(), 2, "{analyzed}");
    let shown = format!("{:.2} K", half as f64 / 1000.0);
    for scan in scans {
        assert!(scan.contains(&format!("output_rows={shown}")), "{analyzed}");
    }
    // A LIMIT that stops one branch early (above a filter Postgres is not sent, so both
    // scans still read alike) leaves the other whole.
    let limited = format!(
        "SELECT count(*) FROM ((SELECT id FROM {orders} WHERE total > 50 AND id % 7 = 3 LIMIT 5) \
         UNION ALL (SELECT id FROM {orders} WHERE total > 50))"
    );
    let batches = query(&ctx, &limited).await;
    assert_eq!(single_i64(&batches, 0), half + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filters_projections_and_limits_are_pushed_down() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let sql = format!(
        "SELECT id, note FROM postgres_scan_pushdown({dsn}, 'public', 'orders', named_struct('pages_per_task', 20)) \
         WHERE customer IN (3, 5) AND NOT (total < 10) AND created BETWEEN DATE '2024-03-01' AND DATE '2024-06-30' \
         AND note LIKE 'order 1%' AND note IS NOT NULL ORDER BY id"
    );
    let batches = query(&ctx, &sql).await;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let expected = pg.psql(
        "shop",
        "SELECT count(*) FROM orders WHERE customer IN (3, 5) AND NOT (total < 10) \
         AND created BETWEEN '2024-03-01' AND '2024-06-30' AND note LIKE 'order 1%'",
    );
    assert_eq!(rows.to_string(), expected);
    let plan = explain(&ctx, &sql).await;
    assert!(
        plan.contains("(\"customer\" = 3) OR (\"customer\" = 5)"),
        "{plan}"
    );
    assert!(
        !plan.contains("FilterExec"),
        "every filter was pushed: {plan}"
    );

    // Selective on an indexed column: read through the index, not a ctid range per task.
    let sql = format!(
        "SELECT * FROM postgres_scan_pushdown({dsn}, 'public', 'orders', named_struct('pages_per_task', 20)) WHERE id = 4321"
    );
    let plan = explain(&ctx, &sql).await;
    assert!(
        plan.contains("index (Index Scan using orders_pkey"),
        "{plan}"
    );
    let batches = query(&ctx, &sql).await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);

    // The plain scan keeps filters in quiver; a string range stays in quiver either way.
    let sql = format!("SELECT id FROM postgres_scan({dsn}, 'public', 'orders') WHERE id < 10");
    assert!(explain(&ctx, &sql).await.contains("FilterExec"));
    let sql = format!(
        "SELECT count(*) FROM postgres_scan_pushdown({dsn}, 'public', 'orders') WHERE note < 'order 2'"
    );
    let expected = pg.psql(
        "shop",
        "SELECT count(*) FROM orders WHERE note COLLATE \"C\" < 'order 2'",
    );
    assert_eq!(
        single_i64(&query(&ctx, &sql).await, 0).to_string(),
        expected
    );

    // LIMIT goes to Postgres when nothing stays in quiver.
    let sql = format!("SELECT * FROM postgres_scan_pushdown({dsn}, 'public', 'orders') LIMIT 5");
    let plan = explain(&ctx, &sql).await;
    assert!(plan.contains("limit=5"), "{plan}");
    assert_eq!(
        query(&ctx, &sql)
            .await
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn weird_names_and_hostile_literals_are_quoted() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let sql = format!(
        "SELECT id, \"sel;ect\", \"MixedCase\" FROM postgres_scan_pushdown({dsn}, 'public', 'we\"ird') \
         WHERE \"sel;ect\" = '''); DROP TABLE t; --'"
    );
    let batches = query(&ctx, &sql).await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    assert_eq!(
        batches[0].column(1).as_string::<i32>().value(0),
        "'); DROP TABLE t; --"
    );
    assert_eq!(pg.psql("shop", "SELECT x FROM t"), "42", "table t survived");

    let sql = format!(
        "SELECT \"Name\" FROM postgres_scan({dsn}, 'Other Schema', 'Cased') WHERE \"Id\" = 2"
    );
    let batches = query(&ctx, &sql).await;
    assert_eq!(batches[0].column(0).as_string::<i32>().value(0), "two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_views_and_queries_are_readable() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let sql = format!(
        "SELECT count(*), sum(value) FROM postgres_scan({dsn}, 'public', 'measurements', named_struct('pages_per_task', 10))"
    );
    let batches = query(&ctx, &sql).await;
    assert_eq!(single_i64(&batches, 0), 30_000);
    assert_eq!(single_i64(&batches, 1), 30_000 * 30_001 / 2);
    let plan = explain(&ctx, &sql).await;
    assert!(plan.contains("over 3 heaps"), "{plan}");

    let sql = format!("SELECT count(*) FROM postgres_scan({dsn}, 'public', 'big_orders')");
    let expected = pg.psql("shop", "SELECT count(*) FROM big_orders");
    assert_eq!(
        single_i64(&query(&ctx, &sql).await, 0).to_string(),
        expected
    );
    let sql = format!("SELECT sum(orders) FROM postgres_scan({dsn}, 'public', 'customer_totals')");
    assert_eq!(single_i64(&query(&ctx, &sql).await, 0), 50_000);

    let inner = lit(
        "SELECT o.id, c.orders FROM orders o JOIN customer_totals c USING (customer) WHERE o.id <= 10;",
    );
    let sql = format!("SELECT count(*), sum(id) FROM postgres_query({dsn}, {inner})");
    let batches = query(&ctx, &sql).await;
    assert_eq!(single_i64(&batches, 0), 10);
    assert_eq!(single_i64(&batches, 1), 55);

    // The URI form of the connection string reads the same table.
    let sql = format!(
        "SELECT count(*) FROM postgres_scan({}, 'public', 'orders')",
        lit(&pg.uri("shop"))
    );
    assert_eq!(single_i64(&query(&ctx, &sql).await, 0), 50_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_are_clear_errors() {
    let pg = require_cluster!();
    let ctx = context();
    let error = query_err(
        &ctx,
        "SELECT * FROM postgres_scan('host', 'public', 'orders')",
    )
    .await;
    assert!(
        error.contains("invalid PostgreSQL connection string"),
        "{error}"
    );

    let nowhere = format!(
        "host={} port=1 user=postgres dbname=shop",
        pg.dir().display()
    );
    let error = query_err(
        &ctx,
        &format!(
            "SELECT * FROM postgres_scan({}, 'public', 'orders')",
            lit(&nowhere)
        ),
    )
    .await;
    assert!(error.contains("cannot connect to PostgreSQL"), "{error}");

    let bad_login = format!(
        "host={} port={} user=secret_user password=wrong-hunter dbname=shop",
        pg.dir().display(),
        pg.port
    );
    let error = query_err(
        &ctx,
        &format!(
            "SELECT * FROM postgres_scan({}, 'public', 'orders')",
            lit(&bad_login)
        ),
    )
    .await;
    assert!(error.contains("password authentication failed"), "{error}");
    assert!(
        !error.contains("wrong-hunter"),
        "the password leaked: {error}"
    );

    let dsn = lit(&pg.dsn("shop"));
    let error = query_err(
        &ctx,
        &format!("SELECT * FROM postgres_scan({dsn}, 'public', 'nope')"),
    )
    .await;
    assert!(
        error.contains("table \"public\".\"nope\" does not exist"),
        "{error}"
    );
    let error = query_err(
        &ctx,
        &format!("SELECT * FROM postgres_scan({dsn}, 'nope', 'orders')"),
    )
    .await;
    assert!(error.contains("schema \"nope\" does not exist"), "{error}");
    let error = query_err(
        &ctx,
        &format!("SELECT * FROM postgres_query({dsn}, 'SELECT * FROM missing_table')"),
    )
    .await;
    assert!(error.contains("missing_table"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_password_file_supplies_the_password() {
    use std::os::unix::fs::PermissionsExt;
    let pg = require_cluster!();
    let ctx = context();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgpass");
    // `secret_user` needs a password (scram-sha-256); the socket directory is matched by path.
    let socket = pg.dir().display().to_string().replace(':', "\\:");
    std::fs::write(
        &path,
        format!(
            "# quiver test\n*:*:other:*:wrong\n{socket}:{}:shop:secret_user:hunter2-secret\n",
            pg.port
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dsn = format!(
        "host={} port={} user=secret_user dbname=shop passfile='{}'",
        pg.dir().display(),
        pg.port,
        path.display()
    );
    // The role may log in but read no table: a query of its own shows the login worked.
    let answer = |dsn: &str| {
        format!(
            "SELECT * FROM postgres_query({}, 'SELECT 42::int8 AS answer')",
            lit(dsn)
        )
    };
    let sql = answer(&dsn);
    assert_eq!(single_i64(&query(&ctx, &sql).await, 0), 42);

    // With several hosts, each host's own entry: the first host refuses connections (nothing
    // listens on port 1) and has a wrong password on file; the second's is the right one.
    std::fs::write(
        &path,
        format!(
            "localhost:1:shop:secret_user:wrong\nlocalhost:{0}:shop:secret_user:hunter2-secret\n\
             {socket}:{0}:shop:secret_user:hunter2-secret\n",
            pg.port
        ),
    )
    .unwrap();
    if pg.tls.is_some() {
        let dsn = format!(
            "host=localhost,localhost port=1,{} user=secret_user dbname=shop passfile='{}'",
            pg.port,
            path.display()
        );
        assert_eq!(single_i64(&query(&ctx, &answer(&dsn)).await, 0), 42);
    }

    // libpq ignores a password file its group or others may read; so does quiver.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = query_err(&ctx, &sql).await;
    assert!(error.contains("password"), "{error}");
    assert!(!error.contains("hunter2"), "the password leaked: {error}");
}

/// Over TCP the cluster accepts only TLS, from `localhost`'s certificate signed by the test CA
/// (see `common/mod.rs`). Each connection reports whether it is encrypted, and who it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_follows_sslmode_and_its_files_as_libpq_does() {
    let pg = require_cluster!();
    let Some(tls) = pg.tls.clone() else {
        return;
    };
    let ctx = context();
    let file = |name: &str| tls.join(name).display().to_string();
    let tcp = |host: &str, options: &str| {
        format!(
            "host={host} port={} user=postgres dbname=shop {options}",
            pg.port
        )
    };
    let whoami = |dsn: &str| {
        format!(
            "SELECT * FROM postgres_query({}, 'SELECT ssl::text || '' '' || current_user AS who \
             FROM pg_stat_ssl WHERE pid = pg_backend_pid()')",
            lit(dsn)
        )
    };
    let who =
        |batches: Vec<RecordBatch>| batches[0].column(0).as_string::<i32>().value(0).to_string();
    let root = format!("sslrootcert='{}'", file("ca.crt"));
    let other_root = format!("sslrootcert='{}'", file("other_ca.crt"));

    // A directory of revocation lists (sslcrldir): the test CA's list naming the server.
    let crls = tempfile::tempdir().unwrap();
    std::fs::copy(tls.join("revoked.crl"), crls.path().join("revoked.crl")).unwrap();
    let crl_dir = crls.path();

    // Connections that work: TLS whenever TCP is used, never over the Unix socket.
    for options in [
        String::new(), // prefer
        "sslmode=allow".into(),
        "sslmode=require".into(),
        format!("sslmode=verify-ca {root}"),
        format!("sslmode=verify-full {root}"),
        // A current list from the issuer that revokes nothing.
        format!("sslmode=verify-full {root} sslcrl='{}'", file("empty.crl")),
        // A mode that checks no certificate ignores the lists, as libpq's does.
        format!("sslmode=require sslcrl='{}'", file("revoked.crl")),
    ] {
        let dsn = tcp("localhost", &options);
        assert_eq!(
            who(query(&ctx, &whoami(&dsn)).await),
            "true postgres",
            "{options}"
        );
    }
    // verify-ca checks the chain only: 127.0.0.1 is not a name on the certificate.
    let dsn = tcp("127.0.0.1", &format!("sslmode=verify-ca {root}"));
    assert_eq!(who(query(&ctx, &whoami(&dsn)).await), "true postgres");
    let dsn = format!("{} sslmode=require", pg.dsn("shop"));
    assert_eq!(who(query(&ctx, &whoami(&dsn)).await), "false postgres");

    // Connections that must fail, each saying why.
    for (host, options, expected) in [
        ("localhost", "sslmode=disable".to_string(), "no encryption"),
        (
            "127.0.0.1",
            format!("sslmode=verify-full {root}"),
            "not valid for name",
        ),
        (
            "localhost",
            format!("sslmode=verify-ca {other_root}"),
            "UnknownIssuer",
        ),
        // prefer: the handshake fails on an untrusted certificate, and the plain retry is refused.
        ("localhost", other_root.clone(), "no encryption"),
        (
            "localhost",
            "sslmode=verify-full sslrootcert=/nonexistent/root.crt".into(),
            "does not exist",
        ),
        ("localhost", "sslmode=sometimes".into(), "is not one of"),
        // Revocation: a list naming the server's certificate, a chain with no list from its
        // issuer (libpq's OpenSSL flags check the whole chain), and a list that is not there.
        (
            "localhost",
            format!(
                "sslmode=verify-full {root} sslcrl='{}'",
                file("revoked.crl")
            ),
            "Revoked",
        ),
        (
            "localhost",
            format!("sslmode=verify-ca {root} sslcrldir='{}'", crl_dir.display()),
            "Revoked",
        ),
        (
            "localhost",
            format!(
                "sslmode=verify-full {root} sslcrl='{}'",
                file("other_ca.crl")
            ),
            "UnknownRevocationStatus",
        ),
        (
            "localhost",
            format!("sslmode=verify-full {root} sslcrl=/nonexistent/root.crl"),
            "revocation list file \"/nonexistent/root.crl\"",
        ),
        (
            "localhost",
            format!("sslmode=verify-full {root} sslcrl='{}'", file("ca.crt")),
            "holds no PEM certificate revocation list",
        ),
    ] {
        let error = query_err(&ctx, &whoami(&tcp(host, &options))).await;
        assert!(error.contains(expected), "{host} {options}: {error}");
    }

    // A password login (SCRAM, binding the channel when it can) and a client-certificate login.
    let dsn = format!(
        "host=localhost port={} user=secret_user password=hunter2-secret dbname=shop",
        pg.port
    );
    assert_eq!(who(query(&ctx, &whoami(&dsn)).await), "true secret_user");
    // channel_binding=require logs in only through SCRAM-SHA-256-PLUS, whose proof the server
    // checks against the hash of its own certificate: a wrong hash is refused.
    for binding in ["require", "disable"] {
        let bound = format!("{dsn} channel_binding={binding}");
        assert_eq!(who(query(&ctx, &whoami(&bound)).await), "true secret_user");
    }
    // No TLS on the Unix socket, so no binding.
    let unbound = format!("{} channel_binding=require", pg.dsn("shop"));
    let error = query_err(&ctx, &whoami(&unbound)).await;
    assert!(error.contains("without channel binding"), "{error}");
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("client.key");
    std::fs::copy(tls.join("client.key"), &key).unwrap();
    let certificate = |user: &str| {
        format!(
            "host=localhost port={} user={user} dbname=shop sslmode=verify-full {root} \
             sslcert='{}' sslkey='{}'",
            pg.port,
            file("client.crt"),
            key.display()
        )
    };
    assert_eq!(
        who(query(&ctx, &whoami(&certificate("cert_user"))).await),
        "true cert_user"
    );
    let error = query_err(&ctx, &whoami(&tcp("localhost", "user=cert_user"))).await;
    assert!(error.contains("certificate"), "{error}");
    // Encrypted copies of the key, with sslpassword. No message shows the password.
    let password = common::CLIENT_KEY_PASSWORD;
    for (name, given, expected) in [
        ("client_pbkdf2.key", Some(password), None),
        ("client_scrypt.key", Some(password), None),
        (
            "client_pbkdf2.key",
            None,
            Some("the key is encrypted; give its password with sslpassword"),
        ),
        (
            "client_pbkdf2.key",
            Some("wrong-pass"),
            Some("could not decrypt the key"),
        ),
        (
            "client_legacy.key",
            Some(password),
            Some("OpenSSL's legacy format"),
        ),
    ] {
        let encrypted = keys.path().join(name);
        std::fs::copy(tls.join(name), &encrypted).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&encrypted, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let dsn = format!(
            "host=localhost port={} user=cert_user dbname=shop sslmode=verify-full {root} \
             sslcert='{}' sslkey='{}'{}",
            pg.port,
            file("client.crt"),
            encrypted.display(),
            given
                .map(|p| format!(" sslpassword='{p}'"))
                .unwrap_or_default()
        );
        match expected {
            None => assert_eq!(who(query(&ctx, &whoami(&dsn)).await), "true cert_user"),
            Some(expected) => {
                let error = query_err(&ctx, &whoami(&dsn)).await;
                assert!(error.contains(expected), "{name} {given:?}: {error}");
                assert!(
                    !error.contains(password) && !error.contains("wrong-pass"),
                    "{error}"
                );
            }
        }
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let error = query_err(&ctx, &whoami(&certificate("cert_user"))).await;
    assert!(error.contains("group or world access"), "{error}");

    // A parallel scan over TLS reads what the Unix socket reads: COPY data is taken off above
    // the TLS layer.
    let scan = |dsn: &str| {
        format!(
            "SELECT count(*), sum(length(payload)) FROM postgres_scan({}, 'public', 'wide', \
             named_struct('connections', 2), named_struct('pages_per_task', 500))",
            lit(dsn)
        )
    };
    let over_tls = count_and_sum(&query(&ctx, &scan(&tcp("localhost", "sslmode=require"))).await);
    let over_socket = count_and_sum(&query(&ctx, &scan(&pg.dsn("shop"))).await);
    assert_eq!(over_tls, over_socket);
    assert_eq!(over_tls, "100000|64000000");
}

/// A TCP proxy to the cluster's port that records the first eight bytes each client sends: the
/// length and code of its first message (an `SSLRequest`, a startup or a `CancelRequest`).
async fn recording_proxy(port: u16) -> (u16, Arc<std::sync::Mutex<Vec<[u8; 8]>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut first = [0u8; 8];
                if client.read_exact(&mut first).await.is_err() {
                    return;
                }
                record.lock().unwrap().push(first);
                let mut server = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                if server.write_all(&first).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (proxy_port, seen)
}

/// A cancel request to a server logged in to over TLS goes over TLS too: it carries the key
/// that lets anyone who sees it cancel the session's queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_request_is_encrypted_as_its_connection_is() {
    const SSL_REQUEST: u32 = 80877103;
    const CANCEL_REQUEST: u32 = 80877102;
    let pg = require_cluster!();
    if pg.tls.is_none() {
        return;
    }
    let (port, seen) = recording_proxy(pg.port).await;
    let app = "quiver_tls_cancel_test";
    let dsn = format!(
        "host=127.0.0.1 port={port} user=postgres dbname=shop sslmode=require \
         application_name={app}"
    );
    let ctx = context();
    let sql = format!(
        "SELECT * FROM postgres_scan({}, 'public', 'wide', named_struct('connections', 1), \
         named_struct('pages_per_task', 1000000))",
        lit(&dsn)
    );
    let (stream, _) = streams::first_batch(&ctx, &sql).await;
    let logins = seen.lock().unwrap().len();
    let copying = format!(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE application_name = '{app}' AND query LIKE 'COPY%' AND state = 'active'"
    );
    assert_eq!(
        pg.psql("shop", &copying),
        "1",
        "the COPY runs while the scan is read"
    );
    drop(stream);
    streams::wait_until(5, || {
        seen.lock().unwrap().len() > logins && pg.psql("shop", &copying) == "0"
    })
    .await;
    assert_eq!(
        pg.psql("shop", &copying),
        "0",
        "the server-side COPY was not cancelled"
    );
    let codes: Vec<u32> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|first| u32::from_be_bytes([first[4], first[5], first[6], first[7]]))
        .collect();
    assert!(
        codes.len() > logins,
        "no cancel request was sent: {codes:?}"
    );
    assert!(
        !codes.contains(&CANCEL_REQUEST),
        "a cancel request went in the clear: {codes:?}"
    );
    assert!(codes.iter().all(|&code| code == SSL_REQUEST), "{codes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_backend_is_an_error_not_a_short_result() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = format!("{} application_name=quiver_terminate_test", pg.dsn("shop"));
    let sql = format!(
        "SELECT * FROM postgres_scan({}, 'public', 'wide', named_struct('connections', 1), named_struct('pages_per_task', 1000000))",
        lit(&dsn)
    );
    let (mut stream, first) = streams::first_batch(&ctx, &sql).await;
    assert!(first.num_rows() > 0);
    let killed = pg.psql(
        "shop",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'quiver_terminate_test' AND query LIKE 'COPY%'",
    );
    assert_eq!(killed, "1");
    let (more, error) = streams::read_to_error(&mut stream).await;
    let rows = first.num_rows() + more;
    assert!(rows < 100_000, "all rows arrived before the termination");
    assert!(
        error.contains("terminating connection")
            || error.contains("closed")
            || error.contains("end-of-data"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_scans_see_one_snapshot_under_concurrent_writes() {
    let pg = require_cluster!();
    let ctx = context();
    let (client, connection) = tokio_postgres::connect(&pg.dsn("shop"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut round: u64 = 0;
            let mut commits = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let k = (round * 7919) % 19_000;
                // Each transaction keeps count(*) and sum(balance) unchanged, while moving
                // row versions to other pages (and so across ctid ranges).
                let sql = format!(
                    "BEGIN; \
                     UPDATE accounts SET balance = balance + CASE WHEN id % 2 = 0 THEN 3 ELSE -3 END \
                       WHERE id >= (SELECT min(id) FROM accounts) + {k} \
                         AND id < (SELECT min(id) FROM accounts) + {k} + 200; \
                     WITH gone AS (DELETE FROM accounts WHERE id = (SELECT min(id) FROM accounts) RETURNING balance) \
                       INSERT INTO accounts SELECT nextval('accounts_next'), balance FROM gone; \
                     COMMIT;"
                );
                client.batch_execute(&sql).await.unwrap();
                commits += 1;
            }
            commits
        })
    };
    let sql = format!(
        "SELECT count(*), sum(balance) FROM postgres_scan({}, 'public', 'accounts', \
         named_struct('pages_per_task', 4), named_struct('connections', 4))",
        lit(&pg.dsn("shop"))
    );
    for run in 0..25 {
        let batches = query(&ctx, &sql).await;
        assert_eq!(single_i64(&batches, 0), 20_000, "count in run {run}");
        assert_eq!(single_i64(&batches, 1), 2_000_000, "sum in run {run}");
    }
    stop.store(true, Ordering::Relaxed);
    let commits = writer.await.unwrap();
    assert!(commits > 0, "the writer never committed while scans ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_a_scan_cancels_the_server_side_copy() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = format!("{} application_name=quiver_cancel_test", pg.dsn("shop"));
    let sql = format!(
        "SELECT * FROM postgres_scan({}, 'public', 'wide', named_struct('connections', 1), named_struct('pages_per_task', 1000000))",
        lit(&dsn)
    );
    let (stream, _) = streams::first_batch(&ctx, &sql).await;
    let copying = "SELECT count(*) FROM pg_stat_activity \
                   WHERE application_name = 'quiver_cancel_test' AND query LIKE 'COPY%' AND state = 'active'";
    assert_eq!(
        pg.psql("shop", copying),
        "1",
        "the COPY runs while the scan is read"
    );
    // What Ctrl-C does: the consumer drops the stream.
    drop(stream);
    streams::wait_until(10, || pg.psql("shop", copying) == "0").await;
    assert_eq!(
        pg.psql("shop", copying),
        "0",
        "the server-side COPY was not cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attached_tables_are_described_on_kept_connections() {
    use datafusion::catalog::CatalogProvider;
    use quiver_postgres::{attach, AttachOptions};

    let pg = require_cluster!();
    let app = "quiver_describe_test";
    let dsn = format!("{} application_name={app}", pg.dsn("shop"));
    let catalog = attach(&dsn, AttachOptions::default()).await.unwrap();
    let attached = idle_backends(pg, app).await;
    assert!(
        !attached.is_empty() && !attached.contains(','),
        "ATTACH should keep one connection, not \"{attached}\""
    );
    let schema = catalog.schema("public").unwrap();
    assert!(schema.table("orders").await.unwrap().is_some());
    assert!(schema.table("accounts").await.unwrap().is_some());
    assert_eq!(
        idle_backends(pg, app).await,
        attached,
        "describing a table logged in again instead of using ATTACH's connection"
    );
    // The server closes the kept connection (an idle timeout, a restart): the next lookup
    // connects again instead of failing.
    pg.psql(
        "shop",
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{app}'"
        ),
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let measurements = schema.table("measurements").await.unwrap();
    assert!(measurements.is_some());
    assert!(schema.table("no_such_table").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_tables_are_described_in_one_statement_as_one_by_one() {
    use quiver_postgres::catalog::{describe_relation, describe_relations};

    let pg = require_cluster!();
    pg.psql(
        "shop",
        "DROP SCHEMA IF EXISTS described CASCADE; CREATE SCHEMA described; \
         CREATE TABLE described.no_columns (); \
         CREATE TABLE described.plain (id int, label text, amount numeric(10, 2)); \
         INSERT INTO described.plain SELECT g, 'l' || (g % 7), g FROM generate_series(1, 500) g; \
         CREATE TABLE described.split (id int, region text) PARTITION BY LIST (region); \
         CREATE TABLE described.split_a PARTITION OF described.split FOR VALUES IN ('a'); \
         CREATE TABLE described.split_b PARTITION OF described.split DEFAULT; \
         INSERT INTO described.split SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END \
         FROM generate_series(1, 400) g; \
         ALTER TABLE described.plain DROP COLUMN label; \
         ALTER TABLE described.plain ADD COLUMN tag text; \
         ANALYZE described.plain; ANALYZE described.split; \
         CREATE VIEW described.v AS SELECT id FROM described.plain;",
    );
    let client = quiver_postgres::ConnectTarget::parse(&pg.dsn("shop"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let wanted = ["v", "split", "missing", "no_columns", "plain", "split_a"];
    let many = describe_relations(&client, "described", &wanted)
        .await
        .unwrap();
    let names: Vec<&str> = many.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["no_columns", "plain", "split", "split_a", "v"]);
    for relation in &many {
        let one = describe_relation(&client, "described", &relation.name)
            .await
            .unwrap();
        assert_eq!(format!("{relation:?}"), format!("{one:?}"));
    }
    let by_name = |name: &str| many.iter().find(|r| r.name == name).unwrap();
    assert!(by_name("no_columns").columns.is_empty());
    // The dropped column is gone; the one added after it keeps its place.
    let plain: Vec<&str> = by_name("plain")
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(plain, ["id", "amount", "tag"]);
    // Statistics: the table's own, the partitioned table's of the whole tree.
    let estimates = &by_name("plain").estimates;
    assert_eq!(estimates[0].n_distinct, Some(-1.0));
    assert_eq!(estimates[2].null_frac, Some(1.0));
    let split = &by_name("split").estimates;
    assert_eq!(split[0].n_distinct, Some(-1.0));
    assert_eq!(split[1].n_distinct, Some(2.0));
    assert!(by_name("v")
        .estimates
        .iter()
        .all(|e| e.n_distinct.is_none()));
    assert!(describe_relations(&client, "no_such_schema", &["plain"])
        .await
        .unwrap()
        .is_empty());
    pg.psql("shop", "DROP SCHEMA described CASCADE");
}

/// Polls until the backends named `app` all idle outside a transaction (no snapshot held back
/// from vacuum), and returns their process ids, sorted.
async fn idle_backends(pg: &common::PgCluster, app: &str) -> String {
    let busy = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' \
         AND (state <> 'idle' OR backend_xmin IS NOT NULL)"
    );
    streams::wait_until(5, || pg.psql("shop", &busy) == "0").await;
    assert_eq!(
        pg.psql("shop", &busy),
        "0",
        "a kept connection is still in a transaction"
    );
    // The rollback is seen by the server a moment before the connection is kept.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    pg.psql(
        "shop",
        &format!(
            "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity \
             WHERE application_name = '{app}'"
        ),
    )
}

/// Runs `sql` (the count and sum of `orders` ids 1..=100) `rounds` times after a first run,
/// and checks that every later run used exactly the backends the first one left idle: none
/// logged in again, none was left inside a transaction. Returns those backends' pids.
async fn assert_connections_kept(
    ctx: &SessionContext,
    pg: &common::PgCluster,
    app: &str,
    sql: &str,
    rounds: usize,
) -> String {
    check_first_hundred(&query(ctx, sql).await);
    let first = idle_backends(pg, app).await;
    assert!(!first.is_empty(), "no connection was kept");
    for _ in 0..rounds {
        check_first_hundred(&query(ctx, sql).await);
        assert_eq!(
            idle_backends(pg, app).await,
            first,
            "a later query logged in again instead of reusing the kept connections"
        );
    }
    first
}

fn check_first_hundred(batches: &[RecordBatch]) {
    assert_eq!(single_i64(batches, 0), 100);
    assert_eq!(single_i64(batches, 1), 5050);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_of_an_attached_database_reuse_its_connections() {
    use quiver_postgres::{attach, AttachOptions};

    let pg = require_cluster!();
    let app = "quiver_reuse_test";
    let dsn = format!("{} application_name={app}", pg.dsn("shop"));
    let ctx = context();
    let catalog = attach(&dsn, AttachOptions::default()).await.unwrap();
    ctx.register_catalog("shop", catalog);
    let sql = "SELECT count(*), sum(id) FROM shop.public.orders WHERE id <= 100";
    // Every connection of the attached database, ATTACH's own included, is kept by the
    // target between queries; were none kept, none would be left.
    assert_connections_kept(&ctx, pg, app, sql, 5).await;
    // The server ends the kept sessions (a restart, an idle timeout): the next query connects
    // again instead of failing.
    pg.psql(
        "shop",
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{app}'"
        ),
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    check_first_hundred(&query(&ctx, sql).await);
    check_first_hundred(&query(&ctx, sql).await);
}

fn function_reuse_query(pg: &common::PgCluster, app: &str) -> String {
    let dsn = lit(&format!("{} application_name={app}", pg.dsn("shop")));
    format!(
        "SELECT count(*), sum(id) FROM postgres_scan_pushdown({dsn}, 'public', 'orders') \
         WHERE id <= 100"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scan_functions_reuse_connections_across_queries() {
    let pg = require_cluster!();
    let app = "quiver_function_reuse_test";
    let sql = function_reuse_query(pg, app);
    assert_connections_kept(&context(), pg, app, &sql, 3).await;
}

/// A kept connection outlives the runtime of the query that opened it (each Python call, each
/// test, a CLI statement may run on a runtime of its own): a socket opened on that runtime
/// would break when it ends, and the next query would log in again — or, had it already taken
/// the connection, fail with "connection closed".
#[test]
fn kept_connections_outlive_the_runtime_that_opened_them() {
    let pg = require_cluster!();
    let app = "quiver_runtime_reuse_test";
    let sql = function_reuse_query(pg, app);
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime().block_on(assert_connections_kept(&context(), pg, app, &sql, 1));
    // The first runtime has ended (dropped above); give a broken socket time to be noticed.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let later = runtime().block_on(assert_connections_kept(&context(), pg, app, &sql, 1));
    assert_eq!(
        later, first,
        "the connections kept by a query on an ended runtime were lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_runs_on_a_thread_of_its_own_that_ends_with_it() {
    let pg = require_cluster!();
    let target = quiver_postgres::ConnectTarget::parse(&pg.dsn("shop")).unwrap();
    let first = target.connect().await.unwrap();
    let second = target.connect().await.unwrap();
    let thread_of = |home: &tokio::runtime::Handle| {
        home.spawn(async {
            let thread = std::thread::current();
            (thread.id(), thread.name().map(str::to_string))
        })
    };
    let (first_thread, first_name) = thread_of(first.home()).await.unwrap();
    let (second_thread, _) = thread_of(second.home()).await.unwrap();
    assert_ne!(first_thread, second_thread);
    assert_ne!(first_thread, std::thread::current().id());
    assert_eq!(first_name.as_deref(), Some("quiver-postgres"));
    // The connection works from any thread: its client talks to its own thread.
    let one: i32 = first.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);

    // Dropping the connection ends its thread: its runtime then takes no more work.
    let home = first.home().clone();
    drop(first);
    let mut ended = false;
    for _ in 0..100 {
        if thread_of(&home).await.is_err() {
            ended = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ended, "the dropped connection's thread still runs");
    let two: i32 = second.query_one("SELECT 2", &[]).await.unwrap().get(0);
    assert_eq!(two, 2);
}

/// Runs `sql` the way a quiver session does: joins the server's planner expects to win are
/// pushed into Postgres before DataFusion optimizes.
async fn query_pushed(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    let plan = ctx.state().create_logical_plan(sql).await.unwrap();
    let plan = quiver_postgres::pushdown::push_joins(plan).await.unwrap();
    collect(ctx.execute_logical_plan(plan).await, sql).await
}

async fn explain_pushed(ctx: &SessionContext, sql: &str) -> String {
    pretty(&query_pushed(ctx, &format!("EXPLAIN {sql}")).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_the_server_plans_better_run_in_postgres() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    let scan = |table: &str, function: &str| format!("{function}({dsn}, 'public', '{table}')");
    // Three rows against 50,000: Postgres probes the primary key; quiver would read `orders`.
    let join = |function: &str| {
        format!(
            "SELECT w.id, w.\"sel;ect\", o.total, o.created, o.note \
             FROM {} w JOIN {} o ON o.id = w.id \
             WHERE w.\"sel;ect\" <> '''); DROP TABLE t; --' ORDER BY w.id",
            scan("we\"ird", function),
            scan("orders", function)
        )
    };
    let pushed = join("postgres_scan_pushdown");
    let plan = explain_pushed(&ctx, &pushed).await;
    assert!(
        plan.contains("query joining \"public\".\"we\"\"ird\", \"public\".\"orders\""),
        "{plan}"
    );
    assert_eq!(plan.matches("PostgresScanExec").count(), 1, "{plan}");
    let batches = query_pushed(&ctx, &pushed).await;
    assert_eq!(
        pretty(&batches),
        pretty(&query(&ctx, &pushed).await),
        "pushed and read by quiver alike"
    );
    let expected = pg.psql(
        "shop",
        "SELECT w.id || '|' || w.\"sel;ect\" || '|' || o.total || '|' || o.created || '|' || o.note \
         FROM \"we\"\"ird\" w JOIN orders o ON o.id = w.id \
         WHERE w.\"sel;ect\" <> '''); DROP TABLE t; --' ORDER BY w.id",
    );
    assert_eq!(expected, "2|plain|0.20|2024-01-03|order 2");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    assert_eq!(batches[0].column(0).as_primitive::<Int32Type>().value(0), 2);
    assert_eq!(
        batches[0].column(2).data_type(),
        &DataType::Decimal128(12, 2)
    );
    assert_eq!(pg.psql("shop", "SELECT x FROM t"), "42", "table t survived");

    // Aggregates come back with quiver's types and values: sum, avg and min/max of strings
    // (the test cluster's collation is C, so string ordering may be pushed).
    let aggregate = |function: &str| {
        format!(
            "SELECT w.\"MixedCase\" AS k, count(*) AS n, sum(o.total) AS s, avg(o.total) AS a, \
             min(o.created) AS first, max(o.note) AS last \
             FROM {} w JOIN {} o ON o.id = w.id GROUP BY w.\"MixedCase\" ORDER BY k",
            scan("we\"ird", function),
            scan("orders", function)
        )
    };
    let pushed = aggregate("postgres_scan_pushdown");
    assert!(explain_pushed(&ctx, &pushed)
        .await
        .contains("query joining"));
    let batches = query_pushed(&ctx, &pushed).await;
    let local = query(&ctx, &pushed).await;
    let types = |batches: &[RecordBatch]| {
        let schema = batches[0].schema();
        let fields = schema.fields().iter();
        fields
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
    };
    assert_eq!(types(&batches), types(&local));
    assert_eq!(pretty(&batches), pretty(&local));

    // postgres_scan (no pushdown) keeps the join in quiver, with the same answer.
    let kept = join("postgres_scan");
    let plan = explain_pushed(&ctx, &kept).await;
    assert!(!plan.contains("query joining"), "{plan}");
    assert_eq!(
        pretty(&query_pushed(&ctx, &kept).await),
        pretty(&query(&ctx, &join("postgres_scan_pushdown")).await)
    );

    // Only the Postgres part of a query with local rows is pushed.
    let mixed = format!(
        "SELECT v.k, x.total FROM (VALUES (2), (3)) AS v(k) \
         JOIN (SELECT w.id, o.total FROM {} w JOIN {} o ON o.id = w.id) x ON x.id = v.k ORDER BY v.k",
        scan("we\"ird", "postgres_scan_pushdown"),
        scan("orders", "postgres_scan_pushdown")
    );
    let plan = explain_pushed(&ctx, &mixed).await;
    assert!(plan.contains("query joining"), "{plan}");
    // The pushed scan carries the server planner's row estimate, for DataFusion's joins.
    ctx.sql("SET datafusion.explain.show_statistics = true")
        .await
        .unwrap();
    let plan = explain_pushed(&ctx, &mixed).await;
    let scan = plan
        .lines()
        .find(|line| line.contains("PostgresScanExec"))
        .unwrap();
    assert!(scan.contains("Rows=Inexact(3)"), "{plan}");
    ctx.sql("SET datafusion.explain.show_statistics = false")
        .await
        .unwrap();
    assert_eq!(
        pretty(&query_pushed(&ctx, &mixed).await),
        pretty(&query(&ctx, &mixed).await)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_the_server_plans_worse_stay_in_quiver() {
    let pg = require_cluster!();
    let ctx = context();
    let dsn = lit(&pg.dsn("shop"));
    // A join of two whole tables costs Postgres more than reading them: it stays.
    let sql = format!(
        "SELECT count(*), sum(o.id) FROM postgres_scan_pushdown({dsn}, 'public', 'orders') o \
         JOIN postgres_scan_pushdown({dsn}, 'public', 'measurements') m ON m.id = o.id"
    );
    let plan = explain_pushed(&ctx, &sql).await;
    assert!(!plan.contains("query joining"), "{plan}");
    assert_eq!(plan.matches("PostgresScanExec").count(), 2, "{plan}");
    assert_eq!(
        count_and_sum(&query_pushed(&ctx, &sql).await),
        pg.psql(
            "shop",
            "SELECT count(*) || '|' || sum(o.id) FROM orders o JOIN measurements m ON m.id = o.id"
        )
    );
}
