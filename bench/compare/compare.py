#!/usr/bin/env python3
"""Runs FlexGen, tiergen and (for models that fit the GPU) Hugging Face transformers'
generate on the same synthetic workload and writes one table of throughputs and ratios.

    bench/compare/compare.py --flexgen-dir ~/FlexGen --python ~/venv/bin/python \\
        --model opt-6.7b --prompt-len 512 --gen-len 32 \\
        --gpu-mem 15GiB --cpu-mem 200GiB --percent 100 0 100 0 100 0 --gbs 2 --ngb 1 \\
        [--policy auto] [--cpu-attention] [--compress-weight] [--compress-cache] [--overlap off] \\
        [--hf auto|on|off] [--tiergen build-gpu/tiergen] [-r 3] [-o bench/out/compare-opt-6.7b]

    compare.py --dry-run ...    prints the commands it would run, runs nothing
    compare.py --self-test      checks the log parser and command construction offline

FlexGen is the user's own checkout (github.com/FMInference/FlexGen), run as
`python -m flexgen.flex_opt --path _DUMMY_ ...` with the checkout on PYTHONPATH; it
needs torch with CUDA and the OPT tokenizer (Hugging Face cache or network). FlexGen
has no memory-cap flags: it gets the same placement (--percent, batch sizes, CPU
attention, compression, overlap); the --gpu-mem/--cpu-mem/--disk-mem caps bind tiergen.
With --policy auto, `tiergen policy` searches a policy for the caps first and both
systems run it (percentages rounded to FlexGen's integers).

Both systems print FlexGen's report lines ("prefill latency: X s  prefill throughput:
Y token/s", ..., "total throughput: Z token/s"), and one parser reads both logs. The
Hugging Face baseline (random weights from the preset's config.json, float16, all on
the GPU, batch halved until it fits) prints the same lines.
Outputs in -o DIR: flexgen.log, tiergen.log, tiergen.json, hf.log, commands.txt,
comparison.md and comparison.csv. Only the Python standard library is needed here.
"""
import argparse
import csv
import json
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
PATTERNS = {
    "model_size_gb": rf"model size:\s*{_NUM}\s*GB",
    "cache_size_gb": rf"cache size:\s*{_NUM}\s*GB",
    "hidden_size_gb": rf"hidden size \((?:p|prefill)\):\s*{_NUM}\s*GB",
    "peak_gpu_mem_gb": rf"peak gpu mem:\s*{_NUM}\s*GB",
    "prefill_latency_s": rf"prefill latency:\s*{_NUM}\s*s",
    "prefill_throughput": rf"prefill throughput:\s*{_NUM}\s*token/s",
    "decode_latency_s": rf"decode latency:\s*{_NUM}\s*s",
    "decode_throughput": rf"decode throughput:\s*{_NUM}\s*token/s",
    "total_latency_s": rf"total latency:\s*{_NUM}\s*s",
    "total_throughput": rf"total throughput:\s*{_NUM}\s*token/s",
}


def parse_report(text):
    """FlexGen's benchmark log lines (flexgen/utils.py write_benchmark_log), as FlexGen,
    `tiergen bench` and the HF baseline print them. The last occurrence of each wins
    (FlexGen also prints an earlier 'model size: ..., cache size: ...' line)."""
    out = {}
    for key, pattern in PATTERNS.items():
        found = re.findall(pattern, text)
        if found:
            out[key] = float(found[-1])
    projected = re.findall(r"projected:\s*(True|False)", text)
    if projected:
        out["projected"] = projected[-1] == "True"
    return out


def hf_model_id(model):
    return model if "/" in model else f"facebook/{model}"


def preset_name(model):
    return model.split("/")[-1].lower()


