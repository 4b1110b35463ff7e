// Kernel benchmarks, each against a baseline measured side by side in this process:
//  1. CPU decode attention vs (a) FlexGen-style LibTorch ops (fp16 cache -> fp32, bmm,
//     softmax, bmm) and (b) the memory bandwidth of a streaming copy and of a streaming
//     read over buffers as large as the cache; reported as GB/s of K+V bytes read.
//  2. Quantize / dequantize (4-bit and 8-bit, fp16 data) vs memcpy of the same fp16 bytes.
// Kernels and baselines run in interleaved rounds (medians reported) so that on a
// shared machine they see the same background load. Usage:
//   bench_kernels [--batch 64] [--heads 32] [--kv-heads 32] [--head-dim 128] [--len 1024]
//                 [--reps 7] [--threads N]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"

using namespace tiergen::kernels;
using namespace tiergen::bench;

namespace {

struct Options {
  int64_t batch = 64, heads = 32, kv_heads = 32, head_dim = 128, len = 1024;
  int reps = 7;
  int threads = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (k == "--batch") o.batch = v;
    else if (k == "--heads") o.heads = v;
    else if (k == "--kv-heads") o.kv_heads = v;
    else if (k == "--head-dim") o.head_dim = v;
    else if (k == "--len") o.len = v;
    else if (k == "--reps") o.reps = int(v);
    else if (k == "--threads") o.threads = int(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Uniform values in [-2, 2) from xorshift: cheap enough for gigabytes of cache.
void fill_f16(std::vector<uint16_t>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& h : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    h = float_to_half(float(x >> 8) * (4.0f / 16777216.0f) - 2.0f);
  }
}

void bench_attention(const Options& o) {
  const int64_t rows = o.batch * o.kv_heads * o.len, d = o.head_dim;
  std::printf("\n## Decode attention: batch %lld, heads %lld/%lld kv, head_dim %lld, %lld positions\n",
              (long long)o.batch, (long long)o.heads, (long long)o.kv_heads, (long long)d, (long long)o.len);
  std::vector<uint16_t> k(rows * d), v(rows * d);
  fill_f16(k, 1);
  fill_f16(v, 2);
  std::vector<float> q(o.batch * o.heads * d), out(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i) * 0.37f);

  DecodeAttentionArgs a;
  a.q = q.data();
  a.out = out.data();
  a.batch = o.batch;
  a.num_heads = o.heads;
  a.num_kv_heads = o.kv_heads;
  a.head_dim = d;
  a.max_len = o.len;
  a.seq_len = o.len;
  a.scale = 1.0f / std::sqrt(float(d));
  a.k = KvView::dense(k.data(), ElemType::F16);
  a.v = KvView::dense(v.data(), ElemType::F16);
  const double bytes = double(decode_attention_kv_bytes(a));

  // The same cache compressed: fewer bytes, dequantized in registers.
  struct Compressed {
    std::vector<uint8_t> pk, pv;
    std::vector<uint16_t> mk, sk, mv, sv;
    DecodeAttentionArgs args;
  } c4, c8;
  for (auto [bits, c] : {std::pair{4, &c4}, std::pair{8, &c8}}) {
    const QuantFormat f{bits, 64};
    const QuantizedLayout l = quantized_layout(rows, d, f);
    c->pk.resize(l.packed_bytes()), c->pv.resize(l.packed_bytes());
    for (auto* m : {&c->mk, &c->sk, &c->mv, &c->sv}) m->resize(l.meta_elems());
    quantize(k.data(), ElemType::F16, rows, d, f, c->pk.data(), c->mk.data(), c->sk.data());
    quantize(v.data(), ElemType::F16, rows, d, f, c->pv.data(), c->mv.data(), c->sv.data());
    c->args = a;
    c->args.k = KvView::compressed(c->pk.data(), c->mk.data(), c->sk.data(), f);
    c->args.v = KvView::compressed(c->pv.data(), c->mv.data(), c->sv.data(), f);
  }

  // FlexGen's CPU attention: the fp16 cache slice converted to fp32, bmm, softmax, bmm.
  const int64_t n_rep = o.heads / o.kv_heads;
  at::Tensor tk = at::from_blob(k.data(), {o.batch * o.kv_heads, o.len, d}, at::kHalf);
  at::Tensor tv = at::from_blob(v.data(), {o.batch * o.kv_heads, o.len, d}, at::kHalf);
  at::Tensor tq = at::from_blob(q.data(), {o.batch * o.kv_heads, n_rep, d}, at::kFloat);
  at::Tensor tout;
  auto torch_ops = [&] {
    const at::Tensor kf = tk.to(at::kFloat), vf = tv.to(at::kFloat);
    const at::Tensor w = at::softmax(at::bmm(tq, kf.transpose(1, 2)) * a.scale, -1);
    tout = at::bmm(w, vf);
  };

