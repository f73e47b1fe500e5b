#!/usr/bin/env python3
"""Interop of loom's safetensors files with the reference Python library (PyPI: safetensors, numpy).

  python3 safetensors_interop.py <path to safetensors_tool>

(a) loom writes a file (safetensors_tool write); the safetensors library loads it and the
    names, dtypes, shapes and bits are checked; with PyTorch installed, safetensors.torch too.
(b) the safetensors library writes the same tensors; loom loads and checks them
    (safetensors_tool check). The known tensors mirror known_tensors() in safetensors_tool.cpp.
(c) with PyTorch installed, the same through safetensors.torch both ways.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors import deserialize, safe_open, serialize_file

NOTE = "ünïcödé ✓"

# name -> (safetensors dtype, numpy dtype used for the bytes, shape, values)
KNOWN = {
    "u8": ("U8", np.uint8, [5], [0, 1, 127, 128, 255]),
    "f64": ("F64", np.float64, [2, 3], [0.5 * i - 1 for i in range(6)]),
    "f16": ("F16", np.uint16, [9], [0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0xFC00, 0x7E00]),
    "bool": ("BOOL", np.bool_, [3], [True, False, True]),
    "bf16": ("BF16", np.uint16, [2, 3], [0x3F80, 0xC040, 0x7F80, 0x0001, 0x7FC0, 0x4049]),
    "i64": ("I64", np.int64, [5], [-(2**62), -1, 0, 1, 2**62 + 3]),
    "f32": ("F32", np.float32, [3, 4], [0.25 * i - 1.5 for i in range(12)]),
    "i32": ("I32", np.int32, [2, 2], [-(2**31), 7, 2**31 - 1, 0]),
    "scalar": ("F32", np.float32, [], [3.5]),
    "empty": ("F32", np.float32, [0, 3], []),
    "transposed": ("F32", np.float32, [3, 2], [0, 3, 1, 4, 2, 5]),
}
NUMPY_DTYPE = {"U8": np.uint8, "F64": np.float64, "F16": np.float16, "BOOL": np.bool_,
               "I64": np.int64, "F32": np.float32, "I32": np.int32}
SPEC_DTYPE = {"U8": "uint8", "F64": "float64", "F16": "float16", "BOOL": "bool", "BF16": "bfloat16",
              "I64": "int64", "F32": "float32", "I32": "int32"}


def expected_bytes(name):
    _, np_dtype, shape, values = KNOWN[name]
    return np.array(values, dtype=np_dtype).reshape(shape).astype(np_dtype).tobytes()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_loom_file(path):
    with open(path, "rb") as f:
        raw = f.read()
    entries = dict(deserialize(raw))
    if set(entries) != set(KNOWN):
        fail(f"names {sorted(entries)} != {sorted(KNOWN)}")
    for name, (st_dtype, _, shape, _) in KNOWN.items():
        e = entries[name]
        if e["dtype"] != st_dtype or list(e["shape"]) != shape:
            fail(f"{name}: {e['dtype']} {e['shape']}, expected {st_dtype} {shape}")
        if bytes(e["data"]) != expected_bytes(name):
            fail(f"{name}: bytes differ")
    # The numpy front end (every dtype but BF16, which numpy lacks) and the metadata.
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        for name, (st_dtype, np_dtype, shape, values) in KNOWN.items():
            if st_dtype == "BF16":
                continue
            a = f.get_tensor(name)
            want = np.array(values, dtype=np_dtype).reshape(shape)
            if a.dtype != NUMPY_DTYPE[st_dtype] or list(a.shape) != shape:
                fail(f"numpy {name}: {a.dtype} {a.shape}")
            if a.view(np_dtype).tobytes() != want.tobytes():
                fail(f"numpy {name}: values {a} != {want}")
    if meta != {"producer": "loom", "note": NOTE}:
        fail(f"metadata {meta}")
    # numpy.load_file would fail on BF16 (numpy has no bfloat16): read a few values by name.
    with safe_open(path, framework="numpy") as f:
        if (f.get_tensor("f64")[1, 2] != 1.5 or f.get_tensor("transposed")[0, 1] != 3.0
                or f.get_tensor("scalar").shape != () or f.get_tensor("empty").shape != (0, 3)):
            fail("values read by name")
    if torch_modules() is None:
        print("PyTorch not installed: skipped the safetensors.torch checks")
        return
    torch, torch_load, _ = torch_modules()
    t = torch_load(path)
    for name, (st_dtype, _, shape, _) in KNOWN.items():
        x = t[name]
        if list(x.shape) != shape:
            fail(f"torch {name}: shape {list(x.shape)}")
        raw = x.view(torch.int16) if x.dtype in (torch.float16, torch.bfloat16) else x
        if raw.numpy().tobytes() != expected_bytes(name):
            fail(f"torch {name}: bytes differ")
    if t["bf16"][0, 1].item() != -3.0 or t["transposed"].tolist() != [[0, 3], [1, 4], [2, 5]]:
        fail("torch values")
    print("safetensors.torch loads loom's file: names, dtypes, shapes, bits ok")


def torch_modules():
    try:
        import torch
        from safetensors.torch import load_file, save_file
    except ImportError:
        return None
    return torch, load_file, save_file


def write_torch_file(path):
    torch, _, save_file = torch_modules()
    tensors = {}
    for name, (st_dtype, np_dtype, shape, values) in KNOWN.items():
        a = np.array(values, dtype=np_dtype).reshape(shape).copy(order="C")
        x = torch.from_numpy(a.view(np.int16) if np_dtype == np.uint16 else a)
        if st_dtype == "F16":
            x = x.view(torch.float16)
        elif st_dtype == "BF16":
            x = x.view(torch.bfloat16)
        tensors[name] = x
    save_file(tensors, path, metadata={"producer": "torch", "note": NOTE})


def write_python_file(path):
    arrays = {}
    for name, (st_dtype, np_dtype, shape, values) in KNOWN.items():
        arrays[name] = (st_dtype, np.array(values, dtype=np_dtype).reshape(shape).copy(order="C"))  # keeps 0-d
    metadata = {"producer": "python", "note": NOTE}
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.7: raw pointers
        specs = {name: safetensors.TensorSpec(dtype=SPEC_DTYPE[d], shape=list(a.shape), data_ptr=a.ctypes.data,
                                              data_len=a.nbytes)
                 for name, (d, a) in arrays.items()}
    else:  # older releases take the bytes
        specs = {name: {"dtype": SPEC_DTYPE[d], "shape": list(a.shape), "data": a.tobytes()}
                 for name, (d, a) in arrays.items()}
    serialize_file(specs, path, metadata=metadata)
    # Sanity: the library reads back what it wrote.
    entries = dict(deserialize(open(path, "rb").read()))
    assert entries["bf16"]["dtype"] == "BF16" and bytes(entries["bf16"]["data"]) == expected_bytes("bf16")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(64)
    tool = sys.argv[1]
    print("safetensors", safetensors.__version__, "numpy", np.__version__)
    with tempfile.TemporaryDirectory() as tmp:
        loom_path = os.path.join(tmp, "from_loom.safetensors")
        subprocess.run([tool, "write", loom_path], check=True)
        check_loom_file(loom_path)
        print("(a) the safetensors library loads loom's file: names, dtypes, shapes, bits ok")

        py_path = os.path.join(tmp, "from_python.safetensors")
        write_python_file(py_path)
        r = subprocess.run([tool, "check", py_path, "python"])
        if r.returncode != 0:
            fail(f"loom could not load the file written by the safetensors library (exit {r.returncode})")
        print("(b) loom loads the safetensors library's file: ok")

        if torch_modules() is not None:
            pt_path = os.path.join(tmp, "from_torch.safetensors")
            write_torch_file(pt_path)
            r = subprocess.run([tool, "check", pt_path, "torch"])
            if r.returncode != 0:
                fail(f"loom could not load the file written by safetensors.torch (exit {r.returncode})")
            print("(c) loom loads safetensors.torch's file: ok")


if __name__ == "__main__":
    main()
