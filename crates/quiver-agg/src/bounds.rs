//! Bounds analysis for GROUP BY keys: which integer range can a key expression produce?
//!
//! A key qualifies for the small-key path when its values provably lie in `[min, max]` with
//! `max - min + 1` small. Proof comes from the type (bool, 8- and 16-bit integers) or from the
//! expression's shape:
//!
//! | expression | range |
//! |---|---|
//! | `x % m` (m a non-zero literal) | `[0, |m|-1]` when `x` is unsigned or provably ≥ 0, else `[-(|m|-1), |m|-1]` |
//! | `x & c` (c ≥ 0 a literal) | `[0, c]` |
//! | `x + c`, `x - c` | the range of `x` shifted by `c` |
//! | `CAST(x AS <integer>)` | the range of `x`, if it fits the target type |
//! | `date_part('minute', t)`, `extract(hour FROM t)`, ... | the calendar field's range |
//!
//! Anything else is unknown and leaves DataFusion's hash aggregation in place. The operator
//! still checks every value against the proven range at run time and fails loudly rather than
//! give a wrong answer if the proof were ever wrong.

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Literal, TryCastExpr};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};

/// The closed range `[min, max]` a key can take (NULL aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    /// Smallest possible value.
    pub min: i64,
    /// Largest possible value.
    pub max: i64,
}

impl KeyRange {
    fn new(min: i64, max: i64) -> Option<KeyRange> {
        (min <= max).then_some(KeyRange { min, max })
    }

    /// How many distinct non-NULL values the range holds.
    pub fn width(&self) -> u64 {
        (i128::from(self.max) - i128::from(self.min) + 1) as u64
    }
}

/// The range of values of `data_type`, when it is small enough to be useful on its own.
fn type_range(data_type: &DataType) -> Option<KeyRange> {
    match data_type {
        DataType::Boolean => KeyRange::new(0, 1),
        DataType::Int8 => KeyRange::new(i64::from(i8::MIN), i64::from(i8::MAX)),
        DataType::UInt8 => KeyRange::new(0, i64::from(u8::MAX)),
        DataType::Int16 => KeyRange::new(i64::from(i16::MIN), i64::from(i16::MAX)),
        DataType::UInt16 => KeyRange::new(0, i64::from(u16::MAX)),
        _ => None,
    }
}

/// The full range of an integer type (or a decimal of scale 0, which DataFusion uses for
/// `UInt64 % Int64`), for checking that a proven range fits it.
fn integer_type_limits(data_type: &DataType) -> Option<(i128, i128)> {
    Some(match data_type {
        DataType::Decimal128(precision, 0) if *precision <= 38 => {
            let limit = 10i128.checked_pow(u32::from(*precision))? - 1;
            (-limit, limit)
        }
        DataType::Int8 => (i128::from(i8::MIN), i128::from(i8::MAX)),
        DataType::Int16 => (i128::from(i16::MIN), i128::from(i16::MAX)),
        DataType::Int32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        DataType::Int64 => (i128::from(i64::MIN), i128::from(i64::MAX)),
        DataType::UInt8 => (0, i128::from(u8::MAX)),
        DataType::UInt16 => (0, i128::from(u16::MAX)),
        DataType::UInt32 => (0, i128::from(u32::MAX)),
        DataType::UInt64 => (0, i128::from(u64::MAX)),
        _ => return None,
    })
}

fn is_unsigned(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64
    )
}

fn literal_i64(expr: &Arc<dyn PhysicalExpr>) -> Option<i64> {
    let literal = expr.downcast_ref::<Literal>()?;
    match literal.value() {
        ScalarValue::Decimal128(Some(v), _, 0) => i64::try_from(*v).ok(),
        ScalarValue::Int8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::UInt8(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt16(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt32(Some(v)) => Some(i64::from(*v)),
        ScalarValue::UInt64(Some(v)) => i64::try_from(*v).ok(),
        _ => None,
    }
}

fn literal_str(expr: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let literal = expr.downcast_ref::<Literal>()?;
    match literal.value() {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.to_lowercase()),
        _ => None,
    }
}

/// Whether `expr` is provably ≥ 0: an unsigned value, a cast of one, or a proven range ≥ 0.
fn non_negative(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    if expr.data_type(schema).is_ok_and(|t| is_unsigned(&t)) {
        return true;
    }
    if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        if non_negative(cast.expr(), schema) {
            return true;
        }
    }
    key_range(expr, schema).is_some_and(|r| r.min >= 0)
}

