//! Property tests: [`RadixAggregateExec`] returns exactly what DataFusion's hash aggregation
//! returns — with keys few enough to stay in one table and many enough to switch to hash
//! buckets, integer, string and multi-column keys, NULL keys and values, FILTER clauses,
//! empty input — and the rule really chose it, so a silent fallback cannot make a test pass.
// Helpers outside #[test] functions may fail loudly too: this is test code.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryViewArray, BooleanArray, Float64Array, Int64Array, StringArray, StringViewArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use quiver_agg::radix::SWITCH_GROUPS;
use quiver_agg::RadixAggregateRule;
use quiver_functions::distinct_count::DistinctCount;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{find, plan_and_run, run};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
    ]))
}

/// `rows` random rows with keys in `0..keys`; `null_rate` of every column is NULL.
fn batch(rng: &mut StdRng, rows: usize, keys: i64, null_rate: f64) -> RecordBatch {
    let k: Int64Array = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_range(0..keys)))
        .collect();
    let s: StringArray = (0..rows)
        .map(|_| {
            (!rng.random_bool(null_rate)).then(|| format!("s{}", rng.random_range(0..keys / 3 + 1)))
        })
        .collect();
    let v: Int64Array = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_range(-1_000_000i64..1_000_000)))
        .collect();
    // Whole numbers, so sums are exact whatever the order of addition.
    let f: Float64Array = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_range(-1000i64..1000) as f64))
        .collect();
    let b: BooleanArray = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_bool(0.5)))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(k),
        Arc::new(s),
        Arc::new(v),
        Arc::new(f),
        Arc::new(b),
    ];
    RecordBatch::try_new(schema(), columns).expect("batch")
}

fn context(partitions: &[Vec<RecordBatch>], radix: bool, memory: Option<usize>) -> SessionContext {
    context_over(schema(), partitions, radix, memory)
}

/// A session, with the radix rule or without, whose table `t` is `partitions` of `schema`.
fn context_over(
    schema: Arc<Schema>,
    partitions: &[Vec<RecordBatch>],
    radix: bool,
    memory: Option<usize>,
) -> SessionContext {
    let mut builder = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(4))
        .with_default_features();
    if radix {
        builder = builder.with_physical_optimizer_rule(Arc::new(RadixAggregateRule));
    }
    if let Some(limit) = memory {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(limit, 1.0)
            .build_arc()
            .expect("runtime");
        builder = builder.with_runtime_env(runtime);
    }
    let ctx = SessionContext::new_with_state(builder.build());
    let table = MemTable::try_new(schema, partitions.to_vec()).expect("table");
    ctx.register_table("t", Arc::new(table)).expect("register");
    ctx
}

const AGGREGATES: &[&str] = &[
    "count(*) AS c",
    "count(*) AS c, count(v) AS cv, sum(v) AS sv, min(v) AS lo, max(v) AS hi, avg(f) AS a, \
     sum(f) FILTER (WHERE v > 0) AS sf, bool_or(b) AS any_b, min(s) AS first_s",
];

/// The last two pack their integer keys into one word (`packed_keys=64`) and two (`=128`).
const KEYS: &[&str] = &[
    "k",
    "s",
    "k, s",
    "k % 1000, b",
    "CAST(k AS INT), CAST(v % 7 AS SMALLINT)",
    "k, CAST(v % 100 AS TINYINT)",
];

