//! Right answers for `x NOT IN (subquery)`, which DataFusion 55.2 gets wrong in most shapes.
//!
//! DataFusion 55.2 turns a `NOT IN` conjunct into a "null-aware" anti join whose NULL handling
//! is global: one NULL on the subquery side empties the whole result, and an outer row with a
//! NULL `x` is dropped whenever the subquery side has any row. That is right for an
//! uncorrelated subquery compared with a column, and wrong as soon as the set depends on the
//! outer row or `x` is an expression:
//! - apache/datafusion#25336: a correlated NOT IN with a non-equality correlation returns no
//!   rows (one NULL anywhere in the subquery's table suppresses everything);
//! - #25347: a correlated NOT IN ignores the subquery's NULLs, or takes NULL correlation keys
//!   for NOT IN's NULLs; with an equality correlation over nullable columns it fails to plan
//!   ("null_aware anti join only supports single column join key");
//! - #25473/#25474: `NULL NOT IN (SELECT id …)` over a NOT NULL `id` keeps every row: the
//!   null-awareness is decided from the nullability of *columns*, and a literal has none;
//! - under OR, NOT, IS NULL or CASE it uses a mark join, which is never null-aware.
//!
//! [`QuiverNotInSubquery`] runs before every DataFusion rule (before `rewrite_set_comparison`
//! and `decorrelate_predicate_subquery`) and rewrites each occurrence in a `Filter` predicate
//! (WHERE, HAVING) into a form DataFusion evaluates correctly. `x` is the value before NOT IN,
//! `y` the subquery's column. A position is *positive* when only AND and OR lie between it and
//! the predicate's root (or it is the operand of IS TRUE / IS NOT TRUE): there UNKNOWN and
//! FALSE both drop the row, so only TRUE has to be preserved. The first matching row applies:
//!
//! | | shape | becomes | why it is right |
//! |---|---|---|---|
//! | N1 | a conjunct of the predicate, uncorrelated, `x` a column or a cast of one | unchanged | DataFusion's single-key null-aware hash anti join |
//! | N2 | a conjunct, uncorrelated, any other `x` | `x` projected below the filter as a helper column, then N1 | the helper's nullability is the expression's, so the join is null-aware when it must be |
//! | N4 | correlated, the subquery an aggregate without GROUP BY | `x <> (SELECT agg …)` | the set has exactly one row, and `x NOT IN {v}` is `x <> v`, NULLs included |
//! | N3 | positive | `NOT EXISTS (SELECT … WHERE y = x OR y IS NULL OR x IS NULL)` | TRUE exactly when no row makes `x = y` TRUE or UNKNOWN; NOT EXISTS is two-valued and decorrelates per outer row |
//! | N5 | anywhere else (under NOT, IS NULL, CASE, …) | `x <> ALL (SELECT …)` | `rewrite_set_comparison` expands it into three EXISTS that keep UNKNOWN |
//! | N6 | what no rewrite above handles correctly | refused, suggesting NOT EXISTS | the shapes `Refusal` lists, wrong or unplannable in DataFusion 55.2 whatever the rewrite |
//!
//! N4 comes before N3 because N3 would lose the "exactly one row" of an aggregate without
//! GROUP BY (the count bug: `x NOT IN (SELECT count(*) … WHERE s.g = t.g)` must compare with 0
//! where no row matches). In N3 the `IS NULL` tests are left out for a side that cannot be
//! NULL, so with NOT NULL columns `y = x` stays a hash join key. A non-column `x` that must be
//! evaluated once per row (volatile, or holding a scalar subquery) is projected as a helper
//! column before N3 or N5 moves it into the subquery. ORDER BY without LIMIT inside the
//! subquery is dropped first: it cannot change the set, and DataFusion cannot decorrelate
//! through it.
//!
//! N3 and N5 put a correlated condition on top of the subquery, which DataFusion then pulls
//! up into a join. That keeps the meaning only if nothing below depends on the set of rows per
//! outer row, so a subquery is refused when an operator over rows that depend on the outer
//! query would give a different answer (LIMIT, an aggregate without GROUP BY under HAVING, the
//! optional side of an outer join) or cannot be decorrelated (UNION, window functions, a
//! derived table or a SELECT list reading outer columns). Those shapes are planning errors or
//! wrong answers in DataFusion 55.2 too. Grouped aggregates, DISTINCT, joins and filters that
//! read only outer columns decorrelate correctly.
//!
//! `x IN (subquery)` is mostly right in DataFusion 55.2 and is left alone, except where it is
//! not: in non-positive positions it becomes `x = ANY (…)` (a mark join cannot say UNKNOWN),
//! and over a correlated aggregate without GROUP BY it becomes `x = (SELECT agg …)` (the count
//! bug). IN is never refused.
//!
//! The rule is stable across optimizer passes: its outputs hold no IN subquery, except N1's and
//! N2's column `NOT IN`, which N1 leaves unchanged.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::FieldRef;
use datafusion::common::alias::AliasGenerator;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ExprSchema, Result};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::{Exists, InSubquery, SetComparison, SetQuantifier};
use datafusion::logical_expr::{
    binary_expr, Aggregate, BinaryExpr, Distinct, Expr, ExprSchemable, Filter, JoinType,
    LogicalPlan, LogicalPlanBuilder, Operator, Projection, Subquery,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::error::QuiverError;

/// The prefix of N2's helper columns (`__quiver_not_in_lhs_1`, …).
const HELPER_PREFIX: &str = "__quiver_not_in_lhs";

/// Rewrites `IN` / `NOT IN` subqueries in filters into shapes DataFusion 55.2 answers
/// correctly, and refuses the few it cannot (see the [module documentation](crate::not_in_subquery)).
///
/// It must run before `rewrite_set_comparison` and `decorrelate_predicate_subquery`: insert
/// it at index 0 of the logical optimizer's rules.
///
/// ```sql
/// -- t1.id: 1, 2, NULL, 4; t2: (1, z 5), (NULL, z 50). DataFusion 55.2 returns no rows;
/// -- DuckDB and PostgreSQL return 2, 4 (apache/datafusion#25336).
/// SELECT id FROM t1 WHERE id NOT IN (SELECT t2.id FROM t2 WHERE t2.z < t1.z);
/// -- is planned as
/// SELECT id FROM t1 WHERE NOT EXISTS (
///     SELECT t2.id FROM t2 WHERE t2.z < t1.z AND (t2.id = t1.id OR t2.id IS NULL OR t1.id IS NULL));
/// ```
#[derive(Debug, Default)]
pub struct QuiverNotInSubquery;

impl OptimizerRule for QuiverNotInSubquery {
    fn name(&self) -> &str {
        "quiver_not_in_subquery"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        // Almost no plan has an IN subquery: one read-only walk, and no node is rebuilt.
        if !plan_has_in_subquery(&plan)? {
            return Ok(Transformed::no(plan));
        }
        let aliases = Arc::clone(config.alias_generator());
        // Bottom-up, subqueries included: a subquery's own filters are rewritten before the
        // occurrence that uses it is judged.
        plan.transform_up_with_subqueries(|node| rewrite_filter(node, &aliases))
    }
}

/// Whether any expression of `plan` or of its subqueries is an IN subquery.
fn plan_has_in_subquery(plan: &LogicalPlan) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            if has_in_subquery(expr)? {
                found = true;
                Ok(TreeNodeRecursion::Stop)
            } else {
                Ok(TreeNodeRecursion::Continue)
            }
        })
    })?;
    Ok(found)
}

