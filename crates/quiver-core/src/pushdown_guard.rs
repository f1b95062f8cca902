//! Filters are never pushed into a plan node by a column name it holds twice.
//!
//! DataFusion 55's physical `FilterPushdown` moves a filter into a child by remapping each
//! column to the first field of the child's schema with the column's *name*
//! (`FilterRemapper::try_remap`). After a join both sides' columns share names, so in
//! `SELECT c.i FROM a RIGHT JOIN c ON a.i = c.i WHERE c.i = 1 AND (c.b OR a.b) IS NULL` the
//! filter went through the projection above the join as `(c.b OR c.b) IS NULL`, into the
//! preserved side, and the row DuckDB and Postgres return was lost (found by quiver's query
//! fuzzer; upstream family apache/datafusion#20213). Hash joins remap by index, but
//! projections, filters, sorts and repartitions over such a schema do not.
//!
//! [`GuardedFilterPushdown`] runs DataFusion's rule with every node whose output holds a
//! field name twice wrapped in a [`PushdownBarrier`], which accepts no filter from above, and
//! takes the barriers out again before the next rule: those nodes keep the filters above them,
//! everything else is pushed as before (the filter that went wrong is evaluated where the
//! logical plan put it). Filters a node makes itself, such as a join's run-time filter, still
//! go down into its children. A correctness fix, so it runs whatever `quiver.optimizations`
//! says.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

/// DataFusion's `FilterPushdown` rules (both phases), by name.
pub fn is_filter_pushdown(rule: &dyn PhysicalOptimizerRule) -> bool {
    rule.name().starts_with("FilterPushdown")
}

/// DataFusion's filter pushdown, kept out of nodes whose schema repeats a field name.
#[derive(Debug)]
pub struct GuardedFilterPushdown {
    inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
}

impl GuardedFilterPushdown {
    pub fn new(inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>) -> Self {
        Self { inner }
    }
}

impl PhysicalOptimizerRule for GuardedFilterPushdown {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let guarded = plan.transform_up(|node| {
            if repeats_a_name(&node.schema()) {
                Ok(Transformed::yes(
                    Arc::new(PushdownBarrier::new(node)) as Arc<dyn ExecutionPlan>
                ))
            } else {
                Ok(Transformed::no(node))
            }
        })?;
        if !guarded.transformed {
            return self.inner.optimize(guarded.data, config);
        }
        let pushed = self.inner.optimize(guarded.data, config)?;
        pushed
            .transform_up(|node| match node.downcast_ref::<PushdownBarrier>() {
                Some(barrier) => Ok(Transformed::yes(Arc::clone(&barrier.input))),
                None => Ok(Transformed::no(node)),
            })
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        self.inner.schema_check()
    }
}

fn repeats_a_name(schema: &Schema) -> bool {
    let mut seen = HashSet::with_capacity(schema.fields().len());
    schema.fields().iter().any(|f| !seen.insert(f.name()))
}

/// Its input, unchanged, except that no filter is pushed through it. Lives only while
/// [`GuardedFilterPushdown`] runs.
#[derive(Debug)]
pub struct PushdownBarrier {
    input: Arc<dyn ExecutionPlan>,
}

impl PushdownBarrier {
    fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for PushdownBarrier {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PushdownBarrier")
    }
}

impl ExecutionPlan for PushdownBarrier {
    fn name(&self) -> &str {
        "PushdownBarrier"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match children.pop() {
            Some(input) if children.is_empty() => Ok(Arc::new(Self::new(input))),
            _ => datafusion::common::internal_err!("PushdownBarrier takes one child"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}
