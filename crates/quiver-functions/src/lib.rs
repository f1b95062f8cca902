//! # quiver-functions
//!
//! The ClickHouse functions chDB users reach for, registered on every quiver session by
//! [`register`]:
//!
//! * table functions `numbers(N)`, `numbers(start, N)`, `numbers_mt(N)`, `zeros(N)`,
//!   `zeros_mt(N)` ([`numbers`]);
//! * `uniq` / `uniqCombined` — a grouped HyperLogLog that allocates nothing per row ([`uniq`]);
//! * aggregates that are ClickHouse spellings of DataFusion ones (`uniqExact`, `any`,
//!   `anyLast`, `argMin`, `argMax`, `groupArray`, `sumIf`, `countIf`, `avgIf`, `quantile`)
//!   ([`aggregates`]);
//! * scalar functions: dates (`toYear`, `toStartOfHour`, ...), conversions (`toString`,
//!   `toInt64`, ...), conditionals (`if`, `multiIf`), strings and URLs (`empty`, `match`,
//!   `replaceRegexpAll`, `domain`, ...) ([`scalars`], [`url`]);
//! * `cityHash64` with ClickHouse's exact outputs ([`cityhash`]);
//! * `min` and `max` in place of DataFusion's, whose grouped float accumulators order NaN and
//!   ±inf as the rest of the engine does ([`float_min_max`]); `sum` in place of DataFusion's,
//!   whose decimal sums overflowed silently ([`checked_sum`]); `to_timestamp*` whose results
//!   carry the zone they declare ([`to_timestamp`]).
//!
//! Not registered, but used by quiver-core's optimizer: [`distinct_count`], the grouped
//! accumulator that replaces `count(DISTINCT x)` of an integer under a GROUP BY, and
//! [`widening`], SUM and AVG of integers that read the column without widening it first and a
//! `count(*)` that needs no column of ones.
//!
//! ClickHouse users write camelCase (`toYear`); DataFusion lowercases unquoted function names,
//! so every function is registered under its ClickHouse spelling (shown in column names) with
//! the lowercase spelling as an alias.

pub mod aggregates;
pub mod checked_sum;
pub mod cityhash;
pub mod distinct_count;
pub mod float_min_max;
mod group_zero;
pub mod numbers;
pub mod scalars;
pub mod to_timestamp;
pub mod uniq;
pub mod url;
pub mod widening;

use std::sync::Arc;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::prelude::SessionContext;

/// Registers every function of this crate on `ctx`.
pub fn register(ctx: &SessionContext) {
    for function in numbers::NumbersFunction::all() {
        ctx.register_udtf(function.name(), Arc::new(function));
    }
    ctx.register_udaf(AggregateUDF::from(uniq::Uniq::default()));
    for function in aggregates::ClickHouseAggregate::all() {
        ctx.register_udaf(AggregateUDF::from(function));
    }
    for function in scalars::ClickHouseScalar::all() {
        ctx.register_udf(ScalarUDF::from(function));
    }
    ctx.register_udf(ScalarUDF::from(cityhash::CityHash64::default()));
    // DataFusion's own, replaced where they answer wrongly (inherited bugs of DataFusion 55).
    ctx.register_udaf(AggregateUDF::from(checked_sum::CheckedSum::new()));
    for function in to_timestamp::ZonedToTimestamp::all(ctx.copied_config().options()) {
        ctx.register_udf(ScalarUDF::from(function));
    }
    ctx.register_udaf(AggregateUDF::from(float_min_max::TotalOrderMinMax::min()));
    ctx.register_udaf(AggregateUDF::from(float_min_max::TotalOrderMinMax::max()));
    for function in url::Domain::all() {
        ctx.register_udf(ScalarUDF::from(function));
    }
}