fn has_in_subquery(expr: &Expr) -> Result<bool> {
    expr.exists(|e| Ok(matches!(e, Expr::InSubquery(_))))
}

/// Rewrites the IN subqueries of one `Filter` node; any other node is returned as it is.
fn rewrite_filter(node: LogicalPlan, aliases: &AliasGenerator) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Filter(filter) = node else {
        return Ok(Transformed::no(node));
    };
    if !has_in_subquery(&filter.predicate)? {
        return Ok(Transformed::no(LogicalPlan::Filter(filter)));
    }
    let mut rewriter = PredicateRewriter {
        outer: Arc::clone(filter.input.schema()),
        aliases,
        helpers: Vec::new(),
    };
    let predicate = rewriter.visit(filter.predicate.clone(), Position::Top)?;
    if !predicate.transformed {
        return Ok(Transformed::no(LogicalPlan::Filter(filter)));
    }
    let input = Arc::clone(&filter.input);
    if rewriter.helpers.is_empty() {
        let filter = Filter::try_new(predicate.data, input)?;
        return Ok(Transformed::yes(LogicalPlan::Filter(filter)));
    }
    // Helper columns: Projection(input columns) over Filter over Projection(input columns,
    // helpers), so the node's output schema stays what it was.
    let columns: Vec<Expr> = input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let mut with_helpers = columns.clone();
    with_helpers.append(&mut rewriter.helpers);
    let below = Projection::try_new(with_helpers, input)?;
    let filter = Filter::try_new(predicate.data, Arc::new(LogicalPlan::Projection(below)))?;
    let above = Projection::try_new(columns, Arc::new(LogicalPlan::Filter(filter)))?;
    Ok(Transformed::yes(LogicalPlan::Projection(above)))
}

