#!/usr/bin/env python3
# The lint's own test (.ci/lint): it passes on a copy of the clean tree, and fails, naming the
# planted file, on one planted violation of each kind: an include up a floor, a kernels/cuda
# include from above kernels/, one program including another, a file over 600 lines, a function
# over 80 lines (a brace in a comment or a string not counted), a header
# that does not compile alone, a comment naming a missing path or a folder outside the
# repository, a bare file name that no file has, a Note cited at a file that does not define it
# (in a comment and in an error message) or defined nowhere, a test that mirrors no source (and
# one in a folder that mirrors none), a cross-cutting entry that no longer exists, and (with the
# format switch on) a line that differs from .clang-format. The header check's result cache
# (.ci/header_cache.py): a second run compiles nothing, nor does a clone at another path; a change
# to a header that another includes (directly or not, or under an #if) re-checks those, and a
# planted error there is caught, twice (failures are not cached); another compiler misses.
# Each case plants its violation in one copy of the tree and takes it out again afterwards.
# Leaves out: compiler warnings (the CI build's LOOM_WERROR=ON makes those fail the build), and
# the header check of the whole tree (.ci/run's lint stage runs it).
#
#   python3 tests/lint/test_lint.py <repo root>
import contextlib
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
    """The lint's exit status is rc_wanted and its output has needle (a string or a tuple)."""
    rc, out = lint(root, only, env)
    needles = () if needle is None else (needle,) if isinstance(needle, str) else needle
    ok = rc == rc_wanted and all(n in out for n in needles)
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


