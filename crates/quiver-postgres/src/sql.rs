//! Generating PostgreSQL SQL: the one quoting helper every identifier and literal goes
//! through, and the translation of DataFusion filters into `WHERE` conditions.
//!
//! A filter is translated only when Postgres evaluates it exactly as quiver would; anything
//! else stays in quiver. Deliberately not pushed: ordering comparisons on text (Postgres
//! compares with the column's collation, quiver by bytes), enums (an unknown label is an error in Postgres), uuid (Postgres accepts other spellings),
//! columns read through a `::text` cast, and LIKE patterns with a backslash or ILIKE.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Like, Operator};

use crate::types::{PgColumn, PgType};

/// `"name"` with embedded quotes doubled: a Postgres identifier that means exactly `name`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A string literal that means exactly `value`, whatever `standard_conforming_strings` is:
/// quotes are doubled, and a value with a backslash uses the `E'...'` form with backslashes
/// doubled. `None` for a value with a NUL character, which Postgres text cannot hold.
pub fn quote_literal(value: &str) -> Option<String> {
    if value.contains('\0') {
        return None;
    }
    let quoted = value.replace('\'', "''");
    Some(if value.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    })
}

/// `column` as quiver reads it, in a condition: its name, and for `char(n)` the name cast to
/// `text`, which drops the blank padding as quiver's scan does. (Compared as `char(n)`, the
/// padding of both sides would be ignored: `'x '` would equal `'x'`, which it does not in
/// quiver.)
pub fn column_sql(column: &PgColumn) -> String {
    match column.pg_type {
        PgType::Bpchar => format!("{}::text", quote_ident(&column.name)),
        _ => quote_ident(&column.name),
    }
}

/// `"schema"."name"`.
pub fn qualified_name(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// The Postgres condition for `expr`, or `None` when it cannot be pushed exactly.
pub fn filter_to_sql(expr: &Expr, columns: &[PgColumn]) -> Option<String> {
    Translator { columns }.filter(expr)
}

struct Translator<'a> {
    columns: &'a [PgColumn],
}

/// What a column may take part in.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Comparable {
    /// =, <>, <, <=, >, >=, BETWEEN, IN.
    Ordered,
    /// =, <>, IN, LIKE (text: equality is collation-independent for deterministic collations).
    Equality,
    /// Only IS [NOT] NULL.
    NullOnly,
}

impl Translator<'_> {
    fn filter(&self, expr: &Expr) -> Option<String> {
        match expr {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                Operator::And | Operator::Or => Some(format!(
                    "({} {} {})",
                    self.filter(left)?,
                    if *op == Operator::And { "AND" } else { "OR" },
                    self.filter(right)?
                )),
                Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq => {
                    let ordered = !matches!(op, Operator::Eq | Operator::NotEq);
                    let symbol = match op {
                        Operator::Eq => "=",
                        Operator::NotEq => "<>",
                        Operator::Lt => "<",
                        Operator::LtEq => "<=",
                        Operator::Gt => ">",
                        _ => ">=",
                    };
                    if let (Some(a), Some(b)) = (self.column(left), self.column(right)) {
                        // Two columns (`l_commitdate < l_receiptdate`): only of one family, so
                        // that Postgres compares them as quiver does.
                        self.check(a, ordered)?;
                        self.check(b, ordered)?;
                        same_family(a, b)?;
                        return Some(format!("({} {symbol} {})", column_sql(a), column_sql(b)));
                    }
                    let (column, value, flipped) = match (self.column(left), self.column(right)) {
                        (Some(column), None) => (column, right.as_ref(), false),
                        (None, Some(column)) => (column, left.as_ref(), true),
                        _ => return None,
                    };
                    self.check(column, ordered)?;
                    let literal = literal(value)?;
                    let column_sql = column_sql(column);
                    Some(if flipped {
                        format!("({literal} {symbol} {column_sql})")
                    } else {
                        format!("({column_sql} {symbol} {literal})")
                    })
                }
                _ => None,
            },
            Expr::Not(inner) => Some(format!("(NOT {})", self.filter(inner)?)),
            Expr::IsNull(inner) => {
                let column = self.column(inner)?;
                Some(format!("({} IS NULL)", column_sql(column)))
            }
            Expr::IsNotNull(inner) => {
                let column = self.column(inner)?;
                Some(format!("({} IS NOT NULL)", column_sql(column)))
            }
            Expr::Between(Between {
                expr,
                negated,
                low,
                high,
            }) => {
                let column = self.column(expr)?;
                self.check(column, true)?;
                Some(format!(
                    "({} {}BETWEEN {} AND {})",
                    column_sql(column),
                    if *negated { "NOT " } else { "" },
                    literal(low)?,
                    literal(high)?
                ))
            }
            Expr::InList(list) => {
                let column = self.column(&list.expr)?;
                self.check(column, false)?;
                if list.list.is_empty() {
                    return None;
                }
                let values = list.list.iter().map(literal).collect::<Option<Vec<_>>>()?;
                Some(format!(
                    "({} {}IN ({}))",
                    column_sql(column),
                    if list.negated { "NOT " } else { "" },
                    values.join(", ")
                ))
            }
            Expr::Like(Like {
                negated,
                expr,
                pattern,
                escape_char,
                case_insensitive,
            }) => {
                let column = self.column(expr)?;
                let text = matches!(column.pg_type, PgType::Text | PgType::Bpchar);
                if *case_insensitive || escape_char.is_some() || !text {
                    return None;
                }
                let pattern = match pattern.as_ref() {
                    Expr::Literal(value, _) => string_value(value)?,
                    _ => return None,
                };
                if pattern.contains('\\') {
                    return None;
                }
                Some(format!(
                    "({} {}LIKE {})",
                    column_sql(column),
                    if *negated { "NOT " } else { "" },
                    quote_literal(&pattern)?
                ))
            }
            _ => None,
        }
    }

    /// The column `expr` names, through casts between numeric types (Postgres compares mixed
    /// numeric types exactly) — any other cast keeps the filter in quiver.
    fn column(&self, expr: &Expr) -> Option<&PgColumn> {
        match expr {
            Expr::Column(column) => self.columns.iter().find(|c| c.name == column.name),
            Expr::Cast(cast) if is_numeric(cast.field.data_type()) => {
                let column = self.column(&cast.expr)?;
                is_numeric(&column.pg_type.arrow_type()).then_some(column)
            }
            _ => None,
        }
    }

    fn check(&self, column: &PgColumn, ordered: bool) -> Option<()> {
        pushable(column, ordered)
    }
}

