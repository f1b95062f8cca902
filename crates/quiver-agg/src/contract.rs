//! What a replacement operator owes the plan around it.
//!
//! quiver's aggregation rules run after DataFusion's `EnforceDistribution` and
//! `EnforceSorting`, which placed every repartition and sort by what each node declared. A node
//! swapped in afterwards must therefore declare what the node it replaces declared, wherever
//! some ancestor relies on it; nothing later re-checks the plan. Three things are relied on:
//!
//! * **partitioning**: a partitioned hash join, an aggregate reading hash-partitioned input or
//!   an `InterleaveExec` (UNION ALL under a GROUP BY) pairs up partition `i` of its children,
//!   directly or through nodes that keep the partitioning (projections, filters, joins that
//!   pass their probe side's partitioning on). [`Reliance::of_children`] follows that chain
//!   down; [`keep_contract`] restores the replaced node's hash partitioning over a replacement
//!   whose rows are split otherwise (a hash repartition of the aggregated groups), or refuses
//!   the swap;
//! * **ordering**: a window, a sort-preserving merge or an ordered aggregate above may read the
//!   replaced node's output ordering; a replacement that emits groups in another order is then
//!   refused;
//! * **equivalences and statistics**: `EnforceSorting` and the window operators check orderings
//!   modulo the equivalence classes and constants of each node (`a.k = b.k` after a join, a
//!   filtered `x = 3`); [`replacement_properties`] carries the replaced node's, and
//!   [`replaced_statistics`] its row and column estimates.
//!
//! A rule that broke one of these failed at run time with `HashJoinExec requires children
//! [0, 1] to be co-partitioned`, `Assertion failed: can_interleave(children.iter())` or `All
//! partition by columns should have an ordering` (issue 59).

use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Result, Statistics};
use datafusion::physical_expr::Distribution;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::union::InterleaveExec;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
};

/// What the ancestors of a node rely on in its output, beyond its schema and its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reliance {
    /// Some ancestor needs the rows split exactly as the node's output partitioning says.
    pub partitioning: bool,
    /// Some ancestor needs the node's output ordering.
    pub ordering: bool,
}

impl Reliance {
    /// Nothing is relied on (the root of a plan).
    pub const NONE: Reliance = Reliance {
        partitioning: false,
        ordering: false,
    };

    /// What `node`'s children are relied on for, given what `node` is relied on for, one entry
    /// per child.
    pub fn of_children(node: &dyn ExecutionPlan, own: Reliance) -> Vec<Reliance> {
        let children = node.children().len();
        let distributions = node.input_distribution_requirements().into_per_child();
        let orderings = node.required_input_ordering();
        let keeps_order = node.maintains_input_order();
        // A node declaring a hash partitioning it did not make itself passes on its input's.
        let passes_partitioning = own.partitioning
            && matches!(node.output_partitioning(), Partitioning::Hash(..))
            && !node.is::<RepartitionExec>();
        (0..children)
            .map(|i| {
                #[expect(deprecated)]
                let hash_required = matches!(
                    distributions.get(i),
                    Some(Distribution::HashPartitioned(_) | Distribution::KeyPartitioned(_))
                );
                Reliance {
                    partitioning: hash_required
                        || node.is::<InterleaveExec>()
                        || passes_partitioning,
                    ordering: orderings.get(i).is_some_and(Option::is_some)
                        || (own.ordering && keeps_order.get(i).copied().unwrap_or(false)),
                }
            })
            .collect()
    }
}

/// The properties of a node that replaces `replaced` and emits its rows in partitions of its
/// own making, at the end of its input: the replaced node's schema, equivalence classes,
/// constants and constraints (the rows are the same), its partition count, but no ordering and
/// no per-partition constants (the split and the order of the rows are the replacement's).
pub fn replacement_properties(replaced: &dyn ExecutionPlan) -> PlanProperties {
    let mut equivalences = replaced.equivalence_properties().clone();
    equivalences.clear_orderings();
    equivalences.clear_per_partition_constants();
    PlanProperties::new(
        equivalences,
        Partitioning::UnknownPartitioning(replaced.output_partitioning().partition_count().max(1)),
        EmissionType::Final,
        Boundedness::Bounded,
    )
}

/// The replaced node's statistics over all its partitions (unknown where they cannot be
/// computed), for a replacement to report as its own.
pub fn replaced_statistics(replaced: &dyn ExecutionPlan) -> Arc<Statistics> {
    StatisticsContext::new()
        .compute(replaced, &StatisticsArgs::new())
        .unwrap_or_else(|_| Arc::new(Statistics::new_unknown(&replaced.schema())))
}

