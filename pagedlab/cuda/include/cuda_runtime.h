// pagedlab CPU executor: <cuda_runtime.h> for kernels. The device-side names (vector types,
// built-ins, intrinsics) are already in the prelude; this header adds the host API's types so
// a file that includes it and declares, but does not run, host code still compiles.
#pragma once
#include "vector_types.h"
#include "vector_functions.h"
#include "cuda_runtime_api.h"
#include "device_launch_parameters.h"
