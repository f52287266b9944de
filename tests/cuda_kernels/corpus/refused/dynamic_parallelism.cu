// A parent kernel that launches a child grid per row (dynamic parallelism): refused by name.
__global__ void scale_row(float* row, int n, float f) {
    int i = threadIdx.x;
    if (i < n) row[i] *= f;
}

__global__ void scale_rows(float* m, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) scale_row<<<1, cols>>>(m + r * cols, cols, 2.0f);
}
