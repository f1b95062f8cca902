//! `ORDER BY k LIMIT n` over a wide Parquet scan: find the n-th key first, then read the wide
//! columns only for rows that can still win.
//!
//! `SELECT * FROM hits WHERE URL LIKE '%google%' ORDER BY EventTime LIMIT 10` reads 105 columns
//! for every matching row before the Top-K throws all but ten away. DuckDB reads the other
//! columns late, for the winners only. [`TopKThresholdRule`] does it in two passes that reuse
//! DataFusion's own operators:
//!
//! 1. a *probe*: the same filter and Top-K over a scan of only the columns the filter and the
//!    ordering need, run once, gives the n-th row's first sort key `T`;
//! 2. the original scan, with `key <= T` (`>=` descending, `OR key IS NULL` when NULLs sort
//!    first) placed ahead of its predicate and evaluated row by row inside the Parquet reader
//!    (`pushdown_filters` for this scan only), so the wide columns are decoded only for rows that
//!    pass both. Every row of the true top n has `key <= T`, so the answer is unchanged.
//!
//! The threshold is a [`DynamicFilterPhysicalExpr`] set before the scan opens its files, so
//! `EXPLAIN` shows where it goes and the scan's metrics stay in the plan.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    lit, BinaryExpr, Column, DynamicFilterPhysicalExpr, IsNullExpr,
};
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use quiver_agg::strings::is_variable_width;
use tokio::sync::OnceCell;

use crate::conjunction::renumber;
use crate::metrics::ErrorContextExec;

/// Above this LIMIT the Top-K keeps too many rows for a second pass to pay.
const MAX_FETCH: usize = 10_000;

/// Rewrites `SortExec(fetch = n)` over `[Filter | round-robin Repartition]*`
/// over a Parquet `DataSourceExec` into a [`TopKThresholdExec`] when the scan reads at least as
/// many columns the filter and ordering do not need as columns they do.
#[derive(Debug, Default)]
pub struct TopKThresholdRule;

impl PhysicalOptimizerRule for TopKThresholdRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            match rewrite(sort)? {
                Some(input) => {
                    let node = replace_children_if_necessary(Arc::clone(&node), vec![input])?;
                    Ok(Transformed::new(node, true, TreeNodeRecursion::Jump))
                }
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "topk_threshold"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The nodes between the Top-K and the scan, top first, and the scan.
struct Chain {
    nodes: Vec<Arc<dyn ExecutionPlan>>,
    scan: Arc<dyn ExecutionPlan>,
}

fn walk(input: &Arc<dyn ExecutionPlan>, needed: &mut BTreeSet<usize>) -> Option<Chain> {
    let mut nodes = Vec::new();
    let mut node = Arc::clone(input);
    loop {
        if let Some(filter) = node.downcast_ref::<FilterExec>() {
            if filter.projection().is_some() {
                return None;
            }
            needed.extend(
                collect_columns(filter.predicate())
                    .iter()
                    .map(|c| c.index()),
            );
        } else if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
            if !matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return None;
            }
        } else if node.is::<DataSourceExec>() || node.is::<ErrorContextExec>() {
            return Some(Chain { nodes, scan: node });
        } else {
            return None;
        }
        let child = Arc::clone(node.children().first()?);
        nodes.push(node);
        node = child;
    }
}

/// The Parquet scan under `scan` (itself, or wrapped in an [`ErrorContextExec`]).
fn parquet_config(
    scan: &Arc<dyn ExecutionPlan>,
) -> Option<(&DataSourceExec, &FileScanConfig, &ParquetSource)> {
    let exec = match scan.downcast_ref::<ErrorContextExec>() {
        Some(wrapper) => wrapper.input().downcast_ref::<DataSourceExec>()?,
        None => scan.downcast_ref::<DataSourceExec>()?,
    };
    let config = exec.data_source().downcast_ref::<FileScanConfig>()?;
    let source = config.file_source().downcast_ref::<ParquetSource>()?;
    Some((exec, config, source))
}

fn orderable(data_type: &DataType) -> bool {
    data_type.is_primitive()
        || matches!(data_type, DataType::Boolean)
        || is_variable_width(data_type)
}

