// Must not compile: a closure sent to a trustee captures a std::string.
#include <string>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    std::string name = "x";
    return t.apply([name](int& v) { return v + int(name.size()); });
  });
}