async fn check(partitions: Vec<Vec<RecordBatch>>, what: &str) {
    let hash = context(&partitions, false, None);
    let radix = context(&partitions, true, None);
    for aggregates in AGGREGATES {
        for keys in KEYS {
            let sql = format!("SELECT {keys}, {aggregates} FROM t GROUP BY {keys} ORDER BY {keys}");
            let (expected, _) = run(&hash, &sql).await;
            let (actual, plan) = run(&radix, &sql).await;
            assert!(
                plan.contains("RadixAggregateExec"),
                "{what}: GROUP BY {keys} kept DataFusion's aggregation:\n{plan}"
            );
            assert_eq!(
                plan.contains("packed_keys="),
                keys.contains("CAST"),
                "{what}: GROUP BY {keys}:\n{plan}"
            );
            assert_eq!(
                plan.contains("string_table"),
                *keys == "s",
                "{what}: GROUP BY {keys}:\n{plan}"
            );
            assert_eq!(actual, expected, "{what}: GROUP BY {keys} differs\n{plan}");
        }
    }
    // DISTINCT without aggregates, and a HAVING over the result.
    for sql in [
        "SELECT DISTINCT k, s FROM t ORDER BY k, s",
        "SELECT k, count(*) AS c FROM t GROUP BY k HAVING count(*) > 2 ORDER BY k",
    ] {
        let (expected, _) = run(&hash, sql).await;
        let (actual, plan) = run(&radix, sql).await;
        assert!(
            plan.contains("RadixAggregateExec"),
            "{what}: {sql}:\n{plan}"
        );
        assert_eq!(actual, expected, "{what}: {sql} differs\n{plan}");
    }
}

