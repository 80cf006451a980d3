// The stats file writer (dataplane/src/file_writer.hpp) with real files:
// the text lands whole under its name, on the writer's thread while it
// runs, here and now when it does not, and the newest text wins.
#include "file_writer.hpp"
#include "temp_dir.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace gossamer::dataplane {
namespace {

namespace fs = std::filesystem;

struct Dir : TempDir {
  Dir() : TempDir("gossamer-file-writer") {}
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FileWriter, WritesAtOnceWithoutItsThread) {
  Dir d;
  const std::string path = (d.path / "x.stats").string();
  FileWriter w;
  w.post(path, "a 1\n");
  EXPECT_EQ(slurp(path), "a 1\n");  // no thread: written before post() returned
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(FileWriter, WritesOnItsThreadAndTheNewestTextWins) {
  Dir d;
  const std::string path = (d.path / "x.stats").string();
  FileWriter w;
  std::atomic<std::thread::id> writer_id{};
  w.start([&writer_id] { writer_id = std::this_thread::get_id(); });
  ASSERT_TRUE(w.running());
  for (int i = 0; i < 200; ++i) w.post(path, "n " + std::to_string(i) + "\n");
  // Written eventually, by the writer's thread, whole: a reader sees one
  // of the texts posted, never part of one.
  for (int i = 0; i < 2000 && !fs::exists(path); ++i) ::usleep(1000);
  const std::string seen = slurp(path);
  EXPECT_EQ(seen.rfind("n ", 0), 0u) << seen;
  EXPECT_EQ(seen.back(), '\n');
  w.stop();  // writes what is pending first
  EXPECT_FALSE(w.running());
  EXPECT_EQ(slurp(path), "n 199\n");
  EXPECT_NE(writer_id.load(), std::thread::id{});
  EXPECT_NE(writer_id.load(), std::this_thread::get_id());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Stopped: here and now again.
  w.post(path, "after\n");
  EXPECT_EQ(slurp(path), "after\n");
}

TEST(FileWriter, AFailedWriteIsReportedNotFatal) {
  Dir d;
  const std::string path = (d.path / "missing" / "x.stats").string();
  EXPECT_NE(FileWriter::write_now(path, "x\n").find("open "), std::string::npos);
  FileWriter w;
  w.start(nullptr);
  w.post(path, "x\n");  // logged by the thread; the writer goes on
  w.post((d.path / "y.stats").string(), "y\n");
  w.stop();
  EXPECT_EQ(slurp(d.path / "y.stats"), "y\n");
}

}  // namespace
}  // namespace gossamer::dataplane
