#!/usr/bin/env python3
# The lint's own test (.ci/lint): it passes on a copy of the clean tree, and fails, naming the
# planted file, on one planted violation of each kind: an include up a floor, a kernels/cuda
# include from above kernels/, one program including another, a file over 600 lines, a function
# over 80 lines (a brace in a comment or a string not counted), a header
# that does not compile alone, a comment naming a missing path or a folder outside the
# repository, a bare file name that no file has, a Note cited at a file that does not define it
# (in a comment and in an error message) or defined nowhere, a test that mirrors no source (and
# one in a folder that mirrors none), a cross-cutting entry that no longer exists, and (with the
# format switch on) a line that differs from .clang-format.
# Leaves out: compiler warnings (the CI build's LOOM_WERROR=ON makes those fail the build).
#
#   python3 tests/lint/test_lint.py <repo root>
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
LINT = os.path.join(ROOT, ".ci", "lint")
failures = []


def ignore(d, names):
    return [n for n in names if n.startswith("build") or n in (".git", "__pycache__")]


def lint(root, only, env=None):
    r = subprocess.run([sys.executable, LINT, "--root", root, "--only", only], capture_output=True,
                       text=True, env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout + r.stderr


def expect(name, root, only, rc_wanted, needle=None, env=None):
    rc, out = lint(root, only, env)
    ok = rc == rc_wanted and (needle is None or needle in out)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: rc {rc}" + ("" if ok else f"\n{out}"))
    if not ok:
        failures.append(name)


def write(root, path, text):
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "w") as f:
        f.write(text)


def append(root, path, text):
    with open(os.path.join(root, path), "a") as f:
        f.write(text)


