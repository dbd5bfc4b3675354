#pragma once
/// Model FLOPs of one sample, counted from the shapes of the operations a forward runs (not
/// estimated): convolutions (grouped and depthwise too), matrix products (linear layers' addmm,
/// mm, bmm) and attention's two matrix products. One multiply-add counts 2 FLOPs; elementwise
/// work (activations, norms, softmax, additions, pooling) is not counted, as PyTorch's
/// torch.utils.flop_counter.FlopCounterMode counts. docs/models.md states the convention.

#include <cstdint>
#include <string>

namespace ptune::models {

/// FLOPs of one sample through a model.
struct Flops {
  double forward = 0;   // the forward pass
  double backward = 0;  // the backward pass: per counted operation, the forward's FLOPs once for
                        // each operand that needs a gradient (grad input, grad weight), so the
                        // first layer, whose input needs none, counts once
  /// A training step's model FLOPs (forward + backward; the optimizer's update not counted).
  double train() const { return forward + backward; }
};

/// Counts `arch`'s FLOPs per sample at square images of side `image_size` and `num_classes`
/// classes: builds the model on the CPU (the global generator's state is kept) and runs one
/// forward of one image with LibTorch's operator observer (at::RecordFunction) counting the
/// outermost convolution, addmm, mm, bmm, baddbmm and scaled_dot_product_attention calls from
/// their input shapes. Results are remembered per (arch, classes, size) for the process.
/// Throws std::invalid_argument as models::make() (unknown arch, an image size it cannot take).
Flops count_flops(const std::string& arch, int64_t num_classes, int64_t image_size);

/// Makes `flops` the count that count_flops() returns for (arch, num_classes, image_size) in this
/// process, counted elsewhere: a row's child process is given its parent's count, so that it
/// builds no model of its own for counting. Under glibc's default malloc such a model's freed
/// weights stay in the heap and change how often every later step faults pages in (a ConvNeXt-Tiny
/// step at 64 px: about 400 faults a step with the counting model, 21,700 without it, as in a
/// Python process), and a row's child is to be a default process (docs/statistics.md).
void remember_flops(const std::string& arch, int64_t num_classes, int64_t image_size, const Flops& flops);

}  // namespace ptune::models
