// Errors a delegated operation can report to its caller.
#pragma once

#include <stdexcept>
#include <string>

namespace gossamer {

// The closure threw on the trustee, or its response could not be decoded.
class remote_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A TrustRef was used after every Trust of its property was dropped (the
// trustee's generation check caught it; nothing was touched).
class stale_trust : public remote_error {
 public:
  using remote_error::remote_error;
};

}  // namespace gossamer
