#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/): small valid inputs
of each format, in the byte layout loom's own writers produce, plus a few near misses. The files
are committed; this script documents how they were made (python3 make_seeds.py rewrites them)."""
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes, ordered like loom's writer
    (decreasing element size), header padded with spaces to a multiple of 8."""
    size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1, "BOOL": 1}
    order = sorted(tensors, key=lambda t: -size[t[1]])
    header, data = {}, b""
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def checkpoint():
    meta = {"loom_checkpoint_format": "2", "loom_version": "0.1.0", "loom_crc32c": "00000000",
            "extra.epoch": "1", "extra.step": "7", "rng.default.seed": "0", "rng.default.offset": "12"}
    b = safetensors([("model.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                     ("model.bias", "F32", [2], struct.pack("<2f", 0.5, -0.5)),
                     ("optim.step", "I64", [], struct.pack("<q", 7)),
                     ("scaler.scale", "F32", [1], struct.pack("<f", 65536))], meta)
    at = b.index(b'"loom_crc32c":"') + len(b'"loom_crc32c":"')
    return b[:at] + b"%08x" % crc32c(b) + b[at + 8:]


def idx(dims, data):
    return struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data


def store(msg_type, *fields):
    payload = b""
    for kind, v in fields:
        if kind == "s":
            payload += struct.pack("<I", len(v)) + v
        elif kind == "i":
            payload += struct.pack("<q", v)
        elif kind == "l":
            payload += struct.pack("<I", len(v)) + b"".join(struct.pack("<I", len(k)) + k for k in v)
    return struct.pack("<IBBHI", 0x4D4F4F4C, 1, msg_type, 0, len(payload)) + payload


def main():
    # safetensors: every dtype loom reads, a scalar, an empty tensor, metadata.
    put("safetensors", "one_f32", safetensors([("w", "F32", [2, 3], bytes(range(24)))]))
    put("safetensors", "mixed", safetensors(
        [("a", "F64", [1], bytes(8)), ("b", "BF16", [2], bytes(4)), ("c", "F16", [2, 1], bytes(4)),
         ("d", "I64", [], bytes(8)), ("e", "U8", [3], b"abc"), ("f", "I32", [0, 4], b"")],
        {"format": "pt", "note": "seed"}))
    put("safetensors", "empty_header", struct.pack("<Q", 8) + b"{}      ")
    # checkpoints: one valid file (CRC right), the harness's first byte picks "fix the CRC".
    ck = checkpoint()
    put("checkpoint", "valid_keep_crc", b"\x00" + ck)
    put("checkpoint", "valid_fix_crc", b"\x01" + ck)
    # idx: the harness's first byte is the expected ndim - 1; plain and gzip files.
    put("idx", "labels_plain", b"\x00" + idx([5], bytes([0, 1, 2, 3, 9])))
    put("idx", "images_plain", b"\x02" + idx([2, 3, 3], bytes(range(18))))
    put("idx", "images_gzip", b"\x02" + gzip.compress(idx([2, 2, 2], bytes(range(8))), mtime=0))
    put("idx", "labels_gzip", b"\x00" + gzip.compress(idx([3], b"\x01\x02\x03"), mtime=0))
    put("idx", "four_dims", b"\x03" + idx([1, 1, 2, 2], b"\x00\x01\x02\x03"))
    # store: one message of each request type, and a stream of several.
    msgs = {
        "set": store(1, ("s", b"world/rank_0"), ("s", b"10.0.0.1:1234")),
        "get": store(2, ("s", b"k"), ("i", 5000)),
        "add": store(3, ("s", b"counter"), ("i", -3)),
        "compare_set": store(4, ("s", b"k"), ("s", b""), ("s", b"v")),
        "wait": store(5, ("l", [b"a", b"b"]), ("i", 100)),
        "check": store(6, ("l", [b"a"])),
        "delete": store(7, ("s", b"k")),
        "num_keys": store(8),
        "ping": store(9),
        "auth": store(32, ("s", b"secret-token")),
        "reply_ok": store(128, ("i", 1)),
    }
    for name, m in msgs.items():
        put("store_protocol", name, m)
    put("store_protocol", "stream", b"".join(msgs[k] for k in ("auth", "set", "get", "add", "wait")))
    # flags: newline-separated arguments after the program name.
    for i, args in enumerate([
            ["--epochs", "3", "--lr", "0.01", "--batch-size", "64"],
            ["--optimizer", "sgd", "--weight-decay", "1e-4", "--label-smoothing", "0.1"],
            ["--workers=0", "--seed", "42", "--resume", "--checkpoint-dir", "/tmp/x"],
            ["--max-steps", "100", "--checkpoint-every", "10", "--log-every", "5", "--keep-last", "2"],
            ["--device", "cuda:1", "--train-limit", "512", "--allow-nonfinite", "--profile"],
            ["--lr", "nan"], ["--epochs", "0x10"], ["--help"]]):
        put("flags", "args%d" % i, "\n".join(args).encode())
    # tokenizer: the first byte picks the tokenizer.json (0 kjv_bpe, 1 qwen2_style, 2 llama2_style,
    # 3 metaspace_unk); texts from the tokenizer fixtures, marks, invalid UTF-8, special tokens.
    with open(os.path.join(HERE, "..", "data", "tokenizers", "fixtures.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    seeds = {"kjv": texts["kjv"].encode()[:400], "stress": texts["stress"].encode()[:600],
             "marks": "a\u2581b  c \u2581\u2581d e\u0301".encode(),
             "invalid": b"ab\xc3 \xff\xfe x\xe6\xbc",
             "specials": b"<s>x</s> <unk><|endoftext|> y", "empty": b""}
    for which in range(4):
        for name, text in seeds.items():
            put("tokenizer", "%d-%s" % (which, name), bytes([which]) + text)


if __name__ == "__main__":
    main()