/// Where an occurrence sits in the filter predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// A conjunct of the predicate: DataFusion turns it into an anti (or semi) join.
    Top,
    /// Below OR (and AND) only, or under IS [NOT] TRUE: UNKNOWN and FALSE give the same rows.
    Positive,
    /// Anywhere else: UNKNOWN must stay UNKNOWN.
    NonPositive,
}

impl Position {
    fn under_or(self) -> Self {
        match self {
            Position::NonPositive => Position::NonPositive,
            Position::Top | Position::Positive => Position::Positive,
        }
    }

    fn is_positive(self) -> bool {
        self != Position::NonPositive
    }
}

/// What `x` is, as far as the rewrites are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lhs {
    /// A column of the filter's input, or a cast of one (not a TRY_CAST, which makes NULLs).
    Column,
    /// Another expression over the filter's input, which may be evaluated once per pair of
    /// rows.
    Pure,
    /// An expression to evaluate once per row: volatile, or holding a scalar subquery.
    PerRow,
    /// Reads a column of an enclosing query.
    Outer,
    /// Holds an EXISTS, IN or ANY/ALL subquery.
    PredicateSubquery,
}

impl Lhs {
    fn of(x: &Expr) -> Result<Lhs> {
        if x.contains_outer() {
            return Ok(Lhs::Outer);
        }
        if x.exists(|e| {
            Ok(matches!(
                e,
                Expr::Exists(_) | Expr::InSubquery(_) | Expr::SetComparison(_)
            ))
        })? {
            return Ok(Lhs::PredicateSubquery);
        }
        let column = match x {
            Expr::Column(_) => true,
            Expr::Cast(cast) => matches!(cast.expr.as_ref(), Expr::Column(_)),
            _ => false,
        };
        Ok(if column {
            Lhs::Column
        } else if x.is_volatile() || x.contains_scalar_subquery() {
            Lhs::PerRow
        } else {
            Lhs::Pure
        })
    }
}

/// What to do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// N1, and IN where DataFusion is right: leave it.
    Keep,
    /// N2: compare a helper column holding `x`.
    ProjectLhs,
    /// N4: `x <> (subquery)` (`x = (subquery)` for IN).
    CompareScalar,
    /// N3: `NOT EXISTS (… WHERE y = x OR y IS NULL OR x IS NULL)`.
    NotExists,
    /// N5: `x <> ALL (subquery)` (`x = ANY (subquery)` for IN).
    Quantified,
    /// N6.
    Refuse(Refusal),
}

