//! `cityHash64(x, ...)` with ClickHouse's exact outputs.
//!
//! ClickHouse hashes with Google's CityHash **v1.0.2** (not the later versions, whose outputs
//! differ), and not every argument the same way (`FunctionsHashing.h`):
//! * strings: `CityHash64(bytes)`;
//! * integers, floats, dates and times: `intHash64(bits ^ 0x4CF2D2BAAE6DA887)`, the value's bytes
//!   zero-extended to 64 bits (so `-1` as Int32 and as Int64 hash differently, as in ClickHouse);
//! * several arguments: `Hash128to64(h_previous, h_next)`, left to right.
//!
//! NULL in any argument gives NULL. The unit tests pin outputs computed by ClickHouse 26.9
//! (through chDB 4.4.0) for every length class of the string hash and for the integer and
//! combining rules. One difference is a matter of literal types, not of the hash: ClickHouse
//! types the literal `-1` as Int8, quiver as Int64; non-negative literals hash the same.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;
const K3: u64 = 0xc949_d7c7_509e_6557;
const K_MUL: u64 = 0x9ddf_ea08_eb38_2d69;

fn fetch64(s: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(bytes) = s.get(at..at + 8) {
        word.copy_from_slice(bytes);
    }
    u64::from_le_bytes(word)
}

fn fetch32(s: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 4];
    if let Some(bytes) = s.get(at..at + 4) {
        word.copy_from_slice(bytes);
    }
    u64::from(u32::from_le_bytes(word))
}

fn rotate(v: u64, shift: u32) -> u64 {
    if shift == 0 {
        v
    } else {
        v.rotate_right(shift)
    }
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// CityHash's `Hash128to64(uint128(low, high))`, which ClickHouse also uses to combine the
/// hashes of several arguments.
pub fn hash128_to_64(low: u64, high: u64) -> u64 {
    let mut a = (low ^ high).wrapping_mul(K_MUL);
    a ^= a >> 47;
    let mut b = (high ^ a).wrapping_mul(K_MUL);
    b ^= b >> 47;
    b.wrapping_mul(K_MUL)
}

fn hash_len_0_to_16(s: &[u8]) -> u64 {
    let len = s.len();
    if len > 8 {
        let a = fetch64(s, 0);
        let b = fetch64(s, len - 8);
        // RotateByAtLeast1(b + len, len): len is 9..=16 here, so a plain rotation.
        return hash128_to_64(a, (b.wrapping_add(len as u64)).rotate_right(len as u32)) ^ b;
    }
    if len >= 4 {
        let a = fetch32(s, 0);
        return hash128_to_64((len as u64).wrapping_add(a << 3), fetch32(s, len - 4));
    }
    if len > 0 {
        let a = u32::from(s[0]);
        let b = u32::from(s[len >> 1]);
        let c = u32::from(s[len - 1]);
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K3))
            .wrapping_mul(K2);
    }
    K2
}

fn hash_len_17_to_32(s: &[u8]) -> u64 {
    let len = s.len();
    let a = fetch64(s, 0).wrapping_mul(K1);
    let b = fetch64(s, 8);
    let c = fetch64(s, len - 8).wrapping_mul(K2);
    let d = fetch64(s, len - 16).wrapping_mul(K0);
    hash128_to_64(
        rotate(a.wrapping_sub(b), 43)
            .wrapping_add(rotate(c, 30))
            .wrapping_add(d),
        a.wrapping_add(rotate(b ^ K3, 20))
            .wrapping_sub(c)
            .wrapping_add(len as u64),
    )
}

