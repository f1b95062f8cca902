//! ORDER BY keeps every key it was given but exact repeats.
//!
//! DataFusion 55's `eliminate_duplicated_expr` drops ORDER BY keys it takes to be determined by
//! earlier ones through the input's functional dependencies. Those dependencies are wrong after
//! a join: the key of a grouped subquery stays a key of the join's output, though the join
//! repeats it once per matching row. So `SELECT s3.k, sum(t1.v) AS w FROM t t1 JOIN (SELECT s
//! AS k FROM t GROUP BY s) s3 ON t1.s = s3.k GROUP BY t1.g, s3.k ORDER BY 1, 2` was sorted by
//! `k` alone, and with a LIMIT returned the wrong rows (found by quiver's query fuzzer;
//! upstream family apache/datafusion#23626).
//!
//! [`ExactSortKeys`] takes that rule's place: it removes repeated ORDER BY keys and repeated
//! GROUP BY expressions, as DataFusion's does, and nothing determined only through functional
//! dependencies. A key that was truly determined costs one more comparison in the sort, only
//! for rows whose earlier keys tie. A correctness fix, so it runs whatever
//! `quiver.optimizations` says.

use datafusion::common::tree_node::Transformed;
use datafusion::common::Result;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, Sort, SortExpr};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The name of the DataFusion rule [`ExactSortKeys`] replaces.
pub const REPLACES: &str = "eliminate_duplicated_expr";

/// Removes exact repeats of ORDER BY keys and GROUP BY expressions.
#[derive(Debug, Default)]
pub struct ExactSortKeys;

impl OptimizerRule for ExactSortKeys {
    fn name(&self) -> &str {
        "quiver_exact_sort_keys"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        match plan {
            LogicalPlan::Sort(sort) => {
                // The first occurrence of each key decides; a later one with another direction
                // can never break a tie the first left.
                let mut keys: Vec<SortExpr> = Vec::with_capacity(sort.expr.len());
                for key in &sort.expr {
                    if !keys.iter().any(|kept| kept.expr == key.expr) {
                        keys.push(key.clone());
                    }
                }
                if keys.len() == sort.expr.len() {
                    return Ok(Transformed::no(LogicalPlan::Sort(sort)));
                }
                Ok(Transformed::yes(LogicalPlan::Sort(Sort {
                    expr: keys,
                    input: sort.input,
                    fetch: sort.fetch,
                })))
            }
            LogicalPlan::Aggregate(aggregate) => {
                let mut keys: Vec<Expr> = Vec::with_capacity(aggregate.group_expr.len());
                for key in &aggregate.group_expr {
                    if !keys.contains(key) {
                        keys.push(key.clone());
                    }
                }
                if keys.len() == aggregate.group_expr.len() {
                    return Ok(Transformed::no(LogicalPlan::Aggregate(aggregate)));
                }
                Aggregate::try_new(aggregate.input, keys, aggregate.aggr_expr)
                    .map(|rebuilt| Transformed::yes(LogicalPlan::Aggregate(rebuilt)))
            }
            _ => Ok(Transformed::no(plan)),
        }
    }
}
