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

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{cast, filter_record_batch, take};
use arrow::datatypes::{
    DataType, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{exec_err, internal_err, DataFusionError, Result};
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
use crate::direct::{DirectAccumulator, DirectKind};
use crate::remainder::Remainder;

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
                return exec_err!(
                    "small-key aggregation: a value of key {} is outside its proven range [{}, {}]",
                    key.name,
                    key.range.min,
                    key.range.max
                );
            }
        }
        Ok(())
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
    #[inline]
    fn rank(&self, slot: usize, total: usize) -> usize {
        if self.descending {
            total - 1 - slot
        } else {
            slot
        }
    }

    /// The rank of the `fetch`-th touched slot in rank order, if that many were touched.
    fn bound(&self, group_of_slot: &[u32]) -> Option<usize> {
        let mut remaining = self.fetch;
        let mut find = |(rank, &group): (usize, &u32)| {
            if group != NO_GROUP {
                remaining -= 1;
            }
            (remaining == 0).then_some(rank)
        };
        if self.descending {
            group_of_slot.iter().rev().enumerate().find_map(&mut find)
        } else {
            group_of_slot.iter().enumerate().find_map(&mut find)
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
    // DataFusion's accumulators expect groups numbered densely in order of first appearance
    // (its NULL tracking assumes every group below `total_num_groups` has been given a row),
    // so slots map to such numbers; the direct kernels index by slot.
    let mut group_of_slot = vec![NO_GROUP; total];
    let mut slot_of_group: Vec<usize> = Vec::new();
    let mut groups: Vec<usize> = Vec::new();
    let generic = accumulators
        .iter()
        .any(|a| matches!(a, PartialAccumulator::Generic(_)));
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    let mut slots = Vec::new();
    let mut scratch = Vec::new();
    while let Some(batch) = stream.next().await {
        let mut batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        spec.layout.slots(&batch, &mut slots, &mut scratch)?;
        if let Some(top) = spec.top {
            // Rows of groups ranked above the bound cannot reach the output: drop them before
            // anything else looks at them (nor do their groups need numbers).
            let limit = bound.load(Ordering::Acquire);
            if limit < total {
                let keep = BooleanBuffer::collect_bool(slots.len(), |i| {
                    top.rank(slots[i], total) <= limit
                });
                let kept = keep.count_set_bits();
                if kept == 0 {
                    continue;
                }
                if kept < slots.len() {
                    batch = filter_record_batch(&batch, &BooleanArray::new(keep, None))?;
                    slots.retain(|&slot| top.rank(slot, total) <= limit);
                }
            }
        }
        let before = slot_of_group.len();
        groups.clear();
        for &slot in &slots {
            let Some(group) = group_of_slot.get_mut(slot) else {
                return internal_err!("small-key aggregation: slot {slot} outside the domain");
            };
            if *group == NO_GROUP {
                // The touched range only widens when a slot is first touched.
                *group = slot_of_group.len() as u32;
                slot_of_group.push(slot);
                lo = lo.min(slot);
                hi = hi.max(slot + 1);
            }
            if generic {
                groups.push(*group as usize);
            }
        }
        if let (Some(top), true) = (spec.top, slot_of_group.len() > before) {
            if let Some(mine) = top.bound(&group_of_slot) {
                bound.fetch_min(mine, Ordering::AcqRel);
            }
        }
        let group_count = slot_of_group.len();
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
                    direct.update(argument.as_ref(), &slots)?;
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
    if hi == 0 {
        return Ok(None);
    }
    let states = accumulators
        .into_iter()
        .map(|a| match a {
            PartialAccumulator::Direct(direct) => direct.state(&slot_of_group),
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
