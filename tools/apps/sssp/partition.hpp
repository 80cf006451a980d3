// One trustee's share of the graph and of the distances: the vertices v with
// v % parts == index (the Graph500 permutation already scattered high- and
// low-degree vertices over the labels, so a cyclic split balances edges).
//
// A Partition is only ever touched on its trustee's thread: by delegated
// closures (updates from other partitions) and by the round's fiber that
// `launch` starts there. It lives in a gossamer::Latch so that fiber can run
// on it; no fiber holds the latch across a blocking call, so a delegated
// closure always finds it free.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <ctime>
#include <limits>
#include <stdexcept>
#include <vector>

#include <gossamer/gossamer.hpp>

#include "kronecker.hpp"

namespace sssp {

inline constexpr std::size_t kMaxParts = 256;
inline constexpr float kInf = std::numeric_limits<float>::infinity();  // not reached (yet)

// One adjacency entry: the other end and the edge's weight. The other end
// is an index into the partition's distances (Partition::key_): its local
// index when this partition owns it, else past them, the vertex's slot in
// the buffer of outgoing updates. Relaxing an arc then divides nothing and
// takes the same path whoever owns its end.
struct Arc {
  std::uint32_t t;
  float w;
};
inline constexpr std::uint32_t kNoBucket = ~std::uint32_t(0);

// This thread's CPU time in seconds: what a partition's work costs, apart
// from the time its thread waits for a CPU on a loaded machine.
inline double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One round's work on one partition.
struct RoundWork {
  double cpu_s = 0;
  std::uint64_t relaxations = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(cpu_s, relaxations);
  }
};

class Partition;
using PartitionRef = gossamer::TrustRef<gossamer::Latch<Partition>>;

// What a partition is built from; trivially copyable, so it travels as
// bytes in one apply_with argument (about 4 KiB with the refs).
struct Setup {
  GraphSpec spec;
  std::uint32_t index = 0, parts = 1;
  float delta = 0.05f;
  std::array<PartitionRef, kMaxParts> refs{};  // every partition, by index
};

// A remote relaxation travels as three 32-bit words: the local index at the
// owner, the tentative distance's bits and the parent (global), so a batch
// is a std::vector<std::uint32_t> that cereal copies as one block instead of
// element by element. 12 bytes an update (16 before, the parent in a
// 64-bit word of its own): across hosts nearly every batch was above 4 KiB
// and crossed over TCP with its bytes tagged while that was the default
// threshold (SCALING.md, "Across hosts"); up to 256 KiB now the dataplane.
using Batch = std::vector<std::uint32_t>;
inline constexpr std::size_t kUpdateWords = 3;
inline void push_update(Batch& b, std::uint32_t local, float d, std::uint32_t parent) {
  b.push_back(local);
  b.push_back(std::bit_cast<std::uint32_t>(d));
  b.push_back(parent);
}
inline constexpr std::uint32_t kNone = ~std::uint32_t(0);  // no parent: unreached

// A half-edge on its way to its owner during construction: (local index at
// the owner, other end, weight bits).
inline constexpr std::size_t kHalfWords = 3;

// What every partition reported for one round, combined (min of the lows,
// or of the settled flags): all partitions see the same and so decide the
// same next step (kernel.hpp).
struct Reports {
  std::uint32_t low = kNoBucket;
  bool settled = false;
  void add(std::uint32_t l, bool s) {
    low = std::min(low, l);
    settled = settled || s;
  }
};

