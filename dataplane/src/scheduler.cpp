#include "scheduler.hpp"

#include <algorithm>
#include <numeric>

namespace gossamer::dataplane {

std::vector<std::uint32_t> assign_active_connections(const std::vector<SenderLoad>& senders,
                                                     std::uint32_t max_active, std::uint32_t rotation,
                                                     const std::vector<std::uint32_t>* granted) {
  const std::size_t n = senders.size();
  std::vector<std::uint32_t> out(n, 0);
  if (n == 0 || max_active == 0) return out;
  std::uint64_t total_u = 0;
  std::uint32_t functioning = 0, functioning_share = 0;
  for (const auto& s : senders)
    if (s.known && s.utilization > 0) total_u += s.utilization, ++functioning;
  auto is_functioning = [&](std::size_t i) { return senders[i].known && senders[i].utilization > 0; };

  // Formula 3.1: the share of each functioning sender. Each has one
  // connection at least; the newcomers get the average of the functioning
  // ones' (floored) shares, the dormant ones keep one.
  std::vector<double> share(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_functioning(i)) continue;
    share[i] = double(max_active) * double(senders[i].utilization) / double(total_u);
    functioning_share += std::max<std::uint32_t>(1, std::uint32_t(share[i]));
  }
  const std::uint32_t newcomer =
      functioning ? std::max<std::uint32_t>(1, functioning_share / functioning)
                  : std::max<std::uint32_t>(1, max_active / std::uint32_t(n));
  for (std::size_t i = 0; i < n; ++i) {
    const SenderLoad& s = senders[i];
    out[i] = !s.known ? newcomer : 1;
    out[i] = std::min(out[i], s.connections);
  }

  auto sum = [&] { return std::accumulate(out.begin(), out.end(), std::uint64_t(0)); };
  // Over the limit: take from the largest first, down to one each.
  while (sum() > max_active) {
    std::size_t big = n;
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] > 1 && (big == n || out[i] > out[big])) big = i;
    if (big == n) break;
    --out[big];
  }
  // Still over: more senders than max_active. `max_active` of them keep one,
  // in turns from `rotation`.
  if (sum() > max_active) {
    std::uint32_t kept = 0;
    for (std::size_t k = 0; k < n; ++k) {
      std::size_t i = (rotation + k) % n;
      if (out[i] == 0) continue;
      if (kept < max_active) ++kept;
      else out[i] = 0;
    }
    return out;
  }
  // The rest goes to functioning senders one connection at a time, within
  // their connection counts, each to the largest claim: a sender's claim on
  // its k-th connection is share - (k - 1) (so the whole parts of the shares
  // first, then the largest remainders: formula 3.1 rounded), plus
  // kIncumbency if it holds k now; ties to the larger utilization.
  auto claim = [&](std::size_t i) {
    const std::uint32_t k = out[i] + 1;
    return share[i] - double(k - 1) + (granted && i < granted->size() && (*granted)[i] >= k ? kIncumbency : 0.0);
  };
  for (std::uint64_t left = max_active - sum(); left > 0; --left) {
    std::size_t best = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (!is_functioning(i) || out[i] >= senders[i].connections) continue;
      if (best == n || claim(i) > claim(best) ||
          (claim(i) == claim(best) && senders[i].utilization > senders[best].utilization))
        best = i;
    }
    if (best == n) break;
    ++out[best];
  }
  return out;
}

bool next_activation_phase(const std::vector<std::uint32_t>& granted, const std::vector<std::uint32_t>& goal,
                           std::vector<std::uint32_t>* next) {
  next->resize(goal.size());
  for (std::size_t i = 0; i < goal.size(); ++i) (*next)[i] = i < granted.size() ? std::min(granted[i], goal[i]) : 0;
  if (*next == goal) return true;      // only revocations
  if (*next != granted) return false;  // revocations first
  *next = goal;
  return true;
}

void SmoothedUtilization::add(std::uint64_t raw, std::uint32_t window) {
  if (raw == 0 && n_ == 0) return;  // dormant, and still
  n_ = std::min(n_ + 1, std::max<std::uint32_t>(window, 1));
  mean_ += (double(raw) - mean_) / double(n_);
  value_ = std::uint64_t(mean_ * double(kScale) + 0.5);
  if (value_ == 0) mean_ = 0, n_ = 0;  // below half a unit: dormant, the next start is new
}

namespace {

// Algorithm 1 with size classes (scheduler.hpp), from scratch.
std::vector<std::uint32_t> place_threads(const std::vector<ThreadLoad>& threads,
                                         const std::vector<std::uint32_t>& active) {
  std::vector<std::uint32_t> out(threads.size(), 0);
  if (active.empty() || threads.empty()) return out;
  std::vector<std::size_t> order(threads.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (threads[a].median_bytes != threads[b].median_bytes) return threads[a].median_bytes < threads[b].median_bytes;
    return threads[a].requests < threads[b].requests;
  });
  std::uint64_t total = 0;
  for (const auto& t : threads) total += t.bytes;
  if (total == 0) {
    // Nothing measured yet (new threads): spread them evenly.
    for (std::size_t k = 0; k < order.size(); ++k) out[order[k]] = active[k % active.size()];
    return out;
  }

