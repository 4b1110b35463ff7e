#!/usr/bin/env python3
"""Writes a Hugging Face LLaMA checkpoint (config.json + one model.safetensors, bf16)
as a BF16 GGUF file that llama.cpp can load, so llama.cpp and tiergen can be timed on
the same weights (bench/compare/llama_cpp_cpu.sh).

    python3 bench/compare/make_llama_gguf.py --model MODEL_DIR \\
        --gguf-py baselines/llama.cpp/gguf-py -o MODEL.gguf

    --gguf-py DIR       the gguf-py folder of a llama.cpp checkout (its `gguf` package
                        writes the file); not needed if `gguf` is importable already
    --context-length N  overrides max_position_embeddings from config.json
    --no-permute        skip llama.cpp's q/k row permutation (throughput is unaffected)

The safetensors file is read directly (8-byte little-endian header length, JSON
header, raw data) and the tensors are memory-mapped as uint16, so nothing but numpy
is needed and the bf16 bits are copied unchanged. Matrices stay BF16; norm weights
are widened to F32. The checkpoints this is meant for have no tokenizer, so a dummy
SentencePiece-style vocabulary is written ("<unk>", "<s>", "</s>", the 256 byte
tokens "<0x00>".."<0xFF>", then "tok259", "tok260", ...), which is enough for
llama-bench / llama-batched-bench (they feed token ids, never text). Quantize the
result with llama-quantize for Q8_0 / Q4_0 variants.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ST_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}

LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_MAP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def read_safetensors(path):
    """Returns {name: (dtype string, shape, memmapped array)} for one .safetensors file."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in ST_DTYPES:
            raise SystemExit(f"{name}: unsupported safetensors dtype {dtype}")
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        arr = np.memmap(path, dtype=ST_DTYPES[dtype], mode="r", offset=base + start,
                        shape=shape if shape else (1,))
        assert arr.nbytes == end - start, name
        out[name] = (dtype, shape, arr)
    return out


def gguf_name(hf_name):
    if hf_name in TOP_MAP:
        return TOP_MAP[hf_name]
    parts = hf_name.split(".", 3)  # model, layers, N, rest
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in LAYER_MAP:
        return f"blk.{int(parts[2])}.{LAYER_MAP[parts[3]]}"
    return None


def permute_rows(w, n_head):
    """llama.cpp's q/k row order: within each head, interleaved (even, odd) rope pairs
    become two halves (the inverse of what the HF conversion script undid)."""
    rows = w.shape[0]
    return np.ascontiguousarray(
        w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def to_f32(dtype, arr):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def dummy_vocab(n_vocab, gguf):
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [
        gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        if len(tokens) >= n_vocab:
            break
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(gguf.TokenType.BYTE)
    while len(tokens) < n_vocab:
        i = len(tokens)
        tokens.append(f"tok{i}")
        scores.append(-float(i))
        types.append(gguf.TokenType.NORMAL)
    return tokens[:n_vocab], scores[:n_vocab], types[:n_vocab]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF folder with config.json and model.safetensors")
    ap.add_argument("-o", "--output", required=True, help="GGUF file to write")
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py folder")
    ap.add_argument("--context-length", type=int)
    ap.add_argument("--no-permute", action="store_true")
    args = ap.parse_args()

    if args.gguf_py:
        sys.path.insert(0, os.path.abspath(args.gguf_py))
    import gguf  # noqa: E402

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    n_embd = cfg["hidden_size"]
    n_layer = cfg["num_hidden_layers"]
    n_head = cfg["num_attention_heads"]
    n_head_kv = cfg.get("num_key_value_heads", n_head)
    n_vocab = cfg["vocab_size"]
    head_dim = n_embd // n_head
    n_ctx = args.context_length or cfg.get("max_position_embeddings") or 2048

    tensors = read_safetensors(os.path.join(args.model, "model.safetensors"))
    if "lm_head.weight" not in tensors and cfg.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]

    w = gguf.GGUFWriter(args.output, "llama")
    w.add_name(cfg.get("_name_or_path") or os.path.basename(os.path.normpath(args.model)))
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta") or 10000.0))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps") or 1e-5))
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

    tokens, scores, types = dummy_vocab(n_vocab, gguf)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(int(cfg.get("bos_token_id", 1)))
    w.add_eos_token_id(int(cfg.get("eos_token_id", 2)))

    n_bf16 = n_f32 = 0
    for hf_name in sorted(tensors, key=lambda n: (n.count("layers"), n)):
        dst = gguf_name(hf_name)
        if dst is None:
            print(f"skipping {hf_name}", file=sys.stderr)
            continue
        dtype, shape, arr = tensors[hf_name]
        if len(shape) == 1:
            w.add_tensor(dst, to_f32(dtype, arr))
            n_f32 += 1
            continue
        if not args.no_permute and dst.endswith(("attn_q.weight", "attn_k.weight")):
            arr = permute_rows(arr, n_head if dst.endswith("attn_q.weight") else n_head_kv)
        if dtype == "BF16":
            w.add_tensor(dst, arr, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(dst, arr.astype(np.float32) if dtype != "F16" else arr)
        n_bf16 += 1

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.output}: {n_bf16} matrices, {n_f32} norm vectors (F32), "
          f"{os.path.getsize(args.output) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
