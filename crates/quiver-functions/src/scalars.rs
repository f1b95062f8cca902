//! ClickHouse scalar functions that are other spellings of DataFusion expressions.
//!
//! | ClickHouse | becomes |
//! |---|---|
//! | `toYear`, `toMonth`, `toDayOfMonth`, `toHour`, `toMinute`, `toSecond`, `toQuarter`, `toDayOfYear` | `date_part(...)` |
//! | `toDayOfWeek(t)` (Monday = 1 … Sunday = 7) | `date_part('isodow', t)` |
//! | `toStartOfMinute/Hour/Day(t)` | `date_trunc(...)` (a timestamp) |
//! | `toStartOfMonth/Quarter/Year(t)` | `CAST(date_trunc(...) AS DATE)` (a date, as in ClickHouse) |
//! | `toDate(x)`, `toDateTime(x)` | `CAST(x AS DATE)`, `CAST(x AS TIMESTAMP(0))` |
//! | `parseDateTimeBestEffort[OrNull](s)` | `[TRY_]CAST(s AS TIMESTAMP(0))` |
//! | `toString(x)` | `CAST(x AS VARCHAR)`; timestamps as `YYYY-MM-DD hh:mm:ss` |
//! | `toInt8` … `toUInt64`, `toFloat32/64` (+ `OrNull`, `OrZero`) | `CAST` / `TRY_CAST` / `coalesce(TRY_CAST(x), 0)` |
//! | `if(c, a, b)`, `multiIf(c1, a1, …, else)` | `CASE WHEN …` |
//! | `empty(s)`, `notEmpty(s)` | `s = ''`, `s <> ''` |
//! | `strlen(s)` | `octet_length(s)` (bytes, as DuckDB's `strlen` and ClickHouse's `length`) |
//! | `lengthUTF8(s)` | `character_length(s)` |
//! | `match(s, re)` | `regexp_like(s, re)` |
//! | `like(s, p)`, `notLike(s, p)`, `ilike(s, p)` | `s LIKE p`, ... |
//! | `replaceRegexpAll(s, re, r)` | `regexp_replace(s, re, r, 'g')`: `\1` … `\9` and `\0` back-references |
//! | `replaceRegexpOne(s, re, r)` | `regexp_replace(s, re, r)` (first match only) |
//! | `replaceAll(s, a, b)` | `replace(s, a, b)` |
//! | `regexpExtract(s, re)` | ClickHouse's `extract(s, re)`: the first capture group (or the whole match), `''` if none |
//!
//! Like [`crate::aggregates`], each is a UDF whose [`simplify`](ScalarUDFImpl::simplify) hook
//! rewrites the call in the logical optimiser; `invoke` is never reached when the optimiser runs.
//! DataFusion's `length` keeps its meaning (characters; ClickHouse counts bytes — use `strlen`
//! or `octet_length` for bytes) and `regexp_replace` its PostgreSQL meaning (first match unless
//! the `'g'` flag is given). ClickHouse's `extract(s, re)` cannot be reached: the SQL parser
//! reads `extract(` as `EXTRACT(part FROM t)`, so it is spelled `regexpExtract(s, re)` here.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::functions::expr_fn::{
    character_length, date_part, date_trunc, octet_length, regexp_like, regexp_match,
    regexp_replace, replace, to_char,
};
use datafusion::functions_nested::expr_fn::array_element;
use datafusion::logical_expr::expr::{Cast, Like, TryCast};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::type_coercion::binary::type_union_resolution;
use datafusion::logical_expr::{
    lit, when, ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::coalesce;

/// Which rewrite a [`ClickHouseScalar`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `date_part(part, t)`.
    Part(&'static str),
    /// `date_trunc(unit, t)`, cast to DATE when `to_date`.
    StartOf(&'static str, bool),
    ToDate,
    ToDateTime,
    ParseDateTime {
        or_null: bool,
    },
    ToString,
    Convert {
        to: NumberType,
        fallback: Fallback,
    },
    If,
    MultiIf,
    Empty {
        negated: bool,
    },
    Strlen,
    LengthUtf8,
    Match,
    Like {
        negated: bool,
        case_insensitive: bool,
    },
    ReplaceRegexp {
        all: bool,
    },
    ReplaceAll,
    Extract,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NumberType {
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
}

impl NumberType {
    fn data_type(self) -> DataType {
        match self {
            NumberType::Int8 => DataType::Int8,
            NumberType::Int16 => DataType::Int16,
            NumberType::Int32 => DataType::Int32,
            NumberType::Int64 => DataType::Int64,
            NumberType::UInt8 => DataType::UInt8,
            NumberType::UInt16 => DataType::UInt16,
            NumberType::UInt32 => DataType::UInt32,
            NumberType::UInt64 => DataType::UInt64,
            NumberType::Float32 => DataType::Float32,
            NumberType::Float64 => DataType::Float64,
        }
    }
}

/// What a conversion does with a value it cannot convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fallback {
    Error,
    Null,
    Zero,
}

/// ClickHouse's `DateTime`: seconds, no time zone.
fn datetime_type() -> DataType {
    DataType::Timestamp(TimeUnit::Second, None)
}

fn is_temporal(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
    )
}

/// A ClickHouse scalar function rewritten to DataFusion expressions (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ClickHouseScalar {
    name: String,
    aliases: Vec<String>,
    kind: Kind,
    signature: Signature,
}

