//! What a query read, measured where data enters the plan, and error context for scans.
//!
//! [`instrument_scans`] wraps every leaf of a physical plan in a [`ScanProbe`] that counts the
//! rows and bytes leaving it into shared atomic counters. The counters are live while the query
//! runs (the CLI's progress line and the Python progress bar poll them) and final when it ends
//! ([`crate::QueryResult::stats`]). Bytes are the in-memory size of the scanned columns, except
//! where the scan reports the bytes it read from storage (Parquet's `bytes_scanned`), which is
//! then used instead at the end of the query.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::Array;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterDescription, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{Stream, StreamExt};

/// Rows and bytes read so far by one query.
#[derive(Debug, Default)]
pub struct ScanCounters {
    rows: AtomicU64,
    bytes: AtomicU64,
}

impl ScanCounters {
    /// Rows that left the query's scans so far.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }

    /// Bytes that left the query's scans so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn add(&self, batch: &RecordBatch) {
        self.rows
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        self.bytes.fetch_add(batch_bytes(batch), Ordering::Relaxed);
    }
}

/// The memory the rows of `batch` occupy, counting only the slice of each buffer it uses.
fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| {
            column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size()) as u64
        })
        .sum()
}

/// Wraps each leaf of `plan` in a [`ScanProbe`] feeding `counters`.
pub fn instrument_scans(
    plan: Arc<dyn ExecutionPlan>,
    counters: &Arc<ScanCounters>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if node.children().is_empty() && !node.is::<ScanProbe>() {
            Ok(Transformed::yes(Arc::new(ScanProbe {
                properties: Arc::clone(node.properties()),
                input: node,
                counters: Arc::clone(counters),
            }) as Arc<dyn ExecutionPlan>))
        } else {
            Ok(Transformed::no(node))
        }
    })
    .map(|t| t.data)
}

