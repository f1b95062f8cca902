//! Hash join sides chosen by row count where DataFusion's byte estimates mislead it.
//!
//! DataFusion's join selection builds the hash table on the side whose estimated size in bytes
//! is smaller, and looks at rows only when a byte size is unknown. Its byte estimates of join
//! outputs are not scaled with their rows: in TPC-H Q21 the semi join feeding the `NOT EXISTS`
//! keeps 16.2 MB for 80 thousand rows, so the anti join built its table on the 2 million rows
//! of `lineitem l3` (16.0 MB) instead. Besides the larger table, the wrong side loses the
//! run-time filter: the probe side's scan is the one that receives the build side's keys, and
//! a Postgres scan sends them to the server (3.8M rows became 360K).
//!
//! [`RowCountJoinSides`] runs right after DataFusion's join selection and swaps a partitioned
//! hash join whose build side is estimated to have at least [`SWAP_FACTOR`] times the probe
//! side's rows. Only partitioned joins: a `CollectLeft` join was chosen because its build side
//! is small enough to collect, and the factor keeps DataFusion's choice wherever the two
//! estimates are close.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;

/// The build side must be estimated this many times larger in rows to be swapped.
pub const SWAP_FACTOR: usize = 10;

/// Swaps partitioned hash joins that build on the side with far more rows.
#[derive(Debug, Default)]
pub struct RowCountJoinSides;

impl PhysicalOptimizerRule for RowCountJoinSides {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !config.optimizer.join_reordering {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            if *join.partition_mode() != PartitionMode::Partitioned
                || !join.join_type().supports_swap()
                || join.null_aware
            {
                return Ok(Transformed::no(node));
            }
            let (Some(build), Some(probe)) = (rows(join.left()), rows(join.right())) else {
                return Ok(Transformed::no(node));
            };
            if build < probe.max(1).saturating_mul(SWAP_FACTOR) {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(
                join.swap_inputs(PartitionMode::Partitioned)?,
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quiver_row_count_join_sides"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The estimated rows of `plan`'s output, when known.
fn rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    StatisticsContext::new()
        .compute(plan.as_ref(), &StatisticsArgs::new())
        .ok()?
        .num_rows
        .get_value()
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::{JoinType, NullEquality};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::Column;

    fn source(name: &str, rows: i32) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Int32, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int32Array::from_iter_values(0..rows))],
        )
        .unwrap();
        MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
    }

    fn join(
        build: i32,
        probe: i32,
        mode: PartitionMode,
        join_type: JoinType,
    ) -> Arc<dyn ExecutionPlan> {
        let (left, right) = (source("b", build), source("p", probe));
        let on = vec![(
            Arc::new(Column::new("b", 0)) as _,
            Arc::new(Column::new("p", 0)) as _,
        )];
        Arc::new(
            HashJoinExec::try_new(
                left,
                right,
                on,
                None,
                &join_type,
                None,
                mode,
                NullEquality::NullEqualsNothing,
                false,
            )
            .unwrap(),
        )
    }

    /// The build side's row count and the join type after the rule.
    fn optimized(plan: Arc<dyn ExecutionPlan>, reordering: bool) -> (usize, JoinType) {
        let mut config = ConfigOptions::default();
        config.optimizer.join_reordering = reordering;
        let plan = RowCountJoinSides.optimize(plan, &config).unwrap();
        let join = plan
            .downcast_ref::<HashJoinExec>()
            .or_else(|| plan.children()[0].downcast_ref::<HashJoinExec>())
            .expect("a hash join");
        (rows(join.left()).unwrap(), *join.join_type())
    }

    #[test]
    fn builds_on_the_side_with_far_fewer_rows() {
        // An anti join building on 1,000 rows against 50: swapped, and the type with it.
        let anti = join(1000, 50, PartitionMode::Partitioned, JoinType::LeftAnti);
        assert_eq!(optimized(anti, true), (50, JoinType::RightAnti));
        let inner = join(1000, 50, PartitionMode::Partitioned, JoinType::Inner);
        assert_eq!(optimized(inner, true), (50, JoinType::Inner));
        // Close estimates keep DataFusion's choice, as do collected joins and a session
        // without join reordering.
        let close = join(400, 50, PartitionMode::Partitioned, JoinType::Inner);
        assert_eq!(optimized(close, true), (400, JoinType::Inner));
        let collected = join(1000, 50, PartitionMode::CollectLeft, JoinType::Inner);
        assert_eq!(optimized(collected, true), (1000, JoinType::Inner));
        let kept = join(1000, 50, PartitionMode::Partitioned, JoinType::Inner);
        assert_eq!(optimized(kept, false), (1000, JoinType::Inner));
    }
}
