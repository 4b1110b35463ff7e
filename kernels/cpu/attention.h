#pragma once
// Decode attention on the CPU over a KV cache in host memory (FlexGen's "CPU
// attention": when the cache lives on the CPU, moving one token's query there is far
// cheaper than moving the cache to the GPU). One new token per sequence.
//
// Cache layout (pinned): K and V each [batch, kv_heads, max_len, head_dim], row-major,
// one row per (sequence, kv head, position). Rows are F32/F16/BF16 elements, or
// group-wise quantized rows (kernels/cpu/quantize.h) with rows = batch*kv_heads*max_len,
// cols = head_dim, groups along head_dim. Strides (in rows) let a caller pass any part
// of a larger cache, e.g. the sequences of a batch that one tier holds.
//
// The kernel is memory-bound by design: each (sequence, kv head) is one task that
// reads its K rows once and its V rows once for all query heads sharing that kv head
// (grouped-query attention), converting or dequantizing in registers; fp32 math,
// exact softmax with max subtraction.
#include <cstdint>

#include "kernels/cpu/quantize.h"

namespace tiergen::kernels {

struct KvView {
  const void* data = nullptr;      // elements of `type`, or packed levels when quantized
  ElemType type = ElemType::F16;   // for uncompressed caches
  bool quantized = false;
  QuantFormat format;              // for quantized caches
  const uint16_t* mins = nullptr;  // quantized: [rows, groups_per_row] fp16 bits
  const uint16_t* scales = nullptr;
  // Rows between consecutive sequences and between consecutive kv heads of one
  // sequence; 0 means the dense layout (num_kv_heads*max_len and max_len).
  int64_t seq_stride = 0;
  int64_t head_stride = 0;

  static KvView dense(const void* data, ElemType type) {
    KvView v;
    v.data = data;
    v.type = type;
    return v;
  }
  static KvView compressed(const uint8_t* packed, const uint16_t* mins, const uint16_t* scales,
                           QuantFormat format) {
    KvView v;
    v.data = packed;
    v.quantized = true;
    v.format = format;
    v.mins = mins;
    v.scales = scales;
    return v;
  }
};

struct DecodeAttentionArgs {
  const float* q = nullptr;  // [batch, num_heads, head_dim] fp32
  float* out = nullptr;      // [batch, num_heads, head_dim] fp32
  int64_t batch = 0;
  int64_t num_heads = 0;     // query heads; a multiple of num_kv_heads
  int64_t num_kv_heads = 0;  // query head h reads kv head h / (num_heads / num_kv_heads)
  int64_t head_dim = 0;
  int64_t max_len = 0;       // cache capacity per sequence (rows per kv head)
  int64_t seq_len = 0;       // positions [0, seq_len) are filled, the new token included
  // Per sequence, the first valid position (left padding): sequence b attends to
  // [start[b], seq_len). nullptr means all start at 0. A sequence with
  // start[b] >= seq_len has nothing to attend to and gets a zero output.
  const int64_t* start = nullptr;
  float scale = 1.0f;        // applied to q.k, usually 1/sqrt(head_dim)
  KvView k, v;
  // Floats between consecutive sequences in q / out; 0 means num_heads*head_dim.
  int64_t q_seq_stride = 0;
  int64_t out_seq_stride = 0;
  int num_threads = 0;       // OpenMP threads; 0 = the OpenMP default
};

// Computes out = softmax(scale * q K^T) V per sequence and query head. Throws
// tiergen::Error on inconsistent arguments.
void decode_attention(const DecodeAttentionArgs& args);

// Bytes of K and V that decode_attention() reads for these arguments (valid positions
// only, metadata included), for bandwidth figures.
int64_t decode_attention_kv_bytes(const DecodeAttentionArgs& args);

}  // namespace tiergen::kernels
