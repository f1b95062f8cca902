//! Join filters known only at run time, pushed into the COPY.
//!
//! When DataFusion's hash join has built its hash table it publishes what the probe side can
//! match — the key range and, for a small build side, the key list — as a dynamic filter on
//! the probe side's scan (`DynamicFilterPhysicalExpr`). A Postgres scan that starts after that
//! adds the filter to its `WHERE`, so the server sends the few rows that can join instead of
//! the whole table: in TPC-H Q17 lineitem is read for 2 thousand parts rather than all 200
//! thousand. (DuckDB's scanner applies such filters only after the rows have crossed the
//! network.)
//!
//! The translation may be looser than the filter, never tighter: a conjunct that cannot be
//! spelled in Postgres SQL (a hash-table lookup, a text range) is dropped, an OR or a CASE
//! is kept only when every branch translates, and the join still applies its own condition.

use std::sync::Arc;

use datafusion::arrow::array;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, DynamicFilterPhysicalExpr, InListExpr, IsNullExpr,
    Literal,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;

use crate::scan::PostgresScanExec;
use crate::sql::{column_sql, is_numeric, pushable, scalar_literal};
use crate::types::{PgColumn, PgType};

/// Above this many values an `IN (...)` list is not sent: Postgres spends a parse node, a
/// coercion and a constant on each value, more than the rows it saves.
const MAX_IN_LIST: usize = 16_384;

/// Above this many values an integer key array is not sent. Postgres parses an array literal
/// in one pass and hashes it once per statement; a large list goes once per partition
/// (see `scan::partition_tasks`).
const MAX_KEY_ARRAY: usize = 262_144;

/// The session settings for running `plan` when it reads Postgres, else `None`: DataFusion's
/// hash join publishes its build-side keys as an IN list only up to 150 distinct keys and
/// 128 KiB of key columns (above, a hash-table lookup, which cannot be sent to a server).
/// These limits let it list up to [`MAX_KEY_ARRAY`] keys in 1 MiB of key columns, per build
/// partition: TPC-H Q5 sends `lineitem` the 227,000 order keys of a year (two partitions of
/// 114,000) and receives 0.9M rows instead of 6M. DataFusion measures the columns with their
/// buffers' slack, so one collected build side of 227,000 four-byte keys is over the 1 MiB
/// while 170,000 are under it. The limits are raised per query, not per session, because
/// DataFusion spends an expression per listed key (a 160,000 pair list cost Q9 0.4 s), which
/// a plan over local data does not get back; the 1 MiB keeps out wide multi-column build
/// sides like that one.
pub fn key_list_config(
    plan: &Arc<dyn ExecutionPlan>,
    config: &SessionConfig,
) -> Option<SessionConfig> {
    let reads_postgres = plan
        .exists(|node| Ok(node.downcast_ref::<PostgresScanExec>().is_some()))
        .unwrap_or(false);
    if !reads_postgres {
        return None;
    }
    let mut config = config.clone();
    let optimizer = &mut config.options_mut().optimizer;
    optimizer.hash_join_inlist_pushdown_max_distinct_values = MAX_KEY_ARRAY;
    optimizer.hash_join_inlist_pushdown_max_size = 1024 * 1024;
    Some(config)
}

/// A Postgres condition that every row passing `expr` satisfies, over the scan's output
/// `columns` (with their estimated `distinct` counts, by position, where known); `None` when
/// nothing of it can be said in SQL.
///
/// A key list is left out when it names at least half of its column's distinct values: it
/// would filter little, and Postgres would parse it once per task and hash every row (TPC-H
/// Q8's list of all 10,000 suppliers made `lineitem`'s COPY slower, not smaller).
pub fn superset_sql(
    expr: &Arc<dyn PhysicalExpr>,
    columns: &[PgColumn],
    distinct: &[Option<usize>],
) -> Option<String> {
    Translator { columns, distinct }.superset(expr)
}

