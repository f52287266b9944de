// pagedlab CPU executor: make_float4 & co. are defined with the types in vector_types.h.
#pragma once
#include "vector_types.h"
