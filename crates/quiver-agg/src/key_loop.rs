//! The per-row key loop of [`SmallKeyAggregateExec`](crate::exec::SmallKeyAggregateExec):
//! how keys map to slots ([`Layout`]), and the "sinks" that consume each row's slot in the
//! loop that computes it (the `ORDER BY … LIMIT` compaction, the fused count/sum pass), so a
//! batch is read once.

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::ArrowNativeTypeOp;
use arrow::datatypes::{
    DataType, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use datafusion::common::{internal_err, DataFusionError, Result};

use crate::direct::FusedSums;
use crate::exec::{GroupKey, PartialAccumulator, Spec, NO_GROUP};
use crate::remainder::{Remainder, RemainderSink};

/// How keys map to slots: mixed radix, one digit per key, the last key varying fastest.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) keys: Vec<GroupKey>,
    /// Slots per key: the range's width plus one for NULL.
    radix: Vec<usize>,
    strides: Vec<usize>,
    /// The reciprocal-multiply remainder of each `x % m` key.
    remainders: Vec<Option<Remainder>>,
    pub(crate) total: usize,
}

impl Layout {
    pub(crate) fn new(keys: Vec<GroupKey>) -> Result<Layout> {
        let radix: Vec<usize> = keys
            .iter()
            .map(|k| usize::try_from(k.range.width()).map(|w| w + 1))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| DataFusionError::Internal("small-key domain too large".into()))?;
        let mut strides = vec![1usize; keys.len()];
        let mut total = 1usize;
        for i in (0..keys.len()).rev() {
            strides[i] = total;
            total = total
                .checked_mul(radix[i])
                .ok_or_else(|| DataFusionError::Internal("small-key domain overflows".into()))?;
        }
        let remainders = keys
            .iter()
            .map(|k| match &k.modulo {
                None => Ok(None),
                Some((_, m)) => Remainder::new(*m).map(Some).ok_or_else(|| {
                    DataFusionError::Internal("small-key aggregation: modulo by zero".into())
                }),
            })
            .collect::<Result<_>>()?;
        if total >= NO_GROUP as usize {
            return internal_err!("small-key aggregation: {total} slots do not fit group numbers");
        }
        Ok(Layout {
            keys,
            radix,
            strides,
            remainders,
            total,
        })
    }

    /// Fills `slots` with the slot of every row of `batch`; `scratch` is a reused buffer.
    pub(crate) fn slots(
        &self,
        batch: &RecordBatch,
        slots: &mut Vec<usize>,
        scratch: &mut Vec<i64>,
    ) -> Result<()> {
        let rows = batch.num_rows();
        slots.clear();
        slots.resize(rows, 0);
        for (k, key) in self.keys.iter().enumerate() {
            let stride = self.strides[k];
            let min = key.range.min;
            let width = key.range.width();
            let null_slot = (self.radix[k] - 1) * stride;
            let mut out_of_range = false;
            // One loop per key shape and type so each compiles to straight-line code; the
            // range check is folded into a flag and reported once per batch.
            macro_rules! fill {
                ($values:expr, $nulls:expr, |$v:ident| $offset:expr) => {{
                    let values = $values;
                    match $nulls {
                        Some(nulls) => {
                            for (i, (slot, $v)) in slots.iter_mut().zip(values.iter()).enumerate() {
                                if nulls.is_null(i) {
                                    *slot += null_slot;
                                } else {
                                    let offset: u64 = $offset;
                                    out_of_range |= offset >= width;
                                    *slot += offset as usize * stride;
                                }
                            }
                        }
                        None => {
                            for (slot, $v) in slots.iter_mut().zip(values.iter()) {
                                let offset: u64 = $offset;
                                out_of_range |= offset >= width;
                                *slot += offset as usize * stride;
                            }
                        }
                    }
                }};
            }
            macro_rules! fill_typed {
                ($array:expr, $t:ty) => {{
                    let typed = $array.as_primitive::<$t>();
                    fill!(
                        typed.values(),
                        typed.nulls().filter(|n| n.null_count() > 0),
                        |v| { (*v as i64).wrapping_sub(min) as u64 }
                    )
                }};
            }
            match (&key.modulo, self.remainders[k]) {
                (Some((x, _)), Some(rem)) => {
                    // `x % m` from `x`: the remainders first, in one tight loop per divisor
                    // kind, then their slots.
                    let array = x.evaluate(batch)?.into_array(rows)?;
                    if array.data_type().is_unsigned_integer() {
                        let array = cast(&array, &DataType::UInt64)?;
                        rem.unsigned_into(array.as_primitive::<UInt64Type>().values(), scratch);
                    } else {
                        let array = cast(&array, &DataType::Int64)?;
                        rem.signed_into(array.as_primitive::<Int64Type>().values(), scratch);
                    }
                    let nulls = array.logical_nulls().filter(|n| n.null_count() > 0);
                    fill!(scratch.as_slice(), nulls, |r| r.wrapping_sub(min) as u64)
                }
                _ => {
                    let array = key.expr.evaluate(batch)?.into_array(rows)?;
                    match array.data_type() {
                        DataType::Int8 => fill_typed!(array, Int8Type),
                        DataType::Int16 => fill_typed!(array, Int16Type),
                        DataType::Int32 => fill_typed!(array, Int32Type),
                        DataType::Int64 => fill_typed!(array, Int64Type),
                        DataType::UInt8 => fill_typed!(array, UInt8Type),
                        DataType::UInt16 => fill_typed!(array, UInt16Type),
                        DataType::UInt32 => fill_typed!(array, UInt32Type),
                        // Values above i64::MAX wrap negative and fail the range check.
                        DataType::UInt64 => fill_typed!(array, UInt64Type),
                        _ => {
                            let as_int64 = cast(&array, &DataType::Int64)?;
                            fill_typed!(as_int64, Int64Type)
                        }
                    }
                }
            }
            if out_of_range {
                return Err(self.out_of_range(k));
            }
        }
        Ok(())
    }

    fn out_of_range(&self, k: usize) -> DataFusionError {
        match self.keys.get(k) {
            Some(key) => DataFusionError::Execution(format!(
                "small-key aggregation: a value of key {} is outside its proven range [{}, {}]",
                key.name, key.range.min, key.range.max
            )),
            None => DataFusionError::Internal(format!("small-key aggregation: no key {k}")),
        }
    }

    /// For a layout of one key: hands `sink` every row's `key − min` — wrapping,
    /// so a value outside the proven range gives an offset ≥ the range's width, which the caller
    /// checks — and returns true. With one key the offset is the slot. Returns false, having
    /// called nothing, when the layout has several keys or the key has a NULL in this batch.
    ///
    /// This lets a caller compute a row's slot and use it in the same loop (`x % m` included:
    /// the remainder is computed per row, see [`Remainder::for_each_unsigned`]) instead of
    /// writing the slots out and reading them back in another pass.
    #[inline(always)]
    fn for_each_offset(&self, batch: &RecordBatch, sink: &mut impl OffsetSink) -> Result<bool> {
        let ([key], [remainder]) = (self.keys.as_slice(), self.remainders.as_slice()) else {
            return Ok(false);
        };
        let rows = batch.num_rows();
        let min = key.range.min;
        macro_rules! each {
            ($array:expr, $t:ty) => {{
                for (i, v) in $array.as_primitive::<$t>().values().iter().enumerate() {
                    sink.row(i, (*v as i64).wrapping_sub(min) as u64)
                }
            }};
        }
        match (&key.modulo, remainder) {
            (Some((x, _)), Some(rem)) => {
                let array = x.evaluate(batch)?.into_array(rows)?;
                if array.logical_null_count() > 0 {
                    return Ok(false);
                }
                let mut offsets = Offsets { min, sink };
                if array.data_type().is_unsigned_integer() {
                    let array = cast(&array, &DataType::UInt64)?;
                    rem.for_each_unsigned(
                        array.as_primitive::<UInt64Type>().values(),
                        &mut offsets,
                    );
                } else {
                    let array = cast(&array, &DataType::Int64)?;
                    rem.for_each_signed(array.as_primitive::<Int64Type>().values(), &mut offsets);
                }
            }
            _ => {
                let array = key.expr.evaluate(batch)?.into_array(rows)?;
                if array.logical_null_count() > 0 {
                    return Ok(false);
                }
                match array.data_type() {
                    DataType::Int8 => each!(array, Int8Type),
                    DataType::Int16 => each!(array, Int16Type),
                    DataType::Int32 => each!(array, Int32Type),
                    DataType::Int64 => each!(array, Int64Type),
                    DataType::UInt8 => each!(array, UInt8Type),
                    DataType::UInt16 => each!(array, UInt16Type),
                    DataType::UInt32 => each!(array, UInt32Type),
                    // Values above i64::MAX wrap negative and fail the range check.
                    DataType::UInt64 => each!(array, UInt64Type),
                    _ => {
                        let as_int64 = cast(&array, &DataType::Int64)?;
                        each!(as_int64, Int64Type)
                    }
                }
            }
        }
        Ok(true)
    }

    /// Writes to the start of `slots` the slots of the rows of `batch` whose slot is in
    /// `keep = [from, from + span]` (every row when `keep` is `None`) and to the start of
    /// `selection` those rows' indices; returns how many rows were kept. Entries past that
    /// count are stale.
    ///
    /// This is the pushed-down top's filter (see [`TopSlots`]): with one key and no NULL it
    /// runs in the loop that computes the key, and writes only the kept rows — after the
    /// first batches of `ORDER BY k LIMIT 10` over 10,000 keys, a handful per batch.
    pub(crate) fn slots_kept(
        &self,
        batch: &RecordBatch,
        keep: Option<(usize, usize)>,
        slots: &mut Vec<usize>,
        selection: &mut Vec<u32>,
        scratch: &mut Vec<i64>,
    ) -> Result<usize> {
        let rows = batch.num_rows();
        let Some((from, span)) = keep else {
            self.slots(batch, slots, scratch)?;
            return Ok(rows);
        };
        // Only the first `kept` entries are read: the buffers keep their length between
        // batches, so they are not cleared per batch.
        if slots.len() < rows {
            slots.resize(rows, 0);
        }
        if selection.len() < rows {
            selection.resize(rows, 0);
        }
        if let Some(key) = self.keys.first() {
            let width = key.range.width();
            let mut compact = Compact {
                slots: slots.as_mut_slice(),
                selection: selection.as_mut_slice(),
                kept: 0,
                from,
                span,
                width,
                out_of_range: false,
            };
            if self.for_each_offset(batch, &mut compact)? {
                if compact.out_of_range {
                    return Err(self.out_of_range(0));
                }
                return Ok(compact.kept);
            }
        }
        self.slots(batch, slots, scratch)?;
        let mut kept = 0usize;
        for i in 0..rows {
            let Some(&slot) = slots.get(i) else { break };
            if let (Some(s), Some(r)) = (slots.get_mut(kept), selection.get_mut(kept)) {
                *s = slot;
                *r = i as u32;
            }
            kept += usize::from(slot.wrapping_sub(from) <= span);
        }
        Ok(kept)
    }

    /// The key columns for the given slots, in the keys' output types.
    pub(crate) fn key_columns(&self, slots: &[usize], schema: &SchemaRef) -> Result<Vec<ArrayRef>> {
        self.keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let values: Int64Array = slots
                    .iter()
                    .map(|slot| {
                        let digit = (slot / self.strides[k]) % self.radix[k];
                        (digit + 1 < self.radix[k]).then(|| key.range.min + digit as i64)
                    })
                    .collect();
                let data_type = schema.field(k).data_type();
                Ok(cast(&values, data_type)?)
            })
            .collect()
    }
}