struct Translator<'a> {
    columns: &'a [PgColumn],
    distinct: &'a [Option<usize>],
}

impl Translator<'_> {
    fn superset(&self, expr: &Arc<dyn PhysicalExpr>) -> Option<String> {
        if let Some(dynamic) = expr.downcast_ref::<DynamicFilterPhysicalExpr>() {
            return self.superset(&dynamic.current().ok()?);
        }
        if let Some(literal) = expr.downcast_ref::<Literal>() {
            return match literal.value() {
                // `true` restricts nothing; `false` (an empty build side) everything.
                ScalarValue::Boolean(Some(false)) => Some("FALSE".into()),
                _ => None,
            };
        }
        if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
            return self.binary(binary);
        }
        if let Some(list) = expr.downcast_ref::<InListExpr>() {
            if list.negated() || list.list().is_empty() || list.list().len() > MAX_KEY_ARRAY {
                return None;
            }
            let values = list
                .list()
                .iter()
                .map(|value| Some(value.downcast_ref::<Literal>()?.value()))
                .collect::<Option<Vec<_>>>()?;
            if let Some(function) = list.expr().downcast_ref::<ScalarFunctionExpr>() {
                return (function.name() == "struct")
                    .then(|| self.struct_keys(function.args(), &values))
                    .flatten();
            }
            return self.key_list(list.expr(), &values);
        }
        if let Some(is_null) = expr.downcast_ref::<IsNullExpr>() {
            let column = self.column(is_null.arg())?;
            return Some(format!("({} IS NULL)", column_sql(column)));
        }
        if let Some(case) = expr.downcast_ref::<CaseExpr>() {
            // A row passes when it passes the branch its partition picks: surely when it
            // passes some branch. `false` branches (empty partitions) add nothing.
            let mut branches = Vec::new();
            let thens = case.when_then_expr().iter().map(|(_, then)| then);
            for then in thens.chain(case.else_expr()) {
                if is_false(then) {
                    continue;
                }
                branches.push(self.superset(then)?);
            }
            return Some(if branches.is_empty() {
                "FALSE".into()
            } else {
                format!("({})", branches.join(" OR "))
            });
        }
        None
    }

    /// `expr IN (values)` as Postgres SQL: an integer key array, else (for short lists) an
    /// `IN` list; `None` when the list names half or more of the column's distinct values.
    fn key_list(&self, expr: &Arc<dyn PhysicalExpr>, values: &[&ScalarValue]) -> Option<String> {
        let position = self.position(expr)?;
        let column = self.columns.get(position)?;
        pushable(column, false)?;
        let distinct = self.distinct.get(position).copied().flatten();
        let filters_little = |keys: usize| distinct.is_some_and(|d| keys.saturating_mul(2) >= d);
        if let Some((array, keys)) = integer_array(column, values) {
            if filters_little(keys) {
                return None;
            }
            return Some(format!("({} = ANY({array}))", column_sql(column)));
        }
        if values.len() > MAX_IN_LIST || filters_little(values.len()) {
            return None;
        }
        let mut values = values
            .iter()
            .map(|value| scalar_literal(value))
            .collect::<Option<Vec<_>>>()?;
        let mut seen = std::collections::HashSet::new();
        values.retain(|value| seen.insert(value.clone()));
        Some(format!(
            "({} IN ({}))",
            column_sql(column),
            values.join(", ")
        ))
    }

    /// A multi-column key list, `struct(a, b) IN ((1, 2), (3, 4))`, loosened to one list per
    /// column, `a IN (1, 3) AND b IN (2, 4)`: every pair that joins has each part in its
    /// column's list. Columns whose list would filter little are left out.
    fn struct_keys(
        &self,
        args: &[Arc<dyn PhysicalExpr>],
        values: &[&ScalarValue],
    ) -> Option<String> {
        let mut conjuncts = Vec::new();
        for (field, arg) in args.iter().enumerate() {
            let parts = values
                .iter()
                .map(|value| match value {
                    ScalarValue::Struct(array) if array::Array::len(array.as_ref()) == 1 => {
                        ScalarValue::try_from_array(array.columns().get(field)?, 0).ok()
                    }
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let parts: Vec<&ScalarValue> = parts.iter().collect();
            if let Some(sql) = self.key_list(arg, &parts) {
                conjuncts.push(sql);
            }
        }
        (!conjuncts.is_empty()).then(|| format!("({})", conjuncts.join(" AND ")))
    }

    fn binary(&self, binary: &BinaryExpr) -> Option<String> {
        let op = binary.op();
        match op {
            Operator::And => match (self.superset(binary.left()), self.superset(binary.right())) {
                (Some(left), Some(right)) => Some(format!("({left} AND {right})")),
                (Some(one), None) | (None, Some(one)) => Some(one),
                (None, None) => None,
            },
            Operator::Or => Some(format!(
                "({} OR {})",
                self.superset(binary.left())?,
                self.superset(binary.right())?
            )),
            Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => {
                let (column, value, flipped) =
                    match (self.column(binary.left()), self.column(binary.right())) {
                        (Some(column), None) => (column, binary.right(), false),
                        (None, Some(column)) => (column, binary.left(), true),
                        _ => return None,
                    };
                pushable(column, *op != Operator::Eq)?;
                let literal = scalar_literal(value.downcast_ref::<Literal>()?.value())?;
                let symbol = match op {
                    Operator::Eq => "=",
                    Operator::Lt => "<",
                    Operator::LtEq => "<=",
                    Operator::Gt => ">",
                    _ => ">=",
                };
                let column = column_sql(column);
                Some(if flipped {
                    format!("({literal} {symbol} {column})")
                } else {
                    format!("({column} {symbol} {literal})")
                })
            }
            _ => None,
        }
    }

    /// The scan column `expr` is, through casts between numeric types (join keys of different
    /// integer widths; Postgres compares mixed numeric types exactly).
    fn column(&self, expr: &Arc<dyn PhysicalExpr>) -> Option<&PgColumn> {
        self.columns.get(self.position(expr)?)
    }

    /// The position among the scan's columns of the column `expr` names (as [`Self::column`]).
    fn position(&self, expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
        if let Some(column) = expr.downcast_ref::<Column>() {
            let pg_column = self.columns.get(column.index())?;
            return (pg_column.name == column.name()).then_some(column.index());
        }
        if let Some(cast) = expr.downcast_ref::<CastExpr>() {
            let position = self.position(cast.expr())?;
            let column = self.columns.get(position)?;
            return (is_numeric(cast.cast_type()) && is_numeric(&column.pg_type.arrow_type()))
                .then_some(position);
        }
        None
    }
}

/// An integer key list as one array literal, `'{1,2,3}'::int4[]`, and how many distinct keys
/// it holds: Postgres parses that in one pass, where an `IN (...)` list costs a parse-tree
/// node, a type coercion and a constant per value — per task (a 30,000-key list over 18 tasks
/// cost more server time than the rows it saved). `None` unless the column and every value
/// are integers.
fn integer_array(column: &PgColumn, values: &[&ScalarValue]) -> Option<(String, usize)> {
    use std::fmt::Write;
    // The column's own type: Postgres hashes `= ANY(array)` only when both sides hash alike.
    let (element, range) = match column.pg_type {
        PgType::Int2 => ("int2", i128::from(i16::MIN)..=i128::from(i16::MAX)),
        PgType::Int4 => ("int4", i128::from(i32::MIN)..=i128::from(i32::MAX)),
        PgType::Int8 => ("int8", i128::from(i64::MIN)..=i128::from(i64::MAX)),
        _ => return None,
    };
    let mut keys = Vec::with_capacity(values.len());
    for value in values {
        let value: i128 = match value {
            ScalarValue::Int8(Some(v)) => (*v).into(),
            ScalarValue::Int16(Some(v)) => (*v).into(),
            ScalarValue::Int32(Some(v)) => (*v).into(),
            ScalarValue::Int64(Some(v)) => (*v).into(),
            ScalarValue::UInt8(Some(v)) => (*v).into(),
            ScalarValue::UInt16(Some(v)) => (*v).into(),
            ScalarValue::UInt32(Some(v)) => (*v).into(),
            ScalarValue::UInt64(Some(v)) => (*v).into(),
            _ => return None,
        };
        // A key outside the column's type matches none of its values.
        if range.contains(&value) {
            keys.push(value);
        }
    }
    // A build side's keys repeat (one per build row); sorted, the server's hash and the
    // statement are smaller, and the SQL is the same for the same keys.
    keys.sort_unstable();
    keys.dedup();
    let mut text = String::with_capacity(keys.len() * 8 + 16);
    text.push_str("'{");
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(text, "{key}");
    }
    let _ = write!(text, "}}'::{element}[]");
    Some((text, keys.len()))
}

