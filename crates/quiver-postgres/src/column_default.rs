//! An INSERT into a Postgres table leaves the columns it does not name to Postgres.
//!
//! DataFusion plans `INSERT INTO pg.t (b) ...` by projecting every column the statement leaves
//! out to the table's
//! [`get_column_default`](datafusion::catalog::TableProvider::get_column_default) (NULL when
//! there is none) and hands the sink whole rows. A Postgres default is server-side
//! SQL — `nextval(...)` of a serial, an identity, `now()` — that quiver cannot evaluate, and a
//! NULL in its place would lose it. So a Postgres table answers with a marker,
//! `postgres_column_default(<typed NULL>)`; [`omit_defaulted_columns`] finds the markers in
//! the projection under the INSERT, puts plain NULLs in their place and names their columns,
//! which the sink leaves out of its `COPY t (columns) FROM STDIN`, so Postgres fills them as
//! its own INSERT would. A marker anywhere else that reaches execution is an error, never a
//! silent NULL.

use std::sync::{Arc, LazyLock};

use arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};

const NAME: &str = "postgres_column_default";

/// The marker for a column's server-side default.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ColumnDefault {
    signature: Signature,
}

impl ScalarUDFImpl for ColumnDefault {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DFResult<DataType> {
        match arg_types {
            [data_type] => Ok(data_type.clone()),
            _ => Err(DataFusionError::Internal(format!(
                "{NAME} takes one typed NULL"
            ))),
        }
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        Err(DataFusionError::NotImplemented(
            "a PostgreSQL column's DEFAULT can only fill a column an INSERT leaves out of its \
             column list; name the column and give its value instead"
                .to_string(),
        ))
    }
}

/// The marker standing for `field`'s default, for `get_column_default`. (A type without a typed
/// NULL gets an untyped one: DataFusion then casts the marker, which hides it from
/// [`omit_defaulted_columns`], so such an INSERT fails rather than writing NULLs.)
pub fn default_marker(field: &Field) -> Expr {
    static MARKER: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
        Arc::new(ScalarUDF::new_from_impl(ColumnDefault {
            // Volatile: never evaluated at planning, never folded into a constant.
            signature: Signature::any(1, Volatility::Volatile),
        }))
    });
    let null = ScalarValue::try_from(field.data_type()).unwrap_or(ScalarValue::Null);
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::clone(&MARKER),
        vec![Expr::Literal(null, None)],
    ))
}

/// `input` (an INSERT's rows, named as the table's `columns`) with its default markers replaced
/// by NULLs, and the positions of the columns they filled, which the INSERT must leave to
/// Postgres. Looks through operators that pass rows on unchanged (a coalesce, a repartition)
/// down to the INSERT's projection; finding none, returns `input` as it is (a marker left in
/// it fails at execution).
pub fn omit_defaulted_columns(
    input: Arc<dyn ExecutionPlan>,
    columns: &[String],
) -> DFResult<(Arc<dyn ExecutionPlan>, Vec<usize>)> {
    let names_match = |plan: &dyn ExecutionPlan| {
        let schema = plan.schema();
        schema.fields().len() == columns.len()
            && schema
                .fields()
                .iter()
                .zip(columns)
                .all(|(f, c)| f.name() == c)
    };
    if !names_match(input.as_ref()) {
        return Ok((input, Vec::new()));
    }
    if let Some(projection) = input.downcast_ref::<ProjectionExec>() {
        let mut omitted = Vec::new();
        let exprs = projection
            .expr()
            .iter()
            .enumerate()
            .map(|(index, projected)| {
                // The marker's one argument is the column's typed NULL, which takes its place.
                let null = match projected.expr.downcast_ref::<ScalarFunctionExpr>() {
                    Some(function) if function.name() == NAME => match function.args() {
                        [null] => Arc::clone(null),
                        _ => return projected.clone(),
                    },
                    _ => return projected.clone(),
                };
                omitted.push(index);
                ProjectionExpr {
                    expr: null,
                    alias: projected.alias.clone(),
                }
            })
            .collect::<Vec<_>>();
        if omitted.is_empty() {
            return Ok((input, omitted));
        }
        let rebuilt = ProjectionExec::try_new(exprs, Arc::clone(projection.input()))?;
        return Ok((Arc::new(rebuilt), omitted));
    }
    match input.children().as_slice() {
        [child] if names_match(child.as_ref()) => {
            let (child, omitted) = omit_defaulted_columns(Arc::clone(child), columns)?;
            if omitted.is_empty() {
                return Ok((input, omitted));
            }
            Ok((replace_children_if_necessary(input, vec![child])?, omitted))
        }
        _ => Ok((input, Vec::new())),
    }
}
