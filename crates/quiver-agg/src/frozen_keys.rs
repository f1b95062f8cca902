//! `GROUP BY … LIMIT n` with no `ORDER BY`: any `n` groups are a correct answer, so once `n`
//! groups are known, rows of every other group need not be aggregated at all. This is
//! ClickHouse's `optimize_trivial_group_by_limit_query` (its PR 114690), done as two small
//! nodes around DataFusion's own aggregation, which stays as it is:
//!
//! * a **gate** ([`FrozenKeysExec`] in [`Role::Gate`]) under the partial (or single)
//!   aggregate. Every input partition hashes each row's GROUP BY key and passes every row
//!   until some partition has seen `n` distinct key hashes; that partition *freezes* them
//!   (publishes the set, once, for all partitions). From then on every partition passes only
//!   rows whose key hash is in the frozen set. A partition that has not seen `n` keys in its
//!   first `max(8n, 131072)` rows stops counting (hashing every row would cost more than it
//!   is likely to save), but still filters once another partition freezes;
//! * an **emit** filter ([`Role::Emit`]) over the final aggregate, keeping only the groups
//!   whose key hash is frozen.
//!
//! Why the answer stays exact: a row is dropped only after its partition saw the freeze, and
//! only when its key hash is not frozen. So every row of a key whose hash is frozen reaches the
//! aggregation, and exactly those groups are emitted, with complete aggregates. Keys that
//! collide with a frozen hash are simply complete as well. At least `n` groups are emitted:
//! the `n` frozen hashes came from `n` distinct keys that occur in the data. If no partition
//! ever sees `n` distinct hashes, nothing is frozen, nothing is dropped, and the parent's
//! LIMIT picks from all groups as before.
//!
//! The final aggregate emits only after its whole input is consumed, so the emit filter sees
//! the final frozen set; the rule ([`FrozenKeysRule`]) applies only to unordered (`Linear`)
//! aggregation, where that holds, and only when nothing between the LIMIT and the aggregate
//! can drop a group (no HAVING, no ORDER BY).
//!
//! ```sql
//! EXPLAIN SELECT UserID, SearchPhrase, count(*) FROM hits GROUP BY UserID, SearchPhrase LIMIT 10;
//! -- FrozenKeysExec: emit, keys=2, freeze_at=10
//! --   AggregateExec: mode=FinalPartitioned ...
//! --       AggregateExec: mode=Partial ...
//! --         FrozenKeysExec: gate, keys=[UserID@0, SearchPhrase@1], freeze_at=10
//! ```

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeIterator, TreeNodeRecursion};
use datafusion::common::{internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode,
    PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

/// The largest `LIMIT` (plus `OFFSET`) the rule freezes keys for. Before the freeze each
/// partition keeps a set of up to this many hashes.
pub const MAX_FROZEN_KEYS: usize = 65_536;

/// A gate partition counts keys in at least this many rows (and `8 × LIMIT`) before it gives
/// up: keys that many rows did not bring are unlikely to come soon enough to pay for hashing
/// every row. It still filters once another partition freezes.
const TRACK_ROWS: usize = 1 << 17;

/// The hash every gate and emit node uses: one fixed seed, so a key hashes alike on both sides.
const KEY_HASH: RandomState = RandomState::with_seed(0x7175_6976_6572_6b65);

/// The values are hashes already: a set of them needs no second hash.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type HashSetU64 = HashSet<u64, BuildHasherDefault<Identity>>;

/// What the gate and emit nodes of one rewrite share.
#[derive(Debug)]
struct Frozen {
    /// How many distinct keys freeze the set (the parent's LIMIT plus OFFSET).
    at: usize,
    set: OnceLock<HashSetU64>,
}

impl Frozen {
    fn new(at: usize) -> Arc<Self> {
        Arc::new(Frozen {
            at,
            set: OnceLock::new(),
        })
    }
}

/// Which side of the aggregation a [`FrozenKeysExec`] is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Under the partial aggregate: counts keys, freezes them, then drops other keys' rows.
    Gate,
    /// Over the final aggregate: keeps only the frozen keys' groups.
    Emit,
}

