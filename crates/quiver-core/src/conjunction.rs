//! `WHERE a AND b AND c …` evaluated as one progressive filter.
//!
//! DataFusion evaluates a left-deep `AND` chain pairwise: when the left side is selective it
//! filters *every column of the batch* by it, evaluates the right side on what is left, and
//! scatters the answer back one run of set bits at a time (an array slice and a bit-by-bit copy
//! per run). ClickBench's `CounterID = 62 AND EventDate >= … AND IsRefresh = 0 AND …` does that
//! five times per batch, and with a match rate of 12% spread over the batch the scatter alone
//! was 10–20% of the query.
//!
//! [`ConjunctionExpr`] evaluates the conjuncts in order. After each one it either keeps a mask
//! (most rows still pass) or narrows the rows in the running to those that passed (few do), so
//! later conjuncts see fewer rows, and the answer is one mask over the batch at the end. A
//! column is read when the first conjunct that needs it runs, for the rows still in the running
//! only: a scan that evaluates the predicate itself ([`ConjunctionExpr::evaluate_lazily`])
//! never reads, or checks for NULLs, the rows an earlier conjunct rejected. NULL counts as
//! false, so it only replaces a filter's predicate ([`ConjunctionFilterRule`]), where that is
//! already the rule.

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{prep_null_mask_filter, FilterBuilder, FilterPredicate};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, Literal,
};
use datafusion::physical_expr::split_conjunction;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;

use crate::literal_compare::LiteralCompareExpr;

/// Below this share of passing rows the batch is compacted before the next conjunct.
const COMPACT_BELOW: f64 = 0.5;

/// Replaces the predicate of every `FilterExec` with two or more `AND`ed conjuncts by a
/// [`ConjunctionExpr`].
#[derive(Debug, Default)]
pub struct ConjunctionFilterRule;

