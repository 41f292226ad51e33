"""[any] Device memory that another process can map: the CUDA driver's virtual memory API, by ctypes.

``cuMemCreate`` with a POSIX file descriptor as its shareable handle gives an
allocation that is exported as an fd, passed over a Unix socket (SCM_RIGHTS,
which crosses PID, IPC and mount namespaces, unlike legacy CUDA IPC handles),
and mapped by the receiver into an address range of its own. The receiver never
frees an address range it reserved (``Mapping.close`` unmaps and keeps the
reservation), so no two trials' inputs ever show a candidate the same address.

Calls run on the calling thread's current context; ``ensure_context`` makes
torch's primary context current first.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

CUDA_SUCCESS = 0
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class VmmError(RuntimeError):
    """A driver call failed; the message names the call and the driver's error."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise VmmError(f"no CUDA driver library: {e}") from None


def _check(name: str, rc: int) -> None:
    if rc == CUDA_SUCCESS:
        return
    msg = ctypes.c_char_p()
    try:
        _lib().cuGetErrorString(rc, ctypes.byref(msg))
    except (AttributeError, OSError):
        pass
    text = msg.value.decode() if msg.value else f"error {rc}"
    raise VmmError(f"{name} failed: {text}")


def _call(name: str, *args) -> None:
    _check(name, getattr(_lib(), name)(*args))


_ATTR_MEMORY_CLOCK_RATE = 36  # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, kHz
_ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37  # CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, bits


def memory_attributes(device: int) -> dict[str, int]:
    """The DRAM's clock (kHz) and bus width (bits) as the driver reports them: peak bandwidth is
    2 x clock x width / 8 (double data rate)."""
    out = {}
    for key, attr in (
        ("memory_clock_khz", _ATTR_MEMORY_CLOCK_RATE),
        ("memory_bus_width", _ATTR_GLOBAL_MEMORY_BUS_WIDTH),
    ):
        value = ctypes.c_int(0)
        if _lib().cuDeviceGetAttribute(ctypes.byref(value), attr, device) == 0 and value.value > 0:
            out[key] = value.value
    return out


def ensure_context(device: int) -> None:
    """torch's primary context on ``device``, current on this thread (the driver calls need one)."""
    import torch

    torch.cuda.set_device(device)
    torch.empty(1, device=f"cuda:{device}")  # creates the primary context if torch has not yet
    ctx = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(ctx))
    if not ctx.value:
        dev = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(dev), device)
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        _call("cuCtxSetCurrent", ctx)


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return prop


@functools.lru_cache(maxsize=8)
def granularity(device: int) -> int:
    g = ctypes.c_size_t()
    prop = _prop(device)
    _call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(prop), CU_MEM_ALLOC_GRANULARITY_MINIMUM)
    return int(g.value)


