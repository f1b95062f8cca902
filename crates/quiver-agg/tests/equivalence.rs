//! Property tests: the small-key path returns exactly what DataFusion's hash aggregation
//! returns, on random data with NULLs, empty input, all-NULL keys, negative keys and the
//! largest domain. Each query runs on two sessions over the same tables — one with
//! [`SmallKeyAggregateRule`], one without — and the test also checks that the rule really
//! chose the small-key operator, so a silent fallback cannot make it pass.
// Helpers outside #[test] functions may fail loudly too: this is test code.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int16Array, Int64Array, Int8Array, UInt64Array,
    UInt8Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiver_agg::SmallKeyAggregateRule;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{find, plan_and_run, run};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k8", DataType::Int8, true),
        Field::new("ku8", DataType::UInt8, true),
        Field::new("k16", DataType::Int16, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("w", DataType::Int64, true),
        Field::new("u", DataType::UInt64, true),
    ]))
}

/// A batch of `rows` random rows; `null_rate` of every column is NULL. `all_null_keys` makes
/// every key column NULL; `full_i16` makes `k16` run through all 65,536 values.
fn batch(
    rng: &mut StdRng,
    rows: usize,
    null_rate: f64,
    all_null_keys: bool,
    full_i16: bool,
) -> RecordBatch {
    let maybe = |rng: &mut StdRng| !all_null_keys && !rng.random_bool(null_rate);
    let k8: Int8Array = (0..rows)
        .map(|_| maybe(rng).then(|| rng.random_range(-128i16..128) as i8))
        .collect();
    let ku8: UInt8Array = (0..rows)
        .map(|_| maybe(rng).then(|| rng.random_range(0u16..256) as u8))
        .collect();
    let k16: Int16Array = (0..rows)
        .map(|i| {
            if full_i16 {
                Some((i as i64 % 65_536 - 32_768) as i16)
            } else {
                maybe(rng).then(|| rng.random_range(-300i16..300))
            }
        })
        .collect();
    let b: BooleanArray = (0..rows)
        .map(|_| maybe(rng).then(|| rng.random_bool(0.5)))
        .collect();
    let v: Int64Array = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_range(-1_000_000i64..1_000_000)))
        .collect();
    // Whole numbers, so sums are exact whatever the order of addition.
    let f: Float64Array = (0..rows)
        .map(|_| (!rng.random_bool(null_rate)).then(|| rng.random_range(-1000i64..1000) as f64))
        .collect();
    // Dividends over the whole 64-bit ranges, extremes included, for the `%` keys.
    let w: Int64Array = (0..rows)
        .map(|i| match i % 16 {
            0 => Some(i64::MIN),
            1 => Some(i64::MAX),
            2 => Some(i64::MIN + 1),
            3 => None,
            _ => Some(rng.random()),
        })
        .collect();
    let u: UInt64Array = (0..rows)
        .map(|i| match i % 16 {
            0 => Some(u64::MAX),
            1 => Some(1 << 63),
            2 => None,
            _ => Some(rng.random()),
        })
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(k8),
        Arc::new(ku8),
        Arc::new(k16),
        Arc::new(b),
        Arc::new(v),
        Arc::new(f),
        Arc::new(w),
        Arc::new(u),
    ];
    RecordBatch::try_new(schema(), columns).expect("batch")
}

fn contexts(partitions: Vec<Vec<RecordBatch>>) -> (SessionContext, SessionContext) {
    let config = || SessionConfig::new().with_target_partitions(4);
    let hash = SessionContext::new_with_config(config());
    let state = SessionStateBuilder::new()
        .with_config(config())
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(SmallKeyAggregateRule::new()))
        .build();
    let small = SessionContext::new_with_state(state);
    for ctx in [&hash, &small] {
        let table = MemTable::try_new(schema(), partitions.clone()).expect("table");
        ctx.register_table("t", Arc::new(table)).expect("register");
    }
    (hash, small)
}

