#include "config/arch.hpp"

namespace ptune::config {

const std::vector<std::string>& resnet_architectures() {
  static const std::vector<std::string> kArchs = {
      "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2"};
  return kArchs;
}

const std::vector<std::string>& architectures() {
  static const std::vector<std::string> kArchs = [] {
    std::vector<std::string> a = resnet_architectures();
    a.insert(a.end(), {"mobilenet_v3_large", "convnext_tiny", "vit_b_16"});
    return a;
  }();
  return kArchs;
}

std::string image_size_problem(const std::string& arch, int64_t image_size) {
  if (arch == "vit_b_16" && image_size % 16 != 0)
    return "vit_b_16 cuts images into 16x16 patches and fixes their number when it is built: the side must "
           "be a multiple of 16 (224 is torchvision's default and its pretrained weights')";
  if (arch == "convnext_tiny" && image_size < 32)
    return "convnext_tiny downsamples by 32 (a 4x4 stem and three 2x2 convs): the side must be at least 32";
  return "";
}

}  // namespace ptune::config