/// `whole` (a replaced node's statistics over all partitions) for a request over all
/// partitions; unknown for one partition, whose rows are the replacement's to choose.
pub fn whole_or_unknown(whole: &Arc<Statistics>, args: &StatisticsArgs) -> Arc<Statistics> {
    match args.partition() {
        None => Arc::clone(whole),
        Some(_) => Arc::new(Statistics {
            num_rows: Precision::Absent,
            total_byte_size: Precision::Absent,
            column_statistics: vec![ColumnStatistics::new_unknown(); whole.column_statistics.len()],
        }),
    }
}

/// `replacement` in `replaced`'s place when it keeps what the ancestors rely on (`reliance`):
/// as it is, or under a repartition that restores `replaced`'s hash partitioning. `None` when it
/// cannot: the ancestors read an ordering the replacement does not keep, or a partitioning
/// other than a hash partitioning or a partition count.
pub fn keep_contract(
    replaced: &Arc<dyn ExecutionPlan>,
    replacement: Arc<dyn ExecutionPlan>,
    reliance: Reliance,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if reliance.ordering && replaced.output_ordering().is_some() {
        return Ok(None);
    }
    let wanted = replaced.output_partitioning();
    let made = replacement.output_partitioning();
    if wanted.partition_count() != made.partition_count() {
        return Ok(None);
    }
    if !reliance.partitioning || wanted == made {
        return Ok(Some(replacement));
    }
    match wanted {
        Partitioning::Hash(..) => Ok(Some(Arc::new(RepartitionExec::try_new(
            replacement,
            wanted.clone(),
        )?))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::{JoinType, NullEquality};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
    use datafusion::physical_plan::projection::ProjectionExec;

    fn source() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..10))],
        )
        .unwrap();
        MemorySourceConfig::try_new_exec(&[vec![batch.clone()], vec![batch]], schema, None).unwrap()
    }

    fn hashed(input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", 0));
        Arc::new(RepartitionExec::try_new(input, Partitioning::Hash(vec![key], 2)).unwrap())
    }

    fn join(left: Arc<dyn ExecutionPlan>, right: Arc<dyn ExecutionPlan>) -> HashJoinExec {
        let on = vec![(
            Arc::new(Column::new("k", 0)) as _,
            Arc::new(Column::new("k", 0)) as _,
        )];
        HashJoinExec::try_new(
            left,
            right,
            on,
            None,
            &JoinType::Inner,
            None,
            PartitionMode::Partitioned,
            NullEquality::NullEqualsNothing,
            false,
        )
        .unwrap()
    }

    #[test]
    fn a_partitioned_join_relies_on_both_sides_through_projections() {
        let left = hashed(source());
        let projected: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(
                vec![(Arc::new(Column::new("k", 0)) as _, "k".into())],
                hashed(source()),
            )
            .unwrap(),
        );
        let join = join(left, Arc::clone(&projected));
        let children = Reliance::of_children(&join, Reliance::NONE);
        assert!(children.iter().all(|r| r.partitioning));
        // The projection passes the reliance on to the repartition under it, which makes its
        // partitioning itself and passes none on.
        let below = Reliance::of_children(projected.as_ref(), children[1]);
        assert!(below[0].partitioning);
        let repartition = projected.children()[0];
        assert_eq!(
            Reliance::of_children(repartition.as_ref(), below[0]),
            vec![Reliance::NONE]
        );
        // A coalesce relies on nothing of its input.
        let coalesce = CoalescePartitionsExec::new(hashed(source()));
        assert_eq!(
            Reliance::of_children(&coalesce, Reliance::NONE),
            vec![Reliance::NONE]
        );
    }

    #[test]
    fn a_replacement_under_a_hash_reliance_is_repartitioned_like_the_replaced_node() {
        let replaced = hashed(source());
        let replacement: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source()));
        // Partition counts differ (1 against 2): refused.
        let relied = Reliance {
            partitioning: true,
            ordering: false,
        };
        assert!(keep_contract(&replaced, Arc::clone(&replacement), relied)
            .unwrap()
            .is_none());
        let replacement = source();
        let kept = keep_contract(&replaced, Arc::clone(&replacement), relied)
            .unwrap()
            .unwrap();
        assert_eq!(kept.output_partitioning(), replaced.output_partitioning());
        // Without the reliance the replacement stays as it is.
        let free = keep_contract(&replaced, Arc::clone(&replacement), Reliance::NONE)
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&free, &replacement));
    }
}
