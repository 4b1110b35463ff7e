// Decode matmuls on the CPU: the seven projections of one transformer layer (default
// TinyLlama-1.1B: hidden 2048, intermediate 5632, 4 of 32 heads for K/V) at a few
// rows (sequences in a decode step), fp32, bf16 and fp16 weights (fp16: what a GPU host's
// host-resident weights are when --cpu-weight-compute multiplies them), comparing
//   - LibTorch's at::linear (OpenBLAS sgemm for fp32, oneDNN for bf16), which packs W
//     on every call, with
//   - tiergen's model::linear_product (kernels/cpu/small_matmul, W read in place),
// and both with a streaming read of as many bytes as the weights, all timed in the same
// interleaved rounds. Reported: weight GB/s and the share of the streaming read.
// Usage: bench_matmul [--hidden 2048] [--intermediate 5632] [--kv-dim 256] [--reps 7]
//                     [--threads N] [--rows 1,4,16,32,64] [--layers 8] [--prefill-rows 128]
//                     [--sections float,bfloat16,half,quantized,prefill] [--huge-pages 0|1]
// --sections: the tables to run (default all), for iterating on one kernel.
// --prefill-rows: prefill-sized products of one layer, fp32 GEMM against bf16 weights
// through LibTorch's bf16 GEMM and through the widened fp32 GEMM (model::
// widened_linear_product); 0 skips them.
// --layers: distinct copies of the layer, multiplied one after another as a decode token
// runs its layers, so the weights come from memory and not from a last-level cache
// that one layer fits (a 4-bit TinyLlama layer is 24.8 MB); times are per layer.
// --huge-pages 1: the dense weights on transparent huge pages, as a run places its
// weight homes (tiergen/common/huge_pages.h); 0 (default) on whatever pages at::empty gets.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quantized_matmul.h"
#include "kernels/cpu/small_matmul.h"
#include "tiergen/common/huge_pages.h"
#include "tiergen/model/linear.h"

using namespace tiergen;
using namespace tiergen::bench;

