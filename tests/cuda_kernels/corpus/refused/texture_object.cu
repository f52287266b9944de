// Bilinear sampling through a texture object: refused by name.
__global__ void resample(float* out, cudaTextureObject_t img, int w, int h, float scale) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(img, x * scale + 0.5f, y * scale + 0.5f);
}
