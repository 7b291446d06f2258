//! Two SHA-256 compressions at once with the x86 SHA extensions.
//!
//! Why: one compression is a long dependency chain of `sha256rnds2`
//! instructions; running two independent nonces side by side lets the CPU
//! overlap the chains, which is worth ~1.7x over one stream on the machines we
//! measured (see docs/BENCHMARKS.md). This module is the only `unsafe` code in
//! the crate. Callers go through [`ShaNi::detect`], which checks the CPU
//! features at run time; the tests compare every result with the `sha2` crate.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// Proof that the running CPU has SHA-NI, SSSE3 and SSE4.1.
#[derive(Clone, Copy, Debug)]
pub struct ShaNi(());

impl ShaNi {
    /// `Some` when the CPU supports the instructions this module uses.
    pub fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("sha")
                && std::arch::is_x86_feature_detected!("sse2")
                && std::arch::is_x86_feature_detected!("ssse3")
                && std::arch::is_x86_feature_detected!("sse4.1")
            {
                return Some(Self(()));
            }
        }
        None
    }

    /// Compresses `a` and `b`, each starting from `state`, and returns both
    /// resulting states (not added to anything further: a full compression).
    #[inline]
    pub fn compress2(self, state: &[u32; 8], a: &[u8; 64], b: &[u8; 64]) -> ([u32; 8], [u32; 8]) {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: a `ShaNi` value exists only after `detect` saw the features.
            unsafe { compress2_x86(state, a, b) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (state, a, b);
            unreachable!("ShaNi cannot be constructed off x86_64")
        }
    }
}

#[cfg(target_arch = "x86_64")]
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// Next four message-schedule words from the previous sixteen.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn schedule(w0: __m128i, w1: __m128i, w2: __m128i, w3: __m128i) -> __m128i {
    unsafe {
        let t = _mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8(w3, w2, 4));
        _mm_sha256msg2_epu32(t, w3)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
unsafe fn compress2_x86(state: &[u32; 8], a: &[u8; 64], b: &[u8; 64]) -> ([u32; 8], [u32; 8]) {
    // Byte order: SHA-256 reads big-endian words.
    let bswap = _mm_set_epi64x(0x0c0d0e0f_08090a0b, 0x04050607_00010203);
    let load = |block: &[u8; 64], i: usize| unsafe {
        _mm_shuffle_epi8(_mm_loadu_si128(block.as_ptr().add(16 * i).cast()), bswap)
    };

    // The rounds instruction wants the state as (A,B,E,F) and (C,D,G,H).
    let (abef0, cdgh0) = unsafe {
        let dcba = _mm_loadu_si128(state.as_ptr().cast());
        let hgfe = _mm_loadu_si128(state.as_ptr().add(4).cast());
        let cdab = _mm_shuffle_epi32(dcba, 0xB1);
        let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
        (_mm_alignr_epi8(cdab, efgh, 8), _mm_blend_epi16(efgh, cdab, 0xF0))
    };

    let mut wa = [load(a, 0), load(a, 1), load(a, 2), load(a, 3)];
    let mut wb = [load(b, 0), load(b, 1), load(b, 2), load(b, 3)];
    let (mut abef_a, mut cdgh_a, mut abef_b, mut cdgh_b) = (abef0, cdgh0, abef0, cdgh0);

    // Four rounds per step; the two streams interleave so their latency overlaps.
    macro_rules! step {
        ($i:expr) => {{
            const I: usize = $i;
            if I >= 4 {
                wa[I % 4] = unsafe { schedule(wa[I % 4], wa[(I + 1) % 4], wa[(I + 2) % 4], wa[(I + 3) % 4]) };
                wb[I % 4] = unsafe { schedule(wb[I % 4], wb[(I + 1) % 4], wb[(I + 2) % 4], wb[(I + 3) % 4]) };
            }
            let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * I).cast()) };
            let ta = _mm_add_epi32(wa[I % 4], k);
            let tb = _mm_add_epi32(wb[I % 4], k);
            cdgh_a = _mm_sha256rnds2_epu32(cdgh_a, abef_a, ta);
            cdgh_b = _mm_sha256rnds2_epu32(cdgh_b, abef_b, tb);
            abef_a = _mm_sha256rnds2_epu32(abef_a, cdgh_a, _mm_shuffle_epi32(ta, 0x0E));
            abef_b = _mm_sha256rnds2_epu32(abef_b, cdgh_b, _mm_shuffle_epi32(tb, 0x0E));
        }};
    }
    step!(0);
    step!(1);
    step!(2);
    step!(3);
    step!(4);
    step!(5);
    step!(6);
    step!(7);
    step!(8);
    step!(9);
    step!(10);
    step!(11);
    step!(12);
    step!(13);
    step!(14);
    step!(15);

    let finish = |abef: __m128i, cdgh: __m128i| -> [u32; 8] {
        let abef = _mm_add_epi32(abef, abef0);
        let cdgh = _mm_add_epi32(cdgh, cdgh0);
        let feba = _mm_shuffle_epi32(abef, 0x1B);
        let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
        let dcba = _mm_blend_epi16(feba, dchg, 0xF0);
        let hgef = _mm_alignr_epi8(dchg, feba, 8);
        let mut out = [0u32; 8];
        unsafe {
            _mm_storeu_si128(out.as_mut_ptr().cast(), dcba);
            _mm_storeu_si128(out.as_mut_ptr().add(4).cast(), hgef);
        }
        out
    };
    (finish(abef_a, cdgh_a), finish(abef_b, cdgh_b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_random_block(seed: u64) -> [u8; 64] {
        // xorshift: deterministic and good enough to cover every byte value.
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut block = [0u8; 64];
        for byte in &mut block {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        block
    }

    #[test]
    fn two_way_compression_equals_the_sha2_crate() {
        let Some(shani) = ShaNi::detect() else {
            // Not a silent pass: detection must agree with the CPU, so a
            // machine with the extensions never skips the comparison (the
            // portable path it then uses is compared by `search::tests`).
            #[cfg(target_arch = "x86_64")]
            assert!(
                !(std::arch::is_x86_feature_detected!("sha")
                    && std::arch::is_x86_feature_detected!("ssse3")
                    && std::arch::is_x86_feature_detected!("sse4.1")),
                "the CPU has SHA extensions, yet detect() offers none"
            );
            return;
        };
        let mut state =
            [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
        for seed in 0..500u64 {
            let a = pseudo_random_block(seed);
            let b = pseudo_random_block(seed + 10_000);
            let (got_a, got_b) = shani.compress2(&state, &a, &b);
            let mut want_a = state;
            sha2::block_api::compress256(&mut want_a, &[a]);
            let mut want_b = state;
            sha2::block_api::compress256(&mut want_b, &[b]);
            assert_eq!(got_a, want_a, "block a, seed {seed}");
            assert_eq!(got_b, want_b, "block b, seed {seed}");
            state = got_a; // walk through varied starting states too
        }
    }
}
