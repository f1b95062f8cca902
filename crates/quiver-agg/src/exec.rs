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
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{take, take_record_batch};
use arrow::datatypes::SchemaRef;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNodeIterator, TreeNodeRecursion};
use datafusion::common::Statistics;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use futures::FutureExt;
use futures::StreamExt;

use crate::bounds::KeyRange;
use crate::contract::{replaced_statistics, replacement_properties, whole_or_unknown};
use crate::direct::{DirectAccumulator, DirectKind};
use crate::key_loop::{fused_update, Layout};
use crate::shared_run::SharedRun;

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
pub(crate) struct Spec {
    pub(crate) layout: Layout,
    pub(crate) aggregates: Vec<Arc<AggregateFunctionExpr>>,
    pub(crate) filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    pub(crate) schema: SchemaRef,
    pub(crate) top: Option<TopSlots>,
    /// The direct kernel each aggregate uses in the partial phase, if any.
    pub(crate) direct: Vec<Option<DirectKind>>,
    /// The replaced aggregate's statistics, reported as this node's.
    pub(crate) statistics: Arc<Statistics>,
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
pub(crate) enum PartialAccumulator {
    /// A kernel adding straight into slot arrays ([`crate::direct`]).
    Direct(DirectAccumulator),
    /// Any aggregate, through DataFusion's interface.
    Generic(Box<dyn GroupsAccumulator>),
}

/// A slot no row has touched (in a slot → group map).
pub(crate) const NO_GROUP: u32 = u32::MAX;

/// One input partition's result: state arrays indexed by group (groups numbered in the order
/// their first row arrived) and the slot → group map.
struct Partial {
    states: Vec<Vec<ArrayRef>>,
    group_of_slot: Vec<u32>,
    lo: usize,
    hi: usize,
}

/// The small-key aggregation operator (see the module docs).
pub struct SmallKeyAggregateExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<Spec>,
    properties: Arc<PlanProperties>,
    /// The run shared by the output partitions.
    run: SharedRun,
    /// `output_rows` and `elapsed_compute` (CPU time summed over the tasks, input waits
    /// excluded) of the shared run, recorded as partition 0's.
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for SmallKeyAggregateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmallKeyAggregateExec")
            .field("spec", &self.spec)
            .finish()
    }
}

impl SmallKeyAggregateExec {
    /// An operator over `input` computing what `replaced` (a final or single aggregate) does:
    /// its schema (group columns, then one column per aggregate), its partition count, its
    /// equivalences and statistics ([`crate::contract::replacement_properties`]).
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        keys: Vec<GroupKey>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
        replaced: &dyn ExecutionPlan,
    ) -> Result<Self> {
        let schema = replaced.schema();
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
        Ok(SmallKeyAggregateExec {
            input,
            spec: Arc::new(Spec {
                layout,
                aggregates,
                filters,
                schema,
                top: None,
                direct,
                statistics: replaced_statistics(replaced),
            }),
            properties: Arc::new(replacement_properties(replaced)),
            run: SharedRun::default(),
            metrics: ExecutionPlanMetricsSet::new(),
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
            run: SharedRun::default(),
            metrics: ExecutionPlanMetricsSet::new(),
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

    /// This operator over `input`, with a run and metrics of its own (for `with_new_children`
    /// and `reset_state`).
    fn over(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        SmallKeyAggregateExec {
            input,
            spec: Arc::clone(&self.spec),
            properties: Arc::clone(&self.properties),
            run: SharedRun::default(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

/// The operator's run, counting its output rows.
async fn run_all(
    spec: Arc<Spec>,
    streams: Vec<SendableRecordBatchStream>,
    threads: usize,
    (output_rows, elapsed): (Count, Time),
) -> Result<Vec<RecordBatch>> {
    let batches = aggregate_all(spec, streams, threads, &elapsed).await?;
    output_rows.add(batches.iter().map(RecordBatch::num_rows).sum());
    Ok(batches)
}

/// Accumulates every input partition, then merges the partials a slot range a task; `elapsed`
/// sums the tasks' CPU time.
async fn aggregate_all(
    spec: Arc<Spec>,
    streams: Vec<SendableRecordBatchStream>,
    threads: usize,
    elapsed: &Time,
) -> Result<Vec<RecordBatch>> {
    let bound = Arc::new(AtomicUsize::new(usize::MAX));
    let tasks: Vec<SpawnedTask<Result<Option<Partial>>>> = streams
        .into_iter()
        .map(|stream| {
            SpawnedTask::spawn(accumulate(
                Arc::clone(&spec),
                stream,
                Arc::clone(&bound),
                elapsed.clone(),
            ))
        })
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
            let elapsed = elapsed.clone();
            SpawnedTask::spawn(async move {
                let _timer = elapsed.timer();
                merge_slice(&spec, &partials, from, to)
            })
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
    elapsed: Time,
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
        let _timer = elapsed.timer();
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
    let _timer = elapsed.timer();
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

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
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
        exprs.iter().apply_until_stop(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("SmallKeyAggregateExec has one child".into()))?;
        Ok(Arc::new(self.over(input)))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.over(Arc::clone(&self.input))))
    }

    fn statistics_from_inputs(
        &self,
        _inputs: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(whole_or_unknown(&self.spec.statistics, args))
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
        let input = Arc::clone(&self.input);
        let spec = Arc::clone(&self.spec);
        let metrics = &self.metrics;
        self.run
            .execute(partition, partitions, Arc::clone(&self.spec.schema), || {
                let streams = (0..input.output_partitioning().partition_count())
                    .map(|p| input.execute(p, Arc::clone(&context)))
                    .collect::<Result<Vec<_>>>()?;
                let threads = context.session_config().target_partitions().max(1);
                let metrics = (
                    MetricBuilder::new(metrics).output_rows(0),
                    MetricBuilder::new(metrics).elapsed_compute(0),
                );
                Ok(run_all(spec, streams, threads, metrics).boxed())
            })
    }
}