namespace {

struct Options {
  int64_t hidden = 2048, intermediate = 5632, kv_dim = 256;
  int reps = 7;
  int threads = 0;
  int layers = 8;
  bool huge_pages = false;
  std::vector<int64_t> rows = {1, 4, 8, 16, 32, 64};
  std::vector<int64_t> prefill_rows = {128};
  std::vector<std::string> sections = {"float", "bfloat16", "half", "quantized", "prefill"};
  bool runs(const std::string& section) const {
    return std::find(sections.begin(), sections.end(), section) != sections.end();
  }
};

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  for (const std::string& item : parse_names(s)) out.push_back(std::atoll(item.c_str()));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--hidden") o.hidden = std::atoll(v.c_str());
    else if (k == "--intermediate") o.intermediate = std::atoll(v.c_str());
    else if (k == "--kv-dim") o.kv_dim = std::atoll(v.c_str());
    else if (k == "--reps") o.reps = std::atoi(v.c_str());
    else if (k == "--threads") o.threads = std::atoi(v.c_str());
    else if (k == "--rows") o.rows = parse_list(v);
    else if (k == "--layers") o.layers = std::max(1, std::atoi(v.c_str()));
    else if (k == "--huge-pages") o.huge_pages = std::atoi(v.c_str()) != 0;
    else if (k == "--prefill-rows") o.prefill_rows = parse_list(v);
    else if (k == "--sections") {
      const Options all;
      o.sections = parse_names(v);
      for (const std::string& name : o.sections) {
        if (!all.runs(name)) {
          std::fprintf(stderr, "unknown section %s (float, bfloat16, half, quantized, prefill)\n", name.c_str());
          std::exit(2);
        }
      }
    }
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// [out, in] shapes of one LLaMA layer's projections.
std::vector<std::pair<int64_t, int64_t>> layer_shapes(const Options& o) {
  const int64_t h = o.hidden, f = o.intermediate;
  return {{h, h}, {o.kv_dim, h}, {o.kv_dim, h}, {h, h}, {f, h}, {f, h}, {h, f}};
}

// Whether this LibTorch's at::linear multiplies `dtype` on the CPU (1.13 has no fp16
// matmul there).
bool linear_supports(at::ScalarType dtype) {
  try {
    (void)at::linear(at::ones({2, 8}, dtype), at::ones({4, 8}, dtype));
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

void bench_dtype(const Options& o, at::ScalarType dtype) {
  const bool with_linear = linear_supports(dtype);
  const auto shapes = layer_shapes(o);
  std::vector<at::Tensor> weights;  // layer after layer
  double weight_bytes = 0;          // all layers
  for (int layer = 0; layer < o.layers; ++layer) {
    for (auto [out, in] : shapes) {
      const at::Tensor w = (at::randn({out, in}) * 0.02).to(dtype).contiguous();
      weights.push_back(o.huge_pages ? empty_on_huge_pages(w.sizes(), dtype).copy_(w) : w);
      weight_bytes += double(weights.back().nbytes());
    }
  }
  Streams streams(static_cast<size_t>(weight_bytes));
  std::printf("\n## %s weights, one layer (%.1f MB), ms per layer over %d layers%s%s\n", c10::toString(dtype),
              weight_bytes / o.layers / 1e6, o.layers, o.huge_pages ? ", on huge pages" : "",
              with_linear ? "" : " (this LibTorch's at::linear cannot multiply them: its column converts both to fp32 "
                                 "and multiplies, the conversion timed)");
  std::printf("| rows | at::linear ms | small_matmul ms | speed-up | at::linear GB/s | small_matmul GB/s | "
              "read GB/s | small_matmul / read | max rel. diff | small_matmul unblocked ms | blocking speed-up "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  const int64_t default_rows = kernels::small_matmul_max_rows_setting();
  for (int64_t rows : o.rows) {
    std::vector<at::Tensor> xs;  // one per projection, shared by the layers
    for (auto [out, in] : shapes) xs.push_back((at::randn({rows, in})).to(dtype));
    std::vector<at::Tensor> ref(weights.size()), mine(weights.size()), unblocked(weights.size());
    auto run = [&](int64_t max_rows, std::vector<at::Tensor>& out) {
      kernels::set_small_matmul_max_rows(max_rows);
      for (size_t i = 0; i < weights.size(); ++i) {
        const at::Tensor& x = xs[i % shapes.size()];
        out[i] = max_rows == 0 && !with_linear ? model::linear_product(x.to(at::kFloat), weights[i].to(at::kFloat))
                                               : model::linear_product(x, weights[i]);
      }
    };
    const std::vector<double> t = interleaved_medians(
        o.reps, {[&] { run(0, ref); }, [&] { run(1 << 30, mine); }, [&] { streams.read(); },
                 [&] {
                   const bool blocking = kernels::small_matmul_blocking();
                   kernels::set_small_matmul_blocking(false);
                   run(1 << 30, unblocked);
                   kernels::set_small_matmul_blocking(blocking);
                 }});
    double diff = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const at::Tensor r = ref[i].to(at::kDouble), m = mine[i].to(at::kDouble);
      diff = std::max(diff, ((r - m).abs().max() / r.abs().max()).item<double>());
    }
    for (size_t i = 0; i < weights.size(); ++i)
      if (!at::equal(mine[i], unblocked[i])) std::printf("(!) blocking changed the bits of product %zu\n", i);
    std::printf("| %lld | %.2f | %.2f | %.2fx | %.1f | %.1f | %.1f | %.0f%% | %.1e | %.2f | %.2fx |\n",
                (long long)rows, t[0] * 1e3 / o.layers, t[1] * 1e3 / o.layers, t[0] / t[1], gbs(weight_bytes, t[0]),
                gbs(weight_bytes, t[1]), gbs(weight_bytes, t[2]), 100 * t[2] / t[1], diff, t[3] * 1e3 / o.layers,
                t[3] / t[1]);
  }
  kernels::set_small_matmul_max_rows(default_rows);
}

// One layer's projections quantized group-wise (groups of 64) and multiplied in place,
// against the bf16 small-row path and against what the runtime does with compressed
// weights today (dequantize each matrix to a dense bf16 copy, then multiply).
void bench_quantized(const Options& o) {
  struct Matrix {
    int64_t n, k;
    at::Tensor bf16;
    std::vector<uint8_t> q4, q8;
    std::vector<uint16_t> m4, s4, m8, s8;
    at::Tensor dense;  // dequantize target
  };
  const auto shapes = layer_shapes(o);
  std::vector<Matrix> mats;             // layer after layer
  double bf16_bytes = 0, q4_bytes = 0;  // one layer
  for (int layer = 0; layer < o.layers; ++layer) {
    for (auto [out, in] : shapes) {
      Matrix m;
      m.n = out, m.k = in;
      const at::Tensor w = (at::randn({out, in}) * 0.02).contiguous();
      m.bf16 = w.to(at::kBFloat16);
      m.dense = at::empty({out, in}, at::kBFloat16);
      for (int bits : {4, 8}) {
        const kernels::QuantFormat f{bits, 64};
        const kernels::QuantizedLayout l = kernels::quantized_layout(out, in, f);
        auto& packed = bits == 4 ? m.q4 : m.q8;
        auto& mins = bits == 4 ? m.m4 : m.m8;
        auto& scales = bits == 4 ? m.s4 : m.s8;
        packed.resize(l.packed_bytes()), mins.resize(l.meta_elems()), scales.resize(l.meta_elems());
        kernels::quantize(w.data_ptr<float>(), kernels::ElemType::F32, out, in, f, packed.data(), mins.data(),
                          scales.data());
        if (bits == 4 && layer == 0) q4_bytes += double(l.total_bytes());
      }
      if (layer == 0) bf16_bytes += double(m.bf16.nbytes());
      mats.push_back(std::move(m));
    }
  }
  std::printf("\n## 4/8-bit weights (groups of 64) used in place vs bf16, one layer (bf16 %.1f MB, 4-bit %.1f MB), "
              "ms per layer over %d layers\n",
              bf16_bytes / 1e6, q4_bytes / 1e6, o.layers);
  // "bf16 x" runs the kernel this CPU picks (AMX where it has it); "AVX-512 BF16" the
  // same products with AMX turned off, for the side-by-side.
  std::printf("| rows | bf16 small_matmul ms | 8-bit in place ms | 4-bit in place ms | 4-bit in place, bf16 x ms | "
              "4-bit in place, bf16 x, AVX-512 BF16 ms | 4-bit dequantize + bf16 matmul ms | 8-bit vs bf16 | "
              "4-bit vs bf16 | 4-bit bf16 x vs bf16 | bf16 x vs its AVX-512 BF16 | 4-bit in place vs dequantize "
              "| 4-bit in place, levels per row ms | shared levels speed-up "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t rows : o.rows) {
    std::vector<at::Tensor> xs, xs_bf16, ys;  // one per projection, shared by the layers
    for (auto [out, in] : shapes) {
      xs.push_back(at::randn({rows, in}));
      xs_bf16.push_back(xs.back().to(at::kBFloat16));
      ys.push_back(at::empty({rows, out}));
    }
    auto in_place = [&](int bits, bool bf16_x) {
      for (size_t i = 0; i < mats.size(); ++i) {
        const Matrix& m = mats[i];
        kernels::QuantizedMatmulArgs a;
        if (bf16_x) {
          a.x_bf16 = reinterpret_cast<const uint16_t*>(xs_bf16[i % shapes.size()].data_ptr<at::BFloat16>());
        } else {
          a.x = xs[i % shapes.size()].data_ptr<float>();
        }
        a.rows = rows, a.k = m.k, a.n = m.n;
        a.packed = bits == 4 ? m.q4.data() : m.q8.data();
        a.mins = bits == 4 ? m.m4.data() : m.m8.data();
        a.scales = bits == 4 ? m.s4.data() : m.s8.data();
        a.format = {bits, 64};
        a.y = ys[i % shapes.size()].data_ptr<float>();
        a.num_threads = at::get_num_threads();
        kernels::quantized_matmul(a);
      }
    };
    auto dequantize_then_matmul = [&] {
      for (size_t i = 0; i < mats.size(); ++i) {
        Matrix& m = mats[i];
        kernels::dequantize(m.q4.data(), m.m4.data(), m.s4.data(), m.n, m.k, {4, 64}, m.dense.data_ptr(),
                            kernels::ElemType::BF16);
        model::linear_product(xs_bf16[i % shapes.size()], m.dense);
      }
    };
    auto bf16 = [&] {
      for (size_t i = 0; i < mats.size(); ++i) model::linear_product(xs_bf16[i % shapes.size()], mats[i].bf16);
    };
    auto without_amx = [&] {
      kernels::set_amx_kernels_enabled(false);
      in_place(4, true);
      kernels::set_amx_kernels_enabled(true);
    };
    // The AVX2 kernel converting each row's levels itself (fp32 x), for the side-by-side.
    auto levels_per_row = [&] {
      kernels::set_quantized_matmul_shared_levels(false);
      in_place(4, false);
      kernels::set_quantized_matmul_shared_levels(true);
    };
    const std::vector<double> t =
        interleaved_medians(o.reps, {bf16, [&] { in_place(8, false); }, [&] { in_place(4, false); },
                                     [&] { in_place(4, true); }, without_amx, dequantize_then_matmul, levels_per_row});
    const double ms = 1e3 / o.layers;  // seconds over all layers to ms per layer
    std::printf("| %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %.2f | "
                "%.2fx |\n",
                (long long)rows, t[0] * ms, t[1] * ms, t[2] * ms, t[3] * ms, t[4] * ms, t[5] * ms,
                t[0] / t[1], t[0] / t[2], t[0] / t[3], t[4] / t[3], t[5] / t[2], t[6] * ms, t[6] / t[2]);
  }
}

// Prefill-sized products of one layer: LibTorch's fp32 GEMM, its bf16 GEMM (native
// with AVX-512 BF16 or AMX, a scalar fallback elsewhere) and bf16 weights widened to
// fp32 tile by tile (what linear_product does on a CPU without native bf16 products).
void bench_prefill(const Options& o) {
  const auto shapes = layer_shapes(o);
  std::vector<at::Tensor> w32, wb;
  for (auto [out, in] : shapes) {
    w32.push_back((at::randn({out, in}) * 0.02).contiguous());
    wb.push_back(w32.back().to(at::kBFloat16));
  }
  std::printf("\n## Prefill-sized products, one layer, ms (CPU kernels: %s, native bf16 products: %s)\n",
              kernels::cpu_isa_name(kernels::cpu_isa_in_use()), kernels::cpu_has_native_bf16_products() ? "yes" : "no");
  std::printf("| rows | fp32 at::linear ms | bf16 at::linear ms | bf16 widened ms | widened vs fp32 | widened vs bf16 "
              "at::linear | max rel. diff widened |\n|---|---|---|---|---|---|---|\n");
  for (int64_t rows : o.prefill_rows) {
    if (rows <= 0) continue;
    std::vector<at::Tensor> x32, xb;
    for (auto [out, in] : shapes) {
      x32.push_back(at::randn({rows, in}));
      xb.push_back(x32.back().to(at::kBFloat16));
    }
    std::vector<at::Tensor> wide(shapes.size());
    const std::vector<double> t = interleaved_medians(
        std::min(o.reps, 3),
        {[&] {
           for (size_t i = 0; i < shapes.size(); ++i) (void)at::linear(x32[i], w32[i]);
         },
         [&] {
           for (size_t i = 0; i < shapes.size(); ++i) (void)at::linear(xb[i], wb[i]);
         },
         [&] {
           for (size_t i = 0; i < shapes.size(); ++i) wide[i] = model::widened_linear_product(xb[i], wb[i]);
         }});
    double diff = 0;  // against the exact product of the stored bf16 values
    for (size_t i = 0; i < shapes.size(); ++i) {
      const at::Tensor r = at::linear(xb[i].to(at::kDouble), wb[i].to(at::kDouble)), m = wide[i].to(at::kDouble);
      diff = std::max(diff, ((r - m).abs().max() / r.abs().max()).item<double>());
    }
    std::printf("| %lld | %.1f | %.1f | %.1f | %.2fx | %.1fx | %.1e |\n", (long long)rows, t[0] * 1e3, t[1] * 1e3,
                t[2] * 1e3, t[0] / t[2], t[1] / t[2], diff);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  at::set_num_threads(omp_get_max_threads());
  std::printf("threads: %d (OpenMP and LibTorch); medians of %d interleaved rounds after a warm-up\n",
              omp_get_max_threads(), o.reps);
  if (o.runs("float")) bench_dtype(o, at::kFloat);
  if (o.runs("bfloat16")) bench_dtype(o, at::kBFloat16);
  if (o.runs("half")) bench_dtype(o, at::kHalf);
  if (o.runs("quantized")) bench_quantized(o);
  if (o.runs("prefill")) bench_prefill(o);
  return 0;
}
