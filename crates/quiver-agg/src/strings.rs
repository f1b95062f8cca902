//! [`StringGroupValues`]: GROUP BY one string or binary key, with its probes prefetched.
//!
//! DataFusion's tables for one string key (`ArrowBytesMap`, `ArrowBytesViewMap`) probe one row
//! at a time. When the keys are many — ClickBench's `GROUP BY URL`: 5M rows into 245K URLs
//! of about 80 bytes — the table and the stored bytes outgrow the core's caches, and every row
//! waits on two loads in a chain: the table slot, then the bytes of the key stored there, to
//! compare with its own (`memcmp` and the probe took over half of `GROUP BY URL`'s time).
//!
//! This table hashes a batch's keys first, then probes row `i` after it asked the memory for
//! row `i + SLOT_AHEAD`'s slot and, reading row `i + BYTES_AHEAD`'s slot (in cache by then),
//! for the bytes of the key stored there: group prefetching, as hash joins do it (Chen et
//! al., "Improving Hash Join Performance through Prefetching"). Each slot holds the key's full
//! hash, length and place in the arena, so a probe compares hash and length in the slot and
//! reads stored bytes only for a key that almost surely matches.
//!
//! Layout: open addressing with linear probing over a power-of-two array of [`Slot`]s, at most
//! half full; every group's bytes one after another in one arena, in group order (so the
//! emitted array's values buffer is the arena itself); one group for NULL.

use std::mem::size_of;
use std::sync::Arc;

use arrow::array::builder::make_view;
use arrow::array::{Array, ArrayRef, AsArray, BinaryViewArray, GenericByteArray, StringViewArray};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowNativeType, ByteArrayType, DataType, GenericBinaryType, GenericStringType, Schema,
};
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::common::{internal_err, Result};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::GroupValues;

use crate::prefetch;

/// Rows ahead whose table slot is prefetched.
const SLOT_AHEAD: usize = 32;
/// Rows ahead whose stored key bytes are prefetched (their slot was asked for
/// `SLOT_AHEAD - BYTES_AHEAD` rows before).
const BYTES_AHEAD: usize = 16;

/// The table's hash: its own seed, unlike the radix buckets' and DataFusion's.
const SEED: RandomState = RandomState::with_seed(0x7374_7269_6e67_6b65);

/// The key type when `schema` is one string or binary key.
pub fn single_key(schema: &Schema) -> Option<DataType> {
    let [field] = schema.fields().as_ref() else {
        return None;
    };
    let data_type = field.data_type();
    is_variable_width(data_type).then(|| data_type.clone())
}

/// Whether values of `data_type` are byte strings of any length: the three string types and
/// the three variable-width binary ones (not `FixedSizeBinary`).
pub fn is_variable_width(data_type: &DataType) -> bool {
    data_type.is_string()
        || matches!(
            data_type,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        )
}

/// One table entry; `group == 0` is an empty slot, otherwise it holds group index + 1.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    hash: u64,
    /// Where the key's bytes start in the arena.
    start: u64,
    len: u32,
    group: u32,
}

/// Group values for one string or binary key: see the module documentation.
#[derive(Debug)]
pub struct StringGroupValues {
    data_type: DataType,
    slots: Vec<Slot>,
    /// Groups with bytes in the table (the NULL group is not in it).
    in_table: usize,
    /// Every group's bytes, in group order.
    arena: Vec<u8>,
    /// Group `g`'s bytes are `arena[offsets[g]..offsets[g + 1]]` (a NULL group's are empty).
    offsets: Vec<usize>,
    null_group: Option<usize>,
    /// The batch's hashes (reused between batches).
    hashes: Vec<u64>,
}

impl StringGroupValues {
    /// An empty table for keys of `data_type` (one of [`single_key`]'s), with room for
    /// `capacity` groups before it grows.
    pub fn new(data_type: DataType, capacity: usize) -> Self {
        let slots = (capacity.max(64) * 2).next_power_of_two();
        StringGroupValues {
            data_type,
            slots: vec![Slot::default(); slots],
            in_table: 0,
            arena: Vec::new(),
            offsets: vec![0],
            null_group: None,
            hashes: Vec::new(),
        }
    }