const AGGREGATES: &str = "count(*) AS c, count(v) AS cv, sum(v) AS s, min(v) AS lo, max(v) AS hi, \
     avg(f) AS a, sum(f) FILTER (WHERE v > 0) AS sf, bool_or(b) AS any_b";

/// Aggregates that all have direct kernels: the partial phase then numbers groups by slot and,
/// for one key without NULLs, runs the fused key loop (`count(*)` alone, the first sum or avg
/// in the loop, the rest after it).
const DIRECT_AGGREGATES: &[&str] = &[
    "count(*) AS c, count(v) AS cv, sum(v) AS s, sum(u) AS su, avg(f) AS a, sum(f) AS sf",
    "avg(f) AS a, count(*) AS c",
    "count(*) AS c",
    "sum(u) AS su",
];

/// (GROUP BY keys, whether the small-key path must be chosen).
const KEYS: &[(&str, bool)] = &[
    ("k8", true),
    ("ku8", true),
    ("k16", true),
    ("b", true),
    ("k8, b", true),
    ("ku8, b", true),
    ("v % 100", true),
    ("v % 7", true),
    ("v % -7", true),
    ("v % 64", true),
    ("w % 1000", true),
    ("w % -1000", true),
    ("w % 4096", true),
    ("u % 10000", true),
    ("u % 65536", true),
    ("u % 3, k8", true),
    ("v & 255", true),
    ("(v & 1023) - 512", true),
    ("CAST(k8 AS INT) + 1000", true),
    // Not provably small: hash path, still compared.
    ("v", false),
    ("k16, ku8", false),
];

