#include "tiergen/model/weight_source.h"

namespace tiergen::model {

void WeightSource::read_into(const TensorSpec& tensor, const at::Tensor& out) const {
  out.copy_(read(tensor, out.scalar_type()));
}

}  // namespace tiergen::model
