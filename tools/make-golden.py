#!/usr/bin/env python3
"""Golden fixtures from Hugging Face transformers for tests/test_golden_transformers.cpp.

    python3 tools/make-golden.py [OUT_DIR]      (default tests/fixtures/golden)

Builds small random OPT and LLaMA models with transformers' own classes (pre- and
post-LayerNorm OPT with a projection dim; LLaMA with grouped-query attention, untied
head; LLaMA with llama3 rope scaling and a tied head), saves each with save_pretrained
(config.json + model.safetensors), and records for fixed token-id prompts:
  - logits_fp32.npy  float32 [prompts, steps, vocab]: transformers' fp32 logits on the
    CPU at the last position of each of `steps` greedy steps (the prompt's last position,
    then each generated token's);
  - golden.json      the prompts, transformers' fp32 CPU greedy tokens, and where a GPU
    is present its fp32 and fp16 GPU greedy tokens with their agreement and largest
    logit error against the CPU run, plus the versions used.
Greedy decoding is a plain loop over the model's forward with its KV cache (first
argmax, no end-of-sequence stop), the same rule the engine follows with ignore_eos.

Needs torch and transformers (the script records their versions); runs in seconds.
Weights are redrawn after construction with a fixed torch.Generator so that greedy
choices are not near-ties: embeddings N(0, 1), matrices N(0, 1/in), norm weights
1 + 0.1 N(0, 1), biases and learned positions 0.1 N(0, 1).
"""
import inspect
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

STEPS = 16
VOCAB = 256
PROMPT_LENGTHS = (1, 9, 40)


def opt_case(name, seed, post_ln, proj_dim):
    config = OPTConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                       max_position_embeddings=128, word_embed_proj_dim=proj_dim, do_layer_norm_before=not post_ln,
                       enable_bias=True, activation_function="relu", dropout=0.0, attention_dropout=0.0,
                       bos_token_id=2, eos_token_id=2, pad_token_id=1)
    return name, seed, config, OPTForCausalLM


def llama_case(name, seed, heads, kv_heads, tie, rope):
    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128,
                  rms_norm_eps=1e-5, tie_word_embeddings=tie, hidden_act="silu", bos_token_id=1, eos_token_id=2)
    theta = rope.pop("rope_theta")
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers >= 5
        kwargs["rope_parameters"] = dict(rope_type=rope.pop("rope_type", "default"), rope_theta=theta, **rope)
    else:
        kwargs["rope_theta"] = theta
        if rope:
            kwargs["rope_scaling"] = rope
    return name, seed, LlamaConfig(**kwargs), LlamaForCausalLM


CASES = [
    opt_case("opt_pre_ln", 101, post_ln=False, proj_dim=64),
    opt_case("opt_post_ln_projection", 102, post_ln=True, proj_dim=32),
    llama_case("llama_gqa_untied", 103, heads=8, kv_heads=2, tie=False, rope=dict(rope_theta=10000.0)),
    # head_dim 16 and an original context of 64: the rotary wavelengths 6.3, 32 and 166+
    # fall in llama3's high, middle and low frequency bands.
    llama_case("llama3_rope_tied", 104, heads=4, kv_heads=2, tie=True,
               rope=dict(rope_theta=500000.0, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=64)),
]


def redraw_weights(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied head is listed once, as the embedding
            x = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith(("norm.weight", "layer_norm.weight", "layernorm.weight")):
                x = 1.0 + 0.1 * x
            elif name.endswith(".bias") or "embed_positions" in name:
                x = 0.1 * x
            elif p.dim() == 2 and "embed_tokens" not in name:
                x = x / math.sqrt(p.shape[1])
            p.copy_(x)


def prompts_for(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]


@torch.no_grad()
def greedy(model, prompt, device):
    """STEPS greedy tokens and the float32 logits that chose each one."""
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    tokens, logits = [], []
    for step in range(STEPS):
        last = out.logits[0, -1].float()
        logits.append(last.cpu())
        token = int(torch.argmax(last))
        tokens.append(token)
        if step + 1 < STEPS:
            out = model(input_ids=torch.tensor([[token]], device=device), past_key_values=out.past_key_values,
                        use_cache=True)
    return tokens, torch.stack(logits)


def relative_error(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def agreement(a, b):
    same = sum(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    return same / sum(len(r) for r in b)


def smallest_margin(logits):
    top = torch.topk(logits.double(), 2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


def save(model, out):
    os.makedirs(out, exist_ok=True)
    try:
        model.save_pretrained(out, safe_serialization=True)
    except TypeError:  # transformers >= 5 always writes safetensors
        model.save_pretrained(out)
    for extra in ("generation_config.json",):  # not read by the engine
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))


def make_case(name, seed, config, cls, root):
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    redraw_weights(model, seed)
    out = os.path.join(root, name)
    save(model, out)
    prompts = prompts_for(seed)
    runs = [greedy(model, p, "cpu") for p in prompts]
    tokens = [t for t, _ in runs]
    logits = torch.stack([l for _, l in runs])
    np.save(os.path.join(out, "logits_fp32.npy"), logits.numpy().astype("<f4"))
    record = {
        "case": name,
        "steps": STEPS,
        "prompts": prompts,
        "tokens_fp32_cpu": tokens,
        "smallest_top2_margin": smallest_margin(logits),
        "made_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                      "script": "tools/make-golden.py"},
    }
    if torch.cuda.is_available():
        gpu = model.to("cuda")
        fp32 = [greedy(gpu, p, "cuda") for p in prompts]
        record["tokens_fp32_cuda"] = [t for t, _ in fp32]
        record["fp32_cuda_logit_relative_error"] = max(relative_error(l, ref) for (_, l), ref in zip(fp32, logits))
        half = gpu.half()
        fp16 = [greedy(half, p, "cuda") for p in prompts]
        record["tokens_fp16_cuda"] = [t for t, _ in fp16]
        record["fp16_cuda_agreement"] = agreement(record["tokens_fp16_cuda"], tokens)
        record["fp16_cuda_logit_relative_error"] = max(relative_error(l, ref) for (_, l), ref in zip(fp16, logits))
        record["gpu"] = torch.cuda.get_device_name(0)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    summary = {k: v for k, v in record.items() if k not in ("prompts", "made_with") and not k.startswith("tokens")}
    print(json.dumps(summary))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                               "golden")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 on the GPU too
    torch.backends.cudnn.allow_tf32 = False
    for name, seed, config, cls in CASES:
        make_case(name, seed, config, cls, root)


if __name__ == "__main__":
    main()
