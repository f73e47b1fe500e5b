#!/usr/bin/env python3
"""make-hf-fixtures.py: tiny random Hugging Face checkpoints and what `transformers` computes on them.

Writes tests/nn/golden/hf/ (read by tests/nn/test_hf_gpt2*.cpp and tests/nn/test_hf_checkpoint.cpp,
which need neither Python nor network):
  gpt2/          a random GPT-2 (2 layers, n_embd 32, 4 heads, vocab 96, n_positions 64) as
                 save_pretrained writes it: config.json, generation_config.json, model.safetensors (F32)
  gpt2-bf16/     the same weights rounded to bfloat16, saved in BF16
  gpt2-sharded/  the F32 weights in shards (max_shard_size) with model.safetensors.index.json
  gpt2.txt       prompt ids, float32 logits, the loss (labels = the ids; transformers shifts them),
                 the gradients of a few named weights (in the checkpoint's names and layout),
                 and greedy generation ids
  llama/         a random Llama (2 layers, hidden 64, 4 heads, 2 key/value heads, intermediate
                 128, vocab 96, rope_theta 500000 with llama3 rope scaling, untied head) in BF16
                 (the weights are rounded to bfloat16 first, then everything is computed in float32)
  llama.txt      the same values for the Llama
  mistral/       a random Mistral (MistralForCausalLM: 2 layers, hidden 64, 4 heads, 2 key/value
                 heads, head_dim 16, intermediate 128, vocab 96, rope_theta 1e6, no sliding window
                 as Mistral 7B v0.2 and v0.3 have none) in BF16; mistral.txt its values
  llama-lora/    a PEFT LoRA adapter (r 4, alpha 8, q_proj, v_proj, o_proj and down_proj, every A and
                 B random) for llama/, as PEFT saves it; llama-lora.txt the adapted model's float32
                 logits on llama.txt's ids (PEFT's forward: base + alpha / r B A x)
  phi3/          a random Phi-3 (Phi3ForCausalLM: q, k and v in one qkv_proj, gate and up in one
                 gate_up_proj; 2 layers, hidden 64, 4 heads, 2 key/value heads, intermediate 128,
                 vocab 96, rope_theta 10000, untied) in BF16; phi3.txt its values
  qwen2/         a random Qwen2 (Qwen2ForCausalLM: as the Mistral, with biases on q, k and v, rms
                 eps 1e-6, the head tied to the embedding as Qwen2.5-0.5B's) in BF16; qwen2.txt
  bert-mlm/      a random BertForMaskedLM (2 layers, hidden 32, 4 heads, intermediate 64, vocab 100,
                 64 positions, 2 token types; dropout 0.1 in its config, evaluated without)
  bert-cls/      a BertForSequenceClassification with 3 labels sharing bert-mlm's encoder, its
                 pooler and classifier random
  bert.txt       input ids (2, 10), token type ids, an attention mask whose row 1 is padded after 6
                 tokens, MLM labels (-100 but at a few positions), transformers' float32 MLM logits
                 and loss, gradients, and the same for the classifier (labels, logits, loss,
                 gradients)
Every parameter is drawn at random (layer norms around 1, biases around 0), so a loader that skips
a tensor changes the logits. The .txt files use the format of tests/nn/golden/make_golden.py: a line
"<name> <ndim> <dim0> ...", then the values in row-major order (float32 values printed exactly).

Run from anywhere, on the CPU, with the packages from PyPI (no network is needed after that):
  python3 -m venv /tmp/venv-hf && /tmp/venv-hf/bin/pip install torch transformers safetensors peft
  /tmp/venv-hf/bin/python scripts/make-hf-fixtures.py [--only gpt2|llama|llama-lora|mistral|phi3|qwen2|bert]
(--only remakes one model's files; the others stay as committed.)
"""
import argparse
import copy
import functools
import json
import os
import shutil

import torch
import transformers
from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification, GPT2Config,
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "nn", "golden", "hf")
PROMPT_LEN, NEW_TOKENS = 6, 20  # greedy generation: prompt = the first ids of row 0
MIN_MARGIN = 1e-3  # each greedy step's best logit beats the second by this much (see check_margin)


def write_values(path, entries, header):
    with open(path, "w") as f:
        f.write(f"# {header}\n# produced by scripts/make-hf-fixtures.py with torch {torch.__version__}, "
                f"transformers {transformers.__version__}\n")
        for name, t in entries:
            t = t.detach().contiguous()
            f.write(f"{name} {t.dim()} " + " ".join(str(d) for d in t.shape) + "\n")
            if t.dtype in (torch.int64, torch.int32):
                f.write(" ".join(str(v) for v in t.reshape(-1).tolist()) + "\n")
            else:  # float32: 9 significant digits give the value back exactly
                f.write(" ".join(f"{v:.9g}" for v in t.to(torch.float32).reshape(-1).tolist()) + "\n")


