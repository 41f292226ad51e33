# expect: ok
# devices: cpu
# A C++ (no CUDA) extension through load_inline: it builds, loads and runs on CPU torch,
# so the CPU suite covers kernelfix's build path and its cache end to end (the slow tier: it builds the PCH).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor relu_cpu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}
"""

relu_ext = load_inline(name="relu_cpp_ext", cpp_sources=cpp_source, functions=["relu_cpu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_cpu(x)