/// One side of the `GROUP BY … LIMIT` key freeze (see the module docs).
#[derive(Debug)]
pub struct FrozenKeysExec {
    input: Arc<dyn ExecutionPlan>,
    role: Role,
    /// The GROUP BY keys over the input's rows (for the emit side, its first columns).
    keys: Vec<Arc<dyn PhysicalExpr>>,
    frozen: Arc<Frozen>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl FrozenKeysExec {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        role: Role,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        frozen: Arc<Frozen>,
    ) -> Self {
        FrozenKeysExec {
            properties: Arc::clone(input.properties()),
            input,
            role,
            keys,
            frozen,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The node's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// How many distinct keys freeze the set.
    pub fn freeze_at(&self) -> usize {
        self.frozen.at
    }

    fn with_frozen(&self, frozen: Arc<Frozen>, input: Arc<dyn ExecutionPlan>) -> Self {
        FrozenKeysExec::new(input, self.role, self.keys.clone(), frozen)
    }
}

impl DisplayAs for FrozenKeysExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Gate => {
                let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
                write!(
                    f,
                    "FrozenKeysExec: gate, keys=[{}], freeze_at={}",
                    keys.join(", "),
                    self.frozen.at
                )
            }
            Role::Emit => write!(
                f,
                "FrozenKeysExec: emit, keys={}, freeze_at={}",
                self.keys.len(),
                self.frozen.at
            ),
        }
    }
}

