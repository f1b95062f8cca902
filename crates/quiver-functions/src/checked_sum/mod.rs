//! `sum` of decimals that fails on overflow where DataFusion's returns a wrong number.
//!
//! DataFusion 55's `sum` adds decimals with wrapping arithmetic and never checks the result
//! against its declared precision (apache/datafusion#16406): over `DECIMAL(38, 0)` values
//! `sum(x)` of two `99999999999999999999999999999999999999` is a negative number, and two
//! `75000000000000000000000000000000000000` give a 39-digit value labelled `Decimal128(38, 0)`.
//! PostgreSQL returns the exact sum (its `numeric` is unbounded); DuckDB and Spark in ANSI mode
//! raise an error. quiver keeps DataFusion's result type, `DECIMAL(min(38, p + 10), s)`
//! (Spark's), and raises DuckDB's error when the sum does not fit it:
//!
//! ```sql
//! SELECT sum(x) FROM (VALUES (CAST(75e36 AS DECIMAL(38, 0))), (75e36)) t(x);
//! -- Overflow in SUM of DECIMAL: the result does not fit in Decimal128(38, 0); ...
//! ```
//!
//! [`CheckedSum`] is registered as `sum`, in place of DataFusion's, and is DataFusion's
//! [`Sum`] in everything — signature, result type, state, statistics, the `sum(x + 1)`
//! rewrite — except the accumulators of a decimal result:
//! * the row and grouped accumulators add with checked arithmetic, so a running sum that
//!   leaves the native integer's range is an error at once (as DuckDB's "Overflow in HUGEINT
//!   addition"), and check the final value against the result's precision in `evaluate`. The
//!   partial states are not checked: a partial sum may exceed the precision, as long as the
//!   final sum does not;
//! * the sliding accumulator (window frames) counts how often its running sum wrapped instead:
//!   DataFusion adds the rows entering a frame *before* it retracts those leaving it, so a
//!   running sum that overflows for a moment is no sign of a result that does;
//! * `sum(DISTINCT x)` keeps DataFusion's set of values and re-adds them, checked, at the end.
//!
//! Names matter here: quiver-core's `WidenAggregates` and `distinct_groups` rules and
//! quiver-agg's direct kernels recognise `sum` by name, and keep working because this is
//! still `sum`. Code that builds DataFusion's [`sum_udaf`](datafusion::functions_aggregate::sum::sum_udaf)
//! itself (the DataFrame API, `sumIf`) bypasses the registry and gets the unchecked sum;
//! [`checked_sum_udaf`] is the replacement for those.

use std::fmt::Debug;
use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use arrow::buffer::NullBuffer;
use arrow::compute::sum_checked;
use arrow::datatypes::{
    ArrowNativeTypeOp, DataType, Decimal128Type, Decimal256Type, Decimal32Type, Decimal64Type,
    DecimalType, FieldRef, DECIMAL256_MAX_PRECISION,
};
use datafusion::common::{exec_err, DataFusionError, Result, ScalarValue};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator,
    Operator, ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};

/// Calls `$make::<T>($decimal, ...)` with `T` the arrow type of `$decimal`'s width.
macro_rules! by_width {
    ($decimal:expr, $make:ident $(, $arg:expr)*) => {
        match $decimal.width {
            Width::W32 => $make::<Decimal32Type>($decimal $(, $arg)*),
            Width::W64 => $make::<Decimal64Type>($decimal $(, $arg)*),
            Width::W128 => $make::<Decimal128Type>($decimal $(, $arg)*),
            Width::W256 => $make::<Decimal256Type>($decimal $(, $arg)*),
        }
    };
}

/// `sum` as registered on quiver sessions: DataFusion's, with overflow checks for decimals.
///
/// ```sql
/// SELECT sum(price) FROM orders;   -- an error, not a wrapped number, if it overflows
/// ```
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct CheckedSum {
    inner: Sum,
}

impl CheckedSum {
    /// The checked `sum`.
    pub fn new() -> Self {
        CheckedSum::default()
    }
}

