// Who an instance runs as (SECURITY.md "Runs and users"). gossamerd learns
// who asked for a run from the gossamerctl socket (SO_PEERCRED), sends the
// user's name with the Prepare over the authenticated mesh, and every host
// resolves that name in its own user database: an instance runs with that
// user's uid, gid and supplementary groups, on every host, or the run is
// refused naming the host. Root only when root asked.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gossamer::cp {

// SO_PEERCRED of a unix socket: who connected. uid -1 when unknown.
struct Requester {
  pid_t pid = 0;
  uid_t uid = uid_t(-1);
  gid_t gid = gid_t(-1);
};
Requester peer_credentials(int fd);

// The name of `uid` on this host, for the Prepare; "" and *error when it has
// none (the other hosts could not tell who asked).
std::string user_name(uid_t uid, std::string* error);

struct RunAs {
  std::string user;
  uid_t uid = uid_t(-1);
  gid_t gid = gid_t(-1);
  std::vector<gid_t> groups;  // supplementary, the primary included (getgrouplist)
  std::string home;
  std::string shell;
};
// `user` in this host's user database (passwd and group): "" or why not.
std::string resolve_user(const std::string& user, RunAs* out);

// "" when a gossamerd running as `self` may start an instance as `r`: as
// itself always, as anybody else only when it is root.
std::string may_run_as(uid_t self, const RunAs& r);

// In a freshly forked child, before exec: setgroups, setgid, setuid (real,
// effective and saved ids), in that order, each checked, then checked
// again with getresuid/getresgid. Only async-signal-safe calls. Returns
// nullptr, or the name of the call that failed (errno says why).
const char* become(const RunAs& r);

// Whether `r` may execute `path` and enter `cwd` ("" = not checked), tested
// as that user in a forked child (so that groups, ACLs and mount options
// count): "" or why not. Without a fork when `r` is this process's own uid.
std::string check_access_as(const RunAs& r, const std::string& path, const std::string& cwd);

// The instance's environment: HOME, USER, LOGNAME and SHELL are the user's,
// when it runs as another user than gossamerd's.
void user_environment(const RunAs& r, std::vector<std::string>* env);

}  // namespace gossamer::cp
