// Must not compile: a closure sent to a trustee captures a Trust (it must
// capture trust.ref() instead).
#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto a = gossamer::trustee(1).entrust(0);
    auto b = gossamer::trustee(0).entrust(0);
    a.apply([b](int& v) { v += 1; });
    return 0;
  });
}