/// Whether a condition on `column` means the same in Postgres as in quiver: any comparison
/// (`ordered`) or only equality.
pub(crate) fn pushable(column: &PgColumn, ordered: bool) -> Option<()> {
    let comparable = match column.pg_type {
        PgType::Bool
        | PgType::Int2
        | PgType::Int4
        | PgType::Int8
        | PgType::Float4
        | PgType::Float8
        | PgType::Numeric { .. }
        | PgType::Date
        | PgType::Time
        | PgType::Timestamp
        | PgType::TimestampTz => Comparable::Ordered,
        // `char(n)` as text: see `column_sql`.
        PgType::Text | PgType::Bpchar => Comparable::Equality,
        _ => Comparable::NullOnly,
    };
    match (comparable, ordered) {
        (Comparable::Ordered, _) | (Comparable::Equality, false) => Some(()),
        _ => None,
    }
}

/// Whether Postgres compares values of `a` and `b` as quiver does: integers with integers,
/// floats with floats, numerics with numerics, and otherwise only the same type.
fn same_family(a: &PgColumn, b: &PgColumn) -> Option<()> {
    let family = |t: &PgType| match t {
        PgType::Int2 | PgType::Int4 | PgType::Int8 => 1,
        PgType::Float4 | PgType::Float8 => 2,
        PgType::Numeric { .. } => 3,
        PgType::Bool => 4,
        PgType::Date => 5,
        PgType::Time => 6,
        PgType::Timestamp => 7,
        PgType::TimestampTz => 8,
        PgType::Text | PgType::Bpchar => 9,
        _ => 0,
    };
    let (fa, fb) = (family(&a.pg_type), family(&b.pg_type));
    (fa != 0 && fa == fb).then_some(())
}

pub(crate) fn is_numeric(data_type: &DataType) -> bool {
    data_type.is_integer()
        || data_type.is_floating()
        || matches!(data_type, DataType::Decimal128(..))
}

fn string_value(value: &ScalarValue) -> Option<String> {
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        ScalarValue::Dictionary(_, inner) => string_value(inner),
        _ => None,
    }
}

/// A constant as a Postgres literal with an explicit type, or `None` when it is not a constant
/// quiver can spell exactly.
fn literal(expr: &Expr) -> Option<String> {
    let value = match expr {
        Expr::Literal(value, _) => value,
        _ => return None,
    };
    scalar_literal(value)
}

