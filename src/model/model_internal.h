#pragma once
// Per-family implementations behind include/tiergen/model/forward.h.
#include "tiergen/model/forward.h"

namespace tiergen::model {

// x W^T + b where W (and b) is `name`.weight (.bias); the product runs where W lives
// (a host-resident weight multiplied by a device activation comes back to the device).
at::Tensor linear(const at::Tensor& x, const LayerWeights& w, const std::string& name);
// Rows `ids` of an embedding table, looked up where the table lives; the result on ids'
// device.
at::Tensor lookup_rows(const at::Tensor& table, const at::Tensor& ids);
// The same for the table `name` of `w`, held whole or read by rows (LayerWeights::table_rows).
at::Tensor lookup_rows(const LayerWeights& w, const std::string& name, const at::Tensor& ids);

namespace opt {
at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step);
QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden, const StepInputs& step);
at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden, const at::Tensor& attention);
at::Tensor head_hidden(const Spec& spec, const LayerWeights& w, const at::Tensor& last);
}  // namespace opt

namespace llama {
at::Tensor embed(const Spec& spec, const LayerWeights& w, const at::Tensor& ids, const StepInputs& step);
QkvProjection project_qkv(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden, const StepInputs& step);
at::Tensor finish_layer(const Spec& spec, const LayerWeights& w, const at::Tensor& hidden, const at::Tensor& attention);
at::Tensor head_hidden(const Spec& spec, const LayerWeights& w, const at::Tensor& last);
void prepare_step(const Spec& spec, StepInputs& step, const at::Device& device, at::ScalarType dtype);
// RoPE inverse frequencies [head_dim/2] (float32), with llama3 scaling when configured.
at::Tensor rope_inv_freq(const Spec& spec, const at::Device& device = at::kCPU);
}  // namespace llama

}  // namespace tiergen::model
