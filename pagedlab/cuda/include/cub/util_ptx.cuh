// pagedlab CPU executor: CUB's per-primitive header; everything is in cub.cuh.
#pragma once
#include "cub.cuh"
