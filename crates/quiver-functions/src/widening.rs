//! SUM and AVG of integers that read the column as it is, and COUNT(*) without a column of ones.
//!
//! DataFusion coerces the argument of SUM and AVG before aggregating it: `sum(x)` of an `Int16`
//! column is `sum(CAST(x AS Int64))` and `avg(x)` is `avg(CAST(x AS Float64))`, so every batch
//! first allocates and fills a 64-bit copy of the column, which the sum then reads again. Over
//! ClickBench's `SELECT sum(AdvEngineID), count(*), avg(ResolutionWidth) FROM hits` (two
//! `Int16` columns) that is three 8-byte arrays written per row for two 2-byte values read:
//! `count(*)` is `count(Int64(1))`, and the literal becomes a column of ones in every batch.
//!
//! [`WideningSum`] and [`WideningAvg`] take the integer column itself and add its values,
//! widened in registers, to a 128-bit sum beside a count of the values added: in blocks of at
//! most 2³¹ values in 64-bit registers (a 64-bit value split into its high and low 32 bits),
//! which the compiler vectorises, skipping NULLs 64 rows at a time by their validity bits. The
//! results are exactly DataFusion's types: SUM is `Int64` for signed and `UInt64` for unsigned
//! inputs and NULL over no values, and a sum that does not fit is an error, not a wrapped
//! number; AVG is `Float64`, the exact sum divided by the count (DataFusion adds the values as
//! floats, so for 64-bit inputs it can differ from this in the last digits). The partial state
//! is the count (`UInt64`) and the sum (`Decimal128(38, 0)`).
//!
//! They have no grouped accumulator, and are used only without GROUP BY. Under a GROUP BY the
//! cast is a small part of the work, and the state per group is what counts: a first grouped
//! version (a 128-bit sum and a count per group) made ClickBench's Q32 (5M groups) a third
//! slower than DataFusion's cast and 8-byte sums.
//!
//! [`CountRows`] counts the rows of its argument, NULL or not: `count(*)` rewritten to read a
//! column the aggregation already has in place of the literal.
//!
//! quiver-core's `WidenAggregates` rule puts these in place of DataFusion's aggregates; they
//! are not registered under names of their own.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Int64Array};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::{
    DataType, Decimal128Type, Field, FieldRef, Int16Type, Int32Type, Int64Type, Int8Type,
    UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::common::stats::Precision;
use datafusion::common::{exec_err, not_impl_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, StatisticsArgs, Volatility,
};

/// The name [`WideningSum`] shows in plans.
pub const SUM_NAME: &str = "widening_sum";
/// The name [`WideningAvg`] shows in plans.
pub const AVG_NAME: &str = "widening_avg";
/// The name [`CountRows`] shows in plans.
pub const COUNT_NAME: &str = "count_rows";

/// What a (count, sum) state becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Finish {
    /// The sum as `Int64`, NULL over no values.
    SignedSum,
    /// The sum as `UInt64`, NULL over no values.
    UnsignedSum,
    /// The sum over the count as `Float64`, NULL over no values.
    Average,
}

/// The values added so far: how many, and their exact sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Slot {
    sum: i128,
    count: u64,
}

impl Slot {
    fn add(&mut self, count: u64, sum: i128) {
        self.count += count;
        self.sum = self.sum.wrapping_add(sum);
    }
}

impl Finish {
    fn name(self) -> &'static str {
        match self {
            Finish::SignedSum | Finish::UnsignedSum => SUM_NAME,
            Finish::Average => AVG_NAME,
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Finish::SignedSum => DataType::Int64,
            Finish::UnsignedSum => DataType::UInt64,
            Finish::Average => DataType::Float64,
        }
    }

    /// The aggregate's result.
    fn value(self, slot: Slot) -> Result<ScalarValue> {
        if slot.count == 0 {
            return ScalarValue::try_from(&self.data_type());
        }
        Ok(match self {
            Finish::SignedSum => ScalarValue::Int64(Some(to_i64(slot.sum)?)),
            Finish::UnsignedSum => ScalarValue::UInt64(Some(to_u64(slot.sum)?)),
            Finish::Average => ScalarValue::Float64(Some(slot.sum as f64 / slot.count as f64)),
        })
    }
}