fn weak_hash_len_32_with_seeds(s: &[u8], at: usize, a: u64, b: u64) -> (u64, u64) {
    let w = fetch64(s, at);
    let x = fetch64(s, at + 8);
    let y = fetch64(s, at + 16);
    let z = fetch64(s, at + 24);
    let mut a = a.wrapping_add(w);
    let mut b = rotate(b.wrapping_add(a).wrapping_add(z), 21);
    let c = a;
    a = a.wrapping_add(x).wrapping_add(y);
    b = b.wrapping_add(rotate(a, 44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

fn hash_len_33_to_64(s: &[u8]) -> u64 {
    let len = s.len();
    let mut z = fetch64(s, 24);
    let mut a = fetch64(s, 0).wrapping_add(
        (len as u64)
            .wrapping_add(fetch64(s, len - 16))
            .wrapping_mul(K0),
    );
    let mut b = rotate(a.wrapping_add(z), 52);
    let mut c = rotate(a, 37);
    a = a.wrapping_add(fetch64(s, 8));
    c = c.wrapping_add(rotate(a, 7));
    a = a.wrapping_add(fetch64(s, 16));
    let vf = a.wrapping_add(z);
    let vs = b.wrapping_add(rotate(a, 31)).wrapping_add(c);
    a = fetch64(s, 16).wrapping_add(fetch64(s, len - 32));
    z = fetch64(s, len - 8);
    b = rotate(a.wrapping_add(z), 52);
    c = rotate(a, 37);
    a = a.wrapping_add(fetch64(s, len - 24));
    c = c.wrapping_add(rotate(a, 7));
    a = a.wrapping_add(fetch64(s, len - 16));
    let wf = a.wrapping_add(z);
    let ws = b.wrapping_add(rotate(a, 31)).wrapping_add(c);
    let r = shift_mix(
        vf.wrapping_add(ws)
            .wrapping_mul(K2)
            .wrapping_add(wf.wrapping_add(vs).wrapping_mul(K0)),
    );
    shift_mix(r.wrapping_mul(K0).wrapping_add(vs)).wrapping_mul(K2)
}

/// CityHash64 v1.0.2 of `s`.
pub fn city_hash64(s: &[u8]) -> u64 {
    let len = s.len();
    if len <= 16 {
        return hash_len_0_to_16(s);
    }
    if len <= 32 {
        return hash_len_17_to_32(s);
    }
    if len <= 64 {
        return hash_len_33_to_64(s);
    }
    let mut x = fetch64(s, 0);
    let mut y = fetch64(s, len - 16) ^ K1;
    let mut z = fetch64(s, len - 56) ^ K0;
    let mut v = weak_hash_len_32_with_seeds(s, len - 64, len as u64, y);
    let mut w = weak_hash_len_32_with_seeds(s, len - 32, (len as u64).wrapping_mul(K1), K0);
    z = z.wrapping_add(shift_mix(v.1).wrapping_mul(K1));
    x = rotate(z.wrapping_add(x), 39).wrapping_mul(K1);
    y = rotate(y, 33).wrapping_mul(K1);
    // Whole 64-byte chunks from the start; the tail was hashed above.
    let mut remaining = (len - 1) & !63usize;
    let mut at = 0usize;
    loop {
        x = rotate(
            x.wrapping_add(y)
                .wrapping_add(v.0)
                .wrapping_add(fetch64(s, at + 16)),
            37,
        )
        .wrapping_mul(K1);
        y = rotate(y.wrapping_add(v.1).wrapping_add(fetch64(s, at + 48)), 42).wrapping_mul(K1);
        x ^= w.1;
        y ^= v.0;
        z = rotate(z ^ w.0, 33);
        v = weak_hash_len_32_with_seeds(s, at, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak_hash_len_32_with_seeds(s, at + 32, z.wrapping_add(w.1), y);
        std::mem::swap(&mut z, &mut x);
        at += 64;
        remaining -= 64;
        if remaining == 0 {
            break;
        }
    }
    hash128_to_64(
        hash128_to_64(v.0, w.0)
            .wrapping_add(shift_mix(y).wrapping_mul(K1))
            .wrapping_add(z),
        hash128_to_64(v.1, w.1).wrapping_add(x),
    )
}

/// ClickHouse's `IntHash64Impl`: the MurmurHash3 finaliser of the bits xor a constant.
pub fn int_hash64(bits: u64) -> u64 {
    let mut x = bits ^ 0x4cf2_d2ba_ae6d_a887;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// The `cityHash64` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CityHash64 {
    signature: Signature,
    aliases: Vec<String>,
}

impl Default for CityHash64 {
    fn default() -> Self {
        CityHash64 {
            signature: Signature::variadic_any(Volatility::Immutable),
            aliases: vec!["cityhash64".into()],
        }
    }
}

/// Hashes every row of `array` into `out` (first argument) or combines into it.
fn hash_column(array: &ArrayRef, out: &mut [u64], first: bool) -> Result<()> {
    let mut put = |i: usize, h: u64| {
        if let Some(slot) = out.get_mut(i) {
            *slot = if first { h } else { hash128_to_64(*slot, h) };
        }
    };
    // Zero-extension of the value's own bytes, as ClickHouse's bit_cast to UInt64.
    macro_rules! ints {
        ($t:ty, $bits:ty) => {
            for (i, v) in array.as_primitive::<$t>().values().iter().enumerate() {
                put(i, int_hash64(u64::from(*v as $bits)));
            }
        };
    }
    match array.data_type() {
        DataType::Int8 => ints!(Int8Type, u8),
        DataType::Int16 => ints!(Int16Type, u16),
        DataType::Int32 | DataType::Date32 => {
            if array.data_type() == &DataType::Date32 {
                ints!(Date32Type, u32)
            } else {
                ints!(Int32Type, u32)
            }
        }
        DataType::Int64 => ints!(Int64Type, u64),
        DataType::UInt8 => ints!(UInt8Type, u8),
        DataType::UInt16 => ints!(UInt16Type, u16),
        DataType::UInt32 => ints!(UInt32Type, u32),
        DataType::UInt64 => ints!(UInt64Type, u64),
        DataType::Date64 => ints!(Date64Type, u64),
        DataType::Timestamp(TimeUnit::Second, _) => ints!(TimestampSecondType, u64),
        DataType::Timestamp(TimeUnit::Millisecond, _) => ints!(TimestampMillisecondType, u64),
        DataType::Timestamp(TimeUnit::Microsecond, _) => ints!(TimestampMicrosecondType, u64),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => ints!(TimestampNanosecondType, u64),
        DataType::Float32 => {
            for (i, v) in array
                .as_primitive::<Float32Type>()
                .values()
                .iter()
                .enumerate()
            {
                put(i, int_hash64(u64::from(v.to_bits())));
            }
        }
        DataType::Float64 => {
            for (i, v) in array
                .as_primitive::<Float64Type>()
                .values()
                .iter()
                .enumerate()
            {
                put(i, int_hash64(v.to_bits()));
            }
        }
        DataType::Utf8 => {
            for (i, v) in array.as_string::<i32>().iter().enumerate() {
                put(i, city_hash64(v.unwrap_or_default().as_bytes()));
            }
        }
        DataType::LargeUtf8 => {
            for (i, v) in array.as_string::<i64>().iter().enumerate() {
                put(i, city_hash64(v.unwrap_or_default().as_bytes()));
            }
        }
        DataType::Utf8View => {
            for (i, v) in array.as_string_view().iter().enumerate() {
                put(i, city_hash64(v.unwrap_or_default().as_bytes()));
            }
        }
        DataType::Binary => {
            for (i, v) in array.as_binary::<i32>().iter().enumerate() {
                put(i, city_hash64(v.unwrap_or_default()));
            }
        }
        other => {
            return exec_err!("cityHash64 does not support arguments of type {other} yet");
        }
    }
    Ok(())
}

impl ScalarUDFImpl for CityHash64 {
    fn name(&self) -> &str {
        "cityHash64"
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.is_empty() {
            return plan_err!("cityHash64 expects at least one argument");
        }
        Ok(DataType::UInt64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut hashes = vec![0u64; rows];
        let mut valid = vec![true; rows];
        for (position, array) in arrays.iter().enumerate() {
            if array.data_type() == &DataType::Null {
                valid.iter_mut().for_each(|v| *v = false);
                continue;
            }
            hash_column(array, &mut hashes, position == 0)?;
            if array.null_count() > 0 {
                for (i, v) in valid.iter_mut().enumerate() {
                    if array.is_null(i) {
                        *v = false;
                    }
                }
            }
        }
        let result: UInt64Array = hashes
            .into_iter()
            .zip(valid)
            .map(|(h, v)| v.then_some(h))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of ClickHouse 26.9 (chDB 4.4.0), one per length class of CityHash v1.0.2.
    #[test]
    fn strings_hash_as_in_clickhouse() {
        let cases: [(String, u64); 15] = [
            (String::new(), 11160318154034397263),
            ("a".into(), 2603192927274642682),
            ("b".into(), 4947675599669400333),
            ("abc".into(), 4220206313085259313),
            ("hello".into(), 2578220239953316063),
            ("abcdefgh".into(), 4864636163090995991),
            ("abcdefghi".into(), 7406163328168016081),
            ("x".repeat(16), 2843108347308131580),
            ("x".repeat(17), 14762337010942834261),
            ("xy".repeat(16), 533929319169206213),
            ("xyz".repeat(11), 3575133871279065357),
            ("q".repeat(64), 1686821602842854931),
            ("qr".repeat(33), 14122332854531570481),
            ("abcdefg".repeat(19), 10136348674653638927),
            ("abcdefghijk".repeat(30), 12709453820393286543),
        ];
        for (input, expected) in cases {
            assert_eq!(
                city_hash64(input.as_bytes()),
                expected,
                "length {}",
                input.len()
            );
        }
        assert_eq!(
            city_hash64(
                b"The quick brown fox jumps over the lazy dog, and keeps running for a while longer"
            ),
            3961961830261334064
        );
    }

    #[test]
    fn integers_and_combinations_hash_as_in_clickhouse() {
        assert_eq!(int_hash64(1), 10577349846663553072);
        assert_eq!(int_hash64(u64::from(u32::MAX)), 9168733277332772950); // toInt32(-1)
        assert_eq!(int_hash64(u64::MAX), 14600443904207254319); // toInt64(-1)
        assert_eq!(int_hash64(1.5f64.to_bits()), 7287324520655339053);
        assert_eq!(int_hash64(19723), 17926335993026704938); // toDate('2024-01-01')
        assert_eq!(
            hash128_to_64(int_hash64(1), int_hash64(2)),
            463667963421364848
        );
        assert_eq!(
            hash128_to_64(int_hash64(1), city_hash64(b"a")),
            3281168119317583073
        );
        assert_eq!(
            hash128_to_64(city_hash64(b"a"), city_hash64(b"b")),
            7468329322676821011
        );
        let abc = hash128_to_64(
            hash128_to_64(city_hash64(b"a"), city_hash64(b"b")),
            city_hash64(b"c"),
        );
        assert_eq!(abc, 9684406651005280037);
    }
}
