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
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::{cast, filter};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
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
        Ok(Layout {
            keys,
            radix,
            strides,
            total,
        })
    }

    /// Fills `slots` with the slot of every row of `batch`.
    fn slots(&self, batch: &RecordBatch, slots: &mut Vec<usize>) -> Result<()> {
        let rows = batch.num_rows();
        slots.clear();
        slots.resize(rows, 0);
        for (k, key) in self.keys.iter().enumerate() {
            let (array, m) = match &key.modulo {
                Some((x, m)) => (x.evaluate(batch)?.into_array(rows)?, Some(*m)),
                None => (key.expr.evaluate(batch)?.into_array(rows)?, None),
            };
            let stride = self.strides[k];
            let min = key.range.min;
            let width = key.range.width();
            let null_slot = (self.radix[k] - 1) * stride;
            let mut out_of_range = false;
            macro_rules! fill {
                ($array:expr, $t:ty) => {{
                    let typed = $array.as_primitive::<$t>();
                    let values = typed.values();
                    let has_nulls = typed.null_count() > 0;
                    match m {
                        // SQL's remainder takes the dividend's sign, as Rust's `%` does; an
                        // unsigned dividend is non-negative, so its u64 remainder is exact.
                        Some(m) if <$t as ArrowPrimitiveType>::DATA_TYPE.is_unsigned_integer() => {
                            let m = m.unsigned_abs();
                            for (i, (slot, v)) in slots.iter_mut().zip(values.iter()).enumerate() {
                                if has_nulls && typed.is_null(i) {
                                    *slot += null_slot;
                                } else {
                                    let r = (*v as u64 % m) as i64;
                                    let offset = r.wrapping_sub(min) as u64;
                                    out_of_range |= offset >= width;
                                    *slot += offset as usize * stride;
                                }
                            }
                        }
                        Some(m) => {
                            for (i, (slot, v)) in slots.iter_mut().zip(values.iter()).enumerate() {
                                if has_nulls && typed.is_null(i) {
                                    *slot += null_slot;
                                } else {
                                    let r = (*v as i64).wrapping_rem(m);
                                    let offset = r.wrapping_sub(min) as u64;
                                    out_of_range |= offset >= width;
                                    *slot += offset as usize * stride;
                                }
                            }
                        }
                        None => {
                            for (i, (slot, v)) in slots.iter_mut().zip(values.iter()).enumerate() {
                                if has_nulls && typed.is_null(i) {
                                    *slot += null_slot;
                                } else {
                                    let offset = (*v as i64).wrapping_sub(min) as u64;
                                    out_of_range |= offset >= width;
                                    *slot += offset as usize * stride;
                                }
                            }
                        }
                    }
                }};
            }
            match array.data_type() {
                DataType::Int8 => fill!(array, Int8Type),
                DataType::Int16 => fill!(array, Int16Type),
                DataType::Int32 => fill!(array, Int32Type),
                DataType::Int64 => fill!(array, Int64Type),
                DataType::UInt8 => fill!(array, UInt8Type),
                DataType::UInt16 => fill!(array, UInt16Type),
                DataType::UInt32 => fill!(array, UInt32Type),
                DataType::UInt64 => {
                    // Values above i64::MAX wrap negative and fail the range check.
                    fill!(array, UInt64Type)
                }
                _ => {
                    let as_int64 = cast(&array, &DataType::Int64)?;
                    fill!(as_int64, Int64Type)
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

/// What every task needs: the layout and the aggregates.
#[derive(Debug)]
struct Spec {
    layout: Layout,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
}

impl Spec {
    fn accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        self.aggregates
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect()
    }
}

/// One input partition's result: state arrays over every slot and the slots it touched.
struct Partial {
    states: Vec<Vec<ArrayRef>>,
    seen: Vec<bool>,
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
            }),
            properties: Arc::new(properties),
            run: Mutex::new((None, 0)),
        })
    }

    /// Slots in the domain (including NULL slots).
    pub fn slots(&self) -> usize {
        self.spec.layout.total
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
    let tasks: Vec<SpawnedTask<Result<Option<Partial>>>> = streams
        .into_iter()
        .map(|stream| SpawnedTask::spawn(accumulate(Arc::clone(&spec), stream)))
        .collect();
    let mut partials = Vec::with_capacity(tasks.len());
    for task in tasks {
        let partial = task.join().await.map_err(|e| {
            DataFusionError::Execution(format!("small-key aggregation task failed: {e}"))
        })??;
        partials.extend(partial);
    }
    let (Some(lo), Some(hi)) = (
        partials.iter().map(|p| p.lo).min(),
        partials.iter().map(|p| p.hi).max(),
    ) else {
        return Ok(Vec::new());
    };
    let partials = Arc::new(partials);
    let slices = threads.min(hi - lo).max(1);
    let per = (hi - lo).div_ceil(slices);
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

/// Runs one input partition into direct-indexed accumulators.
async fn accumulate(
    spec: Arc<Spec>,
    mut stream: SendableRecordBatchStream,
) -> Result<Option<Partial>> {
    let total = spec.layout.total;
    let mut accumulators = spec.accumulators()?;
    let mut seen = vec![false; total];
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    let mut slots = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        spec.layout.slots(&batch, &mut slots)?;
        for &slot in &slots {
            if let Some(flag) = seen.get_mut(slot) {
                *flag = true;
            }
            lo = lo.min(slot);
            hi = hi.max(slot + 1);
        }
        for ((aggregate, filter_expr), accumulator) in spec
            .aggregates
            .iter()
            .zip(&spec.filters)
            .zip(accumulators.iter_mut())
        {
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
            accumulator.update_batch(&values, &slots, filter_values, total)?;
        }
    }
    if hi == 0 {
        return Ok(None);
    }
    let states = accumulators
        .iter_mut()
        .map(|a| a.state(EmitTo::All))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Partial {
        states,
        seen,
        lo,
        hi,
    }))
}

/// Merges slots `[from, to)` of every partial and emits the touched ones.
fn merge_slice(
    spec: &Spec,
    partials: &[Partial],
    from: usize,
    to: usize,
) -> Result<Option<RecordBatch>> {
    let n = to - from;
    let mut accumulators = spec.accumulators()?;
    let mut any = vec![false; n];
    let mut merged = false;
    for partial in partials {
        if partial.hi <= from || partial.lo >= to {
            continue;
        }
        let seen = &partial.seen[from..to];
        let indices: Vec<usize> = (0..n).filter(|&i| seen[i]).collect();
        if indices.is_empty() {
            continue;
        }
        for &i in &indices {
            any[i] = true;
        }
        // When every slot of the slice was touched (the common dense case) the zero-copy
        // slice is merged as is; otherwise the untouched slots are filtered out.
        let dense = indices.len() == n;
        let mask = BooleanArray::from(seen.to_vec());
        for (accumulator, states) in accumulators.iter_mut().zip(&partial.states) {
            let sliced = states
                .iter()
                .map(|s| {
                    let slice = s.slice(from, n);
                    if dense {
                        Ok(slice)
                    } else {
                        filter(&slice, &mask)
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            accumulator.merge_batch(&sliced, &indices, n)?;
        }
        merged = true;
    }
    if !merged {
        return Ok(None);
    }
    let mask = BooleanArray::from(any.clone());
    let slots: Vec<usize> = (0..n).filter(|&i| any[i]).map(|i| from + i).collect();
    let mut columns = spec.layout.key_columns(&slots, &spec.schema)?;
    for accumulator in accumulators.iter_mut() {
        let values = accumulator.evaluate(EmitTo::All)?;
        columns.push(filter(&values, &mask)?);
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
        )
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