// Counts gathered once a run is over.
struct Summary {
  std::uint64_t reached = 0;
  std::uint64_t half_edges = 0;     // adjacency entries of reached vertices (self-loops are not stored)
  std::uint64_t relaxations = 0;    // edges relaxed
  std::uint64_t light_relaxations = 0;  // of which light (w < delta)
  std::uint64_t updates_sent = 0;   // (vertex, distance, parent) updates sent to other partitions
  std::uint64_t batches_sent = 0;   // apply_with requests that carried them
  // The longest chain of work to the end of the run on this partition, in
  // relaxations: its relaxations and applied updates, and wherever it had
  // to wait for a message (a round's last pieces, or a chunk that woke it
  // while it had nothing to do), the sender's chain when it sent it plus
  // the message's cost. A chunk that arrives while the partition is busy
  // costs only its updates. The largest over the partitions is the run's
  // critical path: how long it would take with a free CPU per partition,
  // whatever the machine's load.
  std::uint64_t path = 0;
};
// What a message between partitions costs on the critical path by default,
// in relaxations: about 100 µs at 10 ns a relaxation (scale 20, 1 thread,
// on this VM when quiet), the cost of a round measured at scale 10 when host
// 0 drove the rounds. A round between 2 polling threads of one host costs
// about 3 µs (scale 8), 300 relaxations (`--message-cost`).
inline constexpr std::uint64_t kMessageCost = 10000;

class Partition {
 public:
  Partition() = default;

  // ---- construction, in three steps that host 0 drives (construct.hpp) ------
  // 1. This partition's share of the input edge list: edges [lo, hi) of the
  //    counter-based generator, lo = m * index / parts. Returns how many.
  std::uint64_t generate(const Setup& s) {
    setup_ = s;
    const std::uint64_t n = s.spec.vertices(), m = s.spec.edges();
    n_local_ = s.index < n ? std::uint32_t((n - 1 - s.index) / s.parts + 1) : 0;  // more partitions than vertices: none
    const std::uint64_t lo = m * s.index / s.parts, hi = m * (s.index + 1) / s.parts;
    const Kronecker gen(s.spec);
    edges_.resize(hi - lo);
    for (std::uint64_t e = lo; e < hi; ++e) edges_[e - lo] = gen.edge(e);
    halves_.clear();
    halves_.reserve(std::size_t(2 * m / s.parts + 1024));
    return edges_.size();
  }

  // 2. The exchange takes the share and sends every partition the halves of
  //    its vertices (self-loops left out: they do nothing to shortest paths
  //    and are not counted for TEPS); each arrives here as (local index,
  //    other end, weight bits) triples.
  std::vector<Edge> take_edges() { return std::move(edges_); }
  void add_halves(const std::vector<std::uint32_t>& triples) {
    if (triples.size() % kHalfWords != 0) throw std::length_error("a batch of half-edges ends in the middle of one");
    const std::uint64_t n = setup_.spec.vertices();
    for (std::size_t i = 0; i < triples.size(); i += kHalfWords) {
      const std::uint32_t local = triples[i], v = triples[i + 1];
      if (local >= n_local_ || v >= n) throw std::out_of_range("a half-edge for a vertex that does not exist here");
      halves_.push_back({local, v, std::bit_cast<float>(triples[i + 2])});
    }
  }

  // 3. The CSR from the halves, each vertex's light arcs (w < delta) first.
  std::uint64_t build_csr() {
    // Room for the largest partition's local indices: (n - 1) / parts + 1.
    slot_bits_ = std::uint32_t(std::bit_width((setup_.spec.vertices() - 1) / setup_.parts));
    offsets_.assign(std::size_t(n_local_) + 1, 0);
    for (const Half& h : halves_) ++offsets_[h.local + 1];
    for (std::uint32_t v = 0; v < n_local_; ++v) offsets_[v + 1] += offsets_[v];
    arcs_.resize(halves_.size());
    std::vector<std::uint64_t> fill(offsets_.begin(), offsets_.end() - 1);
    for (const Half& h : halves_) arcs_[fill[h.local]++] = Arc{target(h.v), h.w};
    std::vector<Half>().swap(halves_);
    // Light arcs first, so a phase walks a contiguous range (a partition,
    // not a sort: the order within each class does not matter).
    light_end_.resize(n_local_);
    for (std::uint32_t v = 0; v < n_local_; ++v) {
      auto b = arcs_.begin() + std::ptrdiff_t(offsets_[v]), e = arcs_.begin() + std::ptrdiff_t(offsets_[v + 1]);
      light_end_[v] =
          std::uint64_t(std::partition(b, e, [this](const Arc& a) { return a.w < setup_.delta; }) - arcs_.begin());
    }
    // A slot per possible local index of each of the other partitions.
    n_remote_ = setup_.parts > 1 ? (setup_.parts - 1) << slot_bits_ : 0;
    touched_.assign(setup_.parts, {});
    built_ = true;
    return arcs_.size();
  }

