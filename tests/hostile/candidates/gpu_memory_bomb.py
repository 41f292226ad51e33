# behaviour: GPU memory bomb: 1 GiB device buffers, touched, until the device is full
# devices: cuda
# expect: runtime_error:oom
# config: {"run_timeout_s": 15, "max_processes": 128, "output_limit_mb": 16}
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        while True:
            hoard.append(torch.empty(1 << 28, dtype=torch.float32, device=x.device).fill_(1.0))