/// Per-row work fused into the key loop of [`Layout::for_each_offset`].
///
/// A trait rather than a closure: the implementations mark `row` `#[inline(always)]`, so it is
/// compiled into each of that function's per-type loops. A closure called from that many
/// loops is left out of line by LLVM, which costs a call per row (measured: over half of
/// `GROUP BY number % 10000` went into such calls).
trait OffsetSink {
    /// Row `row`'s key offset (`key − min`, wrapping).
    fn row(&mut self, row: usize, offset: u64);
}

/// Turns the remainders of an `x % m` key into offsets.
struct Offsets<'a, S> {
    min: i64,
    sink: &'a mut S,
}

impl<S: OffsetSink> RemainderSink for Offsets<'_, S> {
    #[inline(always)]
    fn remainder(&mut self, row: usize, remainder: i64) {
        self.sink.row(row, remainder.wrapping_sub(self.min) as u64)
    }
}

/// The top filter's compaction (see [`Layout::slots_kept`]): every row is written at `kept`,
/// which only advances past rows to keep, so there is no branch on the filter and, with
/// `kept ≤ row`, every write is in bounds.
struct Compact<'a> {
    slots: &'a mut [usize],
    selection: &'a mut [u32],
    kept: usize,
    from: usize,
    span: usize,
    width: u64,
    out_of_range: bool,
}

