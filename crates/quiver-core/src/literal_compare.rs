//! `value <op> literal` evaluated by kernels of our own, where Arrow's are slow.
//!
//! **String views.** Arrow's comparison kernel compares a `Utf8View` column with a scalar one
//! row at a time: it turns each view into a byte slice (inline or in a data buffer) and
//! compares the slices. ClickBench's `WHERE SearchPhrase <> ''` spends a fifth of Q10's time
//! there. But a view holds the string's length in its low four bytes and, up to 12 bytes, the
//! string itself after them; longer strings keep their first four bytes there. So equality
//! with a literal of up to 12 bytes is one masked 128-bit compare per row (the mask keeps the
//! length and the literal's bytes, so it does not rely on inline views being zero-padded), and
//! with a longer literal a 64-bit compare of length and prefix that only the rows it matches
//! follow into the data buffer.
//!
//! **Integers, dates and timestamps.** Arrow's kernel ORs each row's result into a 64-bit
//! word at its bit, which vectorises four rows to a register; ClickBench's
//! `WHERE AdvEngineID <> 0` over a 16-bit column spent most of Q1's scan there. Here each
//! chunk of 64 rows is compared into 64 bytes first (a whole register of rows per
//! instruction), and the bytes are packed eight at a time by one multiplication. Floats are
//! left to Arrow (its NaN ordering).
//!
//! [`LiteralCompareRule`] puts [`LiteralCompareExpr`] in place in filters' predicates; scans
//! that evaluate their own pushed filters call [`rewrite`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, ByteView, RecordBatch};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, FieldRef, Int16Type, Int32Type, Int64Type, Int8Type, Schema,
    TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::conjunction::replace_filter_predicates;

/// Rewrites the predicate of every `FilterExec` with [`rewrite`].
#[derive(Debug, Default)]
pub struct LiteralCompareRule;