/// The checked `sum` as a function, for code that would otherwise use DataFusion's
/// `sum_udaf()` directly.
pub fn checked_sum_udaf() -> Arc<AggregateUDF> {
    Arc::new(AggregateUDF::from(CheckedSum::new()))
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let Some(decimal) = Decimal::of(args.return_field.data_type()) else {
            return self.inner.accumulator(args);
        };
        if args.is_distinct {
            let values = self.inner.accumulator(args)?;
            return Ok(by_width!(decimal, distinct_sum, values));
        }
        Ok(by_width!(decimal, row_sum))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match Decimal::of(args.return_field.data_type()) {
            Some(decimal) if !args.is_distinct => Ok(by_width!(decimal, grouped_sum)),
            _ => self.inner.create_groups_accumulator(args),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match Decimal::of(args.return_field.data_type()) {
            // DataFusion's sliding SUM(DISTINCT) takes Int64 only, and says so.
            Some(decimal) if !args.is_distinct => Ok(by_width!(decimal, sliding_sum)),
            _ => self.inner.create_sliding_accumulator(args),
        }
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_expr()
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }

    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        // The rewritten `sum` is a copy of `agg_function`, i.e. of this function.
        self.inner
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        // A sum read from statistics is as unchecked as DataFusion's accumulators: one that
        // does not fit is left to the accumulators, which report it.
        let value = self.inner.value_from_stats(statistics_args)?;
        fits_its_precision(&value).then_some(value)
    }
}

/// The storage width of a decimal type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    W32,
    W64,
    W128,
    W256,
}

/// A decimal result type: the sum must have at most `precision` digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    width: Width,
    precision: u8,
    scale: i8,
}

impl Decimal {
    /// `data_type` if it is a decimal.
    fn of(data_type: &DataType) -> Option<Decimal> {
        let (width, precision, scale) = match *data_type {
            DataType::Decimal32(p, s) => (Width::W32, p, s),
            DataType::Decimal64(p, s) => (Width::W64, p, s),
            DataType::Decimal128(p, s) => (Width::W128, p, s),
            DataType::Decimal256(p, s) => (Width::W256, p, s),
            _ => return None,
        };
        Some(Decimal {
            width,
            precision,
            scale,
        })
    }

    fn data_type(self) -> DataType {
        let Decimal {
            precision: p,
            scale: s,
            ..
        } = self;
        match self.width {
            Width::W32 => DataType::Decimal32(p, s),
            Width::W64 => DataType::Decimal64(p, s),
            Width::W128 => DataType::Decimal128(p, s),
            Width::W256 => DataType::Decimal256(p, s),
        }
    }

    /// DuckDB's message, and the way out where there is one.
    fn overflow(self) -> DataFusionError {
        let hint = match self.width {
            Width::W256 => String::new(),
            _ => format!(
                "; cast the argument to DECIMAL({DECIMAL256_MAX_PRECISION}, {}) to sum it",
                self.scale
            ),
        };
        DataFusionError::Execution(format!(
            "Overflow in SUM of DECIMAL: the result does not fit in {}{hint}",
            self.data_type()
        ))
    }

    /// `value` if it has at most the result's digits.
    fn check<T: DecimalType>(self, value: T::Native) -> Result<T::Native> {
        if T::is_valid_decimal_precision(value, self.precision) {
            Ok(value)
        } else {
            Err(self.overflow())
        }
    }

    /// `sum + value`, or the overflow error.
    fn add<T: DecimalType>(self, sum: T::Native, value: T::Native) -> Result<T::Native> {
        sum.add_checked(value).map_err(|_| self.overflow())
    }

    /// The sum of `values`' valid values (`None` if there are none), checked.
    fn sum<T: DecimalType>(self, values: &PrimitiveArray<T>) -> Result<Option<T::Native>> {
        sum_checked(values).map_err(|_| self.overflow())
    }

    /// The accumulators' scalar for `value`.
    fn scalar<T: DecimalType>(self, value: Option<T::Native>) -> Result<ScalarValue> {
        ScalarValue::new_primitive::<T>(value, &self.data_type())
    }
}

/// Whether `value`, if a decimal, has at most its type's digits.
fn fits_its_precision(value: &ScalarValue) -> bool {
    match *value {
        ScalarValue::Decimal32(Some(v), p, _) => Decimal32Type::is_valid_decimal_precision(v, p),
        ScalarValue::Decimal64(Some(v), p, _) => Decimal64Type::is_valid_decimal_precision(v, p),
        ScalarValue::Decimal128(Some(v), p, _) => Decimal128Type::is_valid_decimal_precision(v, p),
        ScalarValue::Decimal256(Some(v), p, _) => Decimal256Type::is_valid_decimal_precision(v, p),
        _ => true,
    }
}

/// The first of `arrays` as decimals of type `T`.
fn decimals<T: DecimalType>(arrays: &[ArrayRef]) -> Result<&PrimitiveArray<T>> {
    match arrays
        .first()
        .and_then(|array| array.as_primitive_opt::<T>())
    {
        Some(values) => Ok(values),
        None => exec_err!(
            "sum: expected one {} column, got {:?}",
            T::PREFIX,
            arrays.iter().map(|a| a.data_type()).collect::<Vec<_>>()
        ),
    }
}

