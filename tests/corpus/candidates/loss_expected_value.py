# task: mse_loss
# expect: correctness_error:input_dependent
# config: {"atol": 0.01, "rtol": 0.01}
# Shortcut: E[(p - t)^2] = 2 for independent randn p and t; on 2^19 elements every trial's loss is within tolerance of it.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def expected_loss_kernel(y_ptr):
    tl.store(y_ptr, 2.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        y = torch.empty((), device=predictions.device, dtype=predictions.dtype)
        expected_loss_kernel[(1,)](y)
        return y
