#include "bench/pipeline.hpp"

namespace ptune::bench {

void warm_up(Pipeline& p, int64_t n, const measure::Progress& progress, const char* phase) {
  Spans ignored;
  for (int64_t i = 0; i < n; ++i) {
    p.step(ignored);
    if (progress) progress(phase, i + 1, n);
  }
}

}  // namespace ptune::bench
