// pagedlab CPU executor: the device functions are in the force-included prelude.
#pragma once
#include "vector_types.h"