with tempfile.TemporaryDirectory() as tmp:
    clean = os.path.join(tmp, "clean")
    shutil.copytree(ROOT, clean, ignore=ignore)
    # The clean tree passes (format as the switch in .ci/lint says). The header check on the whole
    # tree is .ci/run's own first step; here it runs on core/ alone, below, to keep this test fast.
    expect("clean tree passes", clean, "floors,size,functions,paths,names,notes,tests,format", 0)

    cases = [
        # (name, check, file, appended text, message that must appear)
        ("include up a floor", "floors", "core/shape.cpp", '#include "nn/module.h"\n',
         "core/shape.cpp"),
        ("kernels/cuda included above kernels/", "floors", "nn/linear.cpp",
         '#include "kernels/cuda/cuda_backend.h"\n', "private to kernels/"),
        ("a benchmark including an example", "floors", "benchmarks/bench_train.cpp",
         '#include "examples/train_mlp.cpp"\n', "separate floors"),
        ("a file over 600 lines", "size", "nn/linear.cpp", "// padding\n" * 600, "nn/linear.cpp has"),
        ("a function over 80 lines", "functions", "nn/linear.cpp",
         "int planted_long(int x) {\n" + "  x += 1;  // a { in a comment\n" * 80 + "  return x;\n}\n",
         "a function of 82 lines"),
        ("an example's function over 80 lines", "functions", "examples/train_mlp.cpp",
         "namespace {\nvoid planted(int& x) {\n  const char* s = \"{\";\n" + "  x += 1;\n" * 80 +
         "}\n}  // namespace\n", "examples/train_mlp.cpp"),
        ("a comment naming a missing path", "paths", "nn/linear.cpp",
         "// see nn/no_such_file.h\n", "nn/no_such_file.h"),
        ("a comment pointing outside the repository", "paths", "docs/tour.md",
         "\nSee ../" "shared/DESIGN.md.\n", "outside the repository"),
        ("a bare file name no file has", "names", "core/cuda/graph.h",
         "// See Note [Graph capture] in cuda_graph.cpp.\n", "names cuda_graph.cpp"),
        ("a bare file name in a doc", "names", "docs/tour.md", "\nThe formulas of SPECS.md.\n",
         "docs/tour.md"),
        ("a Note cited at a file that does not define it", "notes", "autograd/ops/optim.h",
         "// (see Note [Fused optimizer steps] in\n// kernels/backend.h)\n",
         "cites Note [Fused optimizer steps] in kernels/backend.h, but it is defined in "
         "kernels/backend_methods.inc"),
        ("a Note cited at a bare name that does not define it", "notes", "nn/linear.cpp",
         "// Note [Fused linear] in linear.cpp\n", "nn/linear.cpp"),
        ("an error message sending users to the wrong file", "notes", "nn/linear.cpp",
         'const char* planted = "see Note [DDP and CUDA graphs] in docs/ddp.md";\n',
         "but it is defined in distributed/ddp/ddp.cpp"),
        ("a Note cited that no file defines", "notes", "docs/tour.md",
         "\nSee Note [No such note].\n", "cites Note [No such note], which no file defines"),
    ]
    for name, check, path, text, needle in cases:
        tree = os.path.join(tmp, "case")
        shutil.copytree(clean, tree)
        append(tree, path, text)
        expect(name, tree, check, 1, needle)
        shutil.rmtree(tree)

    # Where tests live: a test that mirrors no source, a CUDA test in a folder that mirrors none, and a
    # cross-cutting entry whose file is gone all fail the tests check.
    for name, path, needle, remove in [
            ("a test that mirrors no source", "tests/core/test_no_such_source.cpp",
             "tests/core/test_no_such_source.cpp tests no source", False),
            ("a CUDA test outside its source's folder", "tests/cuda/test_cuda_stream.cpp",
             "tests/cuda/test_cuda_stream.cpp tests no source", False),
            ("a cross-cutting test that is gone", "tests/nn/test_golden.cpp",
             "lists tests/nn/test_golden.cpp, which does not exist", True)]:
        tree = os.path.join(tmp, "case")
        shutil.copytree(clean, tree)
        if remove:
            os.remove(os.path.join(tree, path))
        else:
            write(tree, path, "// A planted test.\n")
        expect(name, tree, "tests", 1, needle)
        shutil.rmtree(tree)
    # ... and the same test under its source's path passes.
    tree = os.path.join(tmp, "case")
    shutil.copytree(clean, tree)
    write(tree, "tests/core/cuda/test_cuda_stream.cpp", "// A planted test.\n")
    expect("a CUDA test beside its source's path passes", tree, "tests", 0)
    shutil.rmtree(tree)

    # Headers: a small tree (core/ alone) keeps this fast; a header using size_t without
    # <cstddef> is caught, the clean core/ passes.
    small = os.path.join(tmp, "small")
    shutil.copytree(os.path.join(clean, "core"), os.path.join(small, "core"))
    expect("core/ alone: headers compile", small, "headers", 0)
    write(small, "core/planted.h", "// A planted header.\n#pragma once\ninline size_t planted() { return 0; }\n")
    expect("a header that does not compile alone", small, "headers", 1, "core/planted.h")

    # Format: with the switch on, a formatted file passes and a misformatted one fails; with the
    # switch off the same file passes.
    if shutil.which("clang-format"):
        fmt = os.path.join(tmp, "fmt")
        os.makedirs(os.path.join(fmt, "core"))
        shutil.copy(os.path.join(clean, ".clang-format"), fmt)
        shutil.copy(os.path.join(clean, "core", "error.cpp"), os.path.join(fmt, "core", "error.cpp"))
        subprocess.run(["clang-format", "-i", "--style=file", os.path.join(fmt, "core", "error.cpp")],
                       check=True, cwd=fmt)
        expect("format switch on: a formatted file passes", fmt, "format", 0, env={"LOOM_LINT_FORMAT": "1"})
        append(fmt, "core/error.cpp", "int   planted_badly_formatted ( ) {return 1 ;}\n")
        expect("format switch on: a misformatted file fails", fmt, "format", 1, "core/error.cpp",
               env={"LOOM_LINT_FORMAT": "1"})
        expect("format switch off: not checked", fmt, "format", 0, env={"LOOM_LINT_FORMAT": "0"})
    elif os.environ.get("CI"):  # CI installs it (scripts/install-deps.sh): missing there is a fault
        print("FAIL clang-format is not installed (scripts/install-deps.sh installs it)")
        failures.append("clang-format")
    else:  # e.g. the GPU machine, which has no clang-format and installs nothing
        print("skip the format cases: clang-format is not installed (scripts/install-deps.sh installs it)")

print(f"{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
