//! No bounded (Top-K) aggregation over floats, whose NaN DataFusion 55's priority map mishandles.
//!
//! DataFusion's `TopKAggregation` rule gives `GROUP BY k ORDER BY k LIMIT n`,
//! `SELECT DISTINCT k … ORDER BY k LIMIT n` and `GROUP BY k ORDER BY max(v) LIMIT n` an
//! aggregation that keeps only the best `n` groups in a priority map. Its map hashes and
//! compares float keys so that NaN never equals NaN: over `f REAL` holding 1, NaN, 2, NaN, 3,
//! `SELECT DISTINCT f FROM t ORDER BY 1 LIMIT 10` returned NaN twice, and `SELECT f FROM t
//! GROUP BY f ORDER BY f DESC LIMIT 2` panicked (`entered unreachable code` in its
//! `remove_at`). [`ExactFloatTopK`] takes the bound off every aggregation whose keys or
//! aggregate arguments are floats; the sort with its LIMIT above stays, and the aggregation is
//! the ordinary one, which groups NaN as one key.
//!
//! It is a correctness fix, so it runs whatever `quiver.optimizations` says.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::ExecutionPlan;

/// Removes the Top-K bound from aggregations over float keys or values.
#[derive(Debug, Default)]
pub struct ExactFloatTopK;

impl PhysicalOptimizerRule for ExactFloatTopK {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if aggregate.limit_options().is_none() || !over_floats(aggregate)? {
                return Ok(Transformed::no(node));
            }
            Ok(Transformed::yes(Arc::new(
                aggregate.with_new_limit_options(None),
            )))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "exact_float_topk"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether a key or an aggregate argument of `aggregate` is a float.
fn over_floats(aggregate: &AggregateExec) -> Result<bool> {
    let schema = aggregate.input_schema();
    let keys = aggregate
        .group_expr()
        .expr()
        .iter()
        .map(|(e, _)| Arc::clone(e));
    let arguments = aggregate.aggr_expr().iter().flat_map(|a| a.expressions());
    for expr in keys.chain(arguments) {
        if is_float(&expr.data_type(&schema)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn is_float(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(_, value) => is_float(value),
        other => other.is_floating(),
    }
}
