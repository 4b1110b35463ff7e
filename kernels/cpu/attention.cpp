// decode_attention(): argument checks, the OpenMP loop over (sequence, kv head) tasks,
// and the portable per-task kernel (the AVX2 one is in attention_avx2.cpp).
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quantize_rows.h"
#include "tiergen/common/error.h"

namespace tiergen::kernels {
namespace {

detail::KvRows resolve(const KvView& view, const char* name, int64_t head_dim) {
  TG_CHECK(view.data, "decode_attention: {} cache pointer is null", name);
  detail::KvRows rows;
  rows.data = static_cast<const uint8_t*>(view.data);
  rows.type = view.type;
  rows.quantized = view.quantized;
  rows.format = view.format;
  if (view.quantized) {
    const QuantizedLayout layout = quantized_layout(1, head_dim, view.format);
    TG_CHECK(view.mins && view.scales, "decode_attention: quantized {} cache lacks mins/scales", name);
    rows.row_bytes = layout.packed_bytes_per_row;
    rows.mins = view.mins;
    rows.scales = view.scales;
    rows.groups_per_row = layout.groups_per_row;
  } else {
    rows.row_bytes = head_dim * elem_size(view.type);
  }
  return rows;
}

}  // namespace

namespace detail {

// Portable kernel: each K/V row is converted into a float row, then used by every
// query head of the group.
void attend_group(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep,
                  int64_t head_dim, float scale, Scratch& scratch) {
  const int64_t len = task.end - task.begin, d = head_dim;
  float* scores = scratch.scores.data();
  float* acc = scratch.acc.data();
  float* row = scratch.row.data();
  auto load_row = [&](const KvRows& kv, int64_t r) {
    if (kv.quantized) {
      dequantize_row(kv.row(r), kv.row_mins(r), kv.row_scales(r), d, kv.format, row, ElemType::F32);
    } else {
      row_to_float(kv.row(r), kv.type, d, row);
    }
  };
  for (int64_t t = 0; t < len; ++t) {
    load_row(k, task.k_row0 + task.begin + t);
    for (int64_t h = 0; h < n_rep; ++h) {
      const float* qh = task.q + h * d;
      float s = 0.0f;
      for (int64_t i = 0; i < d; ++i) s += qh[i] * row[i];
      scores[h * len + t] = s * scale;
    }
  }
  for (int64_t h = 0; h < n_rep; ++h) {
    float* sh = scores + h * len;
    const float m = *std::max_element(sh, sh + len);
    float sum = 0.0f;
    for (int64_t t = 0; t < len; ++t) sum += (sh[t] = std::exp(sh[t] - m));
    const float inv = 1.0f / sum;
    for (int64_t t = 0; t < len; ++t) sh[t] *= inv;
  }
  std::fill(acc, acc + n_rep * d, 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    load_row(v, task.v_row0 + task.begin + t);
    for (int64_t h = 0; h < n_rep; ++h) {
      const float p = scores[h * len + t];
      float* ah = acc + h * d;
      for (int64_t i = 0; i < d; ++i) ah[i] += p * row[i];
    }
  }
  std::copy(acc, acc + n_rep * d, task.out);
}

}  // namespace detail

void decode_attention(const DecodeAttentionArgs& a) {
  TG_CHECK(a.batch >= 0 && a.num_heads > 0 && a.num_kv_heads > 0 && a.head_dim > 0,
           "decode_attention: bad shape batch {} heads {} kv heads {} head_dim {}", a.batch,
           a.num_heads, a.num_kv_heads, a.head_dim);
  TG_CHECK(a.num_heads % a.num_kv_heads == 0,
           "decode_attention: {} query heads are not a multiple of {} kv heads", a.num_heads, a.num_kv_heads);
  TG_CHECK(a.seq_len >= 0 && a.seq_len <= a.max_len,
           "decode_attention: seq_len {} outside the cache capacity {}", a.seq_len, a.max_len);
  if (a.batch == 0) return;
  TG_CHECK(a.q && a.out, "decode_attention: null q or out");
  const int64_t d = a.head_dim, n_rep = a.num_heads / a.num_kv_heads;
  const int64_t q_stride = a.q_seq_stride ? a.q_seq_stride : a.num_heads * d;
  const int64_t out_stride = a.out_seq_stride ? a.out_seq_stride : a.num_heads * d;
  TG_CHECK(q_stride >= a.num_heads * d && out_stride >= a.num_heads * d,
           "decode_attention: q/out sequence strides ({}, {}) smaller than num_heads*head_dim {}",
           q_stride, out_stride, a.num_heads * d);
  const detail::KvRows k = resolve(a.k, "K", d), v = resolve(a.v, "V", d);
  const int64_t k_head = a.k.head_stride ? a.k.head_stride : a.max_len;
  const int64_t k_seq = a.k.seq_stride ? a.k.seq_stride : a.num_kv_heads * a.max_len;
  const int64_t v_head = a.v.head_stride ? a.v.head_stride : a.max_len;
  const int64_t v_seq = a.v.seq_stride ? a.v.seq_stride : a.num_kv_heads * a.max_len;
  TG_CHECK(k_head >= a.max_len && v_head >= a.max_len, "decode_attention: head stride below max_len");
  int64_t max_span = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t s = a.start ? a.start[b] : 0;
    TG_CHECK(s >= 0, "decode_attention: sequence {} starts at negative position {}", b, s);
    max_span = std::max(max_span, a.seq_len - s);
  }
#if defined(__x86_64__)
  const bool simd = use_avx2_kernels() && detail::avx2_attention_supports(k, v, d);
#endif
  const int64_t tasks = a.batch * a.num_kv_heads;
  const int threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
#pragma omp parallel num_threads(threads) if (tasks > 1)
  {
    detail::Scratch scratch;
    scratch.scores.resize(n_rep * std::max<int64_t>(max_span, 1));
    scratch.q.resize(n_rep * d);
    scratch.acc.resize(n_rep * d);
    scratch.row.resize(d);
    // Dynamic: left padding makes tasks of different lengths.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task_id = 0; task_id < tasks; ++task_id) {
      const int64_t b = task_id / a.num_kv_heads, kh = task_id % a.num_kv_heads;
      detail::GroupTask task;
      task.q = a.q + b * q_stride + kh * n_rep * d;
      task.out = a.out + b * out_stride + kh * n_rep * d;
      task.k_row0 = b * k_seq + kh * k_head;
      task.v_row0 = b * v_seq + kh * v_head;
      task.begin = a.start ? a.start[b] : 0;
      task.end = a.seq_len;
      if (task.begin >= task.end) {
        std::fill(task.out, task.out + n_rep * d, 0.0f);
        continue;
      }
#if defined(__x86_64__)
      if (simd) {
        detail::attend_group_avx2(k, v, task, n_rep, d, a.scale, scratch);
        continue;
      }
#endif
      detail::attend_group(k, v, task, n_rep, d, a.scale, scratch);
    }
  }
}

int64_t decode_attention_kv_bytes(const DecodeAttentionArgs& a) {
  int64_t positions = 0;
  for (int64_t b = 0; b < a.batch; ++b) positions += std::max<int64_t>(0, a.seq_len - (a.start ? a.start[b] : 0));
  auto row_bytes = [&](const KvView& view) {
    if (!view.quantized) return a.head_dim * elem_size(view.type);
    const QuantizedLayout l = quantized_layout(1, a.head_dim, view.format);
    return l.packed_bytes_per_row + 2 * l.groups_per_row * int64_t(sizeof(uint16_t));
  };
  return positions * a.num_kv_heads * (row_bytes(a.k) + row_bytes(a.v));
}

}  // namespace tiergen::kernels