impl OffsetSink for Compact<'_> {
    #[inline(always)]
    fn row(&mut self, row: usize, offset: u64) {
        self.out_of_range |= offset >= self.width;
        let slot = offset as usize;
        if let (Some(s), Some(r)) = (
            self.slots.get_mut(self.kept),
            self.selection.get_mut(self.kept),
        ) {
            *s = slot;
            *r = row as u32;
        }
        self.kept += usize::from(slot.wrapping_sub(self.from) <= self.span);
    }
}

/// The key loop of [`fused_update`]: counts each row in its slot, adds its value to the fused
/// sum when `SUM`, and writes its slot when `WRITE` (other kernels need it). The flags are
/// constants so that each combination compiles to a loop without those branches.
struct Fused<'a, T, const SUM: bool, const WRITE: bool> {
    rows_of_slot: &'a mut [u64],
    sums: &'a mut [T],
    values: &'a [T],
    slots: &'a mut [usize],
    /// The last slot (the NULL slot), where a value outside the proven range is counted
    /// before the batch fails: the loop neither indexes out of bounds nor branches on it.
    last: u64,
    width: u64,
    out_of_range: bool,
}

impl<T: ArrowNativeTypeOp, const SUM: bool, const WRITE: bool> OffsetSink
    for Fused<'_, T, SUM, WRITE>
{
    #[inline(always)]
    fn row(&mut self, row: usize, offset: u64) {
        self.out_of_range |= offset >= self.width;
        let slot = offset.min(self.last) as usize;
        if let Some(count) = self.rows_of_slot.get_mut(slot) {
            *count += 1;
        }
        if SUM {
            if let (Some(sum), Some(&value)) = (self.sums.get_mut(slot), self.values.get(row)) {
                *sum = sum.add_wrapping(value);
            }
        }
        if WRITE {
            if let Some(s) = self.slots.get_mut(row) {
                *s = slot;
            }
        }
    }
}