fn to_i64(sum: i128) -> Result<i64> {
    i64::try_from(sum).map_err(|_| overflow(sum, "Int64"))
}

fn to_u64(sum: i128) -> Result<u64> {
    u64::try_from(sum).map_err(|_| overflow(sum, "UInt64"))
}

fn overflow(sum: i128, to: &str) -> DataFusionError {
    DataFusionError::Execution(format!(
        "sum overflow: {sum} does not fit in {to}; cast the argument to DECIMAL(38, 0) to sum it"
    ))
}

/// The partial state: the count of values added and their sum.
fn state_fields(name: &str) -> Vec<FieldRef> {
    vec![
        Arc::new(Field::new(
            format!("{name}[count]"),
            DataType::UInt64,
            false,
        )),
        Arc::new(Field::new(
            format!("{name}[sum]"),
            DataType::Decimal128(38, 0),
            false,
        )),
    ]
}

/// The input type of a one-argument aggregate.
fn input_type(fields: &[FieldRef], name: &str) -> Result<DataType> {
    match fields {
        [field] => Ok(field.data_type().clone()),
        _ => exec_err!("{name} takes one argument, not {}", fields.len()),
    }
}

/// `sum(x)` of an 8-, 16- or 32-bit integer `x` without GROUP BY, without widening the column
/// first.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WideningSum {
    signature: Signature,
}