  std::uint64_t degree(std::uint32_t global) const {
    const std::uint32_t v = global / setup_.parts;
    return offsets_[v + 1] - offsets_[v];
  }
  const Setup& setup() const { return setup_; }

  // ---- a run ---------------------------------------------------------------
  // Forget any previous run; the root's owner puts it in bucket 0.
  void start(std::uint32_t root, std::uint64_t message_cost = kMessageCost) {
    message_cost_ = message_cost;
    key_.assign(std::size_t(n_local_) + n_remote_, kInf);
    parent_.assign(n_local_, kNone);
    relaxed_at_.assign(n_local_, -1.0f);
    sent_parent_.assign(n_remote_, 0);
    in_settled_.assign(n_local_, 0);
    settled_.clear();
    heavy_keep_ = heavy_next_ = 0;
    buckets_.clear();
    scan_from_ = 0;
    active_ = kNoBucket;
    for (Inbox& in : inbox_) in = {};
    for (auto& q : sub_) q.clear();
    sent_min_ = kInf;
    waiter_ = nullptr;
    stats_ = {};
    round_work_.clear();
    clock_ = 0;
    if (root % setup_.parts == setup_.index) improve(root / setup_.parts, 0.0f, root);
  }

  // ---- a round's work (kernel.hpp drives it) ---------------------------------
  // g is the lowest bucket that any partition reported live after the last
  // round (kNoBucket: none).
  //
  // The heavy phase, first in a round: the heavy arcs of every vertex whose
  // light arcs were relaxed at its current distance, in a bucket below g
  // (no light work is left below g anywhere, so that distance is final
  // unless another heavy arc lowers it).
  // After `budget` relaxations it stops and returns false; the next call
  // goes on where it stopped (kernel.hpp yields between calls, so that the
  // thread sends what it has queued and applies the other partitions'
  // pieces). True once done.
  bool heavy(std::uint32_t g, std::uint64_t budget = ~std::uint64_t(0)) {
    const std::uint64_t stop = budget > ~stats_.relaxations ? ~std::uint64_t(0) : stats_.relaxations + budget;
    std::size_t keep = heavy_keep_, i = heavy_next_;
    for (; i < settled_.size(); ++i) {
      if (stats_.relaxations >= stop) {
        heavy_keep_ = keep;
        heavy_next_ = i;
        return false;
      }
      const std::uint32_t v = settled_[i];
      const float d = key_[v];
      if (bucket_of(d) >= g || relaxed_at_[v] != d) {  // not final yet: wait
        settled_[keep++] = v;
        continue;
      }
      in_settled_[v] = 0;
      const std::uint32_t gv = global(v);
      for (std::uint64_t a = light_end_[v]; a < offsets_[v + 1]; ++a) relax_arc(d, gv, arcs_[a]);
    }
    settled_.resize(keep);
    heavy_keep_ = heavy_next_ = 0;
    return true;
  }

