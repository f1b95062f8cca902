//! `COUNT(DISTINCT s)` of a string beside `COUNT(*)` or `AVG(x)`, computed as two GROUP BYs.
//!
//! DataFusion turns `SELECT g, count(DISTINCT s), sum(a) … GROUP BY g` into a GROUP BY `g, s`
//! under a GROUP BY `g` (its `single_distinct_aggregation_to_group_by`), but only when every
//! other aggregate is SUM, MIN or MAX. With a COUNT or an AVG beside the distinct aggregate
//! it keeps a set of values per group instead, and for strings each group's set starts with
//! buffers of several KiB: `SELECT UserID, count(*), count(DISTINCT SearchPhrase) … GROUP BY
//! UserID` over ClickBench's 5M-row `hits` (half a million users) grew past 24 GB and was
//! killed, and over 10,000 regions it took twice as long as the two GROUP BYs.
//!
//! [`MixedDistinctToGroupBy`] rewrites those aggregates too, when the distinct argument is a
//! string or binary and there are grouping keys. The inner GROUP BY groups by the original
//! keys plus the distinct argument and computes, per inner group:
//! - SUM, MIN, MAX: the aggregate itself, applied again by the outer GROUP BY;
//! - COUNT: the count, which the outer GROUP BY sums (0 where there is nothing to sum, as
//!   COUNT over no rows is 0, not NULL);
//! - AVG (over `Float64`, which is what DataFusion averages integers and floats as): a sum and
//!   a count, and the outer result is the sum of the sums over the sum of the counts.
//!
//! The distinct aggregates (COUNT, SUM, MIN, MAX, AVG, all over the same argument) become the
//! plain aggregate over the inner GROUP BY's distinct values.
//!
//! It leaves alone a distinct argument of any other type, what DataFusion's rule already
//! handles, FILTER and ORDER BY clauses, grouping sets, and any rewrite that would change an
//! output type.
//!
//! [`DistinctCountSets`] handles `COUNT(DISTINCT x)` of an integer under a GROUP BY, whatever
//! sits beside it: it becomes quiver-functions' [`DistinctCount`], one hash table of (group,
//! value) pairs for all groups, where DataFusion would keep a set per group and feed each one
//! through its per-group adapter. Two GROUP BYs measured slower for these: ClickBench's Q9
//! (COUNT(DISTINCT UserID) beside SUM, COUNT and AVG by region) took about 0.1 s longer
//! rewritten than with DataFusion's sets.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, Result};
use datafusion::functions::expr_fn::coalesce;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    cast, lit, Aggregate, AggregateUDF, Expr, ExprSchemable, LogicalPlan, Projection,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use quiver_agg::strings::is_variable_width;
use quiver_functions::distinct_count::{self, DistinctCount};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct MixedDistinctToGroupBy;

/// How one aggregate of the original GROUP BY is computed in two.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// An aggregate over the distinct argument, applied without DISTINCT to the inner GROUP
    /// BY's values of that argument.
    Distinct,
    /// SUM, MIN or MAX: per inner group, then again over those.
    Again,
    /// COUNT: per inner group, then summed.
    Count,
    /// AVG over `Float64`: a sum and a count per inner group.
    Avg,
}

