//! ClickHouse aggregates that are other spellings of DataFusion aggregates.
//!
//! | ClickHouse | becomes |
//! |---|---|
//! | `uniqExact(x)` | `count(DISTINCT x)` |
//! | `any(x)` | `any_value(x)` (first non-NULL value met) |
//! | `anyLast(x)` | `last_value(x) IGNORE NULLS` |
//! | `argMin(a, b)` / `argMax(a, b)` | `first_value(a ORDER BY b ASC/DESC) FILTER (WHERE b IS NOT NULL)` |
//! | `groupArray(x)` | `array_agg(x) FILTER (WHERE x IS NOT NULL)` |
//! | `sumIf(x, c)`, `avgIf(x, c)`, `countIf(c)` | `sum(x)`, `avg(x)`, `count(*)` `FILTER (WHERE c)` |
//! | `quantile(x, q)` / `quantileExact(x, q)` | `percentile_cont(x, q)` (exact, interpolated) |
//!
//! Each is an [`AggregateUDFImpl`] whose [`simplify`](AggregateUDFImpl::simplify) hook
//! rewrites the call during logical optimisation, so the work runs in DataFusion's own
//! (grouped, vectorised) accumulators; the return type is the target's, computed from the
//! target's own type coercion so the rewrite never changes the schema. The ClickHouse name is
//! what appears in column headers.
//!
//! Differences from ClickHouse, by design of the rewrite: `sumIf`/`avgIf` over no matching row
//! return NULL (ClickHouse: 0 / nan); `groupArray` of no rows is NULL (ClickHouse: `[]`);
//! `quantile` is exact (ClickHouse samples 8192 values, so it agrees up to that many rows).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{plan_err, Result};
use datafusion::functions_aggregate::{
    any_value::any_value_udaf, array_agg::array_agg_udaf, average::avg_udaf, count::count_udaf,
    first_last::first_value_udaf, first_last::last_value_udaf,
    percentile_cont::percentile_cont_udaf,
};
use datafusion::logical_expr::expr::{AggregateFunction, NullTreatment};
use datafusion::logical_expr::function::{AccumulatorArgs, AggregateFunctionSimplification};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    lit, Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Signature, SortExpr, Volatility,
};

/// Which rewrite a [`ClickHouseAggregate`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    UniqExact,
    Any,
    AnyLast,
    ArgMin,
    ArgMax,
    GroupArray,
    SumIf,
    AvgIf,
    CountIf,
    Quantile,
}

impl Kind {
    fn target(self) -> Arc<AggregateUDF> {
        match self {
            Kind::UniqExact | Kind::CountIf => count_udaf(),
            Kind::Any => any_value_udaf(),
            Kind::AnyLast => last_value_udaf(),
            Kind::ArgMin | Kind::ArgMax => first_value_udaf(),
            Kind::GroupArray => array_agg_udaf(),
            Kind::SumIf => crate::checked_sum::checked_sum_udaf(),
            Kind::AvgIf => avg_udaf(),
            Kind::Quantile => percentile_cont_udaf(),
        }
    }

    /// How many arguments the ClickHouse spelling takes (min, max).
    fn arity(self) -> (usize, usize) {
        match self {
            Kind::UniqExact | Kind::Any | Kind::AnyLast | Kind::GroupArray | Kind::CountIf => {
                (1, 1)
            }
            Kind::ArgMin | Kind::ArgMax | Kind::SumIf | Kind::AvgIf => (2, 2),
            Kind::Quantile => (1, 2),
        }
    }
}

/// A ClickHouse aggregate rewritten to a DataFusion one (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ClickHouseAggregate {
    name: &'static str,
    aliases: Vec<String>,
    kind: Kind,
    signature: Signature,
}