impl PhysicalOptimizerRule for ConjunctionFilterRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_filter_predicates(plan, |predicate| {
            Ok(ConjunctionExpr::try_new(predicate)?
                .map(|progressive| Arc::new(progressive) as Arc<dyn PhysicalExpr>))
        })
    }

    fn name(&self) -> &str {
        "conjunction_filter"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` with the predicate of every `FilterExec` replaced by what `replace` makes of it
/// (`None`: the filter stays as it is).
///
/// A filter's predicate is also where DataFusion learns the filter's constants and equivalences
/// (`k = 5`, `a = b`), which the plan above may rely on: a window's sort left out because its
/// PARTITION BY column is constant, a join's partitioning satisfied through `a = b`. Those
/// rules ran already, so the rebuilt filter must declare the same equivalences. When
/// replacing the whole predicate would lose some, its equality conjuncts stay DataFusion's
/// comparisons and `replace` gets the rest; when that loses some too, the filter stays.
pub(crate) fn replace_filter_predicates(
    plan: Arc<dyn ExecutionPlan>,
    replace: impl Fn(&Arc<dyn PhysicalExpr>) -> Result<Option<Arc<dyn PhysicalExpr>>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(filter) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let original = filter.predicate();
        if let Some(predicate) = replace(original)? {
            let rebuilt = FilterExecBuilder::from(filter)
                .with_predicate(predicate)
                .build()?;
            if same_equivalences(filter, &rebuilt) {
                return Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>));
            }
        }
        let (equalities, rest): (Vec<_>, Vec<_>) = split_conjunction(original)
            .into_iter()
            .cloned()
            .partition(|conjunct| {
                conjunct
                    .downcast_ref::<BinaryExpr>()
                    .is_some_and(|binary| *binary.op() == Operator::Eq)
            });
        let (Some(rest), false) = (conjoin(rest), equalities.is_empty()) else {
            return Ok(Transformed::no(node));
        };
        let Some(replaced) = replace(&rest)? else {
            return Ok(Transformed::no(node));
        };
        let Some(predicate) = conjoin(equalities.into_iter().chain([replaced]).collect()) else {
            return Ok(Transformed::no(node));
        };
        let rebuilt = FilterExecBuilder::from(filter)
            .with_predicate(predicate)
            .build()?;
        if same_equivalences(filter, &rebuilt) {
            Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
        } else {
            Ok(Transformed::no(node))
        }
    })
    .map(|t| t.data)
}

/// `a AND b AND …` of `conjuncts`, left-deep; `None` for none.
fn conjoin(conjuncts: Vec<Arc<dyn PhysicalExpr>>) -> Option<Arc<dyn PhysicalExpr>> {
    conjuncts.into_iter().reduce(|left, right| {
        Arc::new(BinaryExpr::new(left, Operator::And, right)) as Arc<dyn PhysicalExpr>
    })
}

/// Whether `rebuilt` declares the orderings, constants and equivalences `filter` does.
fn same_equivalences(filter: &FilterExec, rebuilt: &FilterExec) -> bool {
    let shown = |filter: &FilterExec| filter.properties().equivalence_properties().to_string();
    shown(filter) == shown(rebuilt)
}

/// `c1 AND c2 AND …` for a filter: true where every conjunct is true, false elsewhere (NULL
/// counts as false; the result has no NULLs).
#[derive(Debug, Clone)]
pub struct ConjunctionExpr {
    /// The conjuncts as written, over the filter's input.
    conjuncts: Vec<Arc<dyn PhysicalExpr>>,
    /// The same, each renumbered over only the columns it reads.
    stages: Vec<Stage>,
    /// Whether the stages may run in any order: each compares one column with a literal, so
    /// none can fail, and none guards another (`b <> 0 AND a / b > 1` keeps its order).
    reorderable: bool,
    /// The rows each stage saw and passed so far, shared by every partition evaluating this
    /// predicate: reorderable stages run cheapest-per-rejected-row first.
    observed: Arc<[Observed]>,
}

/// Rows a stage evaluated, and how many of them passed it.
#[derive(Debug, Default)]
struct Observed {
    rows: AtomicU64,
    passed: AtomicU64,
}

#[derive(Debug, Clone)]
struct Stage {
    /// The input columns this conjunct reads, ascending.
    reads: Vec<usize>,
    /// The conjunct renumbered over `reads`.
    expr: Arc<dyn PhysicalExpr>,
}

impl PartialEq for ConjunctionExpr {
    fn eq(&self, other: &Self) -> bool {
        self.conjuncts == other.conjuncts
    }
}

impl Eq for ConjunctionExpr {}

impl Hash for ConjunctionExpr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.conjuncts.hash(state);
    }
}

impl ConjunctionExpr {
    /// `None` unless `predicate` is an `AND` of two or more conjuncts.
    pub fn try_new(predicate: &Arc<dyn PhysicalExpr>) -> Result<Option<Self>> {
        let conjuncts: Vec<_> = split_conjunction(predicate).into_iter().cloned().collect();
        if conjuncts.len() < 2 {
            return Ok(None);
        }
        Self::from_conjuncts(conjuncts).map(Some)
    }

    fn from_conjuncts(conjuncts: Vec<Arc<dyn PhysicalExpr>>) -> Result<Self> {
        let stages = conjuncts
            .iter()
            .map(|conjunct| {
                let mut reads: Vec<usize> = collect_columns(conjunct)
                    .into_iter()
                    .map(|c| c.index())
                    .collect();
                reads.sort_unstable();
                reads.dedup();
                Ok(Stage {
                    expr: renumber(conjunct, &reads)?,
                    reads,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let reorderable = stages.iter().all(|stage| tests_a_column(&stage.expr));
        let observed = stages.iter().map(|_| Observed::default()).collect();
        Ok(ConjunctionExpr {
            conjuncts,
            stages,
            reorderable,
            observed,
        })
    }

    /// The order to run the stages in: as written, unless they are reorderable and each has
    /// run; then greedily: first any stage over columns already read (a comparison costs less
    /// than reading another column, and can only narrow the rows), else the stage of least
    /// cost per rejected row — the classic rank for ordering independent filters — where the
    /// cost is the bytes a row of its columns takes and the rejected share is what it
    /// rejected so far. Ties keep their written order.
    fn order(&self, schema: &Schema) -> Vec<usize> {
        let written: Vec<usize> = (0..self.stages.len()).collect();
        if !self.reorderable {
            return written;
        }
        let mut rejected = Vec::with_capacity(self.stages.len());
        for observed in self.observed.iter() {
            let rows = observed.rows.load(Ordering::Relaxed);
            if rows == 0 {
                return written;
            }
            let passed = observed.passed.load(Ordering::Relaxed);
            rejected.push((1.0 - passed as f64 / rows as f64).max(1e-6));
        }
        let mut read: Vec<usize> = Vec::new();
        let mut left = written;
        let mut order = Vec::with_capacity(left.len());
        while !left.is_empty() {
            let rank = |index: usize| {
                let bytes: usize = (self.stages[index].reads.iter())
                    .filter(|column| !read.contains(column))
                    .map(|&column| {
                        (schema.fields().get(column))
                            .and_then(|field| field.data_type().primitive_width())
                            .unwrap_or(16)
                    })
                    .sum();
                if bytes == 0 {
                    return 0.0;
                }
                bytes as f64 / rejected[index]
            };
            let mut best = 0;
            for candidate in 1..left.len() {
                if rank(left[candidate]) < rank(left[best]) {
                    best = candidate;
                }
            }
            let index = left.remove(best);
            read.extend_from_slice(&self.stages[index].reads);
            order.push(index);
        }
        order
    }

    /// The rows of an input of `rows` rows (its schema `schema`) where every conjunct holds,
    /// reading each column only when the first conjunct that needs it runs, and then only for
    /// the rows still in the running. `load(column, rows)` returns input column `column`,
    /// whole for `None`, else the rows [`Rows`] selects (in order).
    pub fn evaluate_lazily(
        &self,
        schema: &Schema,
        rows: usize,
        mut load: impl FnMut(usize, Option<&Rows>) -> Result<ArrayRef>,
    ) -> Result<BooleanArray> {
        // The input rows still in the running; `None` while they are all of them.
        let mut selection: Option<Rows> = None;
        let mut len = rows;
        // Rows (of those in the running) that passed so far, when not yet compacted away.
        let mut pending: Option<BooleanArray> = None;
        // Columns read for the rows in the running.
        let mut loaded: Vec<(usize, ArrayRef)> = Vec::new();
        let order = self.order(schema);
        for (position, &index) in order.iter().enumerate() {
            let stage = &self.stages[index];
            let mut columns = Vec::with_capacity(stage.reads.len());
            for &column in &stage.reads {
                let array = match loaded.iter().find(|(c, _)| *c == column) {
                    Some((_, array)) => Arc::clone(array),
                    None => {
                        let array = load(column, selection.as_ref())?;
                        if array.len() != len {
                            return Err(DataFusionError::Internal(format!(
                                "column {column} was read as {} rows, not {len}",
                                array.len()
                            )));
                        }
                        loaded.push((column, Arc::clone(&array)));
                        array
                    }
                };
                columns.push(array);
            }
            let options = RecordBatchOptions::new().with_row_count(Some(len));
            let batch = RecordBatch::try_new_with_options(
                Arc::new(schema.project(&stage.reads)?),
                columns,
                &options,
            )?;
            let mut passed = mask(stage.expr.evaluate(&batch)?, len)?;
            let mut count = passed.true_count();
            if self.reorderable {
                let observed = &self.observed[index];
                observed.rows.fetch_add(len as u64, Ordering::Relaxed);
                observed.passed.fetch_add(count as u64, Ordering::Relaxed);
            }
            if let Some(previous) = pending.take() {
                passed = BooleanArray::new(previous.values() & passed.values(), None);
                count = passed.true_count();
            }
            if count == 0 {
                return Ok(BooleanArray::new(BooleanBuffer::new_unset(rows), None));
            }
            if count == len {
                continue;
            }
            if (count as f64) < COMPACT_BELOW * len as f64 {
                let mask = narrow(selection.map(|rows| rows.mask), passed);
                // Precomputed runs or indices pay off when several columns use them.
                let later = order.get(position + 1..).unwrap_or_default();
                selection = Some(Rows::new(mask, self.reads_of(later) > 1));
                len = count;
                // What was read is for the rows that were in the running.
                loaded.clear();
            } else {
                pending = Some(passed);
            }
        }
        let selection = selection.map(|rows| rows.mask);
        Ok(match (selection, pending) {
            (None, None) => BooleanArray::new(BooleanBuffer::new_set(rows), None),
            (selection, Some(passed)) => narrow(selection, passed),
            (Some(selection), None) => selection,
        })
    }

    /// How many distinct columns the stages `stages` read.
    fn reads_of(&self, stages: &[usize]) -> usize {
        let mut columns: Vec<usize> = (stages.iter())
            .flat_map(|&index| self.stages[index].reads.iter().copied())
            .collect();
        columns.sort_unstable();
        columns.dedup();
        columns.len()
    }
}

/// Whether `expr` tests columns against literals (`c <op> literal`, `c [NOT] IN (literals)`,
/// `c IS [NOT] NULL`, and ORs of those, as DataFusion plans a short IN list): it cannot fail.
fn tests_a_column(expr: &Arc<dyn PhysicalExpr>) -> bool {
    if let Some(compare) = expr.downcast_ref::<LiteralCompareExpr>() {
        return compare.compares_a_column();
    }
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        return *binary.op() == Operator::Or
            && tests_a_column(binary.left())
            && tests_a_column(binary.right());
    }
    let is_column = |expr: &Arc<dyn PhysicalExpr>| expr.downcast_ref::<Column>().is_some();
    if let Some(in_list) = expr.downcast_ref::<InListExpr>() {
        return is_column(in_list.expr())
            && (in_list.list().iter()).all(|item| item.downcast_ref::<Literal>().is_some());
    }
    if let Some(is_null) = expr.downcast_ref::<IsNullExpr>() {
        return is_column(is_null.arg());
    }
    if let Some(is_not_null) = expr.downcast_ref::<IsNotNullExpr>() {
        return is_column(is_not_null.arg());
    }
    false
}

/// Some rows of an input, as a mask and as a filter that keeps them.
pub struct Rows {
    pub mask: BooleanArray,
    pub predicate: FilterPredicate,
}

impl Rows {
    /// `optimize`: precompute the filter's runs or indices, for use on several columns.
    fn new(mask: BooleanArray, optimize: bool) -> Rows {
        let builder = FilterBuilder::new(&mask);
        let predicate = if optimize {
            builder.optimize().build()
        } else {
            builder.build()
        };
        Rows { mask, predicate }
    }
}

impl fmt::Debug for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rows({} of {})", self.mask.true_count(), self.mask.len())
    }
}

/// The input rows of `selection` (all rows for `None`) whose bit in `passed` (one per row of
/// the selection, in order) is set: each 64-row word of the selection takes as many bits of
/// `passed` as it has rows, deposited on those rows.
fn narrow(selection: Option<BooleanArray>, passed: BooleanArray) -> BooleanArray {
    let Some(selection) = selection else {
        return passed;
    };
    let rows = selection.len();
    let words = rows.div_ceil(64);
    let mut out: Vec<u64> = Vec::with_capacity(words);
    let passed_chunks = passed.values().bit_chunks();
    let mut source = passed_chunks.iter_padded();
    // Bits of `passed` read but not yet deposited, lowest first.
    let mut buffer: u128 = 0;
    let mut available: u32 = 0;
    for word in selection.values().bit_chunks().iter_padded().take(words) {
        let wanted = word.count_ones();
        if available < wanted {
            buffer |= u128::from(source.next().unwrap_or(0)) << available;
            available += 64;
        }
        let bits = (buffer as u64) & low_bits(wanted);
        buffer >>= wanted;
        available -= wanted;
        out.push(deposit(bits, word, wanted));
    }
    let bits = BooleanBuffer::new(out.into(), 0, rows);
    BooleanArray::new(bits, None)
}

/// A word with the lowest `count` bits set.
fn low_bits(count: u32) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

/// `bits`' lowest `count` bits placed, in order, on the set bits of `mask` (`count` of them):
/// what x86's PDEP does, written out so it needs no CPU feature.
fn deposit(mut bits: u64, mut mask: u64, count: u32) -> u64 {
    if bits == low_bits(count) {
        return mask;
    }
    let mut out = 0;
    while bits != 0 {
        let lowest = mask & mask.wrapping_neg();
        out |= lowest & (bits & 1).wrapping_neg();
        bits >>= 1;
        mask &= mask.wrapping_sub(1);
    }
    out
}

/// `expr` with its columns renumbered for a projection that keeps the `kept` (ascending)
/// columns of its input, in order.
pub(crate) fn renumber(
    expr: &Arc<dyn PhysicalExpr>,
    kept: &[usize],
) -> Result<Arc<dyn PhysicalExpr>> {
    Arc::clone(expr)
        .transform(|e| {
            let Some(column) = e.downcast_ref::<Column>() else {
                return Ok(Transformed::no(e));
            };
            let position = kept.binary_search(&column.index()).map_err(|_| {
                DataFusionError::Internal(format!("column {column} is not among the kept columns"))
            })?;
            Ok(Transformed::yes(
                Arc::new(Column::new(column.name(), position)) as Arc<dyn PhysicalExpr>,
            ))
        })
        .map(|t| t.data)
}

/// A filter predicate's value over `rows` rows as a mask without NULLs (NULL → false, as a
/// filter reads it).
pub fn mask(value: ColumnarValue, rows: usize) -> Result<BooleanArray> {
    let array = value.into_array(rows)?;
    let Some(mask) = array.as_boolean_opt() else {
        return Err(DataFusionError::Internal(format!(
            "a filter returned {}, not a boolean",
            array.data_type()
        )));
    };
    Ok(if mask.null_count() > 0 {
        prep_null_mask_filter(mask)
    } else {
        mask.clone()
    })
}

impl PhysicalExpr for ConjunctionExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn return_field(&self, _input_schema: &Schema) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(
            format!("{self}"),
            DataType::Boolean,
            false,
        )))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let mask = self.evaluate_lazily(batch.schema_ref(), batch.num_rows(), |column, rows| {
            let array = batch.column(column);
            Ok(match rows {
                None => Arc::clone(array),
                Some(rows) => rows.predicate.filter(array)?,
            })
        })?;
        Ok(ColumnarValue::Array(Arc::new(mask)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.conjuncts.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(Self::from_conjuncts(children)?))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, conjunct) in self.conjuncts.iter().enumerate() {
            if i > 0 {
                write!(f, " AND ")?;
            }
            conjunct.fmt_sql(f)?;
        }
        Ok(())
    }
}

impl fmt::Display for ConjunctionExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, conjunct) in self.conjuncts.iter().enumerate() {
            if i > 0 {
                write!(f, " AND ")?;
            }
            write!(f, "{conjunct}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit, BinaryExpr};

    /// xorshift: deterministic data without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn batch(rng: &mut Rng, rows: usize) -> RecordBatch {
        let a: Int32Array = (0..rows)
            .map(|_| (rng.below(10) != 0).then(|| rng.below(100) as i32))
            .collect();
        let b: Int32Array = (0..rows).map(|_| Some(rng.below(1000) as i32)).collect();
        let c: StringArray = (0..rows)
            .map(|_| (rng.below(7) != 0).then(|| format!("s{}", rng.below(20))))
            .collect();
        let pad: Int32Array = (0..rows).map(|i| Some(i as i32)).collect();
        RecordBatch::try_from_iter([
            ("pad", Arc::new(pad) as ArrayRef),
            ("a", Arc::new(a) as ArrayRef),
            ("b", Arc::new(b) as ArrayRef),
            ("c", Arc::new(c) as ArrayRef),
        ])
        .unwrap()
    }

    /// The answer DataFusion's own `AND` chain gives, NULL as false.
    fn reference(conjuncts: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> BooleanArray {
        let mut chain = Arc::clone(&conjuncts[0]);
        for c in &conjuncts[1..] {
            chain = Arc::new(BinaryExpr::new(chain, Operator::And, Arc::clone(c)));
        }
        mask(chain.evaluate(batch).unwrap(), batch.num_rows()).unwrap()
    }

    /// `ours` over `data`, and the columns it read in order, each with the number of rows
    /// it read (`None`: all).
    fn evaluate_reading(
        ours: &ConjunctionExpr,
        data: &RecordBatch,
    ) -> (BooleanArray, Vec<(usize, Option<usize>)>) {
        let mut reads = Vec::new();
        let got = ours
            .evaluate_lazily(&data.schema(), data.num_rows(), |index, rows| {
                reads.push((index, rows.map(|r| r.mask.true_count())));
                let array = data.column(index);
                Ok(match rows {
                    None => Arc::clone(array),
                    Some(rows) => rows.predicate.filter(array).unwrap(),
                })
            })
            .unwrap();
        (got, reads)
    }

    #[test]
    fn equals_the_and_chain_at_every_selectivity() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let rows = [0, 1, 7, 64, 1000, 8192][round % 6];
            let data = batch(&mut rng, rows);
            let schema = data.schema();
            let column = |name: &str| col(name, &schema).unwrap();
            let pool: Vec<Arc<dyn PhysicalExpr>> = vec![
                binary(
                    column("a"),
                    Operator::Lt,
                    lit(rng.below(110) as i32),
                    &schema,
                )
                .unwrap(),
                binary(
                    column("a"),
                    Operator::Eq,
                    lit(rng.below(100) as i32),
                    &schema,
                )
                .unwrap(),
                binary(
                    column("b"),
                    Operator::GtEq,
                    lit(rng.below(1000) as i32),
                    &schema,
                )
                .unwrap(),
                binary(
                    column("c"),
                    Operator::NotEq,
                    lit(format!("s{}", rng.below(20))),
                    &schema,
                )
                .unwrap(),
                binary(column("c"), Operator::Gt, lit("s1"), &schema).unwrap(),
                lit(true),
                lit(rng.below(2) == 0),
            ];
            let count = 2 + rng.below(4) as usize;
            let conjuncts: Vec<_> = (0..count)
                .map(|_| Arc::clone(&pool[rng.below(pool.len() as u64) as usize]))
                .collect();
            let ours = ConjunctionExpr::from_conjuncts(conjuncts.clone()).unwrap();
            let got = mask(ours.evaluate(&data).unwrap(), rows).unwrap();
            assert_eq!(got, reference(&conjuncts, &data), "round {round}: {ours}");
            assert_eq!(got.null_count(), 0);
        }
    }

    #[test]
    fn reads_a_later_column_only_for_the_rows_still_passing() {
        let data = batch(&mut Rng(11), 8192);
        let schema = data.schema();
        let column = |name: &str| col(name, &schema).unwrap();
        // `b >= 990` keeps about 1% of the rows; `c` is read only after it.
        let conjuncts: Vec<Arc<dyn PhysicalExpr>> = vec![
            binary(column("b"), Operator::GtEq, lit(990), &schema).unwrap(),
            binary(column("c"), Operator::NotEq, lit("s3"), &schema).unwrap(),
            binary(column("a"), Operator::Lt, lit(90), &schema).unwrap(),
        ];
        let ours = ConjunctionExpr::from_conjuncts(conjuncts.clone()).unwrap();
        let first = reference(&conjuncts[..1], &data).true_count();
        let (got, reads) = evaluate_reading(&ours, &data);
        assert_eq!(got, reference(&conjuncts, &data));
        let (b, c, a) = (2, 3, 1);
        assert_eq!(reads[0], (b, None));
        assert_eq!(reads[1], (c, Some(first)));
        assert_eq!(reads[2].0, a);
        assert!(reads[2].1.is_some_and(|rows| rows <= first));
        assert_eq!(reads.len(), 3);
    }

    #[test]
    fn runs_the_stages_rejecting_most_rows_per_byte_first_once_seen() {
        let data = batch(&mut Rng(3), 8192);
        let schema = data.schema();
        let column = |name: &str| col(name, &schema).unwrap();
        let compare =
            |expr: Arc<dyn PhysicalExpr>| crate::literal_compare::rewrite(expr).unwrap().data;
        // `pad >= 0` passes every row, `b < 10` about 1%.
        let conjuncts: Vec<Arc<dyn PhysicalExpr>> = vec![
            compare(binary(column("pad"), Operator::GtEq, lit(0), &schema).unwrap()),
            compare(binary(column("b"), Operator::Lt, lit(10), &schema).unwrap()),
        ];
        let ours = ConjunctionExpr::from_conjuncts(conjuncts.clone()).unwrap();
        assert!(ours.reorderable);
        let listed = datafusion::physical_expr::expressions::in_list(
            column("a"),
            vec![lit(1), lit(2)],
            &false,
            &schema,
        )
        .unwrap();
        let null = datafusion::physical_expr::expressions::is_null(column("c")).unwrap();
        let either = binary(
            compare(binary(column("a"), Operator::Eq, lit(1), &schema).unwrap()),
            Operator::Or,
            compare(binary(column("a"), Operator::Eq, lit(6), &schema).unwrap()),
            &schema,
        )
        .unwrap();
        let tests = vec![Arc::clone(&conjuncts[0]), listed, null, either];
        assert!(ConjunctionExpr::from_conjuncts(tests).unwrap().reorderable);
        let mut first_reads = Vec::new();
        for _ in 0..3 {
            let (got, reads) = evaluate_reading(&ours, &data);
            assert_eq!(got, reference(&conjuncts, &data));
            first_reads.push(reads[0].0);
        }
        // Until every stage ran: as written (pad is column 0); then b (column 2) first.
        assert_eq!(first_reads, vec![0, 2, 2]);

        // A stage over a column already read runs next, even when it rejected nothing.
        let conjuncts: Vec<Arc<dyn PhysicalExpr>> = vec![
            compare(binary(column("b"), Operator::Lt, lit(10), &schema).unwrap()),
            compare(binary(column("a"), Operator::Lt, lit(50), &schema).unwrap()),
            compare(binary(column("b"), Operator::GtEq, lit(0), &schema).unwrap()),
        ];
        let ours = ConjunctionExpr::from_conjuncts(conjuncts.clone()).unwrap();
        for _ in 0..2 {
            let got = mask(ours.evaluate(&data).unwrap(), data.num_rows()).unwrap();
            assert_eq!(got, reference(&conjuncts, &data));
        }
        assert_eq!(ours.order(&schema), vec![0, 2, 1]);

        // A conjunct that could fail, or guard another, keeps the order as written.
        let plus = binary(column("a"), Operator::Plus, lit(1), &schema).unwrap();
        let fixed = [
            vec![
                compare(binary(column("b"), Operator::Lt, lit(10), &schema).unwrap()),
                binary(column("a"), Operator::Lt, lit(10), &schema).unwrap(),
            ],
            vec![
                compare(binary(column("b"), Operator::Lt, lit(10), &schema).unwrap()),
                compare(binary(plus, Operator::Lt, lit(10), &schema).unwrap()),
            ],
        ];
        for conjuncts in fixed {
            assert!(
                !ConjunctionExpr::from_conjuncts(conjuncts)
                    .unwrap()
                    .reorderable
            );
        }
    }

    #[test]
    fn narrowing_keeps_the_passed_rows_of_the_selection() {
        let mut rng = Rng(5);
        for rows in [0, 1, 63, 64, 65, 1000, 8192] {
            let selection = BooleanArray::from(
                (0..rows)
                    .map(|_| Some(rng.below(3) != 0))
                    .collect::<Vec<_>>(),
            );
            let count = selection.true_count();
            let passed = BooleanArray::from(
                (0..count)
                    .map(|_| Some(rng.below(2) == 0))
                    .collect::<Vec<_>>(),
            );
            let mut expected = vec![false; rows];
            for (k, row) in selection.values().set_indices().enumerate() {
                expected[row] = passed.value(k);
            }
            let got = narrow(Some(selection), passed);
            assert_eq!(got, BooleanArray::from(expected), "{rows} rows");
        }
    }

    #[test]
    fn replaces_only_and_chains() {
        let data = batch(&mut Rng(7), 10);
        let schema = data.schema();
        let a = col("a", &schema).unwrap();
        let single = binary(Arc::clone(&a), Operator::Gt, lit(3), &schema).unwrap();
        assert!(ConjunctionExpr::try_new(&single).unwrap().is_none());
        let either = binary(Arc::clone(&single), Operator::Or, lit(false), &schema).unwrap();
        assert!(ConjunctionExpr::try_new(&either).unwrap().is_none());
        let both = binary(single, Operator::And, lit(true), &schema).unwrap();
        let ours = ConjunctionExpr::try_new(&both).unwrap().unwrap();
        assert_eq!(ours.to_string(), "a@1 > 3 AND true");
    }
}