pub(crate) fn scalar_literal(value: &ScalarValue) -> Option<String> {
    use arrow::temporal_conversions::date32_to_datetime;
    Some(match value {
        ScalarValue::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        ScalarValue::Int8(Some(v)) => format!("{v}"),
        ScalarValue::Int16(Some(v)) => format!("{v}"),
        ScalarValue::Int32(Some(v)) => format!("{v}"),
        ScalarValue::Int64(Some(v)) => format!("{v}::int8"),
        ScalarValue::UInt8(Some(v)) => format!("{v}"),
        ScalarValue::UInt16(Some(v)) => format!("{v}"),
        ScalarValue::UInt32(Some(v)) => format!("{v}::int8"),
        ScalarValue::UInt64(Some(v)) => format!("{v}::numeric"),
        ScalarValue::Float32(Some(v)) => format!("{}::float4", float_literal(f64::from(*v))),
        ScalarValue::Float64(Some(v)) => format!("{}::float8", float_literal(*v)),
        ScalarValue::Decimal128(Some(v), _, scale) => {
            format!("'{}'::numeric", decimal_text(*v, *scale))
        }
        ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Utf8View(_) => {
            quote_literal(&string_value(value)?)?
        }
        ScalarValue::Dictionary(_, inner) => scalar_literal(inner)?,
        ScalarValue::Date32(Some(days)) => {
            let date = date32_to_datetime(*days)?;
            let text = date.format("%Y-%m-%d").to_string();
            plain_year(&text)?;
            format!("'{text}'::date")
        }
        ScalarValue::TimestampSecond(Some(v), tz) => {
            timestamp_literal(v.checked_mul(1_000_000)?, tz)?
        }
        ScalarValue::TimestampMillisecond(Some(v), tz) => {
            timestamp_literal(v.checked_mul(1_000)?, tz)?
        }
        ScalarValue::TimestampMicrosecond(Some(v), tz) => timestamp_literal(*v, tz)?,
        ScalarValue::TimestampNanosecond(Some(v), tz) if v % 1000 == 0 => {
            timestamp_literal(v / 1000, tz)?
        }
        ScalarValue::Time64Microsecond(Some(v)) => {
            let (seconds, micros) = (v.div_euclid(1_000_000), v.rem_euclid(1_000_000));
            if !(0..86_400).contains(&seconds) {
                return None;
            }
            format!(
                "'{:02}:{:02}:{:02}.{micros:06}'::time",
                seconds / 3600,
                seconds / 60 % 60,
                seconds % 60
            )
        }
        _ => return None,
    })
}

fn timestamp_literal(micros: i64, tz: &Option<std::sync::Arc<str>>) -> Option<String> {
    let at = arrow::temporal_conversions::timestamp_us_to_datetime(micros)?;
    let text = at.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    plain_year(&text)?;
    Some(match tz {
        // The value is an instant in UTC whatever the zone it is displayed in.
        Some(_) => format!("'{text}+00'::timestamptz"),
        None => format!("'{text}'::timestamp"),
    })
}

/// Years 1–9999 only: other years print in forms Postgres reads differently.
fn plain_year(text: &str) -> Option<()> {
    let bytes = text.as_bytes();
    (bytes.len() >= 10
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && &bytes[..4] != b"0000")
        .then_some(())
}

fn float_literal(v: f64) -> String {
    if v.is_nan() {
        "'NaN'".into()
    } else if v.is_infinite() {
        if v > 0.0 { "'Infinity'" } else { "'-Infinity'" }.into()
    } else {
        // `{:?}` prints the shortest text that reads back as the same value.
        format!("'{v:?}'")
    }
}

