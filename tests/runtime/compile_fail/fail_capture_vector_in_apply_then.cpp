// Must not compile: the closure (not the callback) of apply_then captures a
// std::vector.
#include <vector>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    std::vector<int> add{1, 2, 3};
    t.apply_then([add](int& v) { return v + add[0]; }, [](int) {});
    return 0;
  });
}
