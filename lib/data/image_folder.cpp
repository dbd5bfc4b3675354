#include "data/image_folder.hpp"
