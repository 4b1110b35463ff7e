#include "policy/guardrails.h"

#include <algorithm>

namespace tiergen::policy {

namespace {

// gpu batches per block: FlexGen's hand policies use 1 to 8 (OPT-30B: 24 x 2, OPT-175B:
// 32 x 8).
std::vector<int64_t> batch_counts(const GuardrailShape& s, int64_t gpu_batch_size) {
  if (s.num_gpu_batches > 0) return {s.num_gpu_batches};
  std::vector<int64_t> out;
  for (int64_t k : {1, 2, 3, 4, 6, 8}) {
    if (k > s.max_num_gpu_batches) break;
    if (s.num_sequences > 0 && k > 1 && k * gpu_batch_size > s.num_sequences) break;
    out.push_back(k);
  }
  return out;
}

// Where the KV cache and the activations live, as in FlexGen's hand policies: both on
// the gpu, or both on the cpu (attention there, where allowed, else the cache is loaded);
// on a stand-in also the cache on the cpu with attention there and the activations on
// the gpu tier (see guardrails.h).
struct Homes {
  bool cache_on_cpu, act_on_cpu;
};

std::vector<Homes> homes_for(const GuardrailShape& s) {
  std::vector<Homes> homes = {Homes{false, false}, Homes{true, true}};
  if (s.host_weights_multiplied_at_home && s.allow_cpu_attention) homes.push_back(Homes{true, false});
  return homes;
}

}  // namespace

std::vector<runtime::Policy> guardrail_policies(const GuardrailShape& s) {
  std::vector<runtime::Policy> out;
  for (int64_t gbs : s.gpu_batch_sizes) {
    for (int64_t ngb : batch_counts(s, gbs)) {
      for (Homes homes : homes_for(s)) {
        if (homes.act_on_cpu && ngb < 2) continue;  // store, load and compute would run in series
        for (int w_gpu = 100; w_gpu >= 0; w_gpu -= 10) {
          runtime::Policy p;
          p.gpu_batch_size = gbs;
          p.num_gpu_batches = ngb;
          p.w_gpu_percent = w_gpu;
          p.w_cpu_percent = 100 - w_gpu;
          p.cache_gpu_percent = homes.cache_on_cpu ? 0 : 100;
          p.cache_cpu_percent = homes.cache_on_cpu ? 100 : 0;
          p.act_gpu_percent = homes.act_on_cpu ? 0 : 100;
          p.act_cpu_percent = homes.act_on_cpu ? 100 : 0;
          p.cpu_cache_compute = homes.cache_on_cpu && s.allow_cpu_attention;
          out.push_back(p);
          if (s.host_weights_multiplied_at_home && p.w_cpu_percent > 0) {
            p.cpu_weight_compute_prefill = p.cpu_weight_compute_decode = true;
            out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace tiergen::policy
