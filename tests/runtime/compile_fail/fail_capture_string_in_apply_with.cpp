// Must not compile: apply_with does not make captures legal; the string must
// be passed as an argument.
#include <string>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    std::string s = "abc";
    return t.apply_with([s](int& v, int k) { return v + k + int(s.size()); }, 1);
  });
}
