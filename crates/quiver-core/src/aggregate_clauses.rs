//! Refuses the clauses only an aggregate function has — `FILTER (WHERE …)`, `DISTINCT`,
//! `ORDER BY` among the arguments, `WITHIN GROUP` — on a function that is not one.
//!
//! DataFusion plans `round(avg(x), 2) FILTER (WHERE y > 0)` as `round(avg(x), 2)`: the scalar
//! function takes its arguments and the clause is dropped, so the query answers a question
//! nobody asked. DuckDB refuses such a query; so does quiver, naming the function and the
//! clause, before DataFusion sees it.

use std::ops::ControlFlow;

use datafusion::execution::SessionState;
use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    DuplicateTreatment, Expr, Function, FunctionArgumentClause, FunctionArguments, ObjectNamePart,
    Visit, Visitor,
};

use crate::error::{QuiverError, Result};

/// An error naming the first function in `statement` that carries an aggregate-only clause
/// but is a known scalar or window function and no aggregate. Unknown names are left to the
/// planner, which reports them as such.
pub(crate) fn refuse_aggregate_clauses(
    state: &SessionState,
    statement: &DFStatement,
) -> Result<()> {
    let mut finder = Finder { state };
    let found = match statement {
        DFStatement::Statement(statement) => statement.visit(&mut finder),
        DFStatement::Explain(explain) => {
            return refuse_aggregate_clauses(state, &explain.statement)
        }
        DFStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => query.visit(&mut finder),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        DFStatement::CreateExternalTable(_) | DFStatement::Reset(_) => ControlFlow::Continue(()),
    };
    match found {
        ControlFlow::Break(message) => Err(QuiverError::InvalidInput(message)),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Finder<'a> {
    state: &'a SessionState,
}

impl Visitor for Finder<'_> {
    type Break = String;

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        let Expr::Function(function) = expr else {
            return ControlFlow::Continue(());
        };
        let Some(clause) = aggregate_clause(function) else {
            return ControlFlow::Continue(());
        };
        let Some(ObjectNamePart::Identifier(name)) = function.name.0.last() else {
            return ControlFlow::Continue(());
        };
        let spellings = [name.value.clone(), name.value.to_lowercase()];
        let aggregate = spellings
            .iter()
            .any(|name| self.state.aggregate_functions().contains_key(name));
        let other = spellings.iter().any(|name| {
            self.state.scalar_functions().contains_key(name)
                || self.state.window_functions().contains_key(name)
        });
        if other && !aggregate {
            return ControlFlow::Break(format!(
                "{clause} can only be used with an aggregate function, and {} is not one \
                 (to filter an aggregate inside it, write the clause after the aggregate: \
                 round(avg(x) FILTER (WHERE ...), 2))",
                function.name
            ));
        }
        ControlFlow::Continue(())
    }
}

/// The first aggregate-only clause `function` carries, as the user would write it.
fn aggregate_clause(function: &Function) -> Option<&'static str> {
    if function.filter.is_some() {
        return Some("FILTER (WHERE ...)");
    }
    if !function.within_group.is_empty() {
        return Some("WITHIN GROUP (ORDER BY ...)");
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    if list.duplicate_treatment == Some(DuplicateTreatment::Distinct) {
        return Some("DISTINCT");
    }
    list.clauses
        .iter()
        .any(|clause| matches!(clause, FunctionArgumentClause::OrderBy(_)))
        .then_some("ORDER BY inside the arguments")
}
