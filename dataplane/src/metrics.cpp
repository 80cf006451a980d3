// The dataplane's side of the metrics contract (gossamer/abi/metrics.hpp):
// every kMetricsPeriodMs it copies its own counters and every attached
// application's thread counters into `<socket>.metrics`, which gossamerd
// reads at each scrape.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "dataplane.hpp"
#include "clock.hpp"
#include "shm_access.hpp"
#include "stats_file.hpp"

namespace gossamer::dataplane {


// The rows whose source is kSet are set by hand below: a new one must be
// set here too.
template <class S, std::size_t N>
constexpr std::size_t set_rows(const abi::Counter<S> (&table)[N]) {
  return std::size_t(std::count_if(table, table + N, [](const abi::Counter<S>& c) {
    return c.source == abi::CounterSource::kSet;
  }));
}
static_assert(set_rows(abi::kHostCounters) == 2, "write_metrics sets apps and max_active_qps, and no other");
static_assert(set_rows(abi::kConnCounters) == 5,
              "fill_conn sets credits, inbound_active, outbound_active and established, write_metrics "
              "threads_assigned, and no other");

// The rows of GOSSAMER_CONN_COUNTERS: those the connection counts, then
// the gauges of its state (threads_assigned: write_metrics).
void fill_conn(abi::ConnCounters& o, const Connection& c) {
  const ConnectionStats& s = c.stats();
#define GOSSAMER_COPY(field, source, ...) GOSSAMER_IF_COPIED(source, o.field = s.field;)
  GOSSAMER_CONN_COUNTERS(GOSSAMER_COPY)
#undef GOSSAMER_COPY
  o.credits = c.credits_left();
  o.inbound_active = c.inbound_active();
  o.outbound_active = c.usable();
  o.established = c.peer_boot() != 0;
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
  static_assert(MultiPort::kMaxLinks <= abi::kMetricsPorts);
  h.ports = std::uint32_t(port_->links());
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
  std::vector<Port::DeviceErrors> device(std::min<std::size_t>(port_->links(), abi::kMetricsPorts));
  for (std::size_t i = 0; i < device.size(); ++i) device[i] = port_->link(i).device_errors();  // may be a system call
  auto* hdr = reinterpret_cast<abi::MetricsHeader*>(metrics_);
  // Sequence lock: seq odd, a release fence so that no store below becomes
  // visible before it, the sample, then seq even (release: after all of
  // it). Twice per sample, not per request.
  std::atomic_ref<std::uint64_t> seq(hdr->seq);
  const std::uint64_t s0 = seq.load(std::memory_order_relaxed);
  seq.store(s0 + 1, std::memory_order_relaxed);
  fence(std::memory_order_release);

  // The rows of GOSSAMER_HOST_COUNTERS and GOSSAMER_CORE_COUNTERS: the
  // cores' counters, then what only core 0 knows.
  auto* host = reinterpret_cast<abi::HostCounters*>(metrics_ + abi::kMetricsHostOffset);
#define GOSSAMER_COPY(field, source, ...) GOSSAMER_IF_COPIED(source, host->field = total.field;)
  GOSSAMER_HOST_COUNTERS(GOSSAMER_COPY)
#undef GOSSAMER_COPY
  host->apps = apps_.size();
  host->max_active_qps = cfg_.connections.max_active_qps;
  for (std::size_t d = 0; d < total.drops.size(); ++d) host->drops[d] = total.drops[d];
  auto* core = reinterpret_cast<abi::CoreCounters*>(metrics_ + abi::kMetricsCoreOffset);
  for (std::size_t k = 0; k < per_core.size() && k < abi::kMetricsCores; ++k) {
#define GOSSAMER_COPY(field, ...) core[k].field = per_core[k].field;
    GOSSAMER_CORE_COUNTERS(GOSSAMER_COPY)
#undef GOSSAMER_COPY
  }

  // Frames per port, what its device dropped, and the hosts each one
  // reaches (dataplane.ports).
  auto* ports = reinterpret_cast<abi::PortCounters*>(metrics_ + abi::kMetricsPortOffset);
  for (std::size_t i = 0; i < device.size(); ++i) {
    const MultiPort::Frames fr = port_->frames(i);
    ports[i].rx_frames = fr.rx;
    ports[i].tx_frames = fr.tx;
    const Port::DeviceErrors& e = device[i];
    ports[i].rx_missed = e.rx_missed;
    ports[i].rx_errors = e.rx_errors;
    ports[i].rx_no_buffer = e.rx_no_buffer;
    ports[i].tx_errors = e.tx_errors;
    std::uint64_t peers = 0;
    for (std::uint32_t h = 0; h < hosts_; ++h)
      if (h != self_ && port_->link_of(h) == i) peers |= std::uint64_t(1) << h;
    ports[i].peers = peers;
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

// The metrics file's sample, just written, as text (stats_file.hpp), and
// the thread scheduler's placement per application thread and peer.
void Dataplane::write_stats() {
  write_metrics();
  if (!metrics_) return;
  std::vector<std::string_view> drops(std::size_t(wire::Drop::kCount));
  for (std::size_t d = 1; d < drops.size(); ++d) drops[d] = wire::drop_name(wire::Drop(d));
  std::vector<std::uint32_t> owner(conns_per_host_);
  for (std::uint32_t c = 0; c < conns_per_host_; ++c) owner[c] = conn_owner(c);
  StatsSample sample;
  sample.self = self_;
  sample.hosts = hosts_;
  sample.conns_per_host = conns_per_host_;
  sample.host = reinterpret_cast<const abi::HostCounters*>(metrics_ + abi::kMetricsHostOffset);
  sample.cores = {reinterpret_cast<const abi::CoreCounters*>(metrics_ + abi::kMetricsCoreOffset), ncores_};
  sample.conns = {reinterpret_cast<const abi::ConnCounters*>(metrics_ + metrics_layout_.conns),
                  std::size_t(hosts_) * conns_per_host_};
  sample.drop_names = drops;
  sample.conn_core = owner;
  sample.ports = {reinterpret_cast<const abi::PortCounters*>(metrics_ + abi::kMetricsPortOffset),
                  std::min<std::size_t>(port_->links(), abi::kMetricsPorts)};
  std::ostringstream o;
  {
    write_stats_text(o, sample);
    for (const auto& a : apps_)
      for (std::uint32_t h = 0; h < hosts_; ++h) {
        if (h == self_) continue;
        for (std::uint32_t i = 0; i < a->local; ++i)
          o << "thread_conn{pid=\"" << a->pid << "\",thread=\"" << a->first + i << "\",peer=\"" << h << "\"} "
            << unsigned(a->flow(h, i).get_conn()) << "\n";
      }
  }
  // Written and renamed by the file writer's thread (file_writer.hpp: a
  // rename on a disk file system can hold a core for milliseconds).
  files_.post(socket_path_ + ".stats", std::move(o).str());
}

}  // namespace gossamer::dataplane