fn partitions(seed: u64, per_partition: usize, keys: i64, null_rate: f64) -> Vec<Vec<RecordBatch>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..3)
        .map(|_| {
            (0..per_partition.div_ceil(8192))
                .map(|_| batch(&mut rng, 8192, keys, null_rate))
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn few_keys_stay_in_one_table_and_match() {
    check(partitions(1, 20_000, 50, 0.05), "few keys").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_switch_to_buckets_and_match() {
    // Every partition passes the switch point, so rows are partitioned and table states merged;
    // the integer and float columns are scattered with their NULLs.
    let keys = 4 * SWITCH_GROUPS as i64;
    check(partitions(2, 3 * SWITCH_GROUPS, keys, 0.05), "many keys").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_without_nulls_are_scattered_and_match() {
    // The integer and float columns are scattered into bucket order while the strings (Utf8)
    // and booleans are gathered; phase-2 tables are emptied between buckets.
    let keys = 4 * SWITCH_GROUPS as i64;
    check(
        partitions(4, 3 * SWITCH_GROUPS, keys, 0.0),
        "many keys, no NULLs",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_input_and_all_null_keys_match() {
    check(vec![vec![], vec![]], "empty").await;
    check(partitions(3, 8192, 10, 1.0), "all NULL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_too_small_for_the_buckets_fails_cleanly() {
    let keys = 4 * SWITCH_GROUPS as i64;
    let data = partitions(4, 3 * SWITCH_GROUPS, keys, 0.0);
    let ctx = context(&data, true, Some(64 * 1024));
    let error = ctx
        .sql("SELECT k, s, count(*) FROM t GROUP BY k, s")
        .await
        .expect("plan")
        .collect()
        .await
        .expect_err("a 64 KiB pool cannot hold the partitioned rows");
    assert!(
        error.to_string().contains("Resources exhausted"),
        "unexpected error: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_what_the_run_did() {
    // Every input partition passes the switch point.
    let keys = 4 * SWITCH_GROUPS as i64;
    let data = partitions(5, 3 * SWITCH_GROUPS, keys, 0.0);
    let input_rows: usize = data.iter().flatten().map(RecordBatch::num_rows).sum();
    let ctx = context(&data, true, None);
    let (plan, batches) = plan_and_run(&ctx, "SELECT k, count(*) FROM t GROUP BY k").await;
    let groups: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let radix = find(&plan, "RadixAggregateExec").expect("the radix operator");
    let metrics = radix.metrics().expect("metrics");
    let counter = |name: &str| metrics.sum_by_name(name).map(|v| v.as_usize());
    let inputs = radix.children()[0].output_partitioning().partition_count();
    assert_eq!(metrics.output_rows(), Some(groups));
    assert_eq!(counter("partitions_switched"), Some(inputs));
    // Raw rows after each switch, plus each table's groups: every group arrives at least once,
    // and no row twice.
    let bucketed = counter("rows_bucketed").expect("rows_bucketed");
    assert!(
        bucketed >= groups && bucketed <= input_rows,
        "{bucketed} rows bucketed for {groups} groups of {input_rows} rows"
    );
    assert!(counter("bucket_tasks").expect("bucket_tasks") >= 1);
    assert!(metrics.elapsed_compute().expect("elapsed_compute") > 0);
}

/// Three partitions of about `rows` rows each, of the one column `field`: batches of 8192
/// rows that `column` makes.
fn partitions_of(
    field: Field,
    rows: usize,
    mut column: impl FnMut(&mut StdRng) -> ArrayRef,
) -> (Arc<Schema>, Vec<Vec<RecordBatch>>) {
    let schema = Arc::new(Schema::new(vec![field]));
    let mut rng = StdRng::seed_from_u64(11);
    let partitions = (0..3)
        .map(|_| {
            (0..rows.div_ceil(8192))
                .map(|_| {
                    RecordBatch::try_new(Arc::clone(&schema), vec![column(&mut rng)])
                        .expect("batch")
                })
                .collect()
        })
        .collect();
    (schema, partitions)
}

/// One 40-byte string key drawn from `0..keys`.
fn long_keys(rows: usize, keys: u64) -> (Arc<Schema>, Vec<Vec<RecordBatch>>) {
    partitions_of(Field::new("u", DataType::Utf8, false), rows, |rng| {
        let u: StringArray = (0..8192)
            .map(|_| {
                Some(format!(
                    "https://example.com/{:020}",
                    rng.random_range(0..keys)
                ))
            })
            .collect();
        Arc::new(u)
    })
}

/// One key, `hot` of the rows the empty string (or 0), the others drawn from `0..keys` (as
/// strings of 1 to 6 digits, or integers).
fn skewed_keys(
    rows: usize,
    keys: u64,
    hot: f64,
    strings: bool,
) -> (Arc<Schema>, Vec<Vec<RecordBatch>>) {
    let data_type = if strings {
        DataType::Utf8
    } else {
        DataType::Int64
    };
    partitions_of(Field::new("u", data_type, false), rows, |rng| {
        let values: Vec<u64> = (0..8192)
            .map(|_| {
                if rng.random_bool(hot) {
                    0
                } else {
                    1 + rng.random_range(0..keys)
                }
            })
            .collect();
        if strings {
            let u: StringArray = values
                .iter()
                .map(|&v| Some(if v == 0 { String::new() } else { v.to_string() }))
                .collect();
            Arc::new(u)
        } else {
            Arc::new(Int64Array::from_iter_values(
                values.iter().map(|&v| v as i64),
            ))
        }
    })
}

/// Three partitions of about `rows` rows: `k` in `0..keys`, and `s` and `b` string and
/// binary views of `k`, a third of them short enough to be held in the view (12 bytes or
/// fewer), the others not; `null_rate` of `s` and `b` NULL.
fn view_keys(rows: usize, keys: i64, null_rate: f64) -> (Arc<Schema>, Vec<Vec<RecordBatch>>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8View, true),
        Field::new("b", DataType::BinaryView, true),
    ]));
    let mut rng = StdRng::seed_from_u64(12);
    let batch = |rng: &mut StdRng| {
        let k: Vec<i64> = (0..8192).map(|_| rng.random_range(0..keys)).collect();
        let s: StringViewArray = k
            .iter()
            .map(|&k| {
                let long = format!("https://example.com/\u{e9}t\u{e9}/{k:016}");
                (!rng.random_bool(null_rate)).then(|| if k % 3 == 0 { k.to_string() } else { long })
            })
            .collect();
        let b: BinaryViewArray = k
            .iter()
            .map(|&k| {
                let bytes = format!("{:x}", k * 7919).repeat(k as usize % 4 + 1);
                (!rng.random_bool(null_rate)).then(|| bytes.into_bytes())
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(k)), Arc::new(s), Arc::new(b)];
        RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch")
    };
    let partitions = (0..3)
        .map(|_| (0..rows.div_ceil(8192)).map(|_| batch(&mut rng)).collect())
        .collect();
    (schema, partitions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_keys_are_partitioned_with_their_bytes_and_match() {
    // The views are scattered with their bytes copied into bucket order, with their NULLs
    // and without; every partition switches, and the answers are DataFusion's.
    let keys = 4 * SWITCH_GROUPS as i64;
    for null_rate in [0.0, 0.05] {
        let (schema, data) = view_keys(3 * SWITCH_GROUPS, keys, null_rate);
        let hash = context_over(Arc::clone(&schema), &data, false, None);
        let radix = context_over(Arc::clone(&schema), &data, true, None);
        for sql in [
            "SELECT s, count(*) AS c, min(k) AS lo FROM t GROUP BY s ORDER BY s",
            "SELECT b, sum(k) AS total FROM t GROUP BY b ORDER BY b",
            "SELECT k % 100 AS m, s, b, count(*) AS c FROM t GROUP BY m, s, b ORDER BY m, s, b",
        ] {
            let (_, expected) = plan_and_run(&hash, sql).await;
            let (plan, actual) = plan_and_run(&radix, sql).await;
            let (switched, inputs) = switches(&plan);
            assert_eq!(switched, inputs, "{sql} (NULLs {null_rate})");
            assert_eq!(
                pretty_format_batches(&actual).expect("format").to_string(),
                pretty_format_batches(&expected)
                    .expect("format")
                    .to_string(),
                "{sql} (NULLs {null_rate})"
            );
        }
    }
}

/// How many input partitions of `GROUP BY u` over `partitions` switched to buckets, and how
/// many there were, after checking the result against DataFusion's.
async fn switched_partitions(
    schema: Arc<Schema>,
    partitions: &[Vec<RecordBatch>],
) -> (usize, usize) {
    let sql = "SELECT u, count(*) AS c FROM t GROUP BY u ORDER BY u";
    let mut results = Vec::new();
    let (mut switched, mut inputs) = (0, 0);
    for radix in [false, true] {
        let ctx = context_over(Arc::clone(&schema), partitions, radix, None);
        let (plan, batches) = plan_and_run(&ctx, sql).await;
        results.push(pretty_format_batches(&batches).expect("format").to_string());
        if radix {
            (switched, inputs) = switches(&plan);
        }
    }
    assert_eq!(results[0], results[1], "radix and hash aggregation differ");
    (switched, inputs)
}

/// How many input partitions of `plan`'s radix aggregation switched to buckets, and how many
/// there were.
fn switches(plan: &Arc<dyn ExecutionPlan>) -> (usize, usize) {
    let node = find(plan, "RadixAggregateExec").expect("the radix operator");
    let switched = (node.metrics().expect("metrics"))
        .sum_by_name("partitions_switched")
        .map_or(0, |v| v.as_usize());
    let inputs = node.children()[0].output_partitioning().partition_count();
    (switched, inputs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_keys_switch_only_when_the_table_does_not_halve_the_rows() {
    // Nearly every row a new key: the table reduces nothing, every partition switches.
    let rows = 3 * SWITCH_GROUPS;
    let (schema, data) = long_keys(rows, 100 * rows as u64);
    let (switched, inputs) = switched_partitions(schema, &data).await;
    assert_eq!(switched, inputs);
    // 1.1 x SWITCH_GROUPS keys, 147K-196K rows per input partition (3 or 4 of them): a table
    // passes SWITCH_GROUPS groups after ~87K rows (2.4 rows a key), and keeps halving them.
    let (schema, data) = long_keys(6 * SWITCH_GROUPS, SWITCH_GROUPS as u64 * 11 / 10);
    let (switched, inputs) = switched_partitions(schema, &data).await;
    assert!(inputs >= 3);
    assert_eq!(switched, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_string_keys_stay_while_the_table_reduces_the_rows_eightfold() {
    // 90% of the rows one key (ClickBench's empty SearchPhrase): a table passes SWITCH_GROUPS
    // groups after ~370K rows, 11 rows a group, and keeps reducing them more than 8 times.
    let (schema, data) = skewed_keys(600_000, 4 * SWITCH_GROUPS as u64, 0.9, true);
    let (switched_inputs, inputs) = switched_partitions(schema, &data).await;
    assert!(inputs >= 3);
    assert_eq!(switched_inputs, 0);
    // Half the rows one key: past SWITCH_GROUPS at ~2.3 rows a group, so it switches.
    let (schema, data) = skewed_keys(200_000, 4 * SWITCH_GROUPS as u64, 0.5, true);
    let (switched_inputs, inputs) = switched_partitions(schema, &data).await;
    assert_eq!(switched_inputs, inputs);
    // Integer keys are cheap to partition: they switch however much the table reduces them.
    let (schema, data) = skewed_keys(600_000, 4 * SWITCH_GROUPS as u64, 0.9, false);
    let (switched_inputs, inputs) = switched_partitions(schema, &data).await;
    assert_eq!(switched_inputs, inputs);
}

/// `GROUP BY g` over 100 groups, with `distinct_count(u)` (quiver's COUNT(DISTINCT)) beside a
/// count, against DataFusion's own `count(DISTINCT u)`; returns how many input partitions
/// switched to buckets and how many there were. `values`: `u` is drawn from `0..values`.
async fn distinct_count_switches(values: i64) -> (usize, usize) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("u", DataType::Int64, true),
    ]));
    let mut rng = StdRng::seed_from_u64(17);
    let data: Vec<Vec<RecordBatch>> = (0..3)
        .map(|_| {
            (0..(16 * SWITCH_GROUPS).div_ceil(8192))
                .map(|_| {
                    let g =
                        Int64Array::from_iter_values((0..8192).map(|_| rng.random_range(0..100)));
                    let u: Int64Array = (0..8192)
                        .map(|_| (!rng.random_bool(0.01)).then(|| rng.random_range(0..values)))
                        .collect();
                    RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(g), Arc::new(u)])
                        .expect("batch")
                })
                .collect()
        })
        .collect();
    let expected_sql =
        "SELECT g, count(DISTINCT u) AS d, count(*) AS c FROM t GROUP BY g ORDER BY g";
    let sql = "SELECT g, distinct_count(u) AS d, count(*) AS c FROM t GROUP BY g ORDER BY g";
    let hash = context_over(Arc::clone(&schema), &data, false, None);
    let (expected, _) = run(&hash, expected_sql).await;
    let radix = context_over(schema, &data, true, None);
    radix.register_udaf(AggregateUDF::from(DistinctCount::default()));
    let (plan, batches) = plan_and_run(&radix, sql).await;
    let actual = pretty_format_batches(&batches).expect("format").to_string();
    assert_eq!(actual, expected, "distinct counts differ");
    switches(&plan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_counts_of_few_groups_switch_once_their_sets_grow_large() {
    // Nearly every (g, u) pair distinct: 100 groups hold ~500K values per partition, a state
    // far past SWITCH_STATE_BYTES, so every partition switches (and phase 2 builds each set
    // once from raw rows).
    let (switched, inputs) = distinct_count_switches(1 << 40).await;
    assert!(inputs >= 3);
    assert_eq!(switched, inputs);
    // 50 values: 5,000 pairs at most, a small state; the partitions keep their tables.
    let (switched, inputs) = distinct_count_switches(50).await;
    assert!(inputs >= 3);
    assert_eq!(switched, 0);
}