/// Bytes read from storage by the plan's scans where they report it (`bytes_scanned`), else
/// `None`.
pub fn storage_bytes(plan: &Arc<dyn ExecutionPlan>) -> Option<u64> {
    let mut total: Option<u64> = None;
    let _ = plan.apply(|node| {
        if let Some(probe) = node.downcast_ref::<ScanProbe>() {
            if let Some(bytes) = probe
                .input
                .metrics()
                .and_then(|m| m.sum_by_name("bytes_scanned"))
            {
                *total.get_or_insert(0) += bytes.as_usize() as u64;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    total
}

/// Counts what leaves a scan. Invisible in EXPLAIN output: it is added after planning.
#[derive(Debug)]
pub struct ScanProbe {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    counters: Arc<ScanCounters>,
}

impl DisplayAs for ScanProbe {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ScanProbe")
    }
}

impl ExecutionPlan for ScanProbe {
    fn name(&self) -> &'static str {
        "ScanProbe"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let input = single_child(&mut children, "ScanProbe")?;
        Ok(Arc::new(ScanProbe {
            properties: Arc::clone(input.properties()),
            input,
            counters: Arc::clone(&self.counters),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let counters = Arc::clone(&self.counters);
        let counted = input.inspect(move |batch| {
            if let Ok(batch) = batch {
                counters.add(batch);
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
    }
}

fn single_child(
    children: &mut Vec<Arc<dyn ExecutionPlan>>,
    name: &str,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    match (children.pop(), children.is_empty()) {
        (Some(child), true) => Ok(child),
        _ => Err(DataFusionError::Internal(format!(
            "{name} takes exactly one child"
        ))),
    }
}

/// Adds a context (such as "while reading CSV file 'x.csv'") to every error of its input.
#[derive(Debug)]
pub struct ErrorContextExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    context: String,
    /// Resources the scan needs until it has run (temporary files), dropped with the plan.
    keep_alive: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl ErrorContextExec {
    /// Wraps `input`.
    pub fn new(input: Arc<dyn ExecutionPlan>, context: String) -> Self {
        ErrorContextExec {
            properties: Arc::clone(input.properties()),
            input,
            context,
            keep_alive: None,
        }
    }

    /// Keeps `resource` alive as long as this plan node.
    pub fn with_keep_alive(
        mut self,
        resource: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        self.keep_alive = resource;
        self
    }

    /// The wrapped scan.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// Wraps `input` with this node's context and resources.
    pub fn rewrap(&self, input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        Arc::new(
            ErrorContextExec::new(input, self.context.clone())
                .with_keep_alive(self.keep_alive.clone()),
        )
    }
}

impl DisplayAs for ErrorContextExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        // Show the wrapped scan itself: this node only annotates errors.
        self.input.fmt_as(t, f)
    }
}

impl ExecutionPlan for ErrorContextExec {
    fn name(&self) -> &'static str {
        "ErrorContextExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        // Present the wrapped scan as a leaf so optimizer rules and EXPLAIN see the scan.
        self.input.children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        self.input.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let input = Arc::clone(&self.input).replace_children(children, options)?;
        Ok(self.rewrap(input))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let label = self.context.clone();
        let input = self
            .input
            .execute(partition, context)
            .map_err(|e| DataFusionError::Context(label.clone(), Box::new(e)))?;
        let schema = input.schema();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            ContextStream { input, label },
        )))
    }

    fn metrics(&self) -> Option<datafusion::physical_plan::metrics::MetricsSet> {
        self.input.metrics()
    }

    #[allow(deprecated)] // DataFusion 55 moves this to StatisticsContext; delegate until then.
    fn partition_statistics(
        &self,
        partition: Option<usize>,
    ) -> DFResult<Arc<datafusion::common::Statistics>> {
        self.input.partition_statistics(partition)
    }

    // DataFusion 55's StatisticsContext asks these; the scan answers only here, so without
    // them `SELECT count(*)` scanned the file instead of reading its row count.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<datafusion::common::Statistics>],
        args: &StatisticsArgs,
    ) -> DFResult<Arc<datafusion::common::Statistics>> {
        self.input.statistics_from_inputs(input_stats, args)
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        self.input.child_stats_requests(partition)
    }

    fn supports_limit_pushdown(&self) -> bool {
        self.input.supports_limit_pushdown()
    }

    fn fetch(&self) -> Option<usize> {
        self.input.fetch()
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        let input = self.input.with_fetch(limit)?;
        Some(self.rewrap(input))
    }

    fn gather_filters_for_pushdown(
        &self,
        phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        config: &datafusion::config::ConfigOptions,
    ) -> DFResult<FilterDescription> {
        self.input
            .gather_filters_for_pushdown(phase, parent_filters, config)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        config: &datafusion::config::ConfigOptions,
    ) -> DFResult<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let mut propagation =
            self.input
                .handle_child_pushdown_result(phase, child_pushdown_result, config)?;
        propagation.updated_node = propagation.updated_node.map(|input| self.rewrap(input));
        Ok(propagation)
    }

    fn try_swapping_with_projection(
        &self,
        projection: &ProjectionExec,
    ) -> DFResult<Option<Arc<dyn ExecutionPlan>>> {
        Ok(self
            .input
            .try_swapping_with_projection(projection)?
            .map(|input| self.rewrap(input)))
    }

    fn repartitioned(
        &self,
        target_partitions: usize,
        config: &datafusion::config::ConfigOptions,
    ) -> DFResult<Option<Arc<dyn ExecutionPlan>>> {
        Ok(self
            .input
            .repartitioned(target_partitions, config)?
            .map(|input| self.rewrap(input)))
    }
}

struct ContextStream {
    input: SendableRecordBatchStream,
    label: String,
}

impl Stream for ContextStream {
    type Item = DFResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.input.poll_next_unpin(cx) {
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(DataFusionError::Context(
                self.label.clone(),
                Box::new(error),
            )))),
            other => other,
        }
    }
}