fn is_false(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>()
        .is_some_and(|literal| literal.value() == &ScalarValue::Boolean(Some(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PgType;
    use datafusion::physical_expr::expressions::lit;

    fn columns() -> Vec<PgColumn> {
        vec![
            PgColumn {
                name: "k".into(),
                pg_type: PgType::Int4,
            },
            PgColumn {
                name: "we\"ird".into(),
                pg_type: PgType::Text,
            },
        ]
    }

    fn col(name: &str, index: usize) -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new(name, index))
    }

    fn binary(
        left: Arc<dyn PhysicalExpr>,
        op: Operator,
        right: Arc<dyn PhysicalExpr>,
    ) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(left, op, right))
    }

    fn in_list(expr: Arc<dyn PhysicalExpr>, values: Vec<ScalarValue>) -> Arc<dyn PhysicalExpr> {
        let schema = arrow::datatypes::Schema::new(
            columns().iter().map(PgColumn::field).collect::<Vec<_>>(),
        );
        Arc::new(
            InListExpr::try_new(
                expr,
                values.into_iter().map(|v| lit(v) as _).collect(),
                false,
                &schema,
            )
            .unwrap(),
        )
    }

    #[test]
    fn bounds_and_key_lists_become_sql() {
        let bounds = binary(
            binary(col("k", 0), Operator::GtEq, lit(3i32)),
            Operator::And,
            binary(col("k", 0), Operator::LtEq, lit(9i32)),
        );
        let members = in_list(col("k", 0), vec![3i32.into(), 9i32.into()]);
        let filter = binary(bounds, Operator::And, members);
        assert_eq!(
            superset_sql(&filter, &columns(), &[]).unwrap(),
            "(((\"k\" >= 3) AND (\"k\" <= 9)) AND (\"k\" = ANY('{3,9}'::int4[])))"
        );
        // A list of half the column's distinct values or more is left out; the range stays.
        assert_eq!(
            superset_sql(&filter, &columns(), &[Some(5), None]).unwrap(),
            "(((\"k\" >= 3) AND (\"k\" <= 9)) AND (\"k\" = ANY('{3,9}'::int4[])))"
        );
        assert_eq!(
            superset_sql(&filter, &columns(), &[Some(4), None]).unwrap(),
            "((\"k\" >= 3) AND (\"k\" <= 9))"
        );
    }

    #[test]
    fn what_cannot_be_said_is_dropped_from_and_but_spoils_or() {
        // A text range is not pushed (collations), but text equality lists are, quoted.
        let text_bound = binary(col("we\"ird", 1), Operator::GtEq, lit("a"));
        let text_list = in_list(col("we\"ird", 1), vec!["x'); DROP TABLE t; --".into()]);
        let filter = binary(text_bound.clone(), Operator::And, text_list);
        assert_eq!(
            superset_sql(&filter, &columns(), &[]).unwrap(),
            "(\"we\"\"ird\" IN ('x''); DROP TABLE t; --'))"
        );
        assert_eq!(superset_sql(&text_bound, &columns(), &[]), None);
        let either = binary(
            binary(col("k", 0), Operator::Eq, lit(1i32)),
            Operator::Or,
            text_bound,
        );
        assert_eq!(superset_sql(&either, &columns(), &[]), None);
        // A column index that does not match the scan's columns is never guessed at.
        let wrong = binary(col("k", 1), Operator::Eq, lit(1i32));
        assert_eq!(superset_sql(&wrong, &columns(), &[]), None);
        assert_eq!(superset_sql(&lit(true), &columns(), &[]), None);
        assert_eq!(superset_sql(&lit(false), &columns(), &[]).unwrap(), "FALSE");
    }

    #[test]
    fn multi_column_key_lists_become_one_list_per_column() {
        use arrow::array::{ArrayRef, Int32Array, StringArray, StructArray};
        use arrow::datatypes::{DataType, Field};
        use datafusion::common::config::ConfigOptions;
        let schema = arrow::datatypes::Schema::new(
            columns().iter().map(PgColumn::field).collect::<Vec<_>>(),
        );
        let fields = vec![
            Arc::new(Field::new("c0", DataType::Int32, true)),
            Arc::new(Field::new("c1", DataType::Utf8, true)),
        ];
        let pairs = StructArray::from(vec![
            (
                Arc::clone(&fields[0]),
                Arc::new(Int32Array::from(vec![9, 3, 9])) as ArrayRef,
            ),
            (
                Arc::clone(&fields[1]),
                Arc::new(StringArray::from(vec!["a", "b", "b"])) as ArrayRef,
            ),
        ]);
        let key = Arc::new(ScalarFunctionExpr::new(
            "struct",
            datafusion::functions::core::r#struct(),
            vec![col("k", 0), col("we\"ird", 1)],
            Arc::new(Field::new("struct", DataType::Struct(fields.into()), true)),
            Arc::new(ConfigOptions::default()),
        )) as Arc<dyn PhysicalExpr>;
        let list =
            Arc::new(InListExpr::try_new_from_array(key, Arc::new(pairs), false, &schema).unwrap())
                as Arc<dyn PhysicalExpr>;
        // Each column's keys, once each; a pair that joins has both parts in their lists.
        assert_eq!(
            superset_sql(&list, &columns(), &[]).unwrap(),
            "((\"k\" = ANY('{3,9}'::int4[])) AND (\"we\"\"ird\" IN ('a', 'b')))"
        );
        // A column whose list would filter little is left out, the other stays.
        assert_eq!(
            superset_sql(&list, &columns(), &[Some(3), None]).unwrap(),
            "((\"we\"\"ird\" IN ('a', 'b')))"
        );
        assert_eq!(superset_sql(&list, &columns(), &[Some(3), Some(3)]), None);
    }

    #[test]
    fn partitioned_filters_become_the_or_of_their_branches() {
        let case = Arc::new(
            CaseExpr::try_new(
                Some(col("k", 0)),
                vec![
                    (lit(0u64), binary(col("k", 0), Operator::Eq, lit(1i32))),
                    (lit(1u64), lit(false)),
                ],
                Some(binary(col("k", 0), Operator::Eq, lit(2i32))),
            )
            .unwrap(),
        ) as Arc<dyn PhysicalExpr>;
        assert_eq!(
            superset_sql(&case, &columns(), &[]).unwrap(),
            "((\"k\" = 1) OR (\"k\" = 2))"
        );
        let dynamic = Arc::new(DynamicFilterPhysicalExpr::new(vec![col("k", 0)], lit(true)))
            as Arc<dyn PhysicalExpr>;
        assert_eq!(superset_sql(&dynamic, &columns(), &[]), None);
    }
}
