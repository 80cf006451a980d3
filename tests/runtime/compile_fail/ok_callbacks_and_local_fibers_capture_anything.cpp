// Must compile: then-callbacks and spawn() never leave the thread, so they
// may capture owning types; values travel as apply_with arguments.
#include <memory>
#include <string>
#include <vector>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto t = gossamer::trustee(1).entrust(0);
    std::string s = "abc";
    std::vector<int> v{1, 2};
    auto u = std::make_unique<int>(1);
    t.apply_then([](int& x) { return x; }, [s, v, u = std::move(u)](int) {});
    gossamer::spawn([s, t, v] { t.apply([](int&) {}); }).join();
    return t.apply_with([](int& x, std::string a, std::vector<int> b) { return x + int(a.size() + b.size()); },
                        s, v);
  });
}
