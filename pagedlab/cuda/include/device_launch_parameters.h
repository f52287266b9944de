// pagedlab CPU executor: threadIdx, blockIdx, blockDim, gridDim and warpSize come from the
// force-included prelude; this header exists so `#include <device_launch_parameters.h>` works.
#pragma once
#include "vector_types.h"