def randomize(model, gen):
    """Every parameter at random: norms' weights ~ 1 + N(0, 0.1), biases ~ N(0, 0.1), the rest
    ~ N(0, 0.1), so no tensor is all zeros or all ones."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.1
            is_norm = "ln_" in name or "norm" in name.lower()  # BERT: LayerNorm
            p.copy_(1.0 + noise if is_norm and name.endswith("weight") else noise)


def save(model, name, **kwargs):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return path


def check_margin(model, seq, prompt_len):
    """Greedy ids are compared exactly, so no step may be a near tie that float32 rounding in
    another implementation could flip."""
    with torch.no_grad():
        logits = model(seq).logits[0, prompt_len - 1:-1]
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).min().item()
    assert margin > MIN_MARGIN, f"greedy margin {margin} is too small: pick another seed"
    return margin


def values(model, ids, grad_names):
    """Logits, loss (labels = ids), the named gradients, greedy generation."""
    model.eval()  # no dropout (the configs set none anyway)
    model.zero_grad()
    out = model(ids, labels=ids)
    out.loss.backward()
    params = dict(model.named_parameters())
    entries = [("ids", ids), ("logits", out.logits), ("loss", out.loss.reshape(()))]
    entries += [(f"grad.{n}", params[n].grad) for n in grad_names]
    prompt = ids[:1, :PROMPT_LEN]
    with torch.no_grad():
        seq = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                             attention_mask=torch.ones_like(prompt))
    assert seq.shape[1] == PROMPT_LEN + NEW_TOKENS, f"generation stopped early: {seq.shape}"
    margin = check_margin(model, seq, PROMPT_LEN)
    entries += [("prompt", prompt[0]), ("generated", seq[0, PROMPT_LEN:])]
    return entries, margin


# The sizes every decoder fixture shares (and the tiny Llama preset has): 2 layers, hidden 64,
# 4 heads, 2 key/value heads, intermediate 128, vocabulary 96, 128 positions, no special ids.
TINY_DECODER = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    bos_token_id=None, eos_token_id=None, pad_token_id=None)


def decoder_fixture(name, seed, make_model, grads, about):
    """A decoder's folder and values: make_model() after seeding, its random weights rounded to
    bfloat16 (the arithmetic stays float32), transformers' values on random (2, 12) ids for the
    gradients named, the folder saved in BF16, <name>.txt headed by its sizes and `about`."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model()
    randomize(model, gen)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=gen)
    entries, margin = values(model, ids, grads)
    save(copy.deepcopy(model).to(torch.bfloat16), name)
    kind = type(model).__name__.replace("ForCausalLM", "")
    write_values(os.path.join(OUT, name + ".txt"), entries,
                 f"{kind} 2 layers, hidden 64, 4 heads, 2 kv heads, intermediate 128, vocab 96, "
                 f"{about}, bfloat16 weights computed in float32 (seed {seed}); greedy margin "
                 f"{margin:.3g}")


def gpt2():
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(1234)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=96, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(cfg)
    randomize(model, gen)
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=gen)
    save(model, "gpt2")
    save(model, "gpt2-sharded", max_shard_size=50_000)  # bytes: 3 shards of the 118 kB
    grads = ["transformer.wte.weight", "transformer.h.0.attn.c_proj.weight",
             "transformer.h.1.mlp.c_proj.bias", "transformer.h.1.ln_2.weight",
             "transformer.ln_f.bias"]
    entries, margin = values(model, ids, grads)

    save(copy.deepcopy(model).to(torch.bfloat16), "gpt2-bf16")
    write_values(os.path.join(OUT, "gpt2.txt"), entries,
                 f"GPT-2 2 layers, n_embd 32, 4 heads, vocab 96, n_positions 64, random weights "
                 f"(seed 1234); greedy margin {margin:.3g}")


# The decoder fixtures: name -> (seed, the model, the gradients kept, what its header adds). A
# seed whose greedy generation has a step closer than MIN_MARGIN is skipped (Llama's 4321,
# Mistral's 777).
DECODERS = {
    "llama": (4322, lambda: LlamaForCausalLM(LlamaConfig(
        **TINY_DECODER, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
        ["model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
         "model.layers.1.input_layernorm.weight", "model.norm.weight"],
        "rope_theta 500000, llama3 rope scaling (factor 8, original 32), untied head"),
    "mistral": (778, lambda: MistralForCausalLM(MistralConfig(
        **TINY_DECODER, head_dim=16, sliding_window=None, rope_theta=1e6, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
        ["model.layers.0.self_attn.v_proj.weight",
         "model.layers.1.post_attention_layernorm.weight", "lm_head.weight"],
        "head_dim 16, rope_theta 1e6, no sliding window, untied head"),
    "phi3": (91, lambda: Phi3ForCausalLM(Phi3Config(
        **TINY_DECODER, original_max_position_embeddings=128, sliding_window=None,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)),
        ["model.layers.0.self_attn.qkv_proj.weight", "model.norm.weight"],
        "rope_theta 10000, packed qkv_proj and gate_up_proj, untied head"),
    "qwen2": (31, lambda: Qwen2ForCausalLM(Qwen2Config(
        **TINY_DECODER, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
        use_sliding_window=False)),
        ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias",
         "model.layers.1.self_attn.k_proj.bias", "model.layers.1.self_attn.v_proj.weight"],
        "rope_theta 1e6, q/k/v biases, tied head"),
}


def llama_lora(seed=55):
    """A PEFT adapter on the committed llama/ folder, and the adapted model's logits."""
    from peft import LoraConfig, get_peft_model
    gen = torch.Generator().manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(os.path.join(OUT, "llama"), dtype=torch.float32)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])
    model = get_peft_model(base, cfg)
    with torch.no_grad():  # B starts at zero in PEFT: every A and B random, so the update shows
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    model.eval()
    model.peft_config["default"].base_model_name_or_path = "llama"  # no path of this machine
    path = os.path.join(OUT, "llama-lora")
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path)
    os.remove(os.path.join(path, "README.md"))  # PEFT's model card
    ids = torch.tensor(read_ids(os.path.join(OUT, "llama.txt")))
    with torch.no_grad():
        logits = model(ids).logits
    write_values(os.path.join(OUT, "llama-lora.txt"), [("ids", ids), ("logits", logits)],
                 f"llama/ with a PEFT LoRA adapter (r 4, alpha 8, q/v/o_proj and down_proj, random "
                 f"A and B, seed {seed}), float32")


