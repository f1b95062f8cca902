//! Direct kernels for the aggregates small-key queries use most — `count(*)` (DataFusion's
//! `count(<literal>)` or quiver's `count_rows`), `count(x)`,
//! `sum(x)` and `avg(x)` over 64-bit columns — that add each row straight into a slot array.
//!
//! DataFusion's `GroupsAccumulator`s for these are generic over filters and NULLs and keep a
//! separate "seen" bitmap, and `count(*)` first materialises its literal argument as an array
//! per batch; on a direct-indexed domain that bookkeeping costs more than the additions. These
//! kernels are used only in the partial phase of [`crate::exec`] and only where they are exact
//! replicas: no `FILTER`, no `DISTINCT`, and argument and state types checked against the
//! aggregate's own `state_fields`. They emit the very state arrays DataFusion's accumulators
//! would (same types, same NULL where a group saw no value, the same additions in the same
//! row order, wrapping for integers as DataFusion's `sum` does), so the merge and the final
//! evaluation stay DataFusion's. Anything else runs through the generic `GroupsAccumulator`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, PrimitiveArray, UInt64Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Float64Type, Int64Type, Schema, UInt64Type,
};
use datafusion::common::{internal_err, Result};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::PhysicalExpr;
use quiver_functions::widening;

/// Which direct kernel an aggregate can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirectKind {
    /// `count(<non-NULL literal>)`, i.e. `count(*)` / `count()`: rows, nothing evaluated.
    CountRows,
    /// `count(x)`: non-NULL values.
    CountValues,
    SumInt64,
    SumUInt64,
    SumFloat64,
    AvgFloat64,
}

impl DirectKind {
    /// The kernel for `aggregate` over rows of `schema`, if one replicates it exactly.
    pub(crate) fn of(
        aggregate: &AggregateFunctionExpr,
        has_filter: bool,
        schema: &Schema,
    ) -> Option<DirectKind> {
        if has_filter || aggregate.is_distinct() || !aggregate.order_bys().is_empty() {
            return None;
        }
        let [argument] = <[Arc<dyn PhysicalExpr>; 1]>::try_from(aggregate.expressions()).ok()?;
        let input = argument.data_type(schema).ok()?;
        let states: Vec<DataType> = aggregate
            .state_fields()
            .ok()?
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let output = aggregate.field().data_type().clone();
        let kind = match aggregate.fun().name() {
            "count" => {
                let rows_only = argument
                    .downcast_ref::<Literal>()
                    .is_some_and(|l| !l.value().is_null());
                if rows_only {
                    DirectKind::CountRows
                } else {
                    DirectKind::CountValues
                }
            }
            // quiver's `count(*)` (see quiver-core's `WidenAggregates`): rows, whatever the column.
            widening::COUNT_NAME => DirectKind::CountRows,
            "sum" if input == output => match input {
                DataType::Int64 => DirectKind::SumInt64,
                DataType::UInt64 => DirectKind::SumUInt64,
                DataType::Float64 => DirectKind::SumFloat64,
                _ => return None,
            },
            "avg" if input == DataType::Float64 && output == DataType::Float64 => {
                DirectKind::AvgFloat64
            }
            _ => return None,
        };
        (states == kind.state_types()).then_some(kind)
    }

    fn state_types(self) -> Vec<DataType> {
        match self {
            DirectKind::CountRows | DirectKind::CountValues => vec![DataType::Int64],
            DirectKind::SumInt64 => vec![DataType::Int64],
            DirectKind::SumUInt64 => vec![DataType::UInt64],
            DirectKind::SumFloat64 => vec![DataType::Float64],
            DirectKind::AvgFloat64 => vec![DataType::UInt64, DataType::Float64],
        }
    }

    fn needs_argument(self) -> bool {
        self != DirectKind::CountRows
    }
}

/// Per-slot sums in the argument's native type.
#[derive(Debug)]
enum Sums {
    None,
    Int64(Vec<i64>),
    UInt64(Vec<u64>),
    Float64(Vec<f64>),
}

