"""kjv_fixtures.py: what the tokenizer fixture scripts share (scripts/make-tokenizer-fixtures.py,
scripts/make-wordpiece-fixtures.py): their two flags, --kjv (the corpus scripts/gpt-corpus.sh
fetches) and --out (the fixture folder, made if missing), and the KJV excerpt both encode.
Leaves out: the tokenizers and what each script writes.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(doc):
    """--kjv and --out; exits naming the KJV file when it is missing."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--kjv", default=os.path.join(ROOT, ".data", "kjv.txt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tokenizers"))
    args = ap.parse_args()
    if not os.path.exists(args.kjv):
        sys.exit(f"{args.kjv} is missing: run scripts/gpt-corpus.sh first")
    os.makedirs(args.out, exist_ok=True)
    return args


def kjv_excerpt(path, size=3000):
    """The KJV text's first `size` characters, cut at the last line end before."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text[: text.rindex("\n", 0, size) + 1]
