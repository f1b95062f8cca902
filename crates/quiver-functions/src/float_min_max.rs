//! `min` and `max` whose grouped float accumulators order values as DataFusion's comparisons do.
//!
//! DataFusion orders floats totally: NaN above every number (a NaN with its sign bit set below
//! every number) and ±inf at the ends of the numbers, as `ORDER BY`, `WHERE f > x` and an
//! ungrouped `max(f)` all agree. DataFusion 55's *grouped* MIN/MAX of floats do not
//! (apache/datafusion#24432): they start each group at `f64::MAX` / `f64::MIN` and compare with
//! `partial_cmp`, so a group holding only `+inf` had `min` 1.7976931348623157e308, and a NaN
//! won or lost depending on the order rows arrived in — different answers for the same data
//! under `GROUP BY` and without it, or with another number of threads.
//!
//! [`TotalOrderMinMax`] is DataFusion's `min`/`max` with every method delegated, except that
//! the groups accumulator for `Float16`/`Float32`/`Float64` compares by IEEE 754 total order
//! and starts each group at the ordering's far end. It is registered under the same names, so
//! SQL, quiver's GROUP BY operators (which take the groups accumulator) and DataFusion's
//! rules (which ask the function for its descending-ness and statistics) all get it.

use std::hash::{Hash, Hasher};

use arrow::datatypes::{DataType, FieldRef, Float16Type, Float32Type, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF,
    SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::prim_op::PrimitiveGroupsAccumulator;
use half::f16;

/// DataFusion's `min` or `max`, with total-order grouped float accumulators.
#[derive(Debug)]
pub struct TotalOrderMinMax {
    inner: std::sync::Arc<AggregateUDF>,
    max: bool,
}

impl TotalOrderMinMax {
    /// `min`.
    pub fn min() -> TotalOrderMinMax {
        TotalOrderMinMax {
            inner: min_udaf(),
            max: false,
        }
    }

    /// `max`.
    pub fn max() -> TotalOrderMinMax {
        TotalOrderMinMax {
            inner: max_udaf(),
            max: true,
        }
    }

    fn float_groups(&self, data_type: &DataType) -> Option<Box<dyn GroupsAccumulator>> {
        // The start of each group is the far end of the total order, so that every value,
        // NaN included, replaces it; a group that sees no value is NULL all the same.
        Some(match (data_type, self.max) {
            (DataType::Float64, true) => Box::new(
                PrimitiveGroupsAccumulator::<Float64Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_gt() {
                        *cur = new
                    }
                })
                .with_starting_value(f64::from_bits(u64::MAX)),
            ),
            (DataType::Float64, false) => Box::new(
                PrimitiveGroupsAccumulator::<Float64Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_lt() {
                        *cur = new
                    }
                })
                .with_starting_value(f64::from_bits(u64::MAX >> 1)),
            ),
            (DataType::Float32, true) => Box::new(
                PrimitiveGroupsAccumulator::<Float32Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_gt() {
                        *cur = new
                    }
                })
                .with_starting_value(f32::from_bits(u32::MAX)),
            ),
            (DataType::Float32, false) => Box::new(
                PrimitiveGroupsAccumulator::<Float32Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_lt() {
                        *cur = new
                    }
                })
                .with_starting_value(f32::from_bits(u32::MAX >> 1)),
            ),
            (DataType::Float16, true) => Box::new(
                PrimitiveGroupsAccumulator::<Float16Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_gt() {
                        *cur = new
                    }
                })
                .with_starting_value(f16::from_bits(u16::MAX)),
            ),
            (DataType::Float16, false) => Box::new(
                PrimitiveGroupsAccumulator::<Float16Type, _>::new(data_type, |cur, new| {
                    if new.total_cmp(cur).is_lt() {
                        *cur = new
                    }
                })
                .with_starting_value(f16::from_bits(u16::MAX >> 1)),
            ),
            _ => return None,
        })
    }
}

impl PartialEq for TotalOrderMinMax {
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max
    }
}

impl Eq for TotalOrderMinMax {}

impl Hash for TotalOrderMinMax {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.max.hash(state)
    }
}

impl AggregateUDFImpl for TotalOrderMinMax {
    fn name(&self) -> &str {
        self.inner.inner().name()
    }

    fn signature(&self) -> &Signature {
        self.inner.inner().signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.inner().accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.inner().state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.inner().groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match self.float_groups(args.return_field.data_type()) {
            Some(accumulator) => Ok(accumulator),
            None => self.inner.inner().create_groups_accumulator(args),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.inner().create_sliding_accumulator(args)
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        // min and max are their own reverse: keep this wrapper, not DataFusion's.
        match self.inner.inner().reverse_expr() {
            ReversedUDAF::Identical => ReversedUDAF::Identical,
            ReversedUDAF::NotSupported => ReversedUDAF::NotSupported,
            ReversedUDAF::Reversed(_) => ReversedUDAF::Identical,
        }
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }

    fn is_descending(&self) -> Option<bool> {
        self.inner.inner().is_descending()
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.inner().value_from_stats(statistics_args)
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
}