    fn groups(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Assigns each of `rows` rows its group; `value(i)` is row `i`'s bytes, `None` for NULL.
    fn probe<'a>(
        &mut self,
        rows: usize,
        value: impl Fn(usize) -> Option<&'a [u8]>,
        groups: &mut Vec<usize>,
    ) -> Result<()> {
        groups.clear();
        groups.reserve(rows);
        // The last non-NULL row's hash, group and bytes.
        let mut previous: Option<(u64, usize, &[u8])> = None;
        for i in 0..rows {
            let mask = self.slots.len() - 1;
            if let Some(&ahead) = self.hashes.get(i + SLOT_AHEAD) {
                prefetch(self.slots.as_ptr().wrapping_add(ahead as usize & mask));
            }
            if let Some(&ahead) = self.hashes.get(i + BYTES_AHEAD) {
                if let Some(slot) = self.slots.get(ahead as usize & mask) {
                    if slot.group != 0 && slot.hash == ahead {
                        let bytes = self.arena.as_ptr().wrapping_add(slot.start as usize);
                        prefetch(bytes);
                        if slot.len > 64 {
                            prefetch(bytes.wrapping_add(64));
                        }
                    }
                }
            }
            let Some(key) = value(i) else {
                let group = match self.null_group {
                    Some(group) => group,
                    None => {
                        let group = self.push_group(&[])?;
                        self.null_group = Some(group);
                        group
                    }
                };
                groups.push(group);
                continue;
            };
            let hash = self.hashes.get(i).copied().unwrap_or_default();
            // A key repeating the row before's (runs of one value, the empty string that
            // most rows of a sparse column hold) takes its group without a probe.
            let group = match previous {
                Some((before, group, bytes)) if before == hash && same_bytes(bytes, key) => group,
                _ => self.find_or_insert(hash, key)?,
            };
            previous = Some((hash, group, key));
            groups.push(group);
        }
        Ok(())
    }

    fn find_or_insert(&mut self, hash: u64, key: &[u8]) -> Result<usize> {
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot.group == 0 {
                break;
            }
            if slot.hash == hash && slot.len as usize == key.len() {
                let start = slot.start as usize;
                let stored = self.arena.get(start..start + key.len());
                if stored.is_some_and(|stored| same_bytes(stored, key)) {
                    return Ok(slot.group as usize - 1);
                }
            }
            at = (at + 1) & mask;
        }
        let Ok(len) = u32::try_from(key.len()) else {
            return internal_err!("GROUP BY: a key of {} bytes (at most 4 GiB)", key.len());
        };
        let start = self.arena.len() as u64;
        let group = self.push_group(key)?;
        self.slots[at] = Slot {
            hash,
            start,
            len,
            group: group as u32 + 1,
        };
        self.in_table += 1;
        if self.in_table * 2 > self.slots.len() {
            self.rebuild(self.slots.len() * 2);
        }
        Ok(group)
    }

    /// Adds a group with bytes `key` (not to the table) and returns its index.
    fn push_group(&mut self, key: &[u8]) -> Result<usize> {
        let group = self.groups();
        if group >= u32::MAX as usize - 1 {
            return internal_err!("GROUP BY: more than {} groups in one table", u32::MAX - 1);
        }
        self.arena.extend_from_slice(key);
        self.offsets.push(self.arena.len());
        Ok(group)
    }

    /// Reinserts the table's slots into `slots` empty slots.
    fn rebuild(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); slots]);
        for slot in old.into_iter().filter(|s| s.group != 0) {
            place(&mut self.slots, slot);
        }
    }

    /// The key array of groups `first..end`, whose bytes are `arena[offsets[first]..]`.
    fn build(&self, arena: &Buffer, first: usize, end: usize) -> Result<ArrayRef> {
        let nulls = self
            .null_group
            .filter(|g| (first..end).contains(g))
            .map(|g| NullBuffer::from_iter((first..end).map(|i| i != g)));
        let offsets = &self.offsets[first..=end];
        Ok(match self.data_type {
            DataType::Utf8 => self.bytes::<GenericStringType<i32>>(arena, offsets, nulls)?,
            DataType::LargeUtf8 => self.bytes::<GenericStringType<i64>>(arena, offsets, nulls)?,
            DataType::Binary => self.bytes::<GenericBinaryType<i32>>(arena, offsets, nulls)?,
            DataType::LargeBinary => self.bytes::<GenericBinaryType<i64>>(arena, offsets, nulls)?,
            DataType::Utf8View => {
                let (views, buffers) = views(arena, offsets)?;
                // SAFETY: every value is a whole key copied from an array of this type, so
                // valid UTF-8, and `views` describes exactly those bytes in `buffers`.
                Arc::new(unsafe { StringViewArray::new_unchecked(views, buffers, nulls) })
            }
            DataType::BinaryView => {
                let (views, buffers) = views(arena, offsets)?;
                Arc::new(BinaryViewArray::try_new(views, buffers, nulls)?)
            }
            ref other => return internal_err!("string GROUP BY over a {other} key"),
        })
    }

    /// The groups with offsets `offsets` into `arena` as an offset-and-values array.
    fn bytes<T: ByteArrayType>(
        &self,
        arena: &Buffer,
        offsets: &[usize],
        nulls: Option<NullBuffer>,
    ) -> Result<ArrayRef> {
        let (base, end) = (offsets[0], offsets[offsets.len() - 1]);
        let shifted = offsets
            .iter()
            .map(|&o| T::Offset::from_usize(o - base))
            .collect::<Option<Vec<_>>>();
        let Some(shifted) = shifted else {
            return internal_err!(
                "GROUP BY: {} bytes of keys do not fit a {} array",
                end - base,
                self.data_type
            );
        };
        let values = arena.slice_with_length(base, end - base);
        // SAFETY: the offsets start at 0, never decrease and end at the values' length; every
        // value is a whole key copied from an array of this type (valid UTF-8 for strings).
        let array = unsafe {
            GenericByteArray::<T>::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(shifted)),
                values,
                nulls,
            )
        };
        Ok(Arc::new(array))
    }
}