/// Why a NOT IN is refused (N6). Each of these is a planning error or a wrong answer in
/// DataFusion 55.2 whatever quiver does, and none can be rewritten into a shape it evaluates
/// correctly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// `x` reads a column of an enclosing query: moved into the subquery it would be two
    /// levels away from its table, which DataFusion cannot decorrelate.
    OuterLhs,
    /// `x` holds a predicate subquery, which cannot move into another subquery.
    SubqueryLhs,
    /// LIMIT / OFFSET / FETCH over correlated rows: DataFusion drops a correlated LIMIT when
    /// it decorrelates an EXISTS, which would change the set.
    Limit,
    /// An aggregate without GROUP BY over correlated rows below another operator (HAVING, a
    /// join): the count bug, and not the single-row shape N4 handles.
    ScalarAggregate,
    /// An operator DataFusion cannot decorrelate through, over correlated rows.
    Operator(&'static str),
    /// A correlated condition inside the optional side of an outer, semi or anti join, which
    /// DataFusion would pull above the join.
    OptionalSide,
    /// An outer column read outside the subquery's filters (SELECT list, join condition, …).
    OuterColumn,
}

impl Refusal {
    fn reason(self) -> String {
        match self {
            Refusal::OuterLhs => {
                "the value before NOT IN refers to a column of an enclosing query".into()
            }
            Refusal::SubqueryLhs => {
                "the value before NOT IN contains an EXISTS, IN, ANY or ALL subquery".into()
            }
            Refusal::Limit => {
                "the subquery applies LIMIT, OFFSET or FETCH to rows that depend on the outer query"
                    .into()
            }
            Refusal::ScalarAggregate => "the subquery aggregates rows that depend on the outer \
                query without GROUP BY and then filters or joins the result"
                .into(),
            Refusal::Operator(operator) => {
                format!("the subquery applies {operator} to rows that depend on the outer query")
            }
            Refusal::OptionalSide => "the subquery filters the optional side of an outer, semi \
                or anti join by the outer query"
                .into(),
            Refusal::OuterColumn => {
                "the subquery reads a column of the outer query outside its WHERE clause".into()
            }
        }
    }

    fn error(self, x: &Expr) -> DataFusionError {
        QuiverError::NotImplemented(format!(
            "{x} NOT IN (subquery) is not supported here because {}: DataFusion cannot \
             evaluate this shape correctly. Rewrite it with NOT EXISTS: \
             NOT EXISTS (SELECT … WHERE <subquery value> = {x} OR <subquery value> IS NULL \
             OR {x} IS NULL)",
            self.reason()
        ))
        .into_datafusion()
    }
}

/// Rewrites the occurrences in one filter predicate.
struct PredicateRewriter<'a> {
    /// The filter's input schema, where `x`'s columns resolve.
    outer: DFSchemaRef,
    aliases: &'a AliasGenerator,
    /// Helper columns (`x AS __quiver_not_in_lhs_N`) to project below the filter.
    helpers: Vec<Expr>,
}

