#pragma once
// The lengths of a layer's W rows: the input features (k) of each of its products, with
// the share of the products' weight bytes at each. The CPU's small-row kernels read a
// short row at a lower rate per byte than a long one (the sums of every row of x finish
// at each W row's end: on a 2-core Zen 5 guest, fp32 at 16 rows of x ran 21 GB/s over rows
// of 768 elements against 27 over rows of 4096, the same bytes), so a profile times its
// products at two row lengths and prices each product at its own
// (HardwareProfile::cpu_product_seconds).
#include <cstdint>
#include <vector>

namespace tiergen::policy {

struct RowLengthShare {
  int64_t row_length = 0;     // elements of one W row: the product's input features
  double bytes_fraction = 0;  // of the products' weight bytes
};

// Empty: the products are priced at the row length the profile's main rates were timed at.
using ProductRowLengths = std::vector<RowLengthShare>;

}  // namespace tiergen::policy