/// One pass over `batch` for a one-key layout whose aggregates all have direct kernels: the
/// loop that computes each row's slot from its key also counts the row and, for the first
/// `sum`/`avg` whose argument has no NULL in the batch, adds its value. Any other aggregate
/// with work to do gets the slots written in that loop and runs its kernel after. A `u8` key
/// with `count(*), avg(v)` thus reads each key byte and each value once and writes nothing
/// per row but the two slot arrays.
///
/// Returns false, having changed nothing, when the layout has several keys or the key has a
/// NULL in this batch; the caller then takes the general path.
pub(crate) fn fused_update(
    spec: &Spec,
    batch: &RecordBatch,
    rows_of_slot: &mut [u64],
    accumulators: &mut [PartialAccumulator],
    slots: &mut Vec<usize>,
) -> Result<bool> {
    let layout = &spec.layout;
    let Some(key) = layout.keys.first().filter(|_| layout.keys.len() == 1) else {
        return Ok(false);
    };
    let width = key.range.width();
    let rows = batch.num_rows();
    let mut arguments = Vec::with_capacity(accumulators.len());
    for (aggregate, accumulator) in spec.aggregates.iter().zip(accumulators.iter()) {
        let PartialAccumulator::Direct(direct) = accumulator else {
            return Ok(false);
        };
        arguments.push(match aggregate.expressions().first() {
            Some(e) if direct.needs_argument() => Some(e.evaluate(batch)?.into_array(rows)?),
            _ => None,
        });
    }
    // The first sum/avg without NULLs is added in the key loop; the rest need the slots.
    let mut fused_index = None;
    let mut others = false;
    for (i, (accumulator, argument)) in accumulators.iter_mut().zip(&arguments).enumerate() {
        if let PartialAccumulator::Direct(direct) = accumulator {
            let fusable = argument
                .as_ref()
                .is_some_and(|a| direct.fused_sums(a).is_some());
            if fusable && fused_index.is_none() {
                fused_index = Some(i);
            } else if direct.needs_update(argument.as_ref()) {
                others = true;
            }
        }
    }
    slots.clear();
    if others {
        slots.resize(rows, 0);
    }
    let target = match fused_index {
        Some(i) => match (accumulators.get_mut(i), arguments.get(i)) {
            (Some(PartialAccumulator::Direct(direct)), Some(Some(argument))) => {
                direct.fused_sums(argument)
            }
            _ => None,
        },
        None => None,
    };
    let outcome = match target {
        None => fused_pass::<u64>(layout, batch, width, rows_of_slot, None, slots, others)?,
        Some(FusedSums::Int64(sums, values)) => fused_pass(
            layout,
            batch,
            width,
            rows_of_slot,
            Some((sums, values)),
            slots,
            others,
        )?,
        Some(FusedSums::UInt64(sums, values)) => fused_pass(
            layout,
            batch,
            width,
            rows_of_slot,
            Some((sums, values)),
            slots,
            others,
        )?,
        Some(FusedSums::Float64(sums, values)) => fused_pass(
            layout,
            batch,
            width,
            rows_of_slot,
            Some((sums, values)),
            slots,
            others,
        )?,
    };
    match outcome {
        FusedOutcome::KeyHasNulls => return Ok(false),
        FusedOutcome::OutOfRange => return Err(layout.out_of_range(0)),
        FusedOutcome::Done => {}
    }
    if others {
        for (i, (accumulator, argument)) in accumulators.iter_mut().zip(&arguments).enumerate() {
            if let (PartialAccumulator::Direct(direct), false) =
                (accumulator, fused_index == Some(i))
            {
                if direct.needs_update(argument.as_ref()) {
                    direct.update(argument.as_ref(), slots)?;
                }
            }
        }
    }
    Ok(true)
}

