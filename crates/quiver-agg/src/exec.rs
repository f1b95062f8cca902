//! [`SmallKeyAggregateExec`]: GROUP BY over a small, dense key domain with direct-indexed
//! arrays of [`GroupsAccumulator`] states instead of a hash table.
//!
//! **Partial phase.** Each input partition runs in its own task and owns one accumulator per
//! aggregate, sized to every slot of the domain. A row's group index is computed, not looked
//! up: `slot = Σ (key_k − min_k) · stride_k`, each key having one extra slot for NULL. The task
//! records which slots it touched and the lowest and highest one.
//!
//! **Merge phase.** The touched range `[lo, hi)` (the union over partials) is cut into one slice
//! per thread, as ClickHouse 25.11 does for its FixedHashMap merge. Each merge task creates its
//! own accumulators and merges the matching slice of every partial's state arrays
//! (`state(EmitTo::All)` sliced zero-copy) — no locks, no shared mutable state, and
//! variable-size states (`uniq`, `groupArray`) are allocated by the thread that merges them.
//! Each task then evaluates its slice and emits only the slots some row touched, in key order.
//!
//! The node replaces a Final(Partial) or Single aggregate pair, so its output schema and
//! partition count are the replaced node's; output partition `i` returns slices `i, i + P, …`.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{cast, take, take_record_batch};
use arrow::datatypes::ArrowNativeTypeOp;
use arrow::datatypes::{
    DataType, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::StreamExt;

use crate::bounds::KeyRange;
use crate::direct::{DirectAccumulator, DirectKind, FusedSums};
use crate::remainder::{Remainder, RemainderSink};

/// One GROUP BY key with its proven range.
#[derive(Debug, Clone)]
pub struct GroupKey {
    /// The key expression, over the input's rows.
    pub expr: Arc<dyn PhysicalExpr>,
    /// The output column name.
    pub name: String,
    /// The proven range of non-NULL values.
    pub range: KeyRange,
    /// `Some((x, m))` when the key is `x % m` over integers: computed on `x` directly.
    pub modulo: Option<(Arc<dyn PhysicalExpr>, i64)>,
}

/// How keys map to slots: mixed radix, one digit per key, the last key varying fastest.
#[derive(Debug, Clone)]
struct Layout {
    keys: Vec<GroupKey>,
    /// Slots per key: the range's width plus one for NULL.
    radix: Vec<usize>,
    strides: Vec<usize>,
    /// The reciprocal-multiply remainder of each `x % m` key.
    remainders: Vec<Option<Remainder>>,
    total: usize,
}

impl Layout {
    fn new(keys: Vec<GroupKey>) -> Result<Layout> {
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
    fn slots(
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
    fn slots_kept(
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
    fn key_columns(&self, slots: &[usize], schema: &SchemaRef) -> Result<Vec<ArrayRef>> {
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

/// `ORDER BY <keys> LIMIT fetch` over the operator, pushed into it: only the first `fetch`
/// groups in slot order (or the last, `descending`) can reach the output.
///
/// Slot order is the keys' lexicographic order with each key's NULL last (the NULL slot is the
/// highest digit), so it matches `ORDER BY k1, k2 ... ASC NULLS LAST`, and reversed,
/// `DESC NULLS FIRST`. Each partition keeps a *bound*, shared by all partitions: once some
/// partition has seen `fetch` distinct slots whose rank (position in that order) is at most
/// `b`, no group ranked above `b` can be in the answer, so rows of such groups are skipped
/// before any aggregate sees them, and groups ranked above the final bound are not emitted
/// (their states may miss rows). Every row of a group ranked at or below the final bound was
/// aggregated, because the bound only decreases. This is the top-K short cut ClickHouse takes
/// for `GROUP BY k ORDER BY k LIMIT n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopSlots {
    /// How many groups the parent keeps (at least 1).
    pub fetch: usize,
    /// The parent wants the highest slots first (every key `DESC NULLS FIRST`).
    pub descending: bool,
}

impl TopSlots {
    /// The slots ranked at most `limit`, as `(from, span)`: slots `from..=from + span`.
    fn kept(&self, limit: usize, total: usize) -> (usize, usize) {
        if self.descending {
            (total - 1 - limit, limit)
        } else {
            (0, limit)
        }
    }

    /// The rank of the `fetch`-th touched slot in rank order, if that many were touched;
    /// `rows` holds each slot's rows (a slot is touched when it has one).
    fn bound(&self, rows: &[u64]) -> Option<usize> {
        let mut remaining = self.fetch;
        let mut find = |(rank, &count): (usize, &u64)| {
            if count != 0 {
                remaining -= 1;
            }
            (remaining == 0).then_some(rank)
        };
        if self.descending {
            rows.iter().rev().enumerate().find_map(&mut find)
        } else {
            rows.iter().enumerate().find_map(&mut find)
        }
    }
}

/// What every task needs: the layout and the aggregates.
#[derive(Debug, Clone)]
struct Spec {
    layout: Layout,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
    top: Option<TopSlots>,
    /// The direct kernel each aggregate uses in the partial phase, if any.
    direct: Vec<Option<DirectKind>>,
}

impl Spec {
    fn accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        self.aggregates
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect()
    }

    /// The partial phase's accumulators: a direct kernel where one applies.
    fn partial_accumulators(&self) -> Result<Vec<PartialAccumulator>> {
        self.aggregates
            .iter()
            .zip(&self.direct)
            .map(|(aggregate, direct)| match direct {
                Some(kind) => Ok(PartialAccumulator::Direct(DirectAccumulator::new(
                    *kind,
                    self.layout.total,
                ))),
                None => Ok(PartialAccumulator::Generic(
                    aggregate.create_groups_accumulator()?,
                )),
            })
            .collect()
    }
}

/// An aggregate's state in the partial phase.
enum PartialAccumulator {
    /// A kernel adding straight into slot arrays ([`crate::direct`]).
    Direct(DirectAccumulator),
    /// Any aggregate, through DataFusion's interface.
    Generic(Box<dyn GroupsAccumulator>),
}

/// A slot no row has touched (in a slot → group map).
const NO_GROUP: u32 = u32::MAX;

/// One input partition's result: state arrays indexed by group (groups numbered in the order
/// their first row arrived) and the slot → group map.
struct Partial {
    states: Vec<Vec<ArrayRef>>,
    group_of_slot: Vec<u32>,
    lo: usize,
    hi: usize,
}

type SharedResult =
    Shared<BoxFuture<'static, std::result::Result<Arc<Vec<RecordBatch>>, Arc<DataFusionError>>>>;

/// The small-key aggregation operator (see the module docs).
pub struct SmallKeyAggregateExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<Spec>,
    properties: Arc<PlanProperties>,
    /// The run shared by the output partitions, and how many of them have started it.
    run: Mutex<(Option<SharedResult>, usize)>,
}

impl fmt::Debug for SmallKeyAggregateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmallKeyAggregateExec")
            .field("spec", &self.spec)
            .finish()
    }
}

impl SmallKeyAggregateExec {
    /// An operator over `input` producing `schema` (group columns, then one column per
    /// aggregate, as DataFusion's final aggregate does) in `output_partitions` partitions.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<GroupKey>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
        schema: SchemaRef,
        output_partitions: usize,
    ) -> Result<Self> {
        if schema.fields().len() != keys.len() + aggregates.len() {
            return internal_err!(
                "small-key aggregation: schema has {} columns for {} keys and {} aggregates",
                schema.fields().len(),
                keys.len(),
                aggregates.len()
            );
        }
        let layout = Layout::new(keys)?;
        let input_schema = input.schema();
        let direct = aggregates
            .iter()
            .zip(&filters)
            .map(|(a, f)| DirectKind::of(a, f.is_some(), &input_schema))
            .collect();
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(output_partitions.max(1)),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(SmallKeyAggregateExec {
            input,
            spec: Arc::new(Spec {
                layout,
                aggregates,
                filters,
                schema,
                top: None,
                direct,
            }),
            properties: Arc::new(properties),
            run: Mutex::new((None, 0)),
        })
    }

    /// Slots in the domain (including NULL slots).
    pub fn slots(&self) -> usize {
        self.spec.layout.total
    }

    /// The operator with `ORDER BY <keys> LIMIT` pushed into it (see [`TopSlots`]).
    pub fn with_top(&self, top: TopSlots) -> Result<Self> {
        if top.fetch == 0 {
            return internal_err!("small-key aggregation: a pushed-down LIMIT must be positive");
        }
        let mut spec = Spec::clone(&self.spec);
        spec.top = Some(top);
        Ok(SmallKeyAggregateExec {
            input: Arc::clone(&self.input),
            spec: Arc::new(spec),
            properties: Arc::clone(&self.properties),
            run: Mutex::new((None, 0)),
        })
    }

    /// How many GROUP BY keys the operator has (its first output columns).
    pub fn key_count(&self) -> usize {
        self.spec.layout.keys.len()
    }

    /// The pushed-down `ORDER BY <keys> LIMIT`, if any.
    pub fn top(&self) -> Option<TopSlots> {
        self.spec.top
    }

    fn output_partitions(&self) -> usize {
        self.properties.partitioning.partition_count()
    }

    /// The shared run, started by the first output partition to ask.
    fn shared_run(&self, context: &Arc<TaskContext>) -> Result<SharedResult> {
        let mut guard = self
            .run
            .lock()
            .map_err(|_| DataFusionError::Internal("small-key aggregation lock poisoned".into()))?;
        let (run, started) = &mut *guard;
        let shared = match run {
            Some(shared) => shared.clone(),
            None => {
                let streams = (0..self.input.output_partitioning().partition_count())
                    .map(|p| self.input.execute(p, Arc::clone(context)))
                    .collect::<Result<Vec<_>>>()?;
                let threads = context.session_config().target_partitions().max(1);
                let spec = Arc::clone(&self.spec);
                let future = async move {
                    run_all(spec, streams, threads)
                        .await
                        .map(Arc::new)
                        .map_err(Arc::new)
                };
                let shared = future.boxed().shared();
                *run = Some(shared.clone());
                shared
            }
        };
        *started += 1;
        // Every output partition has its handle: a later execution starts afresh.
        if *started >= self.output_partitions() {
            *run = None;
            *started = 0;
        }
        Ok(shared)
    }
}