fn rewrite(sort: &SortExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(fetch) = sort.fetch().filter(|n| (1..=MAX_FETCH).contains(n)) else {
        return Ok(None);
    };
    let ordering = sort.expr();
    let first = ordering.first();
    let Some(key) = first.expr.downcast_ref::<Column>() else {
        return Ok(None);
    };
    let mut needed = BTreeSet::new();
    for sort_expr in ordering.iter() {
        needed.extend(collect_columns(&sort_expr.expr).iter().map(|c| c.index()));
    }
    let Some(chain) = walk(sort.input(), &mut needed) else {
        return Ok(None);
    };
    let Some((scan, config, source)) = parquet_config(&chain.scan) else {
        return Ok(None);
    };
    let width = chain.scan.schema().fields().len();
    let others = width.saturating_sub(needed.len());
    if others < needed.len().max(2) {
        return Ok(None);
    }
    let key_type = chain.scan.schema().field(key.index()).data_type().clone();
    // Parquet's float statistics leave NaN out, and NaN sorts first when descending: a
    // `key >= T` would let row-group pruning drop groups whose only winners are NaN.
    if !orderable(&key_type) || (key_type.is_floating() && first.options.descending) {
        return Ok(None);
    }
    // The key as the scan's predicate sees it: a column of the table (file + partition columns).
    let table_schema = Arc::clone(config.file_source().table_schema().table_schema());
    let key_expr: Arc<dyn PhysicalExpr> = Arc::new(key.clone());
    let table_key = match config.file_source().projection() {
        Some(projection) => projection.unproject_expr(&key_expr)?,
        None => key_expr,
    };
    let table_key = reassign_expr_columns(table_key, &table_schema)?;
    let Some(table_column) = table_key.downcast_ref::<Column>() else {
        return Ok(None);
    };
    if table_schema.field(table_column.index()).data_type() != &key_type {
        return Ok(None);
    }

    // The probe: the chain over a scan of the needed columns only.
    let kept: Vec<usize> = needed.into_iter().collect();
    let scan_schema = chain.scan.schema();
    let narrow = ProjectionExec::try_new(
        kept.iter().map(|&i| {
            let name = scan_schema.field(i).name().clone();
            (
                Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                name,
            )
        }),
        Arc::clone(&chain.scan),
    )?;
    let Some(mut probe) = chain.scan.try_swapping_with_projection(&narrow)? else {
        return Ok(None);
    };
    for node in chain.nodes.iter().rev() {
        probe = if let Some(filter) = node.downcast_ref::<FilterExec>() {
            Arc::new(
                FilterExec::try_new(renumber(filter.predicate(), &kept)?, probe)?
                    .with_batch_size(filter.batch_size())?,
            )
        } else {
            // Round-robin repartitioning refers to no column.
            replace_children_if_necessary(Arc::clone(node), vec![probe])?
        };
    }
    let probe_ordering = LexOrdering::new(
        ordering
            .iter()
            .map(|e| Ok(PhysicalSortExpr::new(renumber(&e.expr, &kept)?, e.options)))
            .collect::<Result<Vec<_>>>()?,
    )
    .ok_or_else(|| DataFusionError::Internal("empty ordering".into()))?;
    let probe_sort = SortExec::new(probe_ordering.clone(), probe)
        .with_fetch(Some(fetch))
        .with_preserve_partitioning(true);
    let probe: Arc<dyn ExecutionPlan> = Arc::new(
        SortPreservingMergeExec::new(probe_ordering, Arc::new(probe_sort)).with_fetch(Some(fetch)),
    );
    let probe_key = kept
        .binary_search(&key.index())
        .map_err(|_| DataFusionError::Internal("sort key is not in the probe".into()))?;

    // The main pass: the original chain over the same scan, its predicate led by the threshold
    // and evaluated row by row in the reader.
    let threshold = Arc::new(DynamicFilterPhysicalExpr::new(
        vec![Arc::clone(&table_key)],
        lit(true),
    ));
    let predicate: Arc<dyn PhysicalExpr> = match source.filter() {
        Some(existing) => Arc::new(BinaryExpr::new(
            Arc::clone(&threshold) as Arc<dyn PhysicalExpr>,
            Operator::And,
            existing,
        )),
        None => Arc::clone(&threshold) as Arc<dyn PhysicalExpr>,
    };
    let source = source.with_predicate(predicate).with_pushdown_filters(true);
    let new_config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build();
    let mut main: Arc<dyn ExecutionPlan> =
        Arc::new(scan.clone().with_data_source(Arc::new(new_config)));
    if let Some(wrapper) = chain.scan.downcast_ref::<ErrorContextExec>() {
        main = wrapper.rewrap(main);
    }
    for node in chain.nodes.iter().rev() {
        main = replace_children_if_necessary(Arc::clone(node), vec![main])?;
    }

    Ok(Some(Arc::new(TopKThresholdExec {
        properties: Arc::clone(main.properties()),
        probe,
        main,
        threshold,
        key: table_key,
        probe_key,
        options: first.options,
        fetch,
        ready: Arc::new(OnceCell::new()),
    })))
}

