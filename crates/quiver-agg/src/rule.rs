//! [`SmallKeyAggregateRule`]: the physical optimizer rule that swaps DataFusion's hash
//! aggregation for [`SmallKeyAggregateExec`] when the GROUP BY domain is small and dense.
//!
//! It matches `AggregateExec(Final | FinalPartitioned)` over (repartition / coalesce) over
//! `AggregateExec(Partial)`, and `AggregateExec(Single | SinglePartitioned)`, and replaces the
//! pair with one node reading the partial aggregate's input. It applies only when
//! * there is one grouping set (no ROLLUP/CUBE/GROUPING SETS) and no group-by LIMIT;
//! * every aggregate has a `GroupsAccumulator`, no `ORDER BY` inside it and no `DISTINCT`;
//! * every key's range is proven ([`crate::bounds`]) and the product of the ranges' widths is at
//!   most [`SmallKeyAggregateRule::max_slots`] (default [`DEFAULT_MAX_SLOTS`]);
//! * the replacement can keep what the ancestors rely on ([`crate::contract`]): its groups are
//!   split by key range, not by hash, so where a partitioned join or an `InterleaveExec` above
//!   relies on the replaced node's hash partitioning, the groups are hash-repartitioned as the
//!   replaced node's were; where an ancestor reads the replaced node's output ordering, the
//!   plan is left as it is.
//!
//! Otherwise the plan is left exactly as DataFusion made it.
//!
//! A `SortExec` with a fetch (`ORDER BY k LIMIT n`) directly over the new node, ordering by a
//! prefix of its keys in slot order, pushes its limit into it ([`crate::exec::TopSlots`]): only
//! the first `n` groups are aggregated in full, the rest of the rows are skipped.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{
    replace_children_if_necessary, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};

use crate::bounds::{integer_modulo, key_range};
use crate::contract::{keep_contract, Reliance};
use crate::exec::{GroupKey, SmallKeyAggregateExec, TopSlots};
use crate::frozen_keys::FrozenKeysExec;
use crate::radix::RadixAggregateExec;

/// The default largest domain, in slots (a `UInt16` key fits exactly).
pub const DEFAULT_MAX_SLOTS: u64 = 65_536;

/// Replaces hash aggregation with [`SmallKeyAggregateExec`] where the keys allow it.
#[derive(Debug, Clone)]
pub struct SmallKeyAggregateRule {
    max_slots: u64,
}

impl Default for SmallKeyAggregateRule {
    fn default() -> Self {
        SmallKeyAggregateRule {
            max_slots: DEFAULT_MAX_SLOTS,
        }
    }
}

impl SmallKeyAggregateRule {
    /// The rule with the default domain limit.
    pub fn new() -> Self {
        SmallKeyAggregateRule::default()
    }

    /// The rule with a different domain limit (number of non-NULL key combinations).
    pub fn with_max_slots(max_slots: u64) -> Self {
        SmallKeyAggregateRule { max_slots }
    }

    /// The largest domain the rule accepts.
    pub fn max_slots(&self) -> u64 {
        self.max_slots
    }

    fn rewrite(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        reliance: Reliance,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(replacement) = self.try_replace(&plan, reliance)? {
            return Ok(replacement);
        }
        let plan = rewrite_children(plan, reliance, |child, reliance| {
            self.rewrite(child, reliance)
        })?;
        Ok(push_top_into_small_key(&plan)?.unwrap_or(plan))
    }

    fn try_replace(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        reliance: Reliance,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some((_, partial, input)) = replaceable_pair(plan) else {
            return Ok(None);
        };
        let group_by = partial.group_expr();
        let aggregates = partial.aggr_expr();
        let input_schema = input.schema();
        let mut keys = Vec::with_capacity(group_by.expr().len());
        let mut domain: u64 = 1;
        for (expr, name) in group_by.expr() {
            let Some(range) = key_range(expr, &input_schema) else {
                return Ok(None);
            };
            domain = match domain.checked_mul(range.width()) {
                Some(d) if d <= self.max_slots => d,
                _ => return Ok(None),
            };
            keys.push(GroupKey {
                expr: Arc::clone(expr),
                name: name.clone(),
                range,
                modulo: integer_modulo(expr, &input_schema),
            });
        }
        let input = self.rewrite(input, Reliance::NONE)?;
        let exec = SmallKeyAggregateExec::try_new(
            input,
            keys,
            aggregates.to_vec(),
            partial.filter_expr().to_vec(),
            plan.as_ref(),
        )?;
        keep_contract(plan, Arc::new(exec), reliance)
    }
}

