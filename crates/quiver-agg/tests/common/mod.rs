//! Helpers the quiver-agg test binaries share: plan and run a query, find a node in a plan.
// Helpers outside #[test] functions may fail loudly too: this is test code.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
use datafusion::prelude::SessionContext;

/// The physical plan of `sql` and what running it returned.
pub async fn plan_and_run(
    ctx: &SessionContext,
    sql: &str,
) -> (Arc<dyn ExecutionPlan>, Vec<RecordBatch>) {
    let plan = ctx
        .sql(sql)
        .await
        .expect("plan")
        .create_physical_plan()
        .await
        .expect("physical plan");
    let batches = collect(Arc::clone(&plan), ctx.task_ctx())
        .await
        .expect("run");
    (plan, batches)
}

/// What `sql` returns, as a table, and its physical plan, indented.
pub async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
    let (plan, batches) = plan_and_run(ctx, sql).await;
    let plan_text = displayable(plan.as_ref()).indent(true).to_string();
    let text = pretty_format_batches(&batches).expect("format").to_string();
    (text, plan_text)
}

/// The first node named `name` in `plan`, depth first.
pub fn find(plan: &Arc<dyn ExecutionPlan>, name: &str) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.name() == name {
        return Some(Arc::clone(plan));
    }
    plan.children()
        .into_iter()
        .find_map(|child| find(child, name))
}
