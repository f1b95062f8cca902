//! quiver's own settings (`SET quiver.<name> = <value>`), and the switches that turn each of
//! quiver's planning layers off.
//!
//! ```sql
//! SET quiver.optimizations = false;                      -- plan exactly as stock DataFusion
//! SET quiver.optimizer.radix_aggregate = false;          -- or one layer at a time
//! SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'quiver.%';
//! ```
//!
//! With `quiver.optimizations` off, a query is planned by DataFusion's own analyzer, optimizer
//! and physical optimizer over the same catalogs, functions and scans: no quiver optimization
//! runs, no quiver operator is placed, no join is pushed into Postgres. It is the reference the
//! differential tests compare quiver's own plans against, and a way out for a user who meets a
//! wrong plan before we fix it. Scans, functions and name resolution are quiver's either way:
//! they are what is queried, not how. So are quiver's fixes of DataFusion's wrong answers,
//! which are semantics, not speed, and run behind no switch: NOT IN subqueries
//! (`not_in_subquery`), integer literals next to `UInt64` (`unsigned_literals`), float
//! literals compared with decimals (`decimal_literals`), filters pushed by a column name a
//! schema repeats (`pushdown_guard`), float statistics of Parquet files (`nan_safe_parquet`), Top-K aggregation over floats
//! (`float_topk`), naive timestamps compared with zoned constants (`zoned_casts`), ORDER BY
//! keys kept through broken functional dependencies (`sort_keys`), and the `sum`, `min` and
//! `max` functions that replace DataFusion's.
//!
//! Every quiver rule is registered wrapped in a [`Gated`] (physical) or [`GatedLogical`]
//! (logical) rule, which reads the session's [`QuiverOptions`] each time it runs, so a `SET`
//! takes effect on the next statement.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{config_namespace, extensions_options, Result};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

extensions_options! {
    /// quiver's settings, under the `quiver.` prefix.
    pub struct QuiverOptions {
        /// quiver's own planning layers (its optimizer rules and operators, joins pushed into
        /// Postgres, run-time filters sent to Postgres). `false` plans as stock DataFusion.
        pub optimizations: bool, default = true
        /// One switch per layer, effective while `optimizations` is on.
        pub optimizer: OptimizerSwitches, default = OptimizerSwitches::default()
    }
}

config_namespace! {
    /// One switch per quiver planning layer (`quiver.optimizer.<layer>`).
    pub struct OptimizerSwitches {
        /// Direct-indexed GROUP BY over keys with a small proven range (`SmallKeyAggregateExec`).
        pub small_key_aggregate: bool, default = true
        /// Hash GROUP BY that partitions many keys by hash (`RadixAggregateExec`).
        pub radix_aggregate: bool, default = true
        /// `GROUP BY … LIMIT n` without ORDER BY aggregating only n keys (`FrozenKeysExec`).
        pub frozen_group_keys: bool, default = true
        /// `ORDER BY … LIMIT n` over wide Parquet scans reading wide columns late.
        pub topk_threshold: bool, default = true
        /// Comparisons of string views with literals by their views.
        pub literal_compare: bool, default = true
        /// AND chains evaluated conjunct by conjunct on the rows still selected.
        pub conjunction_filter: bool, default = true
        /// Hash join sides chosen by estimated rows.
        pub row_count_join_sides: bool, default = true
        /// COUNT(DISTINCT) under GROUP BY as one table of (group, value) pairs.
        pub distinct_groups: bool, default = true
        /// SUM/AVG of integers and COUNT(*) without per-batch casts and literal columns.
        pub widen_aggregates: bool, default = true
        /// Joins of attached Postgres tables run in Postgres.
        pub postgres_join_pushdown: bool, default = true
        /// Build-side join keys sent to Postgres scans as run-time filters.
        pub postgres_runtime_filter: bool, default = true
    }
}

impl QuiverOptions {
    /// The session's quiver settings (the defaults where none were registered).
    pub fn of(config: &ConfigOptions) -> QuiverOptions {
        config
            .extensions
            .get::<QuiverOptions>()
            .cloned()
            .unwrap_or_default()
    }

    /// Whether the layer `switch` picks runs.
    pub fn enabled(&self, switch: fn(&OptimizerSwitches) -> bool) -> bool {
        self.optimizations && switch(&self.optimizer)
    }
}

impl datafusion::common::config::ConfigExtension for QuiverOptions {
    const PREFIX: &'static str = "quiver";
}

/// A physical optimizer rule that runs only while its switch is on.
#[derive(Debug)]
pub struct Gated {
    rule: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
    switch: fn(&OptimizerSwitches) -> bool,
}

impl Gated {
    /// `rule`, run while `switch` (and `quiver.optimizations`) is on.
    pub fn new(
        rule: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
        switch: fn(&OptimizerSwitches) -> bool,
    ) -> Arc<Gated> {
        Arc::new(Gated { rule, switch })
    }
}

impl PhysicalOptimizerRule for Gated {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if QuiverOptions::of(config).enabled(self.switch) {
            self.rule.optimize(plan, config)
        } else {
            Ok(plan)
        }
    }

    fn name(&self) -> &str {
        self.rule.name()
    }

    fn schema_check(&self) -> bool {
        self.rule.schema_check()
    }
}

/// A logical optimizer rule that runs only while its switch is on.
#[derive(Debug)]
pub struct GatedLogical {
    rule: Arc<dyn OptimizerRule + Send + Sync>,
    switch: fn(&OptimizerSwitches) -> bool,
}

impl GatedLogical {
    /// `rule`, run while `switch` (and `quiver.optimizations`) is on.
    pub fn new(
        rule: Arc<dyn OptimizerRule + Send + Sync>,
        switch: fn(&OptimizerSwitches) -> bool,
    ) -> Arc<GatedLogical> {
        Arc::new(GatedLogical { rule, switch })
    }
}

impl OptimizerRule for GatedLogical {
    fn name(&self) -> &str {
        self.rule.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.rule.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if QuiverOptions::of(&config.options()).enabled(self.switch) {
            self.rule.rewrite(plan, config)
        } else {
            Ok(Transformed::no(plan))
        }
    }
}
