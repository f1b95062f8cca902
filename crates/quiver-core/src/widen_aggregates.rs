//! SUM and AVG of integers over the column itself, and `count(*)` over a column already read.
//!
//! DataFusion's type coercion turns `sum(x)` of an `Int16` into `sum(CAST(x AS Int64))` and
//! `avg(x)` into `avg(CAST(x AS Float64))`, and `count(*)` is `count(Int64(1))`: each batch
//! then allocates and fills a 64-bit array per aggregate before adding it up. [`WidenAggregates`]
//! replaces those with quiver-functions' [`widening`](quiver_functions::widening) aggregates,
//! which read the integer column as it is — SUM and AVG only without GROUP BY, where that array
//! is most of the work — and `count_rows`, which only asks its argument for its length, given
//! a column the aggregation reads anyway (a key, or another aggregate's argument). The output
//! columns keep their names and types; AVG's sum becomes exact (DataFusion adds floats).
//!
//! Measured over ClickBench's 5M-row `hits` DataFrame: `SELECT sum(AdvEngineID), count(*),
//! avg(ResolutionWidth) FROM hits` 6.6 → 2.0 ms and `SELECT avg(UserID) FROM hits` 6.1 → 2.3 ms.
//!
//! It runs after every DataFusion rule, so the rules that recognise `sum`, `avg` and `count` by
//! name (the DISTINCT rewrites, quiver's own in `distinct_groups`) have seen them first. It
//! leaves alone DISTINCT, ORDER BY inside the call, other casts, and a `count(*)` beside nothing
//! that reads a column (`SELECT count(*) FROM t WHERE …`: giving it a column would make the
//! filter below keep that column's values).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Aggregate, AggregateUDF, Cast, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use quiver_functions::widening::{CountRows, WideningAvg, WideningSum};

use crate::distinct_groups::replace_aggregates;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct WidenAggregates;

impl OptimizerRule for WidenAggregates {
    fn name(&self) -> &str {
        "quiver_widen_aggregates"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        replace_aggregates(plan, replacement)
    }
}

/// The first column the grouping keys or the aggregates' arguments and filters read, if any.
fn first_column(aggregate: &Aggregate) -> Result<Option<Column>> {
    let mut found = None;
    for expr in aggregate.group_expr.iter().chain(&aggregate.aggr_expr) {
        expr.apply(|node| {
            Ok(match node {
                Expr::Column(column) => {
                    found = Some(column.clone());
                    TreeNodeRecursion::Stop
                }
                _ => TreeNodeRecursion::Continue,
            })
        })?;
        if found.is_some() {
            break;
        }
    }
    Ok(found)
}

/// The widening call computing `function` over `aggregate`'s input, if there is one.
fn replacement(aggregate: &Aggregate, function: &AggregateFunction) -> Result<Option<Expr>> {
    let params = &function.params;
    if params.distinct || !params.order_by.is_empty() || params.null_treatment.is_some() {
        return Ok(None);
    }
    let input = aggregate.input.schema();
    let (udaf, arg) = match (function.func.name(), params.args.as_slice()) {
        ("sum" | "avg", [Expr::Cast(Cast { expr, field })]) if aggregate.group_expr.is_empty() => {
            let from = expr.get_type(input)?;
            let to = field.data_type();
            let udaf = match function.func.name() {
                "sum" if WideningSum::supports(&from, to) => {
                    AggregateUDF::from(WideningSum::default())
                }
                "avg" if WideningAvg::supports(&from, to) => {
                    AggregateUDF::from(WideningAvg::default())
                }
                _ => return Ok(None),
            };
            (udaf, expr.as_ref().clone())
        }
        ("count", [Expr::Literal(value, _)]) if !value.is_null() => {
            // Any column has one value per row; one the aggregation reads anyway costs nothing.
            // (Any other column of the input would cost: a filter below would have to keep it.)
            let Some(column) = first_column(aggregate)? else {
                return Ok(None);
            };
            (
                AggregateUDF::from(CountRows::default()),
                Expr::Column(column),
            )
        }
        _ => return Ok(None),
    };
    Ok(Some(Expr::AggregateFunction(AggregateFunction::new_udf(
        Arc::new(udaf),
        vec![arg],
        false,
        params.filter.clone(),
        vec![],
        None,
    ))))
}
