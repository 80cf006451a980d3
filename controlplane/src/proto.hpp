// The control plane's messages: between gossamerd instances (TCP, after a
// pre-shared-key challenge-response) and between gossamerctl and its host's
// gossamerd (unix socket, guarded by file permissions).
//
// Framing: an 8-byte header {u32 body length, u16 type, u16 zero}, little-
// endian, then the body. A body is a flat sequence of fields: u8/u32/u64/i32
// little-endian, byte strings as u32 length + bytes, lists as u32 count +
// items. Every length is checked against what remains of the body before
// anything is allocated, so a hostile length cannot make a daemon allocate
// gigabytes (cereal's binary archives resize first and read after, which is
// why this small codec is ours). A body that does not decode exactly is a
// protocol error: the connection is closed and the error counted.
//
// Peer handshake (the dialer D is the host with the lower index):
//   D -> A  Hello{version, D's host, rack id, nonce_d}
//   A -> D  Challenge{A's host, nonce_a, mac_a}
//   D -> A  Proof{mac_d}
// mac_x = HMAC-SHA256(key, "gossamer-cp-1" | role x | nonce_d | nonce_a |
// D's host | A's host | rack id), key = handshake_key() of the rack secret.
// Each side proves it knows the key for this pair of fresh nonces; the key
// never crosses the wire. Before the proof only these three messages are
// accepted (a BulkHello in place of the Hello, see below), bodies of at most
// kMaxHandshakeBody. Every message after the proof, both ways, carries the
// tags of gossamer/abi/session.hpp under session_key()s of this handshake
// (link.hpp checks them).
//
// Bulk connections (large requests: a closure's payload that does not fit a
// slot goes over TCP between the two hosts' instances). For every run and
// every pair of hosts, the lower index D dials the same listener and runs
// the same handshake, opened by a BulkHello that names the run:
//   D -> A  BulkHello{version, D's host, rack id, nonce_d, run id}
//   A -> D  Challenge{A's host, nonce_a, mac_a}
//   D -> A  Proof{mac_d}
//   A -> D  BulkReady{run id}
// with mac_x = bulk_mac: HMAC-SHA256(key, "gossamer-cp-bulk-1" | role x |
// nonce_d | nonce_a | D | A | rack id | run id), roles 'a' and 'd'. Another
// label and other roles than the mesh's, so that neither handshake's
// transcript verifies as the other's, and the run id is bound in, so that a
// connection proven for one run cannot be taken for another. After
// BulkReady (tagged, as every message after the proof) neither daemon reads
// or writes the connection again: A takes its socket once BulkReady is
// written, D once it has read it, and each hands it to the run's instance
// with the instances' session keys (GOSSAMER_BULK, controlplane/README.md).
// A BulkHello never makes a mesh link.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gossamer::cp {

// 2: every message after the handshake tagged; Prepare and RunStatus name
// the user an instance runs as.
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::size_t kHeaderBytes = 8;
inline constexpr std::uint32_t kMaxHandshakeBody = 256;
inline constexpr std::uint32_t kMaxBody = 4u << 20;
inline constexpr std::size_t kOutputChunk = 64 * 1024;  // instance output per message
// A run id in a BulkHello: at most this long, [0-9A-Za-z_-] (ours are
// "gossamerd-" and 32 hex digits), so that a BulkHello stays far below
// kMaxHandshakeBody.
inline constexpr std::size_t kMaxRunId = 64;

enum class Type : std::uint16_t {
  // gossamerd <-> gossamerd
  kHello = 1,
  kChallenge = 2,
  kProof = 3,
  kHeartbeat = 4,
  kBulkHello = 5,  // opens a bulk connection's handshake instead of Hello
  kBulkReady = 6,  // acceptor -> dialer, after the proof: the socket is the run's
  kPrepare = 10,   // origin -> every host: check the binary, get ready
  kPrepared = 11,  // host -> origin: ok or why not
  kStart = 12,     // origin -> every host: start the instance
  kOutput = 13,    // host -> origin: a chunk of the instance's stdout/stderr
  kExited = 14,    // host -> origin: the instance ended (after its output)
  kStop = 15,      // origin -> every host: stop the instance
  kVerbsEndpoints = 16,  // host -> host: its dataplane's verbs queue pairs to the receiver (issue 22)
  // gossamerctl <-> gossamerd
  kCtlRun = 30,
  kCtlStatus = 31,
  kCtlStop = 32,  // Ctrl-C: stop the caller's run everywhere
  kCtlStatusReply = 40,
  kCtlOutput = 41,
  kCtlDone = 42,
};

using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// ---- codec ----------------------------------------------------------------------