async fn check_all(partitions: Vec<Vec<RecordBatch>>, what: &str) {
    let (hash, small) = contexts(partitions);
    let lists = std::iter::once(AGGREGATES).chain(DIRECT_AGGREGATES.iter().copied());
    for (aggregates, (keys, expect_small)) in lists.flat_map(|a| KEYS.iter().map(move |k| (a, k))) {
        let sql = format!("SELECT {keys}, {aggregates} FROM t GROUP BY {keys} ORDER BY {keys}");
        let (expected, hash_plan) = run(&hash, &sql).await;
        let (actual, small_plan) = run(&small, &sql).await;
        assert!(!hash_plan.contains("SmallKeyAggregateExec"));
        assert_eq!(
            small_plan.contains("SmallKeyAggregateExec"),
            *expect_small,
            "{what}: GROUP BY {keys} chose the wrong path:\n{small_plan}"
        );
        assert_eq!(
            actual, expected,
            "{what}: GROUP BY {keys} differs\n{small_plan}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_data_with_nulls_matches_hash_aggregation() {
    for seed in 0..3u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let partitions = (0..3)
            .map(|_| {
                (0..2)
                    .map(|_| batch(&mut rng, 3000, 0.1, false, false))
                    .collect()
            })
            .collect();
        check_all(partitions, &format!("seed {seed}")).await;
    }
}

/// Batches whose key has no NULL run the fused key loop of the direct kernels, the others the
/// general path; here both mix within one partition, with and without NULLs in the values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_without_null_keys_match_hash_aggregation() {
    let mut rng = StdRng::seed_from_u64(31);
    let mut partitions = Vec::new();
    for _ in 0..2 {
        let clean = batch(&mut rng, 2000, 0.0, false, false);
        let mixed = batch(&mut rng, 2000, 0.1, false, false);
        // NULL-free keys (k8, ku8, k16, b) over values with NULLs.
        let keys = batch(&mut rng, 2000, 0.0, false, false);
        let noisy = batch(&mut rng, 2000, 0.1, false, false);
        let mut columns = noisy.columns().to_vec();
        columns[..4].clone_from_slice(&keys.columns()[..4]);
        let clean_keys = RecordBatch::try_new(schema(), columns).expect("batch");
        partitions.push(vec![clean, mixed, clean_keys]);
    }
    check_all(partitions, "NULL-free keys").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_input_gives_no_groups() {
    check_all(vec![vec![], vec![]], "empty").await;
    let mut rng = StdRng::seed_from_u64(9);
    check_all(
        vec![vec![batch(&mut rng, 0, 0.0, false, false)]],
        "empty batch",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_null_keys_form_one_group() {
    let mut rng = StdRng::seed_from_u64(11);
    let partitions = vec![
        vec![batch(&mut rng, 500, 0.2, true, false)],
        vec![batch(&mut rng, 500, 0.2, true, false)],
    ];
    check_all(partitions, "all-NULL keys").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_int16_domain_matches() {
    let mut rng = StdRng::seed_from_u64(13);
    let partitions = vec![
        vec![batch(&mut rng, 70_000, 0.05, false, true)],
        vec![batch(&mut rng, 70_000, 0.05, false, true)],
    ];
    let (hash, small) = contexts(partitions);
    let sql = format!("SELECT k16, {AGGREGATES} FROM t GROUP BY k16 ORDER BY k16");
    let (expected, _) = run(&hash, &sql).await;
    let (actual, plan) = run(&small, &sql).await;
    assert!(plan.contains("SmallKeyAggregateExec"), "{plan}");
    assert!(plan.contains("slots=65537"), "{plan}");
    assert_eq!(actual, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_over_the_limit_keeps_hash_aggregation() {
    let mut rng = StdRng::seed_from_u64(17);
    let partitions = vec![vec![batch(&mut rng, 100, 0.0, false, false)]];
    let table = MemTable::try_new(schema(), partitions).expect("table");
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(SmallKeyAggregateRule::with_max_slots(255)))
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table)).expect("register");
    let (_, plan) = run(&ctx, "SELECT ku8, count(*) FROM t GROUP BY ku8").await;
    assert!(!plan.contains("SmallKeyAggregateExec"), "{plan}");
    let (_, plan) = run(&ctx, "SELECT v % 255, count(*) FROM t GROUP BY v % 255").await;
    assert!(!plan.contains("SmallKeyAggregateExec"), "{plan}");
    let (_, plan) = run(&ctx, "SELECT k8 & 127, count(*) FROM t GROUP BY k8 & 127").await;
    assert!(plan.contains("SmallKeyAggregateExec"), "{plan}");
}

/// `GROUP BY keys ORDER BY keys LIMIT n` pushes the limit into the operator: the result is
/// still exactly the hash path's, in both directions, for limits below and above the number of
/// groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_keys_with_limit_matches_hash_aggregation() {
    let mut rng = StdRng::seed_from_u64(23);
    let partitions = (0..3)
        .map(|_| {
            (0..3)
                .map(|_| batch(&mut rng, 2000, 0.1, false, false))
                .collect()
        })
        .collect();
    let (hash, small) = contexts(partitions);
    let keys = [
        "k8",
        "ku8",
        "k16",
        "b",
        "k8, b",
        "v % 100",
        "w % -1000",
        "u % 10000",
        "(v & 1023) - 512",
    ];
    for keys in keys {
        for descending in [false, true] {
            let order = keys
                .split(", ")
                .map(|k| {
                    if descending {
                        format!("{k} DESC")
                    } else {
                        k.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(", ");
            for (limit, aggregates) in [1, 3, 20, 1000]
                .into_iter()
                .flat_map(|l| [(l, AGGREGATES), (l, DIRECT_AGGREGATES[0])])
            {
                let sql = format!(
                    "SELECT {keys}, {aggregates} FROM t GROUP BY {keys} ORDER BY {order} LIMIT {limit}"
                );
                let (expected, _) = run(&hash, &sql).await;
                let (actual, plan) = run(&small, &sql).await;
                assert!(plan.contains(&format!("top={limit}")), "{sql}\n{plan}");
                assert_eq!(actual, expected, "{sql}\n{plan}");
            }
        }
    }
    // Orders the slots do not follow keep the full aggregation.
    for sql in [
        "SELECT k8, count(*) FROM t GROUP BY k8 ORDER BY k8 NULLS FIRST LIMIT 3",
        "SELECT k8, count(*) AS c FROM t GROUP BY k8 ORDER BY c, k8 LIMIT 3",
        "SELECT k8, b, count(*) FROM t GROUP BY k8, b ORDER BY b, k8 LIMIT 3",
        "SELECT k8, b, count(*) FROM t GROUP BY k8, b ORDER BY k8, b DESC LIMIT 3",
    ] {
        let (expected, _) = run(&hash, sql).await;
        let (actual, plan) = run(&small, sql).await;
        assert!(plan.contains("SmallKeyAggregateExec"), "{sql}\n{plan}");
        assert!(!plan.contains("top="), "{sql}\n{plan}");
        assert_eq!(actual, expected, "{sql}\n{plan}");
    }
}

/// A group whose values are all NULL, first met after a batch without any NULL: DataFusion's
/// accumulators then assume every group so far has a value, which holds only if groups are
/// numbered as they arrive (a slot-indexed number would report 0/false instead of NULL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_all_null_group_after_a_batch_without_nulls_stays_null() {
    let mut rng = StdRng::seed_from_u64(29);
    let clean = batch(&mut rng, 1000, 0.0, false, false);
    let mut late = batch(&mut rng, 1000, 0.0, false, false);
    // In the second batch, k8 = 127 (absent from the first: it is re-drawn below) has only
    // NULL values in every aggregated column.
    let k8 = late
        .column(0)
        .as_any()
        .downcast_ref::<Int8Array>()
        .expect("k8")
        .clone();
    let mask: Vec<bool> = k8.iter().map(|k| k == Some(127)).collect();
    let nulled = |column: &ArrayRef| -> ArrayRef {
        let nulls: Vec<Option<usize>> =
            (0..column.len()).map(|i| (!mask[i]).then_some(i)).collect();
        let indices = arrow::array::UInt64Array::from(
            nulls
                .iter()
                .map(|n| n.map(|i| i as u64))
                .collect::<Vec<_>>(),
        );
        arrow::compute::take(column, &indices, None).expect("take")
    };
    let mut columns: Vec<ArrayRef> = late.columns().to_vec();
    for index in [3, 4, 5] {
        columns[index] = nulled(&columns[index]);
    }
    late = RecordBatch::try_new(schema(), columns).expect("batch");
    let first_k8: Vec<ArrayRef> = {
        let k8 = clean
            .column(0)
            .as_any()
            .downcast_ref::<Int8Array>()
            .expect("k8");
        let rewritten: Int8Array = k8.iter().map(|k| k.map(|k| k.min(126))).collect();
        let mut columns = clean.columns().to_vec();
        columns[0] = Arc::new(rewritten);
        columns
    };
    let clean = RecordBatch::try_new(schema(), first_k8).expect("batch");
    let (hash, small) = contexts(vec![vec![clean, late]]);
    let sql = format!("SELECT k8, {AGGREGATES} FROM t GROUP BY k8 ORDER BY k8");
    let (expected, _) = run(&hash, &sql).await;
    let (actual, plan) = run(&small, &sql).await;
    assert!(plan.contains("SmallKeyAggregateExec"), "{plan}");
    assert!(expected.contains("| 127 "), "{expected}");
    assert_eq!(actual, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_the_output_rows_and_time() {
    let mut rng = StdRng::seed_from_u64(21);
    let partitions: Vec<Vec<RecordBatch>> = (0..2)
        .map(|_| vec![batch(&mut rng, 5000, 0.1, false, false)])
        .collect();
    let (_, small) = contexts(partitions);
    let (plan, batches) =
        plan_and_run(&small, "SELECT k8, count(*), sum(v) FROM t GROUP BY k8").await;
    let groups: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let metrics = find(&plan, "SmallKeyAggregateExec")
        .expect("the small-key operator")
        .metrics()
        .expect("metrics");
    assert!(groups > 100, "{groups} groups");
    assert_eq!(metrics.output_rows(), Some(groups));
    assert!(metrics.elapsed_compute().expect("elapsed_compute") > 0);
}
