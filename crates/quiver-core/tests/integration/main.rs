//! quiver-core's integration tests, as one binary: every test binary links all of DataFusion,
//! which costs about a minute and a half of CI time apiece.
// Helpers outside `#[test]` functions (and the shared harnesses) fail loudly, as tests do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../quiver-postgres/tests/common/mod.rs"]
mod common;
mod support;

mod contracts;
mod distinct_groups;
mod group_by_limit;
mod postgres_attach;
mod topk_threshold;
mod widen_aggregates;