  // The light phase: the light arcs of buckets g .. g + window - 1, in
  // order, each until it stays empty here. Within a bucket the vertices go
  // in order of distance, by sub-buckets of delta / kSub (a vertex relaxed
  // before a lower distance reaches it relaxes its light arcs again).
  // Improvements of our own vertices are applied at once (and processed in
  // this same call when they fall in the window); relaxations of other
  // partitions' vertices are combined per target (minimum distance) until
  // take_updates(). After `budget` relaxations it stops, leaving the rest
  // of its bucket in the sub-buckets (active_), and returns false; the next
  // call goes on from there (kernel.hpp sends the chunk's updates between
  // calls), or puts it back in its bucket if that is no longer in the window.
  // True once the window is empty here.
  bool light(std::uint32_t g, std::uint32_t window, std::uint64_t budget = ~std::uint64_t(0)) {
    const std::uint64_t before = stats_.relaxations;
    const std::uint64_t stop = budget > ~before ? ~std::uint64_t(0) : before + budget;
    const std::uint64_t end = std::uint64_t(g) + window;  // buckets_ may grow meanwhile
    if (active_ != kNoBucket && (active_ < g || active_ >= end)) park();
    bool done = true;
    for (std::uint64_t b = g; b < end && b < buckets_.size(); ++b) {
      if (active_ != b) {
        if (buckets_[b].empty()) continue;
        if (active_ != kNoBucket) park();  // a bucket below the half-done one was refilled
        active_ = std::uint32_t(b);
      }
      for (std::uint32_t v : buckets_[b])
        if (live(v, active_)) sub_[sub_of(key_[v])].push_back(v);
      buckets_[b].clear();
      for (bool again = true; again && done;) {
        for (auto& q : sub_) {
          while (!q.empty() && done) {
            const std::uint32_t v = q.back();
            q.pop_back();
            const float d = key_[v];
            if (bucket_of(d) != b || relaxed_at_[v] == d) continue;  // stale or done at this distance
            relaxed_at_[v] = d;
            if (!in_settled_[v]) {
              in_settled_[v] = 1;
              settled_.push_back(v);
            }
            const std::uint32_t gv = global(v);
            for (std::uint64_t a = offsets_[v]; a < light_end_[v]; ++a) relax_arc(d, gv, arcs_[a]);
            done = stats_.relaxations < stop;
          }
          if (!done) break;
        }
        again = std::any_of(sub_.begin(), sub_.end(), [](const auto& q) { return !q.empty(); });
      }
      if (!done) break;  // out of budget: the rest waits in sub_, active_ stays
      active_ = kNoBucket;
    }
    stats_.light_relaxations += stats_.relaxations - before;
    return done;
  }
  // Whether the window has light work here (dropping the stale entries it
  // walks over).
  bool window_live(std::uint32_t g, std::uint32_t window) {
    if (active_ != kNoBucket && std::any_of(sub_.begin(), sub_.end(), [](const auto& q) { return !q.empty(); }))
      return true;
    const std::uint64_t end = std::uint64_t(g) + window;
    for (std::uint64_t b = g; b < end && b < buckets_.size(); ++b) {
      auto& q = buckets_[b];
      while (!q.empty()) {
        if (live(q.back(), std::uint32_t(b))) return true;
        q.pop_back();
      }
    }
    return false;
  }

  // The relaxations of other partitions' vertices queued since the last
  // call, one batch per destination (empty for ourselves); the lowest
  // distance sent counts toward this round's report.
  std::vector<Batch> take_updates() {
    std::vector<Batch> out(setup_.parts);
    for (std::uint32_t p = 0; p < setup_.parts; ++p) {
      auto& b = out[p];
      b.reserve(kUpdateWords * touched_[p].size());
      for (std::uint32_t slot : touched_[p]) {
        if (!(sent_parent_[slot] & kQueued)) continue;  // listed again by a later improvement
        sent_parent_[slot] &= ~kQueued;
        const float d = key_[n_local_ + slot];
        sent_min_ = std::min(sent_min_, d);
        push_update(b, local_of_slot(slot), d, sent_parent_[slot]);
      }
      stats_.updates_sent += b.size() / kUpdateWords;
      touched_[p].clear();
    }
    return out;
  }