/// The values with offsets `offsets` into `arena` as views, over blocks of at most 2 GiB of
/// the arena (slices of it, not copies).
fn views(arena: &Buffer, offsets: &[usize]) -> Result<(ScalarBuffer<u128>, Vec<Buffer>)> {
    const BLOCK: usize = i32::MAX as usize;
    let bytes = arena.as_slice();
    let mut views = Vec::with_capacity(offsets.len() - 1);
    // Each block's (start, end) in the arena.
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    for pair in offsets.windows(2) {
        let (start, end) = (pair[0], pair[1]);
        let key = &bytes[start..end];
        if key.len() <= 12 {
            views.push(make_view(key, 0, 0));
            continue;
        }
        match blocks.last_mut() {
            Some(block) if end - block.0 <= BLOCK => block.1 = end,
            _ => blocks.push((start, end)),
        }
        let (index, block_start) = (blocks.len() - 1, blocks[blocks.len() - 1].0);
        let (Ok(index), Ok(offset)) = (u32::try_from(index), u32::try_from(start - block_start))
        else {
            return internal_err!("GROUP BY: {} bytes of keys in views", end);
        };
        views.push(make_view(key, index, offset));
    }
    let buffers = blocks
        .iter()
        .map(|&(start, end)| arena.slice_with_length(start, end - start))
        .collect();
    Ok((ScalarBuffer::from(views), buffers))
}

impl GroupValues for StringGroupValues {
    fn intern(&mut self, cols: &[ArrayRef], groups: &mut Vec<usize>) -> Result<()> {
        let [column] = cols else {
            return internal_err!("string GROUP BY: {} key columns for one key", cols.len());
        };
        if column.data_type() != &self.data_type {
            return internal_err!(
                "string GROUP BY: a {} key where {} was planned",
                column.data_type(),
                self.data_type
            );
        }
        let rows = column.len();
        self.hashes.clear();
        self.hashes.resize(rows, 0);
        create_hashes(std::slice::from_ref(column), &SEED, &mut self.hashes)?;
        match &self.data_type {
            DataType::Utf8 => {
                let a = column.as_string::<i32>();
                self.probe(
                    rows,
                    |i| a.is_valid(i).then(|| a.value(i).as_bytes()),
                    groups,
                )
            }
            DataType::LargeUtf8 => {
                let a = column.as_string::<i64>();
                self.probe(
                    rows,
                    |i| a.is_valid(i).then(|| a.value(i).as_bytes()),
                    groups,
                )
            }
            DataType::Utf8View => {
                let a = column.as_string_view();
                self.probe(
                    rows,
                    |i| a.is_valid(i).then(|| a.value(i).as_bytes()),
                    groups,
                )
            }
            DataType::Binary => {
                let a = column.as_binary::<i32>();
                self.probe(rows, |i| a.is_valid(i).then(|| a.value(i)), groups)
            }
            DataType::LargeBinary => {
                let a = column.as_binary::<i64>();
                self.probe(rows, |i| a.is_valid(i).then(|| a.value(i)), groups)
            }
            DataType::BinaryView => {
                let a = column.as_binary_view();
                self.probe(rows, |i| a.is_valid(i).then(|| a.value(i)), groups)
            }
            other => internal_err!("string GROUP BY over a {other} key"),
        }
    }

    fn size(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
            + self.arena.capacity()
            + (self.offsets.capacity() + self.hashes.capacity()) * size_of::<u64>()
    }

