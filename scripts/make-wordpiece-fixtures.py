#!/usr/bin/env python3
# make-wordpiece-fixtures.py: writes the fixtures of loom's WordPiece tests
# (tests/data/test_wordpiece_interop.cpp) into tests/data/tokenizers/, from Hugging Face
# `tokenizers` (the Rust library behind transformers' BertTokenizerFast): two WordPiece
# vocabularies trained on the KJV text, and the ids, token types and decoded strings `tokenizers`
# gives for the KJV excerpt and the Unicode stress text of fixtures.json, a BERT-flavoured text,
# and sentence pairs with and without truncation. Leaves out: running loom (the C++ tests compare
# against these files) and the BPE fixtures (scripts/make-tokenizer-fixtures.py).
#
#   pip install tokenizers
#   scripts/gpt-corpus.sh                          # the KJV text, .data/kjv.txt
#   python3 scripts/make-wordpiece-fixtures.py     # [--kjv FILE] [--out DIR]
#
# What it writes (about 130 KB; Note [WordPiece fixtures] in tests/data/test_wordpiece_interop.cpp
# says how the tests read them):
#   kjv_wordpiece.json        uncased (BertNormalizer lowercase, strip_accents null: bert-base-uncased's
#                             settings), 3000 tokens, trained on the KJV text and the test texts (so
#                             that their scripts have tokens: the KJV is ASCII), with BERT's
#                             post-processor ([CLS] $A [SEP], pair [CLS] $A [SEP] $B:1 [SEP]:1)
#   kjv_wordpiece_vocab.txt   the same vocabulary as a vocab.txt (one token a line, id = line)
#   kjv_wordpiece_cased.json  cased (no lowercase, no accent stripping), 2000 tokens
#   wordpiece_fixtures.json   the texts; per suite the file, the normalizer options when they differ
#                             from the file's, the ids of each text; pairs; decoded strings
# Each run trains anew, and `tokenizers`' trainer breaks ties in no fixed order: a rerun writes other
# vocabularies and ids, as valid as these. Commit the four files together.
import json
import os
import tempfile

import tokenizers
from tokenizers import BertWordPieceTokenizer, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

from kjv_fixtures import kjv_excerpt, parse_args

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# What BERT's normalizer and pre-tokenizer meet beyond fixtures.json's stress text: accents
# composed and decomposed, the dotted capital I (full lowercase: two characters), final sigma,
# sharp s, ligatures, Hangul (NFD splits syllables into jamo), CJK next to Latin, every ASCII
# punctuation character, Unicode punctuation, control and format characters, U+FFFD, NUL, the
# special tokens inside text (split out as `tokenizers` does) and lower-cased (not special), a word
# of 100 characters (kept) and of 101 (UNK).
BERT = (
    "Héllo Wörld! CAFÉ café cafe\u0301 naïve Ångström ÀÉÎÕÜ İstanbul ΣΑΣ ὈΔΥΣΣΕΎΣ straße STRASSE "
    "ﬁne Ǆemal ½ ①\n"
    "한국어 日本語のテキスト中文abc漢字def 𠀋\n"
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ¿Qué? «oui» „ja“ 1–2 — … ‧ ·\n"
    "a\u0000b c\ufffdd e\u0007f g\u200bh i\u00adj k\u2060l m\ue000n\n"
    "[CLS] the [MASK] of God [SEP] x[MASK]y [cls] [Mask] [SEP][SEP] [UNK]\n"
    + "b" * 100 + " " + "c" * 101 + " " + "ab" * 60 + "\n")

# Normalizer variants run over the uncased vocabulary (the C++ test sets the same options on the
# tokenizer it loads): the lowercase without NFD path (İ -> i + U+0307), NFD without lowercase, and
# every step off.
VARIANTS = [
    {"lowercase": True, "strip_accents": False},
    {"lowercase": False, "strip_accents": True},
    {"clean_text": False, "handle_chinese_chars": False, "lowercase": False, "strip_accents": False},
]


