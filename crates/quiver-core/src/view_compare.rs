//! `s = 'literal'` and `s <> 'literal'` over string views, decided from the 16-byte views.
//!
//! Arrow's comparison kernel compares a `Utf8View` column with a scalar one row at a time: it
//! turns each view into a byte slice (inline or in a data buffer) and compares the slices.
//! ClickBench's `WHERE SearchPhrase <> ''` spends a fifth of Q10's time there. But a view
//! holds the string's length in its low four bytes and, up to 12 bytes, the string itself
//! after them; longer strings keep their first four bytes there. So equality with a literal
//! of up to 12 bytes is one masked 128-bit compare per row (the mask keeps the length and the
//! literal's bytes, so it does not rely on inline views being zero-padded), and with a longer
//! literal a 64-bit compare of length and prefix that only the rows it matches follow into
//! the data buffer.
//!
//! [`ViewCompareRule`] puts [`ViewCompareExpr`] in place in filters' predicates; scans that
//! evaluate their own pushed filters call [`rewrite`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, ByteView, RecordBatch};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::conjunction::replace_filter_predicates;

/// Rewrites the predicate of every `FilterExec` with [`rewrite`].
#[derive(Debug, Default)]
pub struct ViewCompareRule;

impl PhysicalOptimizerRule for ViewCompareRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        replace_filter_predicates(plan, |predicate| {
            let rewritten = rewrite(Arc::clone(predicate))?;
            Ok(rewritten.transformed.then_some(rewritten.data))
        })
    }

    fn name(&self) -> &str {
        "view_compare"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` with each `x = 'literal'` and `x <> 'literal'` whose literal is a string view or a
/// binary view (so `x` is one too, after DataFusion's coercion) made a [`ViewCompareExpr`].
pub fn rewrite(expr: Arc<dyn PhysicalExpr>) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    expr.transform_up(|node| {
        Ok(match ViewCompareExpr::try_new(&node) {
            Some(compare) => Transformed::yes(Arc::new(compare) as Arc<dyn PhysicalExpr>),
            None => Transformed::no(node),
        })
    })
}

/// `value = literal` (or `<>`) where `value` evaluates to a string or binary view array.
#[derive(Debug, Clone)]
pub struct ViewCompareExpr {
    /// The comparison as DataFusion planned it: shown in plans, and evaluated when `value`
    /// does not turn out to be an array of views.
    original: Arc<dyn PhysicalExpr>,
    value: Arc<dyn PhysicalExpr>,
    literal_expr: Arc<dyn PhysicalExpr>,
    /// Whether the literal is the comparison's left side.
    literal_left: bool,
    /// The literal's bytes.
    literal: Vec<u8>,
    negated: bool,
}

impl PartialEq for ViewCompareExpr {
    fn eq(&self, other: &Self) -> bool {
        self.original.as_ref() == other.original.as_ref()
    }
}

impl Eq for ViewCompareExpr {}

impl Hash for ViewCompareExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.original.hash(state);
    }
}

impl ViewCompareExpr {
    /// `Some` when `expr` is `=` or `<>` between an expression and a non-NULL view literal.
    pub fn try_new(expr: &Arc<dyn PhysicalExpr>) -> Option<Self> {
        let binary = expr.downcast_ref::<BinaryExpr>()?;
        let negated = match binary.op() {
            Operator::Eq => false,
            Operator::NotEq => true,
            _ => return None,
        };
        let (value, literal_expr, literal_left) = match (
            binary.left().downcast_ref::<Literal>(),
            binary.right().downcast_ref::<Literal>(),
        ) {
            (None, Some(_)) => (binary.left(), binary.right(), false),
            (Some(_), None) => (binary.right(), binary.left(), true),
            _ => return None,
        };
        let literal = match literal_expr.downcast_ref::<Literal>()?.value() {
            ScalarValue::Utf8View(Some(s)) => s.as_bytes().to_vec(),
            ScalarValue::BinaryView(Some(b)) => b.clone(),
            _ => return None,
        };
        Some(ViewCompareExpr {
            original: Arc::clone(expr),
            value: Arc::clone(value),
            literal_expr: Arc::clone(literal_expr),
            literal_left,
            literal,
            negated,
        })
    }
}

/// One bit per view: whether its string equals `literal`.
fn equal_views(views: &[u128], buffers: &[Buffer], literal: &[u8]) -> BooleanBuffer {
    let mut words = Vec::with_capacity(views.len().div_ceil(64));
    // A literal longer than u32::MAX bytes equals no view; its length wraps to something no
    // view of it can hold, and the byte comparison below still decides.
    let length = literal.len() as u32;
    if literal.len() <= 12 {
        let mut bytes = [0u8; 16];
        bytes[..4].copy_from_slice(&length.to_le_bytes());
        bytes[4..4 + literal.len()].copy_from_slice(literal);
        let wanted = u128::from_le_bytes(bytes);
        // The length and the literal's bytes; what follows them in an inline view is padding.
        let mask = u128::MAX >> (8 * (12 - literal.len()));
        for chunk in views.chunks(64) {
            let mut word = 0u64;
            for (bit, &view) in chunk.iter().enumerate() {
                word |= u64::from(view & mask == wanted) << bit;
            }
            words.push(word);
        }
    } else {
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&length.to_le_bytes());
        head[4..].copy_from_slice(&literal[..4]);
        let head = u64::from_le_bytes(head);
        for chunk in views.chunks(64) {
            let mut word = 0u64;
            for (bit, &view) in chunk.iter().enumerate() {
                if view as u64 == head && long_view_equals(view, buffers, literal) {
                    word |= 1 << bit;
                }
            }
            words.push(word);
        }
    }
    BooleanBuffer::new(Buffer::from_vec(words), 0, views.len())
}

/// Whether the out-of-line string of `view` (longer than 12 bytes) is `literal`.
fn long_view_equals(view: u128, buffers: &[Buffer], literal: &[u8]) -> bool {
    let view = ByteView::from(view);
    let start = view.offset as usize;
    (buffers.get(view.buffer_index as usize))
        .and_then(|buffer| buffer.get(start..start + literal.len()))
        .is_some_and(|bytes| bytes == literal)
}

impl PhysicalExpr for ViewCompareExpr {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.original.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.original.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let ColumnarValue::Array(array) = self.value.evaluate(batch)? else {
            return self.original.evaluate(batch);
        };
        let (views, buffers) = match array.data_type() {
            DataType::Utf8View => {
                let strings = array.as_string_view();
                (strings.views(), strings.data_buffers())
            }
            DataType::BinaryView => {
                let bytes = array.as_binary_view();
                (bytes.views(), bytes.data_buffers())
            }
            _ => return self.original.evaluate(batch),
        };
        let equal = equal_views(views, buffers, &self.literal);
        let values = if self.negated { !&equal } else { equal };
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            values,
            array.logical_nulls(),
        ))))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.value]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [value] = <[_; 1]>::try_from(children).map_err(|children| {
            DataFusionError::Internal(format!(
                "a view comparison has one child, not {}",
                children.len()
            ))
        })?;
        let literal = Arc::clone(&self.literal_expr);
        let sides = if self.literal_left {
            vec![literal, value]
        } else {
            vec![value, literal]
        };
        let original = Arc::clone(&self.original).with_new_children(sides)?;
        Ok(match ViewCompareExpr::try_new(&original) {
            Some(compare) => Arc::new(compare),
            None => original,
        })
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

impl fmt::Display for ViewCompareExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.original)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, BinaryViewArray, StringViewArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    /// Strings of every length from 0 to 20 that share prefixes and lengths with the
    /// literals below, and NULLs.
    fn strings() -> Vec<Option<String>> {
        let mut out = vec![None];
        for length in 0..=20 {
            for fill in ['a', 'b'] {
                let s: String = "abcdefghijklmnopqrstuvwxyz"[..length].to_string();
                out.push(Some(s.clone()));
                let mut changed = s.clone();
                changed.push(fill);
                out.push(Some(changed));
                if length > 0 {
                    let mut last = s[..length - 1].to_string();
                    last.push('Z');
                    out.push(Some(last));
                }
            }
        }
        out.push(None);
        out
    }

    const LITERALS: [&str; 8] = [
        "",
        "a",
        "abcd",
        "abcdefghijkl",
        "abcdefghijklm",
        "abcdefghijklmnopqrst",
        "abcdefghijklmnopqrsZ",
        "zzzzzzzzzzzzzzzzz",
    ];

    fn check(array: ArrayRef, literal_of: impl Fn(&str) -> ScalarValue) {
        let schema = Schema::new(vec![Field::new("s", array.data_type().clone(), true)]);
        let batch = RecordBatch::try_new(Arc::new(schema.clone()), vec![array]).unwrap();
        for literal in LITERALS {
            for op in [Operator::Eq, Operator::NotEq] {
                for literal_left in [false, true] {
                    let column = col("s", &schema).unwrap();
                    let value = lit(literal_of(literal));
                    let (left, right) = if literal_left {
                        (value, column)
                    } else {
                        (column, value)
                    };
                    let expr = binary(left, op, right, &schema).unwrap();
                    let expected = expr.evaluate(&batch).unwrap().into_array(35).unwrap();
                    let ours = rewrite(Arc::clone(&expr)).unwrap();
                    assert!(ours.transformed, "{expr}");
                    assert!(ours.data.downcast_ref::<ViewCompareExpr>().is_some());
                    assert_eq!(ours.data.to_string(), expr.to_string());
                    let got = ours.data.evaluate(&batch).unwrap().into_array(35).unwrap();
                    assert_eq!(&got, &expected, "{expr}");
                    // Rebuilt over a new child (as a renumbering does), it is the same.
                    let rebuilt = Arc::clone(&ours.data)
                        .with_new_children(vec![col("s", &schema).unwrap()])
                        .unwrap();
                    assert!(rebuilt.downcast_ref::<ViewCompareExpr>().is_some());
                    let again = rebuilt.evaluate(&batch).unwrap().into_array(35).unwrap();
                    assert_eq!(&again, &expected, "{expr}");
                }
            }
        }
    }

    #[test]
    fn string_views_compare_as_arrows_kernel_does() {
        let array: ArrayRef = Arc::new(StringViewArray::from(strings()));
        check(array, |s| ScalarValue::Utf8View(Some(s.to_string())));
    }

    #[test]
    fn binary_views_compare_as_arrows_kernel_does() {
        let strings = strings();
        let bytes: Vec<Option<&[u8]>> = strings
            .iter()
            .map(|s| s.as_ref().map(|s| s.as_bytes()))
            .collect();
        let array: ArrayRef = Arc::new(BinaryViewArray::from(bytes));
        check(array, |s| {
            ScalarValue::BinaryView(Some(s.as_bytes().to_vec()))
        });
    }

    #[test]
    fn inline_padding_does_not_decide() {
        // An inline view of "ab" whose unused bytes are not zero (Arrow asks for zeros; a
        // foreign producer may not write them).
        let clean = u128::from_le_bytes(*b"\x02\0\0\0ab\0\0\0\0\0\0\0\0\0\0");
        let dirty = clean | (0xFFu128 << 120);
        let equal = equal_views(&[clean, dirty], &[], b"ab");
        assert!(equal.value(0) && equal.value(1));
        let equal = equal_views(&[clean, dirty], &[], b"ab\0");
        assert!(!equal.value(0) && !equal.value(1));
    }

    #[test]
    fn other_comparisons_and_non_view_literals_stay() {
        let schema = Schema::new(vec![
            Field::new("s", DataType::Utf8View, true),
            Field::new("u", DataType::Utf8, true),
        ]);
        let s = col("s", &schema).unwrap();
        let u = col("u", &schema).unwrap();
        let view = || lit(ScalarValue::Utf8View(Some("x".into())));
        let less = binary(Arc::clone(&s), Operator::Lt, view(), &schema).unwrap();
        let utf8 = binary(u, Operator::Eq, lit("x"), &schema).unwrap();
        let null = binary(s, Operator::Eq, lit(ScalarValue::Utf8View(None)), &schema).unwrap();
        for expr in [less, utf8, null] {
            assert!(!rewrite(expr).unwrap().transformed);
        }
    }
}
