#pragma once
// Internals of decode_attention(): a cache view resolved to row addresses, and the
// per-(sequence, kv head) kernels (portable in attention.cpp, AVX2 in
// attention_avx2.cpp).
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"

namespace tiergen::kernels::detail {

struct KvRows {
  const uint8_t* data = nullptr;
  int64_t row_bytes = 0;
  const uint16_t* mins = nullptr;
  const uint16_t* scales = nullptr;
  int64_t groups_per_row = 0;
  ElemType type = ElemType::F32;
  bool quantized = false;
  QuantFormat format;

  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  const uint16_t* row_mins(int64_t r) const { return mins + r * groups_per_row; }
  const uint16_t* row_scales(int64_t r) const { return scales + r * groups_per_row; }
};

// One task: the query heads [kv_head*n_rep, (kv_head+1)*n_rep) of one sequence, which
// attend to rows [k_row0 + begin, k_row0 + end) of K (likewise V). q and out point at
// the first of those heads (n_rep*head_dim contiguous floats).
struct GroupTask {
  const float* q;
  float* out;
  int64_t k_row0, v_row0;
  int64_t begin, end;  // end > begin
};

struct Scratch {
  std::vector<float> scores;  // [n_rep, end - begin]
  std::vector<float> q;       // [n_rep, head_dim], pre-scaled
  std::vector<float> acc;     // [n_rep, head_dim]
  std::vector<float> row;     // [head_dim], portable path only
};

void attend_group(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep,
                  int64_t head_dim, float scale, Scratch& scratch);

#if defined(__x86_64__)
// The AVX2 kernel handles head_dim % 8 == 0 and, for quantized rows, group_size % 8 == 0.
bool avx2_attention_supports(const KvRows& k, const KvRows& v, int64_t head_dim);
void attend_group_avx2(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep,
                       int64_t head_dim, float scale, Scratch& scratch);
#endif

}  // namespace tiergen::kernels::detail