  // This partition's report for the round it is ending: the lowest bucket
  // it may have filled (its own lowest live bucket, or the lowest bucket of
  // a distance it sent during the round) and whether vertices await their
  // heavy phase. The next round's sends count from zero.
  Reports end_round() {
    Reports r;
    r.add(std::min(lowest_live_bucket(), sent_min_ == kInf ? kNoBucket : bucket_of(sent_min_)), !settled_.empty());
    sent_min_ = kInf;
    return r;
  }

  // ---- the exchange ----------------------------------------------------------
  // A piece from another partition, sent in its round `round`: a chunk of
  // its light phase, or (last) the round's last piece, with its report and
  // the number of pieces it sent us in that round. The updates are applied
  // at once, whichever round we are in: taking minima commutes. A partition
  // waiting for round r's last pieces may already relax round r+1's work,
  // and send its chunks, and the partition it sends them to may then do the
  // same with round r+2's: pieces of three rounds can be in flight, hence
  // kInboxes (> 3) inboxes, by round.
  void receive(std::uint32_t round, bool last, std::uint32_t pieces, Reports report, std::uint64_t stamp,
               const Batch& batch) {
    if (waiter_) clock_ = std::max(clock_, stamp + message_cost_);  // we were idle: our next work waited for this
    clock_ += batch.size() / kUpdateWords;
    apply_updates(batch);
    Inbox& in = inbox_[round % kInboxes];
    ++in.received;
    if (last) {
      ++in.senders;
      in.expected += pieces;
      in.reports.add(report.low, report.settled);
      in.stamp = std::max(in.stamp, stamp);
    }
    if (waiter_ && (!batch.empty() || complete(in))) gossamer::detail::make_ready(std::exchange(waiter_, nullptr));
  }
  // The round fiber: true, with every other partition's report of `round`
  // in `r` (and its inbox emptied for round + kInboxes), once all of that
  // round's pieces are in; otherwise false.
  bool take_reports(std::uint32_t round, Reports& r) {
    Inbox& in = inbox_[round % kInboxes];
    if (!complete(in)) return false;
    if (in.senders) clock_ = std::max(clock_, in.stamp + message_cost_);  // the round's end waits for the last of them
    r = in.reports;
    in = {};
    return true;
  }
  // The round fiber, about to suspend: the next non-empty piece, or the one
  // that completes a round, wakes it.
  void wait_here() { waiter_ = gossamer::detail::current_fiber(); }
  bool waiting() const { return waiter_ != nullptr; }

  // A batch of updates from another partition.
  void apply_updates(const Batch& batch) {
    if (batch.size() % kUpdateWords != 0) throw std::length_error("a batch of updates ends in the middle of one");
    for (std::size_t i = 0; i < batch.size(); i += kUpdateWords) {
      const std::uint32_t v = batch[i];
      if (v >= n_local_) throw std::out_of_range("update for a vertex this partition does not own");
      const float d = std::bit_cast<float>(batch[i + 1]);
      if (d < key_[v]) improve(v, d, batch[i + 2]);
    }
  }

  void count_batches(std::uint64_t n) { stats_.batches_sent += n; }
  // The work of round r here: its step and the batches of round r it
  // applied, in CPU seconds and in relaxations.
  void add_round_work(std::uint32_t r, double cpu_s, std::uint64_t relaxations) {
    if (r >= round_work_.size()) round_work_.resize(std::size_t(r) + 1);
    round_work_[r].cpu_s += cpu_s;
    round_work_[r].relaxations += relaxations;
    clock_ += relaxations;
  }
  std::uint64_t clock() const { return clock_; }
  const std::vector<RoundWork>& round_work() const { return round_work_; }
  std::uint64_t relaxations() const { return stats_.relaxations; }

  Summary summary() const {
    Summary s = stats_;
    s.path = clock_;
    for (std::uint32_t v = 0; v < n_local_; ++v)
      if (key_[v] != kInf) {
        ++s.reached;
        s.half_edges += offsets_[v + 1] - offsets_[v];
      }
    return s;
  }
  std::vector<float> distances() const { return {key_.begin(), key_.begin() + n_local_}; }
  const std::vector<std::uint32_t>& parents() const { return parent_; }