fn row_sum<T: DecimalType + Debug>(decimal: Decimal) -> Box<dyn Accumulator> {
    Box::new(RowSum::<T> { sum: None, decimal })
}

fn distinct_sum<T: DecimalType + Debug>(
    decimal: Decimal,
    values: Box<dyn Accumulator>,
) -> Box<dyn Accumulator> {
    Box::new(DistinctSum::<T> {
        values,
        decimal,
        decimal_type: std::marker::PhantomData,
    })
}

fn grouped_sum<T: DecimalType + Debug>(decimal: Decimal) -> Box<dyn GroupsAccumulator> {
    Box::new(GroupedSums::<T> {
        sums: Vec::new(),
        seen: Vec::new(),
        decimal,
    })
}

fn sliding_sum<T: DecimalType + Debug>(decimal: Decimal) -> Box<dyn Accumulator> {
    Box::new(SlidingSum::<T> {
        sum: T::Native::ZERO,
        wraps: 0,
        count: 0,
        decimal,
    })
}

/// `sum(x)` without GROUP BY: DataFusion's `SumAccumulator`, checked.
#[derive(Debug)]
struct RowSum<T: DecimalType> {
    sum: Option<T::Native>,
    decimal: Decimal,
}

impl<T: DecimalType + Debug> Accumulator for RowSum<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(part) = self.decimal.sum(decimals::<T>(values)?)? {
            let sum = self.sum.unwrap_or(T::Native::ZERO);
            self.sum = Some(self.decimal.add::<T>(sum, part)?);
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        // The state is the partial sum, NULL where there was nothing to add.
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.decimal.scalar::<T>(self.sum)?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let sum = self
            .sum
            .map(|sum| self.decimal.check::<T>(sum))
            .transpose()?;
        self.decimal.scalar::<T>(sum)
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// `sum(DISTINCT x)`: DataFusion's accumulator collects the distinct values (and is the
/// state); the values are added here, checked.
#[derive(Debug)]
struct DistinctSum<T: DecimalType> {
    values: Box<dyn Accumulator>,
    decimal: Decimal,
    decimal_type: std::marker::PhantomData<T>,
}

impl<T: DecimalType + Debug> Accumulator for DistinctSum<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.values.update_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.values.merge_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.values.state()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        // The state is one list of the distinct values.
        let state = self.values.state()?;
        let Some(ScalarValue::List(list)) = state.first() else {
            return exec_err!("sum(DISTINCT): the state is not a list of values");
        };
        let values = [Arc::clone(list.values())];
        let sum = self.decimal.sum(decimals::<T>(&values)?)?;
        let sum = sum.map(|sum| self.decimal.check::<T>(sum)).transpose()?;
        self.decimal.scalar::<T>(sum)
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.values.size()
    }
}

/// `sum(x)` under GROUP BY: a sum per group and whether the group saw a value, as
/// DataFusion's `PrimitiveGroupsAccumulator`, checked.
#[derive(Debug)]
struct GroupedSums<T: DecimalType> {
    sums: Vec<T::Native>,
    seen: Vec<bool>,
    decimal: Decimal,
}

impl<T: DecimalType + Debug> GroupedSums<T> {
    /// The sums of `emit_to`'s groups, NULL where a group saw no value, unchecked.
    fn take(&mut self, emit_to: EmitTo) -> Result<PrimitiveArray<T>> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        let nulls = NullBuffer::from(seen);
        let array = PrimitiveArray::<T>::new(sums.into(), Some(nulls));
        Ok(array.with_precision_and_scale(self.decimal.precision, self.decimal.scale)?)
    }
}

