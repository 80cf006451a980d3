#pragma once

#include <vector>

#include "runtime_state.hpp"

namespace gossamer::detail {
// Assigns every registered invoker its id, ordered by (module path, offset
// inside the module): identical on every host that runs the same binary,
// whatever ASLR did to the load addresses.
std::vector<InvokerEntry> finalize_invokers();
}  // namespace gossamer::detail
