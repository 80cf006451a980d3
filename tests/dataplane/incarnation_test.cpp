// The dataplane's incarnation and its state file (dataplane/src/incarnation.hpp):
// larger than every earlier one whatever the clock does, persisted before
// use, a corrupt or unreadable file a clear error, one dataplane per file.
#include "incarnation.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace gossamer::dataplane {
namespace {

constexpr std::uint64_t kNow = 1'750'000'000'000'000'000ull;  // ns since the epoch, 2025

class IncarnationFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gossamer-incarnation-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/state/dp-a.incarnation";  // the directory does not exist yet
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string contents() const {
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void write(const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    std::ofstream(path_) << text;
  }
  std::string dir_, path_;
};

TEST_F(IncarnationFile, FirstStartTakesTheClockAndPersistsIt) {
  Incarnation i;
  ASSERT_EQ(i.next(path_, kNow), "");
  EXPECT_EQ(i.value(), kNow);
  EXPECT_EQ(contents(), std::to_string(kNow) + "\n");
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
}

TEST_F(IncarnationFile, ClockAheadOfTheFileWins) {
  write(std::to_string(kNow) + "\n");
  Incarnation i;
  ASSERT_EQ(i.next(path_, kNow + 5), "");
  EXPECT_EQ(i.value(), kNow + 5);
  EXPECT_EQ(contents(), std::to_string(kNow + 5) + "\n");
}

// A restart after the clock went back (an NTP step of an hour): the new
// incarnation is still larger than the last, and so is the one after it.
TEST_F(IncarnationFile, ClockThatWentBackStillGivesALargerIncarnation) {
  {
    Incarnation first;
    ASSERT_EQ(first.next(path_, kNow), "");
    ASSERT_EQ(first.value(), kNow);
  }  // the dataplane exits
  constexpr std::uint64_t kHour = 3'600'000'000'000ull;
  {
    Incarnation second;
    ASSERT_EQ(second.next(path_, kNow - kHour), "");
    EXPECT_EQ(second.value(), kNow + 1);
    EXPECT_EQ(contents(), std::to_string(kNow + 1) + "\n");
  }
  Incarnation third;
  ASSERT_EQ(third.next(path_, kNow - kHour + 1'000'000), "");
  EXPECT_EQ(third.value(), kNow + 2);
}

TEST_F(IncarnationFile, ClockAtZeroGivesOne) {
  Incarnation i;
  ASSERT_EQ(i.next(path_, 0), "");
  EXPECT_EQ(i.value(), 1u);  // 0 means "not known" on the wire
}

TEST_F(IncarnationFile, CorruptFileIsAClearErrorAndIsKept) {
  const char* bad[] = {
      "",                                // empty
      "1750000000000000000",             // no newline (a torn write would look like this)
      "abc\n",
      "0\n",                             // 0 is never an incarnation
      "-5\n",
      " 17\n",
      "17 \n",
      "17\n18\n",
      "18446744073709551616\n",          // 2^64
      "18446744073709551615\n",          // 2^64 - 1: nothing comes after it
      "1111111111111111111111111111111111111111\n",
  };
  for (const char* text : bad) {
    write(text);
    Incarnation i;
    const std::string err = i.next(path_, kNow);
    EXPECT_NE(err.find(path_ + " is corrupt"), std::string::npos) << "'" << text << "': " << err;
    EXPECT_EQ(i.value(), 0u);
    EXPECT_EQ(contents(), text) << "a corrupt file was overwritten";
  }
}

TEST_F(IncarnationFile, UnreadableFileIsAClearError) {
  std::filesystem::create_directories(path_);  // a directory where the file should be
  Incarnation i;
  const std::string err = i.next(path_, kNow);
  EXPECT_NE(err.find("cannot read " + path_), std::string::npos) << err;
}

TEST_F(IncarnationFile, UnwritableDirectoryIsAClearError) {
  std::ofstream(dir_ + "/file") << "x";
  const std::string path = dir_ + "/file/dp.incarnation";  // its "directory" is a file
  Incarnation i;
  const std::string err = i.next(path, kNow);
  EXPECT_NE(err.find(path + ".lock"), std::string::npos) << err;
}

// A second dataplane of the same host (the same file) does not start while
// the first runs, and says who holds the file; after the first exits it does.
TEST_F(IncarnationFile, SecondDataplaneOfTheHostIsRefused) {
  auto first = std::make_unique<Incarnation>();
  ASSERT_EQ(first->next(path_, kNow), "");
  Incarnation second;
  const std::string err = second.next(path_, kNow + 10);
  EXPECT_NE(err.find("another dataplane of this host is running"), std::string::npos) << err;
  EXPECT_NE(err.find("pid " + std::to_string(::getpid())), std::string::npos) << err;
  EXPECT_NE(err.find(path_), std::string::npos) << err;
  EXPECT_EQ(contents(), std::to_string(kNow) + "\n");
  first.reset();
  ASSERT_EQ(second.next(path_, kNow + 10), "");
  EXPECT_EQ(second.value(), kNow + 10);
}

TEST(Incarnation, RealtimeIsNanosecondsSinceTheEpoch) {
  const std::uint64_t t = Incarnation::realtime_ns();
  EXPECT_GT(t, 1'600'000'000'000'000'000ull);  // after 2020
  EXPECT_LT(t, 4'000'000'000'000'000'000ull);  // before 2096
}

}  // namespace
}  // namespace gossamer::dataplane