  // Travels only when host 0 entrusts a new, empty partition to another
  // host's trustee: a partition is built where it lives, from the seed, and
  // its graph never crosses the network.
  template <class Ar>
  void save(Ar& ar) const {
    if (built_) throw std::logic_error("a built Partition does not travel; build it on its trustee");
    ar(built_);
  }
  template <class Ar>
  void load(Ar& ar) {
    ar(built_);
    if (built_) throw std::logic_error("a built Partition does not travel");
  }

 private:
  std::uint32_t bucket_of(float d) const { return std::uint32_t(d / setup_.delta); }
  // The light phase leaves bucket active_ half done: its vertices go back
  // to its bucket.
  void park() {
    auto& q = buckets_[active_];
    for (auto& sq : sub_) {
      q.insert(q.end(), sq.begin(), sq.end());
      sq.clear();
    }
    scan_from_ = std::min(scan_from_, active_);
    active_ = kNoBucket;
  }
  // d's sub-bucket within its bucket, for the light phase's order.
  std::uint32_t sub_of(float d) const {
    const float f = d / setup_.delta;
    return std::min(kSub - 1, std::uint32_t((f - float(std::uint32_t(f))) * float(kSub)));
  }
  std::uint32_t global(std::uint32_t local) const { return local * setup_.parts + setup_.index; }

  // An arc's other end, global vertex v, as the CSR stores it: our local
  // index, or n_local_ + slot, where slot = (the owner's rank among the
  // other partitions) << slot_bits_ | (v's local index at its owner): a
  // shift finds the owner again.
  std::uint32_t target(std::uint32_t v) const {
    const std::uint32_t owner = v % setup_.parts, local = v / setup_.parts;
    if (owner == setup_.index) return local;
    return n_local_ + ((owner < setup_.index ? owner : owner - 1) << slot_bits_ | local);
  }
  std::uint32_t owner_of_slot(std::uint32_t slot) const {
    const std::uint32_t rank = slot >> slot_bits_;
    return rank < setup_.index ? rank : rank + 1;
  }
  std::uint32_t local_of_slot(std::uint32_t slot) const { return slot & ((std::uint32_t(1) << slot_bits_) - 1); }

  // key_[v] drops to d through parent p: (re)file v under d's bucket; the
  // old entry goes stale.
  void improve(std::uint32_t v, float d, std::uint32_t p) {
    key_[v] = d;
    parent_[v] = p;
    const std::uint32_t b = bucket_of(d);
    if (b == active_) {  // the light phase is in b: in its order
      sub_[sub_of(d)].push_back(v);
      return;
    }
    if (b >= buckets_.size()) buckets_.resize(std::size_t(b) + 1);
    buckets_[b].push_back(v);
    scan_from_ = std::min(scan_from_, b);
  }

  void relax_arc(float d, std::uint32_t from, const Arc& a) {
    ++stats_.relaxations;
    const float nd = d + a.w;
    if (!(nd < key_[a.t])) return;  // most relaxations: one load, one well-predicted branch
    if (a.t < n_local_) {
      improve(a.t, nd, from);
      return;
    }
    // Another partition's vertex. Its owner already has a distance no
    // greater than any we sent it, so only a lower one is worth sending.
    // Listed at every improvement (the packing skips the repeats), so that
    // no load of sent_parent_, a likely cache miss, stalls the loop.
    const std::uint32_t slot = a.t - n_local_;
    touched_[owner_of_slot(slot)].push_back(slot);
    key_[a.t] = nd;
    sent_parent_[slot] = from | kQueued;
  }

  bool live(std::uint32_t v, std::uint32_t b) const {
    return bucket_of(key_[v]) == b && relaxed_at_[v] != key_[v];
  }

