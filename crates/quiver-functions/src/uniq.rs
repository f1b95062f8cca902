//! `uniq(x, ...)`: ClickHouse's approximate distinct count, as a grouped HyperLogLog
//! (`uniqCombined` is an alias).
//!
//! ```sql
//! SELECT number % 10 AS k, uniq(number) FROM numbers(1000) GROUP BY k;   -- 100 per group
//! ```
//!
//! Each group starts *exact*: it keeps the 64-bit hashes of its first [`SMALL_LIMIT`] distinct
//! values, so small groups report their true count (ClickHouse's `uniq` is likewise exact for
//! small sets). The group's first value past that limit promotes it to a dense HyperLogLog of
//! 2^[`PRECISION`] one-byte registers, estimated with Ertl's improved estimator ("New
//! cardinality estimation algorithms for HyperLogLog sketches", 2017), which needs no
//! empirical bias tables and is unbiased from tiny to huge cardinalities.
//!
//! **Error:** the relative standard error is 1.04 / sqrt(2^14) ≈ 0.81%, so 99% of estimates are
//! within ±2.1% and the unit tests check ≤ 2% at 10K, 100K and 1M distinct values. Sets of up to
//! 128 distinct values are exact (up to 64-bit hash collisions).
//!
//! **Allocation:** nothing per row. A batch hashes into a reused buffer; a group allocates its
//! exact set as it grows (at most 6 times) and its 16 KiB register array once, on promotion.
//! NULLs are skipped, as in ClickHouse; with several arguments a row counts when none is NULL.

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, BooleanArray, UInt64Array,
};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Field, FieldRef, Float32Type, Float64Type, Int16Type,
    Int32Type, Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

use crate::group_zero::GroupZero;

/// log2 of the number of HyperLogLog registers per group.
pub const PRECISION: u32 = 14;
const REGISTERS: usize = 1 << PRECISION;
/// Distinct hashes a group keeps exactly before it becomes a HyperLogLog.
pub const SMALL_LIMIT: usize = 128;

/// State encoding tags (the state column is Binary: tag byte + payload).
const TAG_SMALL: u8 = 0;
const TAG_DENSE: u8 = 1;

/// The `uniq` aggregate function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Uniq {
    signature: Signature,
    aliases: Vec<String>,
}

impl Default for Uniq {
    fn default() -> Self {
        Uniq {
            signature: Signature::variadic_any(Volatility::Immutable),
            aliases: vec![
                "uniqCombined".into(),
                "uniqcombined".into(),
                "uniqHLL12".into(),
            ],
        }
    }
}

impl AggregateUDFImpl for Uniq {
    fn name(&self) -> &str {
        "uniq"
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[uniq_sketch]", args.name),
            DataType::Binary,
            true,
        ))])
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(UniqAccumulator::default()))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(UniqGroupsAccumulator::default()))
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::UInt64(Some(0)))
    }
}

/// One group's sketch: exact hashes while small, registers once promoted.
#[derive(Default, Clone)]
struct Sketch {
    small: Vec<u64>,
    dense: Option<Box<[u8]>>,
}

impl fmt::Debug for Sketch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sketch")
            .field("small", &self.small.len())
            .field("dense", &self.dense.is_some())
            .finish()
    }
}

impl Sketch {
    #[inline]
    fn insert(&mut self, hash: u64) {
        if let Some(registers) = &mut self.dense {
            insert_register(registers, hash);
            return;
        }
        if self.small.contains(&hash) {
            return;
        }
        if self.small.len() < SMALL_LIMIT {
            self.small.push(hash);
            return;
        }
        let mut registers = vec![0u8; REGISTERS].into_boxed_slice();
        for &h in &self.small {
            insert_register(&mut registers, h);
        }
        insert_register(&mut registers, hash);
        self.small = Vec::new();
        self.dense = Some(registers);
    }

    fn merge_registers(&mut self, other: &[u8]) {
        if self.dense.is_none() {
            let mut registers = vec![0u8; REGISTERS].into_boxed_slice();
            for &h in &self.small {
                insert_register(&mut registers, h);
            }
            self.small = Vec::new();
            self.dense = Some(registers);
        }
        if let Some(registers) = &mut self.dense {
            for (mine, theirs) in registers.iter_mut().zip(other) {
                *mine = (*mine).max(*theirs);
            }
        }
    }

    fn merge_encoded(&mut self, bytes: &[u8]) -> Result<()> {
        match bytes.split_first() {
            None => Ok(()),
            Some((&TAG_SMALL, payload)) if payload.len() % 8 == 0 => {
                for chunk in payload.chunks_exact(8) {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(chunk);
                    self.insert(u64::from_le_bytes(word));
                }
                Ok(())
            }
            Some((&TAG_DENSE, payload)) if payload.len() == REGISTERS => {
                self.merge_registers(payload);
                Ok(())
            }
            Some((tag, payload)) => exec_err!(
                "uniq: corrupt sketch state (tag {tag}, {} payload bytes)",
                payload.len()
            ),
        }
    }