/// A `sum`/`avg` kernel's slot array and a batch's argument values, for a caller that adds
/// them in its own per-row loop ([`DirectAccumulator::fused_sums`]).
pub(crate) enum FusedSums<'a> {
    Int64(&'a mut [i64], &'a [i64]),
    UInt64(&'a mut [u64], &'a [u64]),
    Float64(&'a mut [f64], &'a [f64]),
}

/// One aggregate's partial state over every slot of the domain.
///
/// The rows of each slot are counted once by the caller for all aggregates (`rows`, see
/// [`DirectAccumulator::state`]); a kernel only records the rows it did *not* count because
/// their argument was NULL, so a batch without NULLs costs `count` nothing and `sum`/`avg` one
/// addition per row.
#[derive(Debug)]
pub(crate) struct DirectAccumulator {
    kind: DirectKind,
    /// Rows per slot whose argument was NULL; empty until the first NULL.
    skipped: Vec<u64>,
    sums: Sums,
    /// Slots in the domain.
    slots: usize,
}

impl DirectAccumulator {
    pub(crate) fn new(kind: DirectKind, slots: usize) -> DirectAccumulator {
        let sums = match kind {
            DirectKind::CountRows | DirectKind::CountValues => Sums::None,
            DirectKind::SumInt64 => Sums::Int64(vec![0; slots]),
            DirectKind::SumUInt64 => Sums::UInt64(vec![0; slots]),
            DirectKind::SumFloat64 | DirectKind::AvgFloat64 => Sums::Float64(vec![0.0; slots]),
        };
        DirectAccumulator {
            kind,
            skipped: Vec::new(),
            sums,
            slots,
        }
    }

    /// Whether the kernel needs its argument evaluated.
    pub(crate) fn needs_argument(&self) -> bool {
        self.kind.needs_argument()
    }

    /// Whether [`DirectAccumulator::update`] has anything to do for a batch with this
    /// argument: `count(*)` never (the caller counts rows), `count(x)` only for NULLs.
    pub(crate) fn needs_update(&self, argument: Option<&ArrayRef>) -> bool {
        match (self.kind, argument) {
            (DirectKind::CountRows, _) | (_, None) => false,
            (DirectKind::CountValues, Some(argument)) => argument.logical_null_count() > 0,
            _ => true,
        }
    }

    /// The slot sums and the argument's values when this is a `sum`/`avg` whose argument has
    /// no NULL in the batch, so adding `values[i]` to `sums[slot of row i]` for every row is
    /// the whole update.
    pub(crate) fn fused_sums<'a>(&'a mut self, argument: &'a ArrayRef) -> Option<FusedSums<'a>> {
        if argument.logical_null_count() > 0 {
            return None;
        }
        match (&mut self.sums, argument.data_type()) {
            (Sums::Int64(sums), DataType::Int64) => Some(FusedSums::Int64(
                sums,
                argument.as_primitive::<Int64Type>().values(),
            )),
            (Sums::UInt64(sums), DataType::UInt64) => Some(FusedSums::UInt64(
                sums,
                argument.as_primitive::<UInt64Type>().values(),
            )),
            (Sums::Float64(sums), DataType::Float64) => Some(FusedSums::Float64(
                sums,
                argument.as_primitive::<Float64Type>().values(),
            )),
            _ => None,
        }
    }