def flexgen_command(a, log_file):
    cmd = [a.python, "-m", "flexgen.flex_opt", "--model", hf_model_id(a.model), "--path", "_DUMMY_",
           "--offload-dir", a.flexgen_offload_dir, "--prompt-len", str(a.prompt_len), "--gen-len", str(a.gen_len),
           "--gpu-batch-size", str(a.gbs), "--num-gpu-batches", str(a.ngb),
           "--percent", *[str(int(round(p))) for p in a.percent], "--log-file", log_file]
    if a.cpu_attention:
        cmd.append("--cpu-cache-compute")
    if a.compress_weight:
        cmd.append("--compress-weight")
    if a.compress_cache:
        cmd.append("--compress-cache")
    if a.overlap == "off":
        cmd += ["--overlap", "False"]
    return cmd


def tiergen_command(a, json_file):
    cmd = [a.tiergen, "bench", "--model", preset_name(a.model), "--dummy", "--device", a.device,
           "--prompt-len", str(a.prompt_len), "--gen-len", str(a.gen_len), "-r", str(a.repetitions),
           "--json", json_file, "--offload-dir", a.tiergen_offload_dir,
           "--percent", *[str(int(round(p))) for p in a.percent],
           "--gpu-batch-size", str(a.gbs), "--num-gpu-batches", str(a.ngb), "--overlap", a.overlap]
    for flag, value in (("--gpu-mem", a.gpu_mem), ("--cpu-mem", a.cpu_mem), ("--disk-mem", a.disk_mem),
                        ("--hw", a.hw)):
        if value:
            cmd += [flag, value]
    if a.cpu_attention:
        cmd.append("--cpu-attention")
    if a.compress_weight:
        cmd.append("--compress-weight")
    if a.compress_cache:
        cmd.append("--compress-cache")
    return cmd


def policy_search_command(a, json_file):
    cmd = [a.tiergen, "policy", "--model", preset_name(a.model), "--prompt-len", str(a.prompt_len),
           "--gen-len", str(a.gen_len), "--json", json_file]
    for flag, value in (("--gpu-mem", a.gpu_mem), ("--cpu-mem", a.cpu_mem), ("--disk-mem", a.disk_mem),
                        ("--hw", a.hw)):
        if value:
            cmd += [flag, value]
    cmd += ["--compress", "on" if (a.compress_weight or a.compress_cache) else "off"]
    return cmd


def apply_searched_policy(a, policy_json):
    """Copies a `tiergen policy --json` policy into the shared settings (FlexGen's ints)."""
    p = policy_json.get("policy", policy_json)
    a.gbs, a.ngb = int(p["gpu_batch_size"]), int(p["num_gpu_batches"])
    a.percent = [int(round(p[k])) for k in ("w_gpu_percent", "w_cpu_percent", "cache_gpu_percent",
                                             "cache_cpu_percent", "act_gpu_percent", "act_cpu_percent")]
    a.cpu_attention = bool(p.get("cpu_cache_compute", False))
    a.compress_weight = bool(p.get("compress_weight", False))
    a.compress_cache = bool(p.get("compress_cache", False))
    a.overlap = "on" if p.get("overlap", True) else "off"


# The no-offload baseline: transformers' generate with everything on the GPU.
HF_SCRIPT = r'''
import json, sys, time, torch
from transformers import AutoConfig, AutoModelForCausalLM
config_path, n_prompts, s, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cfg = json.load(open(config_path))
config = AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items() if not k.startswith("_")})
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float16).eval()
total_mem = torch.cuda.get_device_properties(0).total_memory
bs = n_prompts
def gen(ids, new):
    torch.cuda.synchronize(); t = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                   do_sample=False, pad_token_id=0)
    torch.cuda.synchronize(); return time.perf_counter() - t
while bs >= 1:
    try:
        ids = torch.randint(4, config.vocab_size, (bs, s), device="cuda")
        gen(ids[:, :32], 1)  # warm-up
        torch.cuda.reset_peak_memory_stats()
        prefill = gen(ids, 1); total = gen(ids, n)
        break
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache(); bs //= 2
if bs < 1:
    print("hf: does not fit the GPU even with batch 1"); sys.exit(3)
decode = max(total - prefill, 1e-10)
GB = 1 << 30
print(f"hf batch size: {bs}")
print(f"peak gpu mem: {torch.cuda.max_memory_allocated() / GB:.3f} GB\tprojected: False")
print(f"prefill latency: {prefill:.3f} s\tprefill throughput: {bs * s / prefill:.3f} token/s")
print(f"decode latency: {decode:.3f} s\tdecode throughput: {bs * (n - 1) / decode:.3f} token/s")
print(f"total latency: {total:.3f} s\ttotal throughput: {bs * n / total:.3f} token/s")
'''