/// The aggregation `plan` computes, when quiver's operators can take it over: `plan` is
/// `AggregateExec(Final | FinalPartitioned)` over (repartition / coalesce) over
/// `AggregateExec(Partial)`, or `AggregateExec(Single | SinglePartitioned)` (over a hash
/// repartition, looked through); it has one non-empty grouping set and no group-by LIMIT, and
/// every aggregate has a `GroupsAccumulator`, no `ORDER BY` and no `DISTINCT`. Returns the top
/// aggregate, the one holding the aggregates (the partial, or the single one itself), and the
/// input the replacement reads.
pub(crate) fn replaceable_pair(
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<(AggregateExec, AggregateExec, Arc<dyn ExecutionPlan>)> {
    let top = plan.downcast_ref::<AggregateExec>()?;
    let (partial, input) = match top.mode() {
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            let mut node = Arc::clone(top.input());
            loop {
                let passthrough = node.is::<RepartitionExec>()
                    || matches!(
                        node.name(),
                        "CoalescePartitionsExec" | "CoalesceBatchesExec"
                    );
                if !passthrough {
                    break;
                }
                node = Arc::clone(node.children().first()?);
            }
            let partial = node.downcast_ref::<AggregateExec>()?;
            if *partial.mode() != AggregateMode::Partial {
                return None;
            }
            (partial.clone(), Arc::clone(partial.input()))
        }
        AggregateMode::Single | AggregateMode::SinglePartitioned => {
            let mut input = Arc::clone(top.input());
            if let Some(repartition) = input.downcast_ref::<RepartitionExec>() {
                if matches!(repartition.partitioning(), Partitioning::Hash(..)) {
                    input = Arc::clone(repartition.input());
                }
            }
            (top.clone(), input)
        }
        _ => return None,
    };
    let group_by = partial.group_expr();
    if !group_by.is_single() || group_by.expr().is_empty() || partial.limit_options().is_some() {
        return None;
    }
    let supported = partial
        .aggr_expr()
        .iter()
        .all(|a| a.groups_accumulator_supported() && a.order_bys().is_empty() && !a.is_distinct());
    supported.then(|| (top.clone(), partial, input))
}

/// `plan` with every child passed through `rewrite(child, reliance)`, with what the ancestors
/// rely on in that child given what they rely on in `plan` (`reliance`).
fn rewrite_children(
    plan: Arc<dyn ExecutionPlan>,
    reliance: Reliance,
    rewrite: impl Fn(Arc<dyn ExecutionPlan>, Reliance) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    if children.is_empty() {
        return Ok(plan);
    }
    let reliances = Reliance::of_children(plan.as_ref(), reliance);
    let rewritten = children
        .into_iter()
        .zip(reliances)
        .map(|(child, reliance)| rewrite(child, reliance))
        .collect::<Result<Vec<_>>>()?;
    replace_children_if_necessary(plan, rewritten)
}

/// `SortExec(fetch = n)` ordering by a prefix of the keys, all `ASC NULLS LAST` or all
/// `DESC NULLS FIRST`, directly over [`SmallKeyAggregateExec`]: the same sort over the operator
/// with the limit pushed into it ([`TopSlots`]). The sort stays, because the operator may
/// return a few more groups than `n`, unordered.
fn push_top_into_small_key(
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(sort) = plan.downcast_ref::<SortExec>() else {
        return Ok(None);
    };
    let Some(fetch) = sort.fetch().filter(|&n| n > 0) else {
        return Ok(None);
    };
    let Some(exec) = sort.input().downcast_ref::<SmallKeyAggregateExec>() else {
        return Ok(None);
    };
    if exec.top().is_some() {
        return Ok(None);
    }
    let mut direction = None;
    for (position, sort_expr) in sort.expr().iter().enumerate() {
        let is_key = position < exec.key_count()
            && sort_expr
                .expr
                .downcast_ref::<Column>()
                .is_some_and(|c| c.index() == position);
        let descending = match (sort_expr.options.descending, sort_expr.options.nulls_first) {
            (false, false) => false,
            (true, true) => true,
            _ => return Ok(None),
        };
        if !is_key || direction.is_some_and(|d| d != descending) {
            return Ok(None);
        }
        direction = Some(descending);
    }
    let Some(descending) = direction else {
        return Ok(None);
    };
    let input: Arc<dyn ExecutionPlan> = Arc::new(exec.with_top(TopSlots { fetch, descending })?);
    Ok(Some(replace_children_if_necessary(
        Arc::clone(plan),
        vec![input],
    )?))
}

impl PhysicalOptimizerRule for SmallKeyAggregateRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.rewrite(plan, Reliance::NONE)
    }

    fn name(&self) -> &str {
        "small_key_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Replaces the hash aggregations [`SmallKeyAggregateRule`] left with [`RadixAggregateExec`],
/// which aggregates like DataFusion while the keys are few and partitions them by hash once
/// they are many (see [`crate::radix`]). It takes the same aggregation shapes
/// ([`replaceable_pair`]), with a bounded input and keys DataFusion can hash and group, where
/// it can keep what the ancestors rely on ([`crate::contract`]); not the gated aggregation of
/// [`FrozenKeysRule`](crate::FrozenKeysRule), which keeps few groups by construction.
/// Register it after that rule and [`SmallKeyAggregateRule`].
#[derive(Debug, Clone, Default)]
pub struct RadixAggregateRule;

impl RadixAggregateRule {
    fn rewrite(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        reliance: Reliance,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(replacement) = self.try_replace(&plan, reliance)? {
            return Ok(replacement);
        }
        rewrite_children(plan, reliance, |child, reliance| {
            self.rewrite(child, reliance)
        })
    }

    fn try_replace(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        reliance: Reliance,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some((_, partial, input)) = replaceable_pair(plan) else {
            return Ok(None);
        };
        if input.boundedness().is_unbounded() || input.is::<FrozenKeysExec>() {
            return Ok(None);
        }
        let keys = partial
            .group_expr()
            .expr()
            .iter()
            .map(|(e, name)| (Arc::clone(e), name.clone()))
            .collect();
        let input = self.rewrite(input, Reliance::NONE)?;
        // A key type the bucket hash or DataFusion's group tables refuse: leave the plan.
        let Ok(exec) = RadixAggregateExec::try_new(
            input,
            keys,
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            plan.as_ref(),
        ) else {
            return Ok(None);
        };
        keep_contract(plan, Arc::new(exec), reliance)
    }
}

impl PhysicalOptimizerRule for RadixAggregateRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.rewrite(plan, Reliance::NONE)
    }

    fn name(&self) -> &str {
        "radix_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
