// Options::yield_us and runtime.yield_us (scheduler.cpp, Worker::idle_backoff):
// an idle thread of an adaptive runtime spins, yields the CPU for yield_us,
// then sleeps on its wake word (2 ms timeouts). Seen in the thread's
// voluntary context switches (getrusage RUSAGE_THREAD): a sched_yield is
// not one, every sleep is.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

namespace {

long voluntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// Runtime thread 1's voluntary context switches over 300 ms in which
// nothing gives it work (thread 0 blocks in sleep_for).
long idle_switches(std::uint32_t yield_us) {
  gossamer::Options o;
  o.threads = 2;
  o.polling = gossamer::Polling::adaptive;
  o.yield_us = yield_us;
  long before = 0, after = 0;
  gossamer::run(o, [&] {
    long* b = &before;
    long* a = &after;
    gossamer::spawn_on(1, [b] { *b = voluntary_switches(); }).join();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    gossamer::spawn_on(1, [a] { *a = voluntary_switches(); }).join();
  });
  return after - before;
}

// yield_us 0: the idle thread sleeps after its spin, each 2 ms timeout a
// voluntary switch (about 150 in 300 ms); 1 s: it only yields.
TEST(YieldTest, OptionSetsHowLongAnIdleThreadYieldsBeforeItSleeps) {
  const long sleeping = idle_switches(0);
  const long yielding = idle_switches(1'000'000);
  std::printf("idle thread 1 over 300 ms: %ld voluntary switches with yield_us 0, %ld with 1000000\n", sleeping,
              yielding);
  EXPECT_GE(sleeping, 20) << "with yield_us 0 the idle thread did not sleep";
  EXPECT_LE(yielding, 5) << "with yield_us 1000000 the idle thread slept within 300 ms";
}

// runtime.yield_us in the GOSSAMER_CONFIG file replaces the program's value.
TEST(YieldTest, ConfigFileReplacesTheOption) {
  const std::string path = testing::TempDir() + "yield_config.yaml";
  std::ofstream(path) << "runtime:\n  yield_us: 1000000\n";
  ASSERT_EQ(::setenv("GOSSAMER_CONFIG", path.c_str(), 1), 0);
  const long from_file = idle_switches(0);
  ::unsetenv("GOSSAMER_CONFIG");
  std::remove(path.c_str());
  EXPECT_LE(from_file, 5) << "runtime.yield_us 1000000 in the file did not replace Options::yield_us 0";
}

}  // namespace