def kjv_verses(path, first, count):
    """Verse texts (without their numbers) from `first` on."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.startswith("  ")]
    return [ln.split(" ", 1)[1] for ln in lines[first:first + count]]


def train(files, vocab_size, lowercase):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None if lowercase else False,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2,
                                        special_tokens=SPECIALS, limit_alphabet=1000,
                                        continuing_subword_prefix="##", show_progress=False)
    tok.train(files, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def write_vocab_txt(tok, path):
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab))), "ids must be 0..n-1"
    with open(path, "w", encoding="utf-8") as f:
        for token, _ in vocab:
            f.write(token + "\n")


def with_normalizer(path, **options):
    tok = Tokenizer.from_file(path)
    base = json.loads(tok.to_str())["normalizer"]
    settings = {k: base[k] for k in ("clean_text", "handle_chinese_chars", "strip_accents", "lowercase")}
    settings.update(options)
    tok.normalizer = normalizers.BertNormalizer(**settings)
    return tok


def main():
    args = parse_args(__doc__)
    with open(os.path.join(args.out, "fixtures.json"), encoding="utf-8") as f:
        stress = json.load(f)["texts"]["stress"]  # the BPE fixtures' stress text, reused
    texts = {"kjv": kjv_excerpt(args.kjv), "stress": stress, "bert": BERT}

    # Train on the KJV text and the test texts (twice, so their characters pass min_frequency).
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as extra:
        extra.write((texts["stress"] + texts["bert"]) * 2)
    try:
        uncased = train([args.kjv, extra.name], 3000, lowercase=True)
        cased = train([args.kjv, extra.name], 2000, lowercase=False)
    finally:
        os.unlink(extra.name)
    files = {"kjv_wordpiece.json": uncased, "kjv_wordpiece_cased.json": cased}
    for name, tok in files.items():
        tok.save(os.path.join(args.out, name), pretty=False)
    vocab_txt = os.path.join(args.out, "kjv_wordpiece_vocab.txt")
    write_vocab_txt(uncased, vocab_txt)

    made_by = f"tokenizers {tokenizers.__version__}"
    suites = []

    def suite(name, file, tok, options=None):
        ids = {t: tok.encode(text, add_special_tokens=False).ids for t, text in texts.items()}
        s = {"name": name, "made_by": made_by, "file": file, "ids": ids}
        if options:
            s["options"] = options
        suites.append(s)

    for name in files:
        suite(name, name, Tokenizer.from_file(os.path.join(args.out, name)))
    # tokenizers' own reader of vocab.txt files, with BertWordPieceTokenizer's defaults
    # (bert-base-uncased's).
    from_txt = BertWordPieceTokenizer(vocab_txt)
    suite("kjv_wordpiece_vocab.txt", "kjv_wordpiece_vocab.txt", from_txt)
    assert suites[-1]["ids"] == suites[0]["ids"], "vocab.txt and tokenizer.json must agree"
    for options in VARIANTS:
        name = "kjv_wordpiece.json " + " ".join(f"{k}={v}" for k, v in options.items())
        suite(name, "kjv_wordpiece.json", with_normalizer(os.path.join(args.out, "kjv_wordpiece.json"),
                                                         **options), options)

    # Pairs through BERT's post-processor, with longest-first truncation to max_length (0: none),
    # and single texts truncated.
    tok = Tokenizer.from_file(os.path.join(args.out, "kjv_wordpiece.json"))
    v = kjv_verses(args.kjv, 0, 8)
    cases = [(v[0], v[1], 0), (v[0], v[1], 16), (v[1], v[0], 16), (v[2], v[3], 17),
             (v[4], "Amen.", 12), ("Amen.", v[4], 12), (v[5], v[6], 9), (v[6], v[7], 3),
             (v[7], None, 0), (v[7], None, 10), (v[0], v[1], 400)]
    pairs = []
    for a, b, max_length in cases:
        if max_length:
            tok.enable_truncation(max_length=max_length, strategy="longest_first")
        else:
            tok.no_truncation()
        e = tok.encode(a, b) if b is not None else tok.encode(a)
        pairs.append({"a": a, "b": b, "max_length": max_length, "ids": e.ids,
                      "type_ids": e.type_ids})
    tok.no_truncation()

    # Decoding with the WordPiece decoder (cleanup on), special tokens kept and skipped.
    decoded = []
    for name, text in texts.items():
        ids = tok.encode(text, add_special_tokens=False).ids
        decoded.append({"text": name, "with_specials": tok.decode(ids, skip_special_tokens=False),
                        "without_specials": tok.decode(ids, skip_special_tokens=True)})
    pair_ids = tok.encode(v[0], v[1]).ids
    decoded.append({"ids": pair_ids, "with_specials": tok.decode(pair_ids, skip_special_tokens=False),
                    "without_specials": tok.decode(pair_ids, skip_special_tokens=True)})

    out = {"comment": "made by scripts/make-wordpiece-fixtures.py; do not edit",
           "texts": texts, "suites": suites, "pairs": pairs, "decode": decoded}
    path = os.path.join(args.out, "wordpiece_fixtures.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    written = list(files) + ["kjv_wordpiece_vocab.txt", "wordpiece_fixtures.json"]
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in written)
    print(f"wrote {args.out}: {', '.join(written)}, {total} bytes in all")


if __name__ == "__main__":
    main()
