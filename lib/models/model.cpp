#include "models/model.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/convnext.hpp"
#include "models/mobilenet_v3.hpp"
#include "models/resnet.hpp"
#include "models/vit.hpp"

namespace ptune::models {

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
    return "vit_b_16 cuts images into 16x16 patches and fixes their number when it is built: the side must be a "
           "multiple of 16 (224 is torchvision's default and its pretrained weights')";
  if (arch == "convnext_tiny" && image_size < 32)
    return "convnext_tiny downsamples by 32 (a 4x4 stem and three 2x2 convs): the side must be at least 32";
  return "";
}

Model make(const std::string& arch, int64_t num_classes, int64_t image_size) {
  const auto& all = architectures();
  if (std::find(all.begin(), all.end(), arch) == all.end())
    throw std::invalid_argument("unknown architecture '" + arch + "'");
  if (std::string why = image_size_problem(arch, image_size); !why.empty())
    throw std::invalid_argument("image size " + std::to_string(image_size) + ": " + why);
  if (arch == "mobilenet_v3_large") return Model(std::shared_ptr<ModelImpl>(std::make_shared<MobileNetV3Impl>(arch, num_classes)));
  if (arch == "convnext_tiny") return Model(std::shared_ptr<ModelImpl>(std::make_shared<ConvNeXtImpl>(arch, num_classes)));
  if (arch == "vit_b_16")
    return Model(std::shared_ptr<ModelImpl>(std::make_shared<VisionTransformerImpl>(arch, vit_b_16_options(image_size), num_classes)));
  return Model(std::shared_ptr<ModelImpl>(std::make_shared<ResNetImpl>(arch, num_classes)));
}

}  // namespace ptune::models
