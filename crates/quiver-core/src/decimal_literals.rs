//! A literal compared with a DECIMAL means the number written, not the nearest double.
//!
//! DataFusion types `19.99` as a `Float64`, and compares a `Decimal128(10, 2)` column with it
//! as `Decimal128(30, 15)`, casting the double's binary value: `-3372219.83` becomes
//! -3372219.829999999909888, so `WHERE price = -3372219.83` found no row and `<` answered
//! wrongly at the boundary (found by quiver's query fuzzer; DuckDB and Postgres read such a
//! literal as a decimal). [`DecimalLiterals`] runs before type coercion and casts a float
//! literal compared with a decimal operand (by `=`, `<>`, `<`, `<=`, `>`, `>=`, IS [NOT]
//! DISTINCT FROM, BETWEEN or IN) to the decimal of its shortest spelling — the digits Rust
//! prints for it, which read back as the same double, so the ones written in the SQL. The cast
//! rounds the double to that scale, which gives exactly those digits, and a cast does not show
//! in names, so nothing that refers to the expression by name changes.
//!
//! Literals with more than 38 significant digits, NaN and infinities are left alone; so is
//! arithmetic (`price * 1.1` stays DataFusion's float arithmetic).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{
    cast, Between, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator,
};
use datafusion::optimizer::AnalyzerRule;

use crate::unsigned_literals::coercion_schema;

/// Casts float literals compared with decimals to the decimal they spell.
#[derive(Debug, Default)]
pub struct DecimalLiterals;

impl AnalyzerRule for DecimalLiterals {
    fn name(&self) -> &str {
        "quiver_decimal_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = coercion_schema(&node)?;
            // Comparisons are Boolean whatever their operands: no schema changes.
            node.map_expressions(|expr| expr.transform_up(|e| Ok(retype(e, &schema))))
        })
        .map(|t| t.data)
    }
}

fn retype(expr: Expr, schema: &DFSchema) -> Transformed<Expr> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_comparison(op) => {
            match (
                as_decimal(&left, &right, schema),
                as_decimal(&right, &left, schema),
            ) {
                (Some(left), _) => {
                    Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, right)))
                }
                (None, Some(right)) => {
                    Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(left, op, Box::new(right))))
                }
                (None, None) => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
            }
        }
        Expr::Between(between) => {
            let low = as_decimal(&between.low, &between.expr, schema);
            let high = as_decimal(&between.high, &between.expr, schema);
            if low.is_none() && high.is_none() {
                return Transformed::no(Expr::Between(between));
            }
            let Between {
                expr,
                negated,
                low: old_low,
                high: old_high,
            } = between;
            Transformed::yes(Expr::Between(Between::new(
                expr,
                negated,
                Box::new(low.unwrap_or(*old_low)),
                Box::new(high.unwrap_or(*old_high)),
            )))
        }
        Expr::InList(mut list) => {
            let mut changed = false;
            let subject = list.expr.as_ref().clone();
            for item in list.list.iter_mut() {
                if let Some(decimal) = as_decimal(item, &subject, schema) {
                    *item = decimal;
                    changed = true;
                }
            }
            if changed {
                Transformed::yes(Expr::InList(list))
            } else {
                Transformed::no(Expr::InList(list))
            }
        }
        other => Transformed::no(other),
    }
}

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

/// `literal` cast to the decimal it spells, when it is a float literal and `other` a decimal.
fn as_decimal(literal: &Expr, other: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::Literal(value, _) = literal else {
        return None;
    };
    let spelled = match value {
        ScalarValue::Float64(Some(v)) if v.is_finite() => v.to_string(),
        ScalarValue::Float32(Some(v)) if v.is_finite() => v.to_string(),
        _ => return None,
    };
    // An operand whose type cannot be told is left to type coercion's own error.
    match other.get_type(schema).ok()? {
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => {}
        _ => return None,
    }
    let (precision, scale) = decimal_shape(&spelled)?;
    Some(cast(
        literal.clone(),
        DataType::Decimal128(precision, scale),
    ))
}

/// The precision and scale of the decimal `text` (digits, one optional point, an optional
/// sign) spells; `None` past 38 digits.
fn decimal_shape(text: &str) -> Option<(u8, i8)> {
    let digits = text.trim_start_matches('-');
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = whole.trim_start_matches('0');
    let scale = fraction.len();
    let precision = (whole.len() + scale).max(1);
    (precision <= 38).then_some((precision as u8, scale as i8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_the_digits_written() {
        assert_eq!(decimal_shape("-3372219.83"), Some((9, 2)));
        assert_eq!(decimal_shape("0.05"), Some((2, 2)));
        assert_eq!(decimal_shape("19.99"), Some((4, 2)));
        assert_eq!(decimal_shape("100000"), Some((6, 0)));
        assert_eq!(decimal_shape("0"), Some((1, 0)));
        // f64::MAX printed in full has 309 digits.
        assert_eq!(decimal_shape(&f64::MAX.to_string()), None);
    }
}
