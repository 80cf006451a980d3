// Where the polling cores run (cpus.hpp).
#include "cpus.hpp"

#include <pthread.h>

#include <cstring>

namespace gossamer::dataplane {

namespace {
// "0-3,6" from a sorted list.
std::string ranges(const std::vector<std::uint32_t>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}
}  // namespace

CpuPlan::CpuPlan(std::vector<std::uint32_t> cpus, const std::vector<std::string>& eal_args)
    : cpus_(std::move(cpus)) {
  for (const std::string& a : eal_args) {
    const bool short_opt = a.rfind("--", 0) != 0 && (a.rfind("-l", 0) == 0 || a.rfind("-c", 0) == 0);
    if (short_opt || a.rfind("--lcores", 0) == 0) eal_chooses_ = true;
  }
  CPU_ZERO(&allowed_);
  if (::sched_getaffinity(0, sizeof allowed_, &allowed_) != 0) CPU_ZERO(&allowed_);
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed_)) allowed_list_.push_back(c);
}

std::string CpuPlan::check() const {
  for (std::uint32_t c : cpus_)
    if (c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed_))
      return "dataplane.cpus names CPU " + std::to_string(c) + ", which this process may not run on (its CPUs: " +
             (allowed_list_.empty() ? std::string("unknown") : ranges(allowed_list_)) + ")";
  return "";
}

std::vector<std::string> CpuPlan::extra_eal_args() const {
  if (eal_chooses_ || allowed_list_.empty()) return {};
  return {"--lcores=0@(" + ranges(allowed_list_) + ")"};
}

std::string CpuPlan::apply(std::uint32_t core) const {
  cpu_set_t set;
  if (cpus_.empty()) {
    if (eal_chooses_ || allowed_list_.empty()) return "";
    set = allowed_;
  } else {
    CPU_ZERO(&set);
    CPU_SET(cpus_[core % cpus_.size()], &set);
  }
  if (int r = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set); r != 0)
    return "cannot move polling core " + std::to_string(core) + " to " + describe(core) + ": " + std::strerror(r);
  return "";
}

std::string CpuPlan::describe(std::uint32_t core) const {
  if (!cpus_.empty()) return "CPU " + std::to_string(cpus_[core % cpus_.size()]);
  if (eal_chooses_) return "the CPUs of dataplane.eal_args";
  return "CPUs " + ranges(allowed_list_);
}

}  // namespace gossamer::dataplane