impl PredicateRewriter<'_> {
    fn visit(&mut self, expr: Expr, position: Position) -> Result<Transformed<Expr>> {
        match expr {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: op @ (Operator::And | Operator::Or),
                right,
            }) => {
                let inner = if op == Operator::Or {
                    position.under_or()
                } else {
                    position
                };
                let left = self.visit(*left, inner)?;
                let right = self.visit(*right, inner)?;
                let transformed = left.transformed || right.transformed;
                let expr = Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(left.data),
                    op,
                    Box::new(right.data),
                ));
                Ok(Transformed::new_transformed(expr, transformed))
            }
            // IS [NOT] TRUE maps UNKNOWN and FALSE alike, whatever surrounds it.
            Expr::IsTrue(inner) => Ok(self
                .visit(*inner, Position::Positive)?
                .update_data(|e| Expr::IsTrue(Box::new(e)))),
            Expr::IsNotTrue(inner) => Ok(self
                .visit(*inner, Position::Positive)?
                .update_data(|e| Expr::IsNotTrue(Box::new(e)))),
            Expr::InSubquery(InSubquery {
                expr,
                subquery,
                negated,
            }) => self.occurrence(*expr, subquery, negated, false, position),
            Expr::Not(inner) => match *inner {
                Expr::InSubquery(InSubquery {
                    expr,
                    subquery,
                    negated,
                }) => self.occurrence(*expr, subquery, negated, true, position),
                other => Ok(self
                    .visit(other, Position::NonPositive)?
                    .update_data(|e| Expr::Not(Box::new(e)))),
            },
            other => other.map_children(|child| self.visit(child, Position::NonPositive)),
        }
    }

    /// One `x [NOT] IN (subquery)`, written `NOT (…)` when `under_not`.
    fn occurrence(
        &mut self,
        x: Expr,
        subquery: Subquery,
        negated: bool,
        under_not: bool,
        position: Position,
    ) -> Result<Transformed<Expr>> {
        // Occurrences inside `x` are values, not conditions.
        let x = self.visit(x, Position::NonPositive)?;
        let x_changed = x.transformed;
        let x = x.data;
        let not_in = negated != under_not;
        let plan = without_order(&subquery.subquery)?;
        let outer = outer_columns(&subquery, &plan)?;
        let lhs = Lhs::of(&x)?;
        let action = if not_in {
            not_in_action(lhs, &plan, &outer, position)?
        } else {
            in_action(lhs, &plan, &outer, position)?
        };
        let rewritten = match action {
            Action::Keep => {
                let mut expr = Expr::InSubquery(InSubquery::new(Box::new(x), subquery, negated));
                if under_not {
                    expr = Expr::Not(Box::new(expr));
                }
                return Ok(Transformed::new_transformed(expr, x_changed));
            }
            Action::ProjectLhs => {
                let (helper, _) = self.project_lhs(x)?;
                Expr::InSubquery(InSubquery::new(
                    Box::new(Expr::Column(helper)),
                    subquery,
                    true,
                ))
            }
            Action::CompareScalar => {
                let op = if not_in {
                    Operator::NotEq
                } else {
                    Operator::Eq
                };
                binary_expr(x, op, Expr::ScalarSubquery(with_plan(&subquery, plan)))
            }
            Action::NotExists => self.not_exists(x, lhs, &subquery, plan)?,
            Action::Quantified => {
                let x = if lhs == Lhs::PerRow {
                    Expr::Column(self.project_lhs(x)?.0)
                } else {
                    x
                };
                let (op, quantifier) = if not_in {
                    (Operator::NotEq, SetQuantifier::All)
                } else {
                    (Operator::Eq, SetQuantifier::Any)
                };
                Expr::SetComparison(SetComparison::new(
                    Box::new(x),
                    with_plan(&subquery, plan),
                    op,
                    quantifier,
                ))
            }
            Action::Refuse(refusal) => return Err(refusal.error(&x)),
        };
        Ok(Transformed::yes(rewritten))
    }

    /// N3: `NOT EXISTS (SELECT … FROM (subquery) WHERE y = x OR y IS NULL OR x IS NULL)`, the
    /// `IS NULL` tests left out for a side that cannot be NULL.
    fn not_exists(
        &mut self,
        x: Expr,
        lhs: Lhs,
        subquery: &Subquery,
        plan: Arc<LogicalPlan>,
    ) -> Result<Expr> {
        let (x, x_nullable) = if lhs == Lhs::PerRow {
            let (helper, field) = self.project_lhs(x)?;
            let nullable = field.is_nullable();
            (Expr::OuterReferenceColumn(field, helper), nullable)
        } else {
            let nullable = x.nullable(self.outer.as_ref())?;
            (to_outer_reference(x, &self.outer)?, nullable)
        };
        let (y, y_nullable) = first_column(&plan)?;
        let mut predicate = binary_expr(x.clone(), Operator::Eq, y.clone());
        if y_nullable {
            predicate = predicate.or(y.is_null());
        }
        if x_nullable {
            predicate = predicate.or(x.is_null());
        }
        let filtered = LogicalPlanBuilder::from(Arc::unwrap_or_clone(plan))
            .filter(predicate)?
            .build()?;
        Ok(Expr::Exists(Exists::new(
            with_plan(subquery, Arc::new(filtered)),
            true,
        )))
    }

    /// Adds `x AS __quiver_not_in_lhs_N` to the helper columns; returns the helper column and
    /// its field.
    fn project_lhs(&mut self, x: Expr) -> Result<(Column, FieldRef)> {
        let name = self.aliases.next(HELPER_PREFIX);
        let (_, field) = x.to_field(self.outer.as_ref())?;
        let field: FieldRef = Arc::new(field.as_ref().clone().with_name(name.clone()));
        self.helpers.push(x.alias(name.clone()));
        Ok((Column::new_unqualified(name), field))
    }
}

