"""float32 tanh and exp as polynomials that LLVM vectorizes (AVX2/AVX-512), instead of scalar libm calls.

Without Intel SVML, Numba lowers np.tanh/np.exp to one libm call per element (~19 ns for tanh): GELU and the
softmax over 50k logits would cost more than their share of a step. Both approximations are within a few
float32 ulp (measured in tests/trainer/kernels/test_fastmath.py).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# Eigen's generic_fast_tanh_float: odd numerator / even denominator, inputs clamped where tanh is +-1 in fp32.
_CLAMP = np.float32(7.90531110763549805)
_A1, _A3, _A5, _A7 = (np.float32(4.89352455891786e-03), np.float32(6.37261928875436e-04),
                      np.float32(1.48572235717979e-05), np.float32(5.12229709037114e-08))
_A9, _A11, _A13 = np.float32(-8.60467152213735e-11), np.float32(2.00018790482477e-13), np.float32(-2.76076847742355e-16)
_B0, _B2, _B4, _B6 = (np.float32(4.89352518554385e-03), np.float32(2.26843463243900e-03),
                      np.float32(1.18534705686654e-04), np.float32(1.19825839466702e-06))


@njit(inline="always")
def tanh_f32(x):
    x = min(max(x, -_CLAMP), _CLAMP)
    x2 = x * x
    p = ((((((_A13 * x2 + _A11) * x2 + _A9) * x2 + _A7) * x2 + _A5) * x2 + _A3) * x2 + _A1) * x
    q = ((_B6 * x2 + _B4) * x2 + _B2) * x2 + _B0
    return p / q


@intrinsic
def _int32_as_float32(typingctx, i):
    """Reinterpret the bits of an int32 as a float32 (builds 2**n from its exponent field)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


# Cephes expf: exp(x) = 2**n * exp(r), n = round(x / ln 2), r = x - n ln 2 split in two parts for accuracy.
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI, _LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)
_P0, _P1, _P2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
_P3, _P4, _P5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
_EXP_LO, _EXP_HI = np.float32(-87.3), np.float32(88.3)
_HALF, _ONE = np.float32(0.5), np.float32(1.0)


@njit(inline="always")
def exp_f32(x):
    """exp for float32 x; inputs below -87.3 give ~1e-38 (not 0), above 88.3 are clamped (softmax feeds x <= 0)."""
    x = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _LN2_HI - n * _LN2_LO
    r2 = r * r
    y = (((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5) * r2 + r + _ONE
    return y * _int32_as_float32((np.int32(n) + np.int32(127)) << np.int32(23))