impl Default for WideningSum {
    fn default() -> Self {
        WideningSum {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl WideningSum {
    /// Whether this sums `data_type` as DataFusion's `sum` of it cast to `to` would.
    pub fn supports(data_type: &DataType, to: &DataType) -> bool {
        Self::finish(data_type).is_ok_and(|finish| finish.data_type() == *to)
    }

    fn finish(input: &DataType) -> Result<Finish> {
        use DataType::*;
        match input {
            Int8 | Int16 | Int32 => Ok(Finish::SignedSum),
            UInt8 | UInt16 | UInt32 => Ok(Finish::UnsignedSum),
            _ => not_impl_err!("{SUM_NAME} sums an 8-, 16- or 32-bit integer, not {input}"),
        }
    }
}

impl AggregateUDFImpl for WideningSum {
    fn name(&self) -> &str {
        SUM_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [input] => Ok(Self::finish(input)?.data_type()),
            _ => not_impl_err!("{SUM_NAME} takes one argument, not {}", arg_types.len()),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let input = input_type(args.expr_fields, SUM_NAME)?;
        let finish = Self::finish(&input)?;
        Ok(Box::new(WideAccumulator::new(finish, input)))
    }
}

/// `avg(x)` of an integer `x` without GROUP BY, summed exactly, without converting the column
/// to floats first.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WideningAvg {
    signature: Signature,
}

impl Default for WideningAvg {
    fn default() -> Self {
        WideningAvg {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl WideningAvg {
    /// Whether this averages `data_type` as DataFusion's `avg` of it cast to `to` would.
    pub fn supports(data_type: &DataType, to: &DataType) -> bool {
        data_type.is_integer() && *to == DataType::Float64
    }
}

impl AggregateUDFImpl for WideningAvg {
    fn name(&self) -> &str {
        AVG_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [input] if input.is_integer() => Ok(DataType::Float64),
            _ => not_impl_err!("{AVG_NAME} averages one integer, not {arg_types:?}"),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(state_fields(args.name))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let input = input_type(args.expr_fields, AVG_NAME)?;
        if !input.is_integer() {
            return not_impl_err!("{AVG_NAME} averages an integer, not {input}");
        }
        Ok(Box::new(WideAccumulator::new(Finish::Average, input)))
    }
}

/// An integer type summed in 64-bit blocks.
trait WideInt: ArrowPrimitiveType {
    /// The exact sum of `values`, at most 2³¹ of them.
    fn block_sum(values: &[Self::Native]) -> i128;
    /// One value, widened.
    fn wide(value: Self::Native) -> i128;
}

macro_rules! narrow_int {
    ($($t:ty),*) => {$(
        impl WideInt for $t {
            fn block_sum(values: &[Self::Native]) -> i128 {
                // |value| < 2^32 and at most 2^31 values: the sum fits in an i64.
                values.iter().map(|&v| v as i64).sum::<i64>() as i128
            }

            fn wide(value: Self::Native) -> i128 {
                value as i128
            }
        }
    )*};
}

narrow_int!(Int8Type, Int16Type, Int32Type, UInt8Type, UInt16Type, UInt32Type);

/// The exact sum of 64-bit values read as unsigned: value = high · 2^32 + low − negative · 2^64
/// (`negative` only for a signed type), in one pass. Over at most 2^31 values each of the three
/// sums fits in a u64; one pass instead of one per half keeps the scan memory-bound at a single
/// read of the column (the summing loop vectorises either way).
fn split_sum(values: impl Iterator<Item = u64>, signed: bool) -> i128 {
    let (mut high, mut low, mut negative) = (0u64, 0u64, 0u64);
    for value in values {
        high += value >> 32;
        low += value & 0xFFFF_FFFF;
        negative += value >> 63;
    }
    let unsigned = ((high as i128) << 32) + low as i128;
    if signed {
        unsigned - ((negative as i128) << 64)
    } else {
        unsigned
    }
}

impl WideInt for Int64Type {
    fn block_sum(values: &[i64]) -> i128 {
        split_sum(values.iter().map(|&v| v as u64), true)
    }

    fn wide(value: i64) -> i128 {
        value as i128
    }
}

impl WideInt for UInt64Type {
    fn block_sum(values: &[u64]) -> i128 {
        split_sum(values.iter().copied(), false)
    }

    fn wide(value: u64) -> i128 {
        value as i128
    }
}

/// Rows per block summed in 64-bit registers.
const BLOCK: usize = 1 << 31;

/// The exact sum of the `values` at the set bits of `rows` (all when `None`), and their number.
fn masked_sum<T: WideInt>(values: &[T::Native], rows: Option<&BooleanBuffer>) -> Slot {
    let Some(rows) = rows else {
        let sum = values.chunks(BLOCK).map(T::block_sum).sum();
        return Slot {
            sum,
            count: values.len() as u64,
        };
    };
    let mut sum = 0i128;
    let chunks = rows.bit_chunks();
    let mut words = values.chunks_exact(64);
    for (word, block) in chunks.iter().zip(&mut words) {
        if word == u64::MAX {
            sum += T::block_sum(block);
        } else {
            let mut bits = word;
            while bits != 0 {
                sum += T::wide(block[bits.trailing_zeros() as usize]);
                bits &= bits - 1;
            }
        }
    }
    let mut bits = chunks.remainder_bits();
    let rest = words.remainder();
    while bits != 0 {
        if let Some(&value) = rest.get(bits.trailing_zeros() as usize) {
            sum += T::wide(value);
        }
        bits &= bits - 1;
    }
    Slot {
        sum,
        count: rows.count_set_bits() as u64,
    }
}

/// The count and exact sum of the valid values of `array`, an integer array.
fn array_sum(array: &dyn Array) -> Result<Slot> {
    fn sum<T: WideInt>(array: &dyn Array) -> Result<Slot> {
        match array.as_primitive_opt::<T>() {
            Some(values) => Ok(masked_sum::<T>(
                values.values(),
                values.nulls().map(|nulls| nulls.inner()),
            )),
            None => exec_err!("widening aggregate: expected {}", array.data_type()),
        }
    }
    match array.data_type() {
        DataType::Int8 => sum::<Int8Type>(array),
        DataType::Int16 => sum::<Int16Type>(array),
        DataType::Int32 => sum::<Int32Type>(array),
        DataType::Int64 => sum::<Int64Type>(array),
        DataType::UInt8 => sum::<UInt8Type>(array),
        DataType::UInt16 => sum::<UInt16Type>(array),
        DataType::UInt32 => sum::<UInt32Type>(array),
        DataType::UInt64 => sum::<UInt64Type>(array),
        other => exec_err!("widening aggregate over {other}, not an integer"),
    }
}

/// SUM or AVG: the count and sum of the values so far.
#[derive(Debug)]
struct WideAccumulator {
    finish: Finish,
    input: DataType,
    slot: Slot,
}

impl WideAccumulator {
    fn new(finish: Finish, input: DataType) -> Self {
        WideAccumulator {
            finish,
            input,
            slot: Slot::default(),
        }
    }
}

impl Accumulator for WideAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let array = match values {
            [array] if array.data_type() == &self.input => array,
            _ => {
                let types: Vec<_> = values.iter().map(|v| v.data_type().to_string()).collect();
                return exec_err!(
                    "{} over {} given ({})",
                    self.finish.name(),
                    self.input,
                    types.join(", ")
                );
            }
        };
        let batch = array_sum(array.as_ref())?;
        self.slot.add(batch.count, batch.sum);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (counts, sums) = match states {
            [counts, sums] => match (
                counts.as_primitive_opt::<UInt64Type>(),
                sums.as_primitive_opt::<Decimal128Type>(),
            ) {
                (Some(counts), Some(sums)) => (counts, sums),
                _ => {
                    return exec_err!(
                        "{} state: {} and {}",
                        self.finish.name(),
                        counts.data_type(),
                        sums.data_type()
                    )
                }
            },
            _ => return exec_err!("{} state: {} columns", self.finish.name(), states.len()),
        };
        for (&count, &sum) in counts.values().iter().zip(sums.values()) {
            self.slot.add(count, sum);
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::UInt64(Some(self.slot.count)),
            ScalarValue::Decimal128(Some(self.slot.sum), 38, 0),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.finish.value(self.slot)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Fails unless every group number is below `total`, as DataFusion promises; indexing the
/// groups' states by them cannot then fail.
fn check_groups(groups: &[usize], total: usize) -> Result<()> {
    match groups.iter().max() {
        Some(&group) if group >= total => {
            exec_err!("group {group} beyond the {total} groups")
        }
        _ => Ok(()),
    }
}

/// `count(*)`: the number of rows of its argument, NULL or not.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CountRows {
    signature: Signature,
}

impl Default for CountRows {
    fn default() -> Self {
        CountRows {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for CountRows {
    fn name(&self) -> &str {
        COUNT_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[count]", args.name),
            DataType::Int64,
            false,
        ))])
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(RowCount(0)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(RowCounts(Vec::new())))
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }

    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        match args.statistics.num_rows {
            Precision::Exact(rows) if !args.is_distinct => {
                Some(ScalarValue::Int64(Some(i64::try_from(rows).ok()?)))
            }
            _ => None,
        }
    }
}

fn row_count(values: &[ArrayRef]) -> Result<i64> {
    let rows = values.first().map_or(0, |array| array.len());
    i64::try_from(rows).map_err(|_| DataFusionError::Execution(format!("{rows} rows")))
}

fn count_state(states: &[ArrayRef]) -> Result<&Int64Array> {
    match states.first().and_then(|state| state.as_primitive_opt()) {
        Some(counts) => Ok(counts),
        None => exec_err!("{COUNT_NAME}: the state is not one Int64 column"),
    }
}

/// The ungrouped [`CountRows`].
#[derive(Debug)]
struct RowCount(i64);

impl Accumulator for RowCount {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0 += row_count(values)?;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0 += count_state(states)?.values().iter().sum::<i64>();
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.0))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// The grouped [`CountRows`].
#[derive(Debug)]
struct RowCounts(Vec<i64>);

impl GroupsAccumulator for RowCounts {
    fn update_batch(
        &mut self,
        _values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.0.resize(total_num_groups, 0);
        check_groups(group_indices, total_num_groups)?;
        let counts = &mut self.0[..];
        match opt_filter {
            None => group_indices.iter().for_each(|&group| counts[group] += 1),
            Some(filter) => {
                for (&group, keep) in group_indices.iter().zip(filter.iter()) {
                    counts[group] += i64::from(keep == Some(true));
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from(emit_to.take_needed(&mut self.0))))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        let counts = count_state(values)?;
        if counts.len() != group_indices.len() {
            return exec_err!(
                "{COUNT_NAME}: {} states for {} group numbers",
                counts.len(),
                group_indices.len()
            );
        }
        self.0.resize(total_num_groups, 0);
        check_groups(group_indices, total_num_groups)?;
        for (&group, &count) in group_indices.iter().zip(counts.values().iter()) {
            self.0[group] += count;
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values.first().map_or(0, |array| array.len());
        let counts: Int64Array = match opt_filter {
            None => std::iter::repeat_n(1, rows).collect::<Vec<i64>>().into(),
            Some(filter) => filter
                .iter()
                .map(|keep| i64::from(keep == Some(true)))
                .collect::<Vec<i64>>()
                .into(),
        };
        Ok(vec![Arc::new(counts)])
    }

    fn size(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<i64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int16Array;
    use rand::{Rng, SeedableRng};

    /// The sum and count of the rows kept, one value at a time.
    fn naive(values: &[Option<i64>], filter: Option<&[Option<bool>]>) -> Slot {
        let mut count = 0;
        let mut sum = 0i128;
        for (row, value) in values.iter().enumerate() {
            let kept = filter.is_none_or(|filter| filter[row] == Some(true));
            if let (Some(value), true) = (value, kept) {
                count += 1;
                sum += *value as i128;
            }
        }
        Slot { sum, count }
    }

    #[test]
    fn masked_sums_equal_adding_each_kept_value() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..200 {
            let rows = rng.random_range(0..700);
            let null_share = [0.0, 0.01, 0.5, 0.99, 1.0][round % 5];
            let values: Vec<Option<i16>> = (0..rows)
                .map(|_| (!rng.random_bool(null_share)).then(|| rng.random()))
                .collect();
            let filter: Vec<Option<bool>> = (0..rows)
                .map(|_| match rng.random_range(0..10) {
                    0 => None,
                    n => Some(n % 2 == 0),
                })
                .collect();
            let array: ArrayRef = Arc::new(Int16Array::from(values.clone()));
            // Offsets too: a slice starts mid-word.
            let offset = rows.min(rng.random_range(0..70));
            let array = array.slice(offset, rows - offset);
            let wide: Vec<Option<i64>> =
                values[offset..].iter().map(|v| v.map(i64::from)).collect();
            assert_eq!(
                array_sum(array.as_ref()).unwrap(),
                naive(&wide, None),
                "round {round}"
            );
            // A FILTER never reaches this accumulator (DataFusion filters the batch first); its
            // sparse masks, as NULLs, exercise the word-by-word path.
            let filtered: Vec<Option<i16>> = (values.iter().zip(&filter))
                .map(|(value, keep)| value.filter(|_| *keep == Some(true)))
                .collect();
            let filtered: ArrayRef = Arc::new(Int16Array::from(filtered));
            assert_eq!(
                array_sum(filtered.slice(offset, rows - offset).as_ref()).unwrap(),
                naive(&wide, Some(&filter[offset..])),
                "round {round} filtered"
            );
        }
    }

    #[test]
    fn sixty_four_bit_blocks_are_exact_at_the_extremes() {
        let values = [i64::MAX, i64::MAX, i64::MIN, -1, i64::MAX];
        assert_eq!(
            Int64Type::block_sum(&values),
            values.iter().map(|&v| v as i128).sum::<i128>()
        );
        let values = [u64::MAX; 9];
        assert_eq!(UInt64Type::block_sum(&values), u64::MAX as i128 * 9);
        assert_eq!(
            Int8Type::block_sum(&[i8::MIN; 1000]),
            i8::MIN as i128 * 1000
        );
    }

    #[test]
    fn sixty_four_bit_blocks_equal_adding_each_value() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for round in 0..100 {
            let rows = rng.random_range(0..3000);
            // Whole range, and values near the extremes, where the halves carry.
            let signed: Vec<i64> = (0..rows)
                .map(|_| match round % 3 {
                    0 => rng.random(),
                    1 => i64::MIN + rng.random_range(0..4),
                    _ => i64::MAX - rng.random_range(0..4),
                })
                .collect();
            assert_eq!(
                Int64Type::block_sum(&signed),
                signed.iter().map(|&v| v as i128).sum::<i128>(),
                "round {round}"
            );
            let unsigned: Vec<u64> = signed.iter().map(|&v| v as u64).collect();
            assert_eq!(
                UInt64Type::block_sum(&unsigned),
                unsigned.iter().map(|&v| v as i128).sum::<i128>(),
                "round {round} unsigned"
            );
        }
    }

    #[test]
    fn results_take_datafusion_s_types_and_overflow_is_an_error() {
        let slot = |count, sum| Slot { sum, count };
        assert_eq!(
            Finish::SignedSum.value(slot(0, 0)).unwrap(),
            ScalarValue::Int64(None)
        );
        assert_eq!(
            Finish::Average.value(slot(4, 10)).unwrap(),
            ScalarValue::Float64(Some(2.5))
        );
        let too_big = i64::MAX as i128 + 1;
        let error = Finish::SignedSum.value(slot(2, too_big)).unwrap_err();
        assert!(
            error.to_string().contains("does not fit in Int64"),
            "{error}"
        );
        assert!(Finish::UnsignedSum.value(slot(1, -1)).is_err());
    }

    #[test]
    fn partial_states_merge_to_the_whole_answer() {
        let first: ArrayRef = Arc::new(Int16Array::from(vec![Some(1), None, Some(-3)]));
        let second: ArrayRef = Arc::new(Int16Array::from(vec![Some(4), Some(i16::MAX)]));
        let mut merged = WideAccumulator::new(Finish::Average, DataType::Int16);
        for batch in [first, second] {
            let mut partial = WideAccumulator::new(Finish::Average, DataType::Int16);
            partial.update_batch(&[batch]).unwrap();
            let states: Vec<ArrayRef> = (partial.state().unwrap().iter())
                .map(|state| state.to_array().unwrap())
                .collect();
            merged.merge_batch(&states).unwrap();
        }
        let expected = (1.0 - 3.0 + 4.0 + f64::from(i16::MAX)) / 4.0;
        assert_eq!(
            merged.evaluate().unwrap(),
            ScalarValue::Float64(Some(expected))
        );

        let mut sum = WideAccumulator::new(Finish::SignedSum, DataType::Int16);
        assert_eq!(sum.evaluate().unwrap(), ScalarValue::Int64(None));
        let values: ArrayRef = Arc::new(Int16Array::from(vec![Some(7), None]));
        sum.update_batch(&[values]).unwrap();
        assert_eq!(sum.evaluate().unwrap(), ScalarValue::Int64(Some(7)));
        let wrong: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        assert!(sum.update_batch(&[wrong]).is_err());
    }

    #[test]
    fn row_counts_count_null_rows_and_respect_filters() {
        let values: ArrayRef = Arc::new(Int16Array::from(vec![None, None, Some(1)]));
        let mut counts = RowCounts(Vec::new());
        let filter = BooleanArray::from(vec![Some(true), None, Some(true)]);
        counts
            .update_batch(std::slice::from_ref(&values), &[0, 0, 1], None, 2)
            .unwrap();
        counts
            .update_batch(std::slice::from_ref(&values), &[0, 0, 1], Some(&filter), 2)
            .unwrap();
        let counted = counts.evaluate(EmitTo::All).unwrap();
        assert_eq!(counted.as_primitive::<Int64Type>().values(), &[3, 2]);
        let mut total = RowCount(0);
        total.update_batch(&[values]).unwrap();
        assert_eq!(total.evaluate().unwrap(), ScalarValue::Int64(Some(3)));
    }
}