def preset_config(model):
    path = os.path.join(ROOT, "configs", "models", preset_name(model) + ".json")
    if not os.path.exists(path):
        raise SystemExit(f"compare.py: no preset {path} for the HF baseline")
    return path


def hf_fits(a, config_path, gpu_bytes):
    """fp16 weights + KV cache + a hidden-state allowance of the whole block within 90% of the GPU."""
    c = json.load(open(config_path))
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    ffn = c.get("ffn_dim", c.get("intermediate_size", 4 * h))
    params = layers * (4 * h * h + 2 * h * ffn) + vocab * h
    n = a.gbs * a.ngb
    cache = 2 * n * (a.prompt_len + a.gen_len) * layers * h * 2
    return 2 * params + cache < 0.9 * gpu_bytes


def hf_command(a, config_path):
    return [a.python, "-c", HF_SCRIPT, config_path, str(a.gbs * a.ngb), str(a.prompt_len), str(a.gen_len)]


def shown(cmd):
    """The command as text, with the embedded HF script elided."""
    return " ".join(shlex.quote(c) for c in (cmd[:2] + ["<HF_SCRIPT>"] + cmd[3:] if cmd[1:2] == ["-c"] else cmd))


def run_logged(cmd, log_path, cwd=None, env=None):
    print("$ " + shown(cmd), file=sys.stderr)
    with open(log_path, "w") as log:
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    text = open(log_path).read()
    if r.returncode != 0:
        print(f"   exit {r.returncode}; last lines of {log_path}:\n" + "\n".join(text.splitlines()[-5:]),
              file=sys.stderr)
    return r.returncode, text


