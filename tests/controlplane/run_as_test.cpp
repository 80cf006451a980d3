// Who gossamerd starts an instance as (controlplane/src/run_as.hpp; issue 18
// finding 5: instances ran as gossamerd's user, root, whoever asked). The
// decision, the user lookup, and, as root, the switch to another user in a
// child process and the access checks made as that user.
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "run_as.hpp"

namespace {

using namespace gossamer::cp;

RunAs user(uid_t uid, const std::string& name = "someone") {
  RunAs r;
  r.user = name;
  r.uid = uid;
  r.gid = uid;
  r.groups = {gid_t(uid)};
  return r;
}

TEST(RunAs, WhoMayStartWhom) {
  EXPECT_EQ(may_run_as(0, user(0)), "");      // root as root
  EXPECT_EQ(may_run_as(0, user(1000)), "");   // root as anybody
  EXPECT_EQ(may_run_as(1000, user(1000)), "");  // a user's gossamerd as that user
  const std::string why = may_run_as(1000, user(1001, "bob"));
  EXPECT_NE(why.find("gossamerd runs as uid 1000 here, not as root"), std::string::npos) << why;
  EXPECT_NE(why.find("'bob' (uid 1001)"), std::string::npos) << why;
  EXPECT_NE(may_run_as(1000, user(0, "root")), "");  // and never as root
}

TEST(RunAs, ResolvesUsers) {
  RunAs r;
  ASSERT_EQ(resolve_user("root", &r), "");
  EXPECT_EQ(r.uid, 0u);
  EXPECT_EQ(r.gid, 0u);
  EXPECT_NE(std::find(r.groups.begin(), r.groups.end(), 0u), r.groups.end());
  EXPECT_FALSE(r.home.empty());
  const std::string why = resolve_user("no-such-user-gossamer", &r);
  EXPECT_EQ(why, "user 'no-such-user-gossamer' does not exist on this host");
  EXPECT_EQ(r.uid, 0u);  // untouched
  EXPECT_NE(resolve_user("", &r), "");
  std::string err;
  EXPECT_EQ(user_name(0, &err), "root");
  EXPECT_EQ(user_name(uid_t(-1), &err), "");
  EXPECT_NE(err, "");
}

TEST(RunAs, PeerCredentials) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const Requester r = peer_credentials(sv[0]);
  EXPECT_EQ(r.uid, ::geteuid());
  EXPECT_EQ(r.gid, ::getegid());
  EXPECT_EQ(r.pid, ::getpid());
  ::close(sv[0]);
  ::close(sv[1]);
  EXPECT_EQ(peer_credentials(-1).uid, uid_t(-1));
}

TEST(RunAs, UserEnvironment) {
  RunAs r = user(::geteuid() + 1, "alice");
  r.home = "/home/alice";
  r.shell = "/bin/sh";
  std::vector<std::string> env = {"PATH=/usr/bin", "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/bash"};
  user_environment(r, &env);
  std::sort(env.begin(), env.end());
  EXPECT_EQ(env, (std::vector<std::string>{"HOME=/home/alice", "LOGNAME=alice", "PATH=/usr/bin", "SHELL=/bin/sh",
                                           "USER=alice"}));
  std::vector<std::string> same = {"HOME=/x"};
  user_environment(user(::geteuid()), &same);  // gossamerd's own user: as it is
  EXPECT_EQ(same, std::vector<std::string>{"HOME=/x"});
}

// ---- as root: another user for real ------------------------------------------------

// nobody, from this host's database.
bool nobody(RunAs* r) { return resolve_user("nobody", r).empty(); }

TEST(RunAs, BecomeSetsEveryId) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  RunAs r;
  ASSERT_TRUE(nobody(&r));
  r.groups = {r.gid, 4242};  // a supplementary group, whether it has a name or not
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char out[256];
    if (const char* failed = become(r)) {
      std::snprintf(out, sizeof out, "failed %s", failed);
    } else {
      uid_t ru, eu, su;
      gid_t rg, eg, sg, groups[8];
      ::getresuid(&ru, &eu, &su);
      ::getresgid(&rg, &eg, &sg);
      const int n = ::getgroups(8, groups);
      if (n == 2 && groups[0] > groups[1]) std::swap(groups[0], groups[1]);  // the kernel keeps its own order
      // And root's powers are gone: it cannot take uid 0 back.
      const int back = ::setuid(0);
      std::snprintf(out, sizeof out, "%u %u %u %u %u %u %d %u %u %d", ru, eu, su, rg, eg, sg, n,
                    n > 0 ? groups[0] : 0, n > 1 ? groups[1] : 0, back);
    }
    (void)!::write(p[1], out, std::strlen(out));
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[256] = {};
  (void)!::read(p[0], buf, sizeof buf - 1);
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  const std::string u = std::to_string(r.uid), g = std::to_string(r.gid);
  const std::string lo = std::to_string(std::min<gid_t>(r.gid, 4242)), hi = std::to_string(std::max<gid_t>(r.gid, 4242));
  EXPECT_EQ(std::string(buf), u + " " + u + " " + u + " " + g + " " + g + " " + g + " 2 " + lo + " " + hi + " -1");
}

TEST(RunAs, AccessIsCheckedAsTheUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  RunAs r;
  ASSERT_TRUE(nobody(&r));
  char tmpl[] = "/tmp/gossamer-run-as-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const std::string open = dir + "/open", closed = dir + "/closed", priv = dir + "/private";
  for (const auto& f : {open, closed}) std::ofstream(f) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(open.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);  // root may run it; nobody may not
  ASSERT_EQ(::mkdir(priv.c_str(), 0700), 0);

  EXPECT_EQ(check_access_as(r, open, dir), "");
  EXPECT_EQ(check_access_as(r, open, dir + "/missing"), "");  // replaced by / at the start
  std::string why = check_access_as(r, closed, dir);
  EXPECT_NE(why.find("user 'nobody' may not execute " + closed), std::string::npos) << why;
  why = check_access_as(r, open, priv);
  EXPECT_NE(why.find("may not enter the working directory " + priv), std::string::npos) << why;
  why = check_access_as(r, dir, "");
  EXPECT_NE(why.find("is not a regular file"), std::string::npos) << why;
  // As gossamerd's own user (root here) the same checks run without a fork.
  RunAs root;
  ASSERT_EQ(resolve_user("root", &root), "");
  EXPECT_EQ(check_access_as(root, closed, priv), "");
  why = check_access_as(root, dir + "/none", "");
  EXPECT_NE(why.find("cannot see " + dir + "/none"), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

}  // namespace
