#include "engine/grad_scaler.hpp"
