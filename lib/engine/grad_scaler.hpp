#pragma once
// GradScaler: being written (see issue 4).