impl ClickHouseAggregate {
    fn new(name: &'static str, extra_aliases: &[&str], kind: Kind) -> Self {
        let mut aliases: Vec<String> = extra_aliases.iter().map(|a| a.to_string()).collect();
        let lower = name.to_lowercase();
        if lower != name {
            aliases.push(lower);
        }
        ClickHouseAggregate {
            name,
            aliases,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// Every aggregate of this module.
    pub fn all() -> Vec<ClickHouseAggregate> {
        vec![
            ClickHouseAggregate::new("uniqExact", &[], Kind::UniqExact),
            ClickHouseAggregate::new("any", &[], Kind::Any),
            ClickHouseAggregate::new("anyLast", &[], Kind::AnyLast),
            ClickHouseAggregate::new("argMin", &[], Kind::ArgMin),
            ClickHouseAggregate::new("argMax", &[], Kind::ArgMax),
            ClickHouseAggregate::new("groupArray", &[], Kind::GroupArray),
            ClickHouseAggregate::new("sumIf", &[], Kind::SumIf),
            ClickHouseAggregate::new("avgIf", &[], Kind::AvgIf),
            ClickHouseAggregate::new("countIf", &[], Kind::CountIf),
            ClickHouseAggregate::new(
                "quantile",
                &["quantileexact", "quantileExact"],
                Kind::Quantile,
            ),
        ]
    }

    /// The argument types the target aggregate receives, coerced as the target wants them.
    fn target_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let target = self.kind.target();
        let passed: Vec<DataType> = match self.kind {
            Kind::UniqExact
            | Kind::Any
            | Kind::AnyLast
            | Kind::GroupArray
            | Kind::ArgMin
            | Kind::ArgMax
            | Kind::SumIf
            | Kind::AvgIf
            | Kind::CountIf => arg_types.iter().take(1).cloned().collect(),
            Kind::Quantile => {
                let mut types: Vec<DataType> = arg_types.iter().take(1).cloned().collect();
                types.push(DataType::Float64);
                types
            }
        };
        if self.kind == Kind::CountIf {
            return Ok(passed);
        }
        let fields: Vec<FieldRef> = passed
            .iter()
            .map(|t| Arc::new(Field::new("x", t.clone(), true)))
            .collect();
        let coerced = fields_with_udf(&fields, target.as_ref())?;
        Ok(coerced.iter().map(|f| f.data_type().clone()).collect())
    }
}

impl AggregateUDFImpl for ClickHouseAggregate {
    fn name(&self) -> &str {
        self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let (min, max) = self.kind.arity();
        if arg_types.len() < min || arg_types.len() > max {
            let expected = if min == max {
                format!("{min}")
            } else {
                format!("{min} or {max}")
            };
            return plan_err!(
                "{} expects {expected} argument(s), got {}",
                self.name,
                arg_types.len()
            );
        }
        let target = self.target_types(arg_types)?;
        let mut coerced = arg_types.to_vec();
        match self.kind {
            Kind::CountIf => coerced[0] = DataType::Boolean,
            Kind::SumIf | Kind::AvgIf => {
                coerced[0] = target[0].clone();
                coerced[1] = DataType::Boolean;
            }
            Kind::Quantile => {
                coerced[0] = target[0].clone();
                if coerced.len() > 1 {
                    coerced[1] = DataType::Float64;
                }
            }
            _ => {
                if let Some(first) = target.first() {
                    coerced[0] = first.clone();
                }
            }
        }
        Ok(coerced)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let target_types = self.target_types(arg_types)?;
        if self.kind == Kind::CountIf {
            return Ok(DataType::Int64);
        }
        let fields: Vec<FieldRef> = target_types
            .into_iter()
            .map(|t| Arc::new(Field::new("x", t, true)))
            .collect();
        Ok(self
            .kind
            .target()
            .return_field(&fields)?
            .data_type()
            .clone())
    }

    fn is_nullable(&self) -> bool {
        !matches!(self.kind, Kind::UniqExact | Kind::CountIf)
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        // Reached only if the logical optimiser (which applies `simplify`) did not run.
        plan_err!(
            "{} is rewritten by the optimizer; run the query with the optimizer enabled",
            self.name
        )
    }

    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        let kind = self.kind;
        let name = self.name;
        Some(Box::new(move |call: AggregateFunction, _info| {
            let params = call.params;
            let mut args = params.args;
            let mut filter = params.filter.map(|f| *f);
            let mut order_by = params.order_by;
            let mut null_treatment = params.null_treatment;
            let mut distinct = params.distinct;
            let mut and_filter = |condition: Expr| {
                filter = Some(match filter.take() {
                    Some(existing) => existing.and(condition),
                    None => condition,
                });
            };
            let new_args = match kind {
                Kind::UniqExact => {
                    distinct = true;
                    args
                }
                Kind::Any | Kind::GroupArray => {
                    if kind == Kind::GroupArray {
                        if let Some(x) = args.first() {
                            and_filter(x.clone().is_not_null());
                        }
                    }
                    args
                }
                Kind::AnyLast => {
                    null_treatment = Some(NullTreatment::IgnoreNulls);
                    args
                }
                Kind::ArgMin | Kind::ArgMax => {
                    let Some(by) = args.pop() else {
                        return plan_err!("{name} expects 2 arguments");
                    };
                    and_filter(by.clone().is_not_null());
                    order_by = vec![SortExpr::new(by, kind == Kind::ArgMin, false)];
                    args
                }
                Kind::SumIf | Kind::AvgIf => {
                    let Some(condition) = args.pop() else {
                        return plan_err!("{name} expects 2 arguments");
                    };
                    and_filter(condition);
                    args
                }
                Kind::CountIf => {
                    let Some(condition) = args.pop() else {
                        return plan_err!("{name} expects 1 argument");
                    };
                    and_filter(condition);
                    vec![lit(1i64)]
                }
                Kind::Quantile => {
                    let Some(x) = args.first().cloned() else {
                        return plan_err!("{name} expects a value to take the quantile of");
                    };
                    let q = args.get(1).cloned().unwrap_or_else(|| lit(0.5f64));
                    order_by = vec![SortExpr::new(x.clone(), true, false)];
                    vec![x, q]
                }
            };
            Ok(Expr::AggregateFunction(AggregateFunction::new_udf(
                kind.target(),
                new_args,
                distinct,
                filter.map(Box::new),
                order_by,
                null_treatment,
            )))
        }))
    }
}
