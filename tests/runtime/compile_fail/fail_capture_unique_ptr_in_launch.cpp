// Must not compile: a launched closure captures a std::unique_ptr.
#include <memory>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto lt = gossamer::trustee(1).entrust(gossamer::Latch<int>(0));
    auto p = std::make_unique<int>(3);
    lt.launch([p = std::move(p)](gossamer::Latch<int>& l) { *l.lock() += *p; });
    return 0;
  });
}