  // Size classes: a thread whose median request is kClassRatio times the
  // previous one's starts a class. Each class gets connections of its own
  // while there are enough (the rest share the last), and the spare ones go
  // by bytes; so one 8 KiB thread never rides with 32-byte ones, even when
  // these carry more bytes in all.
  struct Class {
    std::size_t begin, end;  // into `order`
    std::uint64_t bytes = 0;
    std::size_t conns = 1;
    double share = 0;
  };
  std::vector<Class> classes;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::uint64_t m = threads[order[k]].median_bytes;
    const std::uint64_t prev = k ? threads[order[k - 1]].median_bytes : 0;
    if (k == 0 || (classes.size() < active.size() && m >= kClassRatio * std::max<std::uint64_t>(prev, 1)))
      classes.push_back({k, k});
    classes.back().end = k + 1;
    classes.back().bytes += threads[order[k]].bytes;
  }
  std::size_t spare = active.size() - classes.size();
  for (auto& c : classes) {
    c.share = double(spare) * double(c.bytes) / double(total);
    c.conns += std::size_t(c.share);
    c.share -= double(std::size_t(c.share));
  }
  std::size_t given = 0;
  for (const auto& c : classes) given += c.conns;
  std::vector<std::size_t> by_rest(classes.size());
  std::iota(by_rest.begin(), by_rest.end(), 0);
  std::stable_sort(by_rest.begin(), by_rest.end(),
                   [&](std::size_t a, std::size_t b) { return classes[a].share > classes[b].share; });
  for (std::size_t i = 0; given < active.size(); i = (i + 1) % by_rest.size()) ++classes[by_rest[i]].conns, ++given;

  // Within a class, Algorithm 1 over its connections: each takes threads up
  // to its quota of the class's bytes; a thread that would overfill a
  // connection already carrying others opens the next.
  std::size_t first = 0;
  for (const auto& c : classes) {
    const std::uint64_t quota = std::max<std::uint64_t>(1, c.bytes / c.conns);
    std::size_t q = 0;
    std::uint64_t load = 0;
    for (std::size_t k = c.begin; k < c.end; ++k) {
      const std::size_t i = order[k];
      if (load > 0 && load + threads[i].bytes > quota && q + 1 < c.conns) ++q, load = 0;
      out[i] = active[first + q];
      load += threads[i].bytes;
      if (load >= quota && q + 1 < c.conns) ++q, load = 0;
    }
    first += c.conns;
  }
  return out;
}

struct PlacementCost {
  std::size_t mixed = 0;      // connections carrying requests kClassRatio times apart in median size
  std::uint64_t busiest = 0;  // bytes on the busiest connection
};

PlacementCost cost_of(const std::vector<ThreadLoad>& threads, const std::vector<std::uint32_t>& at) {
  struct Conn {
    std::uint64_t bytes = 0;
    std::uint32_t small = UINT32_MAX, large = 0;
  };
  std::vector<std::pair<std::uint32_t, Conn>> conns;  // few: a linear search is enough
  for (std::size_t i = 0; i < threads.size(); ++i) {
    auto it = std::find_if(conns.begin(), conns.end(), [&](const auto& c) { return c.first == at[i]; });
    if (it == conns.end()) it = conns.insert(conns.end(), {at[i], Conn{}});
    it->second.bytes += threads[i].bytes;
    it->second.small = std::min(it->second.small, threads[i].median_bytes);
    it->second.large = std::max(it->second.large, threads[i].median_bytes);
  }
  PlacementCost c;
  for (const auto& [id, k] : conns) {
    c.busiest = std::max(c.busiest, k.bytes);
    if (std::uint64_t(k.large) >= kClassRatio * std::max<std::uint64_t>(k.small, 1)) ++c.mixed;
  }
  return c;
}

}  // namespace

std::vector<std::uint32_t> assign_threads(const std::vector<ThreadLoad>& threads,
                                          const std::vector<std::uint32_t>& active,
                                          const std::vector<std::uint32_t>* current) {
  std::vector<std::uint32_t> fresh = place_threads(threads, active);
  if (!current || current->size() != threads.size() || active.empty()) return fresh;
  for (std::uint32_t c : *current)
    if (std::find(active.begin(), active.end(), c) == active.end()) return fresh;
  const PlacementCost now = cost_of(threads, *current), next = cost_of(threads, fresh);
  if (now.mixed > next.mixed) return fresh;
  if (double(now.busiest) > double(next.busiest) * (1 + kPlacementSlack)) return fresh;
  return *current;
}

void RunningMedian::add(std::uint32_t v) {
  values_[next_] = v;
  next_ = (next_ + 1) % kWindow;
  if (n_ < kWindow) ++n_;
}

std::uint32_t RunningMedian::median() const {
  if (n_ == 0) return 0;
  std::uint32_t tmp[kWindow];
  std::copy(values_, values_ + n_, tmp);  // the first n_ slots are the filled ones until it wraps
  std::nth_element(tmp, tmp + n_ / 2, tmp + n_);
  return tmp[n_ / 2];
}

}  // namespace gossamer::dataplane
