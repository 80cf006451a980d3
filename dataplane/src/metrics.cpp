// The dataplane's side of the metrics contract (gossamer/abi/metrics.hpp):
// every kMetricsPeriodMs it copies its own counters and every attached
// application's thread counters into `<socket>.metrics`, which gossamerd
// reads at each scrape.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "dataplane.hpp"

namespace gossamer::dataplane {

namespace {

std::uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

}  // namespace

void fill_conn(abi::ConnCounters& o, const Connection& c) {
  const ConnectionStats& s = c.stats();
  o.frames_sent = s.frames_sent;
  o.frames_received = s.frames_received;
  o.acks_sent = s.acks_sent;
  o.records_sent = s.records_sent;
  o.records_received = s.records_received;
  o.requests_sent = s.requests_sent;
  o.responses_sent = s.responses_sent;
  o.inbound_active = c.inbound_active();
  o.outbound_active = c.usable();
  o.renewals_declined = s.renewals_declined;
  o.requests_received = s.requests_received;
  o.responses_received = s.responses_received;
  o.retransmits = s.retransmits;
  o.timeouts = s.timeouts;
  o.fast_retransmits = s.fast_retransmits;
  o.duplicates = s.duplicates;
  o.out_of_order = s.out_of_order;
  o.stale_boot = s.stale_boot;
  o.wrong_incarnation = s.wrong_incarnation;
  o.resets = s.resets;
  o.credit_stalls = s.credit_stalls;
  o.renewals_requested = s.renewals_requested;
  o.renewals_granted = s.renewals_granted;
  o.credits = c.credits_left();
  o.established = c.peer_boot() != 0;
  o.fragments_sent = s.fragments_sent;
  o.fragments_received = s.fragments_received;
  o.slots_reassembled = s.slots_reassembled;
  o.frag_bad_offset = s.frag_bad_offset;
  o.frag_oversize = s.frag_oversize;
  o.frag_mismatch = s.frag_mismatch;
  o.frag_interrupted = s.frag_interrupted;
}

namespace {

// The application writes these words while we read them: whole-word loads,
// nothing more (the values are only numbers to us, whatever they are).
void copy_thread(abi::ThreadCounters& out, const abi::ThreadCounters* in) {
  const auto* src = reinterpret_cast<const std::uint64_t*>(in);
  auto* dst = reinterpret_cast<std::uint64_t*>(&out);
  for (std::size_t i = 0; i < abi::kThreadCounterFields; ++i) dst[i] = __atomic_load_n(src + i, __ATOMIC_RELAXED);
}

}  // namespace

void Dataplane::open_metrics() {
  metrics_path_ = socket_path_ + ".metrics";
  if (!abi::metrics_layout(hosts_, conns_per_host_, &metrics_layout_))
    throw std::runtime_error("metrics layout: counts out of range");
  // Built under a temporary name and renamed: a reader never sees a file
  // without its header.
  std::string tmp = metrics_path_ + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  if (::ftruncate(fd, off_t(metrics_layout_.bytes)) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error("cannot size " + tmp + ": " + std::strerror(e));
  }
  void* p = ::mmap(nullptr, metrics_layout_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map " + tmp + ": " + std::strerror(errno));
  metrics_ = static_cast<std::uint8_t*>(p);
  abi::MetricsHeader h{};
  h.magic = abi::kMetricsMagic;
  h.version = abi::kMetricsVersion;
  h.bytes = metrics_layout_.bytes;
  h.tsc_hz = tsc_hz_;
  h.boot = boot_;
  h.host_index = self_;
  h.host_count = hosts_;
  h.conns_per_host = conns_per_host_;
  h.cores = ncores_;
  static_assert(std::size_t(wire::Drop::kCount) <= abi::kMetricsDropReasons);
  h.drop_reasons = std::uint32_t(wire::Drop::kCount);
  std::memcpy(metrics_, &h, sizeof h);
  for (std::size_t d = 0; d < std::size_t(wire::Drop::kCount); ++d)
    std::snprintf(reinterpret_cast<char*>(metrics_ + abi::kMetricsDropNamesOffset + d * abi::kMetricsNameBytes),
                  abi::kMetricsNameBytes, "%s", d == 0 ? "" : wire::drop_name(wire::Drop(d)));
  write_metrics();
  if (::rename(tmp.c_str(), metrics_path_.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + ": " + std::strerror(errno));
}

void Dataplane::close_metrics() {
  if (!metrics_) return;
  ::unlink(metrics_path_.c_str());  // gone: gossamerd reports the dataplane down
  ::munmap(metrics_, metrics_layout_.bytes);
  metrics_ = nullptr;
}

void Dataplane::write_metrics() {
  if (!metrics_) return;
  Stats total;
  std::vector<Stats> per_core;
  std::vector<abi::ConnCounters> counted;
  collect(&total, &per_core, &counted);  // before the sequence lock: it may wait for a core
  auto* hdr = reinterpret_cast<abi::MetricsHeader*>(metrics_);
  // Sequence lock: seq odd, a release fence so that no store below becomes
  // visible before it, the sample, then seq even (release: after all of
  // it). Twice per sample, not per request.
  std::atomic_ref<std::uint64_t> seq(hdr->seq);
  const std::uint64_t s0 = seq.load(std::memory_order_relaxed);
  seq.store(s0 + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);

  auto* host = reinterpret_cast<abi::HostCounters*>(metrics_ + abi::kMetricsHostOffset);
  host->rx_frames = total.rx_frames;
  host->tx_frames = total.tx_frames;
  host->tx_failed = total.tx_failed;
  host->records_no_app = total.records_no_app;
  host->records_rejected = total.records_rejected;
  host->apps_attached = total.apps_attached;
  host->apps_refused = total.apps_refused;
  host->apps_detached = total.apps_detached;
  host->apps_lost = total.apps_lost;
  host->injected_loss = total.injected_loss;
  host->injected_duplicates = total.injected_duplicates;
  host->injected_reorders = total.injected_reorders;
  host->apps = apps_.size();
  host->thread_moves = total.thread_moves;
  host->max_active_qps = cfg_.connections.max_active_qps;
  for (std::size_t d = 0; d < total.drops.size(); ++d) host->drops[d] = total.drops[d];
  auto* core = reinterpret_cast<abi::CoreCounters*>(metrics_ + abi::kMetricsCoreOffset);
  for (std::size_t k = 0; k < per_core.size() && k < abi::kMetricsCores; ++k) {
    core[k].busy_cycles = per_core[k].busy_cycles;
    core[k].idle_cycles = per_core[k].idle_cycles;
  }

  auto* conns = reinterpret_cast<abi::ConnCounters*>(metrics_ + metrics_layout_.conns);
  std::vector<std::uint64_t> placed(conns_per_host_);
  for (std::uint32_t p = 0; p < hosts_; ++p) {
    // Threads per connection to this peer: one pass over the threads, not
    // one per connection (this runs on polling core 0).
    std::fill(placed.begin(), placed.end(), 0);
    if (p != self_)
      for (const auto& a : apps_)
        for (std::uint32_t i = 0; i < a->local; ++i)
          if (const std::uint8_t c = a->flow(p, i).get_conn(); c < conns_per_host_) ++placed[c];
    for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
      abi::ConnCounters& o = conns[std::size_t(p) * conns_per_host_ + c];
      if (p == self_) {
        o = abi::ConnCounters{};
        continue;
      }
      o = counted[std::size_t(p) * conns_per_host_ + c];
      o.threads_assigned = placed[c];
    }
  }

  auto* entries = reinterpret_cast<abi::AppEntry*>(metrics_ + metrics_layout_.apps);
  auto* rows = reinterpret_cast<abi::ThreadCounters*>(metrics_ + metrics_layout_.threads);
  std::uint32_t shown = 0, hidden = 0, row = 0;
  for (const auto& a : apps_) {
    if (shown == abi::kMetricsApps || row + a->local > abi::kMetricsThreads) {
      ++hidden;
      continue;
    }
    abi::AppEntry& e = entries[shown++];
    e = abi::AppEntry{};
    e.pid = a->peer_pid;
    e.first_thread = a->first;
    e.local_threads = a->local;
    e.total_threads = a->total;
    e.first_row = row;
    e.run_key = a->key;
    std::snprintf(e.name, sizeof e.name, "%s", a->name.c_str());
    for (std::uint32_t t = 0; t < a->local; ++t) copy_thread(rows[row + t], a->counters(t));
    row += a->local;
  }
  hdr->apps = shown;
  hdr->apps_hidden = hidden;
  hdr->sample_ns = monotonic_ns();
  seq.store(s0 + 2, std::memory_order_release);
}

void Dataplane::write_stats() {
  Stats t;
  std::vector<Stats> per_core;
  std::vector<abi::ConnCounters> conns;
  collect(&t, &per_core, &conns);
  std::string tmp = socket_path_ + ".stats.tmp";
  {
    std::ofstream o(tmp);
    o << "rx_frames " << t.rx_frames << "\ntx_frames " << t.tx_frames << "\ntx_failed "
      << t.tx_failed << "\nrecords_no_app " << t.records_no_app << "\nrecords_rejected "
      << t.records_rejected << "\napps_attached " << t.apps_attached << "\napps_refused "
      << t.apps_refused << "\napps_detached " << t.apps_detached << "\napps_lost " << t.apps_lost
      << "\napps " << apps_.size() << "\ninjected_loss " << t.injected_loss << "\ninjected_duplicates "
      << t.injected_duplicates << "\ninjected_reorders " << t.injected_reorders << "\nbusy_cycles "
      << t.busy_cycles << "\nidle_cycles " << t.idle_cycles << "\ncores " << ncores_ << "\nsteer_dropped "
      << t.steer_dropped << "\n";
    for (std::size_t d = 1; d < t.drops.size(); ++d)
      o << "dropped{reason=\"" << wire::drop_name(wire::Drop(d)) << "\"} " << t.drops[d] << "\n";
    for (std::size_t k = 0; k < per_core.size(); ++k) {
      const Stats& c = per_core[k];
      const std::string l = "{core=\"" + std::to_string(k) + "\"} ";
      o << "core_busy_cycles" << l << c.busy_cycles << "\ncore_idle_cycles" << l << c.idle_cycles
        << "\ncore_rx_frames" << l << c.rx_frames << "\ncore_frames_processed" << l << c.frames_processed
        << "\ncore_doorbells" << l << c.doorbells << "\ncore_steered" << l << c.steered << "\ncore_handoffs" << l
        << c.handoffs << "\n";
    }
    for (std::uint32_t h = 0; h < hosts_; ++h) {
      if (h == self_) continue;
      for (std::uint32_t c = 0; c < conns_per_host_; ++c) {
        const abi::ConnCounters& s = conns[std::size_t(h) * conns_per_host_ + c];
        std::string l = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\"} ";
        o << "frames_sent" << l << s.frames_sent << "\nframes_received" << l << s.frames_received
          << "\nrecords_sent" << l << s.records_sent << "\nrequests_sent" << l << s.requests_sent
          << "\nresponses_sent" << l << s.responses_sent << "\nrecords_received" << l << s.records_received
          << "\nretransmits" << l << s.retransmits << "\ntimeouts" << l << s.timeouts << "\nfast_retransmits"
          << l << s.fast_retransmits << "\nduplicates" << l << s.duplicates << "\nout_of_order" << l
          << s.out_of_order << "\ncredit_stalls" << l << s.credit_stalls << "\nrenewals_requested" << l
          << s.renewals_requested << "\nrenewals_granted" << l << s.renewals_granted << "\ncredits" << l
          << s.credits << "\nresets" << l << s.resets << "\nwrong_incarnation" << l
          << s.wrong_incarnation << "\nfragments_sent" << l << s.fragments_sent << "\nfragments_received" << l
          << s.fragments_received << "\nslots_reassembled" << l << s.slots_reassembled << "\ninbound_active" << l
          << s.inbound_active << "\noutbound_active" << l << s.outbound_active << "\nrenewals_declined" << l
          << s.renewals_declined << "\ncore" << l << conn_owner(c) << "\n";
        std::string r = "{peer=\"" + std::to_string(h) + "\",conn=\"" + std::to_string(c) + "\",reason=\"";
        o << "fragments_dropped" << r << "bad_offset\"} " << s.frag_bad_offset << "\nfragments_dropped" << r
          << "oversize\"} " << s.frag_oversize << "\nfragments_dropped" << r << "mismatch\"} " << s.frag_mismatch
          << "\nfragments_dropped" << r << "interrupted\"} " << s.frag_interrupted << "\n";
      }
    }
    // The thread scheduler's placement: per application thread and peer.
    o << "thread_moves " << t.thread_moves << "\n";
    for (const auto& a : apps_)
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        for (std::uint32_t i = 0; i < a->local; ++i)
          o << "thread_conn{pid=\"" << a->pid << "\",thread=\"" << a->first + i << "\",peer=\"" << h << "\"} "
            << unsigned(a->flow(h, i).get_conn()) << "\n";
      }
  }
  std::rename(tmp.c_str(), (socket_path_ + ".stats").c_str());
}

}  // namespace gossamer::dataplane
