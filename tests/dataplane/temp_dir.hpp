// A directory under /tmp for one test, removed with everything in it when
// the test ends (the dataplane's tests that need real files and sockets).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace gossamer::dataplane {

struct TempDir {
  std::filesystem::path path;
  // /tmp/NAME-XXXXXX
  explicit TempDir(const std::string& name) {
    std::string tmpl = "/tmp/" + name + "-XXXXXX";
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace gossamer::dataplane
