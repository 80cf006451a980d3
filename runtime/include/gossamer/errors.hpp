// Errors a delegated operation can report to its caller.
#pragma once

#include <stdexcept>
#include <string>

namespace gossamer {

// A delegated operation failed: the closure threw on the trustee, its
// response could not be decoded, or an argument could not be encoded (its
// save() threw: nothing was sent; that exception is nested, see
// std::rethrow_if_nested). apply_then/launch_then throw it only while they
// run (encoding, or a property on the calling thread's own trustee, which
// runs at once); a failure that arrives later has no caller to throw to and
// ends the process with its message, as does an exception from a
// then-callback.
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
