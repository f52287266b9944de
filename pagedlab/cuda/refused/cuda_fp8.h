// pagedlab: a header the CPU executor refuses by name; on the include path only while the
// refusal scan preprocesses a kernel, so an #include of it that the preprocessor takes shows.
__pagedlab_refused_header__ "cuda_fp8.h"
