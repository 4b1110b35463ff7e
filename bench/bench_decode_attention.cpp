// Decode attention on the CPU as the runtime runs it over a cache it loaded (model::attend:
// LibTorch's products and softmax over units of one sequence's kv head with its query
// heads, runtime::KvCache::decode_attention: the path of a host standing in for the GPU
// when the cache lives in its cpu or disk tier), against the two prices the cost model
// can put on it, each timed in the same interleaved rounds as the attention (a host's
// speed wanders): its FLOPs (4 x heads x head_dim x context per sequence, ModelSizes::
// attention_flops) at the "bmm, decode shape" rate, timed as `tiergen profile` times it
// (fp32, 256 x [1 x 128] x [128 x 2048]), the price of profiles without a loaded-cache
// attention; and `tiergen profile`'s own fit (LoadedCacheAttention: a call, units,
// positions, scores and bytes), from its five shapes (loaded_cache_attention_fit.h).
// Reported per shape and dtype: microseconds per call, GFLOP/s, GB/s of K and V read,
// the product's rate in those rounds, and the measured time over each price (above 1:
// the price is too fast).
// Usage: bench_decode_attention [--reps 15] [--threads N (default: every usable core)]
//        [--shapes B:HEADS:KV_HEADS:HEAD_DIM:CONTEXT,...]
// Default shapes: the planner sweep's hidden-768 models (16 and 32 sequences, 12 heads
// of 64, context 48), TinyLlama's grouped heads (32 of 64 over 4 kv heads, context 144)
// and a hidden-4096 layer (32 heads of 128, context 272).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <array>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "tiergen/common/compute_threads.h"
#include "policy/loaded_cache_attention_fit.h"
#include "policy/loaded_cache_attention_probe.h"
#include "tiergen/model/forward.h"

namespace {

struct Shape {
  int64_t sequences, heads, kv_heads, head_dim, context;
};

struct Options {
  int reps = 15;
  int threads = 0;  // 0: as runs compute (tiergen::set_compute_threads: every usable core)
  std::vector<Shape> shapes = {{16, 12, 12, 64, 48}, {32, 12, 12, 64, 48}, {16, 32, 4, 64, 144}, {16, 32, 32, 128, 272}};
};

Shape parse_shape(const std::string& text) {
  Shape s{};
  char colon = 0;
  std::istringstream in(text);
  if (!(in >> s.sequences >> colon >> s.heads >> colon >> s.kv_heads >> colon >> s.head_dim >> colon >> s.context) ||
      s.sequences < 1 || s.heads < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0 || s.head_dim < 1 || s.context < 1) {
    std::fprintf(stderr, "bench_decode_attention: bad shape '%s' (B:HEADS:KV_HEADS:HEAD_DIM:CONTEXT)\n", text.c_str());
    std::exit(2);
  }
  return s;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_decode_attention: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const std::string v = argv[++i];
    if (a == "--reps") {
      o.reps = std::atoi(v.c_str());
    } else if (a == "--threads") {
      o.threads = std::atoi(v.c_str());
    } else if (a == "--shapes") {
      o.shapes.clear();
      std::istringstream list(v);
      for (std::string item; std::getline(list, item, ',');) o.shapes.push_back(parse_shape(item));
    } else {
      std::fprintf(stderr, "bench_decode_attention: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.reps < 1) o.reps = 1;
  return o;
}

// The profile's decode-shaped batched product (policy/profiler.cpp, on a host that is
// not small), timed beside each attention.
struct ProfileBmm {
  at::Tensor a = at::randn({256, 1, 128}), b = at::randn({256, 128, 2048});
  void run() const { (void)at::bmm(a, b); }
  static double flops() { return 2.0 * 256 * 128 * 2048; }
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  tiergen::set_compute_threads(o.threads);
  const ProfileBmm bmm;
  std::printf("threads %d\n", at::get_num_threads());
  std::printf("%-22s %-9s %10s %9s %9s %10s %14s %14s\n", "B:H:KV:D:context", "dtype", "us/call", "GFLOP/s",
              "KV GB/s", "bmm GFLOP/s", "meas/bmm price", "meas/fit price");
  for (const Shape& s : o.shapes) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      using tiergen::policy::LoadedCacheAttentionProbe;
      const LoadedCacheAttentionProbe attention(
          dtype, {s.sequences * s.kv_heads, s.heads / s.kv_heads, s.context, s.head_dim});
      std::vector<LoadedCacheAttentionProbe> probes;  // the profile's fit shapes
      for (const auto& shape : tiergen::policy::kLoadedCacheAttentionShapes) probes.emplace_back(dtype, shape);
      std::vector<std::function<void()>> timed = {[&] { attention.run(); }, [&] { bmm.run(); }};
      for (const LoadedCacheAttentionProbe& p : probes) timed.push_back([&p] { p.run(); });
      const std::vector<double> medians = tiergen::bench::interleaved_medians(o.reps, timed);
      const double seconds = medians[0], bmm_rate = ProfileBmm::flops() / medians[1];
      const double flops = double(s.sequences) * 4.0 * double(s.heads * s.head_dim) * double(s.context);
      const double kv_bytes = attention.kv_bytes();
      std::array<double, 5> probe_seconds{};
      for (size_t i = 0; i < probe_seconds.size(); ++i) probe_seconds[i] = medians[2 + i];
      const auto fit = tiergen::policy::fit_loaded_cache_attention(probe_seconds, int64_t(at::elementSize(dtype)));
      const double units = double(s.sequences * s.kv_heads);
      const double fit_price =
          fit ? fit->seconds(1, units, units * double(s.context), double(s.sequences * s.heads * s.context), kv_bytes)
              : 0;
      std::printf("%-22s %-9s %10.1f %9.2f %9.2f %10.2f %14.2f %14s\n",
                  (std::to_string(s.sequences) + ":" + std::to_string(s.heads) + ":" + std::to_string(s.kv_heads) +
                   ":" + std::to_string(s.head_dim) + ":" + std::to_string(s.context))
                      .c_str(),
                  dtype == at::kFloat ? "float32" : "bfloat16", seconds * 1e6, flops / seconds / 1e9,
                  tiergen::bench::gbs(kv_bytes, seconds), bmm_rate / 1e9, seconds / (flops / bmm_rate),
                  fit ? std::to_string(seconds / fit_price).substr(0, 5).c_str() : "(no fit)");
    }
  }
  return 0;
}