impl PhysicalOptimizerRule for LiteralCompareRule {
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
        "literal_compare"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` with each comparison that [`LiteralCompareExpr::try_new`] takes made one.
pub fn rewrite(expr: Arc<dyn PhysicalExpr>) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    expr.transform_up(|node| {
        Ok(match LiteralCompareExpr::try_new(&node) {
            Some(compare) => Transformed::yes(Arc::new(compare) as Arc<dyn PhysicalExpr>),
            None => Transformed::no(node),
        })
    })
}

/// `value <op> literal` (or `literal <op> value`) with a kernel of our own for its types.
#[derive(Debug, Clone)]
pub struct LiteralCompareExpr {
    /// The comparison as DataFusion planned it: shown in plans, and evaluated when `value`
    /// does not turn out to be an array the kernel takes.
    original: Arc<dyn PhysicalExpr>,
    value: Arc<dyn PhysicalExpr>,
    literal_expr: Arc<dyn PhysicalExpr>,
    /// Whether the literal is the comparison's left side.
    literal_left: bool,
    kernel: Kernel,
}

#[derive(Debug, Clone)]
enum Kernel {
    /// `=` or `<>` (`negated`) a string or binary view literal, these bytes.
    Views { literal: Vec<u8>, negated: bool },
    /// `value <op> literal` (the operator turned around when the literal was on the left)
    /// with an integer, date or timestamp literal, as a one-row array.
    Primitive { op: Operator, literal: ArrayRef },
}

impl PartialEq for LiteralCompareExpr {
    fn eq(&self, other: &Self) -> bool {
        self.original.as_ref() == other.original.as_ref()
    }
}

impl Eq for LiteralCompareExpr {}

impl Hash for LiteralCompareExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.original.hash(state);
    }
}

impl LiteralCompareExpr {
    /// `Some` when `expr` compares an expression with a non-NULL literal: `=` or `<>` a
    /// string or binary view, or any of `= <> < <= > >=` an integer, date or timestamp.
    pub fn try_new(expr: &Arc<dyn PhysicalExpr>) -> Option<Self> {
        let binary = expr.downcast_ref::<BinaryExpr>()?;
        let (value, literal_expr, literal_left) = match (
            binary.left().downcast_ref::<Literal>(),
            binary.right().downcast_ref::<Literal>(),
        ) {
            (None, Some(_)) => (binary.left(), binary.right(), false),
            (Some(_), None) => (binary.right(), binary.left(), true),
            _ => return None,
        };
        let scalar = literal_expr.downcast_ref::<Literal>()?.value();
        let view_literal = match scalar {
            ScalarValue::Utf8View(Some(s)) => Some(s.as_bytes()),
            ScalarValue::BinaryView(Some(b)) => Some(b.as_slice()),
            _ => None,
        };
        let kernel = match view_literal {
            Some(literal) => {
                let negated = match binary.op() {
                    Operator::Eq => false,
                    Operator::NotEq => true,
                    _ => return None,
                };
                Kernel::Views {
                    literal: literal.to_vec(),
                    negated,
                }
            }
            _ if scalar.is_null() || !primitive(&scalar.data_type()) => return None,
            _ => {
                let op = match binary.op() {
                    op @ (Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq) => *op,
                    _ => return None,
                };
                let op = if literal_left { op.swap()? } else { op };
                let literal = scalar.to_array().ok()?;
                Kernel::Primitive { op, literal }
            }
        };
        Some(LiteralCompareExpr {
            original: Arc::clone(expr),
            value: Arc::clone(value),
            literal_expr: Arc::clone(literal_expr),
            literal_left,
            kernel,
        })
    }
}

impl LiteralCompareExpr {
    /// Whether the compared value is a column as it is (so evaluating this cannot fail).
    pub fn compares_a_column(&self) -> bool {
        self.value.downcast_ref::<Column>().is_some()
    }
}

/// The types [`compare_primitive`] compares.
fn primitive(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
        )
}

/// One bit per row of `array`: whether `row <op> literal` (NULL rows are left to the caller).
/// None when the two are not both of one type [`primitive`] takes.
fn compare_primitive(
    array: &dyn Array,
    literal: &dyn Array,
    op: Operator,
) -> Option<BooleanBuffer> {
    if array.data_type() != literal.data_type() || literal.len() != 1 {
        return None;
    }
    macro_rules! typed {
        ($t:ty) => {
            compare_values(
                array.as_primitive_opt::<$t>()?.values(),
                literal.as_primitive_opt::<$t>()?.value(0),
                op,
            )
        };
    }
    match array.data_type() {
        DataType::Int8 => typed!(Int8Type),
        DataType::Int16 => typed!(Int16Type),
        DataType::Int32 => typed!(Int32Type),
        DataType::Int64 => typed!(Int64Type),
        DataType::UInt8 => typed!(UInt8Type),
        DataType::UInt16 => typed!(UInt16Type),
        DataType::UInt32 => typed!(UInt32Type),
        DataType::UInt64 => typed!(UInt64Type),
        DataType::Date32 => typed!(Date32Type),
        DataType::Date64 => typed!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => typed!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => typed!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => typed!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => typed!(TimestampNanosecondType),
        _ => None,
    }
}

fn compare_values<T: Copy + PartialOrd>(
    values: &[T],
    literal: T,
    op: Operator,
) -> Option<BooleanBuffer> {
    Some(match op {
        Operator::Eq => bits(values, |v| v == literal),
        Operator::NotEq => bits(values, |v| v != literal),
        Operator::Lt => bits(values, |v| v < literal),
        Operator::LtEq => bits(values, |v| v <= literal),
        Operator::Gt => bits(values, |v| v > literal),
        Operator::GtEq => bits(values, |v| v >= literal),
        _ => return None,
    })
}

/// One bit per value: `holds(value)`. Each 64 values are tested into 64 bytes (0 or 0xFF),
/// which the compiler does a register of values at a time, and then packed into one word. The
/// bytes are a new array per word: one array reused across words was copied through the stack
/// twice a word, and the 32-byte loads of [`pack_movemask`] then waited on the 16-byte stores.
#[inline(always)]
fn bits<T: Copy>(values: &[T], holds: impl Fn(T) -> bool) -> BooleanBuffer {
    let mut words = Vec::with_capacity(values.len().div_ceil(64));
    let mut chunks = values.chunks_exact(64);
    for chunk in &mut chunks {
        let bytes: [u8; 64] = std::array::from_fn(|i| 0u8.wrapping_sub(u8::from(holds(chunk[i]))));
        words.push(pack(&bytes));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut bytes = [0u8; 64];
        for (byte, &value) in bytes.iter_mut().zip(rest) {
            *byte = 0u8.wrapping_sub(u8::from(holds(value)));
        }
        words.push(pack(&bytes));
    }
    BooleanBuffer::new(Buffer::from_vec(words), 0, values.len())
}

/// 64 bytes of 0 or 0xFF as the bits of one word, byte `i` at bit `i`.
#[inline(always)]
fn pack(bytes: &[u8; 64]) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    return pack_movemask(bytes);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx2")))]
    pack_multiply(bytes)
}

/// [`pack`] by `vpmovmskb`, which gathers the top bits of 32 bytes. ClickBench's
/// `count(*) ... WHERE AdvEngineID <> 0` over a DataFrame is mostly this compare-and-pack of
/// an int16 column: with [`pack_multiply`] it was 41% of the query's samples, with this 29%.
#[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
#[inline(always)]
fn pack_movemask(bytes: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_movemask_epi8};
    let (halves, _) = bytes.as_chunks::<32>();
    let mut word = 0u64;
    for (i, half) in halves.iter().enumerate() {
        // SAFETY: this build's target has AVX2 (the cfg above), and `half` is 32 readable
        // bytes, loaded unaligned.
        let mask =
            unsafe { _mm256_movemask_epi8(_mm256_loadu_si256(half.as_ptr().cast::<__m256i>())) };
        word |= u64::from(mask as u32) << (32 * i);
    }
    word
}

/// [`pack`] without SIMD. Eight bytes read as a little-endian word, masked to their low bits,
/// hold byte `k` at bit `8k`; multiplying by `0x0102040810204080` adds byte `k` at bit
/// `56 + k` (and elsewhere below bit 56, where no two terms meet, so nothing carries), so the
/// top byte is the eight bits in order.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "avx2"))))]
#[inline(always)]
fn pack_multiply(bytes: &[u8; 64]) -> u64 {
    let (eights, _) = bytes.as_chunks::<8>();
    let mut word = 0u64;
    for (i, eight) in eights.iter().enumerate() {
        let lanes = u64::from_le_bytes(*eight) & 0x0101_0101_0101_0101;
        word |= (lanes.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * i);
    }
    word
}

/// One bit per view: whether its string equals `literal`.
fn equal_views(views: &[u128], buffers: &[Buffer], literal: &[u8]) -> BooleanBuffer {
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
        bits(views, |view| view & mask == wanted)
    } else {
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&length.to_le_bytes());
        head[4..].copy_from_slice(&literal[..4]);
        let head = u64::from_le_bytes(head);
        bits(views, |view| {
            view as u64 == head && long_view_equals(view, buffers, literal)
        })
    }
}

/// Whether the out-of-line string of `view` (longer than 12 bytes) is `literal`.
fn long_view_equals(view: u128, buffers: &[Buffer], literal: &[u8]) -> bool {
    let view = ByteView::from(view);
    let start = view.offset as usize;
    (buffers.get(view.buffer_index as usize))
        .and_then(|buffer| buffer.get(start..start + literal.len()))
        .is_some_and(|bytes| bytes == literal)
}

impl PhysicalExpr for LiteralCompareExpr {
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
        let values = match &self.kernel {
            Kernel::Views { literal, negated } => {
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
                let equal = equal_views(views, buffers, literal);
                if *negated {
                    !&equal
                } else {
                    equal
                }
            }
            Kernel::Primitive { op, literal } => {
                match compare_primitive(array.as_ref(), literal.as_ref(), *op) {
                    Some(values) => values,
                    None => return self.original.evaluate(batch),
                }
            }
        };
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
                "a literal comparison has one child, not {}",
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
        Ok(match LiteralCompareExpr::try_new(&original) {
            Some(compare) => Arc::new(compare),
            None => original,
        })
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

impl fmt::Display for LiteralCompareExpr {
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
                    assert!(ours.data.downcast_ref::<LiteralCompareExpr>().is_some());
                    assert_eq!(ours.data.to_string(), expr.to_string());
                    let got = ours.data.evaluate(&batch).unwrap().into_array(35).unwrap();
                    assert_eq!(&got, &expected, "{expr}");
                    // Rebuilt over a new child (as a renumbering does), it is the same.
                    let rebuilt = Arc::clone(&ours.data)
                        .with_new_children(vec![col("s", &schema).unwrap()])
                        .unwrap();
                    assert!(rebuilt.downcast_ref::<LiteralCompareExpr>().is_some());
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

    /// Values of `data_type` around `literal` (equal, one off, extremes) and NULLs, `len` rows.
    fn primitive_rows(data_type: &DataType, literal: i64, len: usize) -> ArrayRef {
        let pick = [literal, literal - 1, literal + 1, 0, i64::MIN, i64::MAX, -1];
        let values: Vec<Option<i64>> = (0..len)
            .map(|i| (i % 11 != 5).then(|| pick[(i * 7 + i / 3) % pick.len()]))
            .collect();
        let wide: ArrayRef = Arc::new(datafusion::arrow::array::Int64Array::from(values));
        // Out-of-range values become NULL under a safe cast; the rest keep their value.
        let options = datafusion::arrow::compute::CastOptions {
            safe: true,
            ..Default::default()
        };
        datafusion::arrow::compute::cast_with_options(&wide, data_type, &options).unwrap()
    }

    #[test]
    fn integers_dates_and_timestamps_compare_as_arrows_kernel_does() {
        let types = [
            DataType::Int8,
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt8,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Date32,
            DataType::Date64,
            DataType::Timestamp(TimeUnit::Nanosecond, Some("+02:00".into())),
            DataType::Timestamp(TimeUnit::Second, None),
        ];
        let ops = [
            Operator::Eq,
            Operator::NotEq,
            Operator::Lt,
            Operator::LtEq,
            Operator::Gt,
            Operator::GtEq,
        ];
        for data_type in &types {
            for len in [0, 1, 63, 64, 65, 130, 1000] {
                let array = primitive_rows(data_type, 62, len);
                let schema = Schema::new(vec![Field::new("x", data_type.clone(), true)]);
                let batch =
                    RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::clone(&array)])
                        .unwrap();
                let literal =
                    ScalarValue::try_from_array(&primitive_rows(data_type, 62, 1), 0).unwrap();
                for op in ops {
                    for literal_left in [false, true] {
                        let column = col("x", &schema).unwrap();
                        let value = lit(literal.clone());
                        let (left, right) = if literal_left {
                            (value, column)
                        } else {
                            (column, value)
                        };
                        let expr = binary(left, op, right, &schema).unwrap();
                        let expected = expr.evaluate(&batch).unwrap().into_array(len).unwrap();
                        let ours = rewrite(Arc::clone(&expr)).unwrap();
                        assert!(ours.transformed, "{expr}");
                        assert!(ours.data.downcast_ref::<LiteralCompareExpr>().is_some());
                        let got = ours.data.evaluate(&batch).unwrap().into_array(len).unwrap();
                        assert_eq!(&got, &expected, "{expr} over {len} {data_type} rows");
                        // Over a slice that does not start at a word boundary.
                        if len > 3 {
                            let sliced = batch.slice(3, len - 3);
                            let expected = expr.evaluate(&sliced).unwrap();
                            let got = ours.data.evaluate(&sliced).unwrap();
                            assert_eq!(
                                &got.into_array(len - 3).unwrap(),
                                &expected.into_array(len - 3).unwrap(),
                                "{expr} over a slice"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn packing_puts_byte_i_at_bit_i() {
        let packers: Vec<fn(&[u8; 64]) -> u64> = vec![
            pack,
            pack_multiply,
            #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
            pack_movemask,
        ];
        for pack in packers {
            for bit in 0..64 {
                let mut bytes = [0u8; 64];
                bytes[bit] = 0xFF;
                assert_eq!(pack(&bytes), 1u64 << bit);
                let mut others = [0xFFu8; 64];
                others[bit] = 0;
                assert_eq!(pack(&others), !(1u64 << bit));
            }
            assert_eq!(pack(&[0xFF; 64]), u64::MAX);
            assert_eq!(pack(&[0; 64]), 0);
            let alternate: [u8; 64] = std::array::from_fn(|i| if i % 2 == 1 { 0xFF } else { 0 });
            assert_eq!(pack(&alternate), 0xAAAA_AAAA_AAAA_AAAA);
        }
    }

    #[test]
    fn a_column_of_another_type_than_the_literal_is_left_to_arrow() {
        // Planned over Int32, evaluated over a batch whose column is Int64 (a rewrite must not
        // read the wrong width); the original comparison decides, here with an error.
        let schema = Schema::new(vec![Field::new("x", DataType::Int32, true)]);
        let expr = binary(col("x", &schema).unwrap(), Operator::Lt, lit(5i32), &schema).unwrap();
        let ours = rewrite(Arc::clone(&expr)).unwrap().data;
        let wide = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let batch = RecordBatch::try_new(
            Arc::new(wide),
            vec![Arc::new(datafusion::arrow::array::Int64Array::from(vec![
                1, 9,
            ]))],
        )
        .unwrap();
        assert_eq!(
            ours.evaluate(&batch).is_err(),
            expr.evaluate(&batch).is_err()
        );
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
        let numbers = Schema::new(vec![
            Field::new("f", DataType::Float64, true),
            Field::new("i", DataType::Int64, true),
        ]);
        let f = col("f", &numbers).unwrap();
        let i = col("i", &numbers).unwrap();
        // Floats keep Arrow's NaN ordering; NULL literals and arithmetic are not comparisons.
        let float = binary(f, Operator::Lt, lit(1.5f64), &numbers).unwrap();
        let int_null = binary(
            Arc::clone(&i),
            Operator::Eq,
            lit(ScalarValue::Int64(None)),
            &numbers,
        )
        .unwrap();
        let plus = binary(i, Operator::Plus, lit(1i64), &numbers).unwrap();
        for expr in [less, utf8, null, float, int_null, plus] {
            assert!(!rewrite(expr).unwrap().transformed);
        }
    }
}
