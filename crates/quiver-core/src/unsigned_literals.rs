//! Integer literals next to `UInt64` values keep the arithmetic in integers.
//!
//! DataFusion types every integer literal as `Int64`, and its type coercion turns `UInt64`
//! combined with a signed integer into `Decimal128(20, 0)`: `number % 3` over `numbers()` comes
//! back as `Decimal128(20, 0)` and `number + 1` as `Decimal128(21, 0)`, and `number % 7 = 3`
//! does a 128-bit decimal division per row. [`UnsignedLiterals`] is an analyzer rule that runs
//! just before DataFusion's `type_coercion`. It retypes the literal that sits next to a
//! `UInt64` operand, as DuckDB's integer literals do, and does subtraction the ClickHouse way:
//!
//! | SQL (`x` is `UInt64`) | is rewritten as | result type |
//! |---|---|---|
//! | `x + 1`, `x * 2`, `x % 3`, `x = 3`, `x IN (1, 2)`, `x BETWEEN 1 AND 3` | the literals cast to `UInt64` | `UInt64` |
//! | `x - 1`, `1 - x`, `x + (-1)`, `x * -2` | `CAST(x AS Int64)` | `Int64` |
//! | `CASE … THEN x ELSE 0 END`, `coalesce(x, 0)`, `if(c, x, 0)`, `greatest(x, 1)` | the literal branches cast to `UInt64` | `UInt64` |
//! | `x / 2`, `x % 0`, `x % -3`, `x > -1`, `x IN (1, -1)` | unchanged | `Decimal128`, as before |
//!
//! The reasons for these choices:
//! * The literal is wrapped as `CAST(Int64(3) AS UInt64)` instead of being replaced by
//!   `UInt64(3)`. A cast does not show in schema names, so `x % Int64(3)` keeps its name. The
//!   SQL planner has already used that name to refer to the expression from the nodes above,
//!   including inside `GROUP BY ROLLUP(x % 3)`, where an alias cannot restore the name. The
//!   optimizer later folds the cast away.
//! * Subtraction gives `Int64`, as in ClickHouse: `number - 1` is -1 for 0, where `UInt64`
//!   arithmetic would wrap around. The cast to `Int64` is checked, so a value above `i64::MAX`
//!   raises an error instead of giving a wrong answer.
//! * Division is left alone. DataFusion's integer `/` truncates, whereas today's decimal keeps
//!   the fraction, so retyping it would change values.
//! * Only `UInt64` operands are retyped. Narrower integers already widen to `Int64` exactly.
//!   DataFusion's integer arithmetic wraps silently, so typing `uint8_col + 1` as `UInt8`
//!   would wrap.
//! * Arithmetic between two constants (`18446744073709551615 + 1`) keeps its exact decimal.
//!
//! The rule changes result types, so it is part of the SQL semantics, not an optimization, and
//! it is always on.
//!
//! Unlike TypeCoercion, the rule changes the output types of plan nodes, so it takes care of
//! the schemas:
//! * every node whose inputs or expressions changed has its schema recomputed;
//! * a `Union` keeps the schema the planner gave it, so it is rebuilt from its first input, the
//!   way the planner built it;
//! * before a subquery is analyzed, its references to the outer query take the new types of
//!   the outer columns.
//!
//! A recursive CTE is left as it is, because its work table keeps the types the planner gave
//! the static term.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    cast, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, Union,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule `unsigned_literals`: an integer literal next to a `UInt64` operand
/// becomes `UInt64`, and subtraction from a `UInt64` becomes `Int64`, instead of DataFusion's
/// `Decimal128`.
///
/// ```sql
/// SELECT number % 3 AS k, number + 1, number - 1 FROM numbers(3);
/// -- k UInt64, number + 1 UInt64, number - 1 Int64 (-1, 0, 1)
/// ```
///
/// It must run before DataFusion's `type_coercion`: register it with
/// `SessionStateBuilder::with_analyzer_rules`, inserted before that rule. See the module
/// documentation for what it rewrites and why.
#[derive(Debug, Default)]
pub struct UnsignedLiterals;

