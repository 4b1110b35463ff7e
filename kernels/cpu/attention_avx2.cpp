// AVX2 kernel of decode_attention(): one (sequence, kv head) task at a time.
// Scores for all query heads of the group are computed from a single pass over the K
// rows, and the output from a single pass over the V rows; rows are converted (fp16,
// bf16) or dequantized (4/8-bit levels * scale + min) eight lanes at a time in
// registers. Work is done in tiles of R rows x H heads (R*H = 4) so that four FMA
// chains run independently whatever the group size.
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace tiergen::kernels::detail {
namespace {

enum class Fmt { F32, F16, BF16, Q4, Q8 };

Fmt format_of(const KvRows& kv) {
  if (kv.quantized) return kv.format.bits == 4 ? Fmt::Q4 : Fmt::Q8;
  switch (kv.type) {
    case ElemType::F32: return Fmt::F32;
    case ElemType::F16: return Fmt::F16;
    case ElemType::BF16: return Fmt::BF16;
  }
  return Fmt::F32;
}

constexpr bool is_quantized(Fmt f) { return f == Fmt::Q4 || f == Fmt::Q8; }

// Elements [c, c+8) of a row; quantized rows dequantize with their group's min/scale
// (stored groups are full width, so element c sits at byte c*bits/8 of the row).
template <Fmt F>
TG_AVX2 inline __m256 load8(const uint8_t* row, int64_t c, __m256 min, __m256 scale) {
  if constexpr (F == Fmt::F32) {
    return avx2::load8_f32(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (F == Fmt::F16) {
    return avx2::load8_f16(reinterpret_cast<const uint16_t*>(row) + c);
  } else if constexpr (F == Fmt::BF16) {
    return avx2::load8_bf16(reinterpret_cast<const uint16_t*>(row) + c);
  } else if constexpr (F == Fmt::Q4) {
    return _mm256_fmadd_ps(avx2::load8_levels_q4(row + c / 2), scale, min);
  } else {
    return _mm256_fmadd_ps(avx2::load8_levels_q8(row + c), scale, min);
  }
}

// Metadata of group k of row r (k counted by the caller: a division here would cost
// as much as dequantizing the group).
template <Fmt F>
TG_AVX2 inline void group_meta(const KvRows& kv, int64_t r, int64_t k, __m256* min, __m256* scale) {
  if constexpr (is_quantized(F)) {
    *min = _mm256_set1_ps(_cvtsh_ss(kv.row_mins(r)[k]));
    *scale = _mm256_set1_ps(_cvtsh_ss(kv.row_scales(r)[k]));
  } else {
    *min = *scale = _mm256_setzero_ps();
  }
}

// Software prefetch distance. A task streams two contiguous regions (its K rows, then
// its V rows) of a few hundred KiB each; asking for lines 2 KiB ahead keeps more misses
// in flight than the hardware prefetcher alone. On the 2-core dev box 2 KiB read at
// 83% of the streaming-read rate, against 74% for 1 KiB and 56-75% for 4 KiB (8 and
// 16 KiB were slower still: lines arrive too early and are evicted before use).
constexpr int64_t kPrefetchBytes = 2048;

// Prefetching past the end of the cache is harmless: prefetches never fault.
TG_AVX2 inline void prefetch_span(const uint8_t* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
}

// scores[h*len + t + i] = q_h . K[row0 + i] for R rows and H heads (q pre-scaled).
template <Fmt F, int R, int H>
TG_AVX2 void score_tile(const KvRows& k, int64_t row0, const float* q, int64_t d, float* scores,
                        int64_t len, int64_t t) {
  prefetch_span(k.row(row0) + kPrefetchBytes, R * k.row_bytes);
  __m256 acc[R][H];
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_ps();
  const int64_t g = is_quantized(F) ? k.format.group_size : d;
  for (int64_t j0 = 0, grp = 0; j0 < d; j0 += g, ++grp) {
    __m256 min[R], scale[R];
    for (int r = 0; r < R; ++r) group_meta<F>(k, row0 + r, grp, &min[r], &scale[r]);
    const int64_t j1 = std::min(j0 + g, d);
    for (int64_t c = j0; c < j1; c += 8) {
      __m256 qv[H];
      for (int h = 0; h < H; ++h) qv[h] = _mm256_loadu_ps(q + h * d + c);
      for (int r = 0; r < R; ++r) {
        const __m256 kv = load8<F>(k.row(row0 + r), c, min[r], scale[r]);
        for (int h = 0; h < H; ++h) acc[r][h] = _mm256_fmadd_ps(qv[h], kv, acc[r][h]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < H; ++h) scores[h * len + t + r] = avx2::hsum(acc[r][h]);
}

// acc_h += p[h*len + t + i] * V[row0 + i] for R rows and H heads.
template <Fmt F, int R, int H>
TG_AVX2 void accumulate_tile(const KvRows& v, int64_t row0, const float* p, int64_t len, int64_t t,
                             float* acc, int64_t d) {
  prefetch_span(v.row(row0) + kPrefetchBytes, R * v.row_bytes);
  __m256 pb[R][H];
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < H; ++h) pb[r][h] = _mm256_set1_ps(p[h * len + t + r]);
  const int64_t g = is_quantized(F) ? v.format.group_size : d;
  for (int64_t j0 = 0, grp = 0; j0 < d; j0 += g, ++grp) {
    __m256 min[R], scale[R];
    for (int r = 0; r < R; ++r) group_meta<F>(v, row0 + r, grp, &min[r], &scale[r]);
    const int64_t j1 = std::min(j0 + g, d);
    for (int64_t c = j0; c < j1; c += 8) {
      __m256 vv[R];
      for (int r = 0; r < R; ++r) vv[r] = load8<F>(v.row(row0 + r), c, min[r], scale[r]);
      for (int h = 0; h < H; ++h) {
        __m256 a = _mm256_loadu_ps(acc + h * d + c);
        for (int r = 0; r < R; ++r) a = _mm256_fmadd_ps(pb[r][h], vv[r], a);
        _mm256_storeu_ps(acc + h * d + c, a);
      }
    }
  }
}

// In place: s <- softmax(s) over len scores.
TG_AVX2 void softmax(float* s, int64_t len) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t t = 0;
  for (; t + 8 <= len; t += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + t));
  float m = -INFINITY;
  {
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    for (float x : lanes) m = std::max(m, x);
    for (int64_t i = t; i < len; ++i) m = std::max(m, s[i]);
  }
  const __m256 vm = _mm256_set1_ps(m);
  __m256 vsum = _mm256_setzero_ps();
  for (t = 0; t + 8 <= len; t += 8) {
    const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
    _mm256_storeu_ps(s + t, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = avx2::hsum(vsum);
  if (t < len) {
    float tail[8] = {0};
    for (int64_t i = t; i < len; ++i) tail[i - t] = s[i] - m;
    float e[8];
    _mm256_storeu_ps(e, avx2::exp8(_mm256_loadu_ps(tail)));
    for (int64_t i = t; i < len; ++i) sum += (s[i] = e[i - t]);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (t = 0; t + 8 <= len; t += 8) _mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), inv));
  for (; t < len; ++t) s[t] *= 1.0f / sum;
}

template <Fmt F, int H>
TG_AVX2 void attend(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep, int64_t d,
                    float scale, Scratch& scratch) {
  constexpr int R = 4 / H;
  const int64_t len = task.end - task.begin;
  float* q = scratch.q.data();
  float* scores = scratch.scores.data();
  float* acc = scratch.acc.data();
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n_rep * d; i += 8) _mm256_storeu_ps(q + i, _mm256_mul_ps(_mm256_loadu_ps(task.q + i), vscale));

  const int64_t k0 = task.k_row0 + task.begin, v0 = task.v_row0 + task.begin;
  for (int64_t h = 0; h < n_rep; h += H) {
    int64_t t = 0;
    for (; t + R <= len; t += R) score_tile<F, R, H>(k, k0 + t, q + h * d, d, scores + h * len, len, t);
    for (; t < len; ++t) score_tile<F, 1, H>(k, k0 + t, q + h * d, d, scores + h * len, len, t);
  }
  for (int64_t h = 0; h < n_rep; ++h) softmax(scores + h * len, len);
  std::fill(acc, acc + n_rep * d, 0.0f);
  for (int64_t h = 0; h < n_rep; h += H) {
    int64_t t = 0;
    for (; t + R <= len; t += R) accumulate_tile<F, R, H>(v, v0 + t, scores + h * len, len, t, acc + h * d, d);
    for (; t < len; ++t) accumulate_tile<F, 1, H>(v, v0 + t, scores + h * len, len, t, acc + h * d, d);
  }
  std::copy(acc, acc + n_rep * d, task.out);
}

template <Fmt F>
TG_AVX2 void attend_fmt(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep, int64_t d,
                        float scale, Scratch& scratch) {
  if (n_rep % 4 == 0) return attend<F, 4>(k, v, task, n_rep, d, scale, scratch);
  if (n_rep % 2 == 0) return attend<F, 2>(k, v, task, n_rep, d, scale, scratch);
  attend<F, 1>(k, v, task, n_rep, d, scale, scratch);
}

}  // namespace

bool avx2_attention_supports(const KvRows& k, const KvRows& v, int64_t head_dim) {
  const bool same = format_of(k) == format_of(v) && (!k.quantized || k.format.group_size == v.format.group_size);
  return same && head_dim % 8 == 0 && (!k.quantized || k.format.group_size % 8 == 0);
}

TG_AVX2 void attend_group_avx2(const KvRows& k, const KvRows& v, const GroupTask& task, int64_t n_rep,
                               int64_t head_dim, float scale, Scratch& scratch) {
  switch (format_of(k)) {
    case Fmt::F32: return attend_fmt<Fmt::F32>(k, v, task, n_rep, head_dim, scale, scratch);
    case Fmt::F16: return attend_fmt<Fmt::F16>(k, v, task, n_rep, head_dim, scale, scratch);
    case Fmt::BF16: return attend_fmt<Fmt::BF16>(k, v, task, n_rep, head_dim, scale, scratch);
    case Fmt::Q4: return attend_fmt<Fmt::Q4>(k, v, task, n_rep, head_dim, scale, scratch);
    case Fmt::Q8: return attend_fmt<Fmt::Q8>(k, v, task, n_rep, head_dim, scale, scratch);
  }
}

}  // namespace tiergen::kernels::detail
#endif  // __x86_64__