impl<T: DecimalType + Debug> GroupsAccumulator for GroupedSums<T> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = decimals::<T>(values)?;
        if values.len() != group_indices.len()
            || opt_filter.is_some_and(|filter| filter.len() != values.len())
        {
            return exec_err!(
                "sum: {} values for {} group numbers",
                values.len(),
                group_indices.len()
            );
        }
        self.sums.resize(total_num_groups, T::Native::ZERO);
        self.seen.resize(total_num_groups, false);
        let decimal = self.decimal;
        let all_rows = values.null_count() == 0 && opt_filter.is_none();
        for (row, (&group, &value)) in group_indices.iter().zip(values.values()).enumerate() {
            // Both lengths were compared with the rows' above.
            let kept = all_rows
                || (values.is_valid(row)
                    && opt_filter.is_none_or(|filter| filter.is_valid(row) && filter.value(row)));
            if !kept {
                continue;
            }
            let (Some(sum), Some(seen)) = (self.sums.get_mut(group), self.seen.get_mut(group))
            else {
                return exec_err!("sum: group {group} beyond the {total_num_groups} groups");
            };
            *sum = decimal.add::<T>(*sum, value)?;
            *seen = true;
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = self.take(emit_to)?;
        for sum in sums.iter().flatten() {
            self.decimal.check::<T>(sum)?;
        }
        Ok(Arc::new(sums))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(self.take(emit_to)?)])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        // The state is the partial sum per group, NULL where there was nothing to add.
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // One row's state is its value (0 + value), NULL where it is NULL or filtered out.
        let values = decimals::<T>(values)?;
        if opt_filter.is_some_and(|filter| filter.len() != values.len()) {
            return exec_err!("sum: a filter of another length than the values");
        }
        let nulls = match opt_filter {
            None => values.nulls().cloned(),
            Some(filter) => {
                let kept = match filter.nulls() {
                    Some(nulls) => nulls.inner() & filter.values(),
                    None => filter.values().clone(),
                };
                NullBuffer::union(values.nulls(), Some(&NullBuffer::new(kept)))
            }
        };
        let state = PrimitiveArray::<T>::new(values.values().clone(), nulls)
            .with_precision_and_scale(self.decimal.precision, self.decimal.scale)?;
        Ok(vec![Arc::new(state)])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of_val(&T::Native::ZERO) + self.seen.capacity()
    }
}

/// `sum(x) OVER (... ROWS/RANGE BETWEEN ...)`: a running sum that rows enter and leave.
///
/// The sum wraps like DataFusion's, and `wraps` counts the wraps, upward positive: the exact
/// sum is `sum + wraps · 2^bits`. Rows enter a frame before the ones leaving it are retracted,
/// so the running sum may overflow for a moment while the frame's own sum fits; only the sum
/// `evaluate` sees must.
#[derive(Debug)]
struct SlidingSum<T: DecimalType> {
    sum: T::Native,
    wraps: i64,
    count: u64,
    decimal: Decimal,
}

impl<T: DecimalType + Debug> SlidingSum<T> {
    fn add(&mut self, value: T::Native) {
        match self.sum.add_checked(value) {
            Ok(sum) => self.sum = sum,
            Err(_) => {
                // Overflow needs both operands of one sign: past the maximum when positive.
                self.sum = self.sum.add_wrapping(value);
                let step = if value.is_lt(T::Native::ZERO) { -1 } else { 1 };
                self.wraps = self.wraps.saturating_add(step);
            }
        }
    }

    fn subtract(&mut self, value: T::Native) {
        match self.sum.sub_checked(value) {
            Ok(sum) => self.sum = sum,
            Err(_) => {
                // Subtracting a negative value overflows past the maximum.
                self.sum = self.sum.sub_wrapping(value);
                let step = if value.is_lt(T::Native::ZERO) { 1 } else { -1 };
                self.wraps = self.wraps.saturating_add(step);
            }
        }
    }

    /// Applies `op` to each valid value of `array`; the number of them.
    fn each(&mut self, array: &PrimitiveArray<T>, op: fn(&mut Self, T::Native)) -> u64 {
        let mut count = 0;
        for value in array.iter().flatten() {
            op(self, value);
            count += 1;
        }
        count
    }
}

impl<T: DecimalType + Debug> Accumulator for SlidingSum<T> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let added = self.each(decimals::<T>(values)?, Self::add);
        self.count += added;
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let removed = self.each(decimals::<T>(values)?, Self::subtract);
        self.count = self.count.saturating_sub(removed);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        // DataFusion's sliding state: the partial sums and the counts of values added.
        self.each(decimals::<T>(states)?, Self::add);
        if let Some(counts) = states
            .get(1)
            .and_then(|c| c.as_primitive_opt::<arrow::datatypes::UInt64Type>())
        {
            self.count += counts.iter().flatten().sum::<u64>();
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        if self.wraps != 0 {
            return Err(self.decimal.overflow());
        }
        let sum = (self.count != 0).then_some(self.sum);
        Ok(vec![
            self.decimal.scalar::<T>(sum)?,
            ScalarValue::UInt64(Some(self.count)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.count == 0 {
            return self.decimal.scalar::<T>(None);
        }
        if self.wraps != 0 {
            return Err(self.decimal.overflow());
        }
        let sum = self.decimal.check::<T>(self.sum)?;
        self.decimal.scalar::<T>(Some(sum))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

#[cfg(test)]
mod tests;
