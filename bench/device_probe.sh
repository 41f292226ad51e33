#!/usr/bin/env bash
# What the GPU machine offers the sandbox and the profiler: printed once per device session.
echo "== versions"; python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0))"
nvcc --version | tail -1; ncu --version | tail -1; which compute-sanitizer git tmux
echo "== cpu/mem"; nproc; grep MemTotal /proc/meminfo; id -u
echo "== namespaces"; for ns in --net --mount --pid --user; do unshare $ns --fork true 2>&1 && echo "unshare $ns ok" || echo "unshare $ns FAILED"; done
unshare --net --mount --pid --fork --mount-proc python3 -c "import torch; print('cuda in namespaces:', torch.cuda.is_available(), torch.ones(1, device='cuda').item())" 2>&1 | tail -1
echo "== cgroups"; mount | grep -i cgroup | head; ls /sys/fs/cgroup | head -20
echo "== devices"; ls -la /dev/nvidia* 2>&1 | head
echo "== counters"; cat /proc/driver/nvidia/params 2>/dev/null | grep -i RmProfilingAdminOnly
echo "== kernelfix sandbox"; python3 -P -c "from kernelfix.sandbox import probe; r = probe(); print('layers:', r.layers); [print('note:', n) for n in r.notes]" 2>&1 | tail -8
