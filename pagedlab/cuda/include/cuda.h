// pagedlab CPU executor: <cuda.h> (driver API) types for kernels that include it.
#pragma once
#include "cuda_runtime_api.h"
#include "vector_types.h"
#ifndef CUDA_VERSION
#define CUDA_VERSION 12000
#endif
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