class Writer {
 public:
  void operator()(std::uint8_t v) { out_.push_back(char(v)); }
  void operator()(bool v) { out_.push_back(char(v ? 1 : 0)); }
  void operator()(std::uint32_t v) { le(v, 4); }
  void operator()(std::int32_t v) { le(std::uint32_t(v), 4); }
  void operator()(std::uint64_t v) { le(v, 8); }
  void operator()(const std::string& s) {
    le(s.size(), 4);
    out_ += s;
  }
  template <std::size_t N>
  void operator()(const std::array<std::uint8_t, N>& a) {
    out_.append(reinterpret_cast<const char*>(a.data()), N);
  }
  template <class T>
  void operator()(const std::vector<T>& v) {
    le(v.size(), 4);
    for (const T& x : v) (*this)(x);
  }
  template <class T>
    requires requires(T& t, Writer& w) { t.io(w); }
  void operator()(const T& t) {
    const_cast<T&>(t).io(*this);
  }
  std::string take() { return std::move(out_); }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(char(v >> (8 * i)));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  void operator()(std::uint8_t& v) { v = std::uint8_t(le(1)); }
  void operator()(bool& v) {
    std::uint64_t x = le(1);
    if (x > 1) ok_ = false;
    v = x == 1;
  }
  void operator()(std::uint32_t& v) { v = std::uint32_t(le(4)); }
  void operator()(std::int32_t& v) { v = std::int32_t(std::uint32_t(le(4))); }
  void operator()(std::uint64_t& v) { v = le(8); }
  void operator()(std::string& s) {
    std::uint64_t n = le(4);
    if (!ok_ || n > in_.size() - at_) {
      ok_ = false;
      return;
    }
    s.assign(in_.data() + at_, n);
    at_ += n;
  }
  template <std::size_t N>
  void operator()(std::array<std::uint8_t, N>& a) {
    if (!ok_ || N > in_.size() - at_) {
      ok_ = false;
      return;
    }
    std::memcpy(a.data(), in_.data() + at_, N);
    at_ += N;
  }
  template <class T>
  void operator()(std::vector<T>& v) {
    std::uint64_t n = le(4);
    // Every item takes at least the bytes of an empty one (a string 4, a
    // HostStatus 25): a count beyond what the bytes left can hold is a lie,
    // and reserve() below allocates at most sizeof(T) / that per byte left.
    static const std::size_t min_item = [] {
      Writer w;
      w(T{});
      const std::size_t k = w.take().size();
      return k ? k : 1;
    }();
    if (!ok_ || n > (in_.size() - at_) / min_item) {
      ok_ = false;
      return;
    }
    v.clear();
    v.reserve(n);
    for (std::uint64_t i = 0; i < n && ok_; ++i) (*this)(v.emplace_back());
  }
  template <class T>
    requires requires(T& t, Reader& r) { t.io(r); }
  void operator()(T& t) {
    t.io(*this);
  }
  // True when every field decoded and nothing is left over.
  bool done() const { return ok_ && at_ == in_.size(); }

