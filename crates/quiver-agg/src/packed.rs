//! [`PackedKeys`]: GROUP BY over several integer keys as one 64- or 128-bit key.
//!
//! DataFusion groups two or more columns with `GroupValuesColumn`: it hashes each column in
//! turn, and on a hash match compares the row with the group column by column, reading every
//! key from its own array. When the keys are integers (or dates, times, timestamps: integers
//! underneath) whose widths add up to at most 128 bits, they fit in one machine word or two,
//! as ClickHouse's `keys64`/`keys128` methods pack them: each row's keys are packed once,
//! then hashed and compared as one number, and the table stores the packed key itself, so a
//! probe touches one cache line. ClickBench's `GROUP BY SearchEngineID, ClientIP` (16 + 32
//! bits) and `GROUP BY WatchID, ClientIP` (64 + 32) are such keys.
//!
//! Layout: key `i` occupies `width_i` bits at `offset_i` (its bit pattern, two's complement
//! for signed types, so unpacking restores it exactly); a nullable key also owns one bit
//! after all the values, set when the key is NULL (its value bits are then zero). Unequal
//! keys give unequal words, equal keys equal words: the packing is injective.

use std::mem::size_of;
use std::ops::{BitAnd, BitOr, Not, Shl, Shr};

use arrow::array::{make_array, Array, ArrayData, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{ArrowNativeType, DataType, Schema};
use datafusion::common::{internal_err, Result};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;
use hashbrown::hash_table::{Entry, HashTable};

/// How a key schema packs into one word, when it can: two or more keys, every one an
/// integer-like type of at most 64 bits, 128 bits at most in all (null bits included).
/// Computed once per plan; each table it makes copies it.
#[derive(Debug, Clone)]
pub struct PackedKeys {
    keys: Vec<Key>,
    /// Bits used, null bits included.
    bits: u32,
}

impl PackedKeys {
    /// Where each of `schema`'s keys goes, or `None` when they cannot be packed.
    pub fn of(schema: &Schema) -> Option<PackedKeys> {
        if schema.fields().len() < 2 {
            // One key: DataFusion's `GroupValuesPrimitive` already hashes it as one number.
            return None;
        }
        let mut keys = Vec::with_capacity(schema.fields().len());
        let mut offset = 0u32;
        for field in schema.fields() {
            let width = packable_width(field.data_type())?;
            keys.push(Key {
                data_type: field.data_type().clone(),
                offset,
                width,
                null_bit: None,
            });
            offset += width;
        }
        for (key, field) in keys.iter_mut().zip(schema.fields()) {
            if field.is_nullable() {
                key.null_bit = Some(offset);
                offset += 1;
            }
        }
        (offset <= 128).then_some(PackedKeys { keys, bits: offset })
    }

    /// The word the keys are packed into: 64 or 128 bits.
    pub fn word_bits(&self) -> u32 {
        if self.bits <= 64 {
            64
        } else {
            128
        }
    }

    /// A [`GroupValues`] over packed keys, with room for `capacity` groups before its table
    /// grows.
    pub fn group_values(&self, capacity: usize) -> Box<dyn GroupValues> {
        let keys = self.keys.clone();
        if self.word_bits() == 64 {
            Box::new(PackedGroupValues::<u64>::new(keys, capacity))
        } else {
            Box::new(PackedGroupValues::<u128>::new(keys, capacity))
        }
    }
}

/// The bits a value of this type occupies, when it is an integer underneath that groups by
/// its bit pattern (floats do not: `-0.0` and `0.0` are one group).
fn packable_width(data_type: &DataType) -> Option<u32> {
    let packable = data_type.is_integer()
        || matches!(
            data_type,
            DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(_, _)
                | DataType::Duration(_)
        );
    let bytes = data_type.primitive_width()?;
    (packable && bytes <= 8).then_some(bytes as u32 * 8)
}

/// Where one key lives in the packed word.
#[derive(Debug, Clone)]
struct Key {
    data_type: DataType,
    offset: u32,
    /// 8, 16, 32 or 64.
    width: u32,
    /// The bit set when the key is NULL; `None` for a key that cannot be NULL.
    null_bit: Option<u32>,
}

/// A packed key: `u64` or `u128`.
trait Word:
    Copy
    + Eq
    + Default
    + Send
    + From<u64>
    + BitOr<Output = Self>
    + BitAnd<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
    + 'static
{
    /// The low 64 bits.
    fn low(self) -> u64;
    fn hashed(self) -> u64;

    /// The `width` bits at `offset`.
    #[inline]
    fn bits(self, offset: u32, width: u32) -> u64 {
        let value = (self >> offset).low();
        if width == 64 {
            value
        } else {
            value & ((1 << width) - 1)
        }
    }
}

/// A folded multiply (as foldhash and ahash mix): every output bit depends on every input bit.
#[inline]
fn fold(x: u64, multiplier: u64) -> u64 {
    let product = u128::from(x) * u128::from(multiplier);
    (product as u64) ^ ((product >> 64) as u64)
}

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
const SEED: u64 = 0x243f_6a88_85a3_08d3;

impl Word for u64 {
    #[inline]
    fn low(self) -> u64 {
        self
    }
    #[inline]
    fn hashed(self) -> u64 {
        fold(self ^ SEED, MULTIPLIER)
    }
}

impl Word for u128 {
    #[inline]
    fn low(self) -> u64 {
        self as u64
    }
    #[inline]
    fn hashed(self) -> u64 {
        fold(
            self.low() ^ fold((self >> 64u32).low() ^ SEED, MULTIPLIER),
            MULTIPLIER,
        )
    }
}

struct PackedGroupValues<W: Word> {
    keys: Vec<Key>,
    /// `(packed key, group index)`: a probe compares the key in the table, with no second read.
    map: HashTable<(W, usize)>,
    /// Each group's packed key, by group index.
    values: Vec<W>,
    /// The batch's rows packed (reused between batches).
    packed: Vec<W>,
}

impl<W: Word> PackedGroupValues<W> {
    fn new(keys: Vec<Key>, capacity: usize) -> Self {
        let capacity = capacity.max(128);
        PackedGroupValues {
            keys,
            map: HashTable::with_capacity(capacity),
            values: Vec::with_capacity(capacity),
            packed: Vec::new(),
        }
    }

    /// Packs the rows of `columns` into `self.packed`.
    fn pack(&mut self, columns: &[ArrayRef]) -> Result<()> {
        if columns.len() != self.keys.len() {
            return internal_err!(
                "packed GROUP BY: {} key columns for {} keys",
                columns.len(),
                self.keys.len()
            );
        }
        let rows = columns.first().map_or(0, |c| c.len());
        self.packed.clear();
        self.packed.resize(rows, W::default());
        for (key, column) in self.keys.iter().zip(columns) {
            if column.data_type() != &key.data_type || column.len() != rows {
                return internal_err!(
                    "packed GROUP BY: a {} key column of {} rows where {} of {rows} was planned",
                    column.data_type(),
                    column.len(),
                    key.data_type
                );
            }
            let data = column.to_data();
            let Some(buffer) = data.buffers().first() else {
                return internal_err!("packed GROUP BY: a {} key has no values", key.data_type);
            };
            let (offset, range) = (key.offset, data.offset()..data.offset() + rows);
            match key.width {
                8 => place(&mut self.packed, native::<u8>(buffer, range)?, offset),
                16 => place(&mut self.packed, native::<u16>(buffer, range)?, offset),
                32 => place(&mut self.packed, native::<u32>(buffer, range)?, offset),
                64 => place(&mut self.packed, native::<u64>(buffer, range)?, offset),
                width => return internal_err!("packed GROUP BY: a {width}-bit key"),
            }
            if let Some(nulls) = column.nulls().filter(|n| n.null_count() > 0) {
                let Some(null_bit) = key.null_bit else {
                    return internal_err!(
                        "packed GROUP BY: NULLs in a key planned as not nullable"
                    );
                };
                let keep = !(W::from(u64::MAX >> (64 - key.width)) << offset);
                let null = W::from(1) << null_bit;
                for (word, valid) in self.packed.iter_mut().zip(nulls.iter()) {
                    if !valid {
                        // Whatever the slot under a NULL holds, its value bits become zero.
                        *word = (*word & keep) | null;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The values `range` of a buffer of `T`s; an error, not a panic, if the buffer is not one.
fn native<T: ArrowNativeType>(buffer: &Buffer, range: std::ops::Range<usize>) -> Result<&[T]> {
    let bytes = buffer.as_slice();
    if bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0
        || !bytes.len().is_multiple_of(size_of::<T>())
    {
        return internal_err!("packed GROUP BY: a key buffer not aligned to its type");
    }
    match buffer.typed_data::<T>().get(range) {
        Some(values) => Ok(values),
        None => internal_err!("packed GROUP BY: a key buffer shorter than its array"),
    }
}

/// ORs each value's bits, zero-extended, into its row's word at `offset`.
fn place<W: Word, T: ArrowNativeType + Into<u64>>(packed: &mut [W], values: &[T], offset: u32) {
    for (word, &value) in packed.iter_mut().zip(values) {
        *word = *word | (W::from(value.into()) << offset);
    }
}

impl<W: Word> PackedGroupValues<W> {
    /// The keys of `words` as arrays of the key types.
    fn unpack(&self, words: &[W]) -> Result<Vec<ArrayRef>> {
        self.keys
            .iter()
            .map(|key| {
                let values = match key.width {
                    8 => extract::<W, u8>(words, key.offset, |b| b as u8),
                    16 => extract::<W, u16>(words, key.offset, |b| b as u16),
                    32 => extract::<W, u32>(words, key.offset, |b| b as u32),
                    64 => extract::<W, u64>(words, key.offset, |b| b),
                    width => return internal_err!("packed GROUP BY: a {width}-bit key"),
                };
                let nulls = key.null_bit.and_then(|bit| {
                    let valid =
                        BooleanBuffer::collect_bool(words.len(), |i| words[i].bits(bit, 1) == 0);
                    let nulls = NullBuffer::new(valid);
                    (nulls.null_count() > 0).then_some(nulls)
                });
                let data = ArrayData::builder(key.data_type.clone())
                    .len(words.len())
                    .add_buffer(values)
                    .nulls(nulls)
                    .build()?;
                Ok(make_array(data))
            })
            .collect()
    }
}

/// One key's values, `width` bits at `offset` of each word, as a buffer of `T`.
fn extract<W: Word, T: ArrowNativeType>(
    words: &[W],
    offset: u32,
    cast: impl Fn(u64) -> T,
) -> Buffer {
    let width = (size_of::<T>() * 8) as u32;
    Buffer::from_vec(
        words
            .iter()
            .map(|w| cast(w.bits(offset, width)))
            .collect::<Vec<T>>(),
    )
}

impl<W: Word> GroupValues for PackedGroupValues<W> {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        self.pack(cols)?;
        groups.clear();
        groups.reserve(self.packed.len());
        for &key in &self.packed {
            let hash = key.hashed();
            let group = match self
                .map
                .entry(hash, |&(k, _)| k == key, |&(k, _)| k.hashed())
            {
                Entry::Occupied(entry) => entry.get().1,
                Entry::Vacant(entry) => {
                    let group = self.values.len();
                    entry.insert((key, group));
                    self.values.push(key);
                    group
                }
            };
            groups.push(group);
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.map.capacity() * size_of::<(W, usize)>()
            + (self.values.capacity() + self.packed.capacity()) * size_of::<W>()
    }

    fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let emitted = match emit_to {
            EmitTo::All => {
                // The table is filled again after (radix phase 2 empties one table per few
                // buckets): keep its room, so that the next groups do not regrow it.
                self.map.clear();
                let room = Vec::with_capacity(self.values.capacity());
                std::mem::replace(&mut self.values, room)
            }
            EmitTo::First(n) => {
                let n = n.min(self.values.len());
                self.map.retain(|(_, group)| match group.checked_sub(n) {
                    Some(shifted) => {
                        *group = shifted;
                        true
                    }
                    None => false,
                });
                let rest = self.values.split_off(n);
                std::mem::replace(&mut self.values, rest)
            }
        };
        self.unpack(&emitted)
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        self.values.clear();
        self.values.shrink_to(num_rows);
        self.packed.clear();
        self.packed.shrink_to(num_rows);
        self.map.clear();
        self.map.shrink_to(num_rows, |&(k, _)| k.hashed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Date32Array, Int16Array, Int32Array, Int64Array, Int8Array, TimestampMicrosecondArray,
        UInt32Array,
    };
    use arrow::compute::take;
    use arrow::datatypes::{Field, TimeUnit};
    use datafusion::physical_plan::aggregates::group_values::new_group_values;
    use datafusion::physical_plan::aggregates::order::GroupOrdering;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;

    fn schema(columns: &[ArrayRef], nullable: bool) -> Schema {
        Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("k{i}"), c.data_type().clone(), nullable))
                .collect::<Vec<_>>(),
        )
    }

    /// Random keys from a few values per column (so rows repeat), with NULLs, the type's
    /// extremes and, for signed types, negative values.
    fn batch(rng: &mut StdRng, rows: usize, nulls: bool) -> Vec<ArrayRef> {
        let mut pick = |choices: &[i64]| -> Vec<Option<i64>> {
            (0..rows)
                .map(|_| {
                    (!(nulls && rng.random_ratio(1, 10)))
                        .then(|| choices[rng.random_range(0..choices.len())])
                })
                .collect()
        };
        let i8s = pick(&[i8::MIN.into(), -1, 0, 1, i8::MAX.into()]);
        let i16s = pick(&[i16::MIN.into(), -300, 0, 7, i16::MAX.into()]);
        let u32s = pick(&[0, 1, 1 << 31, u32::MAX.into()]);
        let i64s = pick(&[i64::MIN, -1, 0, 1 << 40, i64::MAX]);
        let dates = pick(&[-719_162, 0, 19_000, 2_932_896]);
        vec![
            Arc::new(Int8Array::from_iter(i8s.iter().map(|v| v.map(|v| v as i8)))),
            Arc::new(Int16Array::from_iter(
                i16s.iter().map(|v| v.map(|v| v as i16)),
            )),
            Arc::new(UInt32Array::from_iter(
                u32s.iter().map(|v| v.map(|v| v as u32)),
            )),
            Arc::new(Int64Array::from_iter(i64s.iter().copied())),
            Arc::new(Date32Array::from_iter(
                dates.iter().map(|v| v.map(|v| v as i32)),
            )),
        ]
    }

    /// Each row's group holds the row's keys (NULLs included), and there are as many groups as
    /// DataFusion's own table makes of the same rows: no two groups share keys. (DataFusion's
    /// vectorized table numbers groups in its own order, so the ids themselves differ.)
    fn same_as_datafusion(columns: &[usize], nullable: bool) {
        let mut rng = StdRng::seed_from_u64(7);
        let batches: Vec<Vec<ArrayRef>> = (0..4)
            .map(|_| {
                let all = batch(&mut rng, 1000, nullable);
                columns.iter().map(|&i| Arc::clone(&all[i])).collect()
            })
            .collect();
        let schema = schema(&batches[0], nullable);
        let mut packed = PackedKeys::of(&schema)
            .expect("these keys pack")
            .group_values(0);
        let mut reference =
            new_group_values(Arc::new(schema.clone()), &GroupOrdering::None).unwrap();
        let (mut ids, mut theirs) = (Vec::new(), Vec::new());
        let mut all_ids = Vec::new();
        for columns in &batches {
            packed.intern(columns, &mut ids).unwrap();
            reference.intern(columns, &mut theirs).unwrap();
            assert_eq!(packed.len(), reference.len());
            all_ids.push(ids.clone());
        }
        let groups = packed.emit(EmitTo::All).unwrap();
        assert!(packed.is_empty());
        for (columns, ids) in batches.iter().zip(&all_ids) {
            assert_keys(&groups, ids, columns);
        }

        // Emitting the first `n` groups emits those, and renumbers the rest from 0.
        let n = 5;
        let mut first = PackedKeys::of(&schema).unwrap().group_values(0);
        for columns in &batches {
            first.intern(columns, &mut ids).unwrap();
        }
        let total = first.len();
        let emitted = first.emit(EmitTo::First(n)).unwrap();
        for (emitted, all) in emitted.iter().zip(&groups) {
            assert_eq!(emitted.as_ref(), all.slice(0, n).as_ref());
        }
        assert_eq!(first.len(), total - n);
        first.intern(&batches[0], &mut ids).unwrap();
        for (&new, &old) in ids.iter().zip(&all_ids[0]) {
            if old >= n {
                assert_eq!(new, old - n);
            } else {
                assert!(new >= total - n, "an emitted group came back as {new}");
            }
        }
        let rest = first.emit(EmitTo::All).unwrap();
        assert_keys(&rest, &ids, &batches[0]);
    }

    /// Row `i` of `columns` has the keys of group `ids[i]` in `groups`.
    fn assert_keys(groups: &[ArrayRef], ids: &[usize], columns: &[ArrayRef]) {
        let ids = UInt32Array::from_iter_values(ids.iter().map(|&g| g as u32));
        for (group_keys, column) in groups.iter().zip(columns) {
            let keys = take(group_keys, &ids, None).unwrap();
            assert_eq!(keys.as_ref(), column.as_ref());
        }
    }

    #[test]
    fn keys_in_one_word_group_as_datafusion_groups_them() {
        same_as_datafusion(&[0, 1, 2], true); // 8 + 16 + 32 + 3 null bits
        same_as_datafusion(&[1, 4], false);
    }

    #[test]
    fn keys_in_two_words_group_as_datafusion_groups_them() {
        same_as_datafusion(&[3, 2], true); // 64 + 32 + 2 null bits: ClickBench Q31's shape
        same_as_datafusion(&[3, 4, 1, 0], true); // 64 + 32 + 16 + 8 + 4 = 124 bits
    }

    #[test]
    fn only_integer_keys_that_fit_are_packed() {
        let word_bits = |schema: &Schema| PackedKeys::of(schema).map(|p| p.word_bits());
        let field = |name: &str, data_type: DataType| Field::new(name, data_type, true);
        let fits = Schema::new(vec![
            field("a", DataType::Int16),
            field(
                "b",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ),
        ]);
        assert_eq!(word_bits(&fits), Some(128)); // 16 + 64 + 2
        let word = Schema::new(vec![
            field("a", DataType::Int16),
            field("b", DataType::Int32),
        ]);
        assert_eq!(word_bits(&word), Some(64));
        // Two 64-bit keys and their null bits: 130 bits.
        let wide = Schema::new(vec![
            field("a", DataType::Int64),
            field("b", DataType::UInt64),
        ]);
        assert_eq!(word_bits(&wide), None);
        let both_required = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::UInt64, false),
        ]);
        assert_eq!(word_bits(&both_required), Some(128));
        for other in [
            DataType::Float64,
            DataType::Utf8,
            DataType::Boolean,
            DataType::Decimal128(10, 2),
        ] {
            let schema = Schema::new(vec![field("a", DataType::Int32), field("b", other)]);
            assert_eq!(word_bits(&schema), None);
        }
        // One key stays with DataFusion's primitive table.
        assert_eq!(
            word_bits(&Schema::new(vec![field("a", DataType::Int32)])),
            None
        );
    }

    #[test]
    fn timestamps_keep_their_time_zone_and_sliced_columns_their_offset() {
        let times: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(-5), None, Some(1_700_000_000_000_000)])
                .with_timezone("Europe/Paris"),
        );
        let ids: ArrayRef = Arc::new(UInt32Array::from(vec![9, 9, u32::MAX, 3]));
        let ids = ids.slice(1, 3);
        let columns = vec![times, ids];
        let mut packed = PackedKeys::of(&schema(&columns, true))
            .unwrap()
            .group_values(0);
        let mut groups = Vec::new();
        packed.intern(&columns, &mut groups).unwrap();
        assert_eq!(groups, [0, 1, 2]);
        packed.intern(&columns, &mut groups).unwrap();
        assert_eq!(groups, [0, 1, 2]);
        let emitted = packed.emit(EmitTo::All).unwrap();
        assert_eq!(emitted[0].as_ref(), columns[0].as_ref());
        assert_eq!(emitted[1].as_ref(), columns[1].as_ref());
    }

    #[test]
    fn a_column_unlike_the_plan_is_an_error_not_a_wrong_group() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(Int32Array::from(vec![1, 2])),
        ];
        let mut packed = PackedKeys::of(&schema(&columns, false))
            .unwrap()
            .group_values(0);
        let mut groups = Vec::new();
        let wrong: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(Int32Array::from(vec![1, 2])),
        ];
        assert!(packed.intern(&wrong, &mut groups).is_err());
        let with_null: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(1), None])),
            Arc::new(Int32Array::from(vec![1, 2])),
        ];
        let error = packed
            .intern(&with_null, &mut groups)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not nullable"), "{error}");
        assert!(packed.intern(&columns[..1], &mut groups).is_err());
    }
}