@contextlib.contextmanager
def planted(root, path, text="", remove=False):
    """The tree with text appended to path (a new file written), or path removed; on leaving, the
    file is as it was (and a folder made for a new file is gone)."""
    full = os.path.join(root, path)
    old = None
    if os.path.exists(full):
        with open(full, "rb") as f:
            old = f.read()
    made = full
    while not os.path.exists(os.path.dirname(made)):
        made = os.path.dirname(made)
    try:
        if remove:
            os.remove(full)
        elif old is None:
            write(root, path, text)
        else:
            append(root, path, text)
        yield
    finally:
        if old is not None:
            with open(full, "wb") as f:
                f.write(old)
        elif os.path.isdir(made):
            shutil.rmtree(made)
        elif os.path.exists(made):
            os.remove(made)


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
        with planted(clean, path, text):
            expect(name, clean, check, 1, needle)

    # Where tests live: a test that mirrors no source, a CUDA test in a folder that mirrors none, and a
    # cross-cutting entry whose file is gone all fail the tests check.
    for name, path, needle, remove in [
            ("a test that mirrors no source", "tests/core/test_no_such_source.cpp",
             "tests/core/test_no_such_source.cpp tests no source", False),
            ("a CUDA test outside its source's folder", "tests/cuda/test_cuda_stream.cpp",
             "tests/cuda/test_cuda_stream.cpp tests no source", False),
            ("a cross-cutting test that is gone", "tests/nn/test_golden.cpp",
             "lists tests/nn/test_golden.cpp, which does not exist", True)]:
        with planted(clean, path, "// A planted test.\n", remove):
            expect(name, clean, "tests", 1, needle)
    # ... and the same test under its source's path passes.
    with planted(clean, "tests/core/cuda/test_cuda_stream.cpp", "// A planted test.\n"):
        expect("a CUDA test beside its source's path passes", clean, "tests", 0)
    # Every case above took its violation out again: the tree passes as at first.
    expect("the tree after the cases passes", clean, "floors,size,functions,paths,names,notes,tests", 0)

    # Headers, on a small tree of planted headers and one real one (core/error.h) to keep this
    # fast: the top header includes the middle one, which includes the leaf, and one more under an
    # #if never taken.
    hdr = os.path.join(tmp, "headers")
    os.makedirs(os.path.join(hdr, "core"))
    shutil.copy(os.path.join(clean, "core", "error.h"), os.path.join(hdr, "core", "error.h"))
    h = "#"  # (the paths check reads what follows a # in this file as a comment)
    write(hdr, "core/leaf.h", f"// Planted.\n{h}pragma once\ninline int leaf_value() {{ return 1; }}\n")
    write(hdr, "core/cond.h", f"// Planted.\n{h}pragma once\ninline int cond_value() {{ return 2; }}\n")
    write(hdr, "core/mid.h", f"// Planted.\n{h}pragma once\n{h}if defined(LOOM_PLANTED_NEVER)\n"
          f'{h}include "core/cond.h"\n{h}endif\n{h}include "core/leaf.h"\n'
          "inline int mid_value() { return leaf_value() + 1; }\n")
    write(hdr, "core/top.h", f'// Planted.\n{h}pragma once\n{h}include "core/mid.h"\n'
          "inline int top_value() { return mid_value() + 1; }\n")
    write(hdr, "core/other.h", f"// Planted.\n{h}pragma once\ninline int other_value() {{ return 3; }}\n")
    cache = {"LOOM_LINT_CACHE": os.path.join(tmp, "cache")}
    expect("headers compile, each compiled", hdr, "headers", 0, "0 of 6 from the result cache", cache)
    expect("headers: a second run compiles none", hdr, "headers", 0, "6 of 6 from the result cache", cache)
    with planted(hdr, "core/planted.h", "// Planted.\n#pragma once\ninline size_t planted() { return 0; }\n"):
        expect("a header that does not compile alone", hdr, "headers", 1,
               ("core/planted.h does not compile", "6 of 7 from the result cache"), cache)
    clone = os.path.join(tmp, "headers-clone")
    shutil.copytree(hdr, clone)
    expect("headers: a clone at another path compiles none", clone, "headers", 0,
           "6 of 6 from the result cache", cache)
    # A change in the leaf breaks the middle and top headers, not the leaf itself: both are
    # re-checked and fail, on a second run too; the change taken out, the first results serve.
    leaf = os.path.join(hdr, "core", "leaf.h")
    with open(leaf) as f:
        text = f.read()
    with open(leaf, "w") as f:
        f.write(text.replace("leaf_value", "leaf_value_renamed"))
    for run in ("", ", again"):
        expect("headers: a header whose included header changed is re-checked" + run, hdr, "headers", 1,
               ("core/top.h does not compile", "core/mid.h does not compile"), cache)
    with open(leaf, "w") as f:
        f.write(text)
    expect("headers: the change taken out, none compiled", hdr, "headers", 0, "6 of 6 from the result cache",
           cache)
    with planted(hdr, "core/cond.h", "// A comment.\n"):  # re-checks it, the middle and the top
        expect("headers: a header included under an #if is followed", hdr, "headers", 0,
               "3 of 6 from the result cache", cache)
    # Another compiler, or the same one at another path, misses.
    wrapper = os.path.join(tmp, "bin", "cxx-wrapper")
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    write(tmp, wrapper, f'#!/bin/sh\nexec {cxx} "$@"\n')
    os.chmod(wrapper, 0o755)
    expect("headers: the compiler at another path misses", hdr, "headers", 0, "0 of 6 from the result cache",
           dict(cache, CXX=wrapper))
    expect("headers: ... and hits the next time", hdr, "headers", 0, "6 of 6 from the result cache",
           dict(cache, CXX=wrapper))
    write(tmp, wrapper, f'#!/bin/sh\n[ "$1" = --version ] && echo "planted 1.0" && exit\nexec {cxx} "$@"\n')
    expect("headers: another compiler version misses", hdr, "headers", 0, "0 of 6 from the result cache",
           dict(cache, CXX=wrapper))
    expect("headers: the result cache off", hdr, "headers", 0, "result cache off, 6 compiled",
           dict(cache, LOOM_LINT_CACHE="off"))

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
