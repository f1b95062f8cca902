//! Keeps DataFusion's simplifier from moving a naive-to-zoned timestamp cast onto a literal.
//!
//! DataFusion 55's `unwrap_cast_in_comparison` rewrites `CAST(ts AS Timestamp(ns, tz)) = L`
//! into `ts = L'` with `L'` the literal relabelled as a naive timestamp (apache/datafusion#25095).
//! That assumes the cast is a relabelling, and it is not: arrow reads a naive timestamp as wall
//! clock time *in* `tz`, so the cast shifts the value by `tz`'s offset. With the session in
//! Singapore (+08:00), a naive `2024-11-01 00:00` is the instant `2024-10-31 16:00Z`:
//!
//! ```sql
//! SET TIME ZONE 'Asia/Singapore';
//! SELECT count(*) FROM t WHERE ts::timestamptz = '2024-10-31T16:00:00Z'::timestamptz;
//! -- DataFusion: 0 (it compares ts with the naive 2024-10-31 16:00); PostgreSQL and quiver: 1
//! ```
//!
//! The same happens implicitly (`ts = <zoned literal>` coerces `ts` to the literal's zone), in
//! `IN` lists, `BETWEEN` and the other comparisons, whatever the session's zone, whenever the
//! zone's offset is not zero. Comparing two columns is right: only literals are relabelled.
//!
//! [`ShieldNaiveToZonedCasts`], an analyzer rule that runs after DataFusion's type coercion (so
//! it sees the casts coercion adds), replaces such a cast, where it is a comparison's operand
//! and the other side is a constant, by [`NaiveToZoned`]: a function running the very cast
//! kernel DataFusion's `CastExpr` runs, which the simplifier does not look into. The
//! comparison keeps its exact meaning and constants still fold; what it loses is what the
//! unwrap was for, comparing the column itself (Parquet pruning and PostgreSQL pushdown of
//! that predicate). Casts to a zone whose offset is always zero (`UTC`, `+00:00`, ...) are
//! relabellings, which the unwrap handles correctly: they are left alone. Upstream's fix
//! (apache/datafusion#25099, open) teaches the unwrap the same distinction.
//!
//! Not covered: a Parquet file whose column is naive where the table says zoned, for which
//! DataFusion inserts the cast itself at the physical level (`PhysicalExprSimplifier`).

use std::sync::Arc;

use datafusion::arrow::compute::CastOptions;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::arrow::util::display::FormatOptions;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, DFSchema, DFSchemaRef, Result};
use datafusion::logical_expr::expr::{Case, InList, ScalarFunction};
use datafusion::logical_expr::{
    Between, BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TryCast, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ShieldNaiveToZonedCasts;

impl AnalyzerRule for ShieldNaiveToZonedCasts {
    fn name(&self) -> &str {
        "quiver_shield_naive_to_zoned_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = expression_schema(&node);
            node.map_expressions(|expr| shield(expr, &schema))
        })
        .map(|transformed| transformed.data)
    }
}

/// The schema `node`'s expressions are evaluated against: its inputs', merged.
fn expression_schema(node: &LogicalPlan) -> DFSchemaRef {
    match node.inputs().as_slice() {
        [] => Arc::clone(node.schema()),
        [input] => Arc::clone(input.schema()),
        inputs => {
            let mut merged = DFSchema::empty();
            for input in inputs {
                merged.merge(input.schema());
            }
            Arc::new(merged)
        }
    }
}

/// `expr` with the naive-to-zoned casts the simplifier would unwrap replaced.
fn shield(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // Almost every expression has no such cast: leave those untouched, unrebuilt.
    if !expr.exists(|e| Ok(shifting_cast(e).is_some()))? {
        return Ok(Transformed::no(expr));
    }
    expr.transform_up(|e| {
        Ok(match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => {
                let (left, left_changed) = shield_operand(*left, &right, schema);
                let (right, right_changed) = shield_operand(*right, &left, schema);
                let expr = Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)));
                transformed(expr, left_changed || right_changed)
            }
            Expr::InList(InList {
                expr,
                list,
                negated,
            }) if list.iter().all(is_constant) => {
                let (expr, changed) = shield_cast(*expr, schema);
                let expr = Expr::InList(InList::new(Box::new(expr), list, negated));
                transformed(expr, changed)
            }
            Expr::Between(Between {
                expr,
                negated,
                low,
                high,
            }) if is_constant(&low) || is_constant(&high) => {
                let (expr, changed) = shield_cast(*expr, schema);
                transformed(
                    Expr::Between(Between::new(Box::new(expr), negated, low, high)),
                    changed,
                )
            }
            // `CASE x WHEN v ...` compares `x = v`.
            Expr::Case(Case {
                expr: Some(base),
                when_then_expr,
                else_expr,
            }) if when_then_expr.iter().all(|(when, _)| is_constant(when)) => {
                let (base, changed) = shield_cast(*base, schema);
                let expr = Expr::Case(Case::new(Some(Box::new(base)), when_then_expr, else_expr));
                transformed(expr, changed)
            }
            other => Transformed::no(other),
        })
    })
}

