// Shared by the RMSNorm seeds: element storage and float conversion for the three dtypes.
//
// Elements are handled as raw bits (unsigned short for bf16/fp16, unsigned int for fp32) so that vector
// loads are plain integer loads of 2, 4, 8 or 16 bytes and the PTX stays free of library wrapper calls.
// DTYPE: 0 = bf16, 1 = fp16, 2 = fp32.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef DTYPE
#define DTYPE 0
#endif

#if DTYPE == 2
typedef unsigned int S;
#else
typedef unsigned short S;
#endif

__device__ __forceinline__ float to_f(S bits) {
#if DTYPE == 0
    return __uint_as_float(((unsigned int)bits) << 16);
#elif DTYPE == 1
    return __half2float(__ushort_as_half(bits));
#else
    return __uint_as_float(bits);
#endif
}

// Round to nearest even, as torch does when it casts the float result back to x's dtype.
__device__ __forceinline__ S from_f(float v) {
#if DTYPE == 0
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#elif DTYPE == 1
    return __half_as_ushort(__float2half_rn(v));
#else
    return __float_as_uint(v);
#endif
}
