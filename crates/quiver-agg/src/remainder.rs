//! [`Remainder`]: `x % m` for a divisor fixed at plan time, without a hardware division per row.
//!
//! A 64-bit `div` costs 25–40 cycles on x86-64 and does not pipeline, which made the key of
//! `GROUP BY number % 10000` the most expensive part of the whole query. Division by a constant
//! is a multiplication by a precomputed reciprocal and a few shifts: Granlund and Montgomery,
//! "Division by Invariant Integers using Multiplication" (PLDI 1994), Figure 4.1, which is exact
//! for every 64-bit dividend (the method libdivide and compilers use for constant divisors).
//!
//! SQL's remainder takes the dividend's sign (`-7 % 3 = -1`, `7 % -3 = 1`), so a signed dividend
//! is reduced through its magnitude (`unsigned_abs`, which also covers `i64::MIN`) and the sign
//! put back; the divisor's sign never matters.

/// Receives `(row, remainder)` pairs from [`Remainder::for_each_unsigned`] and
/// [`Remainder::for_each_signed`].
///
/// A trait rather than a closure: its implementations mark `remainder` `#[inline(always)]`, so
/// the per-row work is compiled into each per-method loop. A closure called from several
/// loops is left out of line by LLVM, which costs a call per row.
pub trait RemainderSink {
    /// Row `row`'s remainder.
    fn remainder(&mut self, row: usize, remainder: i64);
}

/// How a remainder by one fixed divisor is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `d = 1`: every remainder is 0.
    One,
    /// `d = 2^k`: a mask.
    Mask(u64),
    /// Any other `d`: `q = (t + ((n − t) >> 1)) >> (l − 1)` with `t = mulhi(n, magic)`.
    Multiply { magic: u64, shift: u32 },
}

/// The remainder by a fixed non-zero divisor `|m|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remainder {
    divisor: u64,
    method: Method,
}

impl Remainder {
    /// The remainder by `|m|`; `None` for `m = 0`.
    pub fn new(m: i64) -> Option<Remainder> {
        let divisor = m.unsigned_abs();
        let method = match divisor {
            0 => return None,
            1 => Method::One,
            d if d.is_power_of_two() => Method::Mask(d - 1),
            d => {
                // l = ⌈log2 d⌉, in 2..=63 here: d is not a power of two and d ≤ 2^63.
                let l = 64 - (d - 1).leading_zeros();
                // magic = ⌊2^64 · (2^l − d) / d⌋ + 1 = ⌊2^(64+l) / d⌋ − 2^64 + 1, which is
                // below 2^64 because 2^(l−1) < d < 2^l; 2^(64+l) ≤ 2^127 fits a u128.
                let quotient = (1u128 << (64 + l)) / u128::from(d);
                let magic = u64::try_from(quotient - (1u128 << 64) + 1).ok()?;
                Method::Multiply {
                    magic,
                    shift: l - 1,
                }
            }
        };
        Some(Remainder { divisor, method })
    }

    /// `n mod d` for an unsigned dividend.
    #[inline(always)]
    pub fn of_unsigned(&self, n: u64) -> u64 {
        match self.method {
            Method::One => 0,
            Method::Mask(mask) => n & mask,
            Method::Multiply { magic, shift } => {
                let t = ((u128::from(n) * u128::from(magic)) >> 64) as u64;
                let q = (t + ((n - t) >> 1)) >> shift;
                n - q * self.divisor
            }
        }
    }

    /// `out[i] = values[i] mod d`, one loop per method so none branches per value.
    pub fn unsigned_into(&self, values: &[u64], out: &mut Vec<i64>) {
        out.clear();
        // Every remainder is below d ≤ 2^63, so it fits an i64.
        match self.method {
            Method::One => out.resize(values.len(), 0),
            Method::Mask(mask) => out.extend(values.iter().map(|&n| (n & mask) as i64)),
            Method::Multiply { magic, shift } => {
                let d = self.divisor;
                out.extend(values.iter().map(|&n| {
                    let t = ((u128::from(n) * u128::from(magic)) >> 64) as u64;
                    let q = (t + ((n - t) >> 1)) >> shift;
                    (n - q * d) as i64
                }))
            }
        }
    }

    /// Hands `(i, values[i] mod d)` to `sink` for every value, one loop per method, so a
    /// caller's per-row work fuses with the remainder instead of reading it back from a buffer.
    #[inline(always)]
    pub fn for_each_unsigned(&self, values: &[u64], sink: &mut impl RemainderSink) {
        match self.method {
            Method::One => (0..values.len()).for_each(|i| sink.remainder(i, 0)),
            Method::Mask(mask) => {
                for (i, &n) in values.iter().enumerate() {
                    sink.remainder(i, (n & mask) as i64)
                }
            }
            Method::Multiply { magic, shift } => {
                let d = self.divisor;
                for (i, &n) in values.iter().enumerate() {
                    let t = ((u128::from(n) * u128::from(magic)) >> 64) as u64;
                    let q = (t + ((n - t) >> 1)) >> shift;
                    // Below d ≤ 2^63: fits an i64.
                    sink.remainder(i, (n - q * d) as i64)
                }
            }
        }
    }

    /// Hands `(i, values[i] % m)` (the dividend's sign) to `sink` for every value, one loop
    /// per method.
    #[inline(always)]
    pub fn for_each_signed(&self, values: &[i64], sink: &mut impl RemainderSink) {
        match self.method {
            Method::One => (0..values.len()).for_each(|i| sink.remainder(i, 0)),
            Method::Mask(mask) => {
                for (i, &n) in values.iter().enumerate() {
                    let r = (n.unsigned_abs() & mask) as i64;
                    sink.remainder(i, if n < 0 { -r } else { r })
                }
            }
            Method::Multiply { .. } => {
                for (i, &n) in values.iter().enumerate() {
                    sink.remainder(i, self.of_signed(n))
                }
            }
        }
    }

