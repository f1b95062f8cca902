//! Tests of the checked `sum`: overflowing decimal sums are errors, every other sum is DataFusion's.

use super::*;
use arrow::array::{Decimal128Array, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;

/// `Decimal128(p, s)` values.
fn d128(values: &[Option<i128>], p: u8, s: i8) -> ArrayRef {
    Arc::new(
        Decimal128Array::from(values.to_vec())
            .with_precision_and_scale(p, s)
            .unwrap(),
    )
}

/// The biggest `DECIMAL(38, 0)`: 38 nines.
const NINES: i128 = 99_999_999_999_999_999_999_999_999_999_999_999_999;
/// 7.5e37: two of them fit in an i128 but not in 38 digits.
const HALF: i128 = 75_000_000_000_000_000_000_000_000_000_000_000_000;

fn decimal(p: u8, s: i8) -> Decimal {
    Decimal::of(&DataType::Decimal128(p, s)).unwrap()
}

fn assert_overflow(result: Result<impl Debug>) {
    let error = result.unwrap_err().to_string();
    assert!(
        error.contains("Overflow in SUM of DECIMAL: the result does not fit in Decimal128("),
        "{error}"
    );
}

#[test]
fn row_sums_that_leave_the_integer_range_are_errors() {
    let mut sum = row_sum::<Decimal128Type>(decimal(38, 0));
    assert_overflow(sum.update_batch(&[d128(&[Some(NINES), Some(NINES)], 38, 0)]));

    // Across batches too.
    let mut sum = row_sum::<Decimal128Type>(decimal(38, 0));
    sum.update_batch(&[d128(&[Some(NINES)], 38, 0)]).unwrap();
    assert_overflow(sum.update_batch(&[d128(&[Some(NINES)], 38, 0)]));
}

#[test]
fn row_sums_beyond_the_precision_fail_in_evaluate_only() {
    let mut partial = row_sum::<Decimal128Type>(decimal(38, 0));
    partial
        .update_batch(&[d128(&[Some(HALF), Some(HALF)], 38, 0)])
        .unwrap();
    // A partial state may exceed the precision: values of other partitions may cancel it.
    let state = partial.state().unwrap();
    assert_eq!(state, vec![ScalarValue::Decimal128(Some(2 * HALF), 38, 0)]);
    assert_overflow(partial.evaluate());

    let mut last = row_sum::<Decimal128Type>(decimal(38, 0));
    let states: Vec<ArrayRef> = state.iter().map(|s| s.to_array().unwrap()).collect();
    last.merge_batch(&states).unwrap();
    last.update_batch(&[d128(&[Some(-HALF)], 38, 0)]).unwrap();
    assert_eq!(
        last.evaluate().unwrap(),
        ScalarValue::Decimal128(Some(HALF), 38, 0)
    );
}

#[test]
fn ordinary_row_sums_are_datafusion_s() {
    let mut sum = row_sum::<Decimal128Type>(decimal(15, 2));
    assert_eq!(
        sum.evaluate().unwrap(),
        ScalarValue::Decimal128(None, 15, 2)
    );
    sum.update_batch(&[d128(&[Some(150), None, Some(225)], 5, 2)])
        .unwrap();
    sum.update_batch(&[d128(&[None], 5, 2)]).unwrap();
    assert_eq!(
        sum.evaluate().unwrap(),
        ScalarValue::Decimal128(Some(375), 15, 2)
    );
}

#[test]
fn small_decimals_overflow_at_their_own_precision() {
    let p9 = Decimal::of(&DataType::Decimal32(9, 0)).unwrap();
    let mut sum = row_sum::<Decimal32Type>(p9);
    let values: ArrayRef = Arc::new(
        arrow::array::Decimal32Array::from(vec![999_999_999, 1])
            .with_precision_and_scale(9, 0)
            .unwrap(),
    );
    sum.update_batch(&[values]).unwrap();
    let error = sum.evaluate().unwrap_err().to_string();
    assert!(error.contains("does not fit in Decimal32(9, 0)"), "{error}");
}

#[test]
fn grouped_sums_check_each_group_and_respect_filters() {
    let mut sums = grouped_sum::<Decimal128Type>(decimal(38, 2));
    let values = d128(&[Some(100), Some(250), None, Some(5), Some(7)], 10, 2);
    let filter = BooleanArray::from(vec![Some(true), Some(true), Some(true), None, Some(false)]);
    sums.update_batch(&[values], &[0, 1, 1, 0, 2], Some(&filter), 3)
        .unwrap();
    let result = sums.evaluate(EmitTo::All).unwrap();
    let result = result.as_primitive::<Decimal128Type>();
    assert_eq!(result.data_type(), &DataType::Decimal128(38, 2));
    assert_eq!(
        result.iter().collect::<Vec<_>>(),
        vec![Some(100), Some(250), None]
    );

    let mut sums = grouped_sum::<Decimal128Type>(decimal(38, 0));
    let values = d128(&[Some(HALF), Some(1), Some(HALF)], 38, 0);
    sums.update_batch(&[values], &[0, 1, 0], None, 2).unwrap();
    // The partial state is unchecked; the final sum of group 0 is not.
    let state = sums.state(EmitTo::First(1)).unwrap();
    assert_eq!(state[0].as_primitive::<Decimal128Type>().value(0), 2 * HALF);
    assert_eq!(
        sums.evaluate(EmitTo::All)
            .unwrap()
            .as_primitive::<Decimal128Type>()
            .value(0),
        1
    );
    let mut last = grouped_sum::<Decimal128Type>(decimal(38, 0));
    last.merge_batch(&state, &[0], 1).unwrap();
    assert_overflow(last.evaluate(EmitTo::All));

    let mut sums = grouped_sum::<Decimal128Type>(decimal(38, 0));
    let values = d128(&[Some(NINES), Some(NINES)], 38, 0);
    assert_overflow(sums.update_batch(&[values], &[0, 0], None, 1));
}

#[test]
fn grouped_states_of_single_rows_are_the_kept_values() {
    let sums = grouped_sum::<Decimal128Type>(decimal(15, 2));
    let values = d128(&[Some(1), None, Some(3)], 5, 2);
    let filter = BooleanArray::from(vec![Some(true), Some(true), Some(false)]);
    let state = sums.convert_to_state(&[values], Some(&filter)).unwrap();
    let state = state[0].as_primitive::<Decimal128Type>();
    assert_eq!(state.data_type(), &DataType::Decimal128(15, 2));
    assert_eq!(state.iter().collect::<Vec<_>>(), vec![Some(1), None, None]);
}

#[test]
fn sliding_sums_tolerate_a_momentary_overflow_but_not_a_final_one() {
    let mut sum = sliding_sum::<Decimal128Type>(decimal(38, 0));
    sum.update_batch(&[d128(&[Some(NINES)], 38, 0)]).unwrap();
    // The next row enters before the first leaves: 2 · NINES does not fit an i128.
    sum.update_batch(&[d128(&[Some(NINES)], 38, 0)]).unwrap();
    assert_overflow(sum.evaluate());
    sum.retract_batch(&[d128(&[Some(NINES)], 38, 0)]).unwrap();
    assert_eq!(
        sum.evaluate().unwrap(),
        ScalarValue::Decimal128(Some(NINES), 38, 0)
    );
    sum.retract_batch(&[d128(&[Some(NINES)], 38, 0)]).unwrap();
    assert_eq!(
        sum.evaluate().unwrap(),
        ScalarValue::Decimal128(None, 38, 0)
    );
    // Downwards: the frame {-NINES} gets another -NINES before the first leaves.
    sum.update_batch(&[d128(&[Some(-NINES), None], 38, 0)])
        .unwrap();
    sum.update_batch(&[d128(&[Some(-NINES)], 38, 0)]).unwrap();
    assert_overflow(sum.evaluate());
    sum.retract_batch(&[d128(&[Some(-NINES), None], 38, 0)])
        .unwrap();
    assert_eq!(
        sum.evaluate().unwrap(),
        ScalarValue::Decimal128(Some(-NINES), 38, 0)
    );
}

async fn context() -> SessionContext {
    let ctx = SessionContext::new();
    ctx.register_udaf(AggregateUDF::from(CheckedSum::new()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("x", DataType::Decimal128(38, 0), true),
        Field::new("i", DataType::Int64, false),
        Field::new("f", DataType::Float64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 1, 2, 3])),
            // Two 7.5e37: their sum has 39 digits; the distinct values' sum fits.
            d128(&[Some(HALF), Some(HALF), Some(7), None], 38, 0),
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            Arc::new(Float64Array::from(vec![0.5, 0.25, 1.0, 2.0])),
        ],
    )
    .unwrap();
    ctx.register_batch("t", batch).unwrap();
    ctx.register_batch(
        "distinct_big",
        RecordBatch::try_from_iter([("x", d128(&[Some(HALF), Some(HALF + 1)], 38, 0))]).unwrap(),
    )
    .unwrap();
    ctx.sql("CREATE TABLE small(x DECIMAL(10, 2)) AS VALUES (1.25), (2.50), (NULL)")
        .await
        .unwrap();
    ctx
}