impl OptimizerRule for MixedDistinctToGroupBy {
    fn name(&self) -> &str {
        "quiver_mixed_distinct_to_group_by"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let Some((kinds, distinct_arg)) = classify(aggregate)? else {
            return Ok(Transformed::no(plan));
        };
        match two_group_bys(aggregate, &kinds, distinct_arg, config)? {
            Some(rewritten) => Ok(Transformed::yes(rewritten)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// The aggregate's parts and its distinct argument, when the rule applies to it.
fn classify(aggregate: &Aggregate) -> Result<Option<(Vec<Kind>, Expr)>> {
    if has_grouping_sets(aggregate) {
        return Ok(None);
    }
    let mut kinds = Vec::with_capacity(aggregate.aggr_expr.len());
    let mut distinct_arg: Option<&Expr> = None;
    for expr in &aggregate.aggr_expr {
        let Expr::AggregateFunction(function) = without_alias(expr) else {
            return Ok(None);
        };
        let params = &function.params;
        if params.filter.is_some() || !params.order_by.is_empty() {
            return Ok(None);
        }
        let name = function.func.name().to_ascii_lowercase();
        let kind = if params.distinct {
            let [arg] = params.args.as_slice() else {
                return Ok(None);
            };
            if !matches!(name.as_str(), "count" | "sum" | "min" | "max" | "avg") {
                return Ok(None);
            }
            match distinct_arg {
                Some(seen) if seen != arg => return Ok(None),
                _ => distinct_arg = Some(arg),
            }
            Kind::Distinct
        } else {
            match name.as_str() {
                "sum" | "min" | "max" => Kind::Again,
                "count" => Kind::Count,
                "avg" => match params.args.as_slice() {
                    [arg] if arg.get_type(aggregate.input.schema())? == DataType::Float64 => {
                        Kind::Avg
                    }
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            }
        };
        kinds.push(kind);
    }
    // Without a COUNT or an AVG, DataFusion's own rule does this rewrite.
    let needed = kinds
        .iter()
        .any(|kind| matches!(kind, Kind::Count | Kind::Avg));
    let Some(arg) = distinct_arg else {
        return Ok(None);
    };
    let bytes = is_variable_width(&arg.get_type(aggregate.input.schema())?);
    if needed && bytes && !aggregate.group_expr.is_empty() {
        Ok(Some((kinds, arg.clone())))
    } else {
        Ok(None)
    }
}

fn has_grouping_sets(aggregate: &Aggregate) -> bool {
    (aggregate.group_expr.iter()).any(|expr| matches!(expr, Expr::GroupingSet(_)))
}

/// The expression under any aliases (the optimizer's simplifications alias an aggregate they
/// rewrite, to keep its name); the output names come from the aggregate's schema.
fn without_alias(mut expr: &Expr) -> &Expr {
    while let Expr::Alias(alias) = expr {
        expr = &alias.expr;
    }
    expr
}

fn aggregate_call(func: Arc<AggregateUDF>, arg: Expr) -> Expr {
    Expr::AggregateFunction(AggregateFunction::new_udf(
        func,
        vec![arg],
        false,
        None,
        vec![],
        None,
    ))
}

fn column(name: &str) -> Expr {
    Expr::Column(Column::from_name(name))
}

/// The aggregate as a GROUP BY (keys, distinct argument) under a GROUP BY keys, projected to
/// the original schema; `None` if that would change an output type.
fn two_group_bys(
    aggregate: &Aggregate,
    kinds: &[Kind],
    distinct_arg: Expr,
    config: &dyn OptimizerConfig,
) -> Result<Option<LogicalPlan>> {
    let aliases = config.alias_generator();
    let schema = &aggregate.schema;
    let key_count = aggregate.group_expr.len();

    let mut inner_keys = Vec::with_capacity(key_count + 1);
    let mut outer_keys = Vec::with_capacity(key_count);
    let mut output = Vec::with_capacity(schema.fields().len());
    for (index, key) in aggregate.group_expr.iter().enumerate() {
        if let Expr::Column(_) = key {
            inner_keys.push(key.clone());
            outer_keys.push(key.clone());
            output.push(key.clone());
        } else {
            // A computed key is named in the inner GROUP BY, so the outer one can refer to it.
            let name = aliases.next("__quiver_key");
            let (qualifier, field) = schema.qualified_field(index);
            inner_keys.push(key.clone().alias(&name));
            outer_keys.push(column(&name));
            output.push(column(&name).alias_qualified(qualifier.cloned(), field.name()));
        }
    }
    let distinct_name = aliases.next("__quiver_distinct");
    inner_keys.push(distinct_arg.alias(&distinct_name));

    // Per original aggregate: the outer aggregates it needs, and how to finish from them.
    let mut inner_aggregates = Vec::new();
    let mut outer_aggregates = Vec::new();
    let mut inner = |call: Expr| {
        let name = aliases.next("__quiver_part");
        inner_aggregates.push(call.alias(&name));
        column(&name)
    };
    for (expr, kind) in aggregate.aggr_expr.iter().zip(kinds) {
        let Expr::AggregateFunction(function) = without_alias(expr) else {
            return Ok(None);
        };
        let func = Arc::clone(&function.func);
        let args = function.params.args.clone();
        match kind {
            Kind::Distinct => outer_aggregates.push(aggregate_call(func, column(&distinct_name))),
            Kind::Again => {
                let part = inner(Expr::AggregateFunction(AggregateFunction::new_udf(
                    Arc::clone(&func),
                    args,
                    false,
                    None,
                    vec![],
                    function.params.null_treatment,
                )));
                outer_aggregates.push(aggregate_call(func, part));
            }
            Kind::Count => {
                let part = inner(Expr::AggregateFunction(AggregateFunction::new_udf(
                    func,
                    args,
                    false,
                    None,
                    vec![],
                    None,
                )));
                outer_aggregates.push(aggregate_call(sum_udaf(), part));
            }
            Kind::Avg => {
                let [arg] = args.as_slice() else {
                    return Ok(None);
                };
                let sum = inner(aggregate_call(sum_udaf(), arg.clone()));
                let count = inner(aggregate_call(count_udaf(), arg.clone()));
                outer_aggregates.push(aggregate_call(sum_udaf(), sum));
                outer_aggregates.push(aggregate_call(sum_udaf(), count));
            }
        }
    }

    let inner = LogicalPlan::Aggregate(Aggregate::try_new(
        Arc::clone(&aggregate.input),
        inner_keys,
        inner_aggregates,
    )?);
    let outer = Aggregate::try_new(Arc::new(inner), outer_keys, outer_aggregates)?;
    let outer_schema = Arc::clone(&outer.schema);
    let mut results = (key_count..outer_schema.fields().len()).map(|index| {
        let (qualifier, field) = outer_schema.qualified_field(index);
        Expr::Column(Column::new(qualifier.cloned(), field.name()))
    });
    for (index, kind) in kinds.iter().enumerate() {
        let (qualifier, field) = schema.qualified_field(key_count + index);
        let mut next = || results.next();
        let finished = match kind {
            Kind::Distinct | Kind::Again => next(),
            Kind::Count => next().map(|total| coalesce(vec![total, lit(0_i64)])),
            Kind::Avg => match (next(), next()) {
                (Some(sum), Some(count)) => Some(sum / cast(count, DataType::Float64)),
                _ => None,
            },
        };
        let Some(finished) = finished else {
            return Ok(None);
        };
        if finished.get_type(&outer_schema)? != *field.data_type() {
            return Ok(None);
        }
        output.push(finished.alias_qualified(qualifier.cloned(), field.name()));
    }
    let projection = Projection::try_new(output, Arc::new(LogicalPlan::Aggregate(outer)))?;
    Ok(Some(LogicalPlan::Projection(projection)))
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct DistinctCountSets;

impl OptimizerRule for DistinctCountSets {
    fn name(&self) -> &str {
        "quiver_distinct_count_sets"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        if aggregate.group_expr.is_empty() || has_grouping_sets(aggregate) {
            return Ok(Transformed::no(plan));
        }
        replace_aggregates(plan, |aggregate, function| {
            if !function.params.distinct
                || !function.params.order_by.is_empty()
                || !function.func.name().eq_ignore_ascii_case("count")
            {
                return Ok(None);
            }
            Ok(match function.params.args.as_slice() {
                [arg] if distinct_count::supports(&arg.get_type(aggregate.input.schema())?) => {
                    Some(Expr::AggregateFunction(AggregateFunction::new_udf(
                        Arc::new(AggregateUDF::from(DistinctCount::default())),
                        vec![arg.clone()],
                        false,
                        function.params.filter.clone(),
                        vec![],
                        None,
                    )))
                }
                _ => None,
            })
        })
    }
}

/// `plan`, an aggregation, with each aggregate call for which `replace` gives another call
/// computing it replaced by that call under the original's name. The plan is left as it was
/// unless its output keeps the same columns with the same names, types and nullability.
pub(crate) fn replace_aggregates(
    plan: LogicalPlan,
    replace: impl Fn(&Aggregate, &AggregateFunction) -> Result<Option<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Aggregate(aggregate) = &plan else {
        return Ok(Transformed::no(plan));
    };
    // The aggregates' columns follow the keys' — with grouping sets, every key of every set
    // and the grouping id (`ROLLUP(a)` is one expression but two columns).
    let keys = aggregate.group_expr_len()?;
    let mut changed = false;
    let mut aggregates = Vec::with_capacity(aggregate.aggr_expr.len());
    for (index, expr) in aggregate.aggr_expr.iter().enumerate() {
        let replacement = match without_alias(expr) {
            Expr::AggregateFunction(function) => replace(aggregate, function)?,
            _ => None,
        };
        aggregates.push(match replacement {
            Some(call) => {
                changed = true;
                let (qualifier, field) = aggregate.schema.qualified_field(keys + index);
                call.alias_qualified(qualifier.cloned(), field.name())
            }
            None => expr.clone(),
        });
    }
    if !changed {
        return Ok(Transformed::no(plan));
    }
    let rewritten = Aggregate::try_new(
        Arc::clone(&aggregate.input),
        aggregate.group_expr.clone(),
        aggregates,
    )?;
    let same = rewritten.schema.fields().len() == aggregate.schema.fields().len()
        && rewritten
            .schema
            .iter()
            .zip(aggregate.schema.iter())
            .all(|((q1, f1), (q2, f2))| {
                q1 == q2
                    && f1.name() == f2.name()
                    && f1.data_type() == f2.data_type()
                    && f1.is_nullable() == f2.is_nullable()
            });
    if same {
        Ok(Transformed::yes(LogicalPlan::Aggregate(rewritten)))
    } else {
        Ok(Transformed::no(plan))
    }
}