    /// `out[i] = values[i] % m` with the dividend's sign (see [`Remainder::of_signed`]).
    pub fn signed_into(&self, values: &[i64], out: &mut Vec<i64>) {
        out.clear();
        match self.method {
            Method::One => out.resize(values.len(), 0),
            Method::Mask(mask) => out.extend(values.iter().map(|&n| {
                let r = (n.unsigned_abs() & mask) as i64;
                if n < 0 {
                    -r
                } else {
                    r
                }
            })),
            Method::Multiply { .. } => out.extend(values.iter().map(|&n| self.of_signed(n))),
        }
    }

    /// `n % m` with SQL's (and Rust's) sign rule: the result has the dividend's sign.
    #[inline(always)]
    pub fn of_signed(&self, n: i64) -> i64 {
        // The remainder's magnitude is below |m| ≤ 2^63, so it fits an i64 once negated.
        let r = self.of_unsigned(n.unsigned_abs()) as i64;
        if n < 0 {
            -r
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn divisors() -> Vec<i64> {
        let mut out = vec![
            1,
            2,
            3,
            5,
            6,
            7,
            10,
            100,
            255,
            256,
            641,
            1000,
            9999,
            10_000,
            65_535,
            65_536,
            65_537,
            1 << 31,
            (1 << 32) + 1,
            u32::MAX as i64,
            1_000_000_007,
            i64::MAX,
            i64::MAX - 1,
            (1 << 62) + 1,
            i64::MIN,
            i64::MIN + 1,
        ];
        let negated: Vec<i64> = out.iter().filter_map(|d| d.checked_neg()).collect();
        out.extend(negated);
        out
    }

    fn dividends() -> Vec<u64> {
        let mut out = vec![0, 1, 2, 3, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
        // A deterministic spread without a random-number dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(x);
            out.push(x >> 32);
            out.push(x >> 50);
        }
        out
    }

    #[test]
    fn unsigned_remainders_equal_the_division() {
        for m in divisors() {
            let rem = Remainder::new(m).expect("non-zero");
            let d = m.unsigned_abs();
            for n in dividends() {
                assert_eq!(rem.of_unsigned(n), n % d, "{n} % {d}");
                // Around multiples of d, where an off-by-one quotient would show.
                let k = n / d;
                for probe in [k * d, (k * d).wrapping_sub(1), (k * d).wrapping_add(d - 1)] {
                    assert_eq!(rem.of_unsigned(probe), probe % d, "{probe} % {d}");
                }
            }
        }
    }

    #[test]
    fn signed_remainders_take_the_dividends_sign() {
        for m in divisors() {
            let rem = Remainder::new(m).expect("non-zero");
            for n in dividends() {
                let n = n as i64;
                assert_eq!(rem.of_signed(n), n.wrapping_rem(m), "{n} % {m}");
            }
            for n in [i64::MIN, i64::MIN + 1, -1, -7, i64::MAX] {
                assert_eq!(rem.of_signed(n), n.wrapping_rem(m), "{n} % {m}");
            }
        }
        assert_eq!(Remainder::new(3).expect("3").of_signed(-7), -1);
        assert_eq!(Remainder::new(-3).expect("-3").of_signed(7), 1);
    }

    #[test]
    fn batch_remainders_equal_the_scalar_ones() {
        let unsigned = dividends();
        let signed: Vec<i64> = unsigned.iter().map(|&n| n as i64).collect();
        let mut out = Vec::new();
        for m in divisors() {
            let rem = Remainder::new(m).expect("non-zero");
            rem.unsigned_into(&unsigned, &mut out);
            let expected: Vec<i64> = unsigned
                .iter()
                .map(|&n| (n % m.unsigned_abs()) as i64)
                .collect();
            assert_eq!(out, expected, "unsigned % {m}");
            rem.signed_into(&signed, &mut out);
            let expected: Vec<i64> = signed.iter().map(|&n| n.wrapping_rem(m)).collect();
            assert_eq!(out, expected, "signed % {m}");
        }
    }

    struct Collect(Vec<(usize, i64)>);

    impl RemainderSink for Collect {
        fn remainder(&mut self, row: usize, remainder: i64) {
            self.0.push((row, remainder));
        }
    }

    #[test]
    fn per_row_remainders_equal_the_batch_ones() {
        let unsigned = dividends();
        let signed: Vec<i64> = unsigned.iter().map(|&n| n as i64).collect();
        let mut batch = Vec::new();
        for m in divisors() {
            let rem = Remainder::new(m).expect("non-zero");
            rem.unsigned_into(&unsigned, &mut batch);
            let mut rows = Collect(Vec::new());
            rem.for_each_unsigned(&unsigned, &mut rows);
            let expected: Vec<(usize, i64)> = batch.iter().copied().enumerate().collect();
            assert_eq!(rows.0, expected, "unsigned % {m}");
            rem.signed_into(&signed, &mut batch);
            let mut rows = Collect(Vec::new());
            rem.for_each_signed(&signed, &mut rows);
            let expected: Vec<(usize, i64)> = batch.iter().copied().enumerate().collect();
            assert_eq!(rows.0, expected, "signed % {m}");
        }
    }

    #[test]
    fn zero_has_no_remainder() {
        assert_eq!(Remainder::new(0), None);
    }
}
