// Must compile: the positive control. A closure capturing a TrustRef and an
// int, with the same includes and flags as the failing snippets.
#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto a = gossamer::trustee(1).entrust(0);
    auto b = gossamer::trustee(0).entrust(0);
    gossamer::TrustRef<int> br = b.ref();
    int k = 5;
    a.apply([br, k](int& v) { v += k; br.apply_then([](int& x) { ++x; }, [] {}); });
    gossamer::spawn_on(1, [br, k] { br.apply([k](int& x) { x += k; }); }).join();
    auto lt = gossamer::trustee(1).entrust(gossamer::Latch<int>(0));
    lt.launch([br, k](gossamer::Latch<int>& l) { *l.lock() += br.apply([](int& x) { return x; }) + k; });
    return a.apply([](int& v) { return v; });
  });
}