/// The decision table for `x NOT IN (plan)`, `plan` the subquery without its ORDER BYs and
/// `outer` the outer columns it reads.
fn not_in_action(
    lhs: Lhs,
    plan: &LogicalPlan,
    outer: &HashSet<Column>,
    position: Position,
) -> Result<Action> {
    let correlated = !outer.is_empty();
    if position == Position::Top && !correlated {
        match lhs {
            Lhs::Column => return Ok(Action::Keep),
            Lhs::Pure | Lhs::PerRow => return Ok(Action::ProjectLhs),
            Lhs::Outer | Lhs::PredicateSubquery => {}
        }
    }
    // `x` stays where it is, so N4 takes any `x`.
    if correlated && is_scalar_aggregate(plan) {
        return Ok(match find_blocker(plan, outer, true)? {
            Some(refusal) => Action::Refuse(refusal),
            None => Action::CompareScalar,
        });
    }
    match lhs {
        Lhs::Outer => return Ok(Action::Refuse(Refusal::OuterLhs)),
        Lhs::PredicateSubquery => return Ok(Action::Refuse(Refusal::SubqueryLhs)),
        Lhs::Column | Lhs::Pure | Lhs::PerRow => {}
    }
    if let Some(refusal) = find_blocker(plan, outer, false)? {
        return Ok(Action::Refuse(refusal));
    }
    Ok(if position.is_positive() {
        Action::NotExists
    } else {
        Action::Quantified
    })
}

/// The same for `x IN (plan)`, which is rewritten only where DataFusion 55.2 is wrong and
/// never refused.
fn in_action(
    lhs: Lhs,
    plan: &LogicalPlan,
    outer: &HashSet<Column>,
    position: Position,
) -> Result<Action> {
    if !outer.is_empty() && is_scalar_aggregate(plan) && find_blocker(plan, outer, true)?.is_none()
    {
        return Ok(Action::CompareScalar);
    }
    if position.is_positive()
        || matches!(lhs, Lhs::Outer | Lhs::PredicateSubquery)
        || find_blocker(plan, outer, false)?.is_some()
    {
        return Ok(Action::Keep);
    }
    Ok(Action::Quantified)
}

/// Whether `plan` is an aggregate without GROUP BY under projections and aliases only, so it
/// returns exactly one row.
fn is_scalar_aggregate(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(projection) => is_scalar_aggregate(&projection.input),
        LogicalPlan::SubqueryAlias(alias) => is_scalar_aggregate(&alias.input),
        LogicalPlan::Aggregate(aggregate) => {
            aggregate.group_expr.is_empty() && !aggregate.aggr_expr.is_empty()
        }
        _ => false,
    }
}

/// Whether `aggregate` returns a row even for no input (no GROUP BY, or grouping sets that
/// may hold the empty set).
fn returns_row_for_no_input(aggregate: &Aggregate) -> bool {
    aggregate.group_expr.is_empty()
        || aggregate
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
}