fn decimal_text(value: i128, scale: i8) -> String {
    if scale <= 0 {
        let zeros = "0".repeat((-scale) as usize);
        return format!("{value}{zeros}");
    }
    let digits = value.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if value < 0 { "-" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn columns() -> Vec<PgColumn> {
        vec![
            PgColumn {
                name: "id".into(),
                pg_type: PgType::Int4,
            },
            PgColumn {
                name: "sel;ect".into(),
                pg_type: PgType::Text,
            },
            PgColumn {
                name: "kind".into(),
                pg_type: PgType::Enum,
            },
        ]
    }

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(
            quote_literal("'); DROP TABLE t; --").unwrap(),
            "'''); DROP TABLE t; --'"
        );
        assert_eq!(quote_literal("a\\b'c").unwrap(), "E'a\\\\b''c'");
        assert_eq!(quote_literal("nul\0"), None);
        assert_eq!(
            qualified_name("my schema", "t\"x"),
            "\"my schema\".\"t\"\"x\""
        );
    }

    #[test]
    fn two_columns_compare_only_within_one_family() {
        let c = vec![
            PgColumn {
                name: "shipped".into(),
                pg_type: PgType::Date,
            },
            PgColumn {
                name: "received".into(),
                pg_type: PgType::Date,
            },
            PgColumn {
                name: "n".into(),
                pg_type: PgType::Int8,
            },
            PgColumn {
                name: "x".into(),
                pg_type: PgType::Float8,
            },
            PgColumn {
                name: "a".into(),
                pg_type: PgType::Text,
            },
            PgColumn {
                name: "b".into(),
                pg_type: PgType::Text,
            },
        ];
        assert_eq!(
            filter_to_sql(&col("shipped").lt(col("received")), &c).unwrap(),
            "(\"shipped\" < \"received\")"
        );
        assert_eq!(
            filter_to_sql(&col("a").not_eq(col("b")), &c).unwrap(),
            "(\"a\" <> \"b\")"
        );
        // Text order depends on the collation; an integer and a float, or a date and an
        // integer, are not compared alike.
        assert_eq!(filter_to_sql(&col("a").lt(col("b")), &c), None);
        assert_eq!(filter_to_sql(&col("n").lt(col("x")), &c), None);
        assert_eq!(filter_to_sql(&col("n").eq(col("shipped")), &c), None);
    }

    #[test]
    fn comparisons_and_boolean_logic_translate() {
        let c = columns();
        let expr = col("id").gt(lit(10)).and(col("sel;ect").eq(lit("x'y")));
        assert_eq!(
            filter_to_sql(&expr, &c).unwrap(),
            "((\"id\" > 10) AND (\"sel;ect\" = 'x''y'))"
        );
        let expr = col("id").between(lit(1), lit(5)).or(col("id").is_null());
        assert_eq!(
            filter_to_sql(&expr, &c).unwrap(),
            "((\"id\" BETWEEN 1 AND 5) OR (\"id\" IS NULL))"
        );
        let expr = Expr::Not(Box::new(col("id").in_list(vec![lit(1), lit(2)], true)));
        assert_eq!(
            filter_to_sql(&expr, &c).unwrap(),
            "(NOT (\"id\" NOT IN (1, 2)))"
        );
        let expr = col("sel;ect").like(lit("ab%"));
        assert_eq!(
            filter_to_sql(&expr, &c).unwrap(),
            "(\"sel;ect\" LIKE 'ab%')"
        );
        assert_eq!(
            filter_to_sql(&lit(3).lt_eq(col("id")), &c).unwrap(),
            "(3 <= \"id\")"
        );
    }

    #[test]
    fn what_postgres_would_evaluate_differently_stays_in_quiver() {
        let c = columns();
        assert_eq!(
            filter_to_sql(&col("sel;ect").lt(lit("m")), &c),
            None,
            "collation"
        );
        assert_eq!(
            filter_to_sql(&col("kind").eq(lit("happy")), &c),
            None,
            "enum"
        );
        assert_eq!(filter_to_sql(&col("sel;ect").like(lit("a\\%")), &c), None);
        assert_eq!(filter_to_sql(&col("sel;ect").ilike(lit("a%")), &c), None);
        assert_eq!(filter_to_sql(&col("missing").eq(lit(1)), &c), None);
        assert_eq!(filter_to_sql(&col("id").eq(col("sel;ect")), &c), None);
        assert!(filter_to_sql(&col("kind").is_not_null(), &c).is_some());
        // One untranslatable side keeps the whole OR in quiver.
        let expr = col("id").eq(lit(1)).or(col("sel;ect").lt(lit("m")));
        assert_eq!(filter_to_sql(&expr, &c), None);
    }

    #[test]
    fn literals_carry_their_types() {
        assert_eq!(
            scalar_literal(&ScalarValue::Float64(Some(0.1))).unwrap(),
            "'0.1'::float8"
        );
        assert_eq!(
            scalar_literal(&ScalarValue::Decimal128(Some(-5), 10, 2)).unwrap(),
            "'-0.05'::numeric"
        );
        assert_eq!(
            scalar_literal(&ScalarValue::Date32(Some(0))).unwrap(),
            "'1970-01-01'::date"
        );
        assert_eq!(
            scalar_literal(&ScalarValue::TimestampMicrosecond(
                Some(1),
                Some("UTC".into())
            ))
            .unwrap(),
            "'1970-01-01 00:00:00.000001+00'::timestamptz"
        );
        assert_eq!(scalar_literal(&ScalarValue::Int32(None)), None);
    }
}