  Streams streams(static_cast<size_t>(bytes));
  const std::vector<double> t = interleaved_medians(
      o.reps, {[&] { streams.copy(); }, [&] { streams.read(); }, [&] { decode_attention(a); },
               [&] { decode_attention(c4.args); }, [&] { decode_attention(c8.args); }, torch_ops});
  const double copy_gbs = gbs(2.0 * bytes, t[0]), read_gbs = gbs(bytes, t[1]);
  decode_attention(a);  // `out` last held a compressed run's result
  const double diff = (tout.reshape({-1}) - at::from_blob(out.data(), {int64_t(out.size())}, at::kFloat)).abs().max().item<double>();

  std::printf("streaming copy of %.2f GB: %.2f GB/s read + written (STREAM convention), %.2f GB/s copied; "
              "streaming read: %.2f GB/s\n", bytes / 1e9, copy_gbs, copy_gbs / 2, read_gbs);
  std::printf("| kernel | median ms | K+V GB/s | vs copy (read+written) | vs read | speed-up vs LibTorch ops |\n"
              "|---|---|---|---|---|---|\n");
  auto row = [&](const char* name, double kv_bytes, double secs) {
    std::printf("| %s | %.1f | %.2f | %.0f%% | %.0f%% | %.2fx |\n", name, secs * 1e3, gbs(kv_bytes, secs),
                100 * gbs(kv_bytes, secs) / copy_gbs, 100 * gbs(kv_bytes, secs) / read_gbs, t[5] / secs);
  };
  row("tiergen decode_attention, fp16 cache", bytes, t[2]);
  row("tiergen decode_attention, 4-bit cache (g 64)", double(decode_attention_kv_bytes(c4.args)), t[3]);
  row("tiergen decode_attention, 8-bit cache (g 64)", double(decode_attention_kv_bytes(c8.args)), t[4]);
  row("LibTorch ops, FlexGen-style (fp16 cache)", bytes, t[5]);
  std::printf("max |tiergen - LibTorch| on the fp16 cache: %.2e\n", diff);
}

void bench_quantize(const Options& o, int64_t rows, int64_t cols) {
  std::printf("\n## Quantization of a [%lld, %lld] fp16 matrix (%.2f GB), groups of 64\n", (long long)rows,
              (long long)cols, double(rows * cols * 2) / 1e9);
  std::vector<uint16_t> x(rows * cols), back(rows * cols), copy(rows * cols);
  fill_f16(x, 3);
  const double bytes = double(x.size() * 2);
  std::printf("| operation | median ms | fp16 GB/s | vs memcpy |\n|---|---|---|---|\n");
  for (int bits : {4, 8}) {
    const QuantFormat f{bits, 64};
    const QuantizedLayout l = quantized_layout(rows, cols, f);
    std::vector<uint8_t> packed(l.packed_bytes());
    std::vector<uint16_t> mins(l.meta_elems()), scales(l.meta_elems());
    const std::vector<double> t = interleaved_medians(
        o.reps, {[&] { parallel_copy(copy.data(), x.data(), size_t(bytes)); },
                 [&] { quantize(x.data(), ElemType::F16, rows, cols, f, packed.data(), mins.data(), scales.data()); },
                 [&] { dequantize(packed.data(), mins.data(), scales.data(), rows, cols, f, back.data(), ElemType::F16); }});
    std::printf("| memcpy of the fp16 bytes (%d-bit round) | %.1f | %.2f | 100%% |\n", bits, t[0] * 1e3, gbs(bytes, t[0]));
    std::printf("| quantize %d-bit | %.1f | %.2f | %.0f%% |\n", bits, t[1] * 1e3, gbs(bytes, t[1]), 100 * t[0] / t[1]);
    std::printf("| dequantize %d-bit | %.1f | %.2f | %.0f%% |\n", bits, t[2] * 1e3, gbs(bytes, t[2]), 100 * t[0] / t[2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  at::set_num_threads(omp_get_max_threads());
  std::printf("threads: %d (OpenMP and LibTorch); medians of %d interleaved rounds after a warm-up\n",
              omp_get_max_threads(), o.reps);
  bench_attention(o);
  bench_quantize(o, 1 << 20, 128);
  return 0;
}