enum FusedOutcome {
    Done,
    KeyHasNulls,
    OutOfRange,
}

/// The key loop of [`fused_update`], for sums of native type `T`.
fn fused_pass<T: ArrowNativeTypeOp>(
    layout: &Layout,
    batch: &RecordBatch,
    width: u64,
    rows_of_slot: &mut [u64],
    sums: Option<(&mut [T], &[T])>,
    slots: &mut [usize],
    write_slots: bool,
) -> Result<FusedOutcome> {
    fn run<T: ArrowNativeTypeOp, const SUM: bool, const WRITE: bool>(
        layout: &Layout,
        batch: &RecordBatch,
        mut fused: Fused<'_, T, SUM, WRITE>,
    ) -> Result<FusedOutcome> {
        let done = layout.for_each_offset(batch, &mut fused)?;
        Ok(match (done, fused.out_of_range) {
            (false, _) => FusedOutcome::KeyHasNulls,
            (true, true) => FusedOutcome::OutOfRange,
            (true, false) => FusedOutcome::Done,
        })
    }
    let last = rows_of_slot.len().saturating_sub(1) as u64;
    let (sum, (sums, values)): (bool, (&mut [T], &[T])) = match sums {
        Some(pair) => (true, pair),
        None => (false, (&mut [], &[])),
    };
    macro_rules! go {
        ($sum:literal, $write:literal) => {
            run::<T, $sum, $write>(
                layout,
                batch,
                Fused {
                    rows_of_slot,
                    sums,
                    values,
                    slots,
                    last,
                    width,
                    out_of_range: false,
                },
            )
        };
    }
    match (sum, write_slots) {
        (false, false) => go!(false, false),
        (false, true) => go!(false, true),
        (true, false) => go!(true, false),
        (true, true) => go!(true, true),
    }
}