impl AnalyzerRule for UnsignedLiterals {
    fn name(&self) -> &str {
        "unsigned_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(analyze_plan(plan)?.data)
    }
}

/// Rewrites `plan` bottom up. For each node, the order is: its inputs first, then its
/// subqueries, whose outer references need the inputs' new types, then its own expressions.
/// DataFusion's `transform_up_with_subqueries` visits the subqueries before the inputs, which
/// is too early here.
fn analyze_plan(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if matches!(plan, LogicalPlan::RecursiveQuery(_)) {
        return Ok(Transformed::no(plan));
    }
    let inputs = plan.map_children(analyze_plan)?;
    let inputs_changed = inputs.transformed;
    let plan = inputs.data;
    let schema = coercion_schema(&plan)?;
    let subqueries = plan.map_subqueries(|subquery| {
        refresh_outer_references(subquery, &schema)?.transform_data(analyze_plan)
    })?;
    let subqueries_changed = subqueries.transformed;
    let plan = subqueries.data;
    // recompute_schema keeps a Values node's schema, so its rows must keep their types.
    let expressions = if matches!(plan, LogicalPlan::Values(_)) {
        Transformed::no(plan)
    } else {
        rewrite_expressions(plan, &schema)?
    };
    if inputs_changed || subqueries_changed || expressions.transformed {
        Ok(Transformed::yes(recompute_schema(expressions.data)?))
    } else {
        Ok(expressions)
    }
}

/// The schema DataFusion's TypeCoercion resolves `node`'s expressions against: its inputs'
/// fields and, for a table scan, the table's (a pushed filter may use unprojected columns).
pub(crate) fn coercion_schema(node: &LogicalPlan) -> Result<DFSchema> {
    let mut schema = merge_schema(&node.inputs());
    if let LogicalPlan::TableScan(scan) = node {
        schema.merge(&DFSchema::try_from_qualified_schema(
            scan.table_name.clone(),
            &scan.source.schema(),
        )?);
    }
    Ok(schema)
}

/// Retypes the expressions of `plan` (one node) whose operands resolve in `schema`.
fn rewrite_expressions(plan: LogicalPlan, schema: &DFSchema) -> Result<Transformed<LogicalPlan>> {
    // Casts do not show in names, so names should never change. The preserver is a safeguard,
    // as in TypeCoercion.
    let names = NamePreserver::new(&plan);
    plan.map_expressions(|expr| {
        let name = names.save(&expr);
        Ok(expr
            .transform_up(|expr| Ok(retype(expr, schema)))?
            .update_data(|expr| name.restore(expr)))
    })
}

/// `plan` with its schema derived again from its inputs and expressions.
fn recompute_schema(plan: LogicalPlan) -> Result<LogicalPlan> {
    match plan {
        // recompute_schema keeps a Union's stored schema when the widths match. The planner
        // built that schema from the first input's old types (`try_new_with_loose_types`), so
        // it is built again the same way. TypeCoercion then unifies the inputs from it.
        LogicalPlan::Union(union) if union_is_stale(&union) => Ok(LogicalPlan::Union(
            Union::try_new_with_loose_types(union.inputs)?,
        )),
        plan => plan.recompute_schema(),
    }
}

/// Whether the stored types of `union` differ from the types of its first input.
fn union_is_stale(union: &Union) -> bool {
    union.inputs.first().is_some_and(|first| {
        first
            .schema()
            .fields()
            .iter()
            .zip(union.schema.fields())
            .any(|(input, stored)| input.data_type() != stored.data_type())
    })
}