def round_up(size: int, device: int) -> int:
    g = granularity(device)
    return max(g, (size + g - 1) // g * g)


class Mapping:
    """An allocation mapped into this process: ``ptr`` for ``size`` bytes, read-write on ``device``."""

    _lock = threading.Lock()

    def __init__(self, ptr: int, size: int, handle: int | None, *, device: int, keep_reservation: bool):
        self.ptr, self.size, self.device = ptr, size, device
        self._handle = handle  # released on close (the exporter's); an importer's is released at map time
        self._keep_reservation = keep_reservation
        self._closed = False

    @classmethod
    def create(cls, size: int, device: int) -> tuple["Mapping", int]:
        """A new allocation of at least ``size`` bytes, mapped here, and an fd that exports it."""
        size = round_up(size, device)
        handle = ctypes.c_ulonglong()
        prop = _prop(device)
        _call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
        try:
            fd = ctypes.c_int(-1)
            _call(
                "cuMemExportToShareableHandle",
                ctypes.byref(fd),
                handle,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                ctypes.c_ulonglong(0),
            )
            ptr = _map(handle.value, size, device)
        except BaseException:
            _lib().cuMemRelease(handle)
            raise
        return cls(ptr, size, handle.value, device=device, keep_reservation=False), fd.value

    def export(self) -> int:
        """A new fd exporting this allocation (the exporter's side only): an arena used again for another trial."""
        if self._handle is None or self._closed:
            raise ValueError("only a live allocation this process created can be exported")
        fd = ctypes.c_int(-1)
        _call(
            "cuMemExportToShareableHandle",
            ctypes.byref(fd),
            ctypes.c_ulonglong(self._handle),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            ctypes.c_ulonglong(0),
        )
        return fd.value

    @classmethod
    def open(cls, fd: int, size: int, device: int) -> "Mapping":
        """Map an allocation another process exported as ``fd`` (the fd stays the caller's)."""
        handle = ctypes.c_ulonglong()
        _call(
            "cuMemImportFromShareableHandle",
            ctypes.byref(handle),
            ctypes.c_void_p(fd),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
        try:
            ptr = _map(handle.value, size, device)
        finally:
            _lib().cuMemRelease(handle)  # the mapping holds the memory from here on
        return cls(ptr, size, None, device=device, keep_reservation=True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        # The last tensor over these bytes can die (refcount, GC) while a kernel queued on them has not
        # run yet: cuMemUnmap does not wait for it, and the kernel then faults as an illegal memory
        # access, blamed on whatever this process runs next. Seen on the H100 with several judges at
        # once, where the GPU ran a probe's fill after its arena was unmapped.
        _synchronize(self.device)
        _lib().cuMemUnmap(ctypes.c_ulonglong(self.ptr), ctypes.c_size_t(self.size))
        if not self._keep_reservation:
            _lib().cuMemAddressFree(ctypes.c_ulonglong(self.ptr), ctypes.c_size_t(self.size))
        if self._handle is not None:
            _lib().cuMemRelease(ctypes.c_ulonglong(self._handle))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _synchronize(device: int) -> None:
    """Wait for this process's work on ``device``; by the driver alone, as close may run inside GC, on
    any thread. A context already broken returns its error at once: the unmap goes ahead regardless."""
    lib = _lib()
    ctx = ctypes.c_void_p()
    if lib.cuCtxGetCurrent(ctypes.byref(ctx)) != CUDA_SUCCESS:
        return
    if ctx.value:
        lib.cuCtxSynchronize()
        return
    dev = ctypes.c_int()  # a thread with no context current: borrow the primary one torch uses, then put it back
    if (
        lib.cuDeviceGet(ctypes.byref(dev), device) != CUDA_SUCCESS
        or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != CUDA_SUCCESS
    ):
        return
    try:
        if lib.cuCtxSetCurrent(ctx) == CUDA_SUCCESS:
            lib.cuCtxSynchronize()
            lib.cuCtxSetCurrent(ctypes.c_void_p(None))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(dev)


def _map(handle: int, size: int, device: int) -> int:
    ptr = ctypes.c_ulonglong()
    _call(
        "cuMemAddressReserve",
        ctypes.byref(ptr),
        ctypes.c_size_t(size),
        ctypes.c_size_t(0),
        ctypes.c_ulonglong(0),
        ctypes.c_ulonglong(0),
    )
    try:
        _call(
            "cuMemMap",
            ptr,
            ctypes.c_size_t(size),
            ctypes.c_size_t(0),
            ctypes.c_ulonglong(handle),
            ctypes.c_ulonglong(0),
        )
        access = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        _call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
    except BaseException:
        _lib().cuMemUnmap(ptr, ctypes.c_size_t(size))
        _lib().cuMemAddressFree(ptr, ctypes.c_size_t(size))
        raise
    return int(ptr.value)


def as_tensor(mapping: Mapping, device: int):
    """The mapping's bytes as a uint8 CUDA tensor (no copy); the tensor keeps the mapping alive."""
    import torch

    class _Interface:  # __cuda_array_interface__: torch wraps the pointer and holds this object
        def __init__(self, m: Mapping):
            self.mapping = m
            self.__cuda_array_interface__ = {
                "shape": (m.size,),
                "typestr": "|u1",
                "data": (m.ptr, False),
                "version": 3,
                "strides": None,
            }

    with torch.cuda.device(device):
        return torch.as_tensor(_Interface(mapping), device=f"cuda:{device}")


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