fn transformed(expr: Expr, changed: bool) -> Transformed<Expr> {
    if changed {
        Transformed::yes(expr)
    } else {
        Transformed::no(expr)
    }
}

/// The operators whose operand casts the simplifier unwraps.
fn is_comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

/// Whether `expr` is a value fixed before execution: a literal, a placeholder, or functions
/// of those, which the simplifier folds into the literal the unwrap needs.
fn is_constant(expr: &Expr) -> bool {
    !expr.any_column_refs()
        && !expr.contains_outer()
        && !expr.is_volatile()
        && !expr
            .exists(|e| {
                Ok(matches!(
                    e,
                    Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ))
            })
            .unwrap_or(true)
}

/// `operand`, shielded if it is a shifting cast compared with a constant `other`.
fn shield_operand(operand: Expr, other: &Expr, schema: &DFSchema) -> (Expr, bool) {
    if is_constant(other) {
        shield_cast(operand, schema)
    } else {
        (operand, false)
    }
}

/// The target of `expr` if it is a cast to a timestamp zone with a nonzero offset (whatever
/// its input; [`shield_cast`] checks that).
fn shifting_cast(expr: &Expr) -> Option<(&Expr, &FieldRef, bool)> {
    let (inner, field, safe) = match expr {
        Expr::Cast(Cast { expr, field }) => (expr.as_ref(), field, false),
        Expr::TryCast(TryCast { expr, field }) => (expr.as_ref(), field, true),
        _ => return None,
    };
    match field.data_type() {
        DataType::Timestamp(_, Some(zone)) if !is_zero_offset(zone) => Some((inner, field, safe)),
        _ => None,
    }
}

/// `expr` as a [`NaiveToZoned`] call if it is a shifting cast of a non-constant naive
/// timestamp; whether it changed. Anything whose type cannot be told is left as it was.
fn shield_cast(expr: Expr, schema: &DFSchema) -> (Expr, bool) {
    let Some((inner, field, safe)) = shifting_cast(&expr) else {
        return (expr, false);
    };
    let naive = matches!(inner.get_type(schema), Ok(DataType::Timestamp(_, None)));
    if !naive || is_constant(inner) {
        return (expr, false);
    }
    let function = NaiveToZoned::new(Arc::clone(field), safe);
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(ScalarUDF::from(function)),
        vec![inner.clone()],
    ));
    (call, true)
}

/// Whether time zone `zone` (as arrow spells it: a name or a `±hh:mm` offset) is UTC at all
/// times. Only a zone known to be is left to the unwrap; an unrecognised one is shielded,
/// which costs pruning, never correctness.
pub fn is_zero_offset(zone: &str) -> bool {
    const UTC_NAMES: &[&str] = &[
        "utc",
        "etc/utc",
        "uct",
        "etc/uct",
        "gmt",
        "etc/gmt",
        "gmt0",
        "etc/gmt0",
        "etc/gmt+0",
        "etc/gmt-0",
        "greenwich",
        "etc/greenwich",
        "universal",
        "etc/universal",
        "zulu",
        "etc/zulu",
        "z",
    ];
    let zone = zone.trim();
    if UTC_NAMES.iter().any(|name| zone.eq_ignore_ascii_case(name)) {
        return true;
    }
    // An offset: +hh, +hhmm or +hh:mm (or with -), all zeros.
    let Some(digits) = zone.strip_prefix(['+', '-']) else {
        return false;
    };
    let digits: String = digits.chars().filter(|&c| c != ':').collect();
    matches!(digits.len(), 2 | 4) && digits.chars().all(|c| c == '0')
}

