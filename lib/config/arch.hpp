#pragma once
/// The names of the architectures ptune builds and the image sizes each can take: what a config
/// is checked against, without LibTorch (models/model.hpp builds them).

#include <cstdint>
#include <string>
#include <vector>

namespace ptune::config {

/// The supported architecture names (model.arch), torchvision's.
const std::vector<std::string>& architectures();

/// The ResNet family among them (models/resnet.hpp builds these).
const std::vector<std::string>& resnet_architectures();

/// Why `arch` cannot take square images of side `image_size` ("" when it can): ViT's side must
/// be a multiple of its patch; ConvNeXt needs 32 pixels or more (four downsamplings).
std::string image_size_problem(const std::string& arch, int64_t image_size);

}  // namespace ptune::config