/// `plan` (a subquery of a node whose inputs' schema is `outer`) with each reference to a
/// column of `outer` retyped to that column's current type, and the schemas above those
/// references recomputed. Nested subqueries are refreshed too, since they may refer to the
/// same outer columns. A reference to a deeper scope is refreshed again when that scope's
/// node is analyzed.
fn refresh_outer_references(
    plan: LogicalPlan,
    outer: &DFSchema,
) -> Result<Transformed<LogicalPlan>> {
    if matches!(plan, LogicalPlan::RecursiveQuery(_)) {
        return Ok(Transformed::no(plan));
    }
    let inputs = plan.map_children(|input| refresh_outer_references(input, outer))?;
    let inputs_changed = inputs.transformed;
    let nested = inputs
        .data
        .map_subqueries(|subquery| refresh_outer_references(subquery, outer))?;
    let nested_changed = nested.transformed;
    let own = match nested.data {
        // The subquery's list of the outer columns it uses is not among its expressions.
        LogicalPlan::Subquery(mut subquery) => {
            let mut changed = false;
            let columns = std::mem::take(&mut subquery.outer_ref_columns);
            for column in columns {
                let column = refresh_expr(column, outer)?;
                changed |= column.transformed;
                subquery.outer_ref_columns.push(column.data);
            }
            Transformed::new_transformed(LogicalPlan::Subquery(subquery), changed)
        }
        plan => plan.map_expressions(|expr| refresh_expr(expr, outer))?,
    };
    if inputs_changed || nested_changed || own.transformed {
        Ok(Transformed::yes(recompute_schema(own.data)?))
    } else {
        Ok(own)
    }
}

/// `expr` with each outer reference that resolves in `outer` retyped to the type there.
fn refresh_expr(expr: Expr, outer: &DFSchema) -> Result<Transformed<Expr>> {
    expr.transform_up(|expr| {
        Ok(match expr {
            Expr::OuterReferenceColumn(field, column) => {
                let current = outer
                    .qualified_field_from_column(&column)
                    .ok()
                    .map(|(_, current)| current.data_type())
                    .filter(|current| *current != field.data_type())
                    .cloned();
                match current {
                    Some(data_type) => Transformed::yes(Expr::OuterReferenceColumn(
                        Arc::new(field.as_ref().clone().with_data_type(data_type)),
                        column,
                    )),
                    None => Transformed::no(Expr::OuterReferenceColumn(field, column)),
                }
            }
            other => Transformed::no(other),
        })
    })
}

/// Retypes one expression node. Its children have already been retyped (`transform_up`), so
/// `(x % 10) + 1` sees `x % 10` as `UInt64`.
fn retype(expr: Expr, schema: &DFSchema) -> Transformed<Expr> {
    match expr {
        Expr::BinaryExpr(binary) => retype_binary(binary, schema),
        Expr::Between(mut between) => {
            let changed = cast_literal_members(
                &mut [&mut *between.expr, &mut *between.low, &mut *between.high],
                schema,
            );
            Transformed::new_transformed(Expr::Between(between), changed)
        }
        Expr::InList(mut in_list) => {
            let mut members: Vec<&mut Expr> = std::iter::once(&mut *in_list.expr)
                .chain(in_list.list.iter_mut())
                .collect();
            let changed = cast_literal_members(&mut members, schema);
            Transformed::new_transformed(Expr::InList(in_list), changed)
        }
        Expr::Case(mut case) => {
            let mut changed = false;
            // `CASE x WHEN 1 …` compares x with each WHEN value.
            if let Some(base) = case.expr.as_deref_mut() {
                let mut compared: Vec<&mut Expr> = std::iter::once(base)
                    .chain(case.when_then_expr.iter_mut().map(|(when, _)| &mut **when))
                    .collect();
                changed |= cast_literal_members(&mut compared, schema);
            }
            let mut results: Vec<&mut Expr> = case
                .when_then_expr
                .iter_mut()
                .map(|(_, then)| &mut **then)
                .chain(case.else_expr.as_deref_mut())
                .collect();
            changed |= cast_literal_members(&mut results, schema);
            Transformed::new_transformed(Expr::Case(case), changed)
        }
        Expr::ScalarFunction(mut function) => {
            let name = function.func.name();
            let count = function.args.len();
            let mut branches: Vec<&mut Expr> = function
                .args
                .iter_mut()
                .enumerate()
                .filter(|(index, _)| is_branch(name, *index, count))
                .map(|(_, arg)| arg)
                .collect();
            let changed = cast_literal_members(&mut branches, schema);
            Transformed::new_transformed(Expr::ScalarFunction(function), changed)
        }
        other => Transformed::no(other),
    }
}