  // The lowest bucket with a live entry, dropping the stale entries it
  // walks over (each entry is dropped once; live ones stop the walk). No
  // bucket below scan_from_ has been filled since the last walk.
  std::uint32_t lowest_live_bucket() {
    for (std::uint32_t b = scan_from_; b < buckets_.size(); ++b) {
      auto& q = buckets_[b];
      while (!q.empty()) {
        if (live(q.back(), b)) return scan_from_ = b;
        q.pop_back();
      }
    }
    scan_from_ = std::uint32_t(buckets_.size());
    return kNoBucket;
  }

  // One round's batches to this partition: complete when every other
  // partition's first piece has come, and then every piece it announced.
  struct Inbox {
    std::uint32_t senders = 0;
    std::uint64_t expected = 0, received = 0;
    Reports reports;
    std::uint64_t stamp = 0;  // the latest sender's chain among the last pieces
  };
  bool complete(const Inbox& in) const { return in.senders + 1 == setup_.parts && in.received == in.expected; }

  struct Half {
    std::uint32_t local, v;
    float w;
  };

  Setup setup_{};
  bool built_ = false;
  std::vector<Edge> edges_;                // construction only: this partition's share of the edge list
  std::vector<Half> halves_;               // construction only: the halves of our vertices, as they arrive
  std::uint32_t n_local_ = 0;
  std::vector<std::uint64_t> offsets_;     // CSR over local vertices
  std::vector<Arc> arcs_;                  // (target, weight), light ones first per vertex
  std::vector<std::uint64_t> light_end_;   // end of each vertex's light arcs

  // Distances: of our vertices by local index, then, by slot, the lowest
  // distance sent to or queued for each vertex of the other partitions.
  std::vector<float> key_;
  std::vector<std::uint32_t> parent_;      // global parent in the shortest-path tree; kNone: unreached
  std::vector<float> relaxed_at_;          // distance at which the light arcs were last relaxed
  std::vector<std::uint32_t> settled_;     // vertices of the current bucket, for its heavy phase
  std::vector<std::uint8_t> in_settled_;
  std::size_t heavy_keep_ = 0, heavy_next_ = 0;  // a heavy phase cut short: where it goes on
  std::vector<std::vector<std::uint32_t>> buckets_;
  std::uint32_t scan_from_ = 0;            // no live entry below this bucket
  static constexpr std::uint32_t kInboxes = 4;
  Inbox inbox_[kInboxes];
  gossamer::detail::Fiber* waiter_ = nullptr;
  float sent_min_ = kInf;                  // lowest distance sent in the current round
  static constexpr std::uint32_t kSub = 32;  // scale 18, 1 partition: light relaxations 7.0 M with 1, 3.5 M with 32
  std::uint32_t active_ = kNoBucket;       // the bucket the light phase is in, if any
  std::array<std::vector<std::uint32_t>, kSub> sub_;  // its vertices, by sub-bucket

  // Per vertex of another partition (by slot): the (global) vertex its
  // distance in key_ came through, with kQueued set while it is queued.
  static constexpr std::uint32_t kQueued = std::uint32_t(1) << 31;
  std::uint32_t n_remote_ = 0;
  std::uint32_t slot_bits_ = 0;  // a slot's local index bits
  std::vector<std::uint32_t> sent_parent_;
  std::vector<std::vector<std::uint32_t>> touched_;        // per destination: slots queued this round
  Summary stats_{};
  std::vector<RoundWork> round_work_;  // by round
  std::uint64_t clock_ = 0;            // the run's critical path to here (Summary::path)
  std::uint64_t message_cost_ = kMessageCost;
};

// A Latch<Partition> is what host 0 entrusts. cereal finds this by
// argument-dependent lookup (Partition's namespace is associated with
// Latch<Partition>). Only an unbuilt partition ever travels.
template <class Ar>
void serialize(Ar& ar, gossamer::Latch<Partition>& latch) {
  ar(*latch.lock());
}

}  // namespace sssp
