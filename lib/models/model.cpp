#include "models/model.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/convnext.hpp"
#include "models/mobilenet_v3.hpp"
#include "models/resnet.hpp"
#include "models/vit.hpp"

namespace ptune::models {

Model make(const std::string& arch, int64_t num_classes, int64_t image_size) {
  const auto& all = config::architectures();
  if (std::find(all.begin(), all.end(), arch) == all.end())
    throw std::invalid_argument("unknown architecture '" + arch + "'");
  if (std::string why = config::image_size_problem(arch, image_size); !why.empty())
    throw std::invalid_argument("image size " + std::to_string(image_size) + ": " + why);
  if (arch == "mobilenet_v3_large")
    return Model(std::shared_ptr<ModelImpl>(std::make_shared<MobileNetV3Impl>(arch, num_classes)));
  if (arch == "convnext_tiny")
    return Model(std::shared_ptr<ModelImpl>(std::make_shared<ConvNeXtImpl>(arch, num_classes)));
  if (arch == "vit_b_16")
    return Model(std::shared_ptr<ModelImpl>(
        std::make_shared<VisionTransformerImpl>(arch, vit_b_16_options(image_size), num_classes)));
  return Model(std::shared_ptr<ModelImpl>(std::make_shared<ResNetImpl>(arch, num_classes)));
}

}  // namespace ptune::models
