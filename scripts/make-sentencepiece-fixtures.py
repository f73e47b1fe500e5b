#!/usr/bin/env python3
# make-sentencepiece-fixtures.py: writes the fixtures of loom's SentencePiece-style BPE tests
# (tests/data/test_bpe_tokenizer_metaspace.cpp) into tests/data/tokenizers/: tokenizer.json files
# laid out as Hugging Face's converter writes Llama 2's, Mistral's and TinyLlama's (a SentencePiece
# BPE: text with "▁" for spaces, <0xNN> byte-fallback tokens, <unk> <s> </s>), and the ids and
# decoded text Hugging Face `tokenizers` gives for them. Leaves out: running loom, and
# SentencePiece's own tokenizer.model files (loom reads the tokenizer.json beside them).
#
#   pip install tokenizers
#   scripts/gpt-corpus.sh                               # the KJV text, .data/kjv.txt
#   python3 scripts/make-sentencepiece-fixtures.py      # [--kjv FILE] [--out DIR]
#
# The texts are fixtures.json's (the KJV excerpt and the Unicode stress text that
# scripts/make-tokenizer-fixtures.py wrote) and a short one with the special tokens. The vocabulary
# (600 tokens) is trained by `tokenizers` on the KJV's first 200,000 characters with at most 60
# characters in its alphabet, so that rarer characters (all of the stress text's scripts) go
# through the byte fallback or <unk>. What it writes (about 70 KB):
#   llama2_style.json     Llama 2's legacy layout: normalizer Prepend("▁") + Replace(" ", "▁"), no
#                         pre-tokenizer (a whole stretch is one BPE word), byte_fallback, fuse_unk,
#                         decoder Replace + ByteFallback + Fuse + Strip, post-processor "<s> $A"
#   metaspace_style.json  the newer layout (transformers' legacy=False): no normalizer, pre-tokenizer
#                         Metaspace(prepend_scheme "first", split false), post-processor
#                         "<s> $A </s>"
#   metaspace_unk.json    no byte fallback: characters outside the vocabulary are <unk>, fused
#                         (fuse_unk); Metaspace(prepend_scheme "always", split true) and its decoder
#   metaspace_unk_never.json  the same without fusing, prepend_scheme "never"
#   sentencepiece_fixtures.json  per file: the ids of each text (added tokens split out, no
#                         post-processor), their decode (skip_special_tokens false), and the ids
#                         with the post-processor (add_special_tokens) of the short texts
import copy
import json
import os

import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from kjv_fixtures import parse_args

SPECIALS = ["<unk>", "<s>", "</s>"]
SHORT = {
    "specials": "<s>Hello</s> world<unk>  <s> twice<s></s>x </s>",
    "spaces": "  two leading, two trailing  ",
    "empty": "",
    "newlines": "line one\nline two\n\n\u00e9t\u00e9 \u6f22\U0001F600",
}
SEQUENCE_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def template(single):
    """A TemplateProcessing post-processor whose single template is `single` ("$A" the text)."""
    items = [{"Sequence": {"id": "A", "type_id": 0}} if s == "$A"
             else {"SpecialToken": {"id": s, "type_id": 0}} for s in single]
    pair = items + [{"Sequence": {"id": "B", "type_id": 1}}]
    used = {s: {"id": s, "ids": [SPECIALS.index(s)], "tokens": [s]} for s in single if s != "$A"}
    return {"type": "TemplateProcessing", "single": items, "pair": pair, "special_tokens": used}


def trained_pieces(kjv_path):
    """The vocabulary and merges `tokenizers` trains on the KJV's start, Metaspace-split words."""
    with open(kjv_path, encoding="utf-8") as f:
        lines = f.read()[:200000].splitlines()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=600, limit_alphabet=60, special_tokens=SPECIALS, show_progress=False))
    model = json.loads(tok.to_str())["model"]
    pieces = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if t not in SPECIALS]
    return pieces, model["merges"]


def llama2_layout(pieces, merges):
    """Llama 2's tokenizer.json layout around the trained pieces: <unk> <s> </s>, then the 256
    byte tokens, then the pieces; the legacy normalizer, byte fallback, "<s> $A"."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    vocab.update({p: 259 + i for i, p in enumerate(pieces)})
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None, "post_processor": template(["<s>", "$A"]),
        "decoder": SEQUENCE_DECODER,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                  "byte_fallback": True, "ignore_merges": False, "vocab": vocab, "merges": merges}}


def variants(base):
    """The four files: Llama 2's layout and three changes of it."""
    meta = copy.deepcopy(base)
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                             "prepend_scheme": "first", "split": False}
    meta["post_processor"] = template(["<s>", "$A", "</s>"])
    unk = copy.deepcopy(meta)
    unk["model"]["byte_fallback"] = False
    unk["model"]["vocab"] = {t: i for t, i in base["model"]["vocab"].items() if not t.startswith("<0x")}
    unk["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                            "prepend_scheme": "always", "split": True}
    unk["decoder"] = dict(unk["pre_tokenizer"])
    unk["post_processor"] = None
    never = copy.deepcopy(unk)
    never["model"]["fuse_unk"] = False
    never["pre_tokenizer"]["prepend_scheme"] = never["decoder"]["prepend_scheme"] = "never"
    return {"llama2_style.json": base, "metaspace_style.json": meta, "metaspace_unk.json": unk,
            "metaspace_unk_never.json": never}


def main():
    args = parse_args(__doc__)
    with open(os.path.join(args.out, "fixtures.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    texts.update(SHORT)
    files = variants(llama2_layout(*trained_pieces(args.kjv)))
    suites = []
    for name, layout in files.items():
        path = os.path.join(args.out, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(layout, f, ensure_ascii=False, separators=(",", ":"))
        tok = Tokenizer.from_file(path)  # what `tokenizers` makes of the file is the reference
        encoded = {t: tok.encode(text, add_special_tokens=False).ids for t, text in texts.items()}
        suites.append({
            "file": name, "made_by": f"tokenizers {tokenizers.__version__}", "ids": encoded,
            "decoded": {t: tok.decode(ids, skip_special_tokens=False) for t, ids in encoded.items()},
            "with_template": {t: tok.encode(texts[t]).ids for t in SHORT}})
    out = {"comment": "made by scripts/make-sentencepiece-fixtures.py; do not edit",
           "texts": texts, "suites": suites}
    with open(os.path.join(args.out, "sentencepiece_fixtures.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, n))
                for n in list(files) + ["sentencepiece_fixtures.json"])
    print(f"wrote {args.out}: {len(files)} tokenizer.json files and their ids, {total} bytes")


if __name__ == "__main__":
    main()