def read_ids(path):
    """The "ids" tensor of a values file (write_values' format)."""
    lines = open(path).read().splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("ids "))
    rows, cols = map(int, lines[at].split()[2:4])
    flat = list(map(int, lines[at + 1].split()))
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def bert(seed=2468):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    sizes = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                 hidden_act="gelu", layer_norm_eps=1e-12)
    cfg = BertConfig(**sizes)
    mlm = BertForMaskedLM(cfg)
    randomize(mlm, gen)
    cls = BertForSequenceClassification(BertConfig(**sizes, num_labels=3))
    randomize(cls, gen)
    cls.bert.load_state_dict(mlm.bert.state_dict(), strict=False)  # the pooler stays random
    B, T, valid = 2, 10, 6
    ids = torch.randint(1, cfg.vocab_size, (B, T), generator=gen)
    types = torch.zeros(B, T, dtype=torch.int64)
    types[0, 5:] = 1  # row 0: two segments
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, valid:] = 0  # row 1: right-padded
    ids[1, valid:] = 0  # [PAD]
    labels = torch.full((B, T), -100, dtype=torch.int64)
    for b, t in [(0, 1), (0, 4), (0, 8), (1, 2), (1, 5)]:
        labels[b, t] = torch.randint(0, cfg.vocab_size, (1,), generator=gen).item()
    cls_labels = torch.tensor([2, 0])
    entries = [("ids", ids), ("token_type_ids", types), ("attention_mask", mask),
               ("labels", labels), ("cls_labels", cls_labels)]
    for model, y, prefix, grads in [
            (mlm, labels, "mlm", ["bert.embeddings.word_embeddings.weight",
                                  "bert.embeddings.token_type_embeddings.weight",
                                  "bert.encoder.layer.0.attention.self.key.weight",
                                  "bert.encoder.layer.1.output.LayerNorm.weight",
                                  "cls.predictions.bias", "cls.predictions.transform.dense.weight"]),
            (cls, cls_labels, "cls", ["bert.encoder.layer.0.attention.self.query.bias",
                                      "bert.encoder.layer.1.intermediate.dense.weight",
                                      "bert.pooler.dense.weight", "classifier.weight"])]:
        model.eval()  # no dropout
        model.zero_grad()
        out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=y)
        out.loss.backward()
        params = dict(model.named_parameters())
        entries += [(f"{prefix}_logits", out.logits), (f"{prefix}_loss", out.loss.reshape(()))]
        entries += [(f"{prefix}_grad.{n}", params[n].grad) for n in grads]
    save(mlm, "bert-mlm")
    save(cls, "bert-cls")
    write_values(os.path.join(OUT, "bert.txt"), entries,
                 "BERT 2 layers, hidden 32, 4 heads, intermediate 64, vocab 100, 64 positions, "
                 f"random weights (seed {seed}); bert-cls shares bert-mlm's encoder, 3 labels")


def main():
    decoder = {n: functools.partial(decoder_fixture, n, *DECODERS[n]) for n in DECODERS}
    makers = {"gpt2": gpt2, "llama": decoder["llama"], "llama-lora": llama_lora,
              "mistral": decoder["mistral"], "phi3": decoder["phi3"], "qwen2": decoder["qwen2"],
              "bert": bert}
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", choices=sorted(makers), help="remake one model's fixtures")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)  # the same sums in the same order on every run
    for name, make in makers.items():
        if args.only in (None, name):
            make()
    for d in sorted(os.listdir(OUT)):
        p = os.path.join(OUT, d)
        files = sorted(os.listdir(p)) if os.path.isdir(p) else [d]
        size = sum(os.path.getsize(os.path.join(p, f) if os.path.isdir(p) else p) for f in files)
        print(f"{d}: {size} bytes ({', '.join(files)})")
    with open(os.path.join(OUT, "gpt2", "config.json")) as f:
        json.load(f)  # save_pretrained wrote valid JSON


if __name__ == "__main__":
    main()
