#!/usr/bin/env python3
"""PyTorch takes shardyard's DLPack tensors: torch.utils.dlpack.from_dlpack on the
capsules of tests/gpu/dlpack_capi.cc (loaded with ctypes).

Usage: dlpack_torch_test.py LIBRARY. Exit 0 = pass, 77 = torch is not importable (skipped).
Checks shape, dtype and values, that the two tensors of one column share memory (no copy),
and that the batch's memory is given back exactly when torch frees the last tensor.
"""
import ctypes
import gc
import sys

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    print(f"skipped: torch is not importable by {sys.executable}")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
lib.sy_test_export_device.restype = ctypes.c_void_p
capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)


def tensor(ptr):
    return torch.utils.dlpack.from_dlpack(capsule_new(ptr, b"dltensor", None))


def expected(step, items, floats):
    return torch.arange(items * floats, dtype=torch.float32).reshape(items, floats) + step * 1000


items, floats = 6, 5
a, b = ctypes.c_void_p(), ctypes.c_void_p()
check(lib.sy_test_export_host(items, floats, ctypes.byref(a), ctypes.byref(b)) == 0, "export")
t, u = tensor(a.value), tensor(b.value)
check(t.shape == (items, floats), f"shape {tuple(t.shape)}")
check(t.dtype == torch.float32 and t.device.type == "cpu", f"{t.dtype} on {t.device}")
check(torch.equal(t, expected(7, items, floats)), f"values {t}")
check(t.data_ptr() == u.data_ptr(), "two exports of one column are not the same memory")
t[2, 3] = -1.0
check(u[2, 3].item() == -1.0, "a write through one tensor is not seen by the other")
check(lib.sy_test_live_buffers() > 0, "the batch's memory went back while tensors hold it")
del t
gc.collect()
check(lib.sy_test_live_buffers() > 0, "the batch's memory went back while a tensor holds it")
del u
gc.collect()
check(lib.sy_test_live_buffers() == 0,
      f"{lib.sy_test_live_buffers()} buffer(s) still held after torch freed both tensors")

d = tensor(lib.sy_test_export_device(items, floats))
check(torch.equal(d, expected(3, items, floats)), f"device copy values {d}")
del d
gc.collect()

if FAILS:
    print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
    sys.exit(1)
print("ok: torch", torch.__version__, "took the tensors without a copy")