/// `x % m` where `x` is an integer column or expression, possibly cast to a scale-0 decimal
/// (DataFusion types `UInt64 % Int64` as `Decimal128(20, 0)`): the operator then computes the
/// remainder on `x`'s integers directly instead of DataFusion's 128-bit decimal kernel.
/// Returns `x` and `m`.
pub fn integer_modulo(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Option<(Arc<dyn PhysicalExpr>, i64)> {
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    if *binary.op() != Operator::Modulo {
        return None;
    }
    let m = literal_i64(binary.right())?;
    if m == 0 {
        return None;
    }
    let mut left = Arc::clone(binary.left());
    if let Some(cast) = left.downcast_ref::<CastExpr>() {
        if matches!(cast.cast_type(), DataType::Decimal128(_, 0)) {
            left = Arc::clone(cast.expr());
        }
    }
    let left_type = left.data_type(schema).ok()?;
    (left_type.is_integer()).then_some((left, m))
}

/// The proven range of `expr` over rows of `schema`, if any.
pub fn key_range(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<KeyRange> {
    let data_type = expr.data_type(schema).ok()?;
    let from_shape = shape_range(expr, schema, &data_type);
    let from_type = type_range(&data_type);
    match (from_shape, from_type) {
        (Some(a), Some(b)) => KeyRange::new(a.min.max(b.min), a.max.min(b.max)),
        (a, b) => a.or(b),
    }
}

fn shape_range(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
    data_type: &DataType,
) -> Option<KeyRange> {
    integer_type_limits(data_type)?;
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        let (left, right) = (binary.left(), binary.right());
        return match binary.op() {
            Operator::Modulo => {
                let m = literal_i64(right)?.checked_abs()?;
                if m == 0 {
                    return None;
                }
                let left_non_negative = is_unsigned(data_type) || non_negative(left, schema);
                if left_non_negative {
                    KeyRange::new(0, m - 1)
                } else {
                    KeyRange::new(-(m - 1), m - 1)
                }
            }
            Operator::BitwiseAnd => {
                let c = literal_i64(right).or_else(|| literal_i64(left))?;
                (c >= 0).then(|| KeyRange::new(0, c)).flatten()
            }
            Operator::Plus | Operator::Minus => {
                let (inner, c, sign) = match (literal_i64(right), literal_i64(left)) {
                    (Some(c), _) => (
                        left,
                        c,
                        if *binary.op() == Operator::Plus {
                            1
                        } else {
                            -1
                        },
                    ),
                    (None, Some(c)) if *binary.op() == Operator::Plus => (right, c, 1),
                    _ => return None,
                };
                let r = key_range(inner, schema)?;
                let shift = c.checked_mul(sign)?;
                let (limit_min, limit_max) = integer_type_limits(data_type)?;
                let min = r.min.checked_add(shift)?;
                let max = r.max.checked_add(shift)?;
                // Wrapping arithmetic in the result type would break the proof.
                (i128::from(min) >= limit_min && i128::from(max) <= limit_max)
                    .then(|| KeyRange::new(min, max))
                    .flatten()
            }
            _ => None,
        };
    }
    let cast_inner = expr
        .downcast_ref::<CastExpr>()
        .map(|c| c.expr())
        .or_else(|| expr.downcast_ref::<TryCastExpr>().map(|c| c.expr()));
    if let Some(inner) = cast_inner {
        let r = key_range(inner, schema)?;
        let (limit_min, limit_max) = integer_type_limits(data_type)?;
        return (i128::from(r.min) >= limit_min && i128::from(r.max) <= limit_max).then_some(r);
    }
    if let Some(function) = expr.downcast_ref::<ScalarFunctionExpr>() {
        if function.name() == "date_part" {
            let part = literal_str(function.args().first()?)?;
            let (min, max) = match part.as_str() {
                "minute" | "minutes" | "second" | "seconds" => (0, 59),
                "hour" | "hours" => (0, 23),
                "day" | "days" => (1, 31),
                "month" | "months" => (1, 12),
                "quarter" => (1, 4),
                "dow" => (0, 6),
                "isodow" => (1, 7),
                "doy" => (1, 366),
                "week" | "weeks" => (1, 53),
                _ => return None,
            };
            return KeyRange::new(min, max);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("u", DataType::UInt64, true),
            Field::new("i", DataType::Int64, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("s", DataType::Int16, true),
        ])
    }

    fn binary(
        l: Arc<dyn PhysicalExpr>,
        op: Operator,
        r: Arc<dyn PhysicalExpr>,
    ) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(l, op, r))
    }

    #[test]
    fn ranges_follow_types_and_shapes() {
        let s = schema();
        let u = col("u", &s).expect("u");
        let i = col("i", &s).expect("i");
        assert_eq!(
            key_range(&col("b", &s).expect("b"), &s),
            KeyRange::new(0, 1)
        );
        assert_eq!(
            key_range(&col("s", &s).expect("s"), &s),
            KeyRange::new(-32768, 32767)
        );
        assert_eq!(key_range(&u, &s), None);
        let u_mod = binary(
            Arc::clone(&u),
            Operator::Modulo,
            lit(ScalarValue::UInt64(Some(10000))),
        );
        assert_eq!(key_range(&u_mod, &s), KeyRange::new(0, 9999));
        let i_mod = binary(
            Arc::clone(&i),
            Operator::Modulo,
            lit(ScalarValue::Int64(Some(-7))),
        );
        assert_eq!(key_range(&i_mod, &s), KeyRange::new(-6, 6));
        let i_and = binary(
            Arc::clone(&i),
            Operator::BitwiseAnd,
            lit(ScalarValue::Int64(Some(255))),
        );
        assert_eq!(key_range(&i_and, &s), KeyRange::new(0, 255));
        let shifted = binary(i_and, Operator::Minus, lit(ScalarValue::Int64(Some(100))));
        assert_eq!(key_range(&shifted, &s), KeyRange::new(-100, 155));
        let negative_mask = binary(i, Operator::BitwiseAnd, lit(ScalarValue::Int64(Some(-1))));
        assert_eq!(key_range(&negative_mask, &s), None);
    }
}