/// Whether argument `index` of `count` of the function `name` is one of the arguments the
/// function coerces to one common type.
fn is_branch(name: &str, index: usize, count: usize) -> bool {
    match name {
        "coalesce" | "nvl" | "nullif" | "greatest" | "least" => true,
        // quiver-functions' ClickHouse `if(cond, then, else)`, and DataFusion's nvl2.
        "if" | "nvl2" => index >= 1,
        // multiIf(cond1, then1, cond2, then2, …, else).
        "multiIf" => index % 2 == 1 || index + 1 == count,
        _ => false,
    }
}

/// Which side of a binary operator gets a cast, and to which type.
enum Side {
    Left,
    Right,
}

/// `binary` with its integer literal cast to `UInt64`, or its `UInt64` operand cast to
/// `Int64`, following the table in the module documentation.
fn retype_binary(binary: BinaryExpr, schema: &DFSchema) -> Transformed<Expr> {
    let Some((side, to)) = binary_cast(&binary, schema) else {
        return Transformed::no(Expr::BinaryExpr(binary));
    };
    let BinaryExpr { left, op, right } = binary;
    let (left, right) = match side {
        Side::Left => (Box::new(cast(*left, to)), right),
        Side::Right => (left, Box::new(cast(*right, to))),
    };
    Transformed::yes(Expr::BinaryExpr(BinaryExpr { left, op, right }))
}

/// The cast `binary` needs, if it is `UInt64 op literal` or `literal op UInt64`.
fn binary_cast(binary: &BinaryExpr, schema: &DFSchema) -> Option<(Side, DataType)> {
    let (literal, value, operand) =
        match (signed_literal(&binary.left), signed_literal(&binary.right)) {
            (Some(value), None) => (Side::Left, value, binary.right.as_ref()),
            (None, Some(value)) => (Side::Right, value, binary.left.as_ref()),
            _ => return None,
        };
    let operand_side = match literal {
        Side::Left => Side::Right,
        Side::Right => Side::Left,
    };
    // A typed NULL literal has no value that could be out of range.
    let non_negative = value.is_none_or(|v| v >= 0);
    let positive = value.is_none_or(|v| v > 0);
    // The operator decides first, because finding the operand's type walks its whole
    // expression.
    let comparison = matches!(
        binary.op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    );
    let cast = match binary.op {
        // A negative literal is compared exactly as a decimal, as before (`x > -1`).
        _ if comparison => non_negative.then_some((literal, DataType::UInt64)),
        Operator::Plus | Operator::Multiply if non_negative => Some((literal, DataType::UInt64)),
        Operator::Plus | Operator::Multiply | Operator::Minus => {
            Some((operand_side, DataType::Int64))
        }
        // `x % 0` keeps DataFusion's division-by-zero error, and `x % -3` its decimal.
        Operator::Modulo => match literal {
            Side::Right => positive.then_some((literal, DataType::UInt64)),
            Side::Left => non_negative.then_some((literal, DataType::UInt64)),
        },
        _ => None,
    }?;
    // Arithmetic between two constants keeps its exact decimal: in UInt64,
    // `18446744073709551615 + 1` would wrap around.
    if !comparison && matches!(operand, Expr::Literal(..)) {
        return None;
    }
    is_uint64(operand, schema).then_some(cast)
}