async fn run_all(
    spec: Arc<Spec>,
    streams: Vec<SendableRecordBatchStream>,
    threads: usize,
) -> Result<Vec<RecordBatch>> {
    let bound = Arc::new(AtomicUsize::new(usize::MAX));
    let tasks: Vec<SpawnedTask<Result<Option<Partial>>>> = streams
        .into_iter()
        .map(|stream| SpawnedTask::spawn(accumulate(Arc::clone(&spec), stream, Arc::clone(&bound))))
        .collect();
    let mut partials = Vec::with_capacity(tasks.len());
    for task in tasks {
        let partial = task.join().await.map_err(|e| {
            DataFusionError::Execution(format!("small-key aggregation task failed: {e}"))
        })??;
        partials.extend(partial);
    }
    let (Some(mut lo), Some(mut hi)) = (
        partials.iter().map(|p| p.lo).min(),
        partials.iter().map(|p| p.hi).max(),
    ) else {
        return Ok(Vec::new());
    };
    // Only groups ranked at or below the final bound are complete (see `TopSlots`).
    let bound = bound.load(Ordering::Acquire);
    match spec.top {
        Some(top) if bound < spec.layout.total => {
            if top.descending {
                lo = lo.max(spec.layout.total - 1 - bound);
            } else {
                hi = hi.min(bound + 1);
            }
        }
        _ => {}
    }
    if lo >= hi {
        return Ok(Vec::new());
    }
    let partials = Arc::new(partials);
    let slices = threads.min(hi - lo).max(1);
    let per = (hi - lo).div_ceil(slices);
    // Rounding `per` up can leave the last slices empty (5 slots over 4 threads: 2, 2, 1).
    let slices = (hi - lo).div_ceil(per);
    let merges: Vec<SpawnedTask<Result<Option<RecordBatch>>>> = (0..slices)
        .map(|i| {
            let from = lo + i * per;
            let to = (from + per).min(hi);
            let spec = Arc::clone(&spec);
            let partials = Arc::clone(&partials);
            SpawnedTask::spawn(async move { merge_slice(&spec, &partials, from, to) })
        })
        .collect();
    let mut batches = Vec::with_capacity(slices);
    for merge in merges {
        let batch = merge.join().await.map_err(|e| {
            DataFusionError::Execution(format!("small-key merge task failed: {e}"))
        })??;
        batches.extend(batch);
    }
    Ok(batches)
}