impl ClickHouseScalar {
    fn new(name: &str, kind: Kind) -> Self {
        let lower = name.to_lowercase();
        let aliases = if lower != name { vec![lower] } else { vec![] };
        ClickHouseScalar {
            name: name.to_string(),
            aliases,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// Every function of this module.
    pub fn all() -> Vec<ClickHouseScalar> {
        let mut all = vec![
            ClickHouseScalar::new("toYear", Kind::Part("year")),
            ClickHouseScalar::new("toQuarter", Kind::Part("quarter")),
            ClickHouseScalar::new("toMonth", Kind::Part("month")),
            ClickHouseScalar::new("toDayOfMonth", Kind::Part("day")),
            ClickHouseScalar::new("toDayOfYear", Kind::Part("doy")),
            ClickHouseScalar::new("toDayOfWeek", Kind::Part("isodow")),
            ClickHouseScalar::new("toHour", Kind::Part("hour")),
            ClickHouseScalar::new("toMinute", Kind::Part("minute")),
            ClickHouseScalar::new("toSecond", Kind::Part("second")),
            ClickHouseScalar::new("toStartOfMinute", Kind::StartOf("minute", false)),
            ClickHouseScalar::new("toStartOfHour", Kind::StartOf("hour", false)),
            ClickHouseScalar::new("toStartOfDay", Kind::StartOf("day", false)),
            ClickHouseScalar::new("toStartOfMonth", Kind::StartOf("month", true)),
            ClickHouseScalar::new("toStartOfQuarter", Kind::StartOf("quarter", true)),
            ClickHouseScalar::new("toStartOfYear", Kind::StartOf("year", true)),
            ClickHouseScalar::new("toDate", Kind::ToDate),
            ClickHouseScalar::new("toDateTime", Kind::ToDateTime),
            ClickHouseScalar::new(
                "parseDateTimeBestEffort",
                Kind::ParseDateTime { or_null: false },
            ),
            ClickHouseScalar::new(
                "parseDateTimeBestEffortOrNull",
                Kind::ParseDateTime { or_null: true },
            ),
            ClickHouseScalar::new("toString", Kind::ToString),
            ClickHouseScalar::new("if", Kind::If),
            ClickHouseScalar::new("multiIf", Kind::MultiIf),
            ClickHouseScalar::new("empty", Kind::Empty { negated: false }),
            ClickHouseScalar::new("notEmpty", Kind::Empty { negated: true }),
            ClickHouseScalar::new("strlen", Kind::Strlen),
            ClickHouseScalar::new("lengthUTF8", Kind::LengthUtf8),
            ClickHouseScalar::new("match", Kind::Match),
            ClickHouseScalar::new(
                "like",
                Kind::Like {
                    negated: false,
                    case_insensitive: false,
                },
            ),
            ClickHouseScalar::new(
                "notLike",
                Kind::Like {
                    negated: true,
                    case_insensitive: false,
                },
            ),
            ClickHouseScalar::new(
                "ilike",
                Kind::Like {
                    negated: false,
                    case_insensitive: true,
                },
            ),
            ClickHouseScalar::new("replaceRegexpAll", Kind::ReplaceRegexp { all: true }),
            ClickHouseScalar::new("replaceRegexpOne", Kind::ReplaceRegexp { all: false }),
            ClickHouseScalar::new("replaceAll", Kind::ReplaceAll),
            ClickHouseScalar::new("regexpExtract", Kind::Extract),
        ];
        let numbers = [
            ("Int8", NumberType::Int8),
            ("Int16", NumberType::Int16),
            ("Int32", NumberType::Int32),
            ("Int64", NumberType::Int64),
            ("UInt8", NumberType::UInt8),
            ("UInt16", NumberType::UInt16),
            ("UInt32", NumberType::UInt32),
            ("UInt64", NumberType::UInt64),
            ("Float32", NumberType::Float32),
            ("Float64", NumberType::Float64),
        ];
        for (suffix, to) in numbers {
            for (tail, fallback) in [
                ("", Fallback::Error),
                ("OrNull", Fallback::Null),
                ("OrZero", Fallback::Zero),
            ] {
                all.push(ClickHouseScalar::new(
                    &format!("to{suffix}{tail}"),
                    Kind::Convert { to, fallback },
                ));
            }
        }
        all
    }

    fn check_arity(&self, n: usize) -> Result<()> {
        let ok = match self.kind {
            Kind::Part(_)
            | Kind::StartOf(..)
            | Kind::ToDate
            | Kind::ToDateTime
            | Kind::ParseDateTime { .. }
            | Kind::ToString
            | Kind::Convert { .. }
            | Kind::Empty { .. }
            | Kind::Strlen
            | Kind::LengthUtf8 => n == 1,
            Kind::Match | Kind::Like { .. } | Kind::Extract => n == 2,
            Kind::If | Kind::ReplaceRegexp { .. } | Kind::ReplaceAll => n == 3,
            Kind::MultiIf => n >= 3 && n % 2 == 1,
        };
        if ok {
            Ok(())
        } else if self.kind == Kind::MultiIf {
            plan_err!("multiIf expects cond1, then1, [cond2, then2, ...] else: an odd number of at least 3 arguments, got {n}")
        } else {
            plan_err!("{}: wrong number of arguments ({n})", self.name)
        }
    }

    /// The type every branch of `if` / `multiIf` is coerced to.
    fn branch_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let branches: Vec<DataType> = match self.kind {
            Kind::If => arg_types.iter().skip(1).cloned().collect(),
            _ => arg_types
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == 1 || *i == arg_types.len() - 1)
                .map(|(_, t)| t.clone())
                .collect(),
        };
        match type_union_resolution(&branches) {
            Some(t) => Ok(t),
            None => plan_err!(
                "{}: the branches have no common type ({})",
                self.name,
                branches
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn string_type(t: &DataType) -> DataType {
    match t {
        DataType::LargeUtf8 | DataType::Utf8View => t.clone(),
        _ => DataType::Utf8,
    }
}

impl ScalarUDFImpl for ClickHouseScalar {
    fn name(&self) -> &str {
        &self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.check_arity(arg_types.len())?;
        let mut types = arg_types.to_vec();
        match self.kind {
            Kind::Part(_) => {
                if !is_temporal(&types[0]) {
                    types[0] = datetime_type();
                }
            }
            // DataFusion's date_trunc takes timestamps only.
            Kind::StartOf(..) => {
                if !matches!(types[0], DataType::Timestamp(_, _)) {
                    types[0] = datetime_type();
                }
            }
            Kind::If => {
                let branch = self.branch_type(arg_types)?;
                types = vec![DataType::Boolean, branch.clone(), branch];
            }
            Kind::MultiIf => {
                let branch = self.branch_type(arg_types)?;
                let last = types.len() - 1;
                for (i, t) in types.iter_mut().enumerate() {
                    *t = if i % 2 == 0 && i != last {
                        DataType::Boolean
                    } else {
                        branch.clone()
                    };
                }
            }
            Kind::Empty { .. }
            | Kind::Strlen
            | Kind::LengthUtf8
            | Kind::Match
            | Kind::Like { .. }
            | Kind::ReplaceRegexp { .. }
            | Kind::ReplaceAll
            | Kind::Extract
            | Kind::ParseDateTime { .. } => {
                for t in types.iter_mut() {
                    *t = string_type(t);
                }
            }
            Kind::ToDate | Kind::ToDateTime | Kind::ToString | Kind::Convert { .. } => {}
        }
        Ok(types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Part(_) => DataType::Int32,
            Kind::StartOf(_, true) | Kind::ToDate => DataType::Date32,
            Kind::StartOf(_, false) => match &arg_types[0] {
                DataType::Timestamp(unit, tz) => DataType::Timestamp(*unit, tz.clone()),
                _ => datetime_type(),
            },
            Kind::ToDateTime | Kind::ParseDateTime { .. } => datetime_type(),
            Kind::ToString => DataType::Utf8,
            Kind::Convert { to, .. } => to.data_type(),
            Kind::If | Kind::MultiIf => self.branch_type(arg_types)?,
            Kind::Empty { .. } | Kind::Match | Kind::Like { .. } => DataType::Boolean,
            Kind::Strlen | Kind::LengthUtf8 => match &arg_types[0] {
                DataType::LargeUtf8 => DataType::Int64,
                _ => DataType::Int32,
            },
            Kind::ReplaceRegexp { .. } | Kind::ReplaceAll | Kind::Extract => {
                string_type(&arg_types[0])
            }
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // Reached only if the logical optimiser (which applies `simplify`) did not run.
        plan_err!(
            "{} is rewritten by the optimizer; run the query with the optimizer enabled",
            self.name
        )
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        let mut args = args.into_iter();
        let mut next = || match args.next() {
            Some(arg) => Ok(arg),
            None => plan_err!("{}: missing argument", self.name),
        };
        let expr = match self.kind {
            Kind::Part(part) => date_part(lit(part), next()?),
            Kind::StartOf(unit, to_date) => {
                let truncated = date_trunc(lit(unit), next()?);
                if to_date {
                    cast(truncated, DataType::Date32)
                } else {
                    truncated
                }
            }
            Kind::ToDate => cast(next()?, DataType::Date32),
            Kind::ToDateTime => cast(next()?, datetime_type()),
            Kind::ParseDateTime { or_null: false } => cast(next()?, datetime_type()),
            Kind::ParseDateTime { or_null: true } => try_cast(next()?, datetime_type()),
            Kind::ToString => {
                let x = next()?;
                let is_timestamp = matches!(
                    x.get_type(info.schema().as_ref()),
                    Ok(DataType::Timestamp(_, _))
                );
                if is_timestamp {
                    to_char(x, lit("%Y-%m-%d %H:%M:%S"))
                } else {
                    cast(x, DataType::Utf8)
                }
            }
            Kind::Convert { to, fallback } => {
                let x = next()?;
                match fallback {
                    Fallback::Error => cast(x, to.data_type()),
                    Fallback::Null => try_cast(x, to.data_type()),
                    Fallback::Zero => {
                        let zero = ScalarValue::new_zero(&to.data_type())?;
                        coalesce(vec![try_cast(x, to.data_type()), lit(zero)])
                    }
                }
            }
            Kind::If => {
                let condition = next()?;
                let then = next()?;
                let otherwise = next()?;
                when(condition, then).otherwise(otherwise)?
            }
            Kind::MultiIf => {
                let all: Vec<Expr> = std::iter::from_fn(|| next().ok()).collect();
                let Some((otherwise, pairs)) = all.split_last() else {
                    return plan_err!("multiIf: missing arguments");
                };
                let mut chunks = pairs.chunks_exact(2);
                let Some([c, v]) = chunks.next() else {
                    return plan_err!("multiIf: missing arguments");
                };
                let mut builder = when(c.clone(), v.clone());
                for pair in chunks {
                    if let [c, v] = pair {
                        builder = builder.when(c.clone(), v.clone());
                    }
                }
                builder.otherwise(otherwise.clone())?
            }
            Kind::Empty { negated } => {
                let x = next()?;
                if negated {
                    x.not_eq(lit(""))
                } else {
                    x.eq(lit(""))
                }
            }
            Kind::Strlen => octet_length(next()?),
            Kind::LengthUtf8 => character_length(next()?),
            Kind::Match => regexp_like(next()?, next()?, None),
            Kind::Like {
                negated,
                case_insensitive,
            } => Expr::Like(Like::new(
                negated,
                Box::new(next()?),
                Box::new(next()?),
                None,
                case_insensitive,
            )),
            Kind::ReplaceRegexp { all } => {
                let (s, pattern, replacement) = (next()?, next()?, next()?);
                let flags = if all { Some(lit("g")) } else { None };
                regexp_replace(s, pattern, replacement, flags)
            }
            Kind::ReplaceAll => replace(next()?, next()?, next()?),
            Kind::Extract => {
                let matched = regexp_match(next()?, next()?, None);
                coalesce(vec![array_element(matched, lit(1i64)), lit("")])
            }
        };
        Ok(ExprSimplifyResult::Simplified(expr))
    }
}

fn cast(expr: Expr, data_type: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(expr), data_type))
}

fn try_cast(expr: Expr, data_type: DataType) -> Expr {
    Expr::TryCast(TryCast::new(Box::new(expr), data_type))
}
