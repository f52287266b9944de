// pagedlab CPU executor: <cuComplex.h>. Complex numbers are float2/double2, as in CUDA; the
// division and absolute value scale their operands as CUDA's do, so they do not overflow early.
#pragma once
#include <cmath>
#include "vector_types.h"

typedef float2 cuFloatComplex;
typedef double2 cuDoubleComplex;
typedef cuFloatComplex cuComplex;

inline float cuCrealf(cuFloatComplex x) { return x.x; }
inline float cuCimagf(cuFloatComplex x) { return x.y; }
inline cuFloatComplex make_cuFloatComplex(float r, float i) { return cuFloatComplex{r, i}; }
inline cuFloatComplex make_cuComplex(float r, float i) { return cuFloatComplex{r, i}; }
inline cuFloatComplex cuConjf(cuFloatComplex x) { return cuFloatComplex{x.x, -x.y}; }
inline cuFloatComplex cuCaddf(cuFloatComplex a, cuFloatComplex b) { return {a.x + b.x, a.y + b.y}; }
inline cuFloatComplex cuCsubf(cuFloatComplex a, cuFloatComplex b) { return {a.x - b.x, a.y - b.y}; }
inline cuFloatComplex cuCmulf(cuFloatComplex a, cuFloatComplex b) {
    return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x};
}
inline cuFloatComplex cuCdivf(cuFloatComplex a, cuFloatComplex b) {
    float s = std::fabs(b.x) + std::fabs(b.y), inv = 1.0f / s;
    float ar = a.x * inv, ai = a.y * inv, br = b.x * inv, bi = b.y * inv;
    float d = 1.0f / (br * br + bi * bi);
    return {(ar * br + ai * bi) * d, (ai * br - ar * bi) * d};
}
inline float cuCabsf(cuFloatComplex x) { return std::hypot(x.x, x.y); }
inline cuFloatComplex cuCfmaf(cuFloatComplex x, cuFloatComplex y, cuFloatComplex d) {
    return cuCaddf(cuCmulf(x, y), d);
}

inline double cuCreal(cuDoubleComplex x) { return x.x; }
inline double cuCimag(cuDoubleComplex x) { return x.y; }
inline cuDoubleComplex make_cuDoubleComplex(double r, double i) { return cuDoubleComplex{r, i}; }
inline cuDoubleComplex cuConj(cuDoubleComplex x) { return cuDoubleComplex{x.x, -x.y}; }
inline cuDoubleComplex cuCadd(cuDoubleComplex a, cuDoubleComplex b) { return {a.x + b.x, a.y + b.y}; }
inline cuDoubleComplex cuCsub(cuDoubleComplex a, cuDoubleComplex b) { return {a.x - b.x, a.y - b.y}; }
inline cuDoubleComplex cuCmul(cuDoubleComplex a, cuDoubleComplex b) {
    return {a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x};
}
inline cuDoubleComplex cuCdiv(cuDoubleComplex a, cuDoubleComplex b) {
    double s = std::fabs(b.x) + std::fabs(b.y), inv = 1.0 / s;
    double ar = a.x * inv, ai = a.y * inv, br = b.x * inv, bi = b.y * inv;
    double d = 1.0 / (br * br + bi * bi);
    return {(ar * br + ai * bi) * d, (ai * br - ar * bi) * d};
}
inline double cuCabs(cuDoubleComplex x) { return std::hypot(x.x, x.y); }
inline cuFloatComplex cuComplexDoubleToFloat(cuDoubleComplex c) { return {(float)c.x, (float)c.y}; }
inline cuDoubleComplex cuComplexFloatToDouble(cuFloatComplex c) { return {(double)c.x, (double)c.y}; }
inline cuDoubleComplex cuCfma(cuDoubleComplex x, cuDoubleComplex y, cuDoubleComplex d) {
    return cuCadd(cuCmul(x, y), d);
}