/// `CAST(x AS Timestamp(unit, zone))` (or `TRY_CAST`) of a naive timestamp `x`, as a function
/// the simplifier treats as opaque: see the module documentation.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NaiveToZoned {
    /// The cast's target, as the `Cast` expression held it.
    field: FieldRef,
    /// `TRY_CAST`: NULL where the cast fails, instead of an error.
    safe: bool,
    signature: Signature,
}

impl NaiveToZoned {
    /// The cast to `field`'s type; `safe` for `TRY_CAST`.
    pub fn new(field: FieldRef, safe: bool) -> Self {
        NaiveToZoned {
            field,
            safe,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// Arrow's extension-type metadata keys, which a cast to a bare type does not carry over
/// (as DataFusion's `cast_output_field`).
const EXTENSION_KEYS: [&str; 2] = ["ARROW:extension:name", "ARROW:extension:metadata"];

impl ScalarUDFImpl for NaiveToZoned {
    fn name(&self) -> &str {
        if self.safe {
            "try_naive_to_zoned"
        } else {
            "naive_to_zoned"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The cast's own name, which is its argument's: plans' column names stay as they were.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [arg] => Ok(arg.schema_name().to_string()),
            _ => exec_err!("{} takes one argument, not {}", self.name(), args.len()),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.field.data_type().clone())
    }

    /// The field DataFusion gives the cast (`cast_output_field` in datafusion-expr).
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let [source] = args.arg_fields else {
            return exec_err!("{} takes one argument", self.name());
        };
        let target = &self.field;
        let type_only =
            target.name().is_empty() && target.is_nullable() && target.metadata().is_empty();
        let metadata = if type_only {
            let mut metadata = source.metadata().clone();
            for key in EXTENSION_KEYS {
                metadata.remove(key);
            }
            metadata
        } else {
            target.metadata().clone()
        };
        let field = Field::clone(source)
            .with_data_type(target.data_type().clone())
            .with_metadata(metadata)
            .with_nullable(self.safe || source.is_nullable());
        Ok(Arc::new(field))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [input] = args.args.as_slice() else {
            return exec_err!("{} takes one argument", self.name());
        };
        // DataFusion's CastExpr and TryCastExpr options.
        let options = CastOptions {
            safe: self.safe,
            format_options: FormatOptions::default(),
        };
        input.cast_to(self.field.data_type(), Some(&options))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};

    async fn context(zone: Option<&str>, shield: bool) -> SessionContext {
        let mut config = SessionConfig::new();
        config.options_mut().execution.time_zone = zone.map(str::to_string);
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if shield {
            builder = builder.with_analyzer_rule(Arc::new(ShieldNaiveToZonedCasts));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        for sql in [
            "CREATE TABLE t AS SELECT TIMESTAMP '2024-11-01T00:00:00' AS ts",
            "CREATE TABLE u AS SELECT '2024-10-31T16:00:00Z'::timestamptz AS tstz",
        ] {
            ctx.sql(sql).await.unwrap();
        }
        ctx
    }

    async fn text(ctx: &SessionContext, sql: &str) -> String {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    async fn count(ctx: &SessionContext, condition: &str) -> String {
        let sql = format!("SELECT count(*) AS n FROM t WHERE {condition}");
        let text = text(ctx, &sql).await;
        text.lines().nth(3).unwrap_or_default().to_string()
    }

    /// The reproductions of apache/datafusion#25095 with PostgreSQL's answers.
    const SINGAPORE_CASES: &[(&str, &str)] = &[
        (
            "ts::timestamptz = '2024-10-31T16:00:00Z'::timestamptz",
            "| 1 |",
        ),
        (
            "ts::timestamptz = '2024-11-01T00:00:00Z'::timestamptz",
            "| 0 |",
        ),
        ("ts = '2024-10-31T16:00:00Z'::timestamptz", "| 1 |"),
        ("ts = '2024-11-01T00:00:00Z'::timestamptz", "| 0 |"),
        ("'2024-10-31T16:00:00Z'::timestamptz = ts", "| 1 |"),
        ("ts > '2024-10-31T20:00:00Z'::timestamptz", "| 0 |"),
        ("ts >= '2024-10-31T16:00:00Z'::timestamptz", "| 1 |"),
        ("ts IN ('2024-10-31T16:00:00Z'::timestamptz)", "| 1 |"),
        (
            "ts BETWEEN '2024-10-31T15:00:00Z'::timestamptz AND '2024-10-31T17:00:00Z'::timestamptz",
            "| 1 |",
        ),
        (
            "TRY_CAST(ts AS TIMESTAMPTZ) = '2024-10-31T16:00:00Z'::timestamptz",
            "| 1 |",
        ),
        (
            "ts IS NOT DISTINCT FROM '2024-10-31T16:00:00Z'::timestamptz",
            "| 1 |",
        ),
        (
            "CASE ts::timestamptz WHEN '2024-10-31T16:00:00Z'::timestamptz THEN true END",
            "| 1 |",
        ),
    ];

    #[tokio::test]
    async fn naive_to_zoned_comparisons_with_literals_are_right() {
        let ctx = context(Some("Asia/Singapore"), true).await;
        for (condition, expected) in SINGAPORE_CASES {
            assert_eq!(count(&ctx, condition).await, *expected, "{condition}");
        }
        // Column against column was right before, and stays so.
        let joined = text(&ctx, "SELECT count(*) AS n FROM t, u WHERE ts = tstz").await;
        assert_eq!(joined.lines().nth(3), Some("| 1 |"));
    }

    #[tokio::test]
    async fn fixed_offset_literals_are_right_without_a_session_zone() {
        let ctx = context(None, true).await;
        let zoned = "arrow_cast('2024-10-31T16:00:00Z', 'Timestamp(Nanosecond, Some(\"+08:00\"))')";
        assert_eq!(count(&ctx, &format!("ts = {zoned}")).await, "| 1 |");
        assert_eq!(count(&ctx, &format!("ts < {zoned}")).await, "| 0 |");
    }

    #[tokio::test]
    async fn only_shifting_casts_against_constants_are_shielded() {
        let explain = |ctx: SessionContext, condition: &'static str| async move {
            text(
                &ctx,
                &format!("EXPLAIN SELECT count(*) FROM t WHERE {condition}"),
            )
            .await
        };
        let singapore = context(Some("Asia/Singapore"), true).await;
        let plan = explain(
            singapore.clone(),
            "ts = '2024-10-31T16:00:00Z'::timestamptz",
        )
        .await;
        assert!(
            plan.contains("naive_to_zoned(t.ts) = TimestampNanosecond"),
            "{plan}"
        );
        let plan = explain(singapore, "ts = (SELECT max(tstz) FROM u)").await;
        assert!(!plan.contains("naive_to_zoned"), "{plan}");
        // UTC is a relabelling: the unwrap stays, and compares the column itself.
        let utc = context(Some("UTC"), true).await;
        let plan = explain(utc.clone(), "ts = '2024-10-31T16:00:00Z'::timestamptz").await;
        assert!(!plan.contains("naive_to_zoned"), "{plan}");
        assert!(
            plan.contains("t.ts = TimestampNanosecond(1730390400000000000, None)"),
            "{plan}"
        );
        assert_eq!(
            count(&utc, "ts = '2024-11-01T00:00:00Z'::timestamptz").await,
            "| 1 |"
        );
    }

    #[tokio::test]
    async fn column_names_and_types_stay_those_of_the_cast() {
        let query = "SELECT ts::timestamptz > '2024-10-31T15:00:00Z'::timestamptz, \
                     ts::timestamptz IN ('2024-10-31T16:00:00Z'::timestamptz) AS listed FROM t";
        let shielded = context(Some("Asia/Singapore"), true).await;
        let plain = context(Some("Asia/Singapore"), false).await;
        let optimized = |ctx: SessionContext| async move {
            let plan = ctx.sql(query).await.unwrap().into_optimized_plan().unwrap();
            Arc::clone(plan.schema())
        };
        let shielded_schema = optimized(shielded.clone()).await;
        assert_eq!(shielded_schema, optimized(plain).await);
        assert_eq!(
            shielded_schema.field(0).name(),
            "t.ts > Utf8(\"2024-10-31T15:00:00Z\")"
        );
        let rows = text(&shielded, query).await;
        assert!(rows.contains("| true "), "{rows}");
    }

    #[test]
    fn zero_offset_zones_are_recognised_and_others_are_not() {
        for zone in [
            "UTC", "utc", "Etc/UTC", "GMT", "Z", "+00:00", "-00:00", "+0000", "+00",
        ] {
            assert!(is_zero_offset(zone), "{zone}");
        }
        for zone in [
            "+08:00",
            "-05:00",
            "+00:30",
            "Asia/Singapore",
            "Europe/London",
            "America/New_York",
            "",
            "+",
        ] {
            assert!(!is_zero_offset(zone), "{zone}");
        }
    }
}