/// The result's cells as text, NULL as the empty string.
async fn rows(ctx: &SessionContext, sql: &str) -> Result<Vec<Vec<String>>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let mut rows = Vec::new();
    for batch in &batches {
        let formatters = (batch.columns().iter())
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect(),
            );
        }
    }
    Ok(rows)
}

#[tokio::test]
async fn overflowing_sql_sums_are_errors_in_every_form() {
    let ctx = context().await;
    for sql in [
        "SELECT sum(x) FROM t",
        "SELECT g, sum(x) FROM t GROUP BY g",
        "SELECT sum(x) OVER () FROM t",
        "SELECT sum(x) OVER (ORDER BY g ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
        // Two DISTINCT arguments: DataFusion's DISTINCT accumulator, not a GROUP BY.
        "SELECT sum(DISTINCT x), count(DISTINCT x + 1) FROM distinct_big",
        "SELECT sum(DISTINCT x) FROM distinct_big",
    ] {
        assert_overflow(rows(&ctx, sql).await);
    }
    assert_eq!(
        rows(&ctx, "SELECT sum(DISTINCT x), count(DISTINCT g) FROM t")
            .await
            .unwrap(),
        [["75000000000000000000000000000000000007", "3"]]
    );
}

#[tokio::test]
async fn ordinary_sql_sums_keep_their_values_and_types() {
    let ctx = context().await;
    assert_eq!(
        rows(&ctx, "SELECT sum(x), arrow_typeof(sum(x)) FROM small")
            .await
            .unwrap(),
        [["3.75", "Decimal128(20, 2)"]]
    );
    assert_eq!(
        rows(&ctx, "SELECT sum(i), arrow_typeof(sum(i)), sum(f) FROM t")
            .await
            .unwrap(),
        [["10", "Int64", "3.75"]]
    );
    assert_eq!(
        rows(
            &ctx,
            "SELECT g, sum(x) FROM t WHERE g > 1 GROUP BY g ORDER BY g"
        )
        .await
        .unwrap(),
        [["2", "7"], ["3", ""]]
    );
    assert_eq!(
        rows(
            &ctx,
            "SELECT x, sum(x) OVER (ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
             FROM small ORDER BY x"
        )
        .await
        .unwrap(),
        [["1.25", "1.25"], ["2.50", "3.75"], ["", "2.50"]]
    );
}

#[tokio::test]
async fn the_override_is_still_called_sum() {
    let ctx = context().await;
    let state = ctx.state();
    let sum = state.aggregate_functions().get("sum").unwrap();
    assert!(sum.inner().is::<CheckedSum>());
    // Column names read as DataFusion's.
    let frame = ctx.sql("SELECT sum(i) FROM t").await.unwrap();
    assert_eq!(frame.schema().field(0).name(), "sum(t.i)");
}