    /// Appends the encoded sketch to `out`, using `scratch` as the one reused buffer.
    fn encode(&self, out: &mut BinaryBuilder, scratch: &mut Vec<u8>) {
        scratch.clear();
        match &self.dense {
            Some(registers) => {
                scratch.push(TAG_DENSE);
                scratch.extend_from_slice(registers);
            }
            None => {
                scratch.push(TAG_SMALL);
                for h in &self.small {
                    scratch.extend_from_slice(&h.to_le_bytes());
                }
            }
        }
        out.append_value(&scratch[..]);
    }

    fn encoded_len(&self) -> usize {
        1 + match &self.dense {
            Some(registers) => registers.len(),
            None => self.small.len() * 8,
        }
    }

    fn estimate(&self) -> u64 {
        match &self.dense {
            None => self.small.len() as u64,
            Some(registers) => ertl_estimate(registers).round() as u64,
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Sketch>()
            + self.small.capacity() * 8
            + self.dense.as_ref().map_or(0, |d| d.len())
    }
}

#[inline]
fn insert_register(registers: &mut [u8], hash: u64) {
    let index = (hash >> (64 - PRECISION)) as usize;
    // The remaining 64 - PRECISION bits; the sentinel bit bounds the rank at 64 - PRECISION + 1.
    let rest = (hash << PRECISION) | (1u64 << (PRECISION - 1));
    let rank = rest.leading_zeros() as u8 + 1;
    if let Some(register) = registers.get_mut(index) {
        if *register < rank {
            *register = rank;
        }
    }
}

/// Ertl's improved raw estimator (Algorithm 6 of the 2017 paper).
fn ertl_estimate(registers: &[u8]) -> f64 {
    let q = (64 - PRECISION) as usize;
    let m = registers.len() as f64;
    let mut histogram = vec![0u32; q + 2];
    for &r in registers {
        if let Some(slot) = histogram.get_mut(usize::from(r).min(q + 1)) {
            *slot += 1;
        }
    }
    let mut z = m * tau(1.0 - f64::from(histogram[q + 1]) / m);
    for k in (1..=q).rev() {
        z = 0.5 * (z + f64::from(histogram[k]));
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    let alpha_inf = 1.0 / (2.0 * std::f64::consts::LN_2);
    alpha_inf * m * m / z
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}

/// MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit over the output,
/// so integer values (often consecutive) fill the registers uniformly.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ (bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(0x8764_5d3b_2a1f_0c49)
            .rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(0x8764_5d3b_2a1f_0c49)
            .rotate_left(29);
    }
    mix(h)
}