/// The value of a signed integer literal (`None` for a typed NULL), or `None` if `expr` is
/// not one. The SQL planner types integer literals as `Int64`; the narrower types come from
/// the DataFrame API.
fn signed_literal(expr: &Expr) -> Option<Option<i64>> {
    match expr {
        Expr::Literal(value, _) => match value {
            ScalarValue::Int8(v) => Some(v.map(i64::from)),
            ScalarValue::Int16(v) => Some(v.map(i64::from)),
            ScalarValue::Int32(v) => Some(v.map(i64::from)),
            ScalarValue::Int64(v) => Some(*v),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `expr` is a signed integer literal that a cast to `UInt64` keeps exactly.
fn is_castable_literal(expr: &Expr) -> bool {
    signed_literal(expr).is_some_and(|value| value.is_none_or(|v| v >= 0))
}

/// Whether `expr` is `UInt64`. An expression whose type cannot be found (an invalid one, such
/// as `'a' + 1`) is not: TypeCoercion then reports it as usual.
fn is_uint64(expr: &Expr, schema: &DFSchema) -> bool {
    matches!(expr.get_type(schema), Ok(DataType::UInt64))
}

/// What one member of a set of operands that DataFusion coerces to one common type means
/// for that type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    /// A `UInt64` value.
    Unsigned,
    /// A literal that joins any integer type without changing it: NULL or a narrower
    /// unsigned integer.
    Neutral,
    /// Anything else, which leaves the set as DataFusion types it.
    Other,
}

/// The members of `members` that are castable integer literals, cast to `UInt64`. This is
/// done only when every other member is `UInt64` or neutral and at least one is `UInt64`.
/// Returns whether anything was cast.
fn cast_literal_members(members: &mut [&mut Expr], schema: &DFSchema) -> bool {
    // Most sets have no literal to cast; finding the others' types walks their expressions.
    if !members.iter().any(|member| is_castable_literal(member)) {
        return false;
    }
    let mut unsigned = false;
    for member in members.iter() {
        if is_castable_literal(member) {
            continue;
        }
        match member_kind(member, schema) {
            Member::Unsigned => unsigned = true,
            Member::Neutral => {}
            Member::Other => return false,
        }
    }
    if !unsigned {
        return false;
    }
    for member in members.iter_mut() {
        if is_castable_literal(member) {
            **member = cast((**member).clone(), DataType::UInt64);
        }
    }
    true
}

/// How `expr`, which is not a castable literal, counts in a set of coerced operands.
fn member_kind(expr: &Expr, schema: &DFSchema) -> Member {
    match expr {
        Expr::Literal(value, _) => match value {
            ScalarValue::UInt64(_) => Member::Unsigned,
            ScalarValue::Null
            | ScalarValue::UInt8(_)
            | ScalarValue::UInt16(_)
            | ScalarValue::UInt32(_) => Member::Neutral,
            _ => Member::Other,
        },
        _ => match expr.get_type(schema) {
            Ok(DataType::UInt64) => Member::Unsigned,
            // An untyped placeholder, or a NULL of no type.
            Ok(DataType::Null) => Member::Neutral,
            _ => Member::Other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::optimizer::Analyzer;
    use datafusion::prelude::SessionContext;

    /// A session whose analyzer runs the rule (or not) before `type_coercion`, with a table `t`
    /// of one non-null `UInt64` column `x` holding 0 to 5.
    fn context(with_rule: bool) -> SessionContext {
        let mut rules = Analyzer::new().rules;
        if with_rule {
            let at = rules
                .iter()
                .position(|rule| rule.name() == "type_coercion")
                .unwrap();
            rules.insert(at, Arc::new(UnsignedLiterals));
        }
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_analyzer_rules(rules)
            .build();
        let ctx = SessionContext::new_with_state(state);
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::UInt64, false)]));
        let column: ArrayRef = Arc::new(UInt64Array::from_iter_values(0..6));
        let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    /// The output column types and the rows, as Arrow displays them.
    async fn run(ctx: &SessionContext, sql: &str) -> (Vec<DataType>, Vec<Vec<String>>) {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut types = Vec::new();
        let mut rows = Vec::new();
        let options = FormatOptions::default().with_null("NULL");
        for batch in &batches {
            types = batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            let formatters: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
                .collect();
            for row in 0..batch.num_rows() {
                rows.push(
                    formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect(),
                );
            }
        }
        (types, rows)
    }

    /// The plan of `sql` after the analyzer (this rule and TypeCoercion), as text.
    async fn analyzed(ctx: &SessionContext, sql: &str) -> String {
        let plan = ctx.sql(sql).await.unwrap().into_unoptimized_plan();
        let state = ctx.state();
        let plan = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .unwrap();
        format!("{}", plan.display_indent())
    }

    fn rows(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|row| row.iter().map(|cell| cell.to_string()).collect())
            .collect()
    }

    #[tokio::test]
    async fn arithmetic_beside_uint64_stays_integer() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT x % 3, x + 1, x * 2, x - 1, 1 - x, (x % 10) + 1 FROM t ORDER BY x",
        )
        .await;
        use DataType::{Int64, UInt64};
        assert_eq!(types, [UInt64, UInt64, UInt64, Int64, Int64, UInt64]);
        assert_eq!(
            values,
            rows(&[
                &["0", "1", "0", "-1", "1", "1"],
                &["1", "2", "2", "0", "0", "2"],
                &["2", "3", "4", "1", "-1", "3"],
                &["0", "4", "6", "2", "-2", "4"],
                &["1", "5", "8", "3", "-3", "5"],
                &["2", "6", "10", "4", "-4", "6"],
            ])
        );
    }

    #[tokio::test]
    async fn division_keeps_its_decimal() {
        let (types, _) = run(&context(true), "SELECT x / 2 FROM t").await;
        assert!(matches!(types[0], DataType::Decimal128(_, _)), "{types:?}");
    }

    #[tokio::test]
    async fn names_are_unchanged() {
        let sql = "SELECT x % 3, x + 1, x - 1, x * 2, x IN (1, 2), \
                   CASE WHEN x > 1 THEN x ELSE 0 END FROM t";
        let names = |ctx: SessionContext| async move {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            batches[0]
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(context(true)).await, names(context(false)).await);
    }

    #[tokio::test]
    async fn negative_literals_go_signed_or_stay() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT x + (-1), x * -2 FROM t WHERE x < 2 ORDER BY x",
        )
        .await;
        assert_eq!(types, [DataType::Int64, DataType::Int64]);
        assert_eq!(values, rows(&[&["-1", "0"], &["0", "-2"]]));
        let (_, values) = run(&ctx, "SELECT count(*) FROM t WHERE x > -1").await;
        assert_eq!(values, rows(&[&["6"]]));
        let plan = analyzed(&ctx, "SELECT x FROM t WHERE x IN (1, -1)").await;
        assert!(plan.contains("Decimal128"), "{plan}");
    }

    #[tokio::test]
    async fn modulo_by_zero_is_still_an_error() {
        let ctx = context(true);
        let result = ctx
            .sql("SELECT x % 0 FROM t")
            .await
            .unwrap()
            .collect()
            .await;
        assert!(result.is_err());
    }

    #[tokio::test]
    async fn comparisons_in_between_case_and_functions_cast_the_literal() {
        let ctx = context(true);
        let sql = "SELECT x IN (1, 2), x BETWEEN 1 AND 3, CASE WHEN x > 1 THEN x ELSE 0 END, \
                   CASE x WHEN 1 THEN 10 ELSE 20 END, coalesce(x, 7), greatest(x, 2), \
                   nullif(x, 0), x % 7 = 3 FROM t ORDER BY x";
        let plan = analyzed(&ctx, sql).await;
        assert!(!plan.contains("Decimal128"), "{plan}");
        assert!(plan.contains("CAST(Int64(3) AS UInt64)"), "{plan}");
        let (types, values) = run(&ctx, sql).await;
        use DataType::{Boolean, Int64, UInt64};
        assert_eq!(
            types,
            [Boolean, Boolean, UInt64, Int64, UInt64, UInt64, UInt64, Boolean]
        );
        assert_eq!(
            values,
            rows(&[
                &["false", "false", "0", "20", "0", "2", "NULL", "false"],
                &["true", "true", "0", "10", "1", "2", "1", "false"],
                &["true", "true", "2", "20", "2", "2", "2", "false"],
                &["false", "true", "3", "20", "3", "3", "3", "true"],
                &["false", "false", "4", "20", "4", "4", "4", "false"],
                &["false", "false", "5", "20", "5", "5", "5", "false"],
            ])
        );
    }

    #[tokio::test]
    async fn group_keys_resolve_by_name_even_in_rollup() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT x % 3 AS k, count(*) AS c FROM t GROUP BY ROLLUP(x % 3) ORDER BY k NULLS LAST",
        )
        .await;
        assert_eq!(types, [DataType::UInt64, DataType::Int64]);
        assert_eq!(
            values,
            rows(&[&["0", "2"], &["1", "2"], &["2", "2"], &["NULL", "6"]])
        );
    }

    #[tokio::test]
    async fn having_and_aggregate_arguments_take_the_new_types() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT x % 3 AS k, sum(x + 1) AS s FROM t GROUP BY k HAVING k = 1",
        )
        .await;
        assert_eq!(types, [DataType::UInt64, DataType::UInt64]);
        // x = 1 and x = 4: 2 + 5.
        assert_eq!(values, rows(&[&["1", "7"]]));
    }

    #[tokio::test]
    async fn window_partitions_and_joins_work() {
        let ctx = context(true);
        let (_, values) = run(
            &ctx,
            "SELECT x, sum(x) OVER (PARTITION BY x % 2) FROM t ORDER BY x",
        )
        .await;
        assert_eq!(
            values,
            rows(&[
                &["0", "6"],
                &["1", "9"],
                &["2", "6"],
                &["3", "9"],
                &["4", "6"],
                &["5", "9"],
            ])
        );
        let (_, values) = run(
            &ctx,
            "SELECT a.x FROM t a JOIN t b ON a.x + 1 = b.x ORDER BY a.x",
        )
        .await;
        assert_eq!(values, rows(&[&["0"], &["1"], &["2"], &["3"], &["4"]]));
    }

    #[tokio::test]
    async fn union_takes_its_first_input_new_types() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT k FROM (SELECT x % 3 AS k FROM t WHERE x < 2 \
             UNION ALL SELECT x % 5 FROM t WHERE x = 5) ORDER BY k",
        )
        .await;
        assert_eq!(types, [DataType::UInt64]);
        assert_eq!(values, rows(&[&["0"], &["0"], &["1"]]));
        // UInt64 beside a plain Int64 column stays a decimal, as in DuckDB.
        let (types, _) = run(&ctx, "SELECT x % 3 AS k FROM t UNION ALL SELECT 5").await;
        assert!(matches!(types[0], DataType::Decimal128(_, _)), "{types:?}");
    }

    #[tokio::test]
    async fn correlated_subqueries_see_the_outer_types() {
        let ctx = context(true);
        let (types, values) = run(
            &ctx,
            "SELECT k FROM (SELECT x % 3 AS k FROM t) o \
             WHERE EXISTS (SELECT 1 FROM t i WHERE i.x = o.k + 4) ORDER BY k",
        )
        .await;
        assert_eq!(types, [DataType::UInt64]);
        // k + 4 is in 0..=5 for k = 0 and k = 1.
        assert_eq!(values, rows(&[&["0"], &["0"], &["1"], &["1"]]));
        let (types, values) = run(
            &ctx,
            "SELECT o.k, (SELECT max(i.x) FROM t i WHERE i.x = o.k + 1) AS m \
             FROM (SELECT x % 3 AS k FROM t) o ORDER BY o.k",
        )
        .await;
        assert_eq!(types, [DataType::UInt64, DataType::UInt64]);
        assert_eq!(
            values,
            rows(&[
                &["0", "1"],
                &["0", "1"],
                &["1", "2"],
                &["1", "2"],
                &["2", "3"],
                &["2", "3"],
            ])
        );
    }

    #[tokio::test]
    async fn parameters_are_literals() {
        let ctx = context(true);
        let batches = ctx
            .sql("SELECT x % $1 AS k FROM t")
            .await
            .unwrap()
            .with_param_values(vec![ScalarValue::Int64(Some(4))])
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(batches[0].schema().field(0).data_type(), &DataType::UInt64);
    }

    #[tokio::test]
    async fn constant_arithmetic_keeps_its_exact_decimal() {
        let (types, values) = run(&context(true), "SELECT 18446744073709551615 + 1").await;
        assert!(matches!(types[0], DataType::Decimal128(_, _)), "{types:?}");
        assert_eq!(values, rows(&[&["18446744073709551616"]]));
    }

    #[tokio::test]
    async fn subtraction_above_i64_max_is_an_error_not_a_wrong_answer() {
        let ctx = context(true);
        let result = ctx
            .sql(
                "SELECT x - 1 FROM (SELECT x + 9223372036854775807 AS x FROM t) \
                 WHERE x > 9223372036854775807",
            )
            .await
            .unwrap()
            .collect()
            .await;
        assert!(result.is_err());
    }
}
