"""[judge] Reading a candidate's kernel source (CUDA C++ in its strings, Triton by its AST) for what the GPU tools
cannot see: read-modify-writes of global memory that several threads reach (``races``) and what an atomic is used
for (``atomics``)."""
