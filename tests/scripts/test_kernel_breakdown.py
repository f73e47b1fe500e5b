#!/usr/bin/env python3
"""scripts/kernel-breakdown.py on a made-up Nsight Compute CSV: each kernel lands in its class
(a cuDNN convolution is not attention, a flash attention kernel is, a batch-norm kernel is not a
reduction), the durations are converted from their units and divided by --steps, and a file
without ncu's header is an error naming it. Usage: test_kernel_breakdown.py REPO_ROOT
"""
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "kernel-breakdown.py")

HEADER = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
KERNELS = [  # name, unit, value: two steps of the same four kernels
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "usecond", "300"),
    ("void cutlass__5x_cudnn::Kernel<conv::ImplicitGemmConvolution<64>>(T1::Params)", "usecond", "50"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", "msecond", "1.5"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nsecond", "2,000,000"),
    ("void loom::bn_backward_partial_cl_kernel<loom::BFloat16, 8>(const T1 *)", "usecond", "100"),
]


def run(csv_text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(csv_text)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True,
                              text=True)
    finally:
        os.unlink(f.name)


def class_ms(out, cls):
    for line in out.splitlines():
        if line.strip().startswith(cls):
            return float(line.split()[-4])
    raise AssertionError(f"class {cls!r} missing from:\n{out}")


def main():
    rows = [HEADER]
    for step in range(2):  # IDs: step * 10 + i
        for i, (name, unit, value) in enumerate(KERNELS):
            rows.append(f'"{step * 10 + i}","{name}","gpu__time_duration.sum","{unit}","{value}"')
    r = run("==PROF== preamble\n" + "\n".join(rows) + "\n", "--steps", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    expected = {"convolution (cuDNN)": 0.35, "attention (cuDNN SDPA)": 1.5, "GEMM (cuBLASLt)": 2.0,
                "batch norm": 0.1}
    for cls, ms in expected.items():
        got = class_ms(out, cls)
        assert abs(got - ms) < 1e-6, f"{cls}: {got} ms a step, expected {ms}\n{out}"
    assert "kernel time per step: 3.95 ms" in out, out
    bad = run("no header here\n")
    assert bad.returncode != 0 and "no ncu CSV header" in bad.stderr, bad.stderr
    print("kernel-breakdown: ok")


if __name__ == "__main__":
    main()