def write_table(rows, out_dir, a):
    base = next((r for r in rows if r["system"] == "flexgen" and r.get("total_throughput")), None)
    for r in rows:
        for key in ("prefill_throughput", "decode_throughput", "total_throughput"):
            ratio_key = key.replace("_throughput", "_vs_flexgen")
            r[ratio_key] = (r[key] / base[key]) if base and r.get(key) and base.get(key) else None
    fields = ["system", "status", "model", "prompt_len", "gen_len", "num_prompts", "policy",
              "prefill_throughput", "decode_throughput", "total_throughput",
              "prefill_vs_flexgen", "decode_vs_flexgen", "total_vs_flexgen", "peak_gpu_mem_gb", "total_latency_s"]
    with open(os.path.join(out_dir, "comparison.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)

    def fmt(v, digits=3):
        return "" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))

    lines = [f"Model {a.model}, prompt {a.prompt_len}, gen {a.gen_len}; caps gpu {a.gpu_mem or '-'}, "
             f"cpu {a.cpu_mem or '-'}, disk {a.disk_mem or '-'}",
             "",
             "| system | status | N | policy | prefill tok/s | decode tok/s | total tok/s | total vs FlexGen | "
             "peak gpu GB |",
             "|---|---|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['status']} | {fmt(r.get('num_prompts'))} | {r.get('policy', '')} | "
                     f"{fmt(r.get('prefill_throughput'))} | {fmt(r.get('decode_throughput'))} | "
                     f"{fmt(r.get('total_throughput'))} | {fmt(r.get('total_vs_flexgen'), 2)} | "
                     f"{fmt(r.get('peak_gpu_mem_gb'))} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "comparison.md"), "w") as f:
        f.write(text)
    return text


def policy_label(a):
    flags = [f"{a.gbs}x{a.ngb}", "percent " + " ".join(str(int(round(p))) for p in a.percent)]
    if a.cpu_attention:
        flags.append("cpu-attn")
    if a.compress_weight:
        flags.append("comp-w")
    if a.compress_cache:
        flags.append("comp-kv")
    if a.overlap == "off":
        flags.append("no-overlap")
    return ", ".join(flags)


def compare(a):
    os.makedirs(a.out, exist_ok=True)
    commands = []
    rows = []
    common = {"model": a.model, "prompt_len": a.prompt_len, "gen_len": a.gen_len}

    if a.policy == "auto":
        policy_file = os.path.join(a.out, "policy.json")
        cmd = policy_search_command(a, policy_file)
        commands.append(cmd)
        if a.dry_run:
            print(" ".join(shlex.quote(c) for c in cmd))
            print("# then both systems run the searched policy (percent rounded to integers)")
        else:
            code, _ = run_logged(cmd, os.path.join(a.out, "policy.log"))
            if code != 0:
                raise SystemExit("compare.py: `tiergen policy` failed (see policy.log)")
            apply_searched_policy(a, json.load(open(policy_file)))
    label = policy_label(a)
    n_prompts = a.gbs * a.ngb

    flexgen_log = os.path.abspath(os.path.join(a.out, "flexgen_benchmark.log"))
    plans = [("flexgen", flexgen_command(a, flexgen_log), dict(cwd=a.flexgen_dir, env=flexgen_env(a))),
             ("tiergen", tiergen_command(a, os.path.abspath(os.path.join(a.out, "tiergen.json"))), dict(cwd=ROOT))]
    hf = a.hf
    if hf != "off":
        config_path = preset_config(a.model)
        if hf == "auto" and not hf_fits(a, config_path, a.hf_gpu_bytes):
            rows.append(dict(common, system="hf-transformers", status="skipped: does not fit the GPU",
                             num_prompts=n_prompts, policy="all on gpu"))
        else:
            plans.append(("hf-transformers", hf_command(a, config_path), dict(cwd=ROOT)))

    for system, cmd, opts in plans:
        commands.append(cmd)
        if a.dry_run:
            cwd = opts.get("cwd", "")
            cwd = cwd if cwd.startswith("$") else shlex.quote(cwd)
            print((f"cd {cwd} && " if cwd else "") +
                  (f"PYTHONPATH={cwd} " if system == "flexgen" else "") + shown(cmd))
            continue
        code, text = run_logged(cmd, os.path.join(a.out, f"{system}.log"), **opts)
        parsed = parse_report(text)
        status = "ok" if code == 0 and "total_throughput" in parsed else f"failed (exit {code})"
        row = dict(common, system=system, status=status, policy=label if system != "hf-transformers" else "all on gpu",
                   num_prompts=n_prompts, **parsed)
        m = re.search(r"hf batch size:\s*(\d+)", text)
        if m:
            row["num_prompts"] = int(m.group(1))
        rows.append(row)

    with open(os.path.join(a.out, "commands.txt"), "w") as f:
        for cmd in commands:
            f.write(shown(cmd) + "\n")
    if a.dry_run:
        return 0
    print(write_table(rows, a.out, a))
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped") for r in rows) else 1


def flexgen_env(a):
    env = dict(os.environ)
    env["PYTHONPATH"] = a.flexgen_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ---- Self-test: the parser against FlexGen's own log format, and command construction.
FLEXGEN_SAMPLE = (
    "<run_flexgen>: args.model: facebook/opt-30b\n"
    "model size: 55.803 GB, cache size: 13.594 GB, hidden size (prefill): 0.146 GB\n"
    "init weight...\nwarmup - generate\nbenchmark - generate\n"
    "TorchDevice: cuda:0\n  cur_mem: 0.0000 GB,  peak_mem: 13.0102 GB\n"
    "model size: 55.803 GB\tcache size: 13.594 GB\thidden size (p): 0.146 GB\n"
    "peak gpu mem: 13.010 GB\tprojected: True\n"
    "prefill latency: 87.382 s\tprefill throughput: 750.132 token/s\n"
    "decode latency: 511.547 s\tdecode throughput: 7.940 token/s\n"
    "total latency: 598.929 s\ttotal throughput: 7.320 token/s\n")
TIERGEN_SAMPLE = (
    "tiergen bench: opt-30b (opt), prompt len 512, gen len 32, 128 prompts (64 x 2), cuda:0 float16\n"
    "policy: gbs 64 x 2, weights 20/80/0, cache 0/100/0, act 0/100/0, cpu attention\n"
    "model size: 55.803 GB\tcache size: 13.594 GB\thidden size (p): 0.146 GB\n"
    "peak gpu mem: 12.500 GB\tprojected: False\n"
    "prefill latency: 80.000 s\tprefill throughput: 819.200 token/s\n"
    "decode latency: 400.000 s\tdecode throughput: 9.920 token/s\n"
    "total latency: 480.000 s\ttotal throughput: 8.533 token/s\n")


def self_test():
    import tempfile
    f = parse_report(FLEXGEN_SAMPLE)
    assert f["total_throughput"] == 7.32 and f["prefill_throughput"] == 750.132, f
    assert f["decode_latency_s"] == 511.547 and f["model_size_gb"] == 55.803 and f["hidden_size_gb"] == 0.146, f
    assert f["peak_gpu_mem_gb"] == 13.01 and f["projected"] is True, f
    t = parse_report(TIERGEN_SAMPLE)
    assert t["total_throughput"] == 8.533 and t["decode_throughput"] == 9.92 and t["projected"] is False, t
    assert parse_report("nothing here") == {}
    a = build_parser().parse_args(["--flexgen-dir", "/fg", "--python", "/py", "--model", "opt-30b", "--percent",
                                   "20", "80", "0", "100", "0", "100", "--gbs", "64", "--ngb", "2",
                                   "--cpu-attention", "--overlap", "off", "--gpu-mem", "15GiB"])
    fc = flexgen_command(a, "/tmp/x.log")
    assert fc[:5] == ["/py", "-m", "flexgen.flex_opt", "--model", "facebook/opt-30b"], fc
    assert "--cpu-cache-compute" in fc and fc[fc.index("--percent") + 1:fc.index("--percent") + 7] == \
        ["20", "80", "0", "100", "0", "100"] and fc[-2:] == ["--overlap", "False"], fc
    tc = tiergen_command(a, "/tmp/t.json")
    assert tc[1:4] == ["bench", "--model", "opt-30b"] and "--cpu-attention" in tc and "15GiB" in tc, tc
    apply_searched_policy(a, {"policy": {"gpu_batch_size": 48, "num_gpu_batches": 3, "w_gpu_percent": 19.6,
                                         "w_cpu_percent": 80.4, "cache_gpu_percent": 0, "cache_cpu_percent": 100,
                                         "act_gpu_percent": 0, "act_cpu_percent": 100, "cpu_cache_compute": True,
                                         "compress_weight": False, "compress_cache": True, "overlap": True}})
    assert (a.gbs, a.ngb, a.percent, a.compress_cache, a.overlap) == (48, 3, [20, 80, 0, 100, 0, 100], True, "on")
    with tempfile.TemporaryDirectory() as d:
        rows = [dict(system="flexgen", status="ok", **f), dict(system="tiergen", status="ok", **t),
                dict(system="hf-transformers", status="skipped: does not fit the GPU")]
        text = write_table(rows, d, a)
        assert "| tiergen | ok |" in text and "1.17" in text, text  # 8.533 / 7.32
        assert open(os.path.join(d, "comparison.csv")).read().count("\n") == 4
    big = build_parser().parse_args(["--model", "opt-175b", "--gbs", "32", "--ngb", "8"])
    small = build_parser().parse_args(["--model", "opt-125m", "--gbs", "4"])
    assert not hf_fits(big, preset_config("opt-175b"), 80 << 30)
    assert hf_fits(small, preset_config("opt-125m"), 16 << 30)
    print("compare.py self-test: ok")
    return 0


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flexgen-dir", default="", help="FlexGen checkout (contains flexgen/flex_opt.py)")
    ap.add_argument("--python", default=sys.executable, help="Python with torch (and FlexGen's requirements)")
    ap.add_argument("--tiergen", default=os.path.join(ROOT, "build", "tiergen"), help="tiergen binary")
    ap.add_argument("--model", default="opt-6.7b", help="opt-125m ... opt-175b (or facebook/opt-...)")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--gpu-mem", default="", help="tiergen's GPU budget (e.g. 15GiB)")
    ap.add_argument("--cpu-mem", default="", help="tiergen's CPU budget")
    ap.add_argument("--disk-mem", default="", help="tiergen's disk budget")
    ap.add_argument("--hw", default="", help="hardware profile for tiergen's predictions and --policy auto")
    ap.add_argument("--percent", type=float, nargs=6, default=[100, 0, 100, 0, 100, 0],
                    metavar=("WG", "WC", "CG", "CC", "HG", "HC"))
    ap.add_argument("--gbs", type=int, default=4, help="gpu batch size")
    ap.add_argument("--ngb", type=int, default=1, help="number of gpu batches")
    ap.add_argument("--cpu-attention", action="store_true", help="FlexGen's --cpu-cache-compute")
    ap.add_argument("--compress-weight", action="store_true")
    ap.add_argument("--compress-cache", action="store_true")
    ap.add_argument("--overlap", choices=["on", "off"], default="on")
    ap.add_argument("--policy", choices=["flags", "auto"], default="flags",
                    help="flags: the settings above for both; auto: tiergen's searched policy for both")
    ap.add_argument("--hf", choices=["auto", "on", "off"], default="auto",
                    help="Hugging Face generate baseline: auto runs it when the model fits the GPU")
    ap.add_argument("--hf-gpu-mem-gib", type=float, default=0,
                    help="GPU size for the fit check (default: --gpu-mem, else 16)")
    ap.add_argument("--device", default="cuda", help="tiergen --device")
    ap.add_argument("-r", "--repetitions", type=int, default=3, help="tiergen's measured runs")
    ap.add_argument("--flexgen-offload-dir", default=os.path.expanduser("~/flexgen_offload_dir"))
    ap.add_argument("--tiergen-offload-dir", default="/tmp/tiergen-offload")
    ap.add_argument("-o", "--out", default="", help="output directory (default bench/out/compare-MODEL)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--self-test", action="store_true", help="test the parser and commands offline")
    return ap


def parse_gib(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*(GiB|GB|MiB|MB)?\s*", text or "")
    if not m:
        return 0
    scale = {"GiB": 1 << 30, "GB": 10**9, "MiB": 1 << 20, "MB": 10**6, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


def main(argv):
    a = build_parser().parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.flexgen_dir and not a.dry_run:
        raise SystemExit("compare.py: --flexgen-dir is required (a FlexGen checkout)")
    if a.flexgen_dir and not a.dry_run and not os.path.exists(os.path.join(a.flexgen_dir, "flexgen", "flex_opt.py")):
        raise SystemExit(f"compare.py: {a.flexgen_dir} has no flexgen/flex_opt.py")
    a.flexgen_dir = os.path.abspath(a.flexgen_dir) if a.flexgen_dir else "$FLEXGEN_DIR"
    a.out = a.out or os.path.join(ROOT, "bench", "out", f"compare-{preset_name(a.model)}")
    a.hf_gpu_bytes = a.hf_gpu_mem_gib * (1 << 30) if a.hf_gpu_mem_gib else (parse_gib(a.gpu_mem) or 16 * (1 << 30))
    return compare(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