/// Runs its probe once to find the n-th sort key, sets the scan's threshold, then streams the
/// main pass. Output: exactly the main pass's (same schema, partitioning and ordering).
#[derive(Debug, Clone)]
pub struct TopKThresholdExec {
    probe: Arc<dyn ExecutionPlan>,
    main: Arc<dyn ExecutionPlan>,
    threshold: Arc<DynamicFilterPhysicalExpr>,
    /// The first sort key in the scan's table schema.
    key: Arc<dyn PhysicalExpr>,
    /// The first sort key's column in the probe's output.
    probe_key: usize,
    options: SortOptions,
    fetch: usize,
    properties: Arc<PlanProperties>,
    /// Set once the threshold is in place; shared by every partition.
    ready: Arc<OnceCell<std::result::Result<(), Arc<DataFusionError>>>>,
}

impl TopKThresholdExec {
    async fn set_threshold(&self, context: Arc<TaskContext>) -> Result<()> {
        let batches: Vec<_> = self.probe.execute(0, context)?.try_collect().await?;
        let mut skip = self.fetch - 1;
        let mut value = None;
        for batch in &batches {
            if skip < batch.num_rows() {
                value = Some(ScalarValue::try_from_array(
                    batch.column(self.probe_key),
                    skip,
                )?);
                break;
            }
            skip -= batch.num_rows();
        }
        let key = Arc::clone(&self.key);
        let is_null = || Arc::new(IsNullExpr::new(Arc::clone(&key))) as Arc<dyn PhysicalExpr>;
        let condition = match value {
            // Fewer than n rows pass: every one of them is in the answer. The n-th key is NaN
            // (ascending, so NaNs come last): every number wins and so may any NaN.
            None => lit(true),
            Some(v) if is_nan(&v) => lit(true),
            // The n-th key is NULL: with NULLs first every winner is NULL; with NULLs last every
            // non-NULL row wins and so may any NULL.
            Some(v) if v.is_null() => {
                if self.options.nulls_first {
                    is_null()
                } else {
                    lit(true)
                }
            }
            Some(v) => {
                let op = if self.options.descending {
                    Operator::GtEq
                } else {
                    Operator::LtEq
                };
                let bound: Arc<dyn PhysicalExpr> =
                    Arc::new(BinaryExpr::new(Arc::clone(&key), op, lit(v)));
                if self.options.nulls_first {
                    Arc::new(BinaryExpr::new(bound, Operator::Or, is_null()))
                } else {
                    bound
                }
            }
        };
        self.threshold.update(condition)?;
        self.threshold.mark_complete();
        Ok(())
    }
}

fn is_nan(value: &ScalarValue) -> bool {
    match value {
        ScalarValue::Float16(Some(v)) => v.is_nan(),
        ScalarValue::Float32(Some(v)) => v.is_nan(),
        ScalarValue::Float64(Some(v)) => v.is_nan(),
        _ => false,
    }
}

impl DisplayAs for TopKThresholdExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "TopKThresholdExec: fetch={}, key={} {}",
            self.fetch,
            self.key,
            if self.options.descending {
                "DESC"
            } else {
                "ASC"
            }
        )
    }
}

impl ExecutionPlan for TopKThresholdExec {
    fn name(&self) -> &'static str {
        "TopKThresholdExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.probe, &self.main]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        f(&self.key)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(main), Some(probe), true) = (children.pop(), children.pop(), children.is_empty())
        else {
            return Err(DataFusionError::Internal(
                "TopKThresholdExec takes a probe and a main plan".into(),
            ));
        };
        Ok(Arc::new(TopKThresholdExec {
            probe,
            properties: Arc::clone(main.properties()),
            main,
            ..self.as_ref().clone()
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let this = self.clone();
        let schema = self.schema();
        let stream = futures::stream::once(async move {
            let outcome = this
                .ready
                .get_or_init(|| async {
                    this.set_threshold(Arc::clone(&context))
                        .await
                        .map_err(Arc::new)
                })
                .await;
            if let Err(e) = outcome {
                return Err(DataFusionError::Shared(Arc::clone(e)));
            }
            this.main.execute(partition, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.boxed(),
        )))
    }
}
