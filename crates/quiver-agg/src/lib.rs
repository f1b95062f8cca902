//! # quiver-agg
//!
//! Small-key GROUP BY for quiver: when every key's values provably fall in a small range
//! (bool, 8/16-bit integers, `x % 10000`, `x & 255`, `extract(minute FROM t)`, ...), the
//! [`SmallKeyAggregateRule`] replaces DataFusion's hash aggregation with
//! [`SmallKeyAggregateExec`], which indexes an array of aggregate states by `key − min` —
//! no hashing — and merges the per-thread arrays in parallel by key range, as ClickHouse does
//! for 8- and 16-bit keys (its FixedHashMap, and the 25.11 parallel merge).
//!
//! ```sql
//! EXPLAIN SELECT number % 10000 AS k, count() FROM numbers_mt(1000000) GROUP BY k;
//! -- ... SmallKeyAggregateExec: gby=[number@0 % 10000 as k in [0, 9999]], aggr=[count()], slots=10001
//! ```
//!
//! Every DataFusion aggregate with a `GroupsAccumulator` works unchanged ([`exec`]); which
//! keys qualify is decided in [`bounds`]; when the rule applies is documented in [`rule`].
//!
//! [`FrozenKeysRule`] handles the other cheap GROUP BY: `GROUP BY … LIMIT n` with no ORDER BY
//! aggregates only the first `n` keys some thread sees ([`frozen_keys`]).
//!
//! [`RadixAggregateRule`] takes the remaining hash GROUP BYs: [`RadixAggregateExec`]
//! aggregates like DataFusion while the keys are few and splits them into hash buckets, each
//! aggregated in cache, once they are many ([`radix`]). Its tables take several integer keys
//! packed into one 64- or 128-bit word, hashed and compared as one number ([`packed`]), and
//! one string key in a table that prefetches its probes ([`strings`]).

pub mod bounds;
pub mod contract;
mod direct;
pub mod exec;
pub mod frozen_keys;
mod key_loop;
pub mod packed;
pub mod radix;
pub mod remainder;
pub mod rule;
mod shared_run;
pub mod strings;

pub use exec::SmallKeyAggregateExec;
pub use frozen_keys::{FrozenKeysExec, FrozenKeysRule};
pub use radix::RadixAggregateExec;
pub use rule::{RadixAggregateRule, SmallKeyAggregateRule, DEFAULT_MAX_SLOTS};

/// Asks for the cache line at `at`; any address may be given (a prefetch never faults).
#[inline(always)]
pub fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint; it reads nothing and faults on no address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