    fn is_empty(&self) -> bool {
        self.groups() == 0
    }

    fn len(&self) -> usize {
        self.groups()
    }

    fn emit(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let groups = self.groups();
        let n = match emit_to {
            EmitTo::All => groups,
            EmitTo::First(n) => n.min(groups),
        };
        if n == groups {
            let arena = Buffer::from_vec(std::mem::take(&mut self.arena));
            let array = self.build(&arena, 0, n)?;
            self.slots.fill(Slot::default());
            self.in_table = 0;
            self.offsets.truncate(1);
            self.null_group = None;
            return Ok(vec![array]);
        }
        let arena = Buffer::from_slice_ref(&self.arena[..self.offsets[n]]);
        let array = self.build(&arena, 0, n)?;
        // The groups left are numbered from 0 again and their bytes move to the front.
        let base = self.offsets[n];
        self.arena.drain(..base);
        self.offsets.drain(..n);
        for offset in &mut self.offsets {
            *offset -= base;
        }
        self.null_group = self.null_group.and_then(|g| g.checked_sub(n));
        let kept: Vec<Slot> = self
            .slots
            .iter()
            .filter(|s| s.group as usize > n)
            .map(|s| Slot {
                start: s.start - base as u64,
                group: s.group - n as u32,
                ..*s
            })
            .collect();
        self.slots.fill(Slot::default());
        self.in_table = kept.len();
        for slot in kept {
            place(&mut self.slots, slot);
        }
        Ok(vec![array])
    }

    fn clear_shrink(&mut self, num_rows: usize) {
        let slots = (num_rows.max(64) * 2).next_power_of_two();
        self.slots = vec![Slot::default(); slots];
        self.in_table = 0;
        self.arena = Vec::new();
        self.offsets = vec![0];
        self.null_group = None;
        self.hashes = Vec::new();
    }
}

/// Whether two keys are the same bytes. A key of up to 16 bytes (the empty string, words,
/// most phrases) is compared in two overlapping word loads: `==` on slices calls `memcmp`,
/// whose call and set-up cost more than the compare (a fifth of
/// `COUNT(DISTINCT SearchPhrase)`'s time, 85% of whose keys are empty, went to it).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    match a.len() {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => a.first_chunk::<4>() == b.first_chunk() && a.last_chunk::<4>() == b.last_chunk(),
        8..=16 => a.first_chunk::<8>() == b.first_chunk() && a.last_chunk::<8>() == b.last_chunk(),
        _ => a == b,
    }
}