/// The first reason the correlated condition N3, N4 or N5 adds cannot be pulled up through
/// `plan` with its meaning kept, if any. `scalar_top` allows the one aggregate without GROUP
/// BY that N4 compares with, under projections and aliases only.
fn find_blocker(
    plan: &LogicalPlan,
    outer: &HashSet<Column>,
    scalar_top: bool,
) -> Result<Option<Refusal>> {
    // Operators over uncorrelated rows compute the same set for every outer row.
    if !reads_any(plan, outer)? {
        return Ok(None);
    }
    let refusal = match plan {
        LogicalPlan::Filter(_) => None,
        LogicalPlan::Limit(_) => Some(Refusal::Limit),
        LogicalPlan::Sort(sort) if sort.fetch.is_some() => Some(Refusal::Limit),
        LogicalPlan::Sort(_) => Some(Refusal::Operator("ORDER BY")),
        LogicalPlan::Aggregate(aggregate)
            if returns_row_for_no_input(aggregate)
                && !(scalar_top && aggregate.group_expr.is_empty()) =>
        {
            Some(Refusal::ScalarAggregate)
        }
        LogicalPlan::Window(_) => Some(Refusal::Operator("a window function")),
        LogicalPlan::Union(_) => Some(Refusal::Operator("UNION")),
        LogicalPlan::Distinct(Distinct::On(_)) => Some(Refusal::Operator("DISTINCT ON")),
        LogicalPlan::RecursiveQuery(_) => Some(Refusal::Operator("a recursive query")),
        LogicalPlan::Extension(_) => Some(Refusal::Operator("an extension operator")),
        LogicalPlan::Subquery(_) => Some(Refusal::Operator("a correlated derived table")),
        LogicalPlan::Join(join) => {
            let (left_optional, right_optional) = optional_sides(join.join_type);
            if (left_optional && reads_any(&join.left, outer)?)
                || (right_optional && reads_any(&join.right, outer)?)
            {
                Some(Refusal::OptionalSide)
            } else {
                None
            }
        }
        _ => None,
    };
    if refusal.is_some() {
        return Ok(refusal);
    }
    // DataFusion pulls correlated conditions out of filters only.
    if !matches!(plan, LogicalPlan::Filter(_)) && node_reads_any(plan, outer)? {
        return Ok(Some(Refusal::OuterColumn));
    }
    let scalar_top = scalar_top
        && matches!(
            plan,
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_)
        );
    for input in plan.inputs() {
        if let Some(refusal) = find_blocker(input, outer, scalar_top)? {
            return Ok(Some(refusal));
        }
    }
    Ok(None)
}

/// Which sides of a join of this type lose or keep rows by what the other side holds (the
/// sides a condition cannot be pulled out of): (left, right).
fn optional_sides(join_type: JoinType) -> (bool, bool) {
    match join_type {
        JoinType::Inner => (false, false),
        JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
            (false, true)
        }
        JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
            (true, false)
        }
        JoinType::Full => (true, true),
    }
}

/// Whether `plan`, its inputs or its subqueries read any of the `outer` columns.
fn reads_any(plan: &LogicalPlan, outer: &HashSet<Column>) -> Result<bool> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if node_reads_any(node, outer)? {
            found = true;
            Ok(TreeNodeRecursion::Stop)
        } else {
            Ok(TreeNodeRecursion::Continue)
        }
    })?;
    Ok(found)
}

/// Whether the expressions of this node alone (not its inputs or subqueries) read any of the
/// `outer` columns.
fn node_reads_any(node: &LogicalPlan, outer: &HashSet<Column>) -> Result<bool> {
    let mut found = false;
    node.apply_expressions(|expr| {
        let reads = expr.exists(|e| {
            Ok(matches!(e, Expr::OuterReferenceColumn(_, column) if outer.contains(column)))
        })?;
        if reads {
            found = true;
            Ok(TreeNodeRecursion::Stop)
        } else {
            Ok(TreeNodeRecursion::Continue)
        }
    })?;
    Ok(found)
}

/// The columns of enclosing queries that the subquery reads, directly or through subqueries
/// nested in it. Empty means uncorrelated.
///
/// DataFusion's `outer_ref_columns` lists only the subquery's own level, so a subquery
/// correlated through a nested EXISTS would look uncorrelated.
fn outer_columns(subquery: &Subquery, plan: &LogicalPlan) -> Result<HashSet<Column>> {
    let mut found: HashSet<Column> = subquery
        .outer_ref_columns
        .iter()
        .filter_map(|e| match e {
            Expr::OuterReferenceColumn(_, column) => Some(column.clone()),
            _ => None,
        })
        .collect();
    collect_escaping(plan, &mut Vec::new(), &mut found)?;
    Ok(found)
}