    /// Adds rows whose slots are `slots` (every one below the domain size, which
    /// `Layout::slots` checked); `argument` is the evaluated argument when
    /// [`DirectKind::needs_argument`]. The caller counts the rows themselves.
    pub(crate) fn update(&mut self, argument: Option<&ArrayRef>, slots: &[usize]) -> Result<()> {
        let Some(argument) = argument.filter(|_| self.kind.needs_argument()) else {
            return Ok(());
        };
        if argument.len() != slots.len() {
            return internal_err!("small-key aggregation: argument and slots differ in length");
        }
        let nulls = argument.logical_nulls().filter(|n| n.null_count() > 0);
        if let Some(nulls) = &nulls {
            if self.skipped.is_empty() {
                self.skipped = vec![0; self.slots];
            }
            for (i, &slot) in slots.iter().enumerate() {
                if nulls.is_null(i) {
                    if let Some(skipped) = self.skipped.get_mut(slot) {
                        *skipped += 1;
                    }
                }
            }
        }
        let nulls = nulls.as_ref();
        match (&mut self.sums, argument.data_type()) {
            (Sums::None, _) => {}
            (Sums::Int64(sums), DataType::Int64) => {
                add_values::<Int64Type>(sums, slots, argument, nulls)
            }
            (Sums::UInt64(sums), DataType::UInt64) => {
                add_values::<UInt64Type>(sums, slots, argument, nulls)
            }
            (Sums::Float64(sums), DataType::Float64) => {
                add_values::<Float64Type>(sums, slots, argument, nulls)
            }
            (_, other) => {
                return internal_err!(
                    "small-key aggregation: {:?} kernel given a {other} argument",
                    self.kind
                )
            }
        }
        Ok(())
    }

    /// The state arrays DataFusion's accumulator would return for `state(EmitTo::All)`, for
    /// groups numbered as DataFusion numbers them: group `g` is slot `slot_of_group[g]`.
    /// `rows` holds the rows of every slot, counted by the caller.
    pub(crate) fn state(self, slot_of_group: &[usize], rows: &[u64]) -> Result<Vec<ArrayRef>> {
        let counts: Vec<u64> = slot_of_group
            .iter()
            .map(|&slot| {
                let all = rows.get(slot).copied().unwrap_or(0);
                let skipped = self.skipped.get(slot).copied().unwrap_or(0);
                all.saturating_sub(skipped)
            })
            .collect();
        let seen = NullBuffer::new(BooleanBuffer::collect_bool(counts.len(), |g| counts[g] > 0));
        Ok(match &self.sums {
            Sums::None => {
                let counts: Int64Array = counts.iter().map(|&c| c as i64).collect();
                vec![Arc::new(counts)]
            }
            Sums::Int64(sums) => vec![gather::<Int64Type>(sums, slot_of_group, seen)],
            Sums::UInt64(sums) => vec![gather::<UInt64Type>(sums, slot_of_group, seen)],
            Sums::Float64(sums) if self.kind == DirectKind::AvgFloat64 => vec![
                Arc::new(UInt64Array::new(counts.into(), Some(seen.clone()))),
                gather::<Float64Type>(sums, slot_of_group, seen),
            ],
            Sums::Float64(sums) => vec![gather::<Float64Type>(sums, slot_of_group, seen)],
        })
    }
}

/// `values[slot_of_group[g]]` for every group `g`, NULL where the group saw no value.
fn gather<T: ArrowPrimitiveType>(
    values: &[T::Native],
    slot_of_group: &[usize],
    nulls: NullBuffer,
) -> ArrayRef {
    let gathered: Vec<T::Native> = slot_of_group
        .iter()
        .map(|&slot| values.get(slot).copied().unwrap_or_default())
        .collect();
    Arc::new(PrimitiveArray::<T>::new(gathered.into(), Some(nulls)))
}

fn add_values<T: ArrowPrimitiveType>(
    sums: &mut [T::Native],
    slots: &[usize],
    argument: &ArrayRef,
    nulls: Option<&NullBuffer>,
) {
    let values = argument.as_primitive::<T>().values();
    let mut add = |slot: usize, value: T::Native| {
        if let Some(sum) = sums.get_mut(slot) {
            *sum = sum.add_wrapping(value);
        }
    };
    match nulls {
        None => {
            for (&slot, &value) in slots.iter().zip(values.iter()) {
                add(slot, value);
            }
        }
        Some(nulls) => {
            for (i, (&slot, &value)) in slots.iter().zip(values.iter()).enumerate() {
                if nulls.is_valid(i) {
                    add(slot, value);
                }
            }
        }
    }
}
