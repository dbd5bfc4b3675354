#pragma once
// image_folder dataset: being written (see issue 3).
