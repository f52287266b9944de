// CUDA's vector types with CUDA's sizes and alignments, and their make_* constructors.
// uint3 and dim3 live in pl_abi.h (the runtime needs them for threadIdx and blockIdx).
#pragma once
#include "pl_abi.h"

namespace pl {
// Element type and lane count of a vector type: the executor maps a `float4*` parameter to a
// float32 array and a by-value `float3` to three float32 values.
template <class T> struct vec_info { using elem = void; static constexpr int lanes = 0; };
// numpy dtype of a non-arithmetic element type ("f2" for __half), nullptr if none.
template <class T> struct numpy_code { static constexpr const char* v = nullptr; };
}  // namespace pl

#define PL_VECTOR(N, T, A, NAME, ...) \
    struct __attribute__((aligned(A))) NAME { T __VA_ARGS__; }; \
    template <> struct pl::vec_info<NAME> { using elem = T; static constexpr int lanes = N; };

PL_VECTOR(1, char, 1, char1, x)
inline char1 make_char1(char x) { return char1{x}; }
PL_VECTOR(2, char, 2, char2, x, y)
inline char2 make_char2(char x, char y) { return char2{x, y}; }
PL_VECTOR(3, char, 1, char3, x, y, z)
inline char3 make_char3(char x, char y, char z) { return char3{x, y, z}; }
PL_VECTOR(4, char, 4, char4, x, y, z, w)
inline char4 make_char4(char x, char y, char z, char w) { return char4{x, y, z, w}; }
PL_VECTOR(1, unsigned char, 1, uchar1, x)
inline uchar1 make_uchar1(unsigned char x) { return uchar1{x}; }
PL_VECTOR(2, unsigned char, 2, uchar2, x, y)
inline uchar2 make_uchar2(unsigned char x, unsigned char y) { return uchar2{x, y}; }
PL_VECTOR(3, unsigned char, 1, uchar3, x, y, z)
inline uchar3 make_uchar3(unsigned char x, unsigned char y, unsigned char z) { return uchar3{x, y, z}; }
PL_VECTOR(4, unsigned char, 4, uchar4, x, y, z, w)
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return uchar4{x, y, z, w}; }
PL_VECTOR(1, short, 2, short1, x)
inline short1 make_short1(short x) { return short1{x}; }
PL_VECTOR(2, short, 4, short2, x, y)
inline short2 make_short2(short x, short y) { return short2{x, y}; }
PL_VECTOR(3, short, 2, short3, x, y, z)
inline short3 make_short3(short x, short y, short z) { return short3{x, y, z}; }
PL_VECTOR(4, short, 8, short4, x, y, z, w)
inline short4 make_short4(short x, short y, short z, short w) { return short4{x, y, z, w}; }
PL_VECTOR(1, unsigned short, 2, ushort1, x)
inline ushort1 make_ushort1(unsigned short x) { return ushort1{x}; }
PL_VECTOR(2, unsigned short, 4, ushort2, x, y)
inline ushort2 make_ushort2(unsigned short x, unsigned short y) { return ushort2{x, y}; }
PL_VECTOR(3, unsigned short, 2, ushort3, x, y, z)
inline ushort3 make_ushort3(unsigned short x, unsigned short y, unsigned short z) { return ushort3{x, y, z}; }
PL_VECTOR(4, unsigned short, 8, ushort4, x, y, z, w)
inline ushort4 make_ushort4(unsigned short x, unsigned short y, unsigned short z, unsigned short w) { return ushort4{x, y, z, w}; }
PL_VECTOR(1, int, 4, int1, x)
inline int1 make_int1(int x) { return int1{x}; }
PL_VECTOR(2, int, 8, int2, x, y)
inline int2 make_int2(int x, int y) { return int2{x, y}; }
PL_VECTOR(3, int, 4, int3, x, y, z)
inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
PL_VECTOR(4, int, 16, int4, x, y, z, w)
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
PL_VECTOR(1, unsigned int, 4, uint1, x)
inline uint1 make_uint1(unsigned int x) { return uint1{x}; }
PL_VECTOR(2, unsigned int, 8, uint2, x, y)
inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
template <> struct pl::vec_info<uint3> { using elem = unsigned int; static constexpr int lanes = 3; };
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
PL_VECTOR(4, unsigned int, 16, uint4, x, y, z, w)
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }
PL_VECTOR(1, long, 8, long1, x)
inline long1 make_long1(long x) { return long1{x}; }
PL_VECTOR(2, long, 16, long2, x, y)
inline long2 make_long2(long x, long y) { return long2{x, y}; }
PL_VECTOR(3, long, 8, long3, x, y, z)
inline long3 make_long3(long x, long y, long z) { return long3{x, y, z}; }
PL_VECTOR(4, long, 16, long4, x, y, z, w)
inline long4 make_long4(long x, long y, long z, long w) { return long4{x, y, z, w}; }
PL_VECTOR(1, unsigned long, 8, ulong1, x)
inline ulong1 make_ulong1(unsigned long x) { return ulong1{x}; }
PL_VECTOR(2, unsigned long, 16, ulong2, x, y)
inline ulong2 make_ulong2(unsigned long x, unsigned long y) { return ulong2{x, y}; }
PL_VECTOR(3, unsigned long, 8, ulong3, x, y, z)
inline ulong3 make_ulong3(unsigned long x, unsigned long y, unsigned long z) { return ulong3{x, y, z}; }
PL_VECTOR(4, unsigned long, 16, ulong4, x, y, z, w)
inline ulong4 make_ulong4(unsigned long x, unsigned long y, unsigned long z, unsigned long w) { return ulong4{x, y, z, w}; }
PL_VECTOR(1, long long, 8, longlong1, x)
inline longlong1 make_longlong1(long long x) { return longlong1{x}; }
PL_VECTOR(2, long long, 16, longlong2, x, y)
inline longlong2 make_longlong2(long long x, long long y) { return longlong2{x, y}; }
PL_VECTOR(3, long long, 8, longlong3, x, y, z)
inline longlong3 make_longlong3(long long x, long long y, long long z) { return longlong3{x, y, z}; }
PL_VECTOR(4, long long, 16, longlong4, x, y, z, w)
inline longlong4 make_longlong4(long long x, long long y, long long z, long long w) { return longlong4{x, y, z, w}; }
PL_VECTOR(1, unsigned long long, 8, ulonglong1, x)
inline ulonglong1 make_ulonglong1(unsigned long long x) { return ulonglong1{x}; }
PL_VECTOR(2, unsigned long long, 16, ulonglong2, x, y)
inline ulonglong2 make_ulonglong2(unsigned long long x, unsigned long long y) { return ulonglong2{x, y}; }
PL_VECTOR(3, unsigned long long, 8, ulonglong3, x, y, z)
inline ulonglong3 make_ulonglong3(unsigned long long x, unsigned long long y, unsigned long long z) { return ulonglong3{x, y, z}; }
PL_VECTOR(4, unsigned long long, 16, ulonglong4, x, y, z, w)
inline ulonglong4 make_ulonglong4(unsigned long long x, unsigned long long y, unsigned long long z, unsigned long long w) { return ulonglong4{x, y, z, w}; }
PL_VECTOR(1, float, 4, float1, x)
inline float1 make_float1(float x) { return float1{x}; }
PL_VECTOR(2, float, 8, float2, x, y)
inline float2 make_float2(float x, float y) { return float2{x, y}; }
PL_VECTOR(3, float, 4, float3, x, y, z)
inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
PL_VECTOR(4, float, 16, float4, x, y, z, w)
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
PL_VECTOR(1, double, 8, double1, x)
inline double1 make_double1(double x) { return double1{x}; }
PL_VECTOR(2, double, 16, double2, x, y)
inline double2 make_double2(double x, double y) { return double2{x, y}; }
PL_VECTOR(3, double, 8, double3, x, y, z)
inline double3 make_double3(double x, double y, double z) { return double3{x, y, z}; }
PL_VECTOR(4, double, 16, double4, x, y, z, w)
inline double4 make_double4(double x, double y, double z, double w) { return double4{x, y, z, w}; }
#undef PL_VECTOR

// The 16-byte-aligned spellings CUDA 13 introduced for the 4-wide 64-bit types.
typedef long4 long4_16a;
typedef ulong4 ulong4_16a;
typedef longlong4 longlong4_16a;
typedef ulonglong4 ulonglong4_16a;
typedef double4 double4_16a;

