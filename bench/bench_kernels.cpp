// Kernel benchmarks, each against a baseline measured side by side in this process:
//  1. CPU decode attention vs (a) FlexGen-style LibTorch ops (fp16 cache -> fp32, bmm,
//     softmax, bmm) and (b) the memory bandwidth of a streaming copy and of a streaming
//     read; reported as GB/s of K+V bytes read.
//  2. Quantize / dequantize (4-bit and 8-bit, fp16 data) vs memcpy of the same fp16 bytes.
// Medians over repetitions after a warm-up run. Usage:
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

#include "kernels/cpu/attention.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize.h"

using namespace tiergen::kernels;

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

// Median wall time in seconds of fn() over reps runs, after one warm-up run.
double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Parallel memcpy in per-thread contiguous chunks (how the kernels split work too).
void parallel_copy(void* dst, const void* src, size_t bytes) {
#pragma omp parallel
  {
    const size_t n = size_t(omp_get_num_threads()), i = size_t(omp_get_thread_num());
    const size_t chunk = (bytes / n + 63) & ~size_t(63);
    const size_t begin = std::min(bytes, i * chunk), end = std::min(bytes, begin + chunk);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  }
}

// Integer sum: vectorises without reassociation concerns, so it runs at memory speed.
uint64_t parallel_read(const uint64_t* p, size_t n) {
  uint64_t total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (size_t i = 0; i < n; ++i) total += p[i];
  return total;
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

double gbs(double bytes, double seconds) { return bytes / seconds / 1e9; }

void bench_attention(const Options& o, double copy_gbs, double read_gbs) {
  const int64_t rows = o.batch * o.kv_heads * o.len, d = o.head_dim;
  std::printf("\n## Decode attention: batch %lld, heads %lld/%lld kv, head_dim %lld, %lld positions\n",
              (long long)o.batch, (long long)o.heads, (long long)o.kv_heads, (long long)d, (long long)o.len);
  std::vector<uint16_t> k(rows * d), v(rows * d);
  fill_f16(k, 1);
  fill_f16(v, 2);
  std::vector<float> q(o.batch * o.heads * d), out(q.size()), ref(q.size());
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
  const double t_ours = median_seconds(o.reps, [&] { decode_attention(a); });

  // FlexGen's CPU attention: the fp16 cache slice converted to fp32, bmm, softmax, bmm.
  const int64_t n_rep = o.heads / o.kv_heads;
  at::Tensor tk = at::from_blob(k.data(), {o.batch * o.kv_heads, o.len, d}, at::kHalf);
  at::Tensor tv = at::from_blob(v.data(), {o.batch * o.kv_heads, o.len, d}, at::kHalf);
  at::Tensor tq = at::from_blob(q.data(), {o.batch * o.kv_heads, n_rep, d}, at::kFloat);
  at::Tensor tout;
  const double t_torch = median_seconds(o.reps, [&] {
    const at::Tensor kf = tk.to(at::kFloat), vf = tv.to(at::kFloat);
    const at::Tensor w = at::softmax(at::bmm(tq, kf.transpose(1, 2)) * a.scale, -1);
    tout = at::bmm(w, vf);
  });
  const double diff = (tout.reshape({-1}) - at::from_blob(out.data(), {int64_t(out.size())}, at::kFloat)).abs().max().item<double>();

  std::printf("| kernel | median ms | K+V GB/s | vs copy | vs read | speed-up vs LibTorch ops |\n|---|---|---|---|---|---|\n");
  std::printf("| tiergen decode_attention (fp16 cache) | %.1f | %.2f | %.0f%% | %.0f%% | %.2fx |\n", t_ours * 1e3,
              gbs(bytes, t_ours), 100 * gbs(bytes, t_ours) / copy_gbs, 100 * gbs(bytes, t_ours) / read_gbs, t_torch / t_ours);
  std::printf("| LibTorch ops, FlexGen-style | %.1f | %.2f | %.0f%% | %.0f%% | 1.00x |\n", t_torch * 1e3,
              gbs(bytes, t_torch), 100 * gbs(bytes, t_torch) / copy_gbs, 100 * gbs(bytes, t_torch) / read_gbs);

  // The same cache compressed: fewer bytes, dequantized in registers.
  for (int bits : {4, 8}) {
    const QuantFormat f{bits, 64};
    const QuantizedLayout l = quantized_layout(rows, d, f);
    std::vector<uint8_t> pk(l.packed_bytes()), pv(l.packed_bytes());
    std::vector<uint16_t> mk(l.meta_elems()), sk(l.meta_elems()), mv(l.meta_elems()), sv(l.meta_elems());
    quantize(k.data(), ElemType::F16, rows, d, f, pk.data(), mk.data(), sk.data());
    quantize(v.data(), ElemType::F16, rows, d, f, pv.data(), mv.data(), sv.data());
    DecodeAttentionArgs qa = a;
    qa.k = KvView::compressed(pk.data(), mk.data(), sk.data(), f);
    qa.v = KvView::compressed(pv.data(), mv.data(), sv.data(), f);
    const double qbytes = double(decode_attention_kv_bytes(qa));
    const double t_q = median_seconds(o.reps, [&] { decode_attention(qa); });
    std::printf("| tiergen decode_attention (%d-bit cache, g 64) | %.1f | %.2f | %.0f%% | %.0f%% | %.2fx |\n", bits,
                t_q * 1e3, gbs(qbytes, t_q), 100 * gbs(qbytes, t_q) / copy_gbs, 100 * gbs(qbytes, t_q) / read_gbs,
                t_torch / t_q);
  }
  std::printf("K+V bytes read (fp16): %.3f GB; max |ours - LibTorch| = %.2e\n", bytes / 1e9, diff);
}

void bench_quantize(const Options& o, int64_t rows, int64_t cols) {
  std::printf("\n## Quantization of a [%lld, %lld] fp16 matrix (%.2f GB), groups of 64\n", (long long)rows,
              (long long)cols, double(rows * cols * 2) / 1e9);
  std::vector<uint16_t> x(rows * cols), back(rows * cols), copy(rows * cols);
  fill_f16(x, 3);
  const double bytes = double(x.size() * 2);
  const double t_copy = median_seconds(o.reps, [&] { parallel_copy(copy.data(), x.data(), size_t(bytes)); });
  std::printf("| operation | median ms | fp16 GB/s | vs memcpy |\n|---|---|---|---|\n");
  std::printf("| memcpy of the fp16 bytes | %.1f | %.2f | 100%% |\n", t_copy * 1e3, gbs(bytes, t_copy));
  for (int bits : {4, 8}) {
    const QuantFormat f{bits, 64};
    const QuantizedLayout l = quantized_layout(rows, cols, f);
    std::vector<uint8_t> packed(l.packed_bytes());
    std::vector<uint16_t> mins(l.meta_elems()), scales(l.meta_elems());
    const double tq = median_seconds(o.reps, [&] {
      quantize(x.data(), ElemType::F16, rows, cols, f, packed.data(), mins.data(), scales.data());
    });
    const double td = median_seconds(o.reps, [&] {
      dequantize(packed.data(), mins.data(), scales.data(), rows, cols, f, back.data(), ElemType::F16);
    });
    std::printf("| quantize %d-bit | %.1f | %.2f | %.0f%% |\n", bits, tq * 1e3, gbs(bytes, tq), 100 * t_copy / tq);
    std::printf("| dequantize %d-bit | %.1f | %.2f | %.0f%% |\n", bits, td * 1e3, gbs(bytes, td), 100 * t_copy / td);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  at::set_num_threads(omp_get_max_threads());
  std::printf("threads: %d (OpenMP and LibTorch); medians of %d runs after a warm-up\n", omp_get_max_threads(), o.reps);

  // Streaming bandwidth on buffers as large as the fp16 K+V cache.
  const size_t bytes = size_t(o.batch * o.kv_heads * o.len * o.head_dim) * 2 * 2;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double t_copy = median_seconds(o.reps, [&] { parallel_copy(dst.data(), src.data(), bytes); });
  volatile uint64_t sink = 0;
  const double t_read = median_seconds(o.reps, [&] { sink = sink + parallel_read(reinterpret_cast<const uint64_t*>(src.data()), bytes / 8); });
  // STREAM's convention: a copy moves 2 bytes (read + write) per byte copied.
  const double copy_gbs = gbs(2.0 * double(bytes), t_copy), read_gbs = gbs(double(bytes), t_read);
  std::printf("\n## Memory bandwidth (%.2f GB buffers)\nstreaming copy: %.2f GB/s (read + written); streaming read: %.2f GB/s\n",
              double(bytes) / 1e9, copy_gbs, read_gbs);
  std::vector<char>().swap(src);
  std::vector<char>().swap(dst);

  bench_attention(o, copy_gbs, read_gbs);
  bench_quantize(o, 1 << 20, 128);
  return 0;
}
