// Must not compile: a fiber started on another thread captures a
// std::shared_ptr.
#include <memory>

#include <gossamer/gossamer.hpp>

int main() {
  return gossamer::run(2, [] {
    auto p = std::make_shared<int>(3);
    gossamer::spawn_on(1, [p] { (void)*p; }).join();
    return 0;
  });
}