/// Runs one input partition into direct-indexed accumulators. `bound` is the highest rank a
/// group may have to be emitted, shared by the partitions (see [`TopSlots`]).
async fn accumulate(
    spec: Arc<Spec>,
    mut stream: SendableRecordBatchStream,
    bound: Arc<AtomicUsize>,
) -> Result<Option<Partial>> {
    let total = spec.layout.total;
    let mut accumulators = spec.partial_accumulators()?;
    // Rows per slot, counted once for every aggregate: `count(*)` itself, the other direct
    // kernels' counts (less the NULLs they skipped), and which slots were touched.
    let mut rows_of_slot = vec![0u64; total];
    // DataFusion's accumulators expect groups numbered densely in order of first appearance
    // (its NULL tracking assumes every group below `total_num_groups` has been given a row),
    // so with any of them, slots map to such numbers as rows arrive. The direct kernels
    // index by slot and need no numbering until the end.
    let generic = accumulators
        .iter()
        .any(|a| matches!(a, PartialAccumulator::Generic(_)));
    let mut group_of_slot = vec![NO_GROUP; if generic { total } else { 0 }];
    let mut slot_of_group: Vec<usize> = Vec::new();
    let mut groups: Vec<usize> = Vec::new();
    let mut slots = Vec::new();
    let mut selection = Vec::new();
    let mut scratch = Vec::new();
    while let Some(batch) = stream.next().await {
        let mut batch = batch?;
        let rows = batch.num_rows();
        if rows == 0 {
            continue;
        }
        // Once some partition has seen `fetch` groups, rows of groups ranked above the bound
        // cannot reach the output: drop them before anything else looks at them.
        let keep = spec.top.and_then(|top| {
            let limit = bound.load(Ordering::Acquire);
            (limit < total).then(|| top.kept(limit, total))
        });
        if spec.top.is_none()
            && !generic
            && fused_update(
                &spec,
                &batch,
                &mut rows_of_slot,
                &mut accumulators,
                &mut slots,
            )?
        {
            continue;
        }
        let kept =
            spec.layout
                .slots_kept(&batch, keep, &mut slots, &mut selection, &mut scratch)?;
        if kept == 0 {
            continue;
        }
        if kept < rows {
            let indices = UInt32Array::from_iter_values(selection.iter().take(kept).copied());
            batch = take_record_batch(&batch, &indices)?;
        }
        let slots = slots.get(..kept).unwrap_or_default();
        let mut new_slot = false;
        for &slot in slots {
            let Some(count) = rows_of_slot.get_mut(slot) else {
                return internal_err!("small-key aggregation: slot {slot} outside the domain");
            };
            new_slot |= *count == 0;
            *count += 1;
        }
        let group_count = if generic {
            groups.clear();
            for &slot in slots {
                let Some(group) = group_of_slot.get_mut(slot) else {
                    return internal_err!("small-key aggregation: slot {slot} outside the domain");
                };
                if *group == NO_GROUP {
                    *group = slot_of_group.len() as u32;
                    slot_of_group.push(slot);
                }
                groups.push(*group as usize);
            }
            slot_of_group.len()
        } else {
            0
        };
        if let (Some(top), true) = (spec.top, new_slot) {
            if let Some(mine) = top.bound(&rows_of_slot) {
                bound.fetch_min(mine, Ordering::AcqRel);
            }
        }
        for ((aggregate, filter_expr), accumulator) in spec
            .aggregates
            .iter()
            .zip(&spec.filters)
            .zip(accumulators.iter_mut())
        {
            let accumulator = match accumulator {
                PartialAccumulator::Direct(direct) => {
                    let argument = match aggregate.expressions().first() {
                        Some(e) if direct.needs_argument() => {
                            Some(e.evaluate(&batch)?.into_array(batch.num_rows())?)
                        }
                        _ => None,
                    };
                    direct.update(argument.as_ref(), slots)?;
                    continue;
                }
                PartialAccumulator::Generic(generic) => generic,
            };
            let values = aggregate
                .expressions()
                .iter()
                .map(|e| {
                    e.evaluate(&batch)
                        .and_then(|v| v.into_array(batch.num_rows()))
                })
                .collect::<Result<Vec<_>>>()?;
            let filter_array = match filter_expr {
                Some(f) => Some(f.evaluate(&batch)?.into_array(batch.num_rows())?),
                None => None,
            };
            let filter_values = filter_array.as_ref().map(|f| f.as_boolean());
            accumulator.update_batch(&values, &groups, filter_values, group_count)?;
        }
    }
    let (Some(lo), Some(last)) = (
        rows_of_slot.iter().position(|&c| c != 0),
        rows_of_slot.iter().rposition(|&c| c != 0),
    ) else {
        return Ok(None);
    };
    let hi = last + 1;
    if !generic {
        // Direct kernels only: number the touched slots in slot order, which also makes every
        // partial's groups one run for the merge's zero-copy slices.
        group_of_slot = vec![NO_GROUP; total];
        for (slot, &count) in rows_of_slot.iter().enumerate().take(hi).skip(lo) {
            if count != 0 {
                if let Some(group) = group_of_slot.get_mut(slot) {
                    *group = slot_of_group.len() as u32;
                }
                slot_of_group.push(slot);
            }
        }
    }
    let states = accumulators
        .into_iter()
        .map(|a| match a {
            PartialAccumulator::Direct(direct) => direct.state(&slot_of_group, &rows_of_slot),
            PartialAccumulator::Generic(mut generic) => generic.state(EmitTo::All),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Partial {
        states,
        group_of_slot,
        lo,
        hi,
    }))
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
fn fused_update(
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

/// Merges slots `[from, to)` of every partial and emits the touched ones, in slot order.
fn merge_slice(
    spec: &Spec,
    partials: &[Partial],
    from: usize,
    to: usize,
) -> Result<Option<RecordBatch>> {
    let mut accumulators = spec.accumulators()?;
    // As in the partial phase, merged groups are numbered in order of first appearance.
    let mut merged_of_slot = vec![NO_GROUP; to - from];
    let mut slot_of_merged: Vec<usize> = Vec::new();
    let mut rows: Vec<u32> = Vec::new();
    let mut merged: Vec<usize> = Vec::new();
    for partial in partials {
        if partial.hi <= from || partial.lo >= to {
            continue;
        }
        rows.clear();
        merged.clear();
        for (i, &group) in partial.group_of_slot[from..to].iter().enumerate() {
            if group == NO_GROUP {
                continue;
            }
            rows.push(group);
            let number = &mut merged_of_slot[i];
            if *number == NO_GROUP {
                *number = slot_of_merged.len() as u32;
                slot_of_merged.push(from + i);
            }
            merged.push(*number as usize);
        }
        let Some(&first) = rows.first() else {
            continue;
        };
        // Groups numbered in slot order (the usual case: keys arrive ascending) are a
        // zero-copy slice of the partial's states; otherwise they are gathered.
        let run = rows.windows(2).all(|w| w[1] == w[0] + 1);
        let indices = (!run).then(|| UInt32Array::from(rows.clone()));
        for (accumulator, states) in accumulators.iter_mut().zip(&partial.states) {
            let picked = states
                .iter()
                .map(|s| match &indices {
                    None => Ok(s.slice(first as usize, rows.len())),
                    Some(indices) => take(s, indices, None),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            accumulator.merge_batch(&picked, &merged, slot_of_merged.len())?;
        }
    }
    if slot_of_merged.is_empty() {
        return Ok(None);
    }
    let mut order: Vec<u32> = (0..slot_of_merged.len() as u32).collect();
    order.sort_unstable_by_key(|&m| slot_of_merged[m as usize]);
    let sorted = order.iter().enumerate().all(|(i, &m)| i == m as usize);
    let slots: Vec<usize> = order.iter().map(|&m| slot_of_merged[m as usize]).collect();
    let order = UInt32Array::from(order);
    let mut columns = spec.layout.key_columns(&slots, &spec.schema)?;
    for accumulator in accumulators.iter_mut() {
        let values = accumulator.evaluate(EmitTo::All)?;
        columns.push(if sorted {
            values
        } else {
            take(&values, &order, None)?
        });
    }
    Ok(Some(RecordBatch::try_new(
        Arc::clone(&spec.schema),
        columns,
    )?))
}

impl DisplayAs for SmallKeyAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self
            .spec
            .layout
            .keys
            .iter()
            .map(|k| {
                format!(
                    "{} as {} in [{}, {}]",
                    k.expr, k.name, k.range.min, k.range.max
                )
            })
            .collect();
        let aggregates: Vec<&str> = self.spec.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "SmallKeyAggregateExec: gby=[{}], aggr=[{}], slots={}",
            keys.join(", "),
            aggregates.join(", "),
            self.spec.layout.total
        )?;
        match self.spec.top {
            Some(top) => write!(
                f,
                ", top={} {}",
                top.fetch,
                if top.descending { "desc" } else { "asc" }
            ),
            None => Ok(()),
        }
    }
}

impl ExecutionPlan for SmallKeyAggregateExec {
    fn name(&self) -> &str {
        "SmallKeyAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = self
            .spec
            .layout
            .keys
            .iter()
            .map(|k| Arc::clone(&k.expr))
            .collect();
        for aggregate in &self.spec.aggregates {
            exprs.extend(aggregate.expressions());
        }
        exprs.extend(self.spec.filters.iter().flatten().cloned());
        for expr in &exprs {
            if f(expr)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("SmallKeyAggregateExec has one child".into()))?;
        Ok(Arc::new(SmallKeyAggregateExec {
            input,
            spec: Arc::clone(&self.spec),
            properties: Arc::clone(&self.properties),
            run: Mutex::new((None, 0)),
        }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(SmallKeyAggregateExec {
            input: Arc::clone(&self.input),
            spec: Arc::clone(&self.spec),
            properties: Arc::clone(&self.properties),
            run: Mutex::new((None, 0)),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let partitions = self.output_partitions();
        if partition >= partitions {
            return internal_err!(
                "SmallKeyAggregateExec has {partitions} partitions, asked for {partition}"
            );
        }
        let shared = self.shared_run(&context)?;
        let stream = futures::stream::once(async move {
            let batches = shared.await.map_err(DataFusionError::Shared)?;
            let mine: Vec<Result<RecordBatch>> = batches
                .iter()
                .enumerate()
                .filter(|(i, _)| i % partitions == partition)
                .map(|(_, b)| Ok(b.clone()))
                .collect();
            Ok::<_, DataFusionError>(mine)
        })
        .map(|outcome| match outcome {
            Ok(batches) => futures::stream::iter(batches),
            Err(error) => futures::stream::iter(vec![Err(error)]),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.spec.schema),
            stream,
        )))
    }
}