/// Adds to `found` the outer references in `plan` (one query level) and the subqueries nested
/// in it that resolve in none of `scopes`, the columns of the levels between the IN subquery
/// and `plan`.
fn collect_escaping(
    plan: &LogicalPlan,
    scopes: &mut Vec<HashSet<Column>>,
    found: &mut HashSet<Column>,
) -> Result<()> {
    let mut nested: Vec<Arc<LogicalPlan>> = Vec::new();
    plan.apply(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                match e {
                    Expr::OuterReferenceColumn(_, column)
                        if !scopes.iter().any(|scope| scope.contains(column)) =>
                    {
                        found.insert(column.clone());
                    }
                    Expr::Exists(Exists { subquery, .. })
                    | Expr::InSubquery(InSubquery { subquery, .. })
                    | Expr::SetComparison(SetComparison { subquery, .. })
                    | Expr::ScalarSubquery(subquery) => {
                        nested.push(Arc::clone(&subquery.subquery));
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    if nested.is_empty() {
        return Ok(());
    }
    let mut level = HashSet::new();
    plan.apply(|node| {
        level.extend(node.schema().columns());
        Ok(TreeNodeRecursion::Continue)
    })?;
    scopes.push(level);
    let result = nested
        .iter()
        .try_for_each(|inner| collect_escaping(inner, scopes, found));
    scopes.pop();
    result
}

/// `plan` without the ORDER BYs (with no LIMIT) that cannot change which rows it returns:
/// those not below a LIMIT, window, aggregate or DISTINCT ON, whose results may depend on the
/// order. DataFusion cannot decorrelate through a Sort over correlated rows.
fn without_order(plan: &Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
    let rewritten = plan.as_ref().clone().transform_down(|node| {
        let mut removed = false;
        let mut current = node;
        let node = loop {
            match current {
                LogicalPlan::Sort(sort) if sort.fetch.is_none() => {
                    removed = true;
                    current = Arc::unwrap_or_clone(sort.input);
                }
                other => break other,
            }
        };
        let order_matters = matches!(
            node,
            LogicalPlan::Limit(_)
                | LogicalPlan::Sort(_)
                | LogicalPlan::Window(_)
                | LogicalPlan::Aggregate(_)
                | LogicalPlan::Distinct(Distinct::On(_))
                | LogicalPlan::Extension(_)
                | LogicalPlan::Subquery(_)
                | LogicalPlan::RecursiveQuery(_)
        );
        let recursion = if order_matters {
            TreeNodeRecursion::Jump
        } else {
            TreeNodeRecursion::Continue
        };
        Ok(Transformed::new(node, removed, recursion))
    })?;
    Ok(if rewritten.transformed {
        Arc::new(rewritten.data)
    } else {
        Arc::clone(plan)
    })
}

/// `subquery` with another plan, and that plan's outer references.
fn with_plan(subquery: &Subquery, plan: Arc<LogicalPlan>) -> Subquery {
    Subquery {
        outer_ref_columns: plan.all_out_ref_exprs(),
        subquery: plan,
        spans: subquery.spans.clone(),
    }
}

/// The subquery's first output column (the IN column) and whether it can be NULL.
fn first_column(plan: &LogicalPlan) -> Result<(Expr, bool)> {
    let schema = plan.schema();
    if schema.fields().is_empty() {
        return Err(
            QuiverError::Internal("an IN subquery without an output column".into())
                .into_datafusion(),
        );
    }
    let (qualifier, field) = schema.qualified_field(0);
    Ok((
        Expr::Column(Column::from((qualifier, field))),
        field.is_nullable(),
    ))
}

/// `x` with each column turned into an outer reference, so it can be used inside the
/// subquery (as `rewrite_set_comparison` does for ANY/ALL).
fn to_outer_reference(x: Expr, outer: &DFSchema) -> Result<Expr> {
    x.transform_up(|e| match e {
        Expr::Column(column) => {
            let field = Arc::clone(outer.field_from_column(&column)?);
            Ok(Transformed::yes(Expr::OuterReferenceColumn(field, column)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests;