/// Hashes row `i` of every array into `hashes` (combining across arguments) and clears
/// `valid[i]` for rows with a NULL in any argument.
fn hash_arguments(values: &[ArrayRef], hashes: &mut Vec<u64>, valid: &mut Vec<bool>) -> Result<()> {
    let rows = values.first().map_or(0, |a| a.len());
    hashes.clear();
    hashes.resize(rows, 0);
    valid.clear();
    valid.resize(rows, true);
    for (position, array) in values.iter().enumerate() {
        if array.null_count() > 0 {
            for (i, ok) in valid.iter_mut().enumerate() {
                if array.is_null(i) {
                    *ok = false;
                }
            }
        }
        let seed = (position as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut combine = |i: usize, h: u64| {
            if let Some(slot) = hashes.get_mut(i) {
                *slot = if position == 0 {
                    h
                } else {
                    mix(*slot ^ h ^ seed)
                };
            }
        };
        macro_rules! ints {
            ($t:ty) => {
                for (i, v) in array.as_primitive::<$t>().values().iter().enumerate() {
                    combine(i, mix(*v as i64 as u64 ^ seed));
                }
            };
        }
        macro_rules! floats {
            ($t:ty) => {
                for (i, v) in array.as_primitive::<$t>().values().iter().enumerate() {
                    // -0.0 and 0.0 are one value.
                    let v = if *v == 0.0 { 0.0 } else { *v };
                    combine(i, mix(f64::from(v).to_bits() ^ seed));
                }
            };
        }
        match array.data_type() {
            DataType::Int8 => ints!(Int8Type),
            DataType::Int16 => ints!(Int16Type),
            DataType::Int32 => ints!(Int32Type),
            DataType::Int64 => ints!(Int64Type),
            DataType::UInt8 => ints!(UInt8Type),
            DataType::UInt16 => ints!(UInt16Type),
            DataType::UInt32 => ints!(UInt32Type),
            DataType::UInt64 => ints!(UInt64Type),
            DataType::Date32 => ints!(Date32Type),
            DataType::Date64 => ints!(Date64Type),
            DataType::Timestamp(TimeUnit::Second, _) => ints!(TimestampSecondType),
            DataType::Timestamp(TimeUnit::Millisecond, _) => ints!(TimestampMillisecondType),
            DataType::Timestamp(TimeUnit::Microsecond, _) => ints!(TimestampMicrosecondType),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ints!(TimestampNanosecondType),
            DataType::Float32 => floats!(Float32Type),
            DataType::Float64 => floats!(Float64Type),
            DataType::Utf8 => {
                for (i, v) in array.as_string::<i32>().iter().enumerate() {
                    combine(i, hash_bytes(v.unwrap_or_default().as_bytes()) ^ seed);
                }
            }
            DataType::LargeUtf8 => {
                for (i, v) in array.as_string::<i64>().iter().enumerate() {
                    combine(i, hash_bytes(v.unwrap_or_default().as_bytes()) ^ seed);
                }
            }
            DataType::Utf8View => {
                for (i, v) in array.as_string_view().iter().enumerate() {
                    combine(i, hash_bytes(v.unwrap_or_default().as_bytes()) ^ seed);
                }
            }
            other => {
                // Every other type through its row encoding: one allocation per batch.
                let converter = RowConverter::new(vec![SortField::new(other.clone())])?;
                let rows = converter.convert_columns(std::slice::from_ref(array))?;
                for (i, row) in rows.iter().enumerate() {
                    combine(i, hash_bytes(row.as_ref()) ^ seed);
                }
            }
        }
    }
    Ok(())
}

/// The grouped accumulator: one [`Sketch`] per group.
#[derive(Debug, Default)]
pub struct UniqGroupsAccumulator {
    sketches: Vec<Sketch>,
    hashes: Vec<u64>,
    valid: Vec<bool>,
}

impl GroupsAccumulator for UniqGroupsAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sketches.resize_with(total_num_groups, Sketch::default);
        hash_arguments(values, &mut self.hashes, &mut self.valid)?;
        if let Some(filter) = opt_filter {
            for (i, ok) in self.valid.iter_mut().enumerate() {
                if !filter.is_valid(i) || !filter.value(i) {
                    *ok = false;
                }
            }
        }
        for ((&group, &hash), &ok) in group_indices.iter().zip(&self.hashes).zip(&self.valid) {
            if ok {
                if let Some(sketch) = self.sketches.get_mut(group) {
                    sketch.insert(hash);
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sketches = emit_to.take_needed(&mut self.sketches);
        Ok(Arc::new(UInt64Array::from_iter_values(
            sketches.iter().map(Sketch::estimate),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let sketches = emit_to.take_needed(&mut self.sketches);
        // Exact capacity: no regrowth of a buffer that can reach 16 KiB per group.
        let bytes = sketches.iter().map(Sketch::encoded_len).sum();
        let mut builder = BinaryBuilder::with_capacity(sketches.len(), bytes);
        let mut scratch = Vec::new();
        for sketch in &sketches {
            sketch.encode(&mut builder, &mut scratch);
        }
        Ok(vec![Arc::new(builder.finish())])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.sketches.resize_with(total_num_groups, Sketch::default);
        let Some(states) = values.first() else {
            return exec_err!("uniq: merge without a state column");
        };
        let states: &BinaryArray = states.as_binary();
        for (i, &group) in group_indices.iter().enumerate() {
            if states.is_null(i) {
                continue;
            }
            if let Some(sketch) = self.sketches.get_mut(group) {
                sketch.merge_encoded(states.value(i))?;
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let mut hashes = Vec::new();
        let mut valid = Vec::new();
        hash_arguments(values, &mut hashes, &mut valid)?;
        let mut builder = BinaryBuilder::with_capacity(hashes.len(), hashes.len() * 9);
        for (i, (hash, ok)) in hashes.iter().zip(&valid).enumerate() {
            let kept = *ok && opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
            let mut bytes = [0u8; 9];
            bytes[1..].copy_from_slice(&hash.to_le_bytes());
            if kept {
                builder.append_value(bytes);
            } else {
                builder.append_value([TAG_SMALL]);
            }
        }
        Ok(vec![Arc::new(builder.finish())])
    }

    fn size(&self) -> usize {
        self.sketches.iter().map(Sketch::size).sum::<usize>()
            + self.hashes.capacity() * 8
            + self.valid.capacity()
    }
}

/// The ungrouped accumulator (`SELECT uniq(x) FROM t`): one sketch.
#[derive(Debug, Default)]
struct UniqAccumulator {
    inner: UniqGroupsAccumulator,
    zeros: GroupZero,
}

impl Accumulator for UniqAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.zeros.update(&mut self.inner, values)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let estimate = self.inner.sketches.first().map_or(0, Sketch::estimate);
        Ok(ScalarValue::UInt64(Some(estimate)))
    }

    fn size(&self) -> usize {
        self.inner.size() + self.zeros.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut builder = BinaryBuilder::new();
        match self.inner.sketches.first() {
            Some(sketch) => sketch.encode(&mut builder, &mut Vec::new()),
            None => builder.append_value([TAG_SMALL]),
        }
        let array = builder.finish();
        Ok(vec![ScalarValue::try_from_array(&array, 0)?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.zeros.merge(&mut self.inner, states)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate_of(range: std::ops::Range<u64>) -> u64 {
        let mut acc = UniqGroupsAccumulator::default();
        let values: ArrayRef = Arc::new(UInt64Array::from_iter_values(range.clone()));
        let groups = vec![0usize; values.len()];
        acc.update_batch(&[values], &groups, None, 1)
            .expect("update");
        let result = acc.evaluate(EmitTo::All).expect("evaluate");
        result.as_primitive::<UInt64Type>().value(0)
    }

    fn relative_error(estimate: u64, truth: u64) -> f64 {
        (estimate as f64 - truth as f64).abs() / truth as f64
    }

    #[test]
    fn small_sets_are_exact() {
        for n in [0u64, 1, 2, 50, 128] {
            assert_eq!(estimate_of(0..n), n);
        }
    }

    #[test]
    fn error_is_within_two_percent_up_to_one_million() {
        for truth in [1_000u64, 10_000, 100_000, 1_000_000] {
            let estimate = estimate_of(0..truth);
            let error = relative_error(estimate, truth);
            assert!(
                error <= 0.02,
                "{truth} distinct: estimate {estimate}, error {error}"
            );
        }
        // Different values, same count: the error bound is not an accident of one range.
        let estimate = estimate_of(7_000_000_000..7_001_000_000);
        assert!(
            relative_error(estimate, 1_000_000) <= 0.02,
            "estimate {estimate}"
        );
    }

    #[test]
    fn duplicates_do_not_count() {
        let mut acc = UniqGroupsAccumulator::default();
        let values: ArrayRef = Arc::new(UInt64Array::from_iter_values(
            (0..300_000).map(|i| i % 1000),
        ));
        let groups = vec![0usize; values.len()];
        acc.update_batch(&[values], &groups, None, 1)
            .expect("update");
        let result = acc.evaluate(EmitTo::All).expect("evaluate");
        let estimate = result.as_primitive::<UInt64Type>().value(0);
        assert!(
            relative_error(estimate, 1000) <= 0.02,
            "estimate {estimate}"
        );
    }

    #[test]
    fn merged_partials_match_one_pass() {
        let all: ArrayRef = Arc::new(UInt64Array::from_iter_values(0..200_000));
        let mut whole = UniqGroupsAccumulator::default();
        whole
            .update_batch(&[Arc::clone(&all)], &vec![0; 200_000], None, 1)
            .expect("update");
        let mut merged = UniqGroupsAccumulator::default();
        for part in 0..4 {
            let slice = all.slice(part * 50_000, 50_000);
            let mut partial = UniqGroupsAccumulator::default();
            partial
                .update_batch(&[slice], &vec![0; 50_000], None, 1)
                .expect("update");
            let state = partial.state(EmitTo::All).expect("state");
            merged.merge_batch(&state, &[0], 1).expect("merge");
        }
        let a = whole.evaluate(EmitTo::All).expect("evaluate");
        let b = merged.evaluate(EmitTo::All).expect("evaluate");
        assert_eq!(
            a.as_primitive::<UInt64Type>().value(0),
            b.as_primitive::<UInt64Type>().value(0)
        );
    }

    #[test]
    fn nulls_and_filtered_rows_are_skipped() {
        let values: ArrayRef = Arc::new(UInt64Array::from(vec![Some(1), None, Some(2), Some(3)]));
        let filter = BooleanArray::from(vec![true, true, true, false]);
        let mut acc = UniqGroupsAccumulator::default();
        acc.update_batch(&[values], &[0, 0, 1, 1], Some(&filter), 2)
            .expect("update");
        let result = acc.evaluate(EmitTo::All).expect("evaluate");
        let counts: Vec<u64> = result.as_primitive::<UInt64Type>().values().to_vec();
        assert_eq!(counts, vec![1, 1]);
    }
}