 private:
  std::uint64_t le(int n) {
    if (!ok_ || std::size_t(n) > in_.size() - at_) {
      ok_ = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t(std::uint8_t(in_[at_ + std::size_t(i)])) << (8 * i);
    at_ += std::size_t(n);
    return v;
  }
  std::string_view in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

template <class M>
std::string encode(const M& m) {
  Writer w;
  w(m);
  return w.take();
}

template <class M>
bool decode(std::string_view body, M& m) {
  Reader r(body);
  r(m);
  return r.done();
}

// The messages of the handshake, the only ones a connection between daemons
// carries untagged (link.hpp).
constexpr bool is_handshake(Type t) {
  return t == Type::kHello || t == Type::kChallenge || t == Type::kProof || t == Type::kBulkHello;
}

// A framed message: header + body.
std::string frame(Type t, const std::string& body);
// Parses a header; false if the zero field is not zero.
bool parse_header(const std::uint8_t* h, std::uint32_t* length, Type* type);

// ---- messages --------------------------------------------------------------------

struct Hello {
  std::uint32_t version = kVersion;
  std::uint32_t host = 0;
  std::uint64_t rack = 0;  // rack_id() of the sender's configuration
  Nonce nonce{};
  template <class A>
  void io(A& a) { a(version), a(host), a(rack), a(nonce); }
};

// A Hello for a bulk connection of one run (BulkReady is a RunRef).
struct BulkHello {
  std::uint32_t version = kVersion;
  std::uint32_t host = 0;
  std::uint64_t rack = 0;
  Nonce nonce{};
  std::string run;
  template <class A>
  void io(A& a) { a(version), a(host), a(rack), a(nonce), a(run); }
};
// 4 + 4 + 8 + 32 + 4 + kMaxRunId
static_assert(56 + kMaxRunId <= kMaxHandshakeBody);

// True for a run id a BulkHello may carry.
bool valid_run_id(std::string_view run);

struct Challenge {
  std::uint32_t host = 0;
  Nonce nonce{};
  Mac mac{};
  template <class A>
  void io(A& a) { a(host), a(nonce), a(mac); }
};

struct Proof {
  Mac mac{};
  template <class A>
  void io(A& a) { a(mac); }
};

enum class DataplaneState : std::uint8_t { kNone = 0, kRunning = 1, kRestarting = 2, kStopped = 3 };
const char* to_string(DataplaneState s);

struct Heartbeat {
  std::uint64_t seq = 0;
  std::uint8_t dataplane = 0;  // DataplaneState
  std::uint32_t dataplane_restarts = 0;
  std::uint32_t instances = 0;  // application instances running on the sender
  template <class A>
  void io(A& a) { a(seq), a(dataplane), a(dataplane_restarts), a(instances); }
};

// The verbs transport's queue pairs (dataplane/src/verbs_transport.hpp): what
// host `from`'s dataplane needs host `to`'s to write into its receive rings,
// one entry per connection, sent whenever a QP is (re)created. The mesh
// authenticates it (its tags), so nobody off the mesh can point a
// dataplane's writes elsewhere; check_verbs_endpoints() bounds everything
// before the dataplane uses it. gossamerd's verbs_relay.hpp makes it from
// the dataplane's file and back (dataplane/VERBS.md, "The endpoint exchange").
struct VerbsQp {
  std::uint32_t conn = 0;
  std::uint32_t qpn = 0;         // 24 bits
  std::uint32_t psn = 0;         // 24 bits
  std::uint32_t rkey = 0;
  std::uint64_t ring_addr = 0;
  std::uint32_t ring_units = 0;  // of 64 bytes, 1..16384
  std::uint32_t generation = 0;  // larger for a newer QP of the same connection
  template <class A>
  void io(A& a) { a(conn), a(qpn), a(psn), a(rkey), a(ring_addr), a(ring_units), a(generation); }
};

struct VerbsEndpoints {
  std::uint32_t from = 0, to = 0;
  std::uint64_t boot = 0;        // the sender dataplane's incarnation
  std::array<std::uint8_t, 16> gid{};
  std::uint32_t lid = 0;         // InfiniBand LID (16 bits); 0 on RoCE
  std::vector<VerbsQp> qps;
  template <class A>
  void io(A& a) { a(from), a(to), a(boot), a(gid), a(lid), a(qps); }
};

// "" or what is wrong with a VerbsEndpoints from `sender` for `self` in a
// rack of `hosts` with `conns` connections per host pair.
std::string check_verbs_endpoints(const VerbsEndpoints& m, std::uint32_t sender, std::uint32_t self,
                                  std::uint32_t hosts, std::uint32_t conns);

struct Prepare {
  std::string run;  // run id, also GOSSAMER_RUN_ID
  std::uint32_t origin = 0;
  std::string path;  // absolute
  std::string sha256;  // hex digest of the binary at the origin
  std::vector<std::string> args;  // argv[1..]
  std::string cwd;
  std::uint32_t threads = 0;  // 0: what the program passes to gossamer::run
  // Who asked (SO_PEERCRED on the origin's gossamerctl socket): every host
  // runs the instance as the user of this name in its own user database
  // (run_as.hpp); the uid is the origin's, for messages.
  std::string user;
  std::uint32_t uid = 0;
  template <class A>
  void io(A& a) { a(run), a(origin), a(path), a(sha256), a(args), a(cwd), a(threads), a(user), a(uid); }
};

struct Prepared {
  std::string run;
  std::uint32_t host = 0;
  bool ok = false;
  std::string error;
  template <class A>
  void io(A& a) { a(run), a(host), a(ok), a(error); }
};

struct RunRef {
  std::string run;
  template <class A>
  void io(A& a) { a(run); }
};

struct Output {
  std::string run;
  std::uint32_t host = 0;
  std::uint8_t stream = 1;  // 1 stdout, 2 stderr
  std::string data;
  template <class A>
  void io(A& a) { a(run), a(host), a(stream), a(data); }
};

struct Exited {
  std::string run;
  std::uint32_t host = 0;
  std::int32_t pid = 0;
  std::int32_t code = -1;   // exit status, or -1 if killed by a signal
  std::int32_t signal = 0;  // the signal, or 0
  bool stopped = false;     // we stopped it (fate sharing, Ctrl-C)
  std::string error;        // it never started (exec failed, ...)
  template <class A>
  void io(A& a) { a(run), a(host), a(pid), a(code), a(signal), a(stopped), a(error); }
};

struct Stop {
  std::string run;
  std::string reason;
  template <class A>
  void io(A& a) { a(run), a(reason); }
};

struct CtlRun {
  std::string path;
  std::vector<std::string> args;
  std::string cwd;
  std::uint32_t threads = 0;
  template <class A>
  void io(A& a) { a(path), a(args), a(cwd), a(threads); }
};

struct HostStatus {
  std::uint32_t index = 0;
  std::string name;
  std::string state;  // self, up, down
  std::int32_t heartbeat_ms = -1;  // since the last heartbeat; -1 never / self
  std::uint8_t dataplane = 0;
  std::uint32_t dataplane_restarts = 0;
  std::uint32_t instances = 0;
  template <class A>
  void io(A& a) { a(index), a(name), a(state), a(heartbeat_ms), a(dataplane), a(dataplane_restarts), a(instances); }
};

struct RunStatus {
  std::string run;
  std::string path;
  std::uint32_t threads = 0;
  std::uint32_t origin = 0;
  std::string state;    // preparing, running, stopping
  std::int32_t pid = 0;  // the local instance, 0 if none
  std::string user;      // it runs as
  template <class A>
  void io(A& a) { a(run), a(path), a(threads), a(origin), a(state), a(pid), a(user); }
};

struct StatusReply {
  std::uint32_t self = 0;
  std::vector<HostStatus> hosts;
  std::vector<RunStatus> runs;
  template <class A>
  void io(A& a) { a(self), a(hosts), a(runs); }
};

struct CtlOutput {
  std::uint32_t host = 0;
  std::uint8_t stream = 1;
  std::string data;
  template <class A>
  void io(A& a) { a(host), a(stream), a(data); }
};

struct CtlDone {
  std::int32_t status = 0;  // what gossamerctl run exits with
  std::string message;      // empty on success
  template <class A>
  void io(A& a) { a(status), a(message); }
};

// ---- authentication -------------------------------------------------------------

Nonce random_nonce();
enum class Role : std::uint8_t { kAcceptor = 'A', kDialer = 'D', kBulkAcceptor = 'a', kBulkDialer = 'd' };
Mac handshake_mac(const std::string& key, Role role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                  std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack);
// The bulk handshake's MACs: role kBulkAcceptor or kBulkDialer, the run id
// bound in (see the top of this file).
Mac bulk_mac(const std::string& key, Role role, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
             std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack, const std::string& run);
bool mac_equal(const Mac& a, const Mac& b);  // constant time

// The key the handshakes and the session keys derive from (never the rack
// secret itself): scrypt(secret, salt = "gossamer-cp-psk-1" | rack id,
// N = 2^15, r = 8, p = 1), 32 bytes. Deliberately slow (32 MiB, ~0.1 s),
// computed once per daemon start: whoever records a handshake and guesses
// at the secret pays that per guess. "" if libcrypto fails.
inline constexpr std::uint64_t kScryptN = 1u << 15, kScryptR = 8, kScryptP = 1;
std::string handshake_key(const std::string& secret, std::uint64_t rack);

// A session key after a handshake: HMAC-SHA256(handshake key,
// "gossamer-cp-session-1" | use | kind | sender | nonce_d | nonce_a | D | A |
// rack id | run). `use` 'L' for the daemons' link, 'I' for the instances of
// a bulk connection; `kind` 'm' mesh, 'b' bulk (run "" for the mesh);
// `sender` 'D' or 'A': one key per direction.
std::array<std::uint8_t, 32> session_key(const std::string& key, char use, char kind, char sender,
                                         const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                                         std::uint32_t dialer_host, std::uint32_t acceptor_host, std::uint64_t rack,
                                         const std::string& run);


// SHA-256 of a regular file's content, a piece at a time, so that a daemon
// can hash a large binary between other work. Opening refuses anything but a
// regular file (a FIFO or a device would block or never end).
class FileHasher {
 public:
  FileHasher() = default;
  FileHasher(const FileHasher&) = delete;
  FileHasher& operator=(const FileHasher&) = delete;
  ~FileHasher();
  bool open(const std::string& path, std::string* error);
  // Hashes up to `bytes` more; true when the file is done (then hex() or,
  // on a read error, *error is set and hex() is "").
  bool step(std::size_t bytes, std::string* error);
  const std::string& hex() const { return hex_; }

 private:
  int fd_ = -1;
  void* ctx_ = nullptr;  // EVP_MD_CTX
  std::string hex_;
};

}  // namespace gossamer::cp