/// Puts `slot` in the first empty slot from its hash's (`slots` is a power of two long and
/// has an empty slot).
fn place(slots: &mut [Slot], slot: Slot) {
    let mask = slots.len() - 1;
    let mut at = slot.hash as usize & mask;
    while slots[at].group != 0 {
        at = (at + 1) & mask;
    }
    slots[at] = slot;
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BinaryArray, LargeBinaryArray, LargeStringArray, StringArray, UInt32Array};
    use arrow::compute::{cast, take};
    use arrow::datatypes::Field;
    use datafusion::physical_plan::aggregates::group_values::new_group_values;
    use datafusion::physical_plan::aggregates::order::GroupOrdering;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const TYPES: [DataType; 6] = [
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Utf8View,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
    ];

    /// Keys drawn from `distinct` values of every length around a view's inline limit (12)
    /// and the prefetch's second line (64), some sharing long prefixes, with NULLs and the
    /// empty string; non-ASCII so that UTF-8 survives the trip.
    fn keys(rng: &mut StdRng, rows: usize, distinct: usize, data_type: &DataType) -> ArrayRef {
        let values: Vec<Option<String>> = (0..rows)
            .map(|_| {
                if rng.random_ratio(1, 20) {
                    return None;
                }
                let n = rng.random_range(0..distinct);
                let len = [0, 1, 11, 12, 13, 63, 64, 65, 200][n % 9];
                let mut key = format!("é{n}-").repeat(len / 4 + 1);
                key.truncate(key.char_indices().nth(len).map_or(key.len(), |(i, _)| i));
                Some(key)
            })
            .collect();
        let strings: ArrayRef = Arc::new(StringArray::from(values));
        cast(&strings, data_type).unwrap()
    }

    fn group_values(data_type: &DataType) -> (StringGroupValues, Box<dyn GroupValues>) {
        let schema = Schema::new(vec![Field::new("k", data_type.clone(), true)]);
        assert_eq!(single_key(&schema).as_ref(), Some(data_type));
        let theirs = new_group_values(Arc::new(schema), &GroupOrdering::None).unwrap();
        (StringGroupValues::new(data_type.clone(), 0), theirs)
    }

    /// Every length on each side of the word-load cases: equal keys match, and a key that
    /// differs in any one byte does not.
    #[test]
    fn same_bytes_compares_every_byte_of_every_length() {
        for len in 0..40 {
            let a: Vec<u8> = (0..len).map(|i| i as u8 * 7 + 1).collect();
            assert!(same_bytes(&a, &a.clone()), "len {len}");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!same_bytes(&a, &b), "len {len}, byte {at}");
            }
            // A key and its own prefix: equal in every byte the shorter has.
            let longer = [a.as_slice(), &[a.last().copied().unwrap_or(1)]].concat();
            assert!(
                !same_bytes(&a, &longer) && !same_bytes(&longer, &a),
                "len {len}"
            );
        }
    }

    /// Same group ids as DataFusion's table (both number groups as first seen) and the same
    /// emitted keys, over batches that make the table grow many times.
    #[test]
    fn groups_and_keys_match_datafusion() {
        let mut rng = StdRng::seed_from_u64(7);
        for data_type in &TYPES {
            for distinct in [1, 50, 5000] {
                let (mut mine, mut theirs) = group_values(data_type);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..6 {
                    let batch = [keys(&mut rng, 3000, distinct, data_type)];
                    mine.intern(&batch, &mut a).unwrap();
                    theirs.intern(&batch, &mut b).unwrap();
                    assert_eq!(a, b, "{data_type}, {distinct} keys");
                }
                assert_eq!(mine.len(), theirs.len());
                let emitted = mine.emit(EmitTo::All).unwrap();
                assert_eq!(emitted[0].data_type(), data_type);
                assert_eq!(&emitted, &theirs.emit(EmitTo::All).unwrap());
                assert!(mine.is_empty());
                // Empty again, and usable: a new batch numbers its groups from 0.
                let batch = [keys(&mut rng, 100, distinct, data_type)];
                mine.intern(&batch, &mut a).unwrap();
                assert_eq!(a.first(), Some(&0));
            }
        }
    }

    /// `EmitTo::First(n)` emits the first `n` groups; the rest are numbered from 0 and found
    /// again by later batches.
    #[test]
    fn emitting_the_first_groups_keeps_the_rest() {
        let mut rng = StdRng::seed_from_u64(11);
        for data_type in &TYPES {
            let (mut mine, _) = group_values(data_type);
            let batch = [keys(&mut rng, 4000, 300, data_type)];
            let mut ids = Vec::new();
            mine.intern(&batch, &mut ids).unwrap();
            let all = mine.len();
            let n = all / 3;
            let first = mine.emit(EmitTo::First(n)).unwrap();
            assert_eq!(first[0].len(), n);
            assert_eq!(mine.len(), all - n);
            let mut again = Vec::new();
            mine.intern(&batch, &mut again).unwrap();
            // Rows of a kept group get its old id minus n; rows of an emitted one new groups.
            let mut emitted_ids = std::collections::HashMap::new();
            for (&old, &new) in ids.iter().zip(&again) {
                if old >= n {
                    assert_eq!(new, old - n, "{data_type}");
                } else {
                    assert_eq!(*emitted_ids.entry(old).or_insert(new), new, "{data_type}");
                    assert!(new >= all - n, "{data_type}");
                }
            }
            // Emitted first groups + the rest, in id order, are the batch's distinct keys.
            let rest = mine.emit(EmitTo::All).unwrap();
            let order: Vec<u32> = (0..all as u32).collect();
            let firsts = take(&first[0], &UInt32Array::from(order[..n].to_vec()), None).unwrap();
            assert_eq!(&firsts, &first[0]);
            assert_eq!(rest[0].len(), all - n + emitted_ids.len());
        }
    }

    #[test]
    fn wrong_columns_are_errors() {
        let (mut mine, _) = group_values(&DataType::Utf8);
        let mut ids = Vec::new();
        let large: ArrayRef = Arc::new(LargeStringArray::from(vec!["a"]));
        assert!(mine.intern(&[large], &mut ids).is_err());
        let binary: ArrayRef = Arc::new(BinaryArray::from(vec![&b"a"[..]]));
        assert!(mine
            .intern(&[Arc::clone(&binary), binary], &mut ids)
            .is_err());
        assert!(mine.intern(&[], &mut ids).is_err());
        let other: ArrayRef = Arc::new(LargeBinaryArray::from(vec![&b"a"[..]]));
        assert!(single_key(&Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", other.data_type().clone(), true),
        ]))
        .is_none());
    }
}