impl ExecutionPlan for FrozenKeysExec {
    fn name(&self) -> &str {
        "FrozenKeysExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.keys.iter().apply_until_stop(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children).map_err(|_| {
            datafusion::error::DataFusionError::Internal("FrozenKeysExec has one child".into())
        })?;
        Ok(Arc::new(self.with_frozen(Arc::clone(&self.frozen), input)))
    }

    /// A fresh run needs a fresh set, shared again by the gate and the emit node: the emit
    /// node (reset after its subtree) gives its own gate the new set.
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        if self.role == Role::Gate {
            return Ok(self);
        }
        let old = Arc::clone(&self.frozen);
        let fresh = Frozen::new(old.at);
        let input = Arc::clone(&self.input)
            .transform_down(|node| {
                let gate = node
                    .downcast_ref::<FrozenKeysExec>()
                    .filter(|gate| Arc::ptr_eq(&gate.frozen, &old));
                Ok(match gate {
                    Some(gate) => Transformed::yes(Arc::new(
                        gate.with_frozen(Arc::clone(&fresh), Arc::clone(&gate.input)),
                    ) as Arc<dyn ExecutionPlan>),
                    None => Transformed::no(node),
                })
            })?
            .data;
        Ok(Arc::new(self.with_frozen(fresh, input)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let mut filter = KeyFilter {
            role: self.role,
            keys: self.keys.clone(),
            frozen: Arc::clone(&self.frozen),
            seen: HashSetU64::default(),
            track_rows: self.frozen.at.saturating_mul(8).max(TRACK_ROWS),
            hashes: Vec::new(),
            baseline: BaselineMetrics::new(&self.metrics, partition),
            skipped: MetricBuilder::new(&self.metrics).counter("rows_skipped", partition),
        };
        let stream = input.filter_map(move |batch| {
            let out = match batch {
                Ok(batch) => filter.apply(batch).transpose(),
                Err(error) => Some(Err(error)),
            };
            futures::future::ready(out)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }
}

/// One partition's filter.
struct KeyFilter {
    role: Role,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    frozen: Arc<Frozen>,
    /// The gate's distinct key hashes before the freeze (at most `frozen.at`).
    seen: HashSetU64,
    /// Rows the gate still counts keys in before the freeze ([`TRACK_ROWS`]).
    track_rows: usize,
    hashes: Vec<u64>,
    baseline: BaselineMetrics,
    skipped: Count,
}

impl KeyFilter {
    /// The rows of `batch` to pass on; `None` when there are none.
    fn apply(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        let frozen = self.frozen.set.get();
        let pass = match self.role {
            Role::Emit => frozen.is_none(),
            Role::Gate => frozen.is_none() && self.track_rows == 0,
        };
        if rows == 0 || pass {
            self.baseline.record_output(rows);
            return Ok(Some(batch));
        }
        let timer = self.baseline.elapsed_compute().timer();
        let keys = self
            .keys
            .iter()
            .map(|key| key.evaluate(&batch)?.into_array(rows))
            .collect::<Result<Vec<ArrayRef>>>()?;
        self.hashes.clear();
        self.hashes.resize(rows, 0);
        create_hashes(&keys, &KEY_HASH, &mut self.hashes)?;
        let out = match frozen {
            Some(set) => {
                let hashes = &self.hashes;
                let keep = BooleanBuffer::collect_bool(rows, |i| set.contains(&hashes[i]));
                let kept = keep.count_set_bits();
                self.skipped.add(rows - kept);
                match kept {
                    0 => None,
                    k if k == rows => Some(batch),
                    _ => Some(filter_record_batch(&batch, &BooleanArray::new(keep, None))?),
                }
            }
            None => {
                // The gate before the freeze: count distinct keys; every row passes.
                self.track_rows = self.track_rows.saturating_sub(rows);
                let at = self.frozen.at;
                for &hash in &self.hashes {
                    if self.seen.len() >= at {
                        break;
                    }
                    self.seen.insert(hash);
                }
                if self.seen.len() >= at {
                    // Another partition may have frozen first; its set stands.
                    let _ = self.frozen.set.set(std::mem::take(&mut self.seen));
                }
                Some(batch)
            }
        };
        timer.done();
        self.baseline
            .record_output(out.as_ref().map_or(0, RecordBatch::num_rows));
        Ok(out)
    }
}

/// Puts a [`FrozenKeysExec`] gate and emit pair around `GROUP BY … LIMIT n` aggregations with
/// no `ORDER BY` (see the module docs).
///
/// It matches a LIMIT (`GlobalLimitExec`, `LocalLimitExec`, or a `CoalescePartitionsExec` with
/// a fetch) over only projections, coalescing and local limits, over `AggregateExec(Final |
/// FinalPartitioned)` over repartitioning or coalescing over `AggregateExec(Partial)`, or over
/// `AggregateExec(Single | SinglePartitioned)`. It applies when
/// * there is one grouping set with at least one key, none volatile, and DataFusion has not pushed a limit
///   into the aggregation itself (it does for `DISTINCT`-like GROUP BYs with no aggregates);
/// * both aggregates are unordered (`InputOrderMode::Linear`), so the final one emits only
///   after all its input;
/// * LIMIT plus OFFSET is between 1 and [`MAX_FROZEN_KEYS`].
#[derive(Debug, Default, Clone)]
pub struct FrozenKeysRule;

impl FrozenKeysRule {
    fn try_rewrite(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let wanted = if let Some(limit) = plan.downcast_ref::<GlobalLimitExec>() {
            limit
                .fetch()
                .map(|fetch| fetch.saturating_add(limit.skip()))
        } else if let Some(limit) = plan.downcast_ref::<LocalLimitExec>() {
            Some(limit.fetch())
        } else if let Some(coalesce) = plan.downcast_ref::<CoalescePartitionsExec>() {
            coalesce.fetch()
        } else {
            None
        };
        let Some(wanted) = wanted.filter(|&n| (1..=MAX_FROZEN_KEYS).contains(&n)) else {
            return Ok(None);
        };
        // The nodes from the LIMIT down to the final aggregate, each with one child that
        // passes every group on.
        let mut above_final = vec![Arc::clone(plan)];
        let mut node = one_child(plan)?;
        while node.is::<ProjectionExec>()
            || node.is::<LocalLimitExec>()
            || node.is::<CoalescePartitionsExec>()
            || node.name() == "CoalesceBatchesExec"
            || is_round_robin(&node)
        {
            above_final.push(Arc::clone(&node));
            node = one_child(&node)?;
        }
        let Some(top) = node.downcast_ref::<AggregateExec>() else {
            return Ok(None);
        };
        // The nodes from the final aggregate down to the partial one (the final aggregate
        // first), and the partial aggregate.
        let mut above_partial = vec![Arc::clone(&node)];
        let partial = match top.mode() {
            AggregateMode::Final | AggregateMode::FinalPartitioned => {
                let mut below = Arc::clone(top.input());
                while below.is::<RepartitionExec>()
                    || below.is::<CoalescePartitionsExec>()
                    || below.name() == "CoalesceBatchesExec"
                {
                    above_partial.push(Arc::clone(&below));
                    below = one_child(&below)?;
                }
                match below.downcast_ref::<AggregateExec>() {
                    Some(partial) if *partial.mode() == AggregateMode::Partial => {
                        above_partial.push(Arc::clone(&below));
                        below
                    }
                    _ => return Ok(None),
                }
            }
            AggregateMode::Single | AggregateMode::SinglePartitioned => Arc::clone(&node),
            _ => return Ok(None),
        };
        let Some(partial_agg) = partial.downcast_ref::<AggregateExec>() else {
            return Ok(None);
        };
        let group_by = partial_agg.group_expr();
        // The gate evaluates the keys again: a volatile key (`random()`) would differ.
        let applies = group_by.is_single()
            && !group_by.expr().is_empty()
            && !group_by.expr().iter().any(|(expr, _)| is_volatile(expr))
            && partial_agg.limit_options().is_none()
            && top.limit_options().is_none()
            && *partial_agg.input_order_mode() == InputOrderMode::Linear
            && *top.input_order_mode() == InputOrderMode::Linear;
        if !applies {
            return Ok(None);
        }
        let keys: Vec<Arc<dyn PhysicalExpr>> = group_by
            .expr()
            .iter()
            .map(|(expr, _)| Arc::clone(expr))
            .collect();
        let emit_keys: Vec<Arc<dyn PhysicalExpr>> = top
            .schema()
            .fields()
            .iter()
            .take(keys.len())
            .enumerate()
            .map(|(i, field)| Arc::new(Column::new(field.name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        if emit_keys.len() != keys.len() {
            return internal_err!(
                "FrozenKeysRule: the final aggregate has fewer columns than keys"
            );
        }

        let frozen = Frozen::new(wanted);
        let gate: Arc<dyn ExecutionPlan> = Arc::new(FrozenKeysExec::new(
            Arc::clone(partial_agg.input()),
            Role::Gate,
            keys,
            Arc::clone(&frozen),
        ));
        // `above_partial` ends with the partial aggregate: rebuild it over the gate, then
        // each node above it up to the final aggregate.
        let aggregated = rebuild(&above_partial, gate)?;
        let emit: Arc<dyn ExecutionPlan> = Arc::new(FrozenKeysExec::new(
            aggregated,
            Role::Emit,
            emit_keys,
            frozen,
        ));
        Ok(Some(rebuild(&above_final, emit)?))
    }
}

/// `path[0]` over `path[1]` over … over `leaf`, each node rebuilt over its new child.
fn rebuild(
    path: &[Arc<dyn ExecutionPlan>],
    leaf: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    path.iter().rev().try_fold(leaf, |child, parent| {
        replace_children_if_necessary(Arc::clone(parent), vec![child])
    })
}

fn one_child(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    match plan.children().as_slice() {
        [child] => Ok(Arc::clone(child)),
        _ => internal_err!("FrozenKeysRule: {} should have one child", plan.name()),
    }
}

fn is_round_robin(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<RepartitionExec>().is_some_and(|r| {
        matches!(
            r.partitioning(),
            datafusion::physical_plan::Partitioning::RoundRobinBatch(_)
        )
    })
}

impl PhysicalOptimizerRule for FrozenKeysRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            Ok(match FrozenKeysRule::try_rewrite(&node)? {
                // The rewritten subtree holds no other candidate between the LIMIT and the
                // gate; below the gate, the search goes on.
                Some(rewritten) => Transformed::yes(rewritten),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "frozen_group_keys"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
